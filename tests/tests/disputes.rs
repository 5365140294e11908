//! Disputes on a real validator, keepers as separate processes, nobody typing anything after
//! the task is posted (PROTOCOL §8): a wrong result that every seat vouched for is overturned by
//! the client's watcher (a generated product, and digits classified on the client's own data,
//! recomputed by the program from proven slices of the inputs, and a row of a model too large to
//! read, refereed by a game over a claimed trace, and a SmolLM2 completion with a changed token,
//! by a game over that token's trace); a right result that lying seats rejected is overturned
//! by its provider; a lying claim is defended against by the keepers that vouched.

use std::path::{Path, PathBuf};

use anchor_lang::prelude::Pubkey;
use anyhow::Result;
use compute_market_cluster_tests::*;
use compute_market_keeper::chain::{Chain, ChainExt};
use compute_market_protocol::job::JobSpec;
use solana_signer::Signer;

/// Windows submit, join, commit, reveal; and the dispute window, slots.
const WINDOWS: &str = "40,15,15,15";
const DISPUTE_WINDOW: &str = "60";

/// Every verdict `task` shows until it is closed (status, majority, the slot it was first seen),
/// printed with the slots from the first verdict to the last and to the close.
fn verdicts_until_closed(
    v: &Validator,
    task: &anchor_lang::prelude::Pubkey,
    names: &[&str],
) -> Result<Vec<(String, u8, u64)>> {
    let chain = v.chain();
    let mut seen: Vec<(String, u8, u64)> = vec![];
    let closed = wait_for(600, "the task to be decided, disputed and closed", || {
        let slot = chain.slot()?;
        match chain.task(task)? {
            Some(t) => {
                let m = t.tally().majority;
                if t.status.is_decided() && seen.last().map(|x| x.1) != Some(m) {
                    seen.push((format!("{:?}", t.status), m, slot));
                }
                Ok(None)
            }
            None => Ok(Some(slot)),
        }
    })
    .map_err(|e| e.context(log_tails(v, names)))?;
    if let (Some(first), Some(last)) = (seen.first(), seen.last()) {
        println!(
            "verdicts {seen:?}: the last {} slots after the first, closed {} slots after it",
            last.2 - first.2,
            closed - first.2
        );
    }
    Ok(seen)
}

/// A provider that corrupts every tile, three seats that vote VALID without checking, the
/// client's keeper watching its own tasks and a cranker, each a process: `task` ends proven
/// wrong (verdict 4) and closed.
fn overturned_by_the_watcher(
    v: &Validator,
    client: &std::path::Path,
    provider: &std::path::Path,
    verifiers: &[std::path::PathBuf],
    task: &anchor_lang::prelude::Pubkey,
) -> Result<()> {
    let mut procs = vec![v.spawn_keeper(
        "provider",
        provider,
        &["--provider", "--corrupt-fraction", "1.0"],
    )?];
    for (i, w) in verifiers.iter().enumerate() {
        procs.push(v.spawn_keeper(&format!("v{i}"), w, &["--verifier", "--careless"])?);
    }
    procs.push(v.spawn_keeper("watch", client, &["--watch"])?);
    procs.push(v.spawn_keeper("crank", &v.admin, &["--crank"])?);
    let names = ["provider", "v0", "v1", "v2", "watch", "crank"];
    let seen = verdicts_until_closed(v, task, &names)?;
    let verdict = seen.last().map(|(s, m, _)| (s.clone(), *m));
    assert_eq!(
        verdict,
        Some(("Rejected".to_string(), 4)),
        "proven wrong (verdict 4)\n{}",
        log_tails(v, &names)
    );
    Ok(())
}

#[test]
fn a_wrong_result_every_seat_vouched_for_is_overturned_by_the_clients_watcher() -> Result<()> {
    let v = Validator::start()?;
    let (client, provider, verifiers) =
        small_market_with(&v, WINDOWS, &["--dispute-window", DISPUTE_WINDOW])?;
    let chain = v.chain();
    let before = wallet_balance(&v, &client)?;
    let task = post_matmul(&v, &client, 1)?;
    overturned_by_the_watcher(&v, &client, &provider, &verifiers, &task)?;
    let p = chain.node(&node_of(&provider))?.expect("provider node");
    assert_eq!(
        (p.times_slashed, p.earned, p.bonded, p.free),
        (1, 0, 0, 48 * REWARD),
        "the provider's whole bond slashed"
    );
    let mut vouched = 0;
    for (i, w) in verifiers.iter().enumerate() {
        let n = chain.node(&node_of(w))?.expect("verifier node");
        assert_eq!(n.bonded, 0);
        if n.verifications > 0 {
            vouched += 1;
            assert_eq!(
                (n.times_slashed, n.earned),
                (1, 0),
                "v{i} vouched for a wrong product: a false statement"
            );
            assert!(n.free < 50 * REWARD, "v{i} lost its bond");
        }
    }
    assert!(vouched >= 1);
    // refunded in full, plus the provider's client part and the award; the bond back
    let after = wallet_balance(&v, &client)?;
    assert!(
        after > before,
        "the client gained: before {before}, after {after}"
    );
    let log = std::fs::read_to_string(v.dir.path().join("watch.log"))?;
    assert!(log.contains("opened a dispute"), "the watcher disputed");
    assert!(
        chain.disputes(&task)?.is_empty(),
        "the dispute was paid and closed"
    );
    Ok(())
}

/// An honest provider, two verifiers that vote INVALID on everything (pointing at right
/// elements) holding every seat, and a cranker, each a process: `task` ends with the claims
/// refuted (verdict 5) and closed. Returns the processes (still running).
fn restored_by_the_provider(
    v: &Validator,
    provider: &Path,
    verifiers: &[PathBuf],
    task: &Pubkey,
) -> Result<Vec<Proc>> {
    let mut procs = vec![v.spawn_keeper("provider", provider, &["--provider"])?];
    for (i, w) in verifiers[..2].iter().enumerate() {
        procs.push(v.spawn_keeper(&format!("v{i}"), w, &["--verifier", "--lying"])?);
    }
    procs.push(v.spawn_keeper("crank", &v.admin, &["--crank"])?);
    let names = ["provider", "v0", "v1", "crank"];
    let seen: Vec<u8> = verdicts_until_closed(v, task, &names)?
        .iter()
        .map(|&(_, m, _)| m)
        .collect();
    assert_eq!(
        seen.last(),
        Some(&5),
        "claims refuted (verdict 5), after {seen:?}\n{}",
        log_tails(v, &names)
    );
    Ok(procs)
}

#[test]
fn a_right_result_that_lying_seats_rejected_is_overturned_by_its_provider() -> Result<()> {
    let v = Validator::start()?;
    let (client, provider, verifiers) =
        small_market_with(&v, WINDOWS, &["--dispute-window", DISPUTE_WINDOW])?;
    let chain = v.chain();
    let task = post_matmul(&v, &client, 1)?;
    let _procs = restored_by_the_provider(&v, &provider, &verifiers, &task)?;
    let p = chain.node(&node_of(&provider))?.expect("provider node");
    assert_eq!(
        (p.times_slashed, p.tasks_completed, p.bonded),
        (0, 1, 0),
        "the provider is paid"
    );
    assert!(p.earned > 0);
    for (i, w) in verifiers[..2].iter().enumerate() {
        let n = chain.node(&node_of(w))?.expect("verifier node");
        if n.verifications > 0 {
            assert_eq!(
                (n.times_slashed, n.earned, n.bonded),
                (1, 0, 0),
                "v{i}'s refuted vote cost its whole bond"
            );
        }
    }
    let log = std::fs::read_to_string(v.dir.path().join("provider.log"))?;
    assert!(log.contains("opened a dispute"), "the provider disputed");
    Ok(())
}

#[test]
fn a_wrong_digits_result_on_the_clients_data_is_overturned_by_the_clients_watcher() -> Result<()> {
    // an Mlp job on the client's own data (a version-2 manifest naming its slices): the
    // program recomputes the disputed word through the model from proven chunks of the inputs
    let v = Validator::start()?;
    let (client, provider, verifiers) =
        small_market_with(&v, WINDOWS, &["--dispute-window", "300"])?;
    let chain = v.chain();
    let (_store, store_url) = spawn_serve(&v, "client-store")?;
    let (task, _) = post_digits(&v, &client, &store_url, 1)?;
    overturned_by_the_watcher(&v, &client, &provider, &verifiers, &task)?;
    let p = chain.node(&node_of(&provider))?.expect("provider node");
    assert_eq!(
        (p.times_slashed, p.earned, p.bonded),
        (1, 0, 0),
        "the provider's bond slashed"
    );
    let log = std::fs::read_to_string(v.dir.path().join("watch.log"))?;
    assert!(log.contains("opened a dispute"), "the watcher disputed");
    assert!(
        log.contains("dispute_inputs") && log.contains("dispute_feed"),
        "the watcher proved the manifest and fed the inputs:\n{}",
        log_tails(&v, &["watch"])
    );
    let feeds = log.matches("step=\"dispute_feed\"").count();
    println!("the watcher fed {feeds} input chunks");
    assert!(chain.disputes(&task)?.is_empty(), "paid and closed");
    Ok(())
}

/// A market whose windows, in slots of 50 ms ([`Validator::start_fast`]), are as long in
/// time as the other tests' at 400 ms, with a dispute window a game fits (2 400 slots).
fn game_market(v: &Validator) -> Result<(PathBuf, PathBuf, Vec<PathBuf>)> {
    small_market_with(
        v,
        "320,120,120,120",
        &["--dispute-window", "2400", "--cooldown", "12000"],
    )
}

/// Posts an `Mlp` task of 12 rows through a 64-512-512-10 model (305 chunks of slices: no
/// feed fits the window, a game referees it), the client's data served by its own store
/// (kept running by the returned process).
fn post_wide(v: &Validator, client: &Path) -> Result<(Pubkey, impl Drop)> {
    let (store, store_url) = spawn_serve(v, "client-store")?;
    let model = compute_market_keeper::demo::wide_model(&[64, 512, 512, 10]);
    let x: Vec<i8> = (0..12 * 64).map(|i| ((i * 7 + 3) % 17) as i8).collect();
    let (model_path, batch_path) = (
        v.dir.path().join("wide.safetensors"),
        v.dir.path().join("wide-batch.safetensors"),
    );
    std::fs::write(
        &model_path,
        compute_market_keeper::compute::mlp::model_file(&model)?,
    )?;
    std::fs::write(
        &batch_path,
        compute_market_keeper::compute::mlp::batch_file(&x, 64)?,
    )?;
    let (task, _) = post_game(
        v,
        client,
        &[
            "--id",
            "1",
            "--model",
            model_path.to_str().unwrap(),
            "--batch",
            batch_path.to_str().unwrap(),
            "--store",
            &store_url,
        ],
    )?;
    Ok((task, store))
}

/// `keeper task post` as `client` with `args` and the tests' reward: the task posted, and its
/// job, which a game referees in the game market's window.
fn post_game(v: &Validator, client: &Path, args: &[&str]) -> Result<(Pubkey, JobSpec)> {
    let reward = REWARD.to_string();
    let mut all = vec!["task", "post", "--reward", &reward];
    all.extend_from_slice(args);
    let out = v.keeper(client, &all)?;
    let task: Pubkey = out["posted"]["task"]
        .as_str()
        .expect("task address")
        .parse()?;
    let job = JobSpec::decode(&v.chain().task(&task)?.unwrap().job)
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    assert_eq!(
        compute_market_protocol::dispute::method(&job, 2_400),
        Some(compute_market_protocol::dispute::Method::Game),
        "a game referees it: {job:?}"
    );
    Ok((task, job))
}

#[test]
fn a_wrong_row_of_a_model_too_large_to_read_is_overturned_by_a_claim_nobody_can_defend(
) -> Result<()> {
    // the client's watcher claims the row's trace; the provider and the seats check the claim
    // with their own traces and do not defend a right one; the claim stands after the
    // defence and the result is overturned (8 ticks a slot: 50 ms)
    let v = Validator::start_fast(8)?;
    let (client, provider, verifiers) = game_market(&v)?;
    let chain = v.chain();
    let (task, _store) = post_wide(&v, &client)?;
    overturned_by_the_watcher(&v, &client, &provider, &verifiers, &task)?;
    let log = std::fs::read_to_string(v.dir.path().join("watch.log"))?;
    for step in ["dispute_layout", "dispute_claim", "dispute_resolve"] {
        assert!(
            log.contains(&format!("step=\"{step}\"")),
            "the watcher sent {step}:\n{}",
            log_tails(&v, &["watch"])
        );
    }
    let provider_log = std::fs::read_to_string(v.dir.path().join("provider.log"))?;
    assert!(
        !provider_log.contains("defending"),
        "the provider's own trace agrees with the claim: it does not bond against it"
    );
    let p = chain.node(&node_of(&provider))?.expect("provider node");
    assert_eq!(
        (p.times_slashed, p.earned, p.bonded),
        (1, 0, 0),
        "the provider's bond slashed"
    );
    assert!(chain.disputes(&task)?.is_empty(), "paid and closed");
    Ok(())
}

#[test]
fn keepers_defend_a_right_row_against_a_lying_claim_and_win_the_game() -> Result<()> {
    // honest provider and seats as processes; a liar, driven here, claims a trace whose class
    // is wrong and splits with its lying roots: the keepers that vouched defend by themselves,
    // bisect to the lie's one wrong step, replay it, and take the liar's bond
    let v = Validator::start_fast(8)?;
    let (client, provider, verifiers) = game_market(&v)?;
    let (task, _store) = post_wide(&v, &client)?;
    // row 6's class
    defended_against_the_liar(&v, &provider, &verifiers, task, (1, 2 * 11 + 10))
}

/// Posts MiniLM embeddings of eight texts through the CLI (the texts refereed by their token
/// ids, PROTOCOL §8.7), the client's data served by its own store (kept running by the
/// returned process): the task, and its job, which a game referees.
fn post_sentences(v: &Validator, client: &Path) -> Result<(Pubkey, JobSpec, impl Drop)> {
    let (store, store_url) = spawn_serve(v, "client-store")?;
    let texts = v.dir.path().join("sentences.txt");
    std::fs::write(
        &texts,
        "A cat sat on the mat.\nNo way!!!\nThe invoice is due on 3 March.\nYes.\n\
         Rust makes systems programming safe.\nCall me at 555-0199.\nI love this song.\n\
         Where is the station?\n",
    )?;
    let model = compute_market_keeper::compute::encoder::minilm_path();
    let (task, job) = post_game(
        v,
        client,
        &[
            "--id",
            "2",
            "--model",
            model.to_str().unwrap(),
            "--texts",
            texts.to_str().unwrap(),
            "--store",
            &store_url,
        ],
    )?;
    Ok((task, job, store))
}

#[test]
fn keepers_defend_a_right_embedding_against_a_lying_claim_and_win_the_game() -> Result<()> {
    // the same for MiniLM embeddings: the keepers bisect the liar's trace of a text to the one
    // operation it got wrong
    let v = Validator::start_fast(8)?;
    let (client, provider, verifiers) = game_market(&v)?;
    let (task, job, _store) = post_sentences(&v, &client)?;
    // text 5's first word (two texts a tile, 192 words a text)
    let (rpt, words) = (job.rows_per_tile as u32, job.dims[2] / 2);
    defended_against_the_liar(
        &v,
        &provider,
        &verifiers,
        task,
        (5 / rpt, (5 % rpt) * words),
    )
}

#[test]
fn a_wrong_embedding_is_overturned_by_a_claim_nobody_can_defend() -> Result<()> {
    // MiniLM embeddings posted through the CLI, a provider that corrupts them, seats that vouch
    // blindly: the client's watcher claims the disputed text's trace, no keeper's own trace
    // disputes it, and it stands
    let v = Validator::start_fast(8)?;
    let (client, provider, verifiers) = game_market(&v)?;
    let (task, _, _store) = post_sentences(&v, &client)?;
    overturned_by_the_watcher(&v, &client, &provider, &verifiers, &task)?;
    let log = std::fs::read_to_string(v.dir.path().join("watch.log"))?;
    for step in ["dispute_layout", "dispute_claim", "dispute_resolve"] {
        assert!(
            log.contains(&format!("step=\"{step}\"")),
            "the watcher sent {step}:\n{}",
            log_tails(&v, &["watch"])
        );
    }
    assert!(v.chain().disputes(&task)?.is_empty(), "paid and closed");
    Ok(())
}

/// Runs the honest provider, seats and cranker as processes while a liar, driven here, claims
/// a wrong trace of (tile, element) `at` of `task`; ends when the task closes, the liar's bond
/// lost and every keeper having defended.
fn defended_against_the_liar(
    v: &Validator,
    provider: &Path,
    verifiers: &[PathBuf],
    task: Pubkey,
    at: (u32, u32),
) -> Result<()> {
    use compute_market_keeper::roles::liar::Liar;
    let chain = v.chain();
    let liar_wallet = v.wallet("liar", 100 * REWARD)?;
    let mut liar = Liar {
        kp: keypair(&liar_wallet)?,
        store: std::sync::Arc::new(
            compute_market_keeper::results::ResultStore::open(
                &v.dir.path().join("liar-store"),
                u64::MAX,
                None,
            )?
            .with_policy(compute_market_keeper::results::net::FetchPolicy::loopback()),
        ),
        task,
        at,
        lie: None,
    };
    let before = wallet_balance(v, &liar_wallet)?;
    let mut procs = vec![v.spawn_keeper("provider", provider, &["--provider"])?];
    for (i, w) in verifiers.iter().enumerate() {
        procs.push(v.spawn_keeper(&format!("v{i}"), w, &["--verifier"])?);
    }
    procs.push(v.spawn_keeper("crank", &v.admin, &["--crank"])?);
    let names = ["provider", "v0", "v1", "v2", "crank"];
    let mut bond = 0;
    wait_for(300, "the liar's claim defended and the task closed", || {
        let Some(t) = chain.task(&task)? else {
            return Ok(Some(()));
        };
        bond = t.verifier_bond.max(1);
        if let Err(e) = liar.step(&chain) {
            println!("the liar: {e:#}");
        }
        Ok(None)
    })
    .map_err(|e| e.context(log_tails(v, &names)))?;
    assert!(liar.lie.is_some(), "the liar claimed");
    assert_eq!(
        wallet_balance(v, &liar_wallet)?,
        before - bond,
        "the liar lost its bond\n{}",
        log_tails(v, &names)
    );
    let mut won = 0;
    for n in ["provider", "v0", "v1", "v2"] {
        let log = std::fs::read_to_string(v.dir.path().join(format!("{n}.log")))?;
        assert!(log.contains("defending"), "{n} defended");
        won += log.contains("step=\"game_settle\"") as u32;
    }
    assert!(won >= 1, "a defender replayed the lie's step to its end");
    drop(procs);
    Ok(())
}

/// A market for SmolLM2 completions (50 ms slots, a dispute window of 4 400 slots) and a
/// prompt posted through the CLI as task `id` (the decoder's and the prompt's slices named, the
/// inputs in a client store kept alive by the returned guard): the client's, the provider's
/// and the verifiers' keypairs, and the task.
#[allow(clippy::type_complexity)]
fn completion_market(
    v: &Validator,
    id: u64,
    prompt: &str,
    max_new: u32,
) -> Result<(PathBuf, PathBuf, Vec<PathBuf>, Pubkey, impl Drop)> {
    let (client, provider, verifiers) = small_market_with(
        v,
        "320,120,120,120",
        &["--dispute-window", "4400", "--cooldown", "24000"],
    )?;
    let (store, store_url) = spawn_serve(v, "client-store")?;
    let out = v.keeper(
        &client,
        &[
            "task",
            "post",
            "--id",
            &id.to_string(),
            "--store",
            &store_url,
            "--reward",
            "1000000",
            "--generate",
            "--prompt",
            prompt,
            "--max-new-tokens",
            &max_new.to_string(),
        ],
    )?;
    let task: Pubkey = out["posted"]["task"]
        .as_str()
        .expect("task address")
        .parse()?;
    Ok((client, provider, verifiers, task, store))
}

#[test]
fn a_changed_token_of_a_completion_is_overturned_by_a_claim_nobody_can_defend() -> Result<()> {
    // SmolLM2 completing a prompt posted through the CLI (the decoder's and the prompt's slices
    // named); a provider that changes a token of each completion, seats that vouch blindly; the
    // client's watcher claims the token's teacher-forced trace, held a block at a time, no
    // keeper's own trace disputes it, and the completion is proven wrong (50 ms slots)
    let v = Validator::start_fast(8)?;
    let (client, provider, verifiers, task, _store) =
        completion_market(&v, 3, "What is the capital of Japan?", 8)?;
    let job = JobSpec::decode(&v.chain().task(&task)?.unwrap().job)
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    assert_eq!(
        compute_market_protocol::dispute::method(&job, 4_400),
        Some(compute_market_protocol::dispute::Method::Game),
        "a game referees it: {job:?}"
    );
    overturned_by_the_watcher(&v, &client, &provider, &verifiers, &task)?;
    let log = std::fs::read_to_string(v.dir.path().join("watch.log"))?;
    for step in ["dispute_layout", "dispute_claim", "dispute_resolve"] {
        assert!(
            log.contains(&format!("step=\"{step}\"")),
            "the watcher sent {step}:\n{}",
            log_tails(&v, &["watch"])
        );
    }
    assert!(v.chain().disputes(&task)?.is_empty(), "paid and closed");
    Ok(())
}

#[test]
fn a_right_completion_that_lying_seats_rejected_is_restored_by_its_providers_lanes() -> Result<()> {
    // SmolLM2 completing a prompt posted through the CLI; the two seats vote INVALID without
    // checking, each pointing at a word of the right completion: a kind-2 dispute argues one
    // element, each a game, so the provider argues one vote a lane, side by side (its wallet
    // and a key derived from it), claims the words' traces, nobody can defend against them,
    // and the completion is restored (verdict 5); the lane is swept back after (50 ms slots)
    let v = Validator::start_fast(8)?;
    let (_client, provider, verifiers, task, _store) =
        completion_market(&v, 4, "Name a colour of the sky.", 6)?;
    let chain = v.chain();
    let procs = restored_by_the_provider(&v, &provider, &verifiers, &task)?;
    let p = chain.node(&node_of(&provider))?.expect("provider node");
    assert_eq!((p.times_slashed, p.bonded), (0, 0), "the provider is paid");
    let log = std::fs::read_to_string(v.dir.path().join("provider.log"))?;
    for step in ["dispute_claim", "dispute_resolve", "funded a dispute lane"] {
        assert!(
            log.contains(step),
            "the provider's lanes: {step}\n{}",
            log_tails(&v, &["provider"])
        );
    }
    // the task closed: the lane is swept back on the provider's next passes, to nothing
    let lane =
        compute_market_keeper::roles::challenger::lane_keypair(&keypair(&provider)?, &task, 1);
    let mint = chain
        .decoded::<compute_market::state::Config>(&compute_market::pda::config())?
        .expect("config")
        .stake_mint;
    let ata = anchor_spl::associated_token::get_associated_token_address(&lane.pubkey(), &mint);
    wait_for(120, "the lane swept back", || {
        let empty = chain.lamports(&lane.pubkey())? == Some(0) && chain.account(&ata)?.is_none();
        Ok(empty.then_some(()))
    })
    .map_err(|e| e.context(log_tails(&v, &["provider"])))?;
    drop(procs);
    Ok(())
}

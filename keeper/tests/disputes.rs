//! Keepers play disputes with no human step (PROTOCOL §8), on the embedded cluster: a client's
//! watcher overturns wrong results that every seat vouched for; a provider overturns the
//! INVALID majority of lying seats; a verifier outvoted by careless seats disputes with the
//! pointer it kept, also after a restart. Each ends with the verdict the data gives and the
//! money moved accordingly.

use std::sync::Arc;

use anchor_lang::prelude::Pubkey;
use compute_market::{pda, state::TaskStatus};
use compute_market_keeper::{
    chain::{Chain, ChainExt},
    compute::cpu::CpuBackend,
    demo::{DemoConfig, Scenario},
    roles::{
        watcher::{Watched, Watcher},
        NodeCtx,
    },
};
use compute_market_protocol::commit::{
    VERDICT_CLAIMS_REFUTED, VERDICT_PROVEN_WRONG, VOTE_INVALID, VOTE_VALID,
};
use solana_keypair::Keypair;
use solana_signer::Signer;

/// Slots a decided verdict stays open to disputes in these markets.
const WINDOW: u32 = 40;

fn scenario(dir: &std::path::Path, corrupt: f64) -> Scenario {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let cfg = DemoConfig {
        providers: 2,
        verifiers: 3,
        tasks: 4,
        corrupt_fraction: corrupt,
        dispute_window: WINDOW,
        ..Default::default()
    };
    let mut s = Scenario::new(&cfg, Arc::new(CpuBackend), dir).expect("scenario");
    for v in &mut s.verifiers {
        v.careless = false;
    }
    s
}

/// The tasks the cheating provider (the last) computed, and the others.
fn by_provider(s: &Scenario) -> (Vec<Pubkey>, Vec<Pubkey>) {
    let report = s.report().unwrap();
    let name = &s.providers.last().unwrap().ctx.name;
    s.tasks
        .iter()
        .enumerate()
        .map(|(i, (k, _, _))| (*k, report.tasks[i].provider == *name))
        .fold((vec![], vec![]), |(mut c, mut h), (k, cheated)| {
            if cheated {
                c.push(k)
            } else {
                h.push(k)
            }
            (c, h)
        })
}

/// The client watches its own tasks from its wallet (no node), as `keeper run --watch` does.
fn watch_own_tasks(s: &mut Scenario, dir: &std::path::Path) {
    let kp = Keypair::try_from(&s.client.to_bytes()[..]).unwrap();
    let ctx = NodeCtx {
        name: "client-watcher".into(),
        node: pda::node(&kp.pubkey()),
        kp,
        market: pda::market(1),
        backend: s.backend.clone(),
        store: s.store.clone(),
        parallel: 1,
        progress: None,
    };
    let db = Arc::new(compute_market_keeper::db::Db::open(&dir.join("watcher.redb")).unwrap());
    let me = s.client.pubkey();
    s.watchers
        .push(Watcher::new(ctx, db, Watched::Clients(vec![me])));
}

fn client_balance(s: &Scenario) -> u64 {
    let mint = compute_market_keeper::cli::config(s.chain.as_ref())
        .unwrap()
        .stake_mint;
    s.chain
        .token_balance(&anchor_spl::associated_token::get_associated_token_address(
            &s.client.pubkey(),
            &mint,
        ))
        .unwrap()
}

#[test]
fn seats_that_vouch_for_wrong_results_are_overturned_by_the_clients_watcher() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = scenario(dir.path(), 1.0);
    // every seat votes VALID without checking: the colluding majority of the issue
    for v in &mut s.verifiers {
        v.careless = true;
    }
    // the client watches its own tasks from its wallet (no node)
    watch_own_tasks(&mut s, dir.path());
    let before = client_balance(&s);
    let rewards: u64 = s.tasks.iter().map(|(_, _, r)| r).sum();
    s.run_to_end(3_000).expect("every task closes");
    let (cheated, honest) = by_provider(&s);
    assert!(
        !cheated.is_empty() && !honest.is_empty(),
        "both providers computed"
    );
    for k in &cheated {
        assert_eq!(
            s.verdicts[k],
            (TaskStatus::Rejected, VERDICT_PROVEN_WRONG),
            "a wrong result every seat vouched for is proven wrong"
        );
    }
    for k in &honest {
        assert_eq!(
            s.verdicts[k],
            (TaskStatus::Accepted, VOTE_VALID),
            "a right result stands"
        );
    }
    let cheat = s.chain.node(&s.providers[1].ctx.node).unwrap().unwrap();
    assert_eq!(
        cheat.times_slashed as usize,
        cheated.len(),
        "the cheat loses each bond"
    );
    assert_eq!(cheat.earned, 0);
    for v in &s.verifiers {
        let n = s.chain.node(&v.ctx.node).unwrap().unwrap();
        assert!(
            n.times_slashed >= 1,
            "{}: a false statement costs its bond",
            v.ctx.name
        );
        assert_eq!(n.bonded, 0);
    }
    // the client paid the honest tasks only, and was refunded the cheated ones in full, with
    // the provider's client part and the award on top
    let paid_honest: u64 = s
        .tasks
        .iter()
        .filter(|(k, _, _)| honest.contains(k))
        .map(|(_, _, r)| r)
        .sum();
    let after = client_balance(&s);
    assert!(
        after > before - paid_honest,
        "refunded and paid: before {before}, after {after}, honest rewards {paid_honest}, all {rewards}"
    );
    assert!(s.chain.tasks().unwrap().is_empty(), "every task closed");
}

#[test]
fn lying_seats_that_reject_right_results_are_overturned_by_the_provider() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = scenario(dir.path(), 0.0);
    // two of the three verifiers vote INVALID on everything, pointing at right elements
    s.verifiers[0].lying = true;
    s.verifiers[1].lying = true;
    s.run_to_end(3_000).expect("every task closes");
    let mut refuted = 0;
    for (k, _, _) in &s.tasks {
        let (status, majority) = s.verdicts[k];
        assert_eq!(
            status,
            TaskStatus::Accepted,
            "a right result ends Accepted: {majority}"
        );
        refuted += usize::from(majority == VERDICT_CLAIMS_REFUTED);
    }
    assert!(
        refuted >= 1,
        "some task was decided by the lying majority and overturned"
    );
    for p in &s.providers {
        let n = s.chain.node(&p.ctx.node).unwrap().unwrap();
        assert_eq!(
            (n.times_slashed, n.bonded),
            (0, 0),
            "{}: never slashed",
            p.ctx.name
        );
    }
    for v in &s.verifiers[..2] {
        let n = s.chain.node(&v.ctx.node).unwrap().unwrap();
        assert!(
            n.times_slashed >= 1,
            "{}: its refuted votes cost it",
            v.ctx.name
        );
    }
    let honest = s.chain.node(&s.verifiers[2].ctx.node).unwrap().unwrap();
    assert_eq!(honest.times_slashed, 0, "the honest minority is made whole");
    assert!(s.chain.tasks().unwrap().is_empty(), "every task closed");
}

#[test]
fn an_outvoted_verifier_disputes_with_the_pointer_it_kept_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = scenario(dir.path(), 1.0);
    s.verifiers[0].careless = true;
    s.verifiers[1].careless = true;
    // the honest verifier restarts after every slot: a new process on the same store
    let mut proven = 0;
    let mut guard = 0;
    while !s.done() {
        s.tick().unwrap();
        let v = &s.verifiers[2];
        let db = v.db.clone();
        let ctx = NodeCtx {
            name: v.ctx.name.clone(),
            kp: Keypair::try_from(&v.ctx.kp.to_bytes()[..]).unwrap(),
            node: v.ctx.node,
            market: v.ctx.market,
            backend: v.ctx.backend.clone(),
            store: v.ctx.store.clone(),
            parallel: 1,
            progress: None,
        };
        s.verifiers[2] = compute_market_keeper::roles::verifier::Verifier::new(ctx, db);
        guard += 1;
        assert!(guard < 3_000, "the market finishes");
    }
    let (cheated, _) = by_provider(&s);
    assert!(!cheated.is_empty());
    for k in &cheated {
        let (status, majority) = s.verdicts[k];
        assert_eq!(
            status,
            TaskStatus::Rejected,
            "every wrong result ends Rejected"
        );
        assert!(matches!(majority, VOTE_INVALID | VERDICT_PROVEN_WRONG));
        proven += usize::from(majority == VERDICT_PROVEN_WRONG);
    }
    assert!(
        proven >= 1,
        "some wrong result was Accepted by the careless pair and overturned"
    );
    let honest = s.chain.node(&s.verifiers[2].ctx.node).unwrap().unwrap();
    assert_eq!((honest.times_slashed, honest.bonded), (0, 0));
}

#[test]
fn keeper_task_dispute_refuses_a_right_result_and_overturns_a_wrong_one() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = scenario(dir.path(), 1.0);
    for v in &mut s.verifiers {
        v.careless = true;
    }
    let client = Keypair::try_from(&s.client.to_bytes()[..]).unwrap();
    let mut tried: std::collections::HashMap<Pubkey, Result<u8, String>> = Default::default();
    let mut guard = 0;
    while !s.done() {
        s.tick().unwrap();
        for (key, _, _) in s.tasks.clone() {
            let held = s
                .chain
                .task(&key)
                .unwrap()
                .is_some_and(|t| t.held && t.status == TaskStatus::Accepted);
            if held && !tried.contains_key(&key) {
                let r = compute_market_keeper::cli::task_dispute(
                    s.chain.as_ref(),
                    &client,
                    s.backend.as_ref(),
                    &s.store,
                    &key,
                    &[],
                );
                tried.insert(key, r.map(|r| r.majority).map_err(|e| format!("{e:#}")));
            }
        }
        guard += 1;
        assert!(guard < 3_000, "the market finishes");
    }
    let (cheated, honest) = by_provider(&s);
    for k in &cheated {
        assert_eq!(
            tried[k],
            Ok(VERDICT_PROVEN_WRONG),
            "the client's dispute of a wrong result"
        );
        assert_eq!(s.verdicts[k], (TaskStatus::Rejected, VERDICT_PROVEN_WRONG));
    }
    for k in &honest {
        let refused = tried[k].as_ref().unwrap_err();
        assert!(
            refused.contains("every tile checked recomputes equal"),
            "refused by name: {refused}"
        );
        assert_eq!(
            s.verdicts[k],
            (TaskStatus::Accepted, VOTE_VALID),
            "nothing bonded"
        );
    }
    assert!(!cheated.is_empty() && !honest.is_empty());
}

#[test]
fn a_client_overturns_a_wrong_digits_result_from_its_own_data_through_the_program() {
    // the digits model over the 450 held-out digits (an Mlp job on the client's data, its
    // manifest naming the slices), a provider that corrupts its rows, seats that vouch blindly
    let dir = tempfile::tempdir().unwrap();
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let cfg = DemoConfig {
        providers: 2,
        verifiers: 3,
        tasks: 1,
        digits: true,
        corrupt_fraction: 1.0,
        dispute_window: 200,
        ..Default::default()
    };
    let mut s = Scenario::new(&cfg, Arc::new(CpuBackend), dir.path()).expect("scenario");
    for v in &mut s.verifiers {
        v.careless = true;
    }
    // whichever provider claims the digits, it corrupts them
    for p in &mut s.providers {
        p.corrupt_fraction = 1.0;
    }
    let client = Keypair::try_from(&s.client.to_bytes()[..]).unwrap();
    let (key, _) = s.digits.clone().expect("the digits task");
    let mut report = None;
    let mut guard = 0;
    while !s.done() {
        s.tick().unwrap();
        let held = s
            .chain
            .task(&key)
            .unwrap()
            .is_some_and(|t| t.held && t.status == TaskStatus::Accepted);
        if held && report.is_none() {
            report = Some(
                compute_market_keeper::cli::task_dispute(
                    s.chain.as_ref(),
                    &client,
                    s.backend.as_ref(),
                    &s.store,
                    &key,
                    &[],
                )
                .unwrap_or_else(|e| panic!("the client's dispute: {e:#}")),
            );
        }
        guard += 1;
        assert!(guard < 3_000, "the market finishes");
    }
    let r = report.expect("the careless seats accepted the wrong result");
    println!("the client's dispute: {r:?}");
    assert_eq!(r.majority, VERDICT_PROVEN_WRONG, "{r:?}");
    assert_eq!(
        s.verdicts[&key],
        (TaskStatus::Rejected, VERDICT_PROVEN_WRONG)
    );
    let slashed: u32 = s
        .providers
        .iter()
        .map(|p| s.chain.node(&p.ctx.node).unwrap().unwrap().times_slashed as u32)
        .sum();
    assert!(slashed >= 1, "the digits' provider lost its bond");
    assert!(s.chain.tasks().unwrap().is_empty(), "every task closed");
}

/// The dispute window of the game tests: a game's turns of a minute fit it.
const GAME_WINDOW: u32 = 2_400;

fn wide_scenario(dir: &std::path::Path, corrupt: f64, careless: bool) -> Scenario {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let cfg = DemoConfig {
        providers: 2,
        verifiers: 3,
        tasks: 1,
        wide: true,
        corrupt_fraction: corrupt,
        dispute_window: GAME_WINDOW,
        ..Default::default()
    };
    let mut s = Scenario::new(&cfg, Arc::new(CpuBackend), dir).expect("scenario");
    for v in &mut s.verifiers {
        v.careless = careless;
    }
    for p in &mut s.providers {
        p.corrupt_fraction = corrupt;
    }
    s
}

#[test]
fn a_wrong_row_of_a_model_too_large_to_read_is_overturned_by_the_watchers_claim() {
    // a 64-512-512-10 model (305 chunks: no feed fits the window), a provider that corrupts
    // its rows, seats that vouch blindly; the client's watcher claims the row's trace, nobody
    // can defend against a right claim, and it stands
    let dir = tempfile::tempdir().unwrap();
    let mut s = wide_scenario(dir.path(), 1.0, true);
    let (key, _, _) = s.wide.clone().expect("the wide task");
    let job = s.tasks.iter().find(|(k, _, _)| *k == key).unwrap().1;
    assert_eq!(
        compute_market_protocol::dispute::method(&job, GAME_WINDOW),
        Some(compute_market_protocol::dispute::Method::Game),
        "{job:?}: {:?} transactions to feed",
        compute_market_protocol::dispute::element_transactions(&job)
    );
    watch_own_tasks(&mut s, dir.path());
    let mut claimed = false;
    let mut guard = 0;
    while !s.done() {
        s.tick().unwrap();
        claimed |= s
            .chain
            .disputes(&key)
            .unwrap()
            .iter()
            .any(|(_, d)| d.claimed == 1);
        guard += 1;
        assert!(guard < 6_000, "the market finishes");
    }
    assert!(claimed, "the watcher claimed the row's trace");
    assert_eq!(
        s.verdicts[&key],
        (TaskStatus::Rejected, VERDICT_PROVEN_WRONG),
        "the claim stood: the result is proven wrong"
    );
    assert!(s.chain.tasks().unwrap().is_empty(), "every task closed");
}

#[test]
fn keepers_defend_a_right_result_against_a_wrong_claim_and_win_the_game() {
    // honest provider and verifiers; a lying challenger claims a trace whose class is wrong
    // and splits with its lying roots: the keepers that vouched for the row defend on their
    // own, narrow the lie to its one wrong step, replay it, and win its bond
    let dir = tempfile::tempdir().unwrap();
    let mut s = wide_scenario(dir.path(), 0.0, false);
    let (key, _, _) = s.wide.clone().expect("the wide task");
    // row 6's class
    liar_loses(&mut s, key, (1, 2 * 11 + 10), 10_000_000);
}

#[test]
fn a_right_row_rejected_by_two_lying_seats_is_restored_by_the_providers_lanes() {
    // two of the three seats vote INVALID on the wide model's right rows without checking; a
    // kind-2 dispute claims one element, and each element is a game: the provider argues one
    // vote a lane, side by side, from its wallet and a key derived from it (PROTOCOL §8.10,
    // "Many opponents"); nobody can defend against a right claim, so both votes are refuted
    let dir = tempfile::tempdir().unwrap();
    let mut s = wide_scenario(dir.path(), 0.0, false);
    let (key, _, _) = s.wide.clone().expect("the wide task");
    s.verifiers[0].lying = true;
    s.verifiers[1].lying = true;
    let provider = s
        .providers
        .iter()
        .find(|p| {
            s.chain
                .task(&key)
                .unwrap()
                .is_some_and(|t| t.provider == p.ctx.node)
        })
        .map(|p| p.ctx.kp.insecure_clone());
    let (mut side_by_side, mut guard) = (0, 0);
    let mut lane = None;
    while !s.done() {
        s.tick().unwrap();
        let provider = provider.as_ref().map(|p| p.insecure_clone()).or_else(|| {
            let t = s.chain.task(&key).ok()??;
            s.providers
                .iter()
                .find(|p| p.ctx.node == t.provider)
                .map(|p| p.ctx.kp.insecure_clone())
        });
        if let Some(p) = provider {
            let l = compute_market_keeper::roles::challenger::lane_keypair(&p, &key, 1);
            let open = [p.pubkey(), l.pubkey()]
                .iter()
                .filter(|c| s.chain.account(&pda::dispute(&key, c)).unwrap().is_some())
                .count();
            side_by_side = side_by_side.max(open);
            lane = Some(l.pubkey());
        }
        guard += 1;
        assert!(guard < 6_000, "the market finishes");
    }
    assert_eq!(
        s.verdicts[&key],
        (TaskStatus::Accepted, VERDICT_CLAIMS_REFUTED),
        "both lying votes refuted"
    );
    assert_eq!(side_by_side, 2, "two disputes side by side");
    // the provider's next passes sweep its lane back
    for _ in 0..3 {
        s.tick().unwrap();
    }
    let lane = lane.expect("the provider's lane");
    assert_eq!(
        s.chain.lamports(&lane).unwrap(),
        Some(0),
        "the lane's rent and fees swept back"
    );
    let ata = s
        .chain
        .account(&anchor_spl::associated_token::get_associated_token_address(
            &lane,
            &s.chain
                .decoded::<compute_market::state::Config>(&pda::config())
                .unwrap()
                .unwrap()
                .stake_mint,
        ))
        .unwrap();
    assert!(ata.is_none(), "the lane's token account closed");
    for v in &s.verifiers[..2] {
        let n = s.chain.node(&v.ctx.node).unwrap().unwrap();
        assert!(
            n.times_slashed >= 1,
            "{}: its refuted vote cost it",
            v.ctx.name
        );
    }
    assert!(s.chain.tasks().unwrap().is_empty(), "every task closed");
}

/// The dispute window of the encoder game tests: a game over a MiniLM text fits it.
const ENCODER_WINDOW: u32 = 3_000;

#[test]
fn keepers_defend_a_right_embedding_against_a_wrong_claim_and_win_the_game() {
    // the MiniLM task over the held-out texts, honest keepers; a lying challenger claims a
    // trace of text 6 whose embedding's first word is flipped: the keepers that vouched for it
    // defend on their own, narrow the lie to its one wrong step (the embedding's first group,
    // replayed from the running sums on chain), and win its bond
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let dir = tempfile::tempdir().unwrap();
    let cfg = DemoConfig {
        providers: 2,
        verifiers: 3,
        tasks: 1,
        sentences: true,
        dispute_window: ENCODER_WINDOW,
        ..Default::default()
    };
    let mut s = Scenario::new(&cfg, Arc::new(CpuBackend), dir.path()).expect("scenario");
    for v in &mut s.verifiers {
        v.careless = false;
    }
    let (key, _) = s.sentences.clone().expect("the sentences task");
    let job = s.tasks.iter().find(|(k, _, _)| *k == key).unwrap().1;
    assert_eq!(
        compute_market_protocol::dispute::method(&job, ENCODER_WINDOW),
        Some(compute_market_protocol::dispute::Method::Game),
        "{job:?}"
    );
    // text 6's first word
    let (rpt, words) = (job.rows_per_tile as u32, job.dims[2] / 2);
    // the bond follows the task's reward, which follows MiniLM's work
    liar_loses(&mut s, key, (6 / rpt, (6 % rpt) * words), 1 << 50);
}

/// Runs the market while a liar holding `funds` claims a wrong trace of (tile, element) `at`
/// of task `key`: the honest keepers defend, the right verdict stands, the liar loses its bond
/// and every task closes.
fn liar_loses(s: &mut Scenario, key: Pubkey, at: (u32, u32), funds: u64) {
    use compute_market_keeper::roles::liar::Liar;
    let kp = s.chain.with(|c| {
        let kp = c.keypair("liar");
        c.airdrop(&kp.pubkey(), 100_000_000_000);
        kp
    });
    let funded =
        compute_market_keeper::deploy::fund(s.chain.as_ref(), &s.admin, &kp.pubkey(), funds)
            .unwrap();
    let wallet: Pubkey = funded.token_account.parse().unwrap();
    let mut liar = Liar {
        kp,
        store: s.store.clone(),
        task: key,
        at,
        lie: None,
    };
    let mut bond = 0;
    let mut guard = 0;
    while !s.done() {
        s.tick().unwrap();
        if bond == 0 {
            bond = s
                .chain
                .task(&key)
                .unwrap()
                .map_or(0, |t| t.verifier_bond.max(1));
        }
        liar.step(s.chain.as_ref())
            .unwrap_or_else(|e| panic!("the liar: {e:#}"));
        guard += 1;
        assert!(guard < 8_000, "the market finishes");
    }
    assert!(liar.lie.is_some(), "the liar claimed");
    assert_eq!(
        s.verdicts[&key],
        (TaskStatus::Accepted, VOTE_VALID),
        "the right result stands"
    );
    assert_eq!(
        s.chain.token_balance(&wallet).unwrap(),
        funds - bond,
        "the liar lost its bond"
    );
    assert!(s.chain.tasks().unwrap().is_empty(), "every task closed");
}

/// A window a game over the demo's SmolLM2 completions fits.
const GENERATE_WINDOW: u32 = 4_400;

#[test]
fn a_changed_token_of_a_completion_is_overturned_by_the_watchers_claim() {
    // SmolLM2 completing the demo's prompts; the provider changes a token in the middle of each
    // completion, the seats vouch blindly; the client's watcher finds the token, claims its
    // trace (the prompt and the committed tokens before it, one block at a time), nobody can
    // defend a right claim, and the completion is proven wrong
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let dir = tempfile::tempdir().unwrap();
    let cfg = DemoConfig {
        providers: 2,
        verifiers: 3,
        tasks: 1,
        generate: true,
        corrupt_fraction: 1.0,
        dispute_window: GENERATE_WINDOW,
        ..Default::default()
    };
    let mut s = Scenario::new(&cfg, Arc::new(CpuBackend), dir.path()).expect("scenario");
    for v in &mut s.verifiers {
        v.careless = true;
    }
    for p in &mut s.providers {
        p.corrupt_fraction = 1.0;
    }
    let key = s.generate.expect("the Generate task");
    let job = s.tasks.iter().find(|(k, _, _)| *k == key).unwrap().1;
    assert_eq!(
        compute_market_protocol::dispute::method(&job, GENERATE_WINDOW),
        Some(compute_market_protocol::dispute::Method::Game),
        "{job:?}"
    );
    watch_own_tasks(&mut s, dir.path());
    let mut claimed = false;
    let mut guard = 0;
    let start = std::time::Instant::now();
    while !s.done() {
        s.tick().unwrap();
        claimed |= s
            .chain
            .disputes(&key)
            .unwrap()
            .iter()
            .any(|(_, d)| d.claimed == 1);
        guard += 1;
        assert!(guard < 12_000, "the market finishes");
    }
    println!("played in {:?}", start.elapsed());
    assert!(claimed, "the watcher claimed the token's trace");
    assert_eq!(
        s.verdicts[&key],
        (TaskStatus::Rejected, VERDICT_PROVEN_WRONG),
        "the claim stood: the completion is proven wrong"
    );
    assert!(s.chain.tasks().unwrap().is_empty(), "every task closed");
}

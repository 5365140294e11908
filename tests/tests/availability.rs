//! Availability on a real validator, keepers as separate processes, nobody typing anything
//! after the task is posted (PROTOCOL §8.11): a provider that stops serving once its result is
//! Accepted is challenged by the client's watcher, and either publishes the tiles on chain (the
//! client reads them with `keeper task result`) or loses its bond and the client is refunded in
//! full; a result whose seats all said UNAVAILABLE is published by its provider, which keeps its
//! bond while those seats lose theirs.

use std::{
    path::PathBuf,
    sync::{
        atomic::{AtomicBool, Ordering::SeqCst},
        Arc,
    },
    time::Duration,
};

use anchor_lang::prelude::Pubkey;
use anyhow::Result;
use compute_market::state::{TaskStatus, AVAILABILITY_ANSWERED};
use compute_market_cluster_tests::*;
use compute_market_keeper::{chain::ChainExt, roles::availability};
use compute_market_protocol::{
    commit::{VERDICT_SERVED, VERDICT_UNSERVED, VOTE_VALID},
    job::JobSpec,
};

/// Windows submit, join, commit, reveal; and the dispute window, slots (room for 5 tiles of
/// 1 KiB a challenge).
const WINDOWS: &str = "40,15,15,15";
const DISPUTE_WINDOW: &str = "60";

/// A front that relays to the provider while `serving`, then answers 503 to everyone: a
/// provider that stops serving once its result is decided.
fn withholding_front(provider: u16, serving: Arc<AtomicBool>) -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    let port = l.local_addr()?.port();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            let serving = serving.clone();
            std::thread::spawn(move || {
                let Some((path, _)) = read_request(&mut s) else {
                    return;
                };
                if serving.load(SeqCst) {
                    relay(&mut s, provider, &path);
                } else {
                    use std::io::Write;
                    let _ = s.write_all(
                        b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                    );
                }
            });
        }
    });
    Ok(port)
}

/// A front that never answers a request for tiles: every verifier is stalled.
fn stalling_front(_provider: u16) -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    let port = l.local_addr()?.port();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(s) = s else { continue };
            std::thread::spawn(move || {
                let _held = s;
                std::thread::sleep(Duration::from_secs(600));
            });
        }
    });
    Ok(port)
}

/// The market, a `HashBatch` task behind a withholding front, the verifiers and a cranker
/// running until the verdict is held Accepted; then the front stops serving and the verifiers
/// are stopped (nobody else holds the result), and the client's watcher starts. Returns what
/// the test needs: the task, the provider's wallet and process, the client's wallet, the
/// processes left running, and the task's verifier bond.
struct Withheld {
    v: Validator,
    task: Pubkey,
    client: PathBuf,
    provider: PathBuf,
    provider_proc: Option<Proc>,
    procs: Vec<Proc>,
    bond: u64,
    client_before: u64,
}

fn withheld_after_the_verdict() -> Result<Withheld> {
    let v = Validator::start()?;
    let (client, provider, verifiers) =
        small_market_with(&v, WINDOWS, &["--dispute-window", DISPUTE_WINDOW])?;
    let client_before = wallet_balance(&v, &client)?;
    let serving = Arc::new(AtomicBool::new(true));
    let s = serving.clone();
    let (task, p) = hash_task_behind(&v, &client, &provider, move |port| {
        withholding_front(port, s)
    })?;
    let mut verifier_procs: Vec<Proc> = verifiers
        .iter()
        .enumerate()
        .map(|(i, w)| v.spawn_keeper(&format!("v{i}"), w, &["--verifier"]))
        .collect::<Result<_>>()?;
    let crank = v.spawn_keeper("crank", &v.admin, &["--crank"])?;
    let chain = v.chain();
    let t = wait_for(180, "the verdict held Accepted", || {
        Ok(chain
            .task(&task)?
            .filter(|t| t.held && t.status == TaskStatus::Accepted))
    })
    .map_err(|e| e.context(log_tails(&v, &["provider", "v0", "v1", "v2", "crank"])))?;
    assert_eq!(t.tally().majority, VOTE_VALID);
    // the provider stops serving, and the verifiers that kept what they checked go away
    serving.store(false, SeqCst);
    verifier_procs.clear();
    let watch = v.spawn_keeper("watch", &client, &["--watch"])?;
    Ok(Withheld {
        bond: t.verifier_bond,
        v,
        task,
        client,
        provider,
        provider_proc: Some(p),
        procs: vec![crank, watch],
        client_before,
    })
}

#[test]
fn a_provider_that_stops_serving_the_client_is_challenged_by_its_watcher_and_publishes(
) -> Result<()> {
    let w = withheld_after_the_verdict()?;
    let (v, task) = (&w.v, w.task);
    let chain = v.chain();
    let names = ["provider", "watch", "crank"];
    // the watcher challenges by itself; the provider's keeper publishes on chain
    let (acc, tiles) = wait_for(120, "a challenge answered on chain", || {
        Ok(availability::accounts(&chain, &task)?
            .into_iter()
            .find(|x| x.a.state == AVAILABILITY_ANSWERED)
            .map(|x| {
                let named = x.a.named().to_vec();
                (x, named)
            }))
    })
    .map_err(|e| e.context(log_tails(v, &names)))?;
    assert!(!tiles.is_empty());
    let watch_log = std::fs::read_to_string(v.dir.path().join("watch.log"))?;
    assert!(
        watch_log.contains("challenged its availability"),
        "the watcher challenged:\n{watch_log}"
    );
    // the client reads the tiles nobody serves from the chain, each proven against the root
    let list: Vec<String> = tiles.iter().map(|t| t.to_string()).collect();
    let out = v.dir.path().join("published.safetensors");
    let got = v.keeper(
        &w.client,
        &[
            "task",
            "result",
            &task.to_string(),
            "--tiles",
            &list.join(","),
            "--allow-private-urls",
            "--out",
            out.to_str().expect("UTF-8 path"),
        ],
    )?;
    assert!(
        got["from"].as_str().unwrap_or("").contains("chain"),
        "read from the chain: {got}"
    );
    let t = chain.task(&task)?.expect("task");
    let job = JobSpec::decode(&t.job).expect("job");
    let mine = compute_market_keeper::compute::cpu::CpuBackend;
    use compute_market_keeper::compute::Backend;
    let expected = mine.tiles(&job, &tiles)?;
    for (i, tile) in tiles.iter().enumerate() {
        let b = acc.a.tile_bytes(&acc.data, i).expect("tile bytes");
        assert_eq!(
            &b[..job.tile_len()],
            &expected[i][..],
            "tile {tile} as the job gives it"
        );
    }
    // the verdict stands: the provider is paid and keeps its bond; the client paid its reward
    // and the challenge's bond (to the treasury)
    wait_for(240, "the task closed", || {
        Ok(chain.task(&task)?.is_none().then_some(()))
    })
    .map_err(|e| e.context(log_tails(v, &names)))?;
    let p = chain.node(&node_of(&w.provider))?.expect("provider node");
    assert_eq!((p.times_slashed, p.tasks_completed, p.bonded), (0, 1, 0));
    // the watcher challenged the tiles of its own sample nobody served, a batch at a time
    // (at most 5 a challenge in this window), each answered: one seat's bond each
    let log = std::fs::read_to_string(v.dir.path().join("watch.log"))?;
    let challenges = log.matches("challenged its availability on chain").count() as u64;
    assert!(challenges >= 1);
    assert_eq!(
        wallet_balance(v, &w.client)?,
        w.client_before - REWARD - challenges * w.bond,
        "the reward paid for the work, one seat's bond for each of its {challenges} challenges"
    );
    drop(w.provider_proc);
    Ok(())
}

#[test]
fn a_provider_gone_after_the_verdict_is_challenged_slashed_and_the_client_refunded() -> Result<()> {
    let mut w = withheld_after_the_verdict()?;
    // the provider's keeper goes away: nobody answers
    w.provider_proc.take();
    let (v, task) = (&w.v, w.task);
    let chain = v.chain();
    let names = ["watch", "crank"];
    let bond = chain.task(&task)?.expect("task").provider_bond;
    let mut seen = vec![];
    wait_for(
        240,
        "the task rejected as unserved and closed",
        || match chain.task(&task)? {
            Some(t) => {
                if seen.last() != Some(&t.tally().majority) {
                    seen.push(t.tally().majority);
                }
                Ok(None)
            }
            None => Ok(Some(())),
        },
    )
    .map_err(|e| e.context(log_tails(v, &names)))?;
    assert_eq!(
        seen.last(),
        Some(&VERDICT_UNSERVED),
        "verdicts seen: {seen:?}"
    );
    let p = chain.node(&node_of(&w.provider))?.expect("provider node");
    assert_eq!(
        (p.times_slashed, p.tasks_completed, p.bonded, p.free),
        (1, 0, 0, 50 * REWARD - bond),
        "the provider's whole bond slashed"
    );
    let client_part = bond / 2; // reject_client_bps: 5 000
    assert_eq!(
        wallet_balance(v, &w.client)?,
        w.client_before + client_part,
        "the reward refunded in full, the challenge's bond back, and the client's part of the provider's bond"
    );
    drop(w.procs);
    Ok(())
}

#[test]
fn seats_that_all_said_unavailable_of_a_result_its_provider_then_published_lose_their_bonds(
) -> Result<()> {
    let v = Validator::start()?;
    let (client, provider, verifiers) =
        small_market_with(&v, WINDOWS, &["--dispute-window", DISPUTE_WINDOW])?;
    // the provider's front stalls every verifier: each votes UNAVAILABLE
    let (task, _p) = hash_task_behind(&v, &client, &provider, stalling_front)?;
    let mut procs: Vec<Proc> = verifiers
        .iter()
        .enumerate()
        .map(|(i, w)| v.spawn_keeper(&format!("v{i}"), w, &["--verifier"]))
        .collect::<Result<_>>()?;
    procs.push(v.spawn_keeper("crank", &v.admin, &["--crank"])?);
    let chain = v.chain();
    let names = ["provider", "v0", "v1", "v2", "crank"];
    let mut seen = vec![];
    let mut bond = 0;
    wait_for(
        300,
        "the task decided, contested and closed",
        || match chain.task(&task)? {
            Some(t) => {
                bond = t.verifier_bond;
                if t.status.is_decided() && seen.last() != Some(&t.tally().majority) {
                    seen.push(t.tally().majority);
                }
                Ok(None)
            }
            None => Ok(Some(())),
        },
    )
    .map_err(|e| e.context(log_tails(&v, &names)))?;
    assert_eq!(
        seen,
        vec![
            compute_market_protocol::commit::VERDICT_WITHHELD,
            VERDICT_SERVED
        ],
        "withheld, then served once the provider published"
    );
    let p = chain.node(&node_of(&provider))?.expect("provider node");
    assert_eq!(
        (p.times_slashed, p.tasks_completed, p.bonded, p.free),
        (0, 1, 0, 50 * REWARD),
        "the provider keeps its bond and is paid"
    );
    assert!(p.earned > 0);
    let log = std::fs::read_to_string(v.dir.path().join("provider.log"))?;
    assert!(log.contains("contested a withheld verdict"), "{log}");
    let mut liars = 0;
    for (i, w) in verifiers.iter().enumerate() {
        let n = chain.node(&node_of(w))?.expect("verifier node");
        if n.verifications > 0 {
            liars += 1;
            assert_eq!(
                n.times_slashed, 1,
                "v{i} said UNAVAILABLE of a published result"
            );
            assert!(
                n.free <= 50 * REWARD - bond / 2,
                "v{i} lost a losing seat's slash (half a bond) a seat: {}",
                n.free
            );
        }
    }
    assert!(liars >= 1);
    drop(procs);
    Ok(())
}

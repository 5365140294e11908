//! Crash and restart, injected RPC errors, unreachable result URLs: the keeper recovers from
//! chain state plus its store, and the protocol's outcome does not change.

mod common;

use std::sync::Arc;

use compute_market::state::TaskStatus;
use compute_market_keeper::{
    chain::{flaky::FlakyChain, ChainExt},
    compute::cpu::CpuBackend,
    db::Db,
    demo::{DemoConfig, Scenario},
    results::ResultStore,
    roles::{provider::Provider, verifier::Verifier, NodeCtx},
};

fn scenario(tasks: usize, dir: &std::path::Path) -> Scenario {
    let cfg = DemoConfig {
        tasks,
        ..Default::default()
    };
    Scenario::new(&cfg, Arc::new(CpuBackend), dir).expect("scenario")
}

/// Simulates `kill -9` of every provider and verifier: in-memory state is dropped, new
/// processes start from the same keys and store files.
fn restart_all(s: &mut Scenario) {
    let providers: Vec<Provider> = s.providers.drain(..).collect();
    let verifiers: Vec<Verifier> = s.verifiers.drain(..).collect();
    // what the processes held in memory is gone; the served results are on disk
    let store = Arc::new(ResultStore::open(&s.dir.join("results"), u64::MAX, None).unwrap());
    for (i, p) in providers.into_iter().enumerate() {
        let (ctx, corrupt_fraction, max_active, claim_backoff) =
            (p.ctx, p.corrupt_fraction, p.max_active, p.claim_backoff);
        drop(p.db);
        let db = Arc::new(Db::open(&s.dir.join(format!("provider{i}.redb"))).unwrap());
        let ctx = NodeCtx {
            store: store.clone(),
            ..ctx
        };
        let mut p = Provider::new(ctx, db, max_active);
        (p.corrupt_fraction, p.claim_backoff) = (corrupt_fraction, claim_backoff);
        p.restore().expect("restore served results");
        s.providers.push(p);
    }
    for (i, v) in verifiers.into_iter().enumerate() {
        let (ctx, careless) = (v.ctx, v.careless);
        drop(v.db);
        let db = Arc::new(Db::open(&s.dir.join(format!("verifier{i}.redb"))).unwrap());
        let ctx = NodeCtx {
            store: store.clone(),
            ..ctx
        };
        let mut v = Verifier::new(ctx, db);
        v.careless = careless;
        s.verifiers.push(v);
    }
}

#[test]
fn killed_between_commit_and_reveal_the_keepers_still_reveal_and_never_double_submit() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = scenario(2, dir.path());
    // run until some vote is committed but not revealed
    let mut crashed = false;
    for _ in 0..200 {
        s.tick().unwrap();
        let pending = s.tasks.iter().any(|(k, _, _)| {
            s.chain
                .votes(k)
                .unwrap()
                .iter()
                .any(|(_, v)| v.committed && !v.revealed)
        });
        if pending {
            restart_all(&mut s);
            crashed = true;
            break;
        }
    }
    assert!(crashed, "reached a committed-but-unrevealed vote");
    s.run_to_end(2_000).unwrap();
    let r = s.report().unwrap();
    // every seat revealed: nobody lost stake for silence, outcomes as without the crash
    common::assert_outcomes(&r);
    for t in &r.tasks {
        let (valid, invalid): (u32, u32) = {
            let mut it = t.votes.split('/').map(|x| x.parse::<u32>().unwrap());
            (it.next().unwrap(), it.next().unwrap())
        };
        assert_eq!(
            valid + invalid,
            3,
            "all three seats revealed after the restart: {t:?}"
        );
    }
    // no double submission: one ResultSubmitted per task on chain (a second would be refused)
    let submits = s.providers.iter().flat_map(|p| &p.records).count();
    assert!(
        submits <= 2,
        "no task was computed and submitted again after the restart"
    );
}

#[test]
fn roles_survive_injected_rpc_errors() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = scenario(4, dir.path());
    let flaky = Arc::new(FlakyChain::new(s.chain.clone(), 7));
    s.roles_chain = flaky.clone();
    s.run_to_end(3_000).unwrap();
    assert!(
        flaky.failed.load(std::sync::atomic::Ordering::Relaxed) > 10,
        "errors were injected"
    );
    assert!(s.errors > 0, "roles saw the errors");
    common::assert_outcomes(&s.report().unwrap());
}

#[test]
fn an_unreachable_result_is_voted_invalid_and_the_provider_slashed() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = scenario(1, dir.path());
    // the providers serve from a store no verifier can reach
    let hidden = Arc::new(ResultStore::default());
    for p in &mut s.providers {
        p.ctx.store = hidden.clone();
    }
    s.run_to_end(2_000).unwrap();
    let r = s.report().unwrap();
    assert_eq!(r.tasks[0].outcome, "Rejected");
    let reasons: Vec<&str> = s
        .verifiers
        .iter()
        .flat_map(|v| &v.records)
        .filter(|r| !r.reason.contains("careless"))
        .map(|r| r.reason.as_str())
        .collect();
    assert!(!reasons.is_empty());
    assert!(
        reasons.iter().all(|r| r.contains("unreachable")),
        "{reasons:?}"
    );
    assert!(s
        .chain
        .tasks()
        .unwrap()
        .iter()
        .all(|(_, t)| t.status != TaskStatus::Verifying));
}

#[test]
fn bad_result_urls_are_named() {
    use compute_market_keeper::results::FetchError;
    use compute_market_protocol::job::JobSpec;
    let job = JobSpec::hash_batch(4, 1, 1, [0; 32]);
    let store = ResultStore::default();
    let e = store.fetch_all("ftp://nowhere/r", &job).unwrap_err();
    assert!(e.to_string().contains("unsupported result URL"), "{e}");
    assert!(!e.is_transient());
    // a closed port: unreachable now, worth retrying until the deadline
    let lo =
        ResultStore::default().with_policy(compute_market_keeper::results::FetchPolicy::loopback());
    let e = lo.fetch_all("http://127.0.0.1:1/r/00", &job).unwrap_err();
    assert!(e.to_string().contains("unreachable"), "{e}");
    assert!(e.is_transient(), "{e:?}");
    let e = store.fetch_all("mem://abcd", &job).unwrap_err().to_string();
    assert!(e.contains("does not name a 32-byte root"), "{e}");
    let e = store
        .fetch_all(&format!("mem://{}", "zz".repeat(32)), &job)
        .unwrap_err()
        .to_string();
    assert!(e.contains("not hex"), "{e}");
    // multi-byte characters: 64 bytes but not 64 hex characters; never a panic
    for weird in [
        "é".repeat(32),
        format!("{}é", "0".repeat(62)),
        "💥".repeat(16),
    ] {
        let e = store
            .fetch_all(&format!("mem://{weird}"), &job)
            .unwrap_err();
        assert!(matches!(e, FetchError::Invalid(_)), "{e:?}");
    }
    let e = store
        .fetch_all(&format!("mem://{}", "00".repeat(32)), &job)
        .unwrap_err()
        .to_string();
    assert!(e.contains("unreachable"), "{e}");
}

#[test]
fn malformed_job_specs_are_named() {
    use compute_market_protocol::job::{JobError, JobSpec};
    let mut b = JobSpec::matmul(64, 64, 64, [0; 32]).encode();
    b[1] = 7;
    let e = JobSpec::decode(&b).unwrap_err();
    assert_eq!(e, JobError::UnknownKind);
    assert_eq!(e.to_string(), "unknown job kind");
}

#[test]
fn results_travel_over_http_compressed_and_content_addressed() {
    use compute_market_keeper::{metrics::Metrics, results};
    let dir = tempfile::tempdir().unwrap();
    let mut s = scenario(4, dir.path());
    // bind first, then publish URLs that point at the server
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let served = Arc::new(ResultStore::serving_at(format!("http://127.0.0.1:{port}")));
    let metrics = Arc::new(Metrics::default());
    let _server = results::serve(
        served.clone(),
        metrics.clone(),
        &format!("127.0.0.1:{port}"),
    )
    .unwrap();
    for p in &mut s.providers {
        p.ctx.store = served.clone();
    }
    // verifiers have nothing locally: everything they check came over HTTP (from loopback,
    // allowed explicitly)
    let empty = Arc::new(
        ResultStore::default().with_policy(compute_market_keeper::results::FetchPolicy::loopback()),
    );
    for v in &mut s.verifiers {
        v.ctx.store = empty.clone();
    }
    s.run_to_end(2_000).unwrap();
    let r = s.report().unwrap();
    common::assert_outcomes(&r);
    let metrics_text = reqwest::blocking::get(format!("http://127.0.0.1:{port}/metrics"))
        .unwrap()
        .text()
        .unwrap();
    assert!(
        metrics_text.contains("keeper_rpc_latency_seconds_count"),
        "{metrics_text}"
    );
    let missing =
        reqwest::blocking::get(format!("http://127.0.0.1:{port}/r/{}/all", "00".repeat(32)))
            .unwrap();
    assert_eq!(missing.status(), 404, "an unknown root is a 404");
}

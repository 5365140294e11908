//! Hostile providers against honest verifiers: every way a provider's result URL or its
//! server's answers can break the protocol ends in INVALID votes from the honest verifiers,
//! which keep their bonds, while the process keeps running (PROTOCOL §5).

mod common;

use std::{
    io::Write,
    net::TcpStream,
    sync::{Arc, OnceLock},
    time::{Duration, Instant},
};

use common::hostile::{indices, respond, respond_streaming, split_path, Hostile};
use compute_market_keeper::{
    chain::ChainExt,
    compute::cpu::CpuBackend,
    demo::{DemoConfig, Scenario},
    results::{wire::encode_proven, FetchError, FetchPolicy, ResultStore},
    verify::ProvenTile,
};
use compute_market_protocol::job::JobSpec;

/// A market of two tasks (a `MatMulModP`, then a `HashBatch`) whose providers all publish
/// their results under `base` (a hostile server, or an address no verifier may fetch from),
/// computed honestly; verifiers fetch over HTTP from loopback, allowed explicitly.
fn scenario(dir: &std::path::Path, base: &str) -> Scenario {
    let cfg = DemoConfig {
        tasks: 2,
        ..Default::default()
    };
    let mut s = Scenario::new(&cfg, Arc::new(CpuBackend), dir).expect("scenario");
    let published = Arc::new(ResultStore::serving_at(base));
    for p in &mut s.providers {
        p.ctx.store = published.clone();
    }
    let fetching = Arc::new(ResultStore::default().with_policy(FetchPolicy {
        timeout: Duration::from_secs(2),
        ..FetchPolicy::loopback()
    }));
    for v in &mut s.verifiers {
        v.ctx.store = fetching.clone();
    }
    s
}

/// Runs `s` to the end; checks that the tasks whose kind `attacked` names were Rejected, that
/// every honest verifier voted INVALID on them with a reason containing `why`, and that no
/// honest verifier lost stake.
fn caught(s: Scenario, attacked: &[&str], why: &str) {
    caught_as(
        s,
        attacked,
        why,
        compute_market_protocol::commit::VOTE_INVALID,
    )
}

/// [`caught`], every honest verifier voting `vote`.
fn caught_as(mut s: Scenario, attacked: &[&str], why: &str, vote: u8) {
    s.run_to_end(3_000).expect("the market finished");
    let r = s.report().unwrap();
    for t in r
        .tasks
        .iter()
        .filter(|t| attacked.iter().any(|k| t.job.starts_with(k)))
    {
        assert_eq!(t.outcome, "Rejected", "{t:?}");
    }
    let honest: Vec<_> = s.verifiers.iter().filter(|v| !v.careless).collect();
    let mut reasons = vec![];
    for v in &honest {
        for rec in &v.records {
            let job = &s.tasks.iter().find(|(k, _, _)| *k == rec.task).unwrap().1;
            let kind = format!("{:?}", job.kind);
            if attacked.iter().any(|k| kind.starts_with(k)) {
                assert_eq!(rec.vote, vote, "{rec:?}");
                reasons.push(rec.reason.clone());
            }
        }
        let n = s.chain.node(&v.ctx.node).unwrap().unwrap();
        assert_eq!(
            (n.times_slashed, n.bonded),
            (0, 0),
            "{} kept its bonds",
            v.ctx.name
        );
    }
    assert!(
        !reasons.is_empty(),
        "honest verifiers checked the attacked tasks"
    );
    assert!(
        reasons.iter().all(|r| r.contains(why)),
        "every reason names the problem ({why}): {reasons:?}"
    );
}

/// The honest answer for `root` from the providers' store, or nothing.
fn honest(store: &ResultStore, root: &[u8; 32], idx: &[u32]) -> Vec<ProvenTile> {
    store
        .entry(root)
        .map(|e| e.proven(idx).unwrap())
        .unwrap_or_default()
}

/// A hostile scenario: the providers publish under the hostile server's URL, and the server
/// reads the honest tiles from the providers' own store.
fn hostile_scenario(
    dir: &std::path::Path,
    handler: impl Fn(&ResultStore, &str, &mut TcpStream) + Send + Sync + 'static,
) -> Scenario {
    let slot: Arc<OnceLock<Arc<ResultStore>>> = Arc::new(OnceLock::new());
    let s2 = slot.clone();
    let h = Hostile::start(Arc::new(move |path: &str, sock: &mut TcpStream| {
        if let Some(store) = s2.get() {
            handler(store, path, sock)
        }
    }));
    let s = scenario(dir, &h.url());
    let _ = slot.set(s.providers[0].ctx.store.clone());
    s
}

/// A hostile server that relays `/all` honestly and answers `/tiles?i=…` with what
/// `answer(entry, asked)` makes of the honest store (404 for anything else).
fn tiles_served_as(
    dir: &std::path::Path,
    answer: impl Fn(&ResultStore, &compute_market_keeper::results::Entry, &[u32]) -> Vec<ProvenTile>
        + Send
        + Sync
        + 'static,
) -> Scenario {
    hostile_scenario(dir, move |store, path, sock| {
        let Some((root, what)) = split_path(path) else {
            return respond(sock, "404 Not Found", &[], b"");
        };
        let Some(e) = store.entry(&root) else {
            return respond(sock, "404 Not Found", &[], b"");
        };
        if what == "all" {
            return respond(sock, "200 OK", &[], &e.tiles().unwrap().concat());
        }
        let served = answer(store, &e, &indices(&what));
        respond(sock, "200 OK", &[], &encode_proven(&served));
    })
}

#[test]
fn zero_tiles_are_voted_invalid() {
    let dir = tempfile::tempdir().unwrap();
    let s = hostile_scenario(dir.path(), |_, _, sock| respond(sock, "200 OK", &[], b""));
    caught(s, &["MatMulModP", "HashBatch"], "served 0");
}

#[test]
fn tiles_other_than_the_sampled_ones_are_voted_invalid() {
    let dir = tempfile::tempdir().unwrap();
    // valid tiles with valid proofs, but the provider's choice: each sampled index + 1
    let s = tiles_served_as(dir.path(), |store, e, asked| {
        let other: Vec<u32> = asked.iter().map(|i| (i + 1) % e.count()).collect();
        honest(store, &e.root, &other)
    });
    caught(s, &["HashBatch"], "was sampled");
}

#[test]
fn an_index_beyond_the_tile_count_is_voted_invalid() {
    let dir = tempfile::tempdir().unwrap();
    let s = tiles_served_as(dir.path(), |store, e, asked| {
        let mut served = honest(store, &e.root, asked);
        for t in &mut served {
            t.index += e.count();
        }
        served
    });
    caught(s, &["HashBatch"], "was sampled");
}

#[test]
fn a_million_entries_are_cut_off_at_what_the_job_implies() {
    let dir = tempfile::tempdir().unwrap();
    let s = hostile_scenario(dir.path(), |store, path, sock| {
        let Some((root, _)) = split_path(path) else {
            return respond(sock, "404 Not Found", &[], b"");
        };
        let one = encode_proven(&honest(store, &root, &[0]));
        // a million copies of tile 0, streamed until the verifier hangs up
        respond_streaming(sock, &[], |w| {
            for _ in 0..1_000_000 {
                w.write_all(&one)?;
            }
            Ok(())
        });
    });
    caught(s, &["MatMulModP", "HashBatch"], "sent more than");
}

/// 1 GiB of zeros as one zstd frame (about 40 KiB).
fn bomb() -> &'static [u8] {
    static BOMB: OnceLock<Vec<u8>> = OnceLock::new();
    BOMB.get_or_init(|| {
        let mut e = zstd::stream::Encoder::new(Vec::new(), 1).unwrap();
        let zeros = vec![0u8; 1 << 20];
        for _ in 0..1024 {
            e.write_all(&zeros).unwrap();
        }
        e.finish().unwrap()
    })
}

#[test]
fn a_decompression_bomb_is_cut_off_at_what_the_job_implies() {
    assert!(bomb().len() < 1 << 20, "{} bytes", bomb().len());
    let dir = tempfile::tempdir().unwrap();
    let s = hostile_scenario(dir.path(), |_, _, sock| {
        respond(sock, "200 OK", &[("Content-Encoding", "zstd")], bomb())
    });
    caught(s, &["MatMulModP", "HashBatch"], "sent more than");
}

#[test]
fn a_redirect_loop_is_voted_invalid() {
    let dir = tempfile::tempdir().unwrap();
    let s = hostile_scenario(dir.path(), |_, path, sock| {
        respond(sock, "302 Found", &[("Location", path)], b"")
    });
    caught(s, &["MatMulModP", "HashBatch"], "redirect");
}

#[test]
fn a_private_range_url_is_refused_without_a_request() {
    let dir = tempfile::tempdir().unwrap();
    // a link-local address (the cloud metadata service's): no verifier sends it anything
    let s = scenario(dir.path(), "http://169.254.169.254:80");
    caught(s, &["MatMulModP", "HashBatch"], "link-local address");
}

#[test]
fn a_non_ascii_url_is_voted_invalid_and_nothing_panics() {
    let dir = tempfile::tempdir().unwrap();
    let h = Hostile::start(Arc::new(|_: &str, sock: &mut TcpStream| {
        respond(sock, "404 Not Found", &[], b"")
    }));
    let s = scenario(dir.path(), &format!("{}/é💥", h.url()));
    caught(s, &["MatMulModP", "HashBatch"], "HTTP 404");
}

/// Nothing serves the result: every honest verifier retries until its give-up slot, then votes
/// UNAVAILABLE (PROTOCOL §3.4), and the result is rejected as withheld.
#[test]
fn an_unreachable_result_is_retried_then_voted_unavailable_before_the_commit_deadline() {
    let dir = tempfile::tempdir().unwrap();
    // a closed port: transient, retried every pass until GIVE_UP_SLOTS before the deadline
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let s = scenario(dir.path(), &format!("http://127.0.0.1:{port}"));
    caught_as(
        s,
        &["MatMulModP", "HashBatch"],
        "unreachable",
        compute_market_protocol::commit::VOTE_UNAVAILABLE,
    );
}

#[test]
fn a_slow_body_is_cut_off_at_the_fetch_timeout() {
    let h = Hostile::start(Arc::new(|_: &str, sock: &mut TcpStream| {
        let _ = sock.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n");
        for _ in 0..1_000 {
            if sock.write_all(b"x").is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }));
    let store = ResultStore::default().with_policy(FetchPolicy {
        timeout: Duration::from_secs(1),
        ..FetchPolicy::loopback()
    });
    let job = JobSpec::hash_batch(4096, 64, 1, [0; 32]);
    let t = Instant::now();
    let e = store
        .fetch_all(&format!("{}/r/{}", h.url(), "00".repeat(32)), &job)
        .unwrap_err();
    assert!(e.is_transient(), "a slow body may be a slow network: {e:?}");
    assert!(
        t.elapsed() < Duration::from_secs(3),
        "cut off at the timeout: {:?}",
        t.elapsed()
    );
}

#[test]
fn loopback_and_private_addresses_are_refused_unless_allowed() {
    let h = Hostile::start(Arc::new(|_: &str, sock: &mut TcpStream| {
        respond(sock, "200 OK", &[], &[0u8; 4 * 32])
    }));
    let job = JobSpec::hash_batch(4, 1, 1, [0; 32]);
    let root = "00".repeat(32);
    let strict = ResultStore::default();
    for url in [
        format!("{}/r/{root}", h.url()),
        format!("http://localhost:{}/r/{root}", h.addr.port()),
        format!("http://[::1]:{}/r/{root}", h.addr.port()),
        format!("http://10.0.0.1/r/{root}"),
        format!("http://[fd00::1]/r/{root}"),
    ] {
        match strict.fetch_all(&url, &job) {
            Err(FetchError::Invalid(m)) => assert!(m.contains("refused"), "{url}: {m}"),
            other => panic!("{url}: {other:?}"),
        }
    }
    // allowed explicitly, the same server answers
    let lo = ResultStore::default().with_policy(FetchPolicy::loopback());
    assert_eq!(
        lo.fetch_all(&format!("{}/r/{root}", h.url()), &job)
            .unwrap()
            .len(),
        4
    );
    assert_eq!(
        lo.fetch_all(
            &format!("http://localhost:{}/r/{root}", h.addr.port()),
            &job
        )
        .unwrap()
        .len(),
        4
    );
}

/// A backend that panics: the verifier's check of every task panics, which fails that task's
/// check only — the process goes on and the others decide.
struct Panicky;

impl compute_market_keeper::compute::Backend for Panicky {
    fn name(&self) -> String {
        "panicky".into()
    }
    fn tiles(&self, _: &JobSpec, _: &[u32]) -> anyhow::Result<Vec<Vec<u8>>> {
        panic!("a hostile input reached a bug")
    }
    fn freivalds(&self, _: &JobSpec, _: &[Vec<u32>]) -> anyhow::Result<Vec<Vec<u32>>> {
        panic!("a hostile input reached a bug")
    }
}

#[test]
fn a_panic_in_one_check_fails_that_check_not_the_process() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = DemoConfig {
        tasks: 2,
        ..Default::default()
    };
    let mut s = Scenario::new(&cfg, Arc::new(CpuBackend), dir.path()).unwrap();
    s.verifiers[0].ctx.backend = Arc::new(Panicky);
    s.run_to_end(3_000).unwrap();
    common::assert_outcomes(&s.report().unwrap());
    assert!(s.verifiers[0].records.is_empty(), "its checks all failed");
    assert!(s.verifiers[1].records.len() >= 1, "the others checked");
}

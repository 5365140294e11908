//! Admission of a market's nodes against the hostile-peer kit of issue 42 (items 5 and 6):
//!
//! * a signature harvested by a hostile store and replayed at an honest `keeper serve` is
//!   refused: `403` under the hostile store's name, a stranger's request (`503` under a
//!   stranger flood) under the honest store's;
//! * registered nodes without stake holding slow readers do not take the nodes' pool, and a
//!   node with little stake holds only its share of it;
//! * one staked node sending 70 000 signed requests fills only its own share of the replay
//!   memory.
//!
//! In each, a staked verifier's signed fetches succeed during the attack while strangers hold
//! every stranger's transfer (so only admission serves it); their p50 and max latency are
//! printed and kept in the assertion messages.

mod common;

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpStream},
    sync::{
        atomic::{AtomicBool, AtomicUsize, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use common::{
    hostile::{header, read_request, respond},
    serve::{big_object, keeper_serve},
};
use compute_market::{constants::ROLE_VERIFIER, pda};
use compute_market_keeper::{
    cli,
    compute::{cpu::CpuBackend, Backend},
    daemon,
    demo::{DemoConfig, Scenario, STAKE},
    metrics::Metrics,
    results::{
        self,
        admission::{
            sign_request, Admitted, NONCE, REPLAYS_LEAST, REPLAYS_MAX, SIGNATURE, SIGNER, TIME,
        },
        hex,
        server::own_hosts,
        FetchPolicy, ResultStore, ServerLimits,
    },
};
use compute_market_protocol::job::JobSpec;
use solana_keypair::Keypair;
use solana_signer::Signer;

/// A TCP connection to `to` from the loopback address `from`, with a small receive buffer (a
/// reader that stops reading stalls the sender sooner).
fn connect_from(from: &str, to: SocketAddr) -> TcpStream {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    s.set_recv_buffer_size(4096).unwrap();
    s.bind(&SocketAddr::new(from.parse().unwrap(), 0).into())
        .unwrap();
    s.connect(&to.into()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.into()
}

/// Sends `GET path` naming `host`, with `headers`, closing after the answer when `close`.
fn send(s: &mut TcpStream, host: &str, path: &str, headers: &[(&str, String)], close: bool) {
    let mut head = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if close {
        head.push_str("Connection: close\r\n");
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).unwrap();
}

/// The status code of the response on `s` (0 when the connection closed first).
fn status(s: &mut TcpStream) -> u16 {
    let mut b = [0u8; 12];
    match s.read_exact(&mut b) {
        Ok(()) => std::str::from_utf8(&b[9..12])
            .ok()
            .and_then(|c| c.parse().ok())
            .unwrap_or(0),
        Err(_) => 0,
    }
}

/// A whole response on a connection the server closes after it: its status and body.
fn answer(s: &mut TcpStream) -> (u16, String) {
    let mut all = vec![];
    let _ = s.read_to_end(&mut all);
    let text = String::from_utf8_lossy(&all).to_string();
    let code = text.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map_or(String::new(), |(_, b)| b.to_string());
    (code, body)
}

/// `n` connections from each of `peers` reading nothing of `path` after its status: they hold
/// the strangers' transfers. Each one's status.
fn stall(peers: &[String], to: SocketAddr, path: &str, n: usize) -> (Vec<TcpStream>, Vec<u16>) {
    let mut held = vec![];
    let mut codes = vec![];
    for p in peers {
        for _ in 0..n {
            let mut c = connect_from(p, to);
            send(&mut c, "x", path, &[], false);
            codes.push(status(&mut c));
            held.push(c);
        }
    }
    (held, codes)
}

/// A signed request's four headers as owned pairs.
fn signed(kp: &Keypair, host: &str, path: &str) -> Vec<(&'static str, String)> {
    sign_request(kp, "GET", host, path).to_vec()
}

/// A fetching store signing with `kp`.
fn fetcher(kp: &Keypair) -> ResultStore {
    ResultStore::default()
        .with_policy(FetchPolicy::loopback())
        .with_signer(Arc::new(Keypair::try_from(&kp.to_bytes()[..]).unwrap()))
}

/// p50 and max of `lat` (ms).
fn p50_max(lat: &mut [f64]) -> (f64, f64) {
    lat.sort_by(f64::total_cmp);
    if lat.is_empty() {
        (f64::NAN, f64::NAN)
    } else {
        (lat[lat.len() / 2], lat[lat.len() - 1])
    }
}

/// `tries` signed fetches of 16 tiles of `root` by `kp` from `uri`, `gap` apart: their
/// latencies (ms) and the failures.
fn verifier_fetches(
    kp: &Keypair,
    uri: &str,
    job: &JobSpec,
    tries: u32,
    gap: Duration,
) -> (Vec<f64>, Vec<String>) {
    let (mut lat, mut failures) = (vec![], vec![]);
    for i in 0..tries {
        let picked: Vec<u32> = (0..16)
            .map(|k| (i * 131 + k * 97) % job.tile_count())
            .collect();
        let t = Instant::now();
        // a fresh client each time: a new connection, admitted (and checked) anew
        match fetcher(kp).fetch(uri, job, &picked) {
            Ok(tiles) if tiles.len() == 16 => lat.push(t.elapsed().as_secs_f64() * 1e3),
            Ok(tiles) => failures.push(format!("{} tiles", tiles.len())),
            Err(e) => failures.push(e.to_string()),
        }
        std::thread::sleep(gap);
    }
    (lat, failures)
}

/// A result of 16 MiB of tiles in `store`: its root and job.
fn big_result(store: &ResultStore) -> ([u8; 32], JobSpec) {
    let job = JobSpec::hash_batch(2048, 256, 1, [9; 32]);
    let tiles = CpuBackend.run(&job).unwrap();
    let (root, _) = store.publish([9; 32], job, tiles).unwrap();
    (root, job)
}

/// (a) A hostile input store harvests the signature of a provider fetching from it and replays
/// it at an honest `keeper serve` that admits the provider: under the hostile store's name it
/// is refused with 403 naming the host; under the honest store's name the signature does not
/// check, so it is a stranger's and gets 503 while strangers hold every transfer. The
/// provider's own signed fetches from the honest store are served meanwhile, under its
/// listening address and under its --public-url name.
#[test]
fn a_signature_harvested_by_another_store_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (root, job) = {
        let store = ResultStore::open(dir.path(), 1 << 40, None).unwrap();
        big_result(&store)
    };
    let object = big_object(dir.path(), 64 << 20);
    let node = Keypair::new();
    let (mut honest, addr) = keeper_serve(
        dir.path(),
        &[
            "--admit",
            &node.pubkey().to_string(),
            "--public-url",
            "http://store-y.test",
        ],
        None,
    );

    // the hostile store records every request head it gets
    let heads = Arc::new(Mutex::new(Vec::<String>::new()));
    let h = {
        let heads = heads.clone();
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let a = l.local_addr().unwrap();
        std::thread::spawn(move || {
            for s in l.incoming() {
                let Ok(mut s) = s else { continue };
                if let Some((_, head)) = read_request(&mut s) {
                    heads.lock().unwrap().push(head);
                }
                respond(&mut s, "404 Not Found", &[], b"no such object");
            }
        });
        a.to_string()
    };
    // the node fetches an input from the hostile store, signing as it always does
    let got = fetcher(&node).fetch_content(&[format!("http://{h}")], &object, 1 << 30, None);
    assert!(got.is_err(), "the hostile store served nothing");
    let head = heads
        .lock()
        .unwrap()
        .first()
        .cloned()
        .expect("a request came");
    let path = head
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap()
        .to_string();
    let harvested: Vec<(&str, String)> = [SIGNER, TIME, NONCE, SIGNATURE]
        .into_iter()
        .map(|k| (k, header(&head, k).expect("the fetch was signed")))
        .collect();
    assert_eq!(harvested[0].1, node.pubkey().to_string());
    assert_eq!(header(&head, "host").unwrap(), h);

    // strangers take every transfer of the honest store: 8 peers × 8 readers of the object
    let peers: Vec<String> = (1..=8).map(|i| format!("127.5.0.{i}")).collect();
    let (held, codes) = stall(&peers, addr, &format!("/c/{}", hex(&object)), 8);
    assert!(
        codes.iter().all(|c| *c == 200),
        "the flood holds transfers: {codes:?}"
    );
    let mut probe = connect_from("127.5.1.1", addr);
    send(&mut probe, "x", &format!("/c/{}", hex(&object)), &[], true);
    let (stranger, _) = answer(&mut probe);
    assert_eq!(stranger, 503, "a stranger is refused under the flood");

    // the replay under the hostile store's name: 403, naming the host and the fix
    let mut c = connect_from("127.5.2.1", addr);
    send(&mut c, &h, &path, &harvested, false);
    let (elsewhere, why) = answer(&mut c);
    // under the honest store's own name: the signature does not check, a stranger's request
    let mut c = connect_from("127.5.2.2", addr);
    send(&mut c, &addr.to_string(), &path, &harvested, true);
    let (here, _) = answer(&mut c);
    // under its public name: the signature (made for the hostile store) does not check either
    let mut c = connect_from("127.5.2.3", addr);
    send(&mut c, "store-y.test", &path, &harvested, true);
    let (public, _) = answer(&mut c);

    // the node's own signed fetches, during the flood: under the listening address…
    let uri = format!("http://{addr}/r/{}", hex(&root));
    let (mut lat, failures) = verifier_fetches(&node, &uri, &job, 10, Duration::from_millis(100));
    // …and under its --public-url name (the name the request says, over the same socket)
    let tiles = format!("/r/{}/tiles?i=1,2,3", hex(&root));
    let mut c = connect_from("127.5.3.1", addr);
    send(
        &mut c,
        "store-y.test",
        &tiles,
        &signed(&node, "store-y.test", &tiles),
        true,
    );
    let (by_name, _) = answer(&mut c);
    drop(held);
    let _ = honest.kill();
    let _ = honest.wait();

    let (p50, max) = p50_max(&mut lat);
    let report = format!(
        "harvested at {h}, replayed at the honest store: {elsewhere} under the hostile \
         name ({why:?}), {here} under the store's address, {public} under its public name; \
         the node's signed fetches during the flood {}/10, p50 {p50:.1} ms, max {max:.1} ms; \
         under --public-url's name {by_name}",
        lat.len()
    );
    println!("{report}");
    assert_eq!(elsewhere, 403, "{report}");
    assert!(why.contains(&h) && why.contains("--public-url"), "{report}");
    assert_eq!(here, 503, "{report}");
    assert_eq!(public, 503, "{report}");
    assert!(failures.is_empty(), "{failures:?}: {report}");
    assert_eq!(by_name, 200, "{report}");
}

/// A scenario's market with its staked nodes, and more nodes: `zero` registered whose whole
/// stake is unstaked, and `low` staked with a hundredth of a scenario node's stake.
fn market_with(
    dir: &std::path::Path,
    zero: usize,
    low: usize,
) -> (Scenario, Vec<Keypair>, Vec<Keypair>) {
    let cfg = DemoConfig {
        providers: 2,
        verifiers: 3,
        tasks: 1,
        ..Default::default()
    };
    let s = Scenario::new(&cfg, Arc::new(CpuBackend), dir).expect("scenario");
    let zeros: Vec<Keypair> = (0..zero)
        .map(|i| {
            let n = s.onboard(&format!("zero-{i}"), ROLE_VERIFIER).unwrap();
            cli::node_unstake(s.chain.as_ref(), &n.kp, STAKE).unwrap();
            n.kp
        })
        .collect();
    let lows: Vec<Keypair> = (0..low)
        .map(|i| {
            let n = s.onboard(&format!("low-{i}"), ROLE_VERIFIER).unwrap();
            cli::node_unstake(s.chain.as_ref(), &n.kp, STAKE - STAKE / 100).unwrap();
            n.kp
        })
        .collect();
    (s, zeros, lows)
}

/// A library server over a store holding a 16 MiB result, named by its listening address,
/// admitting `admitted`; strangers get 2 transfers in all (1 a peer), nodes 8 (8 a signer at
/// most), and a stopped reader keeps its transfer for a minute.
fn server(admitted: Admitted) -> (results::server::HttpServer, Arc<Metrics>, [u8; 32], JobSpec) {
    let store = Arc::new(ResultStore::default());
    let (root, job) = big_result(&store);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let local = listener.local_addr().unwrap();
    let limits = ServerLimits {
        transfers: 2,
        transfers_per_peer: 1,
        node_transfers: 8,
        node_transfers_per_signer: 8,
        stall_timeout: Duration::from_secs(60),
        own_hosts: own_hosts(None, local),
        ..ServerLimits::default()
    };
    let metrics = Arc::new(Metrics::default());
    let server = results::server::serve_listener(store, metrics.clone(), listener, limits).unwrap();
    *server.admitted.write().unwrap() = admitted;
    (server, metrics, root, job)
}

/// (b) Four registered nodes without stake and one with a hundredth of the others' stake
/// each open 8 signed slow readers of a 16 MiB result while strangers hold every stranger's
/// transfer. The nodes without stake are not admitted (the daemon's read of the market leaves
/// them out), so theirs are strangers' and refused; the small node holds only its share of
/// the nodes' transfers. A staked verifier's signed fetches are served throughout.
#[test]
fn nodes_without_stake_cannot_take_the_nodes_pool() {
    let dir = tempfile::tempdir().unwrap();
    let (s, zeros, lows) = market_with(dir.path(), 4, 1);
    let verifier = Keypair::try_from(&s.verifiers[0].ctx.kp.to_bytes()[..]).unwrap();
    let admitted =
        daemon::admitted_nodes(s.chain.as_ref(), &pda::market(1), daemon::ADMIT_MIN_STAKE).unwrap();
    for z in &zeros {
        assert!(
            !admitted.contains(&z.pubkey()),
            "a node without stake is not admitted"
        );
    }
    let low = &lows[0];
    assert_eq!(admitted.stake(&low.pubkey()), Some(STAKE / 100));
    assert_eq!(admitted.stake(&verifier.pubkey()), Some(STAKE));
    assert_eq!(
        admitted.len(),
        6,
        "the scenario's 5 nodes and the small one"
    );
    // a floor above the small node's stake leaves it out too
    let floored = daemon::admitted_nodes(s.chain.as_ref(), &pda::market(1), STAKE / 2).unwrap();
    assert!(!floored.contains(&low.pubkey()) && floored.contains(&verifier.pubkey()));
    let low_share = admitted.share(&low.pubkey(), 8, 1);

    // the server's set, kept by the thread `keeper run` and `keeper serve --admit-market` run:
    // the market's staked nodes, and a key admitted by hand besides
    let (server, _metrics, root, job) = server(Admitted::default());
    let by_hand = Keypair::new().pubkey();
    let stop = Arc::new(AtomicBool::new(false));
    let reader = daemon::admit_nodes(
        s.chain.clone(),
        pda::market(1),
        daemon::ADMIT_MIN_STAKE,
        Admitted::new([(by_hand, 5)]),
        server.admitted.clone(),
        stop.clone(),
    )
    .unwrap();
    let t = Instant::now();
    while server.admitted.read().unwrap().len() < 7 && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, Ordering::SeqCst);
    reader.join().unwrap();
    let mut expected = admitted.clone();
    expected.insert(by_hand, 5);
    assert_eq!(*server.admitted.read().unwrap(), expected);
    let addr = server.addr;
    let all = format!("/r/{}/all", hex(&root));
    let strangers: Vec<String> = (1..=2).map(|i| format!("127.6.0.{i}")).collect();
    let (held, codes) = stall(&strangers, addr, &all, 1);
    assert_eq!(codes, [200, 200], "the strangers hold their transfers");

    // the attackers' signed slow readers
    let mut readers = vec![];
    let mut attack = |kp: &Keypair, from: &str| -> Vec<u16> {
        (0..8)
            .map(|_| {
                let mut c = connect_from(from, addr);
                send(
                    &mut c,
                    &addr.to_string(),
                    &all,
                    &signed(kp, &addr.to_string(), &all),
                    false,
                );
                let code = status(&mut c);
                readers.push(c);
                code
            })
            .collect()
    };
    let zero_codes: Vec<Vec<u16>> = zeros
        .iter()
        .enumerate()
        .map(|(i, z)| attack(z, &format!("127.6.1.{}", i + 1)))
        .collect();
    let low_codes = attack(low, "127.6.2.1");

    let uri = format!("http://{addr}/r/{}", hex(&root));
    let (mut lat, failures) =
        verifier_fetches(&verifier, &uri, &job, 10, Duration::from_millis(100));
    drop(readers);
    drop(held);
    drop(server);

    let (p50, max) = p50_max(&mut lat);
    let low_served = low_codes.iter().filter(|c| **c == 200).count();
    let report = format!(
        "zero-stake signers' slow readers {zero_codes:?}; the small signer's {low_codes:?} \
         ({low_served} served, its share {low_share}); the staked verifier's signed fetches \
         during the attack {}/10, p50 {p50:.1} ms, max {max:.1} ms",
        lat.len()
    );
    println!("{report}");
    assert!(
        zero_codes.iter().flatten().all(|c| *c == 503),
        "nodes without stake are strangers here: {report}"
    );
    assert!((1..=low_share).contains(&low_served), "{report}");
    assert!(failures.is_empty(), "{failures:?}: {report}");
}

/// (c) A staked node with a hundredth of the others' stake sends 70 000 signed requests, each
/// on a new connection (each checked, each remembered if accepted), while strangers hold
/// every stranger's transfer. Only its share of the replay memory is ever its: past it its
/// requests are strangers' (503 here), and a staked verifier's signed fetches, during the
/// flush and after it, are served.
#[test]
fn one_signer_cannot_flush_the_replay_memory() {
    let dir = tempfile::tempdir().unwrap();
    let (s, _, lows) = market_with(dir.path(), 0, 1);
    let verifier = Keypair::try_from(&s.verifiers[0].ctx.kp.to_bytes()[..]).unwrap();
    let admitted =
        daemon::admitted_nodes(s.chain.as_ref(), &pda::market(1), daemon::ADMIT_MIN_STAKE).unwrap();
    let low = Arc::new(Keypair::try_from(&lows[0].to_bytes()[..]).unwrap());
    let share = admitted.share(&low.pubkey(), REPLAYS_MAX, REPLAYS_LEAST);
    assert!(share < REPLAYS_MAX / 100, "{share}");

    let (server, metrics, root, job) = server(admitted);
    let addr = server.addr;
    let strangers: Vec<String> = (1..=2).map(|i| format!("127.7.0.{i}")).collect();
    let (held, codes) = stall(&strangers, addr, &format!("/r/{}/all", hex(&root)), 1);
    assert_eq!(codes, [200, 200], "the strangers hold their transfers");

    // the flush: 4 threads, 17 500 signed requests each, from 8 addresses, each on a new
    // connection the server closes after its answer
    const EACH: usize = 17_500;
    let sent = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let flooders: Vec<_> = (0..4)
        .map(|t| {
            let (low, sent) = (low.clone(), sent.clone());
            let tiles = format!("/r/{}/tiles?i={t}", hex(&root));
            std::thread::spawn(move || {
                let mut codes = std::collections::BTreeMap::<u16, usize>::new();
                let host = addr.to_string();
                for i in 0..EACH {
                    let from = format!("127.7.1.{}", 1 + 2 * t + i % 2);
                    let mut c = connect_from(&from, addr);
                    send(&mut c, &host, &tiles, &signed(&low, &host, &tiles), true);
                    let (code, _) = answer(&mut c);
                    *codes.entry(code).or_default() += 1;
                    sent.fetch_add(1, Ordering::Relaxed);
                }
                codes
            })
        })
        .collect();
    // the verifier fetches while the flush runs, once the memory would have filled, and after
    let uri = format!("http://{addr}/r/{}", hex(&root));
    let (mut lat, mut failures) = (vec![], vec![]);
    let mut during = 0;
    while flooders.iter().any(|f| !f.is_finished()) {
        let (l, f) = verifier_fetches(&verifier, &uri, &job, 1, Duration::from_millis(400));
        during += 1;
        lat.extend(l);
        failures.extend(f.into_iter().map(|e| {
            format!(
                "after {} flushing requests: {e}",
                sent.load(Ordering::Relaxed)
            )
        }));
    }
    let mut codes = std::collections::BTreeMap::<u16, usize>::new();
    for f in flooders {
        for (k, v) in f.join().unwrap() {
            *codes.entry(k).or_default() += v;
        }
    }
    let flush_s = started.elapsed().as_secs_f64();
    let (l, f) = verifier_fetches(&verifier, &uri, &job, 5, Duration::from_millis(50));
    lat.extend(l);
    failures.extend(f.into_iter().map(|e| format!("after the flush: {e}")));
    let signed_requests = metrics.http_signed.get();
    drop(held);
    drop(server);

    let (p50, max) = p50_max(&mut lat);
    let total: usize = codes.values().sum();
    let served = codes.get(&200).copied().unwrap_or(0);
    let report = format!(
        "one signer's {total} signed requests in {flush_s:.1} s ({:.0}/s): answers {codes:?}, \
         {served} served as a node's (its share of the replay memory {share}); the staked \
         verifier's signed fetches {}/{} ({during} during the flush), p50 {p50:.1} ms, max \
         {max:.1} ms; requests on nodes' connections {signed_requests}",
        total as f64 / flush_s,
        lat.len(),
        during + 5,
    );
    println!("{report}");
    assert_eq!(total, 4 * EACH, "{report}");
    // a signature is remembered while its time passes the check (61 s here): a flush
    // outlasting that (a slow machine) may have a share accepted per window
    let windows = 1 + (flush_s / 61.0) as usize;
    assert!((1..=share * windows).contains(&served), "{report}");
    // every request on a node's connection is the verifier's (one a fetch) or one of the
    // signer's accepted signatures: never more of those than its share
    assert!(
        signed_requests as usize <= share * windows + during + 5,
        "the signer's accepted signatures: {report}"
    );
    assert_eq!(
        codes.get(&503).copied().unwrap_or(0),
        total - served,
        "past its share the signer is a stranger: {report}"
    );
    assert!(
        during >= 3,
        "the verifier fetched during the flush: {report}"
    );
    assert!(failures.is_empty(), "{failures:?}: {report}");
}

/// `keeper serve` refuses what would make admission meaningless, saying why and what to give:
/// admission with no name to bind signatures to, a key with no stake, a floor of 0.
#[test]
fn keeper_serve_refuses_admission_it_cannot_bind_or_weigh() {
    let dir = tempfile::tempdir().unwrap();
    let key = Keypair::new().pubkey().to_string();
    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_keeper"))
            .args(["serve", "--dir"])
            .arg(dir.path())
            .args(args)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?} was accepted");
        String::from_utf8_lossy(&out.stderr).to_string()
    };
    let e = run(&["--listen", "0.0.0.0:0", "--admit", &key]);
    assert!(
        e.contains("--public-url") && e.contains("names no host"),
        "{e}"
    );
    let e = run(&["--listen", "127.0.0.1:0", "--admit", &format!("{key}=0")]);
    assert!(e.contains("below --admit-min-stake"), "{e}");
    let e = run(&["--listen", "127.0.0.1:0", "--admit", &format!("{key}=lots")]);
    assert!(e.contains("whole number"), "{e}");
    let e = run(&[
        "--listen",
        "127.0.0.1:0",
        "--admit-min-stake",
        "0",
        "--admit",
        &key,
    ]);
    assert!(
        e.contains("--admit-min-stake 0") && e.contains("at least 1"),
        "{e}"
    );
    let e = run(&["--listen", "127.0.0.1:0", "--public-url", "store.example"]);
    assert!(
        e.contains("--public-url") && e.contains("http(s) URL"),
        "{e}"
    );
}

/// A node fetching from a server under a name the server was not told (a store behind a
/// name its operator did not give it) gets the 403 and asks again unsigned: it is served, as
/// a stranger, and the server counts the refusal.
#[test]
fn a_node_asking_a_server_under_a_name_it_does_not_know_is_served_as_a_stranger() {
    let store = Arc::new(ResultStore::default());
    let (root, job) = big_result(&store);
    let limits = ServerLimits {
        own_hosts: own_hosts(Some("http://store.test"), "0.0.0.0:9".parse().unwrap()),
        ..ServerLimits::default()
    };
    assert_eq!(
        limits.own_hosts,
        ["store.test"],
        "a wildcard address names nothing"
    );
    let metrics = Arc::new(Metrics::default());
    let server =
        results::server::serve_with(store, metrics.clone(), "127.0.0.1:0", limits).unwrap();
    let node = Keypair::new();
    server.admitted.write().unwrap().insert(node.pubkey(), 1);
    let uri = format!("http://{}/r/{}", server.addr, hex(&root));
    let tiles = fetcher(&node).fetch(&uri, &job, &[1, 2, 3]).unwrap();
    assert_eq!(tiles.len(), 3);
    assert_eq!(metrics.http_signed_elsewhere.get(), 1);
    assert_eq!(metrics.http_signed.get(), 0, "served as a stranger");
}

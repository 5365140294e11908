//! Hostile clients against a provider's results server: a reader that stops reading, huge
//! `tiles?i=` lists, a thousand idle connections. While they run, verifiers still fetch their
//! samples in time and the honest providers are Accepted. Attackers connect from other
//! loopback addresses (127.0.0.2, …), so they are other peers than the verifiers.

mod common;

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpStream},
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use compute_market_keeper::{
    compute::{cpu::CpuBackend, Backend},
    demo::{DemoConfig, Scenario},
    metrics::Metrics,
    results::{self, hex, FetchPolicy, ResultStore, ServerLimits},
};
use compute_market_protocol::job::JobSpec;

/// A TCP connection to `to` from the loopback address `from`.
fn connect_from(from: &str, to: SocketAddr) -> TcpStream {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    // a small receive buffer: a reader that stops reading stalls the sender sooner
    s.set_recv_buffer_size(4096).unwrap();
    s.bind(&SocketAddr::new(from.parse().unwrap(), 0).into())
        .unwrap();
    s.connect(&to.into()).unwrap();
    s.into()
}

/// Sends a GET of `path` on `s`.
fn get(s: &mut TcpStream, path: &str) -> std::io::Result<()> {
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n")
}

/// The status code of the response on `s` (0 when the connection closed first).
fn status(s: &mut TcpStream) -> u16 {
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut b = [0u8; 12];
    match s.read_exact(&mut b) {
        Ok(()) => std::str::from_utf8(&b[9..12])
            .ok()
            .and_then(|c| c.parse().ok())
            .unwrap_or(0),
        Err(_) => 0,
    }
}

/// A large result (16 MiB of tiles) in `store`: what the attackers ask for.
fn big(store: &ResultStore) -> ([u8; 32], JobSpec) {
    let job = JobSpec::hash_batch(2048, 256, 1, [9; 32]);
    let tiles = CpuBackend.run(&job).unwrap();
    let (root, _) = store.publish([9; 32], job, tiles).unwrap();
    (root, job)
}

#[test]
fn hostile_clients_do_not_keep_verifiers_from_their_samples() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = DemoConfig {
        tasks: 8,
        ..Default::default()
    };
    let mut s = Scenario::new(&cfg, Arc::new(CpuBackend), dir.path()).unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let served = Arc::new(ResultStore::serving_at(format!("http://127.0.0.1:{port}")));
    let metrics = Arc::new(Metrics::default());
    let server = results::serve(
        served.clone(),
        metrics.clone(),
        &format!("127.0.0.1:{port}"),
    )
    .unwrap();
    let addr = server.addr;
    for p in &mut s.providers {
        p.ctx.store = served.clone();
    }
    let fetching = Arc::new(ResultStore::default().with_policy(FetchPolicy::loopback()));
    for v in &mut s.verifiers {
        v.ctx.store = fetching.clone();
    }
    let (root, job) = big(&served);
    let all = format!("/r/{}/all", hex(&root));

    // 1. readers that stop reading: 16 requests for the whole 16 MiB, never read
    let mut stalled = vec![];
    for _ in 0..16 {
        let mut c = connect_from("127.0.0.2", addr);
        get(&mut c, &all).unwrap();
        stalled.push(c);
    }
    // 2. a thousand idle connections (half a request head, then nothing)
    let mut idle = vec![];
    for _ in 0..1000 {
        let mut c = connect_from("127.0.0.3", addr);
        c.write_all(b"GET /r/").unwrap();
        idle.push(c);
    }
    // 3. huge index lists, sent over and over while the market runs
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let hammer = {
        let (stop, sent) = (stop.clone(), sent.clone());
        let path = format!(
            "/r/{}/tiles?i={}",
            hex(&root),
            vec!["0"; 512 * 1024].join(",")
        );
        std::thread::spawn(move || {
            let mut statuses = vec![];
            while !stop.load(Ordering::Relaxed) {
                let mut c = connect_from("127.0.0.4", addr);
                if get(&mut c, &path).is_ok() {
                    statuses.push(status(&mut c));
                }
                sent.fetch_add(1, Ordering::Relaxed);
            }
            statuses
        })
    };

    // the market runs, its verifiers fetching from the attacked server
    let t = Instant::now();
    s.run_to_end(3_000).unwrap();
    let ran = t.elapsed();
    stop.store(true, Ordering::Relaxed);
    let statuses = hammer.join().unwrap();
    let r = s.report().unwrap();
    common::assert_outcomes(&r);

    // what a verifier's sampled fetch costs while the attack goes on
    let picked: Vec<u32> = (0..16).map(|i| i * 97 % job.tile_count()).collect();
    let mut lat = vec![];
    for _ in 0..20 {
        let t = Instant::now();
        let served_tiles = fetching
            .fetch(&format!("http://{addr}/r/{}", hex(&root)), &job, &picked)
            .unwrap();
        lat.push(t.elapsed().as_secs_f64() * 1e3);
        assert_eq!(served_tiles.len(), 16);
    }
    lat.sort_by(f64::total_cmp);
    let checks: Vec<f64> = s
        .verifiers
        .iter()
        .flat_map(|v| &v.records)
        .filter(|r| !r.reason.contains("careless"))
        .map(|r| r.seconds)
        .collect();
    let worst_check = checks.iter().copied().fold(0.0, f64::max);
    println!(
        "under attack: market of {} tasks ran in {:.2} s; {} honest checks, slowest {:.3} s; \
         sampled fetch of 16 tiles p50 {:.2} ms, max {:.2} ms; {} huge-list requests ({:?} …); \
         transfers refused {}",
        r.tasks.len(),
        ran.as_secs_f64(),
        checks.len(),
        worst_check,
        lat[lat.len() / 2],
        lat[lat.len() - 1],
        sent.load(Ordering::Relaxed),
        &statuses[..statuses.len().min(3)],
        metrics.http_busy.get(),
    );
    assert!(worst_check < 5.0, "every check fetched in time: {checks:?}");
    assert!(lat[lat.len() - 1] < 2_000.0, "{lat:?}");
    assert!(
        statuses.iter().all(|&c| c == 431 || c == 400 || c == 0),
        "huge lists are refused: {statuses:?}"
    );
    assert!(
        metrics.http_busy.get() >= 8,
        "the stalled peer got at most its share of transfers"
    );
    drop((stalled, idle));
}

#[test]
fn index_lists_are_bounded_and_checked() {
    let served = Arc::new(ResultStore::default());
    let (root, job) = big(&served);
    let server = results::serve(served, Arc::new(Metrics::default()), "127.0.0.1:0").unwrap();
    let ask = |list: &str| {
        let mut c = TcpStream::connect(server.addr).unwrap();
        // a server that refuses a head may close before the client has written all of it
        match get(&mut c, &format!("/r/{}/tiles?i={list}", hex(&root))) {
            Ok(()) => status(&mut c),
            Err(_) => 0,
        }
    };
    let t = Instant::now();
    // 1 MiB of request line: refused by the head limit before anything is parsed
    let huge = ask(&vec!["0"; 512 * 1024].join(","));
    assert!(huge == 431 || huge == 0, "{huge}");
    // under the head limit, but repeats, out-of-range indices and junk are refused
    assert_eq!(ask(&vec!["0"; 20_000].join(",")), 400);
    assert_eq!(ask(&job.tile_count().to_string()), 400);
    assert_eq!(ask("1,x"), 400);
    assert_eq!(ask(""), 400);
    // as many distinct indices as a verifier may sample (k ≤ 256), not one more
    let many: Vec<String> = (0..257).map(|i| i.to_string()).collect();
    assert_eq!(ask(&many[..256].join(",")), 200);
    assert_eq!(ask(&many.join(",")), 400);
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
}

#[test]
fn a_stalled_reader_loses_its_transfer_and_its_peer_is_capped() {
    let served = Arc::new(ResultStore::default());
    let (root, _) = big(&served);
    let metrics = Arc::new(Metrics::default());
    let limits = ServerLimits {
        transfers_per_peer: 1,
        stall_timeout: Duration::from_secs(1),
        ..ServerLimits::default()
    };
    let server =
        results::server::serve_with(served, metrics.clone(), "127.0.0.1:0", limits).unwrap();
    let all = format!("/r/{}/all", hex(&root));
    let mut stalled = connect_from("127.0.0.2", server.addr);
    get(&mut stalled, &all).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    // the same peer's second transfer is refused while the first holds its place...
    let mut second = connect_from("127.0.0.2", server.addr);
    get(&mut second, &all).unwrap();
    assert_eq!(status(&mut second), 503);
    // ...another peer is served
    let mut other = connect_from("127.0.0.5", server.addr);
    get(&mut other, &format!("/r/{}/tiles?i=1,2", hex(&root))).unwrap();
    assert_eq!(status(&mut other), 200);
    // once the stalled transfer stood still for the stall timeout, it is closed
    let t = Instant::now();
    while metrics.http_stalled.get() == 0 {
        assert!(t.elapsed() < Duration::from_secs(10), "never closed");
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut third = connect_from("127.0.0.2", server.addr);
    get(&mut third, &format!("/r/{}/tiles?i=1", hex(&root))).unwrap();
    assert_eq!(status(&mut third), 200, "its place was freed");
    drop(stalled);
}

/// Bulk transfers (a client pulling a finished result) fill the server's bulk pool; a verifier
/// fetching a result in its voting window still gets its samples at once, from the urgent pool.
#[test]
fn bulk_downloads_do_not_keep_a_verifier_from_a_result_in_its_voting_window() {
    let store = Arc::new(ResultStore::default());
    let limits = ServerLimits {
        transfers: 2,
        transfers_per_peer: 2,
        urgent_transfers: 4,
        urgent_per_peer: 2,
        ..ServerLimits::default()
    };
    let server = results::server::serve_with(
        store.clone(),
        Arc::new(Metrics::default()),
        "127.0.0.1:0",
        limits,
    )
    .unwrap();
    let addr = server.addr;
    let (cold, _) = big(&store);
    let hot_job = JobSpec::hash_batch(64, 16, 1, [4; 32]);
    let (hot, _) = store
        .publish([4; 32], hot_job, CpuBackend.run(&hot_job).unwrap())
        .unwrap();
    store.set_hot(hot, Instant::now() + Duration::from_secs(60));
    // two bulk downloads that are not read: the bulk pool is full
    let mut bulk = vec![];
    for from in ["127.0.0.2", "127.0.0.3"] {
        let mut c = connect_from(from, addr);
        get(&mut c, &format!("/r/{}/all", hex(&cold))).unwrap();
        bulk.push(c);
    }
    std::thread::sleep(Duration::from_millis(200));
    let mut third = connect_from("127.0.0.5", addr);
    get(&mut third, &format!("/r/{}/all", hex(&cold))).unwrap();
    assert_eq!(status(&mut third), 503, "the bulk pool is full");
    // the verifier's sampled fetch of the hot result
    let t = Instant::now();
    let mut v = connect_from("127.0.0.4", addr);
    get(&mut v, &format!("/r/{}/tiles?i=3,1,7", hex(&hot))).unwrap();
    assert_eq!(status(&mut v), 200, "served from the urgent pool");
    let waited = t.elapsed();
    println!("verifier's samples answered in {waited:?} with the bulk pool full");
    assert!(waited < Duration::from_secs(2), "{waited:?}");
    // and its whole result too (a MatMulModP verifier reads all of C)
    let mut v = connect_from("127.0.0.4", addr);
    get(&mut v, &format!("/r/{}/all", hex(&hot))).unwrap();
    assert_eq!(status(&mut v), 200);
    drop(bulk);
}

/// CORS only for the origins configured: none by default; a configured origin may preflight a
/// `PUT /c/…` and read a `GET`; another origin gets no CORS headers; `/metrics` never has them;
/// an origin with a path is refused by name when the server starts.
#[test]
fn cors_is_granted_to_configured_origins_only() {
    let send = |addr: SocketAddr, head: &str| -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        write!(s, "{head}Host: x\r\nConnection: close\r\n\r\n").unwrap();
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out.to_ascii_lowercase()
    };
    let object = hex(&compute_market_protocol::hash::hashv(&[b"nothing here"]));
    let serve = |origins: &[&str]| {
        let limits = ServerLimits {
            cors_origins: origins.iter().map(|o| o.to_string()).collect(),
            ..ServerLimits::default()
        };
        results::server::serve_with(
            Arc::new(ResultStore::default()),
            Arc::new(Metrics::default()),
            "127.0.0.1:0",
            limits,
        )
    };
    let get_from = |addr, origin: &str, path: &str| {
        send(
            addr,
            &format!("GET {path} HTTP/1.1\r\nOrigin: {origin}\r\n"),
        )
    };
    let preflight = |addr, origin: &str| {
        send(
            addr,
            &format!("OPTIONS /c/{object} HTTP/1.1\r\nOrigin: {origin}\r\nAccess-Control-Request-Method: PUT\r\n"),
        )
    };
    // none configured: no CORS headers for anyone
    let closed = serve(&[]).unwrap();
    let r = get_from(closed.addr, "https://app.example", &format!("/c/{object}"));
    assert!(!r.contains("access-control-allow-origin"), "{r}");
    closed.shutdown();
    // one origin configured
    let open = serve(&["https://app.example"]).unwrap();
    let r = preflight(open.addr, "https://app.example");
    assert!(
        r.contains("access-control-allow-origin: https://app.example"),
        "{r}"
    );
    assert!(r.contains("put"), "PUT allowed: {r}");
    let r = get_from(open.addr, "https://app.example", &format!("/c/{object}"));
    assert!(
        r.contains("access-control-allow-origin: https://app.example"),
        "{r}"
    );
    let r = preflight(open.addr, "https://evil.example");
    assert!(
        !r.contains("access-control-allow-origin"),
        "another origin: {r}"
    );
    let r = get_from(open.addr, "https://app.example", "/metrics");
    assert!(
        r.starts_with("http/1.1 200") && !r.contains("access-control-allow-origin"),
        "/metrics: {r}"
    );
    open.shutdown();
    let e = serve(&["https://app.example/path"])
        .err()
        .expect("refused")
        .to_string();
    assert!(
        e.contains("an origin is scheme://host[:port] (no path), or *"),
        "{e}"
    );
}

/// A request head past `max_request_head` (one 100 KiB header) is refused at once — 431, or
/// the connection closed — not answered after the header timeout.
#[test]
fn an_oversized_head_is_refused_at_once() {
    let served = Arc::new(ResultStore::default());
    let (root, _) = big(&served);
    let server = results::serve(served, Arc::new(Metrics::default()), "127.0.0.1:0").unwrap();
    let mut c = TcpStream::connect(server.addr).unwrap();
    let t = Instant::now();
    let head = format!(
        "GET /r/{}/tiles?i=1 HTTP/1.1\r\nHost: x\r\nX-Padding: {}\r\n\r\n",
        hex(&root),
        "a".repeat(100 << 10)
    );
    // the server may close before all of it is written
    let code = match c.write_all(head.as_bytes()) {
        Ok(()) => status(&mut c),
        Err(_) => 0,
    };
    let took = t.elapsed();
    println!("a 100 KiB header: {code} after {took:?}");
    assert!(code == 431 || code == 0, "{code}");
    assert!(took < Duration::from_secs(2), "{took:?}");
}

/// A node's signed request draws from a pool of transfers strangers cannot exhaust: with the
/// strangers' pool held by readers that stopped reading, a stranger's fetch is refused (503)
/// and the admitted verifier's, signed with its key, is served; a key the server does not
/// admit is a stranger's.
#[test]
fn a_nodes_signed_fetch_is_served_when_strangers_hold_every_transfer() {
    use solana_signer::Signer;
    let store = Arc::new(ResultStore::default());
    let (root, job) = big(&store);
    let limits = ServerLimits {
        transfers: 2,
        transfers_per_peer: 1,
        ..ServerLimits::default()
    };
    let metrics = Arc::new(Metrics::default());
    let server =
        results::server::serve_with(store, metrics.clone(), "127.0.0.1:0", limits).unwrap();
    let node = solana_keypair::Keypair::new();
    server.admitted.write().unwrap().insert(node.pubkey(), 1);
    let mut stalled = vec![];
    for from in ["127.0.0.2", "127.0.0.3"] {
        let mut c = connect_from(from, server.addr);
        get(&mut c, &format!("/r/{}/all", hex(&root))).unwrap();
        stalled.push(c);
    }
    std::thread::sleep(Duration::from_millis(200));
    let uri = format!("http://{}/r/{}", server.addr, hex(&root));
    let fetcher = |kp: Option<&solana_keypair::Keypair>| {
        let s = ResultStore::default().with_policy(FetchPolicy::loopback());
        match kp {
            Some(kp) => s.with_signer(Arc::new(
                solana_keypair::Keypair::try_from(&kp.to_bytes()[..]).unwrap(),
            )),
            None => s,
        }
    };
    let stranger = fetcher(None).fetch(&uri, &job, &[1, 2, 3]);
    assert!(
        matches!(&stranger, Err(results::FetchError::Unavailable(e)) if e.contains("503")),
        "{stranger:?}"
    );
    let unknown = fetcher(Some(&solana_keypair::Keypair::new())).fetch(&uri, &job, &[1, 2, 3]);
    assert!(unknown.is_err(), "a key not admitted is a stranger's");
    let signed = fetcher(Some(&node));
    for _ in 0..5 {
        assert_eq!(signed.fetch(&uri, &job, &[1, 2, 3]).unwrap().len(), 3);
    }
    assert!(metrics.http_signed.get() >= 5);
    drop(stalled);
}

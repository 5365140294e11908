//! A result from several sources (PROTOCOL §8.12): keepers that kept what their verifier checked
//! serve it at the provider's URL shape, and a client gathers it from all of them, tile by
//! tile, each checked against the root. Real HTTP servers on loopback: a provider that is
//! gone, verifiers holding parts of the result (or all of it), and a hostile keeper that
//! serves wrong tiles with right proofs.

use std::{
    io::{Read, Write},
    net::TcpListener,
    sync::Arc,
    time::{Duration, SystemTime},
};

use compute_market_keeper::{
    compute::{cpu::CpuBackend, Backend},
    metrics::Metrics,
    results::{
        self, hex, reserve::Reserve, sources::result_url, FetchPolicy, HttpServer, ResultStore,
        ServerLimits,
    },
    verify::{commit, ProvenTile},
};
use compute_market_protocol::{hash::Digest, job::JobSpec};

fn policy() -> FetchPolicy {
    FetchPolicy {
        allow_loopback: true,
        timeout: Duration::from_secs(5),
        connect_timeout: Duration::from_secs(2),
        ..FetchPolicy::default()
    }
}

/// A keeper's server over `store` on a free loopback port; its base URL.
fn keeper(store: ResultStore) -> (HttpServer, Arc<ResultStore>, String) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", l.local_addr().unwrap());
    let store = Arc::new(store);
    let s = results::server::serve_listener(
        store.clone(),
        Arc::new(Metrics::default()),
        l,
        ServerLimits::default(),
    )
    .unwrap();
    (s, store, base)
}

/// A loopback address where nothing listens (a provider whose keeper was stopped).
fn gone() -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", l.local_addr().unwrap());
    drop(l);
    base
}

/// A hostile keeper: `/all` is 404, `/tiles?i=…` answers every asked tile with its right
/// proof and wrong bytes. Serves `conns` connections, then stops.
fn hostile(job: JobSpec, tiles: Vec<Vec<u8>>) -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", l.local_addr().unwrap());
    std::thread::spawn(move || {
        let tree = commit(&tiles);
        for s in l.incoming() {
            let Ok(mut s) = s else { break };
            let mut head = vec![];
            let mut b = [0u8; 4096];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut b) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&b[..n]),
                }
            }
            let head = String::from_utf8_lossy(&head).to_string();
            let path = head.split_whitespace().nth(1).unwrap_or("").to_string();
            let (status, body) = match path.split_once("/tiles?i=") {
                Some((_, list)) => {
                    let served: Vec<ProvenTile> = list
                        .split(',')
                        .filter_map(|i| i.parse::<u32>().ok())
                        .filter(|&i| i < job.tile_count())
                        .map(|i| {
                            let mut tile = tiles[i as usize].clone();
                            tile[0] ^= 0xff;
                            ProvenTile {
                                index: i,
                                tile,
                                proof: tree.proof(i).unwrap(),
                            }
                        })
                        .collect();
                    ("200 OK", results::wire::encode_proven(&served))
                }
                None => ("404 Not Found", b"nothing served under that root".to_vec()),
            };
            let _ = write!(
                s,
                "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = s.write_all(&body);
        }
    });
    base
}

struct Fixture {
    job: JobSpec,
    tiles: Vec<Vec<u8>>,
    root: Digest,
}

impl Fixture {
    fn new() -> Self {
        // 2 × 3 tiles of C, ragged on both sides
        let job = JobSpec::matmul(100, 70, 130, [5; 32]);
        let tiles = CpuBackend.run(&job).unwrap();
        let root = commit(&tiles).root();
        Fixture { job, tiles, root }
    }

    fn proven(&self, indices: &[u32]) -> Vec<ProvenTile> {
        let tree = commit(&self.tiles);
        indices
            .iter()
            .map(|&i| ProvenTile {
                index: i,
                tile: self.tiles[i as usize].clone(),
                proof: tree.proof(i).unwrap(),
            })
            .collect()
    }

    /// A verifier's keeper that kept tiles `indices` of the result (its sample).
    fn sampled_at(&self, indices: &[u32]) -> (HttpServer, String) {
        let store = ResultStore::default();
        assert!(store
            .reserve
            .keep_tiles(self.job, self.root, &self.proven(indices), far())
            .unwrap());
        let (s, _, base) = keeper(store);
        (s, result_url(&base, &self.root))
    }
}

fn far() -> SystemTime {
    SystemTime::now() + Duration::from_secs(3600)
}

fn client() -> ResultStore {
    ResultStore::default().with_policy(policy())
}

#[test]
fn a_result_is_assembled_from_verifiers_holding_parts_of_it_and_a_wrong_tile_is_never_taken() {
    let f = Fixture::new();
    assert_eq!(f.job.tile_count(), 6);
    let provider = result_url(&gone(), &f.root);
    let (_a, first) = f.sampled_at(&[0, 2, 4]);
    let liar = result_url(&hostile(f.job, f.tiles.clone()), &f.root);
    let (_b, second) = f.sampled_at(&[1, 3, 4, 5]);
    let sources = vec![
        provider.clone(),
        first.clone(),
        liar.clone(),
        second.clone(),
    ];
    let g = client()
        .gather_all(&sources, &f.job, &f.root, None)
        .unwrap();
    assert!(g.tiles == f.tiles, "the result the provider computed");
    assert_eq!(g.served, vec![(first.clone(), 3), (second.clone(), 3)]);
    // the provider did not answer; the liar's tiles were refused, none of them taken
    assert_eq!(g.failed.len(), 2, "{:?}", g.failed);
    assert!(
        g.failed[0].starts_with(&provider) && g.failed[0].contains("unreachable"),
        "{:?}",
        g.failed
    );
    assert!(
        g.failed[1].starts_with(&liar) && g.failed[1].contains("do not prove"),
        "{:?}",
        g.failed
    );
    // tiles asked with proofs: the liar's wrong tile 1 skipped, the right one found later
    let g = client()
        .gather(
            &[liar.clone(), first.clone(), second.clone()],
            &f.job,
            &f.root,
            &[1, 4],
            None,
        )
        .unwrap();
    let want = f.proven(&[1, 4]);
    assert_eq!(
        g.tiles.iter().map(|t| t.index).collect::<Vec<_>>(),
        vec![1, 4]
    );
    assert!(g.tiles.iter().zip(&want).all(|(a, b)| a.tile == b.tile));
    assert_eq!(g.served, vec![(first.clone(), 1), (second.clone(), 1)]);
    assert!(
        g.failed[0].contains("served 2 tiles that do not prove"),
        "{:?}",
        g.failed
    );
}

#[test]
fn a_tile_nobody_serves_is_an_error_naming_every_source_tried() {
    let f = Fixture::new();
    let provider = result_url(&gone(), &f.root);
    let (_a, first) = f.sampled_at(&[0, 2]);
    let liar = result_url(&hostile(f.job, f.tiles.clone()), &f.root);
    let e = client()
        .gather_all(
            &[provider.clone(), first.clone(), liar.clone()],
            &f.job,
            &f.root,
            None,
        )
        .unwrap_err()
        .to_string();
    assert!(e.contains("no source served 4 of the 6 tiles"), "{e}");
    assert!(e.contains("tiles 1, 3, 4, 5"), "{e}");
    assert!(e.contains(&hex(&f.root)), "{e}");
    for s in [&provider, &first, &liar] {
        assert!(e.contains(s.as_str()), "{s} named: {e}");
    }
    assert!(e.contains(&format!("{first}: served 2 tiles")), "{e}");
    // a keeper that holds nothing under the root
    let (_c, empty_base) = {
        let (s, _, b) = keeper(ResultStore::default());
        (s, b)
    };
    let nothing = result_url(&empty_base, &f.root);
    let e = client()
        .gather(&[nothing.clone()], &f.job, &f.root, &[0], None)
        .unwrap_err()
        .to_string();
    assert!(e.contains(&nothing) && e.contains("404"), "{e}");
}

#[test]
fn a_verifier_that_kept_the_whole_result_serves_it_as_the_provider_did() {
    let f = Fixture::new();
    let store = ResultStore::default();
    assert!(store
        .reserve
        .keep_whole([1; 32], f.job, f.root, f.tiles.clone(), far())
        .unwrap());
    let (_v, _, base) = keeper(store);
    let at = result_url(&base, &f.root);
    // the URL shape of the provider's store: the whole result, and tiles with their proofs
    let c = client();
    assert!(c.fetch_all(&at, &f.job).unwrap() == f.tiles);
    let served = c.fetch(&at, &f.job, &[5, 0]).unwrap();
    let want = f.proven(&[5, 0]);
    assert_eq!(
        served
            .iter()
            .map(|t| (t.index, &t.tile, &t.proof))
            .collect::<Vec<_>>(),
        want.iter()
            .map(|t| (t.index, &t.tile, &t.proof))
            .collect::<Vec<_>>()
    );
    let provider = result_url(&gone(), &f.root);
    let g = c
        .gather_all(&[provider, at.clone()], &f.job, &f.root, None)
        .unwrap();
    assert!(g.tiles == f.tiles);
    assert_eq!(g.served, vec![(at, 6)]);
    // a keeper that kept only a sample refuses /all by name, and serves what it holds
    let (_s, sampled) = f.sampled_at(&[3]);
    let e = c.fetch_all(&sampled, &f.job).unwrap_err().to_string();
    assert!(e.contains("404"), "{e}");
    let held = c.fetch_held(&sampled, &f.job, &[1, 3, 5], None).unwrap();
    assert_eq!(held.iter().map(|t| t.index).collect::<Vec<_>>(), vec![3]);
    assert!(c
        .fetch_held(&sampled, &f.job, &[0], None)
        .unwrap()
        .is_empty());
}

#[test]
fn a_reserve_past_its_time_serves_nothing() {
    let f = Fixture::new();
    let store = ResultStore::default().with_reserve(Reserve::memory(1 << 20, Duration::ZERO));
    let soon = SystemTime::now() + Duration::from_millis(300);
    assert!(store
        .reserve
        .keep_whole([1; 32], f.job, f.root, f.tiles.clone(), soon)
        .unwrap());
    let (_v, store, base) = keeper(store);
    let at = result_url(&base, &f.root);
    assert!(client().fetch_all(&at, &f.job).is_ok());
    std::thread::sleep(Duration::from_millis(400));
    let e = client().fetch_all(&at, &f.job).unwrap_err().to_string();
    assert!(e.contains("404"), "{e}");
    assert_eq!(store.reserve.sweep(SystemTime::now()), 1);
    assert_eq!(store.reserve.stats().results, 0);
}

/// The verifier role keeps what it checked (PROTOCOL §8.12): of a `MatMulModP` the whole
/// result, of a `HashBatch` exactly the tiles its seed drew for it, with their proofs; a
/// careless seat that checked nothing keeps nothing. Served by the provider over HTTP, each
/// verifier with a store of its own.
#[test]
fn verifiers_keep_the_whole_matmul_they_hashed_and_the_hash_tiles_they_sampled() {
    use compute_market::pda;
    use compute_market_keeper::{
        chain::{Chain, ChainExt},
        demo::{DemoConfig, Scenario},
        verify::distinct,
    };
    use compute_market_protocol::{job::JobKind, sampling::sample_indices};
    let dir = tempfile::tempdir().unwrap();
    let cfg = DemoConfig {
        tasks: 2,
        corrupt_fraction: 0.0,
        ..Default::default()
    };
    let mut s = Scenario::new(&cfg, Arc::new(CpuBackend), dir.path()).unwrap();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", l.local_addr().unwrap());
    let served = Arc::new(ResultStore::serving_at(base));
    let _server = results::server::serve_listener(
        served.clone(),
        Arc::new(Metrics::default()),
        l,
        ServerLimits::default(),
    )
    .unwrap();
    for p in &mut s.providers {
        p.ctx.store = served.clone();
    }
    for v in &mut s.verifiers {
        v.ctx.store = Arc::new(ResultStore::default().with_policy(policy()));
    }
    // each task's last drawn round: its seed, samples, root and the seats that joined it (a
    // verifier checks before it joins)
    let mut rounds = std::collections::HashMap::new();
    let start = s.chain.slot().unwrap();
    while !s.done() {
        assert!(
            s.chain.slot().unwrap() - start < 3_000,
            "the market did not finish"
        );
        s.tick().unwrap();
        for (k, t) in s.chain.tasks_of(&pda::market(1)).unwrap() {
            if t.seed_drawn {
                let voters: Vec<_> = s
                    .chain
                    .votes(&k)
                    .unwrap()
                    .into_iter()
                    .filter(|(_, v)| v.round == t.round)
                    .map(|(_, v)| v.node)
                    .collect();
                rounds.insert(k, (t.clone(), voters));
            }
        }
    }
    let careless = s.verifiers.len() - 1;
    let mut checked = (0, 0);
    for (k, job, _) in &s.tasks {
        let (t, voters) = &rounds[k];
        assert_eq!(
            s.verdicts[k].0,
            compute_market::state::TaskStatus::Accepted,
            "{k}"
        );
        for (i, v) in s.verifiers.iter().enumerate() {
            let reserve = &v.ctx.store.reserve;
            if i == careless || !voters.contains(&v.ctx.node) {
                assert!(
                    i != careless || reserve.stats().results == 0,
                    "a careless seat keeps nothing"
                );
                continue;
            }
            match job.kind {
                JobKind::MatMulModP => {
                    let e = reserve
                        .whole(&t.result_root)
                        .expect("the whole result kept");
                    assert!(
                        e.tiles().unwrap()
                            == served.entry(&t.result_root).unwrap().tiles().unwrap()
                    );
                    checked.0 += 1;
                }
                _ => {
                    let drawn = distinct(&sample_indices(
                        &t.seed,
                        &v.ctx.node.to_bytes(),
                        u32::from(t.samples),
                        t.tile_count,
                    ));
                    let kept = reserve.sampled(&t.result_root).expect("its sample kept");
                    let mut want = drawn.clone();
                    want.sort_unstable();
                    assert_eq!(kept.tiles.keys().copied().collect::<Vec<_>>(), want);
                    assert!(kept.tiles.values().all(|x| results::reserve::proves(
                        job,
                        &t.result_root,
                        x
                    )));
                    assert!(reserve.whole(&t.result_root).is_none());
                    checked.1 += 1;
                }
            }
        }
    }
    assert!(checked.0 >= 2 && checked.1 >= 2, "{checked:?}");
}

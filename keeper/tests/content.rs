//! The content store over HTTP: uploads checked against their names and bounded, downloads
//! hashed, a client's inputs fetched, checked and held — each bad input refused by name.

mod common;

use std::sync::Arc;

use compute_market_keeper::{
    clientdata,
    metrics::Metrics,
    results::{self, FetchPolicy, ResultStore},
};
use compute_market_protocol::hash::hashv;

fn loopback() -> FetchPolicy {
    FetchPolicy {
        allow_loopback: true,
        ..FetchPolicy::default()
    }
}

/// A store served on a free loopback port: (store, server, base URL).
fn served() -> (Arc<ResultStore>, results::HttpServer, String) {
    let store = Arc::new(ResultStore::default().with_policy(loopback()));
    let server =
        results::serve(store.clone(), Arc::new(Metrics::default()), "127.0.0.1:0").unwrap();
    let url = format!("http://{}", server.addr);
    (store, server, url)
}

#[test]
fn objects_go_up_and_come_back_checked() {
    let (_store, _server, url) = served();
    let client = results::client::Client::new(&loopback()).unwrap();
    client.put_content(&url, b"hello".to_vec()).unwrap();
    let h = hashv(&[b"hello"]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    assert_eq!(
        client.fetch_content(&url, &h, 100, deadline, None).unwrap(),
        b"hello"
    );
    // a body that does not hash to its name is refused, and so is a fetch past its bound
    let other = ResultStore::default().with_policy(loopback());
    let e = other
        .fetch_content(&[url.clone()], &h, 3, None)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("at most 3") || e.contains("more than the 3"),
        "{e}"
    );
    let raw = reqwest::blocking::Client::new()
        .put(format!("{url}/c/{}", results::hex(&[1; 32])))
        .body("not that")
        .send()
        .unwrap();
    assert_eq!(raw.status(), 400);
    assert!(raw.text().unwrap().contains("does not hash to its name"));
}

#[test]
fn a_clients_inputs_are_fetched_checked_and_held() {
    let (_store, _server, url) = served();
    let dir = tempfile::tempdir().unwrap();
    let (m, k, n) = (3usize, 70usize, 5usize);
    let a: Vec<u32> = (0..(m * k) as u32).collect();
    let b: Vec<u32> = (0..(k * n) as u32).map(|x| x * 3).collect();
    let pa = dir.path().join("A.safetensors");
    let pb = dir.path().join("B.safetensors");
    std::fs::write(&pa, clientdata::tensor_file("A", m, k, &a).unwrap()).unwrap();
    std::fs::write(&pb, clientdata::tensor_file("B", k, n, &b).unwrap()).unwrap();
    let prepared = clientdata::prepare_inputs(&[pa.clone(), pb.clone()]).unwrap();
    assert_eq!(prepared.job.dims, [m as u32, k as u32, n as u32]);
    clientdata::upload(&url, &prepared, &loopback()).unwrap();
    let verifier = ResultStore::default().with_policy(loopback());
    let (fetched, found) = verifier
        .ensure_inputs(&prepared.job, &[url.clone()], None)
        .unwrap();
    assert_eq!((fetched, found), (3, 0), "the manifest and two parts");
    let held = compute_market_keeper::compute::inputs::matrices(&prepared.job).unwrap();
    assert_eq!(held.a.data, a);
    assert_eq!(held.b.data, b);

    // bad inputs, refused by name before anything is posted
    let mut bad = a.clone();
    bad[5] = u32::MAX;
    std::fs::write(&pa, clientdata::tensor_file("A", m, k, &bad).unwrap()).unwrap();
    let e = clientdata::prepare_inputs(&[pa.clone(), pb.clone()])
        .err()
        .unwrap();
    assert!(format!("{e:#}").contains("element 5"), "{e:#}");
    std::fs::write(
        &pa,
        clientdata::tensor_file("A", m, k + 1, &vec![0; m * (k + 1)]).unwrap(),
    )
    .unwrap();
    let e = clientdata::prepare_inputs(&[pa.clone(), pb.clone()])
        .err()
        .unwrap();
    assert!(
        format!("{e:#}").contains("A's columns must equal B's rows"),
        "{e:#}"
    );
    // numpy's default int64: refused naming the dtype, not by its size
    let wide: Vec<u8> = a.iter().flat_map(|x| i64::from(*x).to_le_bytes()).collect();
    let view =
        safetensors::tensor::TensorView::new(safetensors::Dtype::I64, vec![m, k], &wide).unwrap();
    std::fs::write(&pa, safetensors::serialize([("A", view)], None).unwrap()).unwrap();
    let e = clientdata::prepare_inputs(&[pa.clone(), pb.clone()])
        .err()
        .unwrap();
    assert!(
        format!("{e:#}").contains("tensor \"A\" is I64; a matrix is U32"),
        "{e:#}"
    );
    std::fs::write(&pa, b"not safetensors at all").unwrap();
    let e = clientdata::prepare_inputs(&[pa, pb]).err().unwrap();
    assert!(format!("{e:#}").contains("safetensors"), "{e:#}");
}

/// Every bad input a client can post, refused by name; no provider claims such a task, so no
/// stake moves and the reward stays in escrow for the client.
/// A client's host in front of `origin` that serves other bytes for object `lie` and sends
/// object `trickle` one byte every 50 ms; everything else is relayed.
fn hostile_front(origin: String, lie: String, trickle: String) -> String {
    use std::io::Write;
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            let (origin, lie, trickle) = (origin.clone(), lie.clone(), trickle.clone());
            std::thread::spawn(move || {
                let Some((path, _)) = common::hostile::read_request(&mut s) else {
                    return;
                };
                let Ok(resp) = reqwest::blocking::get(format!("{origin}{path}")) else {
                    return;
                };
                let status = resp.status().as_u16();
                let mut body = resp.bytes().map(|b| b.to_vec()).unwrap_or_default();
                if path.ends_with(&lie) {
                    body.iter_mut().rev().take(4).for_each(|b| *b ^= 1);
                }
                let _ = write!(
                    s,
                    "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                if path.ends_with(&trickle) {
                    for b in body {
                        if s.write_all(&[b]).is_err() {
                            return;
                        }
                        std::thread::sleep(std::time::Duration::from_millis(50));
                    }
                } else {
                    let _ = s.write_all(&body);
                }
            });
        }
    });
    format!("http://127.0.0.1:{port}")
}

#[test]
fn bad_inputs_are_refused_by_name_and_never_claimed() {
    use anchor_lang::prelude::Pubkey;
    use compute_market::{pda, state::TaskStatus};
    use compute_market_keeper::{
        chain::{Chain, ChainExt},
        cli::{self, TaskTerms},
        compute::cpu::CpuBackend,
        demo::{DemoConfig, Scenario},
    };
    use compute_market_protocol::{
        job::{InputMode, JobSpec},
        manifest::{part_bound, Format, Manifest, Part, Role},
    };
    use solana_signer::Signer;

    let (_store, _server, origin) = served();
    let client = results::client::Client::new(&loopback()).unwrap();
    let (m, k, n) = (3usize, 4usize, 2usize);
    // two more A's, honest at the origin, that the client's host (a front) lies about or
    // trickles; every task's input URI is the front
    let lied = clientdata::tensor_file("A", m, k, &vec![3; m * k]).unwrap();
    let trickled = clientdata::tensor_file("A", m, k, &vec![4; m * k]).unwrap();
    let url = hostile_front(
        origin.clone(),
        results::hex(&hashv(&[&lied])),
        results::hex(&hashv(&[&trickled])),
    );
    // a second's patience, so the trickle is cut off soon
    let policy = FetchPolicy {
        timeout: std::time::Duration::from_secs(1),
        ..loopback()
    };
    let job_on = |manifest: &[u8]| {
        let mut j = JobSpec::matmul(m as u32, k as u32, n as u32, hashv(&[manifest]));
        j.input_mode = InputMode::ContentHash;
        j
    };
    let good_b = clientdata::tensor_file("B", k, n, &vec![1; k * n]).unwrap();
    client.put_content(&origin, good_b.clone()).unwrap();
    let part = |role: Role, bytes: &[u8]| Part {
        role,
        format: Format::Safetensors,
        len: bytes.len() as u64,
        hash: hashv(&[bytes]),
        slices: None,
    };
    // (what the store holds as A, the manifest's entry for A, the message)
    let mut big = vec![1u32; m * k];
    big[5] = 2_147_483_647;
    let cases: Vec<(Option<Vec<u8>>, Option<Part>, &str)> = vec![
        (
            Some(clientdata::tensor_file("A", m, k, &big).unwrap()),
            None,
            "element 5 (row 1, column 1) is 2147483647",
        ),
        (
            Some(clientdata::tensor_file("A", k, m, &vec![1; m * k]).unwrap()),
            None,
            "shape [4, 3], the job's is [3, 4]",
        ),
        (
            Some(b"not a safetensors file".to_vec()),
            None,
            "its safetensors header is",
        ),
        (None, Some(part(Role::A, b"never uploaded")), "HTTP 404"),
        (
            Some(lied),
            None,
            "served bytes whose SHA-256 is not the one asked for",
        ),
        (Some(trickled), None, "is too slow"),
        (
            None,
            Some(Part {
                len: part_bound(&job_on(b""), Role::A).unwrap() + 1,
                ..part(Role::A, b"x")
            }),
            "more than the",
        ),
    ];
    let dir = tempfile::tempdir().unwrap();
    let mut s = Scenario::new(
        &DemoConfig {
            tasks: 1,
            ..Default::default()
        },
        Arc::new(CpuBackend),
        dir.path(),
    )
    .unwrap();
    // the demo's own task first: from then on no stake is bonded
    s.run_to_end(3_000).unwrap();
    for p in &mut s.providers {
        p.ctx.store = Arc::new(ResultStore::default().with_policy(policy.clone()));
    }
    let mut posted: Vec<(Pubkey, &str)> = vec![];
    let mut manifests: Vec<Vec<u8>> = cases
        .iter()
        .map(|(a, entry, _)| {
            if let Some(a) = a {
                client.put_content(&origin, a.clone()).unwrap();
            }
            let entry = entry.unwrap_or_else(|| part(Role::A, a.as_deref().unwrap()));
            Manifest::new(vec![entry, part(Role::B, &good_b)]).encode()
        })
        .collect();
    manifests.push(b"CMIN garbage".to_vec());
    let whys: Vec<&str> = cases
        .iter()
        .map(|c| c.2)
        .chain(["malformed input manifest"])
        .collect();
    for (i, (manifest, why)) in manifests.iter().zip(&whys).enumerate() {
        client.put_content(&origin, manifest.clone()).unwrap();
        let job = job_on(manifest);
        // what a provider or verifier is told
        let fresh = ResultStore::default().with_policy(policy.clone());
        let e = fresh
            .ensure_inputs(&job, &[url.clone()], None)
            .unwrap_err()
            .to_string();
        assert!(e.contains(why), "case {i}: {e} (wanted {why})");
        let terms = TaskTerms {
            input_uri: url.clone(),
            market: 1,
            reward: 1_000_000,
            ..Default::default()
        };
        let id = 500 + i as u64;
        cli::task_post(s.chain.as_ref(), &s.client, terms, vec![(id, job)]).unwrap();
        posted.push((pda::task(&s.client.pubkey(), id), why));
    }
    let stakes: Vec<_> = s
        .providers
        .iter()
        .map(|p| {
            (
                s.chain.node(&p.ctx.node).unwrap().unwrap().free,
                p.records.len(),
            )
        })
        .collect();
    for _ in 0..40 {
        s.tick().unwrap();
    }
    // and as the daemon runs them: inputs fetched ahead of claims, on threads of their own
    for p in &mut s.providers {
        p.background = true;
    }
    for _ in 0..40 {
        s.tick().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    for (key, why) in &posted {
        let t = s.chain.task(key).unwrap().expect("still posted");
        assert_eq!(t.status, TaskStatus::Open, "{why}: nobody claimed it");
        assert_eq!(
            s.chain.token_balance(&pda::escrow(key)).unwrap(),
            1_000_000,
            "{why}: the reward is in escrow"
        );
    }
    for (p, (free, computed)) in s.providers.iter().zip(stakes) {
        let n = s.chain.node(&p.ctx.node).unwrap().unwrap();
        assert_eq!(
            (n.free, n.bonded),
            (free, 0),
            "{}: no stake moved",
            p.ctx.name
        );
        assert_eq!(
            p.records.len(),
            computed,
            "{}: computed nothing",
            p.ctx.name
        );
    }
}

/// A body is compressed only when a sample of it shrinks and it is small enough to compress on
/// the fly: random field elements go as they are, a zero-padded or low-entropy one is
/// compressed, a large one is not (the client asked for zstd every time).
#[test]
fn compression_is_used_only_when_it_pays() {
    use std::io::{Read, Write};
    let (store, _server, url) = served();
    let random: Vec<u8> = (0..256u64 << 10)
        .map(|i| (compute_market_protocol::job::splitmix64(i) & 0xff) as u8)
        .collect();
    let zeros = vec![0u8; 256 << 10];
    let addr = url.trim_start_matches("http://").to_string();
    // past the on-the-fly limit even zeros go as they are
    let large = vec![0u8; results::server::COMPRESS_MAX as usize + 1];
    for (body, compressed) in [(random, false), (zeros, true), (large, false)] {
        let h = hashv(&[&body]);
        store.content.put(&h, &body, false).unwrap();
        let mut s = std::net::TcpStream::connect(&addr).unwrap();
        write!(
            s,
            "GET /c/{} HTTP/1.1\r\nHost: x\r\nAccept-Encoding: zstd\r\nConnection: close\r\n\r\n",
            results::hex(&h)
        )
        .unwrap();
        let mut resp = vec![];
        s.read_to_end(&mut resp).unwrap();
        let head = String::from_utf8_lossy(&resp[..resp.len().min(1024)]).to_lowercase();
        assert_eq!(
            head.contains("content-encoding: zstd"),
            compressed,
            "{head}"
        );
        if !compressed {
            assert!(head.contains("content-encoding: identity"), "{head}");
            assert!(resp.len() > body.len(), "sent as it is");
        } else {
            assert!(
                resp.len() < body.len() / 10,
                "compressed: {} bytes",
                resp.len()
            );
        }
    }
}

/// Events are read only from the Compute Market program's own log lines: another program can
/// log the same bytes in a transaction that names a task (to fake a closed task's outcome).
#[test]
fn events_logged_by_another_program_are_not_ours() {
    use anchor_lang::{prelude::Pubkey, Event};
    use base64::Engine;
    use compute_market::{events::TaskClosed, state::TaskStatus};
    let fake = TaskClosed {
        task: Pubkey::new_unique(),
        status: TaskStatus::Accepted,
        refunded: 0,
        leftover_to_treasury: 0,
    };
    let data = format!(
        "Program data: {}",
        base64::engine::general_purpose::STANDARD.encode(fake.data())
    );
    let other = Pubkey::new_unique().to_string();
    let ours = compute_market::ID.to_string();
    let logs: Vec<String> = vec![
        format!("Program {other} invoke [1]"),
        data.clone(),
        format!("Program {other} success"),
        format!("Program {ours} invoke [1]"),
        format!("Program {other} invoke [2]"),
        data.clone(),
        format!("Program {other} success"),
        format!("Program {ours} success"),
    ];
    let got = compute_market_keeper::chain::decode_events::<TaskClosed>(&logs);
    assert!(got.is_empty(), "a stranger's log line was read as an event");
    let logs = vec![
        format!("Program {ours} invoke [1]"),
        data,
        format!("Program {ours} success"),
    ];
    assert_eq!(
        compute_market_keeper::chain::decode_events::<TaskClosed>(&logs).len(),
        1
    );
}

/// Inputs held for one job serve another job naming the same manifest only at the same shape.
#[test]
fn held_inputs_serve_only_the_shape_they_were_checked_for() {
    use compute_market_keeper::compute::{inputs, Matrix};
    use compute_market_protocol::job::{InputMode, JobSpec};
    let mut small = JobSpec::matmul(2, 2, 2, [0x5a; 32]);
    small.input_mode = InputMode::ContentHash;
    let m = Arc::new(Matrix {
        rows: 2,
        cols: 2,
        data: vec![1, 2, 3, 4],
    });
    inputs::hold(small.input, inputs::MatrixInputs { a: m.clone(), b: m });
    assert!(inputs::is_held(&small));
    let mut large = small;
    large.dims = [64, 2, 2];
    assert!(!inputs::is_held(&large), "another shape is not held");
    let e = inputs::matrices(&large).unwrap_err().to_string();
    assert!(e.contains("are not 64×2·2×2"), "{e}");
}

/// An upload announced larger than an object may be is refused before its body is read.
#[test]
fn an_oversized_upload_is_refused_before_it_is_read() {
    use std::io::{Read, Write};
    let (_store, _server, url) = served();
    let mut s = std::net::TcpStream::connect(url.trim_start_matches("http://")).unwrap();
    write!(
        s,
        "PUT /c/{} HTTP/1.1\r\nHost: x\r\nContent-Length: 999999999999\r\n\r\n",
        results::hex(&[7; 32])
    )
    .unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    let mut b = [0u8; 12];
    s.read_exact(&mut b).unwrap();
    assert_eq!(&b[9..12], b"413");
}

/// A front for a content store that relays requests (their `Range` included) and records each
/// one's `Range` and the body bytes it passed on; the first response is cut off after
/// `cut` body bytes (the connection drops: a crash, a network fault).
fn cutting_front(
    origin: String,
    cut: usize,
) -> (String, Arc<std::sync::Mutex<Vec<(Option<String>, usize)>>>) {
    use std::io::Write;
    let seen = Arc::new(std::sync::Mutex::new(vec![]));
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let log = seen.clone();
    std::thread::spawn(move || {
        for (n, s) in l.incoming().enumerate() {
            let Ok(mut s) = s else { continue };
            let Some((path, head)) = common::hostile::read_request(&mut s) else {
                continue;
            };
            let range = common::hostile::header(&head, "range");
            let mut req = reqwest::blocking::Client::new().get(format!("{origin}{path}"));
            if let Some(r) = &range {
                req = req.header("range", r).header("accept-encoding", "identity");
            }
            let resp = req.send().unwrap();
            let status = resp.status();
            let content_range = resp
                .headers()
                .get("content-range")
                .map(|v| v.to_str().unwrap().to_string());
            let body = resp.bytes().unwrap().to_vec();
            let send = if n == 0 {
                cut.min(body.len())
            } else {
                body.len()
            };
            let mut head = format!(
                "HTTP/1.1 {} {}\r\nContent-Length: {}\r\nConnection: close\r\n",
                status.as_u16(),
                status.canonical_reason().unwrap_or(""),
                body.len()
            );
            if let Some(c) = content_range {
                head += &format!("Content-Range: {c}\r\n");
            }
            head += "\r\n";
            let _ = s.write_all(head.as_bytes());
            let _ = s.write_all(&body[..send]);
            log.lock().unwrap().push((range, send));
        }
    });
    (format!("http://127.0.0.1:{port}"), seen)
}

#[test]
fn a_download_cut_off_resumes_after_a_restart_from_what_it_had() {
    let (origin, _server, url) = served();
    // 3 MiB of an object (over the resumable size), cut after 1 MiB and a bit
    let object: Vec<u8> = (0..3u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let h = hashv(&[&object]);
    origin.content.put(&h, &object, false).unwrap();
    let cut = (1 << 20) + 12_345;
    let (front, seen) = cutting_front(url, cut);
    let dir = tempfile::tempdir().unwrap();
    {
        let first = ResultStore::open(dir.path(), 1 << 30, None)
            .unwrap()
            .with_policy(loopback());
        let e = first
            .fetch_content(&[front.clone()], &h, object.len() as u64, None)
            .unwrap_err();
        assert!(e.is_transient(), "a cut download is worth retrying: {e}");
        assert!(
            !first.content.contains(&h),
            "nothing half-kept as the object"
        );
    } // the keeper stops here; what it had is on disk
    let partial = std::fs::read_dir(dir.path().join("content/partial"))
        .unwrap()
        .count();
    assert_eq!(partial, 1, "the bytes received are kept for the resume");
    let restarted = ResultStore::open(dir.path(), 1 << 30, None)
        .unwrap()
        .with_policy(loopback());
    let (got, hit) = restarted
        .fetch_content(&[front.clone()], &h, object.len() as u64, None)
        .unwrap();
    assert!(!hit);
    assert!(*got == object, "the resumed object is the object");
    assert!(restarted.content.contains(&h), "kept whole");
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen,
        vec![
            (None, cut),
            (Some(format!("bytes={cut}-")), object.len() - cut)
        ],
        "asked only for what it did not have, and got exactly that"
    );
    assert_eq!(
        std::fs::read_dir(dir.path().join("content/partial"))
            .unwrap()
            .count(),
        0,
        "nothing left to resume"
    );
    // a partial holding bytes of something else (another source lied) is fetched again whole
    let other: Vec<u8> = vec![9u8; 2 << 20];
    let oh = hashv(&[&other]);
    origin.content.put(&oh, &other, false).unwrap();
    let p = restarted.content.partial_path(&oh, &front).unwrap();
    std::fs::write(&p, vec![1u8; 1 << 20]).unwrap();
    let (got, _) = restarted
        .fetch_content(&[front], &oh, other.len() as u64, None)
        .unwrap();
    assert!(
        *got == other,
        "a poisoned prefix is dropped, the object fetched whole"
    );
}

/// The CPU backend, except that jobs on `held_seed` wait until `open` is set (a long
/// computation the test controls).
struct Gated {
    open: Arc<std::sync::atomic::AtomicBool>,
    held_seed: [u8; 32],
}

impl compute_market_keeper::compute::Backend for Gated {
    fn name(&self) -> String {
        "gated cpu".into()
    }
    fn tiles(
        &self,
        job: &compute_market_protocol::job::JobSpec,
        indices: &[u32],
    ) -> anyhow::Result<Vec<Vec<u8>>> {
        while job.input == self.held_seed && !self.open.load(std::sync::atomic::Ordering::SeqCst) {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        compute_market_keeper::compute::cpu::CpuBackend.tiles(job, indices)
    }
    fn freivalds(
        &self,
        job: &compute_market_protocol::job::JobSpec,
        rs: &[Vec<u32>],
    ) -> anyhow::Result<Vec<Vec<u32>>> {
        compute_market_keeper::compute::cpu::CpuBackend.freivalds(job, rs)
    }
}

#[test]
fn a_busy_provider_fetches_the_next_tasks_inputs_before_it_can_claim_it() {
    use compute_market::{pda, state::TaskStatus};
    use compute_market_keeper::{
        chain::ChainExt,
        cli::{self, TaskTerms},
        compute::{cpu::CpuBackend, inputs},
        demo::{DemoConfig, Scenario},
    };
    use compute_market_protocol::job::JobSpec;
    use solana_signer::Signer;

    let (_origin, _server, url) = served();
    let dir = tempfile::tempdir().unwrap();
    let mut s = Scenario::new(
        &DemoConfig {
            providers: 2,
            tasks: 1,
            ..Default::default()
        },
        Arc::new(CpuBackend),
        dir.path(),
    )
    .unwrap();
    s.run_to_end(3_000).unwrap();
    // one provider, holding one task at a time, computing in the background as the daemon does
    let open = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let held_seed = [0x5a; 32];
    s.providers[1].max_active = 0;
    let p = &mut s.providers[0];
    (p.max_active, p.background, p.corrupt_fraction) = (1, true, 0.0);
    p.ctx.backend = Arc::new(Gated {
        open: open.clone(),
        held_seed,
    });
    p.ctx.store = Arc::new(ResultStore::default().with_policy(loopback()));
    let store = p.ctx.store.clone();
    let me = p.ctx.node;
    let terms = |input_uri: String| TaskTerms {
        input_uri,
        market: 1,
        reward: 1_000_000,
        ..Default::default()
    };
    let (chain, client) = (s.chain.clone(), s.client.pubkey());
    let status = |id: u64| {
        chain
            .task(&pda::task(&client, id))
            .unwrap()
            .map(|t| (t.status, t.provider))
    };
    // the task that keeps it busy
    cli::task_post(
        s.chain.as_ref(),
        &s.client,
        terms(String::new()),
        vec![(700, JobSpec::matmul(64, 64, 64, held_seed))],
    )
    .unwrap();
    for _ in 0..5 {
        s.tick().unwrap();
    }
    assert_eq!(status(700), Some((TaskStatus::Claimed, me)), "busy now");
    // the next task, on the client's data
    let f = |name: &str, rows: usize, cols: usize, salt: u32| {
        let d: Vec<u32> = (0..(rows * cols) as u32).map(|x| x * 7 + salt).collect();
        let p = dir.path().join(format!("{name}.safetensors"));
        std::fs::write(&p, clientdata::tensor_file(name, rows, cols, &d).unwrap()).unwrap();
        p
    };
    let prepared = clientdata::prepare_inputs(&[f("A", 65, 70, 1), f("B", 70, 3, 2)]).unwrap();
    clientdata::upload(&url, &prepared, &loopback()).unwrap();
    cli::task_post(
        s.chain.as_ref(),
        &s.client,
        terms(url.clone()),
        vec![(701, prepared.job)],
    )
    .unwrap();
    // a pass every 20 ms (each a slot: the busy task's submit window is 60) for up to 20 slots
    // or 10 s, whichever comes first
    let start = std::time::Instant::now();
    let mut ticks = 0;
    while !inputs::is_held(&prepared.job) && ticks < 20 {
        s.tick().unwrap();
        ticks += 1;
        while !inputs::is_held(&prepared.job) && start.elapsed().as_secs() < 10 {
            std::thread::sleep(std::time::Duration::from_millis(20));
            if start.elapsed().as_millis() > 20 * ticks as u128 {
                break;
            }
        }
    }
    assert!(
        inputs::is_held(&prepared.job),
        "its inputs were fetched and checked while the provider was busy"
    );
    assert_eq!(
        store.content.bytes(),
        prepared.parts.iter().map(|p| p.len() as u64).sum::<u64>()
            + prepared.manifest.encode().len() as u64,
        "the manifest and both parts are in its content store"
    );
    assert_eq!(
        status(701).map(|s| s.0),
        Some(TaskStatus::Open),
        "not claimed while it holds as many tasks as it may"
    );
    assert_eq!(
        status(700),
        Some((TaskStatus::Claimed, me)),
        "still computing"
    );
    open.store(true, std::sync::atomic::Ordering::SeqCst);
    let start = std::time::Instant::now();
    while status(701).is_some_and(|s| s.0 == TaskStatus::Open) && start.elapsed().as_secs() < 20 {
        s.tick().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let claimed = status(701).expect("posted");
    assert!(
        claimed.0 != TaskStatus::Open && claimed.1 == me,
        "claimed once it had room: {claimed:?}"
    );
}

/// A small product's inputs (A 10 × 20, B 20 × 3) prepared for posting.
fn small_product() -> clientdata::PreparedInputs {
    let dir = tempfile::tempdir().unwrap();
    let (pa, pb) = (
        dir.path().join("A.safetensors"),
        dir.path().join("B.safetensors"),
    );
    std::fs::write(
        &pa,
        clientdata::tensor_file("A", 10, 20, &vec![1; 200]).unwrap(),
    )
    .unwrap();
    std::fs::write(
        &pb,
        clientdata::tensor_file("B", 20, 3, &vec![2; 60]).unwrap(),
    )
    .unwrap();
    clientdata::prepare_inputs(&[pa, pb]).unwrap()
}

#[test]
fn parts_the_store_holds_are_not_sent_again_and_a_held_objects_upload_is_read_to_its_end() {
    let (_store, _server, url) = served();
    let client = results::client::Client::new(&loopback()).unwrap();
    let prepared = small_product();
    let first = clientdata::upload(&url, &prepared, &loopback()).unwrap();
    assert!(first.bytes > 0 && first.held == 0, "{first:?}");
    let second = clientdata::upload(&url, &prepared, &loopback()).unwrap();
    assert_eq!(
        (second.bytes, second.held),
        (0, first.bytes),
        "uploaded once"
    );
    // a held object uploaded anyway (a race, an older client): answered after its whole body,
    // never a connection closed under the sender
    let big = vec![9u8; 24 << 20];
    assert!(client.put_content(&url, big.clone()).unwrap(), "sent");
    assert!(
        !client.put_content(&url, big.clone()).unwrap(),
        "held: not sent"
    );
    let raw = reqwest::blocking::Client::new()
        .put(format!("{url}/c/{}", results::hex(&hashv(&[&big]))))
        .body(big)
        .send()
        .unwrap();
    assert_eq!(raw.status(), 201);
}

#[test]
fn an_upload_to_a_full_store_is_refused_naming_its_budget() {
    let mut host = ResultStore::default().with_policy(loopback());
    host.content.budget = 4096;
    let host = Arc::new(host);
    let server = results::serve(host.clone(), Arc::new(Metrics::default()), "127.0.0.1:0").unwrap();
    let url = format!("http://{}", server.addr);
    let client = results::client::Client::new(&loopback()).unwrap();
    // what is in use (uploaded just now) is never evicted for a stranger's upload
    client.put_content(&url, vec![7u8; 3000]).unwrap();
    let prepared = small_product();
    let e = clientdata::upload(&url, &prepared, &loopback())
        .unwrap_err()
        .to_string();
    assert!(e.contains("uploading an input part"), "{e}");
    assert!(e.contains("507"), "{e}");
    assert!(e.contains("the content store is over its budget"), "{e}");
    assert!(
        host.content.bytes() <= 4096,
        "nothing stored past the budget"
    );
}

/// A server that answers every request with `reply` (status line and headers) and no body.
fn answering(reply: &'static str) -> String {
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            // the whole head read before answering: a socket closed with unread bytes is
            // reset, and the client would see a reset instead of the answer under test
            let mut head = Vec::new();
            let mut b = [0u8; 4096];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut b) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&b[..n]),
                }
            }
            // one answer a connection, said so: the client must not reuse it for the next
            let head = reply.strip_suffix("\r\n\r\n").unwrap_or(reply);
            let _ = s.write_all(format!("{head}\r\nConnection: close\r\n\r\n").as_bytes());
            let _ = s.shutdown(std::net::Shutdown::Write);
        }
    });
    format!("http://127.0.0.1:{port}")
}

#[test]
fn hostile_range_answers_are_refused_and_partial_downloads_stay_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let store = ResultStore::open(dir.path(), 1 << 30, None)
        .unwrap()
        .with_policy(loopback());
    let object = vec![5u8; 2 << 20];
    let h = hashv(&[&object]);
    // a resumed download answered with a Content-Length near u64::MAX: refused, no panic
    let base = answering(
        "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 1048576-2097151/2097152\r\nContent-Length: 18446744073709551613\r\n\r\n",
    );
    let p = store.content.partial_path(&h, &base).unwrap();
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(&p, &object[..1 << 20]).unwrap();
    let e = store
        .fetch_content(&[base.clone()], &h, object.len() as u64, None)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("answered part of the body to a request for all of it"),
        "the resume refused, then the whole fetch: {e}"
    );
    // a range answer for bytes it did not ask for
    let base = answering(
        "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-2097151/2097152\r\nContent-Length: 0\r\n\r\n",
    );
    let p = store.content.partial_path(&h, &base).unwrap();
    std::fs::write(&p, &object[..1 << 20]).unwrap();
    let e = store
        .fetch_content(&[base], &h, object.len() as u64, None)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("answered part of the body to a request for all of it"),
        "the resume refused, then the whole fetch: {e}"
    );
    // partial downloads are bounded by count, whoever starts them
    for i in 0..20u8 {
        let p = store.content.partial_for(&[i; 32], "http://x").unwrap();
        std::fs::write(&p, [i]).unwrap();
    }
    let left = std::fs::read_dir(p.parent().unwrap()).unwrap().count();
    assert!(
        left <= compute_market_keeper::results::content::PARTIAL_FILES,
        "{left} partial files kept"
    );
    // names that are not `<hash>.<source tag>` are swept
    std::fs::write(p.parent().unwrap().join("../../etc"), b"x").ok();
    std::fs::write(p.parent().unwrap().join("junk"), b"x").unwrap();
    store.content.partial_for(&[99; 32], "http://x").unwrap();
    assert!(!p.parent().unwrap().join("junk").exists());
}

/// A one-byte range of a large object is served without reading (or hashing) the whole
/// object: with a content budget far below the object's size it is still served (the budget
/// counts what is streamed), quickly, again and again; a HEAD reads nothing and says its
/// length; the whole object still streams, checked.
#[test]
fn ranges_and_heads_of_a_large_object_read_only_what_is_sent() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(ResultStore::open(dir.path(), 1 << 30, None).unwrap());
    let object: Vec<u8> = (0..64u32 << 18)
        .flat_map(|i| i.wrapping_mul(2654435761).to_le_bytes())
        .collect();
    assert_eq!(object.len(), 64 << 20);
    let h = hashv(&[&object]);
    store.content.put(&h, &object, false).unwrap();
    let limits = results::ServerLimits {
        content_bytes_in_flight: 1 << 20,
        ..results::ServerLimits::default()
    };
    let server =
        results::server::serve_with(store, Arc::new(Metrics::default()), "127.0.0.1:0", limits)
            .unwrap();
    let url = format!("http://{}/c/{}", server.addr, results::hex(&h));
    let http = reqwest::blocking::Client::new();
    let t = std::time::Instant::now();
    for i in 0..200u64 {
        let r = http
            .get(&url)
            .header("Range", format!("bytes={i}-{i}"))
            .send()
            .unwrap();
        assert_eq!(r.status(), 206);
        assert_eq!(
            r.headers()["content-range"],
            format!("bytes {i}-{i}/{}", object.len()).as_str()
        );
        assert_eq!(
            r.bytes().unwrap().as_ref(),
            &object[i as usize..=i as usize]
        );
    }
    let ranges = t.elapsed();
    let head = http.head(&url).send().unwrap();
    assert_eq!(head.status(), 200);
    assert_eq!(
        head.headers()["content-length"],
        object.len().to_string().as_str()
    );
    let tail = http.get(&url).header("Range", "bytes=-5").send().unwrap();
    assert_eq!(tail.status(), 206);
    assert_eq!(tail.bytes().unwrap().as_ref(), &object[object.len() - 5..]);
    let whole = http.get(&url).send().unwrap();
    assert_eq!(whole.status(), 200);
    assert!(whole.bytes().unwrap().as_ref() == &object[..]);
    println!("200 one-byte ranges of a 64 MiB object in {ranges:?}");
    assert!(ranges < std::time::Duration::from_secs(3), "{ranges:?}");
}

/// An object found on disk at start is hashed once, streaming, when first served: a file
/// corrupted while the keeper was down is deleted and never served; a good one is served and
/// trusted from then on.
#[test]
fn objects_found_on_disk_are_checked_once_when_first_served() {
    let dir = tempfile::tempdir().unwrap();
    let (good, bad) = (b"good object".to_vec(), b"bad object!".to_vec());
    let (hg, hb) = (hashv(&[&good]), hashv(&[&bad]));
    {
        let store = ResultStore::open(dir.path(), 1 << 20, None).unwrap();
        store.content.put(&hg, &good, false).unwrap();
        store.content.put(&hb, &bad, false).unwrap();
    }
    std::fs::write(
        dir.path().join("content").join(results::hex(&hb)),
        b"bad object?",
    )
    .unwrap();
    let store = Arc::new(ResultStore::open(dir.path(), 1 << 20, None).unwrap());
    let server =
        results::serve(store.clone(), Arc::new(Metrics::default()), "127.0.0.1:0").unwrap();
    let http = reqwest::blocking::Client::new();
    let get = |h: &[u8; 32]| {
        http.get(format!("http://{}/c/{}", server.addr, results::hex(h)))
            .send()
            .unwrap()
    };
    assert_eq!(get(&hb).status(), 404, "corrupted: never served");
    assert!(!store.content.contains(&hb), "and deleted");
    for _ in 0..3 {
        let r = get(&hg);
        assert_eq!(r.status(), 200);
        assert_eq!(r.bytes().unwrap().as_ref(), &good[..]);
    }
}

#[test]
fn an_upload_to_a_busy_store_waits_out_its_retry_after_and_lands() {
    use std::io::Write;
    let store = Arc::new(ResultStore::default().with_policy(loopback()));
    let limits = results::server::ServerLimits {
        uploads: 1,
        uploads_per_peer: 1,
        ..Default::default()
    };
    let server = results::server::serve_with(
        store.clone(),
        Arc::new(Metrics::default()),
        "127.0.0.1:0",
        limits,
    )
    .unwrap();
    let url = format!("http://{}", server.addr);
    // another upload holds the store's one place: its head sent, its body trickling
    let held = vec![3u8; 64];
    let mut slow = std::net::TcpStream::connect(server.addr).unwrap();
    write!(
        slow,
        "PUT /c/{} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
        results::hex(&hashv(&[&held])),
        held.len()
    )
    .unwrap();
    slow.write_all(&held[..8]).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let raw = reqwest::blocking::Client::new()
        .put(format!("{url}/c/{}", results::hex(&hashv(&[b"x"]))))
        .body("x")
        .send()
        .unwrap();
    assert_eq!(
        raw.status(),
        503,
        "the store is busy while the slow upload holds its place"
    );
    // the slow upload finishes in 1.5 s; the client's upload, told to come back, lands after it
    let finisher = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(1500));
        slow.write_all(&held[8..]).unwrap();
        let mut answer = Vec::new();
        let _ = std::io::Read::read_to_end(&mut slow, &mut answer);
    });
    let client = results::client::Client::new(&loopback()).unwrap();
    let started = std::time::Instant::now();
    assert!(client.put_content(&url, b"mine".to_vec()).unwrap(), "sent");
    assert!(
        started.elapsed() >= std::time::Duration::from_millis(900),
        "it waited for the place: {:?}",
        started.elapsed()
    );
    finisher.join().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    assert_eq!(
        client
            .fetch_content(&url, &hashv(&[b"mine"]), 100, deadline, None)
            .unwrap(),
        b"mine"
    );
}

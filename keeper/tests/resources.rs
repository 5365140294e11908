//! What hostile peers cost the keeper in memory and descriptors (issue 29): uploads that do
//! not match their hash are streamed to disk, not held; a fake result a few kilobytes on the
//! wire costs a verifier a few kilobytes, whatever the job's dims; running out of descriptors
//! never deletes a content object.
//!
//! These tests measure this process's peak memory (`VmHWM`) or exhaust its descriptors, so
//! they run one at a time (a lock), whichever runner runs them.

use std::{
    io::{Read, Write},
    net::TcpListener,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use compute_market_keeper::{
    metrics::Metrics,
    results::{self, hex, FetchError, FetchPolicy, ResultStore},
};
use compute_market_protocol::{hash::hashv, job::JobSpec};

/// One test at a time: each measures or exhausts the whole process.
static ONE: Mutex<()> = Mutex::new(());

fn one() -> std::sync::MutexGuard<'static, ()> {
    ONE.lock().unwrap_or_else(|p| p.into_inner())
}

/// `(VmRSS, VmHWM)` of this process, MiB.
fn memory() -> (f64, f64) {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let field = |name: &str| {
        s.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .unwrap()
            / 1024.0
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Resets this process's `VmHWM` to its RSS now (Linux ≥ 4.0: `5` to `clear_refs`).
fn reset_peak() {
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
}

/// A body of `len` pseudo-random bytes, generated as it is read (never held).
struct Generated {
    left: u64,
    x: u64,
}

impl Read for Generated {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = (buf.len() as u64).min(self.left) as usize / 8 * 8;
        let n = if n == 0 {
            self.left.min(buf.len() as u64) as usize
        } else {
            n
        };
        for b in buf[..n].chunks_mut(8) {
            self.x ^= self.x << 13;
            self.x ^= self.x >> 7;
            self.x ^= self.x << 17;
            b.copy_from_slice(&self.x.to_le_bytes()[..b.len()]);
        }
        self.left -= n as u64;
        Ok(n)
    }
}

/// Four concurrent 64 MiB uploads whose bodies do not hash to their names are refused with
/// 400 while the server's memory grows by a few megabytes (each is hashed as it is written to
/// a temporary file, deleted on the mismatch), not by the 256 MiB they sent; a matching one
/// is stored.
#[test]
fn mismatched_uploads_are_streamed_to_disk_not_held() {
    let _one = one();
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(ResultStore::open(dir.path(), 1 << 30, None).unwrap());
    let server =
        results::serve(store.clone(), Arc::new(Metrics::default()), "127.0.0.1:0").unwrap();
    let len = 64u64 << 20;
    let (rss, _) = memory();
    reset_peak();
    let t = Instant::now();
    let uploads: Vec<_> = (0..4u64)
        .map(|i| {
            let url = format!("http://{}/c/{}", server.addr, hex(&[i as u8 + 1; 32]));
            std::thread::spawn(move || {
                let body = reqwest::blocking::Body::sized(
                    Generated {
                        left: len,
                        x: 7 + i,
                    },
                    len,
                );
                // each from its own address: four peers, each within its upload share
                let from = std::net::Ipv4Addr::new(127, 4, 0, i as u8 + 1);
                reqwest::blocking::Client::builder()
                    .local_address(std::net::IpAddr::V4(from))
                    .build()
                    .unwrap()
                    .put(url)
                    .body(body)
                    .timeout(Duration::from_secs(120))
                    .send()
                    .map(|r| r.status().as_u16())
                    .unwrap_or(0)
            })
        })
        .collect();
    let statuses: Vec<u16> = uploads.into_iter().map(|u| u.join().unwrap()).collect();
    let (_, peak) = memory();
    println!(
        "4 × 64 MiB mismatched uploads: {statuses:?} in {:.1} s; RSS {rss:.0} MiB before, peak {peak:.0} MiB",
        t.elapsed().as_secs_f64()
    );
    assert_eq!(statuses, [400; 4]);
    assert!(
        peak - rss < 64.0,
        "the uploads took {:.0} MiB of memory",
        peak - rss
    );
    let left: Vec<_> = std::fs::read_dir(dir.path().join("content"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "no temporary file left: {left:?}");
    // a matching upload streams the same way and is stored, then served
    let bytes: Vec<u8> = {
        let mut b = vec![];
        Generated {
            left: 8 << 20,
            x: 99,
        }
        .read_to_end(&mut b)
        .unwrap();
        b
    };
    let h = hashv(&[&bytes]);
    let r = reqwest::blocking::Client::new()
        .put(format!("http://{}/c/{}", server.addr, hex(&h)))
        .body(bytes.clone())
        .send()
        .unwrap();
    assert_eq!(r.status(), 201);
    assert_eq!(store.content.get(&h).unwrap().as_slice(), &bytes[..]);
}

/// A result of a 4096³ `MatMulModP` (64 MiB of tiles) faked as a zstd bomb of a few
/// kilobytes: the verifier's fetch asks for it uncompressed (the server never compresses
/// bodies that large) and refuses the compressed one, having held a few kilobytes, not the
/// 64 MiB the job's dims allow.
#[test]
fn a_fake_result_costs_what_was_received_not_the_jobs_dims() {
    let _one = one();
    let job = JobSpec::matmul(4096, 4096, 4096, [3; 32]);
    let all = results::wire::all_len(&job);
    assert_eq!(all, 64 << 20);
    let bomb = zstd::bulk::compress(&vec![0u8; all as usize], 19).unwrap();
    println!("the bomb: {} bytes on the wire for {all}", bomb.len());
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in listener.incoming() {
            let Ok(mut s) = s else { break };
            let mut head = vec![];
            let mut b = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && s.read(&mut b).unwrap_or(0) == 1 {
                head.push(b[0]);
            }
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Encoding: zstd\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                bomb.len()
            );
            let _ = s.write_all(&bomb);
        }
    });
    let client = results::client::Client::new(&FetchPolicy::loopback()).unwrap();
    let (rss, _) = memory();
    reset_peak();
    let got = client.fetch_all(
        &format!("http://{addr}/r/{}", hex(&[5; 32])),
        &job,
        Instant::now() + Duration::from_secs(30),
    );
    let (_, peak) = memory();
    println!(
        "fetching the fake result: {:?}; RSS {rss:.0} MiB before, peak {peak:.0} MiB",
        got.as_ref().map(|t| t.len()).map_err(|e| e.to_string())
    );
    assert!(
        matches!(&got, Err(FetchError::Invalid(e)) if e.contains("compressed")),
        "{:?}",
        got.map(|t| t.len())
    );
    assert!(peak - rss < 16.0, "the fetch took {:.0} MiB", peak - rss);
}

/// Out of descriptors (EMFILE), reading a content object fails for now and deletes nothing:
/// once descriptors are free again it is read back whole.
#[test]
fn running_out_of_descriptors_deletes_no_content() {
    let _one = one();
    let dir = tempfile::tempdir().unwrap();
    let store = ResultStore::open(dir.path(), 1 << 30, None).unwrap();
    let bytes = b"an input part the keeper computes on".to_vec();
    let h = hashv(&[&bytes]);
    store.content.put(&h, &bytes, false).unwrap();
    // a restart indexes it unchecked: the next read opens the file
    drop(store);
    let store = ResultStore::open(dir.path(), 1 << 30, None).unwrap();
    // SAFETY: getrlimit/setrlimit only read and write the struct passed.
    let saved = unsafe {
        let mut l = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut l);
        let saved = l;
        l.rlim_cur = 256;
        libc::setrlimit(libc::RLIMIT_NOFILE, &l);
        saved
    };
    let mut held = vec![];
    while let Ok(f) = std::fs::File::open("/dev/null") {
        held.push(f);
    }
    let during = store.content.get(&h);
    drop(held);
    // SAFETY: as above.
    unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &saved) };
    assert!(during.is_none(), "no descriptor to read it with");
    assert!(store.content.contains(&h), "still indexed");
    assert!(
        dir.path().join("content").join(hex(&h)).exists(),
        "still on disk"
    );
    assert_eq!(store.content.get(&h).unwrap().as_slice(), &bytes[..]);
}

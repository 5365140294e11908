//! `keeper serve` processes and what tests feed them: a server started on a free loopback
//! port, large objects written straight into its store, connections from other loopback
//! addresses (distinct peers to the server).

use std::{
    io::{BufRead, Write},
    net::SocketAddr,
    process::{Child, Command, Stdio},
    time::Duration,
};

use compute_market_keeper::results::hex;

/// A `keeper serve` on a free loopback port over `dir` with the further `args` (`--admit`,
/// `--public-url`, …), its soft open-file limit lowered to `nofile` if given; the process and
/// its address.
pub fn keeper_serve(
    dir: &std::path::Path,
    args: &[&str],
    nofile: Option<u64>,
) -> (Child, SocketAddr) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_keeper"));
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--dir"])
        .arg(dir)
        .args(args)
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(soft) = nofile {
        use std::os::unix::process::CommandExt;
        // SAFETY: setrlimit is async-signal-safe; it only lowers the child's soft limit.
        unsafe {
            cmd.pre_exec(move || {
                let mut l = libc::rlimit {
                    rlim_cur: 0,
                    rlim_max: 0,
                };
                libc::getrlimit(libc::RLIMIT_NOFILE, &mut l);
                l.rlim_cur = soft.min(l.rlim_max);
                libc::setrlimit(libc::RLIMIT_NOFILE, &l);
                Ok(())
            });
        }
    }
    let mut child = cmd.spawn().expect("keeper serve");
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut sent = false;
        let mut said = vec![];
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if let Some(a) = line.strip_prefix("serving the content store at http://") {
                if !sent {
                    let _ = tx.send(Ok(a.trim().parse::<SocketAddr>().unwrap()));
                    sent = true;
                }
            } else if !sent {
                said.push(line);
            }
        }
        if !sent {
            let _ = tx.send(Err(said.join("\n")));
        }
    });
    match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(Ok(addr)) => (child, addr),
        Ok(Err(said)) => panic!("keeper serve did not start: {said}"),
        Err(_) => panic!("keeper serve did not say where it listens within 30 s"),
    }
}

/// Writes a deterministic object of `len` bytes into the content directory of a store at
/// `dir` (as its file, named by its SHA-256, streamed: never held in memory); its hash.
pub fn big_object(dir: &std::path::Path, len: usize) -> [u8; 32] {
    let content = dir.join("content");
    std::fs::create_dir_all(&content).unwrap();
    let tmp = content.join("object.tmp.partial");
    let mut f = std::io::BufWriter::new(std::fs::File::create(&tmp).unwrap());
    let mut h = solana_sha256_hasher::Hasher::default();
    let mut chunk = vec![0u8; 1 << 20];
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..len / chunk.len() {
        for b in chunk.chunks_exact_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            b.copy_from_slice(&x.to_le_bytes());
        }
        h.hash(&chunk);
        f.write_all(&chunk).unwrap();
    }
    drop(f);
    let d = h.result().to_bytes();
    std::fs::rename(&tmp, content.join(hex(&d))).unwrap();
    d
}

//! # compute-market-cluster-tests
//!
//! Helpers for tests against a real `solana-test-validator` (Agave 4.2.2): each test starts its
//! own validator (free ports, temporary ledger, `--reset`) with the built program as an
//! upgradeable program, drives the `keeper` binary as separate OS processes, and reads state
//! back over RPC. Every process is stopped by its PID when its handle drops, also on failure.

use std::{
    net::TcpListener,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};
use compute_market_keeper::chain::{rpc::RpcChain, Chain};
use solana_keypair::Keypair;
use solana_signer::Signer;

/// The build's target directory (`$CARGO_TARGET_DIR`, else `<workspace>/target`).
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"))
}

/// The `keeper` binary built by this workspace.
pub fn keeper_bin() -> PathBuf {
    target_dir().join("debug/keeper")
}

/// The built program (`$COMPUTE_MARKET_SO`, else `<target>/deploy/compute_market.so`).
pub fn program_so() -> PathBuf {
    std::env::var_os("COMPUTE_MARKET_SO")
        .map(PathBuf::from)
        .unwrap_or_else(|| target_dir().join("deploy/compute_market.so"))
}

/// The SBPF v3 build (`$COMPUTE_MARKET_SO_V3`, else `<target>/deploy-v3/compute_market.so`),
/// what `migrations/deploy.sh` deploys.
pub fn program_so_v3() -> PathBuf {
    std::env::var_os("COMPUTE_MARKET_SO_V3")
        .map(PathBuf::from)
        .unwrap_or_else(|| target_dir().join("deploy-v3/compute_market.so"))
}

/// A child process killed (by PID) when dropped.
pub struct Proc {
    /// The child.
    pub child: Child,
    /// What it is, for messages.
    pub name: String,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A free TCP port on 127.0.0.1.
pub fn free_port() -> u16 {
    port_block(1)
}

fn port_block(len: u16) -> u16 {
    // a block of consecutive free ports (rpc, ws = rpc + 1, faucet, gossip, dynamic range),
    // below the kernel's ephemeral range (32768–60999 by default): a block taken from it may
    // hold ports of connections still in TIME_WAIT from an earlier test, which the validator's
    // own listeners (no SO_REUSEADDR) then fail to bind; checked free for TCP and UDP
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let seed = std::process::id().wrapping_mul(2_654_435_761)
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
    for _ in 0..400 {
        let k = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let span = 32_000u32 - 10_000 - u32::from(len);
        let base = (10_000 + (seed.wrapping_add(k.wrapping_mul(7_919)) % span)) as u16;
        let free = (0..len).all(|i| {
            TcpListener::bind(("0.0.0.0", base + i)).is_ok()
                && std::net::UdpSocket::bind(("0.0.0.0", base + i)).is_ok()
        });
        if free {
            return base;
        }
    }
    panic!("no block of {len} free ports");
}

/// A running validator with the program deployed (upgradeable, `keys/` id).
pub struct Validator {
    /// RPC URL.
    pub url: String,
    /// Working directory (ledger, keypairs, logs).
    pub dir: tempfile::TempDir,
    /// The upgrade authority / admin keypair file.
    pub admin: PathBuf,
    base: u16,
    with_program: bool,
    /// Ticks a slot at genesis (`None`: the default 64, 400 ms slots).
    ticks_per_slot: Option<u64>,
    proc: Option<Proc>,
}

impl Validator {
    /// The validator's process id (a test may freeze it with SIGSTOP).
    pub fn pid(&self) -> Option<u32> {
        self.proc.as_ref().map(|p| p.child.id())
    }

    /// Starts one with the program loaded from the built `.so`, and waits until it answers.
    pub fn start() -> Result<Self> {
        Self::start_with(true)
    }

    /// [`Validator::start`] with `ticks` ticks a slot (8: 50 ms slots), for tests whose
    /// windows are many slots long (a game's turns are at least 150 slots).
    pub fn start_fast(ticks: u64) -> Result<Self> {
        let mut v = Self::start_unlaunched(true)?;
        v.ticks_per_slot = Some(ticks);
        v.boot()?;
        Ok(v)
    }

    /// Starts one without the program (a test deploys it), and waits until it answers.
    pub fn start_bare() -> Result<Self> {
        Self::start_with(false)
    }

    fn start_with(with_program: bool) -> Result<Self> {
        let mut v = Self::start_unlaunched(with_program)?;
        v.boot()?;
        Ok(v)
    }

    /// Launches from genesis and funds the admin.
    fn boot(&mut self) -> Result<()> {
        self.launch(true)?;
        self.solana(&["airdrop", "1000", &pubkey(&self.admin)?])?;
        Ok(())
    }

    fn start_unlaunched(with_program: bool) -> Result<Self> {
        let dir = tempfile::tempdir()?;
        let so = program_so();
        anyhow::ensure!(
            so.exists(),
            "{} is missing: build it with scripts/build",
            so.display()
        );
        let admin = dir.path().join("admin.json");
        keygen(&admin)?;
        let base = port_block(120);
        Ok(Validator {
            url: format!("http://127.0.0.1:{base}"),
            dir,
            admin,
            base,
            with_program,
            ticks_per_slot: None,
            proc: None,
        })
    }

    /// Starts the process (`reset`: from genesis; otherwise resuming the ledger it left) and
    /// waits until it answers and, when it was started with it, the program is executable.
    fn launch(&mut self, reset: bool) -> Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("validator.log"))?;
        let mut cmd = Command::new("solana-test-validator");
        if reset {
            cmd.arg("--reset");
            if let Some(t) = self.ticks_per_slot {
                cmd.args(["--ticks-per-slot", &t.to_string()]);
            }
        }
        let base = self.base;
        cmd.args(["--quiet", "--ledger"])
            .arg(self.dir.path().join("ledger"))
            .args([
                "--rpc-port",
                &base.to_string(),
                "--faucet-port",
                &(base + 2).to_string(),
            ])
            .args([
                "--gossip-port",
                &(base + 3).to_string(),
                "--dynamic-port-range",
                &format!("{}-{}", base + 10, base + 119),
            ]);
        if self.with_program {
            cmd.arg("--upgradeable-program")
                .arg(compute_market::ID.to_string())
                .arg(program_so())
                .arg(&self.admin);
        }
        let child = cmd
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting solana-test-validator (install it with ../shared/solana-validator/install.sh)")?;
        self.proc = Some(Proc {
            child,
            name: "validator".into(),
        });
        let chain = RpcChain::new(&self.url);
        let start = Instant::now();
        while chain.slot().is_err() {
            if start.elapsed() > Duration::from_secs(90) {
                bail!(
                    "the validator did not answer within 90 s; see {}",
                    self.dir.path().join("validator.log").display()
                );
            }
            std::thread::sleep(Duration::from_millis(300));
        }
        while self.with_program && chain.account(&compute_market::ID)?.is_none() {
            std::thread::sleep(Duration::from_millis(200));
        }
        Ok(())
    }

    /// Kills the validator (SIGKILL) and starts it again on the same ledger and ports, without
    /// `--reset`: the chain resumes where it was.
    /// Returns once the restarted validator has replayed its ledger past the last slot it
    /// reported before the kill.
    pub fn restart(&mut self, down_for: Duration) -> Result<()> {
        let chain = self.chain();
        let last = chain.slot()?;
        self.proc.take();
        std::thread::sleep(down_for);
        self.launch(false)?;
        // while it replays the ledger it answers slot 0
        wait_for(90, "the restarted validator to resume its ledger", || {
            Ok(chain.slot().ok().filter(|&s| s >= last).map(|_| ()))
        })
    }

    /// An RPC chain to it.
    pub fn chain(&self) -> RpcChain {
        RpcChain::new(&self.url)
    }

    /// Runs the stock `solana` CLI against it; returns stdout.
    pub fn solana(&self, args: &[&str]) -> Result<String> {
        let out = Command::new("solana")
            .args(["-u", &self.url, "-k"])
            .arg(&self.admin)
            .args(args)
            .output()?;
        if !out.status.success() {
            bail!(
                "solana {args:?} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// A funded keypair file named `name` (SOL from the faucet, stake tokens minted).
    pub fn wallet(&self, name: &str, tokens: u64) -> Result<PathBuf> {
        let path = self.dir.path().join(format!("{name}.json"));
        keygen(&path)?;
        self.solana(&["airdrop", "100", &pubkey(&path)?])?;
        if tokens > 0 {
            self.keeper(&self.admin, &["fund", &pubkey(&path)?, &tokens.to_string()])?;
        }
        Ok(path)
    }

    /// Runs `keeper` once as `keypair` and returns its JSON output.
    pub fn keeper(&self, keypair: &Path, args: &[&str]) -> Result<serde_json::Value> {
        // amounts in base units, as these tests count them (`--base-units`; without it a
        // person's `1` is one token)
        let out = Command::new(keeper_bin())
            .args(["-u", &self.url, "-k"])
            .arg(keypair)
            .args(["--output", "json", "--base-units"])
            .args(args)
            .output()?;
        if !out.status.success() {
            bail!(
                "keeper {args:?} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        serde_json::from_slice(&out.stdout)
            .with_context(|| format!("keeper {args:?} printed no JSON"))
    }

    /// Starts `keeper run` as `keypair` in the background; its log goes to `<name>.log`.
    pub fn spawn_keeper(&self, name: &str, keypair: &Path, args: &[&str]) -> Result<Proc> {
        self.spawn_keeper_on(name, keypair, port_block(1), args)
    }

    /// [`Validator::spawn_keeper`] serving HTTP on 127.0.0.1:`port`.
    pub fn spawn_keeper_on(
        &self,
        name: &str,
        keypair: &Path,
        port: u16,
        args: &[&str],
    ) -> Result<Proc> {
        // appended: a restarted keeper's log follows the first one's
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join(format!("{name}.log")))?;
        let child = Command::new(keeper_bin())
            .args(["-u", &self.url, "-k"])
            .arg(keypair)
            .arg("run")
            // the CPU on every machine: a GPU's start-up self-test would eat into the windows
            .args(["--backend", "cpu"])
            // every keeper of a local cluster serves on 127.0.0.1
            .arg("--allow-loopback-urls")
            .args(args)
            .args([
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--poll-ms",
                "200",
                "--store",
            ])
            .arg(self.dir.path().join(format!("{name}.redb")))
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", keeper_bin().display()))?;
        Ok(Proc {
            child,
            name: name.into(),
        })
    }

    /// Stops the validator now.
    pub fn stop(&mut self) {
        self.proc.take();
    }
}

/// `solana-keygen new` into `path`.
pub fn keygen(path: &Path) -> Result<()> {
    let st = Command::new("solana-keygen")
        .args(["new", "--no-bip39-passphrase", "-s", "-f", "-o"])
        .arg(path)
        .stdout(Stdio::null())
        .status()?;
    anyhow::ensure!(st.success(), "solana-keygen failed");
    Ok(())
}

/// The public key of a keypair file.
pub fn pubkey(path: &Path) -> Result<String> {
    let kp = compute_market_keeper::config::read_keypair(path.to_str().context("path")?)?;
    Ok(kp.pubkey().to_string())
}

/// Loads a keypair file.
pub fn keypair(path: &Path) -> Result<Keypair> {
    compute_market_keeper::config::read_keypair(path.to_str().context("path")?)
}

/// Polls `f` every 250 ms until it returns `Some`, or fails after `secs`.
pub fn wait_for<T>(secs: u64, what: &str, mut f: impl FnMut() -> Result<Option<T>>) -> Result<T> {
    let start = Instant::now();
    loop {
        if let Some(v) = f()? {
            return Ok(v);
        }
        if start.elapsed() > Duration::from_secs(secs) {
            bail!("timed out after {secs} s waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Reads an HTTP request head (at most 64 KiB) from a test front's socket: its path and query,
/// and the whole head.
pub fn read_request(s: &mut std::net::TcpStream) -> Option<(String, String)> {
    use std::io::Read;
    let mut buf = Vec::new();
    let mut b = [0u8; 4096];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = s.read(&mut b).ok()?;
        if n == 0 || buf.len() > 64 << 10 {
            return None;
        }
        buf.extend_from_slice(&b[..n]);
    }
    let head = String::from_utf8_lossy(&buf).to_string();
    let path = head.lines().next()?.split_whitespace().nth(1)?.to_string();
    Some((path, head))
}

/// The value of header `name` (any case) in a request head.
pub fn header(head: &str, name: &str) -> Option<String> {
    head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
    })
}

/// The reward of the tests' tasks, base units (tokens have 6 decimals).
pub const REWARD: u64 = 1_000_000;

/// Registers `who` with `roles` (`provider`, `verifier`) and stakes `stake`, through the CLI.
pub fn register(v: &Validator, who: &Path, roles: &str, stake: u64) -> Result<()> {
    v.keeper(
        who,
        &[
            "node",
            "register",
            "--roles",
            roles,
            "--gflops",
            "60000",
            "--memory-gb",
            "80",
        ],
    )?;
    v.keeper(who, &["node", "stake", &stake.to_string()])?;
    Ok(())
}

/// A market of one provider and three verifiers, staked; returns (client, provider, verifiers).
pub fn small_market(v: &Validator, windows: &str) -> Result<(PathBuf, PathBuf, Vec<PathBuf>)> {
    small_market_with(v, windows, &[])
}

/// [`small_market`], `keeper init` given `init` too (`--dispute-window 60`).
pub fn small_market_with(
    v: &Validator,
    windows: &str,
    init: &[&str],
) -> Result<(PathBuf, PathBuf, Vec<PathBuf>)> {
    let mint_out = v.dir.path().join("mint.json");
    let mut args = vec![
        "init",
        "--windows",
        windows,
        "--mint-keypair-out",
        mint_out.to_str().context("a UTF-8 temporary path")?,
    ];
    args.extend_from_slice(init);
    v.keeper(&v.admin, &args)?;
    let client = v.wallet("client", 100 * REWARD)?;
    let provider = v.wallet("provider", 100 * REWARD)?;
    register(v, &provider, "provider", 50 * REWARD)?;
    Ok((client, provider, staked_verifiers(v, 3)?))
}

/// `n` verifier wallets `v0`, `v1`, … holding 100 rewards each, half of it staked.
pub fn staked_verifiers(v: &Validator, n: usize) -> Result<Vec<PathBuf>> {
    let verifiers: Vec<_> = (0..n)
        .map(|i| v.wallet(&format!("v{i}"), 100 * REWARD))
        .collect::<Result<_>>()?;
    for w in &verifiers {
        register(v, w, "verifier", 50 * REWARD)?;
    }
    Ok(verifiers)
}

/// A verifier keeper for each of `verifiers` (`v0`, `v1`, …) and a cranker.
pub fn verifiers_and_crank(v: &Validator, verifiers: &[PathBuf]) -> Result<Vec<Proc>> {
    let mut procs: Vec<Proc> = verifiers
        .iter()
        .enumerate()
        .map(|(i, w)| v.spawn_keeper(&format!("v{i}"), w, &["--verifier"]))
        .collect::<Result<_>>()?;
    procs.push(v.spawn_keeper("crank", &v.admin, &["--crank"])?);
    Ok(procs)
}

/// The last lines of the named keepers' logs (for a failure's message).
pub fn log_tails(v: &Validator, names: &[&str]) -> String {
    names
        .iter()
        .map(|n| {
            let log =
                std::fs::read_to_string(v.dir.path().join(format!("{n}.log"))).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            format!(
                "--- {n}.log\n{}",
                lines[lines.len().saturating_sub(15)..].join("\n")
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The node address of the wallet at `p`.
pub fn node_of(p: &Path) -> anchor_lang::prelude::Pubkey {
    compute_market::pda::node(&keypair(p).expect("a keypair file").pubkey())
}

/// `keeper task post` by `client` of task `id`: a `MatMulModP` 96 × 64 · 64 × 80 on generated
/// inputs, for [`REWARD`]; the task's address.
pub fn post_matmul(v: &Validator, client: &Path, id: u64) -> Result<anchor_lang::prelude::Pubkey> {
    let out = v.keeper(
        client,
        &[
            "task",
            "post",
            "--id",
            &id.to_string(),
            "--kind",
            "matmul",
            "--dims",
            "96,64,80",
            "--reward",
            &REWARD.to_string(),
        ],
    )?;
    Ok(out["task"]
        .as_str()
        .context("the posted task's address")?
        .parse()?)
}

/// `keeper serve` on a free port, logging to `<name>.log`.
pub fn spawn_serve(v: &Validator, name: &str) -> Result<(Proc, String)> {
    spawn_serve_with(v, name, &[])
}

/// [`spawn_serve`] with more flags.
pub fn spawn_serve_with(v: &Validator, name: &str, extra: &[&str]) -> Result<(Proc, String)> {
    let port = free_port();
    let log = std::fs::File::create(v.dir.path().join(format!("{name}.log")))?;
    let child = std::process::Command::new(keeper_bin())
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .args(extra)
        .arg("--dir")
        .arg(v.dir.path().join(name))
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()?;
    let url = format!("http://127.0.0.1:{port}");
    wait_for(30, "keeper serve to listen", || {
        Ok(std::net::TcpStream::connect(("127.0.0.1", port))
            .ok()
            .map(|_| ()))
    })?;
    Ok((
        Proc {
            child,
            name: name.into(),
        },
        url,
    ))
}

/// Posts the digits model over the held-out split (written here from the checked-in file),
/// uploaded to `store`; returns the task and the labels.
pub fn post_digits(
    v: &Validator,
    client: &std::path::Path,
    store: &str,
    id: u64,
) -> Result<(anchor_lang::prelude::Pubkey, Vec<u8>)> {
    let models = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../models");
    let held = std::fs::read(models.join("digits-heldout.safetensors"))?;
    let st = safetensors::SafeTensors::deserialize(&held)?;
    let batch = v.dir.path().join("digits-batch.safetensors");
    std::fs::write(
        &batch,
        safetensors::serialize([("x", st.tensor("x")?)], None)?,
    )?;
    let labels = st.tensor("labels")?.data().to_vec();
    let out = v.keeper(
        client,
        &[
            "task",
            "post",
            "--id",
            &id.to_string(),
            "--model",
            models.join("digits-mlp.safetensors").to_str().unwrap(),
            "--batch",
            batch.to_str().unwrap(),
            "--store",
            store,
            "--reward",
            &REWARD.to_string(),
        ],
    )?;
    let task = out["posted"]["task"]
        .as_str()
        .expect("task address")
        .parse()?;
    Ok((task, labels))
}

/// Answers `s` with what the provider on `provider`'s port answers for `path` (200, whatever
/// it was; an empty body when it did not answer).
pub fn relay(s: &mut std::net::TcpStream, provider: u16, path: &str) {
    use std::io::Write;
    let body = reqwest::blocking::get(format!("http://127.0.0.1:{provider}{path}"))
        .and_then(|r| r.bytes())
        .map(|b| b.to_vec())
        .unwrap_or_default();
    let _ = write!(
        s,
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = s.write_all(&body);
}

/// Posts a `HashBatch` task (512×16×4) as `client`, and starts `provider`'s keeper publishing
/// its results behind the front `front` starts for it (given the provider's own port); the
/// task and the provider's process.
pub fn hash_task_behind(
    v: &Validator,
    client: &std::path::Path,
    provider: &std::path::Path,
    front: impl FnOnce(u16) -> Result<u16>,
) -> Result<(anchor_lang::prelude::Pubkey, Proc)> {
    let out = v.keeper(
        client,
        &[
            "task",
            "post",
            "--id",
            "1",
            "--kind",
            "hash",
            "--dims",
            "512,16,4",
            "--reward",
            &REWARD.to_string(),
        ],
    )?;
    let task: anchor_lang::prelude::Pubkey = out["task"].as_str().expect("task address").parse()?;
    let port = free_port();
    let front = front(port)?;
    let p = v.spawn_keeper_on(
        "provider",
        provider,
        port,
        &[
            "--provider",
            "--public-url",
            &format!("http://127.0.0.1:{front}"),
        ],
    )?;
    Ok((task, p))
}

/// The stake-mint balance of the associated token account of the wallet at `wallet`.
pub fn wallet_balance(v: &Validator, wallet: &Path) -> Result<u64> {
    let chain = v.chain();
    let mint = compute_market_keeper::cli::config(&chain)?.stake_mint;
    let ata = anchor_spl::associated_token::get_associated_token_address(
        &keypair(wallet)?.pubkey(),
        &mint,
    );
    chain.token_balance(&ata)
}

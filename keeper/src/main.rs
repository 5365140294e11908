//! `keeper`: the Compute Market daemon and CLI.

use std::{sync::Arc, time::Duration};

use anchor_lang::prelude::Pubkey;
use anyhow::{bail, ensure, Context, Result};
use clap::{Args, Parser, Subcommand, ValueEnum};
use compute_market::state::Hardware;
use compute_market_keeper::{
    bench,
    chain::{rpc::RpcChain, Chain},
    cli,
    compute::{
        cpu::CpuBackend,
        device::{self, BackendChoice},
    },
    config::{expand, read_keypair, FileConfig},
    daemon, demo,
};
use compute_market_protocol::job::JobSpec;
use serde_json::Value;
use solana_signer::Signer;

/// `--backend`: the library's [`BackendChoice`], spelled for the command line.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
enum Backend {
    /// CUDA when a GPU passes its self-test, else the CPU (the choice is logged).
    Auto,
    /// The CPU reference.
    Cpu,
    /// CUDA, or an error saying why it cannot be used.
    Cuda,
}

impl From<Backend> for BackendChoice {
    fn from(b: Backend) -> Self {
        match b {
            Backend::Auto => BackendChoice::Auto,
            Backend::Cpu => BackendChoice::Cpu,
            Backend::Cuda => BackendChoice::Cuda,
        }
    }
}

fn select(b: impl Into<BackendChoice>) -> Result<Arc<dyn compute_market_keeper::compute::Backend>> {
    device::select(b.into())
}

/// Output format.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
enum Output {
    /// Human-readable.
    Text,
    /// JSON, for scripts.
    Json,
}

#[derive(Parser, Debug)]
#[command(
    name = "keeper",
    version,
    about = "Compute Market keeper: provider, verifier and cranker daemon and CLI"
)]
struct Cli {
    /// RPC URL or moniker: localhost, devnet, testnet, mainnet-beta.
    #[arg(short = 'u', long = "url", global = true)]
    url: Option<String>,
    /// Keypair file [default: ~/.config/solana/id.json].
    #[arg(short = 'k', long = "keypair", global = true)]
    keypair: Option<String>,
    /// Config file [default: ~/.config/compute-market/keeper.toml].
    #[arg(short = 'C', long = "config", global = true)]
    config: Option<String>,
    /// Priority fee, micro-lamports per compute unit.
    #[arg(long, global = true)]
    priority_fee: Option<u64>,
    /// Output format.
    #[arg(long, global = true, value_enum, default_value = "text")]
    output: Output,
    /// More log lines: -v info, -vv debug (default: warnings only, info for `run`;
    /// RUST_LOG overrides).
    #[arg(short = 'v', long = "verbose", global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Provider and verifier nodes.
    #[command(subcommand)]
    Node(NodeCmd),
    /// Client tasks.
    #[command(subcommand)]
    Task(TaskCmd),
    /// Markets.
    #[command(subcommand)]
    Market(MarketCmd),
    /// The daemon: any combination of --provider, --verifier, --crank.
    Run(RunArgs),
    /// Deploy/initialize (idempotent): checks the program is deployed, creates or reuses the
    /// stake mint, the treasury, the config and a market.
    Init(InitArgs),
    /// Mints stake tokens to OWNER's associated token account (the keypair must be the mint
    /// authority: localnet/devnet set-ups).
    Fund {
        /// Wallet to fund.
        #[arg(value_parser = parse_address)]
        owner: Pubkey,
        /// Amount in base units.
        amount: u64,
    },
    /// Runs the whole market on an embedded cluster (litesvm with the built program): 3
    /// providers (one cheats), 5 verifiers (one careless), 20 tasks, a cranker; prints the
    /// outcome per task, slashes, payouts, costs, slots per phase and the performance model.
    Demo {
        /// Tasks posted.
        #[arg(long, default_value_t = 20)]
        tasks: usize,
        /// Fraction of tiles the dishonest provider corrupts.
        #[arg(long, default_value_t = 0.25)]
        corrupt_fraction: f64,
        /// Compute backend of every node.
        #[arg(long, value_enum, default_value_t = Backend::Auto)]
        backend: Backend,
    },
    /// Measures compute and verification side by side (per job kind and size) and Merkle
    /// commit throughput next to raw SHA-256.
    Bench {
        /// MatMulModP sizes n (n×n·n×n), comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "256,512,1024")]
        sizes: Vec<u32>,
        /// cpu, cuda, or auto: the CPU and, when a GPU passes its self-test, CUDA side by side.
        #[arg(long, value_enum, default_value_t = Backend::Auto)]
        backend: Backend,
    },
    /// On a GPU machine: every kernel against the CPU bit for bit (ragged sizes included), cold
    /// and warm start, and the benchmark on CPU and GPU side by side; writes report.json and
    /// report.md to --out. Fails when there is no usable GPU or a bit differs.
    GpuCheck {
        /// MatMulModP sizes benchmarked.
        #[arg(long, value_delimiter = ',', default_value = "1024,4096")]
        sizes: Vec<u32>,
        /// Directory for report.json and report.md.
        #[arg(long)]
        out: Option<std::path::PathBuf>,
    },
}

#[derive(Subcommand, Debug)]
enum NodeCmd {
    /// Registers this keypair's node in a market.
    Register {
        /// Market id.
        #[arg(long)]
        market: Option<u16>,
        /// provider, verifier or both.
        #[arg(long, default_value = "both")]
        roles: String,
        /// Declared compute, G mul-adds per second (required unless --measure).
        #[arg(long, required_unless_present = "measure")]
        gflops: Option<u32>,
        /// Declared device memory, GB (required unless --measure).
        #[arg(long, required_unless_present = "measure")]
        memory_gb: Option<u32>,
        /// Declared memory bandwidth, GB/s.
        #[arg(long)]
        bandwidth_gbps: Option<u32>,
        /// Region code (continent·100 + zone; 0 = undeclared).
        #[arg(long, default_value_t = 0)]
        region: u16,
        /// Fill compute, memory and bandwidth from measurements on --backend (values given
        /// explicitly win).
        #[arg(long)]
        measure: bool,
        /// Backend measured by --measure.
        #[arg(long, value_enum, default_value_t = Backend::Auto)]
        backend: Backend,
    },
    /// Moves tokens from the wallet (associated token account) into the node's stake.
    Stake {
        /// Amount in base units.
        amount: u64,
        /// Source token account [default: the associated token account].
        #[arg(long, value_parser = parse_address)]
        from: Option<Pubkey>,
    },
    /// Starts the cooldown for `amount` of free stake.
    Unstake {
        /// Amount in base units.
        amount: u64,
    },
    /// Pays out pending unstake (after the cooldown) and earnings.
    Withdraw {
        /// Destination token account [default: the associated token account].
        #[arg(long, value_parser = parse_address)]
        to: Option<Pubkey>,
    },
    /// Shows a node [default: this keypair's].
    Status {
        /// The node's authority.
        #[arg(value_parser = parse_address)]
        authority: Option<Pubkey>,
    },
}

#[derive(Subcommand, Debug)]
enum TaskCmd {
    /// Posts a task; the reward moves into its escrow.
    Post {
        /// Market id.
        #[arg(long)]
        market: Option<u16>,
        /// Task id (unique per client) [default: the current time in ms].
        #[arg(long)]
        id: Option<u64>,
        /// matmul (m,k,n) or hash (tiles,nonces,iterations).
        #[arg(long)]
        kind: String,
        /// Three dimensions, comma-separated.
        #[arg(long, value_delimiter = ',', required = true)]
        dims: Vec<u32>,
        /// Reward in base units.
        #[arg(long)]
        reward: u64,
        /// Quorum V [default: the market's].
        #[arg(long, default_value_t = 0)]
        quorum: u8,
        /// Samples k [default: the market's].
        #[arg(long, default_value_t = 0)]
        samples: u16,
        /// Input seed, 64 hex digits [default: derived from the id].
        #[arg(long)]
        seed: Option<String>,
        /// Preferred region code (continent·100 + zone; 0 = any). Providers rank nearer tasks first.
        #[arg(long, default_value_t = 0)]
        region: u16,
        /// Posts this many tasks, ids ID, ID+1, ... (each with its own seed unless --seed is
        /// given); prints one result per task.
        #[arg(long, default_value_t = 1)]
        count: u64,
    },
    /// Cancels an open task of this keypair.
    Cancel {
        /// Task id.
        id: u64,
    },
    /// Shows a task.
    Status {
        /// Task address.
        #[arg(value_parser = parse_address)]
        task: Pubkey,
    },
    /// Lists tasks.
    List {
        /// Only this market.
        #[arg(long)]
        market: Option<u16>,
    },
}

#[derive(Subcommand, Debug)]
enum MarketCmd {
    /// Lists markets.
    List,
}

#[derive(Args, Debug)]
struct InitArgs {
    /// Use this existing mint instead of creating one (ignored once a config exists).
    #[arg(long, value_parser = parse_address)]
    mint: Option<Pubkey>,
    /// Where a newly created mint's keypair is saved.
    #[arg(long, default_value = "~/.config/compute-market/mint.json")]
    mint_keypair_out: String,
    /// Market id.
    #[arg(long, default_value_t = 1)]
    market_id: u16,
    /// Market name.
    #[arg(long, default_value = "default")]
    market_name: String,
    /// Providers' minimum declared GFLOPS.
    #[arg(long, default_value_t = 1_000)]
    min_gflops: u32,
    /// Providers' minimum declared memory, GB.
    #[arg(long, default_value_t = 16)]
    min_memory_gb: u32,
    /// Default quorum V.
    #[arg(long, default_value_t = 3)]
    quorum: u8,
    /// Default samples k.
    #[arg(long, default_value_t = 16)]
    samples: u16,
    /// Windows submit,join,commit,reveal in slots.
    #[arg(long, value_delimiter = ',', default_value = "300,100,100,100")]
    windows: Vec<u32>,
    /// Slots an unclaimed task stays open.
    #[arg(long, default_value_t = 1_000)]
    task_ttl: u32,
    /// Unstake cooldown, slots (must exceed twice the longest task).
    #[arg(long, default_value_t = 3_000)]
    cooldown: u64,
    /// Parameter-update delay, slots.
    #[arg(long, default_value_t = 100)]
    update_delay: u64,
}

#[derive(Args, Debug)]
struct RunArgs {
    /// Claim, compute and serve tasks.
    #[arg(long)]
    provider: bool,
    /// Verify results and vote.
    #[arg(long)]
    verifier: bool,
    /// Finalize, settle, expire, close and sweep.
    #[arg(long)]
    crank: bool,
    /// Market id.
    #[arg(long)]
    market: Option<u16>,
    /// Store file [default: ~/.local/share/compute-market/<node>.redb].
    #[arg(long)]
    store: Option<String>,
    /// HTTP listen address for results and /metrics.
    #[arg(long)]
    listen: Option<String>,
    /// Public base URL of that server [default: http://<listen>].
    #[arg(long)]
    public_url: Option<String>,
    /// Poll interval, ms.
    #[arg(long)]
    poll_ms: Option<u64>,
    /// Compute backend: auto (CUDA when a GPU passes its self-test, else the CPU; the choice is
    /// logged), cpu or cuda.
    #[arg(long, value_enum, default_value_t = Backend::Auto)]
    backend: Backend,
    /// Tasks handled at once in a pass (transactions in flight together).
    #[arg(long, default_value_t = 16)]
    parallel: usize,
    /// Provider: most tasks held (claimed, not yet submitted) at once.
    #[arg(long, default_value_t = 4)]
    max_active: usize,
    /// Provider: slots a fresh task waits per task already held before this provider claims it
    /// (least-loaded providers claim first).
    #[arg(long, default_value_t = compute_market_keeper::roles::provider::CLAIM_BACKOFF)]
    claim_backoff: u64,
    /// Test only: corrupt this fraction of every result's tiles (a dishonest provider).
    #[arg(long, hide = true, default_value_t = 0.0)]
    corrupt_fraction: f64,
    /// Test only: after each vote commit lands, wait this many ms before anything else (a test
    /// kills the process in that window, between commit and reveal).
    #[arg(long, hide = true)]
    hold_after_commit_ms: Option<u64>,
}

fn print(output: Output, v: &Value) -> Result<()> {
    match output {
        Output::Json => println!("{}", serde_json::to_string_pretty(v)?),
        Output::Text => match v {
            Value::Array(items) if items.is_empty() => println!("(none)"),
            Value::Array(items) => items.iter().try_for_each(|i| print(output, i))?,
            Value::Object(map) => {
                for (k, val) in map {
                    println!(
                        "{k:>16}: {}",
                        match val {
                            Value::String(s) => s.clone(),
                            other => other.to_string(),
                        }
                    );
                }
                println!();
            }
            other => println!("{other}"),
        },
    }
    Ok(())
}

/// An address argument: a base58 public key, or a clear error naming the argument's value.
fn parse_address(s: &str) -> std::result::Result<Pubkey, String> {
    s.parse()
        .map_err(|_| format!("{s:?} is not a base58 address (a 32-byte public key)"))
}

/// Progress bars on the terminal (hidden elsewhere), one per piece of long work, gone when it
/// is done.
fn progress_bars() -> Arc<compute_market_keeper::roles::Reporter> {
    let bars = indicatif::MultiProgress::new();
    let live =
        std::sync::Mutex::new(std::collections::HashMap::<String, indicatif::ProgressBar>::new());
    Arc::new(move |what: &str, done: u64, all: u64| {
        let mut live = live.lock().expect("progress lock");
        let bar = live.entry(what.to_string()).or_insert_with(|| {
            let b = bars.add(indicatif::ProgressBar::new(all));
            b.set_style(
                indicatif::ProgressStyle::with_template(
                    "{prefix} [{bar:30}] {pos}/{len} tiles {elapsed}",
                )
                .expect("template"),
            );
            b.set_prefix(what.to_string());
            b
        });
        bar.set_length(all);
        bar.set_position(done);
        if done >= all {
            bar.finish_and_clear();
            live.remove(what);
        }
    })
}

fn parse_roles(s: &str) -> Result<u8> {
    Ok(match s {
        "provider" => 1,
        "verifier" => 2,
        "both" => 3,
        other => bail!("--roles must be provider, verifier or both, not {other:?}"),
    })
}

fn parse_job(kind: &str, dims: &[u32], seed: [u8; 32]) -> Result<JobSpec> {
    ensure!(dims.len() == 3, "--dims takes three numbers");
    let job = match kind {
        "matmul" => JobSpec::matmul(dims[0], dims[1], dims[2], seed),
        "hash" => JobSpec::hash_batch(dims[0], dims[1], dims[2], seed),
        other => bail!("--kind must be matmul or hash, not {other:?}"),
    };
    JobSpec::decode(&job.encode()).map_err(|e| anyhow::anyhow!("invalid job: {e}"))
}

fn parse_seed(s: &str) -> Result<[u8; 32]> {
    ensure!(s.len() == 64, "--seed takes 64 hex digits");
    let mut out = [0u8; 32];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).context("--seed is not hex")?;
    }
    Ok(out)
}

fn main() {
    if let Err(e) = real_main() {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

fn real_main() -> Result<()> {
    let cli = Cli::parse();
    // a daemon logs what it does; a command shows its result (and warnings)
    let default = match (cli.verbose, &cli.command) {
        (0, Command::Run(_)) | (1, _) => "info",
        (0, _) => "warn",
        _ => "debug",
    };
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| default.into()),
        )
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .init();
    let file = FileConfig::load(cli.config.as_deref())?;
    let url = cli
        .url
        .clone()
        .or(file.url.clone())
        .unwrap_or_else(|| "localhost".into());
    let keypair_path = cli
        .keypair
        .clone()
        .or(file.keypair.clone())
        .unwrap_or_else(|| "~/.config/solana/id.json".into());
    let market = |m: Option<u16>| m.or(file.market).unwrap_or(1);
    let rpc = || -> Arc<dyn Chain> {
        let mut c = RpcChain::new(&url);
        c.priority_fee = cli.priority_fee.or(file.priority_fee).unwrap_or(0);
        Arc::new(c)
    };
    let out = cli.output;
    match cli.command {
        Command::Demo {
            tasks,
            corrupt_fraction,
            backend,
        } => {
            ensure!(tasks >= 1, "--tasks must be at least 1");
            ensure!(
                (0.0..=1.0).contains(&corrupt_fraction),
                "--corrupt-fraction must be within 0..=1"
            );
            let cfg = demo::DemoConfig {
                tasks,
                corrupt_fraction,
                ..Default::default()
            };
            let backend = select(backend)?;
            // a bar on the terminal while the market runs, then the table
            let bar = indicatif::ProgressBar::new(tasks as u64).with_style(
                indicatif::ProgressStyle::with_template(
                    "{spinner} {msg} [{bar:30}] {pos}/{len} tasks closed ({elapsed})",
                )
                .expect("template")
                .progress_chars("=> "),
            );
            bar.set_message("market running");
            if !std::io::stderr().is_terminal() {
                bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
            }
            let report = demo::run_with(&cfg, backend, &mut |closed, _| {
                bar.set_position(closed as u64)
            })?;
            bar.finish_and_clear();
            match out {
                Output::Text => print!("{}", demo::render(&report)),
                Output::Json => println!("{}", serde_json::to_string_pretty(&report)?),
            }
        }
        Command::Bench { sizes, backend } => {
            ensure!(
                sizes
                    .iter()
                    .all(|&n| (1..=compute_market_protocol::job::MAX_MATRIX_DIM).contains(&n)),
                "--sizes: each n must be within 1..={}",
                compute_market_protocol::job::MAX_MATRIX_DIM
            );
            let mut backends: Vec<Arc<dyn compute_market_keeper::compute::Backend>> = vec![];
            if backend != Backend::Cuda {
                backends.push(Arc::new(CpuBackend));
            }
            if backend != Backend::Cpu {
                match select(Backend::Cuda) {
                    Ok(b) => backends.push(b),
                    Err(e) if backend == Backend::Auto => {
                        eprintln!("bench: CPU only ({e:#})")
                    }
                    Err(e) => return Err(e),
                }
            }
            let report = bench::run(&backends, &sizes)?;
            match out {
                Output::Text => print!("{}", bench::render(&report)),
                Output::Json => println!("{}", serde_json::to_string_pretty(&report)?),
            }
        }
        Command::GpuCheck { sizes, out: dir } => {
            let report = compute_market_keeper::gpucheck::run(&sizes)?;
            let text = compute_market_keeper::gpucheck::render(&report);
            if let Some(dir) = dir {
                std::fs::create_dir_all(&dir)
                    .with_context(|| format!("creating {}", dir.display()))?;
                std::fs::write(
                    dir.join("report.json"),
                    serde_json::to_string_pretty(&report)?,
                )?;
                std::fs::write(dir.join("report.md"), &text)?;
            }
            match out {
                Output::Text => print!("{text}"),
                Output::Json => println!("{}", serde_json::to_string_pretty(&report)?),
            }
            ensure!(
                report.bit_identical,
                "the GPU's results differ from the CPU's"
            );
        }
        Command::Node(cmd) => {
            let kp = read_keypair(&keypair_path)?;
            let chain = rpc();
            let v = match cmd {
                NodeCmd::Register {
                    market: m,
                    roles,
                    gflops,
                    memory_gb,
                    bandwidth_gbps,
                    region,
                    measure,
                    backend,
                } => {
                    let measured = if measure {
                        Some(compute_market_keeper::bench::measure_hardware(
                            select(backend)?.as_ref(),
                        )?)
                    } else {
                        None
                    };
                    let pick = |given: Option<u32>, m: fn(&Hardware) -> u32| {
                        given.or(measured.as_ref().map(m)).unwrap_or(0)
                    };
                    let hardware = Hardware {
                        gflops: pick(gflops, |h| h.gflops),
                        memory_gb: pick(memory_gb, |h| h.memory_gb),
                        bandwidth_gbps: pick(bandwidth_gbps, |h| h.bandwidth_gbps),
                        region,
                    };
                    if let Some(h) = &measured {
                        tracing::info!(
                            gflops = h.gflops,
                            memory_gb = h.memory_gb,
                            bandwidth_gbps = h.bandwidth_gbps,
                            "measured"
                        );
                    }
                    cli::node_register(
                        chain.as_ref(),
                        &kp,
                        market(m),
                        parse_roles(&roles)?,
                        hardware,
                    )?
                }
                NodeCmd::Stake { amount, from } => {
                    cli::node_stake(chain.as_ref(), &kp, amount, from)?
                }
                NodeCmd::Unstake { amount } => cli::node_unstake(chain.as_ref(), &kp, amount)?,
                NodeCmd::Withdraw { to } => cli::node_withdraw(chain.as_ref(), &kp, to)?,
                NodeCmd::Status { authority } => {
                    cli::node_status(chain.as_ref(), &authority.unwrap_or_else(|| kp.pubkey()))?
                }
            };
            print(out, &v)?;
        }
        Command::Task(cmd) => {
            let chain = rpc();
            let v = match cmd {
                TaskCmd::Post {
                    market: m,
                    id,
                    kind,
                    dims,
                    reward,
                    quorum,
                    samples,
                    seed,
                    region,
                    count,
                } => {
                    let kp = read_keypair(&keypair_path)?;
                    let id = id.unwrap_or_else(|| {
                        std::time::SystemTime::now()
                            .duration_since(std::time::UNIX_EPOCH)
                            .map(|d| d.as_millis() as u64)
                            .unwrap_or(0)
                    });
                    anyhow::ensure!(count >= 1, "--count must be at least 1");
                    let given = seed.as_deref().map(parse_seed).transpose()?;
                    let jobs = (id..id.checked_add(count).context("--id + --count overflows")?)
                        .map(|id| {
                            let seed = given.unwrap_or_else(|| {
                                compute_market_protocol::hash::hashv(&[
                                    b"cli seed",
                                    kp.pubkey().as_ref(),
                                    &id.to_le_bytes(),
                                ])
                            });
                            Ok((id, parse_job(&kind, &dims, seed)?))
                        })
                        .collect::<Result<Vec<_>>>()?;
                    let terms = cli::TaskTerms {
                        market: market(m),
                        reward,
                        quorum,
                        samples,
                        region,
                    };
                    let mut posted = cli::task_post(chain.as_ref(), &kp, terms, jobs)?;
                    if posted.len() == 1 {
                        posted.remove(0)
                    } else {
                        Value::Array(posted)
                    }
                }
                TaskCmd::Cancel { id } => {
                    cli::task_cancel(chain.as_ref(), &read_keypair(&keypair_path)?, id)?
                }
                TaskCmd::Status { task } => cli::task_status(chain.as_ref(), &task)?,
                TaskCmd::List { market: m } => cli::task_list(chain.as_ref(), m.or(file.market))?,
            };
            print(out, &v)?;
        }
        Command::Init(a) => {
            ensure!(
                a.windows.len() == 4,
                "--windows takes submit,join,commit,reveal"
            );
            let kp = read_keypair(&keypair_path)?;
            let market = compute_market::state::MarketArgs {
                id: a.market_id,
                name: a.market_name,
                min_gflops: a.min_gflops,
                min_memory_gb: a.min_memory_gb,
                quorum: a.quorum,
                samples: a.samples,
                windows: compute_market::state::Windows {
                    submit: a.windows[0],
                    join: a.windows[1],
                    commit: a.windows[2],
                    reveal: a.windows[3],
                },
                task_ttl: a.task_ttl,
            };
            let opts = compute_market_keeper::deploy::InitOptions {
                mint: a.mint,
                mint_keypair_out: expand(&a.mint_keypair_out),
                params: compute_market::state::Params::defaults(a.cooldown),
                update_delay: a.update_delay,
                market,
            };
            print(
                out,
                &compute_market_keeper::deploy::init(rpc().as_ref(), &kp, &opts)?,
            )?;
        }
        Command::Fund { owner, amount } => {
            let kp = read_keypair(&keypair_path)?;
            print(
                out,
                &compute_market_keeper::deploy::fund(rpc().as_ref(), &kp, &owner, amount)?,
            )?;
        }
        Command::Market(MarketCmd::List) => print(out, &cli::market_list(rpc().as_ref())?)?,
        Command::Run(a) => {
            ensure!(
                a.provider || a.verifier || a.crank,
                "choose at least one of --provider, --verifier, --crank"
            );
            let backend = select(a.backend)?;
            let kp = read_keypair(&keypair_path)?;
            let store = a
                .store
                .or(file.store.clone())
                .map(|s| expand(&s))
                .unwrap_or_else(|| {
                    expand(&format!(
                        "~/.local/share/compute-market/{}.redb",
                        kp.pubkey()
                    ))
                });
            let opts = daemon::DaemonOptions {
                provider: a.provider,
                verifier: a.verifier,
                crank: a.crank,
                market: market(a.market),
                store,
                listen: a
                    .listen
                    .or(file.listen.clone())
                    .unwrap_or_else(|| "127.0.0.1:9100".into()),
                public_url: a.public_url.or(file.public_url.clone()),
                poll: Duration::from_millis(a.poll_ms.or(file.poll_ms).unwrap_or(400)),
                passes: None,
                parallel: a.parallel,
                max_active: a.max_active,
                claim_backoff: a.claim_backoff,
                corrupt_fraction: a.corrupt_fraction,
                hold_after_commit: a.hold_after_commit_ms.map(Duration::from_millis),
                progress: Some(progress_bars()),
                ws_url: Some(daemon::ws_url(
                    &compute_market_keeper::chain::rpc::resolve_url(&url),
                )),
            };
            daemon::run(rpc(), kp, backend, opts, daemon::signals())?;
        }
    }
    Ok(())
}

//! The commands, one file each: a clap `Args`/`Subcommand` type with `execute(ctx)`, which calls
//! the library and alone turns its result into text or JSON.

use anyhow::Result;
use clap::{Parser, Subcommand};

use crate::context::{Ctx, Output};

pub mod bench;
pub mod compute;
pub mod demo;
pub mod faucet;
pub mod fund;
pub mod gpu_check;
pub mod init;
pub mod job;
pub mod market;
pub mod model;
pub mod node;
pub mod run;
pub mod serve;
pub mod task;

/// The command line: global flags and one command.
#[derive(Parser, Debug)]
#[command(
    name = "keeper",
    version,
    about = "Compute Market keeper: provider, verifier and cranker daemon and CLI"
)]
pub struct Cli {
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
    /// Amounts typed (rewards, stakes, funds) are base units, not tokens (for scripts; without
    /// it `1` is one token, converted with the stake mint's decimals read from chain).
    #[arg(long, global = true)]
    base_units: bool,
    /// More log lines: -v info, -vv debug (default: warnings only, info for `run`;
    /// RUST_LOG overrides).
    #[arg(short = 'v', long = "verbose", global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    #[command(subcommand)]
    pub command: Command,
}

/// One command.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Provider and verifier nodes.
    #[command(subcommand)]
    Node(node::NodeCmd),
    /// Client tasks.
    #[command(subcommand)]
    Task(task::TaskCmd),
    /// Markets.
    #[command(subcommand)]
    Market(market::MarketCmd),
    /// Models hosted on a content store, for jobs that name them.
    #[command(subcommand)]
    Model(model::ModelCmd),
    /// The daemon: any combination of --provider, --verifier, --crank.
    Run(run::RunArgs),
    /// A content store for clients' inputs (PUT/GET /c/<sha256>), no role.
    Serve(serve::ServeArgs),
    /// Deploy/initialize (idempotent): checks the program is deployed, creates or reuses the
    /// stake mint, the treasury, the config and a market.
    Init(init::InitArgs),
    /// Mints stake tokens to OWNER's associated token account (the keypair must be the mint
    /// authority: localnet/devnet set-ups).
    Fund(fund::FundArgs),
    /// An HTTP faucet of stake tokens on a local or dev cluster (`POST /fund/<address>`), for
    /// a page's "Get test tokens" button: the keypair must be the mint authority; refuses
    /// mainnet-beta and testnet.
    Faucet(faucet::FaucetArgs),
    /// Runs the whole market on an embedded cluster (litesvm with the built program): 3
    /// providers (one cheats), 5 verifiers (one careless), 20 tasks, a cranker; prints the
    /// outcome per task, slashes, payouts, costs, slots per phase and the performance model.
    Demo(demo::DemoArgs),
    /// Runs a job a client could post on this machine, through the provider's own code path
    /// (inputs checked as providers check them, every tile computed, the root a provider would
    /// commit), and writes the file `task result` would write: try before paying.
    Compute(compute::ComputeArgs),
    /// Measures compute and verification side by side (per job kind and size) and Merkle
    /// commit throughput next to raw SHA-256.
    Bench(bench::BenchArgs),
    /// On a GPU machine: every kernel against the CPU bit for bit (ragged sizes included), cold
    /// and warm start, and the benchmark on CPU and GPU side by side; writes report.json and
    /// report.md to --out. Fails when there is no usable GPU or a bit differs.
    GpuCheck(gpu_check::GpuCheckArgs),
}

impl Cli {
    /// Merges the settings once, then runs the command.
    pub fn execute(self) -> Result<()> {
        let ctx = Ctx::new(
            self.url,
            self.keypair,
            self.config.as_deref(),
            self.priority_fee,
            self.output,
        )?
        .with_base_units(self.base_units);
        match self.command {
            Command::Node(c) => c.execute(&ctx),
            Command::Task(c) => c.execute(&ctx),
            Command::Market(c) => c.execute(&ctx),
            Command::Model(c) => c.execute(&ctx),
            Command::Run(c) => c.execute(&ctx),
            Command::Serve(c) => c.execute(&ctx),
            Command::Init(c) => c.execute(&ctx),
            Command::Fund(c) => c.execute(&ctx),
            Command::Faucet(c) => c.execute(&ctx),
            Command::Demo(c) => c.execute(&ctx),
            Command::Compute(c) => c.execute(&ctx),
            Command::Bench(c) => c.execute(&ctx),
            Command::GpuCheck(c) => c.execute(&ctx),
        }
    }
}

//! `keeper`: the Compute Market daemon and CLI.

use anyhow::{ensure, Result};
use clap::{Parser, Subcommand, ValueEnum};
use std::sync::Arc;

use compute_market_keeper::{bench, compute::cpu::CpuBackend, demo};

/// Output format.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
enum Output {
    /// Human-readable tables.
    Text,
    /// One JSON document.
    Json,
}

#[derive(Parser, Debug)]
#[command(name = "keeper", version, about = "Compute Market keeper: provider, verifier and cranker daemon and CLI")]
struct Cli {
    /// Output format.
    #[arg(long, global = true, value_enum, default_value = "text")]
    output: Output,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
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
    },
    /// Measures compute and verification side by side (per job kind and size) and Merkle
    /// commit throughput next to raw SHA-256.
    Bench {
        /// MatMulModP sizes n (n×n·n×n), comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "256,512,1024")]
        sizes: Vec<u32>,
    },
}

fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match cli.command {
        Command::Demo { tasks, corrupt_fraction } => {
            ensure!(tasks >= 1, "--tasks must be at least 1");
            ensure!((0.0..=1.0).contains(&corrupt_fraction), "--corrupt-fraction must be within 0..=1");
            let cfg = demo::DemoConfig { tasks, corrupt_fraction, ..Default::default() };
            let report = demo::run(&cfg, Arc::new(CpuBackend))?;
            match cli.output {
                Output::Text => print!("{}", demo::render(&report)),
                Output::Json => println!("{}", serde_json::to_string_pretty(&report)?),
            }
        }
        Command::Bench { sizes } => {
            ensure!(
                sizes.iter().all(|&n| (1..=compute_market_protocol::job::MAX_MATRIX_DIM).contains(&n)),
                "--sizes: each n must be within 1..={}",
                compute_market_protocol::job::MAX_MATRIX_DIM
            );
            let report = bench::run(&CpuBackend, &sizes)?;
            match cli.output {
                Output::Text => print!("{}", bench::render(&report)),
                Output::Json => println!("{}", serde_json::to_string_pretty(&report)?),
            }
        }
    }
    Ok(())
}

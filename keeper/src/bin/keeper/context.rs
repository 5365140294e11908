//! What every command shares: the settings merged once from flags, the config file and the
//! defaults ([`Ctx`]), the output format and its printer, the `--backend` spelling, address
//! parsing, logging and the progress bars. The library draws and prints nothing; this does.

use std::{io::IsTerminal, sync::Arc};

use anchor_lang::prelude::Pubkey;
use anyhow::Result;
use clap::ValueEnum;
use compute_market_keeper::{
    chain::{rpc::RpcChain, Chain},
    compute::device::{self, BackendChoice},
    config::{read_keypair, FileConfig},
};
use serde_json::Value;
use solana_keypair::Keypair;

/// `--backend`: the library's [`BackendChoice`], spelled for the command line.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum Backend {
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

/// The backend chosen on the command line.
pub fn select(
    b: impl Into<BackendChoice>,
) -> Result<Arc<dyn compute_market_keeper::compute::Backend>> {
    device::select(b.into())
}

/// Output format.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum Output {
    /// Human-readable.
    Text,
    /// JSON, for scripts.
    Json,
}

/// The settings of one invocation: each from its flag, else the config file, else the default.
pub struct Ctx {
    /// RPC URL or moniker.
    pub url: String,
    /// Keypair file.
    pub keypair_path: String,
    /// The config file's values (for the settings a command reads itself).
    pub file: FileConfig,
    /// Priority fee, micro-lamports per CU.
    pub priority_fee: u64,
    /// Output format.
    pub output: Output,
    /// Amounts typed are base units (`--base-units`), not tokens.
    pub base_units: bool,
    /// The stake mint's decimals, read from chain once.
    decimals: std::sync::OnceLock<u8>,
}

impl Ctx {
    /// Merges `url`, `keypair`, `priority_fee` given as flags with the config file at `config`.
    pub fn new(
        url: Option<String>,
        keypair: Option<String>,
        config: Option<&str>,
        priority_fee: Option<u64>,
        output: Output,
    ) -> Result<Self> {
        let file = FileConfig::load(config)?;
        Ok(Ctx {
            url: url
                .or(file.url.clone())
                .unwrap_or_else(|| "localhost".into()),
            keypair_path: keypair
                .or(file.keypair.clone())
                .unwrap_or_else(|| "~/.config/solana/id.json".into()),
            priority_fee: priority_fee.or(file.priority_fee).unwrap_or(0),
            file,
            output,
            base_units: false,
            decimals: std::sync::OnceLock::new(),
        })
    }

    /// With `--base-units` as given.
    pub fn with_base_units(mut self, base_units: bool) -> Self {
        self.base_units = base_units;
        self
    }

    /// The stake mint's decimals (read from chain the first time).
    pub fn decimals(&self) -> Result<u8> {
        if let Some(d) = self.decimals.get() {
            return Ok(*d);
        }
        let (_, d) = compute_market_keeper::amount::stake_token(self.rpc().as_ref())?;
        Ok(*self.decimals.get_or_init(|| d))
    }

    /// Whether `typed` has the shape of an amount (no network call): tokens, or base units with
    /// `--base-units`.
    pub fn amount_shape(&self, typed: &str, flag: &str) -> Result<()> {
        use anyhow::Context as _;
        if self.base_units {
            compute_market_keeper::amount::parse_base(typed).map(|_| ())
        } else {
            compute_market_keeper::amount::ui_parts(typed).map(|_| ())
        }
        .with_context(|| flag.to_string())
    }

    /// An amount a person typed for `flag`, in base units: tokens with the stake mint's
    /// decimals, or base units with `--base-units`. Malformed or negative amounts are refused
    /// before the chain is asked.
    pub fn amount(&self, typed: &str, flag: &str) -> Result<u64> {
        use anyhow::Context as _;
        let with = |r: Result<u64>| r.with_context(|| flag.to_string());
        if self.base_units {
            return with(compute_market_keeper::amount::parse_base(typed));
        }
        // the shape first: a typo is named without a network call
        with(compute_market_keeper::amount::ui_parts(typed).map(|_| 0))?;
        with(compute_market_keeper::amount::parse_ui(
            typed,
            self.decimals()?,
        ))
    }

    /// The market: the flag's, else the config file's, else 1.
    pub fn market(&self, flag: Option<u16>) -> u16 {
        flag.or(self.file.market).unwrap_or(1)
    }

    /// A chain over RPC with the priority fee.
    pub fn rpc(&self) -> Arc<dyn Chain> {
        let mut c = RpcChain::new(&self.url);
        c.priority_fee = self.priority_fee;
        Arc::new(c)
    }

    /// The signer.
    pub fn keypair(&self) -> Result<Keypair> {
        read_keypair(&self.keypair_path)
    }

    /// Prints a library result in the chosen format.
    pub fn print(&self, v: &impl serde::Serialize) -> Result<()> {
        print(self.output, &serde_json::to_value(v)?)
    }

    /// Prints a report: `text` as it is, or `report` as JSON.
    pub fn print_report(&self, text: &str, report: &impl serde::Serialize) -> Result<()> {
        match self.output {
            Output::Text => print!("{text}"),
            Output::Json => println!("{}", serde_json::to_string_pretty(report)?),
        }
        Ok(())
    }
}

/// Logs to stderr: warnings only for a command, info for `run`, more with -v / -vv; RUST_LOG
/// overrides; colour codes only on a terminal.
pub fn init_logging(verbose: u8, daemon: bool) {
    let default = match (verbose, daemon) {
        (0, true) | (1, _) => "info",
        (0, false) => "warn",
        _ => "debug",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| default.into()),
        )
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .init();
}

/// Prints `v` as JSON, or as aligned `key: value` lines.
pub fn print(output: Output, v: &Value) -> Result<()> {
    match output {
        Output::Json => println!("{}", serde_json::to_string_pretty(v)?),
        Output::Text => match v {
            Value::Array(items) if items.is_empty() => println!("(none)"),
            Value::Array(items) => items.iter().try_for_each(|i| print(output, i))?,
            Value::Object(map) => {
                for (k, val) in map {
                    // a Generate result's completions: each prompt, then its text, indented
                    if let (true, Value::Array(cs)) = (k == "completions", val) {
                        println!("{k:>16}:");
                        for c in cs {
                            let text =
                                |f: &str| c[f].as_str().unwrap_or("").replace('\n', "\n      ");
                            println!("  [{}] {}", c["row"], text("prompt"));
                            println!(
                                "      {}\n      ({} tokens{})",
                                text("text"),
                                c["tokens"],
                                if c["finished"] == true {
                                    ", finished"
                                } else {
                                    ", cut at the bound"
                                }
                            );
                        }
                        continue;
                    }
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
pub fn parse_address(s: &str) -> std::result::Result<Pubkey, String> {
    s.parse()
        .map_err(|_| format!("{s:?} is not a base58 address (a 32-byte public key)"))
}

/// Progress bars on the terminal (hidden elsewhere), one per piece of long work, gone when it
/// is done.
pub fn progress_bars() -> Arc<compute_market_keeper::roles::Reporter> {
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

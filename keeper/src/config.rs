//! Keeper settings: Solana CLI habits (`-u/--url` with monikers, `-k/--keypair` defaulting to
//! `~/.config/solana/id.json`), a TOML file (`-C`, default `~/.config/compute-market/keeper.toml`),
//! command-line flags over file values over defaults.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::Deserialize;
use solana_keypair::Keypair;

/// Values the TOML file may set.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// RPC URL or moniker.
    pub url: Option<String>,
    /// Keypair file.
    pub keypair: Option<String>,
    /// Market id.
    pub market: Option<u16>,
    /// Keeper store file.
    pub store: Option<String>,
    /// HTTP listen address (results and /metrics).
    pub listen: Option<String>,
    /// Public base URL of the HTTP server, as verifiers reach it.
    pub public_url: Option<String>,
    /// Priority fee, micro-lamports per compute unit.
    pub priority_fee: Option<u64>,
    /// Poll interval, milliseconds.
    pub poll_ms: Option<u64>,
}

/// Expands a leading `~/`.
pub fn expand(path: &str) -> PathBuf {
    match (path.strip_prefix("~/"), std::env::var_os("HOME")) {
        (Some(rest), Some(home)) => Path::new(&home).join(rest),
        _ => PathBuf::from(path),
    }
}

impl FileConfig {
    /// Reads `path`; a missing default file is an empty config, a missing explicit one an error.
    pub fn load(path: Option<&str>) -> Result<Self> {
        let (path, explicit) = match path {
            Some(p) => (expand(p), true),
            None => (expand("~/.config/compute-market/keeper.toml"), false),
        };
        if !path.exists() {
            if explicit {
                bail!("config file {} does not exist", path.display());
            }
            return Ok(Self::default());
        }
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        toml::from_str(&text)
            .with_context(|| format!("config file {} is not valid", path.display()))
    }
}

/// Reads a Solana CLI keypair file (a JSON array of 64 bytes).
pub fn read_keypair(path: &str) -> Result<Keypair> {
    let p = expand(path);
    let text = std::fs::read_to_string(&p).with_context(|| {
        format!(
            "cannot read keypair file {} (create one with `solana-keygen new`)",
            p.display()
        )
    })?;
    let bytes: Vec<u8> = serde_json::from_str(&text)
        .with_context(|| format!("keypair file {} is not a JSON byte array", p.display()))?;
    Keypair::try_from(&bytes[..])
        .map_err(|e| anyhow::anyhow!("keypair file {} is not a valid keypair: {e}", p.display()))
}

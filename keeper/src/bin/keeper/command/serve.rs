//! `keeper serve`: a content store for clients (`PUT /c/<hash>`, `GET /c/<hash>`) and the
//! results it holds, without any role; stopped cleanly by Ctrl-C or SIGTERM.

use std::sync::{atomic::AtomicBool, Arc};

use anyhow::{bail, Context, Result};
use clap::Args;
use compute_market_keeper::{
    config::expand,
    daemon,
    metrics::Metrics,
    results::{admission::Admitted, server::own_hosts, ResultStore},
};

use crate::context::Ctx;

/// Where and how much it stores.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// HTTP listen address.
    #[arg(long, default_value = "127.0.0.1:9200")]
    listen: String,
    /// The URL clients reach this store under (`https://store.example`): its host (and port)
    /// is one of the names this server answers signed requests for, besides the listening
    /// address. Needed for admission when listening on 0.0.0.0 or [::], or behind a proxy.
    #[arg(long)]
    public_url: Option<String>,
    /// Directory of the store (objects under `<dir>/content`).
    #[arg(long, default_value = "~/.local/share/compute-market/serve")]
    dir: String,
    /// Most disk the store may take, MiB (uploads that would need more are refused).
    #[arg(long, default_value_t = 16 << 10)]
    budget_mib: u64,
    /// An origin (`https://app.example`, or `*`) whose pages may upload to this store and
    /// fetch from it (CORS); repeat for more. None: no page elsewhere can.
    #[arg(long = "cors-origin")]
    cors_origins: Vec<String>,
    /// A node's public key (base58) whose signed requests (made for this server) are admitted
    /// ahead of strangers' (never evicted, a pool of transfers of their own), as `KEY` or
    /// `KEY=STAKE`: its weight, token base units, for its share of the nodes' places
    /// [default: --admit-min-stake]; repeat for more.
    #[arg(long = "admit")]
    admit: Vec<String>,
    /// Also admit the nodes of this market holding at least --admit-min-stake, each weighted
    /// by its stake (free + bonded), read from chain (--url) every minute.
    #[arg(long)]
    admit_market: Option<u16>,
    /// Least stake (token base units) of an admitted node. The market sets no floor yet: a
    /// store sets its own.
    #[arg(long, default_value_t = daemon::ADMIT_MIN_STAKE)]
    admit_min_stake: u64,
}

/// `--admit KEY[=STAKE]`: the key and its weight (`min_stake` when not given).
fn parse_admit(arg: &str, min_stake: u64) -> Result<(anchor_lang::prelude::Pubkey, u64)> {
    let (key, stake) = match arg.split_once('=') {
        Some((k, w)) => (
            k,
            w.trim().parse::<u64>().map_err(|e| {
                anyhow::anyhow!(
                    "--admit {arg:?}: the stake after '=' is a whole number of token base \
                     units ({e})"
                )
            })?,
        ),
        None => (arg, min_stake),
    };
    let key = key
        .trim()
        .parse()
        .map_err(|e| anyhow::anyhow!("--admit {arg:?}: {key:?} is not a public key: {e}"))?;
    if stake < min_stake {
        bail!(
            "--admit {arg:?}: a stake of {stake} is below --admit-min-stake ({min_stake}), so the \
             key would not be admitted: give at least {min_stake}, or leave the key out"
        );
    }
    Ok((key, stake))
}

impl ServeArgs {
    /// Serves until signalled.
    pub fn execute(self, ctx: &Ctx) -> Result<()> {
        // every connection is a descriptor: the usual soft limit (1 024) is far below the cap
        daemon::raise_open_files();
        let min_stake = daemon::admit_min_stake(self.admit_min_stake)?;
        let fixed = Admitted::new(
            self.admit
                .iter()
                .map(|a| parse_admit(a, min_stake))
                .collect::<Result<Vec<_>>>()?,
        );
        if let Some(u) = &self.public_url {
            let parsed = reqwest::Url::parse(u)
                .ok()
                .filter(|p| matches!(p.scheme(), "http" | "https") && p.host_str().is_some());
            if parsed.is_none() {
                bail!("--public-url {u:?} is not an http(s) URL with a host (e.g. https://store.example or http://203.0.113.5:9200)");
            }
        }
        // bound first: the names it answers to include the address actually bound
        let listener = std::net::TcpListener::bind(&self.listen)
            .with_context(|| format!("cannot listen on {}", self.listen))?;
        let local = listener.local_addr()?;
        let hosts = own_hosts(self.public_url.as_deref(), local);
        if hosts.is_empty() && (!fixed.is_empty() || self.admit_market.is_some()) {
            bail!(
                "--admit: listening on {local} names no host clients send, so a signature made \
                 for this store could not be told from one made for another: give --public-url \
                 with the name clients reach it under (e.g. http://203.0.113.5:{})",
                local.port()
            );
        }
        let dir = expand(&self.dir);
        let store = Arc::new(ResultStore::open(&dir, self.budget_mib << 20, None)?);
        let metrics = Arc::new(Metrics::default());
        let _ = store.metrics.set(metrics.clone());
        let limits = compute_market_keeper::results::server::ServerLimits {
            cors_origins: self.cors_origins,
            // signed requests count as a node's only when made for this store
            own_hosts: hosts.clone(),
            ..Default::default()
        };
        let server = compute_market_keeper::results::server::serve_listener(
            store.clone(),
            metrics,
            listener,
            limits,
        )?;
        *server.admitted.write().expect("signers lock") = fixed.clone();
        let stop = Arc::new(AtomicBool::new(false));
        let nodes = match self.admit_market {
            Some(id) => Some(daemon::admit_nodes(
                ctx.rpc(),
                compute_market::pda::market(id),
                min_stake,
                fixed,
                server.admitted.clone(),
                stop.clone(),
            )?),
            None => None,
        };
        tracing::info!(addr = %server.addr, names = ?hosts, dir = %dir.display(), objects_bytes = store.content.bytes(), results = store.stats().results, "serving /c/<hash> and /r/<root>");
        eprintln!("serving the content store at http://{}", server.addr);
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(daemon::signals());
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(t) = nodes {
            let _ = t.join();
        }
        server.shutdown();
        Ok(())
    }
}

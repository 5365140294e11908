//! `keeper serve`: a content store for clients (`PUT /c/<hash>`, `GET /c/<hash>`) and the
//! results it holds, without any role; stopped cleanly by Ctrl-C or SIGTERM.

use std::sync::Arc;

use anyhow::Result;
use clap::Args;
use compute_market_keeper::{config::expand, daemon, metrics::Metrics, results::ResultStore};

use crate::context::Ctx;

/// Where and how much it stores.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// HTTP listen address.
    #[arg(long, default_value = "127.0.0.1:9200")]
    listen: String,
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
    /// A node's public key (base58) whose signed requests are admitted ahead of strangers'
    /// (never evicted, a pool of transfers of their own); repeat for more.
    #[arg(long = "admit")]
    admit: Vec<String>,
}

impl ServeArgs {
    /// Serves until signalled.
    pub fn execute(self, _ctx: &Ctx) -> Result<()> {
        // every connection is a descriptor: the usual soft limit (1 024) is far below the cap
        daemon::raise_open_files();
        let admit = self
            .admit
            .iter()
            .map(|k| {
                k.parse::<anchor_lang::prelude::Pubkey>()
                    .map_err(|e| anyhow::anyhow!("--admit {k:?} is not a public key: {e}"))
            })
            .collect::<Result<Vec<_>>>()?;
        let dir = expand(&self.dir);
        let store = Arc::new(ResultStore::open(&dir, self.budget_mib << 20, None)?);
        let metrics = Arc::new(Metrics::default());
        let _ = store.metrics.set(metrics.clone());
        let limits = compute_market_keeper::results::server::ServerLimits {
            cors_origins: self.cors_origins,
            ..Default::default()
        };
        let server = compute_market_keeper::results::server::serve_with(
            store.clone(),
            metrics,
            &self.listen,
            limits,
        )?;
        server.admitted.write().expect("signers lock").extend(admit);
        tracing::info!(addr = %server.addr, dir = %dir.display(), objects_bytes = store.content.bytes(), results = store.stats().results, "serving /c/<hash> and /r/<root>");
        eprintln!("serving the content store at http://{}", server.addr);
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(daemon::signals());
        server.shutdown();
        Ok(())
    }
}

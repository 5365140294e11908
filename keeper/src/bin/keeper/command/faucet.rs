//! `keeper faucet`: stake tokens over HTTP for a page's "Get test tokens" button, on a local or
//! dev cluster; stopped cleanly by Ctrl-C or SIGTERM.

use std::{sync::Arc, time::Duration};

use anyhow::{Context, Result};
use clap::Args;
use compute_market_keeper::{
    chain::rpc::RpcChain,
    daemon,
    faucet::{self, Faucet, FaucetLimits},
};

use crate::context::Ctx;

/// Where it listens and what it gives.
#[derive(Args, Debug)]
pub struct FaucetArgs {
    /// HTTP listen address.
    #[arg(long, default_value = "127.0.0.1:9400")]
    listen: String,
    /// Tokens each request mints, in whole tokens (`1000`, `0.5`), converted exactly with the
    /// stake mint's decimals.
    #[arg(long, default_value = "1000")]
    amount: String,
    /// Seconds an owner waits between two grants (sooner: 429 with Retry-After).
    #[arg(long, default_value_t = 10)]
    every_s: u64,
    /// Grants being minted at once (more: 503 with Retry-After).
    #[arg(long, default_value_t = 4)]
    in_flight: usize,
    /// An origin (`https://app.example`, or `*`) whose pages may call the faucet (CORS), as
    /// `keeper serve --cors-origin`; repeat for more. None: no page elsewhere can.
    #[arg(long = "cors-origin")]
    cors_origins: Vec<String>,
}

impl FaucetArgs {
    /// Serves until signalled.
    pub fn execute(self, ctx: &Ctx) -> Result<()> {
        let mut chain = RpcChain::new(&ctx.url);
        chain.priority_fee = ctx.priority_fee;
        let genesis = chain.genesis_hash()?;
        let faucet = Arc::new(Faucet::new(
            Arc::new(chain),
            ctx.keypair()?,
            &genesis,
            &self.amount,
            Duration::from_secs(self.every_s),
        )?);
        let listener = std::net::TcpListener::bind(&self.listen)
            .with_context(|| format!("cannot listen on {}", self.listen))?;
        let limits = FaucetLimits {
            in_flight: self.in_flight,
            cors_origins: self.cors_origins,
            ..Default::default()
        };
        let server = faucet::serve_listener(faucet.clone(), listener, limits)?;
        let info = faucet.info();
        tracing::info!(addr = %server.addr, cluster = %info.cluster, mint = %info.mint, amount = %info.amount, every_s = info.every_s, "faucet: serving GET / and POST /fund/<address>");
        eprintln!(
            "faucet for {} tokens of {} ({}) at http://{}",
            info.amount, info.mint, info.cluster, server.addr
        );
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(daemon::signals());
        server.shutdown();
        Ok(())
    }
}

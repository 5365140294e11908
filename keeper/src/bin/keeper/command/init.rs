//! `keeper init`: deploy-time initialization, idempotent (config, mint, treasury, market).

use anchor_lang::prelude::Pubkey;
use anyhow::{ensure, Result};
use clap::Args;
use compute_market_keeper::config::expand;

use crate::context::{parse_address, Ctx};

/// What `keeper init` creates when missing.
#[derive(Args, Debug)]
pub struct InitArgs {
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
    /// Smallest quorum a task may ask for (no override below it).
    #[arg(long, default_value_t = 3)]
    min_quorum: u8,
    /// Default samples k.
    #[arg(long, default_value_t = 16)]
    samples: u16,
    /// Windows submit,join,commit,reveal in slots.
    #[arg(long, value_delimiter = ',', default_value = "300,100,100,100")]
    windows: Vec<u32>,
    /// Slots an unclaimed task stays open.
    #[arg(long, default_value_t = 1_000)]
    task_ttl: u32,
    /// Slots a decided verdict stays open to disputes before its money moves (PROTOCOL §8.1;
    /// at most 10 000; keepers point their INVALID votes, watch and dispute, §8.8). 0: no
    /// disputes, every verdict final when decided.
    #[arg(long, default_value_t = 0)]
    dispute_window: u32,
    /// Unstake cooldown, slots (must exceed twice the longest task).
    #[arg(long, default_value_t = 3_000)]
    cooldown: u64,
    /// Parameter-update delay, slots.
    #[arg(long, default_value_t = 100)]
    update_delay: u64,
}

impl InitArgs {
    /// Runs the command and prints what exists afterwards.
    pub fn execute(self, ctx: &Ctx) -> Result<()> {
        ensure!(
            self.windows.len() == 4,
            "--windows takes submit,join,commit,reveal"
        );
        let kp = ctx.keypair()?;
        let market = compute_market::state::MarketArgs {
            id: self.market_id,
            name: self.market_name,
            min_gflops: self.min_gflops,
            min_memory_gb: self.min_memory_gb,
            quorum: self.quorum,
            samples: self.samples,
            windows: compute_market::state::Windows {
                submit: self.windows[0],
                join: self.windows[1],
                commit: self.windows[2],
                reveal: self.windows[3],
            },
            task_ttl: self.task_ttl,
            min_quorum: self.min_quorum,
            dispute_window: self.dispute_window,
        };
        let opts = compute_market_keeper::deploy::InitOptions {
            mint: self.mint,
            mint_keypair_out: expand(&self.mint_keypair_out),
            params: compute_market::state::Params::defaults(self.cooldown),
            update_delay: self.update_delay,
            market,
        };
        ctx.print(&compute_market_keeper::deploy::init(
            ctx.rpc().as_ref(),
            &kp,
            &opts,
        )?)
    }
}

//! `keeper market`: list.

use anyhow::Result;
use clap::Subcommand;
use compute_market_keeper::cli;

use crate::context::Ctx;

/// Markets.
#[derive(Subcommand, Debug)]
pub enum MarketCmd {
    /// Lists markets.
    List,
}

impl MarketCmd {
    /// Runs the command and prints its result.
    pub fn execute(self, ctx: &Ctx) -> Result<()> {
        match self {
            MarketCmd::List => ctx.print(&cli::market_list(ctx.rpc().as_ref())?),
        }
    }
}

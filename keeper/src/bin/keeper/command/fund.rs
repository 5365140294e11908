//! `keeper fund`: mints stake tokens to a wallet (localnet/devnet set-ups).

use anchor_lang::prelude::Pubkey;
use anyhow::Result;
use clap::Args;

use crate::context::{parse_address, Ctx};

/// Whom to fund, and how much.
#[derive(Args, Debug)]
pub struct FundArgs {
    /// Wallet to fund.
    #[arg(value_parser = parse_address)]
    owner: Pubkey,
    /// Amount in tokens (`1000`, `0.5`); base units with --base-units.
    #[arg(allow_hyphen_values = true, value_name = "TOKENS")]
    amount: String,
}

impl FundArgs {
    /// Mints and prints the new balance.
    pub fn execute(self, ctx: &Ctx) -> Result<()> {
        let kp = ctx.keypair()?;
        let amount = ctx.amount(&self.amount, "the amount to fund")?;
        ctx.print(&compute_market_keeper::deploy::fund(
            ctx.rpc().as_ref(),
            &kp,
            &self.owner,
            amount,
        )?)
    }
}

//! `claim_earnings`: rewards out of the vault, at any time (accounts: [`Payout`]).
use anchor_lang::prelude::*;

use super::withdraw::Payout;
use crate::{errors::MarketError, events::EarningsClaimed};

impl Payout<'_> {
    /// Claim earnings: something was earned.
    pub fn validate_claim(&self) -> Result<()> {
        require!(self.node.earned > 0, MarketError::NoEarnings);
        Ok(())
    }
}

pub fn handler(ctx: Context<Payout>) -> Result<()> {
    let amount = ctx.accounts.node.earned;
    ctx.accounts.node.earned = 0;
    let a = &ctx.accounts;
    a.pay(amount)?;
    emit!(EarningsClaimed {
        node: a.node.key(),
        amount,
        destination: a.destination.key()
    });
    Ok(())
}

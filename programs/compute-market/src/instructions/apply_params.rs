//! `apply_params`: anyone applies a proposal once its delay has passed.
use anchor_lang::prelude::*;

use crate::{constants::*, errors::MarketError, events::ParamsApplied, state::*};

#[derive(Accounts)]
pub struct ApplyParams<'info> {
    #[account(mut, seeds = [SEED_CONFIG], bump = config.bump)]
    pub config: Account<'info, Config>,
}

impl ApplyParams<'_> {
    /// A proposal exists, its delay has passed and it still fits every market.
    pub fn validate(&self) -> Result<()> {
        let c = &self.config;
        require!(c.pending_effective_slot != 0, MarketError::NoPendingUpdate);
        require!(
            Clock::get()?.slot >= c.pending_effective_slot,
            MarketError::UpdateNotYetEffective
        );
        c.pending.validate(c.longest_task)
    }
}

pub fn handler(ctx: Context<ApplyParams>) -> Result<()> {
    let config = &mut ctx.accounts.config;
    config.params = config.pending;
    config.pending_effective_slot = 0;
    emit!(ParamsApplied {
        params: config.params,
        slot: Clock::get()?.slot
    });
    Ok(())
}

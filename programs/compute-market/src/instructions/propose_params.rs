//! `propose_params`: the admin proposes bounded new parameters, applicable after the delay.
use anchor_lang::prelude::*;

use crate::{constants::*, errors::MarketError, events::ParamsProposed, math, state::*};

#[derive(Accounts)]
pub struct ProposeParams<'info> {
    #[account(mut, seeds = [SEED_CONFIG], bump = config.bump, has_one = admin @ MarketError::WrongAuthority)]
    pub config: Account<'info, Config>,
    pub admin: Signer<'info>,
}

impl ProposeParams<'_> {
    /// The proposal must satisfy every bound, given the markets that exist.
    pub fn validate(&self, params: &Params) -> Result<()> {
        params.validate(self.config.longest_task)
    }
}

pub fn handler(ctx: Context<ProposeParams>, params: Params) -> Result<()> {
    let config = &mut ctx.accounts.config;
    // longer than the cooldown in force: whoever disagrees can leave before it applies
    let effective_slot = math::add(Clock::get()?.slot, config.effective_delay()?)?;
    config.pending = params;
    config.pending_effective_slot = effective_slot;
    emit!(ParamsProposed {
        params,
        effective_slot
    });
    Ok(())
}

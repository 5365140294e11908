//! `initialize_config`: creates the singleton config (once; a second call fails).
use anchor_lang::prelude::*;
use anchor_spl::token::{Mint, TokenAccount};

use crate::{constants::*, errors::MarketError, events::ConfigInitialized, state::*};

/// Arguments of `initialize_config`.
#[derive(AnchorSerialize, AnchorDeserialize, Clone)]
pub struct InitializeConfigArgs {
    /// Initial parameters.
    pub params: Params,
    /// Slots between a parameter proposal and its application.
    pub update_delay: u64,
}

#[derive(Accounts)]
pub struct InitializeConfig<'info> {
    #[account(init, payer = admin, space = 8 + Config::INIT_SPACE, seeds = [SEED_CONFIG], bump)]
    pub config: Account<'info, Config>,
    /// The token staked, bonded and paid.
    pub stake_mint: Account<'info, Mint>,
    /// Receives swept fees.
    #[account(constraint = treasury.mint == stake_mint.key() @ MarketError::WrongMint)]
    pub treasury: Account<'info, TokenAccount>,
    #[account(mut)]
    pub admin: Signer<'info>,
    pub system_program: Program<'info, System>,
}

impl InitializeConfig<'_> {
    /// Bounds of the parameters and the delay.
    pub fn validate(&self, args: &InitializeConfigArgs) -> Result<()> {
        args.params.validate(0)?;
        require!(
            (MIN_UPDATE_DELAY..=MAX_UPDATE_DELAY).contains(&args.update_delay),
            MarketError::UpdateDelayOutOfBounds
        );
        Ok(())
    }
}

pub fn handler(ctx: Context<InitializeConfig>, args: InitializeConfigArgs) -> Result<()> {
    let config = &mut ctx.accounts.config;
    config.set_inner(Config {
        admin: ctx.accounts.admin.key(),
        stake_mint: ctx.accounts.stake_mint.key(),
        treasury: ctx.accounts.treasury.key(),
        params: args.params,
        pending: args.params,
        pending_effective_slot: 0,
        update_delay: args.update_delay,
        longest_task: 0,
        market_count: 0,
        bump: ctx.bumps.config,
    });
    emit!(ConfigInitialized {
        admin: config.admin,
        stake_mint: config.stake_mint,
        treasury: config.treasury,
        params: args.params,
        update_delay: args.update_delay,
    });
    Ok(())
}

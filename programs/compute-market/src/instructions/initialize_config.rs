//! `initialize_config`: creates the singleton config (once; a second call fails). Only the
//! program's upgrade authority may sign it, so nobody can front-run the deployment with their
//! own mint or treasury; the stake mint must have no freeze authority (which could freeze
//! every vault and escrow).
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
    /// The token staked, bonded and paid: no freeze authority.
    #[account(constraint = stake_mint.freeze_authority.is_none() @ MarketError::MintHasFreezeAuthority)]
    pub stake_mint: Account<'info, Mint>,
    /// Receives swept fees.
    #[account(constraint = treasury.mint == stake_mint.key() @ MarketError::WrongMint)]
    pub treasury: Account<'info, TokenAccount>,
    /// The upgrade authority of this program, which becomes the admin.
    #[account(mut)]
    pub admin: Signer<'info>,
    /// This program (upgradeable), naming its program-data account.
    #[account(constraint = program.programdata_address()? == Some(program_data.key()) @ MarketError::NotUpgradeAuthority)]
    pub program: Program<'info, crate::program::ComputeMarket>,
    /// The program-data account, naming the upgrade authority.
    #[account(constraint = program_data.upgrade_authority_address == Some(admin.key()) @ MarketError::NotUpgradeAuthority)]
    pub program_data: Account<'info, ProgramData>,
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
        version: ACCOUNT_VERSION,
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
        reserved: [0; 128],
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

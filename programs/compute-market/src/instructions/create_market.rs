//! `create_market`: the admin opens a sub-network for one GPU class.
use anchor_lang::prelude::*;

use crate::{constants::*, errors::MarketError, events::MarketCreated, state::*};

#[derive(Accounts)]
#[instruction(args: MarketArgs)]
pub struct CreateMarket<'info> {
    #[account(mut, seeds = [SEED_CONFIG], bump = config.bump, has_one = admin @ MarketError::WrongAuthority)]
    pub config: Account<'info, Config>,
    #[account(
        init, payer = admin, space = 8 + Market::INIT_SPACE,
        seeds = [SEED_MARKET, &args.id.to_le_bytes()], bump,
    )]
    pub market: Account<'info, Market>,
    #[account(mut)]
    pub admin: Signer<'info>,
    pub system_program: Program<'info, System>,
}

impl CreateMarket<'_> {
    /// Bounds of quorum, samples, windows and TTL; the cooldown must outlast its tasks.
    pub fn validate(&self, args: &MarketArgs) -> Result<()> {
        require!(args.name.len() <= MAX_NAME_LEN, MarketError::NameTooLong);
        validate_market_quorum(effective_min_quorum(args.min_quorum), args.quorum)?;
        validate_samples(args.samples)?;
        args.windows.validate()?;
        require!(
            args.dispute_window == 0
                || (MIN_DISPUTE_WINDOW..=MAX_DISPUTE_WINDOW).contains(&args.dispute_window),
            MarketError::WindowOutOfBounds
        );
        require!(
            (MIN_TASK_TTL..=MAX_TASK_TTL).contains(&args.task_ttl),
            MarketError::WindowOutOfBounds
        );
        require!(
            self.config.params.unstake_cooldown
                > args
                    .windows
                    .longest_task(args.dispute_window)
                    .saturating_mul(2),
            MarketError::CooldownTooShort
        );
        Ok(())
    }
}

/// A market's minimum quorum: as asked, or [`DEFAULT_MIN_QUORUM`] when 0.
fn effective_min_quorum(asked: u8) -> u8 {
    if asked == 0 {
        DEFAULT_MIN_QUORUM
    } else {
        asked
    }
}

pub fn handler(ctx: Context<CreateMarket>, args: MarketArgs) -> Result<()> {
    let mut name = [0u8; MAX_NAME_LEN];
    name[..args.name.len()].copy_from_slice(args.name.as_bytes());
    ctx.accounts.market.set_inner(Market {
        version: ACCOUNT_VERSION,
        id: args.id,
        name,
        min_gflops: args.min_gflops,
        min_memory_gb: args.min_memory_gb,
        quorum: args.quorum,
        samples: args.samples,
        windows: args.windows,
        task_ttl: args.task_ttl,
        providers: 0,
        verifiers: 0,
        verifier_stake: 0,
        stake_slot: 0,
        slot_start_stake: 0,
        bump: ctx.bumps.market,
        min_quorum: effective_min_quorum(args.min_quorum),
        dispute_window: args.dispute_window,
        reserved: [0; 59],
    });
    let config = &mut ctx.accounts.config;
    config.longest_task = config
        .longest_task
        .max(args.windows.longest_task(args.dispute_window));
    config.market_count = config
        .market_count
        .checked_add(1)
        .ok_or(MarketError::MathOverflow)?;
    emit!(MarketCreated {
        market: ctx.accounts.market.key(),
        id: args.id,
        args
    });
    Ok(())
}

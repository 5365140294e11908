//! `request_unstake`: free stake → pending, withdrawable after the cooldown.
use anchor_lang::prelude::*;

use crate::{constants::*, errors::MarketError, events::UnstakeRequested, math, state::*};

#[derive(Accounts)]
pub struct RequestUnstake<'info> {
    #[account(seeds = [SEED_CONFIG], bump = config.bump)]
    pub config: Account<'info, Config>,
    #[account(mut, seeds = [SEED_MARKET, &market.id.to_le_bytes()], bump = market.bump)]
    pub market: Account<'info, Market>,
    #[account(
        mut, seeds = [SEED_NODE, authority.key().as_ref()], bump = node.bump,
        has_one = authority @ MarketError::WrongAuthority,
        has_one = market @ MarketError::WrongMarket,
    )]
    pub node: Account<'info, Node>,
    pub authority: Signer<'info>,
}

impl RequestUnstake<'_> {
    /// A positive amount within the free stake (bonded stake never unstakes).
    pub fn validate(&self, amount: u64) -> Result<()> {
        require!(amount > 0, MarketError::ZeroAmount);
        require!(amount <= self.node.free, MarketError::InsufficientFreeStake);
        Ok(())
    }
}

pub fn handler(ctx: Context<RequestUnstake>, amount: u64) -> Result<()> {
    let unlock_slot = math::add(
        Clock::get()?.slot,
        ctx.accounts.config.params.unstake_cooldown,
    )?;
    let node = &mut ctx.accounts.node;
    node.free = math::sub(node.free, amount)?;
    node.pending_unstake = math::add(node.pending_unstake, amount)?;
    node.unlock_slot = unlock_slot;
    if node.has(ROLE_VERIFIER) {
        // a sortition denominator, not a balance: slashes may already have lowered the real sum
        let market = &mut ctx.accounts.market;
        market.verifier_stake = market.verifier_stake.saturating_sub(amount);
    }
    emit!(UnstakeRequested {
        node: node.key(),
        amount,
        pending: node.pending_unstake,
        unlock_slot
    });
    Ok(())
}

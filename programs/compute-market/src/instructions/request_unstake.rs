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
        // a second request would push back the unlock slot of what is already pending
        require!(
            self.node.pending_unstake == 0,
            MarketError::UnstakeAlreadyPending
        );
        Ok(())
    }
}

pub fn handler(ctx: Context<RequestUnstake>, amount: u64) -> Result<()> {
    let now = Clock::get()?.slot;
    let unlock_slot = math::add(now, ctx.accounts.config.params.unstake_cooldown)?;
    let node = &mut ctx.accounts.node;
    // books the amount (and any earlier slash) as stake debt, settled against the market now
    // (a round starting in this slot still sees the total as it stood before it: §3.1)
    node.unstake(amount, unlock_slot)?;
    ctx.accounts.market.settle_debt(node, now);
    emit!(UnstakeRequested {
        node: node.key(),
        amount,
        pending: node.pending_unstake,
        unlock_slot
    });
    Ok(())
}

//! `sync_stake`: anyone subtracts a node's slashed stake from its market's sortition total.
//! Slashes happen on a task's path, where the market is never written (PROTOCOL §2), so they
//! are booked in the node's `stake_debt`; this (or the node's next stake instruction) settles
//! it, keeping `Market::verifier_stake` exact.
use anchor_lang::prelude::*;

use crate::{constants::*, errors::MarketError, events::StakeSynced, state::*};

#[derive(Accounts)]
pub struct SyncStake<'info> {
    #[account(mut, seeds = [SEED_MARKET, &market.id.to_le_bytes()], bump = market.bump)]
    pub market: Account<'info, Market>,
    #[account(
        mut, seeds = [SEED_NODE, node.authority.as_ref()], bump = node.bump,
        has_one = market @ MarketError::WrongMarket,
    )]
    pub node: Account<'info, Node>,
}

impl SyncStake<'_> {
    /// The node owes something.
    pub fn validate(&self) -> Result<()> {
        require!(self.node.stake_debt > 0, MarketError::NoStakeDebt);
        Ok(())
    }
}

pub fn handler(mut ctx: Context<SyncStake>) -> Result<()> {
    let a = &mut ctx.accounts;
    let subtracted = a.market.settle_debt(&mut a.node, Clock::get()?.slot);
    emit!(StakeSynced {
        node: a.node.key(),
        market: a.market.key(),
        subtracted,
        verifier_stake: a.market.verifier_stake,
    });
    Ok(())
}

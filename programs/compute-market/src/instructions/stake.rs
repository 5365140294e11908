//! `stake`: tokens from the authority's wallet into its node's vault, as free stake. It
//! counts for verifier seats only in rounds whose stake snapshot comes later (PROTOCOL §3).
use anchor_lang::prelude::*;
use anchor_spl::token::{Token, TokenAccount};

use crate::{constants::*, errors::MarketError, events::Staked, state::*, transfer};

#[derive(Accounts)]
pub struct Stake<'info> {
    #[account(mut, seeds = [SEED_MARKET, &market.id.to_le_bytes()], bump = market.bump)]
    pub market: Account<'info, Market>,
    #[account(
        mut, seeds = [SEED_NODE, authority.key().as_ref()], bump = node.bump,
        has_one = authority @ MarketError::WrongAuthority,
        has_one = market @ MarketError::WrongMarket,
    )]
    pub node: Account<'info, Node>,
    #[account(mut, seeds = [SEED_VAULT, node.key().as_ref()], bump = node.vault_bump)]
    pub vault: Account<'info, TokenAccount>,
    #[account(
        mut,
        constraint = source.mint == vault.mint @ MarketError::WrongMint,
        constraint = source.owner == authority.key() @ MarketError::WrongAuthority,
    )]
    pub source: Account<'info, TokenAccount>,
    pub authority: Signer<'info>,
    pub token_program: Program<'info, Token>,
}

impl Stake<'_> {
    /// A positive amount.
    pub fn validate(&self, amount: u64) -> Result<()> {
        require!(amount > 0, MarketError::ZeroAmount);
        Ok(())
    }
}

pub fn handler(ctx: Context<Stake>, amount: u64) -> Result<()> {
    let a = &ctx.accounts;
    transfer::from_wallet(&a.token_program, &a.source, &a.vault, &a.authority, amount)?;
    let now = Clock::get()?.slot;
    let node = &mut ctx.accounts.node;
    // counts for sortition only in rounds whose snapshot is after this slot
    node.add_stake(amount, now)?;
    let market = &mut ctx.accounts.market;
    market.settle_debt(node, now);
    if node.has(ROLE_VERIFIER) {
        market.add_verifier_stake(amount, now)?;
    }
    emit!(Staked {
        node: node.key(),
        amount,
        free: node.free
    });
    Ok(())
}

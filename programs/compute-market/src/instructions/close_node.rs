//! `close_node`: an empty node leaves its market; vault and node closed, rent back.
use anchor_lang::prelude::*;
use anchor_spl::token::{Token, TokenAccount};

use crate::{constants::*, errors::MarketError, events::NodeClosed, state::*, transfer};

#[derive(Accounts)]
pub struct CloseNode<'info> {
    #[account(mut, seeds = [SEED_MARKET, &market.id.to_le_bytes()], bump = market.bump)]
    pub market: Account<'info, Market>,
    #[account(
        mut, close = authority, seeds = [SEED_NODE, authority.key().as_ref()], bump = node.bump,
        has_one = authority @ MarketError::WrongAuthority,
        has_one = market @ MarketError::WrongMarket,
    )]
    pub node: Account<'info, Node>,
    #[account(mut, seeds = [SEED_VAULT, node.key().as_ref()], bump = node.vault_bump)]
    pub vault: Account<'info, TokenAccount>,
    /// Receives tokens sent to the vault outside the protocol, if any.
    #[account(mut, constraint = destination.mint == vault.mint @ MarketError::WrongMint)]
    pub destination: Account<'info, TokenAccount>,
    #[account(mut)]
    pub authority: Signer<'info>,
    pub token_program: Program<'info, Token>,
}

impl CloseNode<'_> {
    /// Nothing staked, bonded, pending, earned or due.
    pub fn validate(&self) -> Result<()> {
        require!(self.node.vault_total()? == 0, MarketError::NodeNotEmpty);
        Ok(())
    }
}

pub fn handler(ctx: Context<CloseNode>) -> Result<()> {
    let a = &ctx.accounts;
    let bump = [a.node.bump];
    let seeds = a.node.signer_seeds(&bump);
    transfer::from_pda(
        &a.token_program,
        &a.vault,
        &a.destination,
        a.node.to_account_info(),
        &seeds,
        a.vault.amount,
    )?;
    transfer::close_pda_account(
        &a.token_program,
        &a.vault,
        a.authority.to_account_info(),
        a.node.to_account_info(),
        &seeds,
    )?;
    let roles = a.node.roles;
    let now = Clock::get()?.slot;
    let market = &mut ctx.accounts.market;
    market.settle_debt(&mut ctx.accounts.node, now);
    if roles & ROLE_PROVIDER != 0 {
        market.providers = market.providers.saturating_sub(1);
    }
    if roles & ROLE_VERIFIER != 0 {
        market.verifiers = market.verifiers.saturating_sub(1);
    }
    emit!(NodeClosed {
        node: ctx.accounts.node.key(),
        authority: ctx.accounts.authority.key()
    });
    Ok(())
}

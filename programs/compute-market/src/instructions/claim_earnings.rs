//! `claim_earnings`: rewards out of the vault, at any time.
use anchor_lang::prelude::*;
use anchor_spl::token::{Token, TokenAccount};

use crate::{constants::*, errors::MarketError, events::EarningsClaimed, state::*, transfer};

#[derive(Accounts)]
pub struct ClaimEarnings<'info> {
    #[account(
        mut, seeds = [SEED_NODE, authority.key().as_ref()], bump = node.bump,
        has_one = authority @ MarketError::WrongAuthority,
    )]
    pub node: Account<'info, Node>,
    #[account(mut, seeds = [SEED_VAULT, node.key().as_ref()], bump = node.vault_bump)]
    pub vault: Account<'info, TokenAccount>,
    #[account(mut, constraint = destination.mint == vault.mint @ MarketError::WrongMint)]
    pub destination: Account<'info, TokenAccount>,
    pub authority: Signer<'info>,
    pub token_program: Program<'info, Token>,
}

impl ClaimEarnings<'_> {
    /// Something was earned.
    pub fn validate(&self) -> Result<()> {
        require!(self.node.earned > 0, MarketError::NoEarnings);
        Ok(())
    }
}

pub fn handler(ctx: Context<ClaimEarnings>) -> Result<()> {
    let amount = ctx.accounts.node.earned;
    ctx.accounts.node.earned = 0;
    let a = &ctx.accounts;
    let bump = [a.node.bump];
    transfer::from_pda(&a.token_program, &a.vault, &a.destination, a.node.to_account_info(), &a.node.signer_seeds(&bump), amount)?;
    emit!(EarningsClaimed { node: a.node.key(), amount, destination: a.destination.key() });
    Ok(())
}

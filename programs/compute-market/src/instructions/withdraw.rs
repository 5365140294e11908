//! `withdraw`: pending unstake out of the vault after the cooldown.
use anchor_lang::prelude::*;
use anchor_spl::token::{Token, TokenAccount};

use crate::{constants::*, errors::MarketError, events::Withdrawn, state::*, transfer};

#[derive(Accounts)]
pub struct Withdraw<'info> {
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

impl Withdraw<'_> {
    /// Something is pending and its cooldown has passed.
    pub fn validate(&self) -> Result<()> {
        require!(self.node.pending_unstake > 0, MarketError::NothingToWithdraw);
        require!(Clock::get()?.slot >= self.node.unlock_slot, MarketError::CooldownNotElapsed);
        Ok(())
    }
}

pub fn handler(ctx: Context<Withdraw>) -> Result<()> {
    let amount = ctx.accounts.node.pending_unstake;
    ctx.accounts.node.pending_unstake = 0;
    let a = &ctx.accounts;
    let bump = [a.node.bump];
    transfer::from_pda(&a.token_program, &a.vault, &a.destination, a.node.to_account_info(), &a.node.signer_seeds(&bump), amount)?;
    emit!(Withdrawn { node: a.node.key(), amount, destination: a.destination.key() });
    Ok(())
}

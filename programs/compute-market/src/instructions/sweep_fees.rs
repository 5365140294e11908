//! `sweep_fees`: anyone moves a node's accrued protocol fees to the treasury. Off every task's
//! path: fees accrue per node, so no task ever write-locks the shared treasury.
use anchor_lang::prelude::*;
use anchor_spl::token::{Token, TokenAccount};

use crate::{constants::*, errors::MarketError, events::FeesSwept, state::*, transfer};

#[derive(Accounts)]
pub struct SweepFees<'info> {
    #[account(seeds = [SEED_CONFIG], bump = config.bump, has_one = treasury @ MarketError::WrongTokenAccount)]
    pub config: Account<'info, Config>,
    #[account(mut, seeds = [SEED_NODE, node.authority.as_ref()], bump = node.bump)]
    pub node: Account<'info, Node>,
    #[account(mut, seeds = [SEED_VAULT, node.key().as_ref()], bump = node.vault_bump)]
    pub vault: Account<'info, TokenAccount>,
    #[account(mut)]
    pub treasury: Account<'info, TokenAccount>,
    pub token_program: Program<'info, Token>,
}

impl SweepFees<'_> {
    /// Fees are due.
    pub fn validate(&self) -> Result<()> {
        require!(self.node.fees_due > 0, MarketError::NoFees);
        Ok(())
    }
}

pub fn handler(ctx: Context<SweepFees>) -> Result<()> {
    let amount = ctx.accounts.node.fees_due;
    ctx.accounts.node.fees_due = 0;
    let a = &ctx.accounts;
    let bump = [a.node.bump];
    transfer::from_pda(
        &a.token_program,
        &a.vault,
        &a.treasury,
        a.node.to_account_info(),
        &a.node.signer_seeds(&bump),
        amount,
    )?;
    emit!(FeesSwept {
        node: a.node.key(),
        amount,
        treasury: a.treasury.key()
    });
    Ok(())
}

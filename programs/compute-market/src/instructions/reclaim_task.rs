//! `reclaim_task`: anyone reopens a task whose provider missed the submit deadline; part of
//! the provider's bond goes to the client, the rest is released.
use anchor_lang::prelude::*;
use anchor_spl::token::{Token, TokenAccount};

use crate::{constants::*, errors::MarketError, events::TaskReopened, math, state::*, transfer};

#[derive(Accounts)]
pub struct ReclaimTask<'info> {
    #[account(mut, seeds = [SEED_TASK, task.client.as_ref(), &task.task_id.to_le_bytes()], bump = task.bump)]
    pub task: Box<Account<'info, Task>>,
    #[account(mut, seeds = [SEED_ESCROW, task.key().as_ref()], bump = task.escrow_bump)]
    pub escrow: Box<Account<'info, TokenAccount>>,
    #[account(
        mut, seeds = [SEED_NODE, provider_node.authority.as_ref()], bump = provider_node.bump,
        constraint = provider_node.key() == task.provider @ MarketError::NotTaskProvider,
    )]
    pub provider_node: Account<'info, Node>,
    #[account(mut, seeds = [SEED_VAULT, provider_node.key().as_ref()], bump = provider_node.vault_bump)]
    pub provider_vault: Box<Account<'info, TokenAccount>>,
    pub token_program: Program<'info, Token>,
}

impl ReclaimTask<'_> {
    /// Claimed and past the submit deadline.
    pub fn validate(&self) -> Result<()> {
        require!(
            self.task.status == TaskStatus::Claimed,
            MarketError::TaskNotClaimed
        );
        require!(
            Clock::get()?.slot > self.task.submit_deadline,
            MarketError::SubmitDeadlineNotPassed
        );
        Ok(())
    }
}

pub fn handler(ctx: Context<ReclaimTask>) -> Result<()> {
    let bond = ctx.accounts.task.provider_bond;
    let slash = math::penalty(bond, ctx.accounts.task.terms.late_slash_bps as u64)?;
    ctx.accounts.provider_node.release(bond, slash)?;
    let a = &ctx.accounts;
    let bump = [a.provider_node.bump];
    transfer::from_pda(
        &a.token_program,
        &a.provider_vault,
        &a.escrow,
        a.provider_node.to_account_info(),
        &a.provider_node.signer_seeds(&bump),
        slash,
    )?;
    let provider = ctx.accounts.provider_node.key();
    let task = &mut ctx.accounts.task;
    task.escrow_balance = math::add(task.escrow_balance, slash)?;
    task.client_extra = math::add(task.client_extra, slash)?;
    task.status = TaskStatus::Open;
    task.provider = Pubkey::default();
    task.submit_deadline = 0;
    emit!(TaskReopened {
        task: task.key(),
        provider,
        slashed: slash
    });
    Ok(())
}

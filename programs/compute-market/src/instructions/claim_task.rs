//! `claim_task`: a provider of the task's market takes it, bonding part of its free stake.
use anchor_lang::prelude::*;

use crate::{constants::*, errors::MarketError, events::TaskClaimed, math, state::*};

#[derive(Accounts)]
pub struct ClaimTask<'info> {
    #[account(mut, seeds = [SEED_TASK, task.client.as_ref(), &task.task_id.to_le_bytes()], bump = task.bump)]
    pub task: Box<Account<'info, Task>>,
    #[account(
        mut, seeds = [SEED_NODE, authority.key().as_ref()], bump = node.bump,
        has_one = authority @ MarketError::WrongAuthority,
    )]
    pub node: Account<'info, Node>,
    pub authority: Signer<'info>,
}

impl ClaimTask<'_> {
    /// Open, in time, same market, provider role, enough free stake.
    pub fn validate(&self) -> Result<()> {
        let (task, node) = (&self.task, &self.node);
        require!(task.status == TaskStatus::Open, MarketError::TaskNotOpen);
        require!(
            Clock::get()?.slot <= task.open_deadline,
            MarketError::TaskExpired
        );
        require_keys_eq!(node.market, task.market, MarketError::WrongMarket);
        require!(node.has(ROLE_PROVIDER), MarketError::NotAProvider);
        require!(
            node.free >= task.provider_bond,
            MarketError::InsufficientFreeStake
        );
        Ok(())
    }
}

pub fn handler(ctx: Context<ClaimTask>) -> Result<()> {
    let now = Clock::get()?.slot;
    let task = &mut ctx.accounts.task;
    ctx.accounts.node.bond(task.provider_bond)?;
    task.provider = ctx.accounts.node.key();
    task.status = TaskStatus::Claimed;
    task.submit_deadline = math::add(now, task.windows.submit as u64)?;
    emit!(TaskClaimed {
        task: task.key(),
        provider: task.provider,
        bond: task.provider_bond,
        submit_deadline: task.submit_deadline,
    });
    Ok(())
}

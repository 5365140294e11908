//! `expire_task`: anyone ends an open task that passed its deadline unclaimed.
use anchor_lang::prelude::*;

use crate::{constants::*, errors::MarketError, events::TaskExpired, state::*};

#[derive(Accounts)]
pub struct ExpireTask<'info> {
    #[account(mut, seeds = [SEED_TASK, task.client.as_ref(), &task.task_id.to_le_bytes()], bump = task.bump)]
    pub task: Box<Account<'info, Task>>,
}

impl ExpireTask<'_> {
    /// Open and past its deadline.
    pub fn validate(&self) -> Result<()> {
        require!(
            self.task.status == TaskStatus::Open,
            MarketError::TaskNotOpen
        );
        require!(
            Clock::get()?.slot > self.task.open_deadline,
            MarketError::TaskNotExpired
        );
        Ok(())
    }
}

pub fn handler(ctx: Context<ExpireTask>) -> Result<()> {
    ctx.accounts.task.status = TaskStatus::Expired;
    emit!(TaskExpired {
        task: ctx.accounts.task.key(),
        slot: Clock::get()?.slot
    });
    Ok(())
}

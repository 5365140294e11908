//! `cancel_task`: the client withdraws a task nobody has claimed (refund at close).
use anchor_lang::prelude::*;

use crate::{constants::*, errors::MarketError, events::TaskCancelled, state::*};

#[derive(Accounts)]
pub struct CancelTask<'info> {
    #[account(
        mut, seeds = [SEED_TASK, client.key().as_ref(), &task.task_id.to_le_bytes()], bump = task.bump,
        has_one = client @ MarketError::WrongAuthority,
    )]
    pub task: Box<Account<'info, Task>>,
    pub client: Signer<'info>,
}

impl CancelTask<'_> {
    /// Only an open task.
    pub fn validate(&self) -> Result<()> {
        require!(
            self.task.status == TaskStatus::Open,
            MarketError::TaskNotOpen
        );
        Ok(())
    }
}

pub fn handler(ctx: Context<CancelTask>) -> Result<()> {
    ctx.accounts.task.status = TaskStatus::Cancelled;
    emit!(TaskCancelled {
        task: ctx.accounts.task.key()
    });
    Ok(())
}

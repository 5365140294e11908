//! `draw_seed`: anyone draws the round's seed from SlotHashes (the hash of the first slot
//! after the result or escalation). The join window is shorter than the sysvar's horizon, so
//! that slot is listed whenever a draw is allowed: the seed is the same whoever draws it and
//! whenever (PROTOCOL §3.2). `join_task` draws too when needed.
use anchor_lang::prelude::*;

use crate::{constants::*, errors::MarketError, events::SeedDrawn, state::*};

#[derive(Accounts)]
pub struct DrawSeed<'info> {
    #[account(mut, seeds = [SEED_TASK, task.client.as_ref(), &task.task_id.to_le_bytes()], bump = task.bump)]
    pub task: Box<Account<'info, Task>>,
    /// CHECK: the SlotHashes sysvar, read raw (address checked).
    #[account(address = SLOT_HASHES_ID)]
    pub slot_hashes: UncheckedAccount<'info>,
}

impl DrawSeed<'_> {
    /// In verification, before the join deadline.
    pub fn validate(&self) -> Result<()> {
        require!(
            self.task.status == TaskStatus::Verifying,
            MarketError::TaskNotVerifying
        );
        require!(
            Clock::get()?.slot <= self.task.join_deadline,
            MarketError::JoinWindowClosed
        );
        Ok(())
    }
}

/// Draws the seed of `task` and emits it; shared with `join_task`.
pub fn draw(task: &mut Account<Task>, slot_hashes: &AccountInfo) -> Result<()> {
    let key = task.key();
    task.draw_seed(&key, &slot_hashes.try_borrow_data()?)?;
    emit!(SeedDrawn {
        task: key,
        round: task.round,
        seed: task.seed,
        hashed_slot: task.hashed_slot
    });
    Ok(())
}

pub fn handler(ctx: Context<DrawSeed>) -> Result<()> {
    draw(
        &mut ctx.accounts.task,
        &ctx.accounts.slot_hashes.to_account_info(),
    )
}

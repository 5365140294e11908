//! `conclude_task`: anyone moves a held verdict's money once its dispute window has closed, or
//! as soon as a dispute overturned it, with no dispute still open (PROTOCOL §8.1, §8.5). The
//! verdict in force may be one a dispute set: proven wrong (the provider slashed to the
//! challenger) or claims refuted (the provider paid).
use anchor_lang::prelude::*;
use anchor_spl::token::{Token, TokenAccount};

use crate::{
    constants::*, errors::MarketError, events::TaskConcluded,
    instructions::availability::concludes_at_once, state::*, verdict,
};

#[derive(Accounts)]
pub struct ConcludeTask<'info> {
    #[account(mut, seeds = [SEED_TASK, task.client.as_ref(), &task.task_id.to_le_bytes()], bump = task.bump)]
    pub task: Box<Account<'info, Task>>,
    #[account(mut, seeds = [SEED_ESCROW, task.key().as_ref()], bump = task.escrow_bump)]
    pub escrow: Box<Account<'info, TokenAccount>>,
    #[account(
        mut, seeds = [SEED_NODE, provider_node.authority.as_ref()], bump = provider_node.bump,
        constraint = provider_node.key() == task.provider @ MarketError::NotTaskProvider,
    )]
    pub provider_node: Box<Account<'info, Node>>,
    #[account(mut, seeds = [SEED_VAULT, provider_node.key().as_ref()], bump = provider_node.vault_bump)]
    pub provider_vault: Box<Account<'info, TokenAccount>>,
    pub token_program: Program<'info, Token>,
}

impl ConcludeTask<'_> {
    /// Held, no dispute open, and the window closed or the verdict overturned.
    pub fn validate(&self) -> Result<()> {
        let task = &self.task;
        require!(task.held, MarketError::AlreadyConcluded);
        require!(task.disputes_open == 0, MarketError::DisputeOpen);
        require!(task.challenges_open == 0, MarketError::ChallengeOpen);
        require!(
            Clock::get()?.slot > task.dispute_deadline || concludes_at_once(task.tally().majority),
            MarketError::DisputeWindowOpen
        );
        Ok(())
    }
}

pub fn handler(ctx: Context<ConcludeTask>) -> Result<()> {
    let a = ctx.accounts;
    let majority = a.task.tally().majority;
    let s = verdict::settle(
        &mut verdict::Parties {
            task: &mut a.task,
            escrow: &a.escrow,
            provider_node: &mut a.provider_node,
            provider_vault: &a.provider_vault,
            token_program: &a.token_program,
        },
        majority,
    )?;
    let task = &mut a.task;
    task.held = false;
    emit!(TaskConcluded {
        task: task.key(),
        status: task.status,
        majority,
        provider_paid: s.provider_paid,
        provider_slashed: s.provider_slashed,
        fee: s.fee,
        majority_share: task.majority_share,
        award: task.dispute_award,
    });
    Ok(())
}

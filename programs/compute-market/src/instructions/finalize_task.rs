//! `finalize_task`: anyone settles the round once it is over: accepted (provider paid),
//! rejected (provider slashed: an invalid majority, or a withheld result that a majority of
//! seats said invalid or could not get, PROTOCOL §3.5), escalated once to 2V seats with a
//! fresh seed, or undecided (client refunded, bonds released). Votes are settled one by one
//! by `settle_vote`. In a market with a dispute window, a verdict the program can referee is
//! only recorded: its money waits for `conclude_task` (PROTOCOL §8.1).
use anchor_lang::prelude::*;
use anchor_spl::token::{Token, TokenAccount};
use compute_market_protocol::{
    availability,
    commit::{unavailable, verdict, VERDICT_WITHHELD, VOTE_INVALID, VOTE_VALID},
    dispute,
    job::JobSpec,
};

use crate::{
    constants::*,
    errors::MarketError,
    events::{TaskEscalated, TaskFinalized},
    math,
    state::*,
    verdict,
};

#[derive(Accounts)]
pub struct FinalizeTask<'info> {
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
    /// Read only: the sortition denominator of an escalated round.
    #[account(
        seeds = [SEED_MARKET, &market.id.to_le_bytes()], bump = market.bump,
        constraint = market.key() == task.market @ MarketError::WrongMarket,
    )]
    pub market: Box<Account<'info, Market>>,
    pub token_program: Program<'info, Token>,
}

impl FinalizeTask<'_> {
    /// In verification and past the reveal deadline (or fully revealed).
    pub fn validate(&self) -> Result<()> {
        require!(
            self.task.status == TaskStatus::Verifying,
            MarketError::TaskNotVerifying
        );
        require!(
            self.task.finalize_ready(Clock::get()?.slot),
            MarketError::FinalizeTooEarly
        );
        Ok(())
    }
}

pub fn handler(ctx: Context<FinalizeTask>) -> Result<()> {
    let now = Clock::get()?.slot;
    let t = *ctx.accounts.task.tally();
    let majority = verdict(t.quorum, t.revealed, t.valid, t.invalid);
    let unavailable = unavailable(t.revealed, t.valid, t.invalid);
    let task_key = ctx.accounts.task.key();
    if majority == 0 && ctx.accounts.task.round == 0 {
        let task = &mut ctx.accounts.task;
        task.start_round(1, now, ctx.accounts.market.snapshot_stake(now))?;
        emit!(TaskEscalated {
            task: task_key,
            round: 1,
            quorum: task.tally().quorum,
            valid: t.valid,
            invalid: t.invalid,
            unavailable,
        });
        return Ok(());
    }

    let a = ctx.accounts;
    // a verdict the program can referee stays open to disputes for the window, its money held
    // (PROTOCOL §8.1); anything else settles now
    // a withheld one too when its provider can contest it by publication (PROTOCOL §8.11)
    let window = a.task.dispute_window;
    let disputable = window > 0
        && JobSpec::decode(&a.task.job).is_ok_and(|j| match majority {
            VOTE_VALID | VOTE_INVALID => dispute::refereed(&j, window),
            VERDICT_WITHHELD => availability::max_tiles(&j, window) > 0,
            _ => false,
        });
    let s = if disputable {
        let task = &mut a.task;
        task.held = true;
        task.dispute_deadline = math::add(now, task.dispute_window as u64)?;
        task.tally_mut().majority = majority;
        task.status = if majority == VOTE_VALID {
            TaskStatus::Accepted
        } else {
            TaskStatus::Rejected
        };
        verdict::Settlement::default()
    } else {
        verdict::settle(
            &mut verdict::Parties {
                task: &mut a.task,
                escrow: &a.escrow,
                provider_node: &mut a.provider_node,
                provider_vault: &a.provider_vault,
                token_program: &a.token_program,
            },
            majority,
        )?
    };
    let task = &a.task;
    emit!(TaskFinalized {
        task: task_key,
        status: task.status,
        valid: t.valid,
        invalid: t.invalid,
        unavailable,
        majority,
        provider_paid: s.provider_paid,
        provider_slashed: s.provider_slashed,
        fee: s.fee,
        majority_share: task.majority_share,
        held_until: if task.held { task.dispute_deadline } else { 0 },
    });
    Ok(())
}

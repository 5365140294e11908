//! `dispute_timeout`: anyone ends a dispute whose challenger let its answer deadline pass:
//! lost, its bond forfeit to the defenders, its account closed (rent to the challenger).
//! So a challenger that stops answering cannot hold a verdict's money (PROTOCOL §8.4).
use anchor_lang::prelude::*;
use compute_market_protocol::commit::overturned;

use crate::{constants::*, errors::MarketError, events::DisputeResolved, math, state::*};

#[derive(Accounts)]
pub struct DisputeTimeout<'info> {
    #[account(mut, seeds = [SEED_TASK, task.client.as_ref(), &task.task_id.to_le_bytes()], bump = task.bump)]
    pub task: Box<Account<'info, Task>>,
    #[account(
        mut, close = challenger,
        seeds = [SEED_DISPUTE, task.key().as_ref(), challenger.key().as_ref()], bump,
    )]
    pub dispute: AccountLoader<'info, Dispute>,
    /// CHECK: the dispute's challenger (the PDA's seed), receives the rent.
    #[account(mut)]
    pub challenger: UncheckedAccount<'info>,
}

impl DisputeTimeout<'_> {
    /// Open, past its answer deadline, and not made moot by another's win.
    pub fn validate(&self) -> Result<()> {
        let d = self.dispute.load()?;
        require!(d.state == DISPUTE_OPEN, MarketError::DisputeNotClosable);
        require!(
            !overturned(self.task.tally().majority),
            MarketError::DisputeMoot
        );
        require!(
            Clock::get()?.slot > d.answer_deadline,
            MarketError::DisputeNotExpired
        );
        // a silent defender's game ends first (game_timeout), its bond to this dispute
        require!(d.games_open == 0, MarketError::GamesOpen);
        Ok(())
    }
}

pub fn handler(ctx: Context<DisputeTimeout>) -> Result<()> {
    let bond = ctx.accounts.dispute.load()?.bond;
    let task = &mut ctx.accounts.task;
    task.dispute_forfeit = math::add(task.dispute_forfeit, bond)?;
    task.disputes_open = task
        .disputes_open
        .checked_sub(1)
        .ok_or(MarketError::MathOverflow)?;
    emit!(DisputeResolved {
        task: task.key(),
        challenger: ctx.accounts.challenger.key(),
        outcome: 2,
        majority: task.tally().majority,
        vote: Pubkey::default(),
        committed: [0; 32],
        recomputed: [0; 32],
    });
    Ok(())
}

//! `close_dispute`: anyone pays a dispute's challenger and closes it (PROTOCOL §8.5): a won
//! dispute once its verdict concluded and every vote settled (its bond and the award: the
//! provider's bond or the false statements' and silent seats' slashes), or an open one that
//! another's win made moot (its bond only). The payment goes to the payout account the
//! challenger named, or to its associated token account if that was closed.
use anchor_lang::prelude::*;
use anchor_spl::token::{Token, TokenAccount};
use compute_market_protocol::commit::overturned;

use crate::{constants::*, errors::MarketError, events::DisputeClosed, math, state::*, transfer};

#[derive(Accounts)]
pub struct CloseDispute<'info> {
    #[account(mut, seeds = [SEED_TASK, task.client.as_ref(), &task.task_id.to_le_bytes()], bump = task.bump)]
    pub task: Box<Account<'info, Task>>,
    #[account(mut, seeds = [SEED_ESCROW, task.key().as_ref()], bump = task.escrow_bump)]
    pub escrow: Box<Account<'info, TokenAccount>>,
    #[account(
        mut, close = challenger,
        seeds = [SEED_DISPUTE, task.key().as_ref(), challenger.key().as_ref()], bump,
    )]
    pub dispute: AccountLoader<'info, Dispute>,
    /// CHECK: the dispute's challenger (the PDA's seed), receives the rent.
    #[account(mut)]
    pub challenger: UncheckedAccount<'info>,
    /// CHECK: the payout account the challenger named (checked against the dispute; read as a
    /// token account in the handler: its owner may have closed it).
    #[account(mut)]
    pub payout: UncheckedAccount<'info>,
    /// CHECK: only when `payout` is closed: the challenger's associated token account of the
    /// stake mint (address derived and checked).
    #[account(mut)]
    pub payout_ata: Option<UncheckedAccount<'info>>,
    pub token_program: Program<'info, Token>,
}

impl CloseDispute<'_> {
    /// Won and fully settled, or open and moot.
    pub fn validate(&self) -> Result<()> {
        let d = self.dispute.load()?;
        require_keys_eq!(self.payout.key(), d.payout, MarketError::WrongTokenAccount);
        let task = &self.task;
        let closable = if d.state == DISPUTE_WON {
            !task.held && task.open_votes == 0
        } else {
            overturned(task.tally().majority)
        };
        require!(closable, MarketError::DisputeNotClosable);
        require!(d.games_open == 0, MarketError::GamesOpen);
        Ok(())
    }
}

pub fn handler(ctx: Context<CloseDispute>) -> Result<()> {
    let a = ctx.accounts;
    let (bond, won) = {
        let d = a.dispute.load()?;
        (d.bond, d.state == DISPUTE_WON)
    };
    let paid = if won {
        math::add(bond, a.task.dispute_award)?
    } else {
        bond
    };
    transfer::from_escrow(
        &a.token_program,
        &a.escrow,
        &mut a.task,
        a.payout.to_account_info(),
        a.payout_ata.as_ref().map(|x| x.to_account_info()),
        &a.challenger.key(),
        paid,
    )?;
    let task = &mut a.task;
    if won {
        task.dispute_award = 0;
        task.award_pending = false;
    } else {
        task.disputes_open = task
            .disputes_open
            .checked_sub(1)
            .ok_or(MarketError::MathOverflow)?;
    }
    emit!(DisputeClosed {
        task: task.key(),
        challenger: a.challenger.key(),
        paid,
        won,
    });
    Ok(())
}

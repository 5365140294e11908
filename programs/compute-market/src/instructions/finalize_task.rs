//! `finalize_task`: anyone settles the round once it is over: accepted (provider paid),
//! rejected (provider slashed: an invalid majority, or a withheld result that a majority of
//! seats said invalid or could not get, PROTOCOL §3.5), escalated once to 2V seats with a
//! fresh seed, or undecided (client refunded, bonds released). Votes are settled one by one
//! by `settle_vote`.
use anchor_lang::prelude::*;
use anchor_spl::token::{Token, TokenAccount};
use compute_market_protocol::commit::{
    sides, unavailable, verdict, VERDICT_WITHHELD, VOTE_INVALID, VOTE_VALID,
};

use crate::{
    constants::*,
    errors::MarketError,
    events::{TaskEscalated, TaskFinalized},
    math,
    state::*,
    transfer,
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

/// Money that moves at finalization.
#[derive(Default)]
struct Settlement {
    provider_paid: u64,
    provider_slashed: u64,
    fee: u64,
}

pub fn handler(mut ctx: Context<FinalizeTask>) -> Result<()> {
    let now = Clock::get()?.slot;
    let t = *ctx.accounts.task.tally();
    let majority = verdict(t.quorum, t.revealed, t.valid, t.invalid);
    // seats on the majority's side, and revealed seats on neither (PROTOCOL §4.4)
    let (winners, released) = if majority != 0 {
        sides(majority, t.revealed, t.valid, t.invalid)
    } else {
        (0, 0)
    };
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

    let a = &mut ctx.accounts;
    let bond = a.task.provider_bond;
    let mut s = Settlement::default();
    let status = match majority {
        VOTE_VALID => {
            let terms = a.task.terms;
            // the provider's and the pool's parts are rounded down; the remainder is the fee,
            // so rounding dust goes to the treasury (PROTOCOL §4)
            let pool = math::bps_of(a.task.reward, terms.verifier_pool_bps as u64)?;
            let provider_bps = BPS
                .checked_sub(terms.fee_bps as u64 + terms.verifier_pool_bps as u64)
                .ok_or(MarketError::MathOverflow)?;
            let provider_pay = math::bps_of(a.task.reward, provider_bps)?;
            let fee = math::sub(math::sub(a.task.reward, provider_pay)?, pool)?;
            let (share, dust) = math::split(pool, t.valid as u64)?;
            let to_provider = math::add(math::add(provider_pay, fee)?, dust)?;
            let id = a.task.task_id.to_le_bytes();
            let bump = [a.task.bump];
            transfer::from_pda(
                &a.token_program,
                &a.escrow,
                &a.provider_vault,
                a.task.to_account_info(),
                &a.task.signer_seeds(&id, &bump),
                to_provider,
            )?;
            let node = &mut a.provider_node;
            node.release(bond, 0)?;
            node.earned = math::add(node.earned, provider_pay)?;
            node.fees_due = math::add(node.fees_due, math::add(fee, dust)?)?;
            node.tasks_completed = node.tasks_completed.saturating_add(1);
            a.task.escrow_balance = math::sub(a.task.escrow_balance, to_provider)?;
            a.task.majority_share = share;
            s = Settlement {
                provider_paid: provider_pay,
                provider_slashed: 0,
                fee,
            };
            TaskStatus::Accepted
        }
        VOTE_INVALID => {
            let terms = a.task.terms;
            let client_part = math::bps_of(bond, terms.reject_client_bps as u64)?;
            let verifier_part = math::bps_of(bond, terms.reject_verifier_bps as u64)?;
            let treasury_part = math::sub(math::sub(bond, client_part)?, verifier_part)?;
            let (share, dust) = math::split(verifier_part, winners as u64)?;
            let to_escrow = math::add(client_part, math::mul(share, winners as u64)?)?;
            let bump = [a.provider_node.bump];
            transfer::from_pda(
                &a.token_program,
                &a.provider_vault,
                &a.escrow,
                a.provider_node.to_account_info(),
                &a.provider_node.signer_seeds(&bump),
                to_escrow,
            )?;
            let node = &mut a.provider_node;
            node.release(bond, bond)?;
            node.fees_due = math::add(node.fees_due, math::add(treasury_part, dust)?)?;
            a.task.escrow_balance = math::add(a.task.escrow_balance, to_escrow)?;
            a.task.client_extra = math::add(a.task.client_extra, client_part)?;
            a.task.majority_share = share;
            s = Settlement {
                provider_paid: 0,
                provider_slashed: bond,
                fee: treasury_part,
            };
            TaskStatus::Rejected
        }
        VERDICT_WITHHELD => {
            // withheld: the whole bond to the treasury, nothing to the client or the seats
            // (PROTOCOL §4.3): "I could not get it" carries no evidence, so saying it must
            // never pay, or a coalition of clients and verifiers would profit from saying it
            // of honest results
            let node = &mut a.provider_node;
            node.release(bond, bond)?;
            node.fees_due = math::add(node.fees_due, bond)?;
            a.task.majority_share = 0;
            s = Settlement {
                provider_paid: 0,
                provider_slashed: bond,
                fee: bond,
            };
            TaskStatus::Rejected
        }
        _ => {
            a.provider_node.release(bond, 0)?;
            TaskStatus::Undecided
        }
    };

    let task = &mut a.task;
    if majority != 0 {
        let losers = t
            .seats
            .checked_sub(winners)
            .and_then(|s| s.checked_sub(released))
            .ok_or(MarketError::MathOverflow)?;
        // per losing seat; at least one unit, so silence and minority votes are never free
        task.loser_slash = math::penalty(task.verifier_bond, task.terms.verifier_slash_bps as u64)?;
        let collected = math::mul(task.loser_slash, losers as u64)?;
        let (bonus, dust) = math::split(collected, winners as u64)?;
        task.loser_bonus = bonus;
        task.loser_dust = if task.loser_slash > 0 { dust } else { 0 };
        task.tally_mut().losers_pending = if task.loser_slash > 0 { losers } else { 0 };
    }
    task.tally_mut().majority = majority;
    task.status = status;
    emit!(TaskFinalized {
        task: task_key,
        status,
        valid: t.valid,
        invalid: t.invalid,
        unavailable,
        majority,
        provider_paid: s.provider_paid,
        provider_slashed: s.provider_slashed,
        fee: s.fee,
        majority_share: task.majority_share,
    });
    Ok(())
}

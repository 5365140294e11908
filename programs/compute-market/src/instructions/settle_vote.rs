//! `settle_vote`: anyone settles one vote of a finished round: majority verifiers get their
//! bond back plus their share; minority and silent verifiers lose part of their bond; a vote on
//! neither side (an unavailable one, or a valid one under a withheld verdict, PROTOCOL §4.4)
//! gets its bond back; the vote account is closed and its rent returned to the verifier.
use anchor_lang::prelude::*;
use anchor_spl::token::{Token, TokenAccount};
use compute_market_protocol::{
    commit::{
        overturned, side, Side, VERDICT_CLAIMS_REFUTED, VERDICT_PROVEN_WRONG, VERDICT_SERVED,
    },
    job::{JobKind, JobSpec},
    sampling::sample_index,
};

use crate::{constants::*, errors::MarketError, events::VoteSettled, math, state::*, transfer};

#[derive(Accounts)]
pub struct SettleVote<'info> {
    #[account(mut, seeds = [SEED_TASK, task.client.as_ref(), &task.task_id.to_le_bytes()], bump = task.bump)]
    pub task: Box<Account<'info, Task>>,
    #[account(mut, seeds = [SEED_ESCROW, task.key().as_ref()], bump = task.escrow_bump)]
    pub escrow: Box<Account<'info, TokenAccount>>,
    #[account(
        mut, close = vote_authority,
        seeds = [SEED_VOTE, task.key().as_ref(), vote.node.as_ref(), &[vote.round]], bump = vote.bump,
        has_one = task @ MarketError::WrongTask,
    )]
    pub vote: Box<Account<'info, Vote>>,
    /// CHECK: receives the vote's rent; must be the verifier who paid it.
    #[account(mut, address = vote.authority @ MarketError::WrongAuthority)]
    pub vote_authority: UncheckedAccount<'info>,
    #[account(
        mut, seeds = [SEED_NODE, node.authority.as_ref()], bump = node.bump,
        constraint = node.key() == vote.node @ MarketError::WrongAuthority,
    )]
    pub node: Box<Account<'info, Node>>,
    #[account(mut, seeds = [SEED_VAULT, node.key().as_ref()], bump = node.vault_bump)]
    pub vault: Box<Account<'info, TokenAccount>>,
    pub token_program: Program<'info, Token>,
}

impl SettleVote<'_> {
    /// The vote's round is over: an earlier round of an escalated task, or a decided task.
    pub fn validate(&self) -> Result<()> {
        require!(
            self.vote.round < self.task.round || self.task.status.is_decided(),
            MarketError::VoteNotSettleable
        );
        // the deciding round's votes wait for the verdict's money (PROTOCOL §8.1)
        require!(
            self.vote.round < self.task.round || !self.task.held,
            MarketError::TaskNotConcluded
        );
        Ok(())
    }
}

/// Whether a VALID vote of `node` vouched for tile `tile` of the task's result: a
/// `MatMulModP` verifier checks all of C; a sampling one only its samples (PROTOCOL §8.5).
fn vouched_for(task: &Task, node: &Pubkey, tile: u32) -> bool {
    match JobSpec::decode(&task.job) {
        Ok(job) if job.kind == JobKind::MatMulModP => true,
        Ok(_) => (0..task.samples as u32)
            .any(|i| sample_index(&task.seed, &node.to_bytes(), i, task.tile_count) == tile),
        Err(_) => false,
    }
}

pub fn handler(mut ctx: Context<SettleVote>) -> Result<()> {
    let a = &mut ctx.accounts;
    let round = a.vote.round as usize;
    let majority = a.task.rounds[round].majority;
    let bond = a.vote.bond;
    let revealed = a.vote.revealed;
    // a vote counts once for each seat its node held: paid and slashed per seat
    let seats = a.vote.seats;
    let (mut paid, mut slashed) = (0u64, 0u64);
    let mut side = (majority != 0).then(|| side(majority, revealed, a.vote.vote));
    if majority == VERDICT_PROVEN_WRONG
        && side == Some(Side::FalseStatement)
        && !vouched_for(&a.task, &a.node.key(), a.task.disputed_tile)
    {
        // it voted for a wrong result but never looked at the wrong tile: made whole
        side = Some(Side::Released);
    }
    if majority == VERDICT_CLAIMS_REFUTED && side == Some(Side::FalseStatement) && !a.vote.refuted {
        // (unreachable: the verdict needs every INVALID vote refuted) never slash unproven
        side = Some(Side::Released);
    }
    let refuted_winner = a.vote.refuted && !overturned(majority) && side == Some(Side::Winner);
    if majority == VERDICT_SERVED && side == Some(Side::FalseStatement) {
        // "unavailable" of a result its provider then published (PROTOCOL §8.11): a losing
        // seat's slash, all of it to the treasury (none to the provider or the VALID seats,
        // which must not profit from withholding from seats); never more than silence costs,
        // or an honest seat the provider did not serve would do better to say nothing
        slashed = math::mul(a.task.loser_slash, seats as u64)?;
        a.node.release(bond, slashed)?;
        a.node.fees_due = math::add(a.node.fees_due, slashed)?;
    } else if refuted_winner {
        // its claim was disproved though the verdict stood on others' true claims: a false
        // statement, its whole bond to the treasury, its share back to the client
        slashed = bond;
        a.node.release(bond, slashed)?;
        a.node.fees_due = math::add(a.node.fees_due, slashed)?;
        let share = math::mul(
            math::add(a.task.majority_share, a.task.loser_bonus)?,
            seats as u64,
        )?;
        a.task.client_extra = math::add(a.task.client_extra, share)?;
    } else if side == Some(Side::FalseStatement)
        || (overturned(majority) && side == Some(Side::Loser))
    {
        // a claim a dispute disproved costs the whole bond; silence under an overturned
        // verdict its usual slash. Half goes to the challenger's award, half to the treasury
        // (its own `fees_due`): a coalition racing an honest challenger to win its own
        // dispute still loses half (PROTOCOL §8.5)
        slashed = if side == Some(Side::FalseStatement) {
            bond
        } else {
            math::mul(a.task.loser_slash, seats as u64)?
        };
        let to_award = slashed / 2;
        a.node.release(bond, slashed)?;
        a.node.fees_due = math::add(a.node.fees_due, math::sub(slashed, to_award)?)?;
        let bump = [a.node.bump];
        transfer::from_pda(
            &a.token_program,
            &a.vault,
            &a.escrow,
            a.node.to_account_info(),
            &a.node.signer_seeds(&bump),
            to_award,
        )?;
        a.task.escrow_balance = math::add(a.task.escrow_balance, to_award)?;
        a.task.dispute_award = math::add(a.task.dispute_award, to_award)?;
    } else if side == Some(Side::Winner) {
        require!(
            a.task.rounds[round].losers_pending == 0,
            MarketError::SlashesPending
        );
        paid = math::mul(
            math::add(a.task.majority_share, a.task.loser_bonus)?,
            seats as u64,
        )?;
        let id = a.task.task_id.to_le_bytes();
        let bump = [a.task.bump];
        transfer::from_pda(
            &a.token_program,
            &a.escrow,
            &a.vault,
            a.task.to_account_info(),
            &a.task.signer_seeds(&id, &bump),
            paid,
        )?;
        a.task.escrow_balance = math::sub(a.task.escrow_balance, paid)?;
        a.node.release(bond, 0)?;
        a.node.earned = math::add(a.node.earned, paid)?;
    } else if side == Some(Side::Loser) {
        // minority or silent in a decided round: the slash goes to the majority via the escrow,
        // but for the rounding remainder of its split, which this node books to the treasury
        slashed = math::mul(a.task.loser_slash, seats as u64)?;
        a.node.release(bond, slashed)?;
        let dust = a.task.loser_dust.min(slashed);
        a.task.loser_dust = math::sub(a.task.loser_dust, dust)?;
        a.node.fees_due = math::add(a.node.fees_due, dust)?;
        let to_escrow = math::sub(slashed, dust)?;
        let bump = [a.node.bump];
        transfer::from_pda(
            &a.token_program,
            &a.vault,
            &a.escrow,
            a.node.to_account_info(),
            &a.node.signer_seeds(&bump),
            to_escrow,
        )?;
        a.task.escrow_balance = math::add(a.task.escrow_balance, to_escrow)?;
        if slashed > 0 {
            let t = &mut a.task.rounds[round];
            t.losers_pending = t
                .losers_pending
                .checked_sub(seats)
                .ok_or(MarketError::MathOverflow)?;
        }
    } else if side.is_none() && !revealed {
        // silent in a round without majority: nobody to pay, the slash goes to the treasury
        slashed = math::mul(
            math::penalty(a.task.verifier_bond, a.task.terms.verifier_slash_bps as u64)?,
            seats as u64,
        )?;
        a.node.release(bond, slashed)?;
        a.node.fees_due = math::add(a.node.fees_due, slashed)?;
    } else {
        // released: revealed in a round without majority, or on neither side of a verdict
        a.node.release(bond, 0)?;
    }
    if revealed {
        a.node.verifications = a.node.verifications.saturating_add(1);
    }
    a.task.open_votes = a
        .task
        .open_votes
        .checked_sub(1)
        .ok_or(MarketError::MathOverflow)?;
    emit!(VoteSettled {
        task: a.task.key(),
        verifier: a.node.key(),
        round: round as u8,
        paid,
        slashed
    });
    Ok(())
}

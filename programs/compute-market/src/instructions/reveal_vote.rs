//! `reveal_vote`: the verifier opens its commitment once commits are closed (accounts:
//! [`SeatedVote`]).
use anchor_lang::prelude::*;
use compute_market_protocol::commit::{
    vote_commitment, VOTE_INVALID, VOTE_UNAVAILABLE, VOTE_VALID,
};

use super::commit_vote::SeatedVote;
use crate::{errors::MarketError, events::VoteRevealed, state::TaskStatus};

/// Arguments of `reveal_vote`.
#[derive(AnchorSerialize, AnchorDeserialize, Clone)]
pub struct RevealVoteArgs {
    /// 1 valid, 2 invalid, 3 unavailable (PROTOCOL §3.4).
    pub vote: u8,
    /// Hash of the verifier's recomputed samples.
    pub evidence: [u8; 32],
    /// The salt of the commitment.
    pub salt: [u8; 32],
}

impl SeatedVote<'_> {
    /// Reveal: current round, reveal phase open, committed once, revealed never, matching
    /// commitment.
    pub fn validate_reveal(&self, args: &RevealVoteArgs) -> Result<()> {
        let (task, vote) = (&self.task, &self.vote);
        let now = Clock::get()?.slot;
        require!(
            task.status == TaskStatus::Verifying,
            MarketError::TaskNotVerifying
        );
        require!(vote.round == task.round, MarketError::WrongRound);
        require!(vote.committed, MarketError::VoteNotCommitted);
        require!(!vote.revealed, MarketError::VoteAlreadyRevealed);
        require!(task.reveal_open(now), MarketError::RevealNotOpen);
        require!(now <= task.reveal_deadline, MarketError::RevealWindowClosed);
        require!(
            matches!(args.vote, VOTE_VALID | VOTE_INVALID | VOTE_UNAVAILABLE),
            MarketError::InvalidVoteValue
        );
        let expected = vote_commitment(
            &vote.node.to_bytes(),
            &task.key().to_bytes(),
            vote.round,
            args.vote,
            &args.evidence,
            &args.salt,
        );
        require!(expected == vote.commitment, MarketError::CommitmentMismatch);
        Ok(())
    }
}

pub fn handler(ctx: Context<SeatedVote>, args: RevealVoteArgs) -> Result<()> {
    let vote = &mut ctx.accounts.vote;
    vote.revealed = true;
    vote.vote = args.vote;
    vote.evidence = args.evidence;
    let task = &mut ctx.accounts.task;
    // one vote, counted once for each seat the node holds
    let seats = vote.seats;
    let tally = task.tally_mut();
    tally.revealed = tally
        .revealed
        .checked_add(seats)
        .ok_or(MarketError::MathOverflow)?;
    if args.vote == VOTE_VALID {
        tally.valid = tally
            .valid
            .checked_add(seats)
            .ok_or(MarketError::MathOverflow)?;
    } else if args.vote == VOTE_INVALID {
        tally.invalid = tally
            .invalid
            .checked_add(seats)
            .ok_or(MarketError::MathOverflow)?;
    }
    emit!(VoteRevealed {
        task: task.key(),
        verifier: vote.node,
        round: vote.round,
        vote: args.vote,
        evidence: args.evidence,
        seats
    });
    Ok(())
}

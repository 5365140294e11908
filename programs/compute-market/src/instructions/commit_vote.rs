//! `commit_vote`: a seated verifier commits to its vote without revealing it. Its accounts,
//! [`SeatedVote`], serve `reveal_vote` too.
use anchor_lang::prelude::*;

use crate::{constants::*, errors::MarketError, events::VoteCommitted, state::*};

/// A seated verifier acting on its own vote.
#[derive(Accounts)]
pub struct SeatedVote<'info> {
    #[account(mut, seeds = [SEED_TASK, task.client.as_ref(), &task.task_id.to_le_bytes()], bump = task.bump)]
    pub task: Box<Account<'info, Task>>,
    #[account(
        mut, seeds = [SEED_VOTE, task.key().as_ref(), vote.node.as_ref(), &[vote.round]], bump = vote.bump,
        has_one = task @ MarketError::WrongTask,
        has_one = authority @ MarketError::WrongAuthority,
    )]
    pub vote: Box<Account<'info, Vote>>,
    /// Read only: the vote's node, whose stake in the snapshot must still back its seats.
    #[account(
        seeds = [SEED_NODE, node.authority.as_ref()], bump = node.bump,
        constraint = node.key() == vote.node @ MarketError::WrongAuthority,
    )]
    pub node: Box<Account<'info, Node>>,
    pub authority: Signer<'info>,
}

impl SeatedVote<'_> {
    /// Commit: current round, commit window open, not yet committed, non-empty commitment.
    pub fn validate_commit(&self, commitment: &[u8; 32]) -> Result<()> {
        require!(
            self.task.status == TaskStatus::Verifying,
            MarketError::TaskNotVerifying
        );
        require!(self.vote.round == self.task.round, MarketError::WrongRound);
        require!(
            Clock::get()?.slot <= self.task.commit_deadline,
            MarketError::CommitWindowClosed
        );
        require!(!self.vote.committed, MarketError::VoteAlreadyCommitted);
        require!(*commitment != [0; 32], MarketError::EmptyCommitment);
        Ok(())
    }
}

pub fn handler(ctx: Context<SeatedVote>, commitment: [u8; 32]) -> Result<()> {
    let vote = &mut ctx.accounts.vote;
    vote.commitment = commitment;
    vote.committed = true;
    let task = &mut ctx.accounts.task;
    // a seat keeps the weight only of stake still there at commit (PROTOCOL §3.3): stake
    // unstaked since the join no longer backs the seats (their bonds always stay)
    let weight = ctx.accounts.node.weight_at(task.snapshot_slot);
    let n = (task.tally().quorum as usize).min(MAX_SEATS);
    for s in task.seats[..n].iter_mut().filter(|s| s.node == vote.node) {
        s.weight = s.weight.min(weight);
    }
    let tally = task.tally_mut();
    tally.committed = tally
        .committed
        .checked_add(vote.seats)
        .ok_or(MarketError::MathOverflow)?;
    emit!(VoteCommitted {
        task: task.key(),
        verifier: vote.node,
        round: vote.round,
        commitment
    });
    Ok(())
}

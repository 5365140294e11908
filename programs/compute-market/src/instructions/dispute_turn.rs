//! A challenger's turns in its dispute (PROTOCOL §8.4), each one transaction, each before its
//! answer deadline: `dispute_target` (kind 2: the next INVALID vote to refute), `dispute_write`
//! (the chunk holding the element and its siblings, into the dispute's buffer),
//! `dispute_prove` (the chunk against the result root: the element's committed value) and
//! `dispute_step` (the program recomputes the element and decides).
use anchor_lang::prelude::*;
use compute_market_protocol::{
    commit::{VERDICT_CLAIMS_REFUTED, VERDICT_PROVEN_WRONG, VOTE_INVALID},
    dispute::{self, DISPUTE_CLAIMS_FALSE, DISPUTE_RESULT_WRONG, MAX_STEP_TERMS},
    feed::{self, Feed, Target},
    job::{JobKind, JobSpec},
    merkle::{chunk_leaf, verify_chunk_proof, CHUNK_LEN},
};

use crate::{
    constants::*,
    errors::MarketError,
    events::{DisputeProven, DisputeResolved, DisputeStepped, DisputeTargeted, DisputeWritten},
    math,
    state::*,
};

#[derive(Accounts)]
pub struct DisputeTurn<'info> {
    #[account(mut, seeds = [SEED_TASK, task.client.as_ref(), &task.task_id.to_le_bytes()], bump = task.bump)]
    pub task: Box<Account<'info, Task>>,
    #[account(
        mut, seeds = [SEED_DISPUTE, task.key().as_ref(), challenger.key().as_ref()], bump,
    )]
    pub dispute: AccountLoader<'info, Dispute>,
    /// The challenger: only it argues its dispute (it gets the rent back if it loses).
    #[account(mut)]
    pub challenger: Signer<'info>,
    /// Kind 2: the INVALID vote being refuted (`dispute_target`, and `dispute_step` of it).
    #[account(mut, has_one = task @ MarketError::WrongTask)]
    pub vote: Option<Box<Account<'info, Vote>>>,
}

/// A challenger's turn is taken only in an open dispute whose verdict is still the one it
/// disputes, before its answer deadline.
pub(crate) fn still_arguable(d: &Dispute, task: &Task) -> Result<()> {
    require!(d.state == DISPUTE_OPEN, MarketError::DisputeNotClosable);
    require!(
        !compute_market_protocol::commit::overturned(task.tally().majority),
        MarketError::DisputeMoot
    );
    require!(
        Clock::get()?.slot <= d.answer_deadline,
        MarketError::DisputeExpired
    );
    Ok(())
}

impl<'info> DisputeTurn<'info> {
    /// The dispute is open, its verdict still the one it disputes, its deadline not passed.
    pub fn validate(&self) -> Result<()> {
        still_arguable(&*self.dispute.load()?, &self.task)
    }

    /// The job, decoded (it decoded at post).
    pub(crate) fn job(&self) -> Result<JobSpec> {
        JobSpec::decode(&self.task.job).map_err(|_| error!(MarketError::InvalidJobSpec))
    }

    /// The vote account passed, which must be the dispute's target.
    fn target_vote(&mut self) -> Result<&mut Box<Account<'info, Vote>>> {
        let target = self.dispute.load()?.target;
        let vote = self.vote.as_mut().ok_or(MarketError::NoTarget)?;
        require_keys_eq!(vote.key(), target, MarketError::NoTarget);
        Ok(vote)
    }

    /// Marks `vote` refuted; once every INVALID seat is, the dispute has won.
    fn refute(&mut self, committed: [u8; 32], recomputed: [u8; 32]) -> Result<()> {
        let vote = self.target_vote()?;
        if vote.refuted {
            // another dispute refuted it meanwhile: it counts once; move on to the next vote
            self.dispute.load_mut()?.clear_element();
            return Ok(());
        }
        vote.refuted = true;
        let (seats, key) = (vote.seats, vote.key());
        let task = &mut self.task;
        task.refuted_seats = task
            .refuted_seats
            .checked_add(seats)
            .ok_or(MarketError::MathOverflow)?;
        emit!(DisputeResolved {
            task: task.key(),
            challenger: self.challenger.key(),
            outcome: 3,
            majority: task.tally().majority,
            vote: key,
            committed,
            recomputed,
        });
        self.dispute.load_mut()?.clear_element();
        if self.task.refuted_seats >= self.task.tally().invalid {
            self.win(
                VERDICT_CLAIMS_REFUTED,
                TaskStatus::Accepted,
                committed,
                recomputed,
            )?;
        }
        Ok(())
    }

    /// The element is recomputed: kind 1 wins when it differs from the committed value, kind 2
    /// refutes the vote when it is equal; anything else loses (PROTOCOL §8.4).
    pub(crate) fn decide(
        &mut self,
        kind: u8,
        committed: [u8; 32],
        recomputed: [u8; 32],
    ) -> Result<()> {
        let equal = committed == recomputed;
        match (kind, equal) {
            (DISPUTE_RESULT_WRONG, false) => self.win(
                VERDICT_PROVEN_WRONG,
                TaskStatus::Rejected,
                committed,
                recomputed,
            ),
            (DISPUTE_CLAIMS_FALSE, true) => {
                self.target_vote()?;
                self.refute(committed, recomputed)
            }
            _ => self.lose(committed, recomputed),
        }
    }

    /// The verdict is overturned to `majority`; the challenger will be paid by `close_dispute`.
    fn win(
        &mut self,
        majority: u8,
        status: TaskStatus,
        committed: [u8; 32],
        recomputed: [u8; 32],
    ) -> Result<()> {
        let tile = {
            let mut d = self.dispute.load_mut()?;
            d.state = DISPUTE_WON;
            d.tile
        };
        let task = &mut self.task;
        task.tally_mut().majority = majority;
        task.status = status;
        task.disputed_tile = tile;
        task.award_pending = true;
        task.disputes_open = task
            .disputes_open
            .checked_sub(1)
            .ok_or(MarketError::MathOverflow)?;
        emit!(DisputeResolved {
            task: task.key(),
            challenger: self.challenger.key(),
            outcome: 1,
            majority,
            vote: Pubkey::default(),
            committed,
            recomputed,
        });
        Ok(())
    }

    /// The dispute lost: its bond is forfeit to the defenders, its account closed.
    fn lose(&mut self, committed: [u8; 32], recomputed: [u8; 32]) -> Result<()> {
        let bond = self.dispute.load()?.bond;
        let task = &mut self.task;
        task.dispute_forfeit = math::add(task.dispute_forfeit, bond)?;
        task.disputes_open = task
            .disputes_open
            .checked_sub(1)
            .ok_or(MarketError::MathOverflow)?;
        emit!(DisputeResolved {
            task: task.key(),
            challenger: self.challenger.key(),
            outcome: 2,
            majority: task.tally().majority,
            vote: Pubkey::default(),
            committed,
            recomputed,
        });
        self.dispute.close(self.challenger.to_account_info())
    }
}

/// `dispute_target`: a kind-2 dispute takes the INVALID vote it refutes next.
pub fn target(ctx: Context<DisputeTurn>) -> Result<()> {
    let a = ctx.accounts;
    let job = a.job()?;
    let round = a.task.round;
    let vote = a.vote.as_ref().ok_or(MarketError::NoTarget)?;
    {
        let d = a.dispute.load()?;
        require!(
            d.kind == DISPUTE_CLAIMS_FALSE,
            MarketError::InvalidDisputeKind
        );
        require!(d.target == Pubkey::default(), MarketError::TargetPending);
    }
    require!(
        vote.round == round && vote.revealed && vote.vote == VOTE_INVALID,
        MarketError::NotAnInvalidVote
    );
    require!(!vote.refuted, MarketError::VoteAlreadyRefuted);
    let (tile, element) = dispute::pointer(&vote.evidence);
    let key = vote.key();
    {
        let mut d = a.dispute.load_mut()?;
        d.clear_element();
        d.target = key;
        d.tile = tile;
        d.element = element;
    }
    emit!(DisputeTargeted {
        task: a.task.key(),
        challenger: a.challenger.key(),
        vote: key,
        tile,
        element,
    });
    if !dispute::in_range(&job, tile, element) {
        // a pointer outside the result claims nothing (PROTOCOL §8.2)
        a.refute([0; 32], [0; 32])?;
    }
    Ok(())
}

/// `dispute_write`: `data` at `offset` of the proof buffer (before the element is proven; for
/// a job on the client's data also after, for its manifest and input chunks: the element's
/// committed value is kept apart).
pub fn write(ctx: Context<DisputeTurn>, offset: u16, data: Vec<u8>) -> Result<()> {
    let a = ctx.accounts;
    let end = offset as usize + data.len();
    let fed = !dispute::one_step(&a.job()?);
    {
        let mut d = a.dispute.load_mut()?;
        require!(d.proven == 0 || fed, MarketError::AlreadyProven);
        require!(end <= d.buffer.len(), MarketError::ProofTooLong);
        d.buffer[offset as usize..end].copy_from_slice(&data);
    }
    emit!(DisputeWritten {
        task: a.task.key(),
        challenger: a.challenger.key(),
        offset,
        len: data.len() as u16,
    });
    Ok(())
}

/// `dispute_prove`: the chunk in the buffer, with `siblings` chaining values after it, must
/// lead to the result root; the element's committed bytes are kept.
pub fn prove(ctx: Context<DisputeTurn>, siblings: u8) -> Result<()> {
    let a = ctx.accounts;
    let job = a.job()?;
    let root = a.task.result_root;
    let mut d = a.dispute.load_mut()?;
    require!(d.proven == 0, MarketError::AlreadyProven);
    require!(
        d.kind == DISPUTE_RESULT_WRONG || d.target != Pubkey::default(),
        MarketError::NoTarget
    );
    let n = siblings as usize;
    require!(n <= dispute::MAX_CHUNK_SIBLINGS, MarketError::ProofTooLong);
    let (chunk, at) = dispute::element_chunk(&job, d.tile, d.element);
    let count = dispute::chunk_count(&job);
    let path = super::dispute_game::siblings(&d.buffer, CHUNK_LEN, n)?;
    let leaf = chunk_leaf(chunk, count, &d.buffer[..CHUNK_LEN]);
    require!(
        verify_chunk_proof(&root, chunk, count, &leaf, &path),
        MarketError::ProofMismatch
    );
    let w = dispute::element_width(&job).min(32);
    let mut committed = [0u8; 32];
    committed[..w].copy_from_slice(&d.buffer[at..at + w]);
    d.committed = committed;
    d.proven = 1;
    if !dispute::one_step(&job) {
        // a job on the client's data: its recomputation starts afresh for this element
        if let Some(t) = feed::target(&job, d.tile, d.element) {
            d.feed = Feed::start(&job, t).encode();
        }
    }
    emit!(DisputeProven {
        task: a.task.key(),
        challenger: a.challenger.key(),
        chunk,
        committed,
    });
    Ok(())
}

/// `dispute_step`: recomputes the element (at most `count` terms of a `MatMulModP` sum per
/// call) and, once it is complete, decides.
pub fn step(ctx: Context<DisputeTurn>, count: u32) -> Result<()> {
    let a = ctx.accounts;
    let job = a.job()?;
    let (kind, tile, element, committed) = {
        let d = a.dispute.load()?;
        require!(d.proven == 1, MarketError::NotProven);
        (d.kind, d.tile, d.element, d.committed)
    };
    let mut recomputed = [0u8; 32];
    let complete = match job.kind {
        JobKind::MatMulModP if dispute::one_step(&job) => {
            match dispute::matmul_entry(&job, tile, element) {
                None => true,
                Some((i, j)) => {
                    let mut d = a.dispute.load_mut()?;
                    let k = job.dims[1];
                    let to = d.done.saturating_add(count.clamp(1, MAX_STEP_TERMS)).min(k);
                    d.acc = dispute::matmul_terms(&job, i, j, d.done, to, d.acc);
                    d.done = to;
                    recomputed[..4].copy_from_slice(&(d.acc as u32).to_le_bytes());
                    emit!(DisputeStepped {
                        task: a.task.key(),
                        challenger: a.challenger.key(),
                        done: to,
                    });
                    to == k
                }
            }
        }
        _ if dispute::one_step(&job) => {
            recomputed = dispute::expected_element(&job, tile, element)
                .ok_or(MarketError::DisputeNotSupported)?;
            true
        }
        // on the client's data: an element in the padding is zero; any other is recomputed
        // from its inputs (dispute_inputs, dispute_feed)
        _ => match feed::target(&job, tile, element) {
            Some(Target::Padding) => true,
            Some(_)
                if dispute::method(&job, a.task.dispute_window) == Some(dispute::Method::Game) =>
            {
                return err!(MarketError::NeedsGame)
            }
            Some(_) => return err!(MarketError::NeedsInputs),
            None => return err!(MarketError::DisputeNotSupported),
        },
    };
    if !complete {
        return Ok(());
    }
    a.decide(kind, committed, recomputed)
}

//! `join_task`: a verifier competes for a seat of the current round (PROTOCOL §3, Seats).
//!
//! Its weight is its stake in the round's snapshot (stake in place before the submission or
//! escalation; [`Node::weight_at`]) and the denominator is the one fixed in the task then, so
//! nothing done after the seed is known — a top-up, a new node, an unstake elsewhere — changes
//! who may sit. Seats go to the lowest stake-weighted tickets, not to the first to arrive:
//! while seats are free an eligible verifier takes one; once all are taken, a better score
//! displaces the worst seated verifier, whose bond is released and whose vote account is
//! closed with its rent returned. Seats are final when the join window closes.
use anchor_lang::prelude::*;

use compute_market_protocol::seats::{place, seat_eligible, Placement, SeatScore};

use crate::{
    constants::*,
    errors::MarketError,
    events::{VerifierDisplaced, VerifierJoined},
    instructions::draw_seed::draw,
    state::*,
};

#[derive(Accounts)]
pub struct JoinTask<'info> {
    #[account(mut, seeds = [SEED_TASK, task.client.as_ref(), &task.task_id.to_le_bytes()], bump = task.bump)]
    pub task: Box<Account<'info, Task>>,
    #[account(
        mut, seeds = [SEED_NODE, authority.key().as_ref()], bump = node.bump,
        has_one = authority @ MarketError::WrongAuthority,
    )]
    pub node: Box<Account<'info, Node>>,
    #[account(
        init, payer = authority, space = 8 + Vote::INIT_SPACE,
        seeds = [SEED_VOTE, task.key().as_ref(), node.key().as_ref(), &[task.round]], bump,
    )]
    pub vote: Box<Account<'info, Vote>>,
    /// CHECK: the SlotHashes sysvar, read raw (address checked).
    #[account(address = SLOT_HASHES_ID)]
    pub slot_hashes: UncheckedAccount<'info>,
    #[account(mut)]
    pub authority: Signer<'info>,
    /// When every seat is taken: the vote of the worst seated verifier (closed here).
    #[account(
        mut,
        seeds = [SEED_VOTE, task.key().as_ref(), displaced_vote.node.as_ref(), &[displaced_vote.round]],
        bump = displaced_vote.bump,
        has_one = task @ MarketError::WrongTask,
    )]
    pub displaced_vote: Option<Box<Account<'info, Vote>>>,
    /// Its node (bond released).
    #[account(mut, seeds = [SEED_NODE, displaced_node.authority.as_ref()], bump = displaced_node.bump)]
    pub displaced_node: Option<Box<Account<'info, Node>>>,
    /// CHECK: receives the displaced vote's rent; checked against the vote's authority.
    #[account(mut)]
    pub displaced_authority: Option<UncheckedAccount<'info>>,
    pub system_program: Program<'info, System>,
}

impl JoinTask<'_> {
    /// Verifying, join window open, a verifier of this market that is neither the provider
    /// nor the client, registered before the snapshot, with enough free stake.
    pub fn validate(&self) -> Result<()> {
        let (task, node) = (&self.task, &self.node);
        require!(
            task.status == TaskStatus::Verifying,
            MarketError::TaskNotVerifying
        );
        require!(
            Clock::get()?.slot <= task.join_deadline,
            MarketError::JoinWindowClosed
        );
        require_keys_eq!(node.market, task.market, MarketError::WrongMarket);
        require!(node.has(ROLE_VERIFIER), MarketError::NotAVerifier);
        require_keys_neq!(node.key(), task.provider, MarketError::ProviderCannotVerify);
        require_keys_neq!(node.authority, task.client, MarketError::ClientCannotVerify);
        require!(
            node.registered_slot < task.snapshot_slot,
            MarketError::NodeRegisteredAfterSnapshot
        );
        require!(
            node.free >= task.verifier_bond,
            MarketError::InsufficientFreeStake
        );
        Ok(())
    }
}

pub fn handler(mut ctx: Context<JoinTask>) -> Result<()> {
    let now = Clock::get()?.slot;
    let a = &mut ctx.accounts;
    if !a.task.seed_drawn {
        // an aged-out reference cannot be reset here (the error would revert it): draw_seed does that
        let slot_hashes = a.slot_hashes.to_account_info();
        if let SeedDraw::ReferenceReset = draw(&mut a.task, &slot_hashes, now)? {
            return err!(MarketError::SeedNotReady);
        }
    }
    let weight = a.node.weight_at(a.task.snapshot_slot);
    require!(weight > 0, MarketError::StakeNotInSnapshot);
    let node_key = a.node.key();
    let score = SeatScore::new(&a.task.seed, &node_key.to_bytes(), weight);
    let quorum = a.task.tally().quorum;
    let expected = SEAT_OVERSAMPLE.saturating_mul(quorum as u64);
    require!(
        seat_eligible(&score, a.task.snapshot_stake, expected),
        MarketError::NotEligibleForSeat
    );
    let seated: Vec<SeatScore> = a.task.seated().iter().map(Seat::score).collect();
    let round = a.task.round;
    let bond = a.task.verifier_bond;
    let index = match place(&seated, quorum as usize, &score) {
        Placement::Refused => return err!(MarketError::TicketNotBetterThanSeated),
        Placement::Free => {
            let t = a.task.tally_mut();
            let i = t.seats as usize;
            t.seats = t.seats.checked_add(1).ok_or(MarketError::MathOverflow)?;
            a.task.open_votes = a
                .task
                .open_votes
                .checked_add(1)
                .ok_or(MarketError::MathOverflow)?;
            i
        }
        Placement::Displace(i) => {
            displace(a, i)?;
            i
        }
    };
    require!(index < MAX_SEATS, MarketError::SeatsFull);
    a.task.seats[index] = Seat {
        node: node_key,
        exponent: score.exponent,
        weight,
    };
    a.node.bond(bond)?;
    a.vote.set_inner(Vote {
        version: ACCOUNT_VERSION,
        task: a.task.key(),
        node: node_key,
        authority: a.authority.key(),
        round,
        bond,
        commitment: [0; 32],
        committed: false,
        revealed: false,
        vote: 0,
        evidence: [0; 32],
        joined_slot: now,
        bump: ctx.bumps.vote,
        reserved: [0; 32],
    });
    emit!(VerifierJoined {
        task: a.task.key(),
        verifier: node_key,
        round,
        bond,
        seats: a.task.tally().seats,
        weight,
        exponent: score.exponent,
    });
    Ok(())
}

/// Frees seat `index` of its verifier: bond released, vote account closed (rent to the
/// verifier), its commitment, if any, no longer counted.
fn displace(a: &mut JoinTask<'_>, index: usize) -> Result<()> {
    let seat = a.task.seats[index];
    let (Some(vote), Some(node), Some(authority)) = (
        a.displaced_vote.as_mut(),
        a.displaced_node.as_mut(),
        a.displaced_authority.as_ref(),
    ) else {
        return err!(MarketError::MissingDisplacedAccounts);
    };
    require!(
        vote.node == seat.node
            && node.key() == seat.node
            && vote.round == a.task.round
            && authority.key() == vote.authority,
        MarketError::WrongDisplacedSeat
    );
    node.release(vote.bond, 0)?;
    if vote.committed {
        let t = a.task.tally_mut();
        t.committed = t
            .committed
            .checked_sub(1)
            .ok_or(MarketError::MathOverflow)?;
    }
    emit!(VerifierDisplaced {
        task: a.task.key(),
        round: vote.round,
        displaced: seat.node,
        by: a.node.key(),
        released_bond: vote.bond,
    });
    vote.close(authority.to_account_info())?;
    Ok(())
}

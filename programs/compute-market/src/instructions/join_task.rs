//! `join_task`: a verifier competes for one seat of the current round (PROTOCOL §3.3, Seats).
//!
//! Every seat is its own race: the verifier's ticket for seat j is `H(seed ‖ node ‖ j)` and its
//! score is that ticket's exponent over its weight, its stake in the round's snapshot (stake in
//! place before the submission or escalation; [`Node::weight_at`]); the denominator is the one
//! fixed in the task then. Nothing done after the seed is known — a top-up, a new node, an
//! unstake elsewhere — changes who may sit. A free seat goes to an eligible joiner; a taken one
//! to a joiner whose score beats the holder's, the holder weighed at the stake it still has:
//! its bond for the seat is released, and its vote account closed with its rent returned when
//! it holds no other seat. A node may hold several seats of a round (each bonded, its one vote
//! counted for each): seats are a stake-weighted sample with replacement, so a share of the
//! stake wins the same share of seats however it is split over nodes. Seats are final when the
//! join window closes.
use anchor_lang::prelude::*;

use compute_market_protocol::seats::{seat_eligible, wins_seat, SeatScore};

use crate::{
    constants::*,
    errors::MarketError,
    events::{VerifierDisplaced, VerifierJoined},
    instructions::draw_seed::draw,
    math,
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
    /// The node's vote of this round: created by its first seat, one more seat on later joins.
    #[account(
        init_if_needed, payer = authority, space = 8 + Vote::INIT_SPACE,
        seeds = [SEED_VOTE, task.key().as_ref(), node.key().as_ref(), &[task.round]], bump,
    )]
    pub vote: Box<Account<'info, Vote>>,
    /// CHECK: the SlotHashes sysvar, read raw (address checked).
    #[account(address = SLOT_HASHES_ID)]
    pub slot_hashes: UncheckedAccount<'info>,
    #[account(mut)]
    pub authority: Signer<'info>,
    /// When the seat is taken: its holder's vote (one seat fewer; closed when none is left).
    #[account(
        mut,
        seeds = [SEED_VOTE, task.key().as_ref(), displaced_vote.node.as_ref(), &[displaced_vote.round]],
        bump = displaced_vote.bump,
        has_one = task @ MarketError::WrongTask,
    )]
    pub displaced_vote: Option<Box<Account<'info, Vote>>>,
    /// Its node (the seat's bond released; its stake now weighs the holder).
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

pub fn handler(mut ctx: Context<JoinTask>, seat: u8) -> Result<()> {
    let now = Clock::get()?.slot;
    let a = &mut ctx.accounts;
    if !a.task.seed_drawn {
        let slot_hashes = a.slot_hashes.to_account_info();
        draw(&mut a.task, &slot_hashes)?;
    }
    let index = seat as usize;
    require!(
        index < a.task.tally().quorum as usize && index < MAX_SEATS,
        MarketError::SeatOutOfRange
    );
    let weight = a.node.weight_at(a.task.snapshot_slot);
    require!(weight > 0, MarketError::StakeNotInSnapshot);
    let node_key = a.node.key();
    let score = SeatScore::new(&a.task.seed, &node_key.to_bytes(), seat, weight);
    require!(
        seat_eligible(&score, a.task.snapshot_stake, SEAT_OVERSAMPLE),
        MarketError::NotEligibleForSeat
    );
    let holder = a.task.seats[index];
    require!(holder.node != node_key, MarketError::SeatAlreadyHeld);
    if holder.taken() {
        displace(a, index, &score)?;
    } else {
        let t = a.task.tally_mut();
        t.seats = t.seats.checked_add(1).ok_or(MarketError::MathOverflow)?;
    }
    let bond = a.task.verifier_bond;
    let round = a.task.round;
    a.node.bond(bond)?;
    if a.vote.version == 0 {
        // created by this instruction (init_if_needed zero-fills a new account)
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
            seats: 1,
            refuted: false,
            reserved: [0; 30],
        });
        a.task.open_votes = a
            .task
            .open_votes
            .checked_add(1)
            .ok_or(MarketError::MathOverflow)?;
    } else {
        require!(
            a.vote.node == node_key && a.vote.round == round,
            MarketError::WrongTask
        );
        a.vote.seats = a
            .vote
            .seats
            .checked_add(1)
            .ok_or(MarketError::MathOverflow)?;
        a.vote.bond = math::add(a.vote.bond, bond)?;
        if a.vote.committed {
            // its one commitment counts for the new seat too
            let t = a.task.tally_mut();
            t.committed = t
                .committed
                .checked_add(1)
                .ok_or(MarketError::MathOverflow)?;
        }
    }
    a.task.seats[index] = Seat {
        node: node_key,
        exponent: score.exponent,
        weight,
    };
    emit!(VerifierJoined {
        task: a.task.key(),
        verifier: node_key,
        round,
        bond,
        seats: a.task.tally().seats,
        weight,
        exponent: score.exponent,
        seat,
        held: a.vote.seats,
    });
    Ok(())
}

/// Takes seat `index` from its holder if `score` beats it, the holder weighed at the stake it
/// still has in the snapshot: its bond for the seat released, its commitment (if any) no longer
/// counted for it, its vote account closed (rent to the verifier) when no seat is left.
fn displace(a: &mut JoinTask<'_>, index: usize, score: &SeatScore) -> Result<()> {
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
    let held = SeatScore {
        weight: node.weight_at(a.task.snapshot_slot).min(seat.weight),
        ..seat.score()
    };
    require!(
        wins_seat(Some(&held), score),
        MarketError::TicketNotBetterThanSeated
    );
    let bond = a.task.verifier_bond;
    node.release(bond, 0)?;
    vote.bond = math::sub(vote.bond, bond)?;
    vote.seats = vote.seats.checked_sub(1).ok_or(MarketError::MathOverflow)?;
    let round = a.task.round;
    let committed = vote.committed;
    let t = a.task.tally_mut();
    if committed {
        t.committed = t
            .committed
            .checked_sub(1)
            .ok_or(MarketError::MathOverflow)?;
    }
    a.task.seats[index] = Seat::default();
    emit!(VerifierDisplaced {
        task: a.task.key(),
        round,
        displaced: seat.node,
        by: a.node.key(),
        released_bond: bond,
        seat: index as u8,
        held: vote.seats,
    });
    if vote.seats == 0 {
        vote.close(authority.to_account_info())?;
        a.task.open_votes = a
            .task
            .open_votes
            .checked_sub(1)
            .ok_or(MarketError::MathOverflow)?;
    }
    Ok(())
}

//! `join_task`: a verifier chosen by the round's seed (stake-weighted sortition) takes a seat
//! and bonds stake. The seed did not exist when the result was committed, so neither the
//! provider nor anyone else could pick or predict the seats.
use anchor_lang::prelude::*;

use compute_market_protocol::commit::{seat_eligible, seat_ticket};

use crate::{
    constants::*, errors::MarketError, events::VerifierJoined, instructions::draw_seed::draw,
    state::*,
};

#[derive(Accounts)]
pub struct JoinTask<'info> {
    #[account(mut, seeds = [SEED_TASK, task.client.as_ref(), &task.task_id.to_le_bytes()], bump = task.bump)]
    pub task: Box<Account<'info, Task>>,
    /// Read only: the sortition denominator.
    #[account(
        seeds = [SEED_MARKET, &market.id.to_le_bytes()], bump = market.bump,
        constraint = market.key() == task.market @ MarketError::WrongMarket,
    )]
    pub market: Account<'info, Market>,
    #[account(
        mut, seeds = [SEED_NODE, authority.key().as_ref()], bump = node.bump,
        has_one = authority @ MarketError::WrongAuthority,
    )]
    pub node: Account<'info, Node>,
    #[account(
        init, payer = authority, space = 8 + Vote::INIT_SPACE,
        seeds = [SEED_VOTE, task.key().as_ref(), node.key().as_ref(), &[task.round]], bump,
    )]
    pub vote: Account<'info, Vote>,
    /// CHECK: the SlotHashes sysvar, read raw (address checked).
    #[account(address = SLOT_HASHES_ID)]
    pub slot_hashes: UncheckedAccount<'info>,
    #[account(mut)]
    pub authority: Signer<'info>,
    pub system_program: Program<'info, System>,
}

impl JoinTask<'_> {
    /// Verifying, join window open, a free seat, a verifier of this market that is neither
    /// the provider nor the client, with enough free stake.
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
        require!(
            task.tally().seats < task.tally().quorum,
            MarketError::SeatsFull
        );
        require_keys_eq!(node.market, task.market, MarketError::WrongMarket);
        require!(node.has(ROLE_VERIFIER), MarketError::NotAVerifier);
        require_keys_neq!(node.key(), task.provider, MarketError::ProviderCannotVerify);
        require_keys_neq!(node.authority, task.client, MarketError::ClientCannotVerify);
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
    let ticket = seat_ticket(&a.task.seed, &a.node.key().to_bytes());
    let expected = SEAT_OVERSAMPLE.saturating_mul(a.task.tally().quorum as u64);
    require!(
        seat_eligible(ticket, a.node.stake(), a.market.verifier_stake, expected),
        MarketError::NotEligibleForSeat
    );
    let bond = a.task.verifier_bond;
    a.node.bond(bond)?;
    let round = a.task.round;
    a.vote.set_inner(Vote {
        task: a.task.key(),
        node: a.node.key(),
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
    });
    let task = &mut a.task;
    task.open_votes = task
        .open_votes
        .checked_add(1)
        .ok_or(MarketError::MathOverflow)?;
    let tally = task.tally_mut();
    tally.seats = tally
        .seats
        .checked_add(1)
        .ok_or(MarketError::MathOverflow)?;
    emit!(VerifierJoined {
        task: task.key(),
        verifier: a.node.key(),
        round,
        bond,
        seats: task.tally().seats
    });
    Ok(())
}

//! Availability (PROTOCOL §8.11): whoever is accused of withholding a result answers by
//! publishing the named tiles on chain, proven chunk by chunk against `result_root`, or loses.
//!
//! * `challenge_availability`: a client (or anyone for it) that could not fetch a held Accepted
//!   result names tiles, with a bond. Answered: the bond goes to the treasury. Unanswered by
//!   its deadline: the verdict becomes *unserved* (Rejected, the provider's bond slashed, the
//!   client refunded in full).
//! * `contest_withheld`: the provider of a result held as withheld publishes tiles drawn from
//!   the round's seed. Answered: the verdict becomes *served* (Accepted, open to disputes of
//!   its content for a fresh window; the UNAVAILABLE votes are false statements).
//! * `publish_write` / `publish_prove`: the provider's bytes into the account's data area, then
//!   one chunk proven against the root (and frozen).
//! * `availability_timeout`: anyone ends an account past its deadline (or made moot), returning
//!   a bond not forfeit; `close_availability`: its opener takes back the rent.
use anchor_lang::prelude::*;
use anchor_spl::token::{Token, TokenAccount};
use compute_market_protocol::{
    availability::{self, KIND_CHALLENGE, KIND_CONTEST, MAX_OPEN, MAX_WRITE},
    commit::{VERDICT_SERVED, VERDICT_UNSERVED, VERDICT_WITHHELD, VOTE_VALID},
    dispute::{self, MAX_CHUNK_SIBLINGS},
    job::JobSpec,
    merkle::{chunk_leaf, slot_len, verify_chunk_proof, CHUNK_LEN},
};

use crate::{
    constants::*,
    errors::MarketError,
    events::{AvailabilityClosed, AvailabilityEnded, AvailabilityOpened, AvailabilityPublished},
    math,
    state::*,
    transfer,
};

/// The contest of a withheld verdict, in `Task.contest`.
pub const CONTEST_NONE: u8 = 0;
/// A contest is open.
pub const CONTEST_OPEN: u8 = 1;
/// The contest was answered: the verdict is served.
pub const CONTEST_ANSWERED: u8 = 2;
/// The contest's deadline passed unanswered: the withheld verdict stands.
pub const CONTEST_FAILED: u8 = 3;

fn job_of(task: &Task) -> Result<JobSpec> {
    JobSpec::decode(&task.job).map_err(|_| error!(MarketError::InvalidJobSpec))
}

/// The tiles a contest of `task` publishes (drawn from its deciding round's seed).
pub fn contest_tiles(task: &Task, task_key: &Pubkey) -> Result<Vec<u32>> {
    let job = job_of(task)?;
    Ok(availability::contest_tiles(
        &job,
        task.dispute_window,
        &task.seed,
        &task_key.to_bytes(),
    ))
}

/// Size an availability account naming `tiles` tiles of `task`'s job is created with (the
/// rest is grown by `availability_grow`).
pub fn space_for(task: &Task, tiles: usize) -> usize {
    let slot = JobSpec::decode(&task.job).map_or(CHUNK_LEN, |j| slot_len(j.tile_len()));
    Availability::space(tiles, slot).min(Availability::MAX_INITIAL)
}

/// Whether the account has grown to its full size (its data area all there).
fn sized(loader: &AccountLoader<Availability>) -> Result<bool> {
    let full = loader.load()?.full_len();
    Ok(loader.to_account_info().data_len() >= full)
}

/// Whether an open account of this kind still matters under the verdict in force: a challenge
/// while the result stands Accepted, a contest while it stands withheld.
pub fn in_play(kind: u8, majority: u8) -> bool {
    match kind {
        // (claims refuted, 5, concludes at once: no window to challenge in)
        KIND_CHALLENGE => matches!(majority, VOTE_VALID | VERDICT_SERVED),
        _ => majority == VERDICT_WITHHELD,
    }
}

/// What a challenge names.
#[derive(AnchorSerialize, AnchorDeserialize, Clone, PartialEq, Eq, Debug)]
pub struct ChallengeArgs {
    /// Distinct tiles, increasing, each below T, at most `availability::max_tiles`.
    pub tiles: Vec<u32>,
}

#[derive(Accounts)]
#[instruction(args: ChallengeArgs)]
pub struct ChallengeAvailability<'info> {
    #[account(mut, seeds = [SEED_TASK, task.client.as_ref(), &task.task_id.to_le_bytes()], bump = task.bump)]
    pub task: Box<Account<'info, Task>>,
    #[account(mut, seeds = [SEED_ESCROW, task.key().as_ref()], bump = task.escrow_bump)]
    pub escrow: Box<Account<'info, TokenAccount>>,
    #[account(
        init, payer = challenger, space = space_for(&task, args.tiles.len()),
        seeds = [SEED_AVAILABILITY, task.key().as_ref(), &task.posted_slot.to_le_bytes(), &task.availability_nonce.to_le_bytes()], bump,
    )]
    pub availability: AccountLoader<'info, Availability>,
    #[account(mut)]
    pub challenger: Signer<'info>,
    /// The challenger's account the bond comes from.
    #[account(
        mut,
        constraint = challenger_token.mint == escrow.mint @ MarketError::WrongMint,
        constraint = challenger_token.owner == challenger.key() @ MarketError::WrongAuthority,
    )]
    pub challenger_token: Box<Account<'info, TokenAccount>>,
    /// Where the bond is returned when the challenge fails or is moot.
    #[account(
        constraint = payout.mint == escrow.mint @ MarketError::WrongMint,
        constraint = payout.key() != escrow.key() @ MarketError::WrongTokenAccount,
    )]
    pub payout: Box<Account<'info, TokenAccount>>,
    pub token_program: Program<'info, Token>,
    pub system_program: Program<'info, System>,
}

/// Checks shared by a challenge and a contest: held, in the window, a job that can be
/// challenged, room for one more.
fn openable(task: &Task) -> Result<JobSpec> {
    require!(
        Clock::get()?.slot <= task.dispute_deadline,
        MarketError::DisputeWindowClosed
    );
    let job = job_of(task)?;
    require!(
        availability::max_tiles(&job, task.dispute_window) > 0,
        MarketError::AvailabilityNotSupported
    );
    Ok(job)
}

/// Whether `opener` may open one more account on `task`: the task's client up to
/// [`MAX_OPEN`] of its own, everyone else together up to [`MAX_OPEN`] (so nobody can take
/// the client's room by opening challenges first).
fn room_for(task: &Task, opener: &Pubkey) -> Result<()> {
    let others = task.challenges_open.saturating_sub(task.client_challenges);
    let open = if *opener == task.client {
        task.client_challenges
    } else {
        others
    };
    require!(open < MAX_OPEN, MarketError::TooManyChallenges);
    Ok(())
}

impl ChallengeAvailability<'_> {
    /// A held Accepted verdict, in the window, tiles within the bounds.
    pub fn validate(&self, args: &ChallengeArgs) -> Result<()> {
        let task = &self.task;
        require!(
            task.held && task.status == TaskStatus::Accepted,
            MarketError::NotChallengeable
        );
        require!(
            in_play(KIND_CHALLENGE, task.tally().majority),
            MarketError::NotChallengeable
        );
        let job = openable(task)?;
        room_for(task, &self.challenger.key())?;
        require!(
            availability::tiles_valid(&job, task.dispute_window, &args.tiles),
            MarketError::TilesInvalid
        );
        Ok(())
    }
}

/// Fills a new availability account and counts it on the task.
fn open(
    task: &mut Task,
    task_key: Pubkey,
    loader: &AccountLoader<Availability>,
    bump: u8,
    kind: u8,
    opener: Pubkey,
    payout: Pubkey,
    bond: u64,
    tiles: &[u32],
) -> Result<()> {
    let now = Clock::get()?.slot;
    let job = job_of(task)?;
    // a whole window of the provider's time after the accounts already open (PROTOCOL §8.11)
    let answer_deadline = math::add(
        now.max(task.availability_deadline),
        task.dispute_window as u64,
    )?;
    task.availability_deadline = answer_deadline;
    if opener == task.client && kind == KIND_CHALLENGE {
        task.client_challenges = task
            .client_challenges
            .checked_add(1)
            .ok_or(MarketError::MathOverflow)?;
    }
    let per = availability::chunks_per_tile(&job);
    let nonce = task.availability_nonce;
    {
        let mut a = loader.load_init()?;
        a.version = ACCOUNT_VERSION;
        a.kind = kind;
        a.state = AVAILABILITY_OPEN;
        a.tile_count = tiles.len() as u8;
        a.bump = bump;
        a.nonce = nonce;
        a.task = task_key;
        a.opener = opener;
        a.payout = payout;
        a.bond = bond;
        a.opened_slot = now;
        a.answer_deadline = answer_deadline;
        a.slot_len = slot_len(job.tile_len()) as u32;
        a.chunks_left = (per * tiles.len() as u64) as u32;
        a.tiles[..tiles.len()].copy_from_slice(tiles);
    }
    task.availability_nonce = nonce.checked_add(1).ok_or(MarketError::MathOverflow)?;
    task.challenges_open = task
        .challenges_open
        .checked_add(1)
        .ok_or(MarketError::MathOverflow)?;
    task.escrow_balance = math::add(task.escrow_balance, bond)?;
    emit!(AvailabilityOpened {
        task: task_key,
        availability: loader.key(),
        opener,
        kind,
        tiles: tiles.to_vec(),
        bond,
        answer_deadline,
    });
    Ok(())
}

pub fn challenge(ctx: Context<ChallengeAvailability>, args: ChallengeArgs) -> Result<()> {
    let a = ctx.accounts;
    let bond = a.task.verifier_bond.max(1);
    transfer::from_wallet(
        &a.token_program,
        &a.challenger_token,
        &a.escrow,
        &a.challenger,
        bond,
    )?;
    let key = a.task.key();
    open(
        &mut a.task,
        key,
        &a.availability,
        ctx.bumps.availability,
        KIND_CHALLENGE,
        a.challenger.key(),
        a.payout.key(),
        bond,
        &args.tiles,
    )
}

#[derive(Accounts)]
pub struct ContestWithheld<'info> {
    #[account(mut, seeds = [SEED_TASK, task.client.as_ref(), &task.task_id.to_le_bytes()], bump = task.bump)]
    pub task: Box<Account<'info, Task>>,
    #[account(
        init, payer = authority,
        space = space_for(&task, contest_tiles(&task, &task.key())?.len()),
        seeds = [SEED_AVAILABILITY, task.key().as_ref(), &task.posted_slot.to_le_bytes(), &task.availability_nonce.to_le_bytes()], bump,
    )]
    pub availability: AccountLoader<'info, Availability>,
    #[account(
        seeds = [SEED_NODE, authority.key().as_ref()], bump = provider_node.bump,
        constraint = provider_node.key() == task.provider @ MarketError::NotTaskProvider,
    )]
    pub provider_node: Box<Account<'info, Node>>,
    /// The provider's authority: opens the contest and pays its rent.
    #[account(mut)]
    pub authority: Signer<'info>,
    pub system_program: Program<'info, System>,
}

impl ContestWithheld<'_> {
    /// A held withheld verdict, not contested yet, in the window.
    pub fn validate(&self) -> Result<()> {
        let task = &self.task;
        require!(
            task.held && task.tally().majority == VERDICT_WITHHELD,
            MarketError::NotContestable
        );
        require!(task.contest == CONTEST_NONE, MarketError::AlreadyContested);
        openable(task)?;
        room_for(task, &self.authority.key())?;
        Ok(())
    }
}

pub fn contest(ctx: Context<ContestWithheld>) -> Result<()> {
    let a = ctx.accounts;
    let key = a.task.key();
    let tiles = contest_tiles(&a.task, &key)?;
    a.task.contest = CONTEST_OPEN;
    open(
        &mut a.task,
        key,
        &a.availability,
        ctx.bumps.availability,
        KIND_CONTEST,
        a.authority.key(),
        // no bond to return: the timeout passes the opener itself as `payout`
        a.authority.key(),
        0,
        &tiles,
    )
}

#[derive(Accounts)]
pub struct PublishWrite<'info> {
    pub task: Box<Account<'info, Task>>,
    #[account(mut, constraint = availability.load()?.task == task.key() @ MarketError::WrongTask)]
    pub availability: AccountLoader<'info, Availability>,
    #[account(
        seeds = [SEED_NODE, publisher.key().as_ref()], bump = provider_node.bump,
        constraint = provider_node.key() == task.provider @ MarketError::NotThePublisher,
    )]
    pub provider_node: Box<Account<'info, Node>>,
    /// The provider's authority: only it writes, so nobody can scribble over its answer.
    pub publisher: Signer<'info>,
}

/// Open, still in play under the verdict in force, before its deadline.
fn publishable(a: &Availability, task: &Task) -> Result<()> {
    require!(
        a.state == AVAILABILITY_OPEN,
        MarketError::AvailabilityClosed
    );
    require!(
        in_play(a.kind, task.tally().majority),
        MarketError::AvailabilityClosed
    );
    require!(
        Clock::get()?.slot <= a.answer_deadline,
        MarketError::AvailabilityExpired
    );
    Ok(())
}

impl PublishWrite<'_> {
    pub fn validate(&self) -> Result<()> {
        publishable(&*self.availability.load()?, &self.task)?;
        require!(
            sized(&self.availability)?,
            MarketError::AvailabilityNotSized
        );
        Ok(())
    }
}

pub fn write(ctx: Context<PublishWrite>, offset: u32, data: Vec<u8>) -> Result<()> {
    require!(
        !data.is_empty() && data.len() <= MAX_WRITE,
        MarketError::OutOfRange
    );
    let (slot, tiles, proven) = {
        let a = ctx.accounts.availability.load()?;
        (a.slot_len as usize, a.tile_count as usize, a.proven)
    };
    let start = offset as usize;
    let end = start
        .checked_add(data.len())
        .ok_or(MarketError::OutOfRange)?;
    require!(end <= tiles * slot, MarketError::OutOfRange);
    // never over a proven chunk
    for c in start / CHUNK_LEN..end.div_ceil(CHUNK_LEN) {
        let (tile, chunk) = (c * CHUNK_LEN / slot, (c * CHUNK_LEN % slot) / CHUNK_LEN);
        require!(
            proven[tile] & (1u64 << chunk) == 0,
            MarketError::ChunkAlreadyProven
        );
    }
    let info = ctx.accounts.availability.to_account_info();
    let mut bytes = info.try_borrow_mut_data()?;
    bytes[Availability::HEADER + start..Availability::HEADER + end].copy_from_slice(&data);
    Ok(())
}

#[derive(Accounts)]
pub struct PublishProve<'info> {
    #[account(mut, seeds = [SEED_TASK, task.client.as_ref(), &task.task_id.to_le_bytes()], bump = task.bump)]
    pub task: Box<Account<'info, Task>>,
    #[account(mut, seeds = [SEED_ESCROW, task.key().as_ref()], bump = task.escrow_bump)]
    pub escrow: Box<Account<'info, TokenAccount>>,
    #[account(mut, constraint = availability.load()?.task == task.key() @ MarketError::WrongTask)]
    pub availability: AccountLoader<'info, Availability>,
    #[account(
        mut, seeds = [SEED_NODE, publisher.key().as_ref()], bump = provider_node.bump,
        constraint = provider_node.key() == task.provider @ MarketError::NotThePublisher,
    )]
    pub provider_node: Box<Account<'info, Node>>,
    #[account(mut, seeds = [SEED_VAULT, provider_node.key().as_ref()], bump = provider_node.vault_bump)]
    pub provider_vault: Box<Account<'info, TokenAccount>>,
    pub publisher: Signer<'info>,
    pub token_program: Program<'info, Token>,
}

impl PublishProve<'_> {
    pub fn validate(&self) -> Result<()> {
        publishable(&*self.availability.load()?, &self.task)?;
        require!(
            sized(&self.availability)?,
            MarketError::AvailabilityNotSized
        );
        Ok(())
    }
}

pub fn prove(
    ctx: Context<PublishProve>,
    tile: u8,
    chunk: u8,
    siblings: Vec<[u8; 32]>,
) -> Result<()> {
    require!(
        siblings.len() <= MAX_CHUNK_SIBLINGS,
        MarketError::ProofTooLong
    );
    let a = ctx.accounts;
    let job = job_of(&a.task)?;
    let (slot, named, done, string_tile) = {
        let v = a.availability.load()?;
        let i = tile as usize;
        require!(i < v.tile_count as usize, MarketError::OutOfRange);
        (v.slot_len as usize, i, v.proven[i], v.tiles[i])
    };
    require!((chunk as usize) < slot / CHUNK_LEN, MarketError::OutOfRange);
    require!(done & (1u64 << chunk) == 0, MarketError::ChunkAlreadyProven);
    let c = availability::string_chunk(&job, string_tile, chunk as u64);
    let total = dispute::chunk_count(&job);
    let leaf = {
        let info = a.availability.to_account_info();
        let bytes = info.try_borrow_data()?;
        let o = Availability::HEADER + named * slot + chunk as usize * CHUNK_LEN;
        chunk_leaf(c, total, &bytes[o..o + CHUNK_LEN])
    };
    require!(
        verify_chunk_proof(&a.task.result_root, c, total, &leaf, &siblings),
        MarketError::ProofMismatch
    );
    let (left, kind, bond, key) = {
        let mut v = a.availability.load_mut()?;
        v.proven[named] |= 1u64 << chunk;
        v.chunks_left = v
            .chunks_left
            .checked_sub(1)
            .ok_or(MarketError::MathOverflow)?;
        (v.chunks_left, v.kind, v.bond, a.availability.key())
    };
    let task_key = a.task.key();
    emit!(AvailabilityPublished {
        task: task_key,
        availability: key,
        tile: string_tile,
        chunk,
        chunks_left: left,
    });
    if left > 0 {
        return Ok(());
    }
    // answered
    let now = Clock::get()?.slot;
    let opener = a.availability.load()?.opener;
    let task = &mut a.task;
    end_one(task, kind, &opener)?;
    let mut forfeit = 0;
    if kind == KIND_CHALLENGE {
        // the bond to the treasury, never to the provider: withholding off chain to collect
        // challengers' bonds must not pay (PROTOCOL §8.11)
        forfeit = bond;
        to_treasury(
            task,
            &a.escrow,
            &a.provider_vault,
            &mut a.provider_node,
            &a.token_program,
            bond,
        )?;
    } else {
        // a served result: Accepted, decided on its content from now, disputes for a window
        task.contest = CONTEST_ANSWERED;
        task.tally_mut().majority = VERDICT_SERVED;
        task.status = TaskStatus::Accepted;
        task.dispute_deadline = math::add(now, task.dispute_window as u64)?;
    }
    {
        let mut v = a.availability.load_mut()?;
        v.state = AVAILABILITY_ANSWERED;
        v.forfeit = (forfeit > 0) as u8;
    }
    emit!(AvailabilityEnded {
        task: task_key,
        availability: key,
        kind,
        outcome: AVAILABILITY_ANSWERED,
        majority: task.tally().majority,
        status: task.status,
        bond_forfeit: forfeit,
    });
    Ok(())
}

#[derive(Accounts)]
pub struct AvailabilityGrow<'info> {
    #[account(mut, constraint = availability.load()?.opener == opener.key() @ MarketError::WrongAuthority)]
    pub availability: AccountLoader<'info, Availability>,
    /// Its opener: pays the rent of the room it adds (returned at close).
    #[account(mut)]
    pub opener: Signer<'info>,
    pub system_program: Program<'info, System>,
}

/// Adds up to 10 KiB to an open account short of its full size (a no-op once full).
pub fn grow(ctx: Context<AvailabilityGrow>) -> Result<()> {
    let a = ctx.accounts;
    let (full, state) = {
        let v = a.availability.load()?;
        (v.full_len(), v.state)
    };
    require!(state == AVAILABILITY_OPEN, MarketError::AvailabilityClosed);
    // in its opening transaction's slot only: an account grown later would let its opener keep
    // the provider from publishing until the deadline, then fail it
    require!(
        Clock::get()?.slot == a.availability.load()?.opened_slot,
        MarketError::GrowTooLate
    );
    let info = a.availability.to_account_info();
    let now_len = info.data_len();
    if now_len >= full {
        return Ok(());
    }
    let len = full.min(now_len + Availability::MAX_INITIAL);
    let need = Rent::get()?
        .minimum_balance(len)
        .saturating_sub(info.lamports());
    if need > 0 {
        anchor_lang::system_program::transfer(
            CpiContext::new(
                a.system_program.key(),
                anchor_lang::system_program::Transfer {
                    from: a.opener.to_account_info(),
                    to: info.clone(),
                },
            ),
            need,
        )?;
    }
    info.resize(len)?;
    Ok(())
}

#[derive(Accounts)]
pub struct AvailabilityTimeout<'info> {
    #[account(mut, seeds = [SEED_TASK, task.client.as_ref(), &task.task_id.to_le_bytes()], bump = task.bump)]
    pub task: Box<Account<'info, Task>>,
    #[account(mut, seeds = [SEED_ESCROW, task.key().as_ref()], bump = task.escrow_bump)]
    pub escrow: Box<Account<'info, TokenAccount>>,
    #[account(mut, constraint = availability.load()?.task == task.key() @ MarketError::WrongTask)]
    pub availability: AccountLoader<'info, Availability>,
    /// CHECK: the payout account the opener named (checked against the account; read as a
    /// token account when paid: its owner may have closed it).
    #[account(mut)]
    pub payout: UncheckedAccount<'info>,
    /// CHECK: only when `payout` is closed: the opener's associated token account of the stake
    /// mint (address derived and checked).
    #[account(mut)]
    pub payout_ata: Option<UncheckedAccount<'info>>,
    /// The task's provider: a challenge its opener never grew to full size is forfeit to the
    /// treasury through it.
    #[account(
        mut, seeds = [SEED_NODE, provider_node.authority.as_ref()], bump = provider_node.bump,
        constraint = provider_node.key() == task.provider @ MarketError::NotTaskProvider,
    )]
    pub provider_node: Box<Account<'info, Node>>,
    #[account(mut, seeds = [SEED_VAULT, provider_node.key().as_ref()], bump = provider_node.vault_bump)]
    pub provider_vault: Box<Account<'info, TokenAccount>>,
    pub token_program: Program<'info, Token>,
}

impl AvailabilityTimeout<'_> {
    /// Open, and past its deadline (with no dispute open, which may still overturn the
    /// verdict first) or no longer in play.
    pub fn validate(&self) -> Result<()> {
        let a = self.availability.load()?;
        require!(
            a.state == AVAILABILITY_OPEN,
            MarketError::AvailabilityClosed
        );
        require_keys_eq!(self.payout.key(), a.payout, MarketError::WrongTokenAccount);
        let now = Clock::get()?.slot;
        // one never grown in its opening slot can never be answered: it ends at once
        let stranded = now > a.opened_slot && !sized(&self.availability)?;
        if in_play(a.kind, self.task.tally().majority) && !stranded {
            require!(
                Clock::get()?.slot > a.answer_deadline,
                MarketError::AvailabilityNotExpired
            );
            require!(self.task.disputes_open == 0, MarketError::DisputeOpen);
        }
        Ok(())
    }
}

pub fn timeout(ctx: Context<AvailabilityTimeout>) -> Result<()> {
    let a = ctx.accounts;
    let (kind, bond, opener, key) = {
        let v = a.availability.load()?;
        (v.kind, v.bond, v.opener, a.availability.key())
    };
    let majority = a.task.tally().majority;
    // an account its opener never grew could not be answered: it fails nobody, and a
    // challenger's bond is forfeit to the treasury (it held the conclusion for nothing)
    let short = !sized(&a.availability)?;
    let outcome = if in_play(kind, majority) && !short {
        AVAILABILITY_FAILED
    } else {
        AVAILABILITY_MOOT
    };
    let forfeit = if short && in_play(kind, majority) {
        bond
    } else {
        0
    };
    let task = &mut a.task;
    end_one(task, kind, &opener)?;
    if outcome == AVAILABILITY_FAILED {
        if kind == KIND_CHALLENGE {
            // the provider did not serve what the client paid for: unserved, concluded at once
            task.tally_mut().majority = VERDICT_UNSERVED;
            task.status = TaskStatus::Rejected;
        } else {
            task.contest = CONTEST_FAILED;
        }
    } else if kind == KIND_CONTEST {
        // a contest never grown: nothing was published
        task.contest = CONTEST_FAILED;
    }
    if forfeit > 0 {
        to_treasury(
            task,
            &a.escrow,
            &a.provider_vault,
            &mut a.provider_node,
            &a.token_program,
            forfeit,
        )?;
    } else if bond > 0 {
        transfer::from_escrow(
            &a.token_program,
            &a.escrow,
            task,
            a.payout.to_account_info(),
            a.payout_ata.as_ref().map(|x| x.to_account_info()),
            &opener,
            bond,
        )?;
    }
    {
        let mut v = a.availability.load_mut()?;
        v.state = outcome;
        v.forfeit = (forfeit > 0) as u8;
    }
    emit!(AvailabilityEnded {
        task: task.key(),
        availability: key,
        kind,
        outcome,
        majority: task.tally().majority,
        status: task.status,
        bond_forfeit: forfeit,
    });
    Ok(())
}

#[derive(Accounts)]
pub struct CloseAvailability<'info> {
    #[account(mut, close = opener, constraint = availability.load()?.opener == opener.key() @ MarketError::WrongAuthority)]
    pub availability: AccountLoader<'info, Availability>,
    /// Its opener: closes it and takes the rent back.
    #[account(mut)]
    pub opener: Signer<'info>,
}

impl CloseAvailability<'_> {
    /// Ended: answered, failed or moot.
    pub fn validate(&self) -> Result<()> {
        require!(
            self.availability.load()?.state != AVAILABILITY_OPEN,
            MarketError::AvailabilityOpen
        );
        Ok(())
    }
}

pub fn close(ctx: Context<CloseAvailability>) -> Result<()> {
    let a = ctx.accounts.availability.load()?;
    emit!(AvailabilityClosed {
        task: a.task,
        availability: ctx.accounts.availability.key(),
        opener: a.opener,
    });
    Ok(())
}

/// A bond in the escrow forfeit to the treasury: escrow → the provider's vault, booked to its
/// `fees_due` (how every treasury part travels on a task's path, PROTOCOL §2).
fn to_treasury<'info>(
    task: &mut Account<'info, Task>,
    escrow: &Account<'info, TokenAccount>,
    provider_vault: &Account<'info, TokenAccount>,
    provider_node: &mut Account<'info, Node>,
    token_program: &Program<'info, Token>,
    amount: u64,
) -> Result<()> {
    let id = task.task_id.to_le_bytes();
    let bump = [task.bump];
    transfer::from_pda(
        token_program,
        escrow,
        provider_vault,
        task.to_account_info(),
        &task.signer_seeds(&id, &bump),
        amount,
    )?;
    task.escrow_balance = math::sub(task.escrow_balance, amount)?;
    provider_node.fees_due = math::add(provider_node.fees_due, amount)?;
    Ok(())
}

/// One account of `kind` opened by `opener` ended: counted off the task.
fn end_one(task: &mut Task, kind: u8, opener: &Pubkey) -> Result<()> {
    task.challenges_open = task
        .challenges_open
        .checked_sub(1)
        .ok_or(MarketError::MathOverflow)?;
    if *opener == task.client && kind == KIND_CHALLENGE {
        task.client_challenges = task
            .client_challenges
            .checked_sub(1)
            .ok_or(MarketError::MathOverflow)?;
    }
    Ok(())
}

/// The verdicts after which the money moves at once, with no window left to wait for.
pub fn concludes_at_once(majority: u8) -> bool {
    compute_market_protocol::commit::overturned(majority) || majority == VERDICT_UNSERVED
}

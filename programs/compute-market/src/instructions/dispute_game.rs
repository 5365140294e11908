//! Disputes refereed by a game over a claimed trace (PROTOCOL §8.10), for elements too long to
//! recompute in one dispute (`Mlp` models too large to read, `Encoder` texts, `Generate`
//! tokens: §8.13):
//!
//! * `dispute_layout`: the challenger proves the model's header (its widths fix the trace's
//!   layout), and for an `Encoder` the text's count, for a `Generate` the prompt's count and
//!   its sampling rule (greedy);
//! * `dispute_claim`: it claims the root of the element's trace and proves the element's value
//!   in it (kind 1: not the committed one; kind 2: the committed one);
//! * `defend`: anyone else opens a game against the claim, until the defence deadline;
//! * `game_split` / `game_pick`: the challenger posts the roots inside the disputed range of
//!   steps, the defender names the segment it disputes, until one step is left;
//! * `game_write` / `game_feed` / `game_settle`: the defender replays that step from proven
//!   pieces; with the step's own leaf the program compares the memory after it with the
//!   challenger's root: equal, the challenger wins the game (the defender's bond joins its
//!   dispute's); not, the defender wins the whole dispute (both bonds to the defender);
//! * `game_timeout`: a party that misses its turn loses (the challenger: its whole dispute);
//! * `close_game`: a game whose dispute ended otherwise, or was made moot, returns the
//!   defender's bond;
//! * `dispute_resolve`: once the defence is closed and every game won, the claim stands: the
//!   dispute decides as a recomputation would.
use anchor_lang::prelude::*;
use compute_market_protocol::{
    commit::overturned,
    dispute::{self, Method, DISPUTE_RESULT_WRONG},
    feed::{self, FeedError, Target},
    hash::Digest,
    job::JobKind,
    job::JobSpec,
    merkle::{chunk_leaf, verify_chunk_proof, CHUNK_LEN},
    slices,
    trace::{self, decoder, encoder, Slots, Source, LEAF_LEN, REPLAY_LEN},
};

use anchor_spl::token::{Token, TokenAccount};

use crate::{
    constants::*,
    errors::MarketError,
    events::{DisputeClaimed, DisputeResolved, GameEnded, GameMoved, GameOpened},
    instructions::DisputeTurn,
    math,
    state::*,
    transfer,
};

/// Siblings read from `buf` after a piece of `at` bytes.
pub(crate) fn siblings(buf: &[u8], at: usize, n: usize) -> Result<Vec<Digest>> {
    require!(n <= dispute::MAX_CHUNK_SIBLINGS, MarketError::ProofTooLong);
    Ok(buf
        .get(at..at + 32 * n)
        .ok_or(MarketError::ProofTooLong)?
        .chunks_exact(32)
        .map(|c| c.try_into().expect("32 bytes"))
        .collect())
}

/// A chunk of an input's slice string (`len` bytes, BLAKE3 `root`) against its root.
pub(crate) fn check_slice_chunk(
    root: &Digest,
    len: u64,
    chunk: u64,
    bytes: &[u8],
    path: &[Digest],
) -> Result<()> {
    let count = slices::chunk_count(len);
    require!(chunk < count, MarketError::WrongChunk);
    require!(
        verify_chunk_proof(root, chunk, count, &chunk_leaf(chunk, count, bytes), path),
        MarketError::ProofMismatch
    );
    Ok(())
}

fn feed_error(e: FeedError) -> Error {
    match e {
        FeedError::WrongChunk => error!(MarketError::WrongChunk),
        FeedError::Complete => error!(MarketError::FeedComplete),
        FeedError::BadValue | FeedError::BadModel => error!(MarketError::InputsBreakRules),
    }
}

/// The job's game clock in the task's window.
fn clock_of(job: &JobSpec, task: &Task) -> Result<trace::Clock> {
    require!(
        dispute::method(job, task.dispute_window) == Some(Method::Game),
        MarketError::DisputeNotSupported
    );
    trace::clock(job, task.dispute_window).ok_or(error!(MarketError::DisputeNotSupported))
}

/// The row and word of the dispute's element (a word of an `Mlp` row or a `Generate`
/// completion, not padding).
fn word_of(job: &JobSpec, d: &Dispute) -> Result<(u32, u32)> {
    match feed::target(job, d.tile, d.element) {
        Some(Target::Word(r, w)) => Ok((r, w)),
        Some(_) => err!(MarketError::NeedsGame),
        None => err!(MarketError::DisputeNotSupported),
    }
}

/// `dispute_layout`: chunk 0 of the model's slices is in the buffer with `siblings` after it;
/// proven against the manifest's root, its header (checked against the job) fixes the trace's
/// layout. An `Encoder`'s takes a second call: the chunk of the texts' ids that holds the
/// disputed text's count (its tokens T). A `Generate`'s two more: the chunk of the prompts'
/// string that holds the prompt's count, then the one that holds the sampling rule's
/// temperature (not 0: the token's pick is sampled, its trace searches for the drawn
/// candidate); the trace must fit a game (`decoder::fits`, else `DisputeNotSupported`).
pub fn layout(ctx: Context<DisputeTurn>, siblings_n: u8) -> Result<()> {
    let a = ctx.accounts;
    let job = a.job()?;
    clock_of(&job, &a.task)?;
    let (input, chunk, steps) = {
        let mut d = a.dispute.load_mut()?;
        require!(d.proven == 1, MarketError::NotProven);
        require!(d.inputs == 1, MarketError::InputsNotProven);
        require!(d.claimed == 0, MarketError::AlreadyClaimed);
        let (row, word) = word_of(&job, &d)?;
        if job.kind == JobKind::Generate {
            let (input, chunk) = generate_layout(&job, &mut d, row, word, siblings_n)?;
            (input, chunk, d.layout().map(|l| l.step_count()))
        } else {
            let half = encoder::Layout::decode(&d.enc_layout);
            let (input, chunk) = match half {
                Some(_) => (1, encoder::count_at(&job, row) / CHUNK_LEN as u64),
                None => (0, 0),
            };
            let len = d.slice_lens[input];
            let bytes = &d.buffer[..slices::chunk_len(len, chunk)];
            let path = siblings(&d.buffer, CHUNK_LEN, siblings_n as usize)?;
            check_slice_chunk(&d.slice_roots[input], len, chunk, bytes, &path)?;
            match half {
                // the text's count
                Some(mut lay) => {
                    require!(lay.t == 0, MarketError::AlreadyClaimed);
                    let at = (encoder::count_at(&job, row) % CHUNK_LEN as u64) as usize;
                    let word = u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
                    lay.t = encoder::read_count(&job, &lay.shape, word).map_err(feed_error)?;
                    require!(
                        lay.len() <= encoder::MAX_MEMORY,
                        MarketError::DisputeNotSupported
                    );
                    d.enc_layout = lay.encode();
                }
                None if job.kind == compute_market_protocol::job::JobKind::Encoder => {
                    let shape =
                        slices::encoder::read_header(&job, len, bytes).map_err(feed_error)?;
                    d.enc_layout = encoder::Layout { shape, t: 0 }.encode();
                }
                None => {
                    let lay = trace::read_header(&job, len, bytes).map_err(feed_error)?;
                    let mut f = feed::Feed::decode(&d.feed);
                    f.layers = lay.layers;
                    for (a, b) in f.widths.iter_mut().zip(lay.widths) {
                        *a = b as u16;
                    }
                    d.feed = f.encode();
                }
            }
            (input, chunk, d.layout().map(|l| l.step_count()))
        }
    };
    emit!(crate::events::DisputeFed {
        task: a.task.key(),
        challenger: a.challenger.key(),
        input: input as u8,
        chunk,
    });
    if let Some(steps) = steps {
        msg!("trace of {} steps", steps);
    }
    Ok(())
}

/// One piece of a `Generate` dispute's layout (see [`layout`]): `(input, chunk)` proven.
fn generate_layout(
    job: &JobSpec,
    d: &mut Dispute,
    row: u32,
    word: u32,
    siblings_n: u8,
) -> Result<(usize, u64)> {
    let stride = slices::decoder::prompt_stride(job.dims[1]);
    let stage = decoder::Layout::decode(&d.feed).map(|(l, s)| (l, s));
    let (input, at) = match stage {
        None => (0, 0),
        Some((_, 0)) => (1, row as u64 * stride),
        Some((_, 1)) => (1, job.dims[0] as u64 * stride),
        Some(_) => return err!(MarketError::AlreadyClaimed),
    };
    let chunk = at / CHUNK_LEN as u64;
    let len = d.slice_lens[input];
    let n = slices::chunk_len(len, chunk);
    let path = siblings(&d.buffer, CHUNK_LEN, siblings_n as usize)?;
    check_slice_chunk(&d.slice_roots[input], len, chunk, &d.buffer[..n], &path)?;
    let bytes = &d.buffer[..n];
    let o = (at % CHUNK_LEN as u64) as usize;
    let value = bytes
        .get(o..o + 4)
        .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
        .ok_or(MarketError::InputsBreakRules)?;
    let next = match stage {
        None => {
            let shape = slices::decoder::read_header(job, len, bytes).map_err(feed_error)?;
            decoder::Layout::new(shape, job, row, 1, 0).encode(0)
        }
        Some((lay, 0)) => {
            // the prompt's count: 1 ..= L, the sequence within the model's positions
            let j = word.saturating_sub(1);
            require!(
                value >= 1
                    && value <= job.dims[1]
                    && value as u64 + j as u64 <= lay.shape.positions as u64,
                MarketError::InputsBreakRules
            );
            if word == 0 {
                decoder::Layout::count_of(lay.shape, job, row, value).encode(1)
            } else {
                decoder::Layout::new(lay.shape, job, row, value, j).encode(1)
            }
        }
        Some((lay, _)) => {
            // the temperature: a sampled token's trace searches for the drawn candidate
            let lay = lay.with_sampling(value != 0);
            require!(decoder::fits(&lay), MarketError::DisputeNotSupported);
            lay.encode(2)
        }
    };
    d.feed[..decoder::LAYOUT_LEN].copy_from_slice(&next);
    Ok((input, chunk))
}

/// `dispute_claim`: the leaf of the claimed trace's memory that holds the element's word is in
/// the buffer with `depth` siblings after it; it must lead to `root`, and the value it gives
/// must be the one the dispute's kind asserts.
pub fn claim(ctx: Context<DisputeTurn>, root: [u8; 32], siblings_n: u8) -> Result<()> {
    let a = ctx.accounts;
    let job = a.job()?;
    let clock = clock_of(&job, &a.task)?;
    let now = Clock::get()?.slot;
    let (value, steps, defend_deadline) = {
        let mut d = a.dispute.load_mut()?;
        require!(d.proven == 1, MarketError::NotProven);
        require!(d.claimed == 0, MarketError::AlreadyClaimed);
        let lay = d.layout().ok_or(MarketError::NotLaidOut)?;
        let (_, w) = word_of(&job, &d)?;
        let (off, width) = (lay.word_at(w), 4);
        let index = off / LEAF_LEN as u64;
        require!(
            siblings_n as u32 == lay.tree_depth(),
            MarketError::ProofMismatch
        );
        let path = siblings(&d.buffer, LEAF_LEN, siblings_n as usize)?;
        let leaf = &d.buffer[..LEAF_LEN];
        require!(
            trace::fold(index, trace::leaf_hash(leaf), &path) == root,
            MarketError::ProofMismatch
        );
        let at = (off % LEAF_LEN as u64) as usize;
        let mut value = [0u8; 4];
        value[..width].copy_from_slice(&leaf[at..at + width]);
        let differs = value[..] != d.committed[..4];
        require!(
            differs == (d.kind == DISPUTE_RESULT_WRONG),
            MarketError::ClaimContradicts
        );
        // every game must end, and the challenger resolve, before the answer deadline
        let end = math::add(now, clock.after_claim())?;
        require!(end <= d.answer_deadline, MarketError::ClaimTooLate);
        let defend_deadline = math::add(now, clock.defence())?;
        d.claimed = 1;
        d.claim_root = root;
        d.claim_value = value;
        d.defend_deadline = defend_deadline;
        (value, lay.step_count(), defend_deadline)
    };
    emit!(DisputeClaimed {
        task: a.task.key(),
        challenger: a.challenger.key(),
        root,
        value,
        steps,
        defend_deadline,
    });
    Ok(())
}

/// `dispute_resolve`: the defence closed and every game won by the challenger: the claimed
/// trace stands, and the dispute decides on its value as on a recomputed one (kind 1 wins;
/// kind 2 refutes the vote and goes on to the next).
pub fn resolve(ctx: Context<DisputeTurn>) -> Result<()> {
    let a = ctx.accounts;
    let (kind, committed, value) = {
        let d = a.dispute.load()?;
        require!(d.claimed == 1, MarketError::NotClaimed);
        require!(
            Clock::get()?.slot > d.defend_deadline,
            MarketError::DefenceOpen
        );
        require!(d.games_open == 0, MarketError::GamesOpen);
        let mut v = [0u8; 32];
        v[..4].copy_from_slice(&d.claim_value);
        (d.kind, d.committed, v)
    };
    a.decide(kind, committed, value)
}

#[derive(Accounts)]
#[instruction(nonce: u32)]
pub struct Defend<'info> {
    #[account(mut, seeds = [SEED_TASK, task.client.as_ref(), &task.task_id.to_le_bytes()], bump = task.bump)]
    pub task: Box<Account<'info, Task>>,
    #[account(mut, seeds = [SEED_ESCROW, task.key().as_ref()], bump = task.escrow_bump)]
    pub escrow: Box<Account<'info, TokenAccount>>,
    #[account(
        mut,
        constraint = dispute.load()?.task == task.key() @ MarketError::WrongTask,
        constraint = dispute.load()?.nonce == nonce @ MarketError::GameNotInPlay,
    )]
    pub dispute: AccountLoader<'info, Dispute>,
    #[account(
        init, payer = defender, space = Game::SPACE,
        seeds = [
            SEED_GAME, dispute.key().as_ref(), defender.key().as_ref(),
            &nonce.to_le_bytes(),
        ],
        bump,
    )]
    pub game: AccountLoader<'info, Game>,
    /// Anyone but the challenger: bonds a seat's bond, pays the game's rent (returned).
    #[account(mut)]
    pub defender: Signer<'info>,
    /// The defender's account the bond comes from.
    #[account(
        mut,
        constraint = defender_token.mint == escrow.mint @ MarketError::WrongMint,
        constraint = defender_token.owner == defender.key() @ MarketError::WrongAuthority,
    )]
    pub defender_token: Box<Account<'info, TokenAccount>>,
    /// Where the defender is paid: a token account of the stake mint.
    #[account(
        constraint = payout.mint == escrow.mint @ MarketError::WrongMint,
        constraint = payout.key() != escrow.key() @ MarketError::WrongTokenAccount,
    )]
    pub payout: Box<Account<'info, TokenAccount>>,
    pub token_program: Program<'info, Token>,
    pub system_program: Program<'info, System>,
}

impl Defend<'_> {
    /// A claimed, open dispute, its verdict in force, its defence not closed.
    pub fn validate(&self) -> Result<()> {
        let d = self.dispute.load()?;
        require!(d.state == DISPUTE_OPEN, MarketError::DisputeNotClosable);
        require!(
            !overturned(self.task.tally().majority),
            MarketError::DisputeMoot
        );
        require!(d.claimed == 1, MarketError::NotClaimed);
        require!(
            Clock::get()?.slot <= d.defend_deadline,
            MarketError::DefenceClosed
        );
        require_keys_neq!(self.defender.key(), d.challenger, MarketError::OwnClaim);
        Ok(())
    }
}

/// `defend`: a game against the dispute's claim over all its steps: the memory before the
/// first is all zero (agreed), after the last the claimed root (disputed). The defender bonds
/// a seat's bond into the escrow.
pub fn defend(ctx: Context<Defend>, _nonce: u32) -> Result<()> {
    let a = ctx.accounts;
    let job = JobSpec::decode(&a.task.job).map_err(|_| error!(MarketError::InvalidJobSpec))?;
    let clock = clock_of(&job, &a.task)?;
    let now = Clock::get()?.slot;
    let bond = a.task.verifier_bond.max(1);
    transfer::from_wallet(
        &a.token_program,
        &a.defender_token,
        &a.escrow,
        &a.defender,
        bond,
    )?;
    let (steps, claim_root, depth, nonce) = {
        let mut d = a.dispute.load_mut()?;
        d.games_open = d
            .games_open
            .checked_add(1)
            .ok_or(MarketError::MathOverflow)?;
        let lay = d.layout().ok_or(MarketError::NotLaidOut)?;
        (lay.step_count(), d.claim_root, lay.tree_depth(), d.nonce)
    };
    let task = &mut a.task;
    task.escrow_balance = math::add(task.escrow_balance, bond)?;
    task.games_open = task
        .games_open
        .checked_add(1)
        .ok_or(MarketError::MathOverflow)?;
    // each party's clock: a turn a move, spent as it likes (PROTOCOL §8.10)
    let budget = clock.budget();
    let deadline = math::add(now, budget)?;
    {
        let mut g = a.game.load_init()?;
        g.version = ACCOUNT_VERSION;
        g.bump = ctx.bumps.game;
        g.task = task.key();
        g.dispute = a.dispute.key();
        g.defender = a.defender.key();
        g.payout = a.payout.key();
        g.bond = bond;
        g.nonce = nonce;
        g.lo = 0;
        g.hi = steps;
        g.lo_root = trace::zero_root(depth);
        g.hi_root = claim_root;
        g.opened_slot = now;
        g.turn = TURN_CHALLENGER;
        g.clocks = [budget; 2];
        g.since = now;
        g.deadline = deadline;
    }
    emit!(GameOpened {
        task: task.key(),
        dispute: a.dispute.key(),
        defender: a.defender.key(),
        steps,
        deadline,
    });
    Ok(())
}

/// The game's dispute still open and claimed, the game opened against it (not against an
/// earlier dispute at the same address), the verdict in force.
fn in_play(d: &Dispute, g: &Game, task: &Task) -> Result<()> {
    require!(
        d.state == DISPUTE_OPEN && d.nonce == g.nonce,
        MarketError::GameNotInPlay
    );
    require!(!overturned(task.tally().majority), MarketError::DisputeMoot);
    require!(d.claimed == 1, MarketError::NotClaimed);
    Ok(())
}

#[derive(Accounts)]
#[instruction(nonce: u32)]
pub struct GameMove<'info> {
    #[account(seeds = [SEED_TASK, task.client.as_ref(), &task.task_id.to_le_bytes()], bump = task.bump)]
    pub task: Box<Account<'info, Task>>,
    /// Read only: parallel games do not contend for it.
    #[account(
        constraint = dispute.load()?.task == task.key() @ MarketError::WrongTask,
        constraint = dispute.load()?.nonce == nonce @ MarketError::GameNotInPlay,
    )]
    pub dispute: AccountLoader<'info, Dispute>,
    #[account(
        mut,
        seeds = [
            SEED_GAME, dispute.key().as_ref(), defender.key().as_ref(),
            &nonce.to_le_bytes(),
        ],
        bump = game.load()?.bump,
    )]
    pub game: AccountLoader<'info, Game>,
    /// CHECK: the game's defender (its PDA's seed); the mover when it picks or replays.
    pub defender: UncheckedAccount<'info>,
    /// The party whose turn it is: the challenger splits; the defender picks and replays.
    pub mover: Signer<'info>,
}

impl GameMove<'_> {
    /// In play, the turn the signer's and not expired.
    pub fn validate(&self) -> Result<()> {
        let d = self.dispute.load()?;
        let g = self.game.load()?;
        in_play(&d, &g, &self.task)?;
        require!(Clock::get()?.slot <= g.deadline, MarketError::TurnExpired);
        let who = if g.turn == TURN_CHALLENGER {
            d.challenger
        } else {
            g.defender
        };
        require_keys_eq!(self.mover.key(), who, MarketError::NotYourTurn);
        Ok(())
    }
}

fn moved(task: Pubkey, dispute: Pubkey, g: &Game, action: u8, piece: u64) {
    emit!(GameMoved {
        task,
        dispute,
        defender: g.defender,
        action,
        lo: g.lo,
        hi: g.hi,
        segments: g.segments,
        piece,
        deadline: g.deadline,
    });
}

/// The mover's clock is charged the slots since its turn began, and the turn passes to `to`,
/// whose deadline is now plus what its clock has left (PROTOCOL §8.10).
fn pass_turn(g: &mut Game, now: u64, to: u8) -> Result<()> {
    let mover = g.turn as usize & 1;
    let spent = now.saturating_sub(g.since);
    g.clocks[mover] = g.clocks[mover]
        .checked_sub(spent)
        .ok_or(MarketError::TurnExpired)?;
    g.turn = to;
    g.since = now;
    g.deadline = math::add(now, g.clocks[to as usize & 1])?;
    Ok(())
}

/// `game_split`: the challenger's roots at the inner points of the disputed range's segments.
pub fn split(ctx: Context<GameMove>, _nonce: u32, roots: Vec<[u8; 32]>) -> Result<()> {
    let a = ctx.accounts;
    let job = JobSpec::decode(&a.task.job).map_err(|_| error!(MarketError::InvalidJobSpec))?;
    clock_of(&job, &a.task)?;
    let mut g = a.game.load_mut()?;
    // the challenger's move only: a defender on its own turn must not post roots
    require!(
        g.stage == STAGE_BISECT && g.turn == TURN_CHALLENGER,
        MarketError::NotYourTurn
    );
    let (k, _) = trace::split_points(g.lo, g.hi);
    require!(roots.len() as u64 + 1 == k, MarketError::WrongSplit);
    for (slot, r) in g.roots.iter_mut().zip(&roots) {
        *slot = *r;
    }
    g.segments = k as u8;
    pass_turn(&mut g, Clock::get()?.slot, TURN_DEFENDER)?;
    moved(a.task.key(), a.dispute.key(), &g, 1, 0);
    Ok(())
}

/// `game_pick`: the defender disputes the end of segment `segment` and agrees with its start;
/// one step left, it replays it next.
pub fn pick(ctx: Context<GameMove>, _nonce: u32, segment: u8) -> Result<()> {
    let a = ctx.accounts;
    let job = JobSpec::decode(&a.task.job).map_err(|_| error!(MarketError::InvalidJobSpec))?;
    let clock = clock_of(&job, &a.task)?;
    let now = Clock::get()?.slot;
    let mut g = a.game.load_mut()?;
    // the defender's move only, after a split
    require!(
        g.stage == STAGE_BISECT && g.turn == TURN_DEFENDER && g.segments > 0,
        MarketError::NotYourTurn
    );
    let k = g.segments as u64;
    require!((segment as u64) < k, MarketError::WrongSegment);
    let (_, p) = trace::split_points(g.lo, g.hi);
    let i = segment as u64;
    let (lo, hi) = (p(i), p(i + 1));
    if i > 0 {
        g.lo_root = g.roots[i as usize - 1];
    }
    if i + 1 < k {
        g.hi_root = g.roots[i as usize];
    }
    g.lo = lo;
    g.hi = hi;
    g.segments = 0;
    g.roots = [[0; 32]; trace::MAX_SPLIT_ROOTS];
    pass_turn(&mut g, now, TURN_CHALLENGER)?;
    if hi - lo == 1 {
        // the replay has its own time, from now
        g.stage = STAGE_REPLAY;
        g.turn = TURN_DEFENDER;
        g.replay = [0; REPLAY_LEN];
        g.deadline = math::add(now, clock.replay())?;
    }
    moved(a.task.key(), a.dispute.key(), &g, 2, 0);
    Ok(())
}

/// `game_write`: part of a piece of the replay and its siblings into the game's buffer.
pub fn write(ctx: Context<GameMove>, _nonce: u32, offset: u16, data: Vec<u8>) -> Result<()> {
    let a = ctx.accounts;
    let mut g = a.game.load_mut()?;
    require!(g.stage == STAGE_REPLAY, MarketError::NotReplaying);
    let end = offset as usize + data.len();
    require!(end <= g.buffer.len(), MarketError::ProofTooLong);
    g.buffer[offset as usize..end].copy_from_slice(&data);
    moved(a.task.key(), a.dispute.key(), &g, 3, offset as u64);
    Ok(())
}

/// The accounts that end a game and may end its dispute: the task, its escrow, the dispute,
/// the game, both parties and the defender's payout account.
#[derive(Accounts)]
#[instruction(nonce: u32)]
pub struct GameEnd<'info> {
    #[account(mut, seeds = [SEED_TASK, task.client.as_ref(), &task.task_id.to_le_bytes()], bump = task.bump)]
    pub task: Box<Account<'info, Task>>,
    #[account(mut, seeds = [SEED_ESCROW, task.key().as_ref()], bump = task.escrow_bump)]
    pub escrow: Box<Account<'info, TokenAccount>>,
    #[account(
        mut,
        seeds = [SEED_DISPUTE, task.key().as_ref(), challenger.key().as_ref()], bump,
        constraint = dispute.load()?.nonce == nonce @ MarketError::GameNotInPlay,
    )]
    pub dispute: AccountLoader<'info, Dispute>,
    #[account(
        mut,
        seeds = [
            SEED_GAME, dispute.key().as_ref(), defender.key().as_ref(),
            &nonce.to_le_bytes(),
        ],
        bump = game.load()?.bump,
    )]
    pub game: AccountLoader<'info, Game>,
    /// CHECK: the dispute's challenger (its PDA's seed): gets the dispute's rent if it loses.
    #[account(mut)]
    pub challenger: UncheckedAccount<'info>,
    /// The game's defender (its PDA's seed): gets the game's rent back. Signs `game_settle`
    /// (its replay's end); anyone may end a game by `game_timeout`.
    /// CHECK: the seed of the game's PDA.
    #[account(mut)]
    pub defender: UncheckedAccount<'info>,
    /// CHECK: the payout account the defender named (checked against the game; read as a
    /// token account in the handler: its owner may have closed it).
    #[account(mut, address = game.load()?.payout @ MarketError::WrongTokenAccount)]
    pub payout: UncheckedAccount<'info>,
    /// CHECK: only when `payout` is closed: the defender's associated token account of the
    /// stake mint (address derived and checked).
    #[account(mut)]
    pub payout_ata: Option<UncheckedAccount<'info>>,
    pub token_program: Program<'info, Token>,
}

impl<'info> GameEnd<'info> {
    fn in_play(&self) -> Result<()> {
        in_play(&*self.dispute.load()?, &*self.game.load()?, &self.task)
    }

    /// Pays `amount` from the escrow to the defender's payout account.
    fn pay_defender(&mut self, amount: u64) -> Result<()> {
        transfer::from_escrow(
            &self.token_program,
            &self.escrow,
            &mut self.task,
            self.payout.to_account_info(),
            self.payout_ata.as_ref().map(|x| x.to_account_info()),
            &self.defender.key(),
            amount,
        )
    }

    fn ended(&self, outcome: u8) -> Result<()> {
        let g = self.game.load()?;
        emit!(GameEnded {
            task: self.task.key(),
            dispute: self.dispute.key(),
            defender: g.defender,
            outcome,
            step: g.hi,
        });
        Ok(())
    }

    /// The challenger won the game: the defender's bond joins the dispute's (paid with it if
    /// the dispute wins, forfeit with it if it loses), the game closes.
    fn challenger_won(&mut self) -> Result<()> {
        self.ended(1)?;
        let bond = self.game.load()?.bond;
        {
            let mut d = self.dispute.load_mut()?;
            d.bond = math::add(d.bond, bond)?;
            d.games_open = d
                .games_open
                .checked_sub(1)
                .ok_or(MarketError::MathOverflow)?;
        }
        self.task.games_open = self
            .task
            .games_open
            .checked_sub(1)
            .ok_or(MarketError::MathOverflow)?;
        self.game.close(self.defender.to_account_info())
    }

    /// The defender won the game: the whole dispute is lost; its bond and the defender's go to
    /// the defender, both accounts close. The dispute's other games are left to `close_game`.
    fn defender_won(&mut self) -> Result<()> {
        self.ended(2)?;
        let (bond, dispute_bond) = (self.game.load()?.bond, self.dispute.load()?.bond);
        self.pay_defender(math::add(bond, dispute_bond)?)?;
        let task = &mut self.task;
        task.games_open = task
            .games_open
            .checked_sub(1)
            .ok_or(MarketError::MathOverflow)?;
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
            committed: [0; 32],
            recomputed: [0; 32],
        });
        self.game.close(self.defender.to_account_info())?;
        self.dispute.close(self.challenger.to_account_info())
    }
}

/// Proves piece `index` of `source` (0 model, 1 batch: a chunk of its slices; 2 the memory
/// before the step: a leaf) from the game's buffer, with `siblings_n` siblings after it, and
/// has the replay take it. Once the replay takes the step's own leaf: whether the memory
/// after the step has the challenger's root.
fn take_piece(
    job: &JobSpec,
    result_root: &Digest,
    d: &Dispute,
    g: &mut Game,
    source: u8,
    index: u64,
    siblings_n: u8,
) -> Result<Option<bool>> {
    require!(g.stage == STAGE_REPLAY, MarketError::NotReplaying);
    let src = Source::from_code(source).ok_or(MarketError::WrongChunk)?;
    let (row, _) = word_of(job, d)?;
    let lay = d.layout().ok_or(MarketError::NotLaidOut)?;
    let s = g.hi;
    // the piece the replay needs next, before any hashing
    let want = lay
        .next(job, row, s, &g.replay)
        .ok_or(MarketError::FeedComplete)?;
    require!(want == (src, index), MarketError::WrongChunk);
    let (bytes_len, path) = match src {
        Source::Trace => {
            require!(
                siblings_n as u32 == lay.tree_depth(),
                MarketError::ProofMismatch
            );
            require!(index < lay.leaf_count(), MarketError::WrongChunk);
            let path = siblings(&g.buffer, LEAF_LEN, siblings_n as usize)?;
            require!(
                trace::fold(index, trace::leaf_hash(&g.buffer[..LEAF_LEN]), &path) == g.lo_root,
                MarketError::ProofMismatch
            );
            (LEAF_LEN, path)
        }
        Source::Result => {
            // a `Generate` completion's earlier tokens: a chunk of the committed string
            let count = dispute::chunk_count(job);
            require!(index < count, MarketError::WrongChunk);
            let path = siblings(&g.buffer, CHUNK_LEN, siblings_n as usize)?;
            let leaf = chunk_leaf(index, count, &g.buffer[..CHUNK_LEN]);
            require!(
                verify_chunk_proof(result_root, index, count, &leaf, &path),
                MarketError::ProofMismatch
            );
            (CHUNK_LEN, path)
        }
        Source::Model | Source::Batch => {
            let i = src.code() as usize;
            let len = d.slice_lens[i];
            let n = slices::chunk_len(len, index);
            let path = siblings(&g.buffer, CHUNK_LEN, siblings_n as usize)?;
            check_slice_chunk(&d.slice_roots[i], len, index, &g.buffer[..n], &path)?;
            (n, path)
        }
    };
    let g = &mut *g;
    let taken = lay
        .take(
            job,
            row,
            s,
            &mut g.replay,
            src,
            index,
            &g.buffer[..bytes_len],
            &mut g.work,
        )
        .map_err(feed_error)?;
    Ok(taken.map(|patch| {
        // the slot's leaf (proven above) becomes the leaf after the step
        patch.apply(&mut g.buffer[..LEAF_LEN], &g.work);
        trace::fold(index, trace::leaf_hash(&g.buffer[..LEAF_LEN]), &path) == g.hi_root
    }))
}

/// `game_feed` (the defender, one step left): piece `index` of `source` of the replay, proven
/// and taken. Touches only the game: parallel games do not contend. The step's own leaf, which
/// ends the game, is `game_settle`'s.
pub fn feed(
    ctx: Context<GameMove>,
    _nonce: u32,
    source: u8,
    index: u64,
    siblings_n: u8,
) -> Result<()> {
    let a = ctx.accounts;
    let job = JobSpec::decode(&a.task.job).map_err(|_| error!(MarketError::InvalidJobSpec))?;
    let d = a.dispute.load()?;
    let mut g = a.game.load_mut()?;
    let (row, _) = word_of(&job, &d)?;
    let lay = d.layout().ok_or(MarketError::NotLaidOut)?;
    require!(
        !lay.at_slot(&job, row, g.hi, &g.replay),
        MarketError::SettleTheStep
    );
    let taken = take_piece(
        &job,
        &a.task.result_root,
        &d,
        &mut g,
        source,
        index,
        siblings_n,
    )?;
    debug_assert!(taken.is_none(), "only the step's leaf completes a replay");
    moved(a.task.key(), a.dispute.key(), &g, 4, index);
    Ok(())
}

/// `game_settle` (the defender): the step's own leaf (`index`, with `siblings_n` siblings) is
/// in the buffer; the replay writes the step's value into it and compares the memory after
/// the step with the challenger's root: equal, the challenger wins the game; not, the
/// defender wins the dispute.
pub fn settle(ctx: Context<GameEnd>, _nonce: u32, index: u64, siblings_n: u8) -> Result<()> {
    let a = ctx.accounts;
    a.in_play()?;
    require!(a.defender.is_signer, MarketError::NotYourTurn);
    let job = JobSpec::decode(&a.task.job).map_err(|_| error!(MarketError::InvalidJobSpec))?;
    let matched = {
        let d = a.dispute.load()?;
        let mut g = a.game.load_mut()?;
        require!(Clock::get()?.slot <= g.deadline, MarketError::TurnExpired);
        let taken = take_piece(
            &job,
            &a.task.result_root,
            &d,
            &mut g,
            Source::Trace.code(),
            index,
            siblings_n,
        )?;
        moved(a.task.key(), a.dispute.key(), &g, 4, index);
        taken.ok_or(MarketError::WrongChunk)?
    };
    if matched {
        a.challenger_won()
    } else {
        a.defender_won()
    }
}

/// `game_timeout` (anyone): the party whose turn it was loses: a silent defender its bond (to
/// the challenger's dispute), a silent challenger its whole dispute (both bonds to the
/// defender).
pub fn timeout(ctx: Context<GameEnd>, _nonce: u32) -> Result<()> {
    let a = ctx.accounts;
    a.in_play()?;
    let (turn, deadline) = {
        let g = a.game.load()?;
        (g.turn, g.deadline)
    };
    require!(Clock::get()?.slot > deadline, MarketError::TurnNotExpired);
    if turn == TURN_CHALLENGER {
        a.defender_won()
    } else {
        a.challenger_won()
    }
}

#[derive(Accounts)]
#[instruction(nonce: u32)]
pub struct CloseGame<'info> {
    #[account(mut, seeds = [SEED_TASK, task.client.as_ref(), &task.task_id.to_le_bytes()], bump = task.bump)]
    pub task: Box<Account<'info, Task>>,
    #[account(mut, seeds = [SEED_ESCROW, task.key().as_ref()], bump = task.escrow_bump)]
    pub escrow: Box<Account<'info, TokenAccount>>,
    /// CHECK: the game's dispute: closed already (its challenger lost), re-created since
    /// (another dispute), or open and moot (another dispute overturned the verdict); read in
    /// the handler.
    #[account(mut, address = game.load()?.dispute @ MarketError::WrongTask)]
    pub dispute: UncheckedAccount<'info>,
    #[account(
        mut, close = defender,
        constraint = game.load()?.task == task.key() @ MarketError::WrongTask,
        seeds = [SEED_GAME, dispute.key().as_ref(), defender.key().as_ref(), &nonce.to_le_bytes()],
        bump = game.load()?.bump,
    )]
    pub game: AccountLoader<'info, Game>,
    /// CHECK: the game's defender (its PDA's seed): gets the rent back.
    #[account(mut)]
    pub defender: UncheckedAccount<'info>,
    /// CHECK: the payout account the defender named (checked against the game).
    #[account(mut, address = game.load()?.payout @ MarketError::WrongTokenAccount)]
    pub payout: UncheckedAccount<'info>,
    /// CHECK: only when `payout` is closed: the defender's associated token account.
    #[account(mut)]
    pub payout_ata: Option<UncheckedAccount<'info>>,
    pub token_program: Program<'info, Token>,
}

/// `close_game` (anyone): a game whose dispute has ended (closed, or another dispute since at
/// its address) or is moot returns the defender's bond (and the rent).
pub fn close_game(ctx: Context<CloseGame>, _nonce: u32) -> Result<()> {
    let a = ctx.accounts;
    let (bond, nonce) = {
        let g = a.game.load()?;
        (g.bond, g.nonce)
    };
    let info = a.dispute.to_account_info();
    if info.owner == &crate::ID && !info.data_is_empty() {
        use anchor_lang::Discriminator;
        let mut data = info.try_borrow_mut_data()?;
        require!(
            data.len() >= Dispute::SPACE && data[..8] == *Dispute::DISCRIMINATOR,
            MarketError::GameNotClosable
        );
        let d: &mut Dispute = bytemuck::from_bytes_mut(&mut data[8..Dispute::SPACE]);
        if d.nonce == nonce {
            // its own dispute, still open: only moot
            require!(
                d.state == DISPUTE_OPEN && overturned(a.task.tally().majority),
                MarketError::GameNotClosable
            );
            d.games_open = d
                .games_open
                .checked_sub(1)
                .ok_or(MarketError::MathOverflow)?;
        }
    }
    transfer::from_escrow(
        &a.token_program,
        &a.escrow,
        &mut a.task,
        a.payout.to_account_info(),
        a.payout_ata.as_ref().map(|x| x.to_account_info()),
        &a.defender.key(),
        bond,
    )?;
    let task = &mut a.task;
    task.games_open = task
        .games_open
        .checked_sub(1)
        .ok_or(MarketError::MathOverflow)?;
    let g = a.game.load()?;
    emit!(GameEnded {
        task: task.key(),
        dispute: a.dispute.key(),
        defender: g.defender,
        outcome: 3,
        step: g.hi,
    });
    Ok(())
}

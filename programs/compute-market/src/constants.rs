//! PDA seeds and the hard-coded bounds of every parameter (PROTOCOL §7).
use anchor_lang::prelude::*;

/// The SlotHashes sysvar (read raw: it is too large to deserialize on-chain).
pub const SLOT_HASHES_ID: Pubkey = pubkey!("SysvarS1otHashes111111111111111111111111111");

/// Seed of the singleton [`crate::state::Config`] PDA.
pub const SEED_CONFIG: &[u8] = b"config";
/// Seed prefix of a [`crate::state::Market`] PDA: `[SEED_MARKET, id (u16 LE)]`.
pub const SEED_MARKET: &[u8] = b"market";
/// Seed prefix of a [`crate::state::Node`] PDA: `[SEED_NODE, authority]`.
pub const SEED_NODE: &[u8] = b"node";
/// Seed prefix of a node's stake vault (token account owned by the node PDA): `[SEED_VAULT, node]`.
pub const SEED_VAULT: &[u8] = b"vault";
/// Seed prefix of a [`crate::state::Task`] PDA: `[SEED_TASK, client, task id (u64 LE)]`.
pub const SEED_TASK: &[u8] = b"task";
/// Seed prefix of a task's escrow (token account owned by the task PDA): `[SEED_ESCROW, task]`.
pub const SEED_ESCROW: &[u8] = b"escrow";
/// Seed prefix of a [`crate::state::Vote`] PDA: `[SEED_VOTE, task, verifier node, round]`.
pub const SEED_VOTE: &[u8] = b"vote";

/// Basis points in one whole.
pub const BPS: u64 = 10_000;
/// Longest URI (result location or input location), bytes.
pub const MAX_URI_LEN: usize = 128;
/// Longest node endpoint (`Node.endpoint`), bytes.
pub const MAX_ENDPOINT_LEN: usize = 56;
/// Longest market name, bytes.
pub const MAX_NAME_LEN: usize = 32;

/// Quorum V: odd, in `MIN_QUORUM..=MAX_QUORUM`.
pub const MIN_QUORUM: u8 = 1;
/// A market's minimum quorum when its creator names none: a task's override may not go below
/// it (PROTOCOL §7), so no client can post a task that one seat decides.
pub const DEFAULT_MIN_QUORUM: u8 = 3;
/// Largest quorum V (an escalated round seats 2V).
pub const MAX_QUORUM: u8 = 15;
/// Samples k per verifier.
pub const MIN_SAMPLES: u16 = 1;
/// Largest k.
pub const MAX_SAMPLES: u16 = 256;
/// Submit window, slots.
pub const MIN_SUBMIT_WINDOW: u32 = 10;
/// Largest submit window, slots.
pub const MAX_SUBMIT_WINDOW: u32 = 100_000;
/// Join, commit and reveal windows, slots.
pub const MIN_PHASE_WINDOW: u32 = 5;
/// Largest join, commit or reveal window, slots.
pub const MAX_PHASE_WINDOW: u32 = 10_000;
/// Largest join window, slots: below the SlotHashes horizon (PROTOCOL §3.2). SlotHashes always
/// lists every slot of the last [`SLOT_HASHES_MAX_ENTRIES`], so a draw made at the join
/// deadline, at most this many slots after the reference, still finds the first slot after it:
/// the seed is one value whenever it is drawn, and waiting can never re-roll it.
pub const MAX_JOIN_WINDOW: u32 = 500;
/// Shortest non-zero dispute window (PROTOCOL §8.1), slots: time for a challenger's
/// transactions (open, writes, prove, step) to land.
pub const MIN_DISPUTE_WINDOW: u32 = 20;
/// Longest dispute window of a market (PROTOCOL §8.1), slots.
pub const MAX_DISPUTE_WINDOW: u32 = 10_000;
/// Seed of a dispute PDA: `[SEED_DISPUTE, task, challenger]`.
pub const SEED_DISPUTE: &[u8] = b"dispute";
/// Seed of an availability PDA: `[SEED_AVAILABILITY, task, posted slot (u64 LE), nonce (u16
/// LE)]` (PROTOCOL §8.11).
pub const SEED_AVAILABILITY: &[u8] = b"availability";
/// Seed of a game PDA: `[SEED_GAME, dispute, defender, nonce (u32 LE)]` (PROTOCOL §8.10).
pub const SEED_GAME: &[u8] = b"game";
/// How long an unclaimed task stays open, slots.
pub const MIN_TASK_TTL: u32 = 10;
/// Longest an unclaimed task stays open, slots.
pub const MAX_TASK_TTL: u32 = 1_000_000;
/// Protocol fee, at most 10%.
pub const MAX_FEE_BPS: u16 = 1_000;
/// Verifier pool, at most 30% of the reward.
pub const MAX_VERIFIER_POOL_BPS: u16 = 3_000;
/// Provider bond, at least 1× the reward.
pub const MIN_PROVIDER_BOND_BPS: u32 = 10_000;
/// Provider bond, at most 10× the reward.
pub const MAX_PROVIDER_BOND_BPS: u32 = 100_000;
/// Verifier bond per seat, at least 1% of the reward.
pub const MIN_VERIFIER_BOND_BPS: u32 = 100;
/// Verifier bond per seat, at most 10× the reward.
pub const MAX_VERIFIER_BOND_BPS: u32 = 100_000;
/// Minority / no-reveal verifier slash, at least 1% of its bond (and never less than one
/// unit: PROTOCOL §4.4).
pub const MIN_VERIFIER_SLASH_BPS: u16 = 100;
/// Minority / no-reveal verifier slash, at most 100% of its bond.
pub const MAX_VERIFIER_SLASH_BPS: u16 = 10_000;
/// Late provider slash, at least 1% of its bond (and never less than one unit).
pub const MIN_LATE_SLASH_BPS: u16 = 100;
/// Late provider slash, at most 50% of its bond.
pub const MAX_LATE_SLASH_BPS: u16 = 5_000;
/// Longest unstake cooldown, slots (about 4.6 days at 400 ms): the admin can never freeze
/// stake for longer. Above twice the longest possible task (submit + 2 rounds at the bounds).
pub const MAX_UNSTAKE_COOLDOWN: u64 = 1_000_000;
/// Delay before a proposed parameter change can be applied, slots.
pub const MIN_UPDATE_DELAY: u64 = 10;
/// Longest parameter-update delay, slots.
pub const MAX_UPDATE_DELAY: u64 = 10_000_000;
/// Seats of a round at most: an escalated round seats 2 × [`MAX_QUORUM`].
pub const MAX_SEATS: usize = 2 * MAX_QUORUM as usize;
/// Layout version written in every account (first byte after the discriminator).
pub const ACCOUNT_VERSION: u8 = 1;
/// Sortition aims at this many eligible verifiers per seat (each seat is its own race,
/// PROTOCOL §3.3): a seat finds no eligible verifier with probability `e^-6` ≈ 0.25%.
pub const SEAT_OVERSAMPLE: u64 = 6;
/// Node role bit: may claim tasks.
pub const ROLE_PROVIDER: u8 = 1;
/// Node role bit: may take verifier seats.
pub const ROLE_VERIFIER: u8 = 2;
/// Entries the SlotHashes sysvar keeps.
pub const SLOT_HASHES_MAX_ENTRIES: u64 = 512;

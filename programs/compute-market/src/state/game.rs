use anchor_lang::prelude::*;
use compute_market_protocol::trace::{BUFFER_LEN, MAX_SPLIT_ROOTS, REPLAY_LEN, WORK_LEN};

/// The challenger splits.
pub const TURN_CHALLENGER: u8 = 0;
/// The defender picks a segment (or, one step left, replays it).
pub const TURN_DEFENDER: u8 = 1;
/// Splitting the range of steps.
pub const STAGE_BISECT: u8 = 0;
/// One step left: the defender replays it.
pub const STAGE_REPLAY: u8 = 1;

/// One defender's game against a dispute's claimed trace (PROTOCOL §8.10):
/// `[SEED_GAME, dispute, defender, nonce]`. Zero-copy (a replay's buffer and work area). The
/// defender bonds a seat's bond into the task's escrow: paid to the challenger's dispute when
/// the defender loses, back with the challenger's bond when it wins, back alone when the game
/// ends otherwise. Rent back to the defender at close.
#[account(zero_copy)]
#[repr(C)]
pub struct Game {
    /// Layout version ([`crate::constants::ACCOUNT_VERSION`]).
    pub version: u8,
    /// Canonical bump.
    pub bump: u8,
    /// [`TURN_CHALLENGER`] or [`TURN_DEFENDER`].
    pub turn: u8,
    /// [`STAGE_BISECT`] or [`STAGE_REPLAY`].
    pub stage: u8,
    /// Segments of the last split (its roots are `roots[..segments − 1]`), 0 before the first.
    pub segments: u8,
    /// Padding (zero).
    pub pad0: [u8; 3],
    /// The task.
    pub task: Pubkey,
    /// The dispute whose claim is defended against.
    pub dispute: Pubkey,
    /// Who defends (picks segments, replays the last step, gets the rent back).
    pub defender: Pubkey,
    /// Token account of the stake mint the defender is paid to.
    pub payout: Pubkey,
    /// The range of steps in dispute: the memory after `lo` steps is agreed, after `hi` not.
    pub lo: u64,
    /// See `lo`.
    pub hi: u64,
    /// Last slot the party whose turn it is may move (`since` + its clock; in the replay, the
    /// replay's own time): after it, `game_timeout`.
    pub deadline: u64,
    /// Slot it was opened.
    pub opened_slot: u64,
    /// Slots each party has left for its moves, `[challenger, defender]` (PROTOCOL §8.10): a
    /// party's clock runs only while it owes a move, so a late move is made up by prompt ones.
    pub clocks: [u64; 2],
    /// Slot the current turn began (the other party's last move).
    pub since: u64,
    /// Reserved for later versions (zero).
    pub reserved: [u8; 32],
    /// The defender's bond, in the task's escrow.
    pub bond: u64,
    /// The number of the dispute it was opened against (`Dispute.nonce`).
    pub nonce: u32,
    /// Padding (zero).
    pub pad1: u32,
    /// The challenger's root of the memory after `lo` steps (agreed).
    pub lo_root: [u8; 32],
    /// The challenger's root after `hi` steps (disputed).
    pub hi_root: [u8; 32],
    /// The last split's roots.
    pub roots: [[u8; 32]; MAX_SPLIT_ROOTS],
    /// The replay's state (`compute_market_protocol::trace::Replay`).
    pub replay: [u8; REPLAY_LEN],
    /// A piece (model or batch chunk, memory leaf) and its siblings (`game_write`).
    pub buffer: [u8; BUFFER_LEN],
    /// The replay's work area: one layer's inputs.
    pub work: [u8; WORK_LEN],
}

impl Game {
    /// Account size with the discriminator.
    pub const SPACE: usize = 8 + core::mem::size_of::<Game>();
    /// Byte offset of `task` in the account data: clients filter a task's games here.
    pub const TASK_OFFSET: usize = 8 + 8;
    /// Byte offset of `dispute`: a dispute's games.
    pub const DISPUTE_OFFSET: usize = 8 + 8 + 32;
    /// Byte offset of `defender`: a defender's games.
    pub const DEFENDER_OFFSET: usize = 8 + 8 + 64;

    /// Reads a game from its account data (discriminator included), off-chain; `None` if the
    /// data is not a game.
    pub fn from_account_data(data: &[u8]) -> Option<Game> {
        use anchor_lang::Discriminator;
        if data.get(..8)? != Game::DISCRIMINATOR {
            return None;
        }
        Some(bytemuck::pod_read_unaligned(
            data.get(8..8 + core::mem::size_of::<Game>())?,
        ))
    }
}

use anchor_lang::prelude::*;
use compute_market_protocol::availability::MAX_TILES;

/// Open: the provider may still publish.
pub const AVAILABILITY_OPEN: u8 = 0;
/// Every chunk of every named tile is proven: the data area holds them.
pub const AVAILABILITY_ANSWERED: u8 = 1;
/// Its deadline passed unanswered (`availability_timeout`).
pub const AVAILABILITY_FAILED: u8 = 2;
/// Ended without effect: a dispute proved the result wrong, or another challenge failed first.
pub const AVAILABILITY_MOOT: u8 = 3;

/// One availability challenge or contest of a task (PROTOCOL §8.11): `[SEED_AVAILABILITY,
/// task, nonce (u16 LE)]`. Zero-copy: after its fields comes a data area of `tile_count ·
/// slot_len` bytes into which the provider publishes the named tiles, chunk by proven chunk.
/// Closed by its opener once it ended (rent back to it).
#[account(zero_copy)]
#[repr(C)]
pub struct Availability {
    /// Layout version ([`crate::constants::ACCOUNT_VERSION`]).
    pub version: u8,
    /// `availability::KIND_CHALLENGE` (a client's, bonded) or `KIND_CONTEST` (a provider's
    /// answer to a withheld verdict).
    pub kind: u8,
    /// [`AVAILABILITY_OPEN`], [`AVAILABILITY_ANSWERED`], [`AVAILABILITY_FAILED`] or
    /// [`AVAILABILITY_MOOT`].
    pub state: u8,
    /// Tiles named (1 ..= `MAX_TILES`).
    pub tile_count: u8,
    /// Canonical bump.
    pub bump: u8,
    /// Whether the bond went to the treasury (answered challenge), 0 or 1.
    pub forfeit: u8,
    /// Its number among the task's availability accounts (the PDA's seed).
    pub nonce: u16,
    /// The task.
    pub task: Pubkey,
    /// Who opened it (signs its close, gets the rent back).
    pub opener: Pubkey,
    /// Token account of the stake mint its bond is returned to.
    pub payout: Pubkey,
    /// Bonded by the opener, in the task's escrow (0 for a contest).
    pub bond: u64,
    /// Slot it was opened.
    pub opened_slot: u64,
    /// Last slot the provider may publish.
    pub answer_deadline: u64,
    /// Bytes of each named tile's slot in the data area.
    pub slot_len: u32,
    /// Chunks not yet proven.
    pub chunks_left: u32,
    /// The named tiles, increasing (the first `tile_count`).
    pub tiles: [u32; MAX_TILES],
    /// Per named tile, a bit per chunk of its slot, set once proven.
    pub proven: [u64; MAX_TILES],
    /// Zeroed space for fields of later versions.
    pub reserved: [u8; 32],
}

impl Availability {
    /// Bytes before the data area (discriminator included).
    pub const HEADER: usize = 8 + core::mem::size_of::<Availability>();
    /// Byte offset of `task` in the account data: clients filter a task's accounts here.
    pub const TASK_OFFSET: usize = 8 + 8;
    /// Byte offset of `opener`: a wallet finds the accounts it opened here.
    pub const OPENER_OFFSET: usize = 8 + 8 + 32;

    /// Most bytes an account is created with: a program creates accounts through a call of
    /// the system program, which allocates at most 10 KiB; the rest is grown by
    /// `availability_grow`, 10 KiB an instruction, in the opening transaction.
    pub const MAX_INITIAL: usize = 10_240;

    /// Account size, fully grown, for `tiles` tiles of slot `slot_len`.
    pub fn space(tiles: usize, slot_len: usize) -> usize {
        Self::HEADER + tiles * slot_len
    }

    /// `availability_grow` instructions that take an account of `tiles` tiles of slot
    /// `slot_len` from its initial size to its full one.
    pub fn grows(tiles: usize, slot_len: usize) -> usize {
        Self::space(tiles, slot_len)
            .saturating_sub(Self::MAX_INITIAL)
            .div_ceil(Self::MAX_INITIAL)
    }

    /// Its size fully grown.
    pub fn full_len(&self) -> usize {
        Self::space(self.tile_count as usize, self.slot_len as usize)
    }

    /// Reads the fields from account data (discriminator included), off-chain; `None` if the
    /// data is not an availability account.
    pub fn from_account_data(data: &[u8]) -> Option<Availability> {
        use anchor_lang::Discriminator;
        if data.get(..8)? != Availability::DISCRIMINATOR {
            return None;
        }
        Some(bytemuck::pod_read_unaligned(data.get(8..Self::HEADER)?))
    }

    /// The named tiles.
    pub fn named(&self) -> &[u32] {
        &self.tiles[..(self.tile_count as usize).min(MAX_TILES)]
    }

    /// The published bytes of named tile `i` (its whole slot), from account data.
    pub fn tile_bytes<'a>(&self, data: &'a [u8], i: usize) -> Option<&'a [u8]> {
        let s = self.slot_len as usize;
        data.get(Self::HEADER + i * s..Self::HEADER + (i + 1) * s)
    }
}

use anchor_lang::prelude::*;
use compute_market_protocol::{
    dispute::PROOF_BUFFER_LEN,
    feed::STATE_LEN,
    trace::{decoder, encoder, Traced},
};

/// A dispute still being argued.
pub const DISPUTE_OPEN: u8 = 0;
/// A dispute that overturned its task's verdict; its challenger is paid by `close_dispute`.
pub const DISPUTE_WON: u8 = 1;

/// One challenger's dispute of one task's verdict (PROTOCOL §8): `[SEED_DISPUTE, task,
/// challenger]`. Zero-copy: it carries a proof buffer (one BLAKE3 chunk and its siblings) too
/// large to deserialize onto the program's stack. Closed when lost (at once), or by
/// `close_dispute` when won or made moot by another's win; rent back to the challenger.
#[account(zero_copy)]
#[repr(C)]
pub struct Dispute {
    /// Layout version ([`crate::constants::ACCOUNT_VERSION`]).
    pub version: u8,
    /// 1: the result is wrong; 2: the INVALID claims are false
    /// (`compute_market_protocol::dispute`).
    pub kind: u8,
    /// [`DISPUTE_OPEN`] or [`DISPUTE_WON`].
    pub state: u8,
    /// Whether the committed value of the current element is proven against the root.
    pub proven: u8,
    /// Canonical bump.
    pub bump: u8,
    /// Padding (zero).
    pub pad0: [u8; 3],
    /// The task.
    pub task: Pubkey,
    /// Who disputes (signs every turn, gets the rent back).
    pub challenger: Pubkey,
    /// Token account of the stake mint its bond and award are paid to.
    pub payout: Pubkey,
    /// Kind 2: the INVALID vote being refuted (default while none).
    pub target: Pubkey,
    /// Bonded by the challenger, in the task's escrow.
    pub bond: u64,
    /// Slot it was opened.
    pub opened_slot: u64,
    /// Last slot the challenger may act: after it, `dispute_timeout` ends it as lost.
    pub answer_deadline: u64,
    /// `MatMulModP`: the partial sum of the element, mod p.
    pub acc: u64,
    /// The element's tile.
    pub tile: u32,
    /// The element within its tile.
    pub element: u32,
    /// `MatMulModP`: terms of the sum added so far.
    pub done: u32,
    /// Padding (zero).
    pub pad1: u32,
    /// The element's committed bytes (its width; the rest zero), once proven.
    pub committed: [u8; 32],
    /// The chunk that holds the element, then its siblings bottom-up (`dispute_write`); later
    /// the job's manifest (`dispute_inputs`), then each input chunk and its siblings
    /// (`dispute_feed`).
    pub buffer: [u8; PROOF_BUFFER_LEN],
    /// A job on the client's data: whether its manifest is proven (`dispute_inputs`), 0 or 1.
    pub inputs: u8,
    /// Padding (zero).
    pub pad2: [u8; 7],
    /// Slice-string lengths of the two inputs the element is recomputed from (A and B, or
    /// model and batch: PROTOCOL §8.7).
    pub slice_lens: [u64; 2],
    /// BLAKE3 roots of those slice strings, from the job's version-2 manifest.
    pub slice_roots: [[u8; 32]; 2],
    /// The recomputation's state (`compute_market_protocol::feed::Feed`), reset when an
    /// element is proven; a `Generate` game's layout
    /// (`compute_market_protocol::trace::decoder::Layout::encode`).
    pub feed: [u8; STATE_LEN],
    /// A game (PROTOCOL §8.10): the last slot a defender may join, once claimed.
    pub defend_deadline: u64,
    /// A game: defenders' games still being played.
    pub games_open: u32,
    /// A game: whether the challenger claimed the element's trace (`dispute_claim`), 0 or 1.
    pub claimed: u8,
    /// Padding (zero).
    pub pad3: [u8; 3],
    /// A game: the element's value in the claimed trace (its width; the rest zero).
    pub claim_value: [u8; 4],
    /// Its number among the task's disputes (`Task.dispute_nonce` when it was opened).
    pub nonce: u32,
    /// A game: the root of the claimed trace's memory after its last step.
    pub claim_root: [u8; 32],
    /// An `Encoder` game: the model's shape and the text's tokens, as `dispute_layout` read
    /// them (`compute_market_protocol::trace::encoder::Layout::encode`; zero until then).
    pub enc_layout: [u8; 28],
    /// Zeroed space for fields of later versions.
    pub reserved: [u8; 4],
}

impl Dispute {
    /// Account size with the discriminator.
    pub const SPACE: usize = 8 + core::mem::size_of::<Dispute>();
    /// Account size once `dispute_inputs` added the recomputation's work area after the
    /// fields (a row's activations through a model: `feed::WORK_LEN` bytes).
    pub const SPACE_WITH_WORK: usize = Self::SPACE + compute_market_protocol::feed::WORK_LEN;
    /// Byte offset of `task` in the account data (after the discriminator and eight bytes of
    /// version, kind, state, flags and padding): clients filter a task's disputes here.
    pub const TASK_OFFSET: usize = 8 + 8;

    /// Reads a dispute from its account data (discriminator included), off-chain; `None` if
    /// the data is not a dispute.
    pub fn from_account_data(data: &[u8]) -> Option<Dispute> {
        use anchor_lang::Discriminator;
        if data.get(..8)? != Dispute::DISCRIMINATOR {
            return None;
        }
        Some(bytemuck::pod_read_unaligned(
            data.get(8..8 + core::mem::size_of::<Dispute>())?,
        ))
    }

    /// Forgets the element being argued (kind 2, between votes).
    pub fn clear_element(&mut self) {
        debug_assert_eq!(self.games_open, 0, "an element's games end before the next");
        self.target = Pubkey::default();
        self.proven = 0;
        self.acc = 0;
        self.done = 0;
        self.committed = [0; 32];
        self.feed = [0; STATE_LEN];
        self.claimed = 0;
        self.claim_value = [0; 4];
        self.claim_root = [0; 32];
        self.enc_layout = [0; 28];
        self.defend_deadline = 0;
    }

    /// The trace layout `dispute_layout` read (the model's header, and an `Encoder` text's
    /// count), once complete.
    pub fn layout(&self) -> Option<Traced> {
        if let Some(l) = encoder::Layout::decode(&self.enc_layout) {
            return (l.t > 0).then_some(Traced::Encoder(l));
        }
        // a `Generate` token's layout is kept where an `Mlp`'s feed state is (a decoder game
        // feeds nothing): complete at its third piece
        if let Some((l, stage)) = decoder::Layout::decode(&self.feed) {
            return (stage == 2).then_some(Traced::Decoder(l));
        }
        let f = compute_market_protocol::feed::Feed::decode(&self.feed);
        (f.layers > 0).then(|| {
            let w: Vec<u32> = f.widths[..f.layers as usize + 1]
                .iter()
                .map(|&w| w as u32)
                .collect();
            Traced::Mlp(compute_market_protocol::trace::Layout::new(&w))
        })
    }
}

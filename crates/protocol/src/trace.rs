//! Bisection over a claimed trace (PROTOCOL §8.10): how the program referees an element whose
//! recomputation does not fit one dispute, with one honest defender enough.
//!
//! The challenger claims the whole *trace* of the element's computation: every intermediate
//! value of one `Mlp` row in a fixed memory layout ([`Layout`]), one value per *step*, and
//! commits to the memory after the last step by a root ([`root`]). Anyone may defend the
//! verdict against that claim, each defender in its own game: the challenger posts the roots
//! of the memory at up to 15 points inside the disputed range of steps, the defender names the
//! first segment whose end it disputes, until one step remains. The program then replays that
//! step ([`Replay`]) from the agreed memory before it (its inputs proven against the earlier
//! root, the model's record against the manifest's slices) and checks the challenger's root
//! after it. An honest defender always narrows a wrong trace to a step the challenger cannot
//! prove; an honest challenger proves every step of a right one.
//!
//! **Memory commitment.** The memory of [`Layout::len`] bytes is cut into 1 KiB leaves and
//! hashed as a binary SHA-256 tree over 2^depth leaves (missing leaves all zero): a leaf is
//! `SHA-256(0x00 ‖ its 1 024 bytes)`, a node `SHA-256(0x01 ‖ left ‖ right)`. The memory before
//! the first step is all zero, so its root [`zero_root`] needs no claim; a step writes one
//! slot, so its root after is the same path with one leaf changed. SHA-256 is the
//! `sol_sha256` syscall on chain: a leaf and its path cost a few thousand compute units.
//!
//! **Layout of an `Mlp` row** (layers `0 … L−1`, widths `w_0 … w_L`): the hidden layers'
//! outputs, int8, layer by layer (`Σ_{l=1}^{L−1} w_l` bytes), zero-padded to a multiple of 4;
//! then the `C` logits, LE `i32`; then the class, LE `u32`: exactly the row's output words
//! after the hidden values. Steps are the slots in memory order: step 1 is layer 0's output 0;
//! the last step is the class.

pub mod decoder;
pub mod encoder;

use crate::{
    dispute::SLOTS_PER_TRANSACTION,
    feed::{requantize, FeedError},
    hash::{hashv, Digest},
    job::{JobSpec, MAX_MLP_LAYERS, MAX_MLP_WIDTH},
    merkle::CHUNK_LEN,
    slices::{self, RECORD_HEAD},
};

/// Bytes of a memory leaf.
pub const LEAF_LEN: usize = 1024;
/// Segments a split divides a range of steps into (at most).
pub const SEGMENTS: u64 = 16;
/// Roots one split posts: the inner points of its segments.
pub const MAX_SPLIT_ROOTS: usize = SEGMENTS as usize - 1;
/// Deepest memory tree of an `Mlp` or `Encoder` trace: 2^16 leaves (64 MiB); a `Generate`
/// token's is [`decoder::MAX_DEPTH`].
pub const MAX_DEPTH: u32 = 16;
/// Bytes of an encoded [`Replay`].
pub const REPLAY_LEN: usize = 64;
/// Bytes of a replay's work area: one `Mlp` layer's inputs; a `Generate` step's reads and its
/// value (a feed-forward row of 1 536 int16 values and its 1 160-byte record for SmolLM2).
pub const WORK_LEN: usize = 6 * 1024;
/// Bytes of a game's buffer: one piece (a chunk or a leaf) and up to 32 siblings.
pub const BUFFER_LEN: usize = LEAF_LEN + 32 * 32;
/// Bytes one `game_write` carries: as many as fit a transaction packet beside its signature,
/// its five accounts and a compute-budget instruction.
pub const WRITE_LEN: usize = 896;
/// Fewest slots a turn of a game may be given: a minute at 400 ms a slot, so that a party
/// kept out of a few blocks (congestion, a hostile leader) still moves in time.
pub const MIN_TURN: u64 = 150;
/// Turns defenders have to join a claim.
pub const DEFENCE_TURNS: u64 = 2;
/// Transactions from opening a dispute to its claim, at most: open; the element (two writes,
/// prove); the manifest (a write, `dispute_inputs`); the model's header (two writes,
/// `dispute_layout`); the claim's leaf (two writes, `dispute_claim`).
pub const CLAIM_TRANSACTIONS: u64 = 12;

/// [`CLAIM_TRANSACTIONS`] for this job: an `Encoder`'s layout takes a second piece (the text's
/// count: two writes and `dispute_layout`).
pub fn claim_transactions(job: &JobSpec) -> u64 {
    match job.kind {
        crate::job::JobKind::Encoder => CLAIM_TRANSACTIONS + 3,
        // two more layout pieces (the prompt's count, the sampling rule) and a third write for
        // the claim's leaf (up to 32 siblings)
        crate::job::JobKind::Generate => CLAIM_TRANSACTIONS + 7,
        _ => CLAIM_TRANSACTIONS,
    }
}

/// The clock of a game in a market of dispute window D (PROTOCOL §8.10), in slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Clock {
    /// Each turn of a game: a split, a pick, the challenger's resolution after the last game;
    /// defenders join for [`DEFENCE_TURNS`] of them.
    pub turn: u64,
    /// The defender's replay of the one step left (every piece at two slots a transaction).
    pub step: u64,
    /// The claim must land within this many slots of the dispute's opening, so that every
    /// game ends inside the window.
    pub claim_by: u64,
    /// Splits a game takes at most.
    pub levels: u32,
}

/// Pieces a replay of one step of this job reads, at most: a layer's inputs (the batch's
/// row, or up to 4 096 values from the memory), its record (up to 12 + 4 096 bytes), or the
/// logits for the class; then the slot's leaf. Each piece is two writes and a feed.
pub fn step_pieces(job: &JobSpec) -> u64 {
    let k = CHUNK_LEN as u64;
    let (f, c, w) = (job.dims[1] as u64, job.dims[2] as u64, MAX_MLP_WIDTH as u64);
    let dense = (f.div_ceil(k) + 1).max(w.div_ceil(k) + 1) + (RECORD_HEAD + w).div_ceil(k) + 1;
    let class = (4 * c).div_ceil(k) + 1;
    dense.max(class) + 1
}

impl Clock {
    /// Turns from the claim to the resolution, besides the replay's own slots: the defence, a
    /// split and a pick per level, a turn of margin for the replay (transactions confirmed
    /// slower than two slots each), the resolution.
    pub fn turns(&self) -> u64 {
        DEFENCE_TURNS + 2 * self.levels as u64 + 2
    }

    /// Slots each party of a game has for all its moves in the bisection (PROTOCOL §8.10): a
    /// turn for each of its `levels` moves, spent as it likes, its clock running only while
    /// it owes a move.
    pub fn budget(&self) -> u64 {
        self.levels as u64 * self.turn
    }

    /// Slots defenders have to join, from the claim.
    pub fn defence(&self) -> u64 {
        DEFENCE_TURNS * self.turn
    }

    /// Slots the defender has to replay the one step left, from its last pick: a turn of
    /// margin and the replay's own slots.
    pub fn replay(&self) -> u64 {
        self.turn + self.step
    }

    /// Slots from the claim to the last moment the challenger may resolve: every game a
    /// defender joins in time has ended before.
    pub fn after_claim(&self) -> u64 {
        self.turns() * self.turn + self.step
    }
}

/// The game's clock for an `Mlp` job on the client's data, or an `Encoder`'s
/// ([`encoder::gameable`]), in a window of `window` slots, or
/// `None` when a game cannot be played in it: the claim's transactions, the defence, two
/// turns a split for the most splits any model of the job's shape needs, the replay, and the
/// challenger's resolution, at most `window` slots, with every turn, and the time from the
/// dispute's opening to its claim, at least [`MIN_TURN`].
pub fn clock(job: &JobSpec, window: u32) -> Option<Clock> {
    let (steps, pieces, per_piece) = if encoder::gameable(job) {
        (encoder::steps_bound(job), encoder::step_pieces(job), 3)
    } else if decoder::gameable(job) {
        (
            decoder::steps_bound(job),
            decoder::step_pieces(),
            decoder::PIECE_TRANSACTIONS,
        )
    } else if job.kind == crate::job::JobKind::Mlp && job.slices_len > 0 {
        (
            (MAX_MLP_LAYERS - 1) * MAX_MLP_WIDTH as u64 + job.dims[2] as u64 + 1,
            step_pieces(job),
            3,
        )
    } else {
        return None;
    };
    let levels = levels(steps);
    let step = per_piece * pieces * SLOTS_PER_TRANSACTION;
    let claim = (claim_transactions(job) * SLOTS_PER_TRANSACTION).max(MIN_TURN);
    let turns = DEFENCE_TURNS + 2 * levels as u64 + 2;
    let turn = (window as u64).checked_sub(claim + step)? / turns;
    (turn >= MIN_TURN).then_some(Clock {
        turn,
        step,
        claim_by: window as u64 - turn * turns - step,
        levels,
    })
}

/// Where a trace's step writes and what it computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Output `o` of hidden layer `layer` (int8, after ReLU).
    Hidden {
        /// The dense layer, `0 … L−2`.
        layer: u8,
        /// Its output.
        o: u32,
    },
    /// Logit `o` (the last layer's output).
    Logit(u32),
    /// The class: the lowest index of the largest logit.
    Class,
}

/// The memory layout of one `Mlp` row's trace, from the model's widths.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// `w_0 … w_L` (zero past L).
    pub widths: [u32; 9],
    /// L.
    pub layers: u8,
}

impl Layout {
    /// The layout of a model of widths `w_0 … w_L` (1 ..= 8 layers, each width ≥ 1).
    pub fn new(widths: &[u32]) -> Layout {
        let mut w = [0u32; 9];
        w[..widths.len()].copy_from_slice(widths);
        Layout {
            widths: w,
            layers: (widths.len() - 1) as u8,
        }
    }

    fn ws(&self) -> &[u32] {
        &self.widths[..self.layers as usize + 1]
    }

    /// Classes C.
    pub fn classes(&self) -> u32 {
        self.widths[self.layers as usize]
    }

    /// Byte offset of hidden layer `layer`'s outputs.
    pub fn hidden_at(&self, layer: usize) -> u64 {
        self.widths[1..=layer].iter().map(|&w| w as u64).sum()
    }

    /// Hidden values in all.
    fn hidden(&self) -> u64 {
        self.hidden_at(self.layers as usize - 1)
    }

    /// Byte offset of the logits (the hidden values padded to a multiple of 4, so that no
    /// 4-byte slot straddles two leaves).
    pub fn logits_at(&self) -> u64 {
        self.hidden().next_multiple_of(4)
    }

    /// Steps of the trace: every hidden value, every logit, the class.
    pub fn steps(&self) -> u64 {
        self.hidden() + self.classes() as u64 + 1
    }

    /// Bytes of the memory.
    pub fn len(&self) -> u64 {
        self.logits_at() + 4 * self.classes() as u64 + 4
    }

    /// Never empty (the class is always there); for clippy.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Leaves of the memory.
    pub fn leaves(&self) -> u64 {
        self.len().div_ceil(LEAF_LEN as u64)
    }

    /// Depth of the memory tree: ⌈log2 leaves⌉.
    pub fn depth(&self) -> u32 {
        self.leaves().next_power_of_two().trailing_zeros()
    }

    /// What step `s` (1 ..= [`steps`](Self::steps)) computes; `None` outside.
    pub fn step(&self, s: u64) -> Option<Step> {
        if s == 0 || s > self.steps() {
            return None;
        }
        let mut i = s - 1;
        for l in 0..self.layers as usize - 1 {
            let w = self.widths[l + 1] as u64;
            if i < w {
                return Some(Step::Hidden {
                    layer: l as u8,
                    o: i as u32,
                });
            }
            i -= w;
        }
        Some(if i < self.classes() as u64 {
            Step::Logit(i as u32)
        } else {
            Step::Class
        })
    }

    /// Offset and width of step `s`'s slot.
    pub fn slot(&self, s: u64) -> (u64, usize) {
        match self.step(s) {
            Some(Step::Hidden { layer, o }) => (self.hidden_at(layer as usize) + o as u64, 1),
            Some(Step::Logit(o)) => (self.logits_at() + 4 * o as u64, 4),
            Some(Step::Class) => (self.logits_at() + 4 * self.classes() as u64, 4),
            None => (0, 0),
        }
    }

    /// The step whose slot holds word `w` of the row's output (a logit, or the class at C).
    pub fn word_step(&self, w: u32) -> u64 {
        self.hidden() + w.min(self.classes()) as u64 + 1
    }
}

/// The layout of a disputed element's trace: an `Mlp` row's or an `Encoder` text's, with the
/// replay of one of its steps, so that the program plays both games alike.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Traced {
    /// An `Mlp` row.
    Mlp(Layout),
    /// An `Encoder` text.
    Encoder(encoder::Layout),
    /// A `Generate` token.
    Decoder(decoder::Layout),
}

impl Slots for Traced {
    fn mem_len(&self) -> u64 {
        match self {
            Traced::Mlp(l) => l.len(),
            Traced::Encoder(l) => l.len(),
            Traced::Decoder(l) => l.len(),
        }
    }
    fn step_count(&self) -> u64 {
        match self {
            Traced::Mlp(l) => l.steps(),
            Traced::Encoder(l) => l.steps(),
            Traced::Decoder(l) => l.steps(),
        }
    }
    fn slot_of(&self, s: u64) -> (u64, usize) {
        match self {
            Traced::Mlp(l) => l.slot(s),
            Traced::Encoder(l) => l.slot(s),
            Traced::Decoder(l) => l.slot(s),
        }
    }
}

impl From<Layout> for Traced {
    fn from(l: Layout) -> Traced {
        Traced::Mlp(l)
    }
}

impl From<decoder::Layout> for Traced {
    fn from(l: decoder::Layout) -> Traced {
        Traced::Decoder(l)
    }
}

impl From<encoder::Layout> for Traced {
    fn from(l: encoder::Layout) -> Traced {
        Traced::Encoder(l)
    }
}

impl Traced {
    /// Where word `w` of the element's row lies in the memory after the last step (4 bytes).
    pub fn word_at(&self, w: u32) -> u64 {
        match self {
            Traced::Mlp(l) => l.slot(l.word_step(w)).0,
            Traced::Encoder(l) => l.word_at(w),
            // the layout is the disputed token's: its one word
            Traced::Decoder(l) => l.token_at(),
        }
    }

    /// The piece a replay (state `r`) of step `s` of row `row` needs next; `None` once complete.
    pub fn next(
        &self,
        job: &JobSpec,
        row: u32,
        s: u64,
        r: &[u8; REPLAY_LEN],
    ) -> Option<(Source, u64)> {
        match self {
            Traced::Mlp(l) => Replay::decode(r).next(job, l, row, s),
            Traced::Encoder(l) => encoder::Replay::decode(r).next(job, l, row, s),
            Traced::Decoder(l) => decoder::Replay::decode(r).next(l, s),
        }
    }

    /// Whether the replay (state `r`) has read every input: its next piece is the slot's leaf.
    pub fn at_slot(&self, job: &JobSpec, row: u32, s: u64, r: &[u8; REPLAY_LEN]) -> bool {
        match self {
            Traced::Mlp(_) => Replay::decode(r).stage >= 2,
            Traced::Encoder(l) => encoder::Replay::decode(r).at_slot(job, l, row, s),
            Traced::Decoder(_) => decoder::Replay::decode(r).at_slot(),
        }
    }

    /// The replay (state `r`, updated) takes piece `index` of `source`: see [`Replay::take`].
    #[allow(clippy::too_many_arguments)]
    pub fn take(
        &self,
        job: &JobSpec,
        row: u32,
        s: u64,
        r: &mut [u8; REPLAY_LEN],
        source: Source,
        index: u64,
        bytes: &[u8],
        work: &mut [u8],
    ) -> Result<Option<Patch>, FeedError> {
        match self {
            Traced::Mlp(l) => {
                let mut rep = Replay::decode(r);
                let out = rep.take(job, l, row, s, source, index, bytes, work);
                *r = rep.encode();
                out
            }
            Traced::Encoder(l) => {
                let mut rep = encoder::Replay::decode(r);
                let out = rep.take(job, l, row, s, source, index, bytes, work);
                *r = rep.encode();
                out
            }
            Traced::Decoder(l) => {
                let mut rep = decoder::Replay::decode(r);
                let out = rep.take(l, &job.input, s, source, index, bytes, work);
                *r = rep.encode();
                out
            }
        }
    }
}

/// Reads and checks an `Mlp` model's header (its slice string's first chunk, of a string of
/// `len` bytes) against the job: its widths `w_0 … w_L`, or [`FeedError::BadModel`].
pub fn read_header(job: &JobSpec, len: u64, bytes: &[u8]) -> Result<Layout, FeedError> {
    let word = |o: usize| u32::from_le_bytes([bytes[o], bytes[o + 1], bytes[o + 2], bytes[o + 3]]);
    if bytes.len() < 8 {
        return Err(FeedError::BadModel);
    }
    let layers = word(0) as usize;
    if !(1..=MAX_MLP_LAYERS as usize).contains(&layers)
        || bytes.len() < slices::model_header_len(layers) as usize
    {
        return Err(FeedError::BadModel);
    }
    let mut widths = [0u32; 9];
    for (i, x) in widths.iter_mut().enumerate().take(layers + 1) {
        *x = word(4 + 4 * i);
    }
    let ws = &widths[..layers + 1];
    if !slices::widths_fit(job, ws) || slices::model_slices_len(ws) != len {
        return Err(FeedError::BadModel);
    }
    Ok(Layout::new(ws))
}

/// A memory leaf's hash: `SHA-256(0x00 ‖ leaf)`, the leaf zero-padded to [`LEAF_LEN`].
pub fn leaf_hash(leaf: &[u8]) -> Digest {
    const ZEROS: [u8; LEAF_LEN] = [0; LEAF_LEN];
    let n = leaf.len().min(LEAF_LEN);
    hashv(&[&[0], &leaf[..n], &ZEROS[n..]])
}

/// An inner node: `SHA-256(0x01 ‖ left ‖ right)`.
pub fn node_hash(left: &Digest, right: &Digest) -> Digest {
    hashv(&[&[1], left, right])
}

/// The root of an all-zero memory of depth `depth`: the memory before the first step.
pub fn zero_root(depth: u32) -> Digest {
    let mut h = leaf_hash(&[]);
    for _ in 0..depth {
        h = node_hash(&h, &h);
    }
    h
}

/// The root from leaf `index`'s hash and its siblings, bottom-up (one per level).
pub fn fold(index: u64, leaf: Digest, siblings: &[Digest]) -> Digest {
    let mut h = leaf;
    for (level, s) in siblings.iter().enumerate() {
        h = if (index >> level) & 1 == 0 {
            node_hash(&h, s)
        } else {
            node_hash(s, &h)
        };
    }
    h
}

/// The points a split of steps `lo .. hi` (hi > lo + 1) divides it at: `k + 1` points
/// `p_i = lo + ⌊(hi − lo) · i / k⌋`, `k = min(16, hi − lo)`; the challenger posts the roots at
/// `p_1 … p_{k−1}`.
pub fn split_points(lo: u64, hi: u64) -> (u64, impl Fn(u64) -> u64) {
    let n = hi - lo;
    let k = n.min(SEGMENTS);
    (k, move |i: u64| lo + n * i / k)
}

/// Splits until one step remains, at most: ⌈log16 steps⌉.
pub fn levels(steps: u64) -> u32 {
    let mut n = 0;
    let mut span = 1u64;
    while span < steps {
        span = span.saturating_mul(SEGMENTS);
        n += 1;
    }
    n
}

/// Which string a replay reads next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// A chunk of the model's slice string (BLAKE3, against the manifest's root).
    Model,
    /// A chunk of the batch's slice string (BLAKE3, against the manifest's root).
    Batch,
    /// A leaf of the memory before the step (SHA-256, against the agreed root).
    Trace,
    /// A chunk of the committed result (BLAKE3, against the result root): a `Generate`
    /// completion's earlier tokens.
    Result,
}

impl Source {
    /// Its number in instructions.
    pub fn code(self) -> u8 {
        match self {
            Source::Model => 0,
            Source::Batch => 1,
            Source::Trace => 2,
            Source::Result => 3,
        }
    }

    /// From its number.
    pub fn from_code(c: u8) -> Option<Source> {
        match c {
            0 => Some(Source::Model),
            1 => Some(Source::Batch),
            2 => Some(Source::Trace),
            3 => Some(Source::Result),
            _ => None,
        }
    }
}

/// What a complete replay writes: the step's value into its slot of the leaf it took.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Patch {
    /// The slot's offset in the leaf.
    pub at: usize,
    /// The slot's width (1 to 1 024 bytes).
    pub width: usize,
    /// A value of at most 4 bytes (its first `width` bytes).
    pub value: [u8; 4],
    /// Where the value lies in the replay's work area instead (a row: an `Encoder`'s
    /// LayerNorm, probabilities, sums, embedding).
    pub work: Option<usize>,
}

impl Patch {
    /// Writes the value into `leaf` (the slot's leaf of the memory before the step), which
    /// becomes the leaf after it.
    pub fn apply(&self, leaf: &mut [u8], work: &[u8]) {
        let to = &mut leaf[self.at..self.at + self.width];
        match self.work {
            Some(o) => to.copy_from_slice(&work[o..o + self.width]),
            None => to.copy_from_slice(&self.value[..self.width]),
        }
    }
}

/// A trace's memory layout as the game sees it: its length, its steps, and the slot each
/// writes (steps in memory order: every slot past step s's end is zero after step s).
pub trait Slots {
    /// Bytes of the memory.
    fn mem_len(&self) -> u64;
    /// Steps of the trace.
    fn step_count(&self) -> u64;
    /// Offset and width of step `s`'s slot.
    fn slot_of(&self, s: u64) -> (u64, usize);
    /// Leaves of the memory.
    fn leaf_count(&self) -> u64 {
        self.mem_len().div_ceil(LEAF_LEN as u64)
    }
    /// Depth of the memory tree: ⌈log2 leaves⌉.
    fn tree_depth(&self) -> u32 {
        self.leaf_count().next_power_of_two().trailing_zeros()
    }
}

impl Slots for Layout {
    fn mem_len(&self) -> u64 {
        self.len()
    }
    fn step_count(&self) -> u64 {
        self.steps()
    }
    fn slot_of(&self, s: u64) -> (u64, usize) {
        self.slot(s)
    }
}

/// The replay of one step (PROTOCOL §8.10): the step's inputs (the batch's row for layer 0,
/// else the previous layer's values from the memory; for the class the logits), then the
/// record of its output in the model, then the leaf holding its slot, which it returns with
/// the value written. Resumable: [`REPLAY_LEN`] bytes kept between transactions, a work area
/// of a layer's inputs ([`MAX_MLP_WIDTH`] bytes, [`WORK_LEN`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Replay {
    /// 0 inputs, 1 the record, 2 the slot's leaf, 3 complete.
    pub stage: u8,
    /// Bytes of the current stage read.
    pub pos: u32,
    /// Class: the index of the largest logit so far.
    pub best_at: u32,
    /// The accumulator (dense) or the largest logit (class).
    pub acc: i64,
    /// The record's head: bias, multiplier, shift.
    pub head: [u8; 12],
    /// The value, once computed (its slot's width).
    pub value: [u8; 4],
}

fn word(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}

impl Replay {
    /// The state's bytes.
    pub fn encode(&self) -> [u8; REPLAY_LEN] {
        let mut b = [0u8; REPLAY_LEN];
        b[0] = self.stage;
        b[4..8].copy_from_slice(&self.pos.to_le_bytes());
        b[8..12].copy_from_slice(&self.best_at.to_le_bytes());
        b[16..24].copy_from_slice(&self.acc.to_le_bytes());
        b[24..36].copy_from_slice(&self.head);
        b[36..40].copy_from_slice(&self.value);
        b
    }

    /// [`Replay::encode`] read back.
    pub fn decode(b: &[u8; REPLAY_LEN]) -> Replay {
        Replay {
            stage: b[0],
            pos: word(b, 4),
            best_at: word(b, 8),
            acc: i64::from_le_bytes(b[16..24].try_into().expect("8 bytes")),
            head: b[24..36].try_into().expect("12 bytes"),
            value: b[36..40].try_into().expect("4 bytes"),
        }
    }

    /// Where stage 0 reads, and how many bytes: (source, first byte, length).
    fn inputs(job: &JobSpec, lay: &Layout, row: u32, step: Step) -> (Source, u64, u64) {
        let f = job.dims[1] as u64;
        match step {
            Step::Class => (Source::Trace, lay.logits_at(), 4 * lay.classes() as u64),
            Step::Hidden { layer: 0, .. } => (Source::Batch, row as u64 * f, f),
            Step::Logit(_) if lay.layers == 1 => (Source::Batch, row as u64 * f, f),
            Step::Hidden { layer, .. } => {
                let l = layer as usize;
                (Source::Trace, lay.hidden_at(l - 1), lay.widths[l] as u64)
            }
            Step::Logit(_) => {
                let l = lay.layers as usize - 1;
                (Source::Trace, lay.hidden_at(l - 1), lay.widths[l] as u64)
            }
        }
    }

    /// The dense layer and output of a step (none for the class).
    fn record(lay: &Layout, step: Step) -> Option<(usize, u32)> {
        match step {
            Step::Hidden { layer, o } => Some((layer as usize, o)),
            Step::Logit(o) => Some((lay.layers as usize - 1, o)),
            Step::Class => None,
        }
    }

    /// The piece it needs next, (source, chunk or leaf index), for step `s` of row `row`;
    /// `None` once complete.
    pub fn next(&self, job: &JobSpec, lay: &Layout, row: u32, s: u64) -> Option<(Source, u64)> {
        let step = lay.step(s)?;
        let c = CHUNK_LEN as u64;
        match self.stage {
            0 => {
                let (src, at, _) = Self::inputs(job, lay, row, step);
                Some((src, (at + self.pos as u64) / c))
            }
            1 => {
                let (l, o) = Self::record(lay, step)?;
                let at = slices::record_offset(lay.ws(), l, o) + self.pos as u64;
                Some((Source::Model, at / c))
            }
            2 => Some((Source::Trace, lay.slot(s).0 / LEAF_LEN as u64)),
            _ => None,
        }
    }

    /// Takes piece `index` of `source` (`bytes`, already proven: a model or batch chunk, or a
    /// whole memory leaf). Once it takes the slot's own leaf (the step is complete) it returns
    /// the [`Patch`] that makes it the leaf after the step; `None` while more is needed.
    #[allow(clippy::too_many_arguments)]
    pub fn take(
        &mut self,
        job: &JobSpec,
        lay: &Layout,
        row: u32,
        s: u64,
        source: Source,
        index: u64,
        bytes: &[u8],
        work: &mut [u8],
    ) -> Result<Option<Patch>, FeedError> {
        let want = self.next(job, lay, row, s).ok_or(FeedError::Complete)?;
        if want != (source, index) {
            return Err(FeedError::WrongChunk);
        }
        let step = lay.step(s).ok_or(FeedError::Complete)?;
        let start = index
            * if source == Source::Trace {
                LEAF_LEN
            } else {
                CHUNK_LEN
            } as u64;
        let end = start + bytes.len() as u64;
        match self.stage {
            0 => {
                let (_, at, len) = Self::inputs(job, lay, row, step);
                let from = at + self.pos as u64;
                let to = end.min(at + len);
                if to <= from {
                    return Err(FeedError::BadModel);
                }
                for p in from..to {
                    let b = bytes[(p - start) as usize];
                    let i = (p - at) as usize;
                    if step == Step::Class {
                        // logits stream through: the lowest index of the largest
                        if i % 4 == 3 {
                            let lo = p - 3 - start;
                            let v = if p - 3 >= start {
                                word(bytes, lo as usize) as i32
                            } else {
                                return Err(FeedError::BadModel);
                            };
                            let o = (i / 4) as u32;
                            if o == 0 || i64::from(v) > self.acc {
                                self.acc = v.into();
                                self.best_at = o;
                            }
                        }
                    } else {
                        work[i] = b;
                    }
                }
                self.pos = (to - at) as u32;
                if to == at + len {
                    self.pos = 0;
                    self.stage = if step == Step::Class {
                        self.value = self.best_at.to_le_bytes();
                        2
                    } else {
                        1
                    };
                }
                Ok(None)
            }
            1 => {
                let (l, o) = Self::record(lay, step).ok_or(FeedError::Complete)?;
                let inp = lay.widths[l] as u64;
                let at = slices::record_offset(lay.ws(), l, o);
                let from = at + self.pos as u64;
                let to = end.min(at + RECORD_HEAD + inp);
                if to <= from {
                    return Err(FeedError::BadModel);
                }
                for p in from..to {
                    let b = bytes[(p - start) as usize];
                    let i = (p - at) as usize;
                    if i < RECORD_HEAD as usize {
                        self.head[i] = b;
                        if i == RECORD_HEAD as usize - 1 {
                            let bias = word(&self.head, 0) as i32 as i64;
                            // no int32 accumulator may overflow (PROTOCOL §5, Mlp)
                            if bias.abs() + inp as i64 * 128 * 128 > i32::MAX as i64 {
                                return Err(FeedError::BadModel);
                            }
                            self.acc = bias;
                        }
                    } else {
                        let j = i - RECORD_HEAD as usize;
                        self.acc += (b as i8 as i64) * (work[j] as i8 as i64);
                    }
                }
                self.pos = (to - at) as u32;
                if to == at + RECORD_HEAD + inp {
                    self.value = if matches!(step, Step::Hidden { .. }) {
                        let (m, sh) = (word(&self.head, 4) as i32, word(&self.head, 8) as i32);
                        if m < 1 || !(1..=62).contains(&sh) {
                            return Err(FeedError::BadModel);
                        }
                        let v = requantize(self.acc as i32, m, sh).max(0);
                        [v as u8, 0, 0, 0]
                    } else {
                        (self.acc as i32).to_le_bytes()
                    };
                    self.pos = 0;
                    self.stage = 2;
                }
                Ok(None)
            }
            _ => {
                let (off, width) = lay.slot(s);
                if bytes.len() < LEAF_LEN {
                    return Err(FeedError::BadModel);
                }
                self.stage = 3;
                Ok(Some(Patch {
                    at: (off % LEAF_LEN as u64) as usize,
                    width,
                    value: self.value,
                    work: None,
                }))
            }
        }
    }
}

/// Traces of the host's own rows, built by keepers and tests.
#[cfg(not(target_os = "solana"))]
pub mod build {
    use super::*;
    use crate::infer::Mlp;

    /// One party's trace of a row: the memory after its last step, as it computes it.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct Trace<L = Layout> {
        /// The layout (the model's widths, or an encoder's shape and the text's tokens).
        pub lay: L,
        /// The memory after every step.
        pub mem: Vec<u8>,
    }

    impl Trace<Layout> {
        /// The trace of row `x` through `model`.
        pub fn of(model: &Mlp, x: &[i8]) -> Trace {
            Trace {
                lay: layout(model),
                mem: memory(model, x),
            }
        }

        /// The trace of row `x` through the model whose slice string is `model` (PROTOCOL
        /// §8.7: header, then every neuron's record), read as the program reads it; `None` if
        /// the string is not a model's.
        pub fn of_slices(model: &[u8], x: &[i8]) -> Option<Trace> {
            let word = |o: usize| -> Option<i32> {
                Some(i32::from_le_bytes(model.get(o..o + 4)?.try_into().ok()?))
            };
            let layers = usize::try_from(word(0)?).ok()?;
            if !(1..=MAX_MLP_LAYERS as usize).contains(&layers) {
                return None;
            }
            let widths: Vec<u32> = (0..=layers)
                .map(|i| word(4 + 4 * i).and_then(|w| u32::try_from(w).ok()))
                .collect::<Option<_>>()?;
            if widths.iter().any(|&w| w == 0 || w > MAX_MLP_WIDTH)
                || widths[0] as usize != x.len()
                || slices::model_slices_len(&widths) != model.len() as u64
            {
                return None;
            }
            let lay = Layout::new(&widths);
            let mut mem = vec![0u8; lay.len() as usize];
            let mut a: Vec<i8> = x.to_vec();
            for l in 0..layers {
                let (inp, out) = (widths[l] as usize, widths[l + 1]);
                let mut next = Vec::with_capacity(out as usize);
                for o in 0..out {
                    let at = slices::record_offset(&widths, l, o) as usize;
                    let (bias, m, sh) = (word(at)?, word(at + 4)?, word(at + 8)?);
                    let w = model.get(at + 12..at + 12 + inp)?;
                    let acc = bias as i64
                        + w.iter()
                            .zip(&a)
                            .map(|(&w, &x)| (w as i8 as i64) * x as i64)
                            .sum::<i64>();
                    if l + 1 < layers {
                        if m < 1 || !(1..=62).contains(&sh) {
                            return None;
                        }
                        next.push(requantize(acc as i32, m, sh).max(0));
                    } else {
                        let la = lay.logits_at() as usize + 4 * o as usize;
                        mem[la..la + 4].copy_from_slice(&(acc as i32).to_le_bytes());
                    }
                }
                if l + 1 < layers {
                    let at = lay.hidden_at(l) as usize;
                    for (i, &v) in next.iter().enumerate() {
                        mem[at + i] = v as u8;
                    }
                    a = next;
                }
            }
            let c = lay.classes() as usize;
            let la = lay.logits_at() as usize;
            let logits: Vec<i32> = (0..c)
                .map(|o| i32::from_le_bytes(mem[la + 4 * o..la + 4 * o + 4].try_into().unwrap()))
                .collect();
            let class = crate::infer::class_of(&logits);
            mem[la + 4 * c..la + 4 * c + 4].copy_from_slice(&class.to_le_bytes());
            Some(Trace { lay, mem })
        }
    }

    impl<L: Copy + Into<Traced>> Trace<L> {
        /// Its value of word `w` of the row (an `Mlp`'s logit, or the class at C; two
        /// channels of an `Encoder`'s embedding).
        pub fn word(&self, w: u32) -> [u8; 4] {
            let off = self.lay.into().word_at(w) as usize;
            self.mem[off..off + 4].try_into().expect("4 bytes")
        }
    }

    impl<L: Slots> Trace<L> {
        /// The memory after `s` steps.
        pub fn state(&self, s: u64) -> Vec<u8> {
            state(&self.lay, &self.mem, s)
        }

        /// Its root after `s` steps.
        pub fn root_at(&self, s: u64) -> Digest {
            root(&self.lay, &self.state(s))
        }

        /// Leaf `index` of its memory after `s` steps, and its siblings.
        pub fn leaf_at(&self, s: u64, index: u64) -> ([u8; LEAF_LEN], Vec<Digest>) {
            leaf_proof(&self.lay, &self.state(s), index)
        }

        /// A challenger's split of steps `lo .. hi` by this trace: its roots at the inner
        /// points ([`split_points`]).
        pub fn split_roots(&self, lo: u64, hi: u64) -> Vec<Digest> {
            let (k, p) = split_points(lo, hi);
            (1..k).map(|i| self.root_at(p(i))).collect()
        }

        /// A defender's pick by this trace in a split of steps `lo .. hi` whose inner roots
        /// are `roots` and whose end root is `hi_root`: the first segment whose end root is
        /// not its own (the last when all agree).
        pub fn pick(&self, lo: u64, hi: u64, roots: &[Digest], hi_root: &Digest) -> u8 {
            let (k, p) = split_points(lo, hi);
            let end = |i: u64| {
                if i + 1 < k {
                    roots[i as usize]
                } else {
                    *hi_root
                }
            };
            (0..k)
                .find(|&i| end(i) != self.root_at(p(i + 1)))
                .unwrap_or(k - 1) as u8
        }
    }

    /// A piece (a chunk or a leaf) padded to `len` bytes, its siblings after it: what a
    /// dispute's or a game's buffer holds before the instruction that proves it.
    pub fn with_siblings(mut piece: Vec<u8>, len: usize, siblings: &[Digest]) -> Vec<u8> {
        piece.resize(len, 0);
        for s in siblings {
            piece.extend_from_slice(s);
        }
        piece
    }

    /// The model's layout.
    pub fn layout(m: &Mlp) -> Layout {
        let mut widths: Vec<u32> = vec![m.layers[0].inp as u32];
        widths.extend(m.layers.iter().map(|l| l.out as u32));
        Layout::new(&widths)
    }

    /// The memory after the last step of row `x`.
    pub fn memory(m: &Mlp, x: &[i8]) -> Vec<u8> {
        let lay = layout(m);
        let mut mem = vec![0u8; lay.len() as usize];
        let mut a: Vec<i8> = x.to_vec();
        let last = m.layers.len() - 1;
        let mut at = 0usize;
        for (l, layer) in m.layers.iter().enumerate() {
            let acc: Vec<i32> = (0..layer.out)
                .map(|o| {
                    let w = &layer.weight[o * layer.inp..(o + 1) * layer.inp];
                    layer.bias[o]
                        + w.iter()
                            .zip(&a)
                            .map(|(&w, &x)| w as i32 * x as i32)
                            .sum::<i32>()
                })
                .collect();
            if l < last {
                a = (0..layer.out)
                    .map(|o| layer.activation(o, acc[o]))
                    .collect();
                for (i, &v) in a.iter().enumerate() {
                    mem[at + i] = v as u8;
                }
                at += a.len();
            } else {
                let la = lay.logits_at() as usize;
                for (o, v) in acc.iter().enumerate() {
                    mem[la + 4 * o..][..4].copy_from_slice(&v.to_le_bytes());
                }
                let c = crate::infer::class_of(&acc);
                mem[la + 4 * acc.len()..][..4].copy_from_slice(&c.to_le_bytes());
            }
        }
        mem
    }

    /// The memory after step `s` of a trace whose final memory is `mem`: every slot past
    /// step `s` zero.
    pub fn state<L: Slots>(lay: &L, mem: &[u8], s: u64) -> Vec<u8> {
        let mut out = vec![0u8; mem.len()];
        if s > 0 {
            let (off, w) = lay.slot_of(s);
            let end = off as usize + w;
            out[..end].copy_from_slice(&mem[..end]);
        }
        out
    }

    /// Every level of the memory tree, leaves first.
    pub fn tree<L: Slots>(lay: &L, mem: &[u8]) -> Vec<Vec<Digest>> {
        let n = 1usize << lay.tree_depth();
        let mut level: Vec<Digest> = (0..n)
            .map(|i| {
                leaf_hash(
                    mem.get(i * LEAF_LEN..)
                        .map_or(&[][..], |r| &r[..r.len().min(LEAF_LEN)]),
                )
            })
            .collect();
        let mut levels = vec![level.clone()];
        while level.len() > 1 {
            level = level.chunks(2).map(|p| node_hash(&p[0], &p[1])).collect();
            levels.push(level.clone());
        }
        levels
    }

    /// The root of a memory.
    pub fn root<L: Slots>(lay: &L, mem: &[u8]) -> Digest {
        tree(lay, mem).last().expect("a root")[0]
    }

    /// Leaf `index` of a memory (1 024 bytes) and its siblings, bottom-up.
    pub fn leaf_proof<L: Slots>(lay: &L, mem: &[u8], index: u64) -> ([u8; LEAF_LEN], Vec<Digest>) {
        let levels = tree(lay, mem);
        let mut leaf = [0u8; LEAF_LEN];
        let at = index as usize * LEAF_LEN;
        if at < mem.len() {
            let n = (mem.len() - at).min(LEAF_LEN);
            leaf[..n].copy_from_slice(&mem[at..at + n]);
        }
        let path = levels[..levels.len() - 1]
            .iter()
            .enumerate()
            .map(|(l, level)| level[((index >> l) ^ 1) as usize])
            .collect();
        (leaf, path)
    }
}

#[cfg(test)]
mod tests {
    use super::{build::*, *};
    use crate::{infer::Mlp, job::JobSpec, slices::build as sb};

    fn lcg(seed: &mut u64) -> u64 {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        *seed >> 33
    }

    fn model(widths: &[usize], seed: &mut u64) -> Mlp {
        crate::infer::random_mlp(widths, lcg(seed))
    }

    fn job_for(m: &Mlp, rows: u32, model_len: u64) -> JobSpec {
        let f = m.layers[0].inp as u32;
        let c = m.layers.last().unwrap().out as u32;
        let mut job = JobSpec::mlp(rows, f, c, m.work_per_row(), 4, [7; 32]);
        job.slices_len = model_len;
        job
    }

    /// Replays step `s` of `row` as the program would, from the memory before it (`pre`): the
    /// new root.
    fn replay(
        job: &JobSpec,
        lay: &Layout,
        model: &[u8],
        batch: &[u8],
        pre: &[u8],
        row: u32,
        s: u64,
    ) -> Result<Digest, FeedError> {
        let mut r = Replay::default();
        let mut work = vec![0u8; WORK_LEN];
        for _ in 0..100 {
            let (src, i) = r.next(job, lay, row, s).ok_or(FeedError::Complete)?;
            r = Replay::decode(&r.encode());
            let bytes: Vec<u8> = match src {
                Source::Model => slices::chunk(model, i).to_vec(),
                Source::Batch => slices::chunk(batch, i).to_vec(),
                Source::Trace => leaf_proof(lay, pre, i).0.to_vec(),
                Source::Result => unreachable!("an Mlp reads no result"),
            };
            if let Some(patch) = r.take(job, lay, row, s, src, i, &bytes, &mut work)? {
                let (mut leaf, path) = leaf_proof(lay, pre, i);
                assert_eq!(fold(i, leaf_hash(&leaf), &path), root(lay, pre));
                patch.apply(&mut leaf, &work);
                return Ok(fold(i, leaf_hash(&leaf), &path));
            }
        }
        panic!("a replay ends")
    }

    #[test]
    fn every_step_of_a_row_replays_to_the_next_root_and_the_memory_is_the_reference() {
        let mut seed = 11;
        for widths in [
            vec![3usize, 1500, 7, 5],
            vec![700, 4],
            vec![9, 2, 3, 2, 3],
            vec![1100, 1030, 3],
        ] {
            let m = model(&widths, &mut seed);
            let ms = sb::model(&m);
            let rows = 3u32;
            let f = widths[0];
            let x: Vec<i8> = (0..rows as usize * f)
                .map(|_| lcg(&mut seed) as i8)
                .collect();
            let batch = sb::batch(&x);
            let job = job_for(&m, rows, ms.len() as u64);
            let lay = read_header(&job, ms.len() as u64, slices::chunk(&ms, 0)).unwrap();
            assert_eq!(lay, layout(&m));
            let row = 2u32;
            let xr = &x[row as usize * f..][..f];
            let mem = memory(&m, xr);
            // the logits and the class are the reference's output row
            assert_eq!(&mem[lay.logits_at() as usize..], &m.row(xr)[..]);
            assert_eq!(state(&lay, &mem, 0), vec![0; mem.len()]);
            assert_eq!(root(&lay, &state(&lay, &mem, 0)), zero_root(lay.depth()));
            assert_eq!(state(&lay, &mem, lay.steps()), mem);
            let steps: Vec<u64> = if lay.steps() < 40 {
                (1..=lay.steps()).collect()
            } else {
                vec![
                    1,
                    2,
                    1500,
                    1501,
                    1502,
                    lay.steps() - 1,
                    lay.steps(),
                    lay.hidden() + 1,
                ]
            };
            for s in steps.into_iter().filter(|&s| s <= lay.steps()) {
                let pre = state(&lay, &mem, s - 1);
                let post = replay(&job, &lay, &ms, &batch, &pre, row, s).unwrap();
                assert_eq!(
                    post,
                    root(&lay, &state(&lay, &mem, s)),
                    "{widths:?} step {s}"
                );
            }
            // a wrong value before a step is what the replay reads: it follows the memory
            let s = lay.steps();
            let mut bad = state(&lay, &mem, s - 1);
            bad[lay.logits_at() as usize] ^= 0x40;
            let post = replay(&job, &lay, &ms, &batch, &bad, row, s).unwrap();
            assert_ne!(post, root(&lay, &state(&lay, &mem, s)));
        }
    }

    #[test]
    fn a_trace_read_from_the_models_slices_is_the_reference() {
        let mut seed = 9;
        for widths in [vec![3usize, 1500, 7, 5], vec![700, 4], vec![9, 2, 3, 2, 3]] {
            let m = model(&widths, &mut seed);
            let x: Vec<i8> = (0..widths[0]).map(|_| lcg(&mut seed) as i8).collect();
            let t = Trace::of_slices(&sb::model(&m), &x).expect("a model's slices");
            assert_eq!(t, Trace::of(&m, &x));
        }
        let m = model(&[4, 5, 2], &mut seed);
        assert_eq!(
            Trace::of_slices(&sb::model(&m), &[1, 2, 3]),
            None,
            "a row of another width"
        );
        assert_eq!(Trace::of_slices(&sb::model(&m)[..40], &[1, 2, 3, 4]), None);
    }

    #[test]
    fn pieces_out_of_order_and_headers_that_do_not_fit_are_refused() {
        let mut seed = 3;
        let m = model(&[5, 6, 3], &mut seed);
        let ms = sb::model(&m);
        let job = job_for(&m, 2, ms.len() as u64);
        let lay = layout(&m);
        let mut r = Replay::default();
        let mut work = vec![0u8; 4096];
        assert_eq!(
            r.take(&job, &lay, 0, 1, Source::Trace, 0, &[0; 1024], &mut work),
            Err(FeedError::WrongChunk)
        );
        assert_eq!(r.next(&job, &lay, 0, 99), None);
        // a header whose length is not the declared one
        assert_eq!(
            read_header(&job, ms.len() as u64 + 1, slices::chunk(&ms, 0)),
            Err(FeedError::BadModel)
        );
        let mut other = job;
        other.work_per_row += 1;
        assert_eq!(
            read_header(&other, ms.len() as u64, slices::chunk(&ms, 0)),
            Err(FeedError::BadModel)
        );
    }

    #[test]
    fn splits_narrow_any_range_to_one_step_in_the_levels_counted() {
        assert_eq!(levels(1), 0);
        assert_eq!(levels(16), 1);
        assert_eq!(levels(17), 2);
        assert_eq!(levels(7 * 4096 + 4097), 4);
        for n in [2u64, 3, 15, 16, 17, 255, 256, 257, 32_773] {
            // the defender always picks the last segment (the longest walk)
            let (mut lo, mut hi, mut turns) = (0u64, n, 0);
            while hi - lo > 1 {
                let (k, p) = split_points(lo, hi);
                assert!(k >= 2 && p(0) == lo && p(k) == hi);
                assert!((1..=k).all(|i| p(i) > p(i - 1)), "segments are not empty");
                (lo, hi) = (p(k - 1), p(k));
                turns += 1;
            }
            assert!(turns <= levels(n), "{n}: {turns} turns");
        }
    }

    #[test]
    fn a_game_fits_its_window_or_is_not_played() {
        let mut job = JobSpec::mlp(100, 64, 10, 64 * 256 + 256 * 128 + 1280, 8, [1; 32]);
        assert_eq!(clock(&job, 2_400), None, "no slices declared");
        job.slices_len = 60_000;
        assert_eq!(step_pieces(&job), 12);
        let c = clock(&job, 2_400).expect("a game fits 2 400 slots");
        assert_eq!(c.levels, 4);
        assert_eq!(c.turn, 181, "PROTOCOL §8.10's figure");
        assert_eq!(c.step, 3 * 12 * 2);
        // the claim, then two turns to join, two a split, a turn of margin for the replay
        // and its slots, the resolution
        assert!(MIN_TURN <= c.claim_by);
        assert_eq!(c.turns(), 12);
        assert_eq!(c.replay(), 181 + 72);
        assert_eq!(c.claim_by + c.after_claim(), 2_400);
        assert_eq!(clock(&job, 2_021), None, "turns under 150 slots");
        assert!(clock(&job, 2_022).is_some());
        let wide = JobSpec::mlp(100, 4096, 4096, 4096 * 4096, 8, [1; 32]);
        assert_eq!(clock(&wide, 10_000), None, "no slices declared");
    }

    #[test]
    fn zero_root_and_fold_agree_with_the_tree() {
        let lay = Layout::new(&[4, 3000, 2]);
        let mem = vec![0u8; lay.len() as usize];
        assert_eq!(root(&lay, &mem), zero_root(lay.depth()));
        let mut m2 = mem.clone();
        m2[2100] = 9;
        let (leaf, path) = leaf_proof(&lay, &m2, 2);
        assert_eq!(path.len() as u32, lay.depth());
        assert_eq!(fold(2, leaf_hash(&leaf), &path), root(&lay, &m2));
        assert_ne!(fold(1, leaf_hash(&leaf), &path), root(&lay, &m2));
    }
}

//! The trace of one `Encoder` text (PROTOCOL §8.10): every intermediate value of the text's
//! embedding in a fixed memory layout, and the replay of one step, so that a game narrows a
//! disputed embedding to one operation on one token that the program recomputes.
//!
//! **Layout** (T the text's tokens, H the width, F the feed-forward's, `n_h` heads of width
//! `d_h`; every region starts at a leaf, so no slot straddles two):
//!
//! | region | slots, in step order | a step |
//! |---|---|---|
//! | `Emb` | `r[p][c]`, LE `i32` | word and position embeddings into the residual stream |
//! | `Y0` | row p: H LE `i16` (a row at its stride, a power of two ≥ 2H) | LayerNorm of `r[p]` |
//! | per block: `Q` | `q[p][c]`, int8 | a dense output |
//! | `K` | `k[h][p][d]`, int8 (by head) | a dense output |
//! | `V` | `v[c][p]`, int8 (by channel) | a dense output |
//! | `P` | row (h, i): T LE `u16` Q15 probabilities (stride a power of two ≥ 2T) | scores, exp table, normalisation |
//! | `C` | `ctx[i][c]`, int8 | Σ_j p_j · v[c][j], requantized |
//! | `R1` | `r[i][c]`, LE `i32` | the attention output plus the first residual |
//! | `N1` | row i, as `Y0` | LayerNorm |
//! | `G` | `g[i][o]`, LE `i16` | the feed-forward-in output through the GELU table |
//! | `R2` | `r[i][c]`, LE `i32` | the feed-forward-out output plus the second residual |

//! | `N2` | row i, as `Y0` | LayerNorm: the block's output |
//! | `Pool` | (p, g): the running sums of channels `256g …` over tokens `0 … p`, LE `i32`, a leaf each | |
//! | `Out` | group g: the embedding's channels `256g …`, LE `i16` | `⌊sum / T⌋` |//!
//! A residual step (`R1`, `R2`) reads its record first (the weights kept in the work area),
//! then the input row (streamed: a feed-forward row of int16 values is `2F` bytes, more than
//! the work area), then the residual's input value.
//!
//! `Out` is the text's result row. Every step reads whole fields (each at a multiple of its
//! width, so none straddles a 1 KiB piece): from the memory before the step (leaves, proven
//! against the agreed root), the model's slice string and the texts' ids (chunks, proven
//! against the manifest's roots); then the slot's leaf.

use super::{Patch, Slots, Source, LEAF_LEN, REPLAY_LEN};
use crate::{
    feed::FeedError,
    job::{JobKind, JobSpec, MAX_ENCODER_BLOCKS, MAX_ENCODER_FFN},
    merkle::CHUNK_LEN,
    slices::encoder::{ids_stride, Part, Shape, EXP_LEN, HEAD, RES_HEAD},
};

/// Every term added into the residual stream is clamped to `±2^24`.
pub const RES_CLAMP: i64 = 1 << 24;
const Y_MAX: i64 = 32_767;
const Z_FRAC: u32 = 12;
const P_FRAC: u32 = 15;
const GELU_HALF: i64 = 512;
/// Channels one pooling slot sums.
pub const GROUP: u32 = 256;
/// Where an attention step keeps its scores in the work area.
const SCORES_AT: usize = 512;
/// An attention step's mark on a score whose exp is not yet read.
const PENDING: u32 = 1 << 31;
/// Deepest memory a game is played over: 64 MiB.
pub const MAX_MEMORY: u64 = (LEAF_LEN as u64) << super::MAX_DEPTH;

/// A region of a text's memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Region {
    /// The embeddings' residual stream.
    Emb,
    /// The embeddings' LayerNorm.
    Y0,
    /// A region of block b (its kind, 0 … 9: Q, K, V, P, C, R1, N1, G, R2, N2).
    Block(u32, u8),
    /// The running sums.
    Pool,
    /// The embedding.
    Out,
}

const Q: u8 = 0;
const K: u8 = 1;
const V: u8 = 2;
const P: u8 = 3;
const C: u8 = 4;
const R1: u8 = 5;
const N1: u8 = 6;
const G: u8 = 7;
const R2: u8 = 8;
const N2: u8 = 9;
const KINDS: u8 = 10;

/// What a step computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// `r[p][c]` of the embeddings.
    Emb {
        /// Token.
        p: u32,
        /// Channel.
        c: u32,
    },
    /// LayerNorm of row p of a residual stream: `block` `None` the embeddings', else the
    /// block's first (`second` false) or second.
    Norm {
        /// The block, or `None` for the embeddings.
        block: Option<u32>,
        /// The second LayerNorm of the block.
        second: bool,
        /// Token.
        p: u32,
    },
    /// Output c of token p of the query, key or value layer (`part` 0, 1, 2) of a block.
    Dense {
        /// Block.
        b: u32,
        /// 0 query, 1 key, 2 value.
        part: u8,
        /// Token.
        p: u32,
        /// Output channel.
        c: u32,
    },
    /// The probabilities of query i in head h.
    Attn {
        /// Block.
        b: u32,
        /// Head.
        h: u32,
        /// Query token.
        i: u32,
    },
    /// `ctx[i][c]`.
    Ctx {
        /// Block.
        b: u32,
        /// Token.
        i: u32,
        /// Channel.
        c: u32,
    },
    /// Channel c of token i of a residual sum: the attention output's (`second` false) or the
    /// feed-forward's.
    Res {
        /// Block.
        b: u32,
        /// The feed-forward's.
        second: bool,
        /// Token.
        i: u32,
        /// Channel.
        c: u32,
    },
    /// Output o of token i of the feed-forward-in layer, through the GELU table.
    Gelu {
        /// Block.
        b: u32,
        /// Token.
        i: u32,
        /// Output.
        o: u32,
    },
    /// The running sums of group g to token p.
    Pool {
        /// Token.
        p: u32,
        /// Group of 256 channels.
        g: u32,
    },
    /// The embedding's group g.
    Out {
        /// Group of 256 channels.
        g: u32,
    },
}

/// The memory layout of one text's trace: the model's shape and the text's tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// The model's shape.
    pub shape: Shape,
    /// Tokens T of the text (1 ..= positions).
    pub t: u32,
}

fn leaf_up(n: u64) -> u64 {
    n.next_multiple_of(LEAF_LEN as u64)
}

impl Layout {
    fn h(&self) -> u64 {
        self.shape.hidden as u64
    }

    fn dh(&self) -> u64 {
        self.shape.head_width() as u64
    }

    /// Bytes from one LayerNorm row to the next: `2H` rounded up to a power of two.
    pub fn row_stride(&self) -> u64 {
        (2 * self.h()).next_power_of_two()
    }

    /// Bytes from one probability row to the next: `2T` rounded up to a power of two.
    pub fn prob_stride(&self) -> u64 {
        (2 * self.t as u64).next_power_of_two()
    }

    /// Groups of [`GROUP`] channels.
    pub fn groups(&self) -> u32 {
        self.shape.hidden.div_ceil(GROUP)
    }

    /// Channels of group g.
    pub fn group_len(&self, g: u32) -> u32 {
        GROUP.min(self.shape.hidden - GROUP * g)
    }

    /// (bytes, steps) of a block region of kind `k`.
    fn block_region(&self, k: u8) -> (u64, u64) {
        let (t, h) = (self.t as u64, self.h());
        let f = self.shape.ffn as u64;
        match k {
            Q | K | V | C => (t * h, t * h),
            P => (
                self.shape.heads as u64 * t * self.prob_stride(),
                self.shape.heads as u64 * t,
            ),
            R1 | R2 => (4 * t * h, t * h),
            N1 | N2 => (t * self.row_stride(), t),
            _ => (2 * t * f, t * f),
        }
    }

    fn block_totals(&self) -> (u64, u64) {
        (0..KINDS).fold((0, 0), |(b, s), k| {
            let (rb, rs) = self.block_region(k);
            (b + leaf_up(rb), s + rs)
        })
    }

    /// (bytes, steps) of the regions before the blocks.
    fn head_totals(&self) -> (u64, u64) {
        let (t, h) = (self.t as u64, self.h());
        (
            leaf_up(4 * t * h) + leaf_up(t * self.row_stride()),
            t * h + t,
        )
    }

    /// Where a region begins.
    pub fn region_at(&self, r: Region) -> u64 {
        let (t, h) = (self.t as u64, self.h());
        let (head, _) = self.head_totals();
        let (block, _) = self.block_totals();
        let blocks = self.shape.blocks as u64;
        match r {
            Region::Emb => 0,
            Region::Y0 => leaf_up(4 * t * h),
            Region::Block(b, k) => {
                head + b as u64 * block
                    + (0..k).map(|j| leaf_up(self.block_region(j).0)).sum::<u64>()
            }
            Region::Pool => head + blocks * block,
            Region::Out => head + blocks * block + t * self.groups() as u64 * LEAF_LEN as u64,
        }
    }

    /// Bytes of the memory.
    pub fn len(&self) -> u64 {
        self.region_at(Region::Out) + leaf_up(2 * self.h())
    }

    /// Never empty; for clippy.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Steps of the trace.
    pub fn steps(&self) -> u64 {
        let (_, hs) = self.head_totals();
        let (_, bs) = self.block_totals();
        let g = self.groups() as u64;
        hs + self.shape.blocks as u64 * bs + self.t as u64 * g + g
    }

    /// What step `s` (1 ..= [`steps`](Self::steps)) computes; `None` outside.
    pub fn step(&self, s: u64) -> Option<Step> {
        if s == 0 || s > self.steps() {
            return None;
        }
        let (t, h) = (self.t as u64, self.h());
        let mut j = s - 1;
        if j < t * h {
            return Some(Step::Emb {
                p: (j / h) as u32,
                c: (j % h) as u32,
            });
        }
        j -= t * h;
        if j < t {
            return Some(Step::Norm {
                block: None,
                second: false,
                p: j as u32,
            });
        }
        j -= t;
        let (_, bs) = self.block_totals();
        let b = j / bs;
        if b < self.shape.blocks as u64 {
            let mut j = j % bs;
            let b = b as u32;
            for k in 0..KINDS {
                let (_, n) = self.block_region(k);
                if j < n {
                    return Some(self.block_step(b, k, j));
                }
                j -= n;
            }
            unreachable!("a block's steps are its regions'");
        }
        j -= self.shape.blocks as u64 * bs;
        let g = self.groups() as u64;
        Some(if j < t * g {
            Step::Pool {
                p: (j / g) as u32,
                g: (j % g) as u32,
            }
        } else {
            Step::Out {
                g: (j - t * g) as u32,
            }
        })
    }

    fn block_step(&self, b: u32, k: u8, j: u64) -> Step {
        let (t, h, dh, f) = (self.t as u64, self.h(), self.dh(), self.shape.ffn as u64);
        let (a, z) = match k {
            Q | C | R1 | R2 => ((j / h) as u32, (j % h) as u32),
            K => {
                // [h][p][d]: output channel h·d_h + d of token p
                let (hd, p, d) = (j / (t * dh), (j / dh) % t, j % dh);
                (p as u32, (hd * dh + d) as u32)
            }
            V => ((j % t) as u32, (j / t) as u32),
            P => ((j % t) as u32, (j / t) as u32),
            G => ((j / f) as u32, (j % f) as u32),
            _ => (j as u32, 0),
        };
        match k {
            Q | K | V => Step::Dense {
                b,
                part: k,
                p: a,
                c: z,
            },
            P => Step::Attn { b, h: z, i: a },
            C => Step::Ctx { b, i: a, c: z },
            R1 | R2 => Step::Res {
                b,
                second: k == R2,
                i: a,
                c: z,
            },
            N1 | N2 => Step::Norm {
                block: Some(b),
                second: k == N2,
                p: a,
            },
            _ => Step::Gelu { b, i: a, o: z },
        }
    }

    /// Where a LayerNorm row begins: of the embeddings (`None`) or a block's.
    fn norm_row(&self, block: Option<u32>, second: bool, p: u32) -> u64 {
        let r = match block {
            None => Region::Y0,
            Some(b) => Region::Block(b, if second { N2 } else { N1 }),
        };
        self.region_at(r) + p as u64 * self.row_stride()
    }

    /// The row block b reads: the embeddings' LayerNorm or the previous block's output.
    fn input_row(&self, b: u32, p: u32) -> u64 {
        if b == 0 {
            self.norm_row(None, false, p)
        } else {
            self.norm_row(Some(b - 1), true, p)
        }
    }

    /// Offset and width of step `s`'s slot.
    pub fn slot(&self, s: u64) -> (u64, usize) {
        let (t, h, dh) = (self.t as u64, self.h(), self.dh());
        let Some(step) = self.step(s) else {
            return (0, 0);
        };
        match step {
            Step::Emb { p, c } => (4 * (p as u64 * h + c as u64), 4),
            Step::Norm { block, second, p } => (self.norm_row(block, second, p), 2 * h as usize),
            Step::Dense { b, part, p, c } => {
                let (p, c) = (p as u64, c as u64);
                let j = match part {
                    Q => p * h + c,
                    K => (c / dh) * t * dh + p * dh + c % dh,
                    _ => c * t + p,
                };
                (self.region_at(Region::Block(b, part)) + j, 1)
            }
            Step::Attn { b, h: hd, i } => (
                self.region_at(Region::Block(b, P))
                    + (hd as u64 * t + i as u64) * self.prob_stride(),
                2 * t as usize,
            ),
            Step::Ctx { b, i, c } => (
                self.region_at(Region::Block(b, C)) + i as u64 * h + c as u64,
                1,
            ),
            Step::Res { b, second, i, c } => (
                self.region_at(Region::Block(b, if second { R2 } else { R1 }))
                    + 4 * (i as u64 * h + c as u64),
                4,
            ),
            Step::Gelu { b, i, o } => (
                self.region_at(Region::Block(b, G))
                    + 2 * (i as u64 * self.shape.ffn as u64 + o as u64),
                2,
            ),
            Step::Pool { p, g } => (
                self.region_at(Region::Pool)
                    + (p as u64 * self.groups() as u64 + g as u64) * LEAF_LEN as u64,
                4 * self.group_len(g) as usize,
            ),
            Step::Out { g } => (
                self.region_at(Region::Out) + 2 * (GROUP * g) as u64,
                2 * self.group_len(g) as usize,
            ),
        }
    }

    /// The step that writes word `w` of the text's embedding (channels 2w and 2w + 1).
    pub fn word_step(&self, w: u32) -> u64 {
        self.steps() - self.groups() as u64 + (2 * w / GROUP).min(self.groups() - 1) as u64 + 1
    }

    /// Where word `w` of the embedding lies in the memory.
    pub fn word_at(&self, w: u32) -> u64 {
        self.region_at(Region::Out) + 4 * w as u64
    }
}

/// Bytes of an encoded [`Layout`].
pub const LAYOUT_LEN: usize = 28;

impl Layout {
    /// Its bytes: the shape's six words, then T (0 while the text's count is not read).
    pub fn encode(&self) -> [u8; LAYOUT_LEN] {
        let mut b = [0u8; LAYOUT_LEN];
        let s = &self.shape;
        let words = [
            s.hidden,
            s.heads,
            s.ffn,
            s.blocks,
            s.vocab,
            s.positions,
            self.t,
        ];
        for (i, w) in words.iter().enumerate() {
            b[4 * i..4 * i + 4].copy_from_slice(&w.to_le_bytes());
        }
        b
    }

    /// [`Layout::encode`] read back (T may be 0).
    pub fn decode(b: &[u8]) -> Option<Layout> {
        let w = |i: usize| -> Option<u32> {
            Some(u32::from_le_bytes(
                b.get(4 * i..4 * i + 4)?.try_into().ok()?,
            ))
        };
        let shape = Shape {
            hidden: w(0)?,
            heads: w(1)?,
            ffn: w(2)?,
            blocks: w(3)?,
            vocab: w(4)?,
            positions: w(5)?,
        };
        (shape.hidden > 0).then_some(Layout { shape, t: w(6)? })
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

/// Reads a text's token count from its ids (the row's first word) and checks it: `1 ..= L`
/// for the job's limit L, and within the model's positions.
pub fn read_count(job: &JobSpec, shape: &Shape, word: u32) -> Result<u32, FeedError> {
    if word == 0 || word > job.dims[1] || word > shape.positions {
        return Err(FeedError::BadValue);
    }
    Ok(word)
}

/// Where text `row`'s count lies in the ids' slice string.
pub fn count_at(job: &JobSpec, row: u32) -> u64 {
    row as u64 * ids_stride(job.dims[1])
}

/// The most steps a text's trace of this job can have, bounded from the job alone (its width,
/// limit and work per token: blocks · (4H² + 2HF) ≤ work), at most `MAX_MEMORY` (a step
/// writes at least a byte of a memory [`memory_bound`] keeps within it).
pub fn steps_bound(job: &JobSpec) -> u64 {
    let (l, h) = (job.dims[1] as u64, (job.dims[2] as u64).max(1));
    let blocks = (job.work_per_row / (4 * h * h)).min(MAX_ENCODER_BLOCKS);
    let bf = (job.work_per_row / (2 * h)).min(MAX_ENCODER_BLOCKS * MAX_ENCODER_FFN);
    // per token: the embeddings, a block's 6H + heads (≤ H) + 3, the feed-forward, pooling
    let per_token = h + 1 + blocks * (7 * h + 3) + bf + 2;
    (l * per_token + 2).min(MAX_MEMORY)
}

/// The most bytes a text's trace of this job can take, bounded from the job alone. A block's
/// regions for a text of L tokens take `A + heads · L · ps + 2F · L` bytes (`A = 12LH + 2L · rs`
/// and a leaf of rounding a region; `rs`, `ps` the row strides) and cost
/// `C + heads · 64L + F · (2H + 16)` of the job's work per token (`C = 4H² + 8LH + 96H`), so the
/// blocks' memory is at most the work times the largest of `A / C`, `ps / 64`, `2L / (2H + 16)`;
/// then the embeddings' regions, the sums and the embedding.
pub fn memory_bound(job: &JobSpec) -> u64 {
    let (l, h) = (job.dims[1] as u64, (job.dims[2] as u64).max(1));
    let leaf = LEAF_LEN as u64;
    let (rs, ps) = ((2 * h).next_power_of_two(), (2 * l).next_power_of_two());
    let at = |num: u64, den: u64| {
        ((job.work_per_row as u128 * num as u128).div_ceil(den.max(1) as u128))
            .min(u64::MAX as u128) as u64
    };
    let blocks = at(
        12 * l * h + 2 * l * rs + 10 * leaf,
        4 * h * h + 8 * l * h + 96 * h,
    )
    .max(at(ps, 64))
    .max(at(2 * l, 2 * h + 16));
    let groups = h.div_ceil(GROUP as u64);
    (4 * l * h + leaf) + (l * rs + leaf) + blocks.saturating_add(l * groups * leaf + 2 * h + leaf)
}

/// Pieces one step of this job's traces reads at most, the slot's leaf included: an attention
/// step's (its query, the head's keys `T · d_h ≤ L · H` bytes, the scale, the exp table), or a
/// feed-forward-out step's (a record, a row of up to 4 096 int16 values, a residual), or a
/// LayerNorm's (a row of `4H` bytes and a record of `8H + 4`).
pub fn step_pieces(job: &JobSpec) -> u64 {
    let k = CHUNK_LEN as u64;
    let (l, h) = (job.dims[1] as u64, job.dims[2] as u64);
    let span = |n: u64| n.div_ceil(k) + 1;
    let attn = span(h) + span(l * h) + span(8) + span(4 * EXP_LEN);
    let res = span(RES_HEAD + MAX_ENCODER_FFN) + span(2 * MAX_ENCODER_FFN) + 1;
    let norm = span(4 * h) + span(4 + 8 * h);
    attn.max(res).max(norm) + 1
}

/// Whether this job's element is refereed by a game over an encoder trace: an `Encoder` whose
/// manifest names slices, of an even width (its embeddings' words are the elements), whose
/// texts' traces fit `MAX_MEMORY` whatever its model ([`memory_bound`]).
pub fn gameable(job: &JobSpec) -> bool {
    job.kind == JobKind::Encoder
        && job.slices_len > 0
        && job.dims[2].is_multiple_of(2)
        && memory_bound(job) <= MAX_MEMORY
}

// What the layout and the replay's work area assume of the job's bounds: a LayerNorm row (2H
// bytes) and a probability row (2T) each fit a leaf; a LayerNorm's replay keeps 6H bytes, an
// attention's a query below its scores and 4T bytes of them, a feed-forward-out's F weights
// (its row is streamed).
const _: () = {
    use crate::job::{MAX_ENCODER_HIDDEN, MAX_ENCODER_TOKENS};
    assert!(2 * MAX_ENCODER_HIDDEN as usize <= LEAF_LEN);
    assert!(2 * MAX_ENCODER_TOKENS as usize <= LEAF_LEN);
    assert!(6 * MAX_ENCODER_HIDDEN as usize <= super::WORK_LEN);
    assert!(MAX_ENCODER_HIDDEN as usize <= SCORES_AT);
    assert!(SCORES_AT + 4 * MAX_ENCODER_TOKENS as usize <= super::WORK_LEN);
    assert!(MAX_ENCODER_FFN as usize <= super::WORK_LEN);
    assert!(MAX_ENCODER_HIDDEN <= 2 * GROUP);
};

/// The replay of one step of a text's trace (PROTOCOL §8.10): its reads in order, whole fields
/// at a time, then the slot's leaf, which it returns with the value written. Resumable:
/// [`REPLAY_LEN`] bytes kept between transactions and a work area of [`WORK_LEN`] bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Replay {
    /// The read being taken; past the last, the slot's leaf; 0xFF complete.
    pub stage: u8,
    /// Bytes of the read taken.
    pub pos: u32,
    /// The text's token id (an embedding), the GELU index, the largest score.
    pub x: i64,
    /// The accumulator (a word embedding's value).
    pub acc: i64,
    /// A LayerNorm's mean, a residual's input, a position embedding's value.
    pub y: i64,
    /// A LayerNorm's σ, the probabilities' sum, a dense record's accumulator bound
    /// `|bias| + operand · Σ|w|`.
    pub z: i64,
    /// A record's multiplier and shift, a LayerNorm's scale.
    pub m: i32,
    #[allow(missing_docs)]
    pub s: i32,
    /// A residual record's multiplier and shift, a LayerNorm's shift.
    pub m2: i32,
    #[allow(missing_docs)]
    pub s2: i32,
    /// A value of at most 4 bytes, once computed.
    pub value: [u8; 4],
}

const DONE: u8 = 0xFF;

fn w32(b: &[u8], o: usize) -> i32 {
    i32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}

fn w16(b: &[u8], o: usize) -> i64 {
    i16::from_le_bytes([b[o], b[o + 1]]) as i64
}

/// `clamp(⌊(acc · m + 2^(s−1)) / 2^s⌋, lo, hi)`, refusing a multiplier or shift outside the
/// protocol's (`1 ..= 2^31 − 1`, `1 ..= 62`) or an operand past `2^31`.
fn rq(acc: i64, m: i32, s: i32, lo: i64, hi: i64) -> Result<i64, FeedError> {
    if m < 1 || !(1..=62).contains(&s) || acc.abs() > 1 << 31 {
        return Err(FeedError::BadModel);
    }
    Ok(((acc * m as i64 + (1i64 << (s - 1))) >> s).clamp(lo, hi))
}

/// A dense record's accumulator bound, `|bias| + operand · Σ_j |W[o][j]| ≤ 2^31 − 1`
/// ([`crate::encoder::acc_fits`]), once its record is read.
fn acc_bound(z: i64) -> Result<(), FeedError> {
    if z > i32::MAX as i64 {
        return Err(FeedError::BadModel);
    }
    Ok(())
}

/// Largest magnitude of a feed-forward-out input: an int16 GELU entry.
const GELU_MAX: i64 = 1 << 15;

impl Replay {
    /// The state's bytes.
    pub fn encode(&self) -> [u8; REPLAY_LEN] {
        let mut b = [0u8; REPLAY_LEN];
        b[0] = self.stage;
        b[4..8].copy_from_slice(&self.pos.to_le_bytes());
        b[8..16].copy_from_slice(&self.x.to_le_bytes());
        b[16..24].copy_from_slice(&self.acc.to_le_bytes());
        b[24..32].copy_from_slice(&self.y.to_le_bytes());
        b[32..40].copy_from_slice(&self.z.to_le_bytes());
        for (i, v) in [self.m, self.s, self.m2, self.s2].iter().enumerate() {
            b[40 + 4 * i..44 + 4 * i].copy_from_slice(&v.to_le_bytes());
        }
        b[56..60].copy_from_slice(&self.value);
        b
    }

    /// [`Replay::encode`] read back.
    pub fn decode(b: &[u8; REPLAY_LEN]) -> Replay {
        let q = |o: usize| i64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
        Replay {
            stage: b[0],
            pos: w32(b, 4) as u32,
            x: q(8),
            acc: q(16),
            y: q(24),
            z: q(32),
            m: w32(b, 40),
            s: w32(b, 44),
            m2: w32(b, 48),
            s2: w32(b, 52),
            value: b[56..60].try_into().expect("4 bytes"),
        }
    }

    /// Read `k` of step `step` of text `row`: (source, first byte, length); `None` past the
    /// last. A read of length 0 is skipped.
    fn read(
        &self,
        job: &JobSpec,
        lay: &Layout,
        row: u32,
        step: Step,
        k: u8,
    ) -> Option<(Source, u64, u64)> {
        let sh = &lay.shape;
        let (h, t, dh) = (lay.h(), lay.t as u64, lay.dh());
        let model = |at: u64, len: u64| Some((Source::Model, at, len));
        let trace = |at: u64, len: u64| Some((Source::Trace, at, len));
        match (step, k) {
            (Step::Emb { p, .. }, 0) => {
                Some((Source::Batch, count_at(job, row) + 4 + 4 * p as u64, 4))
            }
            (Step::Emb { c, .. }, 1) => model(sh.word_at() + self.x as u64 * h + c as u64, 1),
            (Step::Emb { p, c }, 2) => model(sh.pos_at() + p as u64 * h + c as u64, 1),
            (Step::Emb { c, .. }, 3) => model(sh.emb_rq_at() + 16 * c as u64, 16),
            (Step::Norm { block, second, p }, 0) => {
                let r = match block {
                    None => Region::Emb,
                    Some(b) => Region::Block(b, if second { R2 } else { R1 }),
                };
                trace(lay.region_at(r) + 4 * p as u64 * h, 4 * h)
            }
            (Step::Norm { block, second, .. }, 1) => {
                let at = match block {
                    None => sh.ln0_at(),
                    Some(b) => sh.part_at(b, if second { Part::Ln2 } else { Part::Ln1 }),
                };
                model(at, sh.norm_len())
            }
            (Step::Dense { b, p, .. }, 0) => trace(lay.input_row(b, p), 2 * h),
            (Step::Dense { b, part, c, .. }, 1) => {
                let part = [Part::Q, Part::K, Part::V][part as usize];
                model(sh.record_at(b, part, c), HEAD + h)
            }
            (Step::Attn { b, h: hd, i }, 0) => trace(
                lay.region_at(Region::Block(b, Q)) + i as u64 * h + hd as u64 * dh,
                dh,
            ),
            (Step::Attn { b, h: hd, .. }, 1) => trace(
                lay.region_at(Region::Block(b, K)) + hd as u64 * t * dh,
                t * dh,
            ),
            (Step::Attn { b, .. }, 2) => model(sh.part_at(b, Part::Att), 8),
            (Step::Attn { .. }, 3) => model(sh.exp_at(), 4 * EXP_LEN),
            (Step::Ctx { b, i, c }, 0) => trace(
                lay.region_at(Region::Block(b, P))
                    + ((c as u64 / dh) * t + i as u64) * lay.prob_stride(),
                2 * t,
            ),
            (Step::Ctx { b, c, .. }, 1) => {
                trace(lay.region_at(Region::Block(b, V)) + c as u64 * t, t)
            }
            (Step::Ctx { b, c, .. }, 2) => model(sh.part_at(b, Part::Ctx) + 8 * c as u64, 8),
            (Step::Res { b, second, c, .. }, 0) => {
                let (part, inp) = if second {
                    (Part::F2, sh.ffn as u64)
                } else {
                    (Part::O, h)
                };
                model(sh.record_at(b, part, c), RES_HEAD + inp)
            }
            (
                Step::Res {
                    b,
                    second: false,
                    i,
                    ..
                },
                1,
            ) => trace(lay.region_at(Region::Block(b, C)) + i as u64 * h, h),
            (
                Step::Res {
                    b, second: true, i, ..
                },
                1,
            ) => {
                let f = sh.ffn as u64;
                trace(lay.region_at(Region::Block(b, G)) + 2 * i as u64 * f, 2 * f)
            }
            (Step::Res { b, second, i, c }, 2) => {
                let row = if second {
                    lay.norm_row(Some(b), false, i)
                } else {
                    lay.input_row(b, i)
                };
                trace(row + 2 * c as u64, 2)
            }
            (Step::Gelu { b, i, .. }, 0) => trace(lay.norm_row(Some(b), false, i), 2 * h),
            (Step::Gelu { b, o, .. }, 1) => model(sh.record_at(b, Part::F1, o), HEAD + h),
            (Step::Gelu { b, .. }, 2) => model(
                sh.part_at(b, Part::Gelu) + 2 * (self.x + GELU_HALF) as u64,
                2,
            ),
            (Step::Pool { p, g }, 0) => {
                let len = if p == 0 {
                    0
                } else {
                    4 * lay.group_len(g) as u64
                };
                let slot =
                    (p.saturating_sub(1) as u64 * lay.groups() as u64 + g as u64) * LEAF_LEN as u64;
                trace(lay.region_at(Region::Pool) + slot, len)
            }
            (Step::Pool { p, g }, 1) => trace(
                lay.norm_row(Some(sh.blocks - 1), true, p) + 2 * (GROUP * g) as u64,
                2 * lay.group_len(g) as u64,
            ),
            (Step::Out { g }, 0) => trace(
                lay.region_at(Region::Pool)
                    + ((t - 1) * lay.groups() as u64 + g as u64) * LEAF_LEN as u64,
                4 * lay.group_len(g) as u64,
            ),
            _ => None,
        }
    }

    /// Skips reads of length 0.
    fn settle_stage(&mut self, job: &JobSpec, lay: &Layout, row: u32, step: Step) {
        while self.stage != DONE {
            match self.read(job, lay, row, step, self.stage) {
                Some((_, _, 0)) => self.stage += 1,
                _ => break,
            }
        }
    }

    /// The piece it needs next, (source, chunk or leaf index), for step `s` of text `row`;
    /// `None` once complete.
    pub fn next(&self, job: &JobSpec, lay: &Layout, row: u32, s: u64) -> Option<(Source, u64)> {
        let step = lay.step(s)?;
        if self.stage == DONE {
            return None;
        }
        let mut me = *self;
        me.settle_stage(job, lay, row, step);
        match me.read(job, lay, row, step, me.stage) {
            Some((src, at, _)) => Some((src, (at + me.pos as u64) / CHUNK_LEN as u64)),
            None => Some((Source::Trace, lay.slot(s).0 / LEAF_LEN as u64)),
        }
    }

    /// Whether it has read every input: its next piece is the slot's leaf.
    pub fn at_slot(&self, job: &JobSpec, lay: &Layout, row: u32, s: u64) -> bool {
        let Some(step) = lay.step(s) else {
            return false;
        };
        let mut me = *self;
        me.settle_stage(job, lay, row, step);
        me.stage != DONE && me.read(job, lay, row, step, me.stage).is_none()
    }

    /// Takes piece `index` of `source` (`bytes`, already proven: a chunk, or a whole memory
    /// leaf); once it takes the slot's own leaf it returns the [`Patch`] that makes it the
    /// leaf after the step; `None` while more is needed.
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
        self.settle_stage(job, lay, row, step);
        let start = index * CHUNK_LEN as u64;
        let Some((_, at, len)) = self.read(job, lay, row, step, self.stage) else {
            // the slot's leaf
            if bytes.len() < LEAF_LEN {
                return Err(FeedError::BadModel);
            }
            let (off, width) = lay.slot(s);
            self.stage = DONE;
            return Ok(Some(Patch {
                at: (off % LEAF_LEN as u64) as usize,
                width,
                value: self.value,
                work: self.value_at(step),
            }));
        };
        let from = at + self.pos as u64;
        let to = (start + bytes.len() as u64).min(at + len);
        if to <= from {
            return Err(FeedError::BadModel);
        }
        let piece = &bytes[(from - start) as usize..(to - start) as usize];
        self.consume(lay, step, (from - at) as usize, piece, work)?;
        self.pos = (to - at) as u32;
        if to == at + len {
            self.finish(lay, step, work)?;
            self.pos = 0;
            self.stage += 1;
            self.settle_stage(job, lay, row, step);
        }
        Ok(None)
    }

    /// Where in the work area a step's value lies, for the steps that write a row.
    fn value_at(&self, step: Step) -> Option<usize> {
        match step {
            Step::Norm { .. } | Step::Pool { .. } | Step::Out { .. } => Some(0),
            Step::Attn { .. } => Some(SCORES_AT),
            _ => None,
        }
    }

    /// Takes bytes `i ..` of the current read (whole fields).
    fn consume(
        &mut self,
        lay: &Layout,
        step: Step,
        i: usize,
        b: &[u8],
        work: &mut [u8],
    ) -> Result<(), FeedError> {
        let h = lay.h() as usize;
        match (step, self.stage) {
            (Step::Emb { .. }, 0) => {
                let id = w32(b, 0) as u32;
                if id >= lay.shape.vocab {
                    return Err(FeedError::BadValue);
                }
                self.x = id as i64;
            }
            (Step::Emb { .. }, 1) => self.acc = b[0] as i8 as i64,
            (Step::Emb { .. }, 2) => self.y = b[0] as i8 as i64,
            (Step::Emb { .. }, _) => self.words(i, b),
            // the residual row: kept at 2H … 6H (the normalized row is written at 0 … 2H)
            (Step::Norm { .. }, 0) => work[2 * h + i..2 * h + i + b.len()].copy_from_slice(b),
            (Step::Norm { .. }, _) => {
                for (o, f) in b.chunks_exact(4).enumerate() {
                    let at = i + 4 * o;
                    let v = w32(f, 0);
                    if at == 0 {
                        if !(1..=62).contains(&v) {
                            return Err(FeedError::BadModel);
                        }
                        self.s2 = v;
                    } else if (at - 4).is_multiple_of(8) {
                        self.m = v;
                    } else {
                        let c = (at - 8) / 8;
                        let r = w32(work, 2 * h + 4 * c) as i64;
                        let z = ((r - self.y) << Z_FRAC).div_euclid(self.z);
                        let t = self.s2;
                        let y = z.checked_mul(self.m as i64).ok_or(FeedError::BadValue)?
                            + v as i64
                            + (1i64 << (t - 1));
                        let y = y >> t;
                        let y = y.clamp(-Y_MAX, Y_MAX) as i16;
                        work[2 * c..2 * c + 2].copy_from_slice(&y.to_le_bytes());
                    }
                }
            }
            (Step::Dense { .. } | Step::Gelu { .. }, 0) => work[i..i + b.len()].copy_from_slice(b),
            (Step::Dense { .. } | Step::Gelu { .. }, 1) => {
                self.record(b, i, HEAD as usize, Y_MAX, |j, w| w * w16(work, 2 * j))
            }
            (Step::Gelu { .. }, _) => self.value = [b[0], b[1], 0, 0],
            (Step::Dense { .. }, _) => return Err(FeedError::Complete),
            (Step::Attn { .. }, 0) => work[i..i + b.len()].copy_from_slice(b),
            (Step::Attn { .. }, 1) => {
                let dh = lay.dh() as usize;
                for (o, &k) in b.iter().enumerate() {
                    let (j, d) = ((i + o) / dh, (i + o) % dh);
                    let at = SCORES_AT + 4 * j;
                    let prev = if d == 0 { 0 } else { w32(work, at) };
                    let v = prev + work[d] as i8 as i32 * k as i8 as i32;
                    work[at..at + 4].copy_from_slice(&v.to_le_bytes());
                }
            }
            (Step::Attn { .. }, 2) => self.words(i, b),
            (Step::Attn { .. }, _) => {
                let (first, n) = (i / 4, b.len() / 4);
                for e in 0..n {
                    let v = w32(b, 4 * e);
                    if !(0..=1 << P_FRAC).contains(&v) || (first + e == 0 && v < 1) {
                        return Err(FeedError::BadModel);
                    }
                }
                for j in 0..lay.t as usize {
                    let at = SCORES_AT + 4 * j;
                    let idx = w32(work, at) as u32;
                    if idx & PENDING != 0 {
                        let t = (idx & !PENDING) as usize;
                        if (first..first + n).contains(&t) {
                            let e = w32(b, 4 * (t - first));
                            work[at..at + 4].copy_from_slice(&e.to_le_bytes());
                        }
                    }
                }
            }
            (Step::Ctx { .. }, 0) => work[i..i + b.len()].copy_from_slice(b),
            (Step::Ctx { .. }, 1) => {
                for (o, &v) in b.iter().enumerate() {
                    let p = u16::from_le_bytes([work[2 * (i + o)], work[2 * (i + o) + 1]]);
                    self.acc += p as i64 * v as i8 as i64;
                }
            }
            (Step::Ctx { .. }, _) => self.words(i, b),
            (Step::Res { second, .. }, 0) => {
                let operand = if second { GELU_MAX } else { 128 };
                // the weights wait in the work area for the streamed input row
                self.record(b, i, RES_HEAD as usize, operand, |j, w| {
                    work[j] = w as i8 as u8;
                    0
                })
            }
            (Step::Res { second: false, .. }, 1) => {
                for (o, &x) in b.iter().enumerate() {
                    self.acc += work[i + o] as i8 as i64 * x as i8 as i64;
                }
            }
            (Step::Res { second: true, .. }, 1) => {
                for (o, x) in b.chunks_exact(2).enumerate() {
                    self.acc += work[i / 2 + o] as i8 as i64 * w16(x, 0);
                }
            }
            (Step::Res { .. }, _) => self.y = w16(b, 0),
            (Step::Pool { .. }, 0) => work[i..i + b.len()].copy_from_slice(b),
            (Step::Pool { p, .. }, _) => {
                for (o, f) in b.chunks_exact(2).enumerate() {
                    let c = i / 2 + o;
                    let prev = if p == 0 { 0 } else { w32(work, 4 * c) };
                    let v = prev
                        .checked_add(w16(f, 0) as i32)
                        .ok_or(FeedError::BadValue)?;
                    work[4 * c..4 * c + 4].copy_from_slice(&v.to_le_bytes());
                }
            }
            (Step::Out { .. }, _) => {
                for (o, f) in b.chunks_exact(4).enumerate() {
                    let c = i / 4 + o;
                    let v = (w32(f, 0) as i64).div_euclid(lay.t as i64) as i16;
                    work[2 * c..2 * c + 2].copy_from_slice(&v.to_le_bytes());
                }
            }
        }
        Ok(())
    }

    /// Takes words `i / 4 ..` of a record of multipliers and shifts: `m, s, m2, s2`.
    fn words(&mut self, i: usize, b: &[u8]) {
        for (o, f) in b.chunks_exact(4).enumerate() {
            let v = w32(f, 0);
            match (i + 4 * o) / 4 {
                0 => self.m = v,
                1 => self.s = v,
                2 => self.m2 = v,
                _ => self.s2 = v,
            }
        }
    }

    /// Takes word `k` of a dense record's head (`bias, m, s, m2, s2`); the bias starts the
    /// accumulator and its bound ([`acc_bound`]).
    fn head_word(&mut self, k: usize, f: i32) {
        match k {
            0 => {
                self.acc = f as i64;
                self.z = (f as i64).abs();
            }
            1 => self.m = f,
            2 => self.s = f,
            3 => self.m2 = f,
            _ => self.s2 = f,
        }
    }

    /// Takes bytes `i ..` of a dense record with a head of `head` bytes over inputs of
    /// magnitude at most `operand`: weight j goes to `weight(j, w)`, which returns what it adds
    /// to the accumulator.
    fn record(
        &mut self,
        b: &[u8],
        i: usize,
        head: usize,
        operand: i64,
        mut weight: impl FnMut(usize, i64) -> i64,
    ) {
        for (o, &v) in b.iter().enumerate() {
            let at = i + o;
            if at < head {
                if at % 4 == 3 {
                    self.head_word(at / 4, w32(b, o - 3));
                }
            } else {
                let w = v as i8 as i64;
                self.acc += weight(at - head, w);
                self.z += operand * w.abs();
            }
        }
    }

    /// Completes a read.
    fn finish(&mut self, lay: &Layout, step: Step, work: &mut [u8]) -> Result<(), FeedError> {
        let h = lay.h() as usize;
        match (step, self.stage) {
            (Step::Norm { .. }, 0) => {
                let n = h as i64;
                let r = |c: usize| w32(work, 2 * h + 4 * c) as i64;
                if (0..h).any(|c| r(c).abs() > 1 << 25) {
                    return Err(FeedError::BadValue);
                }
                let mu = (0..h).map(r).sum::<i64>().div_euclid(n);
                let var = (0..h)
                    .map(|c| (r(c) - mu) * (r(c) - mu))
                    .sum::<i64>()
                    .div_euclid(n);
                self.y = mu;
                self.z = (var as u64).isqrt().max(1) as i64;
            }
            (Step::Dense { .. }, 1) => {
                acc_bound(self.z)?;
                let v = rq(self.acc, self.m, self.s, -128, 127)?;
                self.value = [v as i8 as u8, 0, 0, 0];
            }
            (Step::Gelu { .. }, 1) => {
                acc_bound(self.z)?;
                self.x = rq(self.acc, self.m, self.s, -GELU_HALF, GELU_HALF - 1)?
            }
            (Step::Res { .. }, 0) => acc_bound(self.z)?,
            (Step::Emb { .. }, 3) => {
                let word = rq(self.acc, self.m, self.s, -RES_CLAMP, RES_CLAMP)?;
                let pos = rq(self.y, self.m2, self.s2, -RES_CLAMP, RES_CLAMP)?;
                self.value = ((word + pos) as i32).to_le_bytes();
            }
            (Step::Ctx { .. }, 2) => {
                let v = rq(self.acc, self.m, self.s, -128, 127)?;
                self.value = [v as i8 as u8, 0, 0, 0];
            }
            (Step::Attn { .. }, 2) => {
                let (m, s) = (self.m, self.s);
                if m < 1 || !(1..=62).contains(&s) {
                    return Err(FeedError::BadModel);
                }
                let t = lay.t as usize;
                let score = |w: &[u8], j: usize| w32(w, SCORES_AT + 4 * j) as i64;
                let max = (0..t).map(|j| score(work, j)).max().unwrap_or(0);
                for j in 0..t {
                    let idx = (((max - score(work, j)) * m as i64 + (1i64 << (s - 1))) >> s)
                        .min(EXP_LEN as i64 - 1) as u32;
                    let at = SCORES_AT + 4 * j;
                    work[at..at + 4].copy_from_slice(&(idx | PENDING).to_le_bytes());
                }
            }
            (Step::Attn { .. }, 3) => {
                let t = lay.t as usize;
                let e = |w: &[u8], j: usize| w32(w, SCORES_AT + 4 * j) as i64;
                let sum: i64 = (0..t).map(|j| e(work, j)).sum();
                if sum < 1 {
                    return Err(FeedError::BadModel);
                }
                for j in 0..t {
                    let p = ((e(work, j) << P_FRAC) / sum) as u16;
                    work[SCORES_AT + 2 * j..SCORES_AT + 2 * j + 2]
                        .copy_from_slice(&p.to_le_bytes());
                }
            }
            (Step::Res { .. }, 2) => {
                let res = rq(self.y, self.m2, self.s2, -RES_CLAMP, RES_CLAMP)?;
                let out = rq(self.acc, self.m, self.s, -RES_CLAMP, RES_CLAMP)?;
                self.value = ((res + out) as i32).to_le_bytes();
            }
            _ => {}
        }
        Ok(())
    }
}

/// Traces of the host's own texts, built by keepers and tests.
#[cfg(not(target_os = "solana"))]
pub mod build {
    use super::*;
    use crate::encoder::{Block, Encoder};
    use crate::slices::encoder::build::shape;

    impl crate::trace::build::Trace<Layout> {
        /// The trace of text `ids` through `e`.
        pub fn of_text(e: &Encoder, ids: &[u32]) -> Self {
            crate::trace::build::Trace {
                lay: layout(e, ids.len()),
                mem: memory(e, ids),
            }
        }
    }

    /// The layout of a text of `t` tokens through `e`.
    pub fn layout(e: &Encoder, t: usize) -> Layout {
        Layout {
            shape: shape(e),
            t: t as u32,
        }
    }

    fn put_rows(mem: &mut [u8], at: u64, stride: u64, rows: &[i64], h: usize) {
        for (p, row) in rows.chunks_exact(h).enumerate() {
            let o = (at + p as u64 * stride) as usize;
            for (c, &v) in row.iter().enumerate() {
                mem[o + 2 * c..o + 2 * c + 2].copy_from_slice(&(v as i16).to_le_bytes());
            }
        }
    }

    fn put_i32(mem: &mut [u8], at: u64, vals: &[i64]) {
        for (j, &v) in vals.iter().enumerate() {
            let o = at as usize + 4 * j;
            mem[o..o + 4].copy_from_slice(&(v as i32).to_le_bytes());
        }
    }

    /// The memory after the last step of text `ids` through `e` (checked by
    /// [`Encoder::check`]; `ids` within its vocabulary and positions).
    pub fn memory(e: &Encoder, ids: &[u32]) -> Vec<u8> {
        let lay = layout(e, ids.len());
        let (t, h) = (ids.len(), e.hidden);
        let dh = h / e.heads;
        let mut mem = vec![0u8; lay.len() as usize];
        let mut r = vec![0i64; t * h];
        for (p, &id) in ids.iter().enumerate() {
            let (w, q) = (&e.word[id as usize * h..][..h], &e.pos[p * h..][..h]);
            for c in 0..h {
                r[p * h + c] = e.word_rq.apply(c, w[c].into(), -RES_CLAMP, RES_CLAMP)
                    + e.pos_rq.apply(c, q[c].into(), -RES_CLAMP, RES_CLAMP);
            }
        }
        put_i32(&mut mem, lay.region_at(Region::Emb), &r);
        let mut y = norm(&e.ln, &r, h);
        put_rows(&mut mem, lay.region_at(Region::Y0), lay.row_stride(), &y, h);
        for (b, blk) in e.blocks.iter().enumerate() {
            y = block(e, blk, &lay, b as u32, &y, t, dh, &mut mem);
        }
        // running sums, then the embedding
        let groups = lay.groups() as usize;
        let mut sum = vec![0i64; h];
        for p in 0..t {
            for c in 0..h {
                sum[c] += y[p * h + c];
            }
            for g in 0..groups {
                let at = lay.region_at(Region::Pool) + ((p * groups + g) * LEAF_LEN) as u64;
                let n = lay.group_len(g as u32) as usize;
                put_i32(&mut mem, at, &sum[g * GROUP as usize..][..n]);
            }
        }
        let out = lay.region_at(Region::Out) as usize;
        for c in 0..h {
            let v = sum[c].div_euclid(t as i64) as i16;
            mem[out + 2 * c..out + 2 * c + 2].copy_from_slice(&v.to_le_bytes());
        }
        mem
    }

    fn norm(n: &crate::encoder::Norm, r: &[i64], h: usize) -> Vec<i64> {
        let mut y = vec![0i64; r.len()];
        for (r, y) in r.chunks_exact(h).zip(y.chunks_exact_mut(h)) {
            n.apply(r, y);
        }
        y
    }

    #[allow(clippy::too_many_arguments)]
    fn block(
        e: &Encoder,
        b: &Block,
        lay: &Layout,
        bi: u32,
        y: &[i64],
        t: usize,
        dh: usize,
        mem: &mut [u8],
    ) -> Vec<i64> {
        let h = e.hidden;
        let at = |k: u8| lay.region_at(Region::Block(bi, k)) as usize;
        let (q, k, v) = (
            b.q.apply(y, -128, 127),
            b.k.apply(y, -128, 127),
            b.v.apply(y, -128, 127),
        );
        for p in 0..t {
            for c in 0..h {
                let (hd, d) = (c / dh, c % dh);
                mem[at(Q) + p * h + c] = q[p * h + c] as i8 as u8;
                mem[at(K) + hd * t * dh + p * dh + d] = k[p * h + c] as i8 as u8;
                mem[at(V) + c * t + p] = v[p * h + c] as i8 as u8;
            }
        }
        // probabilities, then the context
        let (am, ash) = (b.att.0 as i64, b.att.1);
        let ps = lay.prob_stride() as usize;
        let mut ctx = vec![0i64; t * h];
        for hd in 0..e.heads {
            for i in 0..t {
                let s: Vec<i64> = (0..t)
                    .map(|j| {
                        (0..dh)
                            .map(|d| q[i * h + hd * dh + d] * k[j * h + hd * dh + d])
                            .sum()
                    })
                    .collect();
                let max = *s.iter().max().expect("t ≥ 1");
                let ex: Vec<i64> = s
                    .iter()
                    .map(|&s| {
                        let idx =
                            (((max - s) * am + (1i64 << (ash - 1))) >> ash).min(EXP_LEN as i64 - 1);
                        e.exp[idx as usize] as i64
                    })
                    .collect();
                let sum: i64 = ex.iter().sum();
                let row = at(P) + (hd * t + i) * ps;
                for (j, &x) in ex.iter().enumerate() {
                    let p = (x << P_FRAC) / sum;
                    mem[row + 2 * j..row + 2 * j + 2].copy_from_slice(&(p as u16).to_le_bytes());
                    for d in 0..dh {
                        ctx[i * h + hd * dh + d] += p * v[j * h + hd * dh + d];
                    }
                }
            }
        }
        let ctx: Vec<i64> = (0..t * h)
            .map(|i| b.ctx.apply(i % h, ctx[i], -128, 127))
            .collect();
        for (i, &c) in ctx.iter().enumerate() {
            mem[at(C) + i] = c as i8 as u8;
        }
        let a = b.o.apply(&ctx, -RES_CLAMP, RES_CLAMP);
        let r: Vec<i64> = (0..t * h)
            .map(|i| b.res1.apply(i % h, y[i], -RES_CLAMP, RES_CLAMP) + a[i])
            .collect();
        put_i32(mem, at(R1) as u64, &r);
        let hq = norm(&b.ln1, &r, h);
        put_rows(mem, at(N1) as u64, lay.row_stride(), &hq, h);
        let u = b.f1.apply(&hq, -GELU_HALF, GELU_HALF - 1);
        let g: Vec<i64> = u
            .iter()
            .map(|&u| b.gelu[(u + GELU_HALF) as usize].into())
            .collect();
        for (i, &x) in g.iter().enumerate() {
            mem[at(G) + 2 * i..at(G) + 2 * i + 2].copy_from_slice(&(x as i16).to_le_bytes());
        }
        let f = b.f2.apply(&g, -RES_CLAMP, RES_CLAMP);
        let r: Vec<i64> = (0..t * h)
            .map(|i| b.res2.apply(i % h, hq[i], -RES_CLAMP, RES_CLAMP) + f[i])
            .collect();
        put_i32(mem, at(R2) as u64, &r);
        let out = norm(&b.ln2, &r, h);
        put_rows(mem, at(N2) as u64, lay.row_stride(), &out, h);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::{build::*, *};
    use crate::{
        encoder::{random_encoder, Encoder, RandomShape},
        slices::{self, encoder as se},
        trace::{build as tb, fold, leaf_hash},
    };

    fn job_for(e: &Encoder, texts: u32, limit: u32, model_len: u64) -> JobSpec {
        let mut job = JobSpec::encoder(
            texts,
            limit,
            e.hidden as u32,
            e.work_per_token(limit as usize),
            2,
            [5; 32],
        );
        job.slices_len = model_len;
        job
    }

    /// Replays step `s` of text `row` as the program would, from the memory before it: the
    /// root after it.
    #[allow(clippy::too_many_arguments)]
    fn replay(
        job: &JobSpec,
        lay: &Layout,
        model: &[u8],
        ids: &[u8],
        pre: &[u8],
        row: u32,
        s: u64,
    ) -> Result<crate::hash::Digest, FeedError> {
        let mut r = Replay::default();
        let mut work = vec![0u8; super::super::WORK_LEN];
        for _ in 0..10_000 {
            let (src, i) = r.next(job, lay, row, s).ok_or(FeedError::Complete)?;
            r = Replay::decode(&r.encode());
            let bytes: Vec<u8> = match src {
                Source::Model => slices::chunk(model, i).to_vec(),
                Source::Batch => slices::chunk(ids, i).to_vec(),
                Source::Trace => tb::leaf_proof(lay, pre, i).0.to_vec(),
                Source::Result => unreachable!("an encoder reads no result"),
            };
            if let Some(patch) = r.take(job, lay, row, s, src, i, &bytes, &mut work)? {
                let (mut leaf, path) = tb::leaf_proof(lay, pre, i);
                assert_eq!(fold(i, leaf_hash(&leaf), &path), tb::root(lay, pre));
                patch.apply(&mut leaf, &work);
                return Ok(fold(i, leaf_hash(&leaf), &path));
            }
        }
        panic!("a replay ends")
    }

    fn texts(e: &Encoder, lens: &[usize], seed: u64) -> Vec<Vec<u32>> {
        lens.iter()
            .enumerate()
            .map(|(r, &n)| {
                (0..n)
                    .map(|p| {
                        (crate::job::splitmix64(seed ^ (r as u64) << 20 ^ p as u64)
                            % e.vocab() as u64) as u32
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn every_step_of_a_text_replays_to_the_next_root_and_the_embedding_is_the_reference() {
        for (shape, lens, seed) in [
            (
                RandomShape {
                    hidden: 8,
                    heads: 2,
                    ffn: 12,
                    blocks: 2,
                    vocab: 50,
                    positions: 7,
                },
                vec![5usize, 1, 7],
                1u64,
            ),
            (
                RandomShape {
                    hidden: 6,
                    heads: 3,
                    ffn: 5,
                    blocks: 1,
                    vocab: 9,
                    positions: 4,
                },
                vec![3, 4],
                2,
            ),
        ] {
            let e = random_encoder(shape, seed);
            e.check().expect("a generated encoder is within the bounds");
            let limit = shape.positions as u32;
            let ms = se::build::model(&e);
            assert_eq!(se::build::parse(&ms).as_ref(), Some(&e), "read back");
            let h = e.hidden as u32;
            assert!(ms.len() as u64 <= se::max_len(h, e.work_per_token(limit as usize)));
            assert!(JobSpec::decode(&job_for(&e, 3, limit, ms.len() as u64).encode()).is_ok());
            assert_eq!(se::build::parse(&ms[..ms.len() - 1]), None);
            let all = texts(&e, &lens, seed);
            let ids = se::build::ids(&all, limit);
            let job = job_for(&e, lens.len() as u32, limit, ms.len() as u64);
            assert_eq!(
                se::read_header(&job, ms.len() as u64, slices::chunk(&ms, 0)),
                Ok(se::build::shape(&e))
            );
            for (row, text) in all.iter().enumerate() {
                let lay = layout(&e, text.len());
                let mem = memory(&e, text);
                let out = lay.region_at(Region::Out) as usize;
                let want: Vec<u8> = e.embed(text).iter().flat_map(|v| v.to_le_bytes()).collect();
                assert_eq!(&mem[out..out + 2 * e.hidden], &want[..], "the embedding");
                assert_eq!(
                    &mem[lay.word_at(1) as usize..lay.word_at(1) as usize + 4],
                    &want[4..8]
                );
                let mut seen = std::collections::HashSet::new();
                for s in 1..=lay.steps() {
                    let step = lay.step(s).unwrap();
                    seen.insert(std::mem::discriminant(&step));
                    let pre = tb::state(&lay, &mem, s - 1);
                    let post = replay(&job, &lay, &ms, &ids, &pre, row as u32, s)
                        .unwrap_or_else(|e| panic!("step {s} {step:?}: {e:?}"));
                    assert_eq!(
                        post,
                        tb::root(&lay, &tb::state(&lay, &mem, s)),
                        "{shape:?} text {row} step {s}: {step:?}"
                    );
                }
                assert_eq!(seen.len(), 9, "every kind of step");
                assert_eq!(lay.step(lay.word_step(0)), Some(Step::Out { g: 0 }));
            }
        }
    }

    /// A feed-forward wider than a chunk (its int16 row 1 400 bytes, its records over 700): the
    /// residual step streams the row across leaves; a GELU table of −32 768 everywhere (the
    /// operand's extreme); a row of the feed-forward-out exactly at the accumulator bound
    /// replays, one past it is refused, as `Encoder::check` refuses it.
    #[test]
    fn wide_feed_forward_rows_stream_and_the_row_bound_is_the_reference_s() {
        let shape = RandomShape {
            hidden: 8,
            heads: 2,
            ffn: 700,
            blocks: 1,
            vocab: 20,
            positions: 3,
        };
        let mut e = random_encoder(shape, 11);
        e.blocks[0].gelu = vec![i16::MIN; crate::encoder::GELU_LEN];
        // row 0: Σ|w| = 65 535, bias 32 767: |bias| + 32 768 · Σ|w| = 2^31 − 1
        let w = &mut e.blocks[0].f2.weight[..700];
        w.iter_mut().for_each(|v| *v = 0);
        w[..516].iter_mut().enumerate().for_each(|(j, v)| {
            *v = if j % 2 == 0 { 127 } else { -127 };
        });
        w[516] = 3;
        e.blocks[0].f2.bias[0] = 32_767;
        e.check().expect("at the bound");
        let all = texts(&e, &[3, 2], 5);
        let ids = se::build::ids(&all, 3);
        let ms = se::build::model(&e);
        let job = job_for(&e, 2, 3, ms.len() as u64);
        for (row, text) in all.iter().enumerate() {
            let lay = layout(&e, text.len());
            let mem = memory(&e, text);
            let steps: Vec<u64> = (1..=lay.steps())
                .filter(|&s| {
                    matches!(
                        lay.step(s),
                        Some(
                            Step::Res { second: true, .. }
                                | Step::Gelu {
                                    o: 0 | 511 | 699,
                                    ..
                                }
                        )
                    )
                })
                .collect();
            assert_eq!(steps.len(), text.len() * (8 + 3));
            for s in steps {
                let pre = tb::state(&lay, &mem, s - 1);
                let post = replay(&job, &lay, &ms, &ids, &pre, row as u32, s)
                    .unwrap_or_else(|err| panic!("step {s}: {err:?}"));
                assert_eq!(post, tb::root(&lay, &tb::state(&lay, &mem, s)), "step {s}");
            }
        }
        // one past the bound: refused by the reference and by the replay
        let mut over = e.clone();
        over.blocks[0].f2.bias[0] = 32_768;
        assert!(over.check().is_err());
        let ms = se::build::model(&over);
        let lay = layout(&e, 3);
        let mem = memory(&e, &all[0]);
        let s = (1..=lay.steps())
            .find(|&s| {
                lay.step(s)
                    == Some(Step::Res {
                        b: 0,
                        second: true,
                        i: 0,
                        c: 0,
                    })
            })
            .unwrap();
        let pre = tb::state(&lay, &mem, s - 1);
        assert_eq!(
            replay(&job, &lay, &ms, &ids, &pre, 0, s),
            Err(FeedError::BadModel)
        );
    }

    #[test]
    fn a_wrong_value_before_a_step_is_what_the_replay_reads() {
        let shape = RandomShape {
            hidden: 8,
            heads: 2,
            ffn: 12,
            blocks: 1,
            vocab: 50,
            positions: 6,
        };
        let e = random_encoder(shape, 7);
        let ms = se::build::model(&e);
        let all = texts(&e, &[6], 3);
        let ids = se::build::ids(&all, 6);
        let job = job_for(&e, 1, 6, ms.len() as u64);
        let lay = layout(&e, 6);
        let mem = memory(&e, &all[0]);
        // the first block's attention of query 2, head 1: a key changed before it
        let s = (1..=lay.steps())
            .find(|&s| lay.step(s) == Some(Step::Attn { b: 0, h: 1, i: 2 }))
            .unwrap();
        let mut bad = tb::state(&lay, &mem, s - 1);
        let k = lay.region_at(Region::Block(0, K)) as usize + 6 * 4 + 1;
        bad[k] ^= 0x55;
        let post = replay(&job, &lay, &ms, &ids, &bad, 0, s).unwrap();
        assert_ne!(post, tb::root(&lay, &tb::state(&lay, &mem, s)));
    }

    #[test]
    fn ids_past_the_vocabulary_and_headers_that_do_not_fit_are_refused() {
        let shape = RandomShape {
            hidden: 8,
            heads: 2,
            ffn: 12,
            blocks: 1,
            vocab: 50,
            positions: 6,
        };
        let e = random_encoder(shape, 9);
        let ms = se::build::model(&e);
        let job = job_for(&e, 1, 6, ms.len() as u64);
        let ids = se::build::ids(&[vec![3, 50]], 6);
        let lay = layout(&e, 2);
        let mem = memory(&e, &[3, 4]);
        // step of token 1: the id 50 is past the vocabulary
        let s = 8 + 1;
        assert_eq!(lay.step(s), Some(Step::Emb { p: 1, c: 0 }));
        assert_eq!(
            replay(&job, &lay, &ms, &ids, &tb::state(&lay, &mem, s - 1), 0, s),
            Err(FeedError::BadValue)
        );
        let len = ms.len() as u64;
        assert_eq!(
            se::read_header(&job, len + 1, slices::chunk(&ms, 0)),
            Err(FeedError::BadModel)
        );
        let mut other = job;
        other.work_per_row += 1;
        assert_eq!(
            se::read_header(&other, len, slices::chunk(&ms, 0)),
            Err(FeedError::BadModel)
        );
        let mut wide = job;
        wide.dims[1] = 7;
        assert_eq!(
            se::read_header(&wide, len, slices::chunk(&ms, 0)),
            Err(FeedError::BadModel),
            "positions below the job's limit"
        );
        assert_eq!(read_count(&job, &lay.shape, 0), Err(FeedError::BadValue));
        assert_eq!(read_count(&job, &lay.shape, 7), Err(FeedError::BadValue));
        assert_eq!(read_count(&job, &lay.shape, 6), Ok(6));
    }

    #[test]
    fn minilm_sized_traces_fit_the_memory_and_the_pieces_counted() {
        let shape = Shape {
            hidden: 384,
            heads: 12,
            ffn: 1536,
            blocks: 6,
            vocab: 30522,
            positions: 512,
        };
        let lay = Layout { shape, t: 128 };
        assert!(lay.len() <= MAX_MEMORY, "{} bytes", lay.len());
        assert_eq!(
            lay.steps(),
            128 * 385 + 6 * (6 * 128 * 384 + 12 * 128 + 2 * 128 + 128 * 1536) + 128 * 2 + 2
        );
        let work = encoder_work_for(&shape, 128);
        let mut job = JobSpec::encoder(1000, 128, 384, work, 4, [0; 32]);
        job.slices_len = 1;
        assert!(steps_bound(&job) >= lay.steps());
        assert!(memory_bound(&job) >= lay.len());
        assert!(gameable(&job));
        // twelve blocks at a limit of 512 tokens: a text's trace could pass 64 MiB, so no game
        // is offered (the verdict settles at once rather than stand undisputable)
        let twelve = Shape {
            blocks: 12,
            ..shape
        };
        let long = Layout {
            shape: twelve,
            t: 512,
        };
        assert!(long.len() > MAX_MEMORY);
        let mut job = JobSpec::encoder(100, 512, 384, encoder_work_for(&twelve, 512), 4, [0; 32]);
        job.slices_len = 1;
        assert!(memory_bound(&job) >= long.len());
        assert!(!gameable(&job));
        assert_eq!(crate::trace::clock(&job, 10_000), None);
        // an attention step of a 128-token text: its query, 48 KiB of keys at most, the
        // scale (two chunks when its pair straddles), the exp table, the slot
        assert_eq!(
            step_pieces(&JobSpec::encoder(1000, 128, 384, work, 4, [0; 32])),
            2 + 49 + 2 + 5 + 1
        );
        // every slot lies in one leaf
        for s in (1..=lay.steps()).step_by(997).chain([lay.steps()]) {
            let (off, w) = lay.slot(s);
            assert_eq!(off / 1024, (off + w as u64 - 1) / 1024, "step {s}");
        }
    }

    #[test]
    fn the_windows_a_minilm_game_needs() {
        let shape = Shape {
            hidden: 384,
            heads: 12,
            ffn: 1536,
            blocks: 6,
            vocab: 30522,
            positions: 512,
        };
        let least = |limit: u32| {
            let mut job = JobSpec::encoder(
                100,
                limit,
                384,
                encoder_work_for(&shape, limit as u64),
                2,
                [0; 32],
            );
            job.slices_len = 1;
            (1_000..10_000u32)
                .find(|&d| crate::trace::clock(&job, d).is_some())
                .unwrap()
        };
        // PROTOCOL §8.10's figures
        assert_eq!((least(12), least(128)), (2_352, 2_904));
        // past 128 tokens the probability rows double and the bound passes 64 MiB
        let mut job = JobSpec::encoder(100, 129, 384, encoder_work_for(&shape, 129), 2, [0; 32]);
        job.slices_len = 1;
        assert!(!gameable(&job));
    }

    fn encoder_work_for(s: &Shape, limit: u64) -> u64 {
        crate::job::encoder_work_per_token(
            s.blocks as u64,
            s.hidden as u64,
            s.ffn as u64,
            s.heads as u64,
            limit,
        )
    }
}

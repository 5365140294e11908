//! The trace of one `Generate` token (PROTOCOL §8.13): every intermediate value of the
//! teacher-forced forward pass that picks token j of a completion, in a memory whose regions
//! align with the commitment's tree, and the replay of one step, so that a game narrows a
//! disputed token to one operation the program recomputes.
//!
//! **The sequence** is the prompt's ids (proven from the prompts' slice string) and the
//! completion's tokens before j (proven from the result itself: the committed earlier tokens
//! are inputs, never recomputed; a wrong earlier token is its own dispute). T = n + j positions.
//!
//! **The memory.** Position q's layer l is *block* B(q, l); blocks in order (q, then l) each
//! own a region of 2^b bytes (b the same for all, from the largest block), then the *tail*'s
//! region: the final norm of position T − 1, the logits, and the pick. Inside a block, its
//! parts in step order, each starting at a leaf, no slot straddling two leaves ([`Part`]).
//! Regions aligned to the tree are what lets a keeper hold one block at a time: the root
//! after any step folds the roots of the finished regions, the current one's, and zeros.
//!
//! **A step** reads a few fields (at most five [`Read`]s, each whole fields: from the memory
//! before the step, the model's slice string, the prompts' string, the result) and writes one
//! slot; which fields may depend on those read before it (a token's record on its id, a
//! table entry on the value that indexes it). [`Layout::next_read`] says what a step reads
//! next given what it holds, [`Layout::value`] what it writes: the program and the keepers run
//! the same two functions, so the trace a keeper builds is the one the program replays.

use super::{Patch, Source, LEAF_LEN, REPLAY_LEN, WORK_LEN};
use crate::{
    feed::FeedError,
    job::{JobKind, JobSpec},
    slices::decoder::{
        prompt_stride, rq, rq_ok, Dense, Shape, ACC_MAX, BLOCK, EXP_LEN, EXP_MAX, FRAC,
        Q4_BLOCK_LEN, Q8_BLOCK_LEN, QK_MAX, RES_MAX, RQ_LEN, SIG_LEN, Y_MAX,
    },
};

const LEAF: u64 = LEAF_LEN as u64;
/// `i64` values in a leaf: a run of a max scan.
const RUN8: u64 = LEAF / 8;
/// `i32` values in a leaf: a run of a sum or argmax scan.
const RUN4: u64 = LEAF / 4;
/// Deepest memory a `Generate` game is played over (2^42 bytes: regions are hashed, never
/// held whole): a leaf's siblings fill a game's buffer after it.
pub const MAX_DEPTH: u32 = 32;
/// Widest head the game referees: a head's running context sums (`8 · head_dim` bytes) fill at
/// most one leaf.
pub const MAX_HEAD_DIM: u32 = 128;

/// A part of a block (the first eighteen) or of the tail (the last five), in memory and step
/// order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Part {
    /// Layer 0 only: the token's embedding into the residual stream, `i32` per channel.
    Emb,
    /// The first norm's statistics of the block's input row: shift and root (16 bytes).
    Ns1,
    /// The first norm, `i16` per channel.
    N1,
    /// q and k after RoPE, a pair of `i16` per slot: q's pairs, then k's.
    Rot,
    /// v, `i16` per channel.
    V,
    /// Scores `S[h][j] = q_h · k_j`, `i64`, a head's row starting at a leaf.
    S,
    /// Per head, the running maximum of its scores over runs of 128, `i64`.
    Mx,
    /// Exp weights `e[h][j]`, `i32`, a head's row starting at a leaf.
    E,
    /// Per head, the running sum of its weights over runs of 256, `i64`.
    Sm,
    /// Per head and position, the running context sums `Σ_{j' ≤ j} e_j' v_j'`, `head_dim`
    /// `i64` (a slot of the next power of two).
    A,
    /// The context, per head `head_dim` `i16`.
    Ctx,
    /// The attention output added to the residual stream, `i32` per channel.
    R1,
    /// The second norm's statistics.
    Ns2,
    /// The second norm.
    N2,
    /// SwiGLU's products `g · σ(g) · u`, `i64` per feed-forward output.
    P,
    /// The running maximum of `|p|` over runs of 128, `u64`.
    Ks,
    /// The products scaled by the row's exponent κ, `i16`.
    Hv,
    /// The feed-forward output added to the residual stream: the block's output, `i32`.
    R2,
    /// The final norm's statistics of position T − 1's last row.
    Nsf,
    /// The final norm.
    Nf,
    /// The logits (Q16), `i32` per token.
    Lg,
    /// The greedy pick's running `(largest logit, its first token)` over runs of 256.
    Gs,
    /// The token picked, `u32`: the first largest logit's, or 0 when j is not below the
    /// completion's committed count (a word past the completion is zero; a wrong count is the
    /// count word's own dispute).
    Tok,
    /// A sampled pick: each token's weight `E[min(⌊(ℓ_max − ℓ) · 4 / τ⌋, 16 383)]`, `u32`.
    Wt,
    /// A sampled pick: the binary search for the k-th candidate's rank key, 50 passes over
    /// the logits in runs of 256 (state: `lo, hi`, the pass's count, 0; `u64` each).
    Sa,
    /// A sampled pick: the top-k candidates' whole weight W, one pass.
    Sw,
    /// A sampled pick: the search for the top-p cut (the fewest candidates whose weight c has
    /// `c · 2^16 ≥ top_p · W`), 50 passes (the last `aux` is c).
    Sc,
    /// A sampled pick: the search for the drawn candidate (the first whose running weight passes
    /// `⌊draw · c / 2^64⌋`), 50 passes (`aux` the threshold).
    Sd,
    /// A count's trace: over runs of 256 of the completion's committed token words, the first
    /// end of turn's index (`u32::MAX` while none) and whether a word at or past the
    /// committed count is not zero.
    Cs,
    /// A count's trace: the count the committed tokens give, `u32`: the fewest of G, the
    /// first end of turn's index + 1, and the positions left after the prompt; `u32::MAX`
    /// when a word past the committed count is not zero (no count is right then).
    Cnt,
}

const BLOCK_PARTS: [Part; 18] = [
    Part::Emb,
    Part::Ns1,
    Part::N1,
    Part::Rot,
    Part::V,
    Part::S,
    Part::Mx,
    Part::E,
    Part::Sm,
    Part::A,
    Part::Ctx,
    Part::R1,
    Part::Ns2,
    Part::N2,
    Part::P,
    Part::Ks,
    Part::Hv,
    Part::R2,
];
const TAIL_PARTS: [Part; 5] = [Part::Nsf, Part::Nf, Part::Lg, Part::Gs, Part::Tok];
const COUNT_PARTS: [Part; 2] = [Part::Cs, Part::Cnt];
const SAMPLED_TAIL: [Part; 10] = [
    Part::Nsf,
    Part::Nf,
    Part::Lg,
    Part::Gs,
    Part::Wt,
    Part::Sa,
    Part::Sw,
    Part::Sc,
    Part::Sd,
    Part::Tok,
];
/// Passes of a sampled pick's binary search: rank keys are below 2^50.
pub const SEARCH_PASSES: u64 = 50;
/// Rank keys of a sampled pick: `(ℓ + 2^30) · 2^18 + (2^18 − 1 − id)`, so that a higher logit,
/// then a lower id, ranks first (ids below 2^18, the format's largest vocabulary).
const KEY_ID_BITS: u32 = 18;

fn rank_key(logit: i32, id: u32) -> u64 {
    (((i64::from(logit) + RES_MAX) as u64) << KEY_ID_BITS) | ((1 << KEY_ID_BITS) - 1 - id as u64)
}

/// One step: slot `i` of `part` in block B(q, l) (the tail's: q = T, l = 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Step {
    /// Position (T for the tail).
    pub q: u32,
    /// Layer.
    pub l: u32,
    /// Part.
    pub part: Part,
    /// Slot in the part: a channel or output; `h · n + j` for scores, weights and context
    /// sums; `h · runs + r` for scans; a head for the context; a pair for RoPE.
    pub i: u32,
}

/// A field a step reads: `len` bytes at `at` of `source`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Read {
    /// The string.
    pub source: Source,
    /// Its first byte.
    pub at: u64,
    /// Bytes.
    pub len: u64,
}

/// The reads of a step planned so far.
struct Plan {
    r: [Read; 5],
    k: usize,
}

impl Plan {
    fn push(&mut self, rd: Read) {
        self.r[self.k] = rd;
        self.k += 1;
    }
    /// Whether `got` holds every read planned so far.
    fn held(&self, got: &[u8]) -> bool {
        self.r[..self.k].iter().map(|x| x.len).sum::<u64>() <= got.len() as u64
    }
}

fn up(v: u64, to: u64) -> u64 {
    v.div_ceil(to) * to
}

/// `Σ_{n=1}^{N} ⌈n / k⌉`.
fn ceil_sum(n: u64, k: u64) -> u64 {
    let (m, r) = (n / k, n % k);
    k * m * (m + 1) / 2 + r * (m + 1)
}

fn i16_at(b: &[u8], o: usize) -> i64 {
    i16::from_le_bytes([b[o], b[o + 1]]).into()
}
fn i32_at(b: &[u8], o: usize) -> i32 {
    i32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}
fn u32_at(b: &[u8], o: usize) -> u32 {
    i32_at(b, o) as u32
}
fn i64_at(b: &[u8], o: usize) -> i64 {
    i64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"))
}

/// The memory layout of one token's trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// The model's shape.
    pub shape: Shape,
    /// The prompt's tokens n.
    pub prompt: u32,
    /// Positions T = n + j (j the disputed token's index in its completion); 0 for a count's
    /// trace (no blocks: a scan of the committed tokens, [`Layout::count_of`]).
    pub t: u32,
    /// Where the prompt's row starts in the prompts' string.
    pub batch_row: u64,
    /// Where the completion's word 0 (its count) lies in the result.
    pub result_row: u64,
    /// log2 of a region's bytes.
    pub region_log2: u32,
    /// The job's most new tokens G.
    pub g: u32,
    /// The completion's prompt index (a sampled pick's draw is keyed by it).
    pub row: u32,
    /// Where the sampling rule lies in the prompts' string.
    pub rule_at: u64,
    /// Whether the token is sampled (the rule's temperature is not 0): the tail searches for the
    /// drawn candidate instead of the greedy scan's.
    pub sampled: bool,
}

/// Where completion `row`'s word 0 lies in a `Generate` job's committed string (tiles at
/// their slots, PROTOCOL §5).
pub fn result_row_at(job: &JobSpec, row: u32) -> u64 {
    let r = job.rows_per_tile.max(1) as u32;
    crate::dispute::element_offset(job, row / r, (row % r) * (job.dims[2] + 1))
}

/// Whether a decoder of `shape` is refereed by this trace: heads of a power-of-two width up to
/// [`MAX_HEAD_DIM`].
pub fn shape_fits(shape: &Shape) -> bool {
    shape.head_dim.is_power_of_two() && shape.head_dim <= MAX_HEAD_DIM
}

impl Layout {
    /// The trace of token `j` of completion `row` (prompt of `prompt` tokens) of `job`.
    pub fn new(shape: Shape, job: &JobSpec, row: u32, prompt: u32, j: u32) -> Layout {
        let mut lay = Layout {
            shape,
            prompt,
            t: prompt + j,
            batch_row: row as u64 * prompt_stride(job.dims[1]),
            result_row: result_row_at(job, row),
            region_log2: 0,
            g: job.dims[2],
            row,
            rule_at: job.dims[0] as u64 * prompt_stride(job.dims[1]),
            sampled: false,
        };
        let most = lay
            .block_bytes(lay.t as u64, true)
            .max(lay.tail_bytes())
            .max(LEAF);
        lay.region_log2 = most.next_power_of_two().trailing_zeros();
        lay
    }

    /// The trace of completion `row`'s count word (its prompt of `prompt` tokens): one region,
    /// a scan of its G token words, then the count they give.
    pub fn count_of(shape: Shape, job: &JobSpec, row: u32, prompt: u32) -> Layout {
        let mut lay = Layout {
            t: 0,
            ..Layout::new(shape, job, row, prompt, 0)
        };
        lay.region_log2 = lay
            .tail_bytes()
            .max(LEAF)
            .next_power_of_two()
            .trailing_zeros();
        lay
    }

    /// Whether this is a count's trace.
    pub fn is_count(&self) -> bool {
        self.t == 0
    }

    /// This token's trace with a sampled pick (the rule's temperature not 0) or the greedy one.
    pub fn with_sampling(self, sampled: bool) -> Layout {
        if self.is_count() {
            return self;
        }
        let mut lay = Layout { sampled, ..self };
        let most = lay
            .block_bytes(lay.t as u64, true)
            .max(lay.tail_bytes())
            .max(LEAF);
        lay.region_log2 = most.next_power_of_two().trailing_zeros();
        lay
    }

    fn tail_parts(&self) -> &'static [Part] {
        if self.is_count() {
            &COUNT_PARTS
        } else if self.sampled {
            &SAMPLED_TAIL
        } else {
            &TAIL_PARTS
        }
    }

    /// Runs of 256 logits.
    fn runs(&self) -> u64 {
        (self.shape.vocab as u64).div_ceil(RUN4)
    }

    fn h(&self) -> u64 {
        self.shape.width as u64
    }
    fn nh(&self) -> u64 {
        self.shape.heads as u64
    }
    fn hd(&self) -> u64 {
        self.shape.head_dim as u64
    }
    fn f(&self) -> u64 {
        self.shape.ffn as u64
    }
    fn a_slot(&self) -> u64 {
        (8 * self.hd()).next_power_of_two()
    }
    fn ctx_slot(&self) -> u64 {
        (2 * self.hd()).next_power_of_two()
    }

    /// Slots of `part` in a block seeing `n` positions (layer 0's: `first`).
    fn count(&self, part: Part, n: u64, first: bool) -> u64 {
        let (h, f, nh) = (self.h(), self.f(), self.nh());
        match part {
            Part::Emb => {
                if first {
                    h
                } else {
                    0
                }
            }
            Part::Ns1 | Part::Ns2 | Part::Nsf | Part::Tok => 1,
            Part::N1 | Part::N2 | Part::Nf | Part::R1 | Part::R2 => h,
            Part::Rot => (self.shape.qw() + self.shape.kw()) / 2,
            Part::V => self.shape.kw(),
            Part::S | Part::E | Part::A => nh * n,
            Part::Mx => nh * n.div_ceil(RUN8),
            Part::Sm => nh * n.div_ceil(RUN4),
            Part::Ctx => nh,
            Part::P | Part::Hv => f,
            Part::Ks => f.div_ceil(RUN8),
            Part::Lg => self.shape.vocab as u64,
            Part::Gs => (self.shape.vocab as u64).div_ceil(RUN4),
            Part::Cs => (self.g as u64).div_ceil(RUN4),
            Part::Cnt => 1,
            Part::Wt => self.shape.vocab as u64,
            Part::Sa | Part::Sc | Part::Sd => SEARCH_PASSES * self.runs(),
            Part::Sw => self.runs(),
        }
    }

    /// Bytes of one slot of `part`.
    pub fn width(&self, part: Part) -> u64 {
        match part {
            Part::Emb
            | Part::R1
            | Part::R2
            | Part::Lg
            | Part::Tok
            | Part::Rot
            | Part::E
            | Part::Cnt
            | Part::Wt => 4,
            Part::Sa | Part::Sw | Part::Sc | Part::Sd => 32,
            Part::Ns1 | Part::Ns2 | Part::Nsf => 16,
            Part::N1 | Part::N2 | Part::Nf | Part::V | Part::Hv => 2,
            Part::S | Part::Mx | Part::Sm | Part::P | Part::Ks | Part::Gs | Part::Cs => 8,
            Part::A => self.a_slot(),
            Part::Ctx => self.ctx_slot(),
        }
    }

    /// Bytes from one head's row of scores (`S`) or weights (`E`) to the next.
    fn row_stride(&self, part: Part, n: u64) -> u64 {
        up(self.width(part) * n, LEAF)
    }

    /// Offset of slot `i` inside its part.
    fn slot_in(&self, part: Part, n: u64, i: u64) -> u64 {
        match part {
            Part::S | Part::E => (i / n) * self.row_stride(part, n) + (i % n) * self.width(part),
            _ => i * self.width(part),
        }
    }

    /// Bytes of `part` (whole leaves).
    fn part_bytes(&self, part: Part, n: u64, first: bool) -> u64 {
        match part {
            Part::S | Part::E => self.nh() * self.row_stride(part, n),
            _ => up(self.count(part, n, first) * self.width(part), LEAF),
        }
    }

    fn block_bytes(&self, n: u64, first: bool) -> u64 {
        BLOCK_PARTS
            .iter()
            .map(|&p| self.part_bytes(p, n, first))
            .sum()
    }

    fn tail_bytes(&self) -> u64 {
        self.tail_parts()
            .iter()
            .map(|&p| self.part_bytes(p, 0, false))
            .sum()
    }

    /// Bytes of the memory.
    pub fn len(&self) -> u64 {
        (self.t as u64 * self.shape.layers as u64 + 1) << self.region_log2
    }

    /// Whether the memory is empty (never).
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Depth of the memory's tree.
    pub fn depth(&self) -> u32 {
        self.len()
            .div_ceil(LEAF)
            .next_power_of_two()
            .trailing_zeros()
    }

    /// Where block B(q, l)'s region starts (the tail's at q = T).
    pub fn region_at(&self, q: u64, l: u64) -> u64 {
        (q * self.shape.layers as u64 + l) << self.region_log2
    }

    /// Where `part` of block B(q, l) starts (of the tail, q = T).
    pub fn part_at(&self, q: u64, l: u64, part: Part) -> u64 {
        let tail = q == self.t as u64;
        let (n, first) = (q + 1, l == 0);
        let parts: &[Part] = if tail {
            self.tail_parts()
        } else {
            &BLOCK_PARTS
        };
        self.region_at(q, l)
            + parts
                .iter()
                .take_while(|&&p| p != part)
                .map(|&p| self.part_bytes(p, n, first))
                .sum::<u64>()
    }

    /// Steps of a block seeing `n` positions, but its embedding.
    fn base(&self, n: u64) -> u64 {
        BLOCK_PARTS[1..]
            .iter()
            .map(|&p| self.count(p, n, false))
            .sum()
    }

    /// `Σ_{n=1}^{q} base(n)`, in closed form.
    fn base_sum(&self, q: u64) -> u64 {
        let nh = self.nh();
        let c0 = self.base(1) - 3 * nh - 2 * nh;
        q * c0 + 3 * nh * q * (q + 1) / 2 + nh * ceil_sum(q, RUN8) + nh * ceil_sum(q, RUN4)
    }

    /// Steps before block B(q, l).
    fn before(&self, q: u64, l: u64) -> u64 {
        let lay = self.shape.layers as u64;
        let mut s = lay * self.base_sum(q) + q * self.h();
        if l > 0 {
            s += self.h() + self.base(q + 1) + (l - 1) * self.base(q + 1);
        }
        s
    }

    fn tail_steps(&self) -> u64 {
        self.tail_parts()
            .iter()
            .map(|&p| self.count(p, 0, false))
            .sum()
    }

    /// Steps of the trace.
    pub fn steps(&self) -> u64 {
        self.before(self.t as u64, 0) + self.tail_steps()
    }

    /// The step that writes the token.
    pub fn token_step(&self) -> u64 {
        self.steps()
    }

    /// What step `s` (1 ..= [`steps`](Self::steps)) computes; `None` outside.
    pub fn step(&self, s: u64) -> Option<Step> {
        if s == 0 || s > self.steps() {
            return None;
        }
        let i = s - 1;
        let t = self.t as u64;
        let (q, l, mut o, parts, n, first): (u64, u64, u64, &[Part], u64, bool) =
            if i >= self.before(t, 0) {
                (t, 0, i - self.before(t, 0), self.tail_parts(), 0, false)
            } else {
                // the last position whose blocks start at or before i
                let (mut lo, mut hi) = (0u64, t);
                while hi - lo > 1 {
                    let mid = (lo + hi) / 2;
                    if self.before(mid, 0) <= i {
                        lo = mid;
                    } else {
                        hi = mid;
                    }
                }
                let q = lo;
                let o = i - self.before(q, 0);
                let first_len = self.h() + self.base(q + 1);
                if o < first_len {
                    (q, 0, o, &BLOCK_PARTS, q + 1, true)
                } else {
                    let b = self.base(q + 1);
                    let r = o - first_len;
                    (q, 1 + r / b, r % b, &BLOCK_PARTS, q + 1, false)
                }
            };
        for &p in parts {
            let c = self.count(p, n, first);
            if o < c {
                return Some(Step {
                    q: q as u32,
                    l: l as u32,
                    part: p,
                    i: o as u32,
                });
            }
            o -= c;
        }
        None
    }

    /// Offset and width of step `s`'s slot.
    pub fn slot(&self, s: u64) -> (u64, usize) {
        match self.step(s) {
            Some(st) => (self.slot_at(st), self.width(st.part) as usize),
            None => (0, 0),
        }
    }

    /// Where step `st`'s slot lies.
    pub fn slot_at(&self, st: Step) -> u64 {
        let (q, l) = (st.q as u64, st.l as u64);
        self.part_at(q, l, st.part) + self.slot_in(st.part, q + 1, st.i as u64)
    }

    /// Where the token's slot lies.
    pub fn token_at(&self) -> u64 {
        self.slot(self.token_step()).0
    }

    fn at(&self, q: u64, l: u64, part: Part, i: u64) -> u64 {
        self.part_at(q, l, part) + self.slot_in(part, q + 1, i)
    }

    /// Where the residual row entering block B(q, l) lies (H `i32`).
    fn x_at(&self, q: u64, l: u64) -> u64 {
        if l == 0 {
            self.part_at(q, 0, Part::Emb)
        } else {
            self.part_at(q, l - 1, Part::R2)
        }
    }

    /// The sampling rule's first `len` bytes: temperature, top-k, top-p, 0, seed.
    fn rule(&self, len: u64) -> Read {
        Read {
            source: Source::Batch,
            at: self.rule_at,
            len,
        }
    }

    fn trace(at: u64, len: u64) -> Read {
        Read {
            source: Source::Trace,
            at,
            len,
        }
    }
    fn model(at: u64, len: u64) -> Read {
        Read {
            source: Source::Model,
            at,
            len,
        }
    }

    /// The reads of step `st` that `got` (the bytes of the earlier ones, in order) determines:
    /// all of them once `got` holds every read before a dependent one.
    fn plan(&self, st: Step, got: &[u8]) -> Result<([Read; 5], usize), FeedError> {
        let sh = &self.shape;
        let (q, l, i) = (st.q as u64, st.l as u64, st.i as u64);
        let (h, hd, nh, f) = (self.h(), self.hd(), self.nh(), self.f());
        let n = q + 1;
        let grp = nh / sh.kv_heads as u64;
        let mut p = Plan {
            r: [Self::trace(0, 0); 5],
            k: 0,
        };
        let row = |d: Dense| Shape::row_len(sh.dims(d).0);
        match st.part {
            Part::Emb => {
                let id = if q < self.prompt as u64 {
                    Read {
                        source: Source::Batch,
                        at: self.batch_row + 4 * (1 + q),
                        len: 4,
                    }
                } else {
                    Read {
                        source: Source::Result,
                        at: self.result_row + 4 * (1 + q - self.prompt as u64),
                        len: 4,
                    }
                };
                p.push(id);
                if got.len() >= 4 {
                    let t = u32_at(got, 0);
                    if t >= sh.vocab {
                        return Err(FeedError::BadModel);
                    }
                    let at = sh.token_at(t as u64);
                    p.push(Self::model(at, RQ_LEN));
                    p.push(Self::model(
                        at + 2 * RQ_LEN + Q8_BLOCK_LEN * (i / BLOCK as u64),
                        Q8_BLOCK_LEN,
                    ));
                }
            }
            Part::Ns1 | Part::Ns2 | Part::Nsf => {
                let x = match st.part {
                    Part::Ns1 => self.x_at(q, l),
                    Part::Ns2 => self.part_at(q, l, Part::R1),
                    _ => self.part_at(self.t as u64 - 1, sh.layers as u64 - 1, Part::R2),
                };
                p.push(Self::trace(x, 4 * h));
            }
            Part::N1 | Part::N2 | Part::Nf => {
                let (x, stats, gain) = match st.part {
                    Part::N1 => (
                        self.x_at(q, l),
                        self.part_at(q, l, Part::Ns1),
                        sh.ln_at(l, false, i),
                    ),
                    Part::N2 => (
                        self.part_at(q, l, Part::R1),
                        self.part_at(q, l, Part::Ns2),
                        sh.ln_at(l, true, i),
                    ),
                    _ => (
                        self.part_at(self.t as u64 - 1, sh.layers as u64 - 1, Part::R2),
                        self.part_at(q, 0, Part::Nsf),
                        sh.final_at(i),
                    ),
                };
                p.push(Self::trace(x + 4 * i, 4));
                p.push(Self::trace(stats, 16));
                p.push(Self::model(gain, RQ_LEN));
            }
            Part::Rot => {
                let qp = sh.qw() / 2;
                let (d, o) = if i < qp {
                    (Dense::Q, 2 * i)
                } else {
                    (Dense::K, 2 * (i - qp))
                };
                p.push(Self::trace(self.part_at(q, l, Part::N1), 2 * h));
                p.push(Self::model(sh.row_at(l, d, o), 2 * row(d)));
                p.push(Self::model(sh.rope_at(q) + 4 * ((o / 2) % (hd / 2)), 4));
            }
            Part::V => {
                p.push(Self::trace(self.part_at(q, l, Part::N1), 2 * h));
                p.push(Self::model(sh.row_at(l, Dense::V, i), row(Dense::V)));
            }
            Part::S => {
                let (hh, j) = (i / n, i % n);
                let rot = self.part_at(q, l, Part::Rot);
                p.push(Self::trace(rot + 2 * hd * hh, 2 * hd));
                let krot = self.part_at(j, l, Part::Rot) + 2 * sh.qw() + 2 * hd * (hh / grp);
                p.push(Self::trace(krot, 2 * hd));
            }
            Part::Mx | Part::Sm | Part::Ks | Part::Gs => {
                let (run, per) = match st.part {
                    Part::Mx | Part::Ks => (RUN8, 8),
                    _ => (RUN4, 4),
                };
                let (total, src, hh_runs) = match st.part {
                    Part::Mx => (n, Part::S, n.div_ceil(run)),
                    Part::Sm => (n, Part::E, n.div_ceil(run)),
                    Part::Ks => (f, Part::P, f.div_ceil(run)),
                    _ => (sh.vocab as u64, Part::Lg, (sh.vocab as u64).div_ceil(run)),
                };
                let (hh, rr) = (i / hh_runs, i % hh_runs);
                if rr > 0 {
                    p.push(Self::trace(self.at(q, l, st.part, i - 1), 8));
                }
                let first = rr * run;
                let len = (total - first).min(run);
                p.push(Self::trace(
                    self.at(q, l, src, hh * total + first),
                    per * len,
                ));
            }
            Part::E => {
                let hh = i / n;
                p.push(Self::trace(self.at(q, l, Part::S, i), 8));
                let runs = n.div_ceil(RUN8);
                p.push(Self::trace(
                    self.at(q, l, Part::Mx, hh * runs + runs - 1),
                    8,
                ));
                p.push(Self::model(sh.scale_at(l, false), RQ_LEN));
                if p.held(got) {
                    let (s, top) = (i64_at(got, 0), i64_at(got, 8));
                    let (m, sft) = (i32_at(got, 16), i32_at(got, 20));
                    if !rq_ok(m, sft, 1) {
                        return Err(FeedError::BadModel);
                    }
                    let d = top.saturating_sub(s).clamp(0, (1 << 32) - 1);
                    let t = rq(d, m, sft, 0, EXP_LEN as i64 - 1) as u64;
                    p.push(Self::model(sh.exp_at(t), 4));
                }
            }
            Part::A => {
                let (hh, j) = (i / n, i % n);
                if j > 0 {
                    p.push(Self::trace(self.at(q, l, Part::A, i - 1), 8 * hd));
                }
                p.push(Self::trace(self.at(q, l, Part::E, i), 4));
                let v = self.part_at(j, l, Part::V) + 2 * hd * (hh / grp);
                p.push(Self::trace(v, 2 * hd));
            }
            Part::Ctx => {
                p.push(Self::trace(self.at(q, l, Part::A, i * n + n - 1), 8 * hd));
                let runs = n.div_ceil(RUN4);
                p.push(Self::trace(self.at(q, l, Part::Sm, i * runs + runs - 1), 8));
            }
            Part::R1 => {
                p.push(Self::trace(self.part_at(q, l, Part::Ctx), 2 * sh.qw()));
                p.push(Self::model(sh.row_at(l, Dense::O, i), row(Dense::O)));
                p.push(Self::trace(self.x_at(q, l) + 4 * i, 4));
            }
            Part::P => {
                let y = self.part_at(q, l, Part::N2);
                p.push(Self::trace(y, 2 * h));
                p.push(Self::model(sh.row_at(l, Dense::Gate, i), row(Dense::Gate)));
                p.push(Self::model(sh.row_at(l, Dense::Up, i), row(Dense::Up)));
                p.push(Self::model(sh.scale_at(l, true), RQ_LEN));
                if p.held(got) {
                    let (y, gr) = (&got[..2 * h as usize], &got[2 * h as usize..]);
                    let g = dense_out(gr, y, h, 1, Y_MAX)?;
                    let at = (2 * h + 2 * row(Dense::Gate)) as usize;
                    let (m, sft) = (i32_at(got, at), i32_at(got, at + 4));
                    if !rq_ok(m, sft, 1) {
                        return Err(FeedError::BadModel);
                    }
                    let half = SIG_LEN as i64 / 2;
                    let idx = rq(g, m, sft, -half, half - 1) + half;
                    p.push(Self::model(sh.sig_at(idx as u64), 4));
                }
            }
            Part::Hv => {
                p.push(Self::trace(self.at(q, l, Part::P, i), 8));
                p.push(Self::trace(
                    self.at(q, l, Part::Ks, f.div_ceil(RUN8) - 1),
                    8,
                ));
            }
            Part::R2 => {
                p.push(Self::trace(self.part_at(q, l, Part::Hv), 2 * f));
                p.push(Self::model(sh.row_at(l, Dense::Down, i), row(Dense::Down)));
                p.push(Self::trace(
                    self.at(q, l, Part::Ks, f.div_ceil(RUN8) - 1),
                    8,
                ));
                p.push(Self::trace(self.part_at(q, l, Part::R1) + 4 * i, 4));
            }
            Part::Lg => {
                p.push(Self::trace(self.part_at(q, 0, Part::Nf), 2 * h));
                p.push(Self::model(sh.token_at(i), sh.token_len()));
            }
            Part::Cs => {
                if i > 0 {
                    p.push(Self::trace(self.at(q, 0, Part::Cs, i - 1), 8));
                }
                p.push(Read {
                    source: Source::Result,
                    at: self.result_row,
                    len: 4,
                });
                let first = i * RUN4;
                p.push(Read {
                    source: Source::Result,
                    at: self.result_row + 4 + 4 * first,
                    len: 4 * (self.g as u64 - first).min(RUN4),
                });
            }
            Part::Cnt => {
                let runs = (self.g as u64).div_ceil(RUN4);
                p.push(Self::trace(self.at(q, 0, Part::Cs, runs - 1), 8));
            }
            Part::Wt => {
                p.push(Self::trace(self.at(q, 0, Part::Lg, i), 4));
                p.push(Self::trace(self.at(q, 0, Part::Gs, self.runs() - 1), 8));
                p.push(self.rule(4));
                if p.held(got) {
                    let (l, top, tau) = (i32_at(got, 0), i32_at(got, 4), u32_at(got, 12));
                    p.push(Self::model(sh.exp_at(weight_index(top, l, tau)), 4));
                }
            }
            Part::Sa | Part::Sw | Part::Sc | Part::Sd => {
                let (runs, r) = (self.runs(), i % self.runs());
                let last = |part: Part| {
                    let n = self.count(part, 0, false);
                    Self::trace(self.at(q, 0, part, n - 1), 32)
                };
                match st.part {
                    Part::Sw if i == 0 => p.push(last(Part::Sa)),
                    _ if i > 0 => p.push(Self::trace(self.at(q, 0, st.part, i - 1), 32)),
                    _ => {}
                }
                match st.part {
                    Part::Sc => p.push(last(Part::Sw)),
                    Part::Sd => p.push(last(Part::Sc)),
                    _ => {}
                }
                let first = r * RUN4;
                let len = (sh.vocab as u64 - first).min(RUN4);
                p.push(Self::trace(self.at(q, 0, Part::Lg, first), 4 * len));
                if st.part != Part::Sa {
                    p.push(Self::trace(self.at(q, 0, Part::Wt, first), 4 * len));
                }
                match st.part {
                    Part::Sa | Part::Sc => p.push(self.rule(12)),
                    Part::Sd => p.push(self.rule(24)),
                    _ => {}
                }
                let _ = runs;
            }
            Part::Tok if self.sampled => {
                let n = self.count(Part::Sd, 0, false);
                p.push(Self::trace(self.at(q, 0, Part::Sd, n - 1), 32));
                p.push(Read {
                    source: Source::Result,
                    at: self.result_row,
                    len: 4,
                });
            }
            Part::Tok => {
                let runs = (sh.vocab as u64).div_ceil(RUN4);
                p.push(Self::trace(self.at(q, 0, Part::Gs, runs - 1), 8));
                // the completion's committed count: a token past it is padding, zero
                p.push(Read {
                    source: Source::Result,
                    at: self.result_row,
                    len: 4,
                });
            }
        }
        Ok((p.r, p.k))
    }

    /// What step `st` reads next once it holds `got` (the bytes of its earlier reads, in
    /// order): the rest of the read `got` ends in, or the next; `None` once it holds all.
    pub fn next_read(&self, st: Step, got: &[u8]) -> Result<Option<Read>, FeedError> {
        let (r, k) = self.plan(st, got)?;
        let mut start = 0u64;
        for rd in &r[..k] {
            let have = got.len() as u64;
            if have < start + rd.len {
                let done = have - start;
                return Ok(Some(Read {
                    source: rd.source,
                    at: rd.at + done,
                    len: rd.len - done,
                }));
            }
            start += rd.len;
        }
        if start != got.len() as u64 {
            return Err(FeedError::BadModel);
        }
        Ok(None)
    }

    /// Bytes a step holds at most: the largest sum of its reads' lengths.
    pub fn most_held(&self) -> u64 {
        let sh = &self.shape;
        let (h, f, hd) = (self.h(), self.f(), self.hd());
        let row = |d: Dense| Shape::row_len(sh.dims(d).0);
        [
            4 * h,
            2 * h + 2 * row(Dense::Q),
            2 * h + 2 * row(Dense::K),
            2 * sh.qw() + row(Dense::O) + 4,
            2 * h + 2 * row(Dense::Gate) + RQ_LEN + 4,
            2 * f + row(Dense::Down) + 12,
            2 * h + sh.token_len(),
            8 * hd + 4 + 2 * hd,
            8 + LEAF,
            // a sampled pick's search step: two states, a run of logits and of weights, the rule
            32 + 32 + 2 * LEAF + 24,
        ]
        .into_iter()
        .max()
        .unwrap_or(0)
    }

    /// The value step `st` writes, from `got`: every read's bytes, in order
    /// ([`next_read`](Self::next_read) is `None`); `input` is the job's manifest hash (a
    /// sampled pick's draw is keyed by it). A field that breaks the format's rules (a
    /// requantization or table entry out of bounds, an accumulator that could pass 2^53) is
    /// [`FeedError::BadModel`].
    pub fn value(&self, st: Step, got: &[u8], input: &[u8; 32]) -> Result<Vec<u8>, FeedError> {
        let sh = &self.shape;
        let (h, hd, f) = (self.h(), self.hd(), self.f());
        let hu = h as usize;
        let w = self.width(st.part) as usize;
        let mut out = vec![0u8; w];
        let row = |d: Dense| Shape::row_len(sh.dims(d).0) as usize;
        match st.part {
            Part::Emb => {
                let (m, s) = (i32_at(got, 4), i32_at(got, 8));
                if !rq_ok(m, s, 1) {
                    return Err(FeedError::BadModel);
                }
                let d = i64::from(i32_at(got, 12));
                let v = got[16 + st.i as usize % BLOCK] as i8;
                let x = rq(d * i64::from(v), m, s, -RES_MAX, RES_MAX);
                out.copy_from_slice(&(x as i32).to_le_bytes());
            }
            Part::Ns1 | Part::Ns2 | Part::Nsf => {
                let (shift, r) = norm_stats(got, hu, sh.eps);
                out[..4].copy_from_slice(&shift.to_le_bytes());
                out[8..].copy_from_slice(&r.to_le_bytes());
            }
            Part::N1 | Part::N2 | Part::Nf => {
                let x = i64::from(i32_at(got, 0));
                let shift = u32_at(got, 4).min(63);
                let r = i64_at(got, 12).max(1);
                let (m, s) = (i32_at(got, 20), i32_at(got, 24));
                if !rq_ok(m, s, 1) {
                    return Err(FeedError::BadModel);
                }
                let u = x >> shift;
                let y = rq((u << 30).div_euclid(r), m, s, -Y_MAX, Y_MAX);
                out.copy_from_slice(&(y as i16).to_le_bytes());
            }
            Part::Rot => {
                let (y, recs) = got.split_at(2 * hu);
                let d = if (st.i as u64) < sh.qw() / 2 {
                    Dense::Q
                } else {
                    Dense::K
                };
                let rl = row(d);
                let a = dense_out(&recs[..rl], y, h, 1, QK_MAX)?;
                let b = dense_out(&recs[rl..2 * rl], y, h, 1, QK_MAX)?;
                let (c, s) = (i16_at(got, got.len() - 4), i16_at(got, got.len() - 2));
                let half = 1i64 << (FRAC - 1);
                let ra = (a * c - b * s + half) >> FRAC;
                let rb = (a * s + b * c + half) >> FRAC;
                out[..2].copy_from_slice(&(ra as i16).to_le_bytes());
                out[2..].copy_from_slice(&(rb as i16).to_le_bytes());
            }
            Part::V => {
                let (y, rec) = got.split_at(2 * hu);
                let v = dense_out(rec, y, h, 1, Y_MAX)?;
                out.copy_from_slice(&(v as i16).to_le_bytes());
            }
            Part::S => {
                let n = hd as usize;
                let s: i64 = (0..n)
                    .map(|d| i16_at(got, 2 * d) * i16_at(got, 2 * n + 2 * d))
                    .sum();
                out.copy_from_slice(&s.to_le_bytes());
            }
            Part::Mx | Part::Sm | Part::Ks | Part::Gs => {
                let n = (st.q as u64 + 1).max(1);
                let per_head = match st.part {
                    Part::Mx => n.div_ceil(RUN8),
                    Part::Sm => n.div_ceil(RUN4),
                    Part::Ks => f.div_ceil(RUN8),
                    _ => (sh.vocab as u64).div_ceil(RUN4),
                };
                let rr = st.i as u64 % per_head;
                let (prev, run) = if rr > 0 {
                    (Some(&got[..8]), &got[8..])
                } else {
                    (None, got)
                };
                match st.part {
                    Part::Mx => {
                        let mut top = prev.map_or(i64::MIN, |p| i64_at(p, 0));
                        for c in run.chunks_exact(8) {
                            top = top.max(i64_at(c, 0));
                        }
                        out.copy_from_slice(&top.to_le_bytes());
                    }
                    Part::Sm => {
                        let mut sum = prev.map_or(0, |p| i64_at(p, 0));
                        for c in run.chunks_exact(4) {
                            sum = sum.wrapping_add(i32_at(c, 0).into());
                        }
                        out.copy_from_slice(&sum.to_le_bytes());
                    }
                    Part::Ks => {
                        let mut top = prev.map_or(0, |p| i64_at(p, 0) as u64);
                        for c in run.chunks_exact(8) {
                            top = top.max(i64_at(c, 0).unsigned_abs());
                        }
                        out.copy_from_slice(&top.to_le_bytes());
                    }
                    _ => {
                        let (mut best, mut at) = match prev {
                            Some(p) => (i32_at(p, 0), u32_at(p, 4)),
                            None => (i32::MIN, 0),
                        };
                        let first = (rr * RUN4) as u32;
                        for (k, c) in run.chunks_exact(4).enumerate() {
                            let v = i32_at(c, 0);
                            if v > best || (prev.is_none() && k == 0) {
                                best = v;
                                at = first + k as u32;
                            }
                        }
                        out[..4].copy_from_slice(&best.to_le_bytes());
                        out[4..].copy_from_slice(&at.to_le_bytes());
                    }
                }
            }
            Part::E => {
                let e = i32_at(got, 24);
                let first = {
                    let (s, top) = (i64_at(got, 0), i64_at(got, 8));
                    let (m, sft) = (i32_at(got, 16), i32_at(got, 20));
                    let d = top.saturating_sub(s).clamp(0, (1 << 32) - 1);
                    rq(d, m, sft, 0, EXP_LEN as i64 - 1) == 0
                };
                if !(0..=EXP_MAX).contains(&e) || (first && e < 1) {
                    return Err(FeedError::BadModel);
                }
                out.copy_from_slice(&e.to_le_bytes());
            }
            Part::A => {
                let n = st.q as u64 + 1;
                let j = st.i as u64 % n;
                let d = hd as usize;
                let (prev, rest) = if j > 0 {
                    got.split_at(8 * d)
                } else {
                    (&[][..], got)
                };
                let e = i64::from(i32_at(rest, 0));
                for c in 0..d {
                    let p = if j > 0 { i64_at(prev, 8 * c) } else { 0 };
                    let v = p.wrapping_add(e.wrapping_mul(i16_at(rest, 4 + 2 * c)));
                    out[8 * c..8 * c + 8].copy_from_slice(&v.to_le_bytes());
                }
            }
            Part::Ctx => {
                let d = hd as usize;
                let den = i64_at(got, 8 * d).max(1);
                for c in 0..d {
                    let num = i64_at(got, 8 * c);
                    let v = (2i128 * i128::from(num) + i128::from(den))
                        .div_euclid(2 * i128::from(den))
                        .clamp(-(Y_MAX as i128), Y_MAX as i128);
                    out[2 * c..2 * c + 2].copy_from_slice(&(v as i16).to_le_bytes());
                }
            }
            Part::R1 => {
                let qw = 2 * sh.qw() as usize;
                let o = dense_out(
                    &got[qw..qw + row(Dense::O)],
                    &got[..qw],
                    sh.qw(),
                    1,
                    RES_MAX,
                )?;
                let x = i64::from(i32_at(got, qw + row(Dense::O)));
                out.copy_from_slice(&((x + o).clamp(-RES_MAX, RES_MAX) as i32).to_le_bytes());
            }
            Part::P => {
                let y = &got[..2 * hu];
                let gr = &got[2 * hu..2 * hu + row(Dense::Gate)];
                let ur = &got[2 * hu + row(Dense::Gate)..2 * hu + 2 * row(Dense::Gate)];
                let g = dense_out(gr, y, h, 1, Y_MAX)?;
                let u = dense_out(ur, y, h, 1, Y_MAX)?;
                let sig = i32_at(got, got.len() - 4);
                if !(0..=1 << 15).contains(&sig) {
                    return Err(FeedError::BadModel);
                }
                let p = g * i64::from(sig) * u;
                out.copy_from_slice(&p.to_le_bytes());
            }
            Part::Hv => {
                let p = i128::from(i64_at(got, 0));
                let kappa = kappa(i64_at(got, 8) as u64);
                let r = if kappa > 0 {
                    (p + (1i128 << (kappa - 1))) >> kappa
                } else {
                    p
                };
                let v = r.clamp(-(Y_MAX as i128), Y_MAX as i128) as i16;
                out.copy_from_slice(&v.to_le_bytes());
            }
            Part::R2 => {
                let fu = 2 * f as usize;
                let rl = row(Dense::Down);
                let rec = &got[fu..fu + rl];
                let kappa = kappa(i64_at(got, fu + rl) as u64);
                let (m, s) = (i32_at(rec, 0), i32_at(rec, 4));
                if !rq_ok(m, s, 31) || kappa > 30 {
                    return Err(FeedError::BadModel);
                }
                let acc = dense_acc(rec, &got[..fu], f)?;
                let v = rq(acc, m, s - kappa as i32, -RES_MAX, RES_MAX);
                let x = i64::from(i32_at(got, fu + rl + 8));
                out.copy_from_slice(&((x + v).clamp(-RES_MAX, RES_MAX) as i32).to_le_bytes());
            }
            Part::Lg => {
                let (y, rec) = got.split_at(2 * hu);
                let (m, s) = (i32_at(rec, 8), i32_at(rec, 12));
                if !rq_ok(m, s, 1) {
                    return Err(FeedError::BadModel);
                }
                let mut acc = 0i128;
                let mut bound = 0i128;
                for b in 0..hu / BLOCK {
                    let blk = &rec[2 * RQ_LEN as usize + Q8_BLOCK_LEN as usize * b..];
                    let d = i128::from(i32_at(blk, 0));
                    for c in 0..BLOCK {
                        let v = i128::from(blk[4 + c] as i8);
                        acc += d * v * i128::from(i16_at(y, 2 * (b * BLOCK + c)));
                        bound += (d * v).abs();
                    }
                }
                if bound * i128::from(Y_MAX) > ACC_MAX {
                    return Err(FeedError::BadModel);
                }
                let v = rq(acc as i64, m, s, -RES_MAX, RES_MAX);
                out.copy_from_slice(&(v as i32).to_le_bytes());
            }
            Part::Tok if self.sampled => {
                // the drawn candidate's rank key, its id in the low bits
                let key = i64_at(got, 0) as u64;
                let id = ((1u64 << KEY_ID_BITS) - 1 - (key & ((1 << KEY_ID_BITS) - 1))) as u32;
                let j = self.t - self.prompt;
                if j < u32_at(got, 32) {
                    out.copy_from_slice(&id.to_le_bytes());
                }
            }
            Part::Tok => {
                let j = self.t - self.prompt;
                let count = u32_at(got, 8);
                if j < count {
                    out.copy_from_slice(&got[4..8]);
                }
            }
            Part::Wt => {
                let e = i32_at(got, 16);
                let (top, l, tau) = (i32_at(got, 4), i32_at(got, 0), u32_at(got, 12));
                if !(0..=EXP_MAX).contains(&e) || (weight_index(top, l, tau) == 0 && e < 1) {
                    return Err(FeedError::BadModel);
                }
                out.copy_from_slice(&e.to_le_bytes());
            }
            Part::Sa | Part::Sw | Part::Sc | Part::Sd => {
                out.copy_from_slice(&self.search(st, got, input));
            }
            Part::Cs => {
                let (prev, rest) = if st.i > 0 {
                    got.split_at(8)
                } else {
                    (&[][..], got)
                };
                let (mut first, mut bad) = if st.i > 0 {
                    (u32_at(prev, 0), u32_at(prev, 4))
                } else {
                    (u32::MAX, 0)
                };
                let count = u32_at(rest, 0);
                for (k, w) in rest[4..].chunks_exact(4).enumerate() {
                    let idx = st.i * RUN4 as u32 + k as u32;
                    let t = u32_at(w, 0);
                    if first == u32::MAX && t == sh.eos {
                        first = idx;
                    }
                    if idx >= count && t != 0 {
                        bad = 1;
                    }
                }
                out[..4].copy_from_slice(&first.to_le_bytes());
                out[4..].copy_from_slice(&bad.to_le_bytes());
            }
            Part::Cnt => {
                let (first, bad) = (u32_at(got, 0), u32_at(got, 4));
                let left = sh.positions.saturating_sub(self.prompt).saturating_add(1);
                let n = if bad != 0 {
                    u32::MAX
                } else {
                    self.g.min(first.saturating_add(1)).min(left)
                };
                out.copy_from_slice(&n.to_le_bytes());
            }
        }
        Ok(out)
    }
}

impl super::Slots for Layout {
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

/// Whether this job's tokens are refereed by a game over a token's trace: a `Generate` whose
/// manifest names slices (the model a trace of which does not fit — heads wider than
/// [`MAX_HEAD_DIM`] or not a power of two, a step holding more than the work area, a memory
/// deeper than [`MAX_DEPTH`] — is refused at `dispute_layout`, `DisputeNotSupported`).
pub fn gameable(job: &JobSpec) -> bool {
    job.kind == JobKind::Generate && job.slices_len > 0
}

/// The most steps a token's trace of this job can have, from the job alone: a block's steps
/// are fewer than its layer's work units at the job's context, a position's embedding and the
/// tail's fewer than the logits' (`vocab · H`), so `(L + G) · work` bounds them all.
pub fn steps_bound(job: &JobSpec) -> u64 {
    (job.dims[1] as u64 + job.dims[2] as u64)
        .saturating_mul(job.work_per_row)
        .min(1 << 60)
}

/// Pieces one step's replay reads at most, the slot's leaf included: at most five reads of
/// `L_i` bytes, `Σ L_i ≤ WORK_LEN − LEAF` ([`fits`]), read `i` spanning at most
/// `⌈L_i / 1 024⌉ + 1 ≤ L_i / 1 024 + 2` pieces, so `(WORK_LEN − LEAF) / 1 024 + 2 · 5` in
/// all, and the slot's leaf.
pub fn step_pieces() -> u64 {
    ((WORK_LEN as u64 - LEAF) / LEAF) + 2 * 5 + 1
}

/// Transactions a piece of a `Generate` replay takes: a leaf and up to 32 siblings (three
/// writes), then its feed.
pub const PIECE_TRANSACTIONS: u64 = 4;

/// Whether a game can be played over this layout's trace: heads the trace lays out, a step's
/// reads and value within the work area, a memory within [`MAX_DEPTH`].
pub fn fits(lay: &Layout) -> bool {
    shape_fits(&lay.shape) && lay.most_held() + LEAF <= WORK_LEN as u64 && lay.depth() <= MAX_DEPTH
}

/// Bytes of an encoded [`Layout`] (in a dispute's state).
pub const LAYOUT_LEN: usize = 96;
const LAYOUT_MAGIC: u32 = u32::from_le_bytes(*b"CMdL");

impl Layout {
    /// Its bytes, with how far `dispute_layout` has read: 0 the header, 1 the prompt's count,
    /// 2 complete (the sampling rule is greedy).
    pub fn encode(&self, stage: u8) -> [u8; LAYOUT_LEN] {
        let s = &self.shape;
        let mut b = [0u8; LAYOUT_LEN];
        let words = core::iter::once(LAYOUT_MAGIC).chain(s.words()).chain([
            self.prompt,
            self.t,
            self.region_log2,
            stage as u32 | (self.sampled as u32) << 8,
        ]);
        for (i, w) in words.enumerate() {
            b[4 * i..4 * i + 4].copy_from_slice(&w.to_le_bytes());
        }
        b[56..64].copy_from_slice(&s.eps.to_le_bytes());
        b[64..72].copy_from_slice(&self.batch_row.to_le_bytes());
        b[72..80].copy_from_slice(&self.result_row.to_le_bytes());
        b[80..84].copy_from_slice(&self.g.to_le_bytes());
        b[84..88].copy_from_slice(&self.row.to_le_bytes());
        b[88..96].copy_from_slice(&self.rule_at.to_le_bytes());
        b
    }

    /// [`Layout::encode`] read back, with its stage; `None` for other bytes.
    pub fn decode(b: &[u8]) -> Option<(Layout, u8)> {
        if b.len() < LAYOUT_LEN || u32_at(b, 0) != LAYOUT_MAGIC {
            return None;
        }
        let w = |i: usize| u32_at(b, 4 * i);
        let shape = Shape::from_words(core::array::from_fn(|i| w(i + 1)), i64_at(b, 56));
        Some((
            Layout {
                shape,
                prompt: w(10),
                t: w(11),
                region_log2: w(12),
                batch_row: i64_at(b, 64) as u64,
                result_row: i64_at(b, 72) as u64,
                g: u32_at(b, 80),
                row: u32_at(b, 84),
                rule_at: i64_at(b, 88) as u64,
                sampled: w(13) >> 8 & 1 == 1,
            },
            w(13) as u8,
        ))
    }
}

/// The replay of one step (PROTOCOL §8.13): its reads in order, each piece (a memory leaf, a
/// chunk of a slice string or of the result) copied into the work area as far as the read
/// lies in it, then the slot's leaf, into which it writes the value
/// ([`Layout::value`] of what the work area holds). Resumable: [`REPLAY_LEN`] bytes kept
/// between transactions (the stage, the bytes held, the next read, which may depend on them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Replay {
    /// 0 not started, 1 reading, 2 the slot's leaf next, 3 complete.
    pub stage: u8,
    /// Bytes held in the work area.
    pub filled: u32,
    /// The next read (stage 1).
    pub read: Option<Read>,
}

impl Replay {
    /// The state's bytes.
    pub fn encode(&self) -> [u8; REPLAY_LEN] {
        let mut b = [0u8; REPLAY_LEN];
        b[0] = self.stage;
        b[4..8].copy_from_slice(&self.filled.to_le_bytes());
        if let Some(r) = self.read {
            b[1] = 1 + r.source.code();
            b[8..16].copy_from_slice(&r.at.to_le_bytes());
            b[16..24].copy_from_slice(&r.len.to_le_bytes());
        }
        b
    }

    /// [`Replay::encode`] read back.
    pub fn decode(b: &[u8; REPLAY_LEN]) -> Replay {
        let read = b[1]
            .checked_sub(1)
            .and_then(Source::from_code)
            .map(|source| Read {
                source,
                at: i64_at(b, 8) as u64,
                len: i64_at(b, 16) as u64,
            });
        Replay {
            stage: b[0],
            filled: u32_at(b, 4),
            read,
        }
    }

    fn current(&self, lay: &Layout, st: Step) -> Result<Option<Read>, FeedError> {
        match self.stage {
            0 => lay.next_read(st, &[]),
            1 => Ok(self.read),
            _ => Ok(None),
        }
    }

    /// The piece it needs next for step `s`, (source, chunk or leaf index); `None` once
    /// complete.
    pub fn next(&self, lay: &Layout, s: u64) -> Option<(Source, u64)> {
        let st = lay.step(s)?;
        match self.stage {
            0 | 1 => {
                let r = self.current(lay, st).ok()??;
                Some((r.source, r.at / LEAF))
            }
            2 => Some((Source::Trace, lay.slot(s).0 / LEAF)),
            _ => None,
        }
    }

    /// Whether it has read every input: its next piece is the slot's leaf.
    pub fn at_slot(&self) -> bool {
        self.stage == 2
    }

    /// Takes piece `index` of `source` (`bytes`, already proven). Once it takes the slot's own
    /// leaf it returns the [`Patch`] (the value in `work` after the bytes held) that makes it
    /// the leaf after the step; `None` while more is needed.
    #[allow(clippy::too_many_arguments)]
    pub fn take(
        &mut self,
        lay: &Layout,
        input: &[u8; 32],
        s: u64,
        source: Source,
        index: u64,
        bytes: &[u8],
        work: &mut [u8],
    ) -> Result<Option<Patch>, FeedError> {
        let want = self.next(lay, s).ok_or(FeedError::Complete)?;
        if want != (source, index) {
            return Err(FeedError::WrongChunk);
        }
        let st = lay.step(s).ok_or(FeedError::Complete)?;
        let filled = self.filled as usize;
        if self.stage == 2 {
            let (off, w) = lay.slot(s);
            if bytes.len() < LEAF_LEN || filled + w > work.len() {
                return Err(FeedError::BadModel);
            }
            let v = lay.value(st, &work[..filled], input)?;
            work[filled..filled + w].copy_from_slice(&v);
            self.stage = 3;
            return Ok(Some(Patch {
                at: (off % LEAF) as usize,
                width: w,
                value: [0; 4],
                work: Some(filled),
            }));
        }
        let r = self.current(lay, st)?.ok_or(FeedError::Complete)?;
        let start = index * LEAF;
        let end = (start + bytes.len() as u64).min(r.at + r.len);
        if end <= r.at || filled + (end - r.at) as usize > work.len() {
            return Err(FeedError::BadModel);
        }
        let n = (end - r.at) as usize;
        let from = (r.at - start) as usize;
        work[filled..filled + n].copy_from_slice(&bytes[from..from + n]);
        self.filled += n as u32;
        match lay.next_read(st, &work[..self.filled as usize])? {
            Some(next) => {
                self.stage = 1;
                self.read = Some(next);
            }
            None => {
                self.stage = 2;
                self.read = None;
            }
        }
        Ok(None)
    }
}

/// The exp table's index of a sampled candidate's weight: `min(⌊(ℓ_max − ℓ) · 4 / τ⌋, 16 383)`
/// (`τ` the temperature in Q8; at least 1).
fn weight_index(top: i32, l: i32, tau: u32) -> u64 {
    let t = (i128::from(top) - i128::from(l)).max(0) * 4 / i128::from(tau.max(1));
    t.min(EXP_LEN as i128 - 1) as u64
}

impl Layout {
    /// A sampled pick's search step (PROTOCOL §8.13): its state `lo, hi, acc, aux` after the
    /// step, from the state before (`got` in [`Layout::plan`]'s order).
    fn search(&self, st: Step, got: &[u8], input: &[u8; 32]) -> [u8; 32] {
        const TOP: u64 = 1 << 50;
        let (runs, i) = (self.runs(), st.i as u64);
        let (r, pass) = (i % runs, i / runs);
        let state = |o: usize| {
            (
                i64_at(got, o) as u64,
                i64_at(got, o + 8) as u64,
                i64_at(got, o + 16) as u64,
                i64_at(got, o + 24) as u64,
            )
        };
        let n = (self.shape.vocab as u64 - r * RUN4).min(RUN4) as usize;
        // the state before, then the reads each part adds
        let (before, at) = match st.part {
            Part::Sa | Part::Sc | Part::Sd if i == 0 => (None, 0),
            _ => (Some(state(0)), 32),
        };
        let (fixed, at) = match st.part {
            Part::Sc | Part::Sd => (Some(state(at)), at + 32),
            _ => (None, at),
        };
        let logits = &got[at..at + 4 * n];
        let weights = (st.part != Part::Sa).then(|| &got[at + 4 * n..at + 8 * n]);
        let rule = at + 4 * n * if st.part == Part::Sa { 1 } else { 2 };
        let key = |k: usize| rank_key(i32_at(logits, 4 * k), (r * RUN4) as u32 + k as u32);
        let weight = |k: usize| weights.map_or(0, |w| u64::from(u32_at(w, 4 * k)));
        // the state at the start of this step's pass
        let (mut lo, mut hi, mut acc, mut aux) = match (st.part, before) {
            (Part::Sw, Some(b)) if i == 0 => (b.0, 0, 0, 0),
            (Part::Sw, Some(b)) => b,
            (_, None) => match (st.part, fixed) {
                (Part::Sc, Some(f)) => (f.0, TOP, 0, f.2),
                (Part::Sd, Some(f)) => {
                    let seed = i64_at(got, rule + 16) as u64;
                    let d =
                        crate::slices::decoder::draw(input, seed, self.row, self.t - self.prompt);
                    (
                        f.0,
                        TOP,
                        0,
                        ((u128::from(d) * u128::from(f.3)) >> 64) as u64,
                    )
                }
                _ => (0, TOP, 0, 0),
            },
            (_, Some(b)) => b,
        };
        if st.part == Part::Sw {
            acc += (0..n).filter(|&k| key(k) >= lo).map(weight).sum::<u64>();
            return words([lo, hi, acc, aux]);
        }
        if r == 0 {
            acc = 0;
        }
        let mid = lo + (hi - lo) / 2;
        acc += (0..n)
            .filter(|&k| key(k) >= mid)
            .map(|k| if st.part == Part::Sa { 1 } else { weight(k) })
            .sum::<u64>();
        if r + 1 == runs && hi - lo > 1 {
            let vocab = u64::from(self.shape.vocab);
            let holds = match st.part {
                Part::Sa => {
                    let k = u64::from(u32_at(got, rule + 4));
                    acc >= if k == 0 || k >= vocab { vocab } else { k }
                }
                Part::Sc => {
                    let (p, w) = (
                        u128::from(u32_at(got, rule + 8)),
                        u128::from(fixed.map_or(0, |f| f.2)),
                    );
                    (u128::from(acc) << 16) >= p * w
                }
                _ => acc > aux,
            };
            if holds {
                lo = mid;
                if st.part == Part::Sc {
                    aux = acc;
                }
            } else {
                hi = mid;
            }
        }
        let _ = pass;
        words([lo, hi, acc, aux])
    }
}

fn words(w: [u64; 4]) -> [u8; 32] {
    let mut b = [0u8; 32];
    for (i, v) in w.iter().enumerate() {
        b[8 * i..8 * i + 8].copy_from_slice(&v.to_le_bytes());
    }
    b
}

/// κ of a row whose largest `|p|` is `top`: its bits over 15.
fn kappa(top: u64) -> u32 {
    (64 - top.leading_zeros()).saturating_sub(15)
}

/// RMSNorm's statistics of a row of `h` LE `i32` (PROTOCOL §5, Generate): the shift and the
/// root `r`.
fn norm_stats(x: &[u8], h: usize, eps: i64) -> (u32, i64) {
    let vals = (0..h).map(|c| i64::from(i32_at(x, 4 * c)));
    let top = vals.clone().map(|v| v.unsigned_abs()).max().unwrap_or(0);
    let sh = (64 - top.leading_zeros()).saturating_sub(26);
    let ss: u128 = vals
        .map(|v| ((v >> sh).unsigned_abs() as u128).pow(2))
        .sum();
    let ms = ss / h as u128 + (eps >> (2 * sh)) as u128;
    let r = (ms << 32).isqrt().max(1) as i64;
    (sh, r)
}

/// `Σ_j W[o][j] · y[j]` of one dense row's record (`(m, s)`, then its blocks) and an input row
/// of `inp` LE `i16`, the row's accumulator bound checked (`32 767 · Σ|W| ≤ 2^53`).
fn dense_acc(rec: &[u8], y: &[u8], inp: u64) -> Result<i64, FeedError> {
    let mut acc = 0i128;
    let mut bound = 0i128;
    for b in 0..(inp as usize / BLOCK) {
        let blk = &rec[RQ_LEN as usize + Q4_BLOCK_LEN as usize * b..];
        let (d, mn) = (i64::from(i32_at(blk, 0)), i64::from(i32_at(blk, 4)));
        let (mut qx, mut sx) = (0i64, 0i64);
        for k in 0..BLOCK {
            let nib = blk[8 + k % 16];
            let q = i64::from(if k < 16 { nib & 15 } else { nib >> 4 });
            let x = i16_at(y, 2 * (b * BLOCK + k));
            qx += q * x;
            sx += x;
            bound += i128::from((d * q + mn).abs());
        }
        acc += i128::from(d) * i128::from(qx) + i128::from(mn) * i128::from(sx);
    }
    if bound * i128::from(Y_MAX) > ACC_MAX {
        return Err(FeedError::BadModel);
    }
    Ok(acc as i64)
}

/// One dense output: [`dense_acc`] requantized by the row's `(m, s)` to `±lim`.
fn dense_out(rec: &[u8], y: &[u8], inp: u64, min_shift: i32, lim: i64) -> Result<i64, FeedError> {
    let (m, s) = (i32_at(rec, 0), i32_at(rec, 4));
    if !rq_ok(m, s, min_shift) {
        return Err(FeedError::BadModel);
    }
    Ok(rq(dense_acc(rec, y, inp)?, m, s, -lim, lim))
}

/// Traces of the host's own tokens, built by keepers and tests.
#[cfg(not(target_os = "solana"))]
pub mod build {
    use super::*;
    use crate::hash::Digest;
    use crate::trace::{leaf_hash, node_hash, zero_root};

    /// The strings a trace reads: the model's and the prompts' slice strings, and the result.
    #[derive(Clone, Copy, Debug)]
    pub struct Sources<'a> {
        /// The model's slice string.
        pub model: &'a [u8],
        /// The prompts' slice string.
        pub batch: &'a [u8],
        /// The committed result.
        pub result: &'a [u8],
        /// The job's manifest hash (a sampled pick's draw is keyed by it).
        pub input: [u8; 32],
    }

    /// How a replay reads the memory before its step: `len` bytes at `at`.
    pub type TraceRead<'b> = dyn Fn(u64, u64) -> Result<Vec<u8>, FeedError> + 'b;

    /// Step `s`'s value, read from the memory before it (by `trace`) and the sources, as the
    /// program replays it; with every read it made.
    pub fn replay_with(
        lay: &Layout,
        s: u64,
        src: &Sources,
        trace: &TraceRead,
    ) -> Result<(Vec<u8>, Vec<Read>), FeedError> {
        let st = lay.step(s).ok_or(FeedError::Complete)?;
        let mut got = vec![];
        let mut reads = vec![];
        while let Some(r) = lay.next_read(st, &got)? {
            let from = match r.source {
                Source::Model => src.model,
                Source::Batch => src.batch,
                Source::Result => src.result,
                Source::Trace => {
                    got.extend_from_slice(&trace(r.at, r.len)?);
                    reads.push(r);
                    continue;
                }
            };
            let (a, b) = (r.at as usize, (r.at + r.len) as usize);
            got.extend_from_slice(from.get(a..b).ok_or(FeedError::BadModel)?);
            reads.push(r);
        }
        Ok((lay.value(st, &got, &src.input)?, reads))
    }

    /// [`replay_with`] from a whole memory `mem`.
    pub fn replay(
        lay: &Layout,
        s: u64,
        src: &Sources,
        mem: &[u8],
    ) -> Result<(Vec<u8>, Vec<Read>), FeedError> {
        replay_with(lay, s, src, &|at, len| {
            mem.get(at as usize..(at + len) as usize)
                .map(|b| b.to_vec())
                .ok_or(FeedError::BadModel)
        })
    }

    /// A whole trace of a token (for small traces: tests; a keeper holds [`Blocks`]).
    pub fn trace(
        lay: Layout,
        src: &Sources,
    ) -> Result<crate::trace::build::Trace<Layout>, FeedError> {
        Ok(crate::trace::build::Trace {
            lay,
            mem: memory(&lay, src)?,
        })
    }

    /// The whole memory after the last step (for small traces: tests; a keeper holds
    /// [`Blocks`]).
    pub fn memory(lay: &Layout, src: &Sources) -> Result<Vec<u8>, FeedError> {
        let mut mem = vec![0u8; lay.len() as usize];
        for s in 1..=lay.steps() {
            let (v, _) = replay(lay, s, src, &mem)?;
            let (at, w) = lay.slot(s);
            mem[at as usize..at as usize + w].copy_from_slice(&v);
        }
        Ok(mem)
    }

    /// The root of a subtree of `2^log2` leaves holding `bytes` (zeros after them).
    pub fn subtree_root(bytes: &[u8], log2: u32) -> Digest {
        let hashes: Vec<Digest> = bytes.chunks(LEAF_LEN).map(leaf_hash).collect();
        path_in(&hashes, 0, log2, 0).1
    }

    /// The siblings of node `index` in a tree of `2^log2` nodes at height `from` whose first
    /// nodes are `nodes` (zero subtrees after them), bottom-up; and the tree's root.
    fn path_in(nodes: &[Digest], index: u64, log2: u32, from: u32) -> (Vec<Digest>, Digest) {
        let mut level = nodes.to_vec();
        if level.is_empty() {
            level.push(zero_root(from));
        }
        let mut path = vec![];
        for d in from..from + log2 {
            if level.len() % 2 == 1 {
                level.push(zero_root(d));
            }
            let i = (index >> (d - from)) as usize ^ 1;
            path.push(level.get(i).copied().unwrap_or_else(|| zero_root(d)));
            level = level.chunks(2).map(|p| node_hash(&p[0], &p[1])).collect();
        }
        (path, level[0])
    }

    /// One party's trace of a token held a block at a time (PROTOCOL §8.13): one pass computes
    /// every region's root and keeps what later blocks read (each block's keys and values,
    /// and its output row); the memory after any step is then one block recomputed and the
    /// roots folded. Memory: the roots, 2 (qw + 2 kw) + 4H bytes a block, one region.
    pub struct Blocks {
        /// The layout.
        pub lay: Layout,
        model: std::sync::Arc<Vec<u8>>,
        batch: std::sync::Arc<Vec<u8>>,
        result: Vec<u8>,
        input: [u8; 32],
        /// Every region's root after its last step: blocks, then the tail.
        roots: Vec<Digest>,
        /// Per block: its `Rot` and `V` parts.
        kv: Vec<Vec<u8>>,
        /// Per block: its `R2` part.
        out: Vec<Vec<u8>>,
    }

    impl Blocks {
        /// The one pass over every block, from the model's and the prompts' slice strings and
        /// the committed string (only the completion's row is read: the rest may be zeros).
        pub fn new(
            lay: Layout,
            model: std::sync::Arc<Vec<u8>>,
            batch: std::sync::Arc<Vec<u8>>,
            result: Vec<u8>,
            input: [u8; 32],
        ) -> Result<Blocks, FeedError> {
            let mut b = Blocks {
                lay,
                model,
                batch,
                result,
                input,
                roots: vec![],
                kv: vec![],
                out: vec![],
            };
            let regions = b.regions();
            for r in 0..regions {
                let mem = b.region(r, u64::MAX)?;
                b.roots.push(subtree_root(&mem, b.leaves_log2()));
                if r + 1 < regions {
                    let (q, l) = b.block_of(r);
                    let (rot, v_end) = (b.local(q, l, Part::Rot), b.local(q, l, Part::S));
                    let (r2, r2_end) = (
                        b.local(q, l, Part::R2),
                        b.local(q, l, Part::R2) + 4 * lay.h(),
                    );
                    b.kv.push(mem[rot as usize..v_end as usize].to_vec());
                    b.out.push(mem[r2 as usize..r2_end as usize].to_vec());
                }
            }
            Ok(b)
        }

        fn src(&self) -> Sources<'_> {
            Sources {
                model: &self.model,
                batch: &self.batch,
                result: &self.result,
                input: self.input,
            }
        }

        fn regions(&self) -> u64 {
            self.lay.t as u64 * self.lay.shape.layers as u64 + 1
        }
        fn leaves_log2(&self) -> u32 {
            self.lay.region_log2 - LEAF.trailing_zeros()
        }
        fn block_of(&self, r: u64) -> (u64, u64) {
            let layers = self.lay.shape.layers as u64;
            if r + 1 == self.regions() {
                (self.lay.t as u64, 0)
            } else {
                (r / layers, r % layers)
            }
        }
        /// `part`'s offset inside block B(q, l)'s region.
        fn local(&self, q: u64, l: u64, part: Part) -> u64 {
            self.lay.part_at(q, l, part) - self.lay.region_at(q, l)
        }
        /// The steps of region `r`: `(first, last)`.
        fn steps_of(&self, r: u64) -> (u64, u64) {
            let (q, l) = self.block_of(r);
            let layers = self.lay.shape.layers as u64;
            let first = self.lay.before(q, l) + 1;
            let last = if r + 1 == self.regions() {
                self.lay.steps()
            } else if l + 1 < layers {
                self.lay.before(q, l + 1)
            } else {
                self.lay.before(q + 1, 0)
            };
            (first, last)
        }

        /// Region `r`'s bytes after step `upto` (its last step at most), as far as it is used.
        fn region(&self, r: u64, upto: u64) -> Result<Vec<u8>, FeedError> {
            let (q, l) = self.block_of(r);
            let base = r << self.lay.region_log2;
            let used = if q == self.lay.t as u64 {
                self.lay.tail_bytes()
            } else {
                self.lay.block_bytes(q + 1, l == 0)
            };
            let mut mem = vec![0u8; used as usize];
            let (first, last) = self.steps_of(r);
            for s in first..=last.min(upto) {
                let (v, _) = {
                    let mem = &mem;
                    replay_with(&self.lay, s, &self.src(), &|at, len| {
                        self.read(r, mem, at, len)
                    })?
                };
                let (at, w) = self.lay.slot(s);
                let at = (at - base) as usize;
                mem[at..at + w].copy_from_slice(&v);
            }
            Ok(mem)
        }

        /// `len` bytes at `at` of the memory, for a step of region `r` whose bytes so far are
        /// `mem`: its own, or an earlier block's keys, values or output.
        fn read(&self, r: u64, mem: &[u8], at: u64, len: u64) -> Result<Vec<u8>, FeedError> {
            let from = at >> self.lay.region_log2;
            let off = at - (from << self.lay.region_log2);
            let (slice, start) = if from == r {
                (mem, 0)
            } else if from < r {
                let (q, l) = self.block_of(from);
                let (rot, r2) = (self.local(q, l, Part::Rot), self.local(q, l, Part::R2));
                if off >= r2 {
                    (&self.out[from as usize][..], r2)
                } else {
                    (&self.kv[from as usize][..], rot)
                }
            } else {
                return Err(FeedError::BadModel);
            };
            let o = off.checked_sub(start).ok_or(FeedError::BadModel)? as usize;
            slice
                .get(o..o + len as usize)
                .map(|b| b.to_vec())
                .ok_or(FeedError::BadModel)
        }

        /// The region step `s` writes in (`s ≥ 1`).
        fn region_of_step(&self, s: u64) -> u64 {
            let st = self.lay.step(s).expect("a step of the trace");
            if st.q == self.lay.t {
                self.regions() - 1
            } else {
                st.q as u64 * self.lay.shape.layers as u64 + st.l as u64
            }
        }

        /// Every region's root after step `s`, and region `cur`'s bytes then (the one step `s`
        /// writes in).
        fn state(&self, s: u64) -> Result<(Vec<Digest>, u64, Vec<u8>), FeedError> {
            let cur = if s == 0 { 0 } else { self.region_of_step(s) };
            let mem = if s == 0 { vec![] } else { self.region(cur, s)? };
            let mut roots = self.roots[..cur as usize].to_vec();
            roots.push(subtree_root(&mem, self.leaves_log2()));
            Ok((roots, cur, mem))
        }

        /// The root of the memory after step `s`.
        pub fn root_at(&self, s: u64) -> Result<Digest, FeedError> {
            let (roots, _, _) = self.state(s)?;
            let top = self.lay.depth() - self.leaves_log2();
            Ok(path_in(&roots, 0, top, self.leaves_log2()).1)
        }

        /// The split of steps `lo .. hi` by this trace: its roots at the inner points.
        pub fn split_roots(&self, lo: u64, hi: u64) -> Result<Vec<Digest>, FeedError> {
            let (k, p) = crate::trace::split_points(lo, hi);
            (1..k).map(|i| self.root_at(p(i))).collect()
        }

        /// The first segment of a split of `lo .. hi` (inner roots `roots`, end root
        /// `hi_root`) whose end root is not this trace's (the last when all agree).
        pub fn pick(
            &self,
            lo: u64,
            hi: u64,
            roots: &[Digest],
            hi_root: &Digest,
        ) -> Result<u8, FeedError> {
            let (k, p) = crate::trace::split_points(lo, hi);
            for i in 0..k {
                let end = if i + 1 < k {
                    roots[i as usize]
                } else {
                    *hi_root
                };
                if end != self.root_at(p(i + 1))? {
                    return Ok(i as u8);
                }
            }
            Ok((k - 1) as u8)
        }

        /// The word the trace's last step writes (the token, or the count).
        pub fn word(&self) -> Result<[u8; 4], FeedError> {
            let s = self.lay.token_step();
            let (leaf, _) = self.leaf_at(s, self.lay.token_at() / LEAF)?;
            let o = (self.lay.token_at() % LEAF) as usize;
            Ok(leaf[o..o + 4].try_into().expect("4 bytes"))
        }

        /// Leaf `index` of the memory after step `s`, and its siblings bottom-up.
        pub fn leaf_at(
            &self,
            s: u64,
            index: u64,
        ) -> Result<([u8; LEAF_LEN], Vec<Digest>), FeedError> {
            let (roots, cur, mem) = self.state(s)?;
            let ll = self.leaves_log2();
            let r = index >> ll;
            let bytes = if r == cur {
                mem
            } else if r < cur {
                self.region(r, u64::MAX)?
            } else {
                vec![]
            };
            let i = (index - (r << ll)) as usize;
            let mut leaf = [0u8; LEAF_LEN];
            if let Some(b) = bytes.get(i * LEAF_LEN..) {
                let n = b.len().min(LEAF_LEN);
                leaf[..n].copy_from_slice(&b[..n]);
            }
            let hashes: Vec<Digest> = bytes.chunks(LEAF_LEN).map(leaf_hash).collect();
            let (mut path, _) = path_in(&hashes, index - (r << ll), ll, 0);
            let top = self.lay.depth() - ll;
            path.extend(path_in(&roots, r, top, ll).0);
            Ok((leaf, path))
        }
    }
}

#[cfg(test)]
mod tests;

//! The slice strings of a `Generate` job (PROTOCOL §8.13): what the program proves slices of
//! when it replays one step of a token's trace, and the decoder's integer rules that the
//! program computes too (the host's reference, [`crate::decoder`], uses these).
//!
//! **The model** (`"CMd1"`), every field LE and 4-aligned (a field may straddle a 1 KiB chunk
//! where a token's record is not a multiple of 8 bytes: a replay reads across chunks):
//!
//! | at | what |
//! |---|---|
//! | 0 | header, 64 bytes: magic, H, heads, key/value heads, head width, F, layers, vocabulary, positions, `eos` (`u32` each), ε (`i64`), zeros |
//! | [`Shape::exp_at`] | the exp table, [`EXP_LEN`] `i32` |
//! | [`Shape::sig_at`] | the sigmoid table, [`SIG_LEN`] `i32` |
//! | [`Shape::rope_at`] | per position, per pair: `cos`, `sin` (`i16`) |
//! | [`Shape::final_at`] | the final norm: per channel `(m, s)` |
//! | [`Shape::token_at`] | per token: the embedding's `(m, s)`, the logits' `(m, s)`, then per block of 32 channels its scale `d` and 32 `i8` values |
//! | [`Shape::layer_at`] | per layer: `ln1` and `ln2` per channel `(m, s)`, `att (m, s)`, `sig (m, s)`, then the dense layers' rows `q k v o gate up down`, each row `(m, s)` then per block of 32 inputs `d`, `min` and 16 nibble bytes |
//!
//! **The prompts**: prompt r at `r · 4 (L + 1)` (L the job's prompt limit): its token count
//! (`1 ..= L`) and its ids (the chat template applied), zero past the count; after the last,
//! the sampling rule: temperature (Q8), top-k, top-p (Q16), 0 (`u32` each), seed (`u64`).

use crate::{
    feed::FeedError,
    job::{decoder_work_per_token, JobKind, JobSpec},
};

/// Weights come in blocks of 32 along the input, each with its own integer scale (and minimum).
pub const BLOCK: usize = 32;
/// Every residual term and sum is clamped to `±2^30`.
pub const RES_MAX: i64 = 1 << 30;
/// q and k before RoPE are clamped to `±(2^14 − 1)` (after it they are within `±2^15`).
pub const QK_MAX: i64 = 16_383;
/// Largest int16 activation (symmetric).
pub const Y_MAX: i64 = 32_767;
/// RMSNorm's normalized value and the RoPE table are Q14.
pub const FRAC: u32 = 14;
/// Entries of the exp table (`E[t] ≈ 2^20 · e^(−t/1024)` in the converter; to the protocol any
/// values in `0 ..= 2^20` with `E[0] ≥ 1`).
pub const EXP_LEN: usize = 16_384;
/// Largest exp-table entry.
pub const EXP_MAX: i32 = 1 << 20;
/// Entries of the sigmoid table, indexed by `i + SIG_LEN / 2` for `i ∈ −4096 ..= 4095`
/// (`σ(i / 256)` in Q15 in the converter; any values in `0 ..= 2^15` to the protocol).
pub const SIG_LEN: usize = 8_192;
/// Largest magnitude of an accumulator any dense layer may reach: `2^53`, so that every sum is
/// exact in int64 and in float64 alike (numpy's reference, a browser's).
pub const ACC_MAX: i128 = 1 << 53;
/// Most layers.
pub const MAX_LAYERS: usize = 64;
/// Widest hidden state.
pub const MAX_WIDTH: usize = 4_096;
/// Widest feed-forward layer.
pub const MAX_FFN: usize = 16_384;
/// Largest vocabulary.
pub const MAX_VOCAB: usize = 262_144;
/// Most positions (the RoPE table's rows): prompt and generated tokens together.
pub const MAX_POSITIONS: usize = 8_192;

/// `clamp(⌊(acc · m + 2^(s−1)) / 2^s⌋, lo, hi)` in 128-bit arithmetic (`s ≥ 1`).
#[inline]
pub fn rq(acc: i64, m: i32, s: i32, lo: i64, hi: i64) -> i64 {
    // in int64 when nothing overflows it (the same value: exact either way)
    if s < 63 {
        if let Some(v) = acc
            .checked_mul(i64::from(m))
            .and_then(|p| p.checked_add(1i64 << (s - 1)))
        {
            return (v >> s).clamp(lo, hi);
        }
    }
    let v = (i128::from(acc) * i128::from(m) + (1i128 << (s - 1))) >> s;
    v.clamp(i128::from(lo), i128::from(hi)) as i64
}

/// The 64 uniform bits a sampled `Generate` step draws: the first 8 bytes (little-endian) of
/// `SHA-256("cm:generate:v1" ‖ input ‖ seed ‖ row ‖ step)`, `input` the job's manifest hash,
/// `row` the prompt's index, `step` the token's index in its completion — fixed by the job, so
/// `keeper compute` before a post, the provider, every verifier and the program draw the same.
pub fn draw(input: &[u8; 32], seed: u64, row: u32, step: u32) -> u64 {
    crate::hash::digest_u64(&crate::hash::hashv(&[
        b"cm:generate:v1",
        input,
        &seed.to_le_bytes(),
        &row.to_le_bytes(),
        &step.to_le_bytes(),
    ]))
}

/// A requantization `(m, s)` the format allows: `|m|` in `1 ..= 2^31 − 1`, `s` in
/// `min_shift ..= 94`.
pub fn rq_ok(m: i32, s: i32, min_shift: i32) -> bool {
    m != 0 && m != i32::MIN && (min_shift..=94).contains(&s)
}

/// The header's first word.
pub const MAGIC: u32 = u32::from_le_bytes(*b"CMd1");
/// Bytes of the header.
pub const HEADER_LEN: u64 = 64;
/// Bytes of a requantization `(m, s)`.
pub const RQ_LEN: u64 = 8;
/// Bytes of a dense row's block: scale, minimum, 16 nibble bytes.
pub const Q4_BLOCK_LEN: u64 = 24;
/// Bytes of an embedding row's block: scale, 32 `i8`.
pub const Q8_BLOCK_LEN: u64 = 36;
/// Bytes of the sampling rule after the prompts.
pub const SAMPLING_LEN: u64 = 24;

/// A dense layer of a decoder layer, in the order the model's string holds them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dense {
    /// Queries.
    Q,
    /// Keys.
    K,
    /// Values.
    V,
    /// Attention output.
    O,
    /// Gate.
    Gate,
    /// Up.
    Up,
    /// Down.
    Down,
}

/// A decoder's shape and its scalars, from its header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Shape {
    /// Hidden width H.
    pub width: u32,
    /// Query heads.
    pub heads: u32,
    /// Key/value heads.
    pub kv_heads: u32,
    /// Width of one head.
    pub head_dim: u32,
    /// Feed-forward width F.
    pub ffn: u32,
    /// Layers.
    pub layers: u32,
    /// Vocabulary.
    pub vocab: u32,
    /// Positions (the RoPE table's rows).
    pub positions: u32,
    /// The end-of-turn token.
    pub eos: u32,
    /// RMSNorm's ε.
    pub eps: i64,
}

fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}

impl Shape {
    /// The nine shape words in header order: H, heads, key/value heads, head width, F, layers,
    /// vocabulary, positions, end of turn (the header's and a `Generate` game layout's).
    pub fn words(&self) -> [u32; 9] {
        [
            self.width,
            self.heads,
            self.kv_heads,
            self.head_dim,
            self.ffn,
            self.layers,
            self.vocab,
            self.positions,
            self.eos,
        ]
    }

    /// The shape of [`Shape::words`] and RMSNorm's ε (unchecked).
    pub fn from_words(w: [u32; 9], eps: i64) -> Shape {
        let [width, heads, kv_heads, head_dim, ffn, layers, vocab, positions, eos] = w;
        Shape {
            width,
            heads,
            kv_heads,
            head_dim,
            ffn,
            layers,
            vocab,
            positions,
            eos,
            eps,
        }
    }

    /// Query width: heads × head width.
    pub fn qw(&self) -> u64 {
        self.heads as u64 * self.head_dim as u64
    }
    /// Key/value width.
    pub fn kw(&self) -> u64 {
        self.kv_heads as u64 * self.head_dim as u64
    }
    /// `(inputs, outputs)` of a dense layer.
    pub fn dims(&self, d: Dense) -> (u64, u64) {
        let (h, f) = (self.width as u64, self.ffn as u64);
        match d {
            Dense::Q => (h, self.qw()),
            Dense::K | Dense::V => (h, self.kw()),
            Dense::O => (self.qw(), h),
            Dense::Gate | Dense::Up => (h, f),
            Dense::Down => (f, h),
        }
    }
    /// Bytes of one dense row of `inp` inputs: `(m, s)` and the blocks.
    pub fn row_len(inp: u64) -> u64 {
        RQ_LEN + Q4_BLOCK_LEN * (inp / BLOCK as u64)
    }
    /// Bytes of one token's record.
    pub fn token_len(&self) -> u64 {
        2 * RQ_LEN + Q8_BLOCK_LEN * (self.width as u64 / BLOCK as u64)
    }
    /// The exp table's entry `t`.
    pub fn exp_at(&self, t: u64) -> u64 {
        HEADER_LEN + 4 * t
    }
    /// The sigmoid table's entry `i` (`0 ..` [`SIG_LEN`]).
    pub fn sig_at(&self, i: u64) -> u64 {
        self.exp_at(EXP_LEN as u64) + 4 * i
    }
    /// Position `p`'s RoPE row: `head_dim / 2` pairs `(cos, sin)`.
    pub fn rope_at(&self, p: u64) -> u64 {
        self.sig_at(SIG_LEN as u64) + 2 * self.head_dim as u64 * p
    }
    /// The final norm's `(m, s)` of channel `c`.
    pub fn final_at(&self, c: u64) -> u64 {
        self.rope_at(self.positions as u64) + RQ_LEN * c
    }
    /// Token `t`'s record.
    pub fn token_at(&self, t: u64) -> u64 {
        self.final_at(self.width as u64) + self.token_len() * t
    }
    fn dense_len(&self, d: Dense) -> u64 {
        let (i, o) = self.dims(d);
        Self::row_len(i) * o
    }
    /// Bytes of one layer's records.
    pub fn layer_len(&self) -> u64 {
        2 * RQ_LEN * self.width as u64
            + 2 * RQ_LEN
            + [
                Dense::Q,
                Dense::K,
                Dense::V,
                Dense::O,
                Dense::Gate,
                Dense::Up,
                Dense::Down,
            ]
            .iter()
            .map(|&d| self.dense_len(d))
            .sum::<u64>()
    }
    /// Layer `l`'s records.
    pub fn layer_at(&self, l: u64) -> u64 {
        self.token_at(self.vocab as u64) + self.layer_len() * l
    }
    /// Layer `l`'s norm (`second`: ln2) `(m, s)` of channel `c`.
    pub fn ln_at(&self, l: u64, second: bool, c: u64) -> u64 {
        self.layer_at(l) + RQ_LEN * (c + if second { self.width as u64 } else { 0 })
    }
    /// Layer `l`'s attention scale (`sig` false) or sigmoid scale `(m, s)`.
    pub fn scale_at(&self, l: u64, sig: bool) -> u64 {
        self.ln_at(l, false, 2 * self.width as u64) + if sig { RQ_LEN } else { 0 }
    }
    /// Row `o` of dense layer `d` of layer `l`.
    pub fn row_at(&self, l: u64, d: Dense, o: u64) -> u64 {
        let mut at = self.scale_at(l, false) + 2 * RQ_LEN;
        for e in [
            Dense::Q,
            Dense::K,
            Dense::V,
            Dense::O,
            Dense::Gate,
            Dense::Up,
        ] {
            if e == d {
                break;
            }
            at += self.dense_len(e);
        }
        at + Self::row_len(self.dims(d).0) * o
    }
    /// Bytes of the whole string.
    pub fn len(&self) -> u64 {
        self.layer_at(self.layers as u64)
    }
    /// Whether the string is empty (never: it has a header).
    pub fn is_empty(&self) -> bool {
        false
    }
    /// The header's bytes.
    pub fn header(&self) -> [u8; HEADER_LEN as usize] {
        let mut b = [0u8; HEADER_LEN as usize];
        let words = core::iter::once(MAGIC).chain(self.words());
        for (i, w) in words.enumerate() {
            b[4 * i..4 * i + 4].copy_from_slice(&w.to_le_bytes());
        }
        b[40..48].copy_from_slice(&self.eps.to_le_bytes());
        b
    }
    /// A job's work per token at its context for this shape (what a job naming this model must
    /// be priced at, at least).
    pub fn work_per_token(&self, ctx: u64) -> u64 {
        decoder_work_per_token(
            self.layers as u64,
            self.width as u64,
            self.ffn as u64,
            self.heads as u64,
            self.kv_heads as u64,
            self.head_dim as u64,
            self.vocab as u64,
            ctx,
        )
    }
}

/// The shape in a model string's header (`bytes`, its first chunk at least), checked against
/// the format's bounds, the string's length `len` and the `Generate` job: its positions hold
/// the job's prompt and completion, and the job is priced at the model's work per token (as keepers check it).
pub fn read_header(job: &JobSpec, len: u64, bytes: &[u8]) -> Result<Shape, FeedError> {
    if job.kind != JobKind::Generate || bytes.len() < HEADER_LEN as usize {
        return Err(FeedError::BadModel);
    }
    if u32_at(bytes, 0) != MAGIC || bytes[48..64].iter().any(|&b| b != 0) {
        return Err(FeedError::BadModel);
    }
    let s = Shape::from_words(
        core::array::from_fn(|i| u32_at(bytes, 4 * (i + 1))),
        i64::from_le_bytes(bytes[40..48].try_into().expect("8 bytes")),
    );
    let b = BLOCK as u32;
    let ok = (1..=MAX_WIDTH as u32).contains(&s.width)
        && s.width % b == 0
        && s.heads >= 1
        && s.kv_heads >= 1
        && s.heads % s.kv_heads == 0
        && (2..=256).contains(&s.head_dim)
        && s.head_dim % 2 == 0
        && s.qw() % BLOCK as u64 == 0
        && s.kw() % BLOCK as u64 == 0
        && s.qw() <= MAX_FFN as u64
        && (1..=MAX_FFN as u32).contains(&s.ffn)
        && s.ffn % b == 0
        && (1..=MAX_LAYERS as u32).contains(&s.layers)
        && (1..=MAX_VOCAB as u32).contains(&s.vocab)
        && (1..=MAX_POSITIONS as u32).contains(&s.positions)
        && s.eos < s.vocab
        && (0..=1i64 << 62).contains(&s.eps);
    if !ok || len != s.len() {
        return Err(FeedError::BadModel);
    }
    if job.dims[1] as u64 + job.dims[2] as u64 > s.positions as u64
        || job.work_per_row != s.work_per_token(job.dims[1] as u64 + job.dims[2] as u64)
    {
        return Err(FeedError::BadModel);
    }
    Ok(s)
}

/// The most bytes a decoder's slice string may have for a job of `work` units per token: the
/// header and tables, the RoPE table at the format's most positions and widest heads, and at
/// most three bytes a unit of work (4-bit weights with their scales, `(m, s)` per output, the
/// embeddings with theirs; the format's norms and scales are far below a unit a byte).
pub fn max_len(work: u64) -> u64 {
    (16 << 20) + work.saturating_mul(3)
}

/// Bytes from one prompt's ids to the next: a count and `limit` ids.
pub fn prompt_stride(limit: u32) -> u64 {
    4 * (limit as u64 + 1)
}

/// Decoder slice strings of the host's own parts, built by keepers and clients.
#[cfg(not(target_os = "solana"))]
pub mod build {
    use super::*;
    use crate::decoder::{Decoder, Rq, Sampling};

    /// The shape of a decoder (checked by [`Decoder::check`]) with its end-of-turn token.
    pub fn shape(d: &Decoder, eos: u32) -> Shape {
        Shape {
            width: d.width as u32,
            heads: d.heads as u32,
            kv_heads: d.kv_heads as u32,
            head_dim: d.head_dim as u32,
            ffn: d.ffn() as u32,
            layers: d.layers.len() as u32,
            vocab: d.vocab() as u32,
            positions: d.positions() as u32,
            eos,
            eps: d.eps,
        }
    }

    fn rq(out: &mut Vec<u8>, m: i32, s: i32) {
        out.extend_from_slice(&m.to_le_bytes());
        out.extend_from_slice(&s.to_le_bytes());
    }

    fn rqs(out: &mut Vec<u8>, r: &Rq) {
        for (&m, &s) in r.m.iter().zip(&r.s) {
            rq(out, m, s);
        }
    }

    fn dense(out: &mut Vec<u8>, d: &crate::decoder::Dense) {
        let nb = d.inp / BLOCK;
        for o in 0..d.out {
            rq(out, d.rq.m[o], d.rq.s[o]);
            for b in 0..nb {
                out.extend_from_slice(&d.d[o * nb + b].to_le_bytes());
                out.extend_from_slice(&d.min[o * nb + b].to_le_bytes());
                let at = (o * d.inp + b * BLOCK) / 2;
                out.extend_from_slice(&d.q4[at..at + 16]);
            }
        }
    }

    /// The model's slice string (PROTOCOL §8.13) of a decoder [`Decoder::check`] accepts.
    pub fn model(d: &Decoder, eos: u32) -> Vec<u8> {
        let s = shape(d, eos);
        let mut out = Vec::with_capacity(s.len() as usize);
        out.extend_from_slice(&s.header());
        for v in d.exp.iter().chain(&d.sigmoid) {
            out.extend_from_slice(&v.to_le_bytes());
        }
        for v in &d.rope {
            out.extend_from_slice(&v.to_le_bytes());
        }
        rqs(&mut out, &d.out);
        let h = d.width;
        for t in 0..d.vocab() {
            rq(&mut out, d.emb_rq.m[t], d.emb_rq.s[t]);
            rq(&mut out, d.lm_rq.m[t], d.lm_rq.s[t]);
            for b in 0..h / BLOCK {
                out.extend_from_slice(&d.emb_d[t * (h / BLOCK) + b].to_le_bytes());
                let at = t * h + b * BLOCK;
                out.extend(d.emb_q[at..at + BLOCK].iter().map(|&v| v as u8));
            }
        }
        for l in &d.layers {
            rqs(&mut out, &l.ln1);
            rqs(&mut out, &l.ln2);
            rq(&mut out, l.att.0, l.att.1);
            rq(&mut out, l.sig.0, l.sig.1);
            for x in [&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down] {
                dense(&mut out, x);
            }
        }
        debug_assert_eq!(out.len() as u64, s.len());
        out
    }

    /// The prompts' slice string: each prompt's ids at [`prompt_stride`]`(limit)`, then the
    /// sampling rule.
    pub fn prompts(ids: &[Vec<u32>], limit: u32, sampling: &Sampling) -> Vec<u8> {
        let stride = prompt_stride(limit) as usize;
        let mut out = vec![0u8; ids.len() * stride];
        for (r, p) in ids.iter().enumerate() {
            let row = &mut out[r * stride..(r + 1) * stride];
            row[..4].copy_from_slice(&(p.len() as u32).to_le_bytes());
            for (i, t) in p.iter().enumerate() {
                row[4 + 4 * i..8 + 4 * i].copy_from_slice(&t.to_le_bytes());
            }
        }
        for w in [sampling.temperature, sampling.top_k, sampling.top_p, 0] {
            out.extend_from_slice(&w.to_le_bytes());
        }
        out.extend_from_slice(&sampling.seed.to_le_bytes());
        out
    }
}

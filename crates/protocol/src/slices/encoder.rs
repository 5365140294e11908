//! The slice strings of an `Encoder` job (PROTOCOL §8.7, §8.10): what the program proves
//! slices of when it replays one step of a text's trace.
//!
//! **Texts** are refereed by their token ids: row r at `r · 4 (L + 1)` (L the job's token
//! limit) holds the text's token count `T` (1 ..= L) and its ids, LE `u32`, zero past `T`.
//! The program cannot tokenize; the client tokenizes and names the ids' root in its manifest,
//! and a keeper that tokenizes a text otherwise refuses the task (it never claims it), so the
//! ids a task is refereed on are the ids every keeper that worked on it computed from.
//!
//! **The model** is laid out for the replay: a 32-byte header (magic, `H`, heads, `F`, blocks,
//! vocabulary, positions, 0: LE `u32`), then everything one step reads as one contiguous
//! record, every multi-byte field at a multiple of its width:
//!
//! * per channel c the embeddings' requantization `(m_word, s_word, m_pos, s_pos)`;
//! * the embeddings' LayerNorm: its shift, then per channel `(g, b)` (a *norm record*);
//! * the word embeddings (`vocab × H` int8) and the position embeddings (`positions × H`),
//!   each padded to a multiple of 4;
//! * the exp table (1 024 LE `i32`);
//! * per block: the attention scale `(m, s)`; the query, key and value layers' records
//!   (output o: `bias, m, s`, then `W[o][0 … H)` padded to a multiple of 4); the context's
//!   requantization per channel `(m, s)`; the attention output's records with the first
//!   residual's requantization of channel o (`bias, m, s, m_res, s_res`, then the weights);
//!   the first norm record; the feed-forward-in records; the GELU table (1 024 LE `i16`); the
//!   feed-forward-out records with the second residual's requantization; the second norm
//!   record.

use crate::{
    feed::FeedError,
    job::{
        encoder_work_per_token, JobSpec, MAX_ENCODER_BLOCKS, MAX_ENCODER_FFN, MAX_ENCODER_HIDDEN,
        MAX_ENCODER_TOKENS, MAX_ENCODER_VOCAB,
    },
};

/// The header's first word: "CMe2" (the second layout: int16 GELU tables).
pub const MAGIC: u32 = u32::from_le_bytes(*b"CMe2");
/// Bytes of the model's header.
pub const HEADER_LEN: u64 = 32;
/// Entries of the exp table.
pub const EXP_LEN: u64 = 1024;
/// Entries of a GELU table (LE `i16`, two bytes each).
pub const GELU_LEN: u64 = 1024;
/// Bytes of a dense record's head: bias, multiplier, shift.
pub const HEAD: u64 = 12;
/// Bytes of a residual dense record's head: bias, multiplier, shift, and the residual's
/// multiplier and shift.
pub const RES_HEAD: u64 = 20;

/// An encoder's shape, from its header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Shape {
    /// Hidden width H.
    pub hidden: u32,
    /// Attention heads (dividing H).
    pub heads: u32,
    /// Feed-forward width F.
    pub ffn: u32,
    /// Blocks.
    pub blocks: u32,
    /// Vocabulary.
    pub vocab: u32,
    /// Positions (most tokens of a text).
    pub positions: u32,
}

/// Where a block's pieces begin, from the block's start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// The attention scale `(m, s)`.
    Att,
    /// The query layer's records.
    Q,
    /// The key layer's records.
    K,
    /// The value layer's records.
    V,
    /// The context's requantization, `(m, s)` per channel.
    Ctx,
    /// The attention output's records (with the first residual's).
    O,
    /// The first norm record.
    Ln1,
    /// The feed-forward-in records.
    F1,
    /// The GELU table.
    Gelu,
    /// The feed-forward-out records (with the second residual's).
    F2,
    /// The second norm record.
    Ln2,
}

const PARTS: [Part; 11] = [
    Part::Att,
    Part::Q,
    Part::K,
    Part::V,
    Part::Ctx,
    Part::O,
    Part::Ln1,
    Part::F1,
    Part::Gelu,
    Part::F2,
    Part::Ln2,
];

fn pad4(n: u64) -> u64 {
    n.next_multiple_of(4)
}

impl Shape {
    /// Width of a head.
    pub fn head_width(&self) -> u32 {
        self.hidden / self.heads.max(1)
    }

    /// Bytes of a dense record of `inp` inputs with a head of `head` bytes.
    pub fn record_len(head: u64, inp: u32) -> u64 {
        head + pad4(inp as u64)
    }

    /// Bytes of a norm record.
    pub fn norm_len(&self) -> u64 {
        4 + 8 * self.hidden as u64
    }

    /// The embeddings' requantization records (16 bytes a channel).
    pub fn emb_rq_at(&self) -> u64 {
        HEADER_LEN
    }

    /// The embeddings' norm record.
    pub fn ln0_at(&self) -> u64 {
        self.emb_rq_at() + 16 * self.hidden as u64
    }

    /// The word embeddings.
    pub fn word_at(&self) -> u64 {
        self.ln0_at() + self.norm_len()
    }

    /// The position embeddings.
    pub fn pos_at(&self) -> u64 {
        self.word_at() + pad4(self.vocab as u64 * self.hidden as u64)
    }

    /// The exp table.
    pub fn exp_at(&self) -> u64 {
        self.pos_at() + pad4(self.positions as u64 * self.hidden as u64)
    }

    /// Bytes of one part of a block.
    fn part_len(&self, p: Part) -> u64 {
        let (h, f) = (self.hidden, self.ffn);
        let hh = h as u64;
        match p {
            Part::Att => 8,
            Part::Q | Part::K | Part::V => hh * Self::record_len(HEAD, h),
            Part::Ctx => 8 * hh,
            Part::O => hh * Self::record_len(RES_HEAD, h),
            Part::Ln1 | Part::Ln2 => self.norm_len(),
            Part::F1 => f as u64 * Self::record_len(HEAD, h),
            Part::Gelu => 2 * GELU_LEN,
            Part::F2 => hh * Self::record_len(RES_HEAD, f),
        }
    }

    /// Bytes of a block.
    pub fn block_len(&self) -> u64 {
        PARTS.iter().map(|&p| self.part_len(p)).sum()
    }

    /// Where part `p` of block `b` begins.
    pub fn part_at(&self, b: u32, p: Part) -> u64 {
        let start = self.exp_at() + 4 * EXP_LEN + b as u64 * self.block_len();
        start
            + PARTS
                .iter()
                .take_while(|&&q| q != p)
                .map(|&q| self.part_len(q))
                .sum::<u64>()
    }

    /// Where record `o` of a dense part (`Q`, `K`, `V`, `O`, `F1`, `F2`) of block `b` begins.
    pub fn record_at(&self, b: u32, p: Part, o: u32) -> u64 {
        let (h, f) = (self.hidden, self.ffn);
        let len = match p {
            Part::O => Self::record_len(RES_HEAD, h),
            Part::F2 => Self::record_len(RES_HEAD, f),
            _ => Self::record_len(HEAD, h),
        };
        self.part_at(b, p) + o as u64 * len
    }

    /// Bytes of the model's slice string.
    pub fn len(&self) -> u64 {
        self.exp_at() + 4 * EXP_LEN + self.blocks as u64 * self.block_len()
    }

    /// Never empty (the header); for clippy.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The header's bytes.
    pub fn header(&self) -> [u8; HEADER_LEN as usize] {
        let mut b = [0u8; HEADER_LEN as usize];
        let words = [
            MAGIC,
            self.hidden,
            self.heads,
            self.ffn,
            self.blocks,
            self.vocab,
            self.positions,
            0,
        ];
        for (i, w) in words.iter().enumerate() {
            b[4 * i..4 * i + 4].copy_from_slice(&w.to_le_bytes());
        }
        b
    }
}

/// Reads and checks an `Encoder` model's header (the first chunk of its slice string of `len`
/// bytes) against the job: its shape, within every bound, of the job's width and work per
/// token at the job's limit, with positions for the limit, and the string of its length; else
/// [`FeedError::BadModel`].
pub fn read_header(job: &JobSpec, len: u64, bytes: &[u8]) -> Result<Shape, FeedError> {
    if bytes.len() < HEADER_LEN as usize {
        return Err(FeedError::BadModel);
    }
    let w = |i: usize| {
        u32::from_le_bytes([
            bytes[4 * i],
            bytes[4 * i + 1],
            bytes[4 * i + 2],
            bytes[4 * i + 3],
        ])
    };
    let s = Shape {
        hidden: w(1),
        heads: w(2),
        ffn: w(3),
        blocks: w(4),
        vocab: w(5),
        positions: w(6),
    };
    let (h, limit) = (s.hidden, job.dims[1]);
    let fits = w(0) == MAGIC
        && w(7) == 0
        && (1..=MAX_ENCODER_HIDDEN).contains(&h)
        && s.heads >= 1
        && h % s.heads == 0
        && (1..=MAX_ENCODER_FFN).contains(&(s.ffn as u64))
        && (1..=MAX_ENCODER_BLOCKS).contains(&(s.blocks as u64))
        && (1..=MAX_ENCODER_VOCAB).contains(&(s.vocab as u64))
        && (limit..=MAX_ENCODER_TOKENS).contains(&s.positions)
        && h == job.dims[2]
        && encoder_work_per_token(
            s.blocks as u64,
            h as u64,
            s.ffn as u64,
            s.heads as u64,
            limit as u64,
        ) == job.work_per_row
        && s.len() == len;
    if fits {
        Ok(s)
    } else {
        Err(FeedError::BadModel)
    }
}

/// The most bytes an `Encoder` model's slice string of width `h` and `work` multiply-adds a
/// token (blocks · (4H² + 2HF) ≤ work) may have: the header and the embeddings' records, the
/// largest tables, the exp table, and per block its weights (within the work), the records'
/// heads and padding (at most `2 072 + 115H` bytes and 15 a feed-forward output).
pub fn max_len(h: u32, work: u64) -> u64 {
    let h = h.max(1) as u64;
    let blocks = (work / (4 * h * h)).min(MAX_ENCODER_BLOCKS);
    let ffn = work / (2 * h);
    HEADER_LEN
        + 16 * h
        + 4
        + 8 * h
        + pad4(MAX_ENCODER_VOCAB * h)
        + pad4(MAX_ENCODER_TOKENS as u64 * h)
        + 4 * EXP_LEN
        + blocks * (2_072 + 115 * h)
        + work
        + 15 * ffn
}

/// Bytes from one text's ids to the next: a count and `limit` ids.
pub fn ids_stride(limit: u32) -> u64 {
    4 * (limit as u64 + 1)
}

/// Encoder slice strings of the host's own parts, built by keepers and clients.
#[cfg(not(target_os = "solana"))]
pub mod build {
    use super::*;
    use crate::encoder::{Block, Dense, Encoder, Norm, Requant};

    /// The shape of an encoder (checked by [`Encoder::check`]).
    pub fn shape(e: &Encoder) -> Shape {
        Shape {
            hidden: e.hidden as u32,
            heads: e.heads as u32,
            ffn: e.ffn() as u32,
            blocks: e.blocks.len() as u32,
            vocab: e.vocab() as u32,
            positions: e.positions() as u32,
        }
    }

    fn put(out: &mut Vec<u8>, v: i32) {
        out.extend_from_slice(&v.to_le_bytes());
    }

    fn bytes(out: &mut Vec<u8>, v: &[i8]) {
        out.extend(v.iter().map(|&x| x as u8));
        out.resize(pad4(out.len() as u64) as usize, 0);
    }

    fn norm(out: &mut Vec<u8>, n: &Norm) {
        put(out, n.shift);
        for (&g, &b) in n.g.iter().zip(&n.b) {
            put(out, g);
            put(out, b);
        }
    }

    fn dense(out: &mut Vec<u8>, d: &Dense, res: Option<&Requant>) {
        for o in 0..d.out {
            put(out, d.bias[o]);
            put(out, d.rq.m[o]);
            put(out, d.rq.s[o]);
            if let Some(r) = res {
                put(out, r.m[o]);
                put(out, r.s[o]);
            }
            bytes(out, &d.weight[o * d.inp..(o + 1) * d.inp]);
        }
    }

    /// An `Encoder` model's slice string (PROTOCOL §8.7).
    pub fn model(e: &Encoder) -> Vec<u8> {
        let s = shape(e);
        let mut out = Vec::with_capacity(s.len() as usize);
        out.extend_from_slice(&s.header());
        for c in 0..e.hidden {
            for v in [e.word_rq.m[c], e.word_rq.s[c], e.pos_rq.m[c], e.pos_rq.s[c]] {
                put(&mut out, v);
            }
        }
        norm(&mut out, &e.ln);
        bytes(&mut out, &e.word);
        bytes(&mut out, &e.pos);
        for &x in &e.exp {
            put(&mut out, x);
        }
        for b in &e.blocks {
            put(&mut out, b.att.0);
            put(&mut out, b.att.1);
            for d in [&b.q, &b.k, &b.v] {
                dense(&mut out, d, None);
            }
            for c in 0..e.hidden {
                put(&mut out, b.ctx.m[c]);
                put(&mut out, b.ctx.s[c]);
            }
            dense(&mut out, &b.o, Some(&b.res1));
            norm(&mut out, &b.ln1);
            dense(&mut out, &b.f1, None);
            for &g in &b.gelu {
                out.extend_from_slice(&g.to_le_bytes());
            }
            dense(&mut out, &b.f2, Some(&b.res2));
            norm(&mut out, &b.ln2);
        }
        debug_assert_eq!(out.len() as u64, s.len());
        out
    }

    /// The encoder an `Encoder` model's slice string holds, read as the program reads it
    /// ([`model`] read back); `None` if the string is not one, or its encoder breaks a bound
    /// ([`Encoder::check`]).
    pub fn parse(bytes: &[u8]) -> Option<Encoder> {
        let head = bytes.get(..HEADER_LEN as usize)?;
        let w = |i: usize| u32::from_le_bytes(head[4 * i..4 * i + 4].try_into().expect("4"));
        let s = Shape {
            hidden: w(1),
            heads: w(2),
            ffn: w(3),
            blocks: w(4),
            vocab: w(5),
            positions: w(6),
        };
        let fits = w(0) == MAGIC
            && (1..=MAX_ENCODER_HIDDEN).contains(&s.hidden)
            && s.heads >= 1
            && (1..=MAX_ENCODER_FFN).contains(&(s.ffn as u64))
            && (1..=MAX_ENCODER_BLOCKS).contains(&(s.blocks as u64))
            && (1..=MAX_ENCODER_VOCAB).contains(&(s.vocab as u64))
            && (1..=MAX_ENCODER_TOKENS).contains(&s.positions)
            && s.len() == bytes.len() as u64;
        if !fits {
            return None;
        }
        let (h, f) = (s.hidden as usize, s.ffn as usize);
        let mut r = Reader {
            b: bytes,
            at: HEADER_LEN as usize,
        };
        let mut word_rq = Requant::default();
        let mut pos_rq = Requant::default();
        for _ in 0..h {
            word_rq.m.push(r.i32());
            word_rq.s.push(r.i32());
            pos_rq.m.push(r.i32());
            pos_rq.s.push(r.i32());
        }
        let ln = r.norm(h);
        let word = r.bytes(s.vocab as usize * h);
        let pos = r.bytes(s.positions as usize * h);
        let exp = (0..EXP_LEN).map(|_| r.i32()).collect();
        let mut blocks = Vec::with_capacity(s.blocks as usize);
        for _ in 0..s.blocks {
            let att = (r.i32(), r.i32());
            let q = r.dense(h, h, None);
            let k = r.dense(h, h, None);
            let v = r.dense(h, h, None);
            let mut ctx = Requant::default();
            for _ in 0..h {
                ctx.m.push(r.i32());
                ctx.s.push(r.i32());
            }
            let mut res1 = Requant::default();
            let o = r.dense(h, h, Some(&mut res1));
            let ln1 = r.norm(h);
            let f1 = r.dense(h, f, None);
            let gelu = (0..GELU_LEN).map(|_| r.i16()).collect();
            let mut res2 = Requant::default();
            let f2 = r.dense(f, h, Some(&mut res2));
            let ln2 = r.norm(h);
            blocks.push(Block {
                q,
                k,
                v,
                att,
                ctx,
                o,
                res1,
                ln1,
                f1,
                gelu,
                f2,
                res2,
                ln2,
            });
        }
        let e = Encoder {
            hidden: h,
            heads: s.heads as usize,
            word,
            word_rq,
            pos,
            pos_rq,
            ln,
            exp,
            blocks,
        };
        e.check().ok()?;
        Some(e)
    }

    /// Reads a slice string front to back (its length checked first).
    struct Reader<'a> {
        b: &'a [u8],
        at: usize,
    }

    impl Reader<'_> {
        fn i32(&mut self) -> i32 {
            let v = i32::from_le_bytes(self.b[self.at..self.at + 4].try_into().expect("4"));
            self.at += 4;
            v
        }

        fn i16(&mut self) -> i16 {
            let v = i16::from_le_bytes([self.b[self.at], self.b[self.at + 1]]);
            self.at += 2;
            v
        }

        fn bytes(&mut self, n: usize) -> Vec<i8> {
            let v = self.b[self.at..self.at + n]
                .iter()
                .map(|&x| x as i8)
                .collect();
            self.at += pad4(n as u64) as usize;
            v
        }

        fn norm(&mut self, h: usize) -> Norm {
            let shift = self.i32();
            let (mut g, mut b) = (Vec::with_capacity(h), Vec::with_capacity(h));
            for _ in 0..h {
                g.push(self.i32());
                b.push(self.i32());
            }
            Norm { g, b, shift }
        }

        fn dense(&mut self, inp: usize, out: usize, mut res: Option<&mut Requant>) -> Dense {
            let mut d = Dense {
                inp,
                out,
                ..Dense::default()
            };
            for _ in 0..out {
                d.bias.push(self.i32());
                d.rq.m.push(self.i32());
                d.rq.s.push(self.i32());
                if let Some(r) = res.as_deref_mut() {
                    r.m.push(self.i32());
                    r.s.push(self.i32());
                }
                d.weight.extend(self.bytes(inp));
            }
            d
        }
    }

    /// The texts' slice string: each text's count and ids at [`ids_stride`]`(limit)`.
    pub fn ids(texts: &[Vec<u32>], limit: u32) -> Vec<u8> {
        debug_assert!(texts.iter().all(|t| t.len() <= limit as usize));
        let stride = ids_stride(limit) as usize;
        let mut out = vec![0u8; texts.len() * stride];
        for (r, ids) in texts.iter().enumerate() {
            let row = &mut out[r * stride..(r + 1) * stride];
            row[..4].copy_from_slice(&(ids.len() as u32).to_le_bytes());
            for (i, id) in ids.iter().take(limit as usize).enumerate() {
                row[4 + 4 * i..8 + 4 * i].copy_from_slice(&id.to_le_bytes());
            }
        }
        out
    }
}

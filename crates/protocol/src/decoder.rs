//! Integer-only decoder (PROTOCOL §5, Generate): a llama-family causal language model with every
//! step an integer rule — 4-bit weights with integer block scales (a GGUF `Q4_1`/`Q8_0` model
//! kept exactly), int64 accumulators, RMSNorm with an exact integer square root, RoPE from an
//! integer table, grouped-query attention with the exp-table softmax, SwiGLU from a sigmoid
//! table, tied logits in Q16 — and a KV cache, so that generating token by token and one prefill
//! over the same tokens give the same logits bit for bit.
//!
//! This is the reference: plain loops that read as the protocol's text, every bound checked by
//! [`Decoder::check`] so that no step can overflow for any token sequence. Tokenization and
//! reading the model file are the keeper's business; this module takes token ids and tensors.

use crate::infer::ModelError;

pub mod random;

pub use crate::slices::decoder::{
    draw, rq, ACC_MAX, BLOCK, EXP_LEN, EXP_MAX, FRAC, MAX_FFN, MAX_LAYERS, MAX_POSITIONS,
    MAX_VOCAB, MAX_WIDTH, QK_MAX, RES_MAX, SIG_LEN, Y_MAX,
};

fn refuse<T>(msg: String) -> Result<T, ModelError> {
    Err(ModelError(msg))
}

/// Per-channel requantization in exact (128-bit) arithmetic:
/// `clamp(⌊(acc · m[c] + 2^(s[c]−1)) / 2^s[c]⌋, lo, hi)`, `|m|` in `1 ..= 2^31 − 1` (signed: a
/// norm's gain may be negative), `s` in `1 ..= 94`.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Rq {
    /// Multipliers, one per channel.
    pub m: Vec<i32>,
    /// Shifts, one per channel.
    pub s: Vec<i32>,
}

impl Rq {
    /// Channel `c` of `acc`, requantized and clamped to `lo ..= hi`.
    #[inline]
    pub fn apply(&self, c: usize, acc: i64, lo: i64, hi: i64) -> i64 {
        rq(acc, self.m[c], self.s[c], lo, hi)
    }

    fn check(&self, what: &str, channels: usize, min_shift: i32) -> Result<(), ModelError> {
        if self.m.len() != channels || self.s.len() != channels {
            return refuse(format!(
                "{what}'s multipliers and shifts hold {} and {} values, {channels} are needed",
                self.m.len(),
                self.s.len()
            ));
        }
        if let Some(c) = self.m.iter().position(|&m| m == 0 || m == i32::MIN) {
            return refuse(format!(
                "{what}'s multiplier {c} is {}: ±(1 ..= 2^31 − 1)",
                self.m[c]
            ));
        }
        if let Some(c) = self.s.iter().position(|&s| !(min_shift..=94).contains(&s)) {
            return refuse(format!(
                "{what}'s shift {c} is {}: {min_shift} ..= 94",
                self.s[c]
            ));
        }
        Ok(())
    }
}

/// A dense layer `out × inp` with block-quantized weights
/// `W[o][j] = d[o][j / 32] · q[o][j] + min[o][j / 32]` (`q` 4-bit, `0 ..= 15`, two to a byte as
/// GGUF's `Q4_1` blocks hold them) and the requantization of its accumulators.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Dense {
    /// Inputs (a multiple of 32).
    pub inp: usize,
    /// Outputs.
    pub out: usize,
    /// Row `o`'s block `b` is bytes `(o · inp + 32 b) / 2 ..` + 16: byte `i` holds element
    /// `32 b + i` in its low nibble and `32 b + 16 + i` in its high one.
    pub q4: Vec<u8>,
    /// Block scales, `out × inp / 32`.
    pub d: Vec<i32>,
    /// Block minimums, `out × inp / 32`.
    pub min: Vec<i32>,
    /// One per output.
    pub rq: Rq,
}

impl Dense {
    /// `q[o][j]`.
    #[inline]
    pub fn q(&self, o: usize, j: usize) -> i64 {
        let (b, i) = (j / BLOCK, j % BLOCK);
        let byte = self.q4[(o * self.inp + b * BLOCK) / 2 + i % 16];
        i64::from(if i < 16 { byte & 15 } else { byte >> 4 })
    }

    /// `W[o][j]`.
    pub fn w(&self, o: usize, j: usize) -> i64 {
        let b = o * (self.inp / BLOCK) + j / BLOCK;
        i64::from(self.d[b]) * self.q(o, j) + i64::from(self.min[b])
    }

    /// `Σ_j W[o][j] · x[j]` for one input row, block by block (exact in int64: [`Decoder::check`]).
    pub fn acc(&self, x: &[i64], o: usize) -> i64 {
        let nb = self.inp / BLOCK;
        (0..nb)
            .map(|b| {
                let xs = &x[b * BLOCK..(b + 1) * BLOCK];
                let qx: i64 = xs
                    .iter()
                    .enumerate()
                    .map(|(i, &v)| self.q(o, b * BLOCK + i) * v)
                    .sum();
                let sx: i64 = xs.iter().sum();
                i64::from(self.d[o * nb + b]) * qx + i64::from(self.min[o * nb + b]) * sx
            })
            .sum()
    }

    /// Shapes, lengths, nibbles, requantization, and the accumulator bound for inputs of
    /// magnitude at most 32 767, row by row: `32 767 · Σ_j |W[o][j]| ≤ 2^53`.
    fn check(&self, what: &str, inp: usize, out: usize, min_shift: i32) -> Result<(), ModelError> {
        if self.inp != inp || self.out != out {
            return refuse(format!(
                "the shapes do not chain: {what} is {}×{}, it must be {out}×{inp}",
                self.out, self.inp
            ));
        }
        let nb = inp / BLOCK;
        if self.q4.len() != inp * out / 2 || self.d.len() != nb * out || self.min.len() != nb * out
        {
            return refuse(format!(
                "{what} holds {} weight bytes and {} and {} block scales and minimums; its shape needs {}, {} and {}",
                self.q4.len(),
                self.d.len(),
                self.min.len(),
                inp * out / 2,
                nb * out,
                nb * out
            ));
        }
        self.rq.check(what, out, min_shift)?;
        for o in 0..out {
            let sum: i128 = (0..inp).map(|j| i128::from(self.w(o, j).abs())).sum();
            if sum * i128::from(Y_MAX as i32) > ACC_MAX {
                return refuse(format!(
                    "{what}'s accumulators could pass 2^53: 32767 · Σ|W[{o}][j]| = {}",
                    sum * 32_767
                ));
            }
        }
        Ok(())
    }
}

/// One decoder layer.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Layer {
    /// RMSNorm before attention: per-channel gain and output scale as one requantization.
    pub ln1: Rq,
    #[allow(missing_docs)]
    pub q: Dense,
    #[allow(missing_docs)]
    pub k: Dense,
    #[allow(missing_docs)]
    pub v: Dense,
    /// Scores to exp-table steps: `(m, s)`.
    pub att: (i32, i32),
    /// Attention output into the residual stream.
    pub o: Dense,
    /// RMSNorm before the feed-forward.
    pub ln2: Rq,
    #[allow(missing_docs)]
    pub gate: Dense,
    #[allow(missing_docs)]
    pub up: Dense,
    /// Gate values to sigmoid-table steps: `(m, s)`.
    pub sig: (i32, i32),
    /// Feed-forward output into the residual stream (its shifts less the per-token exponent).
    pub down: Dense,
}

/// The whole decoder.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Decoder {
    /// Hidden width H (a multiple of 32).
    pub width: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads (dividing `heads`).
    pub kv_heads: usize,
    /// Width of one head (even).
    pub head_dim: usize,
    /// RMSNorm's ε in residual units squared.
    pub eps: i64,
    /// `[position][pair][cos, sin]`, Q14.
    pub rope: Vec<i16>,
    /// `E[t]`, [`EXP_LEN`] entries.
    pub exp: Vec<i32>,
    /// `σ`, [`SIG_LEN`] entries, Q15.
    pub sigmoid: Vec<i32>,
    /// Token embeddings `vocab × H` (int8, `Q8_0`'s values) and their block scales
    /// `vocab × H / 32`: `E[t][c] = d[t][c / 32] · q[t][c]`, tied to the logits.
    pub emb_q: Vec<i8>,
    #[allow(missing_docs)]
    pub emb_d: Vec<i32>,
    /// An embedding row into the residual stream, per token.
    pub emb_rq: Rq,
    /// The final RMSNorm.
    pub out: Rq,
    /// Logits to Q16, per token.
    pub lm_rq: Rq,
    /// The layers, first to last.
    pub layers: Vec<Layer>,
}

/// A dense layer's accumulators `Σ_j W[o][j] · x[j]` for each row of inputs and each output
/// ([`Dense::acc`] or a faster equal).
pub type AccFn<'a> = dyn Fn(&Dense, &[Vec<i64>]) -> Vec<Vec<i64>> + Sync + 'a;

/// One row's attention ([`Decoder::attend`] or a faster equal): the decoder, the layer's
/// `att` requantization, the row's q, its sequence's cached keys and values, positions seen.
pub type AttnFn<'a> =
    dyn Fn(&Decoder, (i32, i32), &[i64], &[i16], &[i16], usize) -> Vec<i64> + Sync + 'a;

/// The reference's accumulators: [`Dense::acc`] for every row and output.
pub fn reference_acc(d: &Dense, xs: &[Vec<i64>]) -> Vec<Vec<i64>> {
    xs.iter()
        .map(|x| (0..d.out).map(|o| d.acc(x, o)).collect())
        .collect()
}

/// Keys and values of the positions seen so far, per layer (`kv_heads × head_dim` each).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cache {
    /// Per layer: keys after RoPE, position-major.
    pub k: Vec<Vec<i16>>,
    /// Per layer: values, position-major.
    pub v: Vec<Vec<i16>>,
    /// Positions held.
    pub len: usize,
}

impl Decoder {
    /// Tokens the vocabulary holds.
    pub fn vocab(&self) -> usize {
        self.emb_q.len() / self.width.max(1)
    }

    /// Most positions (prompt and generated tokens together): the RoPE table's rows.
    pub fn positions(&self) -> usize {
        self.rope.len() / self.head_dim.max(1)
    }

    /// Feed-forward width.
    pub fn ffn(&self) -> usize {
        self.layers.first().map_or(0, |l| l.gate.out)
    }

    /// Every bound, so that no step of [`forward`](Self::forward) can overflow for any ids below
    /// [`vocab`](Self::vocab) and up to [`positions`](Self::positions) of them.
    pub fn check(&self) -> Result<(), ModelError> {
        let h = self.width;
        if h == 0 || h > MAX_WIDTH || !h.is_multiple_of(BLOCK) {
            return refuse(format!(
                "the width is {h}: a multiple of 32 in 32 ..= {MAX_WIDTH}"
            ));
        }
        if self.heads == 0 || self.kv_heads == 0 || !self.heads.is_multiple_of(self.kv_heads) {
            return refuse(format!(
                "{} key/value heads do not divide {} query heads",
                self.kv_heads, self.heads
            ));
        }
        let hd = self.head_dim;
        if hd == 0 || !hd.is_multiple_of(2) || hd > 256 {
            return refuse(format!("the head width is {hd}: even, 2 ..= 256"));
        }
        let (qw, kw) = (self.heads * hd, self.kv_heads * hd);
        if !qw.is_multiple_of(BLOCK) || !kw.is_multiple_of(BLOCK) {
            return refuse(format!(
                "heads × head width ({qw}, {kw}) must be multiples of 32"
            ));
        }
        if self.layers.is_empty() || self.layers.len() > MAX_LAYERS {
            return refuse(format!("{} layers: 1 ..= {MAX_LAYERS}", self.layers.len()));
        }
        let vocab = self.vocab();
        if self.emb_q.len() != vocab * h || !(1..=MAX_VOCAB).contains(&vocab) {
            return refuse(format!(
                "the embeddings hold {} values: a whole number of rows of {h}, 1 ..= {MAX_VOCAB} rows",
                self.emb_q.len()
            ));
        }
        if self.emb_d.len() != vocab * (h / BLOCK) {
            return refuse(format!(
                "the embeddings' block scales hold {} values, {} are needed",
                self.emb_d.len(),
                vocab * (h / BLOCK)
            ));
        }
        let positions = self.positions();
        if self.rope.len() != positions * hd || !(1..=MAX_POSITIONS).contains(&positions) {
            return refuse(format!(
                "the RoPE table holds {} values: rows of {hd}, 1 ..= {MAX_POSITIONS} rows",
                self.rope.len()
            ));
        }
        if self.rope.iter().any(|&c| i64::from(c).abs() > 1 << FRAC) {
            return refuse("a RoPE table entry is outside ±2^14".into());
        }
        if self.eps < 0 || self.eps > 1 << 62 {
            return refuse(format!("ε is {}: 0 ..= 2^62", self.eps));
        }
        if self.exp.len() != EXP_LEN
            || self.exp[0] < 1
            || self.exp.iter().any(|&e| !(0..=EXP_MAX).contains(&e))
        {
            return refuse(format!(
                "the exp table must have {EXP_LEN} entries in 0 ..= 2^20, the first ≥ 1"
            ));
        }
        if self.sigmoid.len() != SIG_LEN
            || self.sigmoid.iter().any(|&e| !(0..=1 << 15).contains(&e))
        {
            return refuse(format!(
                "the sigmoid table must have {SIG_LEN} entries in 0 ..= 2^15"
            ));
        }
        // an embedding row's value |d · q| ≤ 2^31 · 127, times m < 2^31: within 128 bits
        self.emb_rq.check("the embeddings", vocab, 1)?;
        self.lm_rq.check("the logits", vocab, 1)?;
        self.out.check("the final norm", h, 1)?;
        for t in 0..vocab {
            let sum: i128 = (0..h)
                .map(|c| {
                    i128::from(self.emb_d[t * (h / BLOCK) + c / BLOCK]).abs()
                        * i128::from(self.emb_q[t * h + c]).abs()
                })
                .sum();
            if sum * 32_767 > ACC_MAX {
                return refuse(format!(
                    "the logits' accumulators could pass 2^53 at token {t}"
                ));
            }
        }
        let f = self.ffn();
        if f == 0 || f > MAX_FFN || !f.is_multiple_of(BLOCK) {
            return refuse(format!(
                "the feed-forward width is {f}: a multiple of 32 in 32 ..= {MAX_FFN}"
            ));
        }
        for (i, l) in self.layers.iter().enumerate() {
            let p = |n: &str| format!("layer {i}'s {n}");
            l.ln1.check(&p("ln1"), h, 1)?;
            l.ln2.check(&p("ln2"), h, 1)?;
            l.q.check(&p("q"), h, qw, 1)?;
            l.k.check(&p("k"), h, kw, 1)?;
            l.v.check(&p("v"), h, kw, 1)?;
            l.o.check(&p("o"), qw, h, 1)?;
            l.gate.check(&p("gate"), h, f, 1)?;
            l.up.check(&p("up"), h, f, 1)?;
            // the per-token exponent k ≤ 30 (|p| < 2^45) comes off these shifts
            l.down.check(&p("down"), f, h, 31)?;
            for (n, (m, s)) in [("att", l.att), ("sig", l.sig)] {
                if m == 0 || m == i32::MIN || !(1..=94).contains(&s) {
                    return refuse(format!("{}: multiplier {m}, shift {s}", p(n)));
                }
            }
        }
        Ok(())
    }

    /// An empty cache for this decoder.
    pub fn cache(&self) -> Cache {
        Cache {
            k: vec![vec![]; self.layers.len()],
            v: vec![vec![]; self.layers.len()],
            len: 0,
        }
    }

    /// The residual stream's row for token `t`.
    pub fn embed(&self, t: usize) -> Vec<i64> {
        let h = self.width;
        (0..h)
            .map(|c| {
                let v = i64::from(self.emb_d[t * (h / BLOCK) + c / BLOCK])
                    * i64::from(self.emb_q[t * h + c]);
                self.emb_rq.apply(t, v, -RES_MAX, RES_MAX)
            })
            .collect()
    }

    /// The tokens `ids` after those in `cache` (which they extend): the final norm's output
    /// row for each (int16), for [`logits`](Self::logits). Ids must be below
    /// [`vocab`](Self::vocab) and the positions within [`positions`](Self::positions).
    pub fn forward(&self, ids: &[u32], cache: &mut Cache) -> Vec<Vec<i64>> {
        self.forward_with(ids, cache, &reference_acc)
    }

    /// [`forward`](Self::forward) with the dense layers' accumulators (`Σ_j W[o][j] · x[j]` for
    /// every row and output) computed by `acc`: the reference's or a faster equal.
    pub fn forward_with(&self, ids: &[u32], cache: &mut Cache, acc: &AccFn) -> Vec<Vec<i64>> {
        self.forward_many(&[ids], std::slice::from_mut(cache), acc)
            .pop()
            .expect("one sequence")
    }

    /// Several sequences at once, each its tokens `ids[s]` after those in `caches[s]`: every
    /// dense layer over all their rows together (one GEMM), attention per sequence over its
    /// own cache. Each sequence's rows are what [`forward_with`](Self::forward_with) gives it
    /// alone, bit for bit: every step but the dense layers is per row, and theirs per row too.
    pub fn forward_many(
        &self,
        ids: &[&[u32]],
        caches: &mut [Cache],
        acc: &AccFn,
    ) -> Vec<Vec<Vec<i64>>> {
        self.forward_many_with(ids, caches, acc, &|d, att, q, k, v, seen| {
            d.attend(att, q, k, v, seen)
        })
    }

    /// [`forward_many`](Self::forward_many) with each row's attention by `attn` too.
    pub fn forward_many_with(
        &self,
        ids: &[&[u32]],
        caches: &mut [Cache],
        acc: &AccFn,
        attn: &AttnFn,
    ) -> Vec<Vec<Vec<i64>>> {
        assert_eq!(ids.len(), caches.len(), "a cache per sequence");
        // every row's sequence and position
        let mut rows = vec![];
        for (s, (ids, c)) in ids.iter().zip(caches.iter()).enumerate() {
            assert!(c.len + ids.len() <= self.positions(), "past the RoPE table");
            rows.extend((0..ids.len()).map(|n| (s, c.len + n)));
        }
        let mut xs: Vec<Vec<i64>> = ids
            .iter()
            .flat_map(|ids| ids.iter())
            .map(|&t| self.embed(t as usize))
            .collect();
        for (i, l) in self.layers.iter().enumerate() {
            self.layer(l, caches, i, &rows, &mut xs, acc, attn);
        }
        for (c, ids) in caches.iter_mut().zip(ids) {
            c.len += ids.len();
        }
        let mut out: Vec<Vec<Vec<i64>>> = vec![vec![]; ids.len()];
        for ((s, _), x) in rows.iter().zip(&xs) {
            out[*s].push(rms_norm(x, &self.out, self.eps));
        }
        out
    }

    /// One layer (`i`) on the residual rows `xs` (row n of sequence `rows[n].0` at position
    /// `rows[n].1`), their keys and values appended to their sequences' caches.
    #[allow(clippy::too_many_arguments)]
    fn layer(
        &self,
        l: &Layer,
        caches: &mut [Cache],
        i: usize,
        rows: &[(usize, usize)],
        xs: &mut [Vec<i64>],
        acc: &AccFn,
        attn: &AttnFn,
    ) {
        let dense =
            |d: &Dense, rows: &[Vec<i64>], lo: i64, hi: i64, shifts: &[u32]| -> Vec<Vec<i64>> {
                acc(d, rows)
                    .iter()
                    .zip(shifts.iter().copied().chain(std::iter::repeat(0)))
                    .map(|(a, k)| {
                        a.iter()
                            .enumerate()
                            .map(|(o, &v)| rq(v, d.rq.m[o], d.rq.s[o] - k as i32, lo, hi))
                            .collect()
                    })
                    .collect()
            };
        let ys: Vec<Vec<i64>> = xs.iter().map(|x| rms_norm(x, &l.ln1, self.eps)).collect();
        let mut q = dense(&l.q, &ys, -QK_MAX, QK_MAX, &[]);
        let mut k = dense(&l.k, &ys, -QK_MAX, QK_MAX, &[]);
        let v = dense(&l.v, &ys, -Y_MAX, Y_MAX, &[]);
        for ((q, k), &(_, pos)) in q.iter_mut().zip(k.iter_mut()).zip(rows) {
            self.rotate(q, pos);
            self.rotate(k, pos);
        }
        for ((k, v), &(s, _)) in k.iter().zip(&v).zip(rows) {
            caches[s].k[i].extend(k.iter().map(|&e| e as i16));
            caches[s].v[i].extend(v.iter().map(|&e| e as i16));
        }
        // each row's attention on its own (over the cores: they read the caches only)
        use rayon::prelude::*;
        let caches = &*caches;
        let ctxs: Vec<Vec<i64>> = q
            .par_iter()
            .zip(rows)
            .map(|(q, &(s, pos))| attn(self, l.att, q, &caches[s].k[i], &caches[s].v[i], pos + 1))
            .collect();
        let o = dense(&l.o, &ctxs, -RES_MAX, RES_MAX, &[]);
        for (x, o) in xs.iter_mut().zip(o) {
            for (x, o) in x.iter_mut().zip(o) {
                *x = (*x + o).clamp(-RES_MAX, RES_MAX);
            }
        }
        let y2: Vec<Vec<i64>> = xs.iter().map(|x| rms_norm(x, &l.ln2, self.eps)).collect();
        let g = dense(&l.gate, &y2, -Y_MAX, Y_MAX, &[]);
        let u = dense(&l.up, &y2, -Y_MAX, Y_MAX, &[]);
        let half = SIG_LEN as i64 / 2;
        let mut kappa = Vec::with_capacity(xs.len());
        let hs: Vec<Vec<i64>> = g
            .iter()
            .zip(&u)
            .map(|(g, u)| {
                let p: Vec<i64> = g
                    .iter()
                    .zip(u)
                    .map(|(&g, &u)| {
                        let i = rq(g, l.sig.0, l.sig.1, -half, half - 1) + half;
                        g * i64::from(self.sigmoid[i as usize]) * u
                    })
                    .collect();
                let top = p.iter().map(|v| v.unsigned_abs()).max().unwrap_or(0);
                let k = (64 - top.leading_zeros()).saturating_sub(15);
                kappa.push(k);
                p.iter()
                    .map(|&v| {
                        let r = if k > 0 { (v + (1 << (k - 1))) >> k } else { v };
                        r.clamp(-Y_MAX, Y_MAX)
                    })
                    .collect()
            })
            .collect();
        let f = dense(&l.down, &hs, -RES_MAX, RES_MAX, &kappa);
        for (x, f) in xs.iter_mut().zip(f) {
            for (x, f) in x.iter_mut().zip(f) {
                *x = (*x + f).clamp(-RES_MAX, RES_MAX);
            }
        }
    }

    /// One row's attention over the first `seen` cached positions of its sequence (`kc`, `vc`:
    /// position-major, `kv_heads × head_dim` each): per query head, `S_j = Σ_d q[d] · k_j[d]`
    /// (each product within `2^30`: q and k are within `±2^15` after RoPE), `e_j =
    /// exp[rq(min(max S − S_j, 2^32 − 1), att)]`, `ctx[d] = ⌊(2 Σ_j e_j v_j[d] + Σ e) / (2 Σ e)⌋`.
    /// The loops add in wrapping operations that never wrap (each product pair within 2^31,
    /// the weighted sums within 2^48): the same values, and loops an overflow-checked build
    /// still vectorizes. Inlined where it is called, so the keeper compiles it for each kernel
    /// set's vectors.
    #[inline(always)]
    pub fn attend(
        &self,
        att: (i32, i32),
        q: &[i64],
        kc: &[i16],
        vc: &[i16],
        seen: usize,
    ) -> Vec<i64> {
        let (hd, grp) = (self.head_dim, self.heads / self.kv_heads);
        let kw = self.kv_heads * hd;
        let mut ctx = vec![0i64; self.heads * hd];
        let mut scores = vec![0i64; seen];
        let mut num = vec![0i64; hd];
        for h in 0..self.heads {
            let off = (h / grp) * hd;
            let qh: Vec<i16> = q[h * hd..(h + 1) * hd].iter().map(|&v| v as i16).collect();
            for (j, s) in scores.iter_mut().enumerate() {
                let kj = &kc[j * kw + off..j * kw + off + hd];
                // products in pairs within 2^31, summed in int32, then the pairs in int64
                let mut t = 0i64;
                for (qp, kp) in qh.chunks_exact(2).zip(kj.chunks_exact(2)) {
                    let pair = (i32::from(qp[0]).wrapping_mul(i32::from(kp[0])))
                        .wrapping_add(i32::from(qp[1]).wrapping_mul(i32::from(kp[1])));
                    t = t.wrapping_add(i64::from(pair));
                }
                *s = t;
            }
            let top = *scores.iter().max().expect("one position at least");
            for s in scores.iter_mut() {
                let d = (top - *s).min((1 << 32) - 1);
                *s = i64::from(self.exp[rq(d, att.0, att.1, 0, EXP_LEN as i64 - 1) as usize]);
            }
            let den: i64 = scores.iter().sum();
            num.fill(0);
            for (j, &e) in scores.iter().enumerate() {
                let vj = &vc[j * kw + off..j * kw + off + hd];
                for (n, &v) in num.iter_mut().zip(vj) {
                    *n = n.wrapping_add(e.wrapping_mul(i64::from(v)));
                }
            }
            for (c, &n) in ctx[h * hd..(h + 1) * hd].iter_mut().zip(&num) {
                *c = (2 * n + den).div_euclid(2 * den);
            }
        }
        ctx
    }

    /// RoPE on each head of `x` at position `pos`: pair `(a, b)` at `2i, 2i + 1` becomes
    /// `(⌊(a c − b s + 2^13) / 2^14⌋, ⌊(a s + b c + 2^13) / 2^14⌋)`.
    fn rotate(&self, x: &mut [i64], pos: usize) {
        let hd = self.head_dim;
        for head in x.chunks_exact_mut(hd) {
            for i in 0..hd / 2 {
                let c = i64::from(self.rope[pos * hd + 2 * i]);
                let s = i64::from(self.rope[pos * hd + 2 * i + 1]);
                let (a, b) = (head[2 * i], head[2 * i + 1]);
                head[2 * i] = (a * c - b * s + (1 << (FRAC - 1))) >> FRAC;
                head[2 * i + 1] = (a * s + b * c + (1 << (FRAC - 1))) >> FRAC;
            }
        }
    }

    /// The Q16 logits of a final-norm row: `rq(Σ_c E[t][c] · y[c], lm[t])` per token `t`.
    pub fn logits(&self, y: &[i64]) -> Vec<i64> {
        let h = self.width;
        (0..self.vocab())
            .map(|t| {
                let acc: i64 = (0..h)
                    .map(|c| {
                        i64::from(self.emb_d[t * (h / BLOCK) + c / BLOCK])
                            * i64::from(self.emb_q[t * h + c])
                            * y[c]
                    })
                    .sum();
                self.lm_rq.apply(t, acc, -RES_MAX, RES_MAX)
            })
            .collect()
    }
}

/// The first index of the largest value (greedy decoding: the lowest token id wins a tie).
pub fn argmax(v: &[i64]) -> usize {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    best
}

/// How a `Generate` job picks each token (PROTOCOL §5, Generate): greedily, or by sampling in
/// integers from a stream the job fixes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Sampling {
    /// Temperature in Q8 (256 is 1.0), `0 ..= 65 536`; 0 decodes greedily.
    pub temperature: u32,
    /// Keep the `top_k` likeliest tokens (0: all).
    pub top_k: u32,
    /// Keep the fewest likeliest tokens whose weight is at least this fraction of the whole, in
    /// Q16 (`1 ..= 65 536`; 65 536 keeps every token).
    pub top_p: u32,
    /// The client's seed: another value draws other completions of the same prompts.
    pub seed: u64,
}

/// Largest sampling temperature (Q8: 256.0).
pub const MAX_TEMPERATURE: u32 = 1 << 16;
/// `top_p` that keeps every token (Q16 1.0).
pub const TOP_P_ONE: u32 = 1 << 16;

impl Sampling {
    /// Greedy decoding.
    pub const GREEDY: Sampling = Sampling {
        temperature: 0,
        top_k: 0,
        top_p: TOP_P_ONE,
        seed: 0,
    };

    /// Why the rule cannot be used with a vocabulary of `vocab`, if it cannot.
    pub fn check(&self, vocab: usize) -> Result<(), ModelError> {
        if self.temperature > MAX_TEMPERATURE {
            return refuse(format!(
                "temperature {} (Q8) is above {MAX_TEMPERATURE} (256.0)",
                self.temperature
            ));
        }
        if self.top_k as usize > vocab {
            return refuse(format!(
                "top-k {} is more than the vocabulary's {vocab} tokens",
                self.top_k
            ));
        }
        if !(1..=TOP_P_ONE).contains(&self.top_p) {
            return refuse(format!(
                "top-p {} (Q16) is not in 1 ..= 65 536 (a fraction above 0, at most 1)",
                self.top_p
            ));
        }
        Ok(())
    }

    /// The token picked from `logits` (Q16) with `draw` the step's 64 uniform bits: the first
    /// largest logit when greedy; else the candidates ranked by logit (the lower id first on a
    /// tie), cut to the first `top_k`, weighted `w_i = exp[min(⌊(ℓ_max − ℓ_i) · 4 / τ⌋, 16 383)]`
    /// (`e^((ℓ_i − ℓ_max) / T)` with `exp` the model's table of `2^20 · e^(−t/1024)`), cut to
    /// the shortest prefix whose weight `c` has `c · 2^16 ≥ top_p · W` (W all the candidates'),
    /// then the first whose running weight exceeds `⌊draw · c / 2^64⌋`.
    pub fn pick(&self, logits: &[i64], exp: &[i32], draw: u64) -> usize {
        if self.temperature == 0 {
            return argmax(logits);
        }
        let mut order: Vec<usize> = (0..logits.len()).collect();
        let rank = |a: &usize, b: &usize| logits[*b].cmp(&logits[*a]).then(a.cmp(b));
        let k = self.top_k as usize;
        if k > 0 && k < order.len() {
            // the first k in rank order, found without sorting them all (a total order: the
            // same k, in the same order, as a full sort)
            order.select_nth_unstable_by(k - 1, rank);
            order.truncate(k);
        }
        order.sort_unstable_by(rank);
        let top = logits[order[0]];
        let tau = i128::from(self.temperature);
        let last = exp.len() as i128 - 1;
        let w: Vec<u64> = order
            .iter()
            .map(|&i| {
                let t = (i128::from(top - logits[i]) * 4 / tau).min(last);
                exp[t as usize].max(0) as u64
            })
            .collect();
        let whole: u128 = w.iter().map(|&v| u128::from(v)).sum();
        let mut kept = 0u128;
        let mut n = 0;
        for &v in &w {
            kept += u128::from(v);
            n += 1;
            if kept << 16 >= u128::from(self.top_p) * whole {
                break;
            }
        }
        let r = (u128::from(draw) * kept) >> 64;
        let mut run = 0u128;
        for (k, &v) in w[..n].iter().enumerate() {
            run += u128::from(v);
            if run > r {
                return order[k];
            }
        }
        order[0]
    }
}

/// Integer RMSNorm of a residual row, to int16: `sh` = the bits of `max|x|` over 26,
/// `u = x ≫ sh`, `r = ⌊√((⌊Σu² / H⌋ + (ε ≫ 2 sh)) · 2^32)⌋` (so `r / 2^16` is u's RMS),
/// `z = ⌊u · 2^30 / max(r, 1)⌋` (Q14), `y[c] = rq(z, g[c])` clamped to `±32 767`.
pub fn rms_norm(x: &[i64], g: &Rq, eps: i64) -> Vec<i64> {
    let top = x.iter().map(|v| v.unsigned_abs()).max().unwrap_or(0);
    let sh = (64 - top.leading_zeros()).saturating_sub(26);
    let u: Vec<i64> = x.iter().map(|&v| v >> sh).collect();
    let ss: u128 = u.iter().map(|&v| (v.unsigned_abs() as u128).pow(2)).sum();
    let ms = ss / x.len() as u128 + (eps >> (2 * sh)) as u128;
    let r = (ms << 32).isqrt().max(1) as i64;
    u.iter()
        .enumerate()
        .map(|(c, &v)| g.apply(c, (v << 30).div_euclid(r), -Y_MAX, Y_MAX))
        .collect()
}

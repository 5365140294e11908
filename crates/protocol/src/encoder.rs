//! Integer-only transformer encoder (PROTOCOL §5, Encoder): a BERT-family sentence encoder
//! with every step an integer rule — int8 GEMMs with int32 accumulators, integer softmax from
//! an exp table, integer LayerNorm with `⌊√n⌋`, GELU from an int16 table, a fixed-point
//! residual stream — and mean pooling to one int16 embedding per text.
//!
//! This is the reference: plain loops that read as the protocol's text, every bound checked by
//! [`Encoder::check`] so that no step can overflow for any token sequence. Tokenization and
//! reading the model file are the keeper's business; this module takes token ids and tensors.

use crate::infer::ModelError;

/// Entries of the exp table: `E[t] ≈ 2^15 · e^(−t/64)` in the converter, any values in
/// `0 ..= 2^15` with `E[0] ≥ 1` to the protocol.
pub const EXP_LEN: usize = 1024;
/// Entries of a GELU table, indexed by `u + 512` for `u ∈ −512 ..= 511`.
pub const GELU_LEN: usize = 1024;
/// Half a GELU table: its index is `u + GELU_HALF`.
pub const GELU_HALF: i64 = 512;
/// Largest magnitude of a GELU table's int16 entry: the feed-forward-out layer's operand.
pub const GELU_MAX: i64 = 1 << 15;
/// LayerNorm's normalized value is `⌊d · 2^12 / σ⌋`.
pub const Z_FRAC: u32 = 12;
/// Every term added into the residual stream is clamped to `±2^24`.
pub const RES_CLAMP: i64 = 1 << 24;
/// Largest LayerNorm output (int16, symmetric).
pub const Y_MAX: i64 = 32_767;
/// Probabilities are Q15.
pub const P_FRAC: u32 = 15;
/// Widest hidden state.
pub const MAX_HIDDEN: usize = crate::job::MAX_ENCODER_HIDDEN as usize;
/// Widest feed-forward layer.
pub const MAX_FFN: usize = crate::job::MAX_ENCODER_FFN as usize;
/// Most blocks.
pub const MAX_BLOCKS: usize = crate::job::MAX_ENCODER_BLOCKS as usize;
/// Most positions (tokens in one text, `[CLS]` and `[SEP]` included).
pub const MAX_POSITIONS: usize = crate::job::MAX_ENCODER_TOKENS as usize;
/// Largest vocabulary.
pub const MAX_VOCAB: usize = crate::job::MAX_ENCODER_VOCAB as usize;

/// Per-channel fixed-point requantization: `clamp(⌊(acc · m[c] + 2^(s[c]−1)) / 2^s[c]⌋, lo, hi)`
/// in int64, `m` in `1 ..= 2^31 − 1`, `s` in `1 ..= 62` (the division is an arithmetic shift:
/// rounding half up).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Requant {
    /// Multipliers, one per channel.
    pub m: Vec<i32>,
    /// Shifts, one per channel.
    pub s: Vec<i32>,
}

impl Requant {
    /// Channel `c` of `acc`, requantized and clamped to `lo ..= hi`. `|acc| ≤ 2^31` keeps
    /// `acc · m + 2^61` inside int64 (every caller's bound, [`Encoder::check`]).
    #[inline]
    pub fn apply(&self, c: usize, acc: i64, lo: i64, hi: i64) -> i64 {
        debug_assert!(acc.abs() <= 1 << 31, "the requantization's operand bound");
        let s = self.s[c];
        ((acc * i64::from(self.m[c]) + (1i64 << (s - 1))) >> s).clamp(lo, hi)
    }

    fn check(&self, what: &str, channels: usize) -> Result<(), ModelError> {
        if self.m.len() != channels || self.s.len() != channels {
            return refuse(format!(
                "{what}'s multipliers and shifts hold {} and {} values, {channels} are needed",
                self.m.len(),
                self.s.len()
            ));
        }
        if let Some(c) = self.m.iter().position(|&m| m < 1) {
            return refuse(format!(
                "{what}'s multiplier {c} is {}: 1 ..= 2^31 − 1",
                self.m[c]
            ));
        }
        if let Some(c) = self.s.iter().position(|&s| !(1..=62).contains(&s)) {
            return refuse(format!("{what}'s shift {c} is {}: 1 ..= 62", self.s[c]));
        }
        Ok(())
    }
}

/// A dense layer `out × inp` (int8 weights, row-major `W[o][j]`, int32 biases) and the
/// requantization of its accumulators.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Dense {
    /// Inputs.
    pub inp: usize,
    /// Outputs.
    pub out: usize,
    /// `W[o][j]` at `o · inp + j`.
    pub weight: Vec<i8>,
    /// One per output.
    pub bias: Vec<i32>,
    /// One per output.
    pub rq: Requant,
}

impl Dense {
    /// `bias[o] + Σ_j W[o][j] · x[j]` for one input row (exact in int32: [`Encoder::check`]).
    pub fn acc(&self, x: &[i64], o: usize) -> i64 {
        let w = &self.weight[o * self.inp..(o + 1) * self.inp];
        i64::from(self.bias[o])
            + w.iter()
                .zip(x)
                .map(|(&w, &x)| i64::from(w) * x)
                .sum::<i64>()
    }

    /// Every row of `x` (`rows × inp`) through the layer, requantized to `lo ..= hi`.
    pub fn apply(&self, x: &[i64], lo: i64, hi: i64) -> Vec<i64> {
        let mut y = Vec::with_capacity(x.len() / self.inp * self.out);
        for row in x.chunks_exact(self.inp) {
            y.extend((0..self.out).map(|o| self.rq.apply(o, self.acc(row, o), lo, hi)));
        }
        y
    }

    /// Shape, lengths, requantization, and the accumulator bound for inputs of magnitude at
    /// most `operand`, row by row: `|bias[o]| + operand · Σ_j |W[o][j]| ≤ 2^31 − 1` (the
    /// largest sum any inputs can make, so int32 accumulators are exact).
    fn check(&self, what: &str, inp: usize, out: usize, operand: i64) -> Result<(), ModelError> {
        if self.inp != inp || self.out != out {
            return refuse(format!(
                "the shapes do not chain: {what} is {}×{}, it must be {out}×{inp}",
                self.out, self.inp
            ));
        }
        if self.weight.len() != inp * out || self.bias.len() != out {
            return refuse(format!(
                "{what} holds {} weights and {} biases, its shape needs {} and {out}",
                self.weight.len(),
                self.bias.len(),
                inp * out
            ));
        }
        self.rq.check(what, out)?;
        for (o, (row, &bias)) in self.weight.chunks_exact(inp).zip(&self.bias).enumerate() {
            if !acc_fits(bias, row, operand) {
                return refuse(format!(
                    "{what}'s accumulators could overflow int32: |bias[{o}]| + {operand} · Σ|W[{o}][j]| > 2^31 − 1"
                ));
            }
        }
        Ok(())
    }
}

/// Whether a dense output's accumulator stays in int32 for any inputs of magnitude at most
/// `operand`: `|bias| + operand · Σ_j |w_j| ≤ 2^31 − 1` (PROTOCOL §5, Encoder).
pub fn acc_fits(bias: i32, row: &[i8], operand: i64) -> bool {
    let weights: i64 = row.iter().map(|&w| i64::from(w).abs()).sum();
    i64::from(bias).abs() + operand * weights <= i64::from(i32::MAX)
}

/// Integer LayerNorm: per channel `g`, `b` and one output shift.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Norm {
    /// Scales, one per channel.
    pub g: Vec<i32>,
    /// Offsets, one per channel.
    pub b: Vec<i32>,
    /// Output shift, 1 ..= 62.
    pub shift: i32,
}

impl Norm {
    /// One row `r` (each `|r| ≤ 2^25`) normalized: `μ = ⌊Σr / n⌋`, `d = r − μ`,
    /// `σ = max(⌊√⌊Σd² / n⌋⌋, 1)`, `z = ⌊d · 2^12 / σ⌋`,
    /// `y = clamp(⌊(z · g + b + 2^(t−1)) / 2^t⌋, −32767, 32767)`; every division a floor.
    pub fn apply(&self, r: &[i64], y: &mut [i64]) {
        let n = r.len() as i64;
        let mu = r.iter().sum::<i64>().div_euclid(n);
        let var = r
            .iter()
            .map(|&v| (v - mu) * (v - mu))
            .sum::<i64>()
            .div_euclid(n);
        let sigma = (var as u64).isqrt().max(1) as i64;
        let t = self.shift;
        for (c, (&v, y)) in r.iter().zip(y.iter_mut()).enumerate() {
            let z = ((v - mu) << Z_FRAC).div_euclid(sigma);
            let v = z * i64::from(self.g[c]) + i64::from(self.b[c]) + (1i64 << (t - 1));
            *y = (v >> t).clamp(-Y_MAX, Y_MAX);
        }
    }

    fn check(&self, what: &str, channels: usize) -> Result<(), ModelError> {
        if self.g.len() != channels || self.b.len() != channels {
            return refuse(format!(
                "{what} holds {} scales and {} offsets, {channels} are needed",
                self.g.len(),
                self.b.len()
            ));
        }
        if !(1..=62).contains(&self.shift) {
            return refuse(format!("{what}'s shift is {}: 1 ..= 62", self.shift));
        }
        Ok(())
    }
}

/// One encoder block (post-LayerNorm, as BERT).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Block {
    /// Query, key and value projections (to int8).
    pub q: Dense,
    #[allow(missing_docs)]
    pub k: Dense,
    #[allow(missing_docs)]
    pub v: Dense,
    /// Score difference → exp-table index: `min(⌊(δ · m + 2^(s−1)) / 2^s⌋, 1023)`.
    pub att: (i32, i32),
    /// Q15 probabilities × values → int8 context, per channel.
    pub ctx: Requant,
    /// Attention output projection (into the residual stream).
    pub o: Dense,
    /// The block's input (int16) into the residual stream, per channel.
    pub res1: Requant,
    /// LayerNorm after attention.
    pub ln1: Norm,
    /// Feed-forward in (to a GELU index `−512 ..= 511`).
    pub f1: Dense,
    /// GELU by table: `gelu[u + 512]`, int16 (the feed-forward's 1 536 outputs are the step
    /// that loses most in int8: PROTOCOL §5).
    pub gelu: Vec<i16>,
    /// Feed-forward out (into the residual stream).
    pub f2: Dense,
    /// The attention LayerNorm's output into the residual stream.
    pub res2: Requant,
    /// LayerNorm after the feed-forward.
    pub ln2: Norm,
}

/// A BERT-family sentence encoder with mean pooling.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Encoder {
    /// Hidden width H.
    pub hidden: usize,
    /// Attention heads (dividing H).
    pub heads: usize,
    /// Word embeddings, `vocab × H` int8, and their requantization into the residual stream.
    pub word: Vec<i8>,
    #[allow(missing_docs)]
    pub word_rq: Requant,
    /// Position embeddings (token type 0 folded in), `positions × H` int8.
    pub pos: Vec<i8>,
    #[allow(missing_docs)]
    pub pos_rq: Requant,
    /// LayerNorm of the embeddings.
    pub ln: Norm,
    /// `E[t]`, [`EXP_LEN`] entries.
    pub exp: Vec<i32>,
    /// The blocks, first to last.
    pub blocks: Vec<Block>,
}

/// A dense layer's computation over rows, requantized to `lo ..= hi` ([`Dense::apply`] or a
/// faster equal).
pub type DenseFn<'a> = dyn Fn(&Dense, &[i64], i64, i64) -> Vec<i64> + Sync + 'a;

fn refuse<T>(msg: String) -> Result<T, ModelError> {
    Err(ModelError(msg))
}

impl Encoder {
    /// Tokens the vocabulary holds.
    pub fn vocab(&self) -> usize {
        self.word.len() / self.hidden.max(1)
    }

    /// Most tokens of one text (the position table's length).
    pub fn positions(&self) -> usize {
        self.pos.len() / self.hidden.max(1)
    }

    /// Feed-forward width (the first block's).
    pub fn ffn(&self) -> usize {
        self.blocks.first().map_or(0, |b| b.f1.out)
    }

    /// Work units one token costs with texts of up to `limit` tokens (the job's work per
    /// token, [`crate::job::encoder_work_per_token`]): the GEMMs, the attention at the limit
    /// and the element-wise steps, so that no shape is priced far below what it costs.
    pub fn work_per_token(&self, limit: usize) -> u64 {
        crate::job::encoder_work_per_token(
            self.blocks.len() as u64,
            self.hidden as u64,
            self.ffn() as u64,
            self.heads as u64,
            limit as u64,
        )
    }

    /// Every bound, so that no step of [`embed`](Self::embed) can overflow for any ids below
    /// [`vocab`](Self::vocab) and up to [`positions`](Self::positions) of them.
    pub fn check(&self) -> Result<(), ModelError> {
        let h = self.hidden;
        if h == 0 || h > MAX_HIDDEN {
            return refuse(format!("the hidden width is {h}: 1 ..= {MAX_HIDDEN}"));
        }
        if self.heads == 0 || !h.is_multiple_of(self.heads) {
            return refuse(format!(
                "{} heads do not divide the hidden width {h}",
                self.heads
            ));
        }
        let (vocab, positions) = (self.vocab(), self.positions());
        if self.word.len() != vocab * h || !(1..=MAX_VOCAB).contains(&vocab) {
            return refuse(format!(
                "the word embeddings hold {} values: a whole number of rows of {h}, 1 ..= {MAX_VOCAB} rows",
                self.word.len()
            ));
        }
        if self.pos.len() != positions * h || !(1..=MAX_POSITIONS).contains(&positions) {
            return refuse(format!(
                "the position embeddings hold {} values: a whole number of rows of {h}, 1 ..= {MAX_POSITIONS} rows",
                self.pos.len()
            ));
        }
        self.word_rq.check("the word embeddings", h)?;
        self.pos_rq.check("the position embeddings", h)?;
        self.ln.check("the embeddings' LayerNorm", h)?;
        if self.exp.len() != EXP_LEN {
            return refuse(format!(
                "the exp table has {} entries, it must have {EXP_LEN}",
                self.exp.len()
            ));
        }
        if self.exp[0] < 1 || self.exp.iter().any(|&e| !(0..=1 << P_FRAC).contains(&e)) {
            return refuse(
                "the exp table's entries must be 0 ..= 32768, the first at least 1".into(),
            );
        }
        let n = self.blocks.len();
        if n == 0 || n > MAX_BLOCKS {
            return refuse(format!(
                "an encoder has 1 to {MAX_BLOCKS} blocks, this one {n}"
            ));
        }
        let f = self.ffn();
        if f == 0 || f > MAX_FFN {
            return refuse(format!("the feed-forward width is {f}: 1 ..= {MAX_FFN}"));
        }
        for (i, b) in self.blocks.iter().enumerate() {
            let name = |p: &str| format!("block {i}'s {p}");
            b.q.check(&name("query"), h, h, Y_MAX)?;
            b.k.check(&name("key"), h, h, Y_MAX)?;
            b.v.check(&name("value"), h, h, Y_MAX)?;
            Requant {
                m: vec![b.att.0],
                s: vec![b.att.1],
            }
            .check(&name("attention scale"), 1)?;
            b.ctx.check(&name("context"), h)?;
            b.o.check(&name("attention output"), h, h, 128)?;
            b.res1.check(&name("first residual"), h)?;
            b.ln1.check(&name("first LayerNorm"), h)?;
            b.f1.check(&name("feed-forward in"), h, f, Y_MAX)?;
            if b.gelu.len() != GELU_LEN {
                return refuse(format!(
                    "{} has {} entries, it must have {GELU_LEN}",
                    name("GELU table"),
                    b.gelu.len()
                ));
            }
            b.f2.check(&name("feed-forward out"), f, h, GELU_MAX)?;
            b.res2.check(&name("second residual"), h)?;
            b.ln2.check(&name("second LayerNorm"), h)?;
        }
        Ok(())
    }

    /// The embedding of one text's token ids (`1 ..= positions`, each below `vocab`; the
    /// caller checks both): the last LayerNorm's outputs averaged over the tokens,
    /// `⌊Σ / T⌋`, as int16.
    pub fn embed(&self, ids: &[u32]) -> Vec<i16> {
        self.embed_with(ids, &|d, x, lo, hi| d.apply(x, lo, hi))
    }

    /// [`embed`](Self::embed) with every dense layer computed by `dense` (`dense(d, x, lo, hi)`
    /// must equal `d.apply(x, lo, hi)`): how a fast GEMM reuses every other step.
    pub fn embed_with(&self, ids: &[u32], dense: &DenseFn<'_>) -> Vec<i16> {
        let (t, h) = (ids.len(), self.hidden);
        let mut r = vec![0i64; t * h];
        for (p, &id) in ids.iter().enumerate() {
            let (w, e) = (&self.word[id as usize * h..][..h], &self.pos[p * h..][..h]);
            for c in 0..h {
                r[p * h + c] = self.word_rq.apply(c, w[c].into(), -RES_CLAMP, RES_CLAMP)
                    + self.pos_rq.apply(c, e[c].into(), -RES_CLAMP, RES_CLAMP);
            }
        }
        let mut y = vec![0i64; t * h];
        norm_rows(&self.ln, &r, &mut y, h);
        for b in &self.blocks {
            y = self.block(b, &y, t, dense);
        }
        (0..h)
            .map(|c| {
                (0..t)
                    .map(|p| y[p * h + c])
                    .sum::<i64>()
                    .div_euclid(t as i64) as i16
            })
            .collect()
    }

    /// One block over `t` rows of int16 LayerNorm outputs.
    pub fn block(&self, b: &Block, y: &[i64], t: usize, dense: &DenseFn<'_>) -> Vec<i64> {
        let h = self.hidden;
        let (q, k, v) = (
            dense(&b.q, y, -128, 127),
            dense(&b.k, y, -128, 127),
            dense(&b.v, y, -128, 127),
        );
        let ctx = self.attention(b, &q, &k, &v, t);
        let ctx: Vec<i64> = (0..t * h)
            .map(|i| b.ctx.apply(i % h, ctx[i], -128, 127))
            .collect();
        let a = dense(&b.o, &ctx, -RES_CLAMP, RES_CLAMP);
        let r: Vec<i64> = (0..t * h)
            .map(|i| b.res1.apply(i % h, y[i], -RES_CLAMP, RES_CLAMP) + a[i])
            .collect();
        let mut hq = vec![0i64; t * h];
        norm_rows(&b.ln1, &r, &mut hq, h);
        let u = dense(&b.f1, &hq, -GELU_HALF, GELU_HALF - 1);
        let g: Vec<i64> = u
            .iter()
            .map(|&u| b.gelu[(u + GELU_HALF) as usize].into())
            .collect();
        let f = dense(&b.f2, &g, -RES_CLAMP, RES_CLAMP);
        let r: Vec<i64> = (0..t * h)
            .map(|i| b.res2.apply(i % h, hq[i], -RES_CLAMP, RES_CLAMP) + f[i])
            .collect();
        let mut out = vec![0i64; t * h];
        norm_rows(&b.ln2, &r, &mut out, h);
        out
    }

    /// Integer attention, per head and query row i: `S_j = Σ_d q[i][d] · k[j][d]`,
    /// `δ_j = max S − S_j`, `e_j = E[min(⌊(δ_j · m + 2^(s−1)) / 2^s⌋, 1023)]`,
    /// `p_j = ⌊e_j · 2^15 / Σe⌋`, `ctx[i][d] = Σ_j p_j · v[j][d]` (no mask: one text, no padding).
    pub fn attention(&self, b: &Block, q: &[i64], k: &[i64], v: &[i64], t: usize) -> Vec<i64> {
        let h = self.hidden;
        let dh = h / self.heads;
        let (am, ash) = (i64::from(b.att.0), b.att.1);
        let mut ctx = vec![0i64; t * h];
        let mut s = vec![0i64; t];
        for head in 0..self.heads {
            let c0 = head * dh;
            for i in 0..t {
                let qi = &q[i * h + c0..][..dh];
                for (j, s) in s.iter_mut().enumerate() {
                    *s = qi
                        .iter()
                        .zip(&k[j * h + c0..][..dh])
                        .map(|(a, b)| a * b)
                        .sum();
                }
                let max = *s.iter().max().expect("t ≥ 1");
                for s in s.iter_mut() {
                    let idx =
                        (((max - *s) * am + (1i64 << (ash - 1))) >> ash).min(EXP_LEN as i64 - 1);
                    *s = self.exp[idx as usize].into();
                }
                let sum: i64 = s.iter().sum();
                for (j, &e) in s.iter().enumerate() {
                    let p = (e << P_FRAC) / sum;
                    for d in 0..dh {
                        ctx[i * h + c0 + d] += p * v[j * h + c0 + d];
                    }
                }
            }
        }
        ctx
    }
}

fn norm_rows(n: &Norm, r: &[i64], y: &mut [i64], h: usize) {
    for (r, y) in r.chunks_exact(h).zip(y.chunks_exact_mut(h)) {
        n.apply(r, y);
    }
}

/// Bytes of one output row: `hidden` int16 values, little-endian.
pub fn row_len(hidden: usize) -> usize {
    2 * hidden
}

/// The shape of a generated encoder: width, heads, feed-forward, blocks, vocabulary,
/// positions.
#[derive(Clone, Copy, Debug)]
pub struct RandomShape {
    /// Hidden width H.
    pub hidden: usize,
    /// Heads (dividing H).
    pub heads: usize,
    /// Feed-forward width.
    pub ffn: usize,
    /// Blocks.
    pub blocks: usize,
    /// Vocabulary.
    pub vocab: usize,
    /// Positions.
    pub positions: usize,
}

/// An encoder of `shape` with weights and scales from a fixed generator seeded by `seed`, inside
/// every bound of [`Encoder::check`], its scales drawn so that values spread over each step's
/// range and reach its clamps now and then: for the trace's tests, and kernels' (any odd
/// width).
pub fn random_encoder(shape: RandomShape, seed: u64) -> Encoder {
    let RandomShape {
        hidden: h,
        heads,
        ffn: f,
        blocks,
        vocab,
        positions,
    } = shape;
    let mut x = seed;
    let mut next = move || {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        x >> 33
    };
    let mut bytes = |n: usize| -> Vec<i8> { (0..n).map(|_| next() as i8).collect() };
    let mut x2 = seed ^ 0x9e37_79b9;
    let mut draw = move |n: u64| -> u64 {
        x2 = crate::job::splitmix64(x2);
        x2 % n
    };
    // a scale ≈ 2^-base per channel: m in 2^30 ..= 2^31 − 1, s = 30 + base ± 1
    let mut rq = |n: usize, base: i32| Requant {
        m: (0..n)
            .map(|_| (1 << 30) + draw(1 << 30).min((1 << 30) - 1) as i32)
            .collect(),
        s: (0..n).map(|_| 30 + base - 1 + draw(3) as i32).collect(),
    };
    let mut blocks_v = Vec::new();
    let norm = |g: i32| Norm {
        g: vec![g; h],
        b: vec![0; h],
        shift: 12,
    };
    let word = bytes(vocab * h);
    let pos = bytes(positions * h);
    for _ in 0..blocks {
        let mut dense =
            |inp: usize, out: usize, base: i32, bytes: &mut dyn FnMut(usize) -> Vec<i8>| Dense {
                inp,
                out,
                weight: bytes(inp * out),
                bias: bytes(out).into_iter().map(|b| b as i32 * 16).collect(),
                rq: rq(out, base),
            };
        // operand scale: int16 inputs (≈ 2^12) · int8 weights · √H terms → int8
        let lg = (h as f64).log2() as i32 / 2;
        let q = dense(h, h, 12 + lg, &mut bytes);
        let k = dense(h, h, 12 + lg, &mut bytes);
        let v = dense(h, h, 12 + lg, &mut bytes);
        let o = dense(h, h, 0, &mut bytes);
        let f1 = dense(h, f, 10 + lg, &mut bytes);
        // int16 GELU outputs: weights of at most 128 / 2^k so that every row's sum fits the
        // accumulator bound (`acc_fits`), the scale raised to match
        let narrow = (0..8)
            .find(|&n| f as i64 * (128 >> n) * GELU_MAX + 2048 <= i64::from(i32::MAX))
            .unwrap_or(7);
        let mut f2 = dense(f, h, 8 - narrow, &mut bytes);
        f2.weight.iter_mut().for_each(|w| *w >>= narrow);
        blocks_v.push(Block {
            q,
            k,
            v,
            att: (1 << 30, 30 + 5),
            ctx: rq(h, 15),
            o,
            res1: rq(h, -8),
            ln1: norm(1 << 12),
            f1,
            gelu: bytes(2 * GELU_LEN)
                .chunks_exact(2)
                .map(|p| i16::from_le_bytes([p[0] as u8, p[1] as u8]))
                .collect(),
            f2,
            res2: rq(h, -8),
            ln2: norm(1 << 12),
        });
    }
    Encoder {
        hidden: h,
        heads,
        word,
        word_rq: rq(h, -12),
        pos,
        pos_rq: rq(h, -12),
        ln: norm(1 << 12),
        exp: (0..EXP_LEN as i32)
            .map(|t| ((1 << 15) as f64 * (-(t as f64) / 64.0).exp()) as i32)
            .map(|e| e.max(0))
            .collect::<Vec<_>>()
            .into_iter()
            .enumerate()
            .map(|(t, e)| if t == 0 { e.max(1) } else { e })
            .collect(),
        blocks: blocks_v,
    }
}

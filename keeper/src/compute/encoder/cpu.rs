//! The encoder's fast path on the CPU: PROTOCOL §5's integer steps, each giving the reference's
//! (`Encoder::embed`'s) bits, laid out for speed.
//!
//! - Texts are run in batches: their rows (tokens) stacked with no padding, so every GEMM
//!   reads its weights once per batch; attention alone runs text by text.
//! - The GEMMs are [`super::gemm`]'s packed kernels by kernel set; `q`, `k` and `v` are one
//!   GEMM (their clamps are the same).
//! - Activations are held as narrow as their ranges: LayerNorm outputs, the context and GELU
//!   outputs in int16, the residual stream in int32 (`|r| ≤ 2^25`), the attention's sums in
//!   int32 (`|Σ q · k| ≤ 2^14 · H`, `|Σ p · v| ≤ 2^15 · 128`).
//! - Each row's divisions by one divisor (LayerNorm's `σ`, attention's `Σe`) are a
//!   multiplication by its reciprocal in f64, corrected to the exact floor by one integer step
//!   ([`floor_div`]): the compiler vectorizes them where it cannot vectorize a division.

use std::sync::Arc;

use compute_market_protocol::encoder::{
    Block, Encoder, Norm, EXP_LEN, GELU_HALF, GELU_LEN, P_FRAC, RES_CLAMP, Y_MAX, Z_FRAC,
};

use super::gemm::{gemm, requant, KernelSet, Packed, Rq};

/// Texts run together: their rows share each weight's trip from memory.
pub const BATCH: usize = 16;

/// An encoder prepared for the fast path with one kernel set.
#[derive(Debug)]
pub struct Fast {
    enc: Arc<Encoder>,
    set: KernelSet,
    word: Rq,
    pos: Rq,
    ln: Ln,
    blocks: Vec<FastBlock>,
}

#[derive(Debug)]
struct FastBlock {
    qkv: Packed,
    o: Packed,
    f1: Packed,
    f2: Packed,
    ctx: Rq,
    res1: Rq,
    ln1: Ln,
    res2: Rq,
    ln2: Ln,
}

impl Rq {
    /// `Requant::apply` on one row (channel `c` = position), clamped to `±RES_CLAMP`, plus
    /// `add[c]`: a residual-stream row.
    #[inline(always)]
    fn residual(&self, x: impl Iterator<Item = i64>, add: &[i32], out: &mut [i32]) {
        let consts = self.m.iter().zip(&self.s).zip(&self.half);
        for (((o, x), &a), ((&m, &s), &half)) in out.iter_mut().zip(x).zip(add).zip(consts) {
            // |x| ≤ 2^15; the sum inside ±2^25 (two terms ≤ 2^24)
            let v = requant(x, m, half, s).clamp(-RES_CLAMP, RES_CLAMP);
            *o = v.wrapping_add(i64::from(a)) as i32;
        }
    }
}

/// A LayerNorm's constants, widened once.
#[derive(Debug)]
struct Ln {
    g: Vec<i64>,
    b: Vec<i64>,
    shift: i64,
}

impl Ln {
    fn new(n: &Norm) -> Ln {
        Ln {
            g: n.g.iter().map(|&g| i64::from(g)).collect(),
            b: n.b.iter().map(|&b| i64::from(b)).collect(),
            shift: i64::from(n.shift),
        }
    }

    /// `Norm::apply` on one residual row, into int16.
    #[inline(always)]
    fn row(&self, r: &[i32], y: &mut [i16]) {
        let n = r.len() as i64;
        // |r| ≤ 2^25 and n ≤ 2^12: Σr inside 2^37, each d² inside 2^52, Σd² inside 2^64 − 1
        // only as the reference's own int64 sum is (wrapping: the same bits where it does not
        // overflow, which `Encoder::check`'s bounds make every case)
        let mu = r
            .iter()
            .fold(0i64, |a, &v| a.wrapping_add(i64::from(v)))
            .div_euclid(n);
        let var = r
            .iter()
            .fold(0i64, |a, &v| {
                let d = i64::from(v).wrapping_sub(mu);
                a.wrapping_add(d.wrapping_mul(d))
            })
            .div_euclid(n);
        let sigma = (var as u64).isqrt().max(1) as i64;
        let inv = 1.0 / sigma as f64;
        let (t, half) = (self.shift, 1i64 << (self.shift - 1));
        for ((y, &v), (&g, &b)) in y.iter_mut().zip(r).zip(self.g.iter().zip(&self.b)) {
            let z = floor_div(i64::from(v).wrapping_sub(mu) << Z_FRAC, sigma, inv);
            let v = z.wrapping_mul(g).wrapping_add(b).wrapping_add(half);
            *y = v.wrapping_shr(t as u32).clamp(-Y_MAX, Y_MAX) as i16;
        }
    }
}

/// `⌊a / d⌋` for `d ≥ 1` and `|a| < 2^52`, given `inv = 1 / d` in f64: the product is within
/// `|a / d| · 2^−51 < 1` of the quotient, so its floor is off by at most one, which the
/// remainder's sign corrects.
#[inline(always)]
fn floor_div(a: i64, d: i64, inv: f64) -> i64 {
    let q = (a as f64 * inv).floor() as i64;
    let r = a.wrapping_sub(q.wrapping_mul(d));
    q.wrapping_sub(i64::from(r < 0))
        .wrapping_add(i64::from(r >= d))
}

/// One batch's working rows, reused block to block, and kept by each thread from batch to
/// batch ([`SCRATCH`]): a batch's buffers (a few MiB) allocated anew would each cost the
/// kernel's page faults and zeroing on first touch. Every buffer's first `rows × width` values
/// are written before they are read, so what an earlier batch left is never read (an input
/// row's pad, past H, multiplies packed weights that are zero).
#[derive(Default)]
struct Work {
    /// LayerNorm outputs (the next GEMM's input), `rows × stride`.
    y: Vec<i16>,
    /// The residual stream, `rows × H`.
    r: Vec<i32>,
    /// `q | k | v`, `rows × 3H`.
    qkv: Vec<i32>,
    /// The attention's context (the `o` GEMM's input), `rows × o.stride()`.
    ctx: Vec<i16>,
    /// The `o` and `f2` GEMMs' outputs, `rows × H`.
    a: Vec<i32>,
    /// The `f1` GEMM's outputs, `rows × ffn`.
    u: Vec<i32>,
    /// GELU's outputs (the `f2` GEMM's input), `rows × f2.stride()`.
    g: Vec<i16>,
    /// H.
    h: usize,
    /// `y`'s row stride: H rounded up to even (the GEMMs' input stride).
    stride: usize,
}

thread_local! {
    /// Each thread's [`Work`], grown to the largest batch it ran and never shrunk.
    static SCRATCH: std::cell::RefCell<Work> = std::cell::RefCell::default();
}

/// The first `n` values of `v`, grown (never shrunk) to hold them.
fn sized<T: Copy + Default>(v: &mut Vec<T>, n: usize) -> &mut [T] {
    if v.len() < n {
        v.resize(n, T::default());
    }
    &mut v[..n]
}

impl Work {
    /// The residual stream made anew for `rows` rows: each LayerNorm output requantized by
    /// `rq`, plus the GEMM's outputs in `a`.
    #[inline(always)]
    fn residual(&mut self, rq: &Rq, rows: usize) {
        let h = self.h;
        for ((y, a), r) in self.y[..rows * self.stride]
            .chunks_exact(self.stride)
            .zip(self.a[..rows * h].chunks_exact(h))
            .zip(self.r[..rows * h].chunks_exact_mut(h))
        {
            rq.residual(y[..h].iter().map(|&v| i64::from(v)), a, r);
        }
    }
}

impl Fast {
    /// `enc` (checked: [`Encoder::check`]) packed for kernel set `set` (one this machine runs).
    pub fn new(enc: Arc<Encoder>, set: KernelSet) -> Fast {
        assert!(
            set.runs_here(),
            "kernel set {} does not run here",
            set.name()
        );
        // each block packed on its own core
        use rayon::prelude::*;
        let blocks = enc
            .blocks
            .par_iter()
            .map(|b| FastBlock {
                qkv: Packed::new(&[&b.q, &b.k, &b.v]),
                o: Packed::new(&[&b.o]),
                f1: Packed::new(&[&b.f1]),
                f2: Packed::new(&[&b.f2]),
                ctx: Rq::of(&b.ctx),
                res1: Rq::of(&b.res1),
                ln1: Ln::new(&b.ln1),
                res2: Rq::of(&b.res2),
                ln2: Ln::new(&b.ln2),
            })
            .collect();
        Fast {
            word: Rq::of(&enc.word_rq),
            pos: Rq::of(&enc.pos_rq),
            ln: Ln::new(&enc.ln),
            enc,
            set,
            blocks,
        }
    }

    /// The encoder it runs.
    pub fn encoder(&self) -> &Encoder {
        &self.enc
    }

    /// Its kernel set.
    pub fn set(&self) -> KernelSet {
        self.set
    }

    /// Bytes its packed weights hold, beyond the encoder's own.
    pub fn bytes(&self) -> usize {
        self.blocks
            .iter()
            .map(|b| b.qkv.bytes() + b.o.bytes() + b.f1.bytes() + b.f2.bytes())
            .sum()
    }

    /// Each text's embedding (token ids as `Encoder::embed` takes them), equal to it. The
    /// steps between the GEMMs are compiled for the kernel set's instructions too (64-bit
    /// vector multiplies and shifts, a vector floor).
    pub fn embed(&self, texts: &[&[u32]]) -> Vec<Vec<i16>> {
        SCRATCH.with_borrow_mut(|w| match self.set {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the set runs here (checked when made)
            KernelSet::Avx512Vnni => unsafe { x86::steps_avx512(self, texts, w) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as above (AVX-VNNI's sets include AVX2)
            KernelSet::Avx2 | KernelSet::AvxVnni => unsafe { x86::steps_avx2(self, texts, w) },
            _ => self.steps(texts, w),
        })
    }

    /// [`Fast::embed`]'s steps in the thread's buffers `w`, inlined into each set's build.
    #[inline(always)]
    fn steps(&self, texts: &[&[u32]], w: &mut Work) -> Vec<Vec<i16>> {
        if texts.is_empty() {
            return vec![];
        }
        let rows: usize = texts.iter().map(|t| t.len()).sum();
        let e = &*self.enc;
        let h = e.hidden;
        let sh = h + h % 2;
        (w.h, w.stride) = (h, sh);
        sized(&mut w.y, rows * sh);
        sized(&mut w.r, rows * h);
        // the embeddings into the residual stream, then LayerNorm
        let mut row = 0;
        let (mut pos, zero) = (vec![0i32; h], vec![0i32; h]);
        for ids in texts {
            for (p, &id) in ids.iter().enumerate() {
                let (wd, ps) = (&e.word[id as usize * h..][..h], &e.pos[p * h..][..h]);
                self.pos
                    .residual(ps.iter().map(|&v| i64::from(v)), &zero, &mut pos);
                self.word.residual(
                    wd.iter().map(|&v| i64::from(v)),
                    &pos,
                    &mut w.r[row * h..][..h],
                );
                row += 1;
            }
        }
        self.norm(&self.ln, rows, w);
        for (b, eb) in self.blocks.iter().zip(&e.blocks) {
            self.block(b, eb, texts, rows, w);
        }
        // mean pooling: ⌊Σ / T⌋
        let mut at = 0;
        texts
            .iter()
            .map(|ids| {
                let t = ids.len();
                let mut sum = vec![0i64; h];
                for y in w.y[at * sh..(at + t) * sh].chunks_exact(sh) {
                    for (s, &v) in sum.iter_mut().zip(y) {
                        *s = s.wrapping_add(i64::from(v));
                    }
                }
                at += t;
                sum.iter().map(|&s| s.div_euclid(t as i64) as i16).collect()
            })
            .collect()
    }

    /// LayerNorm `n` over every residual row into the int16 rows.
    #[inline(always)]
    fn norm(&self, n: &Ln, rows: usize, w: &mut Work) {
        let (r, y) = (&w.r[..rows * w.h], &mut w.y[..rows * w.stride]);
        for (r, y) in r.chunks_exact(w.h).zip(y.chunks_exact_mut(w.stride)) {
            n.row(r, &mut y[..w.h]);
        }
    }

    /// One block over the batch's rows (`eb`: the encoder's own, for its tables).
    #[inline(always)]
    fn block(&self, b: &FastBlock, eb: &Block, texts: &[&[u32]], rows: usize, w: &mut Work) {
        let (h, set) = (self.enc.hidden, self.set);
        let (x, so) = (&w.y[..rows * w.stride], b.o.stride());
        let qkv = sized(&mut w.qkv, rows * 3 * h);
        gemm(set, &b.qkv, x, qkv, -128, 127);
        let ctx = sized(&mut w.ctx, rows * so);
        let mut at = 0;
        for ids in texts {
            let t = ids.len();
            self.attention(
                eb.att,
                b,
                &qkv[at * 3 * h..(at + t) * 3 * h],
                &mut ctx[at * so..(at + t) * so],
            );
            at += t;
        }
        let a = sized(&mut w.a, rows * h);
        gemm(set, &b.o, ctx, a, -RES_CLAMP, RES_CLAMP);
        w.residual(&b.res1, rows);
        self.norm(&b.ln1, rows, w);
        let ffn = b.f1.out;
        let u = sized(&mut w.u, rows * ffn);
        gemm(
            set,
            &b.f1,
            &w.y[..rows * w.stride],
            u,
            -GELU_HALF,
            GELU_HALF - 1,
        );
        // the GEMM clamped every u to −512 ..= 511: u + 512 indexes the table's 1024 entries
        let table: &[i16; GELU_LEN] = eb.gelu[..]
            .try_into()
            .expect("Encoder::check: 1024 GELU entries");
        let sf = b.f2.stride();
        let g = sized(&mut w.g, rows * sf);
        for (g, u) in g.chunks_exact_mut(sf).zip(u.chunks_exact(ffn)) {
            for (g, &u) in g.iter_mut().zip(u) {
                *g = table[(u as usize).wrapping_add(GELU_HALF as usize) & (GELU_LEN - 1)];
            }
        }
        let f = sized(&mut w.a, rows * h);
        gemm(set, &b.f2, g, f, -RES_CLAMP, RES_CLAMP);
        w.residual(&b.res2, rows);
        self.norm(&b.ln2, rows, w);
    }

    /// `Encoder::attention` on one text's rows of `q | k | v` (each already clamped to int8),
    /// with the context requantized to int8 into `ctx` (rows of the `o` GEMM's stride).
    #[inline(always)]
    fn attention(&self, (am, ash): (i32, i32), b: &FastBlock, qkv: &[i32], ctx: &mut [i16]) {
        let e = &*self.enc;
        let (h, heads) = (e.hidden, e.heads);
        let dh = h / heads;
        let t = qkv.len() / (3 * h);
        let so = ctx.len() / t.max(1);
        let (am, half) = (i64::from(am), 1i64 << (ash - 1));
        let (mut s, mut x, mut p) = (vec![0i32; t], vec![0i64; t], vec![0i32; t]);
        let mut acc = vec![0i32; dh];
        for head in 0..heads {
            let c0 = head * dh;
            for i in 0..t {
                let qi = &qkv[i * 3 * h + c0..][..dh];
                for (j, s) in s.iter_mut().enumerate() {
                    let kj = &qkv[j * 3 * h + h + c0..][..dh];
                    // int8 operands: |Σ| ≤ 2^14 · dh, inside int32
                    *s = qi
                        .iter()
                        .zip(kj)
                        .fold(0i32, |s, (&a, &b)| s.wrapping_add(a.wrapping_mul(b)));
                }
                let max = *s.iter().max().expect("t ≥ 1");
                let mut sum = 0i64;
                for (x, &s) in x.iter_mut().zip(&s) {
                    // δ ≤ 2^15 · dh ≤ 2^25 times m < 2^31: inside int64
                    let d = i64::from(max.wrapping_sub(s))
                        .wrapping_mul(am)
                        .wrapping_add(half);
                    let idx = d.wrapping_shr(ash as u32).min(EXP_LEN as i64 - 1);
                    *x = i64::from(e.exp[idx as usize]);
                    sum = sum.wrapping_add(*x);
                }
                let inv = 1.0 / sum as f64;
                for (p, &e) in p.iter_mut().zip(&x) {
                    *p = floor_div(e << P_FRAC, sum, inv) as i32;
                }
                acc.fill(0);
                for (j, &p) in p.iter().enumerate() {
                    let vj = &qkv[j * 3 * h + 2 * h + c0..][..dh];
                    // Σp ≤ 2^15 and |v| ≤ 128: |Σ p · v| ≤ 2^22
                    for (a, &v) in acc.iter_mut().zip(vj) {
                        *a = a.wrapping_add(p.wrapping_mul(v));
                    }
                }
                let out = &mut ctx[i * so + c0..][..dh];
                let consts = b.ctx.m[c0..]
                    .iter()
                    .zip(&b.ctx.s[c0..])
                    .zip(&b.ctx.half[c0..]);
                for ((o, &a), ((&m, &s), &half)) in out.iter_mut().zip(&acc).zip(consts) {
                    *o = requant(i64::from(a), m, half, s).clamp(-128, 127) as i16;
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    //! [`Fast::steps`] built for each kernel set's instructions.
    use super::{Fast, Work};

    #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vnni")]
    pub fn steps_avx512(f: &Fast, texts: &[&[u32]], w: &mut Work) -> Vec<Vec<i16>> {
        f.steps(texts, w)
    }

    #[target_feature(enable = "avx2")]
    pub fn steps_avx2(f: &Fast, texts: &[&[u32]], w: &mut Work) -> Vec<Vec<i16>> {
        f.steps(texts, w)
    }
}

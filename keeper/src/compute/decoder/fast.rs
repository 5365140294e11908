//! The decoder's dense layers and logits laid out for speed on the CPU: the 4-bit weights read
//! packed, a block's 32 products summed in int32 by this machine's widest kernel set
//! ([`kernels`](super::kernels)), its scale and minimum applied in int64, outputs spread over
//! the cores. The same integers as the reference's ([`Dense::acc`]) in another order of exact
//! sums, so the same bits.

use std::sync::OnceLock;

use compute_market_protocol::decoder::{Decoder, Dense, BLOCK, RES_MAX};
use rayon::prelude::*;

use super::kernels::{dot_rows, KernelSet, Weights};

/// This machine's widest kernel set, picked once.
pub fn best() -> KernelSet {
    static BEST: OnceLock<KernelSet> = OnceLock::new();
    *BEST.get_or_init(KernelSet::best)
}

/// Outputs a task of the cores takes at once.
const OUT_CHUNK: usize = 16;

/// Rows of int16 values held as int64 (the decoder's activations), as int16.
pub(crate) fn int16(xs: &[Vec<i64>]) -> Vec<Vec<i16>> {
    xs.iter()
        .map(|x| x.iter().map(|&v| v as i16).collect())
        .collect()
}

/// Each row's sums over its blocks of 32 (within 2^20: int32).
fn block_sums(x16: &[Vec<i16>]) -> Vec<Vec<i32>> {
    x16.iter()
        .map(|x| {
            x.chunks_exact(BLOCK)
                .map(|b| b.iter().map(|&v| i32::from(v)).sum())
                .collect()
        })
        .collect()
}

/// Output-major results (`flat[o · n + r]`, `outs` outputs) as `n` rows.
fn row_major(flat: &[i64], n: usize, outs: usize) -> Vec<Vec<i64>> {
    (0..n)
        .map(|r| (0..outs).map(|o| flat[o * n + r]).collect())
        .collect()
}

/// `Σ_j W[o][j] · x[j]` for every row of `xs` and every output (every caller's inputs are
/// int16: the norms', the attention context's, the feed-forward's), by the widest set.
pub fn acc_rows(d: &Dense, xs: &[Vec<i64>]) -> Vec<Vec<i64>> {
    acc_rows_with(best(), d, xs)
}

/// [`acc_rows`] by kernel set `set`.
pub fn acc_rows_with(set: KernelSet, d: &Dense, xs: &[Vec<i64>]) -> Vec<Vec<i64>> {
    let nb = d.inp / BLOCK;
    let n = xs.len();
    let x16 = int16(xs);
    let refs: Vec<&[i16]> = x16.iter().map(Vec::as_slice).collect();
    let sums = block_sums(&x16);
    // output-major: out[o · n + r]
    let mut flat = vec![0i64; d.out * n];
    flat.par_chunks_mut(OUT_CHUNK * n)
        .enumerate()
        .for_each(|(c, chunk)| {
            for (k, per) in chunk.chunks_exact_mut(n).enumerate() {
                let o = c * OUT_CHUNK + k;
                let row = &d.q4[o * d.inp / 2..(o + 1) * d.inp / 2];
                let (ds, mins) = (&d.d[o * nb..(o + 1) * nb], &d.min[o * nb..(o + 1) * nb]);
                dot_rows(set, Weights::Q4, row, ds, &refs, per);
                for (acc, sx) in per.iter_mut().zip(&sums) {
                    *acc += mins
                        .iter()
                        .zip(sx)
                        .map(|(&m, &s)| i64::from(m) * i64::from(s))
                        .sum::<i64>();
                }
            }
        });
    row_major(&flat, n, d.out)
}

/// [`acc_rows`] through `p` (the layer repacked: [`super::kernels::Packed`]), 16 outputs a task.
pub fn acc_rows_packed(p: &super::kernels::Packed, d: &Dense, xs: &[Vec<i64>]) -> Vec<Vec<i64>> {
    let n = xs.len();
    let x16 = int16(xs);
    let refs: Vec<&[i16]> = x16.iter().map(Vec::as_slice).collect();
    let sums = block_sums(&x16);
    let mut flat = vec![0i64; d.out * n];
    flat.par_chunks_mut(16 * n)
        .enumerate()
        .for_each(|(g, chunk)| p.group(g, &refs, &sums, chunk));
    row_major(&flat, n, d.out)
}

/// The Q16 logits of a final-norm row, as [`Decoder::logits`].
pub fn logits(dec: &Decoder, y: &[i64]) -> Vec<i64> {
    logits_rows(dec, std::slice::from_ref(&y.to_vec()))
        .pop()
        .expect("one row")
}

/// [`logits`] of several final-norm rows at once (a batch's step, a verifier's prefill): each
/// embedding row read once for all of them.
pub fn logits_rows(dec: &Decoder, ys: &[Vec<i64>]) -> Vec<Vec<i64>> {
    logits_rows_with(best(), dec, ys)
}

/// [`logits_rows`] by kernel set `set`.
pub fn logits_rows_with(set: KernelSet, dec: &Decoder, ys: &[Vec<i64>]) -> Vec<Vec<i64>> {
    let h = dec.width;
    let nb = h / BLOCK;
    let n = ys.len();
    let y16 = int16(ys);
    let refs: Vec<&[i16]> = y16.iter().map(Vec::as_slice).collect();
    // SAFETY: i8 and u8 have the same size and alignment; the bytes are read as int8 again
    let emb: &[u8] =
        unsafe { std::slice::from_raw_parts(dec.emb_q.as_ptr() as *const u8, dec.emb_q.len()) };
    let vocab = dec.vocab();
    let mut flat = vec![0i64; vocab * n];
    flat.par_chunks_mut(256 * n)
        .enumerate()
        .for_each(|(c, chunk)| {
            for (k, per) in chunk.chunks_exact_mut(n).enumerate() {
                let t = c * 256 + k;
                let row = &emb[t * h..(t + 1) * h];
                let ds = &dec.emb_d[t * nb..(t + 1) * nb];
                dot_rows(set, Weights::Q8, row, ds, &refs, per);
                for v in per.iter_mut() {
                    *v = dec.lm_rq.apply(t, *v, -RES_MAX, RES_MAX);
                }
            }
        });
    row_major(&flat, n, vocab)
}

/// Logits from their accumulators (`Σ_c E[t][c] · y[c]`, one row of the vocabulary per
/// final-norm row, as a device computes them: [`super::Offload::logit_accs`]): each
/// requantized by `lm_rq`, as [`Decoder::logits`] does.
pub fn requantize_logits(dec: &Decoder, mut accs: Vec<Vec<i64>>) -> Vec<Vec<i64>> {
    accs.par_iter_mut().for_each(|row| {
        for (t, v) in row.iter_mut().enumerate() {
            *v = dec.lm_rq.apply(t, *v, -RES_MAX, RES_MAX);
        }
    });
    accs
}

//! The decoder's dense layers and logits laid out for speed on the CPU: the 4-bit weights read
//! packed, a block's 32 products summed in int32 (at most 32 · 15 · 32 767 < 2^24, exact), its
//! scale and minimum applied in int64, outputs spread over the cores. The same integers as the
//! reference's ([`Dense::acc`]) in another order of exact sums, so the same bits.

use compute_market_protocol::decoder::{Decoder, Dense, BLOCK, RES_MAX};
use rayon::prelude::*;

/// `Σ_j W[o][j] · x[j]` for every row of `xs` and every output (every caller's inputs are
/// int16: the norms', the attention context's, the feed-forward's).
pub fn acc_rows(d: &Dense, xs: &[Vec<i64>]) -> Vec<Vec<i64>> {
    let nb = d.inp / BLOCK;
    let x32: Vec<Vec<i32>> = xs
        .iter()
        .map(|x| x.iter().map(|&v| v as i32).collect())
        .collect();
    let sums: Vec<Vec<i64>> = x32
        .iter()
        .map(|x| {
            x.chunks_exact(BLOCK)
                .map(|b| b.iter().map(|&v| i64::from(v)).sum())
                .collect()
        })
        .collect();
    let per_out: Vec<Vec<i64>> = (0..d.out)
        .into_par_iter()
        .with_min_len(16)
        .map(|o| {
            let row = &d.q4[o * d.inp / 2..(o + 1) * d.inp / 2];
            let (ds, mins) = (&d.d[o * nb..(o + 1) * nb], &d.min[o * nb..(o + 1) * nb]);
            x32.iter()
                .zip(&sums)
                .map(|(x, sx)| {
                    let mut acc = 0i64;
                    for b in 0..nb {
                        let bytes = &row[b * 16..b * 16 + 16];
                        let xb = &x[b * BLOCK..(b + 1) * BLOCK];
                        let (lo, hi) = xb.split_at(16);
                        let mut qx = 0i32;
                        for i in 0..16 {
                            qx +=
                                i32::from(bytes[i] & 15) * lo[i] + i32::from(bytes[i] >> 4) * hi[i];
                        }
                        acc += i64::from(ds[b]) * i64::from(qx) + i64::from(mins[b]) * sx[b];
                    }
                    acc
                })
                .collect()
        })
        .collect();
    (0..xs.len())
        .map(|r| per_out.iter().map(|o| o[r]).collect())
        .collect()
}

/// The Q16 logits of a final-norm row, as [`Decoder::logits`].
pub fn logits(dec: &Decoder, y: &[i64]) -> Vec<i64> {
    let h = dec.width;
    let nb = h / BLOCK;
    let y32: Vec<i32> = y.iter().map(|&v| v as i32).collect();
    (0..dec.vocab())
        .into_par_iter()
        .with_min_len(256)
        .map(|t| {
            let q = &dec.emb_q[t * h..(t + 1) * h];
            let ds = &dec.emb_d[t * nb..(t + 1) * nb];
            let acc: i64 = (0..nb)
                .map(|b| {
                    let s: i32 = q[b * BLOCK..(b + 1) * BLOCK]
                        .iter()
                        .zip(&y32[b * BLOCK..(b + 1) * BLOCK])
                        .map(|(&w, &v)| i32::from(w) * v)
                        .sum();
                    i64::from(ds[b]) * i64::from(s)
                })
                .sum();
            dec.lm_rq.apply(t, acc, -RES_MAX, RES_MAX)
        })
        .collect()
}

/// [`logits`] of several final-norm rows at once (a verifier's prefill): each embedding row
/// read once for all of them.
pub fn logits_rows(dec: &Decoder, ys: &[Vec<i64>]) -> Vec<Vec<i64>> {
    let h = dec.width;
    let nb = h / BLOCK;
    let y32: Vec<Vec<i32>> = ys
        .iter()
        .map(|y| y.iter().map(|&v| v as i32).collect())
        .collect();
    let per_token: Vec<Vec<i64>> = (0..dec.vocab())
        .into_par_iter()
        .with_min_len(64)
        .map(|t| {
            let q = &dec.emb_q[t * h..(t + 1) * h];
            let ds = &dec.emb_d[t * nb..(t + 1) * nb];
            y32.iter()
                .map(|y| {
                    let acc: i64 = (0..nb)
                        .map(|b| {
                            let s: i32 = q[b * BLOCK..(b + 1) * BLOCK]
                                .iter()
                                .zip(&y[b * BLOCK..(b + 1) * BLOCK])
                                .map(|(&w, &v)| i32::from(w) * v)
                                .sum();
                            i64::from(ds[b]) * i64::from(s)
                        })
                        .sum();
                    dec.lm_rq.apply(t, acc, -RES_MAX, RES_MAX)
                })
                .collect()
        })
        .collect();
    (0..ys.len())
        .map(|r| per_token.iter().map(|t| t[r]).collect())
        .collect()
}

//! Random decoders and dense layers of odd shapes, for the tests (the trace's, the keeper's) and
//! the GPU's start-up self-test: every bound of [`Decoder::check`] held, clamps reached,
//! nothing to download.

use super::{Decoder, Dense, Layer, Rq, BLOCK, EXP_LEN, EXP_MAX, FRAC, SIG_LEN};
use crate::job::splitmix64;

/// A dense layer of `out × inp` with random 4-bit weights and block scales and minimums of
/// either sign up to 2^17 (beyond any int32 product of a block's sum), and 11 rows of int16 (a
/// tile of 8 rows and a remainder, for the kernels that take rows 8 at a time).
pub fn random_dense(out: usize, inp: usize, seed: u64) -> (Dense, Vec<Vec<i64>>) {
    let mut z = seed;
    let mut next = || {
        z = splitmix64(z);
        z
    };
    let nb = inp / BLOCK;
    let d = Dense {
        inp,
        out,
        q4: (0..out * inp / 2).map(|_| next() as u8).collect(),
        d: (0..out * nb)
            .map(|_| (next() % (1 << 18)) as i32 - (1 << 17))
            .collect(),
        min: (0..out * nb)
            .map(|_| (next() % (1 << 18)) as i32 - (1 << 17))
            .collect(),
        rq: Rq::default(),
    };
    // the extremes among them: every row ends at ±32 767 somewhere; the last four are the
    // first four reversed
    let mut rows: Vec<Vec<i64>> = (0..7)
        .map(|r| {
            (0..inp)
                .map(|j| match (r + j) % 11 {
                    0 => 32_767,
                    1 => -32_767,
                    _ => (next() % 65_535) as i64 - 32_767,
                })
                .collect()
        })
        .collect();
    let reversed: Vec<Vec<i64>> = rows[..4]
        .iter()
        .map(|r| r.iter().rev().copied().collect())
        .collect();
    rows.extend(reversed);
    (d, rows)
}

/// A decoder's shape: layers, width, feed-forward, heads, key/value heads, head width, vocabulary,
/// positions.
pub type Shape = [usize; 8];

/// Shapes no kernel's tile divides: widths of 3 and 5 blocks, one and two key/value heads,
/// vocabularies that are not a multiple of anything.
pub const ODD_SHAPES: [Shape; 2] = [
    [2, 96, 160, 3, 1, 32, 37, 40],
    [1, 64, 96, 4, 2, 16, 53, 24],
];

/// A random decoder of `shape` that [`Decoder::check`] accepts: 4-bit weights and int8
/// embeddings at both ends of their ranges, requantizations of either sign scaled so that
/// activations spread over their int16 and residual ranges (and sometimes reach the clamps),
/// the converter's exp, sigmoid and RoPE tables.
pub fn random_decoder(shape: Shape, seed: u64) -> Decoder {
    let [layers, h, f, heads, kvh, hd, vocab, positions] = shape;
    let mut z = seed;
    let mut next = move || {
        z = splitmix64(z);
        z
    };
    let mut rq = |n: usize, s: i32, negative: bool| Rq {
        m: (0..n)
            .map(|_| {
                let m = (1 << 29) + (next() % (1 << 29)) as i32;
                if negative && next() % 5 == 0 {
                    -m
                } else {
                    m
                }
            })
            .collect(),
        s: vec![s; n],
    };
    let mut k = seed ^ 0x5eed;
    let mut dense = |out: usize, inp: usize, s: i32| {
        k = splitmix64(k);
        let mut d = random_dense(out, inp, k).0;
        // scales and minimums within ±2^10: the accumulators far below 2^53
        for v in d.d.iter_mut().chain(d.min.iter_mut()) {
            *v >>= 7;
        }
        d.rq = Rq {
            m: vec![1 << 30; out],
            s: vec![s; out],
        };
        d
    };
    let (qw, kw) = (heads * hd, kvh * hd);
    let layer_list: Vec<Layer> = (0..layers)
        .map(|_| Layer {
            ln1: Rq::default(),
            q: dense(qw, h, 46),
            k: dense(kw, h, 46),
            v: dense(kw, h, 45),
            att: (1 << 30, 47),
            o: dense(h, qw, 37),
            ln2: Rq::default(),
            gate: dense(f, h, 45),
            up: dense(f, h, 45),
            sig: (1 << 30, 31),
            down: dense(h, f, 39),
        })
        .collect();
    let mut z2 = seed ^ 0xe3b;
    let mut next2 = move || {
        z2 = splitmix64(z2);
        z2
    };
    let emb_q: Vec<i8> = (0..vocab * h)
        .map(|i| match i % 29 {
            0 => -128,
            1 => 127,
            _ => next2() as i8,
        })
        .collect();
    let emb_d: Vec<i32> = (0..vocab * h / BLOCK)
        .map(|_| 1 + (next2() % (1 << 10)) as i32)
        .collect();
    let rope: Vec<i16> = (0..positions)
        .flat_map(|p| {
            (0..hd / 2).flat_map(move |i| {
                let theta = p as f64 / 10_000f64.powf(2.0 * i as f64 / hd as f64);
                let one = f64::from(1u32 << FRAC);
                [
                    (theta.cos() * one).round() as i16,
                    (theta.sin() * one).round() as i16,
                ]
            })
        })
        .collect();
    let mut d = Decoder {
        width: h,
        heads,
        kv_heads: kvh,
        head_dim: hd,
        eps: 1 << 20,
        rope,
        exp: (0..EXP_LEN)
            .map(|t| (f64::from(EXP_MAX) * (-(t as f64) / 1024.0).exp()).round() as i32)
            .collect(),
        sigmoid: (0..SIG_LEN)
            .map(|i| {
                let x = (i as f64 - SIG_LEN as f64 / 2.0) / 256.0;
                (32_768.0 / (1.0 + (-x).exp())).round() as i32
            })
            .collect(),
        emb_q,
        emb_d,
        emb_rq: Rq::default(),
        out: Rq::default(),
        lm_rq: Rq::default(),
        layers: layer_list,
    };
    d.emb_rq = rq(vocab, 23, false);
    d.out = rq(h, 30, true);
    d.lm_rq = rq(vocab, 43, false);
    for l in d.layers.iter_mut() {
        l.ln1 = rq(h, 30, true);
        l.ln2 = rq(h, 30, true);
    }
    d
}

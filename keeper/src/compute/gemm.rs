//! The encoder's GEMMs by kernel set (PROTOCOL §5, Encoder: every `Dense` is exact in int32 by
//! the model's row bound): int8 weights · int16 activations summed in wrapping int32 — exact,
//! since no partial sum can pass the bound — in loops the compiler vectorizes, compiled once
//! per instruction set and picked at run time, as the verifier's kernels are. Integers: every
//! set gives the scalar code's bits (tests hold each set the machine has to it).

use compute_market_protocol::encoder::Dense;

/// An instruction set the encoder's GEMM is compiled for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub enum KernelSet {
    /// Plain Rust for the build's baseline (x86-64: SSE2, 128-bit `pmaddwd`).
    Scalar,
    /// AVX2: 256-bit `vpmaddwd`.
    Avx2,
    /// AVX-VNNI: 256-bit `vpdpwssd` (multiply-add in one instruction).
    AvxVnni,
    /// AVX-512 with VNNI: 512-bit `vpdpwssd`.
    Avx512Vnni,
}

impl KernelSet {
    /// Its name in bench reports and logs.
    pub fn name(self) -> &'static str {
        match self {
            KernelSet::Scalar => "scalar",
            KernelSet::Avx2 => "avx2",
            KernelSet::AvxVnni => "avx-vnni",
            KernelSet::Avx512Vnni => "avx512-vnni",
        }
    }

    /// Int16 multiply-adds one instruction does (the vector width over 32 bits, twice).
    pub fn lanes(self) -> u32 {
        match self {
            KernelSet::Scalar => 8,
            KernelSet::Avx2 | KernelSet::AvxVnni => 16,
            KernelSet::Avx512Vnni => 32,
        }
    }

    /// Whether this machine runs it.
    pub fn runs_here(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            match self {
                KernelSet::Scalar => true,
                KernelSet::Avx2 => has!("avx2"),
                KernelSet::AvxVnni => has!("avx2") && has!("avxvnni"),
                KernelSet::Avx512Vnni => {
                    has!("avx512f") && has!("avx512bw") && has!("avx512dq") && has!("avx512vnni")
                }
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            self == KernelSet::Scalar
        }
    }

    /// Every set this machine runs, plainest first.
    pub fn here() -> Vec<KernelSet> {
        [
            KernelSet::Scalar,
            KernelSet::Avx2,
            KernelSet::AvxVnni,
            KernelSet::Avx512Vnni,
        ]
        .into_iter()
        .filter(|k| k.runs_here())
        .collect()
    }

    /// The widest set this machine runs (detected once).
    pub fn best() -> KernelSet {
        static BEST: std::sync::OnceLock<KernelSet> = std::sync::OnceLock::new();
        *BEST.get_or_init(|| *Self::here().last().expect("scalar runs everywhere"))
    }
}

/// `Σ_j w[j] · x[j]` in wrapping int32 (exact under the row bound).
#[inline(always)]
fn dot(w: &[i8], x: &[i16]) -> i32 {
    w.iter().zip(x).fold(0i32, |a, (&w, &x)| {
        a.wrapping_add(i32::from(w).wrapping_mul(i32::from(x)))
    })
}

/// One output channel's requantization (`Requant::apply`'s rule, PROTOCOL §5): its bias,
/// multiplier and shift, and the clamp.
#[derive(Clone, Copy)]
struct Column {
    bias: i64,
    m: i64,
    s: i64,
    lo: i64,
    hi: i64,
}

/// One weight row against every input row (`t` rows of `w.len()`), each sum requantized:
/// `out[r] = clamp(⌊((bias + w·x_r) · m + 2^(s−1)) / 2^s⌋, lo, hi)`, in loops the compiler
/// vectorizes (the channel's constants hoisted out of the rows).
#[inline(always)]
fn column(w: &[i8], xs: &[i16], c: Column, out: &mut [i64]) {
    let mut dots = [0i32; 64];
    for (rows, out) in xs.chunks(64 * w.len()).zip(out.chunks_mut(64)) {
        for (d, x) in dots.iter_mut().zip(rows.chunks_exact(w.len())) {
            *d = dot(w, x);
        }
        let half = 1i64 << (c.s - 1);
        for (o, &d) in out.iter_mut().zip(&dots) {
            *o = (((c.bias + i64::from(d)) * c.m + half) >> c.s).clamp(c.lo, c.hi);
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn column_avx2(w: &[i8], xs: &[i16], c: Column, out: &mut [i64]) {
    column(w, xs, c, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,avxvnni")]
fn column_avxvnni(w: &[i8], xs: &[i16], c: Column, out: &mut [i64]) {
    column(w, xs, c, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vnni")]
fn column_avx512(w: &[i8], xs: &[i16], c: Column, out: &mut [i64]) {
    column(w, xs, c, out)
}

/// `dense` over the rows of `x` (int16 values, as `i64`), requantized to `lo ..= hi`, with
/// kernel set `set` (one this machine runs): equal to `dense.apply(x, lo, hi)`. Computed by
/// output channel (each weight row read once per call), then laid out by row.
pub fn gemm(set: KernelSet, d: &Dense, x: &[i64], lo: i64, hi: i64) -> Vec<i64> {
    debug_assert!(set.runs_here());
    let t = x.len() / d.inp;
    let xs: Vec<i16> = x.iter().map(|&v| v as i16).collect();
    let mut by_channel = vec![0i64; t * d.out];
    for (o, out) in by_channel
        .chunks_exact_mut(t.max(1))
        .enumerate()
        .take(d.out)
    {
        let w = &d.weight[o * d.inp..(o + 1) * d.inp];
        let c = Column {
            bias: i64::from(d.bias[o]),
            m: i64::from(d.rq.m[o]),
            s: i64::from(d.rq.s[o]),
            lo,
            hi,
        };
        match set {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the set runs here (the caller's check, asserted above)
            KernelSet::Avx2 => unsafe { column_avx2(w, &xs, c, out) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as above
            KernelSet::AvxVnni => unsafe { column_avxvnni(w, &xs, c, out) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as above
            KernelSet::Avx512Vnni => unsafe { column_avx512(w, &xs, c, out) },
            _ => column(w, &xs, c, out),
        }
    }
    let mut y = vec![0i64; t * d.out];
    for (o, col) in by_channel.chunks_exact(t.max(1)).enumerate().take(d.out) {
        for (r, &v) in col.iter().enumerate().take(t) {
            y[r * d.out + o] = v;
        }
    }
    y
}

#[cfg(test)]
mod tests {
    use super::*;
    use compute_market_protocol::encoder::{random_encoder, RandomShape, Requant};

    /// Every set's dots equal the int64 sums at every length past a vector's tail, with the
    /// operands' extremes (−128 · −32768 and 127 · 32767 in runs).
    #[test]
    fn every_kernel_set_sums_exactly_at_every_length_and_extreme() {
        let sets = KernelSet::here();
        println!(
            "kernel sets here: {:?}",
            sets.iter().map(|k| k.name()).collect::<Vec<_>>()
        );
        for n in 1..200usize {
            let w: Vec<i8> = (0..n)
                .map(|j| match j % 5 {
                    0 => -128,
                    1 => 127,
                    _ => (j * 37 % 251) as u8 as i8,
                })
                .collect();
            let x: Vec<i64> = (0..3 * n)
                .map(|j| match j % 7 {
                    0 => -32768,
                    1 => 32767,
                    _ => (j as i64 * 7919 % 65_536) - 32_768,
                })
                .collect();
            let d = Dense {
                inp: n,
                out: 1,
                weight: w.clone(),
                bias: vec![-5],
                // the identity: m = 2^30, s = 30
                rq: Requant {
                    m: vec![1 << 30],
                    s: vec![30],
                },
            };
            let want: Vec<i64> = x
                .chunks_exact(n)
                .map(|r| {
                    -5 + r
                        .iter()
                        .zip(&w)
                        .map(|(&x, &w)| x * i64::from(w))
                        .sum::<i64>()
                })
                .collect();
            for &set in &sets {
                assert_eq!(
                    gemm(set, &d, &x, i64::MIN / 4, i64::MAX / 4),
                    want,
                    "{} at n = {n}",
                    set.name()
                );
            }
        }
    }

    /// Random encoders of odd widths (their clamps reached): every set embeds as the
    /// reference does.
    #[test]
    fn every_kernel_set_embeds_random_encoders_of_odd_widths_as_the_reference() {
        for (seed, (hidden, heads, ffn)) in [(45, 3, 101), (33, 1, 67), (64, 4, 130)]
            .into_iter()
            .enumerate()
        {
            let e = random_encoder(
                RandomShape {
                    hidden,
                    heads,
                    ffn,
                    blocks: 2,
                    vocab: 50,
                    positions: 24,
                },
                seed as u64 + 3,
            );
            e.check().unwrap();
            for t in [1usize, 7, 24] {
                let ids: Vec<u32> = (0..t).map(|p| ((p * 13 + seed) % 50) as u32).collect();
                let want = e.embed(&ids);
                for set in KernelSet::here() {
                    assert_eq!(
                        super::super::encoder::embed_by(set, &e, &ids),
                        want,
                        "{} on {hidden}/{heads}/{ffn}, {t} tokens",
                        set.name()
                    );
                }
            }
        }
    }
}

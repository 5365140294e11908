//! The encoder's GEMMs by kernel set (PROTOCOL §5, Encoder: every `Dense` is exact in int32 by
//! the model's row bound): int8 weights (packed once as int16 pairs) · int16 activations summed
//! in wrapping int32 — exact, since no sum can pass the bound. Each set's tile keeps a block of
//! rows × 16 output channels in vector registers and, per pair of inputs, multiplies a
//! broadcast pair of each row into the 16 channels' weight pairs (the layout oneDNN's int8
//! kernels use: no horizontal sums); the loops around it keep a chunk of rows in cache while
//! every weight group passes. Picked at run time, as the verifier's kernels are. Integers:
//! every set gives the reference's bits (tests hold each set the machine has to it).
//!
//! No crate does this: `gemm`/`matrixmultiply` are float-only or i8 × i8 → i32 without our
//! requantization, and oneDNN is a C++ build; the kernels are ~100 lines per set.

use compute_market_protocol::encoder::{Dense, Requant};

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

    /// Int16 multiply-adds a core can do a cycle with this set, the bench's peak: two vector
    /// multiply-add pipes (`pmaddwd`/`vpdpwssd`) of 128 bits for the baseline and 256 bits for
    /// AVX2 and AVX-VNNI, as Zen 4 and Intel's cores have; AVX-512 runs its 512-bit ones on
    /// the same two 256-bit pipes on Zen 4 (an Intel core with a second 512-bit unit does 64,
    /// so its share of peak reads twice too high).
    pub fn macs_per_cycle(self) -> u32 {
        match self {
            KernelSet::Scalar => 16,
            KernelSet::Avx2 | KernelSet::AvxVnni | KernelSet::Avx512Vnni => 32,
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
                    has!("avx512f")
                        && has!("avx512bw")
                        && has!("avx512dq")
                        && has!("avx512vl")
                        && has!("avx512vnni")
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

/// Output channels in a packed group: one 512-bit vector of int32 sums (two 256-bit ones).
pub const GROUP: usize = 16;

/// Input rows per cache chunk: a chunk's rows (at most 64 × 2 · 4 096 bytes) stay in L2 while
/// every group of weights passes over them.
const CHUNK: usize = 64;

/// Per-channel requantization constants (`Requant::apply`'s rule), widened to int64 once.
#[derive(Clone, Debug)]
pub(super) struct Rq {
    pub(super) m: Vec<i64>,
    pub(super) s: Vec<i64>,
    /// `2^(s − 1)`, the rounding term.
    pub(super) half: Vec<i64>,
}

impl Rq {
    /// From each channel's `(m, s)`.
    pub(super) fn new(channels: impl Iterator<Item = (i32, i32)> + Clone) -> Rq {
        Rq {
            m: channels.clone().map(|(m, _)| i64::from(m)).collect(),
            s: channels.clone().map(|(_, s)| i64::from(s)).collect(),
            half: channels.map(|(_, s)| 1i64 << (s - 1)).collect(),
        }
    }

    /// `r`'s channels.
    pub(super) fn of(r: &Requant) -> Rq {
        Rq::new(r.m.iter().copied().zip(r.s.iter().copied()))
    }
}

/// `⌊(x · m + 2^(s−1)) / 2^s⌋` before its clamp, in wrapping int64: exact for every caller's
/// operands (`|x| ≤ 2^31`, `m < 2^31`), which the model's bounds give.
#[inline(always)]
pub(super) fn requant(x: i64, m: i64, half: i64, s: i64) -> i64 {
    x.wrapping_mul(m).wrapping_add(half).wrapping_shr(s as u32)
}

/// A dense layer, or several side by side over the same input (`q`, `k`, `v`), packed for the
/// kernels: for each group of [`GROUP`] output channels and each pair of inputs `p`, the group's
/// two weights per channel as int16, `w[(g · k2 + p) · 32 + 2c + i] = W[16g + c][2p + i]`
/// (zero past the last channel and input), one vector a step; with each channel's bias and
/// requantization (`Requant::apply`'s rule).
#[derive(Clone, Debug)]
pub struct Packed {
    /// Inputs.
    pub inp: usize,
    /// Outputs (every layer's, in order).
    pub out: usize,
    /// Input pairs: `⌈inp / 2⌉`.
    k2: usize,
    w: Vec<i16>,
    bias: Vec<i64>,
    rq: Rq,
}

impl Packed {
    /// `layers` (each `inp` inputs) side by side: output `o` of the second layer is output
    /// `first.out + o` here.
    pub fn new(layers: &[&Dense]) -> Packed {
        let inp = layers.first().map_or(0, |d| d.inp);
        assert!(
            layers.iter().all(|d| d.inp == inp),
            "layers side by side share their input"
        );
        let out: usize = layers.iter().map(|d| d.out).sum();
        let k2 = inp.div_ceil(2);
        let groups = out.div_ceil(GROUP);
        // every channel as (layer, its row)
        let channels: Vec<(&Dense, usize)> = layers
            .iter()
            .flat_map(|&d| (0..d.out).map(move |o| (d, o)))
            .collect();
        let mut w = vec![0i16; groups * k2 * 2 * GROUP];
        for (o, &(d, row)) in channels.iter().enumerate() {
            let (g, c) = (o / GROUP, o % GROUP);
            for (j, &v) in d.weight[row * inp..][..inp].iter().enumerate() {
                w[(g * k2 + j / 2) * 2 * GROUP + 2 * c + j % 2] = i16::from(v);
            }
        }
        Packed {
            inp,
            out,
            k2,
            w,
            bias: channels
                .iter()
                .map(|&(d, o)| i64::from(d.bias[o]))
                .collect(),
            rq: Rq::new(channels.iter().map(|&(d, o)| (d.rq.m[o], d.rq.s[o]))),
        }
    }

    /// Int16 values per input row: `inp` rounded up to even (the pad is zero).
    pub fn stride(&self) -> usize {
        2 * self.k2
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        2 * self.w.len() + 32 * self.out
    }

    fn groups(&self) -> usize {
        self.out.div_ceil(GROUP)
    }

    /// One tile's sums (rows of `acc` into rows of `y`, channels `16g ..` of each), with bias,
    /// requantization and clamp.
    #[inline(always)]
    fn finish(&self, g: usize, acc: &[i32; GROUP], y: &mut [i32], lo: i64, hi: i64) {
        let (o0, n) = (g * GROUP, (self.out - g * GROUP).min(GROUP));
        let rq = &self.rq;
        let consts = self.bias[o0..o0 + n]
            .iter()
            .zip(&rq.m[o0..o0 + n])
            .zip(rq.s[o0..o0 + n].iter().zip(&rq.half[o0..o0 + n]));
        for ((y, &a), ((&b, &m), (&s, &half))) in y[o0..o0 + n].iter_mut().zip(acc).zip(consts) {
            // |b + a| ≤ 2^31 (the row bound)
            *y = requant(b.wrapping_add(i64::from(a)), m, half, s).clamp(lo, hi) as i32;
        }
    }
}

/// `R` rows' sums for one group of channels.
type Tile<const R: usize> = [[i32; GROUP]; R];

/// The loops around a kernel set's tile: chunks of rows, each against every pair of groups of
/// weights, `R` rows at a time. A tile's rows lie one after another, `stride` int16 apart (a
/// last partial tile of a chunk is copied once into a block padded with zero rows, whose sums
/// are dropped), so a tile keeps one pointer a row in registers; an odd last group is passed
/// as both of a pair and its second sums dropped.
#[inline(always)]
fn drive<const R: usize>(
    p: &Packed,
    x: &[i16],
    y: &mut [i32],
    (lo, hi): (i64, i64),
    tile: impl Fn(&[i16], &[i16], &[i16], usize) -> [Tile<R>; 2],
) {
    let stride = p.stride();
    let rows = x.len() / stride.max(1);
    let (step, groups) = (p.k2 * 2 * GROUP, p.groups());
    let mut pad = vec![0i16; R * stride];
    for chunk in (0..rows).step_by(CHUNK) {
        let end = (chunk + CHUNK).min(rows);
        let last = end - (end - chunk) % R;
        if last < end {
            pad.fill(0);
            pad[..(end - last) * stride].copy_from_slice(&x[last * stride..end * stride]);
        }
        for g in (0..groups).step_by(2) {
            let w0 = &p.w[g * step..][..step];
            let pair = g + 1 < groups;
            let w1 = if pair {
                &p.w[(g + 1) * step..][..step]
            } else {
                w0
            };
            for r0 in (chunk..end).step_by(R) {
                let n = (end - r0).min(R);
                let xs = if n == R {
                    &x[r0 * stride..][..R * stride]
                } else {
                    &pad[..]
                };
                let [a0, a1] = tile(w0, w1, xs, stride);
                for i in 0..n {
                    let y = &mut y[(r0 + i) * p.out..][..p.out];
                    p.finish(g, &a0[i], y, lo, hi);
                    if pair {
                        p.finish(g + 1, &a1[i], y, lo, hi);
                    }
                }
            }
        }
    }
}

/// Each of `R` rows' pairs of inputs as int32 (`2p, 2p + 1`, low half first, as x86 stores
/// them): the operand every lane's pair of weights multiplies, read straight from memory so
/// that the vector sets broadcast it as a memory operand. Asserts the rows (`stride` int16
/// apart) hold `k2` pairs each, so that the tiles' reads `rows[r].add(p)` for `p < k2` stay in
/// bounds.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn pairs<const R: usize>(xs: &[i16], stride: usize, k2: usize) -> [*const i32; R] {
    assert!(
        stride >= 2 * k2 && xs.len() >= R * stride,
        "R rows of k2 pairs"
    );
    std::array::from_fn(|r| xs[r * stride..].as_ptr().cast::<i32>())
}

/// The plain tile: `R` rows by 16 channels in int32 (each step's two products fit: |w · x| ≤
/// 2^22), for the build's baseline vectors.
#[inline(always)]
fn tile_scalar<const R: usize>(w: &[i16], xs: &[i16], stride: usize) -> Tile<R> {
    let mut acc = [[0i32; GROUP]; R];
    for (p, wv) in w.chunks_exact(2 * GROUP).enumerate() {
        for (r, acc) in acc.iter_mut().enumerate() {
            let x = &xs[r * stride..];
            let (x0, x1) = (i32::from(x[2 * p]), i32::from(x[2 * p + 1]));
            for (a, w) in acc.iter_mut().zip(wv.chunks_exact(2)) {
                let two = i32::from(w[0])
                    .wrapping_mul(x0)
                    .wrapping_add(i32::from(w[1]).wrapping_mul(x1));
                *a = a.wrapping_add(two);
            }
        }
    }
    acc
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    //! The vector tiles: each step broadcasts a row's pair of inputs and multiplies it into the
    //! group's vector of weight pairs (`vpmaddwd` then `vpaddd` on AVX2; `vpdpwssd`, one
    //! instruction, with VNNI), wrapping int32 sums as the plain tile's.
    use super::{pairs, Tile, GROUP};
    use std::arch::x86_64::*;

    /// 8 rows × two groups of 16 channels in sixteen 512-bit sums: each broadcast row pair
    /// feeds both groups, so a step is two weight loads and eight broadcasts for sixteen
    /// multiply-adds.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub fn tile_avx512(w0: &[i16], w1: &[i16], xs: &[i16], stride: usize) -> [Tile<8>; 2] {
        let k2 = w0.len() / (2 * GROUP);
        assert!(w1.len() >= w0.len(), "two panels of k2 steps");
        let rows = pairs::<8>(xs, stride, k2);
        let (mut a0, mut a1) = ([_mm512_setzero_si512(); 8], [_mm512_setzero_si512(); 8]);
        for p in 0..k2 {
            // SAFETY: 32 int16 at 32p within w0 and w1 (k2 steps of 32); pair p < k2 of each
            // row (`pairs`' assertion), read unaligned
            unsafe {
                let v0 = _mm512_loadu_si512(w0.as_ptr().add(p * 2 * GROUP).cast());
                let v1 = _mm512_loadu_si512(w1.as_ptr().add(p * 2 * GROUP).cast());
                for r in 0..8 {
                    let xv = _mm512_set1_epi32(rows[r].add(p).read_unaligned());
                    a0[r] = _mm512_dpwssd_epi32(a0[r], xv, v0);
                    a1[r] = _mm512_dpwssd_epi32(a1[r], xv, v1);
                }
            }
        }
        // SAFETY: eight vectors of 16 int32 are eight rows of 16 int32 (each array on its own:
        // a tuple's layout is not fixed)
        unsafe { [std::mem::transmute(a0), std::mem::transmute(a1)] }
    }

    /// 4 rows × 16 channels in eight 256-bit sums, each step `madd(sum, pairs, weights)`.
    #[inline(always)]
    fn tile256(
        w: &[i16],
        xs: &[i16],
        stride: usize,
        madd: impl Fn(__m256i, __m256i, __m256i) -> __m256i,
    ) -> Tile<4> {
        let k2 = w.len() / (2 * GROUP);
        let rows = pairs::<4>(xs, stride, k2);
        // SAFETY (both blocks): AVX2 runs here (every caller is built for it); 2 × 16 int16
        // at 32p lie within w; pair p < k2 of each row (`pairs`' assertion), read unaligned
        let mut acc = [[unsafe { _mm256_setzero_si256() }; 2]; 4];
        for p in 0..k2 {
            unsafe {
                let at = w.as_ptr().add(p * 2 * GROUP);
                let (w0, w1) = (
                    _mm256_loadu_si256(at.cast()),
                    _mm256_loadu_si256(at.add(GROUP).cast()),
                );
                for (a, x) in acc.iter_mut().zip(&rows) {
                    let xv = _mm256_set1_epi32(x.add(p).read_unaligned());
                    a[0] = madd(a[0], xv, w0);
                    a[1] = madd(a[1], xv, w1);
                }
            }
        }
        // SAFETY: 4 × 2 vectors of 8 int32 are 4 rows of 16 int32
        unsafe { std::mem::transmute(acc) }
    }

    /// AVX-VNNI's tile: `vpdpwssd`, group by group.
    #[target_feature(enable = "avx2,avxvnni")]
    pub fn tile_avxvnni(w0: &[i16], w1: &[i16], xs: &[i16], stride: usize) -> [Tile<4>; 2] {
        let madd = |a, x, w| _mm256_dpwssd_avx_epi32(a, x, w);
        [tile256(w0, xs, stride, madd), tile256(w1, xs, stride, madd)]
    }

    /// AVX2's tile: `vpmaddwd` then `vpaddd`, group by group.
    #[target_feature(enable = "avx2")]
    pub fn tile_avx2(w0: &[i16], w1: &[i16], xs: &[i16], stride: usize) -> [Tile<4>; 2] {
        let madd = |a, x, w| _mm256_add_epi32(a, _mm256_madd_epi16(x, w));
        [tile256(w0, xs, stride, madd), tile256(w1, xs, stride, madd)]
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vnni")]
    pub fn gemm_avx512(p: &super::Packed, x: &[i16], y: &mut [i32], clamp: (i64, i64)) {
        super::drive(p, x, y, clamp, |w0, w1, xs, s| tile_avx512(w0, w1, xs, s))
    }

    #[target_feature(enable = "avx2,avxvnni")]
    pub fn gemm_avxvnni(p: &super::Packed, x: &[i16], y: &mut [i32], clamp: (i64, i64)) {
        super::drive(p, x, y, clamp, |w0, w1, xs, s| tile_avxvnni(w0, w1, xs, s))
    }

    #[target_feature(enable = "avx2")]
    pub fn gemm_avx2(p: &super::Packed, x: &[i16], y: &mut [i32], clamp: (i64, i64)) {
        super::drive(p, x, y, clamp, |w0, w1, xs, s| tile_avx2(w0, w1, xs, s))
    }
}

/// The rows of `x` (each [`Packed::stride`] int16, the pad zero) through `p` by kernel set
/// `set` (one this machine runs), requantized to `lo ..= hi`, into `y` (`rows × p.out`): equal
/// to the layers' `Dense::apply`, side by side.
pub fn gemm(set: KernelSet, p: &Packed, x: &[i16], y: &mut [i32], lo: i64, hi: i64) {
    assert!(
        set.runs_here(),
        "kernel set {} does not run here",
        set.name()
    );
    assert_eq!(
        x.len() / p.stride().max(1) * p.out,
        y.len(),
        "rows in and out"
    );
    match set {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the set runs here (asserted above)
        KernelSet::Avx512Vnni => unsafe { x86::gemm_avx512(p, x, y, (lo, hi)) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above
        KernelSet::AvxVnni => unsafe { x86::gemm_avxvnni(p, x, y, (lo, hi)) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above
        KernelSet::Avx2 => unsafe { x86::gemm_avx2(p, x, y, (lo, hi)) },
        _ => drive::<4>(p, x, y, (lo, hi), |w0, w1, xs, s| {
            [tile_scalar(w0, xs, s), tile_scalar(w1, xs, s)]
        }),
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use compute_market_protocol::encoder::{random_encoder, Requant};
    use std::sync::Arc;

    /// `d` over the rows of `x` by `set`, laid out as `Dense::apply`'s.
    fn apply(set: KernelSet, d: &Dense, x: &[i64], lo: i64, hi: i64) -> Vec<i64> {
        let p = Packed::new(&[d]);
        let rows = x.len() / d.inp;
        let mut xs = vec![0i16; rows * p.stride()];
        for (xs, x) in xs.chunks_exact_mut(p.stride()).zip(x.chunks_exact(d.inp)) {
            for (a, &b) in xs.iter_mut().zip(x) {
                *a = b as i16;
            }
        }
        let mut y = vec![0i32; rows * d.out];
        gemm(set, &p, &xs, &mut y, lo, hi);
        y.into_iter().map(i64::from).collect()
    }

    /// Every set's sums equal the int64 sums at every length past a vector's tail and every
    /// count of channels and rows past a tile's, with the operands' extremes (−128 · −32768 and
    /// 127 · 32767 in runs).
    #[test]
    fn every_kernel_set_sums_exactly_at_every_length_and_extreme() {
        let sets = KernelSet::here();
        println!(
            "kernel sets here: {:?}",
            sets.iter().map(|k| k.name()).collect::<Vec<_>>()
        );
        for n in 1..200usize {
            let (out, rows) = (1 + n % 37, 1 + n % 19);
            let w: Vec<i8> = (0..n * out)
                .map(|j| match j % 5 {
                    0 => -128,
                    1 => 127,
                    _ => (j * 37 % 251) as u8 as i8,
                })
                .collect();
            let x: Vec<i64> = (0..rows * n)
                .map(|j| match j % 7 {
                    0 => -32768,
                    1 => 32767,
                    _ => (j as i64 * 7919 % 65_536) - 32_768,
                })
                .collect();
            let bias: Vec<i32> = (0..out as i32).map(|o| o * 3 - 5).collect();
            let d = Dense {
                inp: n,
                out,
                weight: w.clone(),
                bias: bias.clone(),
                // the identity: m = 2^30, s = 30
                rq: Requant {
                    m: vec![1 << 30; out],
                    s: vec![30; out],
                },
            };
            let want: Vec<i64> = x
                .chunks_exact(n)
                .flat_map(|r| {
                    let (w, bias) = (&w, &bias);
                    (0..out).map(move |o| {
                        i64::from(bias[o])
                            + r.iter()
                                .zip(&w[o * n..][..n])
                                .map(|(&x, &w)| x * i64::from(w))
                                .sum::<i64>()
                    })
                })
                .collect();
            for &set in &sets {
                assert_eq!(
                    apply(set, &d, &x, i64::MIN / 4, i64::MAX / 4),
                    want,
                    "{} at n = {n}, {out} channels, {rows} rows",
                    set.name()
                );
                assert_eq!(
                    apply(set, &d, &x, -1000, 1000),
                    d.apply(&x, -1000, 1000),
                    "{} clamped at n = {n}",
                    set.name()
                );
            }
        }
    }

    /// Random encoders of odd widths (their clamps reached), texts batched with others of
    /// other lengths: every set embeds each text as the reference does, batched and alone.
    #[test]
    fn every_kernel_set_embeds_random_encoders_of_odd_widths_as_the_reference() {
        for (shape, texts) in super::super::odd_encoders() {
            let e = Arc::new(random_encoder(shape, 3));
            e.check().unwrap();
            let want: Vec<Vec<i16>> = texts.iter().map(|ids| e.embed(ids)).collect();
            let refs: Vec<&[u32]> = texts.iter().map(Vec::as_slice).collect();
            for set in KernelSet::here() {
                let fast = super::super::cpu::Fast::new(e.clone(), set);
                assert_eq!(fast.embed(&refs), want, "{} on {shape:?}", set.name());
                for (ids, want) in refs.iter().zip(&want) {
                    assert_eq!(&fast.embed(&[ids])[0], want, "{} alone", set.name());
                }
            }
        }
    }
}

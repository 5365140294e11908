//! The decoder's block dot products by kernel set: for one weight row and up to four input
//! rows, `Σ_b d[b] · (Σ_{i<32} q[b][i] · x[32b + i])` with `q` a block's 4-bit weights (GGUF
//! `Q4_1`'s nibbles, 0 ..= 15) or int8 ones (`Q8_0`'s, the tied embedding), `x` int16 and `d`
//! the block's integer scale. A block's 32 products sum exactly in int32 (at most
//! `32 · 128 · 32 768 = 2^27`, and any part of them); the scaled sums in int64 (every set the same integers, so the
//! same bits: exact sums do not depend on their order).
//!
//! The sets are the encoder's ([`KernelSet`]): the baseline's plain Rust; AVX2's 256-bit
//! `vpmaddwd`; AVX-VNNI's and AVX-512 VNNI's `vpdpwssd` (256 and 512 bits). Each block's int32
//! lanes are added in pairs (the low half of each 64-bit lane), scaled by `d` in int64
//! (`vpmuldq`) and summed once a row.

pub use crate::compute::encoder::gemm::KernelSet;

/// How a row's weights are laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Weights {
    /// 16 bytes a block: byte i holds element i in its low nibble, element i + 16 in its high.
    Q4,
    /// 32 bytes a block: int8 elements in order.
    Q8,
}

impl Weights {
    fn block_bytes(self) -> usize {
        match self {
            Weights::Q4 => 16,
            Weights::Q8 => 32,
        }
    }

    /// Element `i` of block `b` of `row`.
    #[inline]
    fn at(self, row: &[u8], b: usize, i: usize) -> i32 {
        match self {
            Weights::Q4 => {
                let byte = row[b * 16 + i % 16];
                i32::from(if i < 16 { byte & 15 } else { byte >> 4 })
            }
            Weights::Q8 => i32::from(row[b * 32 + i] as i8),
        }
    }
}

/// `out[r] = Σ_b ds[b] · Σ_i q[b][i] · xs[r][32b + i]` for every row of `xs` (each `32 · nb`
/// int16, `nb = ds.len()`), with the weights of `row` laid out as `w` says.
pub fn dot_rows(
    set: KernelSet,
    w: Weights,
    row: &[u8],
    ds: &[i32],
    xs: &[&[i16]],
    out: &mut [i64],
) {
    let nb = ds.len();
    // the SIMD paths read by pointer: the lengths and the set are checked here
    assert!(
        row.len() >= nb * w.block_bytes(),
        "a weight row shorter than its blocks"
    );
    assert!(
        xs.iter().all(|x| x.len() >= 32 * nb),
        "an input row shorter than its blocks"
    );
    assert!(out.len() >= xs.len(), "fewer outputs than rows");
    assert!(
        set.runs_here(),
        "kernel set {} does not run here",
        set.name()
    );
    match set {
        #[cfg(target_arch = "x86_64")]
        KernelSet::Avx512Vnni => {
            let mut rows = xs.chunks_exact(4);
            let mut at = 0;
            for four in rows.by_ref() {
                // SAFETY: the set runs here (KernelSet::best and here() check), the slices hold
                // nb blocks (asserted above)
                let r =
                    unsafe { x86::avx512::<4>(w, row, ds, [four[0], four[1], four[2], four[3]]) };
                out[at..at + 4].copy_from_slice(&r);
                at += 4;
            }
            for x in rows.remainder() {
                // SAFETY: as above
                out[at] = unsafe { x86::avx512::<1>(w, row, ds, [x]) }[0];
                at += 1;
            }
        }
        #[cfg(target_arch = "x86_64")]
        KernelSet::Avx2 | KernelSet::AvxVnni => {
            let vnni = set == KernelSet::AvxVnni;
            let mut rows = xs.chunks_exact(4);
            let mut at = 0;
            for four in rows.by_ref() {
                let xs4 = [four[0], four[1], four[2], four[3]];
                // SAFETY: as above
                let r = unsafe {
                    if vnni {
                        x86::avx_vnni::<4>(w, row, ds, xs4)
                    } else {
                        x86::avx2::<4>(w, row, ds, xs4)
                    }
                };
                out[at..at + 4].copy_from_slice(&r);
                at += 4;
            }
            for x in rows.remainder() {
                // SAFETY: as above
                out[at] = unsafe {
                    if vnni {
                        x86::avx_vnni::<1>(w, row, ds, [x])
                    } else {
                        x86::avx2::<1>(w, row, ds, [x])
                    }
                }[0];
                at += 1;
            }
        }
        _ => {
            for (x, o) in xs.iter().zip(out.iter_mut()) {
                *o = (0..nb)
                    .map(|b| {
                        let s: i32 = (0..32)
                            .map(|i| w.at(row, b, i) * i32::from(x[32 * b + i]))
                            .sum();
                        i64::from(ds[b]) * i64::from(s)
                    })
                    .sum();
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use compute_market_protocol::decoder::Decoder;

    use super::Weights;

    /// [`Decoder::attend`] compiled for AVX-512.
    #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl")]
    pub unsafe fn attend_avx512(
        dec: &Decoder,
        att: (i32, i32),
        q: &[i64],
        kc: &[i16],
        vc: &[i16],
        seen: usize,
    ) -> Vec<i64> {
        dec.attend(att, q, kc, vc, seen)
    }

    /// [`Decoder::attend`] compiled for AVX2.
    #[target_feature(enable = "avx2")]
    pub unsafe fn attend_avx2(
        dec: &Decoder,
        att: (i32, i32),
        q: &[i64],
        kc: &[i16],
        vc: &[i16],
        seen: usize,
    ) -> Vec<i64> {
        dec.attend(att, q, kc, vc, seen)
    }

    /// A block's 32 weights as int16 lanes in element order.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw")]
    unsafe fn block512(w: Weights, row: &[u8], b: usize) -> __m512i {
        match w {
            Weights::Q4 => {
                let bytes = _mm_loadu_si128(row.as_ptr().add(b * 16) as *const __m128i);
                let wide = _mm256_cvtepu8_epi16(bytes);
                let lo = _mm256_and_si256(wide, _mm256_set1_epi16(15));
                let hi = _mm256_srli_epi16::<4>(wide);
                _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi)
            }
            Weights::Q8 => _mm512_cvtepi8_epi16(_mm256_loadu_si256(
                row.as_ptr().add(b * 32) as *const __m256i
            )),
        }
    }

    /// AVX-512 VNNI: N rows, a block's products by `vpdpwssd`, scaled in int64.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub unsafe fn avx512<const N: usize>(
        w: Weights,
        row: &[u8],
        ds: &[i32],
        xs: [&[i16]; N],
    ) -> [i64; N] {
        let mut acc = [_mm512_setzero_si512(); N];
        for (b, &d) in ds.iter().enumerate() {
            let wv = block512(w, row, b);
            let dv = _mm512_set1_epi64(i64::from(d));
            for r in 0..N {
                let x = _mm512_loadu_si512(xs[r].as_ptr().add(b * 32) as *const __m512i);
                let p = _mm512_dpwssd_epi32(_mm512_setzero_si512(), wv, x);
                // each 64-bit lane's two int32 sums (of 4 products: < 2^21) added in its low
                // half, then scaled in int64
                let pair = _mm512_add_epi32(p, _mm512_srli_epi64::<32>(p));
                acc[r] = _mm512_add_epi64(acc[r], _mm512_mul_epi32(pair, dv));
            }
        }
        let mut out = [0i64; N];
        for r in 0..N {
            out[r] = _mm512_reduce_add_epi64(acc[r]);
        }
        out
    }

    /// A block's 32 weights as two int16 vectors: elements 0 ..= 15 and 16 ..= 31.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn block256(w: Weights, row: &[u8], b: usize) -> (__m256i, __m256i) {
        match w {
            Weights::Q4 => {
                let bytes = _mm_loadu_si128(row.as_ptr().add(b * 16) as *const __m128i);
                let wide = _mm256_cvtepu8_epi16(bytes);
                (
                    _mm256_and_si256(wide, _mm256_set1_epi16(15)),
                    _mm256_srli_epi16::<4>(wide),
                )
            }
            Weights::Q8 => {
                let p = row.as_ptr().add(b * 32);
                (
                    _mm256_cvtepi8_epi16(_mm_loadu_si128(p as *const __m128i)),
                    _mm256_cvtepi8_epi16(_mm_loadu_si128(p.add(16) as *const __m128i)),
                )
            }
        }
    }

    /// The 4 int64 lanes of a 256-bit accumulator summed.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn sum256(v: __m256i) -> i64 {
        let mut l = [0i64; 4];
        _mm256_storeu_si256(l.as_mut_ptr() as *mut __m256i, v);
        l.iter().sum()
    }

    macro_rules! kernel256 {
        ($name:ident, $features:literal, $madd:expr) => {
            /// N rows on 256-bit vectors, a block's products scaled in int64.
            #[target_feature(enable = $features)]
            pub unsafe fn $name<const N: usize>(
                w: Weights,
                row: &[u8],
                ds: &[i32],
                xs: [&[i16]; N],
            ) -> [i64; N] {
                let mut acc = [_mm256_setzero_si256(); N];
                for (b, &d) in ds.iter().enumerate() {
                    let (lo, hi) = block256(w, row, b);
                    let dv = _mm256_set1_epi64x(i64::from(d));
                    for r in 0..N {
                        let x = xs[r].as_ptr().add(b * 32);
                        let x0 = _mm256_loadu_si256(x as *const __m256i);
                        let x1 = _mm256_loadu_si256(x.add(16) as *const __m256i);
                        let p = $madd(lo, hi, x0, x1);
                        // each 64-bit lane's two int32 sums (of 8 products: < 2^22) added in
                        // its low half, then scaled in int64
                        let pair = _mm256_add_epi32(p, _mm256_srli_epi64::<32>(p));
                        acc[r] = _mm256_add_epi64(acc[r], _mm256_mul_epi32(pair, dv));
                    }
                }
                let mut out = [0i64; N];
                for r in 0..N {
                    out[r] = sum256(acc[r]);
                }
                out
            }
        };
    }

    kernel256!(avx2, "avx2", |lo, hi, x0, x1| _mm256_add_epi32(
        _mm256_madd_epi16(lo, x0),
        _mm256_madd_epi16(hi, x1)
    ));
    kernel256!(avx_vnni, "avx2,avxvnni", |lo, hi, x0, x1| {
        _mm256_dpwssd_avx_epi32(
            _mm256_dpwssd_avx_epi32(_mm256_setzero_si256(), lo, x0),
            hi,
            x1,
        )
    });

    /// The packed kernel: N ≤ 8 rows against output group `g` ([`super::Packed`]): per block,
    /// 16 `vpdpwssd` (16 outputs' weight pair by a broadcast input pair) into int32, then the
    /// block's scales and minimums in int64, the even and the odd outputs apart.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub unsafe fn packed<const N: usize>(
        p: &super::Packed,
        g: usize,
        xs: &[&[i16]],
        sums: &[Vec<i32>],
        out: &mut [[i64; 16]; 8],
    ) {
        let nb = p.nb;
        let mut even = [_mm512_setzero_si512(); N];
        let mut odd = [_mm512_setzero_si512(); N];
        let nib = _mm512_set1_epi32(0x0F);
        let high = _mm512_set1_epi32(0xF0);
        for b in 0..nb {
            let base = (g * nb + b) * 16;
            let mut acc = [_mm512_setzero_si512(); N];
            for q in 0..16 {
                let bytes = _mm_loadu_si128(p.w.as_ptr().add((base + q) * 16) as *const __m128i);
                let v = _mm512_cvtepu8_epi32(bytes);
                let w = _mm512_or_si512(
                    _mm512_and_si512(v, nib),
                    _mm512_slli_epi32::<12>(_mm512_and_si512(v, high)),
                );
                for r in 0..N {
                    let pair = (xs[r].as_ptr().add(32 * b + 2 * q) as *const i32).read_unaligned();
                    acc[r] = _mm512_dpwssd_epi32(acc[r], w, _mm512_set1_epi32(pair));
                }
            }
            let dv = _mm512_loadu_si512(p.d.as_ptr().add(base) as *const __m512i);
            let mv = _mm512_loadu_si512(p.min.as_ptr().add(base) as *const __m512i);
            let (dv_odd, mv_odd) = (_mm512_srli_epi64::<32>(dv), _mm512_srli_epi64::<32>(mv));
            for r in 0..N {
                let sx = _mm512_set1_epi32(sums[r][b]);
                even[r] = _mm512_add_epi64(
                    even[r],
                    _mm512_add_epi64(_mm512_mul_epi32(acc[r], dv), _mm512_mul_epi32(mv, sx)),
                );
                odd[r] = _mm512_add_epi64(
                    odd[r],
                    _mm512_add_epi64(
                        _mm512_mul_epi32(_mm512_srli_epi64::<32>(acc[r]), dv_odd),
                        _mm512_mul_epi32(mv_odd, sx),
                    ),
                );
            }
        }
        for r in 0..N {
            let (mut e, mut o) = ([0i64; 8], [0i64; 8]);
            _mm512_storeu_si512(e.as_mut_ptr() as *mut __m512i, even[r]);
            _mm512_storeu_si512(o.as_mut_ptr() as *mut __m512i, odd[r]);
            for k in 0..8 {
                out[r][2 * k] = e[k];
                out[r][2 * k + 1] = o[k];
            }
        }
    }
}

/// One row's attention, [`Decoder::attend`](compute_market_protocol::decoder::Decoder::attend)
/// itself compiled for this machine's widest vectors (the protocol crate is built for the
/// baseline; its loops are inlined here): the same integers.
pub fn attend(
    set: KernelSet,
    dec: &compute_market_protocol::decoder::Decoder,
    att: (i32, i32),
    q: &[i64],
    kc: &[i16],
    vc: &[i16],
    seen: usize,
) -> Vec<i64> {
    assert!(
        set.runs_here(),
        "kernel set {} does not run here",
        set.name()
    );
    match set {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the set runs here (asserted)
        KernelSet::Avx512Vnni => unsafe { x86::attend_avx512(dec, att, q, kc, vc, seen) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above
        KernelSet::Avx2 | KernelSet::AvxVnni => unsafe {
            x86::attend_avx2(dec, att, q, kc, vc, seen)
        },
        _ => dec.attend(att, q, kc, vc, seen),
    }
}

/// A dense layer's weights repacked for many input rows at once (a prefill, a batch's step) on
/// AVX-512 VNNI: outputs in groups of 16, and per group, block and pair of inputs `(2p, 2p + 1)`
/// one byte per output holding the two weights' nibbles, so that one `vpdpwssd` multiplies 16
/// outputs' pair by an input pair broadcast; the block scales and minimums laid out by group
/// and block, 16 outputs together. As many bytes as the layer's own.
#[derive(Clone, Debug, Default)]
pub struct Packed {
    out: usize,
    nb: usize,
    w: Vec<u8>,
    d: Vec<i32>,
    min: Vec<i32>,
}

/// Outputs of a packed group.
const GROUP: usize = 16;

impl Packed {
    /// `d` repacked (its last group zero past its outputs).
    pub fn new(d: &compute_market_protocol::decoder::Dense) -> Self {
        let nb = d.inp / 32;
        let groups = d.out.div_ceil(GROUP);
        let mut w = vec![0u8; groups * nb * 16 * GROUP];
        let (mut ds, mut mins) = (
            vec![0i32; groups * nb * GROUP],
            vec![0i32; groups * nb * GROUP],
        );
        for o in 0..d.out {
            let (g, k) = (o / GROUP, o % GROUP);
            for b in 0..nb {
                ds[(g * nb + b) * GROUP + k] = d.d[o * nb + b];
                mins[(g * nb + b) * GROUP + k] = d.min[o * nb + b];
                for p in 0..16 {
                    let (lo, hi) = (d.q(o, 32 * b + 2 * p), d.q(o, 32 * b + 2 * p + 1));
                    w[((g * nb + b) * 16 + p) * GROUP + k] = (lo | hi << 4) as u8;
                }
            }
        }
        Packed {
            out: d.out,
            nb,
            w,
            d: ds,
            min: mins,
        }
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.w.len() + 4 * (self.d.len() + self.min.len())
    }

    /// Whether this machine runs the packed kernel.
    pub fn runs_here() -> bool {
        KernelSet::Avx512Vnni.runs_here()
    }

    /// Output group `g`'s accumulators (`Σ_j W[o][j] · x[j]`, minimums included) for every row
    /// of `xs` (each `32 · nb` int16, `sums[r][b]` its blocks' sums) into `out[k · n + r]` for
    /// output `16 g + k` (outputs past the layer's are not written). Needs [`Packed::runs_here`].
    pub fn group(&self, g: usize, xs: &[&[i16]], sums: &[Vec<i32>], out: &mut [i64]) {
        assert!(Self::runs_here(), "the packed kernel needs AVX-512 VNNI");
        let n = xs.len();
        assert!(
            g * GROUP < self.out.max(1) && sums.len() == n,
            "a group of the layer"
        );
        assert!(
            xs.iter().all(|x| x.len() >= 32 * self.nb) && sums.iter().all(|s| s.len() >= self.nb),
            "input rows shorter than the layer's blocks"
        );
        let mut at = 0;
        while at < n {
            let take = (n - at).min(8);
            let mut acc = [[0i64; GROUP]; 8];
            #[cfg(target_arch = "x86_64")]
            // SAFETY: AVX-512 VNNI runs here (asserted); every x holds nb blocks
            unsafe {
                macro_rules! run {
                    ($($k:literal),*) => {
                        match take {
                            $($k => x86::packed::<$k>(self, g, &xs[at..at + $k], &sums[at..at + $k], &mut acc),)*
                            _ => unreachable!(),
                        }
                    };
                }
                run!(1, 2, 3, 4, 5, 6, 7, 8);
            }
            for (r, a) in acc.iter().enumerate().take(take) {
                for (k, &v) in a.iter().enumerate() {
                    if g * GROUP + k < self.out {
                        out[k * n + at + r] = v;
                    }
                }
            }
            at += take;
        }
    }
}

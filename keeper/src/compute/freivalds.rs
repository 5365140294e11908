//! The verifier's side of `MatMulModP` on the CPU: Freivalds products computed in one streaming
//! pass, without materialising A or B.
//!
//! * [`generated_rows_dot`]: `M · v` for a generated input matrix M and up to [`MAX_ROUNDS`]
//!   vectors at once: every element of M is generated once, used for every vector, and dropped.
//!   `A·(B·r)` is two such passes (k·n, then m·k generated elements), whatever the round count.
//! * [`c_times`]: `C · r` straight from the served tiles, checking in the same pass that every
//!   element is a field element and that the zero padding outside C is zero.
//!
//! Both have an AVX-512 path (eight 64-bit lanes: the generator, the products and the folds)
//! picked at run time when the CPU has AVX-512F/DQ/VL, and a scalar path elsewhere; a test holds
//! them equal. Arithmetic is exact: every product (< 2^62) is folded once to below 2^32 before it is
//! summed, sums stay far below 2^64, and the result is reduced mod P at the end, so no order
//! of evaluation changes it.

use anyhow::{anyhow, ensure, Result};
use compute_market_protocol::{
    hash::Digest,
    job::{matrix_element, JobKind, JobSpec, MATMUL_TILE},
    P,
};
use rayon::prelude::*;

use super::matrix::reduce;
use compute_market_protocol::merkle::leaf_hash;

/// Most vectors handled in one pass (more are processed in groups of this size).
pub const MAX_ROUNDS: usize = 4;

/// One Mersenne fold: `x < 2^64` → a value `< 2^33 + 2^31` congruent to `x` mod P.
#[inline(always)]
fn fold(x: u64) -> u64 {
    (x & P) + (x >> 31)
}

/// `a·b` folded once: congruent mod P, below 2^32 (a product is below 2^62).
#[inline(always)]
fn folded_product(a: u32, b: u32) -> u64 {
    fold(a as u64 * b as u64)
}

/// `Σ a[i]·b[i]`, each product folded: below 2^32 · len, so exact for any row this crate
/// accepts (≤ 8192 elements).
#[inline(always)]
fn dot_folded(a: &[u32], b: &[u32]) -> u64 {
    a.iter().zip(b).map(|(&x, &y)| folded_product(x, y)).sum()
}

/// `Σ_j M[row][j] · v[r][j]` for each of the `R` vectors, with `M[row][j]` =
/// `matrix_element(key, base + j)`, generating the row on the fly.
#[inline(always)]
fn row_dots<const R: usize>(key: u64, base: u64, vs: &[&[u32]; R]) -> [u32; R] {
    #[cfg(target_arch = "x86_64")]
    if has_avx512() {
        if has_ifma() {
            // SAFETY: the CPU supports AVX-512F/DQ/IFMA (checked)
            return unsafe { avx512::row_dots_ifma::<R>(key, base, vs) };
        }
        // SAFETY: the CPU supports AVX-512F/DQ (checked)
        return unsafe { avx512::row_dots::<R>(key, base, vs) }.map(reduce);
    }
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: the CPU supports AVX2 (checked)
        return unsafe { avx2::row_dots::<R>(key, base, vs) }.map(reduce);
    }
    let mut acc = [0u64; R];
    for (j, e) in (0..vs[0].len()).map(|j| (j, matrix_element(&key, base + j as u64))) {
        for r in 0..R {
            acc[r] += folded_product(e, vs[r][j]);
        }
    }
    acc.map(reduce)
}

/// Whether the AVX-512 kernels can run here.
#[inline(always)]
fn has_avx512() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512dq")
            && std::arch::is_x86_feature_detected!("avx512vl")
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Whether the AVX2 kernels can run here.
#[inline(always)]
fn has_avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2")
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Whether the AVX-512 IFMA (52-bit multiply-accumulate) kernel can run here.
#[inline(always)]
fn has_ifma() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512ifma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// The AVX2 kernels: the scalar arithmetic in loops shaped for the compiler to vectorize
/// (four 64-bit lanes; 64-bit products of the generator built from 32-bit ones), compiled with
/// AVX2 enabled and picked at run time. A test holds them equal to the scalar code.
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use compute_market_protocol::{job::matrix_element, P};

    /// The generator's index multiplier (`compute_market_protocol::job::matrix_element`).
    const IDX_MUL: u64 = 0xD1B5_4A32_D192_ED03;

    /// `x · c` (mod 2^64) per 64-bit lane from three 32×32→64 products (AVX2 has no 64-bit
    /// multiply): lo·lo + ((hi(x)·lo(c) + lo(x)·hi(c)) << 32).
    #[inline]
    #[target_feature(enable = "avx2")]
    fn mul64(x: __m256i, c_lo: __m256i, c_hi: __m256i) -> __m256i {
        let lo = _mm256_mul_epu32(x, c_lo);
        let cross = _mm256_add_epi64(
            _mm256_mul_epu32(_mm256_srli_epi64::<32>(x), c_lo),
            _mm256_mul_epu32(x, c_hi),
        );
        _mm256_add_epi64(lo, _mm256_slli_epi64::<32>(cross))
    }

    /// A 64-bit constant as the (low, high) halves [`mul64`] takes.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn halves(c: u64) -> (__m256i, __m256i) {
        (
            _mm256_set1_epi64x((c & 0xffff_ffff) as i64),
            _mm256_set1_epi64x((c >> 32) as i64),
        )
    }

    /// `x mod P` for lanes below 2^64: two folds, then x − P where x ≥ P (the lanes are then
    /// below 2^33, so the signed compare is exact).
    #[inline]
    #[target_feature(enable = "avx2")]
    fn mod_p4(x: __m256i) -> __m256i {
        let p = _mm256_set1_epi64x(P as i64);
        let x = _mm256_add_epi64(_mm256_and_si256(x, p), _mm256_srli_epi64::<31>(x));
        let x = _mm256_add_epi64(_mm256_and_si256(x, p), _mm256_srli_epi64::<31>(x));
        let ge = _mm256_cmpgt_epi64(x, _mm256_set1_epi64x(P as i64 - 1));
        _mm256_sub_epi64(x, _mm256_and_si256(ge, p))
    }

    /// One Mersenne fold per lane.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn fold4(x: __m256i) -> __m256i {
        let p = _mm256_set1_epi64x(P as i64);
        _mm256_add_epi64(_mm256_and_si256(x, p), _mm256_srli_epi64::<31>(x))
    }

    /// Four u32 of `s` from `j`, zero-extended to 64-bit lanes.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn load4(s: &[u32], j: usize) -> __m256i {
        assert!(j + 4 <= s.len());
        // SAFETY: 16 bytes at `j` are within `s` (asserted)
        _mm256_cvtepu32_epi64(unsafe { _mm_loadu_si128(s.as_ptr().add(j) as *const __m128i) })
    }

    /// `matrix_element` for four lanes given `mixed = idx · IDX_MUL` (the protocol's
    /// generator: SplitMix64 of key ⊕ mixed, reduced mod P).
    #[inline]
    #[target_feature(enable = "avx2")]
    fn elements(
        key: __m256i,
        mixed: __m256i,
        m1: (__m256i, __m256i),
        m2: (__m256i, __m256i),
    ) -> __m256i {
        let z = _mm256_add_epi64(
            _mm256_xor_si256(key, mixed),
            _mm256_set1_epi64x(0x9E37_79B9_7F4A_7C15u64 as i64),
        );
        let z = mul64(_mm256_xor_si256(z, _mm256_srli_epi64::<30>(z)), m1.0, m1.1);
        let z = mul64(_mm256_xor_si256(z, _mm256_srli_epi64::<27>(z)), m2.0, m2.1);
        mod_p4(_mm256_xor_si256(z, _mm256_srli_epi64::<31>(z)))
    }

    /// Unreduced sums `Σ_j folded(matrix_element(key, base + j) · vs[r][j])`: eight elements
    /// per step in two independent chains of four lanes.
    #[target_feature(enable = "avx2")]
    pub fn row_dots<const R: usize>(key: u64, base: u64, vs: &[&[u32]; R]) -> [u64; R] {
        let n = vs[0].len();
        let full = n / 8 * 8;
        let keyv = _mm256_set1_epi64x(key as i64);
        let (m1, m2) = (halves(0xBF58_476D_1CE4_E5B9), halves(0x94D0_49BB_1331_11EB));
        let (i_lo, i_hi) = halves(IDX_MUL);
        let idx = _mm256_add_epi64(
            _mm256_set1_epi64x(base as i64),
            _mm256_set_epi64x(3, 2, 1, 0),
        );
        let mut mixed = mul64(idx, i_lo, i_hi);
        let step = _mm256_set1_epi64x(IDX_MUL.wrapping_mul(4) as i64);
        let mut acc = [_mm256_setzero_si256(); R];
        let mut acc2 = [_mm256_setzero_si256(); R];
        let mut j = 0;
        while j < full {
            let mixed2 = _mm256_add_epi64(mixed, step);
            let e = elements(keyv, mixed, m1, m2);
            let e2 = elements(keyv, mixed2, m1, m2);
            for r in 0..R {
                acc[r] = _mm256_add_epi64(acc[r], fold4(_mm256_mul_epu32(e, load4(vs[r], j))));
                acc2[r] =
                    _mm256_add_epi64(acc2[r], fold4(_mm256_mul_epu32(e2, load4(vs[r], j + 4))));
            }
            mixed = _mm256_add_epi64(mixed2, step);
            j += 8;
        }
        let mut out = [0u64; R];
        for r in 0..R {
            let mut lanes = [0u64; 4];
            // SAFETY: 32 bytes into a [u64; 4]
            unsafe {
                _mm256_storeu_si256(
                    lanes.as_mut_ptr() as *mut __m256i,
                    _mm256_add_epi64(acc[r], acc2[r]),
                )
            };
            out[r] = lanes.iter().sum();
            for (k, &v) in vs[r].iter().enumerate().skip(full) {
                out[r] += super::folded_product(matrix_element(&key, base + k as u64), v);
            }
        }
        out
    }

    /// Eight u32 of row `row` of a 64×64 tile from column `col` (a multiple of eight).
    #[inline]
    #[target_feature(enable = "avx2")]
    fn tile8(tile: &[u8; 64 * 64 * 4], row: usize, col: usize) -> __m256i {
        assert!(row < 64 && col + 8 <= 64);
        // SAFETY: 32 bytes at this offset are within the tile (asserted)
        unsafe { _mm256_loadu_si256(tile.as_ptr().add(256 * row + 4 * col) as *const __m256i) }
    }

    /// Lanes of eight u32 that lie in the first `n` columns of a group of eight (all ones).
    #[inline]
    #[target_feature(enable = "avx2")]
    fn inside8(n: usize) -> __m256i {
        let n = n.min(8) as i32;
        _mm256_cmpgt_epi32(
            _mm256_set1_epi32(n),
            _mm256_set_epi32(7, 6, 5, 4, 3, 2, 1, 0),
        )
    }

    /// Whether a 64×64 tile is malformed: a value ≥ P in its `rows × width` corner, or a
    /// non-zero value outside it (the padding).
    #[target_feature(enable = "avx2")]
    pub fn tile_malformed(tile: &[u8], rows: usize, width: usize) -> bool {
        let tile: &[u8; 64 * 64 * 4] = tile.try_into().expect("a 64×64 tile");
        // values ≥ P are those with the top bit set or equal to P: (v ^ 2^31) > (P − 1) ^ 2^31
        // as signed; flip the top bit so the signed compare orders them as unsigned
        let top = _mm256_set1_epi32(i32::MIN);
        let limit = _mm256_set1_epi32((P as u32 - 1) as i32 ^ i32::MIN);
        let zero = _mm256_setzero_si256();
        let masks: [__m256i; 8] = std::array::from_fn(|c| inside8(width.saturating_sub(8 * c)));
        let mut bad = zero;
        for row in 0..64 {
            for (c, &inside) in masks.iter().enumerate() {
                let inside = if row < rows { inside } else { zero };
                let v = tile8(tile, row, 8 * c);
                let big = _mm256_cmpgt_epi32(_mm256_xor_si256(v, top), limit);
                let nonzero = _mm256_xor_si256(_mm256_cmpeq_epi32(v, zero), _mm256_set1_epi32(-1));
                bad = _mm256_or_si256(
                    bad,
                    _mm256_or_si256(
                        _mm256_and_si256(big, inside),
                        _mm256_andnot_si256(inside, nonzero),
                    ),
                );
            }
        }
        _mm256_testz_si256(bad, bad) == 0
    }

    /// For each of the first `rows` rows of a 64×64 tile: `out[row] += Σ_{c < width}
    /// folded(tile[row][c] · r[c])`.
    #[target_feature(enable = "avx2")]
    pub fn tile_dots(tile: &[u8], rows: usize, width: usize, r: &[u32], out: &mut [u64]) {
        let tile: &[u8; 64 * 64 * 4] = tile.try_into().expect("a 64×64 tile");
        assert!(width <= 64 && r.len() >= width && out.len() >= rows);
        // r as 64-bit lanes, zero beyond `width` (so the padding, zero or not, adds nothing)
        let mut rp = [0u32; 64];
        rp[..width].copy_from_slice(&r[..width]);
        let groups = width.div_ceil(8);
        let rv: [(__m256i, __m256i); 8] =
            std::array::from_fn(|c| (load4(&rp, 8 * c), load4(&rp, 8 * c + 4)));
        for (row, o) in out.iter_mut().enumerate().take(rows) {
            let mut acc = _mm256_setzero_si256();
            for (c, &(lo, hi)) in rv.iter().enumerate().take(groups) {
                let v = tile8(tile, row, 8 * c);
                let v_lo = _mm256_cvtepu32_epi64(_mm256_castsi256_si128(v));
                let v_hi = _mm256_cvtepu32_epi64(_mm256_extracti128_si256::<1>(v));
                acc = _mm256_add_epi64(acc, fold4(_mm256_mul_epu32(v_lo, lo)));
                acc = _mm256_add_epi64(acc, fold4(_mm256_mul_epu32(v_hi, hi)));
            }
            let mut lanes = [0u64; 4];
            // SAFETY: 32 bytes into a [u64; 4]
            unsafe { _mm256_storeu_si256(lanes.as_mut_ptr() as *mut __m256i, acc) };
            *o += lanes.iter().sum::<u64>();
        }
    }
}

/// The AVX-512 kernels: 8 elements per instruction, the same arithmetic as the scalar code.
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use compute_market_protocol::P;

    /// Eight lanes of `folded_product`: `(p & P) + (p >> 31)` with `p = a·b` (a, b < 2^32 in
    /// the low halves of 64-bit lanes).
    #[inline]
    #[target_feature(enable = "avx512f,avx512dq")]
    fn folded(a: __m512i, b: __m512i) -> __m512i {
        let p = _mm512_mul_epu32(a, b);
        _mm512_add_epi64(
            _mm512_and_si512(p, _mm512_set1_epi64(P as i64)),
            _mm512_srli_epi64::<31>(p),
        )
    }

    /// Eight u32 at `s[j..j + 8]`, zero-extended to 64-bit lanes.
    #[inline]
    #[target_feature(enable = "avx512f,avx512dq")]
    fn load8(s: &[u32], j: usize) -> __m512i {
        let s = &s[j..j + 8];
        // SAFETY: `s` holds exactly 8 elements; unaligned load
        _mm512_cvtepu32_epi64(unsafe { _mm256_loadu_si256(s.as_ptr() as *const __m256i) })
    }

    /// The multiplier `matrix_element` applies to the index.
    const IDX_MUL: u64 = 0xD1B5_4A32_D192_ED03;

    /// `idx · IDX_MUL` for the lanes `base..base + 8`, and the step that advances it by eight
    /// indices (wrapping, like the scalar code): the multiply is done once per row, not per
    /// element.
    #[inline]
    #[target_feature(enable = "avx512f,avx512dq")]
    fn index_mixer(base: u64) -> (__m512i, __m512i) {
        let idx = _mm512_add_epi64(
            _mm512_set1_epi64(base as i64),
            _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0),
        );
        (
            _mm512_mullo_epi64(idx, _mm512_set1_epi64(IDX_MUL as i64)),
            _mm512_set1_epi64(IDX_MUL.wrapping_mul(8) as i64),
        )
    }

    /// [`row_dots`] with 52-bit multiply-accumulates, reduced mod P: each element is left
    /// folded once (< 2^34, congruent to the generated value), and each product (< 2^65) is
    /// split by the instructions into its low 52 bits and the rest (< 2^13), summed apart
    /// (per lane at most 1024 terms for 8192 columns: < 2^62 and < 2^23), then recombined as
    /// hi·2^52 + lo ≡ hi·2^21 + lo (mod P, since 2^31 ≡ 1).
    #[target_feature(enable = "avx512f,avx512dq,avx512ifma")]
    pub fn row_dots_ifma<const R: usize>(key: u64, base: u64, vs: &[&[u32]; R]) -> [u32; R] {
        let n = vs[0].len();
        let full = n / 8 * 8;
        let keyv = _mm512_set1_epi64(key as i64);
        let (mut mixed, step) = index_mixer(base);
        let mut lo = [_mm512_setzero_si512(); R];
        let mut hi = [_mm512_setzero_si512(); R];
        // two chunks of eight per step, summed apart: two independent chains
        let (mut lo2, mut hi2) = (lo, hi);
        let (mut mixed2, step2) = (_mm512_add_epi64(mixed, step), _mm512_add_epi64(step, step));
        let mut j = 0;
        while j + 16 <= full {
            let e = folded_elements(keyv, mixed);
            let e2 = folded_elements(keyv, mixed2);
            for r in 0..R {
                let (v, v2) = (load8(vs[r], j), load8(vs[r], j + 8));
                lo[r] = _mm512_madd52lo_epu64(lo[r], e, v);
                hi[r] = _mm512_madd52hi_epu64(hi[r], e, v);
                lo2[r] = _mm512_madd52lo_epu64(lo2[r], e2, v2);
                hi2[r] = _mm512_madd52hi_epu64(hi2[r], e2, v2);
            }
            mixed = _mm512_add_epi64(mixed, step2);
            mixed2 = _mm512_add_epi64(mixed2, step2);
            j += 16;
        }
        if j < full {
            let e = folded_elements(keyv, mixed);
            for r in 0..R {
                let v = load8(vs[r], j);
                lo[r] = _mm512_madd52lo_epu64(lo[r], e, v);
                hi[r] = _mm512_madd52hi_epu64(hi[r], e, v);
            }
        }
        for r in 0..R {
            lo[r] = _mm512_add_epi64(lo[r], lo2[r]);
            hi[r] = _mm512_add_epi64(hi[r], hi2[r]);
        }
        let mut out = [0u32; R];
        for r in 0..R {
            // lanes of `lo` may reach 2^62 (8192 columns): fold them before summing
            let p = _mm512_set1_epi64(P as i64);
            let lo_folded =
                _mm512_add_epi64(_mm512_and_si512(lo[r], p), _mm512_srli_epi64::<31>(lo[r]));
            let l = _mm512_reduce_add_epi64(lo_folded) as u64; // < 8 · 2^34
            let h = _mm512_reduce_add_epi64(hi[r]) as u64; // < 8 · 1024 · 2^13 = 2^26
            let mut acc = l + super::fold(h << 21);
            for (k, &v) in vs[r].iter().enumerate().skip(full) {
                acc += super::folded_product(
                    compute_market_protocol::job::matrix_element(&key, base + k as u64),
                    v,
                );
            }
            out[r] = super::reduce(acc);
        }
        out
    }

    /// `matrix_element(key, idx)` up to one fold: a value below 2^34 congruent to it mod P.
    #[inline]
    #[target_feature(enable = "avx512f,avx512dq")]
    fn folded_elements(key: __m512i, mixed: __m512i) -> __m512i {
        let m = |x: u64| _mm512_set1_epi64(x as i64);
        let mut z = _mm512_xor_si512(key, mixed);
        z = _mm512_add_epi64(z, m(0x9E37_79B9_7F4A_7C15));
        z = _mm512_mullo_epi64(
            _mm512_xor_si512(z, _mm512_srli_epi64::<30>(z)),
            m(0xBF58_476D_1CE4_E5B9),
        );
        z = _mm512_mullo_epi64(
            _mm512_xor_si512(z, _mm512_srli_epi64::<27>(z)),
            m(0x94D0_49BB_1331_11EB),
        );
        z = _mm512_xor_si512(z, _mm512_srli_epi64::<31>(z));
        _mm512_add_epi64(_mm512_and_si512(z, m(P)), _mm512_srli_epi64::<31>(z))
    }

    /// Whether a 64×64 tile (row-major little-endian u32) is malformed: a value ≥ P in its
    /// `rows × width` corner, or a non-zero value outside it (the padding).
    #[target_feature(enable = "avx512f,avx512dq")]
    pub fn tile_malformed(tile: &[u8], rows: usize, width: usize) -> bool {
        assert_eq!(tile.len(), 64 * 64 * 4);
        let p = _mm512_set1_epi32(P as i32);
        let mut bad: u16 = 0;
        for row in 0..64 {
            for c in 0..4 {
                let inside: u16 = if row >= rows {
                    0
                } else {
                    lane_mask16(width.saturating_sub(16 * c))
                };
                // SAFETY: 64 bytes at this offset are within the tile (length asserted above)
                let v = unsafe {
                    _mm512_loadu_si512(tile.as_ptr().add(256 * row + 64 * c) as *const __m512i)
                };
                let big = _mm512_cmpge_epu32_mask(v, p);
                let nonzero = _mm512_test_epi32_mask(v, v);
                bad |= (big & inside) | (nonzero & !inside);
            }
        }
        bad != 0
    }

    /// The low `n` bits set (n ≥ 16: all sixteen).
    #[inline]
    fn lane_mask16(n: usize) -> u16 {
        if n >= 16 {
            u16::MAX
        } else {
            (1u16 << n) - 1
        }
    }

    /// For each of the first `rows` rows of a 64×64 tile: `out[row] += Σ_{c < width}
    /// folded(tile[row][c] · r[c])` (`r` has `width` elements).
    #[target_feature(enable = "avx512f,avx512dq,avx512vl")]
    pub fn tile_dots(tile: &[u8], rows: usize, width: usize, r: &[u32], out: &mut [u64]) {
        assert!(tile.len() == 64 * 64 * 4 && r.len() >= width && width <= 64 && out.len() >= rows);
        let chunks = width.div_ceil(8);
        let mut rv = [_mm512_setzero_si512(); 8];
        let mut masks = [0u8; 8];
        for (c, (reg, mask)) in rv.iter_mut().zip(masks.iter_mut()).enumerate().take(chunks) {
            let n = (width - 8 * c).min(8);
            *mask = if n == 8 { u8::MAX } else { (1u8 << n) - 1 };
            // SAFETY: masked lanes beyond `width` are not read
            *reg = _mm512_cvtepu32_epi64(unsafe {
                _mm256_maskz_loadu_epi32(*mask, r.as_ptr().add(8 * c) as *const i32)
            });
        }
        for (row, o) in out.iter_mut().enumerate().take(rows) {
            let mut acc = _mm512_setzero_si512();
            for c in 0..chunks {
                // SAFETY: within the tile; masked lanes are not read
                let v = unsafe {
                    _mm256_maskz_loadu_epi32(
                        masks[c],
                        tile.as_ptr().add(256 * row + 32 * c) as *const i32,
                    )
                };
                acc = _mm512_add_epi64(acc, folded(_mm512_cvtepu32_epi64(v), rv[c]));
            }
            *o += _mm512_reduce_add_epi64(acc) as u64;
        }
    }

    /// `C·r` over one band of tiles (tile row) with 52-bit multiply-accumulates: for each of
    /// the band's first `rows` rows and each `r` in `vs` (length `n`, the whole width of C),
    /// `out[row][r] = Σ_c C[row][c]·r[c] mod P`, and whether any tile is malformed (a value ≥ P
    /// inside C, a non-zero value in the padding), checked in the same loads. Sixteen values
    /// per load; even and odd columns go to the 64-bit lanes' low and high halves' products,
    /// split by the instructions into bits < 52 (per lane at most n/8 ≤ 1024 terms, even and
    /// odd columns together, each < 2^52: < 2^62) and the rest (< 2^10 each: < 2^20 per lane),
    /// recombined as hi·2^52 ≡ hi·2^21 (mod P) once per
    /// row. The sums stay in memory per row across the band's tiles; each tile's slice of the
    /// vectors in registers.
    #[target_feature(enable = "avx512f,avx512dq,avx512ifma")]
    pub fn band_dots_ifma<const R: usize>(
        tiles: &[&[u8]],
        rows: usize,
        n: usize,
        vs: &[&[u32]; R],
        out: &mut [[u32; R]],
    ) -> bool {
        assert!(tiles.len() == n.div_ceil(64) && rows <= 64 && out.len() >= rows);
        assert!(tiles.iter().all(|t| t.len() == 64 * 64 * 4) && vs.iter().all(|v| v.len() == n));
        let p = _mm512_set1_epi32(P as i32);
        let low32 = _mm512_set1_epi64(0xFFFF_FFFF);
        // per row and vector: the low-bits and high-bits sums
        let mut lo = vec![[_mm512_setzero_si512(); R]; rows];
        let mut hi = vec![[_mm512_setzero_si512(); R]; rows];
        let mut bad: u16 = 0;
        for (tc, tile) in tiles.iter().enumerate() {
            let width = 64.min(n - 64 * tc);
            let inside: [u16; 4] =
                std::array::from_fn(|c| lane_mask16(width.saturating_sub(16 * c)));
            // this tile's columns of every vector, even and odd columns apart
            let mut r_even = [[_mm512_setzero_si512(); 4]; R];
            let mut r_odd = [[_mm512_setzero_si512(); 4]; R];
            for (k, v) in vs.iter().enumerate() {
                for c in 0..4 {
                    // chunks wholly past the vector's end are zero (no pointer is formed)
                    let x = if inside[c] == 0 {
                        _mm512_setzero_si512()
                    } else {
                        // SAFETY: 16·c < width, so the chunk starts inside `v`; masked lanes
                        // beyond its end are not read
                        unsafe {
                            _mm512_maskz_loadu_epi32(
                                inside[c],
                                v.as_ptr().add(64 * tc + 16 * c) as *const i32,
                            )
                        }
                    };
                    r_even[k][c] = _mm512_and_si512(x, low32);
                    r_odd[k][c] = _mm512_srli_epi64::<32>(x);
                }
            }
            for row in 0..64 {
                let mut x = [_mm512_setzero_si512(); 4];
                for (c, x) in x.iter_mut().enumerate() {
                    // SAFETY: 64 bytes at this offset are within the tile (length asserted)
                    *x = unsafe {
                        _mm512_loadu_si512(tile.as_ptr().add(256 * row + 64 * c) as *const __m512i)
                    };
                    let here = if row < rows { inside[c] } else { 0 };
                    bad |= (_mm512_cmpge_epu32_mask(*x, p) & here)
                        | (_mm512_test_epi32_mask(*x, *x) & !here);
                }
                if row >= rows {
                    continue;
                }
                for k in 0..R {
                    let (mut l, mut h) = (lo[row][k], hi[row][k]);
                    for c in 0..4 {
                        let (even, odd) =
                            (_mm512_and_si512(x[c], low32), _mm512_srli_epi64::<32>(x[c]));
                        l = _mm512_madd52lo_epu64(l, even, r_even[k][c]);
                        h = _mm512_madd52hi_epu64(h, even, r_even[k][c]);
                        l = _mm512_madd52lo_epu64(l, odd, r_odd[k][c]);
                        h = _mm512_madd52hi_epu64(h, odd, r_odd[k][c]);
                    }
                    lo[row][k] = l;
                    hi[row][k] = h;
                }
            }
        }
        let pp = _mm512_set1_epi64(P as i64);
        for ((o, l), h) in out.iter_mut().zip(&lo).zip(&hi) {
            for k in 0..R {
                let folded =
                    _mm512_add_epi64(_mm512_and_si512(l[k], pp), _mm512_srli_epi64::<31>(l[k]));
                let l = _mm512_reduce_add_epi64(folded) as u64; // < 8 · 2^32
                let h = _mm512_reduce_add_epi64(h[k]) as u64; // < 8 · 2^20 = 2^23
                o[k] = super::reduce(l + super::fold(h << 21));
            }
        }
        bad != 0
    }

    /// `matrix_element(key, idx)` for eight lanes, given `mixed = idx · IDX_MUL`: the folded
    /// value reduced exactly (a second fold, then x − P where that does not wrap).
    #[inline]
    #[target_feature(enable = "avx512f,avx512dq")]
    fn elements(key: __m512i, mixed: __m512i) -> __m512i {
        let p = _mm512_set1_epi64(P as i64);
        let x = folded_elements(key, mixed);
        let x = _mm512_add_epi64(_mm512_and_si512(x, p), _mm512_srli_epi64::<31>(x));
        // x − P wraps above x when x < P: the minimum is x mod P
        _mm512_min_epu64(x, _mm512_sub_epi64(x, p))
    }

    /// Unreduced sums `Σ_j folded(matrix_element(key, base + j) · vs[r][j])`.
    #[target_feature(enable = "avx512f,avx512dq")]
    pub fn row_dots<const R: usize>(key: u64, base: u64, vs: &[&[u32]; R]) -> [u64; R] {
        let n = vs[0].len();
        let full = n / 8 * 8;
        let keyv = _mm512_set1_epi64(key as i64);
        let (mut mixed, step) = index_mixer(base);
        let mut acc = [_mm512_setzero_si512(); R];
        let mut j = 0;
        while j < full {
            let e = elements(keyv, mixed);
            for r in 0..R {
                acc[r] = _mm512_add_epi64(acc[r], folded(e, load8(vs[r], j)));
            }
            mixed = _mm512_add_epi64(mixed, step);
            j += 8;
        }
        let mut out = [0u64; R];
        for r in 0..R {
            out[r] = _mm512_reduce_add_epi64(acc[r]) as u64;
        }
        for k in full..n {
            let e = compute_market_protocol::job::matrix_element(&key, base + k as u64);
            for (o, v) in out.iter_mut().zip(vs) {
                *o += super::folded_product(e, v[k]);
            }
        }
        out
    }
}

/// Rows `first_row..first_row + out.len()` of the generated `? × cols` matrix under `key`,
/// dotted with each of `vs`.
#[inline(always)]
fn rows_block<const R: usize>(
    key: u64,
    cols: usize,
    first_row: usize,
    vs: &[&[u32]; R],
    out: &mut [[u32; R]],
) {
    for (i, o) in out.iter_mut().enumerate() {
        *o = row_dots::<R>(key, ((first_row + i) * cols) as u64, vs);
    }
}

/// The kernels a pass over C runs with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kernels {
    /// Plain Rust.
    Scalar,
    /// AVX2.
    Avx2,
    /// AVX-512F/DQ/VL.
    Avx512,
    /// AVX-512 with the 52-bit multiply-accumulates.
    Ifma,
}

impl Kernels {
    /// The fastest this CPU runs.
    fn best() -> Self {
        match (has_avx512(), has_ifma(), has_avx2()) {
            (true, true, _) => Kernels::Ifma,
            (true, false, _) => Kernels::Avx512,
            (false, _, true) => Kernels::Avx2,
            _ => Kernels::Scalar,
        }
    }

    /// Every kernel set this CPU runs (tests compare them).
    #[cfg(test)]
    fn supported() -> Vec<Self> {
        [
            Kernels::Scalar,
            Kernels::Avx2,
            Kernels::Avx512,
            Kernels::Ifma,
        ]
        .into_iter()
        .filter(|&k| k as u8 <= Kernels::best() as u8)
        .collect()
    }
}

/// The instruction set the kernels here use on this CPU (for reports).
pub fn simd_level() -> &'static str {
    if has_avx512() && has_ifma() {
        "avx512+ifma"
    } else if has_avx512() {
        "avx512"
    } else if has_avx2() {
        "avx2"
    } else {
        "scalar"
    }
}

/// Rows per parallel work item.
const ROWS_PER_TASK: usize = 16;

fn generated_rows_dot_r<const R: usize>(
    key: u64,
    rows: usize,
    cols: usize,
    vs: &[&[u32]],
) -> Vec<Vec<u32>> {
    let vs: &[&[u32]; R] = vs.try_into().expect("R vectors");
    let mut out = vec![[0u32; R]; rows];
    out.par_chunks_mut(ROWS_PER_TASK)
        .enumerate()
        .for_each(|(c, block)| rows_block::<R>(key, cols, c * ROWS_PER_TASK, vs, block));
    (0..R).map(|r| out.iter().map(|o| o[r]).collect()).collect()
}

/// `M · v` (mod P) for every `v` in `vs` (each of length `cols`), where M is the `rows × cols`
/// input matrix generated under `key` ([`matrix_element`]), in one pass over M per
/// [`MAX_ROUNDS`] vectors.
pub fn generated_rows_dot(key: u64, rows: usize, cols: usize, vs: &[&[u32]]) -> Vec<Vec<u32>> {
    assert!(
        vs.iter().all(|v| v.len() == cols),
        "every vector must have length {cols}"
    );
    let mut out = Vec::with_capacity(vs.len());
    for group in vs.chunks(MAX_ROUNDS) {
        out.extend(match group.len() {
            1 => generated_rows_dot_r::<1>(key, rows, cols, group),
            2 => generated_rows_dot_r::<2>(key, rows, cols, group),
            3 => generated_rows_dot_r::<3>(key, rows, cols, group),
            _ => generated_rows_dot_r::<4>(key, rows, cols, group),
        });
    }
    out
}

/// The dimensions `[m, k, n]` of a `MatMulModP` job, after checking that it is one and that
/// every Freivalds vector in `rs` has length n (what every backend's products need).
pub fn checked_dims(job: &JobSpec, rs: &[Vec<u32>]) -> Result<[usize; 3]> {
    ensure!(
        job.kind == JobKind::MatMulModP,
        "Freivalds needs a MatMulModP job"
    );
    let [m, k, n] = job.dims.map(|d| d as usize);
    ensure!(
        rs.iter().all(|r| r.len() == n),
        "Freivalds vectors must have length n = {n}"
    );
    Ok([m, k, n])
}

/// `A·(B·r)` for every `r` in `rs` (each of length n) of a `MatMulModP` job, generating A and B
/// on the fly (or reading the client's, [`super::inputs`]).
pub fn abr(job: &JobSpec, rs: &[Vec<u32>]) -> Result<Vec<Vec<u32>>> {
    let [m, k, n] = checked_dims(job, rs)?;
    if job.input_mode == compute_market_protocol::job::InputMode::ContentHash {
        // the client's matrices, held after they were fetched and checked
        let inputs = super::inputs::matrices(job)?;
        return Ok(rs
            .par_iter()
            .map(|r| inputs.a.mul_vec(&inputs.b.mul_vec(r)))
            .collect());
    }
    let rs: Vec<&[u32]> = rs.iter().map(|r| r.as_slice()).collect();
    let br = generated_rows_dot(job.matrix_key(b'B'), k, n, &rs);
    let br: Vec<&[u32]> = br.iter().map(|v| v.as_slice()).collect();
    Ok(generated_rows_dot(job.matrix_key(b'A'), m, k, &br))
}

/// Folds every partial sum (each tile adds < 2^38 per row: fold every few tiles).
fn a_fold(acc: &mut [Vec<u64>]) {
    for a in acc.iter_mut() {
        for x in a.iter_mut() {
            *x = fold(*x);
        }
    }
}

/// Element (row, col) of a 64×64 tile of little-endian u32.
#[inline(always)]
fn tile_value(tile: &[u8], row: usize, col: usize) -> u32 {
    let o = 4 * (64 * row + col);
    u32::from_le_bytes([tile[o], tile[o + 1], tile[o + 2], tile[o + 3]])
}

/// The first defect of a tile, in words: a non-zero value outside its `rows × width` corner
/// (the padding) or a value ≥ P inside it. `None` for a well-formed tile.
fn tile_defect(idx: usize, tile: &[u8], rows: usize, width: usize) -> Option<anyhow::Error> {
    for row in 0..64 {
        for col in 0..64 {
            let v = tile_value(tile, row, col);
            if row >= rows || col >= width {
                if v != 0 {
                    return Some(anyhow::anyhow!(
                        "tile {idx} has non-zero padding at ({row}, {col})"
                    ));
                }
            } else if v as u64 >= P {
                return Some(anyhow::anyhow!("tile {idx} holds {v}, not a field element"));
            }
        }
    }
    None
}

/// `C·r` for every `r` in `rs`, with C read from the served tiles of a `MatMulModP` job. Fails,
/// naming the tile, when a tile has the wrong size, holds a value ≥ P, or has non-zero padding
/// outside C: such a result is malformed whatever the products say.
pub fn c_times(job: &JobSpec, tiles: &[Vec<u8>], rs: &[Vec<u32>]) -> Result<Vec<Vec<u32>>> {
    pass(job, tiles, rs, Kernels::best(), false)?.products
}

/// What the verifier's one pass over the served tiles of a `MatMulModP` job yields.
#[derive(Debug)]
pub struct TilePass {
    /// The leaf hash of every tile, in order.
    pub leaves: Vec<Digest>,
    /// `C·r` for every `r`, or the first defect of the tiles (as [`c_times`]).
    pub products: Result<Vec<Vec<u32>>>,
}

/// The leaf hash of every served tile and [`c_times`], in one pass over C: a band of tiles at a
/// time, hashed and then multiplied while they are still in cache. Fails only when the job, the tile count or a
/// vector's length is wrong; defects of the tiles are in [`TilePass::products`].
pub fn tile_pass(job: &JobSpec, tiles: &[Vec<u8>], rs: &[Vec<u32>]) -> Result<TilePass> {
    pass(job, tiles, rs, Kernels::best(), true)
}

/// [`tile_pass`] with the given `kernels` (which the CPU must support), the hashing skipped
/// unless `hash`.
fn pass(
    job: &JobSpec,
    tiles: &[Vec<u8>],
    rs: &[Vec<u32>],
    kernels: Kernels,
    hash: bool,
) -> Result<TilePass> {
    checked_dims(job, rs)?;
    ensure!(
        tiles.len() == job.tile_count() as usize,
        "expected {} tiles, got {}",
        job.tile_count(),
        tiles.len()
    );
    let wrong_size = tiles
        .iter()
        .enumerate()
        .find(|(_, tile)| tile.len() != job.tile_len());
    let (grid_rows, grid_cols) = job.tile_grid();
    let (grid_rows, grid_cols) = (grid_rows as usize, grid_cols as usize);
    // one band (tile row) per work item: its tiles are hashed, then multiplied while they are
    // still in cache
    let count = tiles.len() as u32;
    let items: Vec<(Vec<Digest>, Result<Vec<Vec<u32>>>)> = (0..grid_rows)
        .into_par_iter()
        .map(|tr| {
            let bands = tr..tr + 1;
            let span = tr * grid_cols..(tr + 1) * grid_cols;
            let leaves = if hash {
                tiles[span.clone()]
                    .iter()
                    .zip(span)
                    .map(|(t, i)| leaf_hash(i as u32, count, t))
                    .collect()
            } else {
                Vec::new()
            };
            let products = match wrong_size {
                Some(_) => Ok(Vec::new()), // reported once, below
                None => bands
                    .map(|tr| band_products(job, tiles, rs, tr, kernels))
                    .collect::<Result<Vec<_>>>()
                    .map(|parts| {
                        (0..rs.len())
                            .map(|r| {
                                parts
                                    .iter()
                                    .flat_map(|band| band[r].iter().copied())
                                    .collect()
                            })
                            .collect()
                    }),
            };
            (leaves, products)
        })
        .collect();

    let mut leaves = Vec::with_capacity(if hash { tiles.len() } else { 0 });
    let mut out: Result<Vec<Vec<u32>>> = match wrong_size {
        Some((idx, tile)) => Err(anyhow!(
            "tile {idx} has {} bytes, expected {}",
            tile.len(),
            job.tile_len()
        )),
        None => Ok((0..rs.len())
            .map(|_| Vec::with_capacity(job.dims[0] as usize))
            .collect()),
    };
    for (l, products) in items {
        leaves.extend(l);
        if let Ok(o) = &mut out {
            match products {
                Ok(part) => o.iter_mut().zip(part).for_each(|(o, p)| o.extend(p)),
                Err(e) => out = Err(e),
            }
        }
    }
    Ok(TilePass {
        leaves,
        products: out,
    })
}

/// [`avx512::band_dots_ifma`] for the `R` vectors of `group`: whether a tile is malformed, and
/// the products per vector.
#[cfg(target_arch = "x86_64")]
fn band_ifma<const R: usize>(
    band: &[&[u8]],
    rows: usize,
    n: usize,
    group: &[Vec<u32>],
) -> (bool, Vec<Vec<u32>>) {
    let vs: [&[u32]; R] = std::array::from_fn(|k| group[k].as_slice());
    let mut out = vec![[0u32; R]; rows];
    // SAFETY: only called where the CPU has AVX-512F/DQ and IFMA
    let malformed = unsafe { avx512::band_dots_ifma::<R>(band, rows, n, &vs, &mut out) };
    (
        malformed,
        (0..R).map(|k| out.iter().map(|o| o[k]).collect()).collect(),
    )
}

/// `C·r` over the rows of band `tr` (tile row `tr`) for every `r`, or the band's first defect.
/// The tiles must all have the job's tile length.
fn band_products(
    job: &JobSpec,
    tiles: &[Vec<u8>],
    rs: &[Vec<u32>],
    tr: usize,
    kernels: Kernels,
) -> Result<Vec<Vec<u32>>> {
    let (m, n) = (job.dims[0] as usize, job.dims[2] as usize);
    let t = MATMUL_TILE as usize;
    let grid_cols = job.tile_grid().1 as usize;
    let rows_here = t.min(m - tr * t);
    #[cfg(target_arch = "x86_64")]
    if kernels == Kernels::Ifma && !rs.is_empty() {
        let band: Vec<&[u8]> = tiles[tr * grid_cols..(tr + 1) * grid_cols]
            .iter()
            .map(|t| t.as_slice())
            .collect();
        let mut out = Vec::with_capacity(rs.len());
        for group in rs.chunks(MAX_ROUNDS) {
            let (malformed, part) = match group.len() {
                1 => band_ifma::<1>(&band, rows_here, n, group),
                2 => band_ifma::<2>(&band, rows_here, n, group),
                3 => band_ifma::<3>(&band, rows_here, n, group),
                _ => band_ifma::<4>(&band, rows_here, n, group),
            };
            if malformed {
                return Err((0..grid_cols)
                    .find_map(|tc| {
                        tile_defect(
                            tr * grid_cols + tc,
                            &tiles[tr * grid_cols + tc],
                            rows_here,
                            t.min(n - tc * t),
                        )
                    })
                    .unwrap_or_else(|| anyhow!("a tile of row {tr} is malformed")));
            }
            out.extend(part);
        }
        return Ok(out);
    }
    let mut acc = vec![vec![0u64; rows_here]; rs.len()];
    for tc in 0..grid_cols {
        let idx = tr * grid_cols + tc;
        let tile = &tiles[idx];
        let width = t.min(n - tc * t);
        #[cfg(target_arch = "x86_64")]
        if kernels == Kernels::Avx2 {
            // SAFETY: the CPU supports AVX2 (checked)
            if unsafe { avx2::tile_malformed(tile, rows_here, width) } {
                return Err(tile_defect(idx, tile, rows_here, width)
                    .unwrap_or_else(|| anyhow!("tile {idx} is malformed")));
            }
            for (a, r) in acc.iter_mut().zip(rs) {
                // SAFETY: as above
                unsafe { avx2::tile_dots(tile, rows_here, width, &r[tc * t..tc * t + width], a) };
            }
            if tc % 8 == 7 {
                a_fold(&mut acc);
            }
            continue;
        }
        #[cfg(target_arch = "x86_64")]
        if kernels != Kernels::Scalar {
            // SAFETY: the CPU supports AVX-512F/DQ/VL (checked)
            if unsafe { avx512::tile_malformed(tile, rows_here, width) } {
                return Err(tile_defect(idx, tile, rows_here, width)
                    .unwrap_or_else(|| anyhow!("tile {idx} is malformed")));
            }
            for (a, r) in acc.iter_mut().zip(rs) {
                // SAFETY: as above
                unsafe { avx512::tile_dots(tile, rows_here, width, &r[tc * t..tc * t + width], a) };
            }
            if tc % 8 == 7 {
                a_fold(&mut acc);
            }
            continue;
        }
        if let Some(defect) = tile_defect(idx, tile, rows_here, width) {
            return Err(defect);
        }
        for row in 0..rows_here {
            let vals: Vec<u32> = (0..width).map(|col| tile_value(tile, row, col)).collect();
            for (a, r) in acc.iter_mut().zip(rs) {
                // ≤ 64 folded products (< 2^38) on a folded value: no overflow
                a[row] = fold(a[row] + dot_folded(&vals, &r[tc * t..tc * t + width]));
            }
        }
    }
    Ok(acc
        .into_iter()
        .map(|a| a.into_iter().map(reduce).collect())
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compute::Matrix;

    #[test]
    fn streaming_products_equal_the_materialised_ones() {
        for (m, k, n) in [
            (1, 1, 1),
            (7, 13, 9),
            (64, 64, 64),
            (65, 130, 67),
            (128, 3, 200),
        ] {
            let job = JobSpec::matmul(m, k, n, [m as u8; 32]);
            let (a, b) = (Matrix::input_a(&job), Matrix::input_b(&job));
            let rs: Vec<Vec<u32>> = (0..5u64)
                .map(|s| {
                    (0..n as u64)
                        .map(|i| matrix_element(&(s + 99), i))
                        .collect()
                })
                .collect();
            let want: Vec<Vec<u32>> = rs.iter().map(|r| a.mul_vec(&b.mul_vec(r))).collect();
            assert_eq!(abr(&job, &rs).unwrap(), want, "{m}×{k}×{n}");
        }
    }

    #[test]
    fn worst_case_values_do_not_overflow() {
        // every vector element P − 1, the longest row a job may have: the largest sums
        let v = vec![(P - 1) as u32; compute_market_protocol::job::MAX_MATRIX_DIM as usize];
        let vs: Vec<&[u32]> = vec![&v, &v];
        let got = row_dots::<2>(0, 0, &[vs[0], vs[1]]);
        let want = (0..v.len() as u64).fold(0u64, |s, j| {
            (s + matrix_element(&0, j) as u64 * (P - 1)) % P
        }) as u32;
        assert_eq!(got, [want, want]);
    }

    #[test]
    fn simd_and_scalar_paths_agree() {
        if !has_avx2() {
            eprintln!("no AVX2 on this CPU: only the scalar path runs here");
            return;
        }
        let mut worst = vec![(P - 1) as u32; 1003];
        worst[5] = 0;
        let other: Vec<u32> = (0..1003u64).map(|i| matrix_element(&3, i)).collect();
        for len in [0, 1, 7, 8, 9, 15, 16, 17, 64, 1003] {
            let vs = [&worst[..len], &other[..len]];
            let scalar: Vec<u64> = vs
                .iter()
                .map(|v| {
                    v.iter()
                        .enumerate()
                        .map(|(j, &x)| folded_product(matrix_element(&77, 12_345 + j as u64), x))
                        .sum()
                })
                .collect();
            // keys and bases whose 64-bit products carry across the halves
            for (key, base) in [(77u64, 12_345u64), (u64::MAX, u64::MAX - 2_000)] {
                let want: Vec<u64> = vs
                    .iter()
                    .map(|v| {
                        v.iter()
                            .enumerate()
                            .map(|(j, &x)| folded_product(matrix_element(&key, base + j as u64), x))
                            .sum()
                    })
                    .collect();
                // SAFETY: AVX2 checked above
                let avx2 = unsafe { avx2::row_dots::<2>(key, base, &vs) };
                assert_eq!(avx2.to_vec(), want, "avx2 row_dots, len {len}, key {key}");
            }
            if !has_avx512() {
                eprintln!("no AVX-512 on this CPU: its kernels are not compared here");
                continue;
            }
            // SAFETY: AVX-512 checked above
            let simd = unsafe { avx512::row_dots::<2>(77, 12_345, &vs) };
            assert_eq!(simd.to_vec(), scalar, "row_dots, len {len}");
            if has_ifma() {
                // SAFETY: IFMA checked
                let ifma = unsafe { avx512::row_dots_ifma::<2>(77, 12_345, &vs) };
                assert_eq!(
                    ifma.to_vec(),
                    scalar.iter().map(|&x| reduce(x)).collect::<Vec<_>>(),
                    "row_dots_ifma, len {len}"
                );
            }
        }
    }

    #[test]
    fn c_times_simd_and_scalar_paths_agree() {
        let kernels = Kernels::supported();
        if kernels.len() < 3 {
            eprintln!("this CPU runs only {kernels:?}: the other kernels are not compared here");
        }
        use crate::compute::{cpu::CpuBackend, Backend};
        for (m, k, n) in [
            (1, 1, 1),
            (64, 64, 64),
            (130, 9, 70),
            (65, 3, 200),
            (70, 2, 1070),
        ] {
            let job = JobSpec::matmul(m, k, n, [m as u8; 32]);
            let tiles = CpuBackend.run(&job).unwrap();
            for rounds in [1u64, 2, 5] {
                let rs: Vec<Vec<u32>> = (0..rounds)
                    .map(|s| (0..n as u64).map(|i| matrix_element(&s, i)).collect())
                    .collect();
                let want = pass(&job, &tiles, &rs, Kernels::Scalar, false)
                    .unwrap()
                    .products
                    .unwrap();
                assert_eq!(want, abr(&job, &rs).unwrap(), "{m}×{k}×{n}: C = A·B");
                // worst-case values: every element P − 1 in C and in the vectors
                let full: Vec<Vec<u8>> = tiles
                    .iter()
                    .map(|t| {
                        t.chunks(4)
                            .flat_map(|v| {
                                if v == [0; 4] {
                                    [0; 4]
                                } else {
                                    ((P - 1) as u32).to_le_bytes()
                                }
                            })
                            .collect()
                    })
                    .collect();
                let worst: Vec<Vec<u32>> =
                    rs.iter().map(|r| vec![(P - 1) as u32; r.len()]).collect();
                for &kern in &kernels {
                    assert_eq!(
                        pass(&job, &tiles, &rs, kern, false)
                            .unwrap()
                            .products
                            .unwrap(),
                        want,
                        "{kern:?} {m}×{k}×{n}, {rounds} rounds"
                    );
                    assert_eq!(
                        pass(&job, &full, &worst, kern, false)
                            .unwrap()
                            .products
                            .unwrap(),
                        pass(&job, &full, &worst, Kernels::Scalar, false)
                            .unwrap()
                            .products
                            .unwrap(),
                        "{kern:?} {m}×{k}×{n}, worst case"
                    );
                }
            }
            // all name the same defect: the padding corner, a value ≥ P, the first of two
            let rs: Vec<Vec<u32>> = vec![(0..n as u64).map(|i| matrix_element(&9, i)).collect(); 2];
            let last = tiles.len() - 1;
            let grid_cols = job.tile_grid().1 as usize;
            // values just at and above P (the unsigned compares of the SIMD paths) and the top
            let mut defects = vec![
                (last, 4095, u32::MAX),
                (0, 0, P as u32),
                (0, 0, 1 << 31),
                (0, 0, u32::MAX),
                (last, 0, P as u32 + 1),
            ];
            if (1..=6).contains(&(n % 64)) {
                // non-zero padding within a group of eight columns: columns 6 and 7 (and the
                // second row's 7) of the last tile column are padding here
                defects.extend([(grid_cols - 1, 6, 1), (grid_cols - 1, 64 + 7, 1)]);
            }
            for (tile, at, value) in defects {
                let mut bad = tiles.clone();
                bad[tile][4 * at..4 * at + 4].copy_from_slice(&value.to_le_bytes());
                bad[last][4 * 4095..].copy_from_slice(&u32::MAX.to_le_bytes()); // a second defect, later
                let want = pass(&job, &bad, &rs, Kernels::Scalar, false)
                    .unwrap()
                    .products
                    .unwrap_err()
                    .to_string();
                for &kern in &kernels {
                    let got = pass(&job, &bad, &rs, kern, true)
                        .unwrap()
                        .products
                        .unwrap_err()
                        .to_string();
                    assert_eq!(got, want, "{kern:?} {m}×{k}×{n}");
                }
            }
        }
    }

    #[test]
    fn widest_band_and_no_vectors() {
        // one band 8192 columns wide (MAX_MATRIX_DIM), every value P − 1: the largest sums
        let n = compute_market_protocol::job::MAX_MATRIX_DIM;
        let job = JobSpec::matmul(64, 1, n, [1; 32]);
        let full: Vec<Vec<u8>> = (0..job.tile_count())
            .map(|_| ((P - 1) as u32).to_le_bytes().repeat(64 * 64))
            .collect();
        let rs: Vec<Vec<u32>> = vec![
            vec![(P - 1) as u32; n as usize],
            (0..n as u64).map(|i| matrix_element(&4, i)).collect(),
        ];
        let want = pass(&job, &full, &rs, Kernels::Scalar, false)
            .unwrap()
            .products
            .unwrap();
        // Σ (P−1)² over n columns ≡ n (mod P)
        assert_eq!(want[0], vec![n; 64]);
        for kern in Kernels::supported() {
            assert_eq!(
                pass(&job, &full, &rs, kern, true)
                    .unwrap()
                    .products
                    .unwrap(),
                want,
                "{kern:?}"
            );
            // no vectors: nothing to multiply, defects still found
            assert_eq!(
                pass(&job, &full, &[], kern, false)
                    .unwrap()
                    .products
                    .unwrap(),
                Vec::<Vec<u32>>::new()
            );
            let mut bad = full.clone();
            bad[3][..4].copy_from_slice(&u32::MAX.to_le_bytes());
            let err = pass(&job, &bad, &[], kern, false)
                .unwrap()
                .products
                .unwrap_err()
                .to_string();
            assert!(err.contains("tile 3 holds"), "{kern:?}: {err}");
        }
    }

    #[test]
    fn one_pass_gives_the_leaves_and_the_products() {
        use crate::compute::{cpu::CpuBackend, Backend};
        // tile grids of 1, 2, 3, 4 and 17 columns; one tile alone (its leaf is the root)
        for (m, k, n) in [
            (64, 5, 64),
            (200, 7, 70),
            (130, 3, 192),
            (65, 9, 200),
            (70, 2, 1070),
        ] {
            let job = JobSpec::matmul(m, k, n, [n as u8; 32]);
            let tiles = CpuBackend.run(&job).unwrap();
            let rs: Vec<Vec<u32>> = (0..2u64)
                .map(|s| (0..n as u64).map(|i| matrix_element(&(s + 5), i)).collect())
                .collect();
            let pass = tile_pass(&job, &tiles, &rs).unwrap();
            let leaves: Vec<Digest> = tiles
                .iter()
                .enumerate()
                .map(|(i, t)| leaf_hash(i as u32, tiles.len() as u32, t))
                .collect();
            assert_eq!(pass.leaves, leaves, "{m}×{k}×{n}");
            assert_eq!(
                pass.products.unwrap(),
                abr(&job, &rs).unwrap(),
                "{m}×{k}×{n}: C = A·B, so C·r = A·(B·r)"
            );
            // a tile of the wrong size: the leaves still come, the products name the tile
            let mut short = tiles.clone();
            short[1 % tiles.len()].pop();
            let pass = tile_pass(&job, &short, &rs).unwrap();
            assert_eq!(pass.leaves.len(), tiles.len());
            assert_eq!(
                pass.leaves[1 % tiles.len()],
                leaf_hash(
                    (1 % tiles.len()) as u32,
                    tiles.len() as u32,
                    &short[1 % tiles.len()]
                )
            );
            let err = pass.products.unwrap_err().to_string();
            assert!(
                err.contains(&format!("tile {} has 16383 bytes", 1 % tiles.len())),
                "{err}"
            );
        }
    }
}

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

use anyhow::{bail, ensure, Result};
use compute_market_protocol::{
    job::{matrix_element, JobKind, JobSpec, MATMUL_TILE},
    P,
};
use rayon::prelude::*;

use super::matrix::reduce;

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
        let mut j = 0;
        while j < full {
            let e = folded_elements(keyv, mixed);
            for r in 0..R {
                let v = load8(vs[r], j);
                lo[r] = _mm512_madd52lo_epu64(lo[r], e, v);
                hi[r] = _mm512_madd52hi_epu64(hi[r], e, v);
            }
            mixed = _mm512_add_epi64(mixed, step);
            j += 8;
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

/// The instruction set the kernels here use on this CPU (for reports).
pub fn simd_level() -> &'static str {
    if has_avx512() && has_ifma() {
        "avx512+ifma"
    } else if has_avx512() {
        "avx512"
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

/// `A·(B·r)` for every `r` in `rs` (each of length n) of a `MatMulModP` job, generating A and B
/// on the fly.
pub fn abr(job: &JobSpec, rs: &[Vec<u32>]) -> Result<Vec<Vec<u32>>> {
    ensure!(
        job.kind == JobKind::MatMulModP,
        "Freivalds needs a MatMulModP job"
    );
    let [m, k, n] = job.dims.map(|d| d as usize);
    ensure!(
        rs.iter().all(|r| r.len() == n),
        "Freivalds vectors must have length n = {n}"
    );
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
    c_times_with(job, tiles, rs, has_avx512())
}

/// [`c_times`] on the AVX-512 path (`simd`, which the CPU must support) or the scalar one.
fn c_times_with(
    job: &JobSpec,
    tiles: &[Vec<u8>],
    rs: &[Vec<u32>],
    simd: bool,
) -> Result<Vec<Vec<u32>>> {
    ensure!(job.kind == JobKind::MatMulModP, "not a MatMulModP job");
    ensure!(
        tiles.len() == job.tile_count() as usize,
        "expected {} tiles, got {}",
        job.tile_count(),
        tiles.len()
    );
    if let Some((idx, tile)) = tiles
        .iter()
        .enumerate()
        .find(|(_, tile)| tile.len() != job.tile_len())
    {
        bail!(
            "tile {idx} has {} bytes, expected {}",
            tile.len(),
            job.tile_len()
        );
    }
    let (m, n) = (job.dims[0] as usize, job.dims[2] as usize);
    ensure!(
        rs.iter().all(|r| r.len() == n),
        "Freivalds vectors must have length n = {n}"
    );
    let t = MATMUL_TILE as usize;
    let (grid_rows, grid_cols) = job.tile_grid();
    let (grid_rows, grid_cols) = (grid_rows as usize, grid_cols as usize);
    // per band of 64 rows: the partial sums of each row for each vector, or the first defect
    let bands: Vec<Result<Vec<Vec<u32>>>> = (0..grid_rows)
        .into_par_iter()
        .map(|tr| {
            let rows_here = t.min(m - tr * t);
            let mut acc = vec![vec![0u64; rows_here]; rs.len()];
            for tc in 0..grid_cols {
                let idx = tr * grid_cols + tc;
                let tile = &tiles[idx];
                let width = t.min(n - tc * t);
                #[cfg(target_arch = "x86_64")]
                if simd {
                    // SAFETY: the CPU supports AVX-512F/DQ/VL (checked)
                    if unsafe { avx512::tile_malformed(tile, rows_here, width) } {
                        return Err(tile_defect(idx, tile, rows_here, width)
                            .unwrap_or_else(|| anyhow::anyhow!("tile {idx} is malformed")));
                    }
                    for (a, r) in acc.iter_mut().zip(rs) {
                        // SAFETY: as above
                        unsafe {
                            avx512::tile_dots(tile, rows_here, width, &r[tc * t..tc * t + width], a)
                        };
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
        })
        .collect();

    let mut out = vec![Vec::with_capacity(m); rs.len()];
    for band in bands {
        for (o, part) in out.iter_mut().zip(band?) {
            o.extend(part);
        }
    }
    Ok(out)
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
        if !has_avx512() {
            eprintln!("no AVX-512 on this CPU: only the scalar path runs here");
            return;
        }
        let mut worst = vec![(P - 1) as u32; 1003];
        worst[5] = 0;
        let other: Vec<u32> = (0..1003u64).map(|i| matrix_element(&3, i)).collect();
        for len in [0, 1, 7, 8, 9, 64, 1003] {
            let vs = [&worst[..len], &other[..len]];
            // SAFETY: AVX-512 checked above
            let simd = unsafe { avx512::row_dots::<2>(77, 12_345, &vs) };
            let scalar: Vec<u64> = vs
                .iter()
                .map(|v| {
                    v.iter()
                        .enumerate()
                        .map(|(j, &x)| folded_product(matrix_element(&77, 12_345 + j as u64), x))
                        .sum()
                })
                .collect();
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
        if !has_avx512() {
            eprintln!("no AVX-512 on this CPU: only the scalar path runs here");
            return;
        }
        use crate::compute::{cpu::CpuBackend, Backend};
        for (m, k, n) in [(1, 1, 1), (64, 64, 64), (130, 9, 70), (65, 3, 200)] {
            let job = JobSpec::matmul(m, k, n, [m as u8; 32]);
            let tiles = CpuBackend.run(&job).unwrap();
            let rs: Vec<Vec<u32>> = (0..3u64)
                .map(|s| (0..n as u64).map(|i| matrix_element(&s, i)).collect())
                .collect();
            assert_eq!(
                c_times_with(&job, &tiles, &rs, true).unwrap(),
                c_times_with(&job, &tiles, &rs, false).unwrap(),
                "{m}×{k}×{n}"
            );
            // both name the same defect
            let mut bad = tiles.clone();
            let last = bad.len() - 1;
            bad[last][4 * 4095..].copy_from_slice(&u32::MAX.to_le_bytes()); // padding or not a field element
            let (a, b) = (
                c_times_with(&job, &bad, &rs, true).unwrap_err(),
                c_times_with(&job, &bad, &rs, false).unwrap_err(),
            );
            assert_eq!(format!("{a}"), format!("{b}"));
        }
    }
}

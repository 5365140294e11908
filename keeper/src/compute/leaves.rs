//! Merkle leaf hashes, sixteen at a time: SHA-256 with one message per 32-bit lane of AVX-512.
//!
//! A `MatMulModP` verifier hashes every tile of C (see [`crate::verify::check_matmul`]), and one
//! SHA-256 stream, even with the SHA extensions, was the largest part of that check. The leaves
//! of one job all have the same length, so sixteen of them go through the compression function
//! side by side: the message words of sixteen blocks are loaded, byte-swapped and transposed so
//! that lane `l` of word `t` belongs to leaf `l`, and every round is sixteen rounds. The result is
//! plain SHA-256 of `0x00 ‖ index LE ‖ tile`, bit for bit
//! [`compute_market_protocol::merkle::leaf_hash`]: the tests hold it to that function over
//! lengths around every padding boundary. Elsewhere (no AVX-512, fewer than sixteen leaves,
//! leaves of different lengths) the one-stream hash runs.

use compute_market_protocol::{hash::Digest, merkle::leaf_hash};
use rayon::prelude::*;

/// Messages hashed side by side.
pub const LANES: usize = 16;

/// Whether the sixteen-lane kernel can run here (AVX-512F and BW).
pub fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Leaf hashes of `tiles`, tile `j` numbered `first + j`: each equal to `leaf_hash(first + j,
/// tiles[j])`. Runs of sixteen equal-length tiles take the AVX-512 kernel where it exists; the
/// rest (and every tile elsewhere) take the one-stream hash.
pub fn leaf_hashes<T: AsRef<[u8]>>(first: u32, tiles: &[T]) -> Vec<Digest> {
    leaf_hashes_with(first, tiles, true)
}

/// [`leaf_hashes`] of all `tiles` (numbered from 0), groups of sixteen spread over the rayon pool.
pub fn par_leaf_hashes<T: AsRef<[u8]> + Sync>(tiles: &[T]) -> Vec<Digest> {
    let groups: Vec<Vec<Digest>> = tiles
        .par_chunks(LANES)
        .enumerate()
        .map(|(g, c)| leaf_hashes_with((g * LANES) as u32, c, true))
        .collect();
    groups.concat()
}

/// [`leaf_hashes`], with `simd = false` forcing the one-stream hash (tests compare both paths;
/// `true` still takes the kernel only where the CPU has it).
pub fn leaf_hashes_with<T: AsRef<[u8]>>(first: u32, tiles: &[T], simd: bool) -> Vec<Digest> {
    let simd = simd && available();
    #[cfg(not(target_arch = "x86_64"))]
    let _ = simd;
    let mut out = Vec::with_capacity(tiles.len());
    let mut chunks = tiles.chunks_exact(LANES);
    for (c, chunk) in chunks.by_ref().enumerate() {
        let base = first.wrapping_add((c * LANES) as u32);
        #[cfg(target_arch = "x86_64")]
        if simd
            && chunk
                .iter()
                .all(|t| t.as_ref().len() == chunk[0].as_ref().len())
        {
            let bodies: [&[u8]; LANES] = std::array::from_fn(|l| chunk[l].as_ref());
            // SAFETY: `simd` is only true where `available()` found AVX-512F and BW
            out.extend(unsafe { x16::leaf_hashes(base, &bodies) });
            continue;
        }
        out.extend(
            chunk
                .iter()
                .enumerate()
                .map(|(l, t)| leaf_hash(base.wrapping_add(l as u32), t.as_ref())),
        );
    }
    let done = out.len();
    out.extend(
        chunks
            .remainder()
            .iter()
            .enumerate()
            .map(|(l, t)| leaf_hash(first.wrapping_add((done + l) as u32), t.as_ref())),
    );
    out
}

#[cfg(target_arch = "x86_64")]
mod x16 {
    use std::arch::x86_64::*;

    use super::{Digest, LANES};

    /// Bytes before the tile: the leaf domain byte and the index.
    const PREFIX: usize = 5;

    const IV: [u32; 8] = [
        0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab,
        0x5be0cd19,
    ];

    const K: [u32; 64] = [
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
        0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
        0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
        0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
        0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
        0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
        0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
        0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
        0xc67178f2,
    ];

    /// `vpshufb` pattern that turns each little-endian 32-bit word big-endian.
    const BSWAP: [u8; 64] = {
        let mut m = [0u8; 64];
        let mut i = 0;
        while i < 64 {
            m[i] = ((i % 16) / 4 * 4 + 3 - i % 4) as u8;
            i += 1;
        }
        m
    };

    /// Byte `p` of the padded message `prefix ‖ body ‖ 0x80 ‖ 0… ‖ bit length (BE)` of
    /// `blocks` 64-byte blocks.
    fn message_byte(prefix: &[u8; PREFIX], body: &[u8], blocks: usize, p: usize) -> u8 {
        let len = PREFIX + body.len();
        let end = blocks * 64;
        if p < PREFIX {
            prefix[p]
        } else if p < len {
            body[p - PREFIX]
        } else if p == len {
            0x80
        } else if p >= end - 8 {
            ((len as u64 * 8) >> (8 * (end - 1 - p))) as u8
        } else {
            0
        }
    }

    /// Transposes sixteen rows of sixteen words: `out[t]` lane `l` = `rows[l]` word `t`.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn transpose(r: &[__m512i; 16]) -> [__m512i; 16] {
        // pairs of rows, interleaved 32 bits at a time within each 128-bit chunk
        let t: [__m512i; 16] = std::array::from_fn(|i| {
            let (a, b) = (r[i & !1], r[i | 1]);
            if i & 1 == 0 {
                _mm512_unpacklo_epi32(a, b)
            } else {
                _mm512_unpackhi_epi32(a, b)
            }
        });
        // u[4j + s] chunk c = word 4c + s of rows 4j..4j + 3
        let u: [__m512i; 16] = std::array::from_fn(|i| {
            let (j, s) = (i / 4, i % 4);
            let (a, b) = (t[4 * j + (s >> 1)], t[4 * j + 2 + (s >> 1)]);
            if s & 1 == 0 {
                _mm512_unpacklo_epi64(a, b)
            } else {
                _mm512_unpackhi_epi64(a, b)
            }
        });
        // a 4×4 transpose of 128-bit chunks among u[s], u[4 + s], u[8 + s], u[12 + s]
        let mut w = [_mm512_setzero_si512(); 16];
        for s in 0..4 {
            let v0 = _mm512_shuffle_i32x4::<0x44>(u[s], u[4 + s]);
            let v1 = _mm512_shuffle_i32x4::<0xEE>(u[s], u[4 + s]);
            let v2 = _mm512_shuffle_i32x4::<0x44>(u[8 + s], u[12 + s]);
            let v3 = _mm512_shuffle_i32x4::<0xEE>(u[8 + s], u[12 + s]);
            w[s] = _mm512_shuffle_i32x4::<0x88>(v0, v2);
            w[4 + s] = _mm512_shuffle_i32x4::<0xDD>(v0, v2);
            w[8 + s] = _mm512_shuffle_i32x4::<0x88>(v1, v3);
            w[12 + s] = _mm512_shuffle_i32x4::<0xDD>(v1, v3);
        }
        w
    }

    /// Lane-wise 32-bit addition.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn add(a: __m512i, b: __m512i) -> __m512i {
        _mm512_add_epi32(a, b)
    }

    /// Σ0 of the compression rounds.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn sigma0(a: __m512i) -> __m512i {
        _mm512_ternarylogic_epi32::<0x96>(
            _mm512_ror_epi32::<2>(a),
            _mm512_ror_epi32::<13>(a),
            _mm512_ror_epi32::<22>(a),
        )
    }

    /// Σ1 of the compression rounds.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn sigma1(e: __m512i) -> __m512i {
        _mm512_ternarylogic_epi32::<0x96>(
            _mm512_ror_epi32::<6>(e),
            _mm512_ror_epi32::<11>(e),
            _mm512_ror_epi32::<25>(e),
        )
    }

    /// The message schedule: W[t] from W[t−16], W[t−15], W[t−7] and W[t−2].
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn schedule(w16: __m512i, w15: __m512i, w7: __m512i, w2: __m512i) -> __m512i {
        let s0 = _mm512_ternarylogic_epi32::<0x96>(
            _mm512_ror_epi32::<7>(w15),
            _mm512_ror_epi32::<18>(w15),
            _mm512_srli_epi32::<3>(w15),
        );
        let s1 = _mm512_ternarylogic_epi32::<0x96>(
            _mm512_ror_epi32::<17>(w2),
            _mm512_ror_epi32::<19>(w2),
            _mm512_srli_epi32::<10>(w2),
        );
        add(add(w16, s0), add(w7, s1))
    }

    /// One compression of sixteen 64-byte blocks into the sixteen states.
    ///
    /// # Safety
    /// Each pointer must address 64 readable bytes.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw")]
    unsafe fn compress(state: &mut [__m512i; 8], blocks: &[*const u8; LANES]) {
        let swap = unsafe { _mm512_loadu_si512(BSWAP.as_ptr() as *const _) };
        let rows: [__m512i; 16] = std::array::from_fn(|l| {
            _mm512_shuffle_epi8(unsafe { _mm512_loadu_si512(blocks[l] as *const _) }, swap)
        });
        let mut w = transpose(&rows);
        let [mut a, mut b, mut c, mut d, mut e, mut f, mut g, mut h] = *state;
        // one round; the macro keeps every index a constant so W stays in registers
        macro_rules! round {
            ($i:expr, $k:expr, $sched:expr) => {{
                const I: usize = $i;
                if $sched {
                    w[I] = schedule(w[I], w[(I + 1) % 16], w[(I + 9) % 16], w[(I + 14) % 16]);
                }
                let t1 = add(
                    add(h, sigma1(e)),
                    add(
                        _mm512_ternarylogic_epi32::<0xCA>(e, f, g),
                        add(w[I], _mm512_set1_epi32($k[I] as i32)),
                    ),
                );
                let t2 = add(sigma0(a), _mm512_ternarylogic_epi32::<0xE8>(a, b, c));
                h = g;
                g = f;
                f = e;
                e = add(d, t1);
                d = c;
                c = b;
                b = a;
                a = add(t1, t2);
            }};
        }
        macro_rules! sixteen {
            ($k:expr, $sched:expr) => {
                round!(0, $k, $sched);
                round!(1, $k, $sched);
                round!(2, $k, $sched);
                round!(3, $k, $sched);
                round!(4, $k, $sched);
                round!(5, $k, $sched);
                round!(6, $k, $sched);
                round!(7, $k, $sched);
                round!(8, $k, $sched);
                round!(9, $k, $sched);
                round!(10, $k, $sched);
                round!(11, $k, $sched);
                round!(12, $k, $sched);
                round!(13, $k, $sched);
                round!(14, $k, $sched);
                round!(15, $k, $sched);
            };
        }
        sixteen!(K[..16], false);
        // the other 48 rounds, sixteen at a time in a loop: fully unrolled they overflow the op cache
        for k in K[16..].chunks_exact(16) {
            sixteen!(k, true);
        }
        for (s, v) in state.iter_mut().zip([a, b, c, d, e, f, g, h]) {
            *s = add(*s, v);
        }
    }

    /// Leaf hashes of sixteen tiles of one length, numbered `first..first + 16`.
    ///
    /// # Safety
    /// AVX-512F and AVX-512BW must be available.
    #[target_feature(enable = "avx512f,avx512bw")]
    pub unsafe fn leaf_hashes(first: u32, bodies: &[&[u8]; LANES]) -> [Digest; LANES] {
        let body = bodies[0].len();
        debug_assert!(
            bodies.iter().all(|b| b.len() == body),
            "sixteen tiles of one length"
        );
        let prefixes: [[u8; PREFIX]; LANES] = std::array::from_fn(|l| {
            let i = first.wrapping_add(l as u32).to_le_bytes();
            [0, i[0], i[1], i[2], i[3]]
        });
        let blocks = (PREFIX + body + 9).div_ceil(64);
        let mut state: [__m512i; 8] = std::array::from_fn(|i| _mm512_set1_epi32(IV[i] as i32));
        let mut scratch = [[0u8; 64]; LANES];
        for blk in 0..blocks {
            let start = blk * 64;
            // blocks wholly inside the tile are read where they lie; the first and the padded
            // last ones are assembled
            let inside = start >= PREFIX && start + 64 <= PREFIX + body;
            let ptrs: [*const u8; LANES] = if inside {
                std::array::from_fn(|l| bodies[l][start - PREFIX..start - PREFIX + 64].as_ptr())
            } else {
                for (l, s) in scratch.iter_mut().enumerate() {
                    for (k, byte) in s.iter_mut().enumerate() {
                        *byte = message_byte(&prefixes[l], bodies[l], blocks, start + k);
                    }
                }
                std::array::from_fn(|l| scratch[l].as_ptr())
            };
            // SAFETY: every pointer addresses 64 bytes of a tile or of `scratch`
            unsafe { compress(&mut state, &ptrs) };
        }
        let mut words = [[0u32; LANES]; 8];
        for (w, s) in words.iter_mut().zip(&state) {
            // SAFETY: 16 u32 = 64 bytes
            unsafe { _mm512_storeu_si512(w.as_mut_ptr() as *mut _, *s) };
        }
        std::array::from_fn(|l| {
            let mut d = [0u8; 32];
            for (i, w) in words.iter().enumerate() {
                d[4 * i..4 * i + 4].copy_from_slice(&w[l].to_be_bytes());
            }
            d
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Tiles of `len` bytes with contents that differ per tile and per byte.
    fn tiles(count: usize, len: usize) -> Vec<Vec<u8>> {
        (0..count)
            .map(|i| {
                (0..len)
                    .map(|j| (i * 31 + j * 7 + (j >> 8)) as u8)
                    .collect()
            })
            .collect()
    }

    #[test]
    fn sixteen_lanes_equal_the_protocol_leaf_hash() {
        if !available() {
            eprintln!("no AVX-512 on this CPU: only the one-stream path runs here");
        }
        // message lengths (len + 5) around every padding case: the 0x80 byte and the length in
        // the last block, in a block of their own, or split
        for len in [
            0, 1, 50, 51, 52, 54, 55, 58, 59, 60, 64, 100, 114, 115, 118, 119, 123, 128, 1000,
            16384,
        ] {
            let ts = tiles(37, len);
            let want: Vec<Digest> = ts
                .iter()
                .enumerate()
                .map(|(i, t)| leaf_hash(9 + i as u32, t))
                .collect();
            assert_eq!(
                leaf_hashes_with(9, &ts, available()),
                want,
                "tile length {len}"
            );
            assert_eq!(
                leaf_hashes_with(9, &ts, false),
                want,
                "tile length {len}, one stream"
            );
        }
    }

    #[test]
    fn mixed_lengths_and_the_parallel_form_agree() {
        let mut ts = tiles(70, 256);
        ts[20].truncate(100); // a group of sixteen with one odd tile
        ts[69].clear();
        let want: Vec<Digest> = ts
            .iter()
            .enumerate()
            .map(|(i, t)| leaf_hash(i as u32, t))
            .collect();
        assert_eq!(leaf_hashes(0, &ts), want);
        assert_eq!(par_leaf_hashes(&ts), want);
        // indices wrap like the protocol's u32
        let two = tiles(16, 64);
        let want: Vec<Digest> = (0..16u32)
            .map(|i| leaf_hash((u32::MAX - 3).wrapping_add(i), &two[i as usize]))
            .collect();
        assert_eq!(leaf_hashes(u32::MAX - 3, &two), want);
    }
}

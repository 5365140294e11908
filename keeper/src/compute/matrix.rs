//! Dense matrices over GF(2^31 − 1), generated inputs, and conversion to and from 64×64 tiles.

use anyhow::{bail, ensure, Result};
use compute_market_protocol::{
    job::{matrix_element, JobKind, JobSpec, MATMUL_TILE},
    P,
};
use rayon::prelude::*;

/// A row-major `rows × cols` matrix of field elements.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Matrix {
    /// Rows.
    pub rows: usize,
    /// Columns.
    pub cols: usize,
    /// Elements, row-major, each in `[0, P)`.
    pub data: Vec<u32>,
}

/// Reduces `x` (any `u64`) modulo `P`.
#[inline(always)]
pub fn reduce(x: u64) -> u32 {
    compute_market_protocol::job::mod_p(x) as u32
}

/// `Σ a[i]·b[i] mod P`. Two products (< 2^62 each) are added before each fold, so the
/// accumulator stays below 2^64.
#[inline]
pub fn dot(a: &[u32], b: &[u32]) -> u32 {
    let mut acc: u64 = 0;
    let mut i = 0;
    let n = a.len().min(b.len());
    while i + 1 < n {
        acc += a[i] as u64 * b[i] as u64 + a[i + 1] as u64 * b[i + 1] as u64;
        acc = (acc & P) + (acc >> 31);
        i += 2;
    }
    if i < n {
        acc += a[i] as u64 * b[i] as u64;
    }
    reduce(acc)
}

impl Matrix {
    /// A zero matrix.
    pub fn zeros(rows: usize, cols: usize) -> Self {
        Matrix {
            rows,
            cols,
            data: vec![0; rows * cols],
        }
    }

    /// Input `A` (m×k) of a `MatMulModP` job.
    pub fn input_a(job: &JobSpec) -> Self {
        let [m, k, _] = job.dims.map(|d| d as usize);
        Self::generated(job.matrix_key(b'A'), m, k)
    }

    /// Input `B` (k×n) of a `MatMulModP` job.
    pub fn input_b(job: &JobSpec) -> Self {
        let [_, k, n] = job.dims.map(|d| d as usize);
        Self::generated(job.matrix_key(b'B'), k, n)
    }

    fn generated(key: u64, rows: usize, cols: usize) -> Self {
        let data = (0..(rows * cols) as u64)
            .into_par_iter()
            .map(|i| matrix_element(&key, i))
            .collect();
        Matrix { rows, cols, data }
    }

    /// The transpose.
    pub fn transpose(&self) -> Self {
        let mut t = Matrix::zeros(self.cols, self.rows);
        for r in 0..self.rows {
            for c in 0..self.cols {
                t.data[c * self.rows + r] = self.data[r * self.cols + c];
            }
        }
        t
    }

    /// Row `r`.
    pub fn row(&self, r: usize) -> &[u32] {
        &self.data[r * self.cols..(r + 1) * self.cols]
    }

    /// `self · v` (mod P).
    pub fn mul_vec(&self, v: &[u32]) -> Vec<u32> {
        (0..self.rows).map(|r| dot(self.row(r), v)).collect()
    }

    /// Assembles C (m×n) from the tiles of a `MatMulModP` job (zero padding dropped).
    pub fn from_tiles(job: &JobSpec, tiles: &[Vec<u8>]) -> Result<Self> {
        ensure!(job.kind == JobKind::MatMulModP, "not a MatMulModP job");
        ensure!(
            tiles.len() == job.tile_count() as usize,
            "expected {} tiles, got {}",
            job.tile_count(),
            tiles.len()
        );
        let (m, n) = (job.dims[0] as usize, job.dims[2] as usize);
        let (_, grid_cols) = job.tile_grid();
        let t = MATMUL_TILE as usize;
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
        let mut c = Matrix::zeros(m, n);
        // one band of 64 rows of C per tile row, in parallel
        c.data
            .par_chunks_mut(t * n)
            .enumerate()
            .try_for_each(|(tr, band)| -> Result<()> {
                for tc in 0..grid_cols as usize {
                    let idx = tr * grid_cols as usize + tc;
                    let tile = &tiles[idx];
                    for r in 0..t {
                        for col in 0..t {
                            let (gr, gc) = (tr * t + r, tc * t + col);
                            let o = 4 * (r * t + col);
                            let v = u32::from_le_bytes(tile[o..o + 4].try_into().expect("4 bytes"));
                            if gr >= m || gc >= n {
                                // outside C: the padding is part of the committed bytes and must be zero
                                ensure!(v == 0, "tile {idx} has non-zero padding at ({r}, {col})");
                                continue;
                            }
                            ensure!((v as u64) < P, "tile {idx} holds {v}, not a field element");
                            band[r * n + gc] = v;
                        }
                    }
                }
                Ok(())
            })?;
        Ok(c)
    }
}

//! The CPU reference backend: the definition every other backend must match bit for bit.

use anyhow::{ensure, Result};
use compute_market_protocol::job::{JobKind, JobSpec, MATMUL_TILE};
use rayon::prelude::*;

use super::{matrix::dot, Backend, Matrix};

/// Runs jobs on the CPU's cores (rayon).
#[derive(Clone, Debug, Default)]
pub struct CpuBackend;

/// One `MatMulModP` tile: block (tr, tc) of A·B, zero-padded to 64×64, little-endian `u32`.
fn matmul_tile(a: &Matrix, bt: &Matrix, tr: usize, tc: usize) -> Vec<u8> {
    let t = MATMUL_TILE as usize;
    let mut out = vec![0u8; t * t * 4];
    for r in 0..t {
        let gr = tr * t + r;
        if gr >= a.rows {
            break;
        }
        let arow = a.row(gr);
        for c in 0..t {
            let gc = tc * t + c;
            if gc >= bt.rows {
                break;
            }
            let v = dot(arow, bt.row(gc));
            out[4 * (r * t + c)..4 * (r * t + c) + 4].copy_from_slice(&v.to_le_bytes());
        }
    }
    out
}

/// One `HashBatch` tile: the 32-byte outputs of its nonces, concatenated.
fn hash_tile(job: &JobSpec, index: u32) -> Vec<u8> {
    let nonces = job.dims[1] as u64;
    let first = index as u64 * nonces;
    (first..first + nonces)
        .flat_map(|nonce| job.hash_nonce(nonce))
        .collect()
}

impl Backend for CpuBackend {
    fn name(&self) -> String {
        format!("cpu({} threads)", rayon::current_num_threads())
    }

    fn tiles(&self, job: &JobSpec, indices: &[u32]) -> Result<Vec<Vec<u8>>> {
        let count = job.tile_count();
        ensure!(
            indices.iter().all(|&i| i < count),
            "tile index out of range (T = {count})"
        );
        Ok(match job.kind {
            JobKind::MatMulModP => {
                let inputs = super::inputs::matrices(job)?;
                let (a, bt) = (&inputs.a, inputs.b.transpose());
                let (_, cols) = job.tile_grid();
                indices
                    .par_iter()
                    .map(|&i| matmul_tile(a, &bt, (i / cols) as usize, (i % cols) as usize))
                    .collect()
            }
            JobKind::HashBatch => indices.par_iter().map(|&i| hash_tile(job, i)).collect(),
            JobKind::Mlp => {
                let inputs = super::inputs::mlp(job)?;
                let r = usize::from(job.rows_per_tile);
                indices
                    .par_iter()
                    .map(|&i| super::mlp::run_rows(&inputs.model, &inputs.batch, i as usize * r, r))
                    .collect()
            }
            JobKind::Encoder => {
                let inputs = super::inputs::encoder(job)?;
                let r = usize::from(job.rows_per_tile);
                super::encoder::run_tiles(&inputs.fast, &inputs.ids, indices, r)
            }
            JobKind::Generate => {
                let inputs = super::inputs::generate(job)?;
                super::decoder::job::run_tiles(&inputs, job, indices, super::decoder::Path::Fast)?
            }
        })
    }

    fn freivalds(&self, job: &JobSpec, rs: &[Vec<u32>]) -> Result<Vec<Vec<u32>>> {
        super::freivalds::abr(job, rs)
    }
}

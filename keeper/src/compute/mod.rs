//! The compute-backend abstraction: one trait, a CPU reference implementation now (a CUDA one
//! behind the same trait later). Every backend must produce the same bits: results are hashed
//! into Merkle roots and voted on.
//!
//! Arithmetic is exact (integers mod 2^31 − 1, SHA-256), so "the same bits" means the same
//! mathematical result; no floating point is involved anywhere.

pub mod cpu;
pub mod matrix;

use anyhow::Result;
use compute_market_protocol::job::JobSpec;

pub use matrix::Matrix;

/// Freivalds products of one round: `A·(B·r)` and `C·r`, equal when `C = A·B` (mod p).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FreivaldsProducts {
    /// `A·(B·r)`, length m.
    pub abr: Vec<u32>,
    /// `C·r`, length m.
    pub cr: Vec<u32>,
}

/// A device that runs jobs.
pub trait Backend: Send + Sync {
    /// Name for logs and reports ("cpu", "cuda:0", ...).
    fn name(&self) -> String;

    /// Output tiles `indices` of `job`, each `job.tile_len()` bytes, in the order asked.
    fn tiles(&self, job: &JobSpec, indices: &[u32]) -> Result<Vec<Vec<u8>>>;

    /// Every output tile of `job`, in index order.
    fn run(&self, job: &JobSpec) -> Result<Vec<Vec<u8>>> {
        let all: Vec<u32> = (0..job.tile_count()).collect();
        self.tiles(job, &all)
    }

    /// Every output tile of `job`, in about 20 chunks, advancing `bar` by tiles done (the bar
    /// draws only on a terminal).
    fn run_with_progress(&self, job: &JobSpec, bar: &indicatif::ProgressBar) -> Result<Vec<Vec<u8>>> {
        let count = job.tile_count();
        bar.set_length(count as u64);
        let chunk = count.div_ceil(20).max(1);
        let mut out = Vec::with_capacity(count as usize);
        for start in (0..count).step_by(chunk as usize) {
            let idx: Vec<u32> = (start..(start + chunk).min(count)).collect();
            out.extend(self.tiles(job, &idx)?);
            bar.inc(idx.len() as u64);
        }
        bar.finish_and_clear();
        Ok(out)
    }

    /// Freivalds products for each vector of `rs` (each of length n), with `c` the claimed
    /// product of a `MatMulModP` job.
    fn freivalds(&self, job: &JobSpec, c: &Matrix, rs: &[Vec<u32>]) -> Result<Vec<FreivaldsProducts>>;
}

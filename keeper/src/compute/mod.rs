//! The compute-backend abstraction: one trait ([`Backend`]), the CPU reference ([`cpu`]) and
//! CUDA ([`cuda`]) behind it, and backend selection ([`device`]). Every backend must produce
//! the same bits: results are hashed into Merkle roots and voted on.
//!
//! Arithmetic is exact (integers mod 2^31 − 1, SHA-256), so "the same bits" means the same
//! mathematical result; no floating point is involved anywhere.

pub mod cpu;
pub mod cuda;
pub mod decoder;
pub mod device;
pub mod encoder;
pub mod freivalds;

pub mod inputs;
pub mod matrix;
pub mod mlp;
pub mod slices;
pub mod tensors;

use anyhow::Result;
use compute_market_protocol::job::JobSpec;

pub use matrix::Matrix;

/// Progress of a long computation: called with (units done, units in all). The library never
/// draws anything; the binary turns this into a progress bar on a terminal.
pub type Progress<'a> = dyn Fn(u64, u64) + Send + Sync + 'a;

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

    /// Every output tile of `job`, in about 20 chunks, telling `progress` (tiles done, tiles
    /// in all) after each.
    fn run_with_progress(&self, job: &JobSpec, progress: &Progress<'_>) -> Result<Vec<Vec<u8>>> {
        let count = job.tile_count();
        let chunk = count.div_ceil(20).max(1);
        let mut out = Vec::with_capacity(count as usize);
        progress(0, count as u64);
        for start in (0..count).step_by(chunk as usize) {
            let idx: Vec<u32> = (start..(start + chunk).min(count)).collect();
            out.extend(self.tiles(job, &idx)?);
            progress(out.len() as u64, count as u64);
        }
        Ok(out)
    }

    /// The verifier's input-side Freivalds products of a `MatMulModP` job: `A·(B·r)` (length m)
    /// for each vector `r` of `rs` (each of length n). The other side, `C·r`, is computed from
    /// the served tiles ([`freivalds::c_times`]); they agree when C = A·B (mod p).
    fn freivalds(&self, job: &JobSpec, rs: &[Vec<u32>]) -> Result<Vec<Vec<u32>>>;

    /// The device that computes a `Generate` job's dense layers and logits for `model` (its
    /// weights copied there), when this backend has one that passed its self-test; `None`: the
    /// CPU's fast path computes them.
    fn decoder_offload(
        &self,
        _model: &std::sync::Arc<decoder::Model>,
    ) -> Option<Box<dyn decoder::Offload + '_>> {
        None
    }

    /// Memory the backend computes in, bytes (the machine's RAM for the CPU; the GPUs' memory
    /// for CUDA). 0 when unknown.
    fn memory_bytes(&self) -> u64 {
        std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|m| {
                m.lines()
                    .find(|l| l.starts_with("MemTotal:"))
                    .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            })
            .map_or(0, |kib| kib * 1024)
    }

    /// The 32-bit integer multiply-add peak of the backend's devices, operations per second,
    /// when known (GPUs: from their SM count and clock).
    fn int32_mad_peak(&self) -> Option<f64> {
        None
    }

    /// Seconds the device spends in the `MatMulModP` kernel alone for `job` (inputs already on
    /// the device, no copies, best of a few launches), where the backend can tell: what the
    /// peak fraction is computed from. `None` for the CPU.
    fn matmul_kernel_seconds(&self, _job: &JobSpec) -> Option<Result<f64>> {
        None
    }

    /// Measured memory bandwidth, GB/s (bytes read + written per second by a large copy).
    fn bandwidth_gbps(&self) -> Result<f64> {
        let len = 64 << 20; // u32 elements: 256 MiB
        let src = vec![1u32; len];
        let mut dst = vec![0u32; len];
        dst.copy_from_slice(&src); // touch every page first
        let t = std::time::Instant::now();
        for _ in 0..4 {
            dst.copy_from_slice(std::hint::black_box(&src));
        }
        std::hint::black_box(&dst);
        Ok(4.0 * 2.0 * (len * 4) as f64 / t.elapsed().as_secs_f64() / 1e9)
    }
}

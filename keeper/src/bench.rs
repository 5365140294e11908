//! `keeper bench`: compute and verification measured side by side in one run, per job kind and
//! size, and Merkle-commit throughput next to raw SHA-256 throughput.

use std::time::Instant;

use anyhow::Result;
use compute_market_protocol::{
    commit::{VOTE_INVALID, VOTE_VALID},
    hash::{hashv, Digest},
    job::JobSpec,
    merkle::MerkleTree,
    sampling::sample_indices,
};
use serde::Serialize;

use crate::{
    compute::Backend,
    verify::{check_matmul, check_sampled, commit, ProvenTile, Verdict},
};

/// Samples k per verifier used by the benchmark (the protocol default).
pub const BENCH_SAMPLES: u32 = 16;

/// One job measured.
#[derive(Clone, Debug, Serialize)]
pub struct JobRow {
    /// Job kind.
    pub kind: String,
    /// Size in words ("n=1024", "tiles=1024×64×16").
    pub size: String,
    /// Backend.
    pub backend: String,
    /// Provider side: compute every tile and build the Merkle tree, seconds.
    pub compute_s: f64,
    /// Verifier side: the checks one verifier runs, seconds (median of [`VERIFY_RUNS`]).
    pub verify_s: f64,
    /// `verify_s / compute_s`.
    pub ratio: f64,
    /// Work units per second of the compute side (multiply-adds or SHA-256 calls).
    pub work_per_s: f64,
    /// Whether the verifier accepted the honest result (must be true).
    pub honest_accepted: bool,
    /// Whether the verifier rejected a result with one corrupted element (must be true).
    pub corrupt_rejected: bool,
    /// The `MatMulModP` kernel alone on one device (no input generation, copies or Merkle
    /// tree), seconds, where the backend can time it (GPUs).
    pub kernel_s: Option<f64>,
    /// Multiply-adds per second of that kernel over that device's 32-bit integer
    /// multiply-add peak.
    pub peak_fraction: Option<f64>,
    /// That peak, operations per second.
    pub peak_ops: Option<f64>,
    /// Whether the tiles equal the CPU reference bit for bit (checked for every non-CPU
    /// backend; `None` on the CPU itself).
    pub bit_identical: Option<bool>,
}

impl JobRow {
    fn new(
        backend: &dyn Backend,
        job: &JobSpec,
        size: String,
        compute_s: f64,
        verify_s: f64,
        honest: &Verdict,
        caught: &Verdict,
    ) -> Self {
        JobRow {
            kind: format!("{:?}", job.kind),
            size,
            backend: backend.name(),
            compute_s,
            verify_s,
            ratio: verify_s / compute_s,
            work_per_s: job.work() as f64 / compute_s,
            honest_accepted: honest.vote == VOTE_VALID,
            corrupt_rejected: caught.vote == VOTE_INVALID,
            kernel_s: None,
            peak_fraction: None,
            peak_ops: None,
            bit_identical: None,
        }
    }

    /// Adds the kernel time and peak fraction (where the backend has them) and the
    /// bit-identity check against `reference`'s tiles.
    fn against(
        mut self,
        backend: &dyn Backend,
        job: &JobSpec,
        tiles: &[Vec<u8>],
        reference: Option<&[Vec<u8>]>,
    ) -> Result<Self> {
        if let (Some(kernel), Some(peak)) =
            (backend.matmul_kernel_seconds(job), backend.int32_mad_peak())
        {
            let kernel = kernel?;
            self.kernel_s = Some(kernel);
            self.peak_ops = Some(peak);
            self.peak_fraction = Some(job.work() as f64 / kernel / peak);
        }
        self.bit_identical = reference.map(|r| r == tiles);
        Ok(self)
    }
}

/// Merkle commitment speed against raw hashing of the same bytes.
#[derive(Clone, Debug, Serialize)]
pub struct MerkleRow {
    /// Bytes of tile data.
    pub bytes: u64,
    /// Tiles.
    pub tiles: u32,
    /// Merkle commit (leaves + inner nodes, parallel), MB/s.
    pub merkle_mb_s: f64,
    /// One SHA-256 stream over the same bytes, MB/s.
    pub sha256_mb_s: f64,
    /// `merkle_mb_s / sha256_mb_s`.
    pub ratio: f64,
}

/// The whole report.
#[derive(Clone, Debug, Serialize)]
pub struct BenchReport {
    /// Jobs measured.
    pub jobs: Vec<JobRow>,
    /// Merkle throughput.
    pub merkle: MerkleRow,
    /// Instruction sets the CPU verifier's kernels use (scalar, avx512, avx512+ifma) and how
    /// Merkle leaves are hashed.
    pub simd: String,
}

fn secs(t: Instant) -> f64 {
    t.elapsed().as_secs_f64()
}

/// Times the verifier's check this many times and reports the median (a check takes about a
/// millisecond, so one run is at the mercy of a thread wake-up; the job itself runs once).
pub const VERIFY_RUNS: usize = 5;

/// Runs `f` `runs` times: its last result and the median time, seconds.
fn median_of<T>(runs: usize, mut f: impl FnMut() -> Result<T>) -> Result<(T, f64)> {
    let mut times = Vec::with_capacity(runs);
    let mut last = None;
    for _ in 0..runs.max(1) {
        let t = Instant::now();
        last = Some(f()?);
        times.push(secs(t));
    }
    times.sort_by(f64::total_cmp);
    Ok((last.expect("at least one run"), times[times.len() / 2]))
}

/// Flips one element of tile 0 (keeps it a field element) so the result is wrong.
fn corrupt(tiles: &mut [Vec<u8>]) {
    let v = u32::from_le_bytes(tiles[0][..4].try_into().expect("4 bytes"));
    tiles[0][..4].copy_from_slice(&((v + 1) % compute_market_protocol::P as u32).to_le_bytes());
}

/// The bench's seed and verifier key.
fn bench_keys() -> (Digest, [u8; 32]) {
    (hashv(&[b"bench seed"]), [7u8; 32])
}

/// What a provider serves the bench verifier: its sampled tiles with proofs.
/// The verifier's draws for a result of `count` tiles.
fn picked(count: usize) -> Vec<u32> {
    let (seed, me) = bench_keys();
    sample_indices(&seed, &me, BENCH_SAMPLES, count as u32)
}

/// What an honest provider serves for those draws: each distinct one, in draw order.
fn served(data: &[Vec<u8>], tree: &MerkleTree) -> Vec<ProvenTile> {
    crate::verify::distinct(&picked(data.len()))
        .into_iter()
        .map(|i| ProvenTile {
            index: i,
            tile: data[i as usize].clone(),
            proof: tree.proof(i).expect("in range"),
        })
        .collect()
}

/// Measures a `MatMulModP` job of side `n`: the provider computes every tile and the tree; the
/// verifier runs [`check_matmul`] (the root over the served C, Freivalds over C).
pub fn matmul(
    backend: &dyn Backend,
    n: u32,
    reference: Option<&[Vec<u8>]>,
) -> Result<(JobRow, Vec<Vec<u8>>)> {
    let job = JobSpec::matmul(n, n, n, [n as u8; 32]);
    let t = Instant::now();
    let tiles = backend.run(&job)?;
    let tree = commit(&tiles);
    let compute_s = secs(t);
    let (seed, me) = bench_keys();
    let (honest, verify_s) = median_of(VERIFY_RUNS, || {
        check_matmul(
            backend,
            &job,
            &tiles,
            &tree.root(),
            &seed,
            &me,
            BENCH_SAMPLES,
        )
    })?;
    let mut bad = tiles.clone();
    corrupt(&mut bad);
    let bad_tree = commit(&bad);
    let caught = check_matmul(
        backend,
        &job,
        &bad,
        &bad_tree.root(),
        &seed,
        &me,
        BENCH_SAMPLES,
    )?;
    let row = JobRow::new(
        backend,
        &job,
        format!("n={n}"),
        compute_s,
        verify_s,
        &honest,
        &caught,
    )
    .against(backend, &job, &tiles, reference)?;
    Ok((row, tiles))
}

/// Measures a `HashBatch` job: the verifier recomputes `BENCH_SAMPLES` proven tiles.
pub fn hash_batch(
    backend: &dyn Backend,
    tiles: u32,
    nonces: u32,
    iterations: u32,
    reference: Option<&[Vec<u8>]>,
) -> Result<(JobRow, Vec<Vec<u8>>)> {
    let job = JobSpec::hash_batch(tiles, nonces, iterations, [3; 32]);
    let t = Instant::now();
    let out = backend.run(&job)?;
    let tree = commit(&out);
    let compute_s = secs(t);
    let proven = served(&out, &tree);
    let (honest, verify_s) = median_of(VERIFY_RUNS, || {
        check_sampled(backend, &job, &picked(out.len()), &proven, &tree.root())
    })?;
    // corrupt exactly the first sampled tile
    let mut bad = out.clone();
    let target = proven[0].index as usize;
    bad[target][0] ^= 1;
    let bad_tree = commit(&bad);
    let caught = check_sampled(
        backend,
        &job,
        &picked(bad.len()),
        &served(&bad, &bad_tree),
        &bad_tree.root(),
    )?;
    let row = JobRow::new(
        backend,
        &job,
        format!("tiles={tiles}×{nonces}×{iterations}"),
        compute_s,
        verify_s,
        &honest,
        &caught,
    )
    .against(backend, &job, &out, reference)?;
    Ok((row, out))
}

/// Merkle commit of `tiles` tiles of 16 KiB (leaves sixteen at a time, on every core) against one
/// SHA-256 stream over the same bytes: medians of [`VERIFY_RUNS`] runs after a first one.
pub fn merkle(tiles: u32) -> MerkleRow {
    let data: Vec<Vec<u8>> = (0..tiles)
        .map(|i| vec![(i % 251) as u8; 16 * 1024])
        .collect();
    let bytes: u64 = data.iter().map(|t| t.len() as u64).sum();
    let parts: Vec<&[u8]> = data.iter().map(|v| v.as_slice()).collect();
    // medians of a few runs each, the first touch of the data excluded
    let median = |f: &dyn Fn() -> Digest| {
        std::hint::black_box(f());
        median_of(VERIFY_RUNS, || Ok(f())).expect("infallible")
    };
    let (root, merkle_s) = median(&|| commit(&data).root());
    let (stream, sha_s) = median(&|| hashv(&parts));
    std::hint::black_box((root, stream));
    let mb = bytes as f64 / 1e6;
    MerkleRow {
        bytes,
        tiles,
        merkle_mb_s: mb / merkle_s,
        sha256_mb_s: mb / sha_s,
        ratio: sha_s / merkle_s,
    }
}

/// Runs the benchmark for the given `MatMulModP` sizes on every backend, side by side. The
/// first backend is the reference: every other one's tiles are compared with its tiles bit
/// for bit.
pub fn run(backends: &[std::sync::Arc<dyn Backend>], sizes: &[u32]) -> Result<BenchReport> {
    let mut jobs = vec![];
    for &n in sizes {
        let mut reference: Option<Vec<Vec<u8>>> = None;
        for b in backends {
            tracing::info!(n, backend = b.name(), "MatMulModP");
            let (row, tiles) = matmul(b.as_ref(), n, reference.as_deref())?;
            jobs.push(row);
            reference.get_or_insert(tiles);
        }
    }
    let mut reference: Option<Vec<Vec<u8>>> = None;
    for b in backends {
        tracing::info!(backend = b.name(), "HashBatch");
        let (row, out) = hash_batch(b.as_ref(), 1024, 64, 16, reference.as_deref())?;
        jobs.push(row);
        reference.get_or_insert(out);
    }
    Ok(BenchReport {
        jobs,
        merkle: merkle(1024),
        simd: format!(
            "{}; Merkle leaves {}",
            crate::compute::freivalds::simd_level(),
            if crate::compute::leaves::available() {
                "sixteen at a time (AVX-512)"
            } else {
                "one SHA-256 stream at a time"
            }
        ),
    })
}

/// Hardware figures for `node register --measure`: compute (G mul-adds/s of a `MatMulModP`
/// job, n = 4096 on a GPU, 512 on the CPU), memory (GB) and measured bandwidth (GB/s).
pub fn measure_hardware(backend: &dyn Backend) -> Result<compute_market::state::Hardware> {
    let n = if backend.int32_mad_peak().is_some() {
        4096
    } else {
        512
    };
    let job = JobSpec::matmul(n, n, n, [n as u8; 32]);
    backend.run(&JobSpec::matmul(64, 64, 64, [1; 32]))?; // warm-up (kernels, inputs, threads)
    let t = Instant::now();
    backend.run(&job)?;
    let gops = job.work() as f64 / secs(t) / 1e9;
    Ok(compute_market::state::Hardware {
        gflops: gops.round().clamp(1.0, u32::MAX as f64) as u32,
        memory_gb: (backend.memory_bytes() >> 30) as u32,
        bandwidth_gbps: backend
            .bandwidth_gbps()?
            .round()
            .clamp(0.0, u32::MAX as f64) as u32,
        region: 0,
    })
}

/// The report as a text table.
pub fn render(r: &BenchReport) -> String {
    let mut s = format!(
        "{:<11} {:<20} {:<24} {:>11} {:>11} {:>10} {:>13} {:>6} {:>6} {:>7} {:>9}\n",
        "kind",
        "size",
        "backend",
        "compute s",
        "verify s",
        "verify/cmp",
        "work/s",
        "honest",
        "caught",
        "% peak",
        "same bits"
    );
    for j in &r.jobs {
        s += &format!(
            "{:<11} {:<20} {:<24} {:>11.4} {:>11.5} {:>10} {:>13.3e} {:>6} {:>6} {:>7} {:>9}\n",
            j.kind,
            j.size,
            j.backend,
            j.compute_s,
            j.verify_s,
            format!("1/{:.0}", 1.0 / j.ratio),
            j.work_per_s,
            if j.honest_accepted { "yes" } else { "NO" },
            if j.corrupt_rejected { "yes" } else { "NO" },
            j.peak_fraction
                .map_or("-".into(), |f| format!("{:.1}", 100.0 * f)),
            j.bit_identical
                .map_or("-", |b| if b { "yes" } else { "NO" }),
        );
    }
    if let Some(p) = r.jobs.iter().find_map(|j| j.peak_ops) {
        s += &format!(
            "\n% peak: the MatMulModP kernel alone (inputs on the device; no copies, no Merkle tree), mul-adds/s over one GPU's 32-bit integer multiply-add peak, {:.1} T/s = SMs × 64 lanes × clock (CUDA C++ Programming Guide, arithmetic instruction throughput, cc 7.x–9.0)\n",
            p / 1e12
        );
    }
    s += &format!("CPU verifier kernels: {}\n", r.simd);
    let m = &r.merkle;
    s += &format!(
        "\nMerkle commit of {} tiles ({:.1} MB): {:.0} MB/s; one SHA-256 stream over the same bytes: {:.0} MB/s (ratio {:.2})\n",
        m.tiles,
        m.bytes as f64 / 1e6,
        m.merkle_mb_s,
        m.sha256_mb_s,
        m.ratio
    );
    s
}

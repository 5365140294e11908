//! `keeper bench`: compute and verification measured side by side in one run, per job kind and
//! size, and Merkle-commit throughput next to raw SHA-256 throughput.

use std::time::Instant;

use anyhow::Result;
use compute_market_protocol::{
    commit::{VOTE_INVALID, VOTE_VALID},
    hash::hashv,
    job::JobSpec,
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
    /// Verifier side: the checks one verifier runs, seconds.
    pub verify_s: f64,
    /// `verify_s / compute_s`.
    pub ratio: f64,
    /// Work units per second of the compute side (multiply-adds or SHA-256 calls).
    pub work_per_s: f64,
    /// Whether the verifier accepted the honest result (must be true).
    pub honest_accepted: bool,
    /// Whether the verifier rejected a result with one corrupted element (must be true).
    pub corrupt_rejected: bool,
}

impl JobRow {
    fn new(backend: &dyn Backend, job: &JobSpec, size: String, compute_s: f64, verify_s: f64, honest: &Verdict, caught: &Verdict) -> Self {
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
        }
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
}

fn secs(t: Instant) -> f64 {
    t.elapsed().as_secs_f64()
}

/// Flips one element of tile 0 (keeps it a field element) so the result is wrong.
fn corrupt(tiles: &mut [Vec<u8>]) {
    let v = u32::from_le_bytes(tiles[0][..4].try_into().expect("4 bytes"));
    tiles[0][..4].copy_from_slice(&((v + 1) % compute_market_protocol::P as u32).to_le_bytes());
}

/// Measures a `MatMulModP` job of side `n`.
pub fn matmul(backend: &dyn Backend, n: u32) -> Result<JobRow> {
    let job = JobSpec::matmul(n, n, n, [n as u8; 32]);
    let t = Instant::now();
    let tiles = backend.run(&job)?;
    let root = commit(&tiles).root();
    let compute_s = secs(t);
    let (seed, me) = (hashv(&[b"bench seed"]), [7u8; 32]);
    let t = Instant::now();
    let honest = check_matmul(backend, &job, &tiles, &root, &seed, &me, BENCH_SAMPLES)?;
    let verify_s = secs(t);
    let mut bad = tiles.clone();
    corrupt(&mut bad);
    let bad_root = commit(&bad).root();
    let caught = check_matmul(backend, &job, &bad, &bad_root, &seed, &me, BENCH_SAMPLES)?;
    Ok(JobRow::new(backend, &job, format!("n={n}"), compute_s, verify_s, &honest, &caught))
}

/// Measures a `HashBatch` job: the verifier recomputes `BENCH_SAMPLES` proven tiles.
pub fn hash_batch(backend: &dyn Backend, tiles: u32, nonces: u32, iterations: u32) -> Result<JobRow> {
    let job = JobSpec::hash_batch(tiles, nonces, iterations, [3; 32]);
    let t = Instant::now();
    let out = backend.run(&job)?;
    let tree = commit(&out);
    let compute_s = secs(t);
    let (seed, me) = (hashv(&[b"bench seed"]), [7u8; 32]);
    let served = |data: &[Vec<u8>], tree: &compute_market_protocol::merkle::MerkleTree| -> Vec<ProvenTile> {
        sample_indices(&seed, &me, BENCH_SAMPLES, tiles)
            .into_iter()
            .map(|i| ProvenTile { index: i, tile: data[i as usize].clone(), proof: tree.proof(i).expect("in range") })
            .collect()
    };
    let proven = served(&out, &tree);
    let t = Instant::now();
    let honest = check_sampled(backend, &job, &proven, &tree.root())?;
    let verify_s = secs(t);
    // corrupt exactly the first sampled tile
    let mut bad = out.clone();
    let target = proven[0].index as usize;
    bad[target][0] ^= 1;
    let bad_tree = commit(&bad);
    let caught = check_sampled(backend, &job, &served(&bad, &bad_tree), &bad_tree.root())?;
    Ok(JobRow::new(backend, &job, format!("tiles={tiles}×{nonces}×{iterations}"), compute_s, verify_s, &honest, &caught))
}

/// Merkle commit of `tiles` tiles of 16 KiB against one SHA-256 stream over the same bytes.
pub fn merkle(tiles: u32) -> MerkleRow {
    let data: Vec<Vec<u8>> = (0..tiles).map(|i| vec![(i % 251) as u8; 16 * 1024]).collect();
    let bytes: u64 = data.iter().map(|t| t.len() as u64).sum();
    let t = Instant::now();
    let root = commit(&data).root();
    let merkle_s = secs(t);
    let t = Instant::now();
    let parts: Vec<&[u8]> = data.iter().map(|v| v.as_slice()).collect();
    let stream = hashv(&parts);
    let sha_s = secs(t);
    std::hint::black_box((root, stream));
    let mb = bytes as f64 / 1e6;
    MerkleRow { bytes, tiles, merkle_mb_s: mb / merkle_s, sha256_mb_s: mb / sha_s, ratio: sha_s / merkle_s }
}

/// Runs the benchmark for the given `MatMulModP` sizes.
pub fn run(backend: &dyn Backend, sizes: &[u32]) -> Result<BenchReport> {
    let mut jobs = vec![];
    for &n in sizes {
        tracing::info!(n, "MatMulModP");
        jobs.push(matmul(backend, n)?);
    }
    tracing::info!("HashBatch");
    jobs.push(hash_batch(backend, 1024, 64, 16)?);
    Ok(BenchReport { jobs, merkle: merkle(1024) })
}

/// The report as a text table.
pub fn render(r: &BenchReport) -> String {
    let mut s = format!(
        "{:<11} {:<20} {:<16} {:>11} {:>11} {:>10} {:>13} {:>6} {:>6}\n",
        "kind", "size", "backend", "compute s", "verify s", "verify/cmp", "work/s", "honest", "caught"
    );
    for j in &r.jobs {
        s += &format!(
            "{:<11} {:<20} {:<16} {:>11.4} {:>11.5} {:>10} {:>13.3e} {:>6} {:>6}\n",
            j.kind,
            j.size,
            j.backend,
            j.compute_s,
            j.verify_s,
            format!("1/{:.0}", 1.0 / j.ratio),
            j.work_per_s,
            if j.honest_accepted { "yes" } else { "NO" },
            if j.corrupt_rejected { "yes" } else { "NO" },
        );
    }
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

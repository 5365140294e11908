//! `keeper bench`: compute and verification measured side by side in one run, per job kind and
//! size, and Merkle-commit throughput next to raw SHA-256 throughput.

use std::time::Instant;

use anyhow::Result;
use compute_market_protocol::{
    commit::{VOTE_INVALID, VOTE_VALID},
    hash::{hashv, Digest},
    job::JobSpec,
    merkle::{leaf_hash, verify_proof, MerkleTree},
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

/// One commitment form measured on the same tiles: the provider's commit, the verifier's
/// whole-root check (recompute the root from every served tile) and a k-tile proof check.
#[derive(Clone, Debug, Serialize)]
pub struct HashFormRow {
    /// The form.
    pub form: String,
    /// Threads.
    pub threads: usize,
    /// Commit (= whole-root check: the same work), MB/s.
    pub root_mb_s: f64,
    /// Checking k proven tiles against the root, microseconds.
    pub k_proofs_us: f64,
}

/// The whole report.
#[derive(Clone, Debug, Serialize)]
pub struct BenchReport {
    /// Commitment forms side by side ([`hash_forms`]).
    pub hashes: Vec<HashFormRow>,
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

/// The commitment forms side by side on `tiles` tiles of 16 KiB (a `MatMulModP` output of
/// (64·√tiles)²), 1 and 2 threads, `k` proofs: the current SHA-256 tree with leaves sixteen at a
/// time; BLAKE3 leaves per tile with BLAKE3 inner nodes; and the whole output as one BLAKE3
/// tree (`blake3`'s own chunk tree: a tile is an aligned 16-chunk subtree, its proof the
/// sibling chaining values, checked with `blake3::hazmat`). Medians of [`VERIFY_RUNS`] runs.
pub fn hash_forms(tiles: u32, k: u32) -> Result<Vec<HashFormRow>> {
    use blake3::hazmat::{merge_subtrees_non_root, HasherExt, Mode};
    const TILE: usize = 16 * 1024;
    let data: Vec<Vec<u8>> = (0..tiles)
        .map(|i| {
            (0..TILE)
                .map(|j| (splitmix(i as u64 * 65_537 + j as u64) & 0xff) as u8)
                .collect()
        })
        .collect();
    let whole: Vec<u8> = data.concat();
    let mb = whole.len() as f64 / 1e6;
    let picks: Vec<u32> = (0..k).map(|i| i * 7919 % tiles).collect();
    let median = |f: &(dyn Fn() -> Digest + Sync), threads: usize| -> Result<f64> {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()?;
        pool.install(|| {
            std::hint::black_box(f());
            Ok(median_of(VERIFY_RUNS, || Ok(f()))?.1)
        })
    };
    let b3_leaf = |i: u32, t: &[u8]| -> Digest {
        let mut h = blake3::Hasher::new();
        h.update(&[0]).update(&i.to_le_bytes()).update(t);
        *h.finalize().as_bytes()
    };
    let b3_node = |l: &Digest, r: &Digest| -> Digest {
        let mut h = blake3::Hasher::new();
        h.update(&[1]).update(l).update(r);
        *h.finalize().as_bytes()
    };
    let b3_tree = |leaves: Vec<Digest>| -> Vec<Vec<Digest>> {
        let mut levels = vec![leaves];
        while levels.last().map_or(0, Vec::len) > 1 {
            let next = levels
                .last()
                .expect("a level")
                .chunks(2)
                .map(|c| {
                    if c.len() == 2 {
                        b3_node(&c[0], &c[1])
                    } else {
                        c[0]
                    }
                })
                .collect();
            levels.push(next);
        }
        levels
    };
    let b3_leaves = || -> Vec<Digest> {
        use rayon::prelude::*;
        data.par_iter()
            .enumerate()
            .map(|(i, t)| b3_leaf(i as u32, t))
            .collect()
    };
    // the proofs each form serves, built once
    let sha_tree = commit(&data);
    let b3_levels = b3_tree(b3_leaves());
    let b3_root = b3_levels.last().expect("a root")[0];
    let cv = |i: u32| -> [u8; 32] {
        blake3::Hasher::new()
            .set_input_offset(i as u64 * TILE as u64)
            .update(&data[i as usize])
            .finalize_non_root()
    };
    // the whole output's chunk tree over tiles that are aligned subtrees: its levels of
    // chaining values (tiles a power of two, so every level is full)
    anyhow::ensure!(
        tiles.is_power_of_two(),
        "hash_forms needs a power-of-two tile count"
    );
    let mut cv_levels: Vec<Vec<[u8; 32]>> = vec![(0..tiles).map(cv).collect()];
    while cv_levels.last().expect("a level").len() > 2 {
        let next = cv_levels
            .last()
            .expect("a level")
            .chunks(2)
            .map(|c| merge_subtrees_non_root(&c[0], &c[1], Mode::Hash))
            .collect();
        cv_levels.push(next);
    }
    let whole_root = *blake3::hash(&whole).as_bytes();
    let mut rows = vec![];
    for threads in [1, 2] {
        let sha_root = median(&|| commit(&data).root(), threads)?;
        let sha_proofs = median(
            &|| {
                for &i in &picks {
                    let ok = verify_proof(
                        &sha_tree.root(),
                        i,
                        tiles,
                        &leaf_hash(i, &data[i as usize]),
                        &sha_tree.proof(i).expect("in range"),
                    );
                    assert!(ok);
                }
                [0; 32]
            },
            threads,
        )?;
        rows.push(HashFormRow {
            form: "SHA-256 Merkle, leaves 16 at a time (current)".into(),
            threads,
            root_mb_s: mb / sha_root,
            k_proofs_us: sha_proofs * 1e6,
        });
        let b3_root_s = median(&|| b3_tree(b3_leaves()).last().expect("a root")[0], threads)?;
        let b3_proofs = median(
            &|| {
                for &i in &picks {
                    let mut acc = b3_leaf(i, &data[i as usize]);
                    let mut j = i as usize;
                    for level in &b3_levels[..b3_levels.len() - 1] {
                        let sib = j ^ 1;
                        if sib < level.len() {
                            acc = if j & 1 == 0 {
                                b3_node(&acc, &level[sib])
                            } else {
                                b3_node(&level[sib], &acc)
                            };
                        }
                        j /= 2;
                    }
                    assert_eq!(acc, b3_root);
                }
                [0; 32]
            },
            threads,
        )?;
        rows.push(HashFormRow {
            form: "BLAKE3 per-tile leaves + BLAKE3 nodes".into(),
            threads,
            root_mb_s: mb / b3_root_s,
            k_proofs_us: b3_proofs * 1e6,
        });
        let whole_s = median(
            &|| {
                let mut h = blake3::Hasher::new();
                if threads > 1 {
                    h.update_rayon(&whole);
                } else {
                    h.update(&whole);
                }
                *h.finalize().as_bytes()
            },
            threads,
        )?;
        let whole_proofs = median(
            &|| {
                for &i in &picks {
                    let mut acc = cv(i);
                    let mut j = i as usize;
                    for level in &cv_levels {
                        let sib = level[j ^ 1];
                        let (l, r) = if j & 1 == 0 { (acc, sib) } else { (sib, acc) };
                        acc = if level.len() == 2 {
                            *blake3::hazmat::merge_subtrees_root(&l, &r, Mode::Hash).as_bytes()
                        } else {
                            merge_subtrees_non_root(&l, &r, Mode::Hash)
                        };
                        j /= 2;
                    }
                    assert_eq!(acc, whole_root);
                }
                [0; 32]
            },
            threads,
        )?;
        rows.push(HashFormRow {
            form: "BLAKE3 of the whole output (tile = subtree)".into(),
            threads,
            root_mb_s: mb / whole_s,
            k_proofs_us: whole_proofs * 1e6,
        });
    }
    Ok(rows)
}

fn splitmix(x: u64) -> u64 {
    compute_market_protocol::job::splitmix64(x)
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
        hashes: hash_forms(1024, 16)?,
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
    s += &format!(
        "\nCommitment forms, {:.1} MB of tiles (16 KiB each), side by side:\n{:<48} {:>7} {:>16} {:>14}\n",
        m.bytes as f64 / 1e6,
        "form",
        "threads",
        "root MB/s",
        "16 proofs µs"
    );
    let base = |threads: usize| {
        r.hashes
            .iter()
            .find(|h| h.threads == threads)
            .map_or(1.0, |h| h.root_mb_s)
    };
    for h in &r.hashes {
        s += &format!(
            "{:<48} {:>7} {:>9.0} ({:.2}×) {:>14.1}\n",
            h.form,
            h.threads,
            h.root_mb_s,
            h.root_mb_s / base(h.threads),
            h.k_proofs_us
        );
    }
    s
}

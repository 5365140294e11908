//! `keeper bench`: compute and verification measured side by side in one run, per job kind and
//! size, the commitment's throughput next to raw BLAKE3, and the commitment forms it was chosen
//! from.

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
    /// `MatMulModP`: the parts of the check, each alone on every thread (medians), seconds —
    /// hashing C to the root, C·r with the field and padding checks, A·(B·r). The check runs
    /// the first two in one pass beside the third.
    pub check_parts: Option<CheckParts>,
    /// Inference kinds: rows (digits) or texts (sentences) computed per second.
    pub rows_per_s: Option<f64>,
}

/// The parts of a `MatMulModP` check, seconds (see [`JobRow::check_parts`]).
#[derive(Clone, Debug, Serialize)]
pub struct CheckParts {
    /// The root over every served tile.
    pub hash_s: f64,
    /// C·r for the Freivalds vectors, with the field and padding checks.
    pub c_r_s: f64,
    /// A·(B·r), A and B generated on the fly.
    pub a_b_r_s: f64,
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
            check_parts: None,
            rows_per_s: job
                .kind
                .is_inference()
                .then(|| f64::from(job.dims[0]) / compute_s),
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

/// The commitment's speed against raw BLAKE3 of the same bytes.
#[derive(Clone, Debug, Serialize)]
pub struct MerkleRow {
    /// Bytes of tile data.
    pub bytes: u64,
    /// Tiles.
    pub tiles: u32,
    /// Threads of the parallel figures.
    pub threads: usize,
    /// The commitment (leaves in parallel, then the tree), MB/s.
    pub merkle_mb_s: f64,
    /// `blake3::hash` of the same bytes in one buffer, one thread, MB/s.
    pub raw_mb_s: f64,
    /// The same with `update_rayon` on every thread, MB/s.
    pub raw_par_mb_s: f64,
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
    /// The commitment's throughput against raw BLAKE3.
    pub merkle: MerkleRow,
    /// Instruction sets the CPU verifier's Freivalds kernels use (scalar, avx512, avx512+ifma).
    pub simd: String,
    /// A client's input fetched over loopback and checked, against raw SHA-256.
    pub input_fetch: InputFetchRow,
    /// Claim → submit with the inputs fetched after the claim and pre-fetched before it.
    pub claim_to_submit: Vec<ClaimRow>,
    /// Size of the job [`BenchReport::claim_to_submit`] ran (n × n · n × n).
    pub claim_n: usize,
    /// Outputs fetched with and without compression.
    pub transfer: Vec<TransferRow>,
    /// Rows not measured, with why (the MiniLM model not made on this machine).
    pub skipped: Vec<String>,
    /// The MiniLM encoder on the CPU by kernel set, side by side in one run.
    pub encoder_kernels: Vec<EncoderKernelRow>,
}

/// The MiniLM encoder's texts embedded by one GEMM kernel set on every core ([`encoder_kernels`]).
#[derive(Clone, Debug, Serialize)]
pub struct EncoderKernelRow {
    /// The kernel set.
    pub kernels: String,
    /// Texts embedded.
    pub texts: usize,
    /// Median seconds of the runs.
    pub seconds: f64,
    /// Texts a second.
    pub texts_per_s: f64,
    /// Tokens a second.
    pub tokens_per_s: f64,
    /// Integer multiply-adds a second (the GEMMs' and the attention's, the tokens' own).
    pub macs_per_s: f64,
    /// The machine's peak for this set: cores × its int16 multiply-adds a cycle
    /// (`KernelSet::macs_per_cycle`) × the clock (`clock_hz`), an assumption stated in the
    /// README.
    pub peak_macs: f64,
    /// `macs_per_s / peak_macs`.
    pub peak_fraction: f64,
    /// Speed over the path before the packed kernels ([`before_kernels`]), in this run.
    pub over_before: f64,
    /// Whether its embeddings equal the path before's bit for bit (must be true).
    pub same_bits: bool,
    /// The clock the peak assumes, Hz (`/proc/cpuinfo`'s largest "cpu MHz", else 2 GHz).
    pub clock_hz: f64,
}

/// The MiniLM model and `texts` token-id rows: the first 60 held-out texts (English
/// sentences, the texts every encoder figure has been measured on) repeated.
fn minilm_repeated(texts: usize) -> Result<(crate::compute::encoder::Model, Vec<Vec<u32>>)> {
    use crate::compute::encoder;
    let model = encoder::parse_model(&encoder::minilm_bytes()?)?;
    let (_, _, ids) = encoder::minilm_heldout_ids(&model)?;
    let ids = ids[..60].iter().cycle().take(texts).cloned().collect();
    Ok((model, ids))
}

/// The keeper's encoder alone on a client's texts (`keeper bench --encoder-texts`): what
/// `keeper compute` spends in its `compute` phase, without the process, the model's parse and
/// pack, tokenization, commitment or output.
#[derive(Clone, Debug, Serialize)]
pub struct EncoderAlone {
    /// Texts embedded.
    pub texts: usize,
    /// Their tokens, `[CLS]` and `[SEP]` included.
    pub tokens: usize,
    /// The kernel set that ran (this machine's widest).
    pub kernels: String,
    /// Seconds for all of them (median of three runs after a warm one).
    pub seconds: f64,
    /// Texts a second.
    pub texts_per_s: f64,
    /// Tokens a second.
    pub tokens_per_s: f64,
}

/// [`EncoderAlone`] for the texts in `texts` (one a line, as `task post --texts` takes them)
/// through the encoder in `model` (a model file as `--model` takes it).
pub fn encoder_alone(model: &[u8], texts: &[u8]) -> Result<EncoderAlone> {
    use crate::compute::encoder::{self, cpu::Fast, gemm::KernelSet};
    let model = encoder::parse_model(model)?;
    let lines = encoder::texts_of(texts)?;
    let ids = encoder::tokenize(&model, &lines, model.encoder.positions())?;
    let refs: Vec<&[u32]> = ids.iter().map(Vec::as_slice).collect();
    let fast = Fast::new(std::sync::Arc::new(model.encoder), KernelSet::best());
    std::hint::black_box(encoder::embed_rows(&fast, &refs));
    let (_, seconds) = median_of(3, || {
        Ok(std::hint::black_box(encoder::embed_rows(&fast, &refs)))
    })?;
    let tokens: usize = ids.iter().map(Vec::len).sum();
    Ok(EncoderAlone {
        texts: ids.len(),
        tokens,
        kernels: fast.set().name().into(),
        seconds,
        texts_per_s: ids.len() as f64 / seconds,
        tokens_per_s: tokens as f64 / seconds,
    })
}

/// Text generation on this machine (`keeper bench --generate`): what `scripts/llm-bench` sets
/// beside llama.cpp on the same GGUF.
#[derive(Clone, Debug, Serialize)]
pub struct GenerationBench {
    /// Tokens of the prompt prefilled, in the chat template.
    pub prompt_tokens: usize,
    /// Their ids (a peer prefills the same).
    pub prompt_ids: Vec<u32>,
    /// Prefill: prompt tokens a second (one forward over the whole prompt).
    pub prefill_tokens_per_s: f64,
    /// New tokens of one completion (greedy, not stopped at the end of the turn).
    pub new_tokens: usize,
    /// One stream's decode: new tokens a second, the prefill not counted.
    pub decode_tokens_per_s: f64,
    /// Completions generated together.
    pub batch: usize,
    /// Their decode: new tokens a second over all of them, the prefill not counted.
    pub batch_tokens_per_s: f64,
    /// Seconds a provider takes for the one completion, prefill included.
    pub generate_seconds: f64,
    /// Seconds a verifier takes to check it (one teacher-forced prefill of prompt and
    /// completion, its logits at every completion position).
    pub verify_seconds: f64,
    /// `verify_seconds / generate_seconds` (the target is at most 1/10).
    pub verify_fraction: f64,
    /// The one completion's tokens (another path or machine must give the same).
    pub completion: Vec<u32>,
    /// Where it ran: this CPU's kernel set, or the device its dense layers and logits ran on.
    pub path: String,
}

/// [`GenerationBench`] for `prompt` through the decoder in `model` (a model file as `--model`
/// takes it) on this CPU: the prefill, `new` tokens of one stream, `batch` streams of `new`
/// tokens at once, and the verifier's check of the one completion.
pub fn generation(model: &[u8], prompt: &str, new: usize, batch: usize) -> Result<GenerationBench> {
    let model = crate::compute::decoder::parse_model(model)?;
    generation_on(
        &model,
        crate::compute::decoder::Path::Fast,
        prompt,
        new,
        batch,
    )
}

/// [`generation`] of a parsed model on `path` (a GPU's: `keeper gpu-check`).
pub fn generation_on(
    model: &crate::compute::decoder::Model,
    path: crate::compute::decoder::Path,
    prompt: &str,
    new: usize,
    batch: usize,
) -> Result<GenerationBench> {
    use crate::compute::decoder;
    anyhow::ensure!(
        new >= 1 && batch >= 1,
        "at least one new token and one stream"
    );
    let d = &model.decoder;
    let ids = model.prompt_ids(prompt)?;
    anyhow::ensure!(
        ids.len() + new <= d.positions(),
        "{} prompt and {new} new tokens are more than the model's {} positions",
        ids.len(),
        d.positions()
    );
    // no end of turn: every stream runs its `new` steps
    let never = |l: &[i64], _: usize| {
        let mut l = l.to_vec();
        l[model.eos as usize] = i64::MIN;
        compute_market_protocol::decoder::argmax(&l) as u32
    };
    let prefill = || {
        let mut c = d.cache();
        std::hint::black_box(model.forward(path, &ids, &mut c));
    };
    prefill();
    let t = std::time::Instant::now();
    prefill();
    let prefill_s = t.elapsed().as_secs_f64();
    let t = std::time::Instant::now();
    let one = decoder::generate_from(model, &ids, &[], new, path, &never);
    let generate_s = t.elapsed().as_secs_f64();
    let prompts: Vec<&[u32]> = (0..batch).map(|_| ids.as_slice()).collect();
    let picks: Vec<&decoder::Pick> = (0..batch).map(|_| &never as &decoder::Pick).collect();
    let t = std::time::Instant::now();
    std::hint::black_box(decoder::generate_many(model, &prompts, new, path, &picks));
    let batch_s = t.elapsed().as_secs_f64();
    // the verifier's check: one prefill of prompt and completion, every position's logits
    let t = std::time::Instant::now();
    let fed: Vec<u32> = ids.iter().chain(&one[..one.len() - 1]).copied().collect();
    let mut c = d.cache();
    let ys = model.forward(path, &fed, &mut c);
    let logits = model.logits(path, &ys[ids.len() - 1..]);
    let agree = logits
        .iter()
        .zip(&one)
        .enumerate()
        .all(|(i, (l, &t))| never(l, i) == t);
    let verify_s = t.elapsed().as_secs_f64();
    anyhow::ensure!(agree, "the prefill does not give the generated tokens");
    Ok(GenerationBench {
        prompt_tokens: ids.len(),
        prompt_ids: ids.clone(),
        prefill_tokens_per_s: ids.len() as f64 / prefill_s,
        new_tokens: new,
        decode_tokens_per_s: (new - 1) as f64 / (generate_s - prefill_s).max(1e-9),
        batch,
        batch_tokens_per_s: (batch * (new - 1)) as f64
            / (batch_s - prefill_s * batch as f64).max(1e-9),
        generate_seconds: generate_s,
        verify_seconds: verify_s,
        verify_fraction: verify_s / generate_s,
        completion: one,
        path: match path {
            decoder::Path::Offload(o) => o.name(),
            _ => format!("{:?}, {}", path, decoder::fast::best().name()),
        },
    })
}

/// The CPU clock the peak figures assume: the largest "cpu MHz" `/proc/cpuinfo` lists (2 GHz
/// where it lists none).
fn clock_hz() -> f64 {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .filter(|l| l.starts_with("cpu MHz"))
                .filter_map(|l| l.split(':').nth(1)?.trim().parse::<f64>().ok())
                .reduce(f64::max)
        })
        .map_or(2e9, |mhz| mhz * 1e6)
}

/// The encoder path this kernels replaced, kept for the side-by-side figure: the
/// reference's steps in int64 (`Encoder::embed_with`), each GEMM output channel by output
/// channel in the build's baseline vectors, text by text over the cores.
fn before_kernels(e: &compute_market_protocol::encoder::Encoder, ids: &[Vec<u32>]) -> Vec<u8> {
    use compute_market_protocol::encoder::Dense;
    use rayon::prelude::*;
    let gemm = |d: &Dense, x: &[i64], lo: i64, hi: i64| -> Vec<i64> {
        let xs: Vec<i16> = x.iter().map(|&v| v as i16).collect();
        let t = x.len() / d.inp;
        let mut y = vec![0i64; t * d.out];
        for (o, w) in d.weight.chunks_exact(d.inp).enumerate() {
            for (r, x) in xs.chunks_exact(d.inp).enumerate() {
                let dot = w.iter().zip(x).fold(0i32, |a, (&w, &x)| {
                    a.wrapping_add(i32::from(w).wrapping_mul(i32::from(x)))
                });
                y[r * d.out + o] = d.rq.apply(o, i64::from(d.bias[o]) + i64::from(dot), lo, hi);
            }
        }
        y
    };
    ids.par_iter()
        .flat_map_iter(|ids| {
            e.embed_with(ids, &gemm)
                .into_iter()
                .flat_map(i16::to_le_bytes)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The MiniLM encoder over `texts` texts (the first 60 held-out ones repeated), on every core:
/// first the path before the packed kernels ([`before_kernels`]), then the fast path by each
/// kernel set this machine runs: texts, tokens and multiply-adds a second, the share of the
/// set's peak, the speed over the path before, and the bits against it.
pub fn encoder_kernels(texts: usize) -> Result<Vec<EncoderKernelRow>> {
    use crate::compute::encoder::{self, cpu::Fast, gemm::KernelSet};
    let (model, ids) = minilm_repeated(texts)?;
    let e = std::sync::Arc::new(model.encoder);
    let (h, f, blocks) = (e.hidden as u64, e.ffn() as u64, e.blocks.len() as u64);
    let tokens: u64 = ids.iter().map(|t| t.len() as u64).sum();
    // per token: the six GEMMs; per text of T tokens: the scores and P·V (2 · T² · H)
    let macs: u64 = ids
        .iter()
        .map(|t| {
            let t = t.len() as u64;
            blocks * (t * (4 * h * h + 2 * h * f) + 2 * t * t * h)
        })
        .sum();
    let cores = rayon::current_num_threads() as f64;
    let clock = clock_hz();
    let mut rows: Vec<EncoderKernelRow> = vec![];
    let mut before: Option<(Vec<u8>, f64)> = None;
    let paths = std::iter::once(None).chain(KernelSet::here().into_iter().map(Some));
    for set in paths {
        let fast = set.map(|set| Fast::new(e.clone(), set));
        let run = || match &fast {
            Some(fast) => encoder::run_rows(fast, &ids, 0, ids.len()),
            None => before_kernels(&e, &ids),
        };
        let out = run();
        let (_, seconds) = median_of(3, || Ok(std::hint::black_box(run())))?;
        let (same_bits, over_before) = match &before {
            Some((bits, s)) => (*bits == out, s / seconds),
            None => (true, 1.0),
        };
        if before.is_none() {
            before = Some((out, seconds));
        }
        // the path before ran the baseline's vectors, as the scalar set does
        let per_cycle = set.unwrap_or(KernelSet::Scalar).macs_per_cycle();
        let peak = cores * f64::from(per_cycle) * clock;
        let macs_per_s = macs as f64 / seconds;
        rows.push(EncoderKernelRow {
            kernels: set.map_or("before", KernelSet::name).into(),
            texts,
            seconds,
            texts_per_s: texts as f64 / seconds,
            tokens_per_s: tokens as f64 / seconds,
            macs_per_s,
            peak_macs: peak,
            peak_fraction: macs_per_s / peak,
            over_before,
            same_bits,
            clock_hz: clock,
        });
    }
    Ok(rows)
}

/// One client input part fetched from a content store over loopback HTTP, hashed and parsed
/// ([`input_fetch`]), next to raw SHA-256 of the same bytes.
#[derive(Clone, Debug, Serialize)]
pub struct InputFetchRow {
    /// Bytes of the part.
    pub bytes: u64,
    /// Fetch (body read, SHA-256 checked, kept in the fetching store), MB/s.
    pub fetch_mb_s: f64,
    /// Parse and field check of the safetensors part, MB/s.
    pub parse_mb_s: f64,
    /// SHA-256 of the same bytes in memory, MB/s.
    pub sha256_mb_s: f64,
}

/// Measures [`InputFetchRow`] on an `n × n` matrix part: medians of [`VERIFY_RUNS`] fresh
/// fetches (each into an empty store, so nothing is a cache hit).
pub fn input_fetch(n: usize) -> Result<InputFetchRow> {
    use crate::{
        compute::{inputs, Matrix},
        results::{FetchPolicy, ResultStore},
    };
    use compute_market_protocol::manifest::Role;
    let m = Matrix {
        rows: n,
        cols: n,
        data: (0..(n * n) as u64)
            .map(|i| (splitmix(i) % compute_market_protocol::P) as u32)
            .collect(),
    };
    let part = inputs::matrix_file(Role::A, &m)?;
    let hash = inputs::content_hash(&part);
    let policy = FetchPolicy {
        allow_loopback: true,
        ..FetchPolicy::default()
    };
    let host = std::sync::Arc::new(ResultStore::default());
    host.content
        .put(&hash, &part, false)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let server = crate::results::serve(
        host,
        std::sync::Arc::new(crate::metrics::Metrics::default()),
        "127.0.0.1:0",
    )?;
    let base = vec![format!("http://{}", server.addr)];
    let (_, fetch_s) = median_of(VERIFY_RUNS, || {
        let fresh = ResultStore::default().with_policy(policy.clone());
        fresh
            .fetch_content(&base, &hash, part.len() as u64, None)
            .map_err(|e| anyhow::anyhow!("{e}"))
    })?;
    let mut job = JobSpec::matmul(n as u32, n as u32, n as u32, [0; 32]);
    job.input_mode = compute_market_protocol::job::InputMode::ContentHash;
    let (_, parse_s) = median_of(VERIFY_RUNS, || inputs::parse_matrix(&job, Role::A, &part))?;
    let (_, sha_s) = median_of(VERIFY_RUNS, || Ok(hashv(&[&part])))?;
    server.shutdown();
    let mb = part.len() as f64 / 1e6;
    Ok(InputFetchRow {
        bytes: part.len() as u64,
        fetch_mb_s: mb / fetch_s,
        parse_mb_s: mb / parse_s,
        sha256_mb_s: mb / sha_s,
    })
}

/// A loopback TCP relay to `upstream` that passes at most `bytes_per_s` toward the client (a
/// link of that speed, for the transfer rows). Its threads live as long as the process.
fn shaped_link(upstream: std::net::SocketAddr, bytes_per_s: f64) -> Result<std::net::SocketAddr> {
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    let addr = l.local_addr()?;
    std::thread::spawn(move || {
        for client in l.incoming().flatten() {
            let Ok(server) = std::net::TcpStream::connect(upstream) else {
                continue;
            };
            let (mut c_in, mut s_out) = match (client.try_clone(), server.try_clone()) {
                (Ok(c), Ok(s)) => (c, s),
                _ => continue,
            };
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut c_in, &mut s_out);
                let _ = s_out.shutdown(std::net::Shutdown::Write);
            });
            let (mut s_in, mut c_out) = (server, client);
            std::thread::spawn(move || {
                // each chunk takes its time on the link; an idle link earns at most 2 ms of
                // burst, and a sleep that overshoots is made up by the next chunks
                let burst = std::time::Duration::from_millis(2);
                let (mut free_at, mut buf) = (Instant::now(), vec![0u8; 16 << 10]);
                while let Ok(n) = s_in.read(&mut buf) {
                    if n == 0 || c_out.write_all(&buf[..n]).is_err() {
                        break;
                    }
                    let now = Instant::now();
                    if now > free_at + burst {
                        free_at = now - burst;
                    }
                    free_at += std::time::Duration::from_secs_f64(n as f64 / bytes_per_s);
                    if let Some(wait) = free_at.checked_duration_since(Instant::now()) {
                        std::thread::sleep(wait);
                    }
                }
                let _ = c_out.shutdown(std::net::Shutdown::Write);
            });
        }
    });
    Ok(addr)
}

/// The shaped links of the transfer rows, bytes per second: 1 Gbit/s (a data centre) and
/// 100 Mbit/s (a client's own host).
pub const LINKS: [(&str, f64); 2] = [("1 Gbit/s", 125e6), ("100 Mbit/s", 12.5e6)];

/// Loopback to `server`, then a [`shaped_link`] to it for each of [`LINKS`].
fn links_to(server: std::net::SocketAddr) -> Result<Vec<(String, std::net::SocketAddr)>> {
    let mut out = vec![("loopback".to_string(), server)];
    for (name, rate) in LINKS {
        out.push((name.to_string(), shaped_link(server, rate)?));
    }
    Ok(out)
}

/// One way of getting to a provider's submit, timed from its claim ([`claim_to_submit`]).
#[derive(Clone, Debug, Serialize)]
pub struct ClaimRow {
    /// Link to the client's content store ("loopback", "1 Gbit/s").
    pub link: String,
    /// Inputs fetched, hashed and checked after the claim, then computed and committed:
    /// seconds from claim to submit (median).
    pub fetch_after_s: f64,
    /// Inputs pre-fetched before the claim: the same, seconds (median).
    pub prefetched_s: f64,
}

/// Claim → submit for an `n × n · n × n` `MatMulModP` on a client's own matrices, with the
/// inputs fetched after the claim and with them pre-fetched (held) before it, side by side:
/// the time the provider's bond is at stake before its result can be submitted.
pub fn claim_to_submit(backend: &dyn Backend, n: usize) -> Result<Vec<ClaimRow>> {
    use crate::{
        compute::{inputs, Matrix},
        results::{FetchPolicy, ResultStore},
    };
    use compute_market_protocol::manifest::{Manifest, Part, Role};
    let matrix = |salt: u64| Matrix {
        rows: n,
        cols: n,
        data: (0..(n * n) as u64)
            .map(|i| (splitmix(i ^ (salt << 40)) % compute_market_protocol::P) as u32)
            .collect(),
    };
    let host = std::sync::Arc::new(ResultStore::default());
    let mut parts = vec![];
    for (role, salt) in [(Role::A, 1), (Role::B, 2)] {
        let f = inputs::matrix_file(role, &matrix(salt))?;
        let part = Part::safetensors(role, &f);
        host.content
            .put(&part.hash, &f, false)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        parts.push(part);
    }
    let manifest = Manifest::new(parts).encode();
    let mhash = inputs::content_hash(&manifest);
    host.content
        .put(&mhash, &manifest, false)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut job = JobSpec::matmul(n as u32, n as u32, n as u32, mhash);
    job.input_mode = compute_market_protocol::job::InputMode::ContentHash;
    let server = crate::results::serve(
        host,
        std::sync::Arc::new(crate::metrics::Metrics::default()),
        "127.0.0.1:0",
    )?;
    let policy = FetchPolicy {
        allow_loopback: true,
        ..FetchPolicy::default()
    };
    let links = links_to(server.addr)?;
    let mut rows = vec![];
    for (link, addr) in links {
        let bases = vec![format!("http://{addr}")];
        let submit_ready = |store: &ResultStore| -> Result<Digest> {
            store
                .ensure_inputs(&job, &bases, None)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            Ok(commit(&backend.run(&job)?).root())
        };
        let (_, after) = median_of(3, || {
            let fresh = ResultStore::default().with_policy(policy.clone());
            inputs::release(&mhash);
            submit_ready(&fresh)
        })?;
        // the fetch happens before the clock starts
        let mut ahead = vec![];
        for _ in 0..3 {
            let fresh = ResultStore::default().with_policy(policy.clone());
            inputs::release(&mhash);
            fresh
                .ensure_inputs(&job, &bases, None)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            let t = Instant::now();
            submit_ready(&fresh)?;
            ahead.push(secs(t));
        }
        ahead.sort_by(f64::total_cmp);
        let ahead = ahead[1];
        rows.push(ClaimRow {
            link,
            fetch_after_s: after,
            prefetched_s: ahead,
        });
    }
    inputs::release(&mhash);
    server.shutdown();
    Ok(rows)
}

/// One output fetched whole (`/all`) with and without compression ([`transfer`]).
#[derive(Clone, Debug, Serialize)]
pub struct TransferRow {
    /// What the output is.
    pub output: String,
    /// Link ("loopback", "1 Gbit/s").
    pub link: String,
    /// Bytes of the output.
    pub bytes: u64,
    /// Bytes on the wire asking for zstd.
    pub zstd_wire: u64,
    /// Seconds asking for zstd (decompression included), median.
    pub zstd_s: f64,
    /// Bytes on the wire asking for identity.
    pub identity_wire: u64,
    /// Seconds asking for identity, median.
    pub identity_s: f64,
}

/// A whole `n × n` `MatMulModP` output fetched from a provider's server asking for zstd and
/// asking for identity, side by side, over loopback and a shaped link: a compressible output
/// (elements below 256, as small integer activations are) and an incompressible one (random
/// field elements, which the server sends uncompressed whatever is asked).
pub fn transfer(n: u32) -> Result<Vec<TransferRow>> {
    use crate::results::ResultStore;
    let job = JobSpec::matmul(n, n, n, [9; 32]);
    let outputs = [
        ("elements below 256", 256u64),
        ("random field elements", compute_market_protocol::P),
    ];
    let store = std::sync::Arc::new(ResultStore::default());
    let mut published = vec![];
    for (i, (name, modulus)) in outputs.iter().enumerate() {
        let tiles: Vec<Vec<u8>> = (0..job.tile_count() as u64)
            .map(|t| {
                (0..job.tile_len() as u64 / 4)
                    .flat_map(|j| {
                        ((splitmix(t << 20 ^ j ^ (i as u64) << 50) % modulus) as u32).to_le_bytes()
                    })
                    .collect()
            })
            .collect();
        let bytes = tiles.iter().map(|t| t.len() as u64).sum::<u64>();
        let (root, _) = store.publish([i as u8; 32], job, tiles)?;
        published.push((name.to_string(), crate::results::hex(&root), bytes));
    }
    let server = crate::results::serve(
        store.clone(),
        std::sync::Arc::new(crate::metrics::Metrics::default()),
        "127.0.0.1:0",
    )?;
    let links = links_to(server.addr)?;
    // raw bytes on the wire: this client decompresses nothing itself
    let http = reqwest::blocking::Client::builder()
        .no_zstd()
        .no_gzip()
        .no_proxy()
        .build()?;
    let mut rows = vec![];
    for (link, addr) in &links {
        for (output, root, bytes) in &published {
            let url = format!("http://{addr}/r/{root}/all");
            let get = |encoding: &str| -> Result<u64> {
                let r = http
                    .get(&url)
                    .header(reqwest::header::ACCEPT_ENCODING, encoding)
                    .send()?
                    .error_for_status()?;
                let zstd = r
                    .headers()
                    .get(reqwest::header::CONTENT_ENCODING)
                    .is_some_and(|v| v == "zstd");
                let wire = r.bytes()?;
                let body = if zstd {
                    zstd::stream::decode_all(&wire[..])?
                } else {
                    wire.to_vec()
                };
                anyhow::ensure!(
                    body.len() as u64 >= *bytes,
                    "{output}: {} bytes came back, the output is {bytes}",
                    body.len()
                );
                Ok(wire.len() as u64)
            };
            let (zstd_wire, zstd_s) = median_of(3, || get("zstd"))?;
            let (identity_wire, identity_s) = median_of(3, || get("identity"))?;
            rows.push(TransferRow {
                output: output.clone(),
                link: link.clone(),
                bytes: *bytes,
                zstd_wire,
                zstd_s,
                identity_wire,
                identity_s,
            });
        }
    }
    server.shutdown();
    Ok(rows)
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
    let rs: Vec<Vec<u32>> = (0..crate::verify::FREIVALDS_ROUNDS)
        .map(|r| compute_market_protocol::sampling::freivalds_vector(&seed, &me, r, n))
        .collect();
    let check_parts = CheckParts {
        hash_s: median_of(VERIFY_RUNS, || Ok(commit(&tiles).root()))?.1,
        c_r_s: median_of(VERIFY_RUNS, || {
            crate::compute::freivalds::c_times(&job, &tiles, &rs)
        })?
        .1,
        a_b_r_s: median_of(VERIFY_RUNS, || backend.freivalds(&job, &rs))?.1,
    };
    let mut row = JobRow::new(
        backend,
        &job,
        format!("n={n}"),
        compute_s,
        verify_s,
        &honest,
        &caught,
    )
    .against(backend, &job, &tiles, reference)?;
    row.check_parts = Some(check_parts);
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
    sampled_row(
        backend,
        &job,
        format!("tiles={tiles}×{nonces}×{iterations}"),
        reference,
    )
}

/// A job checked by sampled tiles (`HashBatch`, `Mlp`): every tile and the commitment computed,
/// against one verifier's check of its k sampled tiles (median of [`VERIFY_RUNS`]), and the
/// same check refusing a result whose first sampled tile is corrupted.
fn sampled_row(
    backend: &dyn Backend,
    job: &JobSpec,
    size: String,
    reference: Option<&[Vec<u8>]>,
) -> Result<(JobRow, Vec<Vec<u8>>)> {
    let t = Instant::now();
    let out = backend.run(job)?;
    let tree = commit(&out);
    let compute_s = secs(t);
    let proven = served(&out, &tree);
    let (honest, verify_s) = median_of(VERIFY_RUNS, || {
        check_sampled(backend, job, &picked(out.len()), &proven, &tree.root())
    })?;
    // corrupt exactly the first sampled tile
    let mut bad = out.clone();
    bad[proven[0].index as usize][0] ^= 1;
    let bad_tree = commit(&bad);
    let caught = check_sampled(
        backend,
        job,
        &picked(bad.len()),
        &served(&bad, &bad_tree),
        &bad_tree.root(),
    )?;
    let row = JobRow::new(backend, job, size, compute_s, verify_s, &honest, &caught)
        .against(backend, job, &out, reference)?;
    Ok((row, out))
}

/// The digits MLP over `rows` rows (the held-out split repeated), 8 rows per tile: computing
/// every tile and the commitment against one verifier's check of its k sampled tiles. The
/// inputs are held first (as a provider holds them before it claims).
pub fn mlp(
    backend: &dyn Backend,
    rows: u32,
    reference: Option<&[Vec<u8>]>,
) -> Result<(JobRow, Vec<Vec<u8>>)> {
    use crate::compute::{
        inputs,
        mlp::{self, DIGITS_HELDOUT, DIGITS_MODEL},
    };
    let held = safetensors::SafeTensors::deserialize(DIGITS_HELDOUT)
        .map_err(|e| anyhow::anyhow!("the held-out digits: {e}"))?;
    let x = held
        .tensor("x")
        .map_err(|e| anyhow::anyhow!("the held-out digits: {e}"))?;
    let features = x.shape()[1];
    let model = mlp::parse_model(DIGITS_MODEL, features, 10)?;
    let batch = mlp::Batch {
        rows: rows as usize,
        features,
        x: x.data()
            .iter()
            .cycle()
            .take(rows as usize * features)
            .map(|&b| b as i8)
            .collect(),
    };
    let job = JobSpec::mlp(
        rows,
        features as u32,
        10,
        model.work_per_row(),
        8,
        hashv(&[b"bench mlp", &rows.to_le_bytes()]),
    );
    inputs::hold_mlp(
        job.input,
        inputs::MlpInputs {
            model: std::sync::Arc::new(model),
            batch: std::sync::Arc::new(batch),
        },
    );
    let r = sampled_row(backend, &job, format!("digits rows={rows}"), reference);
    inputs::release(&job.input);
    r
}

/// The MiniLM encoder over `texts` texts (the first 60 held-out ones, English sentences,
/// repeated: the texts every earlier figure was measured on), two texts a tile (the
/// default): computing every tile and the commitment against one verifier's check of its k
/// sampled tiles. The inputs are held first, tokenized, as a provider holds them.
pub fn encoder(
    backend: &dyn Backend,
    texts: u32,
    reference: Option<&[Vec<u8>]>,
) -> Result<(JobRow, Vec<Vec<u8>>)> {
    use crate::compute::inputs;
    let (model, ids) = minilm_repeated(texts as usize)?;
    let longest = ids.iter().map(Vec::len).max().unwrap_or(1) as u32;
    let e = &model.encoder;
    let job = JobSpec::encoder(
        texts,
        longest,
        e.hidden as u32,
        e.work_per_token(longest as usize),
        crate::clientdata::ENCODER_ROWS_PER_TILE,
        hashv(&[b"bench encoder", &texts.to_le_bytes()]),
    );
    inputs::hold_encoder(job.input, inputs::EncoderInputs::new(model.encoder, ids));
    let r = sampled_row(backend, &job, format!("MiniLM texts={texts}"), reference);
    inputs::release(&job.input);
    r
}

/// `tiles` tiles of 16 KiB (a `MatMulModP` output of (64·√tiles)²) of pseudo-random bytes.
fn bench_tiles(tiles: u32) -> Vec<Vec<u8>> {
    const TILE: usize = 16 * 1024;
    (0..tiles)
        .map(|i| {
            (0..TILE)
                .map(|j| (splitmix(i as u64 * 65_537 + j as u64) & 0xff) as u8)
                .collect()
        })
        .collect()
}

/// Runs of each hashing figure (each takes a few milliseconds; a shared machine's noise needs
/// more of them than the jobs do).
pub const HASH_RUNS: usize = 11;

/// Runs `f` on a pool of `threads` threads: the median of [`HASH_RUNS`] runs after a first
/// one (which touches the data), seconds.
fn median_on<T: Send>(threads: usize, f: &(dyn Fn() -> T + Sync)) -> Result<f64> {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()?;
    pool.install(|| {
        std::hint::black_box(f());
        Ok(median_of(HASH_RUNS, || Ok(std::hint::black_box(f())))?.1)
    })
}

/// The commitment over `tiles` tiles of 16 KiB on every core against raw BLAKE3 over the same
/// bytes in one buffer (one thread, and `update_rayon` on every core).
pub fn merkle(tiles: u32) -> Result<MerkleRow> {
    let data = bench_tiles(tiles);
    let whole = data.concat();
    let threads = rayon::current_num_threads();
    let merkle_s = median_on(threads, &|| commit(&data).root())?;
    let raw_s = median_on(1, &|| blake3::hash(&whole))?;
    let raw_par_s = median_on(threads, &|| {
        blake3::Hasher::new().update_rayon(&whole).finalize()
    })?;
    let mb = whole.len() as f64 / 1e6;
    Ok(MerkleRow {
        bytes: whole.len() as u64,
        tiles,
        threads,
        merkle_mb_s: mb / merkle_s,
        raw_mb_s: mb / raw_s,
        raw_par_mb_s: mb / raw_par_s,
    })
}

/// A binary tree with promotion over `leaves`, inner nodes from `node` (the forms the
/// commitment was chosen against).
fn levels_of(leaves: Vec<Digest>, node: fn(&Digest, &Digest) -> Digest) -> Vec<Vec<Digest>> {
    let mut levels = vec![leaves];
    while levels.last().map_or(0, Vec::len) > 1 {
        let next = levels
            .last()
            .expect("a level")
            .chunks(2)
            .map(|c| {
                if c.len() == 2 {
                    node(&c[0], &c[1])
                } else {
                    c[0]
                }
            })
            .collect();
        levels.push(next);
    }
    levels
}

/// Whether `leaf` climbs to the top of `levels` at `index` through `node`.
fn climbs(
    levels: &[Vec<Digest>],
    index: u32,
    leaf: Digest,
    node: fn(&Digest, &Digest) -> Digest,
) -> bool {
    let (mut acc, mut j) = (leaf, index as usize);
    for level in &levels[..levels.len() - 1] {
        if let Some(sib) = level.get(j ^ 1) {
            acc = if j & 1 == 0 {
                node(&acc, sib)
            } else {
                node(sib, &acc)
            };
        }
        j /= 2;
    }
    acc == levels.last().expect("a root")[0]
}

fn sha_leaf(i: u32, t: &[u8]) -> Digest {
    hashv(&[&[0u8], &i.to_le_bytes(), t])
}
fn sha_node(l: &Digest, r: &Digest) -> Digest {
    hashv(&[&[1u8], l, r])
}
fn b3_leaf(i: u32, t: &[u8]) -> Digest {
    *blake3::Hasher::new()
        .update(&[0])
        .update(&i.to_le_bytes())
        .update(t)
        .finalize()
        .as_bytes()
}
fn b3_node(l: &Digest, r: &Digest) -> Digest {
    *blake3::Hasher::new()
        .update(&[1])
        .update(l)
        .update(r)
        .finalize()
        .as_bytes()
}

/// The commitment forms side by side on `tiles` tiles of 16 KiB, 1 and 2 threads, `k` proofs
/// checked: the commitment (BLAKE3 of the output, a tile an aligned subtree, PROTOCOL §5); the
/// SHA-256 tree it replaced (leaf = SHA-256(0 ‖ i ‖ tile), node = SHA-256(1 ‖ l ‖ r), SHA-NI
/// where the CPU has it); BLAKE3 per-tile leaves with BLAKE3 nodes. The whole-root check is the
/// commit's work. Medians of [`HASH_RUNS`] runs.
pub fn hash_forms(tiles: u32, k: u32) -> Result<Vec<HashFormRow>> {
    use rayon::prelude::*;
    let data = bench_tiles(tiles);
    let mb = data.iter().map(Vec::len).sum::<usize>() as f64 / 1e6;
    let picks: Vec<u32> = (0..k).map(|i| i * 7919 % tiles).collect();
    let tree = commit(&data);
    anyhow::ensure!(
        tree.root() == *blake3::hash(&data.concat()).as_bytes(),
        "the commitment is not BLAKE3 of the output"
    );
    type Leaf = fn(u32, &[u8]) -> Digest;
    type Node = fn(&Digest, &Digest) -> Digest;
    let others: [(&str, Leaf, Node); 2] = [
        (
            "SHA-256 Merkle tree (the commitment before)",
            sha_leaf,
            sha_node,
        ),
        ("BLAKE3 per-tile leaves + BLAKE3 nodes", b3_leaf, b3_node),
    ];
    let leaves_of = |leaf: Leaf| -> Vec<Digest> {
        data.par_iter()
            .enumerate()
            .map(|(i, t)| leaf(i as u32, t))
            .collect()
    };
    let mut rows = vec![];
    for threads in [1, 2] {
        let root_s = median_on(threads, &|| commit(&data).root())?;
        let proofs_s = median_on(threads, &|| {
            for &i in &picks {
                let leaf = leaf_hash(i, tiles, &data[i as usize]);
                let proof = tree.proof(i).expect("in range");
                assert!(verify_proof(&tree.root(), i, tiles, &leaf, &proof));
            }
        })?;
        rows.push(HashFormRow {
            form: "BLAKE3 of the output, tile = subtree (the commitment)".into(),
            threads,
            root_mb_s: mb / root_s,
            k_proofs_us: proofs_s * 1e6,
        });
        for (form, leaf, node) in others {
            let levels = levels_of(leaves_of(leaf), node);
            let root_s = median_on(threads, &|| levels_of(leaves_of(leaf), node).pop())?;
            let proofs_s = median_on(threads, &|| {
                for &i in &picks {
                    assert!(climbs(&levels, i, leaf(i, &data[i as usize]), node));
                }
            })?;
            rows.push(HashFormRow {
                form: form.into(),
                threads,
                root_mb_s: mb / root_s,
                k_proofs_us: proofs_s * 1e6,
            });
        }
    }
    Ok(rows)
}

fn splitmix(x: u64) -> u64 {
    compute_market_protocol::job::splitmix64(x)
}

/// Size of the claim → submit rows' job: n = 1024 (two 4 MiB input parts).
pub const CLAIM_N: usize = 1024;

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
    for rows in [4096, 65_536] {
        let mut reference: Option<Vec<Vec<u8>>> = None;
        for b in backends {
            tracing::info!(rows, backend = b.name(), "Mlp");
            let (row, out) = mlp(b.as_ref(), rows, reference.as_deref())?;
            jobs.push(row);
            reference.get_or_insert(out);
        }
    }
    let mut skipped = vec![];
    let mut encoder_kernel_rows = vec![];
    let minilm = crate::compute::encoder::minilm_path();
    if minilm.exists() {
        tracing::info!(texts = 1024, "Encoder by kernel set");
        encoder_kernel_rows = encoder_kernels(1024)?;
        let mut reference: Option<Vec<Vec<u8>>> = None;
        for b in backends {
            tracing::info!(texts = 1024, backend = b.name(), "Encoder");
            let (row, out) = encoder(b.as_ref(), 1024, reference.as_deref())?;
            jobs.push(row);
            reference.get_or_insert(out);
        }
    } else {
        let why = format!(
            "Encoder (MiniLM): no model at {} (scripts/minilm-model makes it)",
            minilm.display()
        );
        tracing::warn!("{why}");
        skipped.push(why);
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
        merkle: merkle(1024)?,
        hashes: hash_forms(1024, 16)?,
        simd: crate::compute::freivalds::simd_level().to_string(),
        input_fetch: input_fetch(2048)?,
        claim_to_submit: claim_to_submit(backends[0].as_ref(), CLAIM_N)?,
        claim_n: CLAIM_N,
        transfer: transfer(1024)?,
        skipped,
        encoder_kernels: encoder_kernel_rows,
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
    for j in r.jobs.iter().filter(|j| j.rows_per_s.is_some()) {
        s += &format!(
            "{} {} {}: {:.0} {} per second\n",
            j.kind,
            j.size,
            j.backend,
            j.rows_per_s.unwrap_or(0.0),
            if j.kind == "Encoder" {
                "sentences"
            } else {
                "rows"
            }
        );
    }
    for why in &r.skipped {
        s += &format!("not measured: {why}\n");
    }
    s += &format!("CPU verifier kernels: {}\n", r.simd);
    if let Some(k) = r.encoder_kernels.first() {
        s += &format!(
            "Encoder (MiniLM, {} texts, the first 60 held-out repeated), every core: the path before the packed kernels (int64 steps, GEMMs channel by channel), then the fast path by kernel set; peak = cores × int16 multiply-adds a cycle (two vector pipes: 16 for the baseline, 32 for AVX2 and up) × {:.2} GHz:\n",
            k.texts,
            k.clock_hz / 1e9
        );
    }
    for k in &r.encoder_kernels {
        s += &format!(
            "  {:<12} {:>7.1} texts/s {:>9.0} tokens/s {:>8.2} G mul-adds/s {:>5.1}% of {:.0} G  {:>5.2}× before  same bits: {}\n",
            k.kernels,
            k.texts_per_s,
            k.tokens_per_s,
            k.macs_per_s / 1e9,
            100.0 * k.peak_fraction,
            k.peak_macs / 1e9,
            k.over_before,
            if k.same_bits { "yes" } else { "NO" }
        );
    }
    for j in &r.jobs {
        if let Some(p) = &j.check_parts {
            s += &format!(
                "  check parts, {} {}, each alone: root over C {:.2} ms, C·r {:.2} ms, A·(B·r) {:.2} ms (the check: {:.2} ms)\n",
                j.size,
                j.backend,
                p.hash_s * 1e3,
                p.c_r_s * 1e3,
                p.a_b_r_s * 1e3,
                j.verify_s * 1e3
            );
        }
    }
    let m = &r.merkle;
    s += &format!(
        "\nCommitment of {} tiles ({:.1} MB) on {} threads: {:.0} MB/s; raw BLAKE3 over the same bytes in one buffer: {:.0} MB/s on one thread, {:.0} MB/s on {} (commit / raw {:.2})\n",
        m.tiles,
        m.bytes as f64 / 1e6,
        m.threads,
        m.merkle_mb_s,
        m.raw_mb_s,
        m.raw_par_mb_s,
        m.threads,
        m.merkle_mb_s / m.raw_par_mb_s
    );
    s += &format!(
        "\nCommitment forms, {:.1} MB of tiles (16 KiB each), side by side (× = whole-root check against the SHA-256 tree):\n{:<56} {:>7} {:>16} {:>14}\n",
        m.bytes as f64 / 1e6,
        "form",
        "threads",
        "root MB/s",
        "16 proofs µs"
    );
    let base = |threads: usize| {
        r.hashes
            .iter()
            .find(|h| h.threads == threads && h.form.starts_with("SHA-256"))
            .map_or(1.0, |h| h.root_mb_s)
    };
    for h in &r.hashes {
        s += &format!(
            "{:<56} {:>7} {:>9.0} ({:.2}×) {:>14.1}\n",
            h.form,
            h.threads,
            h.root_mb_s,
            h.root_mb_s / base(h.threads),
            h.k_proofs_us
        );
    }
    let f = &r.input_fetch;
    s += &format!(
        "\nA client's input part ({:.1} MB, a 2048 × 2048 U32 safetensors) fetched over loopback, hashed and kept: {:.0} MB/s; parsed and field-checked: {:.0} MB/s; raw SHA-256 of the same bytes: {:.0} MB/s\n",
        f.bytes as f64 / 1e6,
        f.fetch_mb_s,
        f.parse_mb_s,
        f.sha256_mb_s
    );
    s += &format!(
        "\nClaim → submit, MatMulModP n = {} on a client's two {:.1} MB parts (fetch, hash, check, compute, commit), medians of 3:\n{:<12} {:>18} {:>16} {:>8}\n",
        r.claim_n,
        (8 + r.claim_n * r.claim_n * 4) as f64 / 1e6,
        "link",
        "fetched after, s",
        "pre-fetched, s",
        "ratio"
    );
    for c in &r.claim_to_submit {
        s += &format!(
            "{:<12} {:>18.3} {:>16.3} {:>7.2}×\n",
            c.link,
            c.fetch_after_s,
            c.prefetched_s,
            c.fetch_after_s / c.prefetched_s
        );
    }
    s += &format!(
        "\nA whole output fetched (/all, n = 1024), asking for zstd and for identity, medians of 3 (a link is shaped to at most its speed; plain MB/s is what it carried):\n{:<24} {:<12} {:>10} {:>12} {:>9} {:>12} {:>9} {:>10} {:>8}\n",
        "output", "link", "bytes", "zstd wire", "zstd s", "plain wire", "plain s", "plain MB/s", "zstd ×"
    );
    for t in &r.transfer {
        s += &format!(
            "{:<24} {:<12} {:>10} {:>12} {:>9.3} {:>12} {:>9.3} {:>10.0} {:>7.2}×\n",
            t.output,
            t.link,
            t.bytes,
            t.zstd_wire,
            t.zstd_s,
            t.identity_wire,
            t.identity_s,
            t.identity_wire as f64 / t.identity_s / 1e6,
            t.identity_s / t.zstd_s
        );
    }
    s
}

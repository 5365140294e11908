//! `keeper gpu-check`: what `scripts/gpu-check.sh` runs on a GPU machine. Opens the CUDA
//! backend twice (cold: kernels compiled; warm: read from the disk cache), checks every kernel
//! against the CPU reference bit for bit over [`identity_suite`] (sizes that are and are not
//! multiples of the tile) on each `MatMulModP` kernel the GPU has, times each kernel alone at
//! the largest size, then benchmarks CPU and GPU side by side. The report is one JSON document
//! and a short text summary.

use std::{
    sync::{atomic::Ordering, Arc},
    time::Instant,
};

use anyhow::{Context, Result};
use compute_market_protocol::job::{matrix_element, JobKind, JobSpec};
use serde::Serialize;

use crate::{
    bench::{self, BenchReport},
    compute::{
        cpu::CpuBackend,
        cuda::{self, CudaBackend, MatmulKernel},
        Backend,
    },
};

/// The jobs whose outputs must equal the CPU's bit for bit. The `Mlp` ones run the synthetic
/// model, whose inputs this holds (under manifests of its own).
pub fn identity_suite() -> Vec<JobSpec> {
    let mut jobs: Vec<JobSpec> = [
        (1, 1, 1),
        (63, 65, 127),
        (64, 64, 64),
        (130, 70, 200),
        (1000, 513, 1025),
        (2048, 2048, 2048),
        (4095, 31, 4097),
    ]
    .into_iter()
    .enumerate()
    .map(|(i, (m, k, n))| JobSpec::matmul(m, k, n, [i as u8 + 1; 32]))
    .collect();
    jobs.extend(
        [(1, 1, 1), (7, 3, 5), (300, 64, 16), (4096, 64, 4)]
            .into_iter()
            .enumerate()
            .map(|(i, (t, nn, it))| JobSpec::hash_batch(t, nn, it, [i as u8 + 50; 32])),
    );
    // under manifests nobody can name ahead (this process's id and clock); the caller
    // releases them
    let nonce = format!("{:?} {}", std::time::SystemTime::now(), std::process::id());
    for rows in [1, 37, 4099] {
        let manifest = compute_market_protocol::hash::hashv(&[
            b"gpu-check mlp",
            nonce.as_bytes(),
            &(rows as u64).to_le_bytes(),
        ]);
        jobs.push(crate::compute::inputs::hold_synthetic(rows, manifest));
    }
    // the encoder: the self-test's odd widths (texts up to 512 tokens), and a MiniLM-sized
    // random one over 600 texts of 1 to 128 tokens (many launches' grids)
    let mut cases = crate::compute::encoder::odd_encoders();
    cases.push((
        compute_market_protocol::encoder::RandomShape {
            hidden: 384,
            heads: 12,
            ffn: 1536,
            blocks: 2,
            vocab: 1000,
            positions: 128,
        },
        (0..600usize)
            .map(|i| {
                let t = 1 + (i * 37) % 128;
                (0..t).map(|p| ((i * 131 + p * 7) % 1000) as u32).collect()
            })
            .collect(),
    ));
    for (k, (shape, texts)) in cases.into_iter().enumerate() {
        let e = compute_market_protocol::encoder::random_encoder(shape, 9);
        let longest = texts.iter().map(Vec::len).max().unwrap_or(1);
        let manifest = compute_market_protocol::hash::hashv(&[
            b"gpu-check encoder",
            nonce.as_bytes(),
            &(k as u64).to_le_bytes(),
        ]);
        let job = JobSpec::encoder(
            texts.len() as u32,
            longest as u32,
            e.hidden as u32,
            e.work_per_token(longest),
            8,
            manifest,
        );
        crate::compute::inputs::hold_encoder(
            manifest,
            crate::compute::inputs::EncoderInputs::new(e, texts),
        );
        jobs.push(job);
    }
    // text generation: random decoders of odd shapes (no model file needed), 11 prompts of 1
    // to 14 tokens in tiles of 2, greedy on one and sampled on the other
    use crate::compute::decoder::{job, random};
    for (k, shape) in random::ODD_SHAPES.into_iter().enumerate() {
        let model = random::random_model(shape, 7 + k as u64);
        let (vocab, g) = (shape[6] as u32, 8u32);
        let ids: Vec<Vec<u32>> = (0..11u32)
            .map(|i| {
                (0..1 + (i * 5) % 14)
                    .map(|p| (i * 13 + p * 7 + 1) % vocab)
                    .collect()
            })
            .collect();
        let longest = ids.iter().map(Vec::len).max().unwrap_or(1) as u32;
        let sampling = compute_market_protocol::decoder::Sampling {
            temperature: if k == 0 { 0 } else { 200 },
            top_k: if k == 0 { 0 } else { 5 },
            top_p: if k == 0 { 65_536 } else { 60_000 },
            seed: 4,
        };
        let manifest = compute_market_protocol::hash::hashv(&[
            b"gpu-check generate",
            nonce.as_bytes(),
            &(k as u64).to_le_bytes(),
        ]);
        let spec = JobSpec::generate(
            ids.len() as u32,
            longest,
            g,
            model.work_per_token((longest + g) as usize),
            2,
            manifest,
        );
        crate::compute::inputs::hold_generate(
            manifest,
            job::GenerateInputs {
                model: Arc::new(model),
                prompts: Arc::new(job::Prompts {
                    texts: vec![String::new(); ids.len()],
                    ids,
                    sampling,
                }),
            },
        );
        jobs.push(spec);
    }
    jobs
}

/// One job of the identity suite.
#[derive(Clone, Debug, Serialize)]
pub struct IdentityRow {
    /// Kind and dimensions.
    pub job: String,
    /// Every tile equal.
    pub tiles_equal: bool,
    /// Freivalds products equal (`MatMulModP` only).
    pub freivalds_equal: Option<bool>,
    /// Seconds the CPU backend took for the whole job (every tile, inputs held).
    pub cpu_s: f64,
    /// Seconds the GPU backend took for it.
    pub gpu_s: f64,
}

/// One `MatMulModP` kernel timed alone (inputs and their byte planes already on the device).
#[derive(Clone, Debug, Serialize)]
pub struct KernelRow {
    /// [`MatmulKernel::name`].
    pub kernel: String,
    /// The job's side n.
    pub n: u32,
    /// Seconds of one launch over the whole job (best of 3).
    pub seconds: f64,
    /// Multiply-adds mod p per second.
    pub mad_per_s: f64,
    /// `mad_per_s` over the device's int32 multiply-add peak (the tensor-core kernel, which
    /// runs sixteen 8-bit products per multiply-add mod p, may pass 1).
    pub peak_fraction: f64,
}

/// The whole GPU check.
#[derive(Clone, Debug, Serialize)]
pub struct GpuReport {
    /// Devices in use: ordinal, name, compute capability, SMs, clock MHz, memory GiB.
    pub devices: Vec<String>,
    /// Devices the self-test disabled.
    pub disabled: Vec<String>,
    /// Devices whose tensor-core kernel failed the self-test (they use the CUDA cores).
    pub fallbacks: Vec<String>,
    /// The `MatMulModP` kernel the self-test chose (the bench's).
    pub matmul_kernel: String,
    /// Where `Encoder` jobs run: on the GPU's kernels, or on the CPU path with why.
    pub encoder: String,
    /// Where `Generate` jobs' dense layers and logits run: on the GPU's kernels, or on the CPU
    /// path with why.
    pub decoder: String,
    /// SmolLM2 on the CPU's fast path and with its dense layers and logits on the GPU, side by
    /// side (when the model is here: `scripts/smollm2-model` makes it), or why not.
    pub generation: Result<[bench::GenerationBench; 2], String>,
    /// Each `MatMulModP` kernel alone at the largest size.
    pub kernels: Vec<KernelRow>,
    /// Seconds to open the backend the first time (kernels compiled unless already cached).
    pub cold_start_s: f64,
    /// Whether the first open found its kernels in the disk cache.
    pub cold_start_cached: bool,
    /// Seconds to open it again (kernels from the disk cache).
    pub warm_start_s: f64,
    /// Bit identity per job.
    pub identity: Vec<IdentityRow>,
    /// All of them equal.
    pub bit_identical: bool,
    /// CPU and GPU side by side.
    pub bench: BenchReport,
}

/// Runs the check (fails when there is no usable GPU, saying why).
pub fn run(sizes: &[u32]) -> Result<GpuReport> {
    cuda::probe().map_err(|why| anyhow::anyhow!("no usable GPU: {why}"))?;
    let t = Instant::now();
    let first = CudaBackend::open().context("opening the GPUs")?;
    let cold_start_s = t.elapsed().as_secs_f64();
    let cold_start_cached = first.devices.iter().all(|d| d.cached);
    drop(first);
    let t = Instant::now();
    let gpu = Arc::new(CudaBackend::open().context("opening the GPUs again")?);
    let warm_start_s = t.elapsed().as_secs_f64();
    let devices = gpu
        .devices
        .iter()
        .map(|d| {
            format!(
                "{}: {} (sm_{}{}, {} SMs, {} MHz, {:.0} GiB)",
                d.ordinal,
                d.name,
                d.capability.0,
                d.capability.1,
                d.sms,
                d.clock_khz / 1000,
                d.memory as f64 / (1u64 << 30) as f64
            )
        })
        .collect();
    let disabled = gpu
        .disabled
        .iter()
        .map(|(o, why)| format!("{o}: {why}"))
        .collect();
    let fallbacks = gpu
        .fallbacks
        .iter()
        .map(|(o, why)| format!("{o}: {why}"))
        .collect();
    // each device's kernel as its self-test left it, restored before the bench
    let chosen: Vec<MatmulKernel> = gpu.devices.iter().map(|d| d.matmul_kernel()).collect();
    let preferred = chosen[0];
    let kernels = gpu.matmul_kernels();
    let mut identity = vec![];
    let suite = identity_suite();
    for &job in &suite {
        let t = Instant::now();
        let want = CpuBackend.run(&job)?;
        let cpu_s = t.elapsed().as_secs_f64();
        // MatMulModP on every kernel; the Freivalds products do not depend on it
        let on: Vec<Option<MatmulKernel>> = if job.kind == JobKind::MatMulModP {
            kernels.iter().copied().map(Some).collect()
        } else {
            vec![None]
        };
        for (i, kernel) in on.into_iter().enumerate() {
            if let Some(k) = kernel {
                gpu.use_matmul_kernel(k)?;
            }
            let on = match (kernel, job.kind) {
                (Some(k), _) => format!(" on the {} kernel", k.name()),
                (None, JobKind::Mlp) => match &gpu.mlp_on_gpu {
                    Ok(()) => " on the dp4a kernel".into(),
                    Err(why) => {
                        format!(" on the CPU path (the dp4a kernel failed its self-test: {why})")
                    }
                },
                (None, JobKind::Encoder) => match &gpu.encoder_on_gpu {
                    Ok(()) => " on the encoder kernels".into(),
                    Err(why) => format!(
                        " on the CPU path (the encoder kernels failed their self-test: {why})"
                    ),
                },
                (None, JobKind::Generate) => match &gpu.decoder_on_gpu {
                    Ok(()) => " on the decoder kernels".into(),
                    Err(why) => format!(
                        " on the CPU path (the decoder kernels failed their self-test: {why})"
                    ),
                },
                _ => String::new(),
            };
            tracing::info!(kind = ?job.kind, dims = ?job.dims, "bit identity{on}");
            let failed_before = gpu.devices[0].decoder_failures.load(Ordering::Relaxed);
            let t = Instant::now();
            let tiles_equal = gpu.run(&job)? == want;
            let gpu_s = t.elapsed().as_secs_f64();
            // a decoder call that failed was computed on the CPU: the same bytes, not the GPU's
            let fell_back = gpu.devices[0].decoder_failures.load(Ordering::Relaxed) - failed_before;
            let on = if fell_back > 0 {
                format!("{on}, but {fell_back} calls failed on the GPU and ran on the CPU")
            } else {
                on
            };
            let freivalds_equal = if job.kind == JobKind::MatMulModP && i == 0 {
                let rs: Vec<Vec<u32>> = (0..3u64)
                    .map(|s| {
                        (0..job.dims[2] as u64)
                            .map(|i| matrix_element(&(s + 11), i))
                            .collect()
                    })
                    .collect();
                Some(gpu.freivalds(&job, &rs)? == CpuBackend.freivalds(&job, &rs)?)
            } else {
                None
            };
            identity.push(IdentityRow {
                job: format!("{:?} {:?}{on}", job.kind, job.dims),
                tiles_equal,
                freivalds_equal,
                cpu_s,
                gpu_s,
            });
        }
    }
    for job in suite
        .iter()
        .filter(|j| matches!(j.kind, JobKind::Mlp | JobKind::Encoder | JobKind::Generate))
    {
        crate::compute::inputs::release(&job.input);
    }
    let bit_identical = identity
        .iter()
        .all(|r| r.tiles_equal && r.freivalds_equal != Some(false));
    // each kernel alone at the largest size
    let mut kernel_rows = vec![];
    if let Some(&n) = sizes.iter().max() {
        let job = JobSpec::matmul(n, n, n, [n as u8; 32]);
        let peak = gpu.int32_mad_peak().unwrap_or(f64::NAN);
        for &k in &kernels {
            gpu.use_matmul_kernel(k)?;
            tracing::info!(n, kernel = k.name(), "kernel timing");
            let seconds = gpu
                .matmul_kernel_seconds(&job)
                .expect("MatMulModP is timed")?;
            let mad_per_s = (n as f64).powi(3) / seconds;
            kernel_rows.push(KernelRow {
                kernel: k.name().into(),
                n,
                seconds,
                mad_per_s,
                peak_fraction: mad_per_s / peak,
            });
        }
    }
    for (d, k) in gpu.devices.iter().zip(&chosen) {
        d.set_matmul_kernel(*k)?;
    }
    let encoder_on_gpu = gpu.encoder_on_gpu.clone();
    let decoder_on_gpu = gpu.decoder_on_gpu.clone();
    let generation = smollm2_side_by_side(&gpu).map_err(|e| format!("{e:#}"));
    let backends: Vec<Arc<dyn Backend>> = vec![Arc::new(CpuBackend), gpu];
    let bench = bench::run(&backends, sizes)?;
    Ok(GpuReport {
        devices,
        disabled,
        fallbacks,
        matmul_kernel: preferred.name().into(),
        encoder: match &encoder_on_gpu {
            Ok(()) => "the GPU's encoder kernels (self-test passed)".into(),
            Err(why) => format!("the CPU path: the encoder kernels failed their self-test: {why}"),
        },
        decoder: match &decoder_on_gpu {
            Ok(()) => "the GPU's decoder kernels (self-test passed)".into(),
            Err(why) => format!("the CPU path: the decoder kernels failed their self-test: {why}"),
        },
        generation,
        kernels: kernel_rows,
        cold_start_s,
        cold_start_cached,
        warm_start_s,
        identity,
        bit_identical,
        bench,
    })
}

/// The prompt the side-by-side generation runs (`scripts/llm-bench`'s).
const GENERATION_PROMPT: &str = "Write a short story about a robot who learns to paint.";

/// SmolLM2 generating on the CPU's fast path, then with its dense layers and logits on the
/// first GPU: 32 tokens of one stream and of 32 streams, and the verifier's check; the two
/// completions must be the same tokens.
fn smollm2_side_by_side(gpu: &CudaBackend) -> Result<[bench::GenerationBench; 2]> {
    use crate::compute::decoder::{self, Path};
    gpu.decoder_on_gpu
        .clone()
        .map_err(|why| anyhow::anyhow!("the decoder kernels failed their self-test: {why}"))?;
    let model = Arc::new(decoder::parse_model(&decoder::smollm2_bytes()?)?);
    tracing::info!("SmolLM2 on the CPU and on the GPU");
    let cpu = bench::generation_on(&model, Path::Fast, GENERATION_PROMPT, 32, 32)?;
    let on = cuda::GpuDecoder::new(gpu.devices[0].clone(), model.clone())?;
    let mut g = bench::generation_on(&model, Path::Offload(&on), GENERATION_PROMPT, 32, 32)?;
    anyhow::ensure!(
        on.failed() == 0,
        "{} GPU calls failed (the CPU computed them)",
        on.failed()
    );
    anyhow::ensure!(
        g.completion == cpu.completion,
        "the GPU's completion differs from the CPU's: {:?} against {:?}",
        g.completion,
        cpu.completion
    );
    g.path = decoder::Offload::name(&on);
    Ok([cpu, g])
}

/// The short text report.
pub fn render(r: &GpuReport) -> String {
    let mut s = String::from("# GPU check\n\n");
    for d in &r.devices {
        s += &format!("GPU {d}\n");
    }
    for d in &r.disabled {
        s += &format!("disabled: {d}\n");
    }
    for d in &r.fallbacks {
        s += &format!("tensor-core kernel failed its self-test, CUDA cores used: {d}\n");
    }
    s += &format!("MatMulModP kernel in use: {}\n", r.matmul_kernel);
    s += &format!("Encoder jobs run on {}\n", r.encoder);
    s += &format!(
        "Generate jobs' dense layers and logits run on {}\n",
        r.decoder
    );
    match &r.generation {
        Ok([c, g]) => {
            s += &format!(
                "SmolLM2, {} prompt tokens, {} new, same tokens on both: CPU ({}) / GPU ({})\n",
                c.prompt_tokens, c.new_tokens, c.path, g.path
            );
            let rows: [(&str, fn(&bench::GenerationBench) -> f64); 3] = [
                ("prefill tokens/s", |b| b.prefill_tokens_per_s),
                ("decode tokens/s, one stream", |b| b.decode_tokens_per_s),
                ("decode tokens/s, 32 streams", |b| b.batch_tokens_per_s),
            ];
            for (what, f) in rows {
                s += &format!(
                    "  {what}: CPU {:.1}, GPU {:.1} (GPU/CPU {:.1}×)\n",
                    f(c),
                    f(g),
                    f(g) / f(c).max(1e-9)
                );
            }
            s += &format!(
                "  the verifier's check / generation: CPU {:.2}, GPU {:.2}\n",
                c.verify_fraction, g.verify_fraction
            );
        }
        Err(why) => s += &format!("SmolLM2 side by side: not run ({why})\n"),
    }
    for k in &r.kernels {
        s += &format!(
            "kernel {} alone, n = {}: {:.2} ms, {:.0} G multiply-adds mod p per second, {:.1}% of the int32 multiply-add peak\n",
            k.kernel,
            k.n,
            k.seconds * 1e3,
            k.mad_per_s / 1e9,
            100.0 * k.peak_fraction
        );
    }
    s += &format!(
        "start: {:.2} s cold ({}), {:.2} s warm (kernels from the disk cache)\n",
        r.cold_start_s,
        if r.cold_start_cached {
            "kernels already cached"
        } else {
            "kernels compiled by NVRTC"
        },
        r.warm_start_s
    );
    s += &format!(
        "bit-identical to the CPU: {}\n",
        if r.bit_identical { "yes" } else { "NO" }
    );
    for row in r
        .identity
        .iter()
        .filter(|row| !row.tiles_equal || row.freivalds_equal == Some(false))
    {
        s += &format!(
            "  differs: {} (tiles equal {}, Freivalds equal {:?})\n",
            row.job, row.tiles_equal, row.freivalds_equal
        );
    }
    // the encoder's and decoder's identity jobs, timed whole on each side
    for row in r
        .identity
        .iter()
        .filter(|row| row.job.starts_with("Encoder") || row.job.starts_with("Generate"))
    {
        s += &format!(
            "  {}: CPU {:.1} ms, GPU {:.1} ms ({:.2}×)\n",
            row.job,
            row.cpu_s * 1e3,
            row.gpu_s * 1e3,
            row.cpu_s / row.gpu_s.max(1e-9)
        );
    }
    // GPU kernel speed against the CPU, per job
    for g in r
        .bench
        .jobs
        .iter()
        .filter(|j| j.backend.starts_with("cuda"))
    {
        if let Some(c) = r
            .bench
            .jobs
            .iter()
            .find(|j| j.backend.starts_with("cpu") && j.kind == g.kind && j.size == g.size)
        {
            s += &format!(
                "{} {}: GPU {:.1} G ops/s end to end{} ({}), CPU {:.2} G ops/s, GPU/CPU {:.0}×; verification/compute on the GPU 1/{:.0}\n",
                g.kind,
                g.size,
                g.work_per_s / 1e9,
                g.kernel_s.map_or(String::new(), |k| format!(", kernel alone {:.1} G ops/s", g.work_per_s * g.compute_s / k / 1e9)),
                g.peak_fraction.map_or("peak n/a".into(), |f| format!("{:.1}% of the int32 MAD peak", 100.0 * f)),
                c.work_per_s / 1e9,
                g.work_per_s / c.work_per_s,
                1.0 / g.ratio
            );
        }
    }
    s += "\n";
    s += &bench::render(&r.bench);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The suite's `Generate` jobs are well formed and run on the CPU path (what the GPU's are
    /// compared with): every prompt completed, completions differing, some of the greedy job's
    /// stopping early.
    #[test]
    fn the_suites_generate_jobs_run_on_the_cpu() {
        let suite = identity_suite();
        let jobs: Vec<&JobSpec> = suite
            .iter()
            .filter(|j| j.kind == JobKind::Generate)
            .collect();
        assert_eq!(jobs.len(), 2);
        for &job in &jobs {
            let tiles = CpuBackend.run(job).unwrap();
            assert_eq!(tiles.len(), 6, "11 prompts in tiles of 2");
            let done: Vec<Vec<u32>> = tiles
                .iter()
                .flat_map(|t| crate::compute::decoder::job::decode_tile(job, t))
                .take(11)
                .collect();
            assert!(done.iter().all(|c| !c.is_empty()), "{done:?}");
            let distinct: std::collections::HashSet<&Vec<u32>> = done.iter().collect();
            assert!(distinct.len() > 3, "{done:?}");
            // the greedy job's completions are fixed by its model alone (the sampled one's draws
            // by its manifest too, which names this process): some of them stop early
            if job == jobs[0] {
                assert!(
                    done.iter().any(|c| c.len() < 8),
                    "none stops early: {done:?}"
                );
            }
        }
        for job in suite
            .iter()
            .filter(|j| matches!(j.kind, JobKind::Mlp | JobKind::Encoder | JobKind::Generate))
        {
            crate::compute::inputs::release(&job.input);
        }
    }
}

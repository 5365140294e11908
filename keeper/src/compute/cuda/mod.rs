//! The CUDA backend: the same [`Backend`] as the CPU reference, on every healthy NVIDIA GPU of
//! the machine, through `cudarc` 0.19 with the driver and NVRTC loaded at run time (the keeper
//! builds and runs where no CUDA is installed).
//!
//! * **Detection** before any cudarc call ([`probe`]): cudarc panics when a library is missing,
//!   so `libcuda` and `libnvrtc` are looked for first. A machine with the driver but without
//!   NVRTC can use the PyPI wheel `nvidia-cuda-nvrtc-cu12`: its `libnvrtc.so.12` is loaded by
//!   absolute path ([`NVRTC_ENV`] or the wheel's place under `site-packages`) before cudarc
//!   asks for it by name.
//! * **Kernels** (`kernels.cu`) are compiled by NVRTC with fmad off, no fast math, precise
//!   division and square root, to a CUBIN for the device's own architecture (PTX from a newer
//!   NVRTC fails on older drivers), and cached on disk keyed by (source hash, architecture,
//!   NVRTC version) ([`kernel_cache_dir`]). Contexts and modules are made once per process
//!   ([`CudaBackend::shared`]).
//! * **Self-test**: at start every GPU runs small jobs of every kind, with sizes that are not
//!   multiples of the tile, and is disabled when one bit differs from the CPU reference.
//! * **All GPUs**: a job's tile columns (or nonce ranges) are spread over the healthy devices,
//!   one thread each. Generated inputs stay on the device in a content-addressed cache keyed
//!   by (matrix key, shape).
//! * **`MatMulModP` kernels** ([`MatmulKernel`]): 32-bit multiply-adds on the CUDA cores, and
//!   the tensor cores over the inputs' byte planes (sixteen exact 8-bit products per
//!   multiply-add, see `kernels.cu`) with the m8n8k16 shape from sm_75 and m16n8k32 from sm_80.
//!   A device takes the first of them, in that order of preference, that passes its self-test
//!   (and says which failed); it is disabled only when none does.

use std::{
    collections::HashMap,
    path::PathBuf,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, Mutex, OnceLock,
    },
    time::Instant,
};

use anyhow::{anyhow, bail, ensure, Context, Result};
use compute_market_protocol::{
    hash::hashv,
    job::{JobKind, JobSpec, MATMUL_TILE},
};
use cudarc::{
    driver::{
        CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, LaunchConfig, PushKernelArg,
    },
    nvrtc::{result as nvrtc_result, sys as nvrtc_sys, CompileOptions, Ptx},
};

use super::{cpu::CpuBackend, Backend};

mod compile;
mod decoder;
mod device;
mod encoder;
mod loading;
mod self_test;

pub use compile::*;
pub use decoder::GpuDecoder;
pub use device::*;
pub use encoder::ENCODER_GPU_ROWS;
pub use loading::*;
pub use self_test::*;

/// The kernels' CUDA C source.
pub const KERNELS: &str = include_str!("../kernels.cu");
/// Environment variable naming `libnvrtc.so.12` by absolute path.
pub const NVRTC_ENV: &str = "COMPUTE_MARKET_NVRTC";
/// Environment variable naming the kernel cache directory.
pub const CACHE_ENV: &str = "COMPUTE_MARKET_KERNEL_CACHE";

/// Bytes of device memory the input cache may hold per GPU, at most.
pub(crate) const INPUT_CACHE_BYTES: usize = 4 << 30;

pub(crate) static NVRTC_PRELOAD: OnceLock<Option<libloading::Library>> = OnceLock::new();

/// Every healthy GPU of the machine.
pub struct CudaBackend {
    /// The devices in use.
    pub devices: Vec<Arc<Device>>,
    /// Devices disabled by the self-test, with why.
    pub disabled: Vec<(usize, String)>,
    /// MatMulModP kernels that failed a device's self-test while a later one passed (the
    /// device uses that one), with why.
    pub fallbacks: Vec<(usize, String)>,
    /// Seconds spent opening the devices (compile or cache load, self-test).
    pub startup_s: f64,
    /// Whether `Mlp` jobs run on the first GPU (its dp4a kernel passed the self-test); else
    /// why not, and they run on the CPU path.
    pub mlp_on_gpu: Result<(), String>,
    /// Whether `Encoder` jobs run on the first GPU (its kernels passed the self-test against
    /// the CPU); else why not, and they run on the CPU path.
    pub encoder_on_gpu: Result<(), String>,
    /// Whether `Generate` jobs' dense layers and logits run on the first GPU (its kernels
    /// passed the self-test against the CPU); else why not, and they run on the CPU path.
    pub decoder_on_gpu: Result<(), String>,
}

pub(crate) static SHARED: OnceLock<Result<Arc<CudaBackend>, String>> = OnceLock::new();

impl CudaBackend {
    /// The process's CUDA backend, opened once ([`CudaBackend::open`]).
    pub fn shared() -> Result<Arc<CudaBackend>> {
        SHARED
            .get_or_init(|| Self::open().map(Arc::new).map_err(|e| format!("{e:#}")))
            .clone()
            .map_err(|e| anyhow!(e))
    }

    /// Opens every GPU, compiles or loads the kernels, self-tests each device against the CPU
    /// and keeps those that agree bit for bit.
    pub fn open() -> Result<Self> {
        probe().map_err(|why| anyhow!(why))?;
        let start = Instant::now();
        let count = de(CudaContext::device_count(), "device count")? as usize;
        let mut devices = vec![];
        let mut disabled = vec![];
        let mut fallbacks = vec![];
        for ordinal in 0..count {
            let d = match Device::open(ordinal) {
                Ok(d) => Arc::new(d),
                Err(e) => {
                    tracing::warn!(ordinal, error = %format!("{e:#}"), "GPU disabled: cannot open it");
                    disabled.push((ordinal, format!("{e:#}")));
                    continue;
                }
            };
            let one = CudaBackend {
                devices: vec![d.clone()],
                disabled: vec![],
                fallbacks: vec![],
                startup_s: 0.0,
                mlp_on_gpu: Err("not tested".into()),
                encoder_on_gpu: Err("not tested".into()),
                decoder_on_gpu: Err("not tested".into()),
            };
            // the preferred MatMulModP kernel first, the next when one fails; a failure that
            // is not the kernel's (HashBatch, Freivalds) fails every one and disables the device
            let mut failed: Vec<String> = vec![];
            let mut tested = Err(anyhow!("no MatMulModP kernel tried"));
            for kernel in d.matmul_kernels() {
                d.set_matmul_kernel(kernel)?;
                tested = self_test(&one);
                match &tested {
                    Ok(()) => break,
                    Err(e) => failed.push(format!("{}: {e:#}", kernel.name())),
                }
            }
            if tested.is_ok() {
                for why in failed.iter() {
                    tracing::warn!(ordinal, name = d.name, error = %why, "MatMulModP kernel disabled: its results differ from the CPU's");
                    fallbacks.push((ordinal, why.clone()));
                }
            } else {
                tested = Err(anyhow!("{}", failed.join("; ")));
            }
            match tested {
                Ok(()) => {
                    tracing::info!(ordinal, name = d.name, arch = ?d.capability, cached_kernels = d.cached, matmul = d.matmul_kernel().name(), "GPU passed its self-test");
                    devices.push(d);
                }
                Err(e) => {
                    tracing::warn!(ordinal, name = d.name, error = %format!("{e:#}"), "GPU disabled: its results differ from the CPU's");
                    disabled.push((ordinal, format!("{e:#}")));
                }
            }
        }
        ensure!(
            !devices.is_empty(),
            "no GPU passed its self-test: {disabled:?}"
        );
        let mut backend = CudaBackend {
            devices,
            disabled,
            fallbacks,
            startup_s: 0.0,
            mlp_on_gpu: Ok(()),
            encoder_on_gpu: Ok(()),
            decoder_on_gpu: Ok(()),
        };
        // the integer MLP on the GPU only when its kernel agrees with the CPU bit for bit;
        // otherwise on the CPU path (the device stays in use for the other kinds)
        backend.mlp_on_gpu = mlp_self_test(&backend).map_err(|e| format!("{e:#}"));
        if let Err(why) = &backend.mlp_on_gpu {
            tracing::warn!(error = %why, "the Mlp GPU kernel is not used: its results differ from the CPU's");
        }
        // likewise the encoder's kernels
        backend.encoder_on_gpu = encoder_self_test(&backend).map_err(|e| format!("{e:#}"));
        if let Err(why) = &backend.encoder_on_gpu {
            tracing::warn!(error = %why, "the Encoder GPU kernels are not used: their results differ from the CPU's");
        }
        // likewise the decoder's
        backend.decoder_on_gpu = decoder_self_test(&backend).map_err(|e| format!("{e:#}"));
        if let Err(why) = &backend.decoder_on_gpu {
            tracing::warn!(error = %why, "the Generate GPU kernels are not used: their results differ from the CPU's");
        }
        // a kernel that faulted may have left the context unusable: the first self-test again,
        // and no GPU when it fails now
        if backend.encoder_on_gpu.is_err() || backend.decoder_on_gpu.is_err() {
            self_test(&backend).context("the GPU failed its self-test after a kernel failed")?;
        }
        backend.startup_s = start.elapsed().as_secs_f64();
        Ok(backend)
    }

    /// The `MatMulModP` kernels every device in use can run.
    pub fn matmul_kernels(&self) -> Vec<MatmulKernel> {
        let mut all = self.devices[0].matmul_kernels();
        all.retain(|k| self.devices.iter().all(|d| d.matmul_kernels().contains(k)));
        all
    }

    /// Switches every device to `kernel` (for comparisons: the self-test chose the default).
    pub fn use_matmul_kernel(&self, kernel: MatmulKernel) -> Result<()> {
        self.devices
            .iter()
            .try_for_each(|d| d.set_matmul_kernel(kernel))
    }

    /// Splits `0..len` into one contiguous range per device.
    fn split(&self, range: std::ops::Range<u32>) -> Vec<(Arc<Device>, std::ops::Range<u32>)> {
        let d = self.devices.len() as u32;
        let len = range.len() as u32;
        let per = len.div_ceil(d).max(1);
        self.devices
            .iter()
            .enumerate()
            .map(|(i, dev)| {
                (
                    dev.clone(),
                    (range.start + (i as u32 * per).min(len))
                        ..(range.start + ((i as u32 + 1) * per).min(len)),
                )
            })
            .filter(|(_, r)| !r.is_empty())
            .collect()
    }

    /// Runs `f` on each device's share, in parallel, and gathers the tiles.
    fn each<F>(
        &self,
        parts: Vec<(Arc<Device>, std::ops::Range<u32>)>,
        f: F,
    ) -> Result<HashMap<u32, Vec<u8>>>
    where
        F: Fn(&Device, std::ops::Range<u32>) -> Result<IndexedTiles> + Sync,
    {
        let results: Vec<Result<IndexedTiles>> = std::thread::scope(|s| {
            let f = &f;
            let hs: Vec<_> = parts
                .into_iter()
                .map(|(d, r)| s.spawn(move || f(&d, r)))
                .collect();
            hs.into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(anyhow!("a GPU worker panicked")))
                })
                .collect()
        });
        let mut out = HashMap::new();
        for r in results {
            out.extend(r?);
        }
        Ok(out)
    }
}

impl CudaBackend {
    /// Tiles `indices` of an `Mlp` job: their rows gathered into one batch for the first GPU,
    /// the logits laid out as the CPU path lays them out (classes chosen on the host).
    pub fn mlp_tiles(
        &self,
        inputs: &crate::compute::inputs::MlpInputs,
        job: &JobSpec,
        indices: &[u32],
    ) -> Result<Vec<Vec<u8>>> {
        use compute_market_protocol::infer::row_len;
        let (per, f, classes) = (
            usize::from(job.rows_per_tile),
            job.dims[1] as usize,
            job.dims[2] as usize,
        );
        let total = inputs.batch.rows;
        let spans: Vec<std::ops::Range<usize>> = indices
            .iter()
            .map(|&i| (i as usize * per).min(total)..((i as usize + 1) * per).min(total))
            .collect();
        let x: Vec<i8> = spans
            .iter()
            .flat_map(|r| &inputs.batch.x[r.start * f..r.end * f])
            .copied()
            .collect();
        let n: usize = spans.iter().map(|r| r.len()).sum();
        let logits = if n == 0 {
            vec![]
        } else {
            self.devices[0].mlp_logits(&inputs.model, &x, n)?
        };
        let len = row_len(classes);
        let mut at = 0;
        Ok(spans
            .iter()
            .map(|r| {
                let mut tile = vec![0u8; per * len];
                for (k, row) in tile.chunks_exact_mut(len).take(r.len()).enumerate() {
                    let l = &logits[(at + k) * classes..(at + k + 1) * classes];
                    crate::compute::mlp::write_row(row, l);
                }
                at += r.len();
                tile
            })
            .collect())
    }
}

impl CudaBackend {
    /// Tiles `indices` of an `Encoder` job on the first GPU: the tiles' texts in one batch
    /// (calls of at most [`ENCODER_GPU_ROWS`] rows), each row its text's int16 embedding,
    /// little-endian; rows past the texts zero.
    pub fn encoder_tiles(
        &self,
        inputs: &crate::compute::inputs::EncoderInputs,
        job: &JobSpec,
        indices: &[u32],
    ) -> Result<Vec<Vec<u8>>> {
        let per = usize::from(job.rows_per_tile);
        let total = inputs.ids.len();
        let spans: Vec<std::ops::Range<usize>> = indices
            .iter()
            .map(|&i| (i as usize * per).min(total)..((i as usize + 1) * per).min(total))
            .collect();
        let texts: Vec<&[u32]> = spans
            .iter()
            .flat_map(|r| inputs.ids[r.clone()].iter().map(Vec::as_slice))
            .collect();
        let embeddings = if texts.is_empty() {
            vec![]
        } else {
            self.devices[0].encoder_embed(&inputs.encoder, &texts)?
        };
        let len = compute_market_protocol::encoder::row_len(inputs.encoder.hidden);
        let mut at = embeddings.iter();
        Ok(spans
            .iter()
            .map(|r| {
                let mut tile = vec![0u8; per * len];
                for (row, e) in tile.chunks_exact_mut(len).take(r.len()).zip(&mut at) {
                    for (b, v) in row.chunks_exact_mut(2).zip(e) {
                        b.copy_from_slice(&v.to_le_bytes());
                    }
                }
                tile
            })
            .collect())
    }
}

impl Backend for CudaBackend {
    fn name(&self) -> String {
        let ids: Vec<String> = self.devices.iter().map(|d| d.ordinal.to_string()).collect();
        format!(
            "cuda:{} ({}, {})",
            ids.join("+"),
            self.devices[0].name,
            self.devices[0].matmul_kernel().name()
        )
    }

    fn tiles(&self, job: &JobSpec, indices: &[u32]) -> Result<Vec<Vec<u8>>> {
        let count = job.tile_count();
        ensure!(
            indices.iter().all(|&i| i < count),
            "tile index out of range (T = {count})"
        );
        if indices.is_empty() {
            return Ok(vec![]);
        }
        let (_, grid_cols) = job.tile_grid();
        let mut done = HashMap::new();
        match job.kind {
            JobKind::Mlp if self.mlp_on_gpu.is_ok() => {
                let inputs = crate::compute::inputs::mlp(job)?;
                // a GPU error (memory, a launch) falls back to the CPU path: same bytes
                return self.mlp_tiles(&inputs, job, indices).or_else(|e| {
                    tracing::warn!(error = %format!("{e:#}"), "the Mlp GPU kernel failed; the CPU path computes it");
                    crate::compute::cpu::CpuBackend.tiles(job, indices)
                });
            }
            JobKind::Encoder if self.encoder_on_gpu.is_ok() => {
                let inputs = crate::compute::inputs::encoder(job)?;
                // a GPU error (memory, a launch) falls back to the CPU path: same bytes
                return self.encoder_tiles(&inputs, job, indices).or_else(|e| {
                    tracing::warn!(error = %format!("{e:#}"), "the Encoder GPU kernels failed; the CPU path computes it");
                    crate::compute::cpu::CpuBackend.tiles(job, indices)
                });
            }
            JobKind::Generate => {
                // the dense layers and logits on the first GPU when its kernels passed the
                // self-test (a failed call is computed on the CPU: same bytes), else the CPU path
                let inputs = crate::compute::inputs::generate(job)?;
                let gpu = self.decoder_offload(&inputs.model);
                let path = crate::compute::decoder::Path::fast_or(gpu.as_deref());
                return crate::compute::decoder::job::run_tiles(&inputs, job, indices, path);
            }
            // the MLP or the encoder when its kernels failed the self-test run on the CPU path
            // here: the same bytes by construction
            JobKind::Mlp | JobKind::Encoder => {
                return crate::compute::cpu::CpuBackend.tiles(job, indices)
            }
            JobKind::MatMulModP => {
                // per tile row asked for: the span of its columns asked for, spread over the GPUs
                // (a whole job is one launch per GPU; scattered samples cost a span each)
                let mut rows: std::collections::BTreeMap<u32, (u32, u32)> = Default::default();
                for &i in indices {
                    let (r, c) = (i / grid_cols, i % grid_cols);
                    let span = rows.entry(r).or_insert((c, c + 1));
                    *span = (span.0.min(c), span.1.max(c + 1));
                }
                // rows asking for the same span go in one launch
                let mut launches: Vec<(std::ops::Range<u32>, (u32, u32))> = vec![];
                for (r, span) in rows {
                    match launches.last_mut() {
                        Some((rs, s)) if rs.end == r && *s == span => rs.end = r + 1,
                        _ => launches.push((r..r + 1, span)),
                    }
                }
                for (rs, (c0, c1)) in launches {
                    done.extend(
                        self.each(self.split(c0..c1), |d, cs| d.matmul(job, rs.clone(), cs))?,
                    );
                }
            }
            JobKind::HashBatch => {
                // each run of consecutive tiles asked for, spread over the GPUs
                let mut sorted: Vec<u32> = indices.to_vec();
                sorted.sort_unstable();
                sorted.dedup();
                let mut runs: Vec<std::ops::Range<u32>> = vec![];
                for i in sorted {
                    match runs.last_mut() {
                        Some(run) if run.end == i => run.end = i + 1,
                        _ => runs.push(i..i + 1),
                    }
                }
                for run in runs {
                    done.extend(self.each(self.split(run), |d, ts| d.hash(job, ts))?);
                }
            }
        }
        indices
            .iter()
            .map(|i| {
                done.get(i)
                    .cloned()
                    .ok_or_else(|| anyhow!("tile {i} was not computed"))
            })
            .collect()
    }

    fn freivalds(&self, job: &JobSpec, rs: &[Vec<u32>]) -> Result<Vec<Vec<u32>>> {
        let [m, k, n] = super::freivalds::checked_dims(job, rs)?;
        if job.input_mode == compute_market_protocol::job::InputMode::ContentHash {
            // the client's matrices are on the host already: two matrix-vector products there
            return super::freivalds::abr(job, rs);
        }
        let d = &self.devices[0];
        let mut out = vec![];
        for group in rs.chunks(4) {
            let vs: Vec<&[u32]> = group.iter().map(|r| r.as_slice()).collect();
            let br = d.rows_dot(job.matrix_key(b'B'), k, n, &vs)?;
            let brs: Vec<&[u32]> = br.iter().map(|v| v.as_slice()).collect();
            out.extend(d.rows_dot(job.matrix_key(b'A'), m, k, &brs)?);
        }
        Ok(out)
    }

    fn decoder_offload(
        &self,
        model: &Arc<crate::compute::decoder::Model>,
    ) -> Option<Box<dyn crate::compute::decoder::Offload + '_>> {
        self.decoder_on_gpu.as_ref().ok()?;
        let failures = self.devices[0].decoder_failures.load(Ordering::Relaxed);
        if failures > 0 {
            tracing::debug!(
                failures,
                "the decoder's GPU calls failed before: the CPU computes"
            );
            return None;
        }
        match GpuDecoder::new(self.devices[0].clone(), model.clone()) {
            Ok(g) => Some(Box::new(g)),
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "the decoder's weights could not go to the GPU; the CPU computes");
                None
            }
        }
    }

    fn memory_bytes(&self) -> u64 {
        // every GPU holds a job's whole inputs: the smallest one bounds the jobs that fit
        self.devices.iter().map(|d| d.memory).min().unwrap_or(0)
    }

    fn int32_mad_peak(&self) -> Option<f64> {
        // the kernel timing below runs on one device: its peak is the one to compare with
        Some(self.devices[0].int32_mad_peak())
    }

    fn matmul_kernel_seconds(&self, job: &JobSpec) -> Option<Result<f64>> {
        (job.kind == JobKind::MatMulModP).then(|| self.devices[0].time_matmul(job))
    }

    fn bandwidth_gbps(&self) -> Result<f64> {
        // device-to-device copy of 1 GiB on the first GPU: read + write
        let d = &self.devices[0];
        let _g = d.lock.lock().expect("device lock");
        let len = 1usize << 28; // u32 elements
        let src = de(d.stream.alloc_zeros::<u32>(len), "alloc")?;
        let mut dst = de(d.stream.alloc_zeros::<u32>(len), "alloc")?;
        de(d.stream.memcpy_dtod(&src, &mut dst), "copy")?;
        de(d.stream.synchronize(), "sync")?;
        let t = Instant::now();
        for _ in 0..4 {
            de(d.stream.memcpy_dtod(&src, &mut dst), "copy")?;
        }
        de(d.stream.synchronize(), "sync")?;
        Ok(4.0 * 2.0 * (len * 4) as f64 / t.elapsed().as_secs_f64() / 1e9)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_exact_arithmetic_for_the_device_arch() {
        let o = compile_options("sm_90");
        assert!(o.contains(&"--fmad=false".to_string()), "{o:?}");
        assert!(
            o.contains(&"--prec-div=true".to_string())
                && o.contains(&"--prec-sqrt=true".to_string())
        );
        assert!(o.contains(&"--gpu-architecture=sm_90".to_string()));
        assert!(!o.iter().any(|x| x.contains("fast-math")));
    }

    #[test]
    fn input_cache_evicts_the_least_recently_used_beyond_its_budget() {
        let mut c: InputCache<u32> = InputCache::default();
        let half = INPUT_CACHE_BYTES / 4 / 2; // elements in half the budget
        c.put((1, half, 1), 1, half * 4);
        c.put((2, half, 1), 2, half * 4);
        assert_eq!(
            c.get((1, half, 1)),
            Some(1),
            "both fit; 1 is now the most recent"
        );
        c.put((3, 1, 1), 3, 4); // over budget: the least recently used (2) goes
        assert_eq!(c.get((2, half, 1)), None);
        assert_eq!((c.get((1, half, 1)), c.get((3, 1, 1))), (Some(1), Some(3)));
        c.put((4, 4 * half, 1), 4, 16 * half); // larger than the budget alone: kept, everything else goes
        assert_eq!(c.entries.len(), 1);
    }

    #[test]
    fn the_wheel_path_is_a_candidate() {
        std::env::set_var(NVRTC_ENV, "/opt/x/libnvrtc.so.12");
        assert_eq!(
            wheel_candidates()[0],
            PathBuf::from("/opt/x/libnvrtc.so.12")
        );
        std::env::remove_var(NVRTC_ENV);
    }
}

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

use anyhow::{anyhow, bail, ensure, Result};
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

/// The kernels' CUDA C source.
pub const KERNELS: &str = include_str!("kernels.cu");
/// Environment variable naming `libnvrtc.so.12` by absolute path.
pub const NVRTC_ENV: &str = "COMPUTE_MARKET_NVRTC";
/// Environment variable naming the kernel cache directory.
pub const CACHE_ENV: &str = "COMPUTE_MARKET_KERNEL_CACHE";

/// Bytes of device memory the input cache may hold per GPU, at most.
const INPUT_CACHE_BYTES: usize = 4 << 30;

static NVRTC_PRELOAD: OnceLock<Option<libloading::Library>> = OnceLock::new();

/// Where a pip-installed `nvidia-cuda-nvrtc-cu12` wheel puts `libnvrtc.so.12`.
fn wheel_candidates() -> Vec<PathBuf> {
    let mut out = vec![];
    if let Some(p) = std::env::var_os(NVRTC_ENV) {
        out.push(PathBuf::from(p));
    }
    let mut roots: Vec<PathBuf> = vec![];
    if let Some(home) = std::env::var_os("HOME") {
        roots.push(PathBuf::from(home).join(".local/lib"));
    }
    if let Some(venv) = std::env::var_os("VIRTUAL_ENV") {
        roots.push(PathBuf::from(venv).join("lib"));
    }
    roots.extend(["/usr/local/lib", "/usr/lib"].map(PathBuf::from));
    for root in roots {
        let Ok(entries) = std::fs::read_dir(&root) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with("python3") {
                for site in ["site-packages", "dist-packages"] {
                    out.push(
                        e.path()
                            .join(site)
                            .join("nvidia/cuda_nvrtc/lib/libnvrtc.so.12"),
                    );
                }
            }
        }
    }
    out
}

/// Whether CUDA can be used here; `Err` says why not. Never panics, and touches no cudarc
/// function that would panic on a missing library.
pub fn probe() -> Result<(), String> {
    // SAFETY: only tries to open the library by name
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err("no NVIDIA driver: libcuda.so not found".into());
    }
    nvrtc_probe().map_err(|why| format!("the NVIDIA driver is present but {why}"))?;
    match CudaContext::device_count() {
        Ok(n) if n > 0 => Ok(()),
        Ok(_) => Err("the NVIDIA driver reports no GPU".into()),
        Err(e) => Err(format!("cuInit failed: {e}")),
    }
}

/// Whether NVRTC can be used (it needs no GPU: kernels compile anywhere it is installed),
/// loading the `nvidia-cuda-nvrtc-cu12` wheel's library by absolute path when the system has
/// none; `Err` says why not.
pub fn nvrtc_probe() -> Result<(), String> {
    // SAFETY: only tries to open the library by name
    if !unsafe { nvrtc_sys::is_culib_present() } {
        let preloaded = NVRTC_PRELOAD.get_or_init(|| {
            wheel_candidates().into_iter().filter(|p| p.exists()).find_map(|p| {
                // SAFETY: loading NVIDIA's NVRTC, whose initialisers are sound
                let lib = unsafe { libloading::Library::new(&p) }.ok()?;
                tracing::info!(path = %p.display(), "loaded NVRTC from the nvidia-cuda-nvrtc-cu12 wheel");
                Some(lib)
            })
        });
        // SAFETY: as above; a preloaded library is found by its soname
        if preloaded.is_none() || !unsafe { nvrtc_sys::is_culib_present() } {
            return Err(format!(
                "NVRTC is not installed: install the CUDA toolkit's libnvrtc.so.12, or `pip install nvidia-cuda-nvrtc-cu12` (or set {NVRTC_ENV} to its libnvrtc.so.12)"
            ));
        }
    }
    Ok(())
}

/// NVRTC's version (major, minor).
fn nvrtc_version() -> Result<(i32, i32)> {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: NVRTC is loaded ([`probe`]) and both pointers are valid
    unsafe { nvrtc_sys::nvrtcVersion(&mut major, &mut minor) }
        .result()
        .map_err(|e| anyhow!("nvrtcVersion: {e:?}"))?;
    Ok((major, minor))
}

/// The kernel cache directory: `$COMPUTE_MARKET_KERNEL_CACHE`, else
/// `~/.cache/compute-market/kernels`.
pub fn kernel_cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os(CACHE_ENV) {
        return PathBuf::from(d);
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    home.join(".cache/compute-market/kernels")
}

/// NVRTC options: exact arithmetic only, a CUBIN for `arch` (e.g. `sm_90`).
fn compile_options(arch: &str) -> Vec<String> {
    let opts = CompileOptions {
        fmad: Some(false),
        ftz: Some(false),
        prec_div: Some(true),
        prec_sqrt: Some(true),
        use_fast_math: Some(false),
        options: vec![format!("--gpu-architecture={arch}"), "--std=c++14".into()],
        ..Default::default()
    };
    // CompileOptions::build is crate-private: mirror its order here
    let mut out = vec![];
    for (flag, v) in [
        ("--ftz", opts.ftz),
        ("--prec-sqrt", opts.prec_sqrt),
        ("--prec-div", opts.prec_div),
        ("--fmad", opts.fmad),
    ] {
        if let Some(v) = v {
            out.push(format!("{flag}={v}"));
        }
    }
    out.extend(opts.options);
    out
}

/// Compiles [`KERNELS`] to a CUBIN for `arch` (e.g. `sm_90`), or reads it from the disk
/// cache ([`kernel_cache_dir`]). Returns the CUBIN and whether it came from the cache.
pub fn cubin(arch: &str) -> Result<(Vec<u8>, bool)> {
    cubin_in(arch, &kernel_cache_dir())
}

/// [`cubin`] with the cache in `dir`. NVRTC must be present ([`nvrtc_probe`]).
pub fn cubin_in(arch: &str, dir: &std::path::Path) -> Result<(Vec<u8>, bool)> {
    nvrtc_probe().map_err(|why| anyhow!(why))?;
    let (major, minor) = nvrtc_version()?;
    let options = compile_options(arch);
    let key = hashv(&[
        b"cm:kernels:v1",
        KERNELS.as_bytes(),
        arch.as_bytes(),
        &major.to_le_bytes(),
        &minor.to_le_bytes(),
        options.join(" ").as_bytes(),
    ]);
    let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
    let path = dir.join(format!("{arch}-nvrtc{major}.{minor}-{}.cubin", &hex[..16]));
    if let Ok(bytes) = std::fs::read(&path) {
        if !bytes.is_empty() {
            return Ok((bytes, true));
        }
    }
    let src = std::ffi::CString::new(KERNELS).expect("no NUL in the source");
    let name = std::ffi::CString::new("kernels.cu").expect("no NUL");
    let prog = nvrtc_result::create_program(&src, Some(&name))
        .map_err(|e| anyhow!("nvrtcCreateProgram: {e:?}"))?;
    // SAFETY: `prog` is a live program; the options are plain strings
    let compiled = unsafe { nvrtc_result::compile_program(prog, &options) };
    let out = (|| -> Result<Vec<u8>> {
        if let Err(e) = compiled {
            // SAFETY: `prog` is live
            let log = unsafe { nvrtc_result::get_program_log(prog) }.unwrap_or_default();
            let log: Vec<u8> = log
                .iter()
                .map(|&c| c as u8)
                .take_while(|&c| c != 0)
                .collect();
            bail!(
                "NVRTC failed ({e:?}) with {options:?}:\n{}",
                String::from_utf8_lossy(&log)
            );
        }
        let mut size = 0usize;
        // SAFETY: `prog` compiled; `size` is a valid pointer
        unsafe { nvrtc_sys::nvrtcGetCUBINSize(prog, &mut size) }
            .result()
            .map_err(|e| anyhow!("nvrtcGetCUBINSize: {e:?}"))?;
        ensure!(
            size > 0,
            "NVRTC produced no CUBIN for {arch} (is {arch} a real architecture?)"
        );
        let mut buf = vec![0u8; size];
        // SAFETY: `buf` has the size NVRTC reported
        unsafe { nvrtc_sys::nvrtcGetCUBIN(prog, buf.as_mut_ptr() as *mut _) }
            .result()
            .map_err(|e| anyhow!("nvrtcGetCUBIN: {e:?}"))?;
        Ok(buf)
    })();
    // SAFETY: destroyed once, after use
    let _ = unsafe { nvrtc_result::destroy_program(prog) };
    let bytes = out?;
    if std::fs::create_dir_all(dir).is_ok() {
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        if std::fs::write(&tmp, &bytes).is_ok() {
            let _ = std::fs::rename(&tmp, &path);
        }
    }
    Ok((bytes, false))
}

/// Tiles with their indices, as one device returns them.
type IndexedTiles = Vec<(u32, Vec<u8>)>;

/// A `MatMulModP` kernel; both give the same bits (each is held to the CPU reference).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum MatmulKernel {
    /// `matmul_tiles`: 32×32→64-bit multiply-adds on the CUDA cores, any architecture.
    CudaCores,
    /// `matmul_tiles_imma`: 8-bit integer matrix multiply-adds on the tensor cores over the
    /// inputs' byte planes, PTX shape m8n8k16 (sm_75 and later).
    TensorCores,
    /// `matmul_tiles_imma_wide`: the same with the m16n8k32 shape (sm_80 and later), twice the
    /// work per instruction.
    TensorCoresWide,
}

impl MatmulKernel {
    /// Short name for logs and reports.
    pub fn name(self) -> &'static str {
        match self {
            MatmulKernel::CudaCores => "cuda-cores",
            MatmulKernel::TensorCores => "tensor-cores-m8n8k16",
            MatmulKernel::TensorCoresWide => "tensor-cores-m16n8k32",
        }
    }

    /// The oldest compute capability that runs it.
    fn min_capability(self) -> (i32, i32) {
        match self {
            MatmulKernel::CudaCores => (0, 0),
            MatmulKernel::TensorCores => (7, 5),
            MatmulKernel::TensorCoresWide => (8, 0),
        }
    }

    /// Every kernel, preferred first.
    const ALL: [MatmulKernel; 3] = [
        MatmulKernel::TensorCoresWide,
        MatmulKernel::TensorCores,
        MatmulKernel::CudaCores,
    ];
}

/// The kernels of one device.
struct Kernels {
    gen_matrix: CudaFunction,
    matmul_tiles: CudaFunction,
    matmul_tiles_imma: CudaFunction,
    matmul_tiles_imma_wide: CudaFunction,
    byte_planes: CudaFunction,
    gen_rows_dot: CudaFunction,
    hash_batch: CudaFunction,
    _module: Arc<CudaModule>,
}

/// Device-resident generated inputs, content-addressed by (matrix key, rows, cols) (the key
/// alone does not name the shape), each with its size in bytes; the least recently used are
/// evicted beyond [`INPUT_CACHE_BYTES`].
struct InputCache<V> {
    entries: Vec<((u64, usize, usize), V, usize)>,
}

impl<V> Default for InputCache<V> {
    fn default() -> Self {
        InputCache { entries: vec![] }
    }
}

impl<V: Clone> InputCache<V> {
    fn get(&mut self, key: (u64, usize, usize)) -> Option<V> {
        let i = self.entries.iter().position(|(k, _, _)| *k == key)?;
        let e = self.entries.remove(i);
        let v = e.1.clone();
        self.entries.push(e); // most recently used last
        Some(v)
    }

    fn put(&mut self, key: (u64, usize, usize), v: V, bytes: usize) {
        self.entries.push((key, v, bytes));
        while self.entries.iter().map(|e| e.2).sum::<usize>() > INPUT_CACHE_BYTES
            && self.entries.len() > 1
        {
            self.entries.remove(0);
        }
    }
}

/// One GPU.
pub struct Device {
    /// Ordinal.
    pub ordinal: usize,
    /// Name ("NVIDIA H200").
    pub name: String,
    /// Compute capability.
    pub capability: (i32, i32),
    /// Streaming multiprocessors.
    pub sms: u32,
    /// Core clock, kHz.
    pub clock_khz: u32,
    /// Total memory, bytes.
    pub memory: u64,
    /// Whether its kernels came from the disk cache.
    pub cached: bool,
    stream: Arc<CudaStream>,
    k: Kernels,
    inputs: Mutex<InputCache<Arc<CudaSlice<u32>>>>,
    /// Byte planes of inputs for the tensor-core kernel, keyed like `inputs` by (matrix key,
    /// padded rows, padded k): four bytes per element, as the cache's size accounting assumes.
    planes: Mutex<InputCache<Arc<CudaSlice<u8>>>>,
    /// The `MatMulModP` kernel in use: its index in [`MatmulKernel::ALL`].
    matmul: AtomicUsize,
    lock: Mutex<()>,
}

/// 256-thread blocks enough to cover `count` elements, for the grid-stride kernels
/// (`gen_matrix`, `byte_planes`), capped where the loop takes over.
fn grid_stride(count: usize) -> LaunchConfig {
    let blocks = (count as u64).div_ceil(256).clamp(1, 65_535 * 4) as u32;
    cfg((blocks, 1, 1), (256, 1, 1))
}

fn cfg(grid: (u32, u32, u32), block: (u32, u32, u32)) -> LaunchConfig {
    LaunchConfig {
        grid_dim: grid,
        block_dim: block,
        shared_mem_bytes: 0,
    }
}

fn de<T>(r: Result<T, cudarc::driver::DriverError>, what: &str) -> Result<T> {
    r.map_err(|e| anyhow!("CUDA {what}: {e:?}"))
}

impl Device {
    fn open(ordinal: usize) -> Result<Self> {
        let ctx = de(CudaContext::new(ordinal), "context")?;
        let capability = de(ctx.compute_capability(), "compute capability")?;
        let arch = format!("sm_{}{}", capability.0, capability.1);
        let (bin, cached) = cubin(&arch)?;
        let module = de(ctx.load_module(Ptx::from_binary(bin)), "load module")?;
        let f = |n: &str| de(module.load_function(n), n);
        let k = Kernels {
            gen_matrix: f("gen_matrix")?,
            matmul_tiles: f("matmul_tiles")?,
            matmul_tiles_imma: f("matmul_tiles_imma")?,
            matmul_tiles_imma_wide: f("matmul_tiles_imma_wide")?,
            byte_planes: f("byte_planes")?,
            gen_rows_dot: f("gen_rows_dot")?,
            hash_batch: f("hash_batch")?,
            _module: module.clone(),
        };
        use cudarc::driver::sys::CUdevice_attribute as A;
        let attr = |a| de(ctx.attribute(a), "attribute").map(|v| v.max(0) as u32);
        Ok(Device {
            ordinal,
            name: de(ctx.name(), "name")?,
            capability,
            sms: attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
            clock_khz: attr(A::CU_DEVICE_ATTRIBUTE_CLOCK_RATE)?,
            memory: de(ctx.total_mem(), "total memory")? as u64,
            cached,
            stream: ctx.default_stream(),
            k,
            inputs: Mutex::new(InputCache::default()),
            planes: Mutex::new(InputCache::default()),
            matmul: AtomicUsize::new(
                MatmulKernel::ALL
                    .iter()
                    .position(|k| capability >= k.min_capability())
                    .expect("the CUDA cores run anywhere"),
            ),
            lock: Mutex::new(()),
        })
    }

    /// The `MatMulModP` kernels this device can run, preferred first.
    pub fn matmul_kernels(&self) -> Vec<MatmulKernel> {
        MatmulKernel::ALL
            .into_iter()
            .filter(|k| self.capability >= k.min_capability())
            .collect()
    }

    /// The `MatMulModP` kernel in use.
    pub fn matmul_kernel(&self) -> MatmulKernel {
        MatmulKernel::ALL[self.matmul.load(Ordering::Relaxed)]
    }

    /// Switches the `MatMulModP` kernel (the tensor cores need sm_75 or later).
    pub fn set_matmul_kernel(&self, kernel: MatmulKernel) -> Result<()> {
        ensure!(
            self.matmul_kernels().contains(&kernel),
            "GPU {} (sm_{}{}) cannot run the {} kernel",
            self.ordinal,
            self.capability.0,
            self.capability.1,
            kernel.name()
        );
        let i = MatmulKernel::ALL
            .iter()
            .position(|k| *k == kernel)
            .expect("every kernel is in ALL");
        self.matmul.store(i, Ordering::Relaxed);
        Ok(())
    }

    /// 32-bit integer multiply-add peak, operations per second: SMs × 64 INT32 lanes × clock
    /// (CUDA C++ Programming Guide, "Arithmetic Instructions": 64 results per clock cycle per
    /// multiprocessor for 32-bit integer multiply-add on compute capability 7.x–9.0).
    pub fn int32_mad_peak(&self) -> f64 {
        self.sms as f64 * 64.0 * self.clock_khz as f64 * 1e3
    }

    /// A generated input matrix on this device (cached).
    fn input(&self, key: u64, rows: usize, cols: usize) -> Result<Arc<CudaSlice<u32>>> {
        if let Some(v) = self
            .inputs
            .lock()
            .expect("cache lock")
            .get((key, rows, cols))
        {
            return Ok(v);
        }
        let count = rows * cols;
        let mut out = de(self.stream.alloc_zeros::<u32>(count.max(1)), "alloc input")?;
        let mut b = self.stream.launch_builder(&self.k.gen_matrix);
        let c = count as u64;
        b.arg(&key).arg(&mut out).arg(&c);
        // SAFETY: arguments match the kernel's signature; `out` holds `count` elements
        de(unsafe { b.launch(grid_stride(count)) }, "gen_matrix")?;
        let v = Arc::new(out);
        self.inputs
            .lock()
            .expect("cache lock")
            .put((key, rows, cols), v.clone(), rows * cols * 4);
        Ok(v)
    }

    /// The four byte planes of a generated input (`byte_planes` in `kernels.cu`, which
    /// generates the elements itself): of M = the `rows × cols` matrix under `key`, or of its
    /// transpose when `transpose`, padded to `padded_rows` rows of `ld` bytes. Cached by the
    /// exact (key, rows, cols): the padding follows from them, and a key is reused by jobs of
    /// other shapes with the same input seed.
    fn planes(
        &self,
        key: u64,
        (rows, cols): (usize, usize),
        transpose: bool,
        padded_rows: usize,
        ld: usize,
    ) -> Result<Arc<CudaSlice<u8>>> {
        let cache_key = (key, rows, cols);
        if let Some(v) = self.planes.lock().expect("cache lock").get(cache_key) {
            return Ok(v);
        }
        let count = padded_rows * ld;
        let mut out = de(self.stream.alloc_zeros::<u8>(4 * count), "alloc planes")?;
        // M's shape: rows × cols, or cols × rows transposed
        let (valid_rows, valid_cols) = if transpose {
            (cols, rows)
        } else {
            (rows, cols)
        };
        let args = [
            cols,
            valid_rows,
            valid_cols,
            transpose as usize,
            padded_rows,
            ld,
        ]
        .map(|v| v as u32);
        let mut b = self.stream.launch_builder(&self.k.byte_planes);
        b.arg(&key)
            .arg(&args[0])
            .arg(&args[1])
            .arg(&args[2])
            .arg(&args[3]);
        b.arg(&mut out).arg(&args[4]).arg(&args[5]);
        // SAFETY: arguments match the kernel's signature; `out` holds four planes of `count`
        de(unsafe { b.launch(grid_stride(count)) }, "byte_planes")?;
        let v = Arc::new(out);
        self.planes
            .lock()
            .expect("cache lock")
            .put(cache_key, v.clone(), 4 * count);
        Ok(v)
    }

    /// Launches the `MatMulModP` kernel in use over tile rows `rows` × tile columns `cols` of a
    /// `MatMulModP` job into `out` (room for every tile of the launch); the caller holds the
    /// device lock.
    fn launch_matmul(
        &self,
        job: &JobSpec,
        rows: std::ops::Range<u32>,
        cols: std::ops::Range<u32>,
        out: &mut CudaSlice<u32>,
    ) -> Result<()> {
        let [m, k, n] = job.dims;
        let (gr, gc) = (rows.len() as u32, cols.len() as u32);
        let kernel = self.matmul_kernel();
        if kernel != MatmulKernel::CudaCores {
            let (grid_rows, grid_cols) = job.tile_grid();
            let t = MATMUL_TILE as usize;
            // both tensor-core kernels read the same planes: k padded for the wider one
            let ldk = (k as usize).div_ceil(32) * 32;
            let (a_rows, b_rows) = (grid_rows as usize * t, grid_cols as usize * t);
            let (mu, ku, nu) = (m as usize, k as usize, n as usize);
            let ap = self.planes(job.matrix_key(b'A'), (mu, ku), false, a_rows, ldk)?;
            let bp = self.planes(job.matrix_key(b'B'), (ku, nu), true, b_rows, ldk)?;
            let (ldk, a_plane, b_plane) =
                (ldk as u32, (a_rows * ldk) as u64, (b_rows * ldk) as u64);
            let (f, threads) = if kernel == MatmulKernel::TensorCoresWide {
                (&self.k.matmul_tiles_imma_wide, 256)
            } else {
                (&self.k.matmul_tiles_imma, 512)
            };
            let mut l = self.stream.launch_builder(f);
            l.arg(ap.as_ref())
                .arg(bp.as_ref())
                .arg(out)
                .arg(&m)
                .arg(&n)
                .arg(&ldk)
                .arg(&a_plane)
                .arg(&b_plane)
                .arg(&rows.start)
                .arg(&cols.start);
            // SAFETY: arguments match the kernel; `out` holds gr·gc tiles; the planes cover
            // every tile row and column of the job
            return de(
                unsafe { l.launch(cfg((gc, gr, 1), (threads, 1, 1))) },
                kernel.name(),
            )
            .map(|_| ());
        }
        let a = self.input(job.matrix_key(b'A'), m as usize, k as usize)?;
        let b = self.input(job.matrix_key(b'B'), k as usize, n as usize)?;
        let mut l = self.stream.launch_builder(&self.k.matmul_tiles);
        l.arg(a.as_ref())
            .arg(b.as_ref())
            .arg(out)
            .arg(&m)
            .arg(&k)
            .arg(&n)
            .arg(&rows.start)
            .arg(&cols.start);
        // SAFETY: arguments match the kernel; `out` holds gr·gc tiles
        de(
            unsafe { l.launch(cfg((gc, gr, 1), (16, 16, 1))) },
            "matmul_tiles",
        )
        .map(|_| ())
    }

    /// Tiles of rows `rows` × columns `cols` (tile coordinates) of a `MatMulModP` job, as
    /// `(tile index, bytes)`.
    fn matmul(
        &self,
        job: &JobSpec,
        rows: std::ops::Range<u32>,
        cols: std::ops::Range<u32>,
    ) -> Result<IndexedTiles> {
        let _g = self.lock.lock().expect("device lock");
        let gc = cols.len() as u32;
        let t = (MATMUL_TILE * MATMUL_TILE) as usize;
        let mut out = de(
            self.stream.alloc_zeros::<u32>(rows.len() * cols.len() * t),
            "alloc tiles",
        )?;
        self.launch_matmul(job, rows.clone(), cols.clone(), &mut out)?;
        let host = de(self.stream.clone_dtoh(&out), "copy tiles")?;
        let (_, grid_cols) = job.tile_grid();
        Ok(host
            .chunks_exact(t)
            .enumerate()
            .map(|(i, tile)| {
                let (r, c) = (rows.start + i as u32 / gc, cols.start + i as u32 % gc);
                (
                    r * grid_cols + c,
                    tile.iter().flat_map(|v| v.to_le_bytes()).collect(),
                )
            })
            .collect())
    }

    /// Seconds of one launch of the `MatMulModP` kernel in use over the whole job (best of 3,
    /// after a warm-up), inputs (or their byte planes) already on the device.
    fn time_matmul(&self, job: &JobSpec) -> Result<f64> {
        let _g = self.lock.lock().expect("device lock");
        let (gr, gc) = job.tile_grid();
        let mut out = de(
            self.stream.alloc_zeros::<u32>(
                gr as usize * gc as usize * (MATMUL_TILE * MATMUL_TILE) as usize,
            ),
            "alloc tiles",
        )?;
        let mut best = f64::MAX;
        for i in 0..4 {
            de(self.stream.synchronize(), "sync")?;
            let t = Instant::now();
            self.launch_matmul(job, 0..gr, 0..gc, &mut out)?;
            de(self.stream.synchronize(), "sync")?;
            if i > 0 {
                best = best.min(t.elapsed().as_secs_f64());
            }
        }
        Ok(best)
    }

    /// Tiles `tiles` (a contiguous range) of a `HashBatch` job.
    fn hash(&self, job: &JobSpec, tiles: std::ops::Range<u32>) -> Result<IndexedTiles> {
        let _g = self.lock.lock().expect("device lock");
        let per = job.dims[1] as u64;
        let first = tiles.start as u64 * per;
        let count = tiles.len() as u64 * per;
        let seed: Vec<u32> = job
            .input
            .chunks_exact(4)
            .map(|w| u32::from_be_bytes([w[0], w[1], w[2], w[3]]))
            .collect();
        let seed = de(self.stream.clone_htod(&seed), "copy seed")?;
        let mut out = de(
            self.stream.alloc_zeros::<u8>((count * 32) as usize),
            "alloc hashes",
        )?;
        let iterations = job.dims[2];
        let mut l = self.stream.launch_builder(&self.k.hash_batch);
        l.arg(&seed)
            .arg(&first)
            .arg(&count)
            .arg(&iterations)
            .arg(&mut out);
        // SAFETY: arguments match the kernel; `out` holds 32 bytes per nonce
        de(
            unsafe { l.launch(cfg((count.div_ceil(128) as u32, 1, 1), (128, 1, 1))) },
            "hash_batch",
        )?;
        let host = de(self.stream.clone_dtoh(&out), "copy hashes")?;
        let len = job.tile_len();
        Ok(host
            .chunks_exact(len)
            .enumerate()
            .map(|(i, t)| (tiles.start + i as u32, t.to_vec()))
            .collect())
    }

    /// `M·v` for each of `vs` (≤ 4, each of length `cols`), M generated under `key`.
    fn rows_dot(&self, key: u64, rows: usize, cols: usize, vs: &[&[u32]]) -> Result<Vec<Vec<u32>>> {
        let _g = self.lock.lock().expect("device lock");
        let flat: Vec<u32> = vs.iter().flat_map(|v| v.iter().copied()).collect();
        let dv = de(self.stream.clone_htod(&flat), "copy vectors")?;
        let mut out = de(
            self.stream.alloc_zeros::<u32>(rows * vs.len()),
            "alloc products",
        )?;
        let (r, c, nv) = (rows as u32, cols as u32, vs.len() as u32);
        let mut l = self.stream.launch_builder(&self.k.gen_rows_dot);
        l.arg(&key).arg(&r).arg(&c).arg(&dv).arg(&nv).arg(&mut out);
        // SAFETY: arguments match the kernel; one block per row
        de(
            unsafe { l.launch(cfg((r, 1, 1), (256, 1, 1))) },
            "gen_rows_dot",
        )?;
        let host = de(self.stream.clone_dtoh(&out), "copy products")?;
        Ok(host.chunks_exact(rows).map(|c| c.to_vec()).collect())
    }
}

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
}

static SHARED: OnceLock<Result<Arc<CudaBackend>, String>> = OnceLock::new();

/// Jobs the start-up self-test runs on every device: sizes that are not multiples of the tile.
pub fn self_test_jobs() -> Vec<JobSpec> {
    vec![
        JobSpec::matmul(70, 33, 130, [5; 32]),
        JobSpec::matmul(64, 64, 64, [6; 32]),
        JobSpec::hash_batch(3, 5, 2, [7; 32]),
    ]
}

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
        Ok(CudaBackend {
            devices,
            disabled,
            fallbacks,
            startup_s: start.elapsed().as_secs_f64(),
        })
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

/// Runs [`self_test_jobs`] on `backend` and compares every output, and the Freivalds
/// products, with the CPU reference.
pub fn self_test(backend: &dyn Backend) -> Result<()> {
    for job in self_test_jobs() {
        let got = backend.run(&job)?;
        let want = CpuBackend.run(&job)?;
        if let Some(i) = (0..want.len()).find(|&i| got.get(i) != Some(&want[i])) {
            bail!(
                "{:?} {:?}: tile {i} differs from the CPU",
                job.kind,
                job.dims
            );
        }
        // scattered tiles, as a verifier asks for them (launches that start past tile 0)
        let t = job.tile_count();
        let some = [t - 1, t / 2, 0];
        ensure!(
            backend.tiles(&job, &some)? == CpuBackend.tiles(&job, &some)?,
            "{:?} {:?}: tiles {some:?} asked for alone differ from the CPU",
            job.kind,
            job.dims
        );
        if job.kind == JobKind::MatMulModP {
            let rs: Vec<Vec<u32>> = (0..3u64)
                .map(|s| {
                    (0..job.dims[2] as u64)
                        .map(|i| compute_market_protocol::job::matrix_element(&s, i))
                        .collect()
                })
                .collect();
            ensure!(
                backend.freivalds(&job, &rs)? == CpuBackend.freivalds(&job, &rs)?,
                "Freivalds products differ from the CPU"
            );
        }
    }
    Ok(())
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

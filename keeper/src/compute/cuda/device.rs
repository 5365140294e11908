//! One GPU: its context, stream, kernels, the input cache, and the launches of every job kind
//! and `MatMulModP` kernel.

use super::*;

/// Tiles with their indices, as one device returns them.
pub(crate) type IndexedTiles = Vec<(u32, Vec<u8>)>;

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
    pub(crate) fn min_capability(self) -> (i32, i32) {
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
pub(crate) struct Kernels {
    pub(crate) gen_matrix: CudaFunction,
    pub(crate) matmul_tiles: CudaFunction,
    pub(crate) matmul_tiles_imma: CudaFunction,
    pub(crate) matmul_tiles_imma_wide: CudaFunction,
    pub(crate) byte_planes: CudaFunction,
    pub(crate) gen_rows_dot: CudaFunction,
    pub(crate) hash_batch: CudaFunction,
    pub(crate) mlp_layer: CudaFunction,
    pub(crate) enc: super::encoder::EncoderKernels,
    pub(crate) dec: super::decoder::DecoderKernels,
    pub(crate) _module: Arc<CudaModule>,
}

/// Device-resident generated inputs, content-addressed by (matrix key, rows, cols) (the key
/// alone does not name the shape), each with its size in bytes; the least recently used are
/// evicted beyond [`INPUT_CACHE_BYTES`].
pub(crate) struct InputCache<V> {
    pub(crate) entries: Vec<((u64, usize, usize), V, usize)>,
}

impl<V> Default for InputCache<V> {
    fn default() -> Self {
        InputCache { entries: vec![] }
    }
}

impl<V: Clone> InputCache<V> {
    pub(crate) fn get(&mut self, key: (u64, usize, usize)) -> Option<V> {
        let i = self.entries.iter().position(|(k, _, _)| *k == key)?;
        let e = self.entries.remove(i);
        let v = e.1.clone();
        self.entries.push(e); // most recently used last
        Some(v)
    }

    pub(crate) fn put(&mut self, key: (u64, usize, usize), v: V, bytes: usize) {
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
    pub(crate) stream: Arc<CudaStream>,
    pub(crate) k: Kernels,
    pub(crate) inputs: Mutex<InputCache<Arc<CudaSlice<u32>>>>,
    /// Byte planes of inputs for the tensor-core kernel, keyed like `inputs` by (matrix key,
    /// padded rows, padded k): four bytes per element, as the cache's size accounting assumes.
    pub(crate) planes: Mutex<InputCache<Arc<CudaSlice<u8>>>>,
    /// The `MatMulModP` kernel in use: its index in [`MatmulKernel::ALL`].
    pub(crate) matmul: AtomicUsize,
    pub(crate) lock: Mutex<()>,
    /// The last encoder run here, on the device (at most one held: its weights, transposed):
    /// a verifier's few tiles and a provider's many calls pay the copy once per model.
    pub(crate) encoder: Mutex<Option<super::encoder::HeldEncoder>>,
    /// The last decoder run here (at most one held: its weights as the model file holds them).
    pub(crate) decoder: Mutex<Option<super::decoder::HeldDecoder>>,
    /// Decoder calls that failed here (the CPU computed them); after one, `Generate` jobs stay
    /// on the CPU path.
    pub decoder_failures: AtomicUsize,
}

/// 256-thread blocks enough to cover `count` elements, for the grid-stride kernels
/// (`gen_matrix`, `byte_planes`), capped where the loop takes over.
pub(crate) fn grid_stride(count: usize) -> LaunchConfig {
    let blocks = (count as u64).div_ceil(256).clamp(1, 65_535 * 4) as u32;
    cfg((blocks, 1, 1), (256, 1, 1))
}

pub(crate) fn cfg(grid: (u32, u32, u32), block: (u32, u32, u32)) -> LaunchConfig {
    LaunchConfig {
        grid_dim: grid,
        block_dim: block,
        shared_mem_bytes: 0,
    }
}

pub(crate) fn de<T>(r: Result<T, cudarc::driver::DriverError>, what: &str) -> Result<T> {
    r.map_err(|e| anyhow!("CUDA {what}: {e:?}"))
}

impl Device {
    pub(crate) fn open(ordinal: usize) -> Result<Self> {
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
            mlp_layer: f("mlp_layer")?,
            enc: super::encoder::EncoderKernels::load(&f)?,
            dec: super::decoder::DecoderKernels::load(&f)?,
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
            encoder: Mutex::new(None),
            decoder: Mutex::new(None),
            decoder_failures: AtomicUsize::new(0),
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
    pub(crate) fn input(&self, key: u64, rows: usize, cols: usize) -> Result<Arc<CudaSlice<u32>>> {
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

    /// A client's input matrix (`which` of the inputs named by `manifest`) on this device,
    /// copied once and cached like generated ones (keyed by the manifest and the role).
    pub(crate) fn uploaded(
        &self,
        manifest: &[u8; 32],
        which: u8,
        m: &crate::compute::Matrix,
    ) -> Result<Arc<CudaSlice<u32>>> {
        let key =
            compute_market_protocol::hash::digest_u64(&compute_market_protocol::hash::hashv(&[
                b"cm:uploaded",
                manifest,
                &[which],
            ]));
        let cache_key = (key, m.rows, m.cols);
        if let Some(v) = self.inputs.lock().expect("cache lock").get(cache_key) {
            return Ok(v);
        }
        let v = Arc::new(de(self.stream.clone_htod(&m.data), "copy input")?);
        self.inputs
            .lock()
            .expect("cache lock")
            .put(cache_key, v.clone(), m.data.len() * 4);
        Ok(v)
    }

    /// The four byte planes of a generated input (`byte_planes` in `kernels.cu`, which
    /// generates the elements itself): of M = the `rows × cols` matrix under `key`, or of its
    /// transpose when `transpose`, padded to `padded_rows` rows of `ld` bytes. Cached by the
    /// exact (key, rows, cols): the padding follows from them, and a key is reused by jobs of
    /// other shapes with the same input seed.
    pub(crate) fn planes(
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
    pub(crate) fn launch_matmul(
        &self,
        job: &JobSpec,
        rows: std::ops::Range<u32>,
        cols: std::ops::Range<u32>,
        out: &mut CudaSlice<u32>,
    ) -> Result<()> {
        let [m, k, n] = job.dims;
        let (gr, gc) = (rows.len() as u32, cols.len() as u32);
        let kernel = self.matmul_kernel();
        let content = job.input_mode == compute_market_protocol::job::InputMode::ContentHash;
        // the client's own matrices run on the CUDA-core kernel (the tensor-core kernels
        // generate their byte planes from the seed)
        if kernel != MatmulKernel::CudaCores && !content {
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
        let (a, b) = if content {
            let held = crate::compute::inputs::matrices(job)?;
            (
                self.uploaded(&job.input, b'A', &held.a)?,
                self.uploaded(&job.input, b'B', &held.b)?,
            )
        } else {
            (
                self.input(job.matrix_key(b'A'), m as usize, k as usize)?,
                self.input(job.matrix_key(b'B'), k as usize, n as usize)?,
            )
        };
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
    pub(crate) fn matmul(
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
    pub(crate) fn time_matmul(&self, job: &JobSpec) -> Result<f64> {
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

    /// The logits of `rows` rows `x` (row-major, `features` int8 each) through `model`, one
    /// launch of `mlp_layer` per layer (dp4a), rows × classes. The rows and weights go to the
    /// device padded with zeros to a multiple of 4 bytes; activations stay on it.
    pub(crate) fn mlp_logits(
        &self,
        model: &compute_market_protocol::infer::Mlp,
        x: &[i8],
        rows: usize,
    ) -> Result<Vec<i32>> {
        let _g = self.lock.lock().expect("device lock");
        let pad = |n: usize| n.div_ceil(4) * 4;
        let padded = |src: &[i8], n: usize, width: usize| -> Vec<i8> {
            let w4 = pad(width);
            let mut out = vec![0i8; n * w4];
            for (r, row) in src.chunks_exact(width).enumerate() {
                out[r * w4..r * w4 + width].copy_from_slice(row);
            }
            out
        };
        let first = model
            .layers
            .first()
            .ok_or_else(|| anyhow::anyhow!("a model has layers"))?;
        let mut act = de(
            self.stream.clone_htod(&padded(x, rows, first.inp)),
            "copy rows",
        )?;
        let last = model.layers.len() - 1;
        for (i, l) in model.layers.iter().enumerate() {
            let (in4, out4) = (pad(l.inp) as u32, pad(l.out) as u32);
            let w = de(
                self.stream.clone_htod(&padded(&l.weight, l.out, l.inp)),
                "copy weights",
            )?;
            let bias = de(self.stream.clone_htod(&l.bias), "copy biases")?;
            let (m, sh) = l
                .requant
                .clone()
                .unwrap_or((vec![1; l.out], vec![1; l.out]));
            let m = de(self.stream.clone_htod(&m), "copy multipliers")?;
            let sh = de(self.stream.clone_htod(&sh), "copy shifts")?;
            let hidden = i32::from(i != last);
            let mut y = de(
                self.stream
                    .alloc_zeros::<i8>(if i != last { rows * out4 as usize } else { 4 }),
                "alloc activations",
            )?;
            let mut logits = de(
                self.stream
                    .alloc_zeros::<i32>(if i == last { rows * l.out } else { 1 }),
                "alloc logits",
            )?;
            let (rows32, out32) = (rows as u32, l.out as u32);
            let mut b = self.stream.launch_builder(&self.k.mlp_layer);
            b.arg(&act)
                .arg(&in4)
                .arg(&w)
                .arg(&bias)
                .arg(&m)
                .arg(&sh)
                .arg(&rows32)
                .arg(&out32)
                .arg(&out4)
                .arg(&hidden)
                .arg(&mut y)
                .arg(&mut logits);
            // SAFETY: arguments match the kernel; x holds rows × in4 bytes, w out × in4, the
            // vectors `out` values, y rows × out4 bytes (hidden) and logits rows × out (last)
            de(unsafe { b.launch(grid_stride(rows * l.out)) }, "mlp_layer")?;
            if i == last {
                return de(self.stream.clone_dtoh(&logits), "copy logits");
            }
            act = y;
        }
        unreachable!("the last layer returns")
    }

    /// Tiles `tiles` (a contiguous range) of a `HashBatch` job.
    pub(crate) fn hash(&self, job: &JobSpec, tiles: std::ops::Range<u32>) -> Result<IndexedTiles> {
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
    pub(crate) fn rows_dot(
        &self,
        key: u64,
        rows: usize,
        cols: usize,
        vs: &[&[u32]],
    ) -> Result<Vec<Vec<u32>>> {
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

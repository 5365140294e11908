//! The integer decoder's dense layers and logits on one GPU (PROTOCOL §5, Generate): the
//! multiply-adds that are nearly all of a forward pass, by `dec_dense` and `dec_logits` in
//! `kernels.cu`, each call's accumulators the exact integers of [`Dense::acc`] and of
//! [`Decoder::logits`] before its requantization. The host does the rest of the pass as the
//! CPU's fast path does ([`crate::compute::decoder::Offload`]). A model's weights go to the
//! device once, as the model file holds them (4-bit nibbles, int8 embedding, int32 block
//! scales), and stay while the model is held.

use super::*;
use crate::compute::decoder::{denses, fast::int16, Model, Offload};
use compute_market_protocol::decoder::{Dense, BLOCK};

/// The decoder's kernels.
pub(crate) struct DecoderKernels {
    dense: CudaFunction,
    logits: CudaFunction,
}

impl DecoderKernels {
    pub(crate) fn load(f: &dyn Fn(&str) -> Result<CudaFunction>) -> Result<Self> {
        Ok(DecoderKernels {
            dense: f("dec_dense")?,
            logits: f("dec_logits")?,
        })
    }
}

/// Rows one launch takes at most (a prefill pass feeds 512; more are split).
const DECODER_GPU_ROWS: usize = 1024;

/// Rows a warp of the kernels computes (`DEC_ROWS` in `kernels.cu`).
const WARP_ROWS: usize = 8;

/// A dense layer's weights on the device, as [`Dense`] holds them.
pub(crate) struct DeviceDense {
    inp: u32,
    out: u32,
    q4: CudaSlice<u8>,
    d: CudaSlice<i32>,
    min: CudaSlice<i32>,
}

/// A decoder's weights on the device: each layer's seven dense layers (q, k, v, o, gate, up,
/// down) and the tied embedding.
pub(crate) struct DeviceDecoder {
    layers: Vec<[DeviceDense; 7]>,
    emb_q: CudaSlice<i8>,
    emb_d: CudaSlice<i32>,
}

/// A model on the device, with the host model it was copied from (compared by address: the
/// weak reference keeps the allocation, so the address is not reused while it is held, and lets
/// the model itself go when its job's inputs are released).
pub(crate) struct HeldDecoder {
    from: std::sync::Weak<Model>,
    weights: Arc<DeviceDecoder>,
}

/// The launch configuration of a kernel whose warps each take [`WARP_ROWS`] rows of one output.
fn warp_grid(outputs: usize, rows: usize) -> LaunchConfig {
    let warps = outputs as u64 * rows.div_ceil(WARP_ROWS) as u64;
    let blocks = warps.div_ceil(8).clamp(1, 65_535 * 4) as u32;
    cfg((blocks, 1, 1), (256, 1, 1))
}

/// Rows of int16 values laid end to end (each `width` long).
fn flat16(xs: &[Vec<i64>], width: usize) -> Result<Vec<i16>> {
    ensure!(
        xs.iter().all(|x| x.len() == width),
        "rows of {width} inputs are needed"
    );
    ensure!(
        xs.iter().flatten().all(|v| v.unsigned_abs() <= 32_767),
        "an input is beyond int16"
    );
    Ok(int16(xs).into_iter().flatten().collect())
}

impl Device {
    /// `d`'s weights copied to the device.
    pub(crate) fn dense_q4_up(&self, d: &Dense) -> Result<DeviceDense> {
        ensure!(
            d.inp.is_multiple_of(BLOCK)
                && d.q4.len() == d.out * d.inp / 2
                && d.d.len() == d.out * d.inp / BLOCK
                && d.min.len() == d.d.len(),
            "a dense layer's tensors do not match its {}×{} shape",
            d.out,
            d.inp
        );
        Ok(DeviceDense {
            inp: d.inp as u32,
            out: d.out as u32,
            q4: de(self.stream.clone_htod(&d.q4), "copy decoder weights")?,
            d: de(self.stream.clone_htod(&d.d), "copy decoder scales")?,
            min: de(self.stream.clone_htod(&d.min), "copy decoder minimums")?,
        })
    }

    /// [`Dense::acc`] of every row of `xs` (int16 values, `w.inp` each) by `dec_dense`.
    pub(crate) fn dense_q4_acc(&self, w: &DeviceDense, xs: &[Vec<i64>]) -> Result<Vec<Vec<i64>>> {
        let (inp, out) = (w.inp as usize, w.out as usize);
        let mut all = Vec::with_capacity(xs.len());
        for part in xs.chunks(DECODER_GPU_ROWS) {
            let x = flat16(part, inp)?;
            let rows = part.len() as u32;
            let _g = self.lock.lock().expect("device lock");
            let x = de(self.stream.clone_htod(&x), "copy decoder inputs")?;
            let mut acc = de(
                self.stream.alloc_zeros::<i64>(part.len() * out),
                "alloc decoder accumulators",
            )?;
            let mut l = self.stream.launch_builder(&self.k.dec.dense);
            l.arg(&x)
                .arg(&w.inp)
                .arg(&rows)
                .arg(&w.q4)
                .arg(&w.d)
                .arg(&w.min)
                .arg(&w.out)
                .arg(&mut acc);
            // SAFETY: arguments match the kernel; x holds rows × inp int16 (inp a multiple of
            // 32), q4 out × inp/2 bytes, d and min out × inp/32, acc rows × out
            de(unsafe { l.launch(warp_grid(out, part.len())) }, "dec_dense")?;
            let host = de(self.stream.clone_dtoh(&acc), "copy decoder accumulators")?;
            all.extend(host.chunks_exact(out.max(1)).map(<[i64]>::to_vec));
        }
        Ok(all)
    }

    /// `Σ_c ed[t][c/32] · eq[t][c] · y[c]` of every row of `ys` (int16 values, `h` each) and
    /// every token `t` of the embedding `(eq, ed)` by `dec_logits`.
    pub(crate) fn logit_accs(
        &self,
        (eq, ed): (&CudaSlice<i8>, &CudaSlice<i32>),
        h: usize,
        ys: &[Vec<i64>],
    ) -> Result<Vec<Vec<i64>>> {
        ensure!(
            h.is_multiple_of(BLOCK)
                && h > 0
                && eq.len().is_multiple_of(h)
                && ed.len() * BLOCK == eq.len(),
            "the embedding does not match a width of {h}"
        );
        let vocab = eq.len() / h;
        let (h32, v32) = (h as u32, vocab as u32);
        let mut all = Vec::with_capacity(ys.len());
        for part in ys.chunks(DECODER_GPU_ROWS) {
            let y = flat16(part, h)?;
            let rows = part.len() as u32;
            let _g = self.lock.lock().expect("device lock");
            let y = de(self.stream.clone_htod(&y), "copy final-norm rows")?;
            let mut acc = de(
                self.stream.alloc_zeros::<i64>(part.len() * vocab),
                "alloc logits",
            )?;
            let mut l = self.stream.launch_builder(&self.k.dec.logits);
            l.arg(&y)
                .arg(&h32)
                .arg(&rows)
                .arg(eq)
                .arg(ed)
                .arg(&v32)
                .arg(&mut acc);
            // SAFETY: arguments match the kernel; y holds rows × h int16 (h a multiple of 32),
            // eq vocab × h, ed vocab × h/32, acc rows × vocab
            de(
                unsafe { l.launch(warp_grid(vocab, part.len())) },
                "dec_logits",
            )?;
            let host = de(self.stream.clone_dtoh(&acc), "copy logits")?;
            all.extend(host.chunks_exact(vocab.max(1)).map(<[i64]>::to_vec));
        }
        Ok(all)
    }

    /// `model`'s weights on this device: those held when they are its, else copied (the last
    /// model's memory given back first).
    fn decoder_weights(&self, model: &Arc<Model>) -> Result<Arc<DeviceDecoder>> {
        let mut held = self.decoder.lock().expect("decoder lock");
        if let Some(h) = &*held {
            if std::ptr::eq(h.from.as_ptr(), Arc::as_ptr(model)) {
                return Ok(h.weights.clone());
            }
        }
        *held = None; // the last model's memory goes back before the next's
        let _g = self.lock.lock().expect("device lock");
        let dec = &model.decoder;
        let layers = dec
            .layers
            .iter()
            .map(|l| {
                let seven = denses(l)
                    .iter()
                    .map(|d| self.dense_q4_up(d))
                    .collect::<Result<Vec<_>>>()?;
                seven
                    .try_into()
                    .map_err(|_| anyhow!("a layer has seven dense layers"))
            })
            .collect::<Result<_>>()?;
        let weights = Arc::new(DeviceDecoder {
            layers,
            emb_q: de(self.stream.clone_htod(&dec.emb_q), "copy the embedding")?,
            emb_d: de(
                self.stream.clone_htod(&dec.emb_d),
                "copy the embedding's scales",
            )?,
        });
        *held = Some(HeldDecoder {
            from: Arc::downgrade(model),
            weights: weights.clone(),
        });
        Ok(weights)
    }
}

/// A model's dense layers and logits on one GPU ([`Offload`]).
pub struct GpuDecoder {
    device: Arc<Device>,
    model: Arc<Model>,
    weights: Arc<DeviceDecoder>,
    /// Calls that failed (and were computed on the CPU instead).
    failed: AtomicUsize,
}

impl GpuDecoder {
    /// `model` on `device` (its weights copied there unless held).
    pub(crate) fn new(device: Arc<Device>, model: Arc<Model>) -> Result<Self> {
        let weights = device.decoder_weights(&model)?;
        Ok(GpuDecoder {
            device,
            model,
            weights,
            failed: AtomicUsize::new(0),
        })
    }

    /// Calls that failed on the device so far (the CPU computed them).
    pub fn failed(&self) -> usize {
        self.failed.load(Ordering::Relaxed)
    }

    fn counted<T>(&self, r: Result<T>) -> Result<T> {
        if r.is_err() {
            self.failed.fetch_add(1, Ordering::Relaxed);
            // the device's too: no later job offloads to it
            self.device.decoder_failures.fetch_add(1, Ordering::Relaxed);
        }
        r
    }
}

impl Offload for GpuDecoder {
    fn name(&self) -> String {
        format!("cuda:{} ({})", self.device.ordinal, self.device.name)
    }

    fn acc(&self, d: &Dense, xs: &[Vec<i64>]) -> Result<Vec<Vec<i64>>> {
        // the layer by address among the model's (the only weights on the device)
        let r = match self.model.dense_at(d) {
            Some((l, i)) => self.device.dense_q4_acc(&self.weights.layers[l][i], xs),
            None => Err(anyhow!("a dense layer that is not the held model's")),
        };
        self.counted(r)
    }

    fn logit_accs(&self, ys: &[Vec<i64>]) -> Result<Vec<Vec<i64>>> {
        self.counted(self.device.logit_accs(
            (&self.weights.emb_q, &self.weights.emb_d),
            self.model.decoder.width,
            ys,
        ))
    }
}

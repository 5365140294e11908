//! The integer encoder on one GPU (PROTOCOL §5, Encoder): a batch of texts, their rows
//! stacked, through one launch per step (`enc_*` in `kernels.cu`), every value the CPU
//! reference's. The model's weights go to the device per call, transposed so that a warp's
//! threads (consecutive outputs) read consecutive words; activations stay on the device; only
//! the pooled embeddings come back.

use super::*;
use compute_market_protocol::encoder::{Dense, Encoder, Norm, Requant, GELU_HALF, RES_CLAMP};
use cudarc::driver::{CudaSlice, DeviceRepr};

/// The encoder's kernels.
pub(crate) struct EncoderKernels {
    embed: CudaFunction,
    norm: CudaFunction,
    gemm: CudaFunction,
    attention: CudaFunction,
    residual: CudaFunction,
    gelu: CudaFunction,
    pool: CudaFunction,
}

impl EncoderKernels {
    pub(crate) fn load(f: &dyn Fn(&str) -> Result<CudaFunction>) -> Result<Self> {
        Ok(EncoderKernels {
            embed: f("enc_embed")?,
            norm: f("enc_norm")?,
            gemm: f("enc_gemm")?,
            attention: f("enc_attention")?,
            residual: f("enc_residual")?,
            gelu: f("enc_gelu")?,
            pool: f("enc_pool")?,
        })
    }
}

/// Rows (tokens) one call runs at most: its activations take ~(3H + 2F) · 6 bytes a row.
pub const ENCODER_GPU_ROWS: usize = 32_768;

/// `n` rounded up to a multiple of 4: the int16 rows' stride (`enc_gemm` reads pairs of pairs).
fn pad4(n: usize) -> usize {
    n.div_ceil(4) * 4
}

/// A dense layer (or `q`, `k`, `v` side by side) on the device: weights transposed to
/// `⌈in/4⌉` rows of `out` words (each word an output's four int8 weights of four inputs), and
/// per-output bias and requantization.
struct DeviceDense {
    k4: u32,
    out: u32,
    wt: CudaSlice<i32>,
    bias: CudaSlice<i32>,
    m: CudaSlice<i32>,
    s: CudaSlice<i32>,
}

/// A requantization or LayerNorm's vectors on the device.
struct DeviceVecs(CudaSlice<i32>, CudaSlice<i32>);

/// An encoder on the device, with the host encoder it was copied from (compared by address:
/// the held inputs' `Arc`, alive as long as this holds it).
pub(crate) struct HeldEncoder {
    from: Arc<Encoder>,
    model: Arc<DeviceModel>,
}

/// An encoder's tensors on the device.
struct DeviceModel {
    blocks: Vec<DeviceBlock>,
    shared: Shared,
}

/// The embeddings' tables and requantizations, the first LayerNorm and the exp table.
type Shared = (
    CudaSlice<i8>,
    CudaSlice<i8>,
    DeviceVecs,
    DeviceVecs,
    (DeviceVecs, i32),
    CudaSlice<i32>,
);

struct DeviceBlock {
    qkv: DeviceDense,
    o: DeviceDense,
    f1: DeviceDense,
    f2: DeviceDense,
    ctx: DeviceVecs,
    res1: DeviceVecs,
    ln1: (DeviceVecs, i32),
    gelu: CudaSlice<i16>,
    res2: DeviceVecs,
    ln2: (DeviceVecs, i32),
    att: (i32, i32),
}

impl Device {
    fn up<T: DeviceRepr>(&self, v: &[T], what: &str) -> Result<CudaSlice<T>> {
        de(self.stream.clone_htod(v), what)
    }

    fn dense_up(&self, layers: &[&Dense]) -> Result<DeviceDense> {
        let inp = layers[0].inp;
        let out: usize = layers.iter().map(|d| d.out).sum();
        let k4 = pad4(inp);
        let mut wt = vec![0i32; k4 / 4 * out];
        let rows = layers
            .iter()
            .flat_map(|d| d.weight.chunks_exact(d.inp.max(1)));
        for (o, row) in rows.enumerate() {
            for (q, four) in row.chunks(4).enumerate() {
                let mut b = [0u8; 4];
                for (b, &w) in b.iter_mut().zip(four) {
                    *b = w as u8;
                }
                wt[q * out + o] = i32::from_le_bytes(b);
            }
        }
        let cat = |f: &dyn Fn(&Dense) -> &[i32]| -> Vec<i32> {
            layers.iter().flat_map(|d| f(d).iter().copied()).collect()
        };
        Ok(DeviceDense {
            k4: k4 as u32,
            out: out as u32,
            wt: self.up(&wt, "copy encoder weights")?,
            bias: self.up(&cat(&|d| &d.bias), "copy encoder biases")?,
            m: self.up(&cat(&|d| &d.rq.m), "copy encoder multipliers")?,
            s: self.up(&cat(&|d| &d.rq.s), "copy encoder shifts")?,
        })
    }

    fn rq_up(&self, r: &Requant) -> Result<DeviceVecs> {
        Ok(DeviceVecs(
            self.up(&r.m, "copy requantization")?,
            self.up(&r.s, "copy requantization")?,
        ))
    }

    fn norm_up(&self, n: &Norm) -> Result<(DeviceVecs, i32)> {
        Ok((
            DeviceVecs(
                self.up(&n.g, "copy LayerNorm")?,
                self.up(&n.b, "copy LayerNorm")?,
            ),
            n.shift,
        ))
    }

    /// `x` (rows of `k4` int16) through `d`, requantized to `lo ..= hi`: rows × out int32.
    fn enc_gemm(
        &self,
        d: &DeviceDense,
        x: &CudaSlice<i16>,
        rows: u32,
        (lo, hi): (i64, i64),
    ) -> Result<CudaSlice<i32>> {
        let mut y = de(
            self.stream
                .alloc_zeros::<i32>(rows as usize * d.out as usize),
            "alloc encoder outputs",
        )?;
        let mut l = self.stream.launch_builder(&self.k.enc.gemm);
        l.arg(x)
            .arg(&d.k4)
            .arg(&d.wt)
            .arg(&d.bias)
            .arg(&d.m)
            .arg(&d.s)
            .arg(&rows)
            .arg(&d.out)
            .arg(&lo)
            .arg(&hi)
            .arg(&mut y);
        // SAFETY: arguments match the kernel; x holds rows × k4 int16, wt k4/4 × out words,
        // the vectors `out` values, y rows × out
        de(
            unsafe { l.launch(grid_stride(rows as usize * d.out as usize)) },
            "enc_gemm",
        )?;
        Ok(y)
    }

    /// LayerNorm `n` over the residual rows `r` (rows × h) into int16 rows of `stride`.
    fn enc_norm(
        &self,
        (v, shift): &(DeviceVecs, i32),
        r: &CudaSlice<i32>,
        h: u32,
        rows: u32,
        y: &mut CudaSlice<i16>,
        stride: u32,
    ) -> Result<()> {
        let mut l = self.stream.launch_builder(&self.k.enc.norm);
        l.arg(r)
            .arg(&h)
            .arg(&v.0)
            .arg(&v.1)
            .arg(shift)
            .arg(&rows)
            .arg(y)
            .arg(&stride);
        // SAFETY: arguments match the kernel; r holds rows × h, y rows × stride (≥ h)
        de(
            unsafe { l.launch(cfg((rows.clamp(1, 65_535), 1, 1), (256, 1, 1))) },
            "enc_norm",
        )?;
        Ok(())
    }

    /// `r = rq(y) + a` over rows × h.
    fn enc_residual(
        &self,
        y: &CudaSlice<i16>,
        stride: u32,
        a: &CudaSlice<i32>,
        rq: &DeviceVecs,
        h: u32,
        rows: u32,
        r: &mut CudaSlice<i32>,
    ) -> Result<()> {
        let mut l = self.stream.launch_builder(&self.k.enc.residual);
        l.arg(y)
            .arg(&stride)
            .arg(a)
            .arg(&rq.0)
            .arg(&rq.1)
            .arg(&h)
            .arg(&rows)
            .arg(r);
        // SAFETY: arguments match the kernel; a and r hold rows × h, y rows × stride
        de(
            unsafe { l.launch(grid_stride(rows as usize * h as usize)) },
            "enc_residual",
        )?;
        Ok(())
    }

    /// Each text's embedding (token ids as `Encoder::embed` takes them), by launches on this
    /// GPU, in calls of at most [`ENCODER_GPU_ROWS`] rows. Every text is checked first: 1 ..=
    /// the encoder's positions (and 512, the attention kernel's shared scores) tokens, each id
    /// below its vocabulary, since the kernels index tables with them.
    pub(crate) fn encoder_embed(
        &self,
        enc: &Arc<Encoder>,
        texts: &[&[u32]],
    ) -> Result<Vec<Vec<i16>>> {
        let most = enc
            .positions()
            .min(compute_market_protocol::encoder::MAX_POSITIONS);
        let vocab = enc.vocab() as u32;
        for (i, t) in texts.iter().enumerate() {
            ensure!(
                (1..=most).contains(&t.len()),
                "text {} has {} tokens: the encoder takes 1 ..= {most}",
                i + 1,
                t.len()
            );
            ensure!(
                t.iter().all(|&id| id < vocab),
                "text {} has a token id past the vocabulary of {vocab}",
                i + 1
            );
        }
        let _g = self.lock.lock().expect("device lock");
        let model = {
            let mut held = self.encoder.lock().expect("encoder lock");
            match &*held {
                Some(h) if Arc::ptr_eq(&h.from, enc) => h.model.clone(),
                _ => {
                    *held = None; // the last model's memory goes back before the next's
                    let model = Arc::new(self.model_up(enc)?);
                    *held = Some(HeldEncoder {
                        from: enc.clone(),
                        model: model.clone(),
                    });
                    model
                }
            }
        };
        let mut out = Vec::with_capacity(texts.len());
        let mut at = 0;
        while at < texts.len() {
            let mut end = at + 1;
            let mut rows = texts[at].len();
            while end < texts.len() && rows + texts[end].len() <= ENCODER_GPU_ROWS {
                rows += texts[end].len();
                end += 1;
            }
            out.extend(self.encoder_batch(enc, &model.blocks, &model.shared, &texts[at..end])?);
            at = end;
        }
        Ok(out)
    }

    /// `enc`'s tensors copied to the device.
    fn model_up(&self, enc: &Encoder) -> Result<DeviceModel> {
        let blocks: Vec<DeviceBlock> = enc
            .blocks
            .iter()
            .map(|b| {
                Ok(DeviceBlock {
                    qkv: self.dense_up(&[&b.q, &b.k, &b.v])?,
                    o: self.dense_up(&[&b.o])?,
                    f1: self.dense_up(&[&b.f1])?,
                    f2: self.dense_up(&[&b.f2])?,
                    ctx: self.rq_up(&b.ctx)?,
                    res1: self.rq_up(&b.res1)?,
                    ln1: self.norm_up(&b.ln1)?,
                    gelu: self.up(&b.gelu, "copy GELU table")?,
                    res2: self.rq_up(&b.res2)?,
                    ln2: self.norm_up(&b.ln2)?,
                    att: b.att,
                })
            })
            .collect::<Result<_>>()?;
        let shared = (
            self.up(&enc.word, "copy word embeddings")?,
            self.up(&enc.pos, "copy position embeddings")?,
            self.rq_up(&enc.word_rq)?,
            self.rq_up(&enc.pos_rq)?,
            self.norm_up(&enc.ln)?,
            self.up(&enc.exp, "copy exp table")?,
        );
        Ok(DeviceModel { blocks, shared })
    }

    /// One call's texts (at most [`ENCODER_GPU_ROWS`] rows) through the model on the device.
    fn encoder_batch(
        &self,
        enc: &Encoder,
        blocks: &[DeviceBlock],
        (word, pos, word_rq, pos_rq, ln, exp): &Shared,
        texts: &[&[u32]],
    ) -> Result<Vec<Vec<i16>>> {
        let h = enc.hidden;
        let (h32, heads) = (h as u32, enc.heads as u32);
        let rows: usize = texts.iter().map(|t| t.len()).sum();
        let rows32 = rows as u32;
        // per row: its id, position, and its text's first row and length; per text the same
        let (mut ids, mut ps, mut first, mut len) = (vec![], vec![], vec![], vec![]);
        let (mut tfirst, mut tlen) = (vec![], vec![]);
        for t in texts {
            let f = ids.len() as u32;
            tfirst.push(f);
            tlen.push(t.len() as u32);
            for (p, &id) in t.iter().enumerate() {
                ids.push(id);
                ps.push(p as u32);
                first.push(f);
                len.push(t.len() as u32);
            }
        }
        let (ids, ps) = (self.up(&ids, "copy ids")?, self.up(&ps, "copy positions")?);
        let (first, len) = (self.up(&first, "copy rows")?, self.up(&len, "copy rows")?);
        let (tfirst, tlen) = (
            self.up(&tfirst, "copy texts")?,
            self.up(&tlen, "copy texts")?,
        );
        let sh = pad4(h) as u32;
        let alloc = |n: usize, what: &str| de(self.stream.alloc_zeros::<i32>(n), what);
        let alloc16 = |n: usize, what: &str| de(self.stream.alloc_zeros::<i16>(n), what);
        let mut r = alloc(rows * h, "alloc residual stream")?;
        let mut y = alloc16(rows * sh as usize, "alloc LayerNorm rows")?;
        let mut ctx = alloc16(rows * sh as usize, "alloc context rows")?;
        {
            let mut l = self.stream.launch_builder(&self.k.enc.embed);
            l.arg(&ids)
                .arg(&ps)
                .arg(word)
                .arg(pos)
                .arg(&h32)
                .arg(&word_rq.0)
                .arg(&word_rq.1)
                .arg(&pos_rq.0)
                .arg(&pos_rq.1)
                .arg(&rows32)
                .arg(&mut r);
            // SAFETY: arguments match the kernel; ids below the vocabulary and positions below
            // the table (the caller's checks), r rows × h
            de(unsafe { l.launch(grid_stride(rows * h)) }, "enc_embed")?;
        }
        self.enc_norm(ln, &r, h32, rows32, &mut y, sh)?;
        for b in blocks {
            let qkv = self.enc_gemm(&b.qkv, &y, rows32, (-128, 127))?;
            {
                let mut l = self.stream.launch_builder(&self.k.enc.attention);
                l.arg(&qkv)
                    .arg(&h32)
                    .arg(&heads)
                    .arg(&first)
                    .arg(&len)
                    .arg(exp)
                    .arg(&b.att.0)
                    .arg(&b.att.1)
                    .arg(&b.ctx.0)
                    .arg(&b.ctx.1)
                    .arg(&rows32)
                    .arg(&mut ctx)
                    .arg(&sh);
                let blocks = (rows as u64 * heads as u64).clamp(1, 65_535 * 4) as u32;
                // SAFETY: arguments match the kernel; qkv rows × 3h, every text ≤ 512 rows
                // (the kernel's shared scores), ctx rows × sh
                de(
                    unsafe { l.launch(cfg((blocks, 1, 1), (128, 1, 1))) },
                    "enc_attention",
                )?;
            }
            let a = self.enc_gemm(&b.o, &ctx, rows32, (-RES_CLAMP, RES_CLAMP))?;
            self.enc_residual(&y, sh, &a, &b.res1, h32, rows32, &mut r)?;
            self.enc_norm(&b.ln1, &r, h32, rows32, &mut y, sh)?;
            let ffn = b.f1.out;
            let u = self.enc_gemm(&b.f1, &y, rows32, (-GELU_HALF, GELU_HALF - 1))?;
            let sf = pad4(ffn as usize) as u32;
            let mut g = alloc16(rows * sf as usize, "alloc GELU rows")?;
            {
                let mut l = self.stream.launch_builder(&self.k.enc.gelu);
                l.arg(&u)
                    .arg(&b.gelu)
                    .arg(&ffn)
                    .arg(&rows32)
                    .arg(&mut g)
                    .arg(&sf);
                // SAFETY: arguments match the kernel; u in −512 ..= 511 (its clamp), the
                // table 1 024 entries, g rows × sf
                de(
                    unsafe { l.launch(grid_stride(rows * ffn as usize)) },
                    "enc_gelu",
                )?;
            }
            let f = self.enc_gemm(&b.f2, &g, rows32, (-RES_CLAMP, RES_CLAMP))?;
            self.enc_residual(&y, sh, &f, &b.res2, h32, rows32, &mut r)?;
            self.enc_norm(&b.ln2, &r, h32, rows32, &mut y, sh)?;
        }
        let n = texts.len() as u32;
        let mut pooled = alloc16(texts.len() * h, "alloc embeddings")?;
        let mut l = self.stream.launch_builder(&self.k.enc.pool);
        l.arg(&y)
            .arg(&sh)
            .arg(&tfirst)
            .arg(&tlen)
            .arg(&h32)
            .arg(&n)
            .arg(&mut pooled);
        // SAFETY: arguments match the kernel; y rows × sh, pooled texts × h
        de(
            unsafe { l.launch(grid_stride(texts.len() * h)) },
            "enc_pool",
        )?;
        let host = de(self.stream.clone_dtoh(&pooled), "copy embeddings")?;
        Ok(host.chunks_exact(h).map(<[i16]>::to_vec).collect())
    }
}

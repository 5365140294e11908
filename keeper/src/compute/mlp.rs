//! Integer MLP inference on the CPU (PROTOCOL §5, Mlp): the model and batch files read and
//! checked (every tensor's name, dtype and shape, then [`Mlp::check`]'s bounds, each refusal
//! naming what broke), and the batch run row by row on every core.
//!
//! The arithmetic is the protocol crate's ([`compute_market_protocol::infer`]); the fast path
//! here only spreads rows over threads and feeds each layer a contiguous weight row, so its
//! bytes are the reference's by construction, and tests hold them equal.

use anyhow::{anyhow, bail, ensure, Result};
use compute_market_protocol::infer::{class_of, row_len, Layer, Mlp, MAX_LAYERS};
use rayon::prelude::*;
use safetensors::{Dtype, SafeTensors};

use super::tensors::{i32s, tensors};

/// Reads a model file — layers `l0 … l{L−1}`, each `weight` `I8` [out, in] and `bias` `I32`
/// [out], hidden ones also `multiplier` and `shift` `I32` [out]; nothing else — and checks it
/// for a batch of width `features` and `classes` outputs.
pub fn parse_model(bytes: &[u8], features: usize, classes: usize) -> Result<Mlp> {
    let mlp = read_model(bytes)?;
    check_model(&mlp, features, classes)?;
    Ok(mlp)
}

/// [`Mlp::check`], as an error that says the model is refused.
pub fn check_model(mlp: &Mlp, features: usize, classes: usize) -> Result<()> {
    mlp.check(features, classes)
        .map_err(|e| anyhow!("the model is refused: {e}"))
}

/// The layers of a model file, each tensor's name, dtype and shape checked, not yet the
/// model's bounds ([`check_model`]).
pub fn read_model(bytes: &[u8]) -> Result<Mlp> {
    let mut t = tensors(bytes, "the model")?;
    let count = (0..=MAX_LAYERS)
        .take_while(|i| t.contains_key(&format!("l{i}.weight")))
        .count();
    let mut layers = vec![];
    for i in 0..count {
        let mut take = |field: &str, dtype: Dtype| -> Result<Option<(Vec<usize>, &[u8])>> {
            let name = format!("l{i}.{field}");
            match t.remove(&name) {
                None => Ok(None),
                Some((d, _, _)) if d != dtype => {
                    bail!("the model's {name} is {d:?}, it must be {dtype:?}")
                }
                Some((_, shape, data)) => Ok(Some((shape, data))),
            }
        };
        let (wshape, w) = take("weight", Dtype::I8)?.expect("counted");
        let [out, inp] = wshape[..] else {
            bail!("the model's l{i}.weight has shape {wshape:?}, it must be [out, in]");
        };
        let vector = |field: &str, got: Option<(Vec<usize>, &[u8])>| -> Result<Option<Vec<i32>>> {
            match got {
                None => Ok(None),
                Some((shape, data)) => {
                    ensure!(
                        shape == [out],
                        "the model's l{i}.{field} has shape {shape:?}, layer {i} has {out} outputs"
                    );
                    Ok(Some(i32s(data)))
                }
            }
        };
        let bias = vector("bias", take("bias", Dtype::I32)?)?
            .ok_or_else(|| anyhow!("the model has no l{i}.bias"))?;
        let m = vector("multiplier", take("multiplier", Dtype::I32)?)?;
        let s = vector("shift", take("shift", Dtype::I32)?)?;
        let requant = match (m, s) {
            (Some(m), Some(s)) => Some((m, s)),
            (None, None) => None,
            _ => bail!("the model's layer {i} has a multiplier or a shift without the other"),
        };
        layers.push(Layer {
            inp,
            out,
            weight: w.iter().map(|&b| b as i8).collect(),
            bias,
            requant,
        });
    }
    if let Some(extra) = t.keys().min() {
        bail!("the model holds a tensor it may not: {extra:?} (layers are l0 … l{count}, at most {MAX_LAYERS})");
    }
    Ok(Mlp { layers })
}

/// The digits model (checked in; `scripts/digits-model`), for the demo and the bench.
pub const DIGITS_MODEL: &[u8] = include_bytes!("../../../models/digits-mlp.safetensors");
/// The 450 held-out digits (`x`, `labels`, numpy's `logits`), for the demo and the bench.
pub const DIGITS_HELDOUT: &[u8] = include_bytes!("../../../models/digits-heldout.safetensors");

/// The held-out digits as a batch file (`x` alone) and their labels.
pub fn digits_heldout() -> Result<(Vec<u8>, Vec<u8>)> {
    let st = SafeTensors::deserialize(DIGITS_HELDOUT)
        .map_err(|e| anyhow!("the held-out digits: {e}"))?;
    let x = st
        .tensor("x")
        .map_err(|e| anyhow!("the held-out digits: {e}"))?;
    let labels = st
        .tensor("labels")
        .map_err(|e| anyhow!("the held-out digits: {e}"))?
        .data()
        .to_vec();
    let batch = safetensors::serialize([("x", x)], None).map_err(|e| anyhow!("{e}"))?;
    Ok((batch, labels))
}

/// A model's safetensors file (PROTOCOL §5, Mlp: `l{i}.weight` `I8` [out, in], `l{i}.bias`
/// and, for hidden layers, `l{i}.multiplier` and `l{i}.shift` `I32` [out]): what a client
/// posts, here for models made in code (tests, the demo's wide model).
pub fn model_file(m: &Mlp) -> Result<Vec<u8>> {
    use safetensors::{tensor::TensorView, Dtype};
    let le = |v: &[i32]| -> Vec<u8> { v.iter().flat_map(|x| x.to_le_bytes()).collect() };
    let mut data: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = vec![];
    for (i, l) in m.layers.iter().enumerate() {
        let w = l.weight.iter().map(|&x| x as u8).collect();
        data.push((format!("l{i}.weight"), Dtype::I8, vec![l.out, l.inp], w));
        data.push((format!("l{i}.bias"), Dtype::I32, vec![l.out], le(&l.bias)));
        if let Some((mul, shift)) = &l.requant {
            data.push((format!("l{i}.multiplier"), Dtype::I32, vec![l.out], le(mul)));
            data.push((format!("l{i}.shift"), Dtype::I32, vec![l.out], le(shift)));
        }
    }
    let views: Vec<(String, TensorView)> = data
        .iter()
        .map(|(n, d, shape, bytes)| {
            Ok((
                n.clone(),
                TensorView::new(*d, shape.clone(), bytes).map_err(|e| anyhow!("{e}"))?,
            ))
        })
        .collect::<Result<_>>()?;
    safetensors::serialize(views, None).map_err(|e| anyhow!("{e}"))
}

/// A batch's safetensors file: one tensor `x`, `I8` [rows, features].
pub fn batch_file(x: &[i8], features: usize) -> Result<Vec<u8>> {
    use safetensors::{tensor::TensorView, Dtype};
    let bytes: Vec<u8> = x.iter().map(|&v| v as u8).collect();
    let view = TensorView::new(Dtype::I8, vec![x.len() / features, features], &bytes)
        .map_err(|e| anyhow!("{e}"))?;
    safetensors::serialize([("x", view)], None).map_err(|e| anyhow!("{e}"))
}

/// The float model's held-out accuracy, from the model file's metadata.
pub fn digits_float_accuracy() -> Option<f64> {
    let (_, meta) = SafeTensors::read_metadata(DIGITS_MODEL).ok()?;
    meta.metadata()
        .as_ref()?
        .get("float_accuracy")?
        .parse()
        .ok()
}

/// A batch: `rows × features` int8, row-major.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Batch {
    /// Rows.
    pub rows: usize,
    /// Features per row.
    pub features: usize,
    /// The values.
    pub x: Vec<i8>,
}

/// Reads a batch file: exactly one tensor `x`, `I8` [rows, features], as the job says.
pub fn parse_batch(bytes: &[u8], rows: usize, features: usize) -> Result<Batch> {
    let t = tensors(bytes, "the batch")?;
    let names: Vec<&String> = t.keys().collect();
    ensure!(
        names.len() == 1 && t.contains_key("x"),
        "the batch must hold exactly one tensor named \"x\", it holds {names:?}"
    );
    let (d, shape, data) = &t["x"];
    ensure!(*d == Dtype::I8, "the batch's x is {d:?}, it must be I8");
    ensure!(
        shape[..] == [rows, features],
        "the batch's x has shape {shape:?}, the job's is [{rows}, {features}] (a batch of the wrong width?)"
    );
    Ok(Batch {
        rows,
        features,
        x: data.iter().map(|&b| b as i8).collect(),
    })
}

/// Rows computed together: each weight row is read once per block, not once per row, so a
/// model larger than the caches streams from memory BLOCK times less.
const BLOCK: usize = 8;

/// Output rows `first .. first + count` (rows past the batch are zero), laid out as
/// PROTOCOL §5 says, on every core, [`BLOCK`] rows at a time.
pub fn run_rows(model: &Mlp, batch: &Batch, first: usize, count: usize) -> Vec<u8> {
    let classes = model.layers.last().map_or(0, |l| l.out);
    let len = row_len(classes);
    let f = batch.features;
    let mut out = vec![0u8; count * len];
    out.par_chunks_mut(len * BLOCK)
        .enumerate()
        .for_each(|(b, chunk)| {
            let r0 = first + b * BLOCK;
            let n = (chunk.len() / len).min(batch.rows.saturating_sub(r0));
            if n == 0 {
                return;
            }
            let logits = logits_block(model, &batch.x[r0 * f..(r0 + n) * f], n);
            for (row, l) in chunk
                .chunks_exact_mut(len)
                .zip(logits.chunks_exact(classes))
            {
                write_row(row, l);
            }
        });
    out
}

/// One output row (PROTOCOL §5, Mlp) from its logits: each LE `i32`, then the class as LE
/// `u32`; `row` is [`row_len`] bytes for `logits.len()` classes.
pub fn write_row(row: &mut [u8], logits: &[i32]) {
    for (o, v) in logits.iter().enumerate() {
        row[4 * o..4 * o + 4].copy_from_slice(&v.to_le_bytes());
    }
    row[4 * logits.len()..].copy_from_slice(&class_of(logits).to_le_bytes());
}

/// [`Mlp::logits`] of `n` rows at once (`x` is n × features), weights outer, rows inner, with
/// the activations widened to `i16` (the compiler vectorizes each dot product); the same
/// integers within the same bounds, so the same result. Returns n × classes.
fn logits_block(model: &Mlp, x: &[i8], n: usize) -> Vec<i32> {
    let mut a: Vec<i16> = x.iter().map(|&v| i16::from(v)).collect();
    let last = model.layers.len() - 1;
    for (i, l) in model.layers.iter().enumerate() {
        let mut acc = vec![0i32; n * l.out];
        for o in 0..l.out {
            let w = &l.weight[o * l.inp..(o + 1) * l.inp];
            for r in 0..n {
                let ar = &a[r * l.inp..(r + 1) * l.inp];
                acc[r * l.out + o] = l.bias[o]
                    + w.iter()
                        .zip(ar)
                        .map(|(&w, &x)| i32::from(i16::from(w) * x))
                        .sum::<i32>();
            }
        }
        if i == last {
            return acc;
        }
        a = acc
            .iter()
            .enumerate()
            .map(|(j, &v)| i16::from(l.activation(j % l.out, v)))
            .collect();
    }
    unreachable!("a checked model has a last layer")
}

/// A synthetic 64-256-256-10 model (weights from a fixed generator) for measuring speed.
pub(super) fn synthetic() -> Mlp {
    let widths = [64usize, 256, 256, 10];
    let layers = widths
        .windows(2)
        .enumerate()
        .map(|(i, w)| {
            let (inp, out) = (w[0], w[1]);
            let last = i == widths.len() - 2;
            Layer {
                inp,
                out,
                weight: (0..inp * out)
                    .map(|j| (compute_market_protocol::job::splitmix64(j as u64) % 255) as i8)
                    .collect(),
                bias: vec![0; out],
                requant: (!last).then(|| (vec![1 << 30; out], vec![40; out])),
            }
        })
        .collect();
    Mlp { layers }
}

/// Multiply-adds per row of the synthetic model.
pub fn synthetic_work() -> u64 {
    synthetic().work_per_row()
}

/// A 13-30-7-10 model with widths that are not multiples of 4, biases near ±2^24, a
/// multiplier and shift of its own per channel (shifts from 1 to 62, so outputs saturate at
/// both clamps and round at every scale), over `rows` rows of the full int8 range: what a GPU
/// kernel must reproduce bit for bit (its start-up self-test).
pub fn odd_synthetic(rows: usize) -> (Mlp, Batch) {
    let g = |salt: u64, i: usize| compute_market_protocol::job::splitmix64(salt << 32 ^ i as u64);
    let widths = [13usize, 30, 7, 10];
    let layers = widths
        .windows(2)
        .enumerate()
        .map(|(l, w)| {
            let (inp, out) = (w[0], w[1]);
            let salt = l as u64 * 8;
            let last = l == widths.len() - 2;
            Layer {
                inp,
                out,
                weight: (0..inp * out).map(|j| g(salt, j) as i8).collect(),
                bias: (0..out)
                    .map(|o| (g(salt + 1, o) % (1 << 25)) as i32 - (1 << 24))
                    .collect(),
                requant: (!last).then(|| {
                    let m = (0..out)
                        .map(|o| (g(salt + 2, o) % ((1 << 31) - 1)) as i32 + 1)
                        .collect();
                    let s = (0..out)
                        .map(|o| match o % 5 {
                            0 => 62,
                            1 => 1,
                            _ => 20 + (g(salt + 3, o) % 30) as i32,
                        })
                        .collect();
                    (m, s)
                }),
            }
        })
        .collect();
    let batch = Batch {
        rows,
        features: 13,
        x: (0..rows * 13).map(|i| g(99, i) as i8).collect(),
    };
    (Mlp { layers }, batch)
}

/// Runs `rows` rows through the synthetic model (for a speed figure).
pub fn synthetic_run(rows: usize) -> Vec<u8> {
    let m = synthetic();
    let batch = Batch {
        rows,
        features: 64,
        x: (0..rows * 64).map(|i| (i % 17) as i8).collect(),
    };
    run_rows(&m, &batch, 0, rows)
}

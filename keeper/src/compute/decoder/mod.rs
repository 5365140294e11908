//! Integer text generation on the CPU (PROTOCOL §5, Generate): the model file read and checked
//! (every tensor's name, dtype and shape, then [`Decoder::check`]'s bounds), prompts wrapped in
//! the model's chat template and tokenized with Hugging Face's `tokenizers` (the byte-level BPE
//! the model file carries), and tokens generated greedily.
//!
//! The arithmetic is the protocol crate's ([`compute_market_protocol::decoder`]).

use anyhow::{anyhow, bail, ensure, Result};
use compute_market_protocol::decoder::{
    argmax, reference_acc, Decoder, Dense, Layer, Rq, BLOCK, MAX_LAYERS,
};
use safetensors::Dtype;
use tokenizers::Tokenizer;

use super::tensors::{i32s, tensors, Tensors};

pub mod fast;
pub mod job;
pub mod kernels;
pub mod random;

/// A model file's decoder, tokenizer and chat template.
pub struct Model {
    /// The integer decoder (checked).
    pub decoder: Decoder,
    /// The model's byte-level BPE.
    pub tokenizer: Tokenizer,
    /// The chat template before the user's prompt.
    pub chat_pre: String,
    /// The chat template after it, up to where the answer starts.
    pub chat_post: String,
    /// The end-of-turn token: generation stops after it.
    pub eos: u32,
    /// Each layer's dense layers (q, k, v, o, gate, up, down) repacked for many rows at once,
    /// where this machine runs the packed kernel ([`kernels::Packed`]); empty elsewhere.
    pub packed: Vec<[kernels::Packed; 7]>,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model")
            .field("width", &self.decoder.width)
            .field("layers", &self.decoder.layers.len())
            .field("vocab", &self.decoder.vocab())
            .finish()
    }
}

impl Model {
    /// The work units per token of a `Generate` job at a context of `ctx` positions
    /// ([`compute_market_protocol::job::decoder_work_per_token`]).
    pub fn work_per_token(&self, ctx: usize) -> u64 {
        let d = &self.decoder;
        compute_market_protocol::job::decoder_work_per_token(
            d.layers.len() as u64,
            d.width as u64,
            d.ffn() as u64,
            d.heads as u64,
            d.kv_heads as u64,
            d.head_dim as u64,
            d.vocab() as u64,
            ctx as u64,
        )
    }

    /// The dense layers' accumulators on the fast path: four rows or more through the packed
    /// kernel where this machine runs it, else (and for fewer rows) [`fast::acc_rows`]. The same
    /// integers either way.
    pub fn acc(&self, d: &Dense, xs: &[Vec<i64>]) -> Vec<Vec<i64>> {
        if xs.len() >= 4 {
            if let Some(p) = self
                .dense_at(d)
                .and_then(|(l, i)| Some(&self.packed.get(l)?[i]))
            {
                return fast::acc_rows_packed(p, d, xs);
            }
        }
        fast::acc_rows(d, xs)
    }

    /// Where `d` is among the model's dense layers (by address): its layer and its index in
    /// [`denses`] order.
    pub fn dense_at(&self, d: &Dense) -> Option<(usize, usize)> {
        self.decoder
            .layers
            .iter()
            .enumerate()
            .find_map(|(l, layer)| {
                denses(layer)
                    .iter()
                    .position(|x| std::ptr::eq(*x, d))
                    .map(|i| (l, i))
            })
    }

    /// The token ids of one user prompt in the chat template.
    pub fn prompt_ids(&self, prompt: &str) -> Result<Vec<u32>> {
        let text = format!("{}{prompt}{}", self.chat_pre, self.chat_post);
        let enc = self
            .tokenizer
            .encode(text, false)
            .map_err(|e| anyhow!("tokenizing the prompt: {e}"))?;
        Ok(enc.get_ids().to_vec())
    }

    /// The text of generated ids (the end-of-turn token dropped).
    pub fn text(&self, ids: &[u32]) -> Result<String> {
        let ids: Vec<u32> = ids.iter().copied().filter(|&t| t != self.eos).collect();
        self.tokenizer
            .decode(&ids, true)
            .map_err(|e| anyhow!("decoding the completion: {e}"))
    }
}

/// The per-layer tensors of a model file, stacked along a first axis of B layers, taken once
/// and split into layers.
impl Tensors<'_> {
    /// `I32` [B, n] as B rows of n (any n ≥ 1 when `n` is `None`).
    fn i32_layers(&mut self, name: &str, layers: usize, n: Option<usize>) -> Result<Vec<Vec<i32>>> {
        let (shape, data) = self.take(name, Dtype::I32)?;
        let per = shape.get(1..).map_or(1, |s| s.iter().product::<usize>());
        ensure!(
            shape.first() == Some(&layers) && n.is_none_or(|n| per == n),
            "the model's {name} has shape {shape:?}, it must be [{layers}, {}]",
            n.map_or("…".into(), |n| n.to_string())
        );
        Ok(i32s(data)
            .chunks_exact(per.max(1))
            .map(<[i32]>::to_vec)
            .collect())
    }

    /// A stacked `(m, s)` requantization: B of them.
    fn rq_layers(&mut self, p: &str, layers: usize, n: usize) -> Result<Vec<Rq>> {
        let m = self.i32_layers(&format!("{p}.m"), layers, Some(n))?;
        let s = self.i32_layers(&format!("{p}.s"), layers, Some(n))?;
        Ok(m.into_iter().zip(s).map(|(m, s)| Rq { m, s }).collect())
    }

    /// B dense layers `out × inp`.
    fn dense_layers(
        &mut self,
        p: &str,
        layers: usize,
        out: usize,
        inp: usize,
    ) -> Result<Vec<Dense>> {
        let (shape, q4) = self.take(&format!("{p}.q4"), Dtype::U8)?;
        ensure!(
            shape == [layers, out, inp / 2],
            "the model's {p}.q4 has shape {shape:?}, it must be [{layers}, {out}, {}]",
            inp / 2
        );
        let nb = inp / BLOCK;
        let d = self.i32_layers(&format!("{p}.d"), layers, Some(out * nb))?;
        let min = self.i32_layers(&format!("{p}.min"), layers, Some(out * nb))?;
        let rq = self.rq_layers(p, layers, out)?;
        Ok(q4
            .chunks_exact(out * inp / 2)
            .zip(d)
            .zip(min)
            .zip(rq)
            .map(|(((q4, d), min), rq)| Dense {
                inp,
                out,
                q4: q4.to_vec(),
                d,
                min,
                rq,
            })
            .collect())
    }

    fn i32_matrix(&mut self, name: &str, rows: usize, cols: usize) -> Result<Vec<i32>> {
        let (shape, data) = self.take(name, Dtype::I32)?;
        ensure!(
            shape == [rows, cols],
            "the model's {name} has shape {shape:?}, it must be [{rows}, {cols}]"
        );
        Ok(i32s(data))
    }

    fn rq(&mut self, p: &str) -> Result<Rq> {
        Ok(Rq {
            m: self.vector(&format!("{p}.m"))?,
            s: self.vector(&format!("{p}.s"))?,
        })
    }

    fn text(&mut self, name: &str) -> Result<String> {
        let (_, b) = self.take(name, Dtype::U8)?;
        String::from_utf8(b.to_vec()).map_err(|_| anyhow!("the model's {name} is not UTF-8"))
    }
}

/// Reads and checks a model file (PROTOCOL §5, Generate): `dims` `I32` [6] (layers, width,
/// feed-forward, heads, key/value heads, head width), `eps` `I64` [1], `rope` `I16`
/// [positions, head width / 2, 2], `exp`, `sigmoid` `I32`, the embeddings (`emb.q` `I8`,
/// `emb.d` `I32`, `emb.m/.s`), `out.m/.s`, `lm.m/.s`, the layers' tensors stacked along a first axis of B, the tokenizer (`tokenizer`
/// `U8`, Hugging Face JSON), the chat template (`chat.pre`, `chat.post` `U8`) and `eos` `I32`
/// [1]; nothing else.
pub fn parse_model(bytes: &[u8]) -> Result<Model> {
    let mut t = Tensors(tensors(bytes, "the model")?);
    let dims = t.vector("dims")?;
    let [layers, width, ffn, heads, kv_heads, head_dim] = dims[..] else {
        bail!(
            "the model's dims hold {} values, it must hold 6",
            dims.len()
        );
    };
    let u =
        |v: i32, what: &str| usize::try_from(v).map_err(|_| anyhow!("the model's {what} is {v}"));
    let (layers, width, ffn) = (
        u(layers, "layer count")?,
        u(width, "width")?,
        u(ffn, "feed-forward width")?,
    );
    ensure!(
        (1..=MAX_LAYERS).contains(&layers),
        "the model has {layers} layers: 1 ..= {MAX_LAYERS}"
    );
    let (eshape, eps) = t.take("eps", Dtype::I64)?;
    ensure!(
        eshape == [1],
        "the model's eps has shape {eshape:?}, it must be [1]"
    );
    let (rshape, rope) = t.take("rope", Dtype::I16)?;
    let head_dim = u(head_dim, "head width")?;
    ensure!(
        width >= 1 && ffn >= 1 && heads >= 1 && kv_heads >= 1 && head_dim >= 2,
        "the model's dims are {:?}: every width and head count is at least 1",
        [
            layers as i32,
            width as i32,
            ffn as i32,
            heads,
            kv_heads,
            head_dim as i32
        ]
    );
    ensure!(
        rshape.len() == 3 && rshape[1] * 2 == head_dim && rshape[2] == 2,
        "the model's rope has shape {rshape:?}, it must be [positions, {}, 2]",
        head_dim / 2
    );
    let (qshape, emb_q) = t.take("emb.q", Dtype::I8)?;
    ensure!(
        qshape.len() == 2 && qshape[1] == width,
        "the model's emb.q has shape {qshape:?}, it must be [vocab, {width}]"
    );
    let vocab = qshape[0];
    let mut dec = Decoder {
        width,
        heads: u(heads, "head count")?,
        kv_heads: u(kv_heads, "key/value head count")?,
        head_dim,
        eps: i64::from_le_bytes(eps.try_into().expect("8 bytes")),
        rope: rope
            .chunks_exact(2)
            .map(|b| i16::from_le_bytes([b[0], b[1]]))
            .collect(),
        exp: t.vector("exp")?,
        sigmoid: t.vector("sigmoid")?,
        emb_q: emb_q.iter().map(|&v| v as i8).collect(),
        emb_d: t.i32_matrix("emb.d", vocab, width / BLOCK)?,
        emb_rq: t.rq("emb")?,
        out: t.rq("out")?,
        lm_rq: t.rq("lm")?,
        layers: vec![],
    };
    let (h, heads, kvh) = (width, dec.heads, dec.kv_heads);
    ensure!(
        width.is_multiple_of(BLOCK) && ffn.is_multiple_of(BLOCK) && (heads * head_dim).is_multiple_of(BLOCK) && (kvh * head_dim).is_multiple_of(BLOCK),
        "the model's width {width}, feed-forward {ffn} and heads × head width must be multiples of {BLOCK}"
    );
    let (qw, kw) = (heads * head_dim, kvh * head_dim);
    let ln1 = t.rq_layers("ln1", layers, h)?;
    let ln2 = t.rq_layers("ln2", layers, h)?;
    let q = t.dense_layers("q", layers, qw, h)?;
    let k = t.dense_layers("k", layers, kw, h)?;
    let v = t.dense_layers("v", layers, kw, h)?;
    let o = t.dense_layers("o", layers, h, qw)?;
    let gate = t.dense_layers("gate", layers, ffn, h)?;
    let up = t.dense_layers("up", layers, ffn, h)?;
    let down = t.dense_layers("down", layers, h, ffn)?;
    let att = t.rq_layers("att", layers, 1)?;
    let sig = t.rq_layers("sig", layers, 1)?;
    dec.layers = ln1
        .into_iter()
        .zip(ln2)
        .zip(q.into_iter().zip(k).zip(v).zip(o))
        .zip(gate.into_iter().zip(up).zip(down))
        .zip(att.into_iter().zip(sig))
        .map(
            |((((ln1, ln2), (((q, k), v), o)), ((gate, up), down)), (att, sig))| Layer {
                ln1,
                q,
                k,
                v,
                att: (att.m[0], att.s[0]),
                o,
                ln2,
                gate,
                up,
                sig: (sig.m[0], sig.s[0]),
                down,
            },
        )
        .collect();
    let spec = t.text("tokenizer")?;
    let chat_pre = t.text("chat.pre")?;
    let chat_post = t.text("chat.post")?;
    let eos = t.scalar("eos")?;
    if let Some(extra) = t.0.keys().min() {
        bail!("the model holds a tensor it may not: {extra:?}");
    }
    ensure!(
        dec.ffn() == ffn,
        "the model's dims say a feed-forward of {ffn}, its layers have {}",
        dec.ffn()
    );
    dec.check()
        .map_err(|e| anyhow!("the model is refused: {e}"))?;
    let tokenizer: Tokenizer = spec
        .parse()
        .map_err(|e| anyhow!("the model's tokenizer: {e}"))?;
    // a tokenizer every keeper runs the same: no padding or truncation (they add or cut ids),
    // no BPE dropout (it merges at random), every id an embedding row
    ensure!(
        tokenizer.get_padding().is_none() && tokenizer.get_truncation().is_none(),
        "the model's tokenizer pads or truncates: a job's ids must be the text's alone"
    );
    let json: serde_json::Value =
        serde_json::from_str(&spec).map_err(|e| anyhow!("the model's tokenizer: {e}"))?;
    ensure!(
        json["model"]["type"] == "BPE"
            && (json["model"]["dropout"].is_null() || json["model"]["dropout"] == 0.0),
        "the model's tokenizer must be a BPE without dropout (every keeper must tokenize a text alike)"
    );
    let added = tokenizer
        .get_added_tokens_decoder()
        .into_iter()
        .map(|(id, t)| (t.content, id));
    if let Some((tok, id)) = tokenizer
        .get_vocab(true)
        .into_iter()
        .chain(added)
        .find(|(_, id)| *id as usize >= vocab)
    {
        bail!("the model's tokenizer gives {tok:?} the id {id}: the embeddings hold {vocab}");
    }
    ensure!(
        tokenizer.get_vocab_size(true) == vocab,
        "the model's tokenizer has {} tokens, its embeddings {vocab}",
        tokenizer.get_vocab_size(true)
    );
    let eos = u32::try_from(eos)
        .ok()
        .filter(|&e| (e as usize) < vocab)
        .ok_or_else(|| anyhow!("the model's eos is {eos}: a token id below {vocab}"))?;
    let packed = if kernels::Packed::runs_here() {
        use rayon::prelude::*;
        dec.layers
            .par_iter()
            .map(|l| denses(l).map(kernels::Packed::new))
            .collect()
    } else {
        vec![]
    };
    Ok(Model {
        decoder: dec,
        tokenizer,
        chat_pre,
        chat_post,
        eos,
        packed,
    })
}

/// A layer's dense layers in one order: q, k, v, o, gate, up, down.
pub fn denses(l: &Layer) -> [&Dense; 7] {
    [&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down]
}

/// How each token is picked: from the logits at a step of the completion (its index).
pub type Pick<'a> = dyn Fn(&[i64], usize) -> u32 + Sync + 'a;

/// Most rows one prefill pass feeds ([`Model::prefill`]): what it holds at once is this many
/// rows of every layer's activations (SmolLM2: about 60 MB).
pub const PREFILL_ROWS: usize = 512;

/// A device other than this CPU (a GPU: [`crate::compute::cuda`]) that computes what is nearly
/// all of a decoder's multiply-adds: the dense layers' accumulators and the logits' before
/// their requantization, the same integers as [`Dense::acc`] and [`Decoder::logits`]. The rest
/// of the forward pass (norms, RoPE, attention, SwiGLU, requantization, sampling) stays on the
/// host, as on the fast path. A call that fails is computed on the fast path instead: the same
/// integers.
pub trait Offload: Sync {
    /// Where it computes, for logs.
    fn name(&self) -> String;
    /// [`Dense::acc`] for every row of `xs` (int16 values) and every output of `d`, a layer of
    /// the model this offload holds.
    fn acc(&self, d: &Dense, xs: &[Vec<i64>]) -> Result<Vec<Vec<i64>>>;
    /// `Σ_c E[t][c] · y[c]` for every final-norm row `y` of `ys` and every token `t`: the logits
    /// before `lm_rq` ([`fast::requantize_logits`]).
    fn logit_accs(&self, ys: &[Vec<i64>]) -> Result<Vec<Vec<i64>>>;
}

/// Which arithmetic computes: the protocol's reference loops, the keeper's fast path (this
/// machine's widest kernels, the same integers), or the fast path with its dense layers and
/// logits on another device.
#[derive(Clone, Copy)]
pub enum Path<'a> {
    /// [`reference_acc`], [`Decoder::attend`], [`Decoder::logits`].
    Reference,
    /// [`Model::acc`], [`kernels::attend`], [`fast::logits_rows`].
    Fast,
    /// [`Path::Fast`] with [`Offload::acc`] and [`Offload::logit_accs`].
    Offload(&'a dyn Offload),
}

impl<'a> Path<'a> {
    /// [`Path::Offload`] on `o` when there is one, else [`Path::Fast`].
    pub fn fast_or(o: Option<&'a dyn Offload>) -> Self {
        o.map_or(Path::Fast, Path::Offload)
    }
}

impl std::fmt::Debug for Path<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Path::Reference => write!(f, "Reference"),
            Path::Fast => write!(f, "Fast"),
            Path::Offload(o) => write!(f, "Offload({})", o.name()),
        }
    }
}

/// A device's `rows × cols` results, refused when they are not that shape.
fn shaped(a: Vec<Vec<i64>>, rows: usize, cols: usize) -> Result<Vec<Vec<i64>>> {
    ensure!(
        a.len() == rows && a.iter().all(|r| r.len() == cols),
        "the device returned {} rows where {rows} of {cols} were asked for",
        a.len()
    );
    Ok(a)
}

/// The fast path's answer when an offloaded call fails (said once a process: the device may
/// have failed for good).
fn offload_failed<T>(o: &dyn Offload, what: &str, e: anyhow::Error, cpu: impl FnOnce() -> T) -> T {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
        tracing::warn!(device = o.name(), error = %format!("{e:#}"), "the decoder's {what} failed on the device; the CPU computes them (said once)");
    }
    cpu()
}

impl Model {
    /// The final-norm rows of `ids[s]` after `caches[s]` for every sequence s, on `path`.
    pub fn forward_many(
        &self,
        path: Path,
        ids: &[&[u32]],
        caches: &mut [compute_market_protocol::decoder::Cache],
    ) -> Vec<Vec<Vec<i64>>> {
        let d = &self.decoder;
        match path {
            Path::Reference => d.forward_many(ids, caches, &reference_acc),
            Path::Fast | Path::Offload(_) => {
                let set = fast::best();
                let acc = |d: &Dense, x: &[Vec<i64>]| match path {
                    Path::Offload(o) => o
                        .acc(d, x)
                        .and_then(|a| shaped(a, x.len(), d.out))
                        .unwrap_or_else(|e| {
                            offload_failed(o, "dense layers", e, || self.acc(d, x))
                        }),
                    _ => self.acc(d, x),
                };
                d.forward_many_with(ids, caches, &acc, &|d, att, q, k, v, n| {
                    kernels::attend(set, d, att, q, k, v, n)
                })
            }
        }
    }

    /// Prompts fed in pieces of at most [`PREFILL_ROWS`] rows a pass (as many sequences' next
    /// pieces as fit, in order), so that what a prefill holds at once stays bounded whatever
    /// the prompts' lengths; attention reads the caches, so the rows are those of one pass.
    /// Returns each sequence's rows from position `keep_from[s]` (of its `ids`) on.
    pub fn prefill(
        &self,
        path: Path,
        ids: &[&[u32]],
        caches: &mut [compute_market_protocol::decoder::Cache],
        keep_from: &[usize],
    ) -> Vec<Vec<Vec<i64>>> {
        let n = ids.len();
        let (mut off, mut out) = (vec![0usize; n], vec![vec![]; n]);
        loop {
            let mut take = vec![];
            let mut room = PREFILL_ROWS;
            for s in 0..n {
                if off[s] < ids[s].len() && room > 0 {
                    let k = (ids[s].len() - off[s]).min(room);
                    take.push((s, off[s]..off[s] + k));
                    room -= k;
                }
            }
            if take.is_empty() {
                return out;
            }
            let pieces: Vec<&[u32]> = take.iter().map(|(s, r)| &ids[*s][r.clone()]).collect();
            let mut cs: Vec<_> = take
                .iter()
                .map(|(s, _)| std::mem::take(&mut caches[*s]))
                .collect();
            let ys = self.forward_many(path, &pieces, &mut cs);
            for ((s, r), (c, y)) in take.into_iter().zip(cs.into_iter().zip(ys)) {
                caches[s] = c;
                out[s].extend(
                    r.clone()
                        .zip(y)
                        .filter(|(p, _)| *p >= keep_from[s])
                        .map(|(_, row)| row),
                );
                off[s] = r.end;
            }
        }
    }

    /// One sequence's rows ([`Model::forward_many`]).
    pub fn forward(
        &self,
        path: Path,
        ids: &[u32],
        cache: &mut compute_market_protocol::decoder::Cache,
    ) -> Vec<Vec<i64>> {
        self.forward_many(path, &[ids], std::slice::from_mut(cache))
            .pop()
            .expect("one sequence")
    }

    /// The logits of final-norm rows on `path`.
    pub fn logits(&self, path: Path, ys: &[Vec<i64>]) -> Vec<Vec<i64>> {
        match path {
            Path::Reference => ys.iter().map(|y| self.decoder.logits(y)).collect(),
            Path::Fast => fast::logits_rows(&self.decoder, ys),
            Path::Offload(o) => match o
                .logit_accs(ys)
                .and_then(|a| shaped(a, ys.len(), self.decoder.vocab()))
            {
                Ok(accs) => fast::requantize_logits(&self.decoder, accs),
                Err(e) => offload_failed(o, "logits", e, || fast::logits_rows(&self.decoder, ys)),
            },
        }
    }
}

/// Generation: up to `max_new` tokens after `prompt`, each picked by `pick` from the logits at
/// its step, stopping after the end-of-turn token or at the model's last position; the
/// completion starts with `forced` (tokens already known to be what `pick` gives: a checked
/// prefix), computed on `path`.
pub fn generate_from(
    model: &Model,
    prompt: &[u32],
    forced: &[u32],
    max_new: usize,
    path: Path,
    pick: &Pick,
) -> Vec<u32> {
    let d = &model.decoder;
    let mut cache = d.cache();
    let fed: Vec<u32> = prompt.iter().chain(forced).copied().collect();
    let mut y = model
        .prefill(
            path,
            &[&fed],
            std::slice::from_mut(&mut cache),
            &[fed.len() - 1],
        )
        .pop()
        .expect("one sequence");
    let mut out = forced.to_vec();
    while out.len() < max_new {
        let last = y.last().expect("one token at least").clone();
        let t = pick(&model.logits(path, &[last])[0], out.len());
        out.push(t);
        if t == model.eos || cache.len >= d.positions() {
            break;
        }
        y = model.forward(path, &[t], &mut cache);
    }
    out
}

/// [`generate_from`] for several prompts at once (no forced prefix) on `path` (not the
/// reference: it is for checking, and takes one row at a time anyway): the
/// prompts prefilled together, then each step's tokens of the sequences still going through
/// the layers together (one GEMM a dense layer for all of them: a batch reads the weights once
/// a step). Each completion is what [`generate_from`] gives its prompt alone, bit for bit;
/// `picks[s]` picks sequence `s`'s tokens.
pub fn generate_many(
    model: &Model,
    prompts: &[&[u32]],
    max_new: usize,
    path: Path,
    picks: &[&Pick],
) -> Vec<Vec<u32>> {
    let d = &model.decoder;
    if max_new == 0 {
        return vec![vec![]; prompts.len()];
    }
    let mut caches: Vec<_> = prompts.iter().map(|_| d.cache()).collect();
    let last: Vec<usize> = prompts.iter().map(|p| p.len() - 1).collect();
    let mut ys: Vec<Vec<i64>> = model
        .prefill(path, prompts, &mut caches, &last)
        .into_iter()
        .map(|mut y| y.pop().expect("one token at least"))
        .collect();
    let mut out: Vec<Vec<u32>> = vec![vec![]; prompts.len()];
    let mut going: Vec<usize> = (0..prompts.len()).collect();
    while !going.is_empty() {
        let rows: Vec<Vec<i64>> = going.iter().map(|&s| ys[s].clone()).collect();
        let logits = model.logits(path, &rows);
        let mut next = vec![];
        for (&s, l) in going.iter().zip(&logits) {
            let t = picks[s](l, out[s].len());
            out[s].push(t);
            if !(t == model.eos || caches[s].len >= d.positions() || out[s].len() >= max_new) {
                next.push((s, t));
            }
        }
        going = next.iter().map(|&(s, _)| s).collect();
        if going.is_empty() {
            break;
        }
        let ids: Vec<[u32; 1]> = next.iter().map(|&(_, t)| [t]).collect();
        let refs: Vec<&[u32]> = ids.iter().map(|i| i.as_slice()).collect();
        let mut cs: Vec<_> = going
            .iter()
            .map(|&s| std::mem::take(&mut caches[s]))
            .collect();
        let ys_now = model.forward_many(path, &refs, &mut cs);
        for ((&s, c), mut y) in going.iter().zip(cs).zip(ys_now) {
            caches[s] = c;
            ys[s] = y.pop().expect("one token");
        }
    }
    out
}

/// Greedy generation on `path` ([`generate_from`] with the first largest logit at every step).
pub fn generate_with(model: &Model, prompt: &[u32], max_new: usize, path: Path) -> Vec<u32> {
    generate_from(model, prompt, &[], max_new, path, &|l, _| argmax(l) as u32)
}

/// Greedy generation on the fast path: the reference's tokens.
pub fn generate(model: &Model, prompt: &[u32], max_new: usize) -> Vec<u32> {
    generate_with(model, prompt, max_new, Path::Fast)
}

/// Greedy generation by the reference.
pub fn generate_reference(model: &Model, prompt: &[u32], max_new: usize) -> Vec<u32> {
    generate_with(model, prompt, max_new, Path::Reference)
}

/// Bytes a decoder's tensors take held: the packed weights, their block scales, the embedding,
/// the tables.
pub fn weight_bytes(d: &Decoder) -> usize {
    let dense = |x: &Dense| x.q4.len() + 4 * (x.d.len() + x.min.len()) + 8 * x.out;
    d.layers
        .iter()
        .map(|l| denses(l).map(dense).iter().sum::<usize>())
        .sum::<usize>()
        + d.emb_q.len()
        + 4 * d.emb_d.len()
        + 2 * d.rope.len()
        + 4 * (d.exp.len() + d.sigmoid.len())
}

/// Where the SmolLM2 integer model is made (`scripts/smollm2-model`, in the cache: 116 MB, not
/// checked in).
pub fn smollm2_path() -> std::path::PathBuf {
    super::tensors::cached_model("smollm2-int.safetensors")
}

/// The SHA-256 the SmolLM2 integer model must have (`models/smollm2-int.sha256`).
pub const SMOLLM2_SHA256: &str = include_str!("../../../../models/smollm2-int.sha256");

/// The 46 held-out prompts of `models/smollm2-prompts.tsv` as token ids in the chat template,
/// the float and the integer greedy completions (32 tokens or up to the end of the turn) and the
/// integer logits at the last prompt position of the first two (`scripts/smollm2-model --fixture`).
pub const SMOLLM2_HELDOUT: &[u8] = include_bytes!("../../../../models/smollm2-heldout.safetensors");

/// Reads the SmolLM2 model from [`smollm2_path`], checking its pinned SHA-256.
pub fn smollm2_bytes() -> Result<Vec<u8>> {
    super::tensors::read_pinned(
        &smollm2_path(),
        SMOLLM2_SHA256,
        "SmolLM2",
        "scripts/smollm2-model",
    )
}

#[cfg(test)]
mod tests;

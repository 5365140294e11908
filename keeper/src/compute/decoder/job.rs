//! The `Generate` job (PROTOCOL §5, Generate): the prompts part written and read back checked,
//! completions generated into tiles, and a served tile checked by one teacher-forced prefill
//! per completion — every committed token must be what the decoder picks at its position —
//! which costs a fraction of the sequential generation it checks (`keeper bench`).
//!
//! A tile is R completions, each `4 · (G + 1)` bytes: its token count `n` (`u32` LE, 1 ..= G),
//! then its `n` token ids, zero past them (the last tile zero-filled past prompt N).

use std::sync::Arc;

use anyhow::{anyhow, bail, ensure, Result};
use compute_market_protocol::{
    decoder::{draw, Sampling},
    job::{JobSpec, ENCODER_TEXT_BYTES_PER_TOKEN},
};
use rayon::prelude::*;
use safetensors::Dtype;

use super::{generate_from, Model};

/// A `Generate` job's prompts: each text, its token ids in the model's chat template (what the
/// decoder reads; the texts beside them so that every keeper re-tokenizes and compares), and
/// how tokens are picked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Prompts {
    /// The user's prompts, UTF-8.
    pub texts: Vec<String>,
    /// Their token ids, the chat template around each.
    pub ids: Vec<Vec<u32>>,
    /// Greedy, or the sampling rule and seed.
    pub sampling: Sampling,
}

/// A `Generate` job's checked inputs: the model, the prompts, and the job's manifest hash
/// (what a sampled step's draw is keyed by).
#[derive(Clone, Debug)]
pub struct GenerateInputs {
    /// The model, checked.
    pub model: Arc<Model>,
    /// The prompts, checked against the model's tokenizer and the job's bounds.
    pub prompts: Arc<Prompts>,
}

fn u32_tensor(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// The prompts part of `texts` tokenized by `model` in its chat template, with `sampling`: a
/// safetensors file of `text` `U8` (the texts one after the other), `text.len` `I32` [N] (their
/// bytes), `ids` `I32` (the token ids one prompt after the other), `ids.len` `I32` [N], and
/// `sampling` `I64` [4] (temperature Q8, top-k, top-p Q16, seed).
pub fn prompts_file(model: &Model, texts: &[String], sampling: &Sampling) -> Result<Vec<u8>> {
    let ids = texts
        .iter()
        .map(|t| model.prompt_ids(t))
        .collect::<Result<Vec<_>>>()?;
    prompts_bytes(texts, &ids, sampling)
}

/// [`prompts_file`] of ids given (a client's own tokenization: every keeper compares them with
/// its own and refuses a job whose ids differ).
pub fn prompts_bytes(texts: &[String], ids: &[Vec<u32>], sampling: &Sampling) -> Result<Vec<u8>> {
    ensure!(
        texts.len() == ids.len(),
        "{} texts, {} token lists",
        texts.len(),
        ids.len()
    );
    let text: Vec<u8> = texts.iter().flat_map(|t| t.bytes()).collect();
    let text_len: Vec<u32> = texts.iter().map(|t| t.len() as u32).collect();
    let all: Vec<u32> = ids.iter().flatten().copied().collect();
    let ids_len: Vec<u32> = ids.iter().map(|i| i.len() as u32).collect();
    let s = [
        i64::from(sampling.temperature),
        i64::from(sampling.top_k),
        i64::from(sampling.top_p),
        sampling.seed as i64,
    ];
    let sampling: Vec<u8> = s.iter().flat_map(|v| v.to_le_bytes()).collect();
    let (a, b, c, d) = (
        u32_tensor(&text_len),
        u32_tensor(&all),
        u32_tensor(&ids_len),
        sampling,
    );
    fn view(
        dtype: Dtype,
        shape: Vec<usize>,
        data: &[u8],
    ) -> Result<safetensors::tensor::TensorView<'_>> {
        safetensors::tensor::TensorView::new(dtype, shape, data).map_err(|e| anyhow!("{e}"))
    }
    let tensors = vec![
        ("text", view(Dtype::U8, vec![text.len()], &text)?),
        ("text.len", view(Dtype::I32, vec![texts.len()], &a)?),
        ("ids", view(Dtype::I32, vec![all.len()], &b)?),
        ("ids.len", view(Dtype::I32, vec![ids.len()], &c)?),
        ("sampling", view(Dtype::I64, vec![4], &d)?),
    ];
    safetensors::serialize(tensors, None).map_err(|e| anyhow!("{e}"))
}

/// Reads and checks a prompts part for a job of `rows` prompts of at most `max_tokens` tokens
/// (PROTOCOL §5, Generate): exactly the five tensors, `rows` prompts, each text non-empty, UTF-8
/// and at most 16 bytes a token of the limit, its ids the model's tokenization of it in the chat
/// template and at most `max_tokens`, the sampling rule within its bounds. Each refusal names
/// the prompt and the fix.
pub fn parse_prompts(
    bytes: &[u8],
    model: &Model,
    rows: usize,
    max_tokens: usize,
) -> Result<Prompts> {
    let mut t = super::super::tensors::tensors(bytes, "the prompts")?;
    let mut take = |name: &str, dtype: Dtype| -> Result<(Vec<usize>, &[u8])> {
        let (d, shape, data) = t
            .remove(name)
            .ok_or_else(|| anyhow!("the prompts have no tensor {name:?}"))?;
        ensure!(
            d == dtype,
            "the prompts' {name} is {d:?}, it must be {dtype:?}"
        );
        ensure!(
            shape.len() == 1,
            "the prompts' {name} has shape {shape:?}, it must be a vector"
        );
        Ok((shape, data))
    };
    let (_, text) = take("text", Dtype::U8)?;
    let (_, text_len) = take("text.len", Dtype::I32)?;
    let (_, ids) = take("ids", Dtype::I32)?;
    let (_, ids_len) = take("ids.len", Dtype::I32)?;
    let (_, sampling) = take("sampling", Dtype::I64)?;
    if let Some(extra) = t.keys().min() {
        bail!("the prompts hold a tensor they may not: {extra:?}");
    }
    let text_len = super::super::tensors::i32s(text_len);
    let ids_len = super::super::tensors::i32s(ids_len);
    ensure!(
        text_len.len() == rows && ids_len.len() == rows,
        "the prompts hold {} texts and {} token lists, the job says {rows} prompts",
        text_len.len(),
        ids_len.len()
    );
    let s: Vec<i64> = sampling
        .chunks_exact(8)
        .map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect();
    ensure!(
        s.len() == 4,
        "the prompts' sampling holds {} values, it must hold 4",
        s.len()
    );
    let field = |v: i64, what: &str| {
        u32::try_from(v)
            .map_err(|_| anyhow!("the prompts' {what} is {v}: it must be 0 ..= 2^32 − 1"))
    };
    let sampling = Sampling {
        temperature: field(s[0], "temperature")?,
        top_k: field(s[1], "top-k")?,
        top_p: field(s[2], "top-p")?,
        seed: s[3] as u64,
    };
    sampling
        .check(model.decoder.vocab())
        .map_err(|e| anyhow!("the prompts' sampling rule: {e}"))?;
    let byte_limit = ENCODER_TEXT_BYTES_PER_TOKEN as usize * max_tokens;
    let (mut at, mut id_at) = (0usize, 0usize);
    let all_ids = super::super::tensors::i32s(ids);
    let mut texts = Vec::with_capacity(rows);
    let mut token_lists = Vec::with_capacity(rows);
    for (i, (&tl, &il)) in text_len.iter().zip(&ids_len).enumerate() {
        let n = i + 1;
        let tl = usize::try_from(tl)
            .ok()
            .filter(|&l| l >= 1)
            .ok_or_else(|| anyhow!("prompt {n} is empty: every prompt needs text"))?;
        ensure!(
            tl <= byte_limit,
            "prompt {n} is {tl} bytes, more than the job's {byte_limit} (16 a token of its {max_tokens}-token limit)"
        );
        let end = at
            .checked_add(tl)
            .filter(|&e| e <= text.len())
            .ok_or_else(|| anyhow!("prompt {n}'s text runs past the prompts' text"))?;
        let s = std::str::from_utf8(&text[at..end])
            .map_err(|e| anyhow!("prompt {n} is not UTF-8: {e}"))?;
        at = end;
        let il = usize::try_from(il)
            .ok()
            .filter(|&l| (1..=max_tokens).contains(&l))
            .ok_or_else(|| {
                anyhow!("prompt {n} has {il} token ids: the job takes 1 to {max_tokens}")
            })?;
        let end = id_at
            .checked_add(il)
            .filter(|&e| e <= all_ids.len())
            .ok_or_else(|| anyhow!("prompt {n}'s ids run past the prompts' ids"))?;
        let given: Vec<u32> = all_ids[id_at..end].iter().map(|&v| v as u32).collect();
        if let Some(bad) = given.iter().find(|&&t| t as usize >= model.decoder.vocab()) {
            bail!(
                "prompt {n} holds the token id {bad}: the model's vocabulary has {} tokens",
                model.decoder.vocab()
            );
        }
        id_at = end;
        texts.push(s.to_string());
        token_lists.push(given);
    }
    ensure!(
        at == text.len() && id_at == all_ids.len(),
        "the prompts hold bytes or ids past their last prompt"
    );
    // every prompt re-tokenized in the chat template: ids that are not the model's own
    // tokenization of the text beside them are refused (no keeper computes on ids nobody
    // can read)
    let mine: Vec<Result<Vec<u32>>> = texts.par_iter().map(|t| model.prompt_ids(t)).collect();
    for (i, (m, given)) in mine.into_iter().zip(&token_lists).enumerate() {
        let m = m?;
        if &m != given {
            let at = m
                .iter()
                .zip(given)
                .position(|(a, b)| a != b)
                .unwrap_or(m.len().min(given.len()));
            bail!(
                "prompt {}'s token ids are not the model's tokenization of its text in the chat template (they differ at id {at}: {} tokens given, {} by the model's tokenizer): tokenize with the job's model",
                i + 1,
                given.len(),
                m.len()
            );
        }
    }
    Ok(Prompts {
        texts,
        ids: token_lists,
        sampling,
    })
}

/// The picking rule of prompt `row`: its sampling rule with the draws of `input`'s stream.
fn picker<'a>(
    model: &'a Model,
    sampling: Sampling,
    input: [u8; 32],
    row: u32,
) -> impl Fn(&[i64], usize) -> u32 + Sync + 'a {
    move |logits: &[i64], step: usize| {
        let d = if sampling.temperature == 0 {
            0
        } else {
            draw(&input, sampling.seed, row, step as u32)
        };
        sampling.pick(logits, &model.decoder.exp, d) as u32
    }
}

/// Prompt `row`'s completion, generated on the fast path.
pub fn complete(inputs: &GenerateInputs, job: &JobSpec, row: usize) -> Vec<u32> {
    let m = &inputs.model;
    let pick = picker(m, inputs.prompts.sampling, job.input, row as u32);
    generate_from(
        m,
        &inputs.prompts.ids[row],
        &[],
        job.dims[2] as usize,
        super::Path::Fast,
        &pick,
    )
}

/// A tile of `job` holding `completions` (R of them or fewer, the rest zero).
pub fn encode_tile(job: &JobSpec, completions: &[Vec<u32>]) -> Vec<u8> {
    let per = 4 * (job.dims[2] as usize + 1);
    let mut t = vec![0u8; job.tile_len()];
    for (r, c) in completions.iter().enumerate() {
        let row = &mut t[r * per..(r + 1) * per];
        row[..4].copy_from_slice(&(c.len() as u32).to_le_bytes());
        for (i, id) in c.iter().enumerate() {
            row[4 + 4 * i..8 + 4 * i].copy_from_slice(&id.to_le_bytes());
        }
    }
    t
}

/// The completions a tile says (each as many ids as its count says, at most G): what a
/// served tile claims, read without trusting it.
pub fn decode_tile(job: &JobSpec, tile: &[u8]) -> Vec<Vec<u32>> {
    let g = job.dims[2] as usize;
    let per = 4 * (g + 1);
    let word = |b: &[u8], i: usize| {
        b.get(4 * i..4 * i + 4)
            .map_or(0, |w| u32::from_le_bytes(w.try_into().expect("4 bytes")))
    };
    (0..usize::from(job.rows_per_tile))
        .map(|r| {
            let row = tile.get(r * per..(r + 1) * per).unwrap_or(&[]);
            let n = (word(row, 0) as usize).min(g);
            (0..n).map(|i| word(row, i + 1)).collect()
        })
        .collect()
}

/// The prompts tile `index` covers.
fn rows_of(job: &JobSpec, index: u32) -> std::ops::Range<usize> {
    let r = usize::from(job.rows_per_tile);
    let first = index as usize * r;
    first..(first + r).min(job.dims[0] as usize)
}

/// Most sequences a provider generates together: a step's dense layers read the weights
/// once for all of them.
pub const BATCH: usize = 32;

/// Tiles `indices` of `job`, every completion generated on `path`, [`BATCH`] prompts at a time
/// ([`super::generate_many`]: the same tokens as each alone).
pub fn run_tiles(
    inputs: &GenerateInputs,
    job: &JobSpec,
    indices: &[u32],
    path: super::Path,
) -> Result<Vec<Vec<u8>>> {
    check_fits(inputs, job)?;
    let rows: Vec<usize> = indices.iter().flat_map(|&i| rows_of(job, i)).collect();
    let m = &inputs.model;
    let mut done = std::collections::HashMap::new();
    for chunk in rows.chunks(BATCH) {
        let prompts: Vec<&[u32]> = chunk
            .iter()
            .map(|&r| inputs.prompts.ids[r].as_slice())
            .collect();
        let pickers: Vec<_> = chunk
            .iter()
            .map(|&r| picker(m, inputs.prompts.sampling, job.input, r as u32))
            .collect();
        let picks: Vec<&super::Pick> = pickers.iter().map(|p| p as &super::Pick).collect();
        let out = super::generate_many(m, &prompts, job.dims[2] as usize, path, &picks);
        done.extend(chunk.iter().copied().zip(out));
    }
    Ok(indices
        .iter()
        .map(|&i| {
            let c: Vec<Vec<u32>> = rows_of(job, i).map(|r| done[&r].clone()).collect();
            encode_tile(job, &c)
        })
        .collect())
}

/// Whether the inputs are the job's: as many prompts, each within its limit, a model with
/// positions for prompt and completion and the job's work per token.
pub fn check_fits(inputs: &GenerateInputs, job: &JobSpec) -> Result<()> {
    let [n, l, g] = job.dims.map(|d| d as usize);
    let m = &inputs.model;
    ensure!(
        inputs.prompts.ids.len() == n && inputs.prompts.ids.iter().all(|p| p.len() <= l),
        "the prompts held are not this job's {n} prompts of at most {l} tokens"
    );
    ensure!(
        l + g <= m.decoder.positions(),
        "the job's {l} prompt and {g} new tokens are more than the model's {} positions",
        m.decoder.positions()
    );
    ensure!(
        m.work_per_token(l + g) == job.work_per_row,
        "the model does {} work units a token at {} positions, the job says {}",
        m.work_per_token(l + g),
        l + g,
        job.work_per_row
    );
    Ok(())
}

/// Positions whose logits a check holds at once.
const LOGIT_ROWS: usize = 32;

/// The right completion of prompt `row` checked against `served` (what a provider committed):
/// one prefill of the prompt and the served tokens gives the logits at every position, and
/// each served token must be what the rule picks there, the completion ending after the
/// end-of-turn token or at G. When it is, that is `served` itself, at the cost of one prefill;
/// otherwise the completion is generated on from the last right token (a wrong result costs
/// its checker a generation, once).
pub fn checked_completion(
    inputs: &GenerateInputs,
    job: &JobSpec,
    row: usize,
    served: &[u32],
    path: super::Path,
) -> Vec<u32> {
    let m = &inputs.model;
    let d = &m.decoder;
    let (g, prompt) = (job.dims[2] as usize, &inputs.prompts.ids[row]);
    let pick = picker(m, inputs.prompts.sampling, job.input, row as u32);
    let go_on = |forced: &[u32]| generate_from(m, prompt, forced, g, path, &pick);
    let n = served.len();
    if n == 0 || n > g || served.iter().any(|&t| t as usize >= d.vocab()) {
        return go_on(&[]);
    }
    let fed: Vec<u32> = prompt.iter().chain(&served[..n - 1]).copied().collect();
    let mut cache = d.cache();
    let ys = m
        .prefill(
            path,
            &[&fed],
            std::slice::from_mut(&mut cache),
            &[prompt.len() - 1],
        )
        .pop()
        .expect("one sequence");
    // the logits a few positions at a time (a vocabulary's row each), picked as they come
    for (c, rows) in ys.chunks(LOGIT_ROWS).enumerate() {
        for (k, l) in m.logits(path, rows).iter().enumerate() {
            let i = c * LOGIT_ROWS + k;
            let t = pick(l, i);
            if t != served[i] {
                return go_on(&served[..i]);
            }
            let stops = t == m.eos || prompt.len() + i >= d.positions();
            if stops {
                return served[..=i].to_vec();
            }
        }
    }
    if n == g {
        served.to_vec()
    } else {
        go_on(served)
    }
}

/// The right tiles `indices` of `job`, checked against those `served` (each the bytes a
/// provider committed at that index) by one teacher-forced prefill per completion
/// ([`checked_completion`]): equal to `served` when it is right; up to the first wrong
/// completion otherwise (that one corrected, what follows it as served).
pub fn checked_tiles(
    inputs: &GenerateInputs,
    job: &JobSpec,
    served: &[(u32, &[u8])],
    path: super::Path,
) -> Result<Vec<Vec<u8>>> {
    check_fits(inputs, job)?;
    // the first wrong completion settles it: the check stops there (the tiles and rows after
    // it come back as served, unchecked), so a provider serving garbage costs its checker one
    // completion's generation, not every sampled one's
    let mut out = Vec::with_capacity(served.len());
    let mut wrong = false;
    for &(i, tile) in served {
        if wrong {
            out.push(tile.to_vec());
            continue;
        }
        let claimed = decode_tile(job, tile);
        let mut right = Vec::with_capacity(claimed.len());
        for (k, r) in rows_of(job, i).enumerate() {
            if wrong {
                right.push(claimed[k].clone());
                continue;
            }
            let c = checked_completion(inputs, job, r, &claimed[k], path);
            wrong = c != claimed[k];
            right.push(c);
        }
        let right = encode_tile(job, &right);
        wrong |= right != tile;
        out.push(right);
    }
    Ok(out)
}

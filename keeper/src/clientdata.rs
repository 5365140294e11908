//! A client's own data in, its verified result out (PROTOCOL §5, Inputs and Serving):
//! `task post --input` ([`prepare_inputs`], [`upload`]) and `task result` ([`task_result`]).
//!
//! Inputs are checked here before anything is paid for (shape, dtype, every element in the
//! field), then uploaded to a content store as `PUT <store>/c/<sha256>` with the manifest
//! last, so a store never names a manifest whose parts it lacks. Results are written only
//! after every tile fetched was checked against the root committed on chain.

use std::path::{Path, PathBuf};

use anchor_lang::prelude::Pubkey;
use anyhow::{bail, ensure, Context, Result};
use compute_market::{events, state::TaskStatus};
use compute_market_protocol::{
    hash::Digest,
    job::{InputMode, JobKind, JobSpec, MATMUL_TILE},
    manifest::{part_bound, Manifest, Part, Role},
    merkle::{leaf_hash, verify_proof},
};
use serde::Serialize;

use crate::{
    chain::{decode_events, Chain, ChainExt},
    compute::{inputs, Matrix},
    results::{client::Client, content::read_object, hex, sources, FetchPolicy, ResultStore},
    verify::commit,
};

/// A client's inputs, read and checked, ready to upload.
pub struct PreparedInputs {
    /// The job on them (input mode 1, `input` = the manifest's hash).
    pub job: JobSpec,
    /// The manifest.
    pub manifest: Manifest,
    /// The parts' bytes, in manifest order.
    pub parts: Vec<Vec<u8>>,
    /// What the client should know before paying (inputs outside what the model learned).
    pub warnings: Vec<String>,
}

/// `[rows, cols]` of the one tensor of a safetensors file (any name), for sizing the job.
fn shape_in(path: &str, bytes: &[u8]) -> Result<[u32; 2]> {
    let st = safetensors::SafeTensors::deserialize(bytes)
        .map_err(|e| anyhow::anyhow!("{path}: malformed safetensors: {e}"))?;
    let names = st.names();
    ensure!(
        names.len() == 1,
        "{path}: holds {} tensors, one is expected",
        names.len()
    );
    let t = st.tensor(names[0]).map_err(|e| anyhow::anyhow!("{e}"))?;
    // named first: numpy's default int64 would otherwise be refused by its size alone
    ensure!(
        t.dtype() == safetensors::Dtype::U32,
        "{path}: tensor {:?} is {:?}; a matrix is U32, every element below 2^31 − 1 (numpy: \
         a.astype(np.uint32))",
        names[0],
        t.dtype()
    );
    let shape = t.shape();
    ensure!(
        shape.len() == 2,
        "{path}: a matrix has two dimensions, not {shape:?}"
    );
    Ok([shape[0] as u32, shape[1] as u32])
}

/// Reads A (m × k) and B (k × n) from `files` (safetensors, one `U32` tensor each, named
/// "A" and "B"), checks them as providers and verifiers will, and builds the manifest.
pub fn prepare_inputs(files: &[PathBuf]) -> Result<PreparedInputs> {
    ensure!(
        files.len() == 2,
        "--input takes two files, A and B (a MatMulModP job computes A·B)"
    );
    let max = crate::results::content::MAX_OBJECT;
    let (_, a) = read_object(&files[0], max)?;
    let (_, b) = read_object(&files[1], max)?;
    prepare_matmul(
        (&files[0].display().to_string(), a),
        (&files[1].display().to_string(), b),
    )
}

/// [`prepare_inputs`] on A and B held in memory (each a safetensors file's bytes, with the
/// name errors call it by).
pub fn prepare_matmul(a: (&str, Vec<u8>), b: (&str, Vec<u8>)) -> Result<PreparedInputs> {
    let [m, k] = shape_in(a.0, &a.1)?;
    let [k2, n] = shape_in(b.0, &b.1)?;
    ensure!(
        k == k2,
        "A is {m}×{k} and B is {k2}×{n}: A's columns must equal B's rows"
    );
    let mut job = JobSpec::matmul(m, k, n, [0; 32]);
    job.input_mode = InputMode::ContentHash;
    JobSpec::decode(&job.encode()).map_err(|e| anyhow::anyhow!("{m}×{k}·{k}×{n}: {e}"))?;
    let files = [(Role::A, a.0, a.1), (Role::B, b.0, b.1)];
    let mut slices = vec![];
    for (role, path, bytes) in &files {
        within_bound(&job, *role, path, bytes)?;
        let m = inputs::parse_matrix(&job, *role, bytes).with_context(|| path.to_string())?;
        slices.push(crate::compute::slices::of_matrix(&m, *role == Role::B));
    }
    Ok(prepared(job, files, slices.try_into().ok()))
}

/// Refuses `bytes` (the file at `path`, part `role` of `job`) when longer than the job allows.
fn within_bound(job: &JobSpec, role: Role, path: &str, bytes: &[u8]) -> Result<()> {
    let bound = part_bound(job, role).expect("a role of the job");
    ensure!(
        bytes.len() as u64 <= bound,
        "{path}: {} bytes, more than the {bound} the job allows",
        bytes.len()
    );
    Ok(())
}

/// The manifest of `files` (role, path, checked bytes) and `job` on it: version 2, naming
/// each part's `slices` too, for the jobs the program referees on the client's data (PROTOCOL
/// §8.7).
fn prepared<P>(
    mut job: JobSpec,
    files: [(Role, P, Vec<u8>); 2],
    slices: Option<[compute_market_protocol::manifest::Slices; 2]>,
) -> PreparedInputs {
    let manifest = Manifest::new(
        files
            .iter()
            .enumerate()
            .map(|(i, (role, _, bytes))| {
                let p = Part::new(*role, bytes);
                match slices {
                    Some(s) => p.with_slices(s[i]),
                    None => p,
                }
            })
            .collect(),
    );
    if let Some(s) = slices {
        // the spec declares the first part's slices: the program referees the job (§8.7)
        job.slices_len = s[0].len;
        manifest.check_slices_declared(&job).expect("named above");
    }
    job.input = manifest.hash();
    PreparedInputs {
        job,
        manifest,
        parts: files.into_iter().map(|(_, _, bytes)| bytes).collect(),
        warnings: vec![],
    }
}

/// Default rows per tile of an `Mlp` job: small tiles, so a verifier's k sampled tiles are a
/// small fraction of a large batch.
pub const MLP_ROWS_PER_TILE: u8 = 8;

/// Default texts per tile of an `Encoder` job: a text costs far more than a digits row, so
/// tiles of two keep a verifier's k sampled tiles of 1 024 texts near 1/32 of the compute.
pub const ENCODER_ROWS_PER_TILE: u8 = 2;

/// Reads an integer model and a batch (PROTOCOL §5, Mlp), checks them as providers and
/// verifiers will (the model's bounds for the batch's width, the batch's shape), and builds
/// the manifest of an `Mlp` job of `rows_per_tile` rows per tile.
pub fn prepare_mlp(model: &Path, batch: &Path, rows_per_tile: u8) -> Result<PreparedInputs> {
    let max = crate::results::content::MAX_OBJECT;
    let (_, m) = read_object(model, max)?;
    let (_, b) = read_object(batch, max)?;
    prepare_mlp_of(
        (&model.display().to_string(), m),
        (&batch.display().to_string(), b),
        rows_per_tile,
    )
}

/// A model that did not parse as the `wanted` kind: when it is another kind, which, and the
/// flag that posts it (a digits MLP given `--texts` had said "no tensor heads"); else `e`.
fn wrong_model(bytes: &[u8], wanted: &str, e: anyhow::Error) -> anyhow::Error {
    let is = if wanted != "Mlp" && crate::compute::mlp::read_model(bytes).is_ok() {
        Some("an Mlp model (a classifier over rows): post it with --batch ROWS.safetensors")
    } else if wanted != "Encoder" && crate::compute::encoder::parse_model(bytes).is_ok() {
        Some("an Encoder model (MiniLM: embeddings of texts): post it with --texts FILE")
    } else if crate::compute::decoder::parse_model(bytes).is_ok() {
        Some("a decoder model (SmolLM2: text generation): post it with --generate --prompt TEXT")
    } else {
        None
    };
    match is {
        Some(is) => anyhow::anyhow!("this is {is}, not an {wanted} model"),
        None => e,
    }
}

/// [`prepare_mlp`] on a model and a batch held in memory (each a safetensors file's bytes,
/// with the name errors call it by).
pub fn prepare_mlp_of(
    model: (&str, Vec<u8>),
    batch: (&str, Vec<u8>),
    rows_per_tile: u8,
) -> Result<PreparedInputs> {
    let ((model, m), (batch, b)) = (model, batch);
    // the model first: another kind of model is named with the flag that posts it
    let mlp = crate::compute::mlp::read_model(&m)
        .map_err(|e| wrong_model(&m, "Mlp", e))
        .with_context(|| model.to_string())?;
    let st = safetensors::SafeTensors::deserialize(&b)
        .map_err(|e| anyhow::anyhow!("{batch}: malformed safetensors: {e}"))?;
    let x = st
        .tensor("x")
        .map_err(|_| anyhow::anyhow!("{batch}: the batch must hold a tensor \"x\""))?;
    let [rows, features] = x.shape()[..] else {
        bail!(
            "{batch}: x has shape {:?}, it must be [rows, features]",
            x.shape()
        );
    };
    // the job's class count is the model's: its last layer's outputs
    let classes = mlp.layers.last().map_or(0, |l| l.out);
    crate::compute::mlp::check_model(&mlp, features, classes).with_context(|| model.to_string())?;
    let job = JobSpec::mlp(
        rows as u32,
        features as u32,
        classes as u32,
        mlp.work_per_row(),
        rows_per_tile,
        [0; 32],
    );
    JobSpec::decode(&job.encode()).map_err(|e| {
        anyhow::anyhow!("{rows} rows × {features} features → {classes} classes, {rows_per_tile} rows per tile: {e}")
    })?;
    let parsed =
        crate::compute::mlp::parse_batch(&b, rows, features).with_context(|| batch.to_string())?;
    let files = [(Role::Model, model, m), (Role::Batch, batch, b)];
    for (role, path, bytes) in &files {
        within_bound(&job, *role, path, bytes)?;
    }
    use crate::compute::slices;
    let named = [slices::of_model(&mlp), slices::of_batch(&parsed)];
    let warnings = outside_range(&files[0].2, &parsed.x, features)
        .map(|w| format!("{batch}: {w}"))
        .into_iter()
        .collect();
    Ok(PreparedInputs {
        warnings,
        ..prepared(job, files, Some(named))
    })
}

/// The first batch value outside the input range a model's metadata declares (`input_range`:
/// `"lo..hi"`, inclusive; the digits model learned 0..16), named with its row and column: the
/// job runs, but the model was never trained on such inputs.
fn outside_range(model: &[u8], x: &[i8], features: usize) -> Option<String> {
    let (_, meta) = safetensors::SafeTensors::read_metadata(model).ok()?;
    let range = meta.metadata().as_ref()?.get("input_range")?;
    let (lo, hi) = range.split_once("..")?;
    let (lo, hi): (i32, i32) = (lo.trim().parse().ok()?, hi.trim().parse().ok()?);
    let i = x.iter().position(|&v| !(lo..=hi).contains(&i32::from(v)))?;
    Some(format!(
        "row {} column {} is {}, outside the {lo}..{hi} the model learned: it runs, but expect \
         it to be misread ({} of {} values are outside)",
        i / features.max(1),
        i % features.max(1),
        x[i],
        x.iter()
            .filter(|&&v| !(lo..=hi).contains(&i32::from(v)))
            .count(),
        x.len()
    ))
}

/// Reads an integer encoder (PROTOCOL §5, Encoder) and a texts file (UTF-8, one text per
/// line), checks them as providers and verifiers will (the model's bounds, every text
/// tokenized by the model's own tokenizer within the token limit), and builds the manifest of
/// an `Encoder` job of `rows_per_tile` texts per tile. The limit is `max_tokens`, or the longest
/// text's tokens when not given (the tightest price: work is priced at the limit).
pub fn prepare_encoder(
    model: &Path,
    texts: &Path,
    rows_per_tile: u8,
    max_tokens: Option<u32>,
) -> Result<PreparedInputs> {
    let max = crate::results::content::MAX_OBJECT;
    let (_, m) = read_object(model, max)?;
    let (_, t) = read_object(texts, max)?;
    prepare_encoder_of(
        (&model.display().to_string(), m),
        (&texts.display().to_string(), t),
        rows_per_tile,
        max_tokens,
    )
}

/// [`prepare_encoder`] on a model and texts held in memory (the model file's bytes, the texts
/// one a line, each with the name errors call it by).
pub fn prepare_encoder_of(
    model: (&str, Vec<u8>),
    texts: (&str, Vec<u8>),
    rows_per_tile: u8,
    max_tokens: Option<u32>,
) -> Result<PreparedInputs> {
    let ((model, m), (texts, t)) = (model, texts);
    let enc = crate::compute::encoder::parse_model(&m)
        .map_err(|e| wrong_model(&m, "Encoder", e))
        .with_context(|| model.to_string())?;
    let in_file = || texts.to_string();
    let lines = crate::compute::encoder::texts_of(&t).with_context(in_file)?;
    // every line is a text, verbatim (a `#` starts a hashtag as well as a comment); a blank
    // line would be embedded as an empty text, which no client means
    if let Some(i) = lines.iter().position(|l| l.trim().is_empty()) {
        bail!(
            "{texts}: line {} is blank: every line is one text to embed; remove blank lines",
            i + 1
        );
    }
    let rows = lines.len();
    let positions = enc.encoder.positions();
    if let Some(m) = max_tokens {
        ensure!(
            (1..=positions as u32).contains(&m),
            "--max-tokens {m}: the model takes 1 to {positions} tokens a text"
        );
    }
    // bounded in bytes at the model's positions (what tokenizing may cost), then held to the
    // limit in tokens, the unit --max-tokens is given in
    crate::compute::encoder::check_text_bytes(&lines, positions).with_context(in_file)?;
    let limit = max_tokens.map_or(positions, |m| m as usize);
    let ids = crate::compute::encoder::tokenize(&enc, &lines, limit).with_context(in_file)?;
    let longest = ids.iter().map(Vec::len).max().unwrap_or(0) as u32;
    let max_tokens = max_tokens.unwrap_or(longest);
    // the byte limit follows the token limit: checked again at the limit the job will carry,
    // as providers will check it
    crate::compute::encoder::check_text_bytes(&lines, max_tokens as usize)
        .with_context(|| format!("{texts} (a larger --max-tokens allows longer texts)"))?;
    let job = JobSpec::encoder(
        rows as u32,
        max_tokens,
        enc.encoder.hidden as u32,
        enc.encoder.work_per_token(max_tokens as usize),
        rows_per_tile,
        [0; 32],
    );
    JobSpec::decode(&job.encode()).map_err(|e| {
        anyhow::anyhow!("{rows} texts of at most {max_tokens} tokens, width {}, {rows_per_tile} texts per tile: {e}", enc.encoder.hidden)
    })?;
    let files = [(Role::Model, model, m), (Role::Texts, texts, t)];
    for (role, path, bytes) in &files {
        within_bound(&job, *role, path, bytes)?;
    }
    // the model's and the texts' ids' slices, so that the program can referee the job by a
    // game over a text's trace (PROTOCOL §8.7, §8.10)
    use crate::compute::slices;
    let (model_slices, id_slices) = rayon::join(
        || slices::of_encoder(&enc.encoder),
        || slices::of_ids(&ids, max_tokens),
    );
    let named = [model_slices, id_slices];
    Ok(prepared(job, files, Some(named)))
}

/// Default completions per tile of a `Generate` job: a completion costs a verifier one
/// prefill, so each sampled tile is one completion.
pub const GENERATE_ROWS_PER_TILE: u8 = 1;
/// Default most new tokens of a completion (`--max-new-tokens`).
pub const GENERATE_MAX_NEW: u32 = 128;

/// Reads a prompts file: UTF-8, one prompt per line; a line that starts with `"` is a JSON
/// string (so that a prompt may hold line breaks: `"Write a haiku.\nAbout rain."`); blank
/// lines are refused by number.
pub fn read_prompts(path: &Path) -> Result<Vec<String>> {
    let (_, bytes) = read_object(path, 64 << 20)?;
    let text = std::str::from_utf8(&bytes).map_err(|e| {
        anyhow::anyhow!(
            "{}: not UTF-8 (byte {} is not): prompts are UTF-8 text, one a line",
            path.display(),
            e.valid_up_to()
        )
    })?;
    text.lines()
        .enumerate()
        .map(|(i, l)| {
            let l = l.strip_suffix('\r').unwrap_or(l);
            ensure!(
                !l.trim().is_empty(),
                "{}: line {} is blank: every line is one prompt; remove blank lines",
                path.display(),
                i + 1
            );
            if l.starts_with('"') {
                serde_json::from_str::<String>(l).with_context(|| {
                    format!(
                        "{}: line {} starts with '\"' but is not one JSON string",
                        path.display(),
                        i + 1
                    )
                })
            } else {
                Ok(l.to_string())
            }
        })
        .collect()
}

/// How a `Generate` job is shaped beyond its prompts.
#[derive(Clone, Copy, Debug)]
pub struct GenerateShape {
    /// Most new tokens of a completion (G).
    pub max_new: u32,
    /// Most tokens of a prompt in the chat template (L) [default: the longest prompt's].
    pub max_tokens: Option<u32>,
    /// Completions per tile.
    pub rows_per_tile: u8,
    /// Greedy, or the sampling rule.
    pub sampling: compute_market_protocol::decoder::Sampling,
}

/// Reads an integer decoder (PROTOCOL §5, Generate: the SmolLM2 one `scripts/smollm2-model`
/// makes) and tokenizes `prompts` in its chat template, checks them as providers and verifiers
/// will (each non-empty, within the limit, prompt and completion within the model's positions,
/// the sampling rule within its bounds), and builds the manifest of a `Generate` job on them.
pub fn prepare_generate(
    model: &Path,
    prompts: &[String],
    shape: GenerateShape,
) -> Result<PreparedInputs> {
    let max = crate::results::content::MAX_OBJECT;
    let (_, m) = read_object(model, max)?;
    let dec = crate::compute::decoder::parse_model(&m).with_context(|| {
        format!(
            "{} is not a decoder model for --generate (the SmolLM2 decoder scripts/smollm2-model makes is used when --model is left out)",
            model.display()
        )
    })?;
    ensure!(
        !prompts.is_empty(),
        "no prompt: give --prompt TEXT or --prompts FILE"
    );
    ensure!(
        (1..=compute_market_protocol::job::MAX_ROWS_PER_TILE).contains(&shape.rows_per_tile),
        "--rows-per-tile {}: a tile holds 1 to {} completions",
        shape.rows_per_tile,
        compute_market_protocol::job::MAX_ROWS_PER_TILE
    );
    let n = u32::try_from(prompts.len())
        .ok()
        .filter(|&n| n <= compute_market_protocol::job::MAX_GENERATE_PROMPTS)
        .with_context(|| {
            format!(
                "{} prompts: a job takes at most {}; post them as several tasks",
                prompts.len(),
                compute_market_protocol::job::MAX_GENERATE_PROMPTS
            )
        })?;
    if let Some(i) = prompts.iter().position(|p| p.trim().is_empty()) {
        bail!("prompt {} is empty: every prompt needs text", i + 1);
    }
    let positions = dec.decoder.positions() as u32;
    let most_new = compute_market_protocol::job::MAX_GENERATE_NEW.min(positions - 1);
    ensure!(
        (1..=most_new).contains(&shape.max_new),
        "--max-new-tokens {}: a completion takes 1 to {most_new} new tokens",
        shape.max_new
    );
    shape
        .sampling
        .check(dec.decoder.vocab())
        .map_err(|e| anyhow::anyhow!("the sampling flags: {e}"))?;
    let ids = prompts
        .iter()
        .map(|p| dec.prompt_ids(p))
        .collect::<Result<Vec<_>>>()?;
    let room = positions - shape.max_new;
    let longest = ids.iter().map(Vec::len).max().unwrap_or(0) as u32;
    if shape.max_tokens.is_none() && longest > room {
        let i = ids
            .iter()
            .position(|p| p.len() as u32 == longest)
            .unwrap_or(0);
        bail!(
            "prompt {} is {longest} tokens in the chat template: at most {room} fit beside {} new tokens in the model's {positions} positions; shorten it or lower --max-new-tokens",
            i + 1,
            shape.max_new
        );
    }
    let max_tokens = shape.max_tokens.unwrap_or(longest);
    ensure!(
        (1..=room).contains(&max_tokens),
        "--max-tokens {max_tokens}: with {} new tokens the model's {positions} positions leave 1 to {room} for a prompt",
        shape.max_new
    );
    if let Some(i) = ids.iter().position(|p| p.len() as u32 > max_tokens) {
        bail!(
            "prompt {} is {} tokens in the chat template, more than the limit of {max_tokens} ({}): shorten it{}",
            i + 1,
            ids[i].len(),
            if shape.max_tokens.is_some() { "--max-tokens" } else { "what the model's positions leave beside --max-new-tokens" },
            if shape.max_tokens.is_some() { " or raise --max-tokens" } else { " or lower --max-new-tokens" }
        );
    }
    if let Some(i) = prompts.iter().position(|p| {
        p.len() as u64
            > compute_market_protocol::job::ENCODER_TEXT_BYTES_PER_TOKEN * u64::from(max_tokens)
    }) {
        bail!(
            "prompt {} is {} bytes, more than 16 a token of the {max_tokens}-token limit: raise --max-tokens",
            i + 1,
            prompts[i].len()
        );
    }
    let wpt = dec.work_per_token((max_tokens + shape.max_new) as usize);
    let job = JobSpec::generate(
        n,
        max_tokens,
        shape.max_new,
        wpt,
        shape.rows_per_tile,
        [0; 32],
    );
    JobSpec::decode(&job.encode()).map_err(|e| {
        anyhow::anyhow!(
            "{n} prompt(s) of at most {max_tokens} tokens, {} new, {} a tile: {e}",
            shape.max_new,
            shape.rows_per_tile
        )
    })?;
    let part = crate::compute::decoder::job::prompts_bytes(prompts, &ids, &shape.sampling)?;
    let files = [
        (Role::Model, model.display().to_string(), m),
        (Role::Prompts, "prompts".to_string(), part),
    ];
    for (role, path, bytes) in &files {
        within_bound(&job, *role, path, bytes)?;
    }
    // the model's and the prompts' slices, so that the program can referee the job by a game
    // over a token's trace (PROTOCOL §8.13)
    use crate::compute::slices;
    let (model_slices, prompt_slices) = rayon::join(
        || slices::of_decoder(&dec.decoder, dec.eos),
        || slices::of_prompts(&ids, max_tokens, &shape.sampling),
    );
    Ok(prepared(job, files, Some([model_slices, prompt_slices])))
}

/// What a client needs to post jobs on a model it hosts, without reading the model again: the
/// model's content address and the job-spec figures the providers will check it against
/// (PROTOCOL §5). `keeper model publish` prints it; the web page posts from it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum ModelInfo {
    /// An integer MLP (`Mlp` jobs).
    Mlp {
        /// Input width (the batch's columns).
        features: u32,
        /// Classes (the last layer's outputs).
        classes: u32,
        /// Multiply-adds per row (the job's work figure).
        work_per_row: u64,
        /// The model's slice string (PROTOCOL §8.7): its length and BLAKE3 (hex), which a
        /// version-2 manifest names so that the program can referee jobs on it.
        slices: SlicesInfo,
    },
    /// An integer encoder (`Encoder` jobs): the work per token at a limit L follows from these
    /// by `encoder_work_per_token(blocks, hidden, ffn, heads, L)`.
    Encoder {
        /// Transformer blocks.
        blocks: u32,
        /// Hidden width H.
        hidden: u32,
        /// Feed-forward width.
        ffn: u32,
        /// Attention heads.
        heads: u32,
        /// Most tokens a text (the position embeddings).
        positions: u32,
        /// The model's slice string (PROTOCOL §8.7), which a version-2 manifest names with the
        /// texts' ids' so that the program can referee jobs on it.
        slices: SlicesInfo,
        /// Its tokenizer, the WordPiece vocabulary the model file carries (tensor `vocab`),
        /// published beside it (`<store>/c/<sha256>`): a client tokenizes as providers do
        /// without fetching the model. Providers re-tokenize every text and refuse ids that
        /// differ, so a wrong one costs a job, never a reward.
        tokenizer: ObjectInfo,
    },
    /// An integer decoder (`Generate` jobs): the work per token at a context of C positions
    /// follows from these by `decoder_work_per_token(layers, width, ffn, heads, kv_heads,
    /// head_dim, vocab, C)`.
    Decoder {
        /// Layers.
        layers: u32,
        /// Hidden width.
        width: u32,
        /// Feed-forward width.
        ffn: u32,
        /// Query heads.
        heads: u32,
        /// Key/value heads.
        kv_heads: u32,
        /// Width of a head.
        head_dim: u32,
        /// Vocabulary.
        vocab: u32,
        /// Most positions, prompt and completion together.
        positions: u32,
        /// Its tokenizer and chat template (a safetensors file of the model's `tokenizer`,
        /// `chat.pre`, `chat.post` and `eos` tensors), published beside it: a client puts its
        /// prompts in the template and tokenizes them as providers do without fetching the
        /// model.
        tokenizer: ObjectInfo,
        /// The model's slice string with its end-of-turn token (PROTOCOL §8.13): its length
        /// and BLAKE3 (hex), which a version-2 manifest names so that the program can referee
        /// jobs on it.
        slices: SlicesInfo,
    },
}

/// A content object a model's jobs use, by its address.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ObjectInfo {
    /// SHA-256, lowercase hex.
    pub sha256: String,
    /// Bytes.
    pub bytes: u64,
}

/// The tokenizer a model file carries, as a client reads it: an encoder's `vocab` tensor's
/// bytes; a decoder's `tokenizer`, `chat.pre`, `chat.post` and `eos` tensors as a safetensors
/// file of their own; `None` for other files.
pub fn tokenizer_bytes(model: &[u8]) -> Option<Vec<u8>> {
    let st = safetensors::SafeTensors::deserialize(model).ok()?;
    let has = |n: &str| st.names().iter().any(|x| *x == n);
    if has("emb.word") {
        return Some(st.tensor("vocab").ok()?.data().to_vec());
    }
    if !has("rope") {
        return None;
    }
    let names = ["tokenizer", "chat.pre", "chat.post", "eos"];
    let views = names
        .iter()
        .map(|n| st.tensor(n).ok().map(|t| (*n, t)))
        .collect::<Option<Vec<_>>>()?;
    safetensors::serialize(views, None).ok()
}

/// [`ObjectInfo`] of `bytes`.
fn object_info(bytes: &[u8]) -> ObjectInfo {
    ObjectInfo {
        sha256: hex(&compute_market_protocol::hash::hashv(&[bytes])),
        bytes: bytes.len() as u64,
    }
}

/// A part's slice string as `keeper model publish` prints it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SlicesInfo {
    /// Bytes.
    pub len: u64,
    /// BLAKE3, lowercase hex.
    pub root: String,
}

/// Reads a model file as providers will (every tensor's name, dtype and shape, every bound)
/// and says what jobs on it carry. An encoder is told by its `emb.word` tensor, a decoder by
/// its `rope`.
pub fn describe_model(bytes: &[u8]) -> Result<ModelInfo> {
    let st = safetensors::SafeTensors::deserialize(bytes)
        .map_err(|e| anyhow::anyhow!("malformed safetensors: {e}"))?;
    if st.names().iter().any(|n| *n == "emb.word") {
        let m = crate::compute::encoder::parse_model(bytes)?;
        let e = &m.encoder;
        let slices = crate::compute::slices::of_encoder(e);
        let vocab = tokenizer_bytes(bytes).context("the encoder's vocab")?;
        return Ok(ModelInfo::Encoder {
            blocks: e.blocks.len() as u32,
            hidden: e.hidden as u32,
            ffn: e.ffn() as u32,
            heads: e.heads as u32,
            positions: e.positions() as u32,
            slices: SlicesInfo {
                len: slices.len,
                root: crate::results::hex(&slices.root),
            },
            tokenizer: object_info(&vocab),
        });
    }
    if st.names().iter().any(|n| *n == "rope") {
        let m = crate::compute::decoder::parse_model(bytes)?;
        let d = &m.decoder;
        let tokenizer = tokenizer_bytes(bytes).context("the decoder's tokenizer")?;
        return Ok(ModelInfo::Decoder {
            layers: d.layers.len() as u32,
            width: d.width as u32,
            ffn: d.ffn() as u32,
            heads: d.heads as u32,
            kv_heads: d.kv_heads as u32,
            head_dim: d.head_dim as u32,
            vocab: d.vocab() as u32,
            positions: d.positions() as u32,
            tokenizer: object_info(&tokenizer),
            slices: {
                let s = crate::compute::slices::of_decoder(d, m.eos);
                SlicesInfo {
                    len: s.len,
                    root: crate::results::hex(&s.root),
                }
            },
        });
    }
    let mlp = crate::compute::mlp::read_model(bytes)?;
    let (Some(first), Some(last)) = (mlp.layers.first(), mlp.layers.last()) else {
        bail!("neither an MLP (no l0.weight), an encoder (no emb.word) nor a decoder (no rope)");
    };
    let (features, classes) = (first.inp, last.out);
    crate::compute::mlp::check_model(&mlp, features, classes)?;
    let slices = crate::compute::slices::of_model(&mlp);
    Ok(ModelInfo::Mlp {
        features: features as u32,
        classes: classes as u32,
        work_per_row: mlp.work_per_row(),
        slices: SlicesInfo {
            len: slices.len,
            root: crate::results::hex(&slices.root),
        },
    })
}

/// A model uploaded to a content store.
#[derive(Clone, Debug, Serialize)]
pub struct Published {
    /// The file it was read from.
    pub file: String,
    /// Its SHA-256 (`<store>/c/<sha256>`), hex.
    pub sha256: String,
    /// Its length.
    pub bytes: u64,
    /// The store.
    pub store: String,
    /// What jobs on it carry.
    #[serde(flatten)]
    pub info: ModelInfo,
}

/// Checks each model file ([`describe_model`]) and uploads it to `store`; nothing is uploaded
/// unless every file is a model.
pub fn publish_models(
    store: &str,
    files: &[PathBuf],
    policy: &FetchPolicy,
) -> Result<Vec<Published>> {
    let max = crate::results::content::MAX_OBJECT;
    let mut read = vec![];
    for f in files {
        let (hash, bytes) = read_object(f, max)?;
        let info = describe_model(&bytes).with_context(|| format!("{}", f.display()))?;
        read.push((f, hash, bytes, info));
    }
    let client = Client::new(policy)?;
    read.into_iter()
        .map(|(f, hash, bytes, info)| {
            let len = bytes.len() as u64;
            // an encoder's or a decoder's tokenizer first, by its own address: what a client
            // tokenizes with
            if let Some(vocab) = tokenizer_bytes(&bytes) {
                client
                    .put_content(store, vocab)
                    .map_err(|e| anyhow::anyhow!("uploading {}'s tokenizer: {e}", f.display()))?;
            }
            client
                .put_content(store, bytes)
                .map_err(|e| anyhow::anyhow!("uploading {}: {e}", f.display()))?;
            Ok(Published {
                file: f.display().to_string(),
                sha256: hex(&hash),
                bytes: len,
                store: store.to_string(),
                info,
            })
        })
        .collect()
}

/// What was uploaded.
#[derive(Clone, Debug, Serialize)]
pub struct Uploaded {
    /// The content store.
    pub store: String,
    /// The manifest's SHA-256 (the job's input).
    pub manifest: String,
    /// Bytes sent, parts and manifest.
    pub bytes: u64,
    /// Bytes not sent: parts and manifest the store held already.
    pub held: u64,
}

/// Uploads the parts, then the manifest, to the content store at `store`.
pub fn upload(store: &str, p: &PreparedInputs, policy: &FetchPolicy) -> Result<Uploaded> {
    let client = Client::new(policy)?;
    let (mut bytes, mut held) = (0, 0);
    let mut count = |sent: bool, n: usize| {
        if sent {
            bytes += n as u64
        } else {
            held += n as u64
        }
    };
    for part in &p.parts {
        let sent = client
            .put_content(store, part.clone())
            .map_err(|e| anyhow::anyhow!("uploading an input part: {e}"))?;
        count(sent, part.len());
    }
    let m = p.manifest.encode();
    let n = m.len();
    let sent = client
        .put_content(store, m)
        .map_err(|e| anyhow::anyhow!("uploading the input manifest: {e}"))?;
    count(sent, n);
    Ok(Uploaded {
        store: store.to_string(),
        manifest: hex(&p.job.input),
        bytes,
        held,
    })
}

pub use crate::compute::inputs::{tensor_file, tensor_file_with};

/// A finished task's result as the chain records it.
#[derive(Clone, Debug)]
pub struct Committed {
    /// The job.
    pub job: JobSpec,
    /// The root the verifiers accepted.
    pub root: Digest,
    /// Where the provider serves it.
    pub uri: String,
    /// Where the client put its inputs (the task's input URI; empty once the task is closed:
    /// the provider serves them too).
    pub input_uri: String,
    /// The verifiers seated on it (their nodes), whose keepers keep what they checked
    /// (PROTOCOL §8.12).
    pub verifiers: Vec<Pubkey>,
    /// The slot it was posted at, while its account is open (0 once it is closed): what was
    /// published on chain for an earlier task at the same address is not its result.
    pub posted_slot: u64,
}

/// The result of `task` if it was Accepted: from its account while it is open, else from the
/// events of its transactions (`logs`, oldest first: a closed task's account is gone). Any
/// other outcome is an error that says what happened.
pub fn committed(
    chain: &dyn Chain,
    task: &Pubkey,
    logs: impl FnOnce() -> Result<Vec<Vec<String>>>,
) -> Result<Committed> {
    if let Some(t) = chain.task(task)? {
        let job = JobSpec::decode(&t.job).map_err(|e| anyhow::anyhow!("its job spec: {e}"))?;
        ensure!(
            t.status == TaskStatus::Accepted,
            "task {task} is {:?}: only an Accepted task has a verified result",
            t.status
        );
        let uri = String::from_utf8_lossy(&t.result_uri[..t.result_uri_len as usize]).to_string();
        let input_uri =
            String::from_utf8_lossy(&t.input_uri[..t.input_uri_len as usize]).to_string();
        return Ok(Committed {
            job,
            root: t.result_root,
            uri,
            input_uri,
            verifiers: chain.seated(task, &t)?,
            posted_slot: t.posted_slot,
        });
    }
    let txs = logs()?;
    let read = txs.len();
    let logs: Vec<String> = txs.concat();
    let posted = decode_events::<events::TaskPosted>(&logs);
    let Some(p) = posted.iter().rev().find(|e| e.task == *task) else {
        bail!("no task at {task}, and no record of one in its transactions");
    };
    let job = JobSpec::decode(&p.job).map_err(|e| anyhow::anyhow!("its job spec: {e}"))?;
    // the close names the outcome; the finalize too (either's log may be cut short on a busy
    // transaction, so both are read)
    let closed = decode_events::<events::TaskClosed>(&logs)
        .into_iter()
        .rev()
        .find(|e| e.task == *task)
        .map(|e| e.status);
    let finalized = decode_events::<events::TaskFinalized>(&logs)
        .into_iter()
        .rev()
        .find(|e| e.task == *task)
        .map(|e| e.status);
    // a verdict held for disputes is settled at its conclusion, which may overturn it: the
    // conclusion outranks the finalize when the close's log was cut short
    let concluded = decode_events::<events::TaskConcluded>(&logs)
        .into_iter()
        .rev()
        .find(|e| e.task == *task)
        .map(|e| e.status);
    let status = closed.or(concluded).or(finalized);
    ensure!(
        status == Some(TaskStatus::Accepted),
        "task {task} is closed and was {}: only an Accepted task has a verified result ({read} transactions read)",
        status.map_or("never finalized".to_string(), |s| format!("{s:?}"))
    );
    let s = decode_events::<events::ResultSubmitted>(&logs)
        .into_iter()
        .rev()
        .find(|e| e.task == *task)
        .context("no ResultSubmitted event for an Accepted task")?;
    // the verifiers that joined it, then those that revealed (a displaced one may still hold it)
    let mut verifiers: Vec<Pubkey> = decode_events::<events::VerifierJoined>(&logs)
        .into_iter()
        .filter(|e| e.task == *task)
        .map(|e| e.verifier)
        .chain(
            decode_events::<events::VoteRevealed>(&logs)
                .into_iter()
                .filter(|e| e.task == *task)
                .map(|e| e.verifier),
        )
        .collect();
    let mut seen = std::collections::HashSet::new();
    verifiers.retain(|v| seen.insert(*v));
    Ok(Committed {
        job,
        root: s.result_root,
        uri: s.result_uri,
        input_uri: String::new(),
        verifiers,
        posted_slot: 0,
    })
}

/// [`committed`] over RPC: a closed task is read from its transactions, which the node indexes
/// a few seconds after they land, so an incomplete history is read again for up to ~30 s (a
/// history that names another outcome, "closed and was Rejected", is final).
pub fn committed_over_rpc(rpc: &crate::chain::rpc::RpcChain, task: &Pubkey) -> Result<Committed> {
    let mut tries = 0;
    loop {
        match committed(rpc, task, || rpc.logs_of(task)) {
            Ok(c) => return Ok(c),
            Err(e)
                if tries < 10
                    && rpc.task(task)?.is_none()
                    && ["never finalized", "no record", "no ResultSubmitted"]
                        .iter()
                        .any(|m| format!("{e}").contains(m)) =>
            {
                tracing::info!(error = %format!("{e:#}"), "reading the task's history again");
                tries += 1;
                std::thread::sleep(std::time::Duration::from_secs(3));
            }
            Err(e) => return Err(e),
        }
    }
}

/// Where `task result` fetches `c` from, in order (PROTOCOL §8.12): the provider's result URL,
/// then `from` (result URLs given by the client), then the keeper of every verifier seated on
/// the task, at the endpoint its node announced.
pub fn result_sources(chain: &dyn Chain, c: &Committed, from: &[String]) -> Vec<String> {
    let verifiers = chain
        .endpoints_of(&c.verifiers)
        .into_iter()
        .map(|e| sources::result_url(&e, &c.root));
    sources::ordered(&c.uri, from.iter().cloned().chain(verifiers))
}

/// What `task result` wrote.
#[derive(Clone, Debug, Serialize)]
pub struct Retrieved {
    /// The task.
    pub task: String,
    /// The root every tile was checked against.
    pub root: String,
    /// Where it came from: each source that served tiles, and how many.
    pub from: String,
    /// What each source asked that served nothing (or a tile that did not prove against the
    /// root) answered.
    pub skipped: Vec<String>,
    /// Tiles fetched and checked.
    pub tiles: u32,
    /// The file written.
    pub output: String,
    /// Its bytes.
    pub bytes: u64,
    /// A `Generate` result's completions with their prompts, when the model could be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completions: Option<Vec<Completion>>,
}

/// One verified completion of a `Generate` job, as the commands print it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Completion {
    /// The prompt's index in the job.
    pub row: u32,
    /// The prompt.
    pub prompt: String,
    /// The completion's text (the end-of-turn token dropped).
    pub text: String,
    /// Its tokens, the end-of-turn token included when it ended there.
    pub tokens: usize,
    /// Whether it ended at the end of the turn (else it was cut at the job's new-token bound or
    /// the model's last position).
    pub finished: bool,
}

/// The completions of rows `rows` of a `Generate` job (`bytes` their rows laid out as in its
/// tiles), with their prompts, when the job's inputs are held; `None` for other kinds.
pub fn completions(
    job: &JobSpec,
    bytes: &[u8],
    rows: &std::ops::Range<u32>,
) -> Option<Vec<Completion>> {
    if job.kind != JobKind::Generate {
        return None;
    }
    let g = inputs::generate(job).ok()?;
    let c = completions_in(job, bytes, rows);
    let texts = completion_texts(job, &c)?;
    Some(
        rows.clone()
            .zip(c.iter().zip(texts))
            .map(|(r, (ids, text))| Completion {
                row: r,
                prompt: g.prompts.texts.get(r as usize).cloned().unwrap_or_default(),
                text,
                tokens: ids.len(),
                finished: ids.last() == Some(&g.model.eos),
            })
            .collect(),
    )
}

/// What `task result` fetches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Wanted {
    /// Every tile.
    All,
    /// These tiles, with their proofs.
    Tiles(Vec<u32>),
    /// Rows `start..end` of the output (of C for `MatMulModP`, of the digests for
    /// `HashBatch`): the tiles that hold them, with their proofs.
    Rows(std::ops::Range<u32>),
}

impl Wanted {
    /// Reads `a..b` (rows a to b − 1).
    pub fn parse_rows(s: &str) -> Result<std::ops::Range<u32>> {
        let (a, b) = s
            .split_once("..")
            .with_context(|| format!("--rows {s:?}: expected START..END (END excluded)"))?;
        let (a, b): (u32, u32) = (
            a.trim()
                .parse()
                .with_context(|| format!("--rows {s:?}: {a:?} is not a row number"))?,
            b.trim()
                .parse()
                .with_context(|| format!("--rows {s:?}: {b:?} is not a row number"))?,
        );
        ensure!(a < b, "--rows {s:?}: START must be below END");
        Ok(a..b)
    }
}

/// Rows of `job`'s output, and rows per tile row.
fn output_rows(job: &JobSpec) -> (u32, u32) {
    match job.kind {
        JobKind::MatMulModP => (job.dims[0], MATMUL_TILE),
        JobKind::HashBatch => (job.dims[0] * job.dims[1], job.dims[1]),
        JobKind::Mlp | JobKind::Encoder | JobKind::Generate => {
            (job.dims[0], u32::from(job.rows_per_tile))
        }
    }
}

/// Bytes of one output row of an `Mlp` or `Encoder` job.
fn row_bytes(job: &JobSpec) -> usize {
    job.tile_len() / usize::from(job.rows_per_tile.max(1))
}

/// An `Encoder` output's rows (`rows.len()` of them in `bytes`) as a safetensors file:
/// `embedding` `I16` [rows, H].
fn embedding_file(job: &JobSpec, bytes: &[u8], rows: &std::ops::Range<u32>) -> Result<Vec<u8>> {
    let (n, h) = (rows.len(), job.dims[2] as usize);
    ensure!(
        bytes.len() >= n * 2 * h,
        "the output is shorter than its rows"
    );
    let view = safetensors::tensor::TensorView::new(
        safetensors::Dtype::I16,
        vec![n, h],
        &bytes[..n * 2 * h],
    )
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    let meta = [("rows".to_string(), format!("{}..{}", rows.start, rows.end))];
    safetensors::serialize([("embedding", view)], Some(meta.into_iter().collect()))
        .map_err(|e| anyhow::anyhow!("{e}"))
}

/// The file `task result` writes for rows `rows` of an inference job's output.
fn rows_file(job: &JobSpec, bytes: &[u8], rows: &std::ops::Range<u32>) -> Result<Vec<u8>> {
    match job.kind {
        JobKind::Encoder => embedding_file(job, bytes, rows),
        JobKind::Generate => completion_file(job, bytes, rows),
        _ => mlp_file(job, bytes, rows),
    }
}

/// The completions of rows `rows` (laid out as in a tile, one after the other, in `bytes`).
fn completions_in(job: &JobSpec, bytes: &[u8], rows: &std::ops::Range<u32>) -> Vec<Vec<u32>> {
    let one = JobSpec {
        rows_per_tile: 1,
        ..*job
    };
    bytes
        .chunks(one.tile_len())
        .take(rows.len())
        .flat_map(|row| crate::compute::decoder::job::decode_tile(&one, row))
        .collect()
}

/// The texts of `completions` of `job`, when its model is held (a job computed or fetched
/// here): `None` otherwise.
pub fn completion_texts(job: &JobSpec, completions: &[Vec<u32>]) -> Option<Vec<String>> {
    let g = crate::compute::inputs::generate(job).ok()?;
    completions.iter().map(|c| g.model.text(c).ok()).collect()
}

/// A `Generate` output's rows as a safetensors file: `ids` `I32` (the completions' token ids one
/// after the other) and `ids.len` `I32` [rows], and, when the model is held, `text` `U8` (their
/// texts, UTF-8, one after the other) and `text.len` `I32` [rows].
fn completion_file(job: &JobSpec, bytes: &[u8], rows: &std::ops::Range<u32>) -> Result<Vec<u8>> {
    let c = completions_in(job, bytes, rows);
    let ids: Vec<u8> = c.iter().flatten().flat_map(|t| t.to_le_bytes()).collect();
    let lens: Vec<u8> = c
        .iter()
        .flat_map(|t| (t.len() as u32).to_le_bytes())
        .collect();
    let texts = completion_texts(job, &c);
    let text: Vec<u8> = texts.iter().flatten().flat_map(|t| t.bytes()).collect();
    let text_lens: Vec<u8> = texts
        .iter()
        .flatten()
        .flat_map(|t| (t.len() as u32).to_le_bytes())
        .collect();
    let view = |dtype, shape: Vec<usize>, data| {
        safetensors::tensor::TensorView::new(dtype, shape, data).map_err(|e| anyhow::anyhow!("{e}"))
    };
    let mut views = vec![
        (
            "ids",
            view(safetensors::Dtype::I32, vec![ids.len() / 4], &ids)?,
        ),
        (
            "ids.len",
            view(safetensors::Dtype::I32, vec![c.len()], &lens)?,
        ),
    ];
    if texts.is_some() {
        views.push((
            "text",
            view(safetensors::Dtype::U8, vec![text.len()], &text)?,
        ));
        views.push((
            "text.len",
            view(safetensors::Dtype::I32, vec![c.len()], &text_lens)?,
        ));
    }
    let meta = [("rows".to_string(), format!("{}..{}", rows.start, rows.end))];
    safetensors::serialize(views, Some(meta.into_iter().collect()))
        .map_err(|e| anyhow::anyhow!("{e}"))
}

/// An `Mlp` output's rows (`rows.len()` of them, laid out as PROTOCOL §5 says, in `bytes`) as
/// a safetensors file: `logits` `I32` [rows, C] and `class` `U32` [rows].
fn mlp_file(job: &JobSpec, bytes: &[u8], rows: &std::ops::Range<u32>) -> Result<Vec<u8>> {
    let c = job.dims[2] as usize;
    let len = compute_market_protocol::infer::row_len(c);
    let n = rows.len();
    ensure!(
        bytes.len() >= n * len,
        "the output is shorter than its rows"
    );
    let (mut logits, mut class) = (Vec::with_capacity(n * 4 * c), Vec::with_capacity(n * 4));
    for row in bytes[..n * len].chunks_exact(len) {
        logits.extend_from_slice(&row[..4 * c]);
        class.extend_from_slice(&row[4 * c..]);
    }
    let views = [
        (
            "logits",
            safetensors::tensor::TensorView::new(safetensors::Dtype::I32, vec![n, c], &logits)
                .map_err(|e| anyhow::anyhow!("{e}"))?,
        ),
        (
            "class",
            safetensors::tensor::TensorView::new(safetensors::Dtype::U32, vec![n], &class)
                .map_err(|e| anyhow::anyhow!("{e}"))?,
        ),
    ];
    let meta = [("rows".to_string(), format!("{}..{}", rows.start, rows.end))];
    safetensors::serialize(views, Some(meta.into_iter().collect()))
        .map_err(|e| anyhow::anyhow!("{e}"))
}

/// The tiles that hold `rows` of `job`'s output, in order.
fn tiles_of_rows(job: &JobSpec, rows: &std::ops::Range<u32>) -> Result<Vec<u32>> {
    let (all, per) = output_rows(job);
    ensure!(
        rows.end <= all,
        "rows {}..{} are out of range: the output has {all} rows",
        rows.start,
        rows.end
    );
    let (_, cols) = job.tile_grid();
    Ok((rows.start / per..rows.end.div_ceil(per))
        .flat_map(|tr| (0..cols).map(move |tc| tr * cols + tc))
        .collect())
}

/// Rows `rows` of `job`'s output from `served` (the tiles [`tiles_of_rows`] named, checked):
/// the `U32` tensor "C" of `rows.len() × n` for `MatMulModP`, the digests' bytes for
/// `HashBatch`.
fn assemble_rows(
    job: &JobSpec,
    rows: &std::ops::Range<u32>,
    served: &[crate::verify::ProvenTile],
) -> Result<Vec<u8>> {
    let by_index: std::collections::HashMap<u32, &Vec<u8>> =
        served.iter().map(|s| (s.index, &s.tile)).collect();
    let tile = |i: u32| {
        by_index
            .get(&i)
            .copied()
            .with_context(|| format!("tile {i} was not served"))
    };
    match job.kind {
        JobKind::MatMulModP => {
            let (n, t) = (job.dims[2] as usize, MATMUL_TILE as usize);
            let (_, cols) = job.tile_grid();
            let mut out = Vec::with_capacity(rows.len() * n);
            for r in rows.clone() {
                let (tr, rr) = (r as usize / t, r as usize % t);
                for c in 0..n {
                    let bytes = tile(tr as u32 * cols + (c / t) as u32)?;
                    let at = 4 * (rr * t + c % t);
                    out.push(u32::from_le_bytes(
                        bytes[at..at + 4].try_into().expect("4 bytes"),
                    ));
                }
            }
            let meta = [("rows".to_string(), format!("{}..{}", rows.start, rows.end))];
            tensor_file_with("C", rows.len(), n, &out, meta.into_iter().collect())
        }
        JobKind::HashBatch => {
            let per = job.dims[1];
            let mut out = Vec::with_capacity(rows.len() * 32);
            for r in rows.clone() {
                let at = 32 * (r % per) as usize;
                out.extend_from_slice(&tile(r / per)?[at..at + 32]);
            }
            Ok(out)
        }
        JobKind::Mlp | JobKind::Encoder | JobKind::Generate => {
            let per = u32::from(job.rows_per_tile);
            let len = row_bytes(job);
            let mut out = Vec::with_capacity(rows.len() * len);
            for r in rows.clone() {
                let at = len * (r % per) as usize;
                out.extend_from_slice(&tile(r / per)?[at..at + len]);
            }
            rows_file(job, &out, rows)
        }
    }
}

/// Downloads the result `c` of `task` (all of it, some tiles, or some rows: those with their
/// proofs) from `sources` (result URLs: the provider's first, then the other keepers that
/// hold it, [`result_sources`]), gathered from as many of them as it takes, every tile checked
/// against the root ([`ResultStore::gather_all`]), and writes `out`: C as a safetensors `U32`
/// tensor "C" (m × n, or the rows asked for) for a `MatMulModP` result, one tensor per tile
/// (`tile_<i>`, 64 × 64 or the tile's bytes as u32) for tiles, the raw digests for
/// `HashBatch`. Nothing is written unless everything matched.
pub fn task_result(
    task: &Pubkey,
    c: &Committed,
    wanted: Wanted,
    sources: &[String],
    out: &Path,
    policy: FetchPolicy,
) -> Result<Retrieved> {
    let store = ResultStore::default().with_policy(policy);
    let count = c.job.tile_count();
    // the tiles to fetch with proofs (none: all of them, a whole result checked against the
    // root together, or tiles with their proofs where no source serves it whole)
    let proven: Option<Vec<u32>> = match &wanted {
        Wanted::All => None,
        Wanted::Tiles(want) => {
            if let Some(bad) = want.iter().find(|&&i| i >= count) {
                bail!("tile {bad} is out of range: the result has {count} tiles");
            }
            Some(crate::verify::distinct(want))
        }
        Wanted::Rows(rows) => Some(tiles_of_rows(&c.job, rows)?),
    };
    ensure!(
        !sources.is_empty(),
        "task {task} names no result URL and no verifier of it announced an endpoint: nowhere to fetch its result from (give one with --from <URL>/r/<root>)"
    );
    let nobody = |e: crate::results::FetchError| {
        anyhow::anyhow!("{e}")
            .context("nothing written: no source served the result matching the root on chain")
    };
    // a completion's text needs the job's model: its inputs fetched and checked as a
    // verifier's are (from the input URI, then the keepers that serve the result)
    let generate = c.job.kind == JobKind::Generate;
    if generate {
        let bases = crate::results::input_bases(
            &c.input_uri,
            &sources.iter().map(String::as_str).collect::<Vec<_>>(),
        );
        if let Err(e) = store.ensure_inputs(&c.job, &bases, None) {
            tracing::warn!(error = %e, "the job's model and prompts could not be fetched: the completions are written as token ids only");
        }
    }
    let mut rows_done: Option<(std::ops::Range<u32>, Vec<u8>)> = None;
    let (bytes, from, skipped) = match &proven {
        None => {
            let g = store
                .gather_all(sources, &c.job, &c.root, None)
                .map_err(nobody)?;
            ensure!(
                commit(&g.tiles).root() == c.root,
                "the gathered result does not hash to the root on chain; nothing written"
            );
            if generate {
                rows_done = Some((0..c.job.dims[0], g.tiles.concat()));
            }
            (whole_file(&c.job, &g.tiles)?, g.served_by(), g.failed)
        }
        Some(want) => {
            let g = store
                .gather(sources, &c.job, &c.root, want, None)
                .map_err(nobody)?;
            for s in &g.tiles {
                let leaf = leaf_hash(s.index, count, &s.tile);
                ensure!(
                    verify_proof(&c.root, s.index, count, &leaf, &s.proof),
                    "tile {} has no valid proof to the root on chain",
                    s.index
                );
            }
            if let (true, Wanted::Rows(rows)) = (generate, &wanted) {
                let (per, len) = (u32::from(c.job.rows_per_tile), row_bytes(&c.job));
                let by: std::collections::HashMap<u32, &Vec<u8>> =
                    g.tiles.iter().map(|s| (s.index, &s.tile)).collect();
                let mut out = vec![];
                for r in rows.clone() {
                    let at = len * (r % per) as usize;
                    if let Some(t) = by.get(&(r / per)) {
                        out.extend_from_slice(&t[at..at + len]);
                    }
                }
                rows_done = Some((rows.clone(), out));
            }
            let bytes = match &wanted {
                Wanted::Rows(rows) => assemble_rows(&c.job, rows, &g.tiles)?,
                _ => tiles_file(&c.job, &g.tiles)?,
            };
            (bytes, g.served_by(), g.failed)
        }
    };
    let tmp = out.with_extension("part");
    std::fs::write(&tmp, &bytes).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, out)?;
    Ok(Retrieved {
        task: task.to_string(),
        root: hex(&c.root),
        from,
        skipped,
        tiles: proven.as_ref().map_or(count, |t| t.len() as u32),
        output: out.display().to_string(),
        bytes: bytes.len() as u64,
        completions: rows_done.and_then(|(rows, b)| completions(&c.job, &b, &rows)),
    })
}

/// The whole result of `job` from its `tiles`, as `task result` writes it: C as a safetensors
/// `U32` tensor for a `MatMulModP`, the raw digests for a `HashBatch`, the classes and logits
/// or the embeddings for an `Mlp` or an `Encoder`.
pub fn whole_file(job: &JobSpec, tiles: &[Vec<u8>]) -> Result<Vec<u8>> {
    match job.kind {
        JobKind::MatMulModP => {
            let m = Matrix::from_tiles(job, tiles)?;
            tensor_file("C", m.rows, m.cols, &m.data)
        }
        JobKind::HashBatch => Ok(tiles.concat()),
        JobKind::Mlp | JobKind::Encoder | JobKind::Generate => {
            rows_file(job, &tiles.concat(), &(0..job.dims[0]))
        }
    }
}

/// What `keeper compute` computed and wrote.
#[derive(Clone, Debug, Serialize)]
pub struct Local {
    /// The job, as it would be posted (kind and dimensions).
    pub job: String,
    /// The root a provider would commit (the market's result root for the same job).
    pub root: String,
    /// Output tiles.
    pub tiles: u32,
    /// Work units (what rewards are priced by, PROTOCOL §5).
    pub work: u64,
    /// Bytes the job needs at once (what providers check against their memory).
    pub memory_bytes: u64,
    /// Seconds this machine took, inputs checked to the last tile.
    pub seconds: f64,
    /// The backend it ran on.
    pub backend: String,
    /// The file written, as `task result` writes the market's result.
    pub output: String,
    /// Its bytes.
    pub bytes: u64,
    /// Where the seconds went, by phase: `inputs` (the parts put into the store and checked,
    /// the model parsed and packed, the texts tokenized), `compute` (every tile), `commit`
    /// (the Merkle tree over the tiles), `output` (the file built and written). `keeper
    /// compute` adds `prepare` (the job built from the files, before any of these).
    pub phases: std::collections::BTreeMap<&'static str, f64>,
    /// A `Generate` job's completions with their prompts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completions: Option<Vec<Completion>>,
}

/// Runs `job` here as a provider would (PROTOCOL §5): its inputs (`prepared`, for a job on the
/// client's data) put into a content store and checked by the provider's own path
/// ([`ResultStore::ensure_inputs`]: the manifest against the job, every part against its hash
/// and bounds), every tile computed by `backend`, committed into the root a provider would
/// submit, and the whole result written to `out` as `task result` would write the market's.
/// Nothing is posted or paid.
pub fn compute_locally(
    job: &JobSpec,
    prepared: Option<&PreparedInputs>,
    backend: &dyn crate::compute::Backend,
    progress: &crate::compute::Progress<'_>,
    out: &Path,
) -> Result<Local> {
    let start = std::time::Instant::now();
    let mut phases = std::collections::BTreeMap::new();
    let mut lap = std::time::Instant::now();
    let mut phase = |name: &'static str| {
        phases.insert(name, round_ms(lap.elapsed().as_secs_f64()));
        lap = std::time::Instant::now();
    };
    let store = ResultStore::default();
    if let Some(p) = prepared {
        // each part under the hash its manifest names (hashed when it was read: a 23 MB
        // model hashed again here would cost what a text's embedding does); the provider's
        // path below checks every part against it
        for (part, named) in p.parts.iter().zip(&p.manifest.parts) {
            store
                .content
                .put_checked(&named.hash, part, false)
                .map_err(|e| anyhow::anyhow!("holding an input part: {e}"))?;
        }
        let m = p.manifest.encode();
        store
            .content
            .put(&inputs::content_hash(&m), &m, false)
            .map_err(|e| anyhow::anyhow!("holding the manifest: {e}"))?;
        store
            .ensure_inputs(job, &[], None)
            .map_err(|e| anyhow::anyhow!("its inputs, checked as a provider checks them: {e}"))?;
    }
    phase("inputs");
    let tiles = backend.run_with_progress(job, progress)?;
    phase("compute");
    let (root, _) = store.publish([0; 32], *job, tiles.clone())?;
    phase("commit");
    let file = whole_file(job, &tiles)?;
    let completions = completions(job, &tiles.concat(), &(0..job.dims[0]));
    let tmp = out.with_extension("part");
    std::fs::write(&tmp, &file).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, out)?;
    phase("output");
    if let Some(p) = prepared {
        inputs::release(&p.job.input);
    }
    Ok(Local {
        job: format!("{:?} {:?}", job.kind, job.dims),
        root: hex(&root),
        tiles: job.tile_count(),
        work: job.work(),
        memory_bytes: job.memory_bytes(),
        seconds: round_ms(start.elapsed().as_secs_f64()),
        backend: backend.name().to_string(),
        output: out.display().to_string(),
        bytes: file.len() as u64,
        phases,
        completions,
    })
}

/// Seconds to the millisecond.
pub fn round_ms(seconds: f64) -> f64 {
    (seconds * 1000.0).round() / 1000.0
}

/// Tiles (checked) as one safetensors tensor each, `tile_<i>`: 64 × 64 for `MatMulModP`, the
/// tile's bytes as `u32` for `HashBatch`.
fn tiles_file(job: &JobSpec, served: &[crate::verify::ProvenTile]) -> Result<Vec<u8>> {
    // each tile cropped to what the output holds: an edge tile of C is the rows and columns
    // of C it covers, the last tile of a batch its rows (no padding for the client to cut)
    let cropped: Vec<(u32, safetensors::Dtype, Vec<usize>, Vec<u8>)> = served
        .iter()
        .map(|s| match job.kind {
            JobKind::MatMulModP => {
                let t = MATMUL_TILE as usize;
                let [m, _, n] = job.dims.map(|d| d as usize);
                let across = n.div_ceil(t);
                let (r0, c0) = (s.index as usize / across * t, s.index as usize % across * t);
                let (rows, cols) = ((m - r0).min(t), (n - c0).min(t));
                let data = (0..rows)
                    .flat_map(|r| s.tile[4 * r * t..4 * (r * t + cols)].iter().copied())
                    .collect();
                (s.index, safetensors::Dtype::U32, vec![rows, cols], data)
            }
            JobKind::HashBatch | JobKind::Generate => (
                s.index,
                safetensors::Dtype::U32,
                vec![s.tile.len() / 4],
                s.tile.clone(),
            ),
            JobKind::Mlp | JobKind::Encoder => {
                let per = usize::from(job.rows_per_tile);
                let first = s.index as usize * per;
                let rows = (job.dims[0] as usize).saturating_sub(first).min(per);
                let len = s.tile.len() / per.max(1) * rows;
                let data = s.tile[..len].to_vec();
                match job.kind {
                    JobKind::Encoder => (
                        s.index,
                        safetensors::Dtype::I16,
                        vec![rows, job.dims[2] as usize],
                        data,
                    ),
                    _ => (s.index, safetensors::Dtype::U32, vec![len / 4], data),
                }
            }
        })
        .collect();
    let tensors: Vec<(String, safetensors::tensor::TensorView<'_>)> = cropped
        .iter()
        .map(|(i, dtype, shape, data)| {
            safetensors::tensor::TensorView::new(*dtype, shape.clone(), data)
                .map(|v| (format!("tile_{i}"), v))
                .map_err(|e| anyhow::anyhow!("{e}"))
        })
        .collect::<Result<_>>()?;
    safetensors::serialize(tensors, None).map_err(|e| anyhow::anyhow!("{e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prompts_file_is_utf8_one_prompt_a_line_json_strings_for_line_breaks() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("prompts.txt");
        std::fs::write(&f, "Hello there.\n\"Two\\nlines.\"\r\nLast one").unwrap();
        assert_eq!(
            read_prompts(&f).unwrap(),
            vec!["Hello there.", "Two\nlines.", "Last one"]
        );
        let refused = |bytes: &[u8], says: &str| {
            std::fs::write(&f, bytes).unwrap();
            let e = format!("{:#}", read_prompts(&f).unwrap_err());
            assert!(e.contains(says), "{says:?} not in {e:?}");
        };
        refused(b"fine\n\xff\xfe broken\n", "not UTF-8 (byte 5 is not)");
        refused(b"one\n\ntwo\n", "line 2 is blank");
        refused(
            b"\"unterminated\n",
            "line 1 starts with '\"' but is not one JSON string",
        );
        refused(b"", "is empty");
    }

    #[test]
    fn a_model_is_described_as_jobs_on_it_carry_it_and_anything_else_is_refused() {
        let models = Path::new(env!("CARGO_MANIFEST_DIR")).join("../models");
        let digits = std::fs::read(models.join("digits-mlp.safetensors")).unwrap();
        assert_eq!(
            describe_model(&digits).unwrap(),
            ModelInfo::Mlp {
                features: 64,
                classes: 10,
                work_per_row: crate::compute::mlp::read_model(&digits)
                    .unwrap()
                    .work_per_row(),
                // 16 bytes of header, 128 records of 76 bytes, 10 of 140
                slices: SlicesInfo {
                    len: 16 + 128 * 76 + 10 * 140,
                    root: {
                        let m = crate::compute::mlp::read_model(&digits).unwrap();
                        let s = compute_market_protocol::slices::build::model(&m);
                        blake3::hash(&s).to_hex().to_string()
                    },
                },
            }
        );
        let held = std::fs::read(models.join("digits-heldout.safetensors")).unwrap();
        let e = format!("{:#}", describe_model(&held).unwrap_err());
        assert!(e.contains("may not"), "{e}");
        let e = format!("{:#}", describe_model(b"not a model").unwrap_err());
        assert!(e.contains("malformed safetensors"), "{e}");
        // a model that is not one refuses the whole publish before anything is uploaded
        let dir = tempfile::tempdir().unwrap();
        let bad = dir.path().join("bad.safetensors");
        std::fs::write(&bad, &held).unwrap();
        let e = publish_models(
            "http://127.0.0.1:9",
            &[models.join("digits-mlp.safetensors"), bad.clone()],
            &FetchPolicy::default(),
        )
        .unwrap_err();
        assert!(format!("{e:#}").contains("bad.safetensors"), "{e:#}");
    }

    /// A decoder's and an encoder's tokenizer, as published beside them: what a client
    /// tokenizes with is what the model file carries, and nothing for a model without one.
    #[test]
    fn a_models_tokenizer_is_what_its_file_carries() {
        let smollm2 = crate::compute::decoder::smollm2_bytes().unwrap();
        let file = tokenizer_bytes(&smollm2).unwrap();
        let st = safetensors::SafeTensors::deserialize(&file).unwrap();
        let model = safetensors::SafeTensors::deserialize(&smollm2).unwrap();
        let mut names = st.names();
        names.sort();
        assert_eq!(names, ["chat.post", "chat.pre", "eos", "tokenizer"]);
        for n in names {
            assert_eq!(
                st.tensor(n).unwrap().data(),
                model.tensor(n).unwrap().data(),
                "{n}"
            );
        }
        let ModelInfo::Decoder {
            tokenizer, vocab, ..
        } = describe_model(&smollm2).unwrap()
        else {
            panic!("SmolLM2 is a decoder")
        };
        assert_eq!((tokenizer.bytes, vocab), (file.len() as u64, 49_152));
        let minilm = crate::compute::encoder::minilm_bytes().unwrap();
        let vocab = tokenizer_bytes(&minilm).unwrap();
        assert!(std::str::from_utf8(&vocab).unwrap().starts_with("[PAD]\n"));
        let digits = std::fs::read(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/digits-mlp.safetensors"),
        )
        .unwrap();
        assert_eq!(tokenizer_bytes(&digits), None);
    }

    #[test]
    fn rows_name_the_tiles_that_hold_them_and_come_back_in_order() {
        assert_eq!(Wanted::parse_rows("60..70").unwrap(), 60..70);
        for (bad, why) in [
            ("60-70", "expected START..END"),
            ("7..7", "START must be below END"),
            ("a..9", "is not a row number"),
        ] {
            let e = Wanted::parse_rows(bad).unwrap_err().to_string();
            assert!(e.contains(why), "{bad}: {e}");
        }
        // C is 100 × 130: a 2 × 3 grid of tiles
        let job = JobSpec::matmul(100, 8, 130, [0; 32]);
        assert_eq!(
            tiles_of_rows(&job, &(60..70)).unwrap(),
            vec![0, 1, 2, 3, 4, 5]
        );
        assert_eq!(tiles_of_rows(&job, &(64..100)).unwrap(), vec![3, 4, 5]);
        assert_eq!(tiles_of_rows(&job, &(0..1)).unwrap(), vec![0, 1, 2]);
        let e = tiles_of_rows(&job, &(99..101)).unwrap_err().to_string();
        assert!(e.contains("the output has 100 rows"), "{e}");
        // element (r, c) of C is r·1000 + c, laid out in zero-padded 64 × 64 tiles
        let tiles: Vec<crate::verify::ProvenTile> = (0..6u32)
            .map(|i| {
                let (tr, tc) = (i / 3, i % 3);
                let tile = (0..64 * 64u32)
                    .flat_map(|x| {
                        let (r, c) = (tr * 64 + x / 64, tc * 64 + x % 64);
                        let v = if r < 100 && c < 130 { r * 1000 + c } else { 0 };
                        v.to_le_bytes()
                    })
                    .collect();
                crate::verify::ProvenTile {
                    index: i,
                    tile,
                    proof: vec![],
                }
            })
            .collect();
        let file = assemble_rows(&job, &(62..66), &tiles).unwrap();
        let st = safetensors::SafeTensors::deserialize(&file).unwrap();
        let c = st.tensor("C").unwrap();
        assert_eq!(c.shape(), [4, 130]);
        let got: Vec<u32> = c
            .data()
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        let want: Vec<u32> = (62..66u32)
            .flat_map(|r| (0..130u32).map(move |c| r * 1000 + c))
            .collect();
        assert_eq!(got, want);
        // a HashBatch of 4 tiles × 3 digests: rows are digests
        let hb = JobSpec::hash_batch(4, 3, 1, [0; 32]);
        assert_eq!(tiles_of_rows(&hb, &(2..4)).unwrap(), vec![0, 1]);
        let tiles: Vec<crate::verify::ProvenTile> = (0..2u32)
            .map(|i| crate::verify::ProvenTile {
                index: i,
                tile: (0..96u32).map(|b| (i * 96 + b) as u8).collect(),
                proof: vec![],
            })
            .collect();
        let got = assemble_rows(&hb, &(2..4), &tiles).unwrap();
        assert_eq!(got, (64..128u8).collect::<Vec<u8>>(), "digests 2 and 3");
    }
}

/// The tiles `wanted` of `task`'s result from what its provider published on chain, answering
/// availability challenges (PROTOCOL §8.11): `None` while some wanted tile is not published.
/// Each published tile was proven against the root by the program, chunk by chunk; a whole
/// result is hashed to the root again here.
pub fn published_result(
    chain: &dyn Chain,
    task: &Pubkey,
    c: &Committed,
    wanted: &Wanted,
    out: &Path,
) -> Result<Option<Retrieved>> {
    let want = wanted_tiles(&c.job, wanted)?;
    let published = crate::roles::availability::published(chain, task, &c.job, c.posted_slot)?;
    let got: Vec<crate::verify::ProvenTile> = want
        .iter()
        .filter_map(|i| {
            published
                .iter()
                .find(|(t, _)| t == i)
                .map(|(t, b)| crate::verify::ProvenTile {
                    index: *t,
                    tile: b.clone(),
                    proof: vec![],
                })
        })
        .collect();
    if got.len() < want.len() {
        return Ok(None);
    }
    let bytes = match wanted {
        Wanted::All => {
            let tiles: Vec<Vec<u8>> = got.into_iter().map(|p| p.tile).collect();
            ensure!(
                commit(&tiles).root() == c.root,
                "the tiles published on chain do not hash to the root on chain; nothing written"
            );
            whole_file(&c.job, &tiles)?
        }
        Wanted::Rows(rows) => assemble_rows(&c.job, rows, &got)?,
        Wanted::Tiles(_) => tiles_file(&c.job, &got)?,
    };
    let tmp = out.with_extension("part");
    std::fs::write(&tmp, &bytes).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, out)?;
    Ok(Some(Retrieved {
        task: task.to_string(),
        root: hex(&c.root),
        from: format!("the chain ({} tiles published)", want.len()),
        skipped: vec![],
        tiles: want.len() as u32,
        output: out.display().to_string(),
        bytes: bytes.len() as u64,
        completions: None,
    }))
}

/// The tiles of `wanted` (of a result of `count` tiles).
pub fn wanted_tiles(job: &JobSpec, wanted: &Wanted) -> Result<Vec<u32>> {
    Ok(match wanted {
        Wanted::All => (0..job.tile_count()).collect(),
        Wanted::Tiles(t) => crate::verify::distinct(t),
        Wanted::Rows(rows) => tiles_of_rows(job, rows)?,
    })
}

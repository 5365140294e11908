//! Integer sentence embeddings on the CPU (PROTOCOL §5, Encoder): the model file read and
//! checked (every tensor's name, dtype and shape, then [`Encoder::check`]'s bounds), the texts
//! tokenized with Hugging Face's `tokenizers` (BERT's normalizer, pre-tokenizer and WordPiece
//! over the model's own vocabulary), and each text run through the encoder.
//!
//! The arithmetic is the protocol crate's ([`compute_market_protocol::encoder`]); the fast path
//! ([`cpu::Fast`]) runs the same integer steps laid out for speed (texts batched, GEMMs by
//! packed kernels per instruction set: [`gemm`]) and spreads batches over the cores, so its
//! bytes are the reference's.

pub mod cpu;
pub mod gemm;

use anyhow::{anyhow, bail, ensure, Context, Result};
use compute_market_protocol::encoder::{row_len, Block, Dense, Encoder, Norm, Requant, MAX_BLOCKS};
use rayon::prelude::*;
use safetensors::Dtype;
use tokenizers::models::wordpiece::WordPiece;
use tokenizers::normalizers::bert::BertNormalizer;
use tokenizers::pre_tokenizers::bert::BertPreTokenizer;
use tokenizers::processors::bert::BertProcessing;
use tokenizers::Tokenizer;

use self::cpu::{Fast, BATCH};
use super::tensors::{tensors, Tensors};

/// A model file's encoder and tokenizer.
pub struct Model {
    /// The integer encoder (checked).
    pub encoder: Encoder,
    /// BERT's uncased tokenizer over the model's vocabulary.
    pub tokenizer: Tokenizer,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model")
            .field("hidden", &self.encoder.hidden)
            .field("blocks", &self.encoder.blocks.len())
            .field("vocab", &self.encoder.vocab())
            .finish()
    }
}

/// Reads and checks a model file: `heads` `I32` [1], `vocab` `U8` (the WordPiece vocabulary,
/// one token per line, id = line), `exp` `I32` [1024], the embeddings (`emb.word`, `emb.pos`
/// `I8` with `.m`/`.s` `I32` per channel, `emb.ln.{g,b,s}`), and blocks `l0 …` (PROTOCOL §5);
/// nothing else.
pub fn parse_model(bytes: &[u8]) -> Result<Model> {
    let mut t = Tensors(tensors(bytes, "the model")?);
    let heads = t.scalar("heads")?;
    let (wshape, word) = t.take("emb.word", Dtype::I8)?;
    let [_, hidden] = wshape[..] else {
        bail!("the model's emb.word has shape {wshape:?}, it must be [vocab, hidden]");
    };
    let (pshape, pos) = t.take("emb.pos", Dtype::I8)?;
    ensure!(
        pshape.len() == 2 && pshape[1] == hidden,
        "the model's emb.pos has shape {pshape:?}, it must be [positions, {hidden}]"
    );
    let (_, vocab) = t.take("vocab", Dtype::U8)?;
    let vocab = std::str::from_utf8(vocab)
        .context("the model's vocab is not UTF-8")?
        .to_owned();
    let mut enc = Encoder {
        hidden,
        heads: usize::try_from(heads).unwrap_or(0),
        word: i8s(word),
        pos: i8s(pos),
        word_rq: t.requant("emb.word")?,
        pos_rq: t.requant("emb.pos")?,
        ln: t.norm("emb.ln")?,
        exp: t.vector("exp")?,
        blocks: vec![],
    };
    let mut i = 0;
    while i < MAX_BLOCKS && t.0.contains_key(&format!("l{i}.q.w")) {
        let p = |f: &str| format!("l{i}.{f}");
        let (_, gelu) = t.take(&p("gelu"), Dtype::I16)?;
        let gelu = gelu
            .chunks_exact(2)
            .map(|b| i16::from_le_bytes([b[0], b[1]]))
            .collect();
        enc.blocks.push(Block {
            q: t.dense(&p("q"))?,
            k: t.dense(&p("k"))?,
            v: t.dense(&p("v"))?,
            att: (t.scalar(&p("att.m"))?, t.scalar(&p("att.s"))?),
            ctx: t.requant(&p("ctx"))?,
            o: t.dense(&p("o"))?,
            res1: t.requant(&p("res1"))?,
            ln1: t.norm(&p("ln1"))?,
            f1: t.dense(&p("f1"))?,
            gelu,
            f2: t.dense(&p("f2"))?,
            res2: t.requant(&p("res2"))?,
            ln2: t.norm(&p("ln2"))?,
        });
        i += 1;
    }
    if let Some(extra) = t.0.keys().min() {
        bail!("the model holds a tensor it may not: {extra:?} (blocks are l0 … l{i}, at most {MAX_BLOCKS})");
    }
    enc.check()
        .map_err(|e| anyhow!("the model is refused: {e}"))?;
    let tokenizer = tokenizer(&vocab, enc.vocab())?;
    Ok(Model {
        encoder: enc,
        tokenizer,
    })
}

impl Tensors<'_> {
    fn requant(&mut self, p: &str) -> Result<Requant> {
        Ok(Requant {
            m: self.vector(&format!("{p}.m"))?,
            s: self.vector(&format!("{p}.s"))?,
        })
    }

    fn norm(&mut self, p: &str) -> Result<Norm> {
        Ok(Norm {
            g: self.vector(&format!("{p}.g"))?,
            b: self.vector(&format!("{p}.b"))?,
            shift: self.scalar(&format!("{p}.s"))?,
        })
    }

    fn dense(&mut self, p: &str) -> Result<Dense> {
        let (shape, w) = self.take(&format!("{p}.w"), Dtype::I8)?;
        let [out, inp] = shape[..] else {
            bail!("the model's {p}.w has shape {shape:?}, it must be [out, in]");
        };
        Ok(Dense {
            inp,
            out,
            weight: i8s(w),
            bias: self.vector(&format!("{p}.b"))?,
            rq: self.requant(p)?,
        })
    }
}

fn i8s(b: &[u8]) -> Vec<i8> {
    b.iter().map(|&v| v as i8).collect()
}

/// BERT's uncased tokenizer (clean text, split CJK characters, lowercase and strip accents,
/// split on whitespace and punctuation, WordPiece with `##` continuations, `[CLS] … [SEP]`)
/// over `vocab` (one token per line, id = line), which must hold `count` distinct tokens
/// including `[UNK]`, `[CLS]` and `[SEP]`.
pub fn tokenizer(vocab: &str, count: usize) -> Result<Tokenizer> {
    ensure!(
        char::UNICODE_VERSION == UNICODE_VERSION,
        "this keeper was built with Unicode {:?} tables, the protocol's tokenizer is defined on {UNICODE_VERSION:?} (build it with Rust 1.95): it would tokenize some texts differently from its peers",
        char::UNICODE_VERSION
    );
    let lines: Vec<&str> = vocab
        .strip_suffix('\n')
        .unwrap_or(vocab)
        .split('\n')
        .collect();
    ensure!(
        lines.len() == count,
        "the model's vocabulary lists {} tokens, its word embeddings have {count} rows",
        lines.len()
    );
    let mut ids = ahash::AHashMap::with_capacity(count);
    for (i, tok) in lines.iter().enumerate() {
        ensure!(
            !tok.is_empty(),
            "the model's vocabulary has an empty token at line {}",
            i + 1
        );
        if ids.insert(tok.to_string(), i as u32).is_some() {
            bail!("the model's vocabulary lists {tok:?} twice");
        }
    }
    let id = |t: &str| {
        ids.get(t)
            .copied()
            .ok_or_else(|| anyhow!("the model's vocabulary has no {t}"))
    };
    let (cls, sep) = (id("[CLS]")?, id("[SEP]")?);
    id("[UNK]")?;
    let wp = WordPiece::builder()
        .vocab(ids)
        .unk_token("[UNK]".into())
        .continuing_subword_prefix("##".into())
        .max_input_chars_per_word(100)
        .build()
        .map_err(|e| anyhow!("the model's vocabulary: {e}"))?;
    let mut tok = Tokenizer::new(wp);
    tok.with_normalizer(Some(BertNormalizer::new(true, true, None, true)))
        .map_err(|e| anyhow!("{e}"))?;
    tok.with_pre_tokenizer(Some(BertPreTokenizer));
    tok.with_post_processor(Some(BertProcessing::new(
        ("[SEP]".into(), sep),
        ("[CLS]".into(), cls),
    )));
    Ok(tok)
}

/// The texts of a texts part: UTF-8, one text per line (`\n`; a final `\n` ends the last
/// text), exactly `rows` of them, each at most 16 bytes per token of the `max_tokens` limit
/// (checked before anything tokenizes them: the tokenizer's time and memory follow the bytes).
pub fn parse_texts(bytes: &[u8], rows: usize, max_tokens: usize) -> Result<Vec<&str>> {
    let texts = texts_of(bytes)?;
    ensure!(
        texts.len() == rows,
        "the texts part holds {} texts, the job has {rows} rows",
        texts.len()
    );
    check_text_bytes(&texts, max_tokens)?;
    Ok(texts)
}

/// The texts of a texts part, however many: UTF-8, one per line, a final `\n` ending the last.
pub fn texts_of(bytes: &[u8]) -> Result<Vec<&str>> {
    let s = std::str::from_utf8(bytes).map_err(|e| {
        // a person finds a line, not a byte offset
        let at = e.valid_up_to();
        let line = bytes[..at].iter().filter(|&&b| b == b'\n').count() + 1;
        let column = at - bytes[..at].iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1) + 1;
        anyhow!(
            "text {line} is not UTF-8 (byte {column} of its line): save the file as UTF-8 text, one text a line"
        )
    })?;
    Ok(s.strip_suffix('\n').unwrap_or(s).split('\n').collect())
}

#[cfg(test)]
#[test]
fn a_text_that_is_not_utf8_is_named_by_its_line() {
    let e = texts_of(b"one\ntwo\nth\xffree\n").unwrap_err().to_string();
    assert_eq!(
        e,
        "text 3 is not UTF-8 (byte 3 of its line): save the file as UTF-8 text, one text a line"
    );
}

/// Refuses the first text longer than 16 bytes per token of the `max_tokens` limit.
pub fn check_text_bytes(texts: &[&str], max_tokens: usize) -> Result<()> {
    let most = TEXT_BYTES_PER_TOKEN * max_tokens;
    if let Some(i) = texts.iter().position(|t| t.len() > most) {
        bail!(
            "text {} is {} bytes, over the limit of {most} ({TEXT_BYTES_PER_TOKEN} bytes a token of the {max_tokens}-token limit)",
            i + 1,
            texts[i].len()
        );
    }
    Ok(())
}

const TEXT_BYTES_PER_TOKEN: usize =
    compute_market_protocol::job::ENCODER_TEXT_BYTES_PER_TOKEN as usize;

/// The Unicode version the protocol's tokenizer is defined on: BERT's normalizer lowercases and
/// classifies characters with Rust's own tables (Rust 1.95: Unicode 17.0.0), so a keeper built
/// with other tables could tokenize a text differently from its peers.
pub const UNICODE_VERSION: (u8, u8, u8) = (17, 0, 0);

/// Token ids of each text (`[CLS]` and `[SEP]` included), refusing a text longer than
/// `max_tokens` by its line and length.
pub fn tokenize(model: &Model, texts: &[&str], max_tokens: usize) -> Result<Vec<Vec<u32>>> {
    let max = max_tokens.min(model.encoder.positions());
    texts
        .par_iter()
        .enumerate()
        .map(|(i, text)| {
            let enc = model
                .tokenizer
                .encode(*text, true)
                .map_err(|e| anyhow!("text {} could not be tokenized: {e}", i + 1))?;
            let ids = enc.get_ids();
            ensure!(
                ids.len() <= max,
                "text {} is {} tokens long, over the limit of {max} (texts over the length limit are refused)",
                i + 1,
                ids.len()
            );
            Ok(ids.to_vec())
        })
        .collect()
}

/// Output rows `first .. first + count` (rows past the texts are zero): each text's int16
/// embedding, little-endian, by `fast` ([`embed_rows`]).
pub fn run_rows(fast: &Fast, ids: &[Vec<u32>], first: usize, count: usize) -> Vec<u8> {
    let len = row_len(fast.encoder().hidden);
    let texts: Vec<&[u32]> = ids
        .iter()
        .skip(first)
        .take(count)
        .map(Vec::as_slice)
        .collect();
    let mut out = embed_rows(fast, &texts);
    out.resize(count * len, 0);
    out
}

/// Output tiles `indices` of `rows_per_tile` rows each (rows past the texts zero), their texts
/// run together ([`embed_rows`]) rather than tile by tile: a tile of two texts alone would
/// pass every weight over two texts' rows.
pub fn run_tiles(
    fast: &Fast,
    ids: &[Vec<u32>],
    indices: &[u32],
    rows_per_tile: usize,
) -> Vec<Vec<u8>> {
    let len = row_len(fast.encoder().hidden);
    let rows = |i: u32| {
        let first = (i as usize).saturating_mul(rows_per_tile).min(ids.len());
        first..(first + rows_per_tile).min(ids.len())
    };
    let texts: Vec<&[u32]> = indices
        .iter()
        .flat_map(|&i| ids[rows(i)].iter().map(Vec::as_slice))
        .collect();
    let all = embed_rows(fast, &texts);
    let mut at = 0;
    indices
        .iter()
        .map(|&i| {
            let n = rows(i).len() * len;
            let mut tile = all[at..at + n].to_vec();
            at += n;
            tile.resize(rows_per_tile * len, 0);
            tile
        })
        .collect()
}

/// Each text's int16 embedding, little-endian, one row after another, by `fast`: the texts in
/// batches of at most [`BATCH`] (their rows stacked, each weight read once a batch), as many
/// batches as keep every core busy, spread over the cores.
pub fn embed_rows(fast: &Fast, texts: &[&[u32]]) -> Vec<u8> {
    let len = row_len(fast.encoder().hidden);
    let mut out = vec![0u8; texts.len() * len];
    let threads = rayon::current_num_threads().max(1);
    let batches = texts.len().div_ceil(BATCH).next_multiple_of(threads);
    let size = texts.len().div_ceil(batches.max(1)).max(1);
    out.par_chunks_mut(size * len)
        .zip(texts.par_chunks(size))
        .for_each(|(rows, batch)| {
            for (row, e) in rows.chunks_exact_mut(len).zip(fast.embed(batch)) {
                for (c, v) in e.iter().enumerate() {
                    row[2 * c..2 * c + 2].copy_from_slice(&v.to_le_bytes());
                }
            }
        });
    out
}

/// Where the MiniLM integer model is made (`scripts/minilm-model`, in the cache: 23 MB, not
/// checked in).
pub fn minilm_path() -> std::path::PathBuf {
    super::tensors::cached_model("minilm-int8.safetensors")
}

/// The SHA-256 the MiniLM integer model must have (`models/minilm-int8.sha256`).
pub const MINILM_SHA256: &str = include_str!("../../../../models/minilm-int8.sha256");

/// The 300 held-out texts (`models/minilm-heldout.tsv`: the project's first 60 English
/// sentences, then twenty of each of twelve kinds) with their kinds, the reference tokenizer's
/// ids and the fp32 and integer embeddings (`scripts/minilm-model --fixture`), for the demo,
/// the bench and the tests.
pub const MINILM_HELDOUT: &[u8] = include_bytes!("../../../../models/minilm-heldout.safetensors");

/// Reads the MiniLM model from [`minilm_path`], checking its pinned SHA-256.
pub fn minilm_bytes() -> Result<Vec<u8>> {
    super::tensors::read_pinned(
        &minilm_path(),
        MINILM_SHA256,
        "MiniLM",
        "scripts/minilm-model",
    )
}

/// A synthetic encoder (weights from a fixed generator, one block of width 256 and a
/// feed-forward of 1024, a 1 000-token vocabulary) for measuring speed.
fn synthetic() -> Encoder {
    let (h, f) = (256usize, 1024usize);
    let gen = |n: usize, salt: u64| -> Vec<i8> {
        (0..n)
            .map(|j| (compute_market_protocol::job::splitmix64(j as u64 ^ salt << 40) % 255) as i8)
            .collect()
    };
    let rq = |n: usize| Requant {
        m: vec![1 << 30; n],
        s: vec![40; n],
    };
    let dense = |inp: usize, out: usize, salt: u64| Dense {
        inp,
        out,
        weight: gen(inp * out, salt),
        bias: vec![0; out],
        rq: rq(out),
    };
    let norm = || Norm {
        g: vec![1 << 12; h],
        b: vec![0; h],
        shift: 12,
    };
    let block = Block {
        q: dense(h, h, 1),
        k: dense(h, h, 2),
        v: dense(h, h, 3),
        att: (1 << 30, 40),
        ctx: rq(h),
        o: dense(h, h, 4),
        res1: rq(h),
        ln1: norm(),
        f1: dense(h, f, 5),
        gelu: gen(compute_market_protocol::encoder::GELU_LEN, 6)
            .into_iter()
            .map(|g| i16::from(g) << 6)
            .collect(),
        f2: Dense {
            // int16 GELU outputs (up to 2^13 here): weights within the accumulator bound
            weight: gen(f * h, 7).into_iter().map(|w| w >> 2).collect(),
            ..dense(f, h, 7)
        },
        res2: rq(h),
        ln2: norm(),
    };
    Encoder {
        hidden: h,
        heads: 4,
        word: gen(1000 * h, 8),
        word_rq: rq(h),
        pos: gen(64 * h, 9),
        pos_rq: rq(h),
        ln: norm(),
        exp: (0..compute_market_protocol::encoder::EXP_LEN as i32)
            .map(|t| (1 << 15) >> (t / 64))
            .collect(),
        blocks: vec![block],
    }
}

/// Runs `texts` texts of 32 tokens through the synthetic encoder by the fast path; returns the
/// work done (tokens × work per token) and the seconds it took (packing the weights excluded),
/// for a speed figure.
pub fn synthetic_run(texts: usize) -> (u64, f64) {
    let enc = std::sync::Arc::new(synthetic());
    debug_assert!(enc.check().is_ok());
    let ids: Vec<Vec<u32>> = (0..texts)
        .map(|i| (0..32).map(|t| ((i * 31 + t * 7) % 1000) as u32).collect())
        .collect();
    let work = (texts * 32) as u64 * enc.work_per_token(32);
    let fast = Fast::new(enc, gemm::KernelSet::best());
    let t = std::time::Instant::now();
    std::hint::black_box(run_rows(&fast, &ids, 0, texts));
    (work, t.elapsed().as_secs_f64())
}

/// Encoder shapes of odd widths (one head and several, a feed-forward no vector divides) with
/// texts of 1 to 512 tokens, ids cycling through a 50-token vocabulary: what every fast path
/// (each CPU kernel set, the GPU's self-test, `keeper gpu-check`) is held to the reference on,
/// with `random_encoder`'s weights (their clamps reached).
pub fn odd_encoders() -> Vec<(compute_market_protocol::encoder::RandomShape, Vec<Vec<u32>>)> {
    use compute_market_protocol::encoder::RandomShape;
    // the last: texts past a GPU block's 128 threads, up to the 512-token limit
    let lengths: [&[usize]; 4] = [
        &[1, 7, 24, 2, 13],
        &[1, 7, 24, 2, 13],
        &[1, 7, 24, 2, 13],
        &[129, 3, 512, 200],
    ];
    [(45, 3, 101), (33, 1, 67), (64, 4, 130), (22, 2, 38)]
        .into_iter()
        .zip(lengths)
        .enumerate()
        .map(|(k, ((hidden, heads, ffn), lengths))| {
            let shape = RandomShape {
                hidden,
                heads,
                ffn,
                blocks: 2,
                vocab: 50,
                positions: lengths.iter().copied().max().unwrap_or(1),
            };
            let texts = lengths
                .iter()
                .map(|&t| (0..t).map(|p| ((p * 13 + k + t) % 50) as u32).collect())
                .collect();
            (shape, texts)
        })
        .collect()
}

/// The held-out texts (as a texts part) and the fp32 model's embeddings of them (`H` per text),
/// from [`MINILM_HELDOUT`].
pub fn minilm_heldout() -> Result<(Vec<u8>, Vec<f32>)> {
    let st = safetensors::SafeTensors::deserialize(MINILM_HELDOUT)
        .map_err(|e| anyhow!("the held-out texts: {e}"))?;
    let get = |n: &str| -> Result<Vec<u8>> {
        Ok(st
            .tensor(n)
            .map_err(|e| anyhow!("the held-out texts' {n}: {e}"))?
            .data()
            .to_vec())
    };
    let fp32 = get("fp32")?
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
        .collect();
    Ok((get("texts")?, fp32))
}

/// The held-out texts' kinds, one per text (`pairs`, `short`, `punctuation`, …), from
/// [`MINILM_HELDOUT`].
pub fn minilm_kinds() -> Result<Vec<String>> {
    let st = safetensors::SafeTensors::deserialize(MINILM_HELDOUT)
        .map_err(|e| anyhow!("the held-out texts: {e}"))?;
    let kinds = st
        .tensor("kinds")
        .map_err(|e| anyhow!("the held-out texts' kinds: {e}"))?;
    Ok(std::str::from_utf8(kinds.data())
        .context("the held-out texts' kinds are not UTF-8")?
        .split('\n')
        .map(str::to_owned)
        .collect())
}

/// Cosine to the fp32 embeddings over the texts of one kind.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct KindFigures {
    /// The kind (`all` for every text).
    pub kind: String,
    /// Texts of the kind.
    pub texts: usize,
    /// Mean cosine.
    pub mean: f64,
    /// Least cosine.
    pub least: f64,
}

/// Cosine of each integer embedding (rows of `2 · dim` LE `i16` bytes) to its fp32 one, by kind
/// in the order kinds first appear, then `all`: the MiniLM accuracy table (README).
pub fn accuracy(kinds: &[String], embeddings: &[u8], fp32: &[f32], dim: usize) -> Vec<KindFigures> {
    let cos: Vec<f64> = embeddings
        .chunks_exact(2 * dim)
        .zip(fp32.chunks_exact(dim))
        .map(|(e, f)| cosine(e, f))
        .collect();
    let figures = |kind: &str, of: Vec<f64>| KindFigures {
        kind: kind.to_owned(),
        texts: of.len(),
        mean: of.iter().sum::<f64>() / of.len().max(1) as f64,
        least: of.iter().cloned().fold(1.0, f64::min),
    };
    let mut order: Vec<&String> = vec![];
    for k in kinds.iter().take(cos.len()) {
        if !order.contains(&k) {
            order.push(k);
        }
    }
    let mut rows: Vec<KindFigures> = order
        .iter()
        .map(|k| {
            let of = kinds
                .iter()
                .zip(&cos)
                .filter(|(x, _)| x == k)
                .map(|(_, &c)| c);
            figures(k, of.collect())
        })
        .collect();
    rows.push(figures("all", cos));
    rows
}

/// The held-out texts tokenized by `model` (as a provider would), with the texts part and the
/// fp32 embeddings ([`minilm_heldout`]), for the demo and the bench.
pub fn minilm_heldout_ids(model: &Model) -> Result<(Vec<u8>, Vec<f32>, Vec<Vec<u32>>)> {
    let (texts, fp32) = minilm_heldout()?;
    let positions = model.encoder.positions();
    let lines = texts_of(&texts)?;
    check_text_bytes(&lines, positions)?;
    let ids = tokenize(model, &lines, positions)?;
    Ok((texts, fp32, ids))
}

/// Cosine similarity of an integer embedding (LE `i16` bytes) and a float one.
pub fn cosine(embedding: &[u8], reference: &[f32]) -> f64 {
    let a: Vec<f64> = embedding
        .chunks_exact(2)
        .map(|c| f64::from(i16::from_le_bytes([c[0], c[1]])))
        .collect();
    let dot: f64 = a
        .iter()
        .zip(reference)
        .map(|(x, &y)| x * f64::from(y))
        .sum();
    let na = a.iter().map(|x| x * x).sum::<f64>().sqrt();
    let nb = reference
        .iter()
        .map(|&y| f64::from(y).powi(2))
        .sum::<f64>()
        .sqrt();
    dot / (na * nb).max(f64::MIN_POSITIVE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use compute_market_protocol::encoder::{random_encoder, RandomShape};
    use std::sync::Arc;

    /// The market's path, tiles' texts run together in batches across tiles (asked in any
    /// order, one twice, the last tile partial), gives each tile the bytes of its texts
    /// embedded alone by the reference, zero rows past the last text.
    #[test]
    fn tiles_run_together_equal_each_text_alone() {
        let shape = RandomShape {
            hidden: 45,
            heads: 3,
            ffn: 101,
            blocks: 2,
            vocab: 50,
            positions: 40,
        };
        let e = Arc::new(random_encoder(shape, 7));
        e.check().unwrap();
        let ids: Vec<Vec<u32>> = (0..37)
            .map(|k| {
                (0..1 + k * 7 % 40)
                    .map(|p| ((p * 11 + k) % 50) as u32)
                    .collect()
            })
            .collect();
        let len = row_len(e.hidden);
        let want = |i: usize| -> Vec<u8> {
            let mut tile = vec![0u8; 3 * len];
            for (r, text) in ids.iter().skip(3 * i).take(3).enumerate() {
                for (c, v) in e.embed(text).iter().enumerate() {
                    tile[r * len + 2 * c..][..2].copy_from_slice(&v.to_le_bytes());
                }
            }
            tile
        };
        for set in gemm::KernelSet::here() {
            let fast = Fast::new(e.clone(), set);
            let indices = [12u32, 0, 5, 5, 7, 11];
            let tiles = run_tiles(&fast, &ids, &indices, 3);
            for (&i, tile) in indices.iter().zip(&tiles) {
                assert_eq!(tile, &want(i as usize), "{}: tile {i}", set.name());
            }
            assert_eq!(run_rows(&fast, &ids, 36, 3), want(12), "{}", set.name());
        }
    }
}

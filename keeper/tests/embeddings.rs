//! Integer sentence embeddings on a real model: sentence-transformers' all-MiniLM-L6-v2,
//! converted by `scripts/minilm-model` (its SHA-256 pinned), tokenized by the keeper with
//! Hugging Face's `tokenizers` over the model's own vocabulary and held to the Python
//! tokenizer's ids, run by the protocol's reference and the keeper's fast path and held to the
//! numpy integer pass bit for bit and to the fp32 model by cosine; every bad model or text
//! refused by name.

use compute_market_keeper::compute::encoder::{
    accuracy, cpu::Fast, gemm::KernelSet, minilm_bytes, minilm_kinds, parse_model, parse_texts,
    run_rows, tokenize, MINILM_HELDOUT,
};
use safetensors::{tensor::TensorView, Dtype, SafeTensors};

struct Heldout {
    texts: String,
    ids: Vec<Vec<u32>>,
    fp32: Vec<f32>,
    embedding: Vec<i16>,
}

fn heldout() -> Heldout {
    let st = SafeTensors::deserialize(MINILM_HELDOUT).unwrap();
    let data = |n: &str| st.tensor(n).unwrap().data().to_vec();
    let i32s = |b: Vec<u8>| -> Vec<i32> {
        b.chunks_exact(4)
            .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    };
    let (flat, offsets) = (i32s(data("ids")), i32s(data("offsets")));
    Heldout {
        texts: String::from_utf8(data("texts")).unwrap(),
        ids: offsets
            .windows(2)
            .map(|w| {
                flat[w[0] as usize..w[1] as usize]
                    .iter()
                    .map(|&i| i as u32)
                    .collect()
            })
            .collect(),
        fp32: data("fp32")
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect(),
        embedding: data("embedding")
            .chunks_exact(2)
            .map(|c| i16::from_le_bytes(c.try_into().unwrap()))
            .collect(),
    }
}

fn cosine(a: &[f64], b: &[f64]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let n = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
    dot / n(a) / n(b)
}

#[test]
fn minilm_token_ids_match_the_reference_tokenizer_and_embeddings_match_numpy_and_fp32() {
    let model = parse_model(&minilm_bytes().unwrap()).unwrap();
    let h = heldout();
    let texts = parse_texts(h.texts.as_bytes(), h.ids.len(), 256).unwrap();
    assert!(
        texts.len() >= 260,
        "the first 60 and at least 200 more held-out texts"
    );
    // token ids: the keeper's tokenizer (built from the model's vocabulary) against the
    // Python tokenizer's (the model's own tokenizer.json), on every text
    let ids = tokenize(&model, &texts, 256).unwrap();
    for (i, (got, want)) in ids.iter().zip(&h.ids).enumerate() {
        assert_eq!(got, want, "token ids of text {} ({:?})", i + 1, texts[i]);
    }
    let dim = model.encoder.hidden;
    assert_eq!(dim, 384);
    // the fast path over every text, in the output layout, against numpy's integer pass
    let encoder = std::sync::Arc::new(model.encoder.clone());
    let fast = Fast::new(encoder.clone(), KernelSet::best());
    let out = run_rows(&fast, &ids, 0, ids.len() + 2);
    assert_eq!(out.len(), (ids.len() + 2) * 2 * dim);
    assert!(
        out[ids.len() * 2 * dim..].iter().all(|&b| b == 0),
        "rows past the texts are zero"
    );
    let got: Vec<i16> = out[..ids.len() * 2 * dim]
        .chunks_exact(2)
        .map(|c| i16::from_le_bytes(c.try_into().unwrap()))
        .collect();
    for i in 0..ids.len() {
        assert_eq!(
            got[i * dim..][..dim],
            h.embedding[i * dim..][..dim],
            "embedding of text {}",
            i + 1
        );
    }
    // every kernel set this machine runs (the fast path above took the widest)
    for set in KernelSet::here() {
        let by = run_rows(&Fast::new(encoder.clone(), set), &ids, 0, ids.len());
        assert!(
            by == out[..ids.len() * 2 * dim],
            "the {} kernels embed the held-out texts as numpy does",
            set.name()
        );
    }
    // the plain reference (every step a loop in the protocol crate) on a few texts
    for i in [0, 17, 59, 60, 180, ids.len() - 1] {
        assert_eq!(
            model.encoder.embed(&ids[i]),
            h.embedding[i * dim..][..dim],
            "reference, text {}",
            i + 1
        );
    }
    // against fp32: the acceptance bounds (PROTOCOL §5), over all and by kind of text
    let kinds = minilm_kinds().unwrap();
    assert_eq!(kinds.len(), ids.len(), "a kind per held-out text");
    let table = accuracy(&kinds, &out[..ids.len() * 2 * dim], &h.fp32, dim);
    println!("MiniLM integer vs fp32, cosine over the held-out texts:");
    for r in &table {
        println!(
            "  {:13} {:4}  mean {:.4}  least {:.4}",
            r.kind, r.texts, r.mean, r.least
        );
    }
    assert!(table.len() >= 13, "the first 60 and twelve kinds, then all");
    assert!(
        table
            .iter()
            .skip(1)
            .filter(|r| r.kind != "all")
            .all(|r| r.texts >= 20),
        "at least 20 texts of every kind"
    );
    let all = table.last().unwrap();
    assert_eq!(all.texts, ids.len());
    assert!(
        all.mean >= 0.99 && all.least >= 0.98,
        "cosine mean {:.4}, least {:.4}: the targets are 0.99 and 0.98",
        all.mean,
        all.least
    );
    for r in &table {
        assert!(r.least >= 0.98, "{}: least cosine {:.4}", r.kind, r.least);
    }
    // and the embeddings mean something: a paraphrase is nearer than an unrelated text
    let e = |i: usize| -> Vec<f64> { got[i * dim..][..dim].iter().map(|&v| v.into()).collect() };
    assert!(
        cosine(&e(0), &e(1)) > cosine(&e(0), &e(6)) + 0.2,
        "guitar ≈ instrument, not dogs"
    );
}

/// The MiniLM model with `name` replaced by `(dtype, shape, data)` (or removed when `None`).
fn altered(bytes: &[u8], name: &str, with: Option<(Dtype, Vec<usize>, Vec<u8>)>) -> Vec<u8> {
    let st = SafeTensors::deserialize(bytes).unwrap();
    let mut owned: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = st
        .tensors()
        .into_iter()
        .filter(|(n, _)| n != name)
        .map(|(n, t)| (n, t.dtype(), t.shape().to_vec(), t.data().to_vec()))
        .collect();
    if let Some((d, s, b)) = with {
        owned.push((name.into(), d, s, b));
    }
    let views: Vec<(String, TensorView)> = owned
        .iter()
        .map(|(n, d, s, b)| (n.clone(), TensorView::new(*d, s.clone(), b).unwrap()))
        .collect();
    safetensors::serialize(views, None).unwrap()
}

fn le(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

#[test]
fn bad_encoder_models_and_texts_are_refused_by_name() {
    let bytes = minilm_bytes().unwrap();
    let refused = |b: Vec<u8>| parse_model(&b).unwrap_err().to_string();
    // tables of the wrong length
    let e = refused(altered(
        &bytes,
        "exp",
        Some((Dtype::I32, vec![1000], le(&[1 << 15; 1000]))),
    ));
    assert!(
        e.contains("the exp table has 1000 entries, it must have 1024"),
        "{e}"
    );
    let e = refused(altered(
        &bytes,
        "l3.gelu",
        Some((Dtype::I16, vec![512], vec![0; 1024])),
    ));
    assert!(
        e.contains("block 3's GELU table has 512 entries, it must have 1024"),
        "{e}"
    );
    // the first rule's int8 GELU table is refused by its dtype
    let e = refused(altered(
        &bytes,
        "l3.gelu",
        Some((Dtype::I8, vec![1024], vec![0; 1024])),
    ));
    assert!(
        e.contains("the model's l3.gelu is I8, it must be I16"),
        "{e}"
    );
    // shapes that do not chain: block 2's feed-forward out takes 1535 inputs
    let e = refused(altered(
        &bytes,
        "l2.f2.w",
        Some((Dtype::I8, vec![384, 1535], vec![1; 384 * 1535])),
    ));
    assert!(
        e.contains(
            "the shapes do not chain: block 2's feed-forward out is 384×1535, it must be 384×1536"
        ),
        "{e}"
    );
    // an accumulator that could overflow
    let mut bias = vec![0i32; 384];
    bias[7] = 2_000_000_000;
    let e = refused(altered(
        &bytes,
        "l0.q.b",
        Some((Dtype::I32, vec![384], le(&bias))),
    ));
    assert!(
        e.contains("block 0's query's accumulators could overflow int32: |bias[7]|"),
        "{e}"
    );
    // the feed-forward out's row bound, over int16 GELU outputs: row 5 of weights ±127
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let mut w: Vec<u8> = st.tensor("l4.f2.w").unwrap().data().to_vec();
    for (j, v) in w[5 * 1536..6 * 1536].iter_mut().enumerate() {
        *v = if j % 2 == 0 { 127 } else { (-127i8) as u8 };
    }
    let e = refused(altered(
        &bytes,
        "l4.f2.w",
        Some((Dtype::I8, vec![384, 1536], w)),
    ));
    assert!(
        e.contains(
            "block 4's feed-forward out's accumulators could overflow int32: |bias[5]| + 32768 · Σ|W[5][j]| > 2^31 − 1"
        ),
        "{e}"
    );
    // a shift outside 1..=62, a tensor missing, a tensor of the wrong dtype, an extra tensor
    let e = refused(altered(
        &bytes,
        "l5.ln2.s",
        Some((Dtype::I32, vec![1], le(&[63]))),
    ));
    assert!(
        e.contains("block 5's second LayerNorm's shift is 63: 1 ..= 62"),
        "{e}"
    );
    let e = refused(altered(&bytes, "l1.ctx.m", None));
    assert!(e.contains("the model has no tensor \"l1.ctx.m\""), "{e}");
    let e = refused(altered(
        &bytes,
        "heads",
        Some((Dtype::I64, vec![1], 12i64.to_le_bytes().to_vec())),
    ));
    assert!(
        e.contains("the model's heads is I64, it must be I32"),
        "{e}"
    );
    let e = refused(altered(
        &bytes,
        "backdoor",
        Some((Dtype::U8, vec![1], vec![1])),
    ));
    assert!(
        e.contains("the model holds a tensor it may not: \"backdoor\""),
        "{e}"
    );
    // heads that do not divide the width; a vocabulary that does not match the embeddings
    let e = refused(altered(
        &bytes,
        "heads",
        Some((Dtype::I32, vec![1], le(&[7]))),
    ));
    assert!(
        e.contains("7 heads do not divide the hidden width 384"),
        "{e}"
    );
    let e = refused(altered(
        &bytes,
        "vocab",
        Some((
            Dtype::U8,
            vec![16],
            b"[CLS]\n[SEP]\n[UNK]\n".to_vec()[..16].to_vec(),
        )),
    ));
    assert!(
        e.contains("the model's vocabulary lists 3 tokens, its word embeddings have 30522 rows"),
        "{e}"
    );

    // texts: over the length limit, the wrong count, not UTF-8
    let model = parse_model(&bytes).unwrap();
    let long = "word ".repeat(300);
    let texts = ["a short text", long.as_str()];
    let e = tokenize(&model, &texts, 128).unwrap_err().to_string();
    assert!(
        e.contains("text 2 is 302 tokens long, over the limit of 128"),
        "{e}"
    );
    let e = parse_texts(b"one\ntwo\n", 3, 8).unwrap_err().to_string();
    assert!(
        e.contains("the texts part holds 2 texts, the job has 3 rows"),
        "{e}"
    );
    let e = parse_texts(b"caf\xe9\n", 1, 8).unwrap_err().to_string();
    assert!(
        e.contains("text 1 is not UTF-8 (byte 4 of its line)"),
        "{e}"
    );
    // a text longer than 16 bytes a token of the limit is refused before it is tokenized
    let long = format!("short\n{}\n", "x".repeat(129));
    let e = parse_texts(long.as_bytes(), 2, 8).unwrap_err().to_string();
    assert!(
        e.contains("text 2 is 129 bytes, over the limit of 128"),
        "{e}"
    );
    assert!(parse_texts(format!("short\n{}\n", "x".repeat(128)).as_bytes(), 2, 8).is_ok());
    // a client's file: a blank line is refused by its number; --max-tokens is held in tokens
    let dir = tempfile::tempdir().unwrap();
    let (model_file, texts_file) = (dir.path().join("m.safetensors"), dir.path().join("t.txt"));
    std::fs::write(&model_file, &bytes).unwrap();
    let prepare = |texts: &str, max: Option<u32>| {
        std::fs::write(&texts_file, texts).unwrap();
        compute_market_keeper::clientdata::prepare_encoder(&model_file, &texts_file, 2, max)
            .map(|p| p.job.dims)
            .map_err(|e| format!("{e:#}"))
    };
    let e = prepare("one text\n\n#hashtag text\n", None).unwrap_err();
    assert!(e.contains("line 2 is blank"), "{e}");
    assert_eq!(prepare("one text\n#hashtag text\n", None).unwrap()[0], 2);
    let e = prepare(&format!("short\n{}\n", "word ".repeat(60)), Some(8)).unwrap_err();
    assert!(
        e.contains("text 2 is 62 tokens long, over the limit of 8"),
        "{e}"
    );
    // the tokenizer is defined on one Unicode version, this keeper's
    assert_eq!(
        char::UNICODE_VERSION,
        compute_market_keeper::compute::encoder::UNICODE_VERSION
    );
}

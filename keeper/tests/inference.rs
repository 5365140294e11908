//! Integer inference on a real model: the digits MLP (scikit-learn's, on sklearn's bundled UCI
//! digits, quantized by `scripts/digits-model`) run by the protocol's reference and the
//! keeper's fast path, held to the numpy forward pass's logits bit for bit; and every bad
//! model or batch refused by name.

mod common;

use common::market::on_the_market;
use compute_market_keeper::compute::mlp::{parse_batch, parse_model, run_rows};
use compute_market_protocol::infer::{class_of, row_len};
use safetensors::{tensor::TensorView, Dtype, SafeTensors};

fn models() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../models")
}

/// The held-out split: its batch file (x alone), labels, and numpy's logits.
fn heldout() -> (Vec<u8>, Vec<u8>, Vec<i32>, usize) {
    let bytes = std::fs::read(models().join("digits-heldout.safetensors")).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let x = st.tensor("x").unwrap();
    let rows = x.shape()[0];
    let batch = safetensors::serialize([("x", x.clone())], None).unwrap();
    let labels = st.tensor("labels").unwrap().data().to_vec();
    let logits = st
        .tensor("logits")
        .unwrap()
        .data()
        .chunks_exact(4)
        .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    (batch, labels, logits, rows)
}

#[test]
fn the_digits_model_gives_numpys_logits_bit_for_bit_and_its_accuracy() {
    let model_bytes = std::fs::read(models().join("digits-mlp.safetensors")).unwrap();
    let model = parse_model(&model_bytes, 64, 10).unwrap();
    let (batch, labels, want, rows) = heldout();
    assert_eq!(rows, 450);
    let batch = parse_batch(&batch, rows, 64).unwrap();
    // the plain reference, row by row
    let mut reference = vec![];
    for r in 0..rows {
        reference.extend(model.logits(&batch.x[r * 64..(r + 1) * 64]));
    }
    assert!(
        reference == want,
        "the reference differs from numpy's logits"
    );
    // the fast path, every row in one go, in the output layout
    let out = run_rows(&model, &batch, 0, rows);
    let len = row_len(10);
    let mut correct = 0;
    for r in 0..rows {
        let row = &out[r * len..(r + 1) * len];
        let logits: Vec<i32> = row[..40]
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(logits, want[r * 10..(r + 1) * 10], "row {r}");
        let class = u32::from_le_bytes(row[40..].try_into().unwrap());
        assert_eq!(class, class_of(&logits));
        correct += u32::from(class == u32::from(labels[r]));
    }
    let accuracy = f64::from(correct) / rows as f64;
    let meta = SafeTensors::read_metadata(&model_bytes).unwrap().1;
    let meta = meta.metadata().clone().unwrap();
    let float: f64 = meta["float_accuracy"].parse().unwrap();
    println!("digits held-out: integer {accuracy:.4}, float {float:.4}, {rows} rows");
    assert!(
        accuracy >= float - 0.01,
        "within a point of the float model"
    );
    assert!(accuracy > 0.97);
    // rows past the batch are zero
    let tail = run_rows(&model, &batch, rows - 1, 3);
    assert!(tail[len..].iter().all(|&b| b == 0));
}

/// A safetensors file of the given tensors.
fn file(tensors: &[(&str, Dtype, Vec<usize>, Vec<u8>)]) -> Vec<u8> {
    let views: Vec<(String, TensorView<'_>)> = tensors
        .iter()
        .map(|(n, d, s, b)| (n.to_string(), TensorView::new(*d, s.clone(), b).unwrap()))
        .collect();
    safetensors::serialize(views, None).unwrap()
}

fn le(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

#[test]
fn bad_models_and_batches_are_refused_by_name() {
    // a 3-4-2 model, then each thing broken
    let good: Vec<(&str, Dtype, Vec<usize>, Vec<u8>)> = vec![
        ("l0.weight", Dtype::I8, vec![4, 3], vec![1; 12]),
        ("l0.bias", Dtype::I32, vec![4], le(&[0; 4])),
        ("l0.multiplier", Dtype::I32, vec![4], le(&[1 << 30; 4])),
        ("l0.shift", Dtype::I32, vec![4], le(&[31; 4])),
        ("l1.weight", Dtype::I8, vec![2, 4], vec![1; 8]),
        ("l1.bias", Dtype::I32, vec![2], le(&[0; 2])),
    ];
    parse_model(&file(&good), 3, 2).unwrap();
    let with = |name: &str, t: (Dtype, Vec<usize>, Vec<u8>)| {
        let mut f: Vec<_> = good.iter().filter(|g| g.0 != name).cloned().collect();
        f.push((name, t.0, t.1, t.2));
        file(&f)
    };
    let cases: Vec<(Vec<u8>, usize, &str)> = vec![
        (
            with("l1.weight", (Dtype::I8, vec![2, 5], vec![1; 10])),
            3,
            "the shapes do not chain: layer 1 takes 5 inputs, 4 come in",
        ),
        (file(&good), 5, "layer 0 takes 3 inputs, 5 come in"),
        (
            with("l0.weight", (Dtype::I32, vec![4, 3], vec![0; 48])),
            3,
            "l0.weight is I32, it must be I8",
        ),
        (
            with("l0.multiplier", (Dtype::I32, vec![3], le(&[1; 3]))),
            3,
            "l0.multiplier has shape [3], layer 0 has 4 outputs",
        ),
        (
            with(
                "l0.bias",
                (
                    Dtype::I32,
                    vec![4],
                    le(&[i32::MAX - 3 * 16384 + 1, 0, 0, 0]),
                ),
            ),
            3,
            "could overflow an int32 accumulator",
        ),
        (
            with("l0.shift", (Dtype::I32, vec![4], le(&[0; 4]))),
            3,
            "shift 0 is outside 1 ..= 62",
        ),
        (
            with("l7.extra", (Dtype::I8, vec![1], vec![0])),
            3,
            "holds a tensor it may not: \"l7.extra\"",
        ),
        (
            with("l1.multiplier", (Dtype::I32, vec![2], le(&[1; 2]))),
            3,
            "a multiplier or a shift without the other",
        ),
        (
            b"not safetensors".to_vec(),
            3,
            "the model: its safetensors header is",
        ),
        (
            {
                // a header far beyond the bound (a stranger's memory bomb)
                let mut f = (70_000u64).to_le_bytes().to_vec();
                f.extend(vec![b' '; 70_000]);
                f
            },
            3,
            "its safetensors header is 70000 bytes (at most 65536",
        ),
        (
            {
                // the same tensor named twice in the header
                let json = br#"{"l0.bias":{"dtype":"I32","shape":[1],"data_offsets":[0,4]},"l0.bias":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}}"#;
                let mut f = (json.len() as u64).to_le_bytes().to_vec();
                f.extend_from_slice(json);
                f.extend([0u8; 4]);
                f
            },
            3,
            "the tensor \"l0.bias\" is named twice",
        ),
    ];
    for (bytes, features, why) in cases {
        let e = format!("{:#}", parse_model(&bytes, features, 2).unwrap_err());
        assert!(e.contains(why), "{e} (wanted {why})");
    }
    let e = format!("{:#}", parse_model(&file(&good), 3, 7).unwrap_err());
    assert!(
        e.contains("the model has 2 outputs, the job 7 classes"),
        "{e}"
    );
    // batches
    let batch = |shape: Vec<usize>, d: Dtype| {
        let n: usize = shape.iter().product::<usize>() * if d == Dtype::I8 { 1 } else { 4 };
        file(&[("x", d, shape, vec![0; n])])
    };
    parse_batch(&batch(vec![5, 3], Dtype::I8), 5, 3).unwrap();
    for (bytes, why) in [
        (
            batch(vec![5, 4], Dtype::I8),
            "has shape [5, 4], the job's is [5, 3] (a batch of the wrong width?)",
        ),
        (
            batch(vec![5, 3], Dtype::I32),
            "the batch's x is I32, it must be I8",
        ),
        (
            file(&[("y", Dtype::I8, vec![5, 3], vec![0; 15])]),
            "exactly one tensor named \"x\"",
        ),
    ] {
        let e = format!("{:#}", parse_batch(&bytes, 5, 3).unwrap_err());
        assert!(e.contains(why), "{e} (wanted {why})");
    }
}

/// The digits task on the embedded market (see [`on_the_market`]). Returns (provider's tasks
/// completed, times slashed, classes, labels).
fn digits_on_the_market(corrupt: f64, samples: u16) -> (u32, u32, Vec<u32>, Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    let (batch, labels, _, _) = heldout();
    let batch_path = dir.path().join("batch.safetensors");
    std::fs::write(&batch_path, batch).unwrap();
    let prepared = compute_market_keeper::clientdata::prepare_mlp(
        &models().join("digits-mlp.safetensors"),
        &batch_path,
        compute_market_keeper::clientdata::MLP_ROWS_PER_TILE,
    )
    .unwrap();
    let (completed, slashed, out) = on_the_market(prepared, corrupt, samples);
    let len = row_len(10);
    let classes = out
        .chunks_exact(len)
        .take(450)
        .map(|r| u32::from_le_bytes(r[40..44].try_into().unwrap()))
        .collect();
    (completed, slashed, classes, labels)
}

#[test]
fn the_market_classifies_the_held_out_digits_within_a_point_of_the_float_model() {
    let (completed, slashed, classes, labels) = digits_on_the_market(0.0, 0);
    assert_eq!((completed, slashed), (1, 0), "accepted");
    let correct = classes
        .iter()
        .zip(&labels)
        .filter(|(c, l)| **c == u32::from(**l))
        .count();
    let accuracy = correct as f64 / labels.len() as f64;
    let meta = SafeTensors::read_metadata(
        &std::fs::read(models().join("digits-mlp.safetensors")).unwrap(),
    )
    .unwrap()
    .1;
    let float: f64 = meta.metadata().clone().unwrap()["float_accuracy"]
        .parse()
        .unwrap();
    println!("the market's digits: {accuracy:.4} (float {float:.4})");
    assert!(accuracy >= float - 0.01, "{accuracy} vs {float}");
}

#[test]
fn a_provider_corrupting_five_percent_of_the_digits_is_rejected() {
    // about 22 of the 450 rows, in about 20 of the 57 tiles of 8 rows: each verifier's 16
    // samples miss them all with probability about (37/57)^16 < 0.1%
    let (completed, slashed, _, _) = digits_on_the_market(0.05, 0);
    assert_eq!((completed, slashed), (0, 1), "rejected and slashed");
}

/// The first 60 held-out texts (the English sentence pairs) embedded by the market (MiniLM, 8
/// texts a tile): (completed, slashed, embeddings, the fixture's integer and fp32 embeddings
/// of them).
fn texts_on_the_market(corrupt: f64, samples: u16) -> (u32, u32, Vec<i16>, Vec<i16>, Vec<f32>) {
    use compute_market_keeper::compute::encoder::{minilm_bytes, MINILM_HELDOUT};
    let st = SafeTensors::deserialize(MINILM_HELDOUT).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (model, texts) = (
        dir.path().join("minilm.safetensors"),
        dir.path().join("texts.txt"),
    );
    std::fs::write(&model, minilm_bytes().unwrap()).unwrap();
    let all = std::str::from_utf8(st.tensor("texts").unwrap().data()).unwrap();
    let first: Vec<&str> = all.split('\n').take(60).collect();
    std::fs::write(&texts, first.join("\n") + "\n").unwrap();
    let prepared =
        compute_market_keeper::clientdata::prepare_encoder(&model, &texts, 8, None).unwrap();
    assert_eq!(prepared.job.dims[0], 60);
    let (completed, slashed, out) = on_the_market(prepared, corrupt, samples);
    let i16s = |b: &[u8]| -> Vec<i16> {
        b.chunks_exact(2)
            .map(|c| i16::from_le_bytes(c.try_into().unwrap()))
            .collect()
    };
    let fp32: Vec<f32> = st
        .tensor("fp32")
        .unwrap()
        .data()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    (
        completed,
        slashed,
        i16s(&out[..60 * 768]),
        i16s(&st.tensor("embedding").unwrap().data()[..60 * 768]),
        fp32[..60 * 384].to_vec(),
    )
}

#[test]
fn the_market_embeds_the_held_out_texts_as_numpy_does_near_the_fp32_model() {
    let (completed, slashed, got, want, fp32) = texts_on_the_market(0.0, 0);
    assert_eq!((completed, slashed), (1, 0), "accepted");
    assert!(
        got == want,
        "the market's embeddings are numpy's integer ones, bit for bit"
    );
    let bytes: Vec<u8> = got.iter().flat_map(|v| v.to_le_bytes()).collect();
    let cos: Vec<f64> = bytes
        .chunks_exact(2 * 384)
        .zip(fp32.chunks_exact(384))
        .map(|(g, f)| compute_market_keeper::compute::encoder::cosine(g, f))
        .collect();
    let mean = cos.iter().sum::<f64>() / cos.len() as f64;
    let min = cos.iter().cloned().fold(1.0, f64::min);
    println!("the market's MiniLM embeddings: cosine to fp32 mean {mean:.4}, min {min:.4}");
    assert!(mean >= 0.99 && min >= 0.98);
}

#[test]
fn a_provider_corrupting_five_percent_of_the_embeddings_is_rejected() {
    // about 3 of the 60 texts (at least one), in 8 tiles of 8: each verifier's 64 samples
    // miss a given tile with probability (7/8)^64 < 0.02%
    let (completed, slashed, ..) = texts_on_the_market(0.05, 64);
    assert_eq!((completed, slashed), (0, 1), "rejected and slashed");
}

#[test]
fn the_gpu_self_tests_odd_model_is_valid_and_its_fast_path_equals_the_reference() {
    use compute_market_keeper::compute::mlp::odd_synthetic;
    let (model, batch) = odd_synthetic(37);
    model.check(13, 10).unwrap();
    let out = run_rows(&model, &batch, 0, 40);
    let len = row_len(10);
    let mut hidden_extremes = (false, false);
    for r in 0..37 {
        let x = &batch.x[r * 13..(r + 1) * 13];
        let want = model.logits(x);
        let got: Vec<i32> = out[r * len..r * len + 40]
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(got, want, "row {r}");
        // the first hidden layer saturates at 127 and clamps to 0 somewhere (what a GPU kernel
        // must reproduce)
        let l = &model.layers[0];
        for o in 0..l.out {
            let acc = l.bias[o]
                + (0..13)
                    .map(|j| i32::from(l.weight[o * 13 + j]) * i32::from(x[j]))
                    .sum::<i32>();
            match l.activation(o, acc) {
                127 => hidden_extremes.0 = true,
                0 => hidden_extremes.1 = true,
                _ => {}
            }
        }
    }
    assert_eq!(hidden_extremes, (true, true), "outputs reach both clamps");
    assert!(
        out[37 * len..].iter().all(|&b| b == 0),
        "rows past the batch are zero"
    );
}

#[test]
fn a_batch_outside_the_range_the_digits_model_learned_is_posted_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let (batch, _, _, rows) = heldout();
    let path = dir.path().join("batch.safetensors");
    let prepare = |bytes: &[u8]| {
        std::fs::write(&path, bytes).unwrap();
        compute_market_keeper::clientdata::prepare_mlp(
            &models().join("digits-mlp.safetensors"),
            &path,
            8,
        )
        .unwrap()
        .warnings
    };
    // the held-out pixels are all within 0..16
    assert!(prepare(&batch).is_empty());
    // a pixel of 127 (a drawing scaled to the int8 range, not to the model's)
    let st = SafeTensors::deserialize(&batch).unwrap();
    let mut x = st.tensor("x").unwrap().data().to_vec();
    x[64 + 3] = 127;
    let view = TensorView::new(Dtype::I8, vec![rows, 64], &x).unwrap();
    let w = prepare(&safetensors::serialize([("x", view)], None).unwrap());
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].contains("row 1 column 3 is 127, outside the 0..16 the model learned"),
        "{w:?}"
    );
}

//! Integer inference on a real model: the digits MLP (scikit-learn's, on sklearn's bundled UCI
//! digits, quantized by `scripts/digits-model`) run by the protocol's reference and the
//! keeper's fast path, held to the numpy forward pass's logits bit for bit; and every bad
//! model or batch refused by name.

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
            "the model: malformed safetensors",
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

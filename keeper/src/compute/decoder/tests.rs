use super::*;
use std::sync::OnceLock;

/// The real model, read and checked once for every test here (`scripts/smollm2-model` makes it).
fn model() -> &'static Model {
    static MODEL: OnceLock<Model> = OnceLock::new();
    MODEL.get_or_init(|| parse_model(&smollm2_bytes().unwrap()).unwrap())
}

/// The held-out fixture's ragged rows.
struct Fixture {
    prompts: Vec<Vec<u32>>,
    float: Vec<Vec<u32>>,
    int: Vec<Vec<u32>>,
    logits: Vec<Vec<i64>>,
}

fn fixture() -> Fixture {
    let st = safetensors::SafeTensors::deserialize(SMOLLM2_HELDOUT).unwrap();
    let i32v = |n: &str| i32s(st.tensor(n).unwrap().data());
    let ragged = |n: &str| -> Vec<Vec<u32>> {
        let ids = i32v(&format!("{n}.ids"));
        let off = i32v(&format!("{n}.off"));
        off.windows(2)
            .map(|w| {
                ids[w[0] as usize..w[1] as usize]
                    .iter()
                    .map(|&t| t as u32)
                    .collect()
            })
            .collect()
    };
    let lg = st.tensor("logits").unwrap();
    let v = lg.shape()[1];
    Fixture {
        prompts: ragged("prompt"),
        float: ragged("float"),
        int: ragged("int"),
        logits: i32s(lg.data())
            .chunks_exact(v)
            .map(|r| r.iter().map(|&x| i64::from(x)).collect())
            .collect(),
    }
}

fn prompts() -> Vec<String> {
    include_str!("../../../../models/smollm2-prompts.tsv")
        .lines()
        .filter_map(|l| {
            let mut f = l.splitn(3, '\t');
            (f.next() == Some("held")).then(|| f.nth(1).unwrap().replace("\\n", "\n"))
        })
        .collect()
}

/// The keeper's tokenizer (the model file's BPE in the chat template) gives the ids Hugging
/// Face's Python `tokenizers` gave every held-out prompt.
#[test]
fn prompts_tokenize_as_the_converter_did() {
    let (m, fx) = (model(), fixture());
    let texts = prompts();
    assert_eq!(texts.len(), fx.prompts.len());
    for (text, want) in texts.iter().zip(&fx.prompts) {
        assert_eq!(&m.prompt_ids(text).unwrap(), want, "{text:?}");
    }
}

/// The reference gives numpy's integer logits bit for bit at the last prompt position of the
/// first two held-out prompts, and its greedy tokens are numpy's (KV cache) for the first.
#[test]
fn reference_equals_numpy() {
    let (m, fx) = (model(), fixture());
    let d = &m.decoder;
    for (ids, want) in fx.prompts.iter().zip(&fx.logits) {
        let mut cache = d.cache();
        let y = d.forward(ids, &mut cache);
        assert_eq!(&d.logits(y.last().unwrap()), want);
    }
    let got = generate_reference(m, &fx.prompts[0], 8);
    assert_eq!(got, fx.int[0][..8]);
    // and the float model said the same there (the fixture is not vacuous)
    assert_eq!(fx.float[0][..8], fx.int[0][..8]);
    assert_eq!(
        m.text(&fx.int[0]).unwrap(),
        "The capital of Japan is Tokyo."
    );
}

/// One prefill over prompt and completion gives, at every position, the logits that generating
/// token by token with the KV cache gave.
#[test]
fn prefill_equals_decode() {
    let (m, fx) = (model(), fixture());
    let d = &m.decoder;
    let (p, c) = (&fx.prompts[1], &fx.int[1][..4]);
    let mut all: Vec<u32> = p.clone();
    all.extend_from_slice(&c[..3]);
    let mut one = d.cache();
    let ys = d.forward(&all, &mut one);
    let mut inc = d.cache();
    let mut y = d.forward(p, &mut inc);
    for k in 0..4 {
        assert_eq!(y.last().unwrap(), &ys[p.len() - 1 + k], "position {k}");
        assert_eq!(argmax(&d.logits(&ys[p.len() - 1 + k])) as u32, c[k]);
        if k < 3 {
            y = d.forward(&[c[k]], &mut inc);
        }
    }
    assert_eq!(one, inc);
}

/// A model file that is not the named one is refused by name: a tensor missing, one extra, a
/// shape that does not chain, a bound that could overflow.
#[test]
fn bad_model_files_are_refused() {
    let bytes = smollm2_bytes().unwrap();
    let t = tensors(&bytes, "m").unwrap();
    let rebuild = |edit: &dyn Fn(&mut Vec<(String, Dtype, Vec<usize>, Vec<u8>)>)| -> String {
        let mut v: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = t
            .iter()
            .map(|(k, (d, s, b))| (k.clone(), *d, s.clone(), b.to_vec()))
            .collect();
        edit(&mut v);
        let views: Vec<(String, safetensors::tensor::TensorView)> = v
            .iter()
            .map(|(k, d, s, b)| {
                (
                    k.clone(),
                    safetensors::tensor::TensorView::new(*d, s.clone(), b).unwrap(),
                )
            })
            .collect();
        let bytes = safetensors::serialize(views, None).unwrap();
        match parse_model(&bytes) {
            Ok(_) => String::from("accepted"),
            Err(e) => format!("{e:#}"),
        }
    };
    let e = rebuild(&|v| v.retain(|(k, ..)| k != "up.d"));
    assert!(e.contains("no tensor \"up.d\""), "{e}");
    let e = rebuild(&|v| v.push(("extra".into(), Dtype::U8, vec![1], vec![0])));
    assert!(e.contains("\"extra\""), "{e}");
    let e = rebuild(&|v| {
        let r = v.iter_mut().find(|(k, ..)| k == "down.s").unwrap();
        r.3[..4].copy_from_slice(&3i32.to_le_bytes());
    });
    assert!(
        e.contains("layer 0's down") && e.contains("31 ..= 94"),
        "{e}"
    );
    let e = rebuild(&|v| {
        let r = v.iter_mut().find(|(k, ..)| k == "gate.d").unwrap();
        r.3[..4].copy_from_slice(&i32::MAX.to_le_bytes());
    });
    assert!(e.contains("2^53"), "{e}");
    let e = rebuild(&|v| {
        let r = v.iter_mut().find(|(k, ..)| k == "exp").unwrap();
        r.3[..4].copy_from_slice(&0i32.to_le_bytes());
    });
    assert!(e.contains("exp table"), "{e}");
}

/// The fast path generates the tokens numpy's integer decoder generated (KV cache, 32 tokens or
/// up to the end of the turn) for every third held-out prompt, one of each kind at least (all
/// 46 with `SMOLLM2_ALL=1`: ~5 min on 2 cores), and the float model's on most of them.
#[test]
fn fast_path_generates_numpy_tokens() {
    let (m, fx) = (model(), fixture());
    let step = if std::env::var_os("SMOLLM2_ALL").is_some() {
        1
    } else {
        3
    };
    let (mut same_as_float, mut n) = (0, 0);
    for i in (0..fx.prompts.len()).step_by(step) {
        let got = generate(m, &fx.prompts[i], 32);
        assert_eq!(got, fx.int[i], "prompt {i}");
        same_as_float += usize::from(got == fx.float[i]);
        n += 1;
    }
    assert!(same_as_float * 10 >= n * 8, "{same_as_float} of {n}");
    // and its logits are the reference's
    let d = &m.decoder;
    let mut cache = d.cache();
    let y = d.forward_with(&fx.prompts[0], &mut cache, &fast::acc_rows);
    assert_eq!(fast::logits(d, y.last().unwrap()), fx.logits[0]);
}

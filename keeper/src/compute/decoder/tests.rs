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
    // tokenizers that would not give every keeper the same ids: BPE dropout, padding, an id
    // past the embeddings
    let tokenizer = |f: &dyn Fn(&mut serde_json::Value)| {
        let (_, _, b) = &t["tokenizer"];
        let mut json: serde_json::Value = serde_json::from_slice(b).unwrap();
        f(&mut json);
        let bytes = serde_json::to_vec(&json).unwrap();
        rebuild(&move |v| {
            let r = v.iter_mut().find(|(k, ..)| k == "tokenizer").unwrap();
            r.2 = vec![bytes.len()];
            r.3 = bytes.clone();
        })
    };
    let e = tokenizer(&|j| j["model"]["dropout"] = 0.5.into());
    assert!(e.contains("without dropout"), "{e}");
    let e = tokenizer(&|j| {
        j["padding"] = serde_json::json!({"strategy": {"Fixed": 64}, "direction": "Right",
            "pad_to_multiple_of": null, "pad_id": 2, "pad_type_id": 0, "pad_token": "<|im_end|>"})
    });
    assert!(e.contains("pads or truncates"), "{e}");
    let e = tokenizer(&|j| {
        j["added_tokens"][0]["id"] = 4_000_000_000u32.into();
        j["added_tokens"][0]["content"] = "<|evil|>".into();
    });
    assert!(
        e.contains("\"<|evil|>\" the id") && e.contains("the embeddings hold 49152"),
        "{e}"
    );
    let e = rebuild(&|v| {
        let r = v.iter_mut().find(|(k, ..)| k == "dims").unwrap();
        r.3[12..16].copy_from_slice(&0i32.to_le_bytes());
    });
    assert!(e.contains("at least 1"), "{e}");
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

/// Every kernel set this machine runs, and the packed kernel for many rows where it runs, gives
/// the reference's accumulators, bit for bit, on dense layers of odd shapes (outputs not a
/// multiple of the cores' chunk or of a packed group, 1 to 11 rows: the 4- and 8-row tiles and
/// their remainders), and the reference's logits on the real model.
#[test]
fn every_kernel_set_equals_the_reference_on_odd_shapes() {
    use compute_market_protocol::decoder::reference_acc;
    let sets = kernels::KernelSet::here();
    println!(
        "kernel sets here: {:?}",
        sets.iter().map(|s| s.name()).collect::<Vec<_>>()
    );
    for (out, inp) in [(1, 32), (17, 64), (33, 96), (50, 160)] {
        // 1 to 11 rows: the packed kernel's tiles of 8 and their remainders
        let (d, rows) = random::random_dense(out, inp, (out * 1000 + inp) as u64);
        let packed = kernels::Packed::runs_here().then(|| kernels::Packed::new(&d));
        for n in 1..=rows.len() {
            let want = reference_acc(&d, &rows[..n]);
            if let Some(p) = &packed {
                assert_eq!(
                    fast::acc_rows_packed(p, &d, &rows[..n]),
                    want,
                    "the packed kernel on {out}×{inp}, {n} rows"
                );
            }
            for &set in &sets {
                assert_eq!(
                    fast::acc_rows_with(set, &d, &rows[..n]),
                    want,
                    "{} on {out}×{inp}, {n} rows",
                    set.name()
                );
            }
        }
    }
    let (m, fx) = (model(), fixture());
    let dec = &m.decoder;
    let mut c = dec.cache();
    let ys = dec.forward_with(&fx.prompts[0], &mut c, &fast::acc_rows);
    let last = &ys[ys.len() - 5..];
    let want: Vec<Vec<i64>> = last.iter().map(|y| dec.logits(y)).collect();
    for &set in &sets {
        assert_eq!(
            fast::logits_rows_with(set, dec, last),
            want,
            "{}",
            set.name()
        );
    }
}

/// Prompts generated together give each prompt's tokens alone (greedy and sampled).
#[test]
fn a_batch_generates_what_each_prompt_alone_does() {
    let (m, fx) = (model(), fixture());
    let prompts: Vec<&[u32]> = fx.prompts[..5].iter().map(Vec::as_slice).collect();
    let greedy = |l: &[i64], _: usize| argmax(l) as u32;
    let s = compute_market_protocol::decoder::Sampling {
        temperature: 256,
        top_k: 20,
        top_p: 60_000,
        seed: 3,
    };
    let sampled = move |l: &[i64], step: usize| {
        s.pick(
            l,
            &m.decoder.exp,
            compute_market_protocol::decoder::draw(&[1; 32], 3, 0, step as u32),
        ) as u32
    };
    for pick in [&greedy as &Pick, &sampled as &Pick] {
        let picks: Vec<&Pick> = prompts.iter().map(|_| pick).collect();
        let together = generate_many(m, &prompts, 10, Path::Fast, &picks);
        for (p, t) in prompts.iter().zip(&together) {
            let alone = generate_from(m, p, &[], 10, Path::Fast, pick);
            assert_eq!(t, &alone);
        }
    }
}

/// A served completion is checked by one prefill: the right one comes back as it was served;
/// one token changed, a completion cut short or run past the end of the turn, or garbage, and
/// the right completion comes back instead.
#[test]
fn a_served_completion_is_checked_by_one_prefill() {
    use compute_market_protocol::job::JobSpec;
    let m = model();
    let texts = vec![
        "What is the capital of France?".to_string(),
        "Say hi.".to_string(),
    ];
    let prompts = job::parse_prompts(
        &job::prompts_file(
            m,
            &texts,
            &compute_market_protocol::decoder::Sampling::GREEDY,
        )
        .unwrap(),
        m,
        2,
        64,
    )
    .unwrap();
    let wpt = m.work_per_token(64 + 12);
    let spec = JobSpec::generate(2, 64, 12, wpt, 1, [4; 32]);
    // a clone of the model for the inputs: the tests' model is shared and static
    let inputs = job::GenerateInputs {
        model: std::sync::Arc::new(parse_model(&smollm2_bytes().unwrap()).unwrap()),
        prompts: std::sync::Arc::new(prompts),
    };
    let right = job::complete(&inputs, &spec, 0);
    assert!(!right.is_empty() && right.len() <= 12);
    assert_eq!(
        job::checked_completion(&inputs, &spec, 0, &right, Path::Fast),
        right
    );
    let mut one = right.clone();
    let i = one.len() / 2;
    one[i] += 1;
    assert_eq!(
        job::checked_completion(&inputs, &spec, 0, &one, Path::Fast),
        right,
        "one token changed"
    );
    if right.len() > 1 {
        assert_eq!(
            job::checked_completion(&inputs, &spec, 0, &right[..right.len() - 1], Path::Fast),
            right,
            "cut short"
        );
    }
    let mut longer = right.clone();
    longer.push(5);
    assert_eq!(
        job::checked_completion(&inputs, &spec, 0, &longer, Path::Fast),
        right,
        "past its end"
    );
    assert_eq!(
        job::checked_completion(&inputs, &spec, 0, &[u32::MAX, 3], Path::Fast),
        right,
        "garbage"
    );
    assert_eq!(
        job::checked_completion(&inputs, &spec, 0, &[], Path::Fast),
        right,
        "nothing"
    );
    // the tile's bytes: padding past the count is part of what is checked
    let tile = job::encode_tile(&spec, &[right.clone()]);
    assert_eq!(
        job::checked_tiles(&inputs, &spec, &[(0, &tile)], Path::Fast).unwrap(),
        vec![tile.clone()]
    );
    let mut padded = tile.clone();
    *padded.last_mut().unwrap() = 1;
    assert_eq!(
        job::checked_tiles(&inputs, &spec, &[(0, &padded)], Path::Fast).unwrap(),
        vec![tile]
    );
}

/// A prompts part is refused by name: an empty prompt, one over the limit, non-UTF-8 text, ids
/// that are not the model's tokenization, a count other than the job's, a sampling rule out of
/// bounds, a tensor it may not hold.
#[test]
fn bad_prompts_are_refused_by_name() {
    use compute_market_protocol::decoder::Sampling;
    let m = model();
    let texts = vec!["Hello there.".to_string(), "Name a colour.".to_string()];
    let ids: Vec<Vec<u32>> = texts.iter().map(|t| m.prompt_ids(t).unwrap()).collect();
    let ok = job::prompts_bytes(&texts, &ids, &Sampling::GREEDY).unwrap();
    assert_eq!(job::parse_prompts(&ok, m, 2, 64).unwrap().ids, ids);
    let refused = |bytes: &[u8], rows: usize, limit: usize, says: &str| {
        let e = format!(
            "{:#}",
            job::parse_prompts(bytes, m, rows, limit).unwrap_err()
        );
        assert!(e.contains(says), "{says:?} not in {e:?}");
    };
    refused(&ok, 3, 64, "the job says 3 prompts");
    refused(&ok, 2, 5, "token ids: the job takes 1 to 5");
    let empty = job::prompts_bytes(
        &["".into(), texts[1].clone()],
        &[vec![1], ids[1].clone()],
        &Sampling::GREEDY,
    )
    .unwrap();
    refused(&empty, 2, 64, "prompt 1 is empty");
    let bad_utf8 = {
        let mut b = ok.clone();
        let at = b.windows(5).position(|w| w == b"Hello").unwrap();
        b[at] = 0xff;
        b
    };
    refused(&bad_utf8, 2, 64, "prompt 1 is not UTF-8");
    let other =
        job::prompts_bytes(&texts, &[ids[1].clone(), ids[1].clone()], &Sampling::GREEDY).unwrap();
    refused(
        &other,
        2,
        64,
        "prompt 1's token ids are not the model's tokenization",
    );
    let hot = Sampling {
        temperature: (1 << 16) + 1,
        ..Sampling::GREEDY
    };
    refused(
        &job::prompts_bytes(&texts, &ids, &hot).unwrap(),
        2,
        64,
        "temperature",
    );
    let p0 = Sampling {
        temperature: 256,
        top_p: 0,
        ..Sampling::GREEDY
    };
    refused(
        &job::prompts_bytes(&texts, &ids, &p0).unwrap(),
        2,
        64,
        "top-p 0",
    );
    let k = Sampling {
        temperature: 256,
        top_k: 1 << 20,
        ..Sampling::GREEDY
    };
    refused(
        &job::prompts_bytes(&texts, &ids, &k).unwrap(),
        2,
        64,
        "top-k",
    );
    refused(b"not safetensors at all", 2, 64, "the prompts");
}

/// Integer sampling: top-k 1 and a zero temperature are greedy; a higher temperature spreads the
/// picks; top-p keeps only the likeliest; the same draw always picks the same token.
#[test]
fn sampling_in_integers_follows_its_rule() {
    use compute_market_protocol::decoder::{Sampling, TOP_P_ONE};
    let exp = &model().decoder.exp;
    // Q16 logits: token 3 likeliest, then 1, then the rest far behind
    let logits = vec![0, 60_000, -500_000, 65_536, -400_000, 10_000];
    let pick = |s: Sampling, d: u64| s.pick(&logits, exp, d);
    assert_eq!(pick(Sampling::GREEDY, 12345), 3);
    let k1 = Sampling {
        temperature: 256,
        top_k: 1,
        top_p: TOP_P_ONE,
        seed: 0,
    };
    assert!((0..50u64).all(|i| pick(k1, i.wrapping_mul(0x9E37_79B9_7F4A_7C15)) == 3));
    let warm = Sampling {
        temperature: 256,
        top_k: 0,
        top_p: TOP_P_ONE,
        seed: 0,
    };
    let draws: Vec<usize> = (0..400u64)
        .map(|i| pick(warm, compute_market_protocol::job::splitmix64(i)))
        .collect();
    let share = |t: usize| draws.iter().filter(|&&x| x == t).count() as f64 / 400.0;
    // e^((ℓ − ℓmax)/65536): 3 → 1, 1 → 0.92, 5 → 0.43, 0 → 0.37, the far ones ≈ 0
    assert!(
        share(3) > 0.25 && share(1) > 0.2 && share(2) < 0.02,
        "{draws:?}"
    );
    let p = Sampling {
        temperature: 256,
        top_k: 0,
        top_p: 32_768,
        seed: 0,
    };
    assert!(
        (0..200u64).all(|i| [3, 1].contains(&pick(p, compute_market_protocol::job::splitmix64(i))))
    );
    assert_eq!(pick(warm, 777), pick(warm, 777));
    assert_eq!(pick(warm, 0), 3, "the lowest draw picks the likeliest");
    assert_eq!(
        pick(warm, u64::MAX),
        2,
        "the highest picks the least likely kept"
    );
}

/// Random decoders of odd shapes (no model file needed) pass their checks, and the fast path
/// by every kernel set this machine runs gives the reference's final-norm rows and logits at
/// every position, bit for bit, with activations spread over their ranges; greedy generation
/// agrees too.
#[test]
fn random_decoders_of_odd_shapes_compute_alike_on_every_path() {
    for (i, shape) in random::ODD_SHAPES.into_iter().enumerate() {
        let m = random::random_model(shape, 7 + i as u64);
        m.decoder.check().unwrap();
        let (vocab, positions) = (shape[6] as u32, shape[7]);
        let ids: Vec<u32> = (0..positions as u32 - 6)
            .map(|t| (t * 7 + 3) % vocab)
            .collect();
        let mut c = m.decoder.cache();
        let want = m.forward(Path::Reference, &ids, &mut c);
        let logits = m.logits(Path::Reference, &want);
        // the values spread: neither all clamped nor all small
        let spread = |v: &[i64], lo: i64| v.iter().filter(|x| x.abs() >= lo).count();
        let flat: Vec<i64> = want.iter().flatten().copied().collect();
        assert!(
            spread(&flat, 1 << 8) > flat.len() / 3,
            "final-norm rows too small"
        );
        assert!(
            spread(&flat, 32_767) < flat.len() / 4,
            "final-norm rows mostly clamped"
        );
        let tops: std::collections::HashSet<usize> = logits.iter().map(|l| argmax(l)).collect();
        assert!(tops.len() > 3, "the logits pick {} tokens only", tops.len());
        for set in kernels::KernelSet::here() {
            let fast = |d: &Dense, x: &[Vec<i64>]| fast::acc_rows_with(set, d, x);
            let mut c = m.decoder.cache();
            let got = m.decoder.forward_with(&ids, &mut c, &fast);
            assert_eq!(got, want, "{} on {shape:?}", set.name());
            assert_eq!(fast::logits_rows_with(set, &m.decoder, &got), logits);
        }
        let mut c = m.decoder.cache();
        assert_eq!(m.forward(Path::Fast, &ids, &mut c), want);
        assert_eq!(
            generate_with(&m, &ids[..5], 12, Path::Fast),
            generate_reference(&m, &ids[..5], 12)
        );
    }
}

/// [`Path::Offload`]: a device's dense layers and logit accumulators give the fast path's
/// tokens; a device whose every call fails gives them too (the CPU computes in its place), and
/// the calls are counted where they went.
#[test]
fn an_offload_computes_in_place_of_the_cpu_and_a_failing_one_falls_back() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    struct Host<'a>(&'a Model, bool, AtomicUsize);
    impl Offload for Host<'_> {
        fn name(&self) -> String {
            "test".into()
        }
        fn acc(&self, d: &Dense, xs: &[Vec<i64>]) -> Result<Vec<Vec<i64>>> {
            self.2.fetch_add(1, Ordering::Relaxed);
            ensure!(self.1, "this device fails");
            Ok(compute_market_protocol::decoder::reference_acc(d, xs))
        }
        fn logit_accs(&self, ys: &[Vec<i64>]) -> Result<Vec<Vec<i64>>> {
            self.2.fetch_add(1, Ordering::Relaxed);
            ensure!(self.1, "this device fails");
            let dec = &self.0.decoder;
            Ok(random::embedding_accs(
                &dec.emb_q, &dec.emb_d, dec.width, ys,
            ))
        }
    }
    let m = random::random_model(random::ODD_SHAPES[0], 3);
    let prompts: Vec<Vec<u32>> = (0..3u32)
        .map(|i| (0..4 + i).map(|t| (t * 5 + i) % 37).collect())
        .collect();
    let refs: Vec<&[u32]> = prompts.iter().map(Vec::as_slice).collect();
    let greedy = |l: &[i64], _: usize| argmax(l) as u32;
    let picks: Vec<&Pick> = refs.iter().map(|_| &greedy as &Pick).collect();
    let want = generate_many(&m, &refs, 9, Path::Fast, &picks);
    for works in [true, false] {
        let dev = Host(&m, works, AtomicUsize::new(0));
        assert_eq!(
            generate_many(&m, &refs, 9, Path::Offload(&dev), &picks),
            want
        );
        assert!(
            dev.2.load(Ordering::Relaxed) > 9,
            "the calls went to the device"
        );
    }
}

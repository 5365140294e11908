use super::build::{memory, replay, Sources};
use super::*;
use crate::decoder::{
    argmax,
    random::{random_decoder, Shape as RandomShape},
    Decoder, Sampling,
};
use crate::slices::decoder::build;

/// Heads of 32 and 16 (powers of two), one and two key/value heads, widths of 3 and 2 blocks.
const SHAPES: [RandomShape; 2] = [
    [2, 96, 160, 3, 1, 32, 37, 40],
    [1, 64, 96, 4, 2, 16, 53, 24],
];

/// A job of three prompts of up to `limit` tokens and completions of up to `g`, two a tile, its
/// prompts' and model's strings, and a result whose completions are `completions`.
struct Case {
    d: Decoder,
    job: JobSpec,
    model: Vec<u8>,
    batch: Vec<u8>,
    result: Vec<u8>,
    prompts: Vec<Vec<u32>>,
    completions: Vec<Vec<u32>>,
}

fn case(shape: RandomShape, seed: u64, limit: u32, g: u32) -> Case {
    let d = random_decoder(shape, seed);
    d.check().expect("a random decoder holds every bound");
    let eos = 1;
    let v = d.vocab() as u32;
    let prompts: Vec<Vec<u32>> = (0..3)
        .map(|r| {
            (0..limit - r)
                .map(|i| (i * 7 + r * 13 + seed as u32) % v)
                .collect()
        })
        .collect();
    // completions: the greedy tokens, so that token j is what the decoder gives
    let completions: Vec<Vec<u32>> = prompts
        .iter()
        .map(|p| {
            let mut seq = p.clone();
            let mut out = vec![];
            for _ in 0..g {
                let mut cache = d.cache();
                let y = d.forward(&seq, &mut cache);
                let t = argmax(&d.logits(y.last().expect("a row"))) as u32;
                out.push(t);
                seq.push(t);
            }
            out
        })
        .collect();
    let s = build::shape(&d, eos);
    let job = JobSpec::generate(
        3,
        limit,
        g,
        s.work_per_token((limit + g) as u64),
        2,
        [9; 32],
    );
    let model = build::model(&d, eos);
    let batch = build::prompts(&prompts, limit, &Sampling::GREEDY);
    let mut result = vec![0u8; crate::dispute::chunk_count(&job) as usize * 1024];
    for (r, c) in completions.iter().enumerate() {
        let at = result_row_at(&job, r as u32) as usize;
        result[at..at + 4].copy_from_slice(&(c.len() as u32).to_le_bytes());
        for (k, t) in c.iter().enumerate() {
            result[at + 4 + 4 * k..at + 8 + 4 * k].copy_from_slice(&t.to_le_bytes());
        }
    }
    Case {
        d,
        job,
        model,
        batch,
        result,
        prompts,
        completions,
    }
}

impl Case {
    fn src(&self) -> Sources<'_> {
        Sources {
            model: &self.model,
            batch: &self.batch,
            result: &self.result,
            input: self.job.input,
        }
    }
    fn layout(&self, row: u32, j: u32) -> Layout {
        let shape = crate::slices::decoder::read_header(
            &self.job,
            self.model.len() as u64,
            &self.model[..64],
        )
        .expect("the header fits the job");
        Layout::new(
            shape,
            &self.job,
            row,
            self.prompts[row as usize].len() as u32,
            j,
        )
    }
}

#[test]
fn the_token_the_trace_picks_is_the_decoders_and_its_kv_and_logits_are_the_references() {
    for (k, shape) in SHAPES.into_iter().enumerate() {
        let c = case(shape, 3 + k as u64, 5, 4);
        for (row, j) in [(0u32, 0u32), (1, 2), (2, 3)] {
            let lay = c.layout(row, j);
            let mem = memory(&lay, &c.src()).expect("a trace");
            let tok = u32_at(&mem, lay.token_at() as usize);
            assert_eq!(
                tok, c.completions[row as usize][j as usize],
                "{shape:?} {row} {j}"
            );
            // the reference's cache and logits over the same sequence
            let seq: Vec<u32> = c.prompts[row as usize]
                .iter()
                .chain(&c.completions[row as usize][..j as usize])
                .copied()
                .collect();
            let mut cache = c.d.cache();
            let y = c.d.forward(&seq, &mut cache);
            let logits = c.d.logits(y.last().expect("a row"));
            let lg = lay.part_at(lay.t as u64, 0, Part::Lg) as usize;
            for (t, &v) in logits.iter().enumerate() {
                assert_eq!(i64::from(i32_at(&mem, lg + 4 * t)), v, "logit {t}");
            }
            let (kw, hd) = (lay.shape.kw() as usize, lay.shape.head_dim as usize);
            let qw = lay.shape.qw() as usize;
            for l in 0..c.d.layers.len() {
                for q in 0..seq.len() {
                    let rot = lay.part_at(q as u64, l as u64, Part::Rot) as usize + 2 * qw;
                    let v = lay.part_at(q as u64, l as u64, Part::V) as usize;
                    for e in 0..kw {
                        assert_eq!(i16_at(&mem, rot + 2 * e), cache.k[l][q * kw + e].into());
                        assert_eq!(i16_at(&mem, v + 2 * e), cache.v[l][q * kw + e].into());
                    }
                }
            }
            assert!(hd <= MAX_HEAD_DIM as usize);
        }
    }
}

#[test]
fn every_step_reads_only_what_steps_before_it_wrote_and_slots_follow_in_step_order() {
    let c = case(SHAPES[1], 5, 4, 3);
    let lay = c.layout(1, 2);
    let mem = memory(&lay, &c.src()).expect("a trace");
    let mut end = 0u64;
    let mut counts = std::collections::BTreeMap::new();
    for s in 1..=lay.steps() {
        let (at, w) = lay.slot(s);
        assert!(at >= end, "step {s}'s slot is after the last one's");
        assert_eq!(
            at / LEAF,
            (at + w as u64 - 1) / LEAF,
            "step {s}'s slot in one leaf"
        );
        end = at + w as u64;
        // its value from the memory before it alone (slots from its own on zeroed)
        let mut before = mem.clone();
        before[at as usize..].fill(0);
        let (v, reads) = replay(&lay, s, &c.src(), &before).expect("a step");
        assert_eq!(v, mem[at as usize..at as usize + w], "step {s}");
        for r in reads.iter().filter(|r| r.source == Source::Trace) {
            assert!(
                r.at + r.len <= at,
                "step {s} reads {r:?} at or past its slot"
            );
        }
        assert!(reads.iter().map(|r| r.len).sum::<u64>() <= lay.most_held());
        *counts
            .entry(format!("{:?}", lay.step(s).unwrap().part))
            .or_insert(0u64) += 1;
    }
    assert!(end <= lay.len());
    assert_eq!(counts.len(), 23, "every part has steps: {counts:?}");
    assert_eq!(lay.token_at() + 4, end);
}

#[test]
fn a_changed_earlier_token_or_weight_changes_the_trace_and_bad_fields_are_refused() {
    let c = case(SHAPES[0], 11, 4, 3);
    let lay = c.layout(0, 2);
    let mem = memory(&lay, &c.src()).expect("a trace");
    // the earlier tokens are the result's: another token 0 is another sequence
    let mut other = c.result.clone();
    let at = lay.result_row as usize + 4;
    let t0 = u32_at(&other, at);
    other[at..at + 4].copy_from_slice(&((t0 + 1) % c.d.vocab() as u32).to_le_bytes());
    let src = Sources {
        result: &other,
        ..c.src()
    };
    assert_ne!(memory(&lay, &src).expect("a trace"), mem);
    // a token past the vocabulary is refused, not read
    other[at..at + 4].copy_from_slice(&(c.d.vocab() as u32).to_le_bytes());
    let src = Sources {
        result: &other,
        ..c.src()
    };
    assert_eq!(memory(&lay, &src), Err(FeedError::BadModel));
    // a requantization shift of 0 in the first q row is refused
    let mut model = c.model.clone();
    let shape = lay.shape;
    let at = shape.row_at(0, Dense::Q, 0) as usize + 4;
    model[at..at + 4].copy_from_slice(&0i32.to_le_bytes());
    let src = Sources {
        model: &model,
        ..c.src()
    };
    assert_eq!(memory(&lay, &src), Err(FeedError::BadModel));
}

#[test]
fn step_counts_in_closed_form_match_the_enumeration() {
    let c = case(SHAPES[0], 2, 6, 2);
    for t in [1u32, 2, 5, 7] {
        let lay = Layout::new(
            c.layout(0, 0).shape,
            &c.job,
            0,
            t.min(6),
            t.saturating_sub(6),
        );
        let lay = Layout { t, ..lay };
        let mut n = 0u64;
        for q in 0..t as u64 {
            for l in 0..lay.shape.layers as u64 {
                n += BLOCK_PARTS
                    .iter()
                    .map(|&p| lay.count(p, q + 1, l == 0))
                    .sum::<u64>();
            }
        }
        assert_eq!(lay.steps(), n + lay.tail_steps(), "T = {t}");
        for s in [1, 2, n / 3, n / 2, n, n + 1, lay.steps()] {
            assert!(lay.step(s).is_some(), "step {s} of {}", lay.steps());
        }
        assert!(lay.step(lay.steps() + 1).is_none());
    }
}

#[test]
fn a_keeper_holding_one_block_at_a_time_has_the_whole_memorys_roots_and_leaves() {
    use super::build::Blocks;
    use crate::trace::{build as tb, fold, leaf_hash};
    let c = case(SHAPES[1], 8, 3, 3);
    let lay = c.layout(2, 2);
    let mem = memory(&lay, &c.src()).expect("a trace");
    let blocks = Blocks::new(
        lay,
        std::sync::Arc::new(c.model.clone()),
        std::sync::Arc::new(c.batch.clone()),
        c.result.clone(),
        c.job.input,
    )
    .expect("a pass");
    assert_eq!(blocks.word().unwrap(), mem[lay.token_at() as usize..][..4]);
    let g = crate::trace::build::Trace {
        lay,
        mem: mem.clone(),
    };
    let (lo, hi) = (3, lay.steps());
    assert_eq!(blocks.split_roots(lo, hi).unwrap(), g.split_roots(lo, hi));
    let n = lay.steps();
    let step = (n / 37).max(1);
    let mut s = 0;
    while s <= n {
        let state = tb::state(&lay, &mem, s);
        let root = tb::root(&lay, &state);
        assert_eq!(blocks.root_at(s).expect("a root"), root, "after step {s}");
        if s > 0 {
            // the leaves a replay of the next step reads and writes, and a far one
            let idx = [lay.slot(s).0 / LEAF, 0, lay.len() / LEAF - 1];
            for i in idx {
                let (leaf, path) = blocks.leaf_at(s, i).expect("a leaf");
                assert_eq!(leaf, tb::leaf_proof(&lay, &state, i).0, "leaf {i} at {s}");
                assert_eq!(path.len() as u32, lay.depth());
                assert_eq!(fold(i, leaf_hash(&leaf), &path), root);
            }
        }
        s += step;
    }
}

/// Replays step `s` as the program does: piece by piece (chunks of the strings, leaves of the
/// memory before it, each proven), the state and work area carried between pieces; the root
/// after it.
fn replay_by_pieces(
    lay: &Layout,
    src: &Sources,
    pre: &[u8],
    s: u64,
) -> Result<[u8; 32], FeedError> {
    use crate::trace::{build as tb, fold, leaf_hash, Traced};
    let job_unused = JobSpec::generate(1, 1, 1, 1, 1, src.input);
    let traced = Traced::Decoder(*lay);
    let mut r = [0u8; REPLAY_LEN];
    let mut work = vec![0u8; WORK_LEN];
    let root = tb::root(lay, pre);
    for _ in 0..64 {
        let (source, i) = traced
            .next(&job_unused, 0, s, &r)
            .ok_or(FeedError::Complete)?;
        let bytes: Vec<u8> = match source {
            Source::Model => crate::slices::chunk(src.model, i).to_vec(),
            Source::Batch => crate::slices::chunk(src.batch, i).to_vec(),
            Source::Result => crate::slices::chunk(src.result, i).to_vec(),
            Source::Trace => {
                let (leaf, path) = tb::leaf_proof(lay, pre, i);
                assert_eq!(fold(i, leaf_hash(&leaf), &path), root);
                leaf.to_vec()
            }
        };
        // a piece other than the one asked is refused before anything is taken
        let mut r2 = r;
        assert_eq!(
            traced.take(
                &job_unused,
                0,
                s,
                &mut r2,
                source,
                i + 1,
                &bytes,
                &mut work.clone()
            ),
            Err(FeedError::WrongChunk)
        );
        if let Some(patch) = traced.take(&job_unused, 0, s, &mut r, source, i, &bytes, &mut work)? {
            let (mut leaf, path) = tb::leaf_proof(lay, pre, i);
            patch.apply(&mut leaf, &work);
            return Ok(fold(i, leaf_hash(&leaf), &path));
        }
    }
    panic!("a step of more than 64 pieces");
}

#[test]
fn every_step_replayed_piece_by_piece_gives_the_next_root() {
    use crate::trace::build as tb;
    let c = case(SHAPES[1], 21, 3, 3);
    let lay = c.layout(1, 1);
    assert!(fits(&lay));
    let mem = memory(&lay, &c.src()).expect("a trace");
    for s in 1..=lay.steps() {
        let pre = tb::state(&lay, &mem, s - 1);
        let got = replay_by_pieces(&lay, &c.src(), &pre, s).expect("a replay");
        assert_eq!(got, tb::root(&lay, &tb::state(&lay, &mem, s)), "step {s}");
    }
    // a wrong value in the memory before a step gives another root than the honest one: the
    // token step over a greedy scan that names another token
    let s = lay.token_step();
    let mut pre = tb::state(&lay, &mem, s - 1);
    let gs = lay.slot(s - 1).0 as usize;
    pre[gs + 4] ^= 1;
    let lied = replay_by_pieces(&lay, &c.src(), &pre, s).expect("a replay");
    assert_ne!(lied, tb::root(&lay, &tb::state(&lay, &mem, s)));
}

#[test]
fn a_layout_and_a_replay_state_read_back_as_written() {
    let c = case(SHAPES[0], 4, 4, 2);
    let lay = c.layout(2, 1);
    for stage in 0..3 {
        assert_eq!(Layout::decode(&lay.encode(stage)), Some((lay, stage)));
    }
    assert_eq!(Layout::decode(&[0; LAYOUT_LEN]), None);
    let r = Replay {
        stage: 1,
        filled: 77,
        read: Some(Read {
            source: Source::Result,
            at: 5000,
            len: 12,
        }),
    };
    assert_eq!(Replay::decode(&r.encode()), r);
    assert_eq!(Replay::decode(&[0; REPLAY_LEN]), Replay::default());
}

/// SmolLM2-135M's shape.
fn smollm2() -> Shape {
    Shape {
        width: 576,
        heads: 9,
        kv_heads: 3,
        head_dim: 64,
        ffn: 1536,
        layers: 30,
        vocab: 49_152,
        positions: 8192,
        eos: 2,
        eps: 1,
    }
}

/// The shortest window in which a game over this job fits.
fn least_window(job: &JobSpec) -> u32 {
    (1..=100_000u32)
        .find(|&w| crate::trace::clock(job, w).is_some())
        .expect("a window")
}

#[test]
fn smollm2s_tokens_fit_a_game_and_the_window_it_needs_is_within_a_markets_bounds() {
    for (l, g) in [(64u32, 12u32), (448, 64), (1024, 1024)] {
        let s = smollm2();
        let mut job = JobSpec::generate(8, l, g, s.work_per_token((l + g) as u64), 4, [1; 32]);
        job.slices_len = s.len();
        let lay = Layout::new(s, &job, 7, l, g - 1);
        assert!(fits(&lay), "L {l}, G {g}: {lay:?}");
        let d = least_window(&job);
        let clock = crate::trace::clock(&job, d).expect("a clock");
        println!(
            "SmolLM2, prompts of {l} and completions of {g} tokens: {} steps at most ({} in the longest trace), depth {}, {} levels, a step's replay {} pieces, the window from {d} slots",
            steps_bound(&job),
            lay.steps(),
            lay.depth(),
            clock.levels,
            step_pieces()
        );
        assert!(lay.steps() <= steps_bound(&job));
        assert!(d <= 10_000, "{d}");
    }
}

#[test]
fn a_word_past_the_committed_count_is_zero_whatever_the_decoder_would_pick() {
    let mut c = case(SHAPES[0], 6, 4, 3);
    // completion 1 ends after two tokens (as after an end of turn): word 3 is padding
    let at = result_row_at(&c.job, 1) as usize;
    c.result[at..at + 4].copy_from_slice(&2u32.to_le_bytes());
    c.result[at + 12..at + 16].fill(0);
    let lay = c.layout(1, 2);
    let mem = memory(&lay, &c.src()).expect("a trace");
    assert_eq!(u32_at(&mem, lay.token_at() as usize), 0);
    // while the greedy scan before it names the decoder's token
    let gs = lay.slot(lay.token_step() - 1).0 as usize;
    assert_eq!(u32_at(&mem, gs + 4), c.completions[1][2]);
    // token 1, below the count, is the decoder's
    let lay = c.layout(1, 1);
    let mem = memory(&lay, &c.src()).expect("a trace");
    assert_eq!(u32_at(&mem, lay.token_at() as usize), c.completions[1][1]);
}

#[test]
fn a_counts_trace_gives_the_count_the_committed_tokens_give() {
    let c = case(SHAPES[1], 9, 4, 3);
    let count_of = |result: &[u8], row: u32| {
        let lay = Layout::count_of(
            c.layout(row, 0).shape,
            &c.job,
            row,
            c.prompts[row as usize].len() as u32,
        );
        assert!(lay.is_count() && fits(&lay));
        let src = Sources { result, ..c.src() };
        let mem = memory(&lay, &src).expect("a trace");
        // a replay by pieces of every step gives the next root
        for s in 1..=lay.steps() {
            let pre = crate::trace::build::state(&lay, &mem, s - 1);
            let got = replay_by_pieces(&lay, &src, &pre, s).expect("a replay");
            assert_eq!(
                got,
                crate::trace::build::root(&lay, &crate::trace::build::state(&lay, &mem, s))
            );
        }
        u32_at(&mem, lay.token_at() as usize)
    };
    // greedy completions of G tokens with no end of turn: G
    for row in 0..3 {
        assert_eq!(count_of(&c.result, row), 3, "row {row}");
    }
    let eos = c.layout(0, 0).shape.eos;
    let word = |r: &mut Vec<u8>, row: u32, w: u32, v: u32| {
        let at = result_row_at(&c.job, row) as usize + 4 * w as usize;
        r[at..at + 4].copy_from_slice(&v.to_le_bytes());
    };
    // an end of turn at token 1: the count is 2, whatever the committed count says
    let mut r = c.result.clone();
    word(&mut r, 1, 2, eos);
    assert_eq!(count_of(&r, 1), 2);
    // a word past the committed count that is not zero: no count is right
    let mut r = c.result.clone();
    word(&mut r, 2, 0, 2);
    assert_eq!(count_of(&r, 2), u32::MAX);
    // and with it zero, the count 2 the end of turn gives
    word(&mut r, 2, 3, 0);
    word(&mut r, 2, 2, eos);
    assert_eq!(count_of(&r, 2), 2);
}

#[test]
fn a_sampled_token_is_the_samplers_pick_from_the_logits_and_the_draw() {
    use crate::decoder::Sampling;
    for (k, (shape, rule)) in [
        (
            SHAPES[0],
            Sampling {
                temperature: 256,
                top_k: 0,
                top_p: 1 << 16,
                seed: 3,
            },
        ),
        (
            SHAPES[1],
            Sampling {
                temperature: 180,
                top_k: 5,
                top_p: 58_982,
                seed: 11,
            },
        ),
        (
            SHAPES[1],
            Sampling {
                temperature: 4_096,
                top_k: 40,
                top_p: 30_000,
                seed: 1,
            },
        ),
        (
            SHAPES[0],
            Sampling {
                temperature: 1,
                top_k: 3,
                top_p: 65_000,
                seed: 9,
            },
        ),
        (
            SHAPES[0],
            Sampling {
                temperature: 700,
                top_k: 37,
                top_p: 2,
                seed: 21,
            },
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let mut c = case(shape, 30 + k as u64, 4, 3);
        c.batch = build::prompts(&c.prompts, 4, &rule);
        for (row, j) in [(0u32, 0u32), (1, 2), (2, 1)] {
            let lay = c.layout(row, j).with_sampling(true);
            assert!(fits(&lay));
            let mem = memory(&lay, &c.src()).expect("a trace");
            let seq: Vec<u32> = c.prompts[row as usize]
                .iter()
                .chain(&c.completions[row as usize][..j as usize])
                .copied()
                .collect();
            let y = c.d.forward(&seq, &mut c.d.cache());
            let logits = c.d.logits(y.last().expect("a row"));
            let d = crate::decoder::draw(&c.job.input, rule.seed, row, j);
            let want = rule.pick(&logits, &c.d.exp, d) as u32;
            assert_eq!(
                u32_at(&mem, lay.token_at() as usize),
                want,
                "{rule:?} row {row} token {j}"
            );
        }
        // a step of every sampled part replayed piece by piece gives the next root
        let lay = c.layout(1, 1).with_sampling(true);
        let mem = memory(&lay, &c.src()).expect("a trace");
        let mut seen = std::collections::BTreeSet::new();
        for s in (1..=lay.steps()).rev() {
            let part = lay.step(s).unwrap().part;
            if matches!(
                part,
                Part::Wt | Part::Sa | Part::Sw | Part::Sc | Part::Sd | Part::Tok
            ) && seen.insert(format!("{part:?}"))
            {
                let pre = crate::trace::build::state(&lay, &mem, s - 1);
                let got = replay_by_pieces(&lay, &c.src(), &pre, s).expect("a replay");
                assert_eq!(
                    got,
                    crate::trace::build::root(&lay, &crate::trace::build::state(&lay, &mem, s))
                );
            }
        }
        assert_eq!(seen.len(), 6);
        assert_eq!(Layout::decode(&lay.encode(2)), Some((lay, 2)));
    }
}

#[test]
fn the_sampled_tail_picks_as_the_sampler_does_on_many_logits_and_rules() {
    use crate::decoder::Sampling;
    use crate::job::splitmix64;
    let mut c = case(SHAPES[1], 77, 4, 3);
    let v = c.d.vocab();
    let mut z = 5u64;
    let mut next = move || {
        z = splitmix64(z);
        z
    };
    for n in 0..240 {
        let rule = Sampling {
            temperature: 1 + (next() % 4_096) as u32,
            top_k: match n % 4 {
                0 => 0,
                1 => 1 + (next() % 4) as u32,
                _ => (next() % (v as u64 + 1)) as u32,
            },
            top_p: 1 + (next() % (1 << 16)) as u32,
            seed: next(),
        };
        c.batch = build::prompts(&c.prompts, 4, &rule);
        let lay = c.layout(1, 1).with_sampling(true);
        let mut mem = memory(&lay, &c.src()).expect("a trace");
        // other logits, ties among them, then the tail recomputed from them
        let lg = lay.part_at(lay.t as u64, 0, Part::Lg) as usize;
        let spread = [3u64, 40, 2_000, 1 << 20, 1 << 30][n % 5];
        let logits: Vec<i64> = (0..v)
            .map(|_| (next() % (2 * spread + 1)) as i64 - spread as i64)
            .collect();
        for (t, &l) in logits.iter().enumerate() {
            mem[lg + 4 * t..lg + 4 * t + 4].copy_from_slice(&(l as i32).to_le_bytes());
        }
        let first = (1..=lay.steps())
            .find(|&s| lay.step(s).unwrap().part == Part::Gs)
            .unwrap();
        for s in first..=lay.steps() {
            let (val, _) = replay(&lay, s, &c.src(), &mem).expect("a step");
            let (at, w) = lay.slot(s);
            mem[at as usize..at as usize + w].copy_from_slice(&val);
        }
        let d = crate::decoder::draw(&c.job.input, rule.seed, 1, 1);
        let want = rule.pick(&logits, &c.d.exp, d) as u32;
        assert_eq!(
            u32_at(&mem, lay.token_at() as usize),
            want,
            "case {n}: {rule:?}"
        );
    }
}

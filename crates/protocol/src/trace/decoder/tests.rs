use super::build::{memory, replay, Sources};
use super::*;
use crate::decoder::{
    argmax,
    random::{random_decoder, Shape as RandomShape},
    Decoder, Sampling,
};
use crate::slices::decoder::build;

/// Heads of 32 and 16 (powers of two), one and two key/value heads, widths of 3 and 2 blocks.
const SHAPES: [RandomShape; 2] = [[2, 96, 160, 3, 1, 32, 37, 40], [1, 64, 96, 4, 2, 16, 53, 24]];

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
    let job = JobSpec::generate(3, limit, g, s.work_per_token((limit + g) as u64), 2, [9; 32]);
    let model = build::model(&d, eos);
    let batch = build::prompts(&prompts, limit, &Sampling::GREEDY);
    let mut result = vec![0u8; job.tile_count() as usize * job.tile_len()];
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
        }
    }
    fn layout(&self, row: u32, j: u32) -> Layout {
        let shape = crate::slices::decoder::read_header(
            &self.job,
            self.model.len() as u64,
            &self.model[..64],
        )
        .expect("the header fits the job");
        Layout::new(shape, &self.job, row, self.prompts[row as usize].len() as u32, j)
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
            assert_eq!(tok, c.completions[row as usize][j as usize], "{shape:?} {row} {j}");
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
            assert!(r.at + r.len <= at, "step {s} reads {r:?} at or past its slot");
        }
        assert!(reads.iter().map(|r| r.len).sum::<u64>() <= lay.most_held());
        *counts.entry(format!("{:?}", lay.step(s).unwrap().part)).or_insert(0u64) += 1;
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
        let lay = Layout::new(c.layout(0, 0).shape, &c.job, 0, t.min(6), t.saturating_sub(6));
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
    let blocks = Blocks::new(lay, c.src()).expect("a pass");
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

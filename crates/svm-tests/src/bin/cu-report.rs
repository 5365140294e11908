//! `cu-report`: runs every instruction of the program once in litesvm (Agave 4.2.2 runtime)
//! and prints compute units, writable accounts (`*` = shared by all tasks of a market), account
//! bytes created and closed, and the number of transactions a task needs from post to close.
//!
//! Exits non-zero if an instruction needs 200k CU or more, or if an instruction on a task's
//! path write-locks an account shared by other tasks.

use compute_market::{client, pda, state::Params};
use compute_market_protocol::{commit::VOTE_VALID, dispute, hash::hashv, job::JobSpec, merkle};
use compute_market_svm_tests::*;

/// Instructions on a task's path (PROTOCOL §2, parallelism).
const TASK_PATH: &[&str] = &[
    "post_task",
    "cancel_task",
    "expire_task",
    "claim_task",
    "submit_result",
    "reclaim_task",
    "draw_seed",
    "join_task",
    "join_task (displacing, V = 15)",
    "commit_vote",
    "reveal_vote",
    "finalize_task",
    "settle_vote",
    "close_task",
];
const CU_LIMIT: u64 = 200_000;
/// Dispute instructions may use a transaction's whole budget (PROTOCOL §8.4).
const DISPUTE_CU_LIMIT: u64 = 1_400_000;
/// Bytes of a transaction packet.
const PACKET: usize = 1_232;

/// Whether a row is one of a dispute's instructions.
fn is_dispute(label: &str) -> bool {
    label.contains("dispute")
        || label.starts_with("conclude_task")
        || label.contains("game")
        || label.starts_with("defend")
}

/// One kind-1 dispute at the bounds of `job`: a wrong result whose committed root the provider
/// built from a zero chunk at the disputed element and random siblings (the most a proof of
/// this job carries), so the worst case is measured without computing the job. Returns the
/// dispute's records, labelled with `kind`, and the number of its transactions.
fn dispute_at_bounds(job: JobSpec, tile: u32, element: u32, kind: &str) -> (Vec<TxRecord>, usize) {
    let market = compute_market::state::MarketArgs {
        dispute_window: 50,
        ..test_market(1)
    };
    let mut c = cast_in(3, 1, market);
    let (chunk_index, _) = dispute::element_chunk(&job, tile, element);
    let count = dispute::chunk_count(&job);
    let chunk = vec![0u8; merkle::CHUNK_LEN];
    let path: Vec<[u8; 32]> = (0..merkle::proof_len(chunk_index, count))
        .map(|i| hashv(&[b"sibling", &(i as u64).to_le_bytes()]))
        .collect();
    let leaf = merkle::chunk_leaf(chunk_index, count, &chunk);
    let root = merkle::root_from_proof(chunk_index, count, &leaf, &path).expect("path");
    let task = c.submitted_job(1, job, 0, root);
    let w = &mut c.w;
    let votes: Vec<(&Actor, Ballot)> = c
        .verifiers
        .iter()
        .enumerate()
        .map(|(i, v)| (v, Ballot::new(VOTE_VALID, i as u64)))
        .collect();
    w.join_and_commit(task, &votes);
    for (v, b) in &votes {
        w.reveal(v, task, b).expect("reveal");
    }
    w.finalize(task).expect("finalize");
    let start = w.records.len();
    let client = c.client.clone();
    w.open_dispute(&client, task, 1, tile, element)
        .expect("open_dispute");
    let mut bytes = chunk;
    path.iter().for_each(|s| bytes.extend_from_slice(s));
    w.write_proof(&client, task, &bytes).expect("dispute_write");
    w.send_as(
        "dispute_prove",
        &client,
        client::dispute_prove(task, client.key(), path.len() as u8),
    )
    .expect("dispute_prove");
    w.step_to_end(&client, task, None).expect("dispute_step");
    assert_eq!(
        w.task(&task).tally().majority,
        compute_market_protocol::commit::VERDICT_PROVEN_WRONG
    );
    let txs = w.records.len() - start;
    w.conclude(task).expect("conclude_task");
    for v in &c.verifiers {
        w.settle(task, v, 0).expect("settle");
    }
    w.close_dispute(task, &client).expect("close_dispute");
    w.close(task).expect("close");
    let records = w.records[start..]
        .iter()
        .filter(|r| is_dispute(&r.label))
        .cloned()
        .map(|mut r| {
            if r.label != "close_dispute" && r.label != "conclude_task" {
                r.label = format!("{} ({kind})", r.label);
            }
            r
        })
        .collect();
    (records, txs)
}

/// A kind-1 dispute of a result of all zeros of a job on the client's data (PROTOCOL §8.7),
/// played to its end: the rows of `dispute_inputs` and `dispute_feed`, and the number of the
/// dispute's transactions.
fn dispute_on_data(
    job: JobSpec,
    inputs: &disputes::Inputs,
    (tile, element): (u32, u32),
    kind: &str,
) -> (Vec<TxRecord>, usize) {
    // room for each at two slots a transaction in half the window
    let market = compute_market::state::MarketArgs {
        dispute_window: 400,
        ..test_market(1)
    };
    let mut c = cast_in(3, 1, market);
    let wrong = disputes::Committed::new(job, |_, _| [0; 32]);
    let task = c.submitted_job(1, job, 0, wrong.root());
    let w = &mut c.w;
    let votes: Vec<(&Actor, Ballot)> = c
        .verifiers
        .iter()
        .enumerate()
        .map(|(i, v)| (v, Ballot::new(VOTE_VALID, i as u64)))
        .collect();
    w.decide(task, &votes);
    let start = w.records.len();
    let client = c.client.clone();
    w.argue_on_data(&client, task, &wrong, inputs, (tile, element))
        .expect("a dispute on the client's data");
    assert_eq!(
        w.task(&task).tally().majority,
        compute_market_protocol::commit::VERDICT_PROVEN_WRONG
    );
    let txs = w.records.len() - start;
    let mut rows: Vec<TxRecord> = vec![];
    for r in &w.records[start..] {
        if matches!(r.label.as_str(), "dispute_inputs" | "dispute_feed") {
            // the costliest chunk of each instruction
            let label = format!("{} ({kind})", r.label);
            keep_costliest(&mut rows, label, r);
        }
    }
    (rows, txs)
}

/// Keeps in `rows` the costliest record of each label: `r`, relabelled `label`, unless a
/// costlier one is there.
fn keep_costliest(rows: &mut Vec<TxRecord>, label: String, r: &TxRecord) {
    match rows.iter_mut().find(|x| x.label == label) {
        Some(x) if x.cu >= r.cu => {}
        Some(x) => {
            *x = r.clone();
            x.label = label;
        }
        None => {
            let mut r = r.clone();
            r.label = label;
            rows.push(r);
        }
    }
}

/// The costliest successful record of each game instruction in `records` (the layout, the
/// claim, defences, moves, the resolution), labelled with `suffix`.
fn game_rows(records: &[TxRecord], suffix: &str) -> Vec<TxRecord> {
    let mut rows: Vec<TxRecord> = vec![];
    for r in records.iter().filter(|r| r.ok) {
        let l = r.label.as_str();
        if l.contains("game")
            || l == "defend"
            || matches!(l, "dispute_layout" | "dispute_claim" | "dispute_resolve")
        {
            keep_costliest(&mut rows, format!("{l}{suffix}"), r);
        }
    }
    rows
}

/// A model of random weights with widths `widths`, for the CU report.
fn random_model(widths: &[usize]) -> compute_market_protocol::infer::Mlp {
    compute_market_protocol::infer::random_mlp(widths, 7)
}

/// A game at its bounds (PROTOCOL §8.10): a 64-4096-4096-4096 model (33 MiB of slices, far
/// too large to read in a dispute), in a window of 2 400 slots. The client claims the right
/// trace of a row against a wrong class; two defenders each hold a trace that departs from it
/// at one step, so their games end at the widest replays (each its own): a second-layer
/// output (4 096 inputs from the memory, a 4 108-byte record across six chunks) and the class
/// (4 096 logits from 16 leaves). A third defender goes silent, and a second challenger's
/// claim is made moot. Returns the rows of each game instruction (the costliest of each) and
/// the transactions of a dispute against one defender, from open to verdict.
fn game_at_bounds() -> (Vec<TxRecord>, usize) {
    use compute_market_protocol::trace;
    use compute_market_svm_tests::games::Trace;
    let model = random_model(&[64, 4_096, 4_096, 4_096]);
    let x: Vec<i8> = (0..4 * 64).map(|i| (i % 17) as i8).collect();
    let (job, inputs) = disputes::Inputs::mlp(&model, &x, 4);
    assert_eq!(dispute::method(&job, 2_400), Some(dispute::Method::Game));
    let market = compute_market::state::MarketArgs {
        dispute_window: 2_400,
        ..test_market(1)
    };
    let mut c = cast_with(3, 1, Params::defaults(20_000), market);
    let truth = Trace::of(&model, &x[64..128]);
    let class = 4_096u32;
    // row 1's class is wrong in the result
    let rows: Vec<Vec<u8>> = x.chunks(64).map(|r| model.row(r)).collect();
    let wrong = disputes::Committed::new(job, |t, e| {
        let (row, w) = ((t * 4 + e / 4_097) as usize, (e % 4_097) as usize);
        let mut v = [0u8; 32];
        if let Some(r) = rows.get(row) {
            v[..4].copy_from_slice(&r[4 * w..4 * w + 4]);
        }
        if (row, w as u32) == (1, class) {
            v[0] ^= 1;
        }
        v
    });
    let task = c.submitted_job(1, job, 0, wrong.root());
    let w = &mut c.w;
    let votes: Vec<(&Actor, Ballot)> = c
        .verifiers
        .iter()
        .enumerate()
        .map(|(i, v)| (v, Ballot::new(VOTE_VALID, i as u64)))
        .collect();
    w.decide(task, &votes);
    let start = w.records.len();
    let client = c.client.clone();
    let element = 4_097 + class;
    w.open_dispute(&client, task, 1, 0, element).expect("open");
    w.prove_element(&client, task, &wrong, 0, element)
        .expect("prove");
    w.prove_inputs(&client, task, &inputs).expect("inputs");
    w.lay_out(&client, task, &inputs).expect("layout");
    w.claim_trace(&client, task, &truth, class).expect("claim");
    let lay = truth.lay;
    // each defender's trace departs from the truth at one step
    let departing = |s: u64| {
        let mut t = truth.clone();
        let (off, _) = lay.slot(s);
        t.mem[off as usize] ^= 0x55;
        t
    };
    let second_layer = lay.hidden_at(1) + 2_000 + 1;
    assert!(matches!(
        lay.step(second_layer),
        Some(trace::Step::Hidden { layer: 1, .. })
    ));
    let mut one_game = 0;
    for (name, s) in [("d.hidden", second_layer), ("d.class", lay.steps())] {
        let d = w.actor(name, 10_000_000);
        w.defend(&d, task, &client).expect("defend");
        w.play(&client, &truth, &d, &departing(s), task, &inputs)
            .expect("the right claim wins the game");
        if one_game == 0 {
            // open to claim, one game to its widest replay, and the resolution
            one_game = w.records.len() - start + 1;
        }
    }
    // a defender that goes silent after the client's split loses at its deadline
    let silent = w.actor("d.silent", 10_000_000);
    w.defend(&silent, task, &client).expect("defend");
    w.split(&client, task, &silent, &truth).expect("split");
    let g = w.game(&task, &client, &silent).expect("a game");
    // a second challenger's claim, defended against, made moot by the first one's win
    let other = w.actor("other", 10_000_000);
    w.open_dispute(&other, task, 1, 0, element).expect("open");
    w.prove_element(&other, task, &wrong, 0, element)
        .expect("prove");
    w.prove_inputs(&other, task, &inputs).expect("inputs");
    w.lay_out(&other, task, &inputs).expect("layout");
    w.claim_trace(&other, task, &truth, class).expect("claim");
    let moot = w.actor("d.moot", 10_000_000);
    w.defend(&moot, task, &other).expect("defend");
    w.advance_past(g.deadline);
    w.game_timeout(task, &client, &silent)
        .expect("game_timeout");
    let d = w.dispute(&task, &client).expect("open");
    w.advance_past(d.defend_deadline);
    w.resolve(&client, task, None).expect("resolve");
    let nonce = w.game_ref(&task, &other, &moot).nonce;
    w.close_game(task, &other, nonce, &moot)
        .expect("close_game");
    w.close_dispute(task, &other)
        .expect("close the moot dispute");
    assert_eq!(
        w.task(&task).tally().majority,
        compute_market_protocol::commit::VERDICT_PROVEN_WRONG
    );
    (game_rows(&w.records[start..], ""), one_game)
}

/// Games over an `Encoder` text at MiniLM's shape (H 384, 12 heads, F 1 536, 6 blocks, a
/// 30 522-token vocabulary) and the job's longest text (128 tokens), in a window of 3 000
/// slots: one defender's trace departs from the truth at the last block's attention (the
/// widest replay: 4 KiB of keys and the exp table), one at its feed-forward-out sum, one at
/// its LayerNorm; each loses its game. Rows labelled "(Encoder)"; returns them, the
/// transactions of the attention's game (open to resolution), and the trace's steps.
fn encoder_games_at_scale() -> (Vec<TxRecord>, usize, u64) {
    use compute_market_protocol::{
        encoder::{random_encoder, RandomShape},
        trace::encoder::Step,
    };
    use compute_market_svm_tests::games::Trace;
    let (h, words, limit) = (384usize, 192u32, 128u32);
    let enc = random_encoder(
        RandomShape {
            hidden: h,
            heads: 12,
            ffn: 1_536,
            blocks: 6,
            vocab: 30_522,
            positions: 512,
        },
        77,
    );
    let texts: Vec<Vec<u32>> = (0..4u32)
        .map(|r| {
            (0..limit)
                .map(|p| (r * 7_919 + p * 104_729) % 30_522)
                .collect()
        })
        .collect();
    let (job, inputs) = disputes::Inputs::encoder(&enc, &texts, limit, 4);
    let window = 3_000;
    assert_eq!(dispute::method(&job, window), Some(dispute::Method::Game));
    let market = compute_market::state::MarketArgs {
        dispute_window: window,
        ..test_market(1)
    };
    let mut c = cast_with(3, 1, Params::defaults(30_000), market);
    let truth = Trace::of_text(&enc, &texts[1]);
    let embeddings: Vec<Vec<u8>> = texts
        .iter()
        .map(|t| enc.embed(t).iter().flat_map(|v| v.to_le_bytes()).collect())
        .collect();
    // text 1's word 5 is wrong in the result
    let wrong = disputes::Committed::new(job, |t, e| {
        let (row, w) = ((t * 4 + e / words) as usize, (e % words) as usize);
        let mut v = [0u8; 32];
        if let Some(r) = embeddings.get(row) {
            v[..4].copy_from_slice(&r[4 * w..4 * w + 4]);
        }
        if (row, w) == (1, 5) {
            v[0] ^= 1;
        }
        v
    });
    let task = c.submitted_job(1, job, 0, wrong.root());
    let w = &mut c.w;
    let votes: Vec<(&Actor, Ballot)> = c
        .verifiers
        .iter()
        .enumerate()
        .map(|(i, v)| (v, Ballot::new(VOTE_VALID, i as u64)))
        .collect();
    w.decide(task, &votes);
    let start = w.records.len();
    let client = c.client.clone();
    w.claim_against(&client, task, &wrong, (0, words + 5), &inputs, &truth, 5)
        .expect("the claim");
    let lay = truth.lay;
    let find = |f: &dyn Fn(Step) -> bool| {
        (1..=lay.steps())
            .rev()
            .find(|&s| f(lay.step(s).expect("a step")))
            .expect("a step of that kind")
    };
    let attn = find(&|s| matches!(s, Step::Attn { b: 5, h: 11, .. }));
    let res = find(&|s| {
        matches!(
            s,
            Step::Res {
                b: 5,
                second: true,
                ..
            }
        )
    });
    let norm = find(&|s| {
        matches!(
            s,
            Step::Norm {
                block: Some(5),
                second: true,
                ..
            }
        )
    });
    assert!(lay.len() <= compute_market_protocol::trace::encoder::MAX_MEMORY);
    let mut one_game = 0;
    for (name, s) in [("d.attention", attn), ("d.residual", res), ("d.norm", norm)] {
        let mut departing = truth.clone();
        let (off, width) = compute_market_protocol::trace::Slots::slot_of(&lay, s);
        departing.mem[off as usize + width - 1] ^= 0x55;
        let d = w.actor(name, 10_000_000);
        w.defend(&d, task, &client).expect("defend");
        w.play(&client, &truth, &d, &departing, task, &inputs)
            .expect("the right claim wins the game");
        if one_game == 0 {
            one_game = w.records.len() - start + 1;
        }
    }
    let d = w.dispute(&task, &client).expect("open");
    w.advance_past(d.defend_deadline);
    w.resolve(&client, task, None).expect("resolve");
    (
        game_rows(&w.records[start..], " (Encoder)"),
        one_game,
        lay.steps(),
    )
}

/// Games over a `Generate` token at SmolLM2's shape (30 layers of width 576, 9 heads of 64 over
/// 3 key/value heads, F 1 536, a 49 152-token vocabulary; random weights), a prompt of four
/// tokens and the completion's second token, in a window of 3 600 slots: one defender's trace
/// departs from the truth at each of the widest steps (a logit, a SwiGLU product, the
/// feed-forward-out sum, the final norm's statistics, a RoPE pair, a context sum, an exp
/// weight); each loses its game. Rows labelled "(Generate)"; returns them, the transactions of
/// the logit's game (open to resolution), and the trace's steps.
fn generate_games_at_scale() -> (Vec<TxRecord>, usize, u64) {
    use compute_market_protocol::{
        decoder::{random::random_decoder, Sampling},
        trace::decoder::{
            build::{trace, Sources},
            result_row_at, Layout, Part,
        },
    };
    use compute_market_svm_tests::games::Trace;
    let d = random_decoder([30, 576, 1_536, 9, 3, 64, 49_152, 2_048], 45);
    let prompts = vec![vec![11u32, 2_001, 30_017, 5]; 2];
    let (job, inputs) = disputes::Inputs::generate(&d, 2, &prompts, (4, 2), &Sampling::GREEDY, 2);
    let window = 3_600;
    assert_eq!(dispute::method(&job, window), Some(dispute::Method::Game));
    let shape = compute_market_protocol::slices::decoder::build::shape(&d, 2);
    let lay = Layout::new(shape, &job, 1, 4, 1);
    // completion 1: two tokens; the trace of its token 1 reads its count and token 0
    let words = |t1: u32| {
        let mut r = vec![0u8; result_row_at(&job, 1) as usize + 12];
        let at = result_row_at(&job, 1) as usize;
        r[at..at + 4].copy_from_slice(&2u32.to_le_bytes());
        r[at + 4..at + 8].copy_from_slice(&7u32.to_le_bytes());
        r[at + 8..at + 12].copy_from_slice(&t1.to_le_bytes());
        r
    };
    let probe = words(0);
    let src = |r: &[u8]| -> Trace<Layout> {
        trace(
            lay,
            &Sources {
                model: &inputs.slices[0],
                batch: &inputs.slices[1],
                result: r,
                input: job.input,
            },
        )
        .expect("a trace")
    };
    let first = src(&probe);
    let at = lay.token_at() as usize;
    let right = u32::from_le_bytes(first.mem[at..at + 4].try_into().unwrap());
    // the committed token 1 is not the decoder's
    let wrong = disputes::Committed::new(job, |t, e| {
        let mut v = [0u8; 32];
        if t == 0 && e >= 3 {
            let w = match e - 3 {
                0 => 2,
                1 => 7,
                2 => (right + 1) % 49_152,
                _ => 0,
            };
            v[..4].copy_from_slice(&w.to_le_bytes());
        }
        v
    });
    let inputs = inputs.with_result(&wrong);
    let truth = src(&inputs.result);
    let market = compute_market::state::MarketArgs {
        dispute_window: window,
        ..test_market(1)
    };
    let mut c = cast_with(3, 1, Params::defaults(30_000), market);
    let task = c.submitted_job(1, job, 0, wrong.root());
    let w = &mut c.w;
    let votes: Vec<(&Actor, Ballot)> = c
        .verifiers
        .iter()
        .enumerate()
        .map(|(i, v)| (v, Ballot::new(VOTE_VALID, i as u64)))
        .collect();
    w.decide(task, &votes);
    let start = w.records.len();
    let client = c.client.clone();
    w.claim_against(&client, task, &wrong, (0, 3 + 2), &inputs, &truth, 2)
        .expect("the claim");
    let last = |part: Part| {
        (1..=lay.steps())
            .rev()
            .find(|&s| lay.step(s).expect("a step").part == part)
            .expect("a step of that part")
    };
    let mut one_game = 0;
    for (name, part) in [
        ("d.logit", Part::Lg),
        ("d.swiglu", Part::P),
        ("d.down", Part::R2),
        ("d.norm", Part::Nsf),
        ("d.rope", Part::Rot),
        ("d.context", Part::A),
        ("d.exp", Part::E),
    ] {
        let s = last(part);
        let mut departing = truth.clone();
        let (off, width) = compute_market_protocol::trace::Slots::slot_of(&lay, s);
        departing.mem[off as usize + width - 1] ^= 0x55;
        let dfd = w.actor(name, 10_000_000);
        w.defend(&dfd, task, &client).expect("defend");
        w.play(&client, &truth, &dfd, &departing, task, &inputs)
            .unwrap_or_else(|r| panic!("{name}: {:?}\n{}", r.error, r.logs.join("\n")));
        if one_game == 0 {
            one_game = w.records.len() - start + 1;
        }
    }
    let dsp = w.dispute(&task, &client).expect("open");
    w.advance(dsp.defend_deadline.saturating_sub(w.slot()) + 1);
    w.resolve(&client, task, None).expect("resolve");
    (
        game_rows(&w.records[start..], " (Generate)"),
        one_game,
        lay.steps(),
    )
}

/// Availability at its bounds (PROTOCOL §8.11): a product of 256 tiles of 16 KiB in a window
/// of 800 slots, a challenge of the 4 tiles (64 chunks, 64 KiB of data) a challenge may name,
/// answered in full; a second one that times out (the verdict unserved) and both closed; then
/// a withheld verdict contested and answered. The rows of every availability instruction, and
/// the transactions of one whole answer.
fn availability_at_bounds() -> (Vec<TxRecord>, usize) {
    use compute_market_protocol::{availability, commit::VOTE_UNAVAILABLE};
    let job = JobSpec::matmul(1_024, 64, 1_024, [9; 32]);
    let market = compute_market::state::MarketArgs {
        dispute_window: 800,
        ..test_market(1)
    };
    assert_eq!(availability::max_tiles(&job, 800), 4);
    let mut c = cast_with(3, 1, Params::defaults(20_000), market);
    let result = disputes::Committed::new(job, |t, e| {
        let mut v = [0u8; 32];
        v[..4].copy_from_slice(&((t * 4_096 + e) % 2_147_483_647).to_le_bytes());
        v
    });
    let task = c.submitted_job(1, job, 2, result.root());
    let votes: Vec<(&Actor, Ballot)> = c
        .verifiers
        .iter()
        .enumerate()
        .map(|(i, v)| (v, Ballot::new(VOTE_VALID, 40 + i as u64)))
        .collect();
    c.w.decide(task, &votes);
    let start = c.w.records.len();
    let client = c.client.clone();
    let provider = c.provider.clone();
    let w = &mut c.w;
    let n = w
        .challenge(&client, task, &[0, 17, 128, 255])
        .expect("challenge");
    let answer = w.publish(&provider, task, n, &result).expect("publish");
    let n2 = w.challenge(&client, task, &[3]).expect("challenge");
    // (its deadline queues a window after the first one's)
    let deadline = w
        .availability(&task, n2)
        .expect("account")
        .0
        .answer_deadline;
    w.advance(deadline + 1 - w.slot());
    w.availability_timeout(task, n2, &client).expect("timeout");
    w.close_availability(&client, task, n).expect("close");
    // a withheld verdict, contested
    let t2 = c.submitted_job(2, job, 2, result.root());
    let votes: Vec<(&Actor, Ballot)> = c
        .verifiers
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let vote = if i == 0 { VOTE_VALID } else { VOTE_UNAVAILABLE };
            (v, Ballot::new(vote, 50 + i as u64))
        })
        .collect();
    c.w.decide(t2, &votes);
    let w = &mut c.w;
    let n3 = w.contest(&provider, t2).expect("contest");
    w.publish(&provider, t2, n3, &result)
        .expect("publish the contest");
    assert_eq!(
        w.task(&t2).tally().majority,
        compute_market_protocol::commit::VERDICT_SERVED
    );
    (
        w.records[start..]
            .iter()
            .filter(|r| r.ok)
            .cloned()
            .collect(),
        answer,
    )
}

/// A kind-2 dispute (a pointer outside the result, refuted at once; one recomputed) and a
/// challenger that times out: the rows of `dispute_target` and `dispute_timeout`.
fn refutation_and_timeout() -> Vec<TxRecord> {
    let market = compute_market::state::MarketArgs {
        dispute_window: 50,
        ..test_market(1)
    };
    let mut c = cast_in(3, 1, market);
    let job = JobSpec::hash_batch(4, 32, 3, [6; 32]);
    let honest =
        disputes::Committed::new(job, |t, e| dispute::expected_element(&job, t, e).unwrap());
    let task = c.submitted_job(1, job, 0, honest.root());
    let w = &mut c.w;
    let mut bad = Ballot::new(compute_market_protocol::commit::VOTE_INVALID, 7);
    bad.evidence = dispute::invalid_evidence(1, 2, &bad.evidence);
    let votes: Vec<(&Actor, Ballot)> = c.verifiers.iter().map(|v| (v, bad)).collect();
    w.join_and_commit(task, &votes);
    for (v, b) in &votes {
        w.reveal(v, task, b).expect("reveal");
    }
    w.finalize(task).expect("finalize");
    let start = w.records.len();
    let late = w.actor("late", 10_000_000);
    w.open_dispute(&late, task, 1, 0, 0).ok(); // refused: the verdict is Rejected
    let provider = c.provider.clone();
    w.donate(&c.client, provider.wallet, 1_000_000)
        .expect("fund");
    w.open_dispute(&provider, task, 2, 0, 0)
        .expect("open kind 2");
    for v in &c.verifiers {
        w.refute(&provider, task, &honest, pda::vote(&task, &v.node, 0))
            .expect("refute");
    }
    assert!(
        w.task(&task).tally().majority == compute_market_protocol::commit::VERDICT_CLAIMS_REFUTED
    );
    let mut rows: Vec<TxRecord> = w.records[start..]
        .iter()
        .filter(|r| r.ok && r.label == "dispute_target")
        .cloned()
        .collect();
    // a second task: a challenger that opens and never answers
    let t2 = c.submitted_job(2, job, 0, honest.root());
    let w = &mut c.w;
    let votes: Vec<(&Actor, Ballot)> = c
        .verifiers
        .iter()
        .enumerate()
        .map(|(i, v)| (v, Ballot::new(VOTE_VALID, 10 + i as u64)))
        .collect();
    w.join_and_commit(t2, &votes);
    for (v, b) in &votes {
        w.reveal(v, t2, b).expect("reveal");
    }
    w.finalize(t2).expect("finalize");
    let late = w.actor("silent", 10_000_000);
    w.open_dispute(&late, t2, 1, 0, 0).expect("open");
    w.advance(51);
    rows.push(w.dispute_timeout(t2, &late).expect("dispute_timeout"));
    rows
}

fn main() {
    let json = std::env::args().any(|a| a == "--json");
    let mut w = World::new();
    let admin = w.admin.insecure_clone();

    // node lifecycle and an accepted task with V = 3
    let c = w.actor("client", 100_000_000);
    let p = w.actor("provider", 50_000_000);
    w.onboard(&p, 1, 50_000_000);
    let vs = w.verifiers("verifier", 3, 50_000_000, 50_000_000);
    w.advance(1); // every node above is in the task's stake snapshot
    let before = w.records.len();
    let task = w.post(&c, 1, small_job(1), 1_000_000).expect("post");
    w.claim(&p, task).expect("claim");
    w.submit(&p, task, [3; 32]).expect("submit");
    w.advance(2);
    w.crank("draw_seed", client::draw_seed(task))
        .expect("draw_seed");
    let votes: Vec<(&Actor, Ballot)> = vs
        .iter()
        .enumerate()
        .map(|(i, v)| (v, Ballot::new(VOTE_VALID, i as u64)))
        .collect();
    w.join_and_commit(task, &votes);
    for (v, b) in &votes {
        w.reveal(v, task, b).expect("reveal");
    }
    w.finalize(task).expect("finalize");
    for v in &vs {
        w.settle(task, v, 0).expect("settle");
    }
    w.close(task).expect("close");
    // draw_seed was cranked separately for the table; joins draw the seed themselves
    let task_txs = w.records[before..]
        .iter()
        .filter(|r| r.label != "draw_seed")
        .count();
    assert!(
        !w.exists(&task) && !w.exists(&pda::escrow(&task)),
        "task accounts closed"
    );
    assert!(
        vs.iter().all(|v| !w.exists(&pda::vote(&task, &v.node, 0))),
        "vote accounts closed"
    );

    // the other paths
    w.sweep(p.node).expect("sweep_fees");
    w.send_as(
        "claim_earnings",
        &p,
        client::claim_earnings(p.key(), p.wallet),
    )
    .expect("claim_earnings");
    let t2 = w.post(&c, 2, small_job(2), 1_000_000).expect("post");
    w.send_as("cancel_task", &c, client::cancel_task(c.key(), t2))
        .expect("cancel");
    w.close(t2).expect("close cancelled");
    let t3 = w.post(&c, 3, small_job(3), 1_000_000).expect("post");
    w.claim(&p, t3).expect("claim");
    let d = w.task(&t3).submit_deadline;
    w.advance(d + 1 - w.slot());
    w.crank("reclaim_task", client::reclaim_task(t3, p.node))
        .expect("reclaim");
    let d = w.task(&t3).open_deadline;
    w.advance(d.saturating_sub(w.slot()) + 1);
    w.crank("expire_task", client::expire_task(t3))
        .expect("expire");
    w.close(t3).expect("close expired");
    let v = &vs[0];
    w.send_as(
        "request_unstake",
        v,
        client::request_unstake(v.key(), w.market, 50_000_000),
    )
    .expect("unstake");
    w.advance(5_000);
    w.send_as("withdraw", v, client::withdraw(v.key(), v.wallet))
        .expect("withdraw");
    w.send_as(
        "claim_earnings",
        v,
        client::claim_earnings(v.key(), v.wallet),
    )
    .expect("claim_earnings");
    w.send_as(
        "close_node",
        v,
        client::close_node(v.key(), w.market, v.wallet),
    )
    .expect("close_node");
    w.send(
        "propose_params",
        &admin,
        &[],
        client::propose_params(admin.pubkey(), Params::defaults(6_000)),
    )
    .expect("propose");
    // the delay is longer than the longest task plus the cooldown in force
    let at = w.config().pending_effective_slot;
    w.advance(at - w.slot());
    w.crank("apply_params", client::apply_params())
        .expect("apply");

    // the heaviest join: V = 15 seats, each taken by its worst ticket first and then by its
    // best, which displaces it; five nodes of a fifth of the stake each are always eligible
    // and so hold several seats each (PROTOCOL §3.3: one vote account, one vote, per node)
    let big = w.verifiers("big", 5, 500_000_000, 500_000_000);
    w.advance(1);
    let t4 = w
        .post_with(
            &c,
            compute_market::instructions::PostTaskArgs {
                quorum: 15,
                ..compute_market::instructions::PostTaskArgs::new(4, &small_job(4), 1_000_000)
            },
        )
        .expect("post V = 15");
    w.claim(&p, t4).expect("claim");
    w.submit(&p, t4, [4; 32]).expect("submit");
    w.advance(2);
    w.crank("draw_seed", client::draw_seed(t4))
        .expect("draw_seed");
    for seat in 0..15u8 {
        let mut order: Vec<&Actor> = big.iter().collect();
        order.sort_by(|a, b| {
            let sa = w.seat_score(&t4, &a.node, seat, 500_000_000);
            let sb = w.seat_score(&t4, &b.node, seat, 500_000_000);
            if sa.better_than(&sb) {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Less
            }
        });
        w.join_seat(order[0], t4, seat)
            .expect("join (worst ticket)");
        w.join_seat(order[4], t4, seat).expect("join (displacing)");
    }
    let last = w.records.last_mut().expect("a record");
    assert!(
        last.logs.iter().any(|l| l.contains("Program data")),
        "events"
    );
    last.label = "join_task (displacing, V = 15)".into();
    assert_eq!(w.task(&t4).tally().seats, 15);
    // the node with the fewest seats first: it stays silent and the others still decide
    let mut seated: Vec<&Actor> = big
        .iter()
        .filter(|v| w.task(&t4).seats_held_by(&v.node) > 0)
        .collect();
    seated.sort_by_key(|v| w.task(&t4).seats_held_by(&v.node));
    assert!(seated.len() >= 3, "the seats' races went to several nodes");
    // a verifier slashed for not revealing: its debt leaves the market's total by sync_stake
    let ballot = Ballot::new(VOTE_VALID, 40);
    for v in &seated {
        w.commit(v, t4, &ballot).expect("commit");
    }
    for v in &seated[1..] {
        w.reveal(v, t4, &ballot).expect("reveal");
    }
    let d = w.task(&t4).reveal_deadline;
    w.advance(d + 1 - w.slot());
    w.finalize(t4).expect("finalize");
    for v in &seated {
        w.settle(t4, v, 0).expect("settle");
    }
    w.sync(seated[0].node).expect("sync_stake");
    // a stranger sent tokens into the escrow: the close sends them to the treasury (the only
    // close that write-locks it)
    w.donate(&c, pda::escrow(&t4), 7).expect("donate");
    w.close(t4).expect("close with a donation");
    w.records.last_mut().expect("a record").label = "close_task (donated)".into();
    assert!(!w.exists(&t4));

    // disputes at the bounds of each job kind the program referees
    let mut dispute_txs = vec![];
    for (job, tile, element, kind) in [
        // at its bounds: 65 536 tiles of 4 096 nonces (128 KiB slots): 2^23 chunks, 23 siblings; 1 024 iterations
        (
            JobSpec::hash_batch(65_536, 4_096, 1_024, [1; 32]),
            40_000,
            4_095,
            "HashBatch",
        ),
        // at its bounds: 8 192³: 2^18 chunks, 18 siblings; k = 8 192 in four steps of 2 048 terms
        (
            JobSpec::matmul(8_192, 8_192, 8_192, [2; 32]),
            9_999,
            4_000,
            "MatMulModP",
        ),
    ] {
        let (records, txs) = dispute_at_bounds(job, tile, element, kind);
        dispute_txs.push((kind, txs));
        w.records.extend(records);
    }
    // on the client's data: a digits-shaped model (64-128-10, the class: every record), a
    // model of one-feature records (the most records a chunk holds), a product with k = 2 048
    // (each chunk pair costs the same at any k: 2 · ⌈k / 256⌉ chunks in all)
    let digits = random_model(&[64, 128, 10]);
    let x: Vec<i8> = (0..16 * 64).map(|i| (i % 17) as i8).collect();
    let (job, inputs) = disputes::Inputs::mlp(&digits, &x, 8);
    let (records, txs) = dispute_on_data(job, &inputs, (1, 10), "Mlp 64-128-10, class");
    dispute_txs.push(("Mlp 64-128-10 (class)", txs));
    w.records.extend(records);
    let narrow = random_model(&[1, 1_000, 4]);
    let x: Vec<i8> = (0..8).map(|i| i as i8).collect();
    let (job, inputs) = disputes::Inputs::mlp(&narrow, &x, 8);
    let (records, _) = dispute_on_data(job, &inputs, (0, 3), "Mlp 1-1000-4, 13-byte records");
    w.records.extend(records);
    let (m, k, n) = (2u32, 2_048u32, 2u32);
    let a: Vec<u32> = (0..m * k).map(|i| i * 7 + 1).collect();
    let b: Vec<u32> = (0..k * n).map(|i| i * 3 + 2).collect();
    let (job, inputs) = disputes::Inputs::matmul(&a, &b, [m, k, n]);
    let (records, txs) =
        dispute_on_data(job, &inputs, (0, 64 + 1), "MatMulModP on data, k = 2 048");
    dispute_txs.push(("MatMulModP on data, k = 2 048", txs));
    w.records.extend(records);
    w.records.extend(refutation_and_timeout());
    let (records, answer) = availability_at_bounds();
    println!("Availability at the bounds: 4 tiles of 16 KiB answered in {answer} transactions");
    w.records.extend(records);
    let (records, txs) = game_at_bounds();
    dispute_txs.push(("Mlp 64-4096-4096-4096 by a game against one defender", txs));
    w.records.extend(records);
    let (records, txs, steps) = encoder_games_at_scale();
    println!("Encoder at MiniLM's shape, a text of 128 tokens: a trace of {steps} steps");
    dispute_txs.push((
        "Encoder MiniLM-shaped, 128 tokens, by a game against one defender (an attention step)",
        txs,
    ));
    w.records.extend(records);
    let (records, txs, steps) = generate_games_at_scale();
    println!("Generate at SmolLM2's shape, a token after a prompt of 4: a trace of {steps} steps");
    dispute_txs.push((
        "Generate SmolLM2-shaped, by a game against one defender (a logit)",
        txs,
    ));
    w.records.extend(records);

    // first successful record of each instruction, in order of appearance
    let mut rows: Vec<&TxRecord> = vec![];
    for r in w.records.iter().filter(|r| r.ok) {
        if !rows.iter().any(|x| x.label == r.label) {
            rows.push(r);
        }
    }
    let mut failures = vec![];
    for r in &rows {
        let limit = if is_dispute(&r.label) {
            DISPUTE_CU_LIMIT
        } else {
            CU_LIMIT
        };
        if r.cu >= limit {
            failures.push(format!("{} uses {} CU (limit {limit})", r.label, r.cu));
        }
        if r.tx_bytes > PACKET {
            failures.push(format!(
                "{} takes {} bytes (a packet holds {PACKET})",
                r.label, r.tx_bytes
            ));
        }
        // "close_task (donated)": only when a stranger sent tokens into the escrow
        if TASK_PATH.contains(&r.label.as_str()) {
            for acc in r.writable.iter().filter(|a| a.ends_with('*')) {
                failures.push(format!(
                    "{} (task path) write-locks shared account {acc}",
                    r.label
                ));
            }
        }
    }
    let tx_per_task = |v: u64| 5 + 4 * v; // post, claim, submit, V×(join, commit, reveal), finalize, V×settle, close
    if json {
        let items: Vec<String> = rows
            .iter()
            .map(|r| {
                format!(
                    "{{\"instruction\":\"{}\",\"cu\":{},\"tx_bytes\":{},\"task_path\":{},\"writable\":[{}],\"shared_writable\":{},\"bytes_created\":{},\"bytes_closed\":{}}}",
                    r.label,
                    r.cu,
                    r.tx_bytes,
                    TASK_PATH.contains(&r.label.as_str()),
                    r.writable.iter().map(|a| format!("\"{}\"", a.trim_end_matches('*'))).collect::<Vec<_>>().join(","),
                    r.writable.iter().filter(|a| a.ends_with('*')).count(),
                    r.bytes_created,
                    r.bytes_closed
                )
            })
            .collect();
        println!(
            "{{\"instructions\":[{}],\"dispute_transactions\":{{{}}},\"transactions_per_task_v3_measured\":{task_txs},\"transactions_per_task\":{{{}}},\"so_bytes\":{},\"violations\":{}}}",
            items.join(","),
            dispute_txs.iter().map(|(k, n)| format!("\"{k}\":{n}")).collect::<Vec<_>>().join(","),
            [1u64, 3, 5, 7, 15].iter().map(|v| format!("\"{v}\":{}", tx_per_task(*v))).collect::<Vec<_>>().join(","),
            std::fs::metadata(program_path()).map(|m| m.len()).unwrap_or(0),
            failures.len()
        );
    } else {
        println!(
            "compute_market.so: {} bytes (litesvm 0.16 = Agave 4.2.2 runtime)",
            std::fs::metadata(program_path())
                .map(|m| m.len())
                .unwrap_or(0)
        );
        println!();
        println!(
            "{:<30} {:>8} {:>6}  {:>4}  {:>8} {:>8}  writable accounts (* = shared by all tasks)",
            "instruction", "CU", "bytes", "path", "created", "closed"
        );
        println!("{}", "-".repeat(120));
        for r in &rows {
            println!(
                "{:<30} {:>8} {:>6}  {:>4}  {:>8} {:>8}  {}",
                r.label,
                r.cu,
                r.tx_bytes,
                if TASK_PATH.contains(&r.label.as_str()) {
                    "task"
                } else {
                    ""
                },
                r.bytes_created,
                r.bytes_closed,
                r.writable.join(", ")
            );
        }
        println!();
        println!(
            "max CU: {} ({})",
            rows.iter().map(|r| r.cu).max().unwrap_or(0),
            rows.iter()
                .max_by_key(|r| r.cu)
                .map(|r| r.label.as_str())
                .unwrap_or("")
        );
        println!("transactions from post to close, V = 3: {task_txs} measured (5 + 4V)");
        for (k, n) in &dispute_txs {
            println!("a kind-1 dispute of {k}: {n} transactions from open to verdict");
        }
        for v in [1u64, 3, 5, 7, 15] {
            println!("  V = {v:>2}: {} transactions", tx_per_task(v));
        }
        let created: u64 = w
            .records
            .iter()
            .filter(|r| r.ok)
            .map(|r| r.bytes_created)
            .sum();
        let closed: u64 = w
            .records
            .iter()
            .filter(|r| r.ok)
            .map(|r| r.bytes_closed)
            .sum();
        println!("account bytes created {created}, closed {closed} over the whole run");
    }
    if !failures.is_empty() {
        for f in &failures {
            eprintln!("VIOLATION: {f}");
        }
        std::process::exit(1);
    }
    assert_eq!(
        task_txs as u64,
        tx_per_task(3),
        "the task took the expected number of transactions"
    );
}

use solana_signer::Signer;

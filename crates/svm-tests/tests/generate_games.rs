//! `Generate` disputes refereed by a game over one token's teacher-forced trace (PROTOCOL
//! §8.13): the program cannot run a decoder over a sequence in one dispute, so the challenger
//! claims the trace of the disputed token (the prompt and the committed earlier tokens its
//! inputs), a defender bisects it to one operation, and the program replays that operation
//! from proven pieces of the model, the prompts, the result and the agreed memory.
//!
//! Three colluders Accept a completion with one token changed: the client's claim overturns
//! it (a greedy token, and a sampled one whose pick the program recomputes). A right completion Rejected by lying INVALID votes is restored by the provider. A claim
//! against a right token loses its bond to one honest defender. A challenger that stops
//! answering loses at its deadline.

use compute_market::{pda, state::TaskStatus};
use compute_market_protocol::{
    commit::{VERDICT_CLAIMS_REFUTED, VERDICT_PROVEN_WRONG, VOTE_INVALID, VOTE_VALID},
    decoder::{argmax, random::random_decoder, Decoder, Sampling},
    dispute::{self, invalid_evidence, Method, DISPUTE_CLAIMS_FALSE},
    job::JobSpec,
    trace::{
        self,
        decoder::{
            build::{trace, Sources},
            Layout, Part,
        },
        Slots,
    },
};
use compute_market_svm_tests::{
    disputes::{proven_wrong_paid, stake, supply, wind_up, Committed, Inputs},
    games::Trace,
    *,
};

/// The dispute window: a game over this job's tokens fits it.
const D: u32 = 2_400;
/// Completions a tile.
const R_TILE: u8 = 2;
/// Prompt tokens, at most.
const LIMIT: u32 = 5;
/// New tokens, at most.
const G: u32 = 4;
/// The end-of-turn token.
const EOS: u32 = 1;
/// Words of a completion (its count, then G tokens).
const WORDS: u32 = G + 1;

fn market() -> compute_market::state::MarketArgs {
    compute_market::state::MarketArgs {
        dispute_window: D,
        ..test_market(1)
    }
}

fn params() -> compute_market::state::Params {
    compute_market::state::Params::defaults(20_000)
}

/// Greedy completion of `prompt` by `d`: up to G tokens, stopping after the end-of-turn token
/// or at the model's last position (as keepers generate).
fn complete(d: &Decoder, prompt: &[u32]) -> Vec<u32> {
    let mut out: Vec<u32> = vec![];
    while out.len() < G as usize {
        let seq: Vec<u32> = prompt.iter().chain(&out).copied().collect();
        let y = d.forward(&seq, &mut d.cache());
        let t = argmax(&d.logits(y.last().expect("a row"))) as u32;
        out.push(t);
        if t == EOS || prompt.len() + out.len() > d.positions() {
            break;
        }
    }
    out
}

struct Setup {
    job: JobSpec,
    inputs: Inputs,
    d: Decoder,
    prompts: Vec<Vec<u32>>,
    completions: Vec<Vec<u32>>,
}

fn setup() -> Setup {
    // one layer of width 64, four heads of 16 over two key/value heads, 53 tokens
    let d = random_decoder([1, 64, 96, 4, 2, 16, 53, 24], 17);
    d.check().unwrap();
    let prompts: Vec<Vec<u32>> = (0..6u64)
        .map(|r| {
            (0..2 + (r as usize * 3) % (LIMIT as usize - 1))
                .map(|p| {
                    2 + (compute_market_protocol::job::splitmix64(r << 8 | p as u64) % 51) as u32
                })
                .collect()
        })
        .collect();
    let completions = prompts.iter().map(|p| complete(&d, p)).collect();
    let (job, inputs) = Inputs::generate(&d, EOS, &prompts, (LIMIT, G), &Sampling::GREEDY, R_TILE);
    assert_eq!(dispute::method(&job, D), Some(Method::Game));
    Setup {
        job,
        inputs,
        d,
        prompts,
        completions,
    }
}

impl Setup {
    /// The committed result of `completions`: per completion its count and its tokens.
    fn result(&self, completions: &[Vec<u32>]) -> Committed {
        Committed::new(self.job, |t, e| {
            let (row, w) = ((t * R_TILE as u32 + e / WORDS) as usize, e % WORDS);
            let mut v = [0u8; 32];
            if let Some(c) = completions.get(row) {
                let word = if w == 0 {
                    c.len() as u32
                } else {
                    c.get(w as usize - 1).copied().unwrap_or(0)
                };
                v[..4].copy_from_slice(&word.to_le_bytes());
            }
            v
        })
    }

    /// The trace of token `j` of completion `row` over `result`'s earlier tokens, by the
    /// model's own strings: the truth.
    fn trace(&self, result: &Committed, row: u32, j: u32) -> Trace<Layout> {
        let inputs = self.inputs.with_result(result);
        let shape = compute_market_protocol::slices::decoder::read_header(
            &self.job,
            inputs.slices[0].len() as u64,
            &inputs.slices[0][..64],
        )
        .unwrap();
        let lay = Layout::new(
            shape,
            &self.job,
            row,
            self.prompts[row as usize].len() as u32,
            j,
        );
        trace(
            lay,
            &Sources {
                model: &inputs.slices[0],
                batch: &inputs.slices[1],
                result: &inputs.result,
                input: self.job.input,
            },
        )
        .unwrap()
    }

    /// A trace whose logit of token `t` is raised to the largest (every step after it
    /// computed from it): a liar's trace that picks `t`.
    fn lie_picking(&self, truth: &Trace<Layout>, t: u32, result: &Committed) -> Trace<Layout> {
        let inputs = self.inputs.with_result(result);
        let src = Sources {
            model: &inputs.slices[0],
            batch: &inputs.slices[1],
            result: &inputs.result,
            input: self.job.input,
        };
        let lay = truth.lay;
        let mut lie = truth.clone();
        let lg = lay.part_at(lay.t as u64, 0, Part::Lg) as usize + 4 * t as usize;
        lie.mem[lg..lg + 4].copy_from_slice(&(1i32 << 30).to_le_bytes());
        // the scan and the token, recomputed over the raised logit
        let first = lay.steps() - (lay.shape.vocab as u64).div_ceil(256);
        for s in first..=lay.steps() {
            let (v, _) = trace::decoder::build::replay(&lay, s, &src, &lie.mem).unwrap();
            let (at, w) = lay.slot(s);
            lie.mem[at as usize..at as usize + w].copy_from_slice(&v);
        }
        assert_eq!(lie.word(0), t.to_le_bytes(), "the lie picks {t}");
        lie
    }
}

/// The token a trace picks (its one word).
#[allow(dead_code)]
trait Token {
    fn word(&self, w: u32) -> [u8; 4];
}

impl Token for Trace<Layout> {
    fn word(&self, _: u32) -> [u8; 4] {
        let at = self.lay.token_at() as usize;
        self.mem[at..at + 4].try_into().unwrap()
    }
}

/// Completion 3's token 2, as (tile, element, word).
const ROW: u32 = 3;
const J: u32 = 2;
fn disputed() -> (u32, u32, u32) {
    let (tile, in_tile) = (ROW / R_TILE as u32, ROW % R_TILE as u32);
    (tile, in_tile * WORDS + 1 + J, 1 + J)
}

#[test]
fn three_colluders_accepting_one_changed_token_are_overturned_by_the_clients_claim() {
    let s = setup();
    let (tile, element, word) = disputed();
    let right_token = s.completions[ROW as usize][J as usize];
    let changed = (right_token + 7) % 53;
    let mut wrong_completions = s.completions.clone();
    wrong_completions[ROW as usize][J as usize] = changed;
    let wrong = s.result(&wrong_completions);
    let mut c = cast_with(3, 1, params(), market());
    let task = c.submitted_job(1, s.job, s.job.tile_count() as u16, wrong.root());
    let before = supply(&c.w);
    let w = &mut c.w;
    let vs: Vec<&Actor> = c.verifiers.iter().collect();
    w.vouch(task, &vs, 0);
    let (client, provider) = (c.client.clone(), c.provider.clone());
    // token 2's trace over the committed tokens 0 and 1 (right ones): it picks the right token
    let truth = s.trace(&wrong, ROW, J);
    assert_eq!(truth.word(0), right_token.to_le_bytes());
    let lie = s.lie_picking(&truth, changed, &wrong);
    let inputs = s.inputs.with_result(&wrong);

    w.open_dispute(&client, task, 1, tile, element).unwrap();
    w.prove_element(&client, task, &wrong, tile, element)
        .unwrap();
    refused(w, "NeedsGame", |w| w.dispute_step(&client, task, None, 1));
    w.prove_inputs(&client, task, &inputs).unwrap();
    refused(w, "NotLaidOut", |w| {
        w.claim_trace(&client, task, &truth, word)
    });
    w.lay_out(&client, task, &inputs)
        .unwrap_or_else(|r| panic!("{:?}\n{}", r.error, r.logs.join("\n")));
    refused(w, "ClaimContradicts", |w| {
        w.claim_trace(&client, task, &lie, word)
    });
    w.claim_trace(&client, task, &truth, word)
        .unwrap_or_else(|r| panic!("{:?}\n{}", r.error, r.logs.join("\n")));

    // the provider defends by its trace (the changed token's logit raised), and loses
    w.donate(&client, provider.wallet, R).unwrap();
    w.defend(&provider, task, &client).unwrap();
    let g = w
        .bisect(&client, &truth, &provider, &lie, task)
        .unwrap()
        .expect("one step left");
    let step = truth.lay.step(g.hi).unwrap();
    assert_eq!(
        (step.part, step.i),
        (Part::Lg, changed),
        "the game ends at the changed token's logit"
    );
    let game = w
        .replay(&provider, task, &client, &lie, &inputs)
        .unwrap_or_else(|r| panic!("{:?}\n{}", r.error, r.logs.join("\n")));
    assert!(w.game(&task, &client, &provider).is_none(), "won: closed");
    let most = game.iter().map(|r| r.cu).max().unwrap();
    let steps = truth.lay.steps();
    println!(
        "Generate game over {steps} steps ({} levels): the logit replayed in {} transactions, at most {most} CU",
        trace::levels(steps),
        game.len()
    );
    assert!(most < 1_400_000);
    let d = w.dispute(&task, &client).unwrap();
    w.advance_past(d.defend_deadline);
    w.resolve(&client, task, None)
        .unwrap_or_else(|r| panic!("{:?}\n{}", r.error, r.logs.join("\n")));
    let t = w.task(&task);
    assert_eq!(
        (t.status, t.tally().majority),
        (TaskStatus::Rejected, VERDICT_PROVEN_WRONG)
    );
    // the provider's bond slashed, the three vouchers' bonds, the client refunded
    proven_wrong_paid(w, task, tile, &provider, &client, &vs, 2, before);
}

#[test]
fn a_right_completion_rejected_by_lying_votes_is_restored_by_the_provider() {
    let s = setup();
    let right = s.result(&s.completions);
    let (tile, element, word) = disputed();
    let mut c = cast_with(3, 1, params(), market());
    let task = c.submitted_job(1, s.job, 3, right.root());
    let before = supply(&c.w);
    let w = &mut c.w;
    let [v0, v1, v2] = [&c.verifiers[0], &c.verifiers[1], &c.verifiers[2]];
    let invalid_at = |tag: u64| {
        let mut b = Ballot::new(VOTE_INVALID, tag);
        b.evidence = invalid_evidence(tile, element, &b.evidence);
        b
    };
    w.decide(
        task,
        &[
            (v0, Ballot::new(VOTE_VALID, 1)),
            (v1, invalid_at(2)),
            (v2, invalid_at(3)),
        ],
    );
    assert_eq!(w.task(&task).status, TaskStatus::Rejected);
    let provider = c.provider.clone();
    w.donate(&c.client, provider.wallet, R).unwrap();
    let second = w.actor("provider.second", 10 * R);
    let truth = s.trace(&right, ROW, J);
    let inputs = s.inputs.with_result(&right);
    let votes = [pda::vote(&task, &v1.node, 0), pda::vote(&task, &v2.node, 0)];
    // one kind-2 dispute a vote, from two wallets, in parallel: each claims the token's trace
    for (who, vote) in [(&provider, votes[0]), (&second, votes[1])] {
        w.open_dispute(who, task, DISPUTE_CLAIMS_FALSE, 0, 0)
            .unwrap();
        w.dispute_target(who, task, vote).unwrap();
        w.prove_element(who, task, &right, tile, element).unwrap();
        w.prove_inputs(who, task, &inputs).unwrap();
        w.lay_out(who, task, &inputs).unwrap();
        w.claim_trace(who, task, &truth, word)
            .unwrap_or_else(|r| panic!("{:?}\n{}", r.error, r.logs.join("\n")));
    }
    // the first liar defends by a trace that picks another token, and loses; the second stays
    // silent
    let lie = s.lie_picking(
        &truth,
        (s.completions[ROW as usize][J as usize] + 1) % 53,
        &right,
    );
    w.donate(&c.client, v1.wallet, R).unwrap();
    w.defend(v1, task, &provider).unwrap();
    w.play(&provider, &truth, v1, &lie, task, &inputs)
        .unwrap_or_else(|r| panic!("{:?}\n{}", r.error, r.logs.join("\n")));
    let d = w.dispute(&task, &provider).unwrap();
    w.advance_past(d.defend_deadline);
    for (who, vote) in [(&provider, votes[0]), (&second, votes[1])] {
        w.resolve(who, task, Some(vote))
            .unwrap_or_else(|r| panic!("{:?}\n{}", r.error, r.logs.join("\n")));
    }
    let t = w.task(&task);
    assert_eq!(
        (t.status, t.tally().majority),
        (TaskStatus::Accepted, VERDICT_CLAIMS_REFUTED)
    );
    let vb = t.verifier_bond;
    let stakes: Vec<u64> = [v1, v2].iter().map(|v| stake(w, v)).collect();
    // the provider's dispute is moot now (the second's refuted the last vote): its bond back,
    // and v1's, whose game it won
    let wallet = w.balance(&provider.wallet);
    w.close_dispute(task, &provider).unwrap();
    assert_eq!(w.balance(&provider.wallet), wallet + 2 * vb);
    w.conclude(task).unwrap();
    wind_up(w, task, &[v0, v1, v2], &[&second]);
    assert_eq!(stake(w, v1), stakes[0] - vb, "a false statement");
    assert_eq!(stake(w, v2), stakes[1] - vb, "a false statement");
    assert_eq!(
        supply(w),
        before + 10 * R,
        "conserved (the second wallet's tokens added)"
    );
}

#[test]
fn a_claim_against_a_right_token_loses_its_bond_and_a_silent_challenger_its_dispute() {
    let s = setup();
    let right = s.result(&s.completions);
    let (tile, element, word) = disputed();
    let mut c = cast_with(3, 1, params(), market());
    let task = c.submitted_job(1, s.job, 3, right.root());
    let stranger = c.w.actor("stranger", 10 * R);
    let w = &mut c.w;
    let vs: Vec<&Actor> = c.verifiers.iter().collect();
    w.vouch(task, &vs, 10);
    let truth = s.trace(&right, ROW, J);
    let lie = s.lie_picking(
        &truth,
        (s.completions[ROW as usize][J as usize] + 3) % 53,
        &right,
    );
    let inputs = s.inputs.with_result(&right);
    w.claim_against(
        &stranger,
        task,
        &right,
        (tile, element),
        &inputs,
        &lie,
        word,
    )
    .unwrap_or_else(|r| panic!("{:?}\n{}", r.error, r.logs.join("\n")));
    let honest = vs[1];
    w.donate(&c.client, honest.wallet, R).unwrap();
    let honest_wallet = w.balance(&honest.wallet);
    w.defend(honest, task, &stranger).unwrap();
    w.play(&stranger, &lie, honest, &truth, task, &inputs)
        .unwrap_or_else(|r| panic!("{:?}\n{}", r.error, r.logs.join("\n")));
    assert!(w.dispute(&task, &stranger).is_none(), "lost: closed");
    let vb = w.task(&task).verifier_bond;
    assert_eq!(
        w.balance(&honest.wallet),
        honest_wallet + vb,
        "its bond back and the challenger's"
    );
    assert_eq!(w.task(&task).status, TaskStatus::Accepted);

    // a second stranger opens a dispute of the same token and goes silent: it loses its bond
    // at its deadline
    let quiet = w.actor("quiet", 10 * R);
    let wallet = w.balance(&quiet.wallet);
    w.open_dispute(&quiet, task, 1, tile, element).unwrap();
    w.prove_element(&quiet, task, &right, tile, element)
        .unwrap();
    let d = w.dispute(&task, &quiet).unwrap();
    refused(w, "DisputeNotExpired", |w| w.dispute_timeout(task, &quiet));
    w.advance_past(d.answer_deadline);
    w.dispute_timeout(task, &quiet).unwrap();
    assert!(w.dispute(&task, &quiet).is_none());
    assert_eq!(w.balance(&quiet.wallet), wallet - vb, "its bond forfeit");
}

#[test]
fn a_sampled_token_is_refereed_and_a_short_window_referees_nothing() {
    let s = setup();
    // the least window a game over this job fits, and one slot less
    let least = (1..=D)
        .find(|&w| trace::clock(&s.job, w).is_some())
        .unwrap();
    assert_eq!(dispute::method(&s.job, least - 1), None);
    println!("this Generate job is refereed from a window of {least} slots");
    // a job that names no slices is not refereed
    let unsliced = JobSpec {
        slices_len: 0,
        ..s.job
    };
    assert_eq!(dispute::method(&unsliced, D), None);
    // the tile's words: R · (G + 1)
    assert_eq!(dispute::elements_per_tile(&s.job), R_TILE as u32 * WORDS);
    // a sampled job: the layout reads its rule; the token's trace searches for the drawn
    // candidate (the k-th key, the whole weight, the top-p cut, the draw's candidate)
    let sampled = Sampling {
        temperature: 256,
        top_k: 5,
        top_p: 60_000,
        seed: 9,
    };
    let (job2, inputs2) = Inputs::generate(&s.d, EOS, &s.prompts, (LIMIT, G), &sampled, R_TILE);
    let (tile, element, word) = disputed();
    // the sampled token's truth over the committed tokens before it; the committed one another
    let base = s.result(&s.completions);
    let copy = |job: JobSpec, from: &Committed, changed: Option<u32>| {
        Committed::new(job, |t, e| {
            let mut v = [0u8; 32];
            let w = dispute::element_width(&job);
            v[..4].copy_from_slice(&from.tiles[t as usize][e as usize * w..e as usize * w + 4]);
            if let (Some(x), true) = (changed, (t, e) == (tile, element)) {
                v[..4].copy_from_slice(&x.to_le_bytes());
            }
            v
        })
    };
    let probe = copy(job2, &base, None);
    let lay_of = |result: &Committed| {
        let inputs = inputs2.with_result(result);
        let shape = compute_market_protocol::slices::decoder::read_header(
            &job2,
            inputs.slices[0].len() as u64,
            &inputs.slices[0][..64],
        )
        .unwrap();
        let lay = Layout::new(shape, &job2, ROW, s.prompts[ROW as usize].len() as u32, J)
            .with_sampling(true);
        trace(
            lay,
            &Sources {
                model: &inputs.slices[0],
                batch: &inputs.slices[1],
                result: &inputs.result,
                input: job2.input,
            },
        )
        .unwrap()
    };
    let drawn = u32::from_le_bytes(probe_word(&lay_of(&probe)));
    let wrong = copy(job2, &base, Some((drawn + 1) % 53));
    let truth = lay_of(&wrong);
    assert_eq!(
        probe_word(&truth),
        drawn.to_le_bytes(),
        "the earlier tokens are unchanged"
    );
    let inputs2 = inputs2.with_result(&wrong);
    let mut c = cast_with(3, 1, params(), market());
    let task2 = c.submitted_job(2, job2, 3, wrong.root());
    let (client, provider) = (c.client.clone(), c.provider.clone());
    let w = &mut c.w;
    let vs: Vec<&Actor> = c.verifiers.iter().collect();
    w.vouch(task2, &vs, 30);
    w.claim_against(
        &client,
        task2,
        &wrong,
        (tile, element),
        &inputs2,
        &truth,
        word,
    )
    .unwrap_or_else(|r| panic!("{:?}\n{}", r.error, r.logs.join("\n")));
    // the provider defends by a trace that departs at the draw's search, and loses there
    let lay = truth.lay;
    let at = (1..=lay.steps())
        .rev()
        .find(|&st| lay.step(st).unwrap().part == Part::Sd)
        .unwrap();
    let mut lie = truth.clone();
    let (off, width) = Slots::slot_of(&lay, at);
    lie.mem[off as usize + width - 1] ^= 0x40;
    let tok = lay.token_at() as usize;
    lie.mem[tok..tok + 4].copy_from_slice(&((drawn + 1) % 53).to_le_bytes());
    w.donate(&client, provider.wallet, R).unwrap();
    w.defend(&provider, task2, &client).unwrap();
    let g = w
        .bisect(&client, &truth, &provider, &lie, task2)
        .unwrap()
        .expect("one step left");
    assert_eq!(g.hi, at, "the lie's first wrong step: the draw's search");
    w.replay(&provider, task2, &client, &lie, &inputs2)
        .unwrap_or_else(|r| panic!("{:?}\n{}", r.error, r.logs.join("\n")));
    let d = w.dispute(&task2, &client).unwrap();
    w.advance_past(d.defend_deadline);
    w.resolve(&client, task2, None)
        .unwrap_or_else(|r| panic!("{:?}\n{}", r.error, r.logs.join("\n")));
    let t = w.task(&task2);
    assert_eq!(
        (t.status, t.tally().majority),
        (TaskStatus::Rejected, VERDICT_PROVEN_WRONG)
    );
}

/// The word a token's trace writes last.
fn probe_word(t: &Trace<Layout>) -> [u8; 4] {
    let at = t.lay.token_at() as usize;
    t.mem[at..at + 4].try_into().unwrap()
}

#[test]
fn a_completion_run_past_its_end_of_turn_is_overturned_by_its_count_and_a_right_count_stands() {
    let s = setup();
    let (tile, element, _) = disputed();
    let count_element = element - 1 - J;
    // completion 3 with an end of turn at token 1, and G tokens committed all the same
    let mut ran_on = s.completions.clone();
    ran_on[ROW as usize][1] = EOS;
    let wrong = s.result(&ran_on);
    let inputs = s.inputs.with_result(&wrong);
    let count_trace = |result: &Committed| {
        let inputs = s.inputs.with_result(result);
        let shape = compute_market_protocol::slices::decoder::read_header(
            &s.job,
            inputs.slices[0].len() as u64,
            &inputs.slices[0][..64],
        )
        .unwrap();
        let lay = Layout::count_of(shape, &s.job, ROW, s.prompts[ROW as usize].len() as u32);
        trace(
            lay,
            &Sources {
                model: &inputs.slices[0],
                batch: &inputs.slices[1],
                result: &inputs.result,
                input: s.job.input,
            },
        )
        .unwrap()
    };
    let truth = count_trace(&wrong);
    assert_eq!(
        truth.word(0),
        2u32.to_le_bytes(),
        "the count the tokens give"
    );
    let mut lie = truth.clone();
    let at = lie.lay.token_at() as usize;
    lie.mem[at..at + 4].copy_from_slice(&G.to_le_bytes());

    let mut c = cast_with(3, 1, params(), market());
    let task = c.submitted_job(1, s.job, s.job.tile_count() as u16, wrong.root());
    let before = supply(&c.w);
    let w = &mut c.w;
    let vs: Vec<&Actor> = c.verifiers.iter().collect();
    w.vouch(task, &vs, 0);
    let (client, provider) = (c.client.clone(), c.provider.clone());
    w.claim_against(
        &client,
        task,
        &wrong,
        (tile, count_element),
        &inputs,
        &truth,
        0,
    )
    .unwrap_or_else(|r| panic!("{:?}\n{}", r.error, r.logs.join("\n")));
    w.donate(&client, provider.wallet, R).unwrap();
    w.defend(&provider, task, &client).unwrap();
    let game = w
        .play(&client, &truth, &provider, &lie, task, &inputs)
        .unwrap_or_else(|r| panic!("{:?}\n{}", r.error, r.logs.join("\n")));
    println!(
        "a count's game over {} steps: {} transactions",
        truth.lay.steps(),
        game.len()
    );
    let d = w.dispute(&task, &client).unwrap();
    w.advance_past(d.defend_deadline);
    w.resolve(&client, task, None)
        .unwrap_or_else(|r| panic!("{:?}\n{}", r.error, r.logs.join("\n")));
    let t = w.task(&task);
    assert_eq!(
        (t.status, t.tally().majority),
        (TaskStatus::Rejected, VERDICT_PROVEN_WRONG)
    );
    proven_wrong_paid(w, task, tile, &provider, &client, &vs, 2, before);

    // a right count: a claim against it loses to an honest defender
    let right = s.result(&s.completions);
    let mut c = cast_with(3, 1, params(), market());
    let task = c.submitted_job(1, s.job, 3, right.root());
    let stranger = c.w.actor("stranger", 10 * R);
    let w = &mut c.w;
    let vs: Vec<&Actor> = c.verifiers.iter().collect();
    w.vouch(task, &vs, 10);
    let truth = count_trace(&right);
    assert_eq!(truth.word(0), G.to_le_bytes());
    let mut lie = truth.clone();
    let at = lie.lay.token_at() as usize;
    lie.mem[at..at + 4].copy_from_slice(&1u32.to_le_bytes());
    let inputs = s.inputs.with_result(&right);
    w.claim_against(
        &stranger,
        task,
        &right,
        (tile, count_element),
        &inputs,
        &lie,
        0,
    )
    .unwrap_or_else(|r| panic!("{:?}\n{}", r.error, r.logs.join("\n")));
    w.donate(&c.client, vs[0].wallet, R).unwrap();
    w.defend(vs[0], task, &stranger).unwrap();
    w.play(&stranger, &lie, vs[0], &truth, task, &inputs)
        .unwrap_or_else(|r| panic!("{:?}\n{}", r.error, r.logs.join("\n")));
    assert!(w.dispute(&task, &stranger).is_none(), "lost: closed");
    assert_eq!(w.task(&task).status, TaskStatus::Accepted);
}

#[test]
fn every_kind_of_generate_step_replays_on_chain() {
    // one honest defender against a claim wrong at a step of each part in turn (its value and
    // the token changed): the game narrows to that step, the program replays it, the claim
    // loses
    let s = setup();
    let right = s.result(&s.completions);
    let (tile, element, word) = disputed();
    let truth = s.trace(&right, ROW, J);
    let lay = truth.lay;
    let inputs = s.inputs.with_result(&right);
    // a step of every part: the last block's (layer 0 of the last position), the tail's
    let mut wanted: Vec<u64> = vec![];
    let mut seen = std::collections::BTreeSet::new();
    for st in (1..=lay.steps()).rev() {
        let p = lay.step(st).unwrap();
        if seen.insert(format!("{:?}", p.part)) {
            wanted.push(st);
        }
    }
    assert_eq!(wanted.len(), 23, "a step of every part");
    let mut rows = vec![];
    for st in wanted {
        let mut c = cast_with(3, 1, params(), market());
        let task = c.submitted_job(1, s.job, 3, right.root());
        let stranger = c.w.actor("stranger", 10 * R);
        let w = &mut c.w;
        let vs: Vec<&Actor> = c.verifiers.iter().collect();
        w.vouch(task, &vs, 10);
        let mut lie = truth.clone();
        let (at, _) = lay.slot(st);
        lie.mem[at as usize] ^= 1;
        let tok = lay.token_at() as usize;
        if st != lay.token_step() {
            lie.mem[tok] ^= 2;
        }
        w.claim_against(
            &stranger,
            task,
            &right,
            (tile, element),
            &inputs,
            &lie,
            word,
        )
        .unwrap_or_else(|r| panic!("{:?}\n{}", r.error, r.logs.join("\n")));
        let honest = vs[0];
        w.donate(&c.client, honest.wallet, R).unwrap();
        w.defend(honest, task, &stranger).unwrap();
        let g = w
            .bisect(&stranger, &lie, honest, &truth, task)
            .unwrap()
            .expect("one step left");
        assert_eq!(g.hi, st);
        let replayed = w
            .replay(honest, task, &stranger, &truth, &inputs)
            .unwrap_or_else(|r| {
                panic!("{:?} at {:?}\n{}", r.error, lay.step(st), r.logs.join("\n"))
            });
        assert!(w.dispute(&task, &stranger).is_none(), "lost: closed");
        let most = replayed.iter().map(|r| r.cu).max().unwrap();
        rows.push(format!(
            "{:?}: {} transactions, at most {most} CU",
            lay.step(st).unwrap().part,
            replayed.len()
        ));
        assert!(most < 1_400_000);
    }
    println!(
        "each part's step replayed on chain:\n  {}",
        rows.join("\n  ")
    );
}

#[test]
fn an_honest_claim_of_a_changed_token_beats_eight_sybils_in_the_slots_of_one() {
    use compute_market_svm_tests::games::{vouched_with_sybils, Claimed};
    // the client's claim of a changed token's trace, defended by 1 and by 8 sybils of the
    // provider fanning out and stalling (PROTOCOL §8.10, "Many opponents")
    let s = setup();
    let (tile, element, word) = disputed();
    let mut wrong_completions = s.completions.clone();
    let right_token = wrong_completions[ROW as usize][J as usize];
    wrong_completions[ROW as usize][J as usize] = (right_token + 7) % 53;
    let wrong = s.result(&wrong_completions);
    let truth = s.trace(&wrong, ROW, J);
    let inputs = s.inputs.with_result(&wrong);
    let run = |n: usize| {
        let mut c = cast_with(3, 1, params(), market());
        let (task, sybils) = vouched_with_sybils(&mut c, s.job, wrong.root(), n);
        let claim = Claimed {
            committed: &wrong,
            at: (tile, element),
            inputs: &inputs,
            truth: &truth,
            word,
        };
        c.w.against_sybils(task, &c.client, &claim, &sybils)
    };
    let (one, eight) = (run(1), run(8));
    let levels = trace::levels(truth.lay.steps()) as usize;
    for (n, x) in [(1, &one), (8, &eight)] {
        println!(
            "Generate, {n} sybil defender(s): the challenger sent {} transactions ({} splits) over {} slots from opening to verdict, and is owed {} tokens",
            x.transactions(),
            x.splits,
            x.slots,
            x.gained
        );
    }
    assert_eq!(eight.slots, one.slots, "the slots of one");
    assert_eq!((eight.claim, eight.resolve), (one.claim, one.resolve));
    assert!(one.splits <= levels && eight.splits <= 8 * levels);
    assert!(
        eight.splits > one.splits,
        "fanning out forces splits of their own"
    );
    assert_eq!(eight.gained, 9 * (one.gained / 2), "every sybil's bond");
}

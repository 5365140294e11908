//! `Encoder` disputes refereed by a game over one text's trace (PROTOCOL §8.10): the program
//! cannot recompute a text through every block in one dispute, so the challenger claims its
//! trace of the text, a defender bisects it to one operation on one token, and the program
//! replays that operation from proven pieces of the model, the texts' ids and the agreed
//! memory. A right claim overturns three colluders' Accepted embedding; a wrong claim against
//! a right embedding loses to one honest defender.

use compute_market::state::TaskStatus;
use compute_market_protocol::{
    commit::VERDICT_PROVEN_WRONG,
    dispute::{self, Method},
    encoder::{random_encoder, Encoder, RandomShape},
    job::JobSpec,
    trace::{self, encoder::Step, Slots},
};
use compute_market_svm_tests::{
    disputes::{proven_wrong_paid, supply, Committed, Inputs},
    games::Trace,
    *,
};

/// The dispute window: a game over a text of 8 tokens fits it.
const D: u32 = 2_400;
/// Texts a tile.
const R_TILE: u8 = 4;
/// Tokens a text, at most.
const LIMIT: u32 = 8;
/// Words of an embedding (H / 2).
const WORDS: u32 = 8;

fn market() -> compute_market::state::MarketArgs {
    compute_market::state::MarketArgs {
        dispute_window: D,
        ..test_market(1)
    }
}

fn params() -> compute_market::state::Params {
    compute_market::state::Params::defaults(20_000)
}

struct Setup {
    job: JobSpec,
    inputs: Inputs,
    right: Encoder,
    /// The same encoder with the last block's feed-forward-out biases moved: what a cheating
    /// provider runs.
    cheat: Encoder,
    texts: Vec<Vec<u32>>,
}

fn setup() -> Setup {
    let shape = RandomShape {
        hidden: 2 * WORDS as usize,
        heads: 2,
        ffn: 24,
        blocks: 2,
        vocab: 64,
        positions: LIMIT as usize,
    };
    let right = random_encoder(shape, 31);
    right.check().unwrap();
    let mut cheat = right.clone();
    for b in cheat.blocks[1].f2.bias.iter_mut() {
        // (its outputs are int16 GELU values: the bias moves by as many of them as 700 int8 ones)
        *b += 700 << 8;
    }
    let texts: Vec<Vec<u32>> = (0..12u64)
        .map(|r| {
            (0..1 + (r as usize * 5) % LIMIT as usize)
                .map(|p| (compute_market_protocol::job::splitmix64(r << 8 | p as u64) % 64) as u32)
                .collect()
        })
        .collect();
    let (job, inputs) = Inputs::encoder(&right, &texts, LIMIT, R_TILE);
    assert_eq!(dispute::method(&job, D), Some(Method::Game));
    Setup {
        job,
        inputs,
        right,
        cheat,
        texts,
    }
}

impl Setup {
    /// The result `model` gives: each text's embedding, its words the elements.
    fn result(&self, model: &Encoder) -> Committed {
        let rows: Vec<Vec<u8>> = self
            .texts
            .iter()
            .map(|t| {
                model
                    .embed(t)
                    .iter()
                    .flat_map(|v| v.to_le_bytes())
                    .collect()
            })
            .collect();
        Committed::new(self.job, |t, e| {
            let (row, w) = (
                (t * R_TILE as u32 + e / WORDS) as usize,
                (e % WORDS) as usize,
            );
            let mut v = [0u8; 32];
            if let Some(r) = rows.get(row) {
                v[..4].copy_from_slice(&r[4 * w..4 * w + 4]);
            }
            v
        })
    }

    fn trace(&self, model: &Encoder, row: usize) -> Trace<trace::encoder::Layout> {
        Trace::of_text(model, &self.texts[row])
    }

    /// Text 6's first word where the cheat's embedding differs: (tile, element, word).
    fn disputed(&self) -> (u32, u32, u32) {
        let (a, b) = (self.trace(&self.right, 6), self.trace(&self.cheat, 6));
        let w = (0..WORDS).find(|&w| a.word(w) != b.word(w));
        let w = w.expect("the cheat's embedding differs");
        (1, 2 * WORDS + w, w)
    }
}

#[test]
fn a_right_claim_of_a_text_overturns_three_colluders() {
    let s = setup();
    let wrong = s.result(&s.cheat);
    let (tile, element, word) = s.disputed();
    let mut c = cast_with(3, 1, params(), market());
    let task = c.submitted_job(1, s.job, s.job.tile_count() as u16, wrong.root());
    let before = supply(&c.w);
    let w = &mut c.w;
    let vs: Vec<&Actor> = c.verifiers.iter().collect();
    w.vouch(task, &vs, 0);
    let (client, provider) = (c.client.clone(), c.provider.clone());
    let truth = s.trace(&s.right, 6);
    let lie = s.trace(&s.cheat, 6);

    w.open_dispute(&client, task, 1, tile, element).unwrap();
    w.prove_element(&client, task, &wrong, tile, element)
        .unwrap();
    refused(w, "NeedsGame", |w| w.dispute_step(&client, task, None, 1));
    w.prove_inputs(&client, task, &s.inputs).unwrap();
    refused(w, "NotLaidOut", |w| {
        w.claim_trace(&client, task, &truth, word)
    });
    w.lay_out(&client, task, &s.inputs)
        .unwrap_or_else(|r| panic!("{:?}\n{}", r.error, r.logs.join("\n")));
    refused(w, "ClaimContradicts", |w| {
        w.claim_trace(&client, task, &lie, word)
    });
    w.claim_trace(&client, task, &truth, word)
        .unwrap_or_else(|r| panic!("{:?}\n{}", r.error, r.logs.join("\n")));

    // the provider defends by its own (wrong) trace, and loses the game
    w.donate(&client, provider.wallet, R).unwrap();
    w.defend(&provider, task, &client).unwrap();
    let game = w
        .play(&client, &truth, &provider, &lie, task, &s.inputs)
        .unwrap_or_else(|r| panic!("{:?}\n{}", r.error, r.logs.join("\n")));
    assert!(w.game(&task, &client, &provider).is_none(), "won: closed");
    let splits = game.iter().filter(|r| r.label == "game_split").count();
    let feeds = game.iter().filter(|r| r.label == "game_feed").count();
    let steps = truth.lay.steps();
    assert!(splits as u32 <= trace::levels(steps), "{splits} splits");
    let most = game.iter().map(|r| r.cu).max().unwrap();
    println!(
        "encoder game over {steps} steps: {splits} splits, {feeds} pieces replayed, {} transactions, at most {most} CU",
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

    // the money of a proven-wrong verdict: the client paid its bond and the provider's
    proven_wrong_paid(w, task, tile, &provider, &client, &vs, 2, before);
}

#[test]
fn a_wrong_claim_against_a_right_embedding_loses_to_one_honest_defender() {
    let s = setup();
    let right = s.result(&s.right);
    let (tile, element, word) = s.disputed();
    let mut c = cast_with(3, 1, params(), market());
    let task = c.submitted_job(1, s.job, 3, right.root());
    let stranger = c.w.actor("stranger", 10 * R);
    let w = &mut c.w;
    let vs: Vec<&Actor> = c.verifiers.iter().collect();
    w.vouch(task, &vs, 10);
    let truth = s.trace(&s.right, 6);
    let lie = s.trace(&s.cheat, 6);

    w.claim_against(
        &stranger,
        task,
        &right,
        (tile, element),
        &s.inputs,
        &lie,
        word,
    )
    .unwrap();
    let honest = vs[1];
    w.donate(&c.client, honest.wallet, R).unwrap();
    let honest_wallet = w.balance(&honest.wallet);
    w.defend(honest, task, &stranger).unwrap();
    let g = w
        .bisect(&stranger, &lie, honest, &truth, task)
        .unwrap()
        .expect("one step left");
    assert_eq!(g.hi - g.lo, 1, "one step left");
    // the cheat moved the last block's feed-forward-out biases: its first wrong value is
    // a second residual sum of block 1
    let step = truth.lay.step(g.hi).unwrap();
    assert!(
        matches!(
            step,
            Step::Res {
                b: 1,
                second: true,
                ..
            }
        ),
        "the lie's first wrong step: {step:?}"
    );
    let replayed = w
        .replay(honest, task, &stranger, &truth, &s.inputs)
        .unwrap_or_else(|r| panic!("{:?}\n{}", r.error, r.logs.join("\n")));
    let most = replayed.iter().map(|r| r.cu).max().unwrap();
    println!(
        "a residual step replayed in {} transactions, at most {most} CU",
        replayed.len()
    );
    assert!(w.dispute(&task, &stranger).is_none(), "lost: closed");
    let vb = w.task(&task).verifier_bond;
    assert_eq!(
        w.balance(&honest.wallet),
        honest_wallet + vb,
        "its bond back and the challenger's"
    );
}

#[test]
fn every_kind_of_encoder_step_replays_on_chain() {
    // one honest defender against a claim that is wrong at each kind of step in turn: the
    // game narrows to that step, the program replays it and the claim loses
    let s = setup();
    let right = s.result(&s.right);
    let (tile, element, word) = s.disputed();
    let truth = s.trace(&s.right, 6);
    let lay = truth.lay;
    let mut kinds: Vec<u64> = vec![];
    let mut seen = std::collections::HashSet::new();
    for st in 1..=lay.steps() {
        if seen.insert(std::mem::discriminant(&lay.step(st).unwrap())) {
            kinds.push(st);
        }
    }
    assert_eq!(kinds.len(), 9);
    for st in kinds {
        let mut c = cast_with(3, 1, params(), market());
        let task = c.submitted_job(1, s.job, 3, right.root());
        let stranger = c.w.actor("stranger", 10 * R);
        let w = &mut c.w;
        let vs: Vec<&Actor> = c.verifiers.iter().collect();
        w.vouch(task, &vs, 10);
        // the lie: the truth with step st's slot changed, and every later step computed on
        // from it would differ too; only its first wrong step matters to the game
        let mut lie = truth.clone();
        let (off, width) = lay.slot_of(st);
        lie.mem[off as usize + width - 1] ^= 0x11;
        let off = lay.word_at(word) as usize;
        lie.mem[off] ^= 1;
        w.claim_against(
            &stranger,
            task,
            &right,
            (tile, element),
            &s.inputs,
            &lie,
            word,
        )
        .unwrap();
        let honest = vs[1];
        w.donate(&c.client, honest.wallet, R).unwrap();
        w.defend(honest, task, &stranger).unwrap();
        let g = w
            .bisect(&stranger, &lie, honest, &truth, task)
            .unwrap()
            .expect("one step left");
        assert_eq!(g.hi, st, "narrowed to the changed step");
        let replayed = w
            .replay(honest, task, &stranger, &truth, &s.inputs)
            .unwrap_or_else(|r| panic!("{:?}: {:?}\n{}", lay.step(st), r.error, r.logs.join("\n")));
        let most = replayed.iter().map(|r| r.cu).max().unwrap();
        println!(
            "{:?}: {} transactions, at most {most} CU",
            lay.step(st).unwrap(),
            replayed.len()
        );
        assert!(
            w.dispute(&task, &stranger).is_none(),
            "{:?}: lost",
            lay.step(st)
        );
    }
}

#[test]
fn a_rejected_right_embedding_is_restored_by_games_played_from_two_wallets() {
    use compute_market::pda;
    use compute_market_protocol::{
        commit::{VERDICT_CLAIMS_REFUTED, VOTE_INVALID, VOTE_VALID},
        dispute::{invalid_evidence, DISPUTE_CLAIMS_FALSE},
    };
    use compute_market_svm_tests::disputes::{stake, wind_up};
    let s = setup();
    let right = s.result(&s.right);
    let mut c = cast_with(3, 1, params(), market());
    let task = c.submitted_job(1, s.job, 3, right.root());
    let before = supply(&c.w);
    let second = c.w.actor("provider.second", 10 * R);
    let w = &mut c.w;
    let [v0, v1, v2] = [&c.verifiers[0], &c.verifiers[1], &c.verifiers[2]];
    let invalid_at = |tile: u32, element: u32, tag: u64| {
        let mut b = Ballot::new(VOTE_INVALID, tag);
        b.evidence = invalid_evidence(tile, element, &b.evidence);
        b
    };
    // v1 points at text 6's word 3, v2 at text 9's word 5: both right
    w.decide(
        task,
        &[
            (v0, Ballot::new(VOTE_VALID, 1)),
            (v1, invalid_at(1, 2 * WORDS + 3, 2)),
            (v2, invalid_at(2, WORDS + 5, 3)),
        ],
    );
    assert_eq!(w.task(&task).status, TaskStatus::Rejected);
    let provider = c.provider.clone();
    w.donate(&c.client, provider.wallet, R).unwrap();
    let (vote1, vote2) = (pda::vote(&task, &v1.node, 0), pda::vote(&task, &v2.node, 0));
    // one kind-2 dispute a vote, from two wallets, in parallel: each claims its text's trace
    for (who, vote, row, word) in [(&provider, vote1, 6, 3), (&second, vote2, 9, 5)] {
        w.open_dispute(who, task, DISPUTE_CLAIMS_FALSE, 0, 0)
            .unwrap();
        w.dispute_target(who, task, vote).unwrap();
        let d = w.dispute(&task, who).unwrap();
        w.prove_element(who, task, &right, d.tile, d.element)
            .unwrap();
        w.prove_inputs(who, task, &s.inputs).unwrap();
        w.lay_out(who, task, &s.inputs).unwrap();
        let truth = s.trace(&s.right, row);
        // a claim that the committed value is wrong refutes nothing
        let mut lie = truth.clone();
        let at = lie.lay.word_at(word) as usize;
        lie.mem[at] ^= 1;
        refused(w, "ClaimContradicts", |w| {
            w.claim_trace(who, task, &lie, word)
        });
        w.claim_trace(who, task, &truth, word)
            .unwrap_or_else(|r| panic!("{:?}\n{}", r.error, r.logs.join("\n")));
    }
    // v1 defends its pointer with a trace of the cheat's encoder and loses the game; v2 joins
    // and goes silent, and loses at its deadline
    let (truth, lie) = (s.trace(&s.right, 6), s.trace(&s.cheat, 6));
    w.donate(&c.client, v1.wallet, R).unwrap();
    w.donate(&c.client, v2.wallet, R).unwrap();
    w.defend(v1, task, &provider).unwrap();
    w.play(&provider, &truth, v1, &lie, task, &s.inputs)
        .unwrap_or_else(|r| panic!("{:?}\n{}", r.error, r.logs.join("\n")));
    w.defend(v2, task, &second).unwrap();
    w.split(&second, task, v2, &s.trace(&s.right, 9)).unwrap();
    let g = w.game(&task, &second, v2).unwrap();
    refused(w, "TurnNotExpired", |w| w.game_timeout(task, &second, v2));
    w.advance_past(g.deadline);
    w.game_timeout(task, &second, v2).unwrap();
    let d = w.dispute(&task, &provider).unwrap();
    w.advance_past(d.defend_deadline);
    w.resolve(&provider, task, Some(vote1)).unwrap();
    assert_eq!(w.task(&task).status, TaskStatus::Rejected, "one seat left");
    w.resolve(&second, task, Some(vote2)).unwrap();
    let t = w.task(&task);
    assert_eq!(
        (t.status, t.tally().majority),
        (TaskStatus::Accepted, VERDICT_CLAIMS_REFUTED)
    );
    let vb = t.verifier_bond;
    let stakes: Vec<u64> = [v1, v2].iter().map(|v| stake(w, v)).collect();
    let wallet = w.balance(&provider.wallet);
    w.close_dispute(task, &provider).unwrap();
    assert_eq!(
        w.balance(&provider.wallet),
        wallet + 2 * vb,
        "its bond back, and v1's, whose game it won"
    );
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

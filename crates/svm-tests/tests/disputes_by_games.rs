//! Disputes refereed by a game over a claimed trace (PROTOCOL §8.10): an `Mlp` model too
//! large to read in one dispute. The challenger claims its trace of the disputed row; anyone
//! defends by bisection to one step, which the program replays from proven pieces. A right
//! claim wins against every defender (the colluding provider's game and a silent colluder's),
//! and overturns three colluders' Accepted verdict; a wrong claim loses to one honest
//! defender, whatever the provider does.

use compute_market::state::TaskStatus;
use compute_market_protocol::{
    commit::{VERDICT_PROVEN_WRONG, VOTE_VALID},
    dispute::{self, Method},
    infer::Mlp,
    job::JobSpec,
    trace,
};
use compute_market_svm_tests::{
    disputes::{proven_wrong_paid, stake, supply, wind_up, Committed, Inputs},
    games::{vouched_with_sybils, Claimed, Spent, Trace},
    *,
};

/// The dispute window: a game fits it, reading this model in one dispute does not.
const D: u32 = 2_400;
/// Rows a tile.
const R_TILE: u8 = 4;

fn market() -> compute_market::state::MarketArgs {
    compute_market::state::MarketArgs {
        dispute_window: D,
        ..test_market(1)
    }
}

/// The unstake cooldown outlasts twice the longest task, two windows of 2 400 slots included.
fn params() -> compute_market::state::Params {
    compute_market::state::Params::defaults(20_000)
}

fn lcg(seed: &mut u64) -> u64 {
    *seed = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    *seed >> 33
}

/// A 64-512-512-10 model of random weights: 305 chunks of slices, too many to read in a
/// window of 2 400 slots.
fn wide(seed: u64) -> Mlp {
    compute_market_protocol::infer::random_mlp(&[64, 512, 512, 10], seed)
}

struct Setup {
    job: JobSpec,
    inputs: Inputs,
    right: Mlp,
    /// The same model with layer 0's biases moved: what a cheating provider runs.
    cheat: Mlp,
    x: Vec<i8>,
}

fn setup() -> Setup {
    let mut seed = 21;
    let right = wide(seed);
    right.check(64, 10).unwrap();
    let mut cheat = right.clone();
    for b in cheat.layers[0].bias.iter_mut() {
        *b += 3_000;
    }
    let x: Vec<i8> = (0..12 * 64).map(|_| (lcg(&mut seed) % 17) as i8).collect();
    let (job, inputs) = Inputs::mlp(&right, &x, R_TILE);
    assert_eq!(
        dispute::method(&job, D),
        Some(Method::Game),
        "too large to feed in {D} slots: {:?} transactions",
        dispute::element_transactions(&job)
    );
    Setup {
        job,
        inputs,
        right,
        cheat,
        x,
    }
}

impl Setup {
    fn row(&self, r: usize) -> &[i8] {
        &self.x[r * 64..(r + 1) * 64]
    }

    /// The result `model` gives.
    fn result(&self, model: &Mlp) -> Committed {
        let rows: Vec<Vec<u8>> = self.x.chunks(64).map(|r| model.row(r)).collect();
        Committed::new(self.job, |t, e| {
            let (row, w) = ((t * R_TILE as u32 + e / 11) as usize, (e % 11) as usize);
            let mut v = [0u8; 32];
            if let Some(r) = rows.get(row) {
                v[..4].copy_from_slice(&r[4 * w..4 * w + 4]);
            }
            v
        })
    }

    /// Row 6's first logit where the cheat's differs: (tile, element, word).
    fn disputed(&self) -> (u32, u32, u32) {
        let (a, b) = (self.right.row(self.row(6)), self.cheat.row(self.row(6)));
        let w = (0..11).find(|&w| a[4 * w..4 * w + 4] != b[4 * w..4 * w + 4]);
        let w = w.expect("the cheat's row differs") as u32;
        (1, 2 * 11 + w, w)
    }
}

#[test]
fn a_right_claim_beats_every_defender_and_overturns_three_colluders() {
    let s = setup();
    let wrong = s.result(&s.cheat);
    let (tile, element, word) = s.disputed();
    let mut c = cast_with(3, 1, params(), market());
    let task = c.submitted_job(1, s.job, s.job.tile_count() as u16, wrong.root());
    let before = supply(&c.w);
    let w = &mut c.w;
    let vs: Vec<&Actor> = c.verifiers.iter().collect();
    w.vouch(task, &vs, 0);
    assert!(w.task(&task).held);
    let (client, provider) = (c.client.clone(), c.provider.clone());
    let truth = Trace::of(&s.right, s.row(6));
    let lie = Trace::of(&s.cheat, s.row(6));
    assert_ne!(truth.word(word), lie.word(word));

    let mut records = vec![w.open_dispute(&client, task, 1, tile, element).unwrap()];
    records.push(
        w.prove_element(&client, task, &wrong, tile, element)
            .unwrap(),
    );
    // the element needs a game: no step decides it
    refused(w, "NeedsGame", |w| w.dispute_step(&client, task, None, 1));
    records.push(w.prove_inputs(&client, task, &s.inputs).unwrap());
    refused(w, "NeedsGame", |w| {
        w.feed_to_end(&client, task, None, &s.inputs)
            .map(|mut r| r.pop().unwrap())
    });
    refused(w, "NotLaidOut", |w| {
        w.claim_trace(&client, task, &truth, word)
    });
    records.push(w.lay_out(&client, task, &s.inputs).unwrap());
    // a claim agreeing with the committed value asserts nothing against it
    refused(w, "ClaimContradicts", |w| {
        w.claim_trace(&client, task, &lie, word)
    });
    refused(w, "NotClaimed", |w| w.resolve(&client, task, None));
    records.push(w.claim_trace(&client, task, &truth, word).unwrap());
    refused(w, "DefenceOpen", |w| w.resolve(&client, task, None));
    refused(w, "OwnClaim", |w| w.defend(&client, task, &client));

    // the provider defends by its own (wrong) trace; a colluding verifier joins and goes silent
    let silent = vs[0];
    w.donate(&client, provider.wallet, R).unwrap();
    w.donate(&client, silent.wallet, R).unwrap();
    w.defend(&provider, task, &client).unwrap();
    w.defend(silent, task, &client).unwrap();
    refused(w, "NotYourTurn", |w| w.pick(&provider, task, &client, &lie));
    let game = w
        .play(&client, &truth, &provider, &lie, task, &s.inputs)
        .unwrap_or_else(|r| panic!("{:?}\n{}", r.error, r.logs.join("\n")));
    assert!(w.game(&task, &client, &provider).is_none(), "won: closed");
    let splits = game.iter().filter(|r| r.label == "game_split").count();
    let feeds = game.iter().filter(|r| r.label == "game_feed").count();
    let steps = trace::build::layout(&s.right).steps();
    assert!(splits as u32 <= trace::levels(steps), "{splits} splits");
    let most = game.iter().map(|r| r.cu).max().unwrap();
    println!(
        "game over {steps} steps: {splits} splits, {feeds} pieces replayed, {} transactions, at most {most} CU",
        game.len()
    );
    assert!(most < 1_400_000);

    // the silent defender: the client splits, it never picks, and loses at its deadline
    w.split(&client, task, silent, &truth).unwrap();
    refused(w, "TurnNotExpired", |w| {
        w.game_timeout(task, &client, silent)
    });
    let g = w.game(&task, &client, silent).unwrap();
    w.advance_past(g.deadline);
    refused(w, "TurnExpired", |w| w.pick(silent, task, &client, &truth));
    let bond = w.dispute(&task, &client).unwrap().bond;
    w.game_timeout(task, &client, silent).unwrap();
    let d = w.dispute(&task, &client).unwrap();
    assert_eq!(d.games_open, 0);
    let vb = w.task(&task).verifier_bond;
    assert_eq!(
        d.bond,
        bond + vb,
        "the silent defender's bond joins the dispute's"
    );
    assert_eq!(
        bond,
        2 * vb,
        "the client's bond and the provider's, whose game it won"
    );
    w.advance_past(d.defend_deadline);
    w.resolve(&client, task, None)
        .unwrap_or_else(|r| panic!("{:?}\n{}", r.error, r.logs.join("\n")));
    let t = w.task(&task);
    assert_eq!(
        (t.status, t.tally().majority),
        (TaskStatus::Rejected, VERDICT_PROVEN_WRONG)
    );

    // the money of a proven-wrong verdict, as after a recomputation: the client paid its
    // bond and the two defenders'
    proven_wrong_paid(w, task, tile, &provider, &client, &vs, 3, before);
    w.check_invariants(&[&provider, vs[0], vs[1], vs[2]], &[]);
}

#[test]
fn a_wrong_claim_against_a_right_row_loses_to_one_honest_defender() {
    let s = setup();
    // the cheat's first wrong value is a first-layer output, replayed from the batch's row
    wrong_claim_loses(&s, &s.cheat, |step| {
        matches!(step, trace::Step::Hidden { layer: 0, .. })
    });
}

#[test]
fn a_wrong_logit_or_class_is_replayed_from_the_memory_before_it() {
    let mut s = setup();
    // a claim wrong only in the last layer: its logit's replay reads the second hidden
    // layer's values from the memory, proven against the agreed root (a refused proof would
    // fail the replay, ProofMismatch)
    let (_, _, word) = s.disputed();
    let mut late = s.right.clone();
    late.layers[2].bias[word as usize] += 50_000;
    s.cheat = late.clone();
    wrong_claim_loses(&s, &late, |step| step == trace::Step::Logit(word));
    // a claim whose logits are right and class wrong: the class's replay reads the logits
    let truth = Trace::of(&s.right, s.row(6));
    let mut lie = truth.clone();
    let at = lie.lay.slot(lie.lay.steps()).0 as usize;
    lie.mem[at] ^= 1;
    wrong_trace_loses(&s, &lie, 10, |step| step == trace::Step::Class);
}

/// A stranger claims `cheat`'s trace of row 6 against the right result; two honest verifiers
/// defend; the first narrows the claim to a step `first_wrong` accepts, whose replay is
/// refused, and the stranger loses at its deadline.
fn wrong_claim_loses(s: &Setup, cheat: &Mlp, first_wrong: impl Fn(trace::Step) -> bool) {
    let lie = Trace::of(cheat, s.row(6));
    let (_, _, word) = s.disputed();
    wrong_trace_loses(s, &lie, word, first_wrong)
}

fn wrong_trace_loses(s: &Setup, lie: &Trace, word: u32, first_wrong: impl Fn(trace::Step) -> bool) {
    let right = s.result(&s.right);
    let (tile, element) = (1, 2 * 11 + word);
    let mut c = cast_with(3, 1, params(), market());
    let task = c.submitted_job(1, s.job, 3, right.root());
    let before = supply(&c.w);
    let stranger = c.w.actor("stranger", 10 * R);
    let w = &mut c.w;
    let vs: Vec<&Actor> = c.verifiers.iter().collect();
    w.vouch(task, &vs, 10);
    let truth = Trace::of(&s.right, s.row(6));

    // a stranger claims the cheat's trace; the provider stays out of it
    w.open_dispute(&stranger, task, 1, tile, element).unwrap();
    w.prove_element(&stranger, task, &right, tile, element)
        .unwrap();
    w.prove_inputs(&stranger, task, &s.inputs).unwrap();
    w.lay_out(&stranger, task, &s.inputs).unwrap();
    w.claim_trace(&stranger, task, lie, word).unwrap();
    let wallet = w.balance(&stranger.wallet);
    // two honest verifiers defend; one game is enough
    let (honest, other) = (vs[1], vs[2]);
    w.donate(&c.client, honest.wallet, R).unwrap();
    w.donate(&c.client, other.wallet, R).unwrap();
    let honest_wallet = w.balance(&honest.wallet);
    w.defend(honest, task, &stranger).unwrap();
    w.defend(other, task, &stranger).unwrap();
    refused(w, "WrongSplit", |w| {
        w.send_as(
            "game_split",
            &stranger,
            compute_market::client::game_split(w.game_ref(&task, &stranger, honest), vec![[0; 32]]),
        )
    });
    // bisection narrows the lie to the first step it got wrong; the defender's replay of it
    // does not reach the claimed root, and the whole dispute is lost
    let g = w
        .bisect(&stranger, lie, honest, &truth, task)
        .unwrap()
        .expect("one step left");
    assert_eq!(g.hi - g.lo, 1, "one step left");
    let layout = trace::build::layout(&s.right);
    let step = layout.step(g.hi).unwrap();
    assert!(first_wrong(step), "the lie's first wrong step: {step:?}");
    // the replay is the defender's move
    refused(w, "NotYourTurn", |w| {
        let mut ix =
            compute_market::client::game_write(w.game_ref(&task, &stranger, honest), 0, vec![1]);
        let mover = ix.accounts.last_mut().expect("the mover");
        mover.pubkey = stranger.key();
        w.send_as("game_write", &stranger, ix)
    });
    w.replay(honest, task, &stranger, &truth, &s.inputs)
        .unwrap_or_else(|r| panic!("{:?}\n{}", r.error, r.logs.join("\n")));
    assert!(w.dispute(&task, &stranger).is_none(), "lost: closed");
    let vb = w.task(&task).verifier_bond;
    assert_eq!(
        w.balance(&honest.wallet),
        honest_wallet + vb,
        "its bond back and the challenger's"
    );
    // the other game's dispute has ended (its account is gone)
    refused(w, "AccountOwnedByWrongProgram", |w| {
        w.game_timeout(task, &stranger, other)
    });
    // the stranger disputes again at the same address: the old game is not this dispute's
    w.open_dispute(&stranger, task, 1, tile, element).unwrap();
    let old = compute_market::client::GameRef {
        nonce: 1,
        ..w.game_ref(&task, &stranger, other)
    };
    assert_eq!(w.game_ref(&task, &stranger, other).nonce, 2);
    refused(w, "GameNotInPlay", |w| {
        w.crank(
            "game_timeout",
            compute_market::client::game_timeout(old, other.wallet, None),
        )
    });
    let other_wallet = w.balance(&other.wallet);
    w.close_game(task, &stranger, 1, other).unwrap();
    assert_eq!(w.balance(&other.wallet), other_wallet + vb, "its bond back");
    assert_eq!(w.dispute(&task, &stranger).unwrap().games_open, 0);
    // the second dispute, never argued, loses at its deadline
    let d = w.dispute(&task, &stranger).unwrap();
    w.advance_past(d.answer_deadline);
    w.dispute_timeout(task, &stranger).unwrap();
    let t = w.task(&task);
    assert_eq!(
        (t.status, t.tally().majority),
        (TaskStatus::Accepted, VOTE_VALID)
    );
    assert_eq!(
        t.dispute_forfeit, vb,
        "the first bond went to the defender, the second is forfeit"
    );
    assert_eq!(w.balance(&stranger.wallet), wallet - vb);
    let stakes: Vec<u64> = vs.iter().map(|v| stake(w, v)).collect();
    let deadline = t.dispute_deadline;
    w.advance(deadline.saturating_sub(w.slot()) + 1);
    w.conclude(task).unwrap();
    wind_up(w, task, &vs, &[]);
    for (v, st) in vs.iter().zip(stakes) {
        assert!(
            stake(w, v) >= st,
            "{}: an honest VALID vote is not slashed",
            v.name
        );
    }
    assert_eq!(
        supply(w),
        before + 10 * R,
        "conserved (the stranger's tokens added)"
    );
}

#[test]
fn a_rejected_right_result_is_restored_by_games_played_from_two_wallets() {
    use compute_market::pda;
    use compute_market_protocol::{
        commit::{VERDICT_CLAIMS_REFUTED, VOTE_INVALID},
        dispute::{invalid_evidence, DISPUTE_CLAIMS_FALSE},
    };
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
    // v1 points at row 6's logit 3, v2 at row 9's class: both right
    w.decide(
        task,
        &[
            (v0, Ballot::new(VOTE_VALID, 1)),
            (v1, invalid_at(1, 2 * 11 + 3, 2)),
            (v2, invalid_at(2, 11 + 10, 3)),
        ],
    );
    assert_eq!(w.task(&task).status, TaskStatus::Rejected);
    let provider = c.provider.clone();
    w.donate(&c.client, provider.wallet, R).unwrap();
    let (vote1, vote2) = (pda::vote(&task, &v1.node, 0), pda::vote(&task, &v2.node, 0));
    // one kind-2 dispute a vote, from two wallets, in parallel: each claims its row's trace
    for (who, vote, row, word) in [(&provider, vote1, 6, 3), (&second, vote2, 9, 10)] {
        w.open_dispute(who, task, DISPUTE_CLAIMS_FALSE, 0, 0)
            .unwrap();
        w.dispute_target(who, task, vote).unwrap();
        let d = w.dispute(&task, who).unwrap();
        w.prove_element(who, task, &right, d.tile, d.element)
            .unwrap();
        w.prove_inputs(who, task, &s.inputs).unwrap();
        w.lay_out(who, task, &s.inputs).unwrap();
        let truth = Trace::of(&s.right, s.row(row));
        // a claim that the committed value is wrong refutes nothing
        let mut lie = truth.clone();
        let at = lie.lay.slot(lie.lay.word_step(word)).0 as usize;
        lie.mem[at] ^= 1;
        refused(w, "ClaimContradicts", |w| {
            w.claim_trace(who, task, &lie, word)
        });
        w.claim_trace(who, task, &truth, word)
            .unwrap_or_else(|r| panic!("{:?}\n{}", r.error, r.logs.join("\n")));
    }
    // v1 defends its claim with a trace of the cheat's model and loses the game; v2 joins
    // and goes silent
    let truth = Trace::of(&s.right, s.row(6));
    let lie = Trace::of(&s.cheat, s.row(6));
    w.donate(&c.client, v1.wallet, R).unwrap();
    w.donate(&c.client, v2.wallet, R).unwrap();
    w.defend(v1, task, &provider).unwrap();
    w.play(&provider, &truth, v1, &lie, task, &s.inputs)
        .unwrap_or_else(|r| panic!("{:?}\n{}", r.error, r.logs.join("\n")));
    w.defend(v2, task, &second).unwrap();
    let truth9 = Trace::of(&s.right, s.row(9));
    w.split(&second, task, v2, &truth9).unwrap();
    let g = w.game(&task, &second, v2).unwrap();
    w.advance_past(g.deadline);
    w.game_timeout(task, &second, v2).unwrap();
    let d = w.dispute(&task, &provider).unwrap();
    w.advance_past(d.defend_deadline);
    w.resolve(&provider, task, Some(vote1)).unwrap();
    assert_eq!(w.task(&task).status, TaskStatus::Rejected, "one seat left");
    assert_eq!(w.task(&task).refuted_seats, 1);
    w.resolve(&second, task, Some(vote2)).unwrap();
    let t = w.task(&task);
    assert_eq!(
        (t.status, t.tally().majority),
        (TaskStatus::Accepted, VERDICT_CLAIMS_REFUTED)
    );
    // the provider's own dispute is moot now: its bond comes back at close
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

/// The client's right claim against the provider's wrong row, defended by `n` sybils
/// ([`World::against_sybils`]).
fn against_sybils(s: &Setup, n: usize) -> Spent {
    let wrong = s.result(&s.cheat);
    let (tile, element, word) = s.disputed();
    let mut c = cast_with(3, 1, params(), market());
    let (task, sybils) = vouched_with_sybils(&mut c, s.job, wrong.root(), n);
    let truth = Trace::of(&s.right, s.row(6));
    let claim = Claimed {
        committed: &wrong,
        at: (tile, element),
        inputs: &s.inputs,
        truth: &truth,
        word,
    };
    c.w.against_sybils(task, &c.client, &claim, &sybils)
}

#[test]
fn an_honest_challenger_beats_eight_sybil_defenders_in_the_slots_of_one() {
    let s = setup();
    let clock = trace::clock(&s.job, D).unwrap();
    let levels = trace::levels(trace::build::layout(&s.right).steps()) as usize;
    let one = against_sybils(&s, 1);
    let eight = against_sybils(&s, 8);
    for (n, x) in [(1, &one), (8, &eight)] {
        println!(
            "{n} sybil defender(s): the challenger sent {} transactions ({} to its claim, {} splits, {} resolution) over {} slots from opening to verdict, and is owed {} tokens",
            x.claim + x.splits + x.resolve,
            x.claim,
            x.splits,
            x.resolve,
            x.slots,
            x.gained
        );
    }
    // the time does not grow with the opponents: every game runs beside the others, each
    // within the clocks the program gives it
    assert_eq!(eight.slots, one.slots, "the slots of one");
    assert!(one.slots <= clock.claim_by + clock.after_claim());
    // the transactions: the claim and the resolution once, and at most a split per level for
    // each opponent, which pays a seat's bond for it
    assert_eq!((eight.claim, eight.resolve), (one.claim, one.resolve));
    assert!(one.splits <= levels && eight.splits <= 8 * levels);
    assert!(
        eight.splits > one.splits,
        "fanning out forces splits of their own"
    );
    let vb = one.gained / 2;
    assert_eq!(one.gained, 2 * vb, "its bond back and the sybil's");
    assert_eq!(eight.gained, 9 * vb, "its bond back and every sybil's");
}

#[test]
fn an_honest_provider_refutes_five_lying_invalid_votes_in_the_shortest_window() {
    use compute_market::pda;
    use compute_market_protocol::{
        commit::{VERDICT_CLAIMS_REFUTED, VOTE_INVALID},
        dispute::{invalid_evidence, DISPUTE_CLAIMS_FALSE, SLOTS_PER_TRANSACTION},
    };
    let s = setup();
    // the shortest window in which a market referees this job: a game's clock just fits
    let shortest = (1..=10_000u32)
        .find(|&d| trace::clock(&s.job, d).is_some())
        .unwrap();
    assert_eq!(dispute::method(&s.job, shortest), Some(Method::Game));
    let clock = trace::clock(&s.job, shortest).unwrap();
    assert_eq!(clock.turn, trace::MIN_TURN);
    let right = s.result(&s.right);
    let market = compute_market::state::MarketArgs {
        dispute_window: shortest,
        quorum: 7,
        ..test_market(1)
    };
    let mut c = cast_with(7, 1, params(), market);
    let task = c.submitted_job(1, s.job, 3, right.root());
    // the provider argues from its wallet and four more of its keys, one dispute a vote
    let provider = c.provider.clone();
    let mut lanes = vec![provider.clone()];
    lanes.extend((1..5).map(|i| c.w.actor(&format!("provider.lane{i}"), 10 * R)));
    let w = &mut c.w;
    w.donate(&c.client, provider.wallet, R).unwrap();
    // five liars point at right words of five rows; two seats vote VALID
    let pointed = [(6u32, 3u32), (9, 10), (2, 0), (4, 5), (11, 7)];
    let mut ballots = vec![];
    for (i, &(row, word)) in pointed.iter().enumerate() {
        let (tile, element) = (row / R_TILE as u32, (row % R_TILE as u32) * 11 + word);
        let mut b = Ballot::new(VOTE_INVALID, i as u64);
        b.evidence = invalid_evidence(tile, element, &b.evidence);
        ballots.push((&c.verifiers[i], b));
    }
    ballots.push((&c.verifiers[5], Ballot::new(VOTE_VALID, 5)));
    ballots.push((&c.verifiers[6], Ballot::new(VOTE_VALID, 6)));
    w.decide(task, &ballots);
    let t = w.task(&task);
    assert_eq!((t.status, t.tally().invalid), (TaskStatus::Rejected, 5));
    let liars: Vec<&Actor> = c.verifiers[..5].iter().collect();
    let votes: Vec<_> = liars.iter().map(|v| pda::vote(&task, &v.node, 0)).collect();
    let opened = w.slot();
    let mut sent = vec![0usize; 5];
    // every lane to its claim; the lanes' transactions go out side by side
    for (k, who) in lanes.iter().enumerate() {
        let mark = w.records.len();
        w.open_dispute(who, task, DISPUTE_CLAIMS_FALSE, 0, 0)
            .unwrap();
        w.dispute_target(who, task, votes[k]).unwrap();
        let d = w.dispute(&task, who).unwrap();
        w.prove_element(who, task, &right, d.tile, d.element)
            .unwrap();
        w.prove_inputs(who, task, &s.inputs).unwrap();
        w.lay_out(who, task, &s.inputs).unwrap();
        sent[k] += w.records.len() - mark + 1;
    }
    let before_claim = sent[0] as u64;
    w.advance(SLOTS_PER_TRANSACTION * before_claim);
    let truths: Vec<Trace> = pointed
        .iter()
        .map(|&(row, _)| Trace::of(&s.right, s.row(row as usize)))
        .collect();
    for (k, who) in lanes.iter().enumerate() {
        w.claim_trace(who, task, &truths[k], pointed[k].1)
            .unwrap_or_else(|r| panic!("{:?}\n{}", r.error, r.logs.join("\n")));
    }
    // each liar defends against the claim refuting it, by its trace of the cheat's model,
    // stalling as long as its clock allows, and loses its game; the games run side by side
    let lies: Vec<Trace> = pointed
        .iter()
        .map(|&(row, _)| Trace::of(&s.cheat, s.row(row as usize)))
        .collect();
    for (k, liar) in liars.iter().enumerate() {
        w.donate(&c.client, liar.wallet, R).unwrap();
        w.defend(liar, task, &lanes[k]).unwrap();
    }
    let games: Vec<_> = (0..5).map(|k| (&lanes[k], &truths[k], liars[k])).collect();
    let by_lie =
        |k: usize, g: &compute_market::state::Game| lies[k].pick(g.lo, g.hi, &g.roots, &g.hi_root);
    let per_game = w.lockstep(task, &games, by_lie, &s.inputs);
    for (k, n) in per_game.iter().enumerate() {
        sent[k] += n;
    }
    let splits: usize = per_game.iter().sum();
    let d = w.dispute(&task, &lanes[0]).unwrap();
    w.advance_past(d.defend_deadline);
    for (k, who) in lanes.iter().enumerate() {
        w.resolve(who, task, Some(votes[k])).unwrap();
        sent[k] += 1;
    }
    let t = w.task(&task);
    assert_eq!(
        (t.status, t.tally().majority, t.refuted_seats),
        (TaskStatus::Accepted, VERDICT_CLAIMS_REFUTED, 5)
    );
    let slots = w.slot() - opened;
    println!(
        "5 lying INVALID votes in a window of {shortest} slots (turns of {}): refuted by 5 disputes side by side, {} transactions each ({} splits in all), the verdict restored {slots} slots after the first opened",
        clock.turn,
        sent.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(", "),
        splits,
    );
    // the time is one dispute's, whatever the number of votes: within the window
    assert!(slots <= shortest as u64, "{slots} slots");
    assert!(slots <= SLOTS_PER_TRANSACTION * before_claim + clock.after_claim());
    // and the transactions a vote are bounded by one element's
    let levels = trace::levels(trace::build::layout(&s.right).steps()) as usize;
    assert!(sent
        .iter()
        .all(|&n| n <= before_claim as usize + 1 + levels + 1));
}

#[test]
fn each_party_moves_on_its_own_clock_and_only_on_its_turn() {
    let s = setup();
    let wrong = s.result(&s.cheat);
    let (tile, element, word) = s.disputed();
    let mut c = cast_with(3, 1, params(), market());
    let task = c.submitted_job(1, s.job, s.job.tile_count() as u16, wrong.root());
    let clock = trace::clock(&s.job, D).unwrap();
    let w = &mut c.w;
    let vs: Vec<&Actor> = c.verifiers.iter().collect();
    w.vouch(task, &vs, 0);
    let (client, provider) = (c.client.clone(), c.provider.clone());
    let truth = Trace::of(&s.right, s.row(6));
    let lie = Trace::of(&s.cheat, s.row(6));
    w.claim_against(
        &client,
        task,
        &wrong,
        (tile, element),
        &s.inputs,
        &truth,
        word,
    )
    .unwrap();
    w.donate(&client, provider.wallet, R).unwrap();
    w.defend(&provider, task, &client).unwrap();
    // a second defender, whose game the challenger will let run out
    let other = vs[0];
    w.donate(&client, other.wallet, R).unwrap();
    w.defend(other, task, &client).unwrap();
    let g = w.game(&task, &client, &provider).unwrap();
    assert_eq!(g.clocks, [clock.budget(); 2], "levels · turn each");
    assert_eq!(g.deadline, g.since + clock.budget());
    // only the party whose turn it is moves, and only its own move: a defender posting roots
    // on its turn, or a challenger picking on its own, is refused
    refused(w, "NotYourTurn", |w| {
        let r = w.game_ref(&task, &client, &provider);
        let mut ix = compute_market::client::game_pick(r, 0);
        ix.accounts.last_mut().expect("the mover").pubkey = client.key();
        w.send_as("game_pick", &client, ix)
    });
    w.split(&client, task, &provider, &truth).unwrap();
    refused(w, "NotYourTurn", |w| {
        let r = w.game_ref(&task, &client, &provider);
        let mut ix = compute_market::client::game_split(r, truth.split_roots(g.lo, g.hi));
        ix.accounts.last_mut().expect("the mover").pubkey = provider.key();
        w.send_as("game_split", &provider, ix)
    });
    // the defender stalls its whole clock on its first pick: it has none left after
    let g = w.game(&task, &client, &provider).unwrap();
    w.advance(g.deadline - w.slot());
    w.pick(&provider, task, &client, &lie).unwrap();
    let g = w.game(&task, &client, &provider).unwrap();
    assert_eq!(g.clocks[1], 0, "the defender's clock spent");
    assert_eq!(g.clocks[0], clock.budget(), "the challenger's untouched");
    w.split(&client, task, &provider, &truth).unwrap();
    w.advance(1);
    refused(w, "TurnExpired", |w| w.pick(&provider, task, &client, &lie));
    // the second game: the challenger let its whole clock run out, and loses the dispute
    let g = w.game(&task, &client, other).unwrap();
    assert_eq!(
        g.clocks[0],
        clock.budget(),
        "its clock, untouched, has run out"
    );
    w.advance_past(g.deadline);
    refused(w, "TurnExpired", |w| w.split(&client, task, other, &truth));
    w.game_timeout(task, &client, other).unwrap();
    assert!(w.dispute(&task, &client).is_none(), "lost: closed");
}

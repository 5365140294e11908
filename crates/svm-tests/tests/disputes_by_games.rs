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
    infer::{Layer, Mlp},
    job::JobSpec,
    sampling::sample_indices,
    trace,
};
use compute_market_svm_tests::{
    disputes::{stake, supply, wind_up, Committed, Inputs},
    games::Trace,
    *,
};

/// The dispute window: a game fits it, reading this model in one dispute does not.
const D: u32 = 400;
/// Rows a tile.
const R_TILE: u8 = 4;

fn market() -> compute_market::state::MarketArgs {
    compute_market::state::MarketArgs {
        dispute_window: D,
        ..test_market(1)
    }
}

fn lcg(seed: &mut u64) -> u64 {
    *seed = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    *seed >> 33
}

/// A 64-256-128-10 model of random weights: 54 chunks of slices.
fn wide(seed: &mut u64) -> Mlp {
    let layer = |inp: usize, out: usize, hidden: bool, seed: &mut u64| Layer {
        inp,
        out,
        weight: (0..inp * out).map(|_| lcg(seed) as i8).collect(),
        bias: (0..out)
            .map(|_| (lcg(seed) % 2_000) as i32 - 1_000)
            .collect(),
        requant: hidden.then(|| {
            (
                (0..out).map(|_| 1 + (lcg(seed) % 1_000) as i32).collect(),
                (0..out).map(|_| 14 + (lcg(seed) % 4) as i32).collect(),
            )
        }),
    };
    Mlp {
        layers: vec![
            layer(64, 256, true, seed),
            layer(256, 128, true, seed),
            layer(128, 10, false, seed),
        ],
    }
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
    let right = wide(&mut seed);
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

fn vouch(w: &mut World, task: anchor_lang::prelude::Pubkey, vs: &[&Actor], tag: u64) {
    let ballots: Vec<(&Actor, Ballot)> = vs
        .iter()
        .enumerate()
        .map(|(i, v)| (*v, Ballot::new(VOTE_VALID, tag + i as u64)))
        .collect();
    w.decide(task, &ballots);
}

#[test]
fn a_right_claim_beats_every_defender_and_overturns_three_colluders() {
    let s = setup();
    let wrong = s.result(&s.cheat);
    let (tile, element, word) = s.disputed();
    let mut c = cast_in(3, 1, market());
    let task = c.submitted_job(1, s.job, s.job.tile_count() as u16, wrong.root());
    let before = supply(&c.w);
    let w = &mut c.w;
    let vs: Vec<&Actor> = c.verifiers.iter().collect();
    vouch(w, task, &vs, 0);
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
    w.advance(g.deadline + 1 - w.slot());
    refused(w, "TurnExpired", |w| w.pick(silent, task, &client, &truth));
    let lamports = w.c.svm.get_balance(&client.key()).unwrap();
    w.game_timeout(task, &client, silent).unwrap();
    assert!(
        w.c.svm.get_balance(&client.key()).unwrap() > lamports,
        "the silent defender's rent goes to the challenger"
    );
    let d = w.dispute(&task, &client).unwrap();
    assert_eq!(d.games_open, 0);
    w.advance(d.defend_deadline + 1 - w.slot());
    w.resolve(&client, task, None)
        .unwrap_or_else(|r| panic!("{:?}\n{}", r.error, r.logs.join("\n")));
    let t = w.task(&task);
    assert_eq!(
        (t.status, t.tally().majority),
        (TaskStatus::Rejected, VERDICT_PROVEN_WRONG)
    );

    // the money of a proven-wrong verdict, as after a recomputation
    let (vb, bond) = (t.verifier_bond, t.provider_bond);
    let (wallet, provider_stake) = (w.balance(&client.wallet), stake(w, &provider));
    let stakes: Vec<u64> = vs.iter().map(|v| stake(w, v)).collect();
    let sampled: Vec<bool> = vs
        .iter()
        .map(|v| {
            sample_indices(
                &t.seed,
                &v.node.to_bytes(),
                t.samples as u32,
                s.job.tile_count(),
            )
            .contains(&tile)
        })
        .collect();
    w.conclude(task).unwrap();
    wind_up(w, task, &vs, &[&client]);
    assert_eq!(stake(w, &provider), provider_stake - bond);
    let mut award = 0;
    for ((v, st), vouched) in vs.iter().zip(stakes).zip(&sampled) {
        let lost = if *vouched { vb } else { 0 };
        award += lost / 2;
        assert_eq!(stake(w, v), st - lost, "{}", v.name);
    }
    let client_part = bond * test_params().reject_client_bps as u64 / 10_000;
    assert_eq!(
        w.balance(&client.wallet),
        wallet + R + vb + client_part + award
    );
    assert_eq!(supply(w), before, "conserved");
    w.check_invariants(&[&provider, vs[0], vs[1], vs[2]], &[]);
}

#[test]
fn a_wrong_claim_against_a_right_row_loses_to_one_honest_defender() {
    let s = setup();
    let right = s.result(&s.right);
    let (tile, element, word) = s.disputed();
    let mut c = cast_in(3, 1, market());
    let task = c.submitted_job(1, s.job, 3, right.root());
    let before = supply(&c.w);
    let stranger = c.w.actor("stranger", 10 * R);
    let w = &mut c.w;
    let vs: Vec<&Actor> = c.verifiers.iter().collect();
    vouch(w, task, &vs, 10);
    let truth = Trace::of(&s.right, s.row(6));
    let lie = Trace::of(&s.cheat, s.row(6));

    // a stranger claims the cheat's trace; the provider stays out of it
    w.open_dispute(&stranger, task, 1, tile, element).unwrap();
    w.prove_element(&stranger, task, &right, tile, element)
        .unwrap();
    w.prove_inputs(&stranger, task, &s.inputs).unwrap();
    w.lay_out(&stranger, task, &s.inputs).unwrap();
    w.claim_trace(&stranger, task, &lie, word).unwrap();
    let wallet = w.balance(&stranger.wallet);
    // two honest verifiers defend; one game is enough
    let (honest, other) = (vs[1], vs[2]);
    w.defend(honest, task, &stranger).unwrap();
    w.defend(other, task, &stranger).unwrap();
    refused(w, "WrongSplit", |w| {
        w.send_as(
            "game_split",
            &stranger,
            compute_market::client::game_split(task, stranger.key(), honest.key(), vec![[0; 32]]),
        )
    });
    // bisection narrows the lie to the first step it got wrong, whose replay is refused
    let refusal = w
        .play(&stranger, &lie, honest, &truth, task, &s.inputs)
        .expect_err("the lie's step does not replay to its root");
    assert!(
        refusal.logs.join("\n").contains("ReplayMismatch"),
        "{}",
        refusal.logs.join("\n")
    );
    let g = w.game(&task, &stranger, honest).unwrap();
    assert_eq!(g.hi - g.lo, 1, "one step left");
    let layout = trace::build::layout(&s.right);
    assert!(
        matches!(
            layout.step(g.hi),
            Some(trace::Step::Hidden { layer: 0, .. })
        ),
        "the cheat's first wrong value is a first-layer output: step {}",
        g.hi
    );
    w.advance(g.deadline + 1 - w.slot());
    let lamports = w.c.svm.get_balance(&honest.key()).unwrap();
    w.game_timeout(task, &stranger, honest).unwrap();
    assert!(w.dispute(&task, &stranger).is_none(), "lost: closed");
    assert!(w.c.svm.get_balance(&honest.key()).unwrap() > lamports);
    // the other game is moot: its rent goes back
    let lamports = w.c.svm.get_balance(&other.key()).unwrap();
    w.close_game(task, &stranger, other).unwrap();
    assert!(w.c.svm.get_balance(&other.key()).unwrap() > lamports);
    let t = w.task(&task);
    assert_eq!(
        (t.status, t.tally().majority),
        (TaskStatus::Accepted, VOTE_VALID)
    );
    assert_eq!(t.dispute_forfeit, t.verifier_bond);
    assert_eq!(w.balance(&stranger.wallet), wallet);
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

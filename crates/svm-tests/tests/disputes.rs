//! Disputes (PROTOCOL §8): one honest party overturns a wrong verdict, whatever the seats
//! voted, by having the program recompute one element; a wrong dispute costs its bond; a
//! challenger that stops answering loses at its deadline; the verdict's money waits for the
//! window and is conserved through every outcome.

use anchor_lang::prelude::Pubkey;
use compute_market::{pda, state::MarketArgs, state::TaskStatus};
use compute_market_protocol::{
    commit::{VERDICT_CLAIMS_REFUTED, VERDICT_PROVEN_WRONG, VOTE_INVALID, VOTE_VALID},
    dispute::{self, invalid_evidence, DISPUTE_CLAIMS_FALSE, DISPUTE_RESULT_WRONG, MAX_STEP_TERMS},
    job::JobSpec,
    sampling::sample_indices,
};
use compute_market_svm_tests::{
    disputes::{stake, supply, wind_up, Committed},
    *,
};

/// The dispute window of the test market.
const D: u32 = 50;

fn market() -> MarketArgs {
    MarketArgs {
        dispute_window: D,
        ..test_market(1)
    }
}

/// A result whose every element is what the job gives.
fn right(job: JobSpec) -> Committed {
    Committed::new(job, |t, e| dispute::expected_element(&job, t, e).unwrap())
}

/// A result whose every element is zero (wrong almost everywhere).
fn zeros(job: JobSpec) -> Committed {
    Committed::new(job, |_, _| [0; 32])
}

/// An INVALID ballot pointing at (tile, element).
fn invalid_at(tile: u32, element: u32, tag: u64) -> Ballot {
    let mut b = Ballot::new(VOTE_INVALID, tag);
    b.evidence = invalid_evidence(tile, element, &b.evidence);
    b
}

/// Joins, commits, reveals and finalizes with the given ballots.
fn decide(w: &mut World, task: Pubkey, votes: &[(&Actor, Ballot)]) {
    w.decide(task, votes);
}

/// The client's part of a rejected provider's bond of a task of reward `r`.
fn client_part(r: u64) -> u64 {
    job_bond(r) * test_params().reject_client_bps as u64 / 10_000
}

/// The three verifiers `vs` vote VALID (tags 1, 2, 3) and the round is finalized.
fn vouch(w: &mut World, task: Pubkey, vs: &[&Actor]) {
    let votes: Vec<(&Actor, Ballot)> = vs
        .iter()
        .zip(1..)
        .map(|(v, tag)| (*v, Ballot::new(VOTE_VALID, tag)))
        .collect();
    decide(w, task, &votes);
}

/// Three colluding verifiers vouch for a wrong result of `job`; the client disputes the element
/// at (tile, element) and wins. Returns the records of its dispute.
fn colluders_overturned(
    job: JobSpec,
    samples: u16,
    step: u32,
    pick_tile: impl Fn(&World, Pubkey, &[Actor]) -> u32,
) -> (Cast, Pubkey, Vec<TxRecord>, u32) {
    let mut c = cast_in(3, 1, market());
    let wrong = zeros(job);
    let task = c.submitted_job(1, job, samples, wrong.root());
    let before = supply(&c.w);
    let w = &mut c.w;
    let vs: Vec<&Actor> = c.verifiers.iter().collect();
    let ballots: Vec<(&Actor, Ballot)> = vs
        .iter()
        .enumerate()
        .map(|(i, v)| (*v, Ballot::new(VOTE_VALID, i as u64)))
        .collect();
    decide(w, task, &ballots);
    let t = w.task(&task);
    assert_eq!(t.status, TaskStatus::Accepted);
    assert!(t.held, "the verdict's money waits for the window");
    // nothing moves while held: no vote settles, the task does not close, nothing concludes
    let provider_vault = w.balance(&c.provider.vault);
    refused(w, "TaskNotConcluded", |w| w.settle(task, vs[0], 0));
    refused(w, "TaskNotConcluded", |w| w.close(task));
    refused(w, "DisputeWindowOpen", |w| w.conclude(task));
    assert_eq!(w.balance(&c.provider.vault), provider_vault);

    let tile = pick_tile(w, task, &c.verifiers);
    let element = dispute::elements_per_tile(&job) - 3;
    let client = c.client.clone();
    let records = w
        .argue_by(&client, task, &wrong, (tile, element), step)
        .unwrap_or_else(|r| panic!("dispute: {:?}\n{}", r.error, r.logs.join("\n")));
    let t = w.task(&task);
    assert_eq!(
        t.status,
        TaskStatus::Rejected,
        "the dispute overturns the verdict"
    );
    assert_eq!(t.tally().majority, VERDICT_PROVEN_WRONG);
    assert_eq!(supply(w), before, "no token created or destroyed");
    (c, task, records, tile)
}

#[test]
fn three_colluding_verifiers_vouching_for_a_wrong_product_are_slashed_and_the_client_refunded() {
    // k = 3 000 recomputed 1 024 terms at a time: the sum resumes across three transactions
    let job = JobSpec::matmul(128, 3_000, 128, [5; 32]);
    let (mut c, task, records, _) = colluders_overturned(job, 0, 1_024, |_, _, _| 3);
    let steps = records.iter().filter(|r| r.label == "dispute_step").count();
    assert_eq!(steps, 3, "3 000 terms in steps of 1 024");
    let w = &mut c.w;
    let (client_before, provider_stake) = (w.balance(&c.client.wallet), stake(w, &c.provider));
    let vb = w.task(&task).verifier_bond;
    let bond = w.task(&task).provider_bond;
    let verifier_stakes: Vec<u64> = c.verifiers.iter().map(|v| stake(w, v)).collect();
    w.conclude(task).unwrap();
    let vs: Vec<&Actor> = c.verifiers.iter().collect();
    let client = c.client.clone();
    wind_up(w, task, &vs, &[&client]);
    // the provider lost its whole bond (the client's part to the client, the rest to the
    // treasury); every VALID vote (a MatMulModP verifier vouches for all of C) its whole bond,
    // half of it the challenger's award; the client got its reward back, its bond, its part
    // of the provider's bond and the award
    assert_eq!(stake(w, &c.provider), provider_stake - bond);
    for (v, before) in c.verifiers.iter().zip(verifier_stakes) {
        assert_eq!(
            stake(w, v),
            before - vb,
            "{} slashed its whole bond",
            v.name
        );
        assert_eq!(w.node(&v.node).bonded, 0);
    }
    let award = 3 * (vb / 2);
    assert_eq!(
        w.balance(&c.client.wallet),
        client_before + R + vb + client_part(R) + award,
        "reward refunded in full, bond back, award paid"
    );
    assert!(!w.exists(&task) && !w.exists(&pda::dispute(&task, &c.client.key())));
    w.check_invariants(
        &[
            &c.provider,
            &c.verifiers[0],
            &c.verifiers[1],
            &c.verifiers[2],
        ],
        &[],
    );
}

#[test]
fn three_colluding_verifiers_vouching_for_wrong_hashes_are_slashed_where_they_sampled() {
    // four tiles, sixteen samples each: a tile every verifier sampled
    let job = JobSpec::hash_batch(4, 32, 5, [8; 32]);
    let (mut c, task, records, tile) =
        colluders_overturned(job, 16, MAX_STEP_TERMS, |w, task, vs| {
            let t = w.task(&task);
            (0..4)
                .find(|tile| {
                    vs.iter()
                        .all(|v| sample_indices(&t.seed, &v.node.to_bytes(), 16, 4).contains(tile))
                })
                .expect("a tile all three sampled")
        });
    assert_eq!(
        records.iter().filter(|r| r.label == "dispute_step").count(),
        1
    );
    let w = &mut c.w;
    let vb = w.task(&task).verifier_bond;
    let before: Vec<u64> = c.verifiers.iter().map(|v| stake(w, v)).collect();
    w.conclude(task).unwrap();
    let vs: Vec<&Actor> = c.verifiers.iter().collect();
    let client = c.client.clone();
    wind_up(w, task, &vs, &[&client]);
    for (v, b) in c.verifiers.iter().zip(before) {
        assert_eq!(stake(w, v), b - vb, "{} vouched for tile {tile}", v.name);
    }
}

#[test]
fn a_valid_vote_that_never_sampled_the_wrong_tile_is_released() {
    // 64 tiles, two samples each: the client disputes a tile exactly one verifier sampled
    let job = JobSpec::hash_batch(64, 32, 2, [9; 32]);
    let samples = |w: &World, task: Pubkey, vs: &[Actor]| -> Vec<Vec<u32>> {
        let t = w.task(&task);
        vs.iter()
            .map(|v| sample_indices(&t.seed, &v.node.to_bytes(), 2, 64))
            .collect()
    };
    let (mut c, task, _, tile) = colluders_overturned(job, 2, MAX_STEP_TERMS, |w, task, vs| {
        let s = samples(w, task, vs);
        (0..64)
            .find(|x| s.iter().filter(|v| v.contains(x)).count() == 1)
            .unwrap_or_else(|| panic!("a tile one verifier sampled: {s:?}"))
    });
    let w = &mut c.w;
    let sampled: Vec<bool> = samples(w, task, &c.verifiers)
        .iter()
        .map(|s| s.contains(&tile))
        .collect();
    let vb = w.task(&task).verifier_bond;
    let before: Vec<u64> = c.verifiers.iter().map(|v| stake(w, v)).collect();
    w.conclude(task).unwrap();
    let vs: Vec<&Actor> = c.verifiers.iter().collect();
    let client = c.client.clone();
    let wallet = w.balance(&c.client.wallet);
    wind_up(w, task, &vs, &[&client]);
    for ((v, b), s) in c.verifiers.iter().zip(before).zip(&sampled) {
        let lost = if *s { vb } else { 0 };
        assert_eq!(stake(w, v), b - lost, "{} sampled tile {tile}: {s}", v.name);
    }
    // the client's part of the provider's bond, and half the one false statement
    assert_eq!(
        w.balance(&c.client.wallet),
        wallet + R + vb + client_part(R) + vb / 2
    );
}

/// The provider bond of a task of reward `r` under the test parameters.
fn job_bond(r: u64) -> u64 {
    r * test_params().provider_bond_bps as u64 / 10_000
}

#[test]
fn a_two_of_three_majority_that_rejected_a_right_result_loses_to_the_provider() {
    let mut c = cast_in(3, 1, market());
    let job = JobSpec::matmul(128, 40, 128, [2; 32]);
    let honest = right(job);
    let task = c.submitted_job(1, job, 0, honest.root());
    let before = supply(&c.w);
    let w = &mut c.w;
    let [v0, v1, v2] = [&c.verifiers[0], &c.verifiers[1], &c.verifiers[2]];
    // v1 points at an element that is right; v2 at none (a tile past the result)
    decide(
        w,
        task,
        &[
            (v0, Ballot::new(VOTE_VALID, 1)),
            (v1, invalid_at(1, 77, 2)),
            (v2, invalid_at(99, 0, 3)),
        ],
    );
    assert_eq!(w.task(&task).status, TaskStatus::Rejected);
    let provider = c.provider.clone();
    // the provider staked all it had: the client lends it a bond's worth for the dispute
    w.donate(&c.client, provider.wallet, R).unwrap();
    let (p_wallet, p_earned) = (w.balance(&provider.wallet), w.node(&provider.node).earned);
    w.open_dispute(&provider, task, DISPUTE_CLAIMS_FALSE, 0, 0)
        .unwrap();
    // the vote pointing at nothing is refuted at once; the other by recomputing its element
    let r2 = w
        .refute(&provider, task, &honest, pda::vote(&task, &v2.node, 0))
        .unwrap();
    assert_eq!(r2.len(), 1);
    assert_eq!(
        w.task(&task).status,
        TaskStatus::Rejected,
        "one INVALID seat left"
    );
    refused(w, "VoteAlreadyRefuted", |w| {
        w.dispute_target(&provider, task, pda::vote(&task, &v2.node, 0))
    });
    refused(w, "NotAnInvalidVote", |w| {
        w.dispute_target(&provider, task, pda::vote(&task, &v0.node, 0))
    });
    w.refute(&provider, task, &honest, pda::vote(&task, &v1.node, 0))
        .unwrap();
    let t = w.task(&task);
    assert_eq!(
        t.status,
        TaskStatus::Accepted,
        "every INVALID claim refuted"
    );
    assert_eq!(t.tally().majority, VERDICT_CLAIMS_REFUTED);
    let vb = t.verifier_bond;
    let vaults: Vec<u64> = [v0, v1, v2].iter().map(|v| w.balance(&v.vault)).collect();
    let stakes: Vec<u64> = [v0, v1, v2].iter().map(|v| stake(w, v)).collect();
    w.conclude(task).unwrap();
    let pay = R * (10_000 - test_params().fee_bps as u64 - test_params().verifier_pool_bps as u64)
        / 10_000;
    assert_eq!(
        w.node(&provider.node).earned,
        p_earned + pay,
        "paid as accepted"
    );
    wind_up(w, task, &[v0, v1, v2], &[&provider]);
    // v0, the honest minority, is paid the pool; v1 and v2 lose their whole bonds, half to
    // the provider's award, who also gets its challenger bond back
    let pool = R * test_params().verifier_pool_bps as u64 / 10_000;
    assert_eq!(w.balance(&v0.vault), vaults[0] + pool);
    assert_eq!(stake(w, v1), stakes[1] - vb);
    assert_eq!(stake(w, v2), stakes[2] - vb);
    assert_eq!(w.balance(&provider.wallet), p_wallet + 2 * (vb / 2));
    assert_eq!(supply(w), before);
    w.check_invariants(&[&c.provider, v0, v1, v2], &[]);
}

#[test]
fn a_true_invalid_claim_survives_the_providers_dispute() {
    let mut c = cast_in(3, 1, market());
    let job = JobSpec::matmul(128, 40, 128, [2; 32]);
    let wrong = zeros(job);
    let task = c.submitted_job(1, job, 0, wrong.root());
    let before = supply(&c.w);
    let w = &mut c.w;
    let [v0, v1, v2] = [&c.verifiers[0], &c.verifiers[1], &c.verifiers[2]];
    decide(
        w,
        task,
        &[
            (v0, invalid_at(0, 1, 1)),
            (v1, invalid_at(2, 4000, 2)),
            (v2, Ballot::new(VOTE_VALID, 3)),
        ],
    );
    let provider = c.provider.clone();
    w.donate(&c.client, provider.wallet, R).unwrap();
    w.open_dispute(&provider, task, DISPUTE_CLAIMS_FALSE, 0, 0)
        .unwrap();
    let vote = pda::vote(&task, &v0.node, 0);
    w.refute(&provider, task, &wrong, vote).unwrap();
    assert!(
        w.dispute(&task, &provider).is_none(),
        "lost: closed at once"
    );
    let t = w.task(&task);
    assert_eq!(
        (t.status, t.tally().majority),
        (TaskStatus::Rejected, VOTE_INVALID)
    );
    let forfeit = t.dispute_forfeit;
    assert_eq!(forfeit, t.verifier_bond);
    // the window closes; the rejection stands and the INVALID seats share the forfeit
    w.advance(D as u64 + 1);
    let vaults: Vec<u64> = [v0, v1].iter().map(|v| w.balance(&v.vault)).collect();
    w.conclude(task).unwrap();
    let share = w.task(&task).majority_share;
    // and the VALID minority's slash, as always
    let bonus = w.task(&task).loser_bonus;
    assert!(bonus > 0);
    wind_up(w, task, &[v0, v1, v2], &[]);
    for (v, b) in [v0, v1].iter().zip(vaults) {
        assert_eq!(w.balance(&v.vault), b + share + bonus);
    }
    let verifier_part = job_bond(R) * test_params().reject_verifier_bps as u64 / 10_000;
    assert_eq!(share, (verifier_part + forfeit) / 2);
    assert_eq!(supply(w), before);
}

#[test]
fn a_dispute_of_a_right_result_forfeits_the_bond_to_the_provider() {
    let mut c = cast_in(3, 1, market());
    let job = JobSpec::hash_batch(8, 32, 3, [4; 32]);
    let honest = right(job);
    let task = c.submitted_job(1, job, 0, honest.root());
    let stranger = c.w.actor("stranger", 10 * R);
    let before = supply(&c.w);
    let w = &mut c.w;
    let vs: Vec<&Actor> = c.verifiers.iter().collect();
    vouch(w, task, &vs);
    let wallet = w.balance(&stranger.wallet);
    let records = w.argue(&stranger, task, &honest, 5, 17).unwrap();
    assert!(records
        .iter()
        .any(|r| r.logs.iter().any(|l| l.contains("Program data"))));
    assert!(
        w.dispute(&task, &stranger).is_none(),
        "lost: closed at once"
    );
    let t = w.task(&task);
    assert_eq!(
        (t.status, t.tally().majority),
        (TaskStatus::Accepted, VOTE_VALID)
    );
    assert_eq!(w.balance(&stranger.wallet), wallet - t.verifier_bond);
    refused(w, "DisputeWindowOpen", |w| w.conclude(task));
    w.advance(D as u64 + 1);
    let earned = w.node(&c.provider.node).earned;
    w.conclude(task).unwrap();
    let pay = R * (10_000 - test_params().fee_bps as u64 - test_params().verifier_pool_bps as u64)
        / 10_000;
    assert_eq!(
        w.node(&c.provider.node).earned,
        earned + pay + t.verifier_bond,
        "paid, and the forfeit bond to the defender"
    );
    refused(w, "AlreadyConcluded", |w| w.conclude(task));
    wind_up(w, task, &vs, &[]);
    assert_eq!(supply(w), before);
}

#[test]
fn a_challenger_that_stops_answering_loses_at_its_deadline() {
    let mut c = cast_in(3, 1, market());
    let job = JobSpec::hash_batch(8, 32, 3, [4; 32]);
    let wrong = zeros(job);
    let task = c.submitted_job(1, job, 0, wrong.root());
    let lazy = c.w.actor("lazy", 10 * R);
    let w = &mut c.w;
    let vs: Vec<&Actor> = c.verifiers.iter().collect();
    vouch(w, task, &vs);
    w.open_dispute(&lazy, task, DISPUTE_RESULT_WRONG, 1, 1)
        .unwrap();
    refused(w, "DisputeNotExpired", |w| w.dispute_timeout(task, &lazy));
    w.advance(D as u64 + 1);
    // the window closed, but an open dispute holds the money until it ends
    refused(w, "DisputeOpen", |w| w.conclude(task));
    refused(w, "DisputeExpired", |w| {
        w.prove_element(&lazy, task, &wrong, 1, 1)
    });
    w.dispute_timeout(task, &lazy).unwrap();
    assert!(w.dispute(&task, &lazy).is_none());
    w.conclude(task).unwrap();
    assert_eq!(
        w.task(&task).status,
        TaskStatus::Accepted,
        "nobody proved it wrong"
    );
    wind_up(w, task, &vs, &[]);
}

#[test]
fn disputes_are_refused_outside_their_rules() {
    let mut c = cast_in(3, 1, market());
    let job = JobSpec::hash_batch(8, 32, 3, [4; 32]);
    let wrong = zeros(job);
    let task = c.submitted_job(1, job, 0, wrong.root());
    let x = c.w.actor("x", 10 * R);
    let w = &mut c.w;
    let vs: Vec<&Actor> = c.verifiers.iter().collect();
    refused(w, "NotDisputable", |w| {
        w.open_dispute(&x, task, DISPUTE_RESULT_WRONG, 0, 0)
    });
    vouch(w, task, &vs);
    refused(w, "NotDisputable", |w| {
        w.open_dispute(&x, task, DISPUTE_CLAIMS_FALSE, 0, 0)
    });
    refused(w, "InvalidDisputeKind", |w| {
        w.open_dispute(&x, task, 7, 0, 0)
    });
    refused(w, "ElementOutOfRange", |w| {
        w.open_dispute(&x, task, DISPUTE_RESULT_WRONG, 8, 0)
    });
    refused(w, "ElementOutOfRange", |w| {
        w.open_dispute(&x, task, DISPUTE_RESULT_WRONG, 0, 32)
    });
    w.open_dispute(&x, task, DISPUTE_RESULT_WRONG, 2, 9)
        .unwrap();
    refused(w, "NotProven", |w| w.dispute_step(&x, task, None, 1));
    // a proof of another element, or a changed chunk, does not lead to the root
    let (mut chunk, path) = wrong.element_proof(2, 9);
    chunk[0] ^= 1;
    let mut bytes = chunk;
    path.iter().for_each(|s| bytes.extend_from_slice(s));
    w.write_proof(&x, task, &bytes).unwrap();
    let n = path.len() as u8;
    refused(w, "ProofMismatch", |w| {
        w.send_as(
            "dispute_prove",
            &x,
            compute_market::client::dispute_prove(task, x.key(), n),
        )
    });
    refused(w, "ProofTooLong", |w| {
        w.send_as(
            "dispute_prove",
            &x,
            compute_market::client::dispute_prove(task, x.key(), 33),
        )
    });
    // nobody else can argue x's dispute: the PDA is the signer's
    let y = c.verifiers[0].clone();
    refused(w, "AccountOwnedByWrongProgram", |w| {
        w.dispute_step(&y, task, None, 1)
    });
    w.prove_element(&x, task, &wrong, 2, 9).unwrap();
    refused(w, "AlreadyProven", |w| {
        w.prove_element(&x, task, &wrong, 2, 9)
    });
    w.advance(D as u64 + 1);
    refused(w, "DisputeWindowClosed", |w| {
        w.open_dispute(&c.client.clone(), task, DISPUTE_RESULT_WRONG, 0, 0)
    });
}

#[test]
fn a_market_without_a_window_settles_at_once_and_takes_no_dispute() {
    let mut c = cast(3, 1);
    let job = JobSpec::hash_batch(8, 32, 3, [4; 32]);
    let wrong = zeros(job);
    let task = c.submitted_job(1, job, 0, wrong.root());
    let w = &mut c.w;
    let vs: Vec<&Actor> = c.verifiers.iter().collect();
    vouch(w, task, &vs);
    assert!(!w.task(&task).held);
    let client = c.client.clone();
    refused(w, "NotDisputable", |w| {
        w.open_dispute(&client, task, DISPUTE_RESULT_WRONG, 0, 0)
    });
    wind_up(w, task, &vs, &[]);
}

#[test]
fn a_refuted_vote_counts_once_and_costs_its_bond_even_when_the_verdict_stands() {
    // 70 × 40 × 130: tile 5 (the last row and column of tiles) is mostly padding, zero
    let mut c = cast_in(3, 1, market());
    let job = JobSpec::matmul(70, 40, 130, [3; 32]);
    let wrong = zeros(job);
    let task = c.submitted_job(1, job, 0, wrong.root());
    let before = supply(&c.w);
    let (a, b) = (c.w.actor("sybil-a", 10 * R), c.w.actor("sybil-b", 10 * R));
    let w = &mut c.w;
    let [v0, v1, v2] = [&c.verifiers[0], &c.verifiers[1], &c.verifiers[2]];
    // v0 points at padding (right: 0), v1 at a wrong entry: the result is wrong
    assert_eq!(dispute::matmul_entry(&job, 5, 4095), None);
    decide(
        w,
        task,
        &[
            (v0, invalid_at(5, 4095, 1)),
            (v1, invalid_at(0, 0, 2)),
            (v2, Ballot::new(VOTE_VALID, 3)),
        ],
    );
    let v0_vote = pda::vote(&task, &v0.node, 0);
    for x in [&a, &b] {
        w.open_dispute(x, task, DISPUTE_CLAIMS_FALSE, 0, 0).unwrap();
        w.dispute_target(x, task, v0_vote).unwrap();
    }
    for x in [&a, &b] {
        w.prove_element(x, task, &wrong, 5, 4095).unwrap();
        w.step_to_end(x, task, Some(v0_vote)).unwrap();
    }
    // both refuted the same vote: it counts once, and one INVALID seat is not all of them
    let t = w.task(&task);
    assert_eq!(t.refuted_seats, 1);
    assert_eq!(
        (t.status, t.tally().majority),
        (TaskStatus::Rejected, VOTE_INVALID)
    );
    // v1's claim is true: neither sybil can refute it
    let v1_vote = pda::vote(&task, &v1.node, 0);
    let r = w.refute(&a, task, &wrong, v1_vote).unwrap();
    assert!(r.iter().any(|r| r.label == "dispute_step"));
    assert!(w.dispute(&task, &a).is_none(), "a lost");
    w.advance(D as u64 + 1);
    w.dispute_timeout(task, &b).unwrap();
    let (s0, s1) = (stake(w, v0), stake(w, v1));
    let v1_vault = w.balance(&v1.vault);
    let client = w.balance(&c.client.wallet);
    w.conclude(task).unwrap();
    let t = w.task(&task);
    let (share, bonus, vb) = (t.majority_share, t.loser_bonus, t.verifier_bond);
    wind_up(w, task, &[v0, v1, v2], &[]);
    // the rejection stands; v0's refuted pointer costs it its whole bond and its share goes
    // to the client; v1 is paid as a winner, the two forfeits shared with v0's part
    assert_eq!(stake(w, v0), s0 - vb);
    assert_eq!(stake(w, v1), s1);
    assert_eq!(w.balance(&v1.vault), v1_vault + share + bonus);
    assert!(w.balance(&c.client.wallet) >= client + R + share + bonus);
    assert_eq!(supply(w), before + 20 * R);
}

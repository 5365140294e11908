//! Availability (PROTOCOL §8.11): a client that could not fetch a held Accepted result names
//! tiles with a bond, and the provider publishes them on chain, proven against the root, or
//! loses its bond and the client is refunded in full; a provider whose result a seat majority
//! called unavailable publishes tiles drawn from the round's seed and keeps its bond, while the
//! UNAVAILABLE seats lose theirs. Every token is accounted for through every outcome.

use anchor_lang::prelude::Pubkey;
use compute_market::state::{MarketArgs, TaskStatus, AVAILABILITY_ANSWERED, AVAILABILITY_FAILED};
use compute_market_protocol::{
    availability::{self, KIND_CONTEST},
    commit::{
        VERDICT_PROVEN_WRONG, VERDICT_SERVED, VERDICT_UNSERVED, VERDICT_WITHHELD, VOTE_UNAVAILABLE,
        VOTE_VALID,
    },
    dispute,
    job::JobSpec,
    merkle::slot_len,
};
use compute_market_svm_tests::{
    disputes::{stake, supply, wind_up, Committed},
    *,
};

/// The dispute window of the test market: room for four 1 KiB tiles a challenge.
const D: u32 = 50;

fn market() -> MarketArgs {
    MarketArgs {
        dispute_window: D,
        ..test_market(1)
    }
}

/// Eight tiles of 32 nonces (1 KiB each), 10 iterations: small, refereed, challengeable.
fn job() -> JobSpec {
    JobSpec::hash_batch(8, 32, 10, [3; 32])
}

/// The job's right result.
fn right(job: JobSpec) -> Committed {
    Committed::new(job, |t, e| dispute::expected_element(&job, t, e).unwrap())
}

/// A cast with a right result of [`job`] submitted as task 1 (2 samples a seat).
fn submitted() -> (Cast, Pubkey, Committed) {
    let mut c = cast_in(3, 1, market());
    let result = right(job());
    let task = c.submitted_job(1, job(), 2, result.root());
    (c, task, result)
}

/// Every verifier of `c` votes VALID on `task` and the round is finalized.
fn vouch(c: &mut Cast, task: Pubkey) {
    let votes: Vec<(&Actor, Ballot)> = c
        .verifiers
        .iter()
        .zip(1..)
        .map(|(v, tag)| (v, Ballot::new(VOTE_VALID, tag)))
        .collect();
    c.w.decide(task, &votes);
}

/// Every seat votes VALID: Accepted, held for the window.
fn accepted() -> (Cast, Pubkey, Committed) {
    let (mut c, task, result) = submitted();
    vouch(&mut c, task);
    let t = c.w.task(&task);
    assert_eq!(t.status, TaskStatus::Accepted);
    assert!(t.held, "held for the window");
    (c, task, result)
}

#[test]
fn bounds_of_a_challenge_follow_the_window_and_the_slot() {
    assert_eq!(
        availability::max_tiles(&job(), D),
        4,
        "25 slots of answer, 6 a chunk"
    );
    assert_eq!(slot_len(job().tile_len()), 1024);
    // a product's 16 KiB slot does not fit half of a 50-slot window
    assert_eq!(
        availability::max_tiles(&JobSpec::matmul(128, 64, 128, [1; 32]), D),
        0
    );
}

#[test]
fn an_unanswered_challenge_slashes_the_provider_and_refunds_the_client_in_full() {
    let (mut c, task, _) = accepted();
    let before = supply(&c.w);
    let client = c.client.clone();
    let w = &mut c.w;
    let (wallet, provider_stake) = (w.balance(&client.wallet), stake(w, &c.provider));
    let vstakes: Vec<u64> = c.verifiers.iter().map(|v| stake(w, v)).collect();
    let t = w.task(&task);
    let (vb, bond) = (t.verifier_bond, t.provider_bond);

    let nonce = w.challenge(&client, task, &[0, 5]).expect("challenge");
    assert_eq!(
        w.balance(&client.wallet),
        wallet - vb,
        "the challenge is bonded"
    );
    let (a, data) = w.availability(&task, nonce).unwrap();
    assert_eq!(a.named(), &[0, 5]);
    assert_eq!(
        data.len(),
        compute_market::state::Availability::HEADER + 2 * 1024
    );
    assert_eq!(w.task(&task).challenges_open, 1);

    // nothing concludes and nothing times out while the provider may still answer
    refused(w, "AvailabilityNotExpired", |w| {
        w.availability_timeout(task, nonce, &client)
    });
    w.advance(D as u64 + 1);
    refused(w, "ChallengeOpen", |w| w.conclude(task));
    w.availability_timeout(task, nonce, &client).unwrap();
    let t = w.task(&task);
    assert_eq!(
        (t.status, t.tally().majority, t.challenges_open),
        (TaskStatus::Rejected, VERDICT_UNSERVED, 0),
        "unserved"
    );
    assert_eq!(
        w.availability(&task, nonce).unwrap().0.state,
        AVAILABILITY_FAILED
    );
    assert_eq!(w.balance(&client.wallet), wallet, "the bond is back");
    // a second timeout, a publication after the end: refused
    refused(w, "AvailabilityClosed", |w| {
        w.availability_timeout(task, nonce, &client)
    });
    let provider = c.provider.clone();
    refused(w, "AvailabilityClosed", |w| {
        w.publish_write(&provider, task, nonce, 0, vec![1; 8])
    });

    // concluded at once, whatever is left of the window
    w.conclude(task).unwrap();
    wind_up(w, task, &c.verifiers.iter().collect::<Vec<_>>(), &[]);
    let client_part = bond * test_params().reject_client_bps as u64 / 10_000;
    assert_eq!(
        w.balance(&client.wallet),
        wallet + R + client_part,
        "the reward in full and the client's part of the provider's bond"
    );
    assert_eq!(
        stake(w, &c.provider),
        provider_stake - bond,
        "the whole bond"
    );
    for (v, st) in c.verifiers.iter().zip(vstakes) {
        assert_eq!(stake(w, v), st, "{}: a served seat is released", v.name);
    }
    w.close_availability(&client, task, nonce).unwrap();
    assert!(
        !w.exists(&w.availability_key(&task, nonce)),
        "closed, rent back"
    );
    assert_eq!(supply(w), before, "conserved");
}

#[test]
fn an_answered_challenge_publishes_the_tiles_and_costs_the_challenger_its_bond() {
    let (mut c, task, result) = accepted();
    let before = supply(&c.w);
    let client = c.client.clone();
    let provider = c.provider.clone();
    let w = &mut c.w;
    let wallet = w.balance(&client.wallet);
    let t = w.task(&task);
    let (vb, bond) = (t.verifier_bond, t.provider_bond);
    let fees = w.node(&provider.node).fees_due;

    let nonce = w.challenge(&client, task, &[1, 3, 6]).unwrap();
    let sent = w.publish(&provider, task, nonce, &result).unwrap();
    assert_eq!(sent, 3 * (2 + 1), "two writes and a prove a chunk");
    let (a, data) = w.availability(&task, nonce).unwrap();
    assert_eq!(a.state, AVAILABILITY_ANSWERED);
    for (i, &tile) in a.named().iter().enumerate() {
        assert_eq!(
            a.tile_bytes(&data, i).unwrap(),
            &result.tiles[tile as usize][..],
            "tile {tile} readable from the account"
        );
    }
    assert_eq!(
        w.node(&provider.node).fees_due,
        fees + vb,
        "the bond to the treasury, not to the provider"
    );
    let t = w.task(&task);
    assert_eq!(
        (t.status, t.tally().majority, t.challenges_open),
        (TaskStatus::Accepted, VOTE_VALID, 0)
    );
    // the verdict stands and concludes at the end of the window as Accepted
    refused(w, "DisputeWindowOpen", |w| w.conclude(task));
    w.advance(D as u64 + 1);
    w.conclude(task).unwrap();
    wind_up(w, task, &c.verifiers.iter().collect::<Vec<_>>(), &[]);
    assert_eq!(
        w.balance(&client.wallet),
        wallet - vb,
        "paid for the work, lost the bond"
    );
    assert_eq!(
        w.node(&provider.node).bonded,
        0,
        "the provider keeps its bond"
    );
    assert!(
        stake(w, &provider) >= STAKE - bond + bond,
        "nothing slashed"
    );
    w.close_availability(&client, task, nonce).unwrap();
    assert_eq!(supply(w), before, "conserved");
}

#[test]
fn a_publication_is_proven_chunk_by_chunk_and_only_by_the_provider() {
    let (mut c, task, result) = accepted();
    let client = c.client.clone();
    let provider = c.provider.clone();
    let w = &mut c.w;
    let nonce = w.challenge(&client, task, &[2]).unwrap();
    // nobody else writes into the provider's answer: not another node, not a wallet
    let v0 = c.verifiers[0].clone();
    refused(w, "NotThePublisher", |w| {
        w.publish_write(&v0, task, nonce, 0, vec![9; 16])
    });
    refused(w, "AccountNotInitialized", |w| {
        w.publish_write(&client, task, nonce, 0, vec![9; 16])
    });
    // wrong bytes do not prove
    w.publish_write(&provider, task, nonce, 0, vec![9; 512])
        .unwrap();
    refused(w, "ProofMismatch", |w| {
        w.publish_prove(&provider, task, nonce, &result, 0, 0)
    });
    // outside the data area
    refused(w, "OutOfRange", |w| {
        w.publish_write(&provider, task, nonce, 1000, vec![1; 100])
    });
    refused(w, "OutOfRange", |w| {
        w.publish_prove(&provider, task, nonce, &result, 1, 0)
    });
    // the right bytes prove, and are frozen once proven
    let n = w.publish(&provider, task, nonce, &result).unwrap();
    assert_eq!(n, 3);
    refused(w, "AvailabilityClosed", |w| {
        w.publish_write(&provider, task, nonce, 0, vec![9; 16])
    });
    assert_eq!(
        w.availability(&task, nonce).unwrap().0.state,
        AVAILABILITY_ANSWERED
    );
}

#[test]
fn a_challenge_names_few_tiles_of_a_held_accepted_result_within_its_window() {
    let (mut c, task, _) = accepted();
    let client = c.client.clone();
    let w = &mut c.w;
    for tiles in [&[][..], &[3, 1], &[2, 2], &[8], &[0, 1, 2, 3, 4]] {
        refused(w, "TilesInvalid", |w| {
            w.challenge(&client, task, tiles).map(|_| unreachable!())
        });
    }
    // at most MAX_OPEN at once
    for i in 0..availability::MAX_OPEN {
        w.challenge(&client, task, &[i as u32 % 8]).unwrap();
    }
    refused(w, "TooManyChallenges", |w| {
        w.challenge(&client, task, &[0]).map(|_| unreachable!())
    });
    w.advance(D as u64 + 1);
    refused(w, "DisputeWindowClosed", |w| {
        w.challenge(&client, task, &[0]).map(|_| unreachable!())
    });

    // a market without a window: nothing is held, nothing can be challenged
    let mut c = cast(3, 1);
    let result = right(job());
    let task = c.submitted_job(1, job(), 2, result.root());
    vouch(&mut c, task);
    let client = c.client.clone();
    refused(&mut c.w, "NotChallengeable", |w| {
        w.challenge(&client, task, &[0]).map(|_| unreachable!())
    });
}

/// One seat VALID, two UNAVAILABLE: withheld, held for the window.
fn withheld() -> (Cast, Pubkey, Committed) {
    let (mut c, task, result) = submitted();
    let votes = [
        (&c.verifiers[0], Ballot::new(VOTE_VALID, 1)),
        (&c.verifiers[1], Ballot::new(VOTE_UNAVAILABLE, 2)),
        (&c.verifiers[2], Ballot::new(VOTE_UNAVAILABLE, 3)),
    ];
    c.w.decide(task, &votes);
    let t = c.w.task(&task);
    assert_eq!(
        (t.status, t.tally().majority),
        (TaskStatus::Rejected, VERDICT_WITHHELD)
    );
    assert!(
        t.held,
        "a withheld verdict of a challengeable job waits for a contest"
    );
    (c, task, result)
}

#[test]
fn a_withheld_verdict_is_overturned_by_publication_and_the_unavailable_seats_lose_their_bonds() {
    let (mut c, task, result) = withheld();
    let before = supply(&c.w);
    let provider = c.provider.clone();
    let client = c.client.clone();
    let w = &mut c.w;
    let t = w.task(&task);
    let (vb, bond) = (t.verifier_bond, t.provider_bond);
    let (wallet, pstake) = (w.balance(&client.wallet), stake(w, &provider));
    let vstakes: Vec<u64> = c.verifiers.iter().map(|v| stake(w, v)).collect();
    let vfees: Vec<u64> = c
        .verifiers
        .iter()
        .map(|v| w.node(&v.node).fees_due)
        .collect();
    // nobody else contests, nobody challenges a withheld verdict
    let v0 = c.verifiers[0].clone();
    refused(w, "NotTaskProvider", |w| {
        w.contest(&v0, task).map(|_| unreachable!())
    });
    refused(w, "AccountNotInitialized", |w| {
        w.contest(&client, task).map(|_| unreachable!())
    });
    refused(w, "NotChallengeable", |w| {
        w.challenge(&client, task, &[0]).map(|_| unreachable!())
    });

    let nonce = w.contest(&provider, task).unwrap();
    let (a, _) = w.availability(&task, nonce).unwrap();
    assert_eq!(a.kind, KIND_CONTEST);
    assert_eq!(
        a.named(),
        &availability::contest_tiles(&job(), D, &t.seed, &task.to_bytes())[..],
        "the tiles the round's seed draws"
    );
    assert_eq!(a.named().len(), 4);
    refused(w, "AlreadyContested", |w| {
        w.contest(&provider, task).map(|_| unreachable!())
    });
    w.publish(&provider, task, nonce, &result).unwrap();
    let t = w.task(&task);
    assert_eq!(
        (t.status, t.tally().majority),
        (TaskStatus::Accepted, VERDICT_SERVED),
        "served: accepted, decided on its content from now"
    );
    assert_eq!(t.dispute_deadline, w.slot() + D as u64, "a fresh window");
    // its content can now be disputed like any Accepted result's (a right element: refused
    // only by losing, so the dispute opens)
    let (tile, element) = (a.named()[0], 3);
    let records = w
        .argue_by(&client, task, &result, (tile, element), 1)
        .unwrap_or_else(|r| panic!("a served result is open to disputes: {:?}", r.logs));
    assert_eq!(records[0].label, "open_dispute");
    assert_ne!(
        w.task(&task).tally().majority,
        VERDICT_PROVEN_WRONG,
        "it was right"
    );

    w.advance(D as u64 + 1);
    w.conclude(task).unwrap();
    wind_up(w, task, &c.verifiers.iter().collect::<Vec<_>>(), &[]);
    assert_eq!(
        w.balance(&client.wallet),
        wallet - vb,
        "the client paid, and lost its dispute's bond"
    );
    assert!(
        stake(w, &provider) >= pstake,
        "the provider keeps its bond (and is paid)"
    );
    assert!(w.node(&provider.node).earned > 0, "paid");
    let _ = bond;
    // a losing seat's slash (never more than silence would cost), all to the treasury
    let slash = vb * test_params().verifier_slash_bps as u64 / 10_000;
    for (i, v) in c.verifiers.iter().enumerate() {
        let lost = if i == 0 { 0 } else { slash };
        assert!(
            stake(w, v) + lost >= vstakes[i],
            "{}: {} → {}",
            v.name,
            vstakes[i],
            stake(w, v)
        );
        if i > 0 {
            assert_eq!(
                stake(w, v),
                vstakes[i] - slash,
                "{}: a loser's slash",
                v.name
            );
            assert_eq!(
                w.node(&v.node).fees_due,
                vfees[i] + slash,
                "{}: to the treasury",
                v.name
            );
        }
    }
    // the VALID seat is paid what one seat of the three would get, not the whole pool
    let pool = R * test_params().verifier_pool_bps as u64 / 10_000;
    assert_eq!(
        w.node(&c.verifiers[0].node).earned,
        pool / 3,
        "a third of the pool: serving only some seats never enlarges their shares"
    );
    w.close_availability(&provider, task, nonce).unwrap();
    assert_eq!(supply(w), before, "conserved");
}

#[test]
fn an_unanswered_contest_leaves_the_withheld_verdict() {
    let (mut c, task, _) = withheld();
    let before = supply(&c.w);
    let provider = c.provider.clone();
    let w = &mut c.w;
    let bond = w.task(&task).provider_bond;
    let pstake = stake(w, &provider);
    let nonce = w.contest(&provider, task).unwrap();
    w.advance(D as u64 + 1);
    refused(w, "ChallengeOpen", |w| w.conclude(task));
    w.availability_timeout(task, nonce, &provider).unwrap();
    let t = w.task(&task);
    assert_eq!((t.tally().majority, t.contest), (VERDICT_WITHHELD, 3));
    w.conclude(task).unwrap();
    wind_up(w, task, &c.verifiers.iter().collect::<Vec<_>>(), &[]);
    assert_eq!(
        stake(w, &provider),
        pstake - bond,
        "withheld: the whole bond"
    );
    w.close_availability(&provider, task, nonce).unwrap();
    assert_eq!(supply(w), before, "conserved");
}

#[test]
fn a_challenge_of_product_tiles_is_grown_past_10_kib_in_its_opening_transaction() {
    // 16 KiB slots: in a window of 200 slots, one tile a challenge
    let job = JobSpec::matmul(256, 64, 256, [4; 32]);
    let market = MarketArgs {
        dispute_window: 200,
        ..test_market(1)
    };
    assert_eq!(availability::max_tiles(&job, 200), 1);
    let mut c = cast_in(3, 1, market);
    let result = Committed::new(job, |t, e| {
        let mut v = [0u8; 32];
        v[..4].copy_from_slice(&(t * 7 + e).to_le_bytes());
        v
    });
    let task = c.submitted_job(1, job, 2, result.root());
    vouch(&mut c, task);
    let (client, provider) = (c.client.clone(), c.provider.clone());
    let w = &mut c.w;
    let nonce = w.challenge(&client, task, &[9]).unwrap();
    let (_, data) = w.availability(&task, nonce).unwrap();
    assert_eq!(
        data.len(),
        compute_market::state::Availability::HEADER + 16 * 1024,
        "grown to its full size"
    );
    let sent = w.publish(&provider, task, nonce, &result).unwrap();
    assert_eq!(sent, 32 + 16, "32 writes and 16 proves");
    let (a, data) = w.availability(&task, nonce).unwrap();
    assert_eq!(a.state, AVAILABILITY_ANSWERED);
    assert_eq!(a.tile_bytes(&data, 0).unwrap(), &result.tiles[9][..]);

    // a challenge opened and never grown cannot be answered: it fails nobody and its bond
    // goes to the treasury
    let nonce = w.task(&task).availability_nonce;
    let ix = compute_market::client::challenge_availability(
        task,
        w.posted[&task],
        nonce,
        client.key(),
        client.wallet,
        client.wallet,
        vec![3],
    );
    w.send_as("challenge_availability", &client, ix).unwrap();
    refused(w, "AvailabilityNotSized", |w| {
        w.publish_write(&provider, task, nonce, 0, vec![1; 8])
    });
    // it grows in its opening slot only: grown later, it could hold the provider off until its
    // deadline and then fail it
    w.advance(1);
    let av = w.availability_key(&task, nonce);
    refused(w, "GrowTooLate", |w| {
        w.send_as(
            "availability_grow",
            &client,
            compute_market::client::availability_grow(av, client.key()),
        )
    });
    // and it ends at once, moot, its bond to the treasury
    let fees = w.node(&provider.node).fees_due;
    w.availability_timeout(task, nonce, &client).unwrap();
    let t = w.task(&task);
    assert_eq!(t.tally().majority, VOTE_VALID, "the verdict stands");
    assert_eq!(w.node(&provider.node).fees_due, fees + t.verifier_bond);
}

#[test]
fn nobody_takes_the_clients_room_and_each_challenge_gets_a_whole_window() {
    let (mut c, task, result) = accepted();
    let (client, provider) = (c.client.clone(), c.provider.clone());
    let w = &mut c.w;
    let griefer = w.actor("griefer", 100 * R);
    let mut opened = vec![];
    for i in 0..availability::MAX_OPEN {
        opened.push(w.challenge(&griefer, task, &[i as u32 % 8]).unwrap());
    }
    refused(w, "TooManyChallenges", |w| {
        w.challenge(&griefer, task, &[0]).map(|_| unreachable!())
    });
    // the client's own room is untouched
    let mine = w.challenge(&client, task, &[5]).unwrap();
    let t = w.task(&task);
    assert_eq!((t.challenges_open, t.client_challenges), (9, 1));
    // queued: each deadline a whole window after the one before
    let deadlines: Vec<u64> = opened
        .iter()
        .chain([&mine])
        .map(|n| w.availability(&task, *n).unwrap().0.answer_deadline)
        .collect();
    assert!(
        deadlines.windows(2).all(|d| d[1] == d[0] + D as u64),
        "{deadlines:?}"
    );
    // the provider answers every one in time, the client's first
    w.publish(&provider, task, mine, &result).unwrap();
    for n in &opened {
        w.publish(&provider, task, *n, &result).unwrap();
    }
    let t = w.task(&task);
    assert_eq!(
        (t.challenges_open, t.client_challenges, t.tally().majority),
        (0, 0, VOTE_VALID)
    );
}

#[test]
fn a_task_posted_again_at_its_address_has_availability_accounts_of_its_own() {
    let (mut c, task, result) = accepted();
    let (client, provider) = (c.client.clone(), c.provider.clone());
    let w = &mut c.w;
    let nonce = w.challenge(&client, task, &[1]).unwrap();
    w.publish(&provider, task, nonce, &result).unwrap();
    let old = w.availability_key(&task, nonce);
    w.advance(D as u64 + 1);
    w.conclude(task).unwrap();
    wind_up(w, task, &c.verifiers.iter().collect::<Vec<_>>(), &[]);
    // the client leaves its ended account open and posts the same id again
    assert!(w.exists(&old));
    let task2 = c.submitted_job(1, job(), 2, result.root());
    assert_eq!(task2, task, "the same address");
    vouch(&mut c, task2);
    let w = &mut c.w;
    assert_eq!(w.task(&task2).availability_nonce, 0);
    let n2 = w
        .challenge(&client, task2, &[5])
        .expect("a new task's own account");
    assert_ne!(w.availability_key(&task2, n2), old);
}

//! Every lifecycle path of PROTOCOL §3–§4, end to end on the built program, with token
//! balances asserted at each step.

use compute_market::{client, pda, state::TaskStatus};
use compute_market_protocol::commit::{verification_seed, VOTE_INVALID, VOTE_VALID};
use compute_market_svm_tests::*;

use anchor_lang::prelude::Pubkey;

#[test]
fn accepted_path_pays_provider_and_verifiers_and_closes_everything() {
    let mut c = cast(3, 1);
    let w = &mut c.w;
    let client_before = w.balance(&c.client.wallet);

    // post: reward into escrow
    let task = w.post(&c.client, 1, small_job(1), R).unwrap();
    let escrow = pda::escrow(&task);
    assert_eq!(w.balance(&c.client.wallet), client_before - R);
    assert_eq!(w.balance(&escrow), R);
    let t = w.task(&task);
    assert_eq!(t.status, TaskStatus::Open);
    assert_eq!(
        (t.provider_bond, t.verifier_bond, t.tile_count),
        (2 * R, R / 2, 4)
    );

    // claim: provider bond free -> bonded, no tokens move
    w.claim(&c.provider, task).unwrap();
    let n = w.node(&c.provider.node);
    assert_eq!((n.free, n.bonded), (STAKE - 2 * R, 2 * R));
    assert_eq!(w.balance(&c.provider.vault), STAKE);

    // submit, then the seed comes from the first slot after the submit slot
    w.submit(&c.provider, task, [7; 32]).unwrap();
    let submit_slot = w.slot();
    w.advance(2);
    let ballots: Vec<Ballot> = (0..3).map(|i| Ballot::new(VOTE_VALID, i)).collect();
    let votes: Vec<(&Actor, Ballot)> = c.verifiers.iter().zip(ballots.iter().copied()).collect();
    w.join_and_commit(task, &votes);
    let t = w.task(&task);
    assert!(t.seed_drawn);
    assert_eq!(
        t.hashed_slot,
        submit_slot + 1,
        "seed from the first slot after the submit slot"
    );
    assert_eq!(
        t.seed,
        verification_seed(&slot_hash(submit_slot + 1), &task.to_bytes(), &[7; 32], 0)
    );
    for v in &c.verifiers {
        let n = w.node(&v.node);
        assert_eq!((n.free, n.bonded), (STAKE - R / 2, R / 2));
    }
    // all seats committed: reveals open early; all revealed: finalize early
    for (v, b) in &votes {
        w.reveal(v, task, b).unwrap();
    }
    w.finalize(task).unwrap();
    let t = w.task(&task);
    assert_eq!(t.status, TaskStatus::Accepted);
    // fee 2% = 20_000, pool 10% = 100_000 split 33_333 ×3 + 1 dust, provider 880_000
    assert_eq!(w.balance(&c.provider.vault), STAKE + 880_000 + 20_000 + 1);
    let n = w.node(&c.provider.node);
    assert_eq!(
        (n.free, n.bonded, n.earned, n.fees_due, n.tasks_completed),
        (STAKE, 0, 880_000, 20_001, 1)
    );
    assert_eq!(w.balance(&escrow), 100_000 - 1);

    // settle every vote (a stranger cranks): bond back + 33_333 each, vote accounts closed
    for v in &c.verifiers {
        let lamports_before = w.c.svm.get_balance(&v.key()).unwrap();
        w.settle(task, v, 0).unwrap();
        assert_eq!(w.balance(&v.vault), STAKE + 33_333);
        let n = w.node(&v.node);
        assert_eq!(
            (n.free, n.bonded, n.earned, n.verifications),
            (STAKE, 0, 33_333, 1)
        );
        assert!(!w.exists(&pda::vote(&task, &v.node, 0)));
        assert!(
            w.c.svm.get_balance(&v.key()).unwrap() > lamports_before,
            "vote rent returned"
        );
    }
    assert_eq!(w.balance(&escrow), 0);

    // close: escrow and task closed, client gets the rent
    let lamports_before = w.c.svm.get_balance(&c.client.key()).unwrap();
    w.close(task).unwrap();
    assert!(!w.exists(&task) && !w.exists(&escrow));
    assert!(w.c.svm.get_balance(&c.client.key()).unwrap() > lamports_before);
    assert_eq!(w.balance(&c.client.wallet), client_before - R);

    // fees to the treasury, earnings to the provider's wallet
    w.sweep(c.provider.node).unwrap();
    assert_eq!(w.balance(&w.treasury), 20_001);
    w.send_as(
        "claim_earnings",
        &c.provider,
        client::claim_earnings(c.provider.key(), c.provider.wallet),
    )
    .unwrap();
    assert_eq!(w.balance(&c.provider.wallet), 880_000);
    assert_eq!(w.balance(&c.provider.vault), STAKE);
    let all: Vec<&Actor> = std::iter::once(&c.provider)
        .chain(c.verifiers.iter())
        .collect();
    w.check_invariants(&all, &[task]);
}

#[test]
fn rejected_path_slashes_provider_pays_client_and_majority_and_slashes_minority() {
    let mut c = cast(3, 1);
    let task = c.submitted(2);
    let w = &mut c.w;
    let client_before = w.balance(&c.client.wallet);
    // v0 sides with the (bad) provider, v1 and v2 vote invalid
    let ballots = [
        Ballot::new(VOTE_VALID, 10),
        Ballot::new(VOTE_INVALID, 11),
        Ballot::new(VOTE_INVALID, 12),
    ];
    let votes: Vec<(&Actor, Ballot)> = c.verifiers.iter().zip(ballots).collect();
    w.join_and_commit(task, &votes);
    for (v, b) in &votes {
        w.reveal(v, task, b).unwrap();
    }
    w.finalize(task).unwrap();
    let t = w.task(&task);
    assert_eq!(t.status, TaskStatus::Rejected);
    // bond 2_000_000: client 1_000_000, verifiers 800_000 (400_000 each), treasury 200_000
    let n = w.node(&c.provider.node);
    assert_eq!(
        (n.free, n.bonded, n.fees_due, n.times_slashed),
        (STAKE - 2 * R, 0, 200_000, 1)
    );
    assert_eq!(w.balance(&c.provider.vault), STAKE - 2 * R + 200_000);
    assert_eq!(w.balance(&pda::escrow(&task)), R + 1_000_000 + 800_000);

    // majority cannot be paid before the minority's slash is in
    let early = w.settle(task, &c.verifiers[1], 0).unwrap_err();
    assert!(early.has_error("SlashesPending"));
    // minority: loses 50% of its 500_000 bond
    w.settle(task, &c.verifiers[0], 0).unwrap();
    assert_eq!(w.balance(&c.verifiers[0].vault), STAKE - 250_000);
    let n = w.node(&c.verifiers[0].node);
    assert_eq!((n.free, n.bonded, n.times_slashed), (STAKE - 250_000, 0, 1));
    // majority: 400_000 share + 125_000 of the minority's slash each
    for v in &c.verifiers[1..] {
        w.settle(task, v, 0).unwrap();
        assert_eq!(w.balance(&v.vault), STAKE + 400_000 + 125_000);
        assert_eq!(w.node(&v.node).earned, 525_000);
    }
    assert_eq!(w.balance(&pda::escrow(&task)), 2 * R);
    w.close(task).unwrap();
    assert_eq!(
        w.balance(&c.client.wallet),
        client_before + 2 * R,
        "reward back plus half the provider's bond"
    );
    assert!(!w.exists(&task));
    w.sweep(c.provider.node).unwrap();
    assert_eq!(w.balance(&w.treasury), 200_000);
}

#[test]
fn non_revealing_verifier_is_slashed_and_majority_rewarded() {
    let mut c = cast(3, 1);
    let task = c.submitted(3);
    let w = &mut c.w;
    let ballots: Vec<Ballot> = (0..3).map(|i| Ballot::new(VOTE_VALID, 20 + i)).collect();
    let votes: Vec<(&Actor, Ballot)> = c.verifiers.iter().zip(ballots.iter().copied()).collect();
    w.join_and_commit(task, &votes);
    for (v, b) in &votes[..2] {
        w.reveal(v, task, b).unwrap();
    }
    // v2 never reveals: finalize only after the reveal deadline
    assert!(w.finalize(task).unwrap_err().has_error("FinalizeTooEarly"));
    let deadline = w.task(&task).reveal_deadline;
    w.advance(deadline + 1 - w.slot());
    w.finalize(task).unwrap();
    assert_eq!(w.task(&task).status, TaskStatus::Accepted);
    w.settle(task, &c.verifiers[2], 0).unwrap();
    assert_eq!(w.balance(&c.verifiers[2].vault), STAKE - 250_000);
    // pool 100_000 / 2 = 50_000, plus 250_000 / 2 = 125_000
    for v in &c.verifiers[..2] {
        w.settle(task, v, 0).unwrap();
        assert_eq!(w.balance(&v.vault), STAKE + 50_000 + 125_000);
    }
    w.close(task).unwrap();
    assert!(!w.exists(&task));
}

#[test]
fn escalation_to_2v_seats_then_accepted() {
    // six equal verifiers: each holds a sixth of the stake, always eligible for every seat
    let mut c = cast(6, 1);
    let task = c.submitted(4);
    let w = &mut c.w;
    // round 0: 1 valid, 1 invalid, 1 silent -> no majority -> escalated
    let r0 = [
        Ballot::new(VOTE_VALID, 30),
        Ballot::new(VOTE_INVALID, 31),
        Ballot::new(VOTE_VALID, 32),
    ];
    let votes: Vec<(&Actor, Ballot)> = c.verifiers[..3].iter().zip(r0).collect();
    w.join_and_commit(task, &votes);
    w.reveal(votes[0].0, task, &votes[0].1).unwrap();
    w.reveal(votes[1].0, task, &votes[1].1).unwrap();
    let deadline = w.task(&task).reveal_deadline;
    w.advance(deadline + 1 - w.slot());
    w.finalize(task).unwrap();
    let t = w.task(&task);
    assert_eq!(
        (t.status, t.round, t.rounds[1].quorum, t.seed_drawn),
        (TaskStatus::Verifying, 1, 6, false)
    );
    assert_eq!(t.rounds[0].majority, 0);
    // round-0 votes settle now: revealers released, the silent one slashed to the treasury
    w.settle(task, &c.verifiers[0], 0).unwrap();
    assert_eq!(w.balance(&c.verifiers[0].vault), STAKE);
    w.settle(task, &c.verifiers[2], 0).unwrap();
    let n = w.node(&c.verifiers[2].node);
    assert_eq!((n.free, n.fees_due), (STAKE - 250_000, 250_000));
    w.settle(task, &c.verifiers[1], 0).unwrap();

    // round 1: fresh seed from after the escalation slot; 6 seats for five nodes, the last
    // of which takes two: 4 seats valid, 2 invalid (one vote, counted twice)
    let escalated_at = w.slot();
    w.advance(2);
    let voters: Vec<&Actor> = [0, 1, 3, 4, 5].iter().map(|&i| &c.verifiers[i]).collect();
    let ballot = |i: usize| {
        Ballot::new(
            if i == 4 { VOTE_INVALID } else { VOTE_VALID },
            40 + i as u64,
        )
    };
    for v in &voters {
        w.join(v, task).unwrap();
    }
    w.join(voters[4], task).expect("a second seat");
    assert_eq!(w.task(&task).hashed_slot, escalated_at + 1);
    assert_eq!(w.task(&task).seats_held_by(&voters[4].node), 2);
    for (i, v) in voters.iter().enumerate() {
        w.commit(v, task, &ballot(i)).unwrap();
    }
    for (i, v) in voters.iter().enumerate() {
        w.reveal(v, task, &ballot(i)).unwrap();
    }
    let tally = *w.task(&task).tally();
    assert_eq!((tally.valid, tally.invalid), (4, 2));
    w.finalize(task).unwrap();
    assert_eq!(w.task(&task).status, TaskStatus::Accepted);
    // losers first (two seats: 2 × 250_000), then winners: pool 100_000/4 = 25_000 + the
    // slashes 500_000/4 = 125_000
    let before = w.balance(&voters[4].vault);
    w.settle(task, voters[4], 1).unwrap();
    assert_eq!(w.balance(&voters[4].vault), before - 500_000);
    for v in &voters[..4] {
        let before = w.balance(&v.vault);
        w.settle(task, v, 1).unwrap();
        assert_eq!(w.balance(&v.vault), before + 150_000);
    }
    w.close(task).unwrap();
    let all: Vec<&Actor> = std::iter::once(&c.provider)
        .chain(c.verifiers.iter())
        .collect();
    w.check_invariants(&all, &[task]);
}

#[test]
fn undecided_after_escalation_refunds_client_and_releases_bonds() {
    let mut c = cast(1, 1);
    let task = c.submitted(5);
    let w = &mut c.w;
    let client_before = w.balance(&c.client.wallet);
    // nobody joins either round
    for _ in 0..2 {
        let d = w.task(&task).reveal_deadline;
        w.advance(d + 1 - w.slot());
        w.finalize(task).unwrap();
    }
    assert_eq!(w.task(&task).status, TaskStatus::Undecided);
    let n = w.node(&c.provider.node);
    assert_eq!((n.free, n.bonded), (STAKE, 0));
    w.close(task).unwrap();
    assert_eq!(w.balance(&c.client.wallet), client_before + R);
}

#[test]
fn cancel_and_expire_refund_the_client() {
    let mut c = cast(0, 1);
    let w = &mut c.w;
    let before = w.balance(&c.client.wallet);
    let t1 = w.post(&c.client, 6, small_job(6), R).unwrap();
    let t2 = w.post(&c.client, 7, small_job(7), R).unwrap();
    assert_eq!(w.balance(&c.client.wallet), before - 2 * R);
    w.send_as(
        "cancel_task",
        &c.client,
        client::cancel_task(c.client.key(), t1),
    )
    .unwrap();
    assert_eq!(w.task(&t1).status, TaskStatus::Cancelled);
    assert!(w
        .crank("expire_task", client::expire_task(t2))
        .unwrap_err()
        .has_error("TaskNotExpired"));
    let ttl = w.task(&t2).open_deadline;
    w.advance(ttl + 1 - w.slot());
    w.crank("expire_task", client::expire_task(t2)).unwrap();
    assert_eq!(w.task(&t2).status, TaskStatus::Expired);
    // an expired task can no longer be claimed
    assert!(w
        .claim(&c.provider, t2)
        .unwrap_err()
        .has_error("TaskNotOpen"));
    w.close(t1).unwrap();
    w.close(t2).unwrap();
    assert_eq!(w.balance(&c.client.wallet), before);
    assert!(!w.exists(&t1) && !w.exists(&t2) && !w.exists(&pda::escrow(&t1)));
}

#[test]
fn missed_submit_deadline_slashes_provider_and_reopens_task() {
    let mut c = cast(0, 1);
    let w = &mut c.w;
    let task = w.post(&c.client, 8, small_job(8), R).unwrap();
    w.claim(&c.provider, task).unwrap();
    let reclaim = client::reclaim_task(task, c.provider.node);
    assert!(w
        .crank("reclaim_task", reclaim.clone())
        .unwrap_err()
        .has_error("SubmitDeadlineNotPassed"));
    let d = w.task(&task).submit_deadline;
    w.advance(d + 1 - w.slot());
    assert!(w
        .submit(&c.provider, task, [1; 32])
        .unwrap_err()
        .has_error("SubmitDeadlinePassed"));
    w.crank("reclaim_task", reclaim).unwrap();
    // 10% of the 2_000_000 bond to the escrow, for the client
    let t = w.task(&task);
    assert_eq!(
        (t.status, t.client_extra, t.provider),
        (TaskStatus::Open, 200_000, Pubkey::default())
    );
    assert_eq!(w.balance(&pda::escrow(&task)), R + 200_000);
    let n = w.node(&c.provider.node);
    assert_eq!((n.free, n.bonded, n.times_slashed), (STAKE - 200_000, 0, 1));
    assert_eq!(w.balance(&c.provider.vault), STAKE - 200_000);
    // the client cancels the reopened task and gets reward + compensation
    let before = w.balance(&c.client.wallet);
    w.send_as(
        "cancel_task",
        &c.client,
        client::cancel_task(c.client.key(), task),
    )
    .unwrap();
    w.close(task).unwrap();
    assert_eq!(w.balance(&c.client.wallet), before + R + 200_000);
}

#[test]
fn unstake_cooldown_withdraw_and_close_node() {
    let mut c = cast(1, 1);
    let w = &mut c.w;
    let v = &c.verifiers[0];
    assert_eq!(w.market_account().verifier_stake, STAKE);
    w.send_as(
        "request_unstake",
        v,
        client::request_unstake(v.key(), w.market, STAKE + 1),
    )
    .map(|_| ())
    .expect_err("more than free stake");
    w.send_as(
        "request_unstake",
        v,
        client::request_unstake(v.key(), w.market, STAKE),
    )
    .unwrap();
    let n = w.node(&v.node);
    assert_eq!(
        (n.free, n.pending_unstake, n.unlock_slot),
        (0, STAKE, w.slot() + 5_000)
    );
    assert_eq!(w.market_account().verifier_stake, 0);
    let r = w
        .send_as("withdraw", v, client::withdraw(v.key(), v.wallet))
        .unwrap_err();
    assert!(r.has_error("CooldownNotElapsed"));
    w.advance(5_000);
    w.send_as("withdraw", v, client::withdraw(v.key(), v.wallet))
        .unwrap();
    assert_eq!(w.balance(&v.wallet), STAKE);
    assert_eq!(w.balance(&v.vault), 0);
    // close: node and vault gone, market counts down
    assert_eq!(w.market_account().verifiers, 1);
    w.send_as(
        "close_node",
        v,
        client::close_node(v.key(), w.market, v.wallet),
    )
    .unwrap();
    assert!(!w.exists(&v.node) && !w.exists(&v.vault));
    assert_eq!(w.market_account().verifiers, 0);
    // a provider with stake cannot close
    let p = &c.provider;
    assert!(w
        .send_as(
            "close_node",
            p,
            client::close_node(p.key(), w.market, p.wallet)
        )
        .unwrap_err()
        .has_error("NodeNotEmpty"));
}

#[test]
fn parameter_updates_are_bounded_and_delayed() {
    let mut w = World::new();
    let mut p = test_params();
    p.fee_bps = 1_001;
    let r = w.propose(p).unwrap_err();
    assert!(r.has_error("ParamOutOfBounds"));
    let mut p = test_params();
    p.unstake_cooldown = 100; // shorter than twice the market's longest task (2 × 900)
    let r = w.propose(p).unwrap_err();
    assert!(r.has_error("CooldownTooShort"));
    let mut p = test_params();
    p.fee_bps = 500;
    w.propose(p).unwrap();
    assert!(w
        .crank("apply_params", client::apply_params())
        .unwrap_err()
        .has_error("UpdateNotYetEffective"));
    // the configured delay (50) is shorter than the longest task (900) plus the cooldown in
    // force (5 000): the proposal waits longer, so any staker can leave before it applies
    w.advance(5_900);
    assert!(w
        .crank("apply_params", client::apply_params())
        .unwrap_err()
        .has_error("UpdateNotYetEffective"));
    w.advance(1);
    w.crank("apply_params", client::apply_params()).unwrap();
    assert_eq!(w.config().params.fee_bps, 500);
    assert!(w
        .crank("apply_params", client::apply_params())
        .unwrap_err()
        .has_error("NoPendingUpdate"));
    // a stranger cannot propose
    let stranger = w.cranker.insecure_clone();
    let r = w
        .send(
            "propose_params",
            &stranger,
            &[],
            client::propose_params(stranger.pubkey(), test_params()),
        )
        .unwrap_err();
    assert!(r.has_error("WrongAuthority"));
}

use solana_signer::Signer;

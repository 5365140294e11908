//! Issue 24: the seat rule's last holes, each an attack that worked on the landed program and
//! is now refused by name or leaves the attacker with exactly its share (PROTOCOL §3.1–§3.3,
//! §4.4, §7): a same-slot shrink of the snapshot denominator (at submission and at escalation),
//! seats won by splitting stake over many nodes, quorum-1 tasks, penalties that round to zero,
//! and a seat that keeps the weight of stake unstaked after joining. The seed re-roll by waiting
//! is `attacks.rs`' `a_seed_cannot_be_re_rolled_by_waiting`.

use anchor_lang::prelude::Pubkey;
use compute_market::{
    client,
    constants::SEAT_OVERSAMPLE,
    instructions::{PostTaskArgs, SubmitResultArgs},
    state::{Params, TaskStatus},
};
use compute_market_protocol::{
    commit::{VOTE_INVALID, VOTE_VALID},
    seats::{seat_eligible, SeatScore},
};
use compute_market_svm_tests::*;
use solana_signer::Signer;

fn args() -> SubmitResultArgs {
    SubmitResultArgs {
        result_root: [7; 32],
        result_uri: "http://127.0.0.1:9000/r/".into(),
    }
}

/// Finding 1: one transaction signed by the provider and a stake-less verifier node Z —
/// `stake(Z, X)`, `request_unstake(Z, X)`, `submit_result` — drove the round's denominator to
/// 0 (the stake was subtracted twice), and every node in the market became eligible. The same
/// at escalation with `[stake, request_unstake, finalize_task]`. Now the snapshot is the total
/// as it stood before the slot: a sliver of stake stays as hopeless as it is.
#[test]
fn stake_added_and_removed_in_the_snapshot_slot_shrinks_nothing() {
    let mut c = cast(3, 1);
    let z = c.w.actor("z", 100 * STAKE);
    c.w.register(&z, 2, gpu()).unwrap();
    let z2 = c.w.actor("z2", 100 * STAKE);
    c.w.register(&z2, 2, gpu()).unwrap();
    let sliver = c.w.actor("sliver", STAKE);
    c.w.onboard(&sliver, 2, 1_000);
    c.w.advance(1);
    let w = &mut c.w;
    let before = w.market_account().verifier_stake;
    assert_eq!(before, 3 * STAKE + 1_000);
    let task = w.post(&c.client, 1, small_job(1), R).unwrap();
    w.claim(&c.provider, task).unwrap();
    let x = 50 * STAKE;
    let ixs = [
        client::stake(z.key(), w.market, z.wallet, x),
        client::request_unstake(z.key(), w.market, x),
        client::submit_result(c.provider.key(), task, w.market, args()),
    ];
    let (p, zk) = (c.provider.kp.insecure_clone(), z.kp.insecure_clone());
    w.send_all("stake+request_unstake+submit_result", &p, &[&zk], &ixs)
        .unwrap();
    let t = w.task(&task);
    assert_eq!(w.market_account().verifier_stake, before, "net zero");
    assert_eq!(
        t.snapshot_stake, before,
        "the denominator stood where it was"
    );
    w.advance(2);
    // stake added now pays the sliver's bond but counts for nothing in this round
    w.stake(&sliver, STAKE / 2).unwrap();
    w.crank("draw_seed", client::draw_seed(task)).unwrap();
    let t = w.task(&task);
    for seat in 0..3u8 {
        let s = SeatScore::new(&t.seed, &sliver.node.to_bytes(), seat, 1_000);
        assert!(!seat_eligible(&s, t.snapshot_stake, SEAT_OVERSAMPLE));
        // with the shrunk denominator of the landed program (0) it was always eligible
        assert!(seat_eligible(&s, 0, SEAT_OVERSAMPLE));
    }
    refused(w, "NotEligibleForSeat", |w| w.join(&sliver, task));
    // nobody votes: at the reveal deadline a cranker escalates, in one transaction with a
    // stake and an unstake of its own node; round 1's denominator is the same total
    let d = w.task(&task).reveal_deadline;
    w.advance(d + 1 - w.slot());
    let before = w.market_account().verifier_stake;
    let ixs = [
        client::stake(z2.key(), w.market, z2.wallet, x),
        client::request_unstake(z2.key(), w.market, x),
        client::finalize_task(task, c.provider.node, w.market),
    ];
    let zk2 = z2.kp.insecure_clone();
    w.send_all("stake+request_unstake+finalize_task", &zk2, &[], &ixs)
        .unwrap();
    let t = w.task(&task);
    assert_eq!((t.status, t.round), (TaskStatus::Verifying, 1));
    assert_eq!(t.snapshot_stake, before);
    // and unstaking older stake in the escalating slot does not shrink it either
    assert_eq!(w.market_account().snapshot_stake(w.slot()), before);
    w.advance(2);
    refused(w, "NotEligibleForSeat", |w| w.join(&sliver, task));
}

/// Finding 2, on chain: a node holding most of the stake is not capped at one seat. Each seat
/// is its own race, won by the lowest ticket; its one vote counts, is paid and is slashed once
/// for each seat it holds.
#[test]
fn a_large_node_holds_every_seat_its_tickets_win_and_is_paid_and_slashed_per_seat() {
    let mut c = cast(0, 1);
    // 4/6 of the stake in one node, 1/6 in each of two: all always eligible (w · 6 ≥ total)
    let big = c.w.verifiers("big", 1, 40 * STAKE, 40 * STAKE).remove(0);
    let small = c.w.verifiers("small", 2, 10 * STAKE, 10 * STAKE);
    let task = c.submitted(2);
    let w = &mut c.w;
    w.crank("draw_seed", client::draw_seed(task)).unwrap();
    let nodes: Vec<(&Actor, u64)> = std::iter::once((&big, 40 * STAKE))
        .chain(small.iter().map(|a| (a, 10 * STAKE)))
        .collect();
    let expected: Vec<Pubkey> = (0..3u8)
        .map(|seat| {
            let mut best = nodes[0];
            for n in &nodes[1..] {
                if w.seat_score(&task, &n.0.node, seat, n.1)
                    .better_than(&w.seat_score(&task, &best.0.node, seat, best.1))
                {
                    best = *n;
                }
            }
            best.0.node
        })
        .collect();
    // the small nodes arrive first and take what they can; the big one then takes the rest
    for a in small.iter().chain(std::iter::once(&big)) {
        while w.winnable_seat(a, &task).is_some() {
            w.join(a, task).unwrap();
        }
    }
    let t = w.task(&task);
    let got: Vec<Pubkey> = t.round_seats().iter().map(|s| s.node).collect();
    assert_eq!(got, expected, "each seat goes to its lowest ticket");
    let held = |a: &Actor| t.seats_held_by(&a.node);
    assert_eq!(held(&big) + held(&small[0]) + held(&small[1]), 3);
    // the big node votes valid, the small ones invalid: the seats decide
    let ballot = |a: &Actor| {
        Ballot::new(
            if a.node == big.node {
                VOTE_VALID
            } else {
                VOTE_INVALID
            },
            7,
        )
    };
    let seated: Vec<&Actor> = nodes.iter().map(|n| n.0).filter(|a| held(a) > 0).collect();
    for a in &seated {
        w.commit(a, task, &ballot(a)).unwrap();
    }
    assert_eq!(
        w.task(&task).tally().committed,
        3,
        "commitments count per seat"
    );
    for a in &seated {
        w.reveal(a, task, &ballot(a)).unwrap();
    }
    let tally = *w.task(&task).tally();
    assert_eq!((tally.revealed, tally.valid), (3, held(&big)));
    let before: Vec<(u64, u64)> = seated
        .iter()
        .map(|a| {
            let n = w.node(&a.node);
            (n.earned, n.free)
        })
        .collect();
    w.finalize(task).unwrap();
    let f = w.task(&task);
    let accepted = held(&big) >= 2;
    assert_eq!(
        f.status,
        if accepted {
            TaskStatus::Accepted
        } else {
            TaskStatus::Rejected
        }
    );
    for a in &seated {
        if f.loser_slash > 0 && (a.node == big.node) != accepted {
            w.settle(task, a, 0).unwrap();
        }
    }
    for a in &seated {
        if w.vote(&compute_market::pda::vote(&task, &a.node, 0))
            .is_some()
        {
            w.settle(task, a, 0).unwrap();
        }
    }
    for (a, (earned, free)) in seated.iter().zip(before) {
        let n = w.node(&a.node);
        let m = held(a) as u64;
        let won = (a.node == big.node) == accepted;
        if won {
            assert_eq!(
                n.earned - earned,
                m * (f.majority_share + f.loser_bonus),
                "paid per seat"
            );
        } else {
            assert_eq!(
                free + m * f.verifier_bond - n.free,
                m * f.loser_slash,
                "slashed per seat"
            );
        }
    }
    w.close(task).unwrap();
    let all: Vec<&Actor> = nodes.iter().map(|n| n.0).collect();
    w.check_invariants(&all, &[task]);
}

/// Finding 3: a client posted quorum-1 tasks and rejected honest results with one seat of its
/// own second wallet. A market's minimum quorum (3 unless its creator names another) bounds
/// every override; a market that wants quorum 1 must say so.
#[test]
fn a_quorum_below_the_market_minimum_is_refused() {
    let mut c = cast(3, 1);
    let w = &mut c.w;
    assert_eq!(w.market_account().min_quorum(), 3);
    for q in [1u8] {
        refused(w, "QuorumBelowMarketMinimum", |w| {
            w.post_with(
                &c.client,
                PostTaskArgs {
                    quorum: q,
                    ..PostTaskArgs::new(1, &small_job(1), R)
                },
            )
            .map(|_| panic!("posted"))
        });
    }
    w.post_with(
        &c.client,
        PostTaskArgs {
            quorum: 5,
            ..PostTaskArgs::new(2, &small_job(1), R)
        },
    )
    .expect("above the minimum");
    let admin = w.admin.insecure_clone();
    let mut one = test_market(2);
    one.quorum = 1;
    refused(w, "QuorumBelowMarketMinimum", |w| {
        w.send(
            "create_market",
            &admin,
            &[],
            client::create_market(admin.pubkey(), one.clone()),
        )
    });
    // an explicit minimum of 1 is the creator's choice, and shows on the market
    one.min_quorum = 1;
    w.send(
        "create_market",
        &admin,
        &[],
        client::create_market(admin.pubkey(), one),
    )
    .expect("a market that opts into quorum 1");
    let m: compute_market::state::Market = {
        let a =
            w.c.svm
                .get_account(&compute_market::pda::market(2))
                .unwrap();
        anchor_lang::AccountDeserialize::try_deserialize(&mut a.data.as_slice()).unwrap()
    };
    assert_eq!((m.min_quorum(), m.quorum), (1, 1));
}

/// Finding 4: for rewards ≤ 3 the verifier bond floored to 1 and its slash to 0, and a late
/// provider's slash rounded to 0: silence, minority votes and lateness were free. Every
/// penalty is now at least one unit, and the admin cannot set a slash to nothing.
#[test]
fn every_penalty_bites_on_a_bond_of_one_unit() {
    let mut c = cast(3, 1);
    let w = &mut c.w;
    for bad in [
        Params {
            verifier_slash_bps: 0,
            ..test_params()
        },
        Params {
            late_slash_bps: 0,
            ..test_params()
        },
    ] {
        refused(w, "ParamOutOfBounds", |w| w.propose(bad));
    }
    // reward 1: verifier bond 1; one verifier stays silent
    w.advance(1);
    let task = w.post(&c.client, 1, small_job(1), 1).unwrap();
    w.claim(&c.provider, task).unwrap();
    w.submit(&c.provider, task, [7; 32]).unwrap();
    w.advance(2);
    let (v0, v1, v2) = (&c.verifiers[0], &c.verifiers[1], &c.verifiers[2]);
    for v in [v0, v1, v2] {
        w.join(v, task).unwrap();
    }
    let yes = Ballot::new(VOTE_VALID, 1);
    w.commit(v0, task, &yes).unwrap();
    w.commit(v1, task, &yes).unwrap();
    let d = w.task(&task).commit_deadline;
    w.advance(d + 1 - w.slot());
    w.reveal(v0, task, &yes).unwrap();
    w.reveal(v1, task, &yes).unwrap();
    let d = w.task(&task).reveal_deadline;
    w.advance(d + 1 - w.slot());
    w.finalize(task).unwrap();
    let t = w.task(&task);
    assert_eq!(
        (t.status, t.verifier_bond, t.loser_slash),
        (TaskStatus::Accepted, 1, 1)
    );
    let free = w.node(&v2.node).free;
    w.settle(task, v2, 0).unwrap();
    assert_eq!(
        w.node(&v2.node).free,
        free,
        "silent: its one-unit bond is gone"
    );
    assert_eq!(w.node(&v2.node).times_slashed, 1);
    // reward 3: provider bond 6, 10% late slash = 0.6 → one unit
    let late = w.post(&c.client, 2, small_job(2), 3).unwrap();
    w.claim(&c.provider, late).unwrap();
    let d = w.task(&late).submit_deadline;
    w.advance(d + 1 - w.slot());
    let r = w
        .crank("reclaim_task", client::reclaim_task(late, c.provider.node))
        .unwrap();
    assert!(r.ok);
    let t = w.task(&late);
    assert_eq!(
        (t.provider_bond, t.client_extra),
        (6, 1),
        "slashed one unit"
    );
}

/// Finding 4, the seat's weight: a join then `request_unstake` of everything in one
/// transaction kept the seat's full weight while the node's stake left. A holder is weighed
/// at the stake it still has when someone contests its seat, and its seats keep only that
/// weight at commit.
#[test]
fn a_seat_keeps_only_the_weight_of_stake_still_there() {
    let mut c = cast(0, 1);
    let a = c.w.verifiers("a", 1, 3 * STAKE, 3 * STAKE).remove(0);
    let b = c.w.verifiers("b", 1, STAKE, STAKE).remove(0);
    c.w.advance(1);
    let w = &mut c.w;
    let task = w
        .post_with(
            &c.client,
            PostTaskArgs {
                quorum: 5,
                ..PostTaskArgs::new(9, &small_job(9), R)
            },
        )
        .unwrap();
    w.claim(&c.provider, task).unwrap();
    w.submit(&c.provider, task, [7; 32]).unwrap();
    w.advance(2);
    w.crank("draw_seed", client::draw_seed(task)).unwrap();
    // seats where a's ticket beats b's at their full weights; on seat j, b's beats what a will
    // have left once it unstakes (its two bonds)
    let left = 2 * w.task(&task).verifier_bond;
    let a_wins: Vec<u8> = (0..5u8)
        .filter(|&s| {
            w.seat_score(&task, &a.node, s, 3 * STAKE)
                .better_than(&w.seat_score(&task, &b.node, s, STAKE))
        })
        .collect();
    let j = *a_wins
        .iter()
        .find(|&&s| {
            w.seat_score(&task, &b.node, s, STAKE)
                .better_than(&w.seat_score(&task, &a.node, s, left))
        })
        .expect("precondition: a contestable seat");
    let k = *a_wins
        .iter()
        .find(|&&s| s != j)
        .expect("precondition: a second seat");
    w.join_seat(&a, task, j).unwrap();
    // the second join and an unstake of all its free stake in one transaction
    let free = w.node(&a.node).free - w.task(&task).verifier_bond;
    let round = w.round_of(&task);
    let ixs = [
        client::join_task(a.key(), task, round, k, None),
        client::request_unstake(a.key(), w.market, free),
    ];
    let ak = a.kp.insecure_clone();
    w.send_all("join_task+request_unstake", &ak, &[], &ixs)
        .unwrap();
    assert_eq!(
        w.node(&a.node).weight_at(w.task(&task).snapshot_slot),
        left,
        "only its bonds stay"
    );
    // b's ticket is worse than a's full-weight one, better than what a has left
    assert!(!w
        .seat_score(&task, &b.node, j, STAKE)
        .better_than(&w.seat_score(&task, &a.node, j, 3 * STAKE)));
    w.join_seat(&b, task, j)
        .expect("a holder is weighed at the stake it still has");
    assert_eq!(w.task(&task).round_seats()[j as usize].node, b.node);
    // at commit the seat a keeps is weighed at what is left
    assert_eq!(w.task(&task).round_seats()[k as usize].weight, 3 * STAKE);
    w.commit(&a, task, &Ballot::new(VOTE_VALID, 3)).unwrap();
    assert_eq!(w.task(&task).round_seats()[k as usize].weight, left);
}

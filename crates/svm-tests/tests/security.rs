//! The security round's attacks (PROTOCOL §6, second paragraph), each defeated by a named
//! error or ending with the attacker unseated:
//! seats bought after the seed (late top-up, fresh node, denominator shrink, a fast minority),
//! a refund locked by a closed provider node and a donation, an admin freezing stake, a
//! front-run initialization and a freezable stake mint.

use anchor_lang::prelude::Pubkey;
use compute_market::{
    client,
    constants::SEAT_OVERSAMPLE,
    instructions::{InitializeConfigArgs, PostTaskArgs},
    pda,
    state::{Params, TaskStatus},
};
use compute_market_protocol::{
    commit::{VOTE_INVALID, VOTE_VALID},
    seats::{seat_eligible, SeatScore},
};
use compute_market_svm_tests::*;
use solana_signer::Signer;

/// The score `a` would have for seat `seat` of `task` with weight `w`.
fn score(w: &World, task: &Pubkey, a: &Actor, seat: u8, weight: u64) -> SeatScore {
    SeatScore::new(&w.task(task).seed, &a.node.to_bytes(), seat, weight)
}

/// Whether `a` holds a seat of `task`'s current round.
fn seated(w: &World, task: &Pubkey, a: &Actor) -> bool {
    w.task(task).seats_held_by(&a.node) > 0
}

/// Orders `a` before `b` when `a`'s score is better.
fn by_score(a: &SeatScore, b: &SeatScore) -> std::cmp::Ordering {
    if a.better_than(b) {
        std::cmp::Ordering::Less
    } else {
        std::cmp::Ordering::Greater
    }
}

#[test]
fn a_late_top_up_joined_in_the_same_transaction_does_not_count() {
    let mut c = cast(3, 1);
    // the attacker's node exists before the submission, with almost nothing staked
    let attacker = c.w.actor("attacker", 100 * STAKE);
    c.w.onboard(&attacker, 2, 1);
    let empty = c.w.actor("empty", 100 * STAKE);
    c.w.register(&empty, 2, gpu()).unwrap();
    let task = c.submitted(1);
    let w = &mut c.w;
    w.crank("draw_seed", client::draw_seed(task)).unwrap();
    // the seed is public: top up massively and join in one transaction
    let round = w.round_of(&task);
    let top_up = |a: &Actor, w: &World| {
        vec![
            client::stake(a.key(), w.market, a.wallet, 50 * STAKE),
            client::join_task(a.key(), task, round, 0, None),
        ]
    };
    let ixs = top_up(&empty, w);
    let kp = empty.kp.insecure_clone();
    refused(w, "StakeNotInSnapshot", |w| {
        w.send_all("stake+join", &kp, &[], &ixs)
    });
    // with 1 token in the snapshot the top-up leaves it hopeless: its weight is still 1
    assert!(!seat_eligible(
        &score(w, &task, &attacker, 0, 1),
        w.task(&task).snapshot_stake,
        SEAT_OVERSAMPLE
    ));
    let ixs = top_up(&attacker, w);
    let kp = attacker.kp.insecure_clone();
    refused(w, "NotEligibleForSeat", |w| {
        w.send_all("stake+join", &kp, &[], &ixs)
    });
    // its node's weight for this round is what it had before the submission
    w.stake(&attacker, 50 * STAKE).unwrap();
    let n = w.node(&attacker.node);
    assert_eq!(n.weight_at(w.task(&task).snapshot_slot), 1);
    assert_eq!(n.stake(), 50 * STAKE + 1);
    // the next task's snapshot counts it all
    w.advance(1);
    assert_eq!(n.weight_at(w.slot()), 50 * STAKE + 1);
}

#[test]
fn a_node_registered_and_staked_after_the_seed_cannot_join() {
    let mut c = cast(3, 1);
    let task = c.submitted(2);
    let w = &mut c.w;
    w.crank("draw_seed", client::draw_seed(task)).unwrap();
    // grind a fresh authority offline, then register + stake + join in one transaction
    let fresh = w.actor("fresh", 100 * STAKE);
    let round = w.round_of(&task);
    let ixs = [
        client::register_node(
            fresh.key(),
            w.market,
            w.mint,
            compute_market::instructions::RegisterNodeArgs {
                roles: 2,
                hardware: gpu(),
            },
        ),
        client::stake(fresh.key(), w.market, fresh.wallet, 100 * STAKE),
        client::join_task(fresh.key(), task, round, 0, None),
    ];
    let kp = fresh.kp.insecure_clone();
    refused(w, "NodeRegisteredAfterSnapshot", |w| {
        w.send_all("register+stake+join", &kp, &[], &ixs)
    });
    // in separate transactions, later slots: still refused for this round
    w.register(&fresh, 2, gpu()).unwrap();
    w.advance(1);
    w.stake(&fresh, 100 * STAKE).unwrap();
    refused(w, "NodeRegisteredAfterSnapshot", |w| w.join(&fresh, task));
}

#[test]
fn unstaking_after_the_seed_does_not_shrink_the_denominator() {
    let mut c = cast(0, 1);
    // honest verifiers, and an attacker: one tiny node that wants a seat and big nodes that
    // would leave after the seed to make the tiny one look large
    let honest = c.w.verifiers("h", 4, STAKE, STAKE / 10);
    let tiny = c.w.actor("tiny", STAKE);
    c.w.onboard(&tiny, 2, STAKE / 10);
    let big = c.w.verifiers("big", 3, 1_000 * STAKE, 1_000 * STAKE);
    let task = c.submitted(3);
    let w = &mut c.w;
    w.crank("draw_seed", client::draw_seed(task)).unwrap();
    let snapshot = w.task(&task).snapshot_stake;
    assert_eq!(snapshot, w.market_account().verifier_stake);
    assert_eq!(snapshot, STAKE / 2 + 3_000 * STAKE);
    for b in &big {
        w.send_as(
            "request_unstake",
            b,
            client::request_unstake(b.key(), w.market, 1_000 * STAKE),
        )
        .unwrap();
    }
    // the market's total shrank; the task's denominator did not
    let shrunk = w.market_account().verifier_stake;
    assert_eq!(shrunk, STAKE / 2);
    assert_eq!(w.task(&task).snapshot_stake, snapshot);
    for seat in 0..3 {
        let s = score(w, &task, &tiny, seat, STAKE / 10);
        assert!(
            !seat_eligible(&s, snapshot, SEAT_OVERSAMPLE),
            "precondition: ineligible under the snapshot"
        );
        assert!(
            seat_eligible(&s, shrunk, SEAT_OVERSAMPLE),
            "the shrink would have seated it"
        );
    }
    refused(w, "NotEligibleForSeat", |w| w.join(&tiny, task));
    // unstaking only ever lowers a node's own weight: honest h0 unstakes half after the seed
    let h0 = &honest[0];
    w.send_as(
        "request_unstake",
        h0,
        client::request_unstake(h0.key(), w.market, STAKE / 20),
    )
    .unwrap();
    let n = w.node(&h0.node);
    assert_eq!(n.weight_at(w.task(&task).snapshot_slot), STAKE / 20);
}

#[test]
fn a_fast_minority_that_takes_every_seat_first_is_displaced_by_better_tickets() {
    let mut c = cast(0, 1);
    // a third of the stake in three fast nodes, the rest in six honest ones: each node holds
    // 1/9 of the stake, eligible for a seat with probability 1 − e^(−6/9)
    let minority = c.w.verifiers("fast", 3, 2 * STAKE, 2 * STAKE);
    let honest = c.w.verifiers("h", 6, 2 * STAKE, 2 * STAKE);
    let task = c.submitted(4);
    let w = &mut c.w;
    w.crank("draw_seed", client::draw_seed(task)).unwrap();
    let snapshot = w.task(&task).snapshot_stake;
    let all: Vec<&Actor> = minority.iter().chain(honest.iter()).collect();
    // the seats the protocol promises: for each seat, the lowest score among eligible nodes
    let expected: Vec<Option<Pubkey>> = (0..3u8)
        .map(|seat| {
            let mut ranked: Vec<(SeatScore, &Actor)> = all
                .iter()
                .map(|a| (score(w, &task, a, seat, 2 * STAKE), *a))
                .filter(|(s, _)| seat_eligible(s, snapshot, SEAT_OVERSAMPLE))
                .collect();
            ranked.sort_by(|a, b| by_score(&a.0, &b.0));
            ranked.first().map(|(_, a)| a.node)
        })
        .collect();
    // the minority is faster: it takes every seat it can and even commits early
    let mut joined_minority = vec![];
    for a in &minority {
        while w.winnable_seat(a, &task).is_some() {
            w.join(a, task).unwrap();
        }
        if seated(w, &task, a) {
            joined_minority.push(a);
            w.commit(a, task, &Ballot::new(VOTE_INVALID, 1)).unwrap();
        }
    }
    assert!(
        !joined_minority.is_empty(),
        "the fast minority got in first"
    );
    // then the honest verifiers arrive, in reverse order, each taking what its tickets win;
    // a seat it cannot win is refused by name
    for a in honest.iter().rev() {
        while w.winnable_seat(a, &task).is_some() {
            w.join(a, task).unwrap();
        }
        for seat in 0..3u8 {
            if w.task(&task).round_seats()[seat as usize].node == a.node {
                continue;
            }
            let r = w
                .join_seat(a, task, seat)
                .expect_err("no other seat is winnable");
            assert!(
                r.has_error("TicketNotBetterThanSeated") || r.has_error("NotEligibleForSeat"),
                "{:?}",
                r.logs
            );
        }
    }
    let t = w.task(&task);
    let got: Vec<Option<Pubkey>> = t
        .round_seats()
        .iter()
        .map(|s| s.taken().then_some(s.node))
        .collect();
    assert_eq!(
        got, expected,
        "each seat is its lowest eligible ticket, not the first arrival"
    );
    // every displaced minority seat got its bond back; a node left with no seat has its vote
    // account closed; its early commitment counts only for the seats it kept
    let mut displaced = 0;
    let mut still_committed = 0u8;
    for a in &joined_minority {
        let held = t.seats_held_by(&a.node);
        let n = w.node(&a.node);
        assert_eq!(
            n.bonded,
            held as u64 * t.verifier_bond,
            "bond of the seats kept"
        );
        if held == 0 {
            displaced += 1;
            assert!(!w.exists(&pda::vote(&task, &a.node, 0)), "vote closed");
            assert_eq!((n.free, n.bonded), (2 * STAKE, 0), "bond released");
        } else {
            let v = w.vote(&pda::vote(&task, &a.node, 0)).expect("vote");
            assert_eq!(v.seats, held);
            still_committed += held;
        }
    }
    assert!(
        displaced > 0,
        "precondition: the minority's tickets are worse"
    );
    assert_eq!(
        t.tally().committed,
        still_committed,
        "displaced commitments dropped"
    );
    // seats are final when the join window closes: nobody joins after it
    w.close_join_window(&task);
    let late = honest
        .iter()
        .find(|a| !seated(w, &task, a))
        .expect("an unseated honest verifier");
    refused(w, "JoinWindowClosed", |w| w.join(late, task));
}

#[test]
fn displacing_needs_the_holders_accounts_and_a_better_ticket() {
    let mut c = cast(4, 1);
    let task = c.submitted(5);
    let w = &mut c.w;
    w.crank("draw_seed", client::draw_seed(task)).unwrap();
    // V = 3 and 4 equal verifiers, each a quarter of the stake: always eligible, so only the
    // tickets decide. Seat 0's tickets, worst first:
    let mut order: Vec<&Actor> = c.verifiers.iter().collect();
    order.sort_by(|a, b| by_score(&score(w, &task, b, 0, STAKE), &score(w, &task, a, 0, STAKE)));
    refused(w, "SeatOutOfRange", |w| w.join_seat(order[0], task, 3));
    w.join_seat(order[0], task, 0).unwrap();
    refused(w, "SeatAlreadyHeld", |w| {
        w.join_displacing(order[0], task, 0, None)
    });
    // the worst ticket of seat 0 also takes seat 1: one vote account, two seats, two bonds
    w.join_seat(order[0], task, 1).unwrap();
    let v = w.vote(&pda::vote(&task, &order[0].node, 0)).expect("vote");
    assert_eq!((v.seats, v.bond), (2, 2 * w.task(&task).verifier_bond));
    assert_eq!(w.task(&task).open_votes, 1);
    w.join_seat(order[1], task, 2).unwrap();
    let best = order[3];
    refused(w, "MissingDisplacedAccounts", |w| {
        w.join_displacing(best, task, 0, None)
    });
    // naming a node that does not hold the seat
    let not_holder = order[1].key();
    refused(w, "WrongDisplacedSeat", |w| {
        w.join_displacing(best, task, 0, Some(not_holder))
    });
    let worst = order[0];
    w.join_seat(best, task, 0).unwrap();
    // one of its two seats gone: its vote stays, with one seat and one bond
    let v = w
        .vote(&pda::vote(&task, &worst.node, 0))
        .expect("vote kept");
    assert_eq!((v.seats, v.bond), (1, w.task(&task).verifier_bond));
    assert_eq!(w.node(&worst.node).bonded, w.task(&task).verifier_bond);
    // the displaced verifier cannot buy its way back
    refused(w, "TicketNotBetterThanSeated", |w| {
        w.join_seat(worst, task, 0)
    });
    // losing its last seat closes its vote with the rent returned
    let seat1: Vec<&Actor> = order
        .iter()
        .copied()
        .filter(|a| a.node != worst.node)
        .filter(|a| score(w, &task, a, 1, STAKE).better_than(&score(w, &task, worst, 1, STAKE)))
        .collect();
    if let Some(b) = seat1.first() {
        let rent_before = w.c.svm.get_balance(&worst.key()).unwrap();
        w.join_seat(b, task, 1).unwrap();
        assert!(!seated(w, &task, worst));
        assert!(!w.exists(&pda::vote(&task, &worst.node, 0)), "vote closed");
        assert!(
            w.c.svm.get_balance(&worst.key()).unwrap() > rent_before,
            "rent returned"
        );
        assert_eq!(w.node(&worst.node).bonded, 0);
    }
}

#[test]
fn a_provider_that_closes_its_node_and_donates_cannot_lock_the_refund() {
    let mut c = cast(3, 1);
    let task = c.submitted(6);
    let w = &mut c.w;
    let client_before = w.balance(&c.client.wallet);
    let votes: Vec<(&Actor, Ballot)> = c
        .verifiers
        .iter()
        .map(|v| (v, Ballot::new(VOTE_INVALID, 60)))
        .collect();
    w.join_and_commit(task, &votes);
    for (v, b) in &votes {
        w.reveal(v, task, b).unwrap();
    }
    w.finalize(task).unwrap();
    assert_eq!(w.task(&task).status, TaskStatus::Rejected);
    // the provider sweeps its fees, leaves, and sends a token into the escrow
    let p = &c.provider;
    w.sweep(p.node).unwrap();
    let free = w.node(&p.node).free;
    w.send_as(
        "request_unstake",
        p,
        client::request_unstake(p.key(), w.market, free),
    )
    .unwrap();
    w.advance(5_000);
    w.send_as("withdraw", p, client::withdraw(p.key(), p.wallet))
        .unwrap();
    w.send_as(
        "close_node",
        p,
        client::close_node(p.key(), w.market, p.wallet),
    )
    .unwrap();
    assert!(!w.exists(&p.node));
    w.donate(p, pda::escrow(&task), 1).unwrap();
    for v in &c.verifiers {
        w.settle(task, v, 0).unwrap();
    }
    // close needs neither the provider's node nor its vault; without the treasury the
    // donated token is refused by name, with it the close succeeds
    let t = w.task(&task);
    let ix = client::close_task(task, t.client, t.client_token, None);
    refused(w, "TreasuryRequired", |w| w.crank("close_task", ix));
    let treasury_before = w.balance(&w.treasury);
    w.close(task).unwrap();
    assert!(!w.exists(&task) && !w.exists(&pda::escrow(&task)));
    // refunded in full plus its 50% of the slashed bond (2R)
    assert_eq!(w.balance(&c.client.wallet), client_before + 2 * R);
    assert_eq!(w.balance(&w.treasury), treasury_before + 1, "the donation");
}

#[test]
fn close_sends_leftovers_to_the_client_when_the_treasury_account_is_gone() {
    let mut c = cast(0, 1);
    let w = &mut c.w;
    let task = w.cancelled(&c.client, 7);
    let stranger = w.actor("stranger", 10);
    w.donate(&stranger, pda::escrow(&task), 10).unwrap();
    // the admin closed its treasury account (nothing in it yet): the close still succeeds
    let treasury = w.treasury;
    w.c.svm.set_account(treasury, Default::default()).unwrap();
    let before = w.balance(&c.client.wallet);
    w.close(task).unwrap();
    assert_eq!(w.balance(&c.client.wallet), before + R + 10);
    // a wrong treasury is refused by name
    let task = w.cancelled(&c.client, 8);
    w.donate(&c.client, pda::escrow(&task), 1).unwrap();
    let t = w.task(&task);
    let ix = client::close_task(task, t.client, t.client_token, Some(c.client.wallet));
    refused(w, "WrongTreasury", |w| w.crank("close_task", ix));
}

#[test]
fn a_client_that_closed_its_refund_account_is_refunded_to_its_associated_account() {
    let mut c = cast(0, 1);
    let w = &mut c.w;
    let task = w.cancelled(&c.client, 10);
    // the refund account is gone (its owner emptied and closed it)
    let gone = c.client.wallet;
    let before = w.balance(&gone);
    w.c.svm.set_account(gone, Default::default()).unwrap();
    let t = w.task(&task);
    refused(w, "ClientRefundAccountClosed", |w| w.close(task));
    // anyone creates the client's associated token account, and the close goes through
    let ata = anchor_spl::associated_token::get_associated_token_address(&c.client.key(), &w.mint);
    let create = anchor_spl::associated_token::spl_associated_token_account::instruction::create_associated_token_account_idempotent(
        &w.cranker.pubkey(),
        &c.client.key(),
        &w.mint,
        &anchor_spl::token::ID,
    );
    let ix = client::close_task_to(task, t.client, t.client_token, None, Some(w.mint));
    let cranker = w.cranker.insecure_clone();
    w.send_all("create ata + close_task", &cranker, &[], &[create, ix])
        .unwrap();
    assert_eq!(w.balance(&ata), R);
    assert!(!w.exists(&task));
    let _ = before;
}

#[test]
fn stake_added_in_the_submitting_slot_is_left_out_of_the_denominator() {
    let mut c = cast(3, 1);
    let whale = c.w.actor("whale", 1_000 * STAKE);
    c.w.register(&whale, 2, gpu()).unwrap();
    c.w.advance(1);
    let task = c.w.post(&c.client, 11, small_job(11), R).unwrap();
    let w = &mut c.w;
    w.claim(&c.provider, task).unwrap();
    let before = w.market_account().verifier_stake;
    // a huge stake in the very slot of the submission would dilute everyone while counting for
    // nobody in this round: it is not in the snapshot's denominator either
    w.stake(&whale, 1_000 * STAKE).unwrap();
    w.submit(&c.provider, task, [11; 32]).unwrap();
    assert_eq!(w.task(&task).snapshot_stake, before);
    assert_eq!(w.market_account().verifier_stake, before + 1_000 * STAKE);
}

#[test]
fn the_admin_cannot_freeze_stake() {
    let mut w = World::new();
    let v = w.actor("v", STAKE);
    w.onboard(&v, 2, STAKE);
    // a cooldown above the hard bound
    let mut p = test_params();
    p.unstake_cooldown = compute_market::constants::MAX_UNSTAKE_COOLDOWN + 1;
    refused(&mut w, "CooldownTooLong", |w| w.propose(p));
    // the largest allowed cooldown: a staker who disagrees leaves before it applies
    let mut p = test_params();
    p.unstake_cooldown = compute_market::constants::MAX_UNSTAKE_COOLDOWN;
    w.propose(p).unwrap();
    w.send_as(
        "request_unstake",
        &v,
        client::request_unstake(v.key(), w.market, STAKE / 2),
    )
    .unwrap();
    // a second request would push back the first one's unlock slot: refused
    refused(&mut w, "UnstakeAlreadyPending", |w| {
        w.send_as(
            "request_unstake",
            &v,
            client::request_unstake(v.key(), w.market, 1),
        )
    });
    let unlock = w.node(&v.node).unlock_slot;
    w.advance(unlock - w.slot());
    refused(&mut w, "UpdateNotYetEffective", |w| {
        w.crank("apply_params", client::apply_params())
    });
    w.send_as("withdraw", &v, client::withdraw(v.key(), v.wallet))
        .unwrap();
    assert_eq!(w.balance(&v.wallet), STAKE / 2);
    // the delay also covers stake bonded to a task that started with the proposal: the
    // longest task plus the cooldown in force
    let c = w.config();
    assert_eq!(
        c.pending_effective_slot - (unlock - c.params.unstake_cooldown),
        c.longest_task + c.params.unstake_cooldown + 1
    );
    w.advance(c.pending_effective_slot - 1 - w.slot());
    refused(&mut w, "UpdateNotYetEffective", |w| {
        w.crank("apply_params", client::apply_params())
    });
    w.advance(1);
    w.crank("apply_params", client::apply_params()).unwrap();
    assert_eq!(
        w.config().params.unstake_cooldown,
        compute_market::constants::MAX_UNSTAKE_COOLDOWN
    );
}

#[test]
fn only_the_upgrade_authority_initializes_and_never_with_a_freezable_mint() {
    let mut c = compute_market_embedded::Cluster::new().unwrap();
    let authority = c.keypair("authority");
    let squatter = c.keypair("squatter");
    for k in [&authority, &squatter] {
        c.airdrop(&k.pubkey(), 10_000_000_000);
    }
    c.set_upgrade_authority(Some(&authority.pubkey()));
    let args = || InitializeConfigArgs {
        params: Params::defaults(5_000),
        update_delay: 50,
    };
    // between deploy and init, a stranger installs its own mint and treasury: refused
    let mint = c.create_mint(&squatter.pubkey());
    let treasury = c.token_account(&mint, &squatter.pubkey(), 0);
    let out = c.send(
        &[client::initialize_config(
            squatter.pubkey(),
            mint,
            treasury,
            args(),
        )],
        &squatter,
        &[],
    );
    assert!(!out.ok);
    assert!(
        out.logs.iter().any(|l| l.contains("NotUpgradeAuthority")),
        "{:?}",
        out.logs
    );
    // an immutable program (no upgrade authority): nobody can initialize it
    c.set_upgrade_authority(None);
    let out = c.send(
        &[client::initialize_config(
            authority.pubkey(),
            mint,
            treasury,
            args(),
        )],
        &authority,
        &[],
    );
    assert!(out.logs.iter().any(|l| l.contains("NotUpgradeAuthority")));
    c.set_upgrade_authority(Some(&authority.pubkey()));
    // the upgrade authority, with a mint that has a freeze authority: refused
    let freezable = c.create_mint_with_freeze(&authority.pubkey(), &authority.pubkey());
    let t2 = c.token_account(&freezable, &authority.pubkey(), 0);
    let out = c.send(
        &[client::initialize_config(
            authority.pubkey(),
            freezable,
            t2,
            args(),
        )],
        &authority,
        &[],
    );
    assert!(
        out.logs
            .iter()
            .any(|l| l.contains("MintHasFreezeAuthority")),
        "{:?}",
        out.logs
    );
    // the upgrade authority with a plain mint: accepted
    let good = c.create_mint(&authority.pubkey());
    let t3 = c.token_account(&good, &authority.pubkey(), 0);
    let out = c.send(
        &[client::initialize_config(
            authority.pubkey(),
            good,
            t3,
            args(),
        )],
        &authority,
        &[],
    );
    assert!(out.ok, "{:?}", out.logs);
}

#[test]
fn rounding_goes_to_the_treasury_and_the_sortition_total_stays_exact_under_slashes() {
    let mut c = cast(3, 1);
    // a reward that does not divide: provider floor(88%), pool floor(10%), the fee the rest
    let w = &mut c.w;
    w.advance(1);
    let task = w
        .post_with(&c.client, PostTaskArgs::new(9, &small_job(9), 1_000_003))
        .unwrap();
    w.claim(&c.provider, task).unwrap();
    w.submit(&c.provider, task, [9; 32]).unwrap();
    w.advance(2);
    // v0 and v1 valid, v2 silent (slashed)
    let votes: Vec<(&Actor, Ballot)> = c.verifiers[..2]
        .iter()
        .map(|v| (v, Ballot::new(VOTE_VALID, 90)))
        .collect();
    w.join(&c.verifiers[2], task).unwrap();
    w.join_and_commit(task, &votes);
    // not every seat committed: reveals open after the commit deadline
    let d = w.task(&task).commit_deadline;
    w.advance(d + 1 - w.slot());
    for (v, b) in &votes {
        w.reveal_now(v, task, b).unwrap();
    }
    let d = w.task(&task).reveal_deadline;
    w.advance(d + 1 - w.slot());
    w.finalize(task).unwrap();
    let n = w.node(&c.provider.node);
    assert_eq!(n.earned, 880_002, "provider: floor(1 000 003 × 88%)");
    // fee 1 000 003 − 880 002 − 100 000 = 20 001, pool dust 0 (100 000 / 2)
    assert_eq!(n.fees_due, 20_001);
    // losers first (the majority's bonus comes out of their slashes)
    for v in c.verifiers.iter().rev() {
        w.settle(task, v, 0).unwrap();
    }
    let slashed = w.node(&c.verifiers[2].node);
    assert!(slashed.stake_debt > 0, "the slash is booked as stake debt");
    let sum = |w: &World| -> u64 {
        c.verifiers
            .iter()
            .map(|v| w.node(&v.node))
            .map(|n| n.stake() + n.stake_debt)
            .sum()
    };
    assert_eq!(w.market_account().verifier_stake, sum(w));
    w.sync(c.verifiers[2].node).unwrap();
    refused(w, "NoStakeDebt", |w| w.sync(c.verifiers[2].node));
    let exact: u64 = c.verifiers.iter().map(|v| w.node(&v.node).stake()).sum();
    assert_eq!(w.market_account().verifier_stake, exact, "exact after sync");
    w.close(task).unwrap();
}

#[test]
fn only_a_nodes_authority_updates_it_and_its_endpoint_is_a_short_http_url() {
    use compute_market::{instructions::UpdateNodeArgs, state::Hardware};
    let mut w = World::new();
    let p = w.actor("p", STAKE);
    let stranger = w.actor("stranger", STAKE);
    w.onboard(&p, 1, STAKE);
    let args = |endpoint: &str, gflops: u32| UpdateNodeArgs {
        hardware: Hardware { gflops, ..gpu() },
        endpoint: endpoint.into(),
    };
    let r = w
        .send_as(
            "update_node",
            &p,
            client::update_node(p.key(), w.market, args("http://10.0.0.7:8900", 70_000)),
        )
        .unwrap();
    let updated = r
        .logs
        .iter()
        .filter_map(|l| l.strip_prefix("Program data: "))
        .any(|b| {
            use anchor_lang::Discriminator;
            use base64::Engine;
            base64::engine::general_purpose::STANDARD
                .decode(b)
                .is_ok_and(|d| d.starts_with(compute_market::events::NodeUpdated::DISCRIMINATOR))
        });
    assert!(updated, "NodeUpdated is emitted");
    let n = w.node(&p.node);
    assert_eq!(n.endpoint(), b"http://10.0.0.7:8900");
    assert_eq!(n.hardware.gflops, 70_000);
    // a stranger cannot write another's node: its PDA is derived from the signer
    let mut ix = client::update_node(
        stranger.key(),
        w.market,
        args("http://evil.example", 70_000),
    );
    ix.accounts[1].pubkey = p.node;
    refused(&mut w, "ConstraintSeeds", |w| {
        w.send_as("update_node", &stranger, ix)
    });
    for bad in [
        "ftp://10.0.0.7",
        "http://a b",
        "https://",
        &format!(
            "https://{}",
            "a".repeat(compute_market::constants::MAX_ENDPOINT_LEN)
        ),
    ] {
        refused(&mut w, "EndpointInvalid", |w| {
            w.send_as(
                "update_node",
                &p,
                client::update_node(p.key(), w.market, args(bad, 70_000)),
            )
        });
    }
    // a provider's hardware still meets the market's minimum
    refused(&mut w, "HardwareBelowMarketMinimum", |w| {
        w.send_as(
            "update_node",
            &p,
            client::update_node(p.key(), w.market, args("", 0)),
        )
    });
    // an empty endpoint withdraws it
    w.send_as(
        "update_node",
        &p,
        client::update_node(p.key(), w.market, args("", 70_000)),
    )
    .unwrap();
    assert_eq!(w.node(&p.node).endpoint(), b"");
    assert!(
        w.try_node(&stranger.node).is_none(),
        "the stranger has no node"
    );
}

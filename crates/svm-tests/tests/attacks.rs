//! Every threat of PROTOCOL §6 as an attack that must fail with its named error, and every
//! kind of bad input refused by name. No refused instruction moves a token.

use anchor_lang::prelude::Pubkey;
use anchor_lang::{InstructionData, ToAccountMetas};
use compute_market::{
    client, instructions::PostTaskArgs, instructions::SubmitResultArgs, state::TaskStatus,
};
use compute_market_protocol::{
    commit::{VERDICT_WITHHELD, VOTE_INVALID, VOTE_UNAVAILABLE, VOTE_VALID},
    job::JobSpec,
};
use compute_market_svm_tests::*;
use solana_instruction::Instruction;
use solana_signer::Signer;

fn post_args(id: u64) -> PostTaskArgs {
    PostTaskArgs::new(id, &small_job(1), R)
}

#[test]
fn copycat_voting_is_defeated_by_commit_reveal() {
    let mut c = cast(3, 3);
    let task = c.submitted(1);
    let w = &mut c.w;
    let [v0, v1, v2] = [&c.verifiers[0], &c.verifiers[1], &c.verifiers[2]];
    let honest = Ballot::new(VOTE_INVALID, 1);
    for v in [v0, v1, v2] {
        w.join(v, task).unwrap();
    }
    w.commit(v0, task, &honest).unwrap();
    // nobody can reveal while others may still commit: there is nothing to copy
    refused(w, "RevealNotOpen", |w| w.reveal(v0, task, &honest));
    // a copycat commits v0's commitment bytes verbatim...
    let copied = honest.commitment(&v0.node, &task, 0);
    w.send_as(
        "commit_vote",
        v1,
        client::commit_vote(v1.key(), task, 0, copied),
    )
    .unwrap();
    w.commit(v2, task, &Ballot::new(VOTE_INVALID, 2)).unwrap();
    w.reveal(v0, task, &honest).unwrap();
    // ...and cannot open it: the commitment binds the verifier
    refused(w, "CommitmentMismatch", |w| w.reveal(v1, task, &honest));
}

#[test]
fn seat_grinding_fails_because_the_seed_comes_after_the_commitment() {
    let mut c = cast(1, 3);
    let w = &mut c.w;
    let task = w.post(&c.client, 2, small_job(2), R).unwrap();
    w.claim(&c.provider, task).unwrap();
    w.submit(&c.provider, task, [9; 32]).unwrap();
    // same slot as the submission: no slot after it exists yet, so no seed and no seat
    refused(w, "SeedNotReady", |w| w.join(&c.verifiers[0], task));
    refused(w, "SeedNotReady", |w| {
        w.crank("draw_seed", client::draw_seed(task))
    });
    w.advance(1);
    // one slot later the submission slot's own hash is known, but not the next one's
    refused(w, "SeedNotReady", |w| {
        w.crank("draw_seed", client::draw_seed(task))
    });
    w.advance(1);
    w.crank("draw_seed", client::draw_seed(task)).unwrap();
    refused(w, "SeedAlreadyDrawn", |w| {
        w.crank("draw_seed", client::draw_seed(task))
    });
    w.join(&c.verifiers[0], task).unwrap();
}

/// Issue 24, finding 4: with a join window longer than the SlotHashes horizon, a draw made late
/// moved the reference to "now", so someone who disliked the (already public) candidate seed
/// could wait for a fresh one. The join window is now bounded below the horizon: such a market
/// is refused by name, and in a market at the bound a draw at the join deadline still takes
/// the hash of the first slot after the submission, the seed an early draw gives.
#[test]
fn a_seed_cannot_be_re_rolled_by_waiting() {
    let mut w = World::new();
    let admin = w.admin.insecure_clone();
    let mut long = test_market(2);
    long.windows.join = compute_market::constants::MAX_JOIN_WINDOW + 1;
    refused(&mut w, "JoinWindowTooLong", |w| {
        w.send(
            "create_market",
            &admin,
            &[],
            client::create_market(admin.pubkey(), long),
        )
    });
    let mut market = test_market(1);
    market.windows.join = compute_market::constants::MAX_JOIN_WINDOW;
    let mut w = World::with(compute_market::state::Params::defaults(20_000), market);
    let client_a = w.actor("client", 10 * R);
    let p = w.actor("provider", STAKE);
    w.onboard(&p, 1, STAKE);
    let v = w.actor("v", STAKE);
    w.onboard(&v, 2, STAKE);
    w.advance(1);
    let task = w.post(&client_a, 3, small_job(3), R).unwrap();
    w.claim(&p, task).unwrap();
    w.submit(&p, task, [9; 32]).unwrap();
    let t = w.task(&task);
    // nobody draws until the last slot of the join window
    w.advance(t.join_deadline - w.slot());
    w.crank("draw_seed", client::draw_seed(task)).unwrap();
    let drawn = w.task(&task);
    assert_eq!(
        drawn.hashed_slot,
        t.submit_slot + 1,
        "the first slot after the submission"
    );
    let expected = protocol::commit::verification_seed(
        &slot_hash(t.submit_slot + 1),
        &task.to_bytes(),
        &t.result_root,
        0,
    );
    assert_eq!(drawn.seed, expected, "the seed an early draw gives");
    assert_eq!(
        drawn.reference_slot, t.submit_slot,
        "the reference never moves"
    );
    w.join(&v, task).unwrap();
}

#[test]
fn provider_and_client_cannot_take_seats_and_sortition_is_stake_weighted() {
    let mut c = cast(1, 3);
    // a client that runs a verifier node, a whale, a sybil with a sliver of stake and a
    // provider-only node, all in place before the submission
    c.w.register(&c.client, 2, gpu()).unwrap();
    c.w.stake(&c.client, STAKE).unwrap();
    let whale = c.w.actor("whale", 1_000_000_000);
    c.w.onboard(&whale, 2, 1_000_000_000);
    let sybil = c.w.actor("sybil", R / 2);
    c.w.onboard(&sybil, 2, R / 2);
    let p2 = c.w.actor("p2", STAKE);
    c.w.onboard(&p2, 1, STAKE);
    c.w.advance(1);
    let task = c.submitted(4);
    let w = &mut c.w;
    // the provider (roles = both) cannot verify its own task
    refused(w, "ProviderCannotVerify", |w| w.join(&c.provider, task));
    // a client that runs a verifier node cannot verify its own task
    refused(w, "ClientCannotVerify", |w| w.join(&c.client, task));
    // the sybil is (overwhelmingly) not eligible
    w.crank("draw_seed", client::draw_seed(task)).unwrap();
    let t = w.task(&task);
    for seat in 0..3 {
        let score = protocol::seats::SeatScore::new(&t.seed, &sybil.node.to_bytes(), seat, R / 2);
        assert!(!protocol::seats::seat_eligible(
            &score,
            t.snapshot_stake,
            compute_market::constants::SEAT_OVERSAMPLE
        ));
    }
    refused(w, "NotEligibleForSeat", |w| w.join(&sybil, task));
    // a node without the verifier role
    refused(w, "NotAVerifier", |w| w.join(&p2, task));
}

#[test]
fn colluding_minority_is_slashed() {
    let mut c = cast(5, 3);
    let w = &mut c.w;
    let task = w
        .post_with(
            &c.client,
            PostTaskArgs {
                quorum: 5,
                ..post_args(5)
            },
        )
        .unwrap();
    w.claim(&c.provider, task).unwrap();
    w.submit(&c.provider, task, [9; 32]).unwrap();
    w.advance(2);
    // two colluders vouch for a bad result, three honest verifiers reject it
    let ballots: Vec<Ballot> = (0..5)
        .map(|i| Ballot::new(if i < 2 { VOTE_VALID } else { VOTE_INVALID }, 50 + i))
        .collect();
    let votes: Vec<(&Actor, Ballot)> = c.verifiers.iter().zip(ballots).collect();
    w.join_and_commit(task, &votes);
    for (v, b) in &votes {
        w.reveal(v, task, b).unwrap();
    }
    w.finalize(task).unwrap();
    assert_eq!(w.task(&task).status, TaskStatus::Rejected);
    for v in &c.verifiers[..2] {
        w.settle(task, v, 0).unwrap();
        let n = w.node(&v.node);
        assert_eq!(n.free, STAKE - 250_000, "colluder slashed");
        // the split's rounding remainder (500 000 mod 3) stays booked to the treasury
        assert_eq!(w.balance(&v.vault), n.free + n.fees_due);
    }
    let dust: u64 = c.verifiers[..2]
        .iter()
        .map(|v| w.node(&v.node).fees_due)
        .sum();
    assert_eq!(
        dust,
        500_000 % 3,
        "the losers book exactly the split's remainder"
    );
    for v in &c.verifiers[2..] {
        w.settle(task, v, 0).unwrap();
        assert!(w.balance(&v.vault) > STAKE, "honest verifier rewarded");
    }
}

#[test]
fn windows_are_enforced() {
    let mut c = cast(3, 3);
    let task = c.submitted(6);
    let w = &mut c.w;
    let b = Ballot::new(VOTE_VALID, 60);
    w.join(&c.verifiers[0], task).unwrap();
    let t = w.task(&task);
    w.advance(t.join_deadline + 1 - w.slot());
    refused(w, "JoinWindowClosed", |w| w.join(&c.verifiers[1], task));
    w.commit(&c.verifiers[0], task, &b).unwrap();
    w.advance(t.commit_deadline + 1 - w.slot());
    // v0 is the only seat: commits are closed now, a late commit is refused
    w.join(&c.verifiers[0], task).map(|_| ()).unwrap_err();
    refused(w, "FinalizeTooEarly", |w| w.finalize(task));
    w.advance(t.reveal_deadline + 1 - w.slot());
    refused(w, "RevealWindowClosed", |w| {
        w.reveal(&c.verifiers[0], task, &b)
    });
    w.finalize(task).unwrap();
}

#[test]
fn late_commit_is_refused() {
    let mut c = cast(3, 3);
    let task = c.submitted(7);
    let w = &mut c.w;
    w.join(&c.verifiers[0], task).unwrap();
    let t = w.task(&task);
    w.advance(t.commit_deadline + 1 - w.slot());
    refused(w, "CommitWindowClosed", |w| {
        w.commit(&c.verifiers[0], task, &Ballot::new(VOTE_VALID, 1))
    });
}

#[test]
fn a_stranger_settles_for_a_client_who_never_does_but_cannot_redirect_the_refund() {
    let mut c = cast(0, 3);
    let w = &mut c.w;
    let task = w.post(&c.client, 8, small_job(8), R).unwrap();
    let d = w.task(&task).open_deadline;
    w.advance(d + 1 - w.slot());
    w.crank("expire_task", client::expire_task(task)).unwrap();
    let thief = w.token_account(&w.cranker.pubkey(), 0);
    let t = w.task(&task);
    refused(w, "WrongTokenAccount", |w| {
        w.crank(
            "close_task",
            client::close_task(task, t.client, thief, None),
        )
    });
    let cranker = w.cranker.pubkey();
    refused(w, "WrongAuthority", |w| {
        w.crank(
            "close_task",
            client::close_task(task, cranker, t.client_token, None),
        )
    });
    let before = w.balance(&c.client.wallet);
    w.close(task).unwrap();
    assert_eq!(w.balance(&c.client.wallet), before + R);
    // closing twice
    refused(w, "AccountNotInitialized", |w| {
        w.crank(
            "close_task",
            client::close_task(task, t.client, t.client_token, None),
        )
    });
}

#[test]
fn double_claim_double_vote_unseated_vote_and_replayed_reveal() {
    let mut c = cast(3, 3);
    let w = &mut c.w;
    let task = w.post(&c.client, 9, small_job(9), R).unwrap();
    w.claim(&c.provider, task).unwrap();
    let p2 = w.actor("p2", STAKE);
    w.onboard(&p2, 1, STAKE);
    refused(w, "TaskNotOpen", |w| w.claim(&p2, task));
    refused(w, "TaskNotOpen", |w| w.claim(&c.provider, task));
    w.submit(&c.provider, task, [9; 32]).unwrap();
    refused(w, "TaskNotClaimed", |w| {
        w.submit(&c.provider, task, [8; 32])
    });
    w.advance(2);
    let v0 = &c.verifiers[0];
    w.join(v0, task).unwrap();
    let seat = w
        .task(&task)
        .round_seats()
        .iter()
        .position(|s| s.node == v0.node)
        .unwrap();
    refused(w, "SeatAlreadyHeld", |w| {
        w.join_displacing(v0, task, seat as u8, None)
    });
    let b = Ballot::new(VOTE_VALID, 90);
    w.commit(v0, task, &b).unwrap();
    refused(w, "VoteAlreadyCommitted", |w| w.commit(v0, task, &b));
    // a node without a seat has no vote account to commit or reveal with
    refused(w, "AccountNotInitialized", |w| {
        w.commit(&c.verifiers[1], task, &b)
    });
    w.join(&c.verifiers[1], task).unwrap();
    w.join(&c.verifiers[2], task).unwrap();
    w.commit(&c.verifiers[1], task, &b).unwrap();
    refused(w, "VoteNotCommitted", |w| {
        w.reveal(&c.verifiers[2], task, &b)
    });
    w.commit(&c.verifiers[2], task, &Ballot::new(VOTE_VALID, 92))
        .unwrap();
    w.reveal(v0, task, &b).unwrap();
    refused(w, "VoteAlreadyRevealed", |w| w.reveal(v0, task, &b));
    // v1 committed v0's ballot under its own node: that commitment opens fine for v1 only
    w.reveal(&c.verifiers[1], task, &b).unwrap();
    refused(w, "CommitmentMismatch", |w| {
        w.reveal(&c.verifiers[2], task, &Ballot::new(VOTE_VALID, 93))
    });
    w.reveal(&c.verifiers[2], task, &Ballot::new(VOTE_VALID, 92))
        .unwrap();
    w.finalize(task).unwrap();
    refused(w, "TaskNotVerifying", |w| w.finalize(task));
    w.settle(task, v0, 0).unwrap();
    refused(w, "AccountNotInitialized", |w| w.settle(task, v0, 0));
}

#[test]
fn wrong_mint_vault_pda_signer_and_owner_are_refused() {
    let mut c = cast(3, 3);
    let w = &mut c.w;
    let other = w.other_mint();
    // wrong mint: staking or posting from a token account of another mint
    let fake = w.token_account_of(other, &c.provider.key(), STAKE);
    let p = &c.provider;
    refused(w, "WrongMint", |w| {
        w.send_as("stake", p, client::stake(p.key(), w.market, fake, 1))
    });
    // wrong signer: staking out of someone else's wallet
    let victim = c.client.wallet;
    refused(w, "WrongAuthority", |w| {
        w.send_as("stake", p, client::stake(p.key(), w.market, victim, 1))
    });
    let fake_client = w.token_account_of(other, &c.client.key(), 10 * R);
    let ix = client::post_task(c.client.key(), fake_client, w.mint, w.market, post_args(10));
    refused(w, "WrongMint", |w| w.send_as("post_task", &c.client, ix));
    let ix = client::post_task(
        c.client.key(),
        c.client.wallet,
        other,
        w.market,
        post_args(10),
    );
    refused(w, "WrongMint", |w| w.send_as("post_task", &c.client, ix));
    // wrong signer: a client cannot pay from someone else's token account
    let ix = client::post_task(
        c.client.key(),
        c.provider.wallet,
        w.mint,
        w.market,
        post_args(10),
    );
    refused(w, "WrongAuthority", |w| {
        w.send_as("post_task", &c.client, ix)
    });

    let task = c.submitted(11);
    let w = &mut c.w;
    // wrong signer: someone else's node for claim/cancel
    let thief = w.actor("thief", 0);
    let mut ix = client::claim_task(thief.key(), task);
    ix.accounts[1].pubkey = c.provider.node;
    refused(w, "ConstraintSeeds", |w| {
        w.send_as("claim_task", &thief, ix)
    });
    let mut ix = client::cancel_task(thief.key(), task);
    ix.accounts[0].pubkey = task;
    refused(w, "ConstraintSeeds", |w| {
        w.send_as("cancel_task", &thief, ix)
    });
    // wrong vault: finalize with a verifier's vault as the provider's vault
    let votes: Vec<(&Actor, Ballot)> = c
        .verifiers
        .iter()
        .map(|v| (v, Ballot::new(VOTE_VALID, 7)))
        .collect();
    w.join_and_commit(task, &votes);
    for (v, b) in &votes {
        w.reveal(v, task, b).unwrap();
    }
    let mut ix = client::finalize_task(task, c.provider.node, w.market);
    ix.accounts[3].pubkey = c.verifiers[0].vault;
    refused(w, "ConstraintSeeds", |w| w.crank("finalize_task", ix));
    // wrong provider node
    let ix = client::finalize_task(task, c.verifiers[0].node, w.market);
    refused(w, "NotTaskProvider", |w| w.crank("finalize_task", ix));
    // wrong owner: a token account passed where a node is expected
    let mut ix = client::finalize_task(task, c.provider.node, w.market);
    ix.accounts[2].pubkey = c.provider.vault;
    refused(w, "AccountOwnedByWrongProgram", |w| {
        w.crank("finalize_task", ix)
    });
    // wrong PDA: a vote of another verifier settled against the wrong node
    w.finalize(task).unwrap();
    let mut ix = client::settle_vote(task, c.verifiers[0].key(), 0);
    ix.accounts[4].pubkey = c.verifiers[1].node;
    ix.accounts[5].pubkey = c.verifiers[1].vault;
    refused(w, "WrongAuthority", |w| w.crank("settle_vote", ix));
    // wrong rent receiver
    let mut ix = client::settle_vote(task, c.verifiers[0].key(), 0);
    ix.accounts[3].pubkey = w.cranker.pubkey();
    refused(w, "WrongAuthority", |w| w.crank("settle_vote", ix));
}

#[test]
fn reinitialisation_is_refused() {
    let mut c = cast(0, 3);
    let w = &mut c.w;
    let admin = w.admin.insecure_clone();
    let ix = client::initialize_config(
        admin.pubkey(),
        w.mint,
        w.treasury,
        compute_market::instructions::InitializeConfigArgs {
            params: test_params(),
            update_delay: 50,
        },
    );
    refused(w, "already in use", |w| {
        w.send("initialize_config", &admin, &[], ix)
    });
    refused(w, "already in use", |w| w.register(&c.provider, 1, gpu()));
    refused(w, "already in use", |w| {
        w.send(
            "create_market",
            &admin,
            &[],
            client::create_market(admin.pubkey(), test_market(1)),
        )
    });
    w.post(&c.client, 12, small_job(1), R).unwrap();
    refused(w, "already in use", |w| {
        w.post(&c.client, 12, small_job(1), R)
            .map(|_| unreachable!())
    });
}

#[test]
fn arithmetic_overflow_on_large_amounts_is_refused() {
    let mut c = cast(0, 3);
    let w = &mut c.w;
    let mut a = post_args(13);
    a.reward = u64::MAX / 2 + 1; // bond = 2 × reward overflows u64
    let ix = client::post_task(c.client.key(), c.client.wallet, w.mint, w.market, a);
    refused(w, "MathOverflow", |w| w.send_as("post_task", &c.client, ix));
}

#[test]
fn bad_input_is_refused_by_name() {
    let mut c = cast(0, 3);
    let w = &mut c.w;
    let cases: Vec<(&str, PostTaskArgs)> = vec![
        (
            "ZeroReward",
            PostTaskArgs {
                reward: 0,
                ..post_args(20)
            },
        ),
        (
            "UriTooLong",
            PostTaskArgs {
                input_uri: "x".repeat(129),
                ..post_args(21)
            },
        ),
        (
            "QuorumInvalid",
            PostTaskArgs {
                quorum: 2,
                ..post_args(22)
            },
        ),
        (
            "QuorumInvalid",
            PostTaskArgs {
                quorum: 17,
                ..post_args(23)
            },
        ),
        (
            "SamplesOutOfBounds",
            PostTaskArgs {
                samples: 257,
                ..post_args(24)
            },
        ),
        (
            "InvalidJobSpec",
            PostTaskArgs {
                job: [0; 64],
                ..post_args(25)
            },
        ),
        (
            "InvalidJobSpec",
            PostTaskArgs {
                job: JobSpec::matmul(8193, 1, 1, [0; 32]).encode(),
                ..post_args(26)
            },
        ),
        ("MissingInputUri", {
            let mut j = small_job(1);
            j.input_mode = compute_market_protocol::job::InputMode::ContentHash;
            PostTaskArgs {
                job: j.encode(),
                ..post_args(27)
            }
        }),
    ];
    for (error, args) in cases {
        let ix = client::post_task(c.client.key(), c.client.wallet, w.mint, w.market, args);
        refused(w, error, |w| w.send_as("post_task", &c.client, ix));
    }
    // the largest URI is fine
    w.post_with(
        &c.client,
        PostTaskArgs {
            input_uri: "x".repeat(128),
            ..post_args(28)
        },
    )
    .unwrap();
    let task = w.post(&c.client, 29, small_job(2), R).unwrap();
    // wrong state: commit, finalize, cancel-after-claim, submit before claim
    refused(w, "TaskNotClaimed", |w| {
        w.submit(&c.provider, task, [1; 32])
    });
    refused(w, "TaskNotFinished", |w| w.close(task));
    w.claim(&c.provider, task).unwrap();
    refused(w, "TaskNotVerifying", |w| w.finalize(task));
    refused(w, "TaskNotOpen", |w| {
        w.send_as(
            "cancel_task",
            &c.client,
            client::cancel_task(c.client.key(), task),
        )
    });
    // result URI bounds, empty root
    let p = &c.provider;
    let long = SubmitResultArgs {
        result_root: [1; 32],
        result_uri: "u".repeat(129),
    };
    refused(w, "UriTooLong", |w| {
        w.send_as(
            "submit_result",
            p,
            client::submit_result(p.key(), task, w.market, long),
        )
    });
    let empty = SubmitResultArgs {
        result_root: [1; 32],
        result_uri: String::new(),
    };
    refused(w, "UriEmpty", |w| {
        w.send_as(
            "submit_result",
            p,
            client::submit_result(p.key(), task, w.market, empty),
        )
    });
    refused(w, "EmptyResultRoot", |w| w.submit(p, task, [0; 32]));
    // registration and staking bounds
    let weak = w.actor("weak", STAKE);
    refused(w, "HardwareBelowMarketMinimum", |w| {
        w.register(
            &weak,
            1,
            compute_market::state::Hardware {
                gflops: 10,
                memory_gb: 1,
                bandwidth_gbps: 1,
                region: 0,
            },
        )
    });
    refused(w, "InvalidRoles", |w| w.register(&weak, 4, gpu()));
    refused(w, "InvalidRoles", |w| w.register(&weak, 0, gpu()));
    w.register(&weak, 2, gpu()).unwrap();
    refused(w, "ZeroAmount", |w| w.stake(&weak, 0));
    // a provider with too little free stake cannot claim
    let poor = w.actor("poor", R);
    w.onboard(&poor, 1, R);
    let t2 = w.post(&c.client, 30, small_job(3), R).unwrap();
    refused(w, "InsufficientFreeStake", |w| w.claim(&poor, t2));
    // market creation bounds
    let admin = w.admin.insecure_clone();
    for (error, f) in [
        (
            "QuorumInvalid",
            (|m: &mut compute_market::state::MarketArgs| m.quorum = 4) as fn(&mut _),
        ),
        ("SamplesOutOfBounds", |m| m.samples = 0),
        ("WindowOutOfBounds", |m| m.windows.submit = 5),
        ("WindowOutOfBounds", |m| m.windows.reveal = 10_001),
        ("NameTooLong", |m| m.name = "n".repeat(33)),
        ("CooldownTooShort", |m| m.windows.submit = 100_000),
    ] {
        let mut m = test_market(2);
        f(&mut m);
        refused(w, error, |w| {
            w.send(
                "create_market",
                &admin,
                &[],
                client::create_market(admin.pubkey(), m),
            )
        });
    }
}

#[test]
fn raw_instruction_with_unknown_discriminator_is_refused() {
    let mut w = World::new();
    let ix = Instruction {
        program_id: compute_market::ID,
        accounts: vec![],
        data: vec![1, 2, 3, 4, 5, 6, 7, 8],
    };
    refused(&mut w, "InstructionFallbackNotFound", |w| {
        w.crank("garbage", ix)
    });
    // an instruction's data must deserialize
    let mut ix = client::expire_task(Pubkey::new_unique());
    ix.data = compute_market::instruction::ExpireTask {}.data();
    ix.accounts = compute_market::accounts::ExpireTask {
        task: Pubkey::new_unique(),
    }
    .to_account_metas(None);
    refused(&mut w, "AccountNotInitialized", |w| {
        w.crank("expire_task", ix)
    });
}

/// Issue 29, finding 1: a provider that serves two verifiers and stalls the third made the
/// third vote INVALID, land in the minority and lose part of its bond. "I could not get it" is
/// its own vote now, UNAVAILABLE, never a losing one (PROTOCOL §3.4, §4.4): the stalled
/// verifier keeps its bond whole, the two served verifiers decide, and a vote value outside
/// the three is refused by name.
#[test]
fn a_stalled_verifier_voting_unavailable_keeps_its_bond() {
    let mut c = cast(3, 1);
    let task = c.submitted(40);
    let w = &mut c.w;
    let served = Ballot::new(VOTE_VALID, 400);
    let stalled = Ballot::new(VOTE_UNAVAILABLE, 401);
    let votes = [
        (&c.verifiers[0], served),
        (&c.verifiers[1], Ballot::new(VOTE_VALID, 402)),
        (&c.verifiers[2], stalled),
    ];
    decide(w, task, &votes);
    let t = w.task(&task);
    assert_eq!(
        t.status,
        TaskStatus::Accepted,
        "the two served seats decide"
    );
    assert_eq!(t.rounds[0].majority, VOTE_VALID);
    let verifier_bond = t.verifier_bond;
    assert!(verifier_bond > 0);
    for (v, _) in &votes {
        w.settle(task, v, 0).unwrap();
    }
    let n = w.node(&c.verifiers[2].node);
    assert_eq!(
        (n.free, n.bonded, n.earned, n.fees_due),
        (STAKE, 0, 0, 0),
        "the stalled verifier's bond is whole, and it is paid nothing"
    );
    assert_eq!(
        n.verifications, 1,
        "its revealed vote counts as a verification"
    );
    for v in &c.verifiers[..2] {
        let n = w.node(&v.node);
        assert_eq!(n.free, STAKE, "a served verifier keeps its bond");
        assert!(n.earned > 0, "and shares the pool");
    }
    w.close(task).unwrap();
    let nodes: Vec<&Actor> = c.verifiers.iter().chain([&c.provider]).collect();
    w.check_invariants(&nodes, &[]);

    // a vote that is none of valid, invalid, unavailable is refused at reveal
    let task = c.submitted(41);
    let w = &mut c.w;
    let odd = Ballot::new(4, 410);
    w.join_and_commit(task, &[(&c.verifiers[0], odd)]);
    w.close_join_window(&task);
    let t = w.task(&task);
    w.advance(t.commit_deadline + 1 - w.slot());
    refused(w, "InvalidVoteValue", |w| {
        w.reveal_now(&c.verifiers[0], task, &odd)
    });
}

/// A provider that serves nobody, or only one verifier (perhaps its own), has its result
/// rejected as withheld (majority 3, PROTOCOL §3.5, §4.3): its whole bond goes to the
/// treasury, the client gets its reward back and nothing more, the unavailable seats get their
/// bonds back and nothing more (saying "unavailable" must never pay: it carries no evidence),
/// and the one served verifier, which cannot be told from one that made its answer up, is
/// released rather than slashed.
#[test]
fn a_withheld_result_is_rejected_and_a_served_minority_released() {
    let mut c = cast(3, 1);
    let task = c.submitted(42);
    let w = &mut c.w;
    let client_before = w.balance(&c.client.wallet);
    let votes = [
        (&c.verifiers[0], Ballot::new(VOTE_VALID, 420)),
        (&c.verifiers[1], Ballot::new(VOTE_UNAVAILABLE, 421)),
        (&c.verifiers[2], Ballot::new(VOTE_UNAVAILABLE, 422)),
    ];
    decide(w, task, &votes);
    let t = w.task(&task);
    assert_eq!(t.status, TaskStatus::Rejected);
    assert_eq!(t.rounds[0].majority, VERDICT_WITHHELD);
    let p = w.node(&c.provider.node);
    assert_eq!(
        p.free,
        STAKE - t.provider_bond,
        "the provider's bond is slashed"
    );
    assert_eq!(
        (p.bonded, p.fees_due),
        (0, t.provider_bond),
        "all of it to the treasury"
    );
    assert_eq!(
        (t.majority_share, t.client_extra),
        (0, 0),
        "nobody else is paid"
    );
    for (v, _) in &votes {
        w.settle(task, v, 0).unwrap();
    }
    for v in &c.verifiers {
        let n = w.node(&v.node);
        assert_eq!(
            (n.free, n.earned, n.times_slashed),
            (STAKE, 0, 0),
            "{}: bond back, nothing paid (the served one released, the unavailable ones on the winning side)",
            v.name
        );
    }
    w.close(task).unwrap();
    assert_eq!(
        w.balance(&c.client.wallet),
        client_before + R,
        "the client gets its reward back and nothing more"
    );
    let nodes: Vec<&Actor> = c.verifiers.iter().chain([&c.provider]).collect();
    w.check_invariants(&nodes, &[]);
}

/// Joins and commits `votes` on `task`, reveals them once the seats are final, and finalizes.
fn decide(w: &mut World, task: Pubkey, votes: &[(&Actor, Ballot)]) {
    w.join_and_commit(task, votes);
    w.close_join_window(&task);
    for (v, b) in votes {
        w.reveal(v, task, b).unwrap();
    }
    w.finalize(task).unwrap();
}

//! The cranker at the program's limits: the largest quorum (V = 15), an escalated round of 30
//! seats, and every settlement and the close of the task packed into transactions that fit the
//! packet size and the compute limit — split, never refused.

use std::sync::Mutex;

use anchor_lang::prelude::Pubkey;
use compute_market::{pda, state::TaskStatus};
use compute_market_keeper::{
    chain::{embedded::EmbeddedChain, pack::PACKET_DATA_SIZE, Chain, ChainExt, TxReport},
    roles::cranker::Cranker,
};
use compute_market_protocol::commit::{VOTE_INVALID, VOTE_VALID};
use compute_market_svm_tests::{
    small_job, test_market, test_params, Actor, Ballot, World, R, STAKE,
};
use solana_instruction::Instruction;
use solana_keypair::Keypair;
use solana_signer::Signer;

/// The embedded chain, recording every transaction sent: its instructions, wire size, outcome.
struct Recorder {
    inner: EmbeddedChain,
    sent: Mutex<Vec<(usize, usize, TxReport)>>,
}

impl Chain for Recorder {
    fn slot(&self) -> anyhow::Result<u64> {
        self.inner.slot()
    }
    fn account(&self, key: &Pubkey) -> anyhow::Result<Option<Vec<u8>>> {
        self.inner.account(key)
    }
    fn program_accounts(&self, d: &[u8]) -> anyhow::Result<Vec<(Pubkey, Vec<u8>)>> {
        self.inner.program_accounts(d)
    }
    fn token_balance(&self, key: &Pubkey) -> anyhow::Result<u64> {
        self.inner.token_balance(key)
    }
    fn rent_exempt(&self, len: usize) -> anyhow::Result<u64> {
        self.inner.rent_exempt(len)
    }
    fn send(
        &self,
        ixs: &[Instruction],
        payer: &Keypair,
        signers: &[&Keypair],
    ) -> anyhow::Result<TxReport> {
        let msg = solana_transaction::Transaction::new_with_payer(ixs, Some(&payer.pubkey()));
        let size = bincode::serialize(&msg).expect("serializes").len();
        let r = self.inner.send(ixs, payer, signers)?;
        self.sent.lock().unwrap().push((ixs.len(), size, r.clone()));
        Ok(r)
    }
}

#[test]
fn fifteen_seats_then_thirty_escalated_are_settled_and_closed_in_transactions_that_fit() {
    // round 1 unanimous (finalized with its 30 settlements, then round 0's 15 and the close),
    // and split 20–10 (finalized alone, then 45 settlements losers first and the close)
    for invalid in [0, 10] {
        escalated_round(invalid);
    }
}

/// V = 15, escalated to 30 seats of which `invalid` vote INVALID; the keeper's cranker takes
/// it from the end of round 1's reveals to the closed task.
fn escalated_round(invalid: usize) {
    let mut market = test_market(1);
    market.quorum = 15;
    let mut w = World::with(test_params(), market);
    let client = w.actor("client", 100 * R);
    let provider = w.actor("provider", STAKE);
    w.onboard(&provider, 1, STAKE);
    let verifiers: Vec<Actor> = w.verifiers("v", 45, STAKE, STAKE);
    w.advance(2);
    let task = w.post(&client, 1, small_job(1), R).expect("post");
    w.claim(&provider, task).expect("claim");
    w.submit(&provider, task, [7; 32]).expect("submit");
    w.advance(2);

    // fills every seat of the current round, seat by seat, with a verifier not seated in it
    // yet whose ticket for that seat is eligible (each seat its own race, PROTOCOL §3.3)
    let seat = |w: &mut World, seats: u8, tag: u64, vote: &dyn Fn(usize) -> u8| {
        if !w.task(&task).seed_drawn {
            w.crank("draw_seed", compute_market::client::draw_seed(task))
                .expect("draw_seed");
        }
        let mut seated: Vec<(&Actor, Ballot)> = vec![];
        for j in 0..seats {
            let t = w.task(&task);
            let eligible = |v: &&Actor| {
                let w_v = w.node(&v.node).weight_at(t.snapshot_slot);
                let s = w.seat_score(&task, &v.node, j, w_v);
                compute_market_protocol::seats::seat_eligible(
                    &s,
                    t.snapshot_stake,
                    compute_market::constants::SEAT_OVERSAMPLE,
                )
            };
            // a verifier without a seat if one is eligible, else one already seated (a node
            // may hold several seats: one vote for all of them)
            let v = verifiers
                .iter()
                .filter(eligible)
                .min_by_key(|v| t.seats_held_by(&v.node))
                .expect("an eligible verifier for every seat");
            w.join_seat(v, task, j).expect("join a free seat");
            if !seated.iter().any(|(s, _)| s.node == v.node) {
                let b = Ballot::new(vote(j as usize), tag + j as u64);
                seated.push((v, b));
            }
        }
        assert_eq!(w.task(&task).tally().seats, seats);
        for (v, b) in &seated {
            w.commit(v, task, b).expect("commit");
        }
        seated
    };
    // round 0: 7 valid, 7 invalid, 1 silent — no majority, escalated to 30 seats
    let r0 = seat(&mut w, 15, 100, &|i| {
        if i % 2 == 0 {
            VOTE_VALID
        } else {
            VOTE_INVALID
        }
    });
    for (v, b) in &r0[..14] {
        w.reveal(v, task, b).expect("reveal");
    }
    let deadline = w.task(&task).reveal_deadline;
    w.advance(deadline + 1 - w.slot());
    w.finalize(task).expect("finalize (escalation)");
    let t = w.task(&task);
    assert_eq!((t.round, t.tally().quorum), (1, 30));
    w.advance(2);
    // round 1: 30 seats, the last `invalid` INVALID
    let r1 = seat(&mut w, 30, 200, &|i| {
        if i >= 30 - invalid {
            VOTE_INVALID
        } else {
            VOTE_VALID
        }
    });
    for (v, b) in &r1 {
        w.reveal(v, task, b).expect("reveal");
    }
    let n_votes = r0.len() + r1.len();
    assert_eq!(w.task(&task).open_votes as usize, n_votes);

    // the keeper's cranker does the rest: finalize, 45 settlements, the close
    let cranker_kp = Keypair::new();
    w.c.airdrop(&cranker_kp.pubkey(), 10_000_000_000);
    let (treasury, market) = (w.treasury, w.market);
    let votes: Vec<Pubkey> = r0
        .iter()
        .map(|(v, _)| pda::vote(&task, &v.node, 0))
        .chain(r1.iter().map(|(v, _)| pda::vote(&task, &v.node, 1)))
        .collect();
    let chain = Recorder {
        inner: EmbeddedChain::new(w.c),
        sent: Mutex::new(vec![]),
    };
    let mut cranker = Cranker::new(cranker_kp, treasury, market, 4);
    for _ in 0..3 {
        cranker.step(&chain).expect("a pass");
        chain.inner.advance(1);
    }
    let sent = chain.sent.lock().unwrap();
    for (ixs, size, r) in sent.iter() {
        assert!(r.ok, "a cranker transaction was refused: {:?}", r.error);
        assert!(
            *size <= PACKET_DATA_SIZE,
            "{size} bytes, {ixs} instructions"
        );
    }
    assert!(
        chain.account(&task).unwrap().is_none(),
        "the task is closed"
    );
    assert!(
        votes.iter().all(|v| chain.account(v).unwrap().is_none()),
        "every vote is closed"
    );
    let finalized = &cranker.ledger.finalized;
    assert_eq!(finalized.len(), 1);
    assert_eq!(finalized[0].status, TaskStatus::Accepted);
    assert_eq!(cranker.ledger.settled.len(), n_votes);
    assert_eq!(cranker.ledger.closed.len(), 1);
    // 47 instructions (finalize, 45 settlements, close) in a handful of transactions
    let txs = sent.len();
    let ixs: usize = sent.iter().map(|(n, _, _)| n).sum();
    assert!(
        (3..=10).contains(&txs),
        "{txs} transactions for {ixs} instructions"
    );
    let (largest, most_cu) = (
        sent.iter().map(|(_, s, _)| *s).max().unwrap(),
        sent.iter().map(|(_, _, r)| r.cu).max().unwrap(),
    );
    println!(
        "cranker, round 1 {valid}–{invalid}: {txs} transactions for finalize + 45 settlements + \
         close ({ixs} instructions with their compute limits), largest {largest} bytes, most CU \
         {most_cu}",
        valid = 30 - invalid
    );
}

#[test]
fn held_verdicts_are_concluded_after_their_window_and_won_disputes_paid() {
    use compute_market_protocol::{dispute, job::JobSpec};
    use compute_market_svm_tests::{cast_in, disputes::Committed};
    const D: u32 = 20;
    let mut c = cast_in(
        3,
        1,
        compute_market::state::MarketArgs {
            dispute_window: D,
            ..test_market(1)
        },
    );
    let job = JobSpec::hash_batch(8, 32, 3, [4; 32]);
    let wrong = Committed::new(job, |_, _| [0; 32]);
    let honest = Committed::new(job, |t, e| dispute::expected_element(&job, t, e).unwrap());
    // task 1: a wrong result the three vouch for, which the client proves wrong; task 2: a
    // right one nobody disputes
    let t1 = c.submitted_job(1, job, 0, wrong.root());
    let t2 = c.submitted_job(2, job, 0, honest.root());
    let w = &mut c.w;
    for (i, task) in [t1, t2].into_iter().enumerate() {
        let votes: Vec<(&Actor, Ballot)> = c
            .verifiers
            .iter()
            .enumerate()
            .map(|(j, v)| (v, Ballot::new(VOTE_VALID, (10 * i + j) as u64)))
            .collect();
        w.decide(task, &votes);
        assert!(w.task(&task).held);
    }
    let client = c.client.clone();
    w.argue(&client, t1, &wrong, 3, 5)
        .expect("the client's dispute");
    assert_eq!(w.task(&t1).status, TaskStatus::Rejected);
    let wallet = w.balance(&client.wallet);
    let deadline = w.task(&t2).dispute_deadline;

    let cranker_kp = Keypair::new();
    w.c.airdrop(&cranker_kp.pubkey(), 10_000_000_000);
    let (treasury, market) = (w.treasury, w.market);
    let chain = Recorder {
        inner: EmbeddedChain::new(c.w.c),
        sent: Mutex::new(vec![]),
    };
    let mut cranker = Cranker::new(cranker_kp, treasury, market, 2);
    for _ in 0..3 {
        cranker.step(&chain).expect("a pass");
        chain.inner.advance(1);
    }
    // task 1 (overturned) is concluded, settled, its dispute paid and closed; task 2 waits
    assert!(chain.account(&t1).unwrap().is_none(), "task 1 closed");
    assert!(chain
        .account(&pda::dispute(&t1, &client.key()))
        .unwrap()
        .is_none());
    assert!(chain.inner.slot().unwrap() <= deadline);
    let t = chain.task(&t2).unwrap().expect("task 2 open");
    assert!(t.held, "nothing moves before the window closes");
    assert!(chain.inner.token_balance(&client.wallet).unwrap() > wallet + R);
    // the window closes: task 2 is concluded, settled and closed
    let now = chain.inner.slot().unwrap();
    chain.inner.advance(deadline + 1 - now);
    for _ in 0..3 {
        cranker.step(&chain).expect("a pass");
        chain.inner.advance(1);
    }
    assert!(chain.account(&t2).unwrap().is_none(), "task 2 closed");
    let sent = chain.sent.lock().unwrap();
    let refused: Vec<_> = sent
        .iter()
        .filter(|(_, _, r)| !r.ok)
        .map(|(_, _, r)| r.error_code())
        .collect();
    assert!(refused.is_empty(), "refused: {refused:?}");
}

#[test]
fn a_won_dispute_whose_payout_account_was_closed_is_paid_to_the_challengers_associated_account() {
    use compute_market_protocol::job::JobSpec;
    use compute_market_svm_tests::{cast_in, disputes::Committed};
    let mut c = cast_in(
        3,
        1,
        compute_market::state::MarketArgs {
            dispute_window: 20,
            ..test_market(1)
        },
    );
    let job = JobSpec::hash_batch(8, 32, 3, [5; 32]);
    let wrong = Committed::new(job, |_, _| [0; 32]);
    let task = c.submitted_job(1, job, 0, wrong.root());
    let w = &mut c.w;
    let votes: Vec<(&Actor, Ballot)> = c
        .verifiers
        .iter()
        .enumerate()
        .map(|(j, v)| (v, Ballot::new(VOTE_VALID, j as u64)))
        .collect();
    w.decide(task, &votes);
    // the client disputes with an empty token account of its own as the payout, then closes it
    let client = c.client.clone();
    let payout = w.token_account(&client.key(), 0);
    let open = compute_market::client::open_dispute(
        task,
        client.key(),
        client.wallet,
        payout,
        compute_market::instructions::OpenDisputeArgs {
            kind: 1,
            tile: 2,
            element: 7,
        },
    );
    w.send_as("open_dispute", &client, open).expect("open");
    w.prove_element(&client, task, &wrong, 2, 7).expect("prove");
    w.step_to_end(&client, task, None).expect("step");
    assert_eq!(w.task(&task).status, TaskStatus::Rejected, "proven wrong");
    let close = anchor_spl::token::spl_token::instruction::close_account(
        &anchor_spl::token::ID,
        &payout,
        &client.key(),
        &client.key(),
        &[],
    )
    .unwrap();
    w.send_as("close_account", &client, close)
        .expect("the challenger closes its payout account");
    let mint = w.mint;
    let ata = anchor_spl::associated_token::get_associated_token_address(&client.key(), &mint);
    assert!(
        !w.exists(&ata),
        "the challenger has no associated token account yet"
    );
    let bond = w.dispute(&task, &client).expect("won, not yet paid").bond;

    let cranker_kp = Keypair::new();
    w.c.airdrop(&cranker_kp.pubkey(), 10_000_000_000);
    let (treasury, market) = (w.treasury, w.market);
    let chain = EmbeddedChain::new(c.w.c);
    let mut cranker = Cranker::new(cranker_kp, treasury, market, 1);
    for _ in 0..4 {
        cranker.step(&chain).expect("a pass");
        chain.advance(1);
    }
    assert!(chain.account(&task).unwrap().is_none(), "the task closed");
    assert!(
        chain
            .account(&pda::dispute(&task, &client.key()))
            .unwrap()
            .is_none(),
        "the dispute was paid and closed"
    );
    let paid = chain.token_balance(&ata).unwrap();
    assert!(
        paid > bond,
        "the bond ({bond}) and the award went to the associated account: {paid}"
    );
}

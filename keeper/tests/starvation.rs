//! Cheap tasks cannot starve the checks or the claims of tasks that pay (issue 29, findings 2
//! and 3). A client/provider pair floods the market with tasks that pay almost nothing and
//! never answer — results no verifier can fetch, inputs no provider can fetch — while honest
//! tasks are posted beside them: every honest task is still fully seated, and claimed within
//! its usual time.

use std::{
    net::TcpListener,
    sync::Arc,
    time::{Duration, Instant},
};

use anchor_lang::prelude::Pubkey;
use compute_market::state::{TaskStatus, Windows};
use compute_market_keeper::{
    chain::ChainExt,
    cli::{self, TaskTerms},
    compute::cpu::CpuBackend,
    demo::{DemoConfig, Scenario},
    metrics::Metrics,
    results::{self, FetchPolicy, ResultStore},
};
use compute_market_protocol::job::{InputMode, JobSpec};
use solana_keypair::Keypair;
use solana_signer::Signer;

/// A server that accepts every connection and never answers (each held for two minutes).
fn never_answers() -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(s) = s else { continue };
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_secs(120));
                drop(s);
            });
        }
    });
    url
}

/// A market of an honest provider (serving over HTTP, taking only tasks that pay), the
/// flooder's provider (publishing under `flood_url`), and three honest verifiers checking in
/// the background with the daemon's capacity of 8 checks (a 2-core machine); the demo's
/// careless verifier stays idle.
fn market(dir: &std::path::Path, flood_url: &str) -> Scenario {
    let cfg = DemoConfig {
        providers: 2,
        verifiers: 4,
        tasks: 1,
        corrupt_fraction: 0.0,
        windows: Windows {
            submit: 200,
            join: 40,
            commit: 40,
            reveal: 30,
        },
        ..Default::default()
    };
    let mut s = Scenario::new(&cfg, Arc::new(CpuBackend), dir).unwrap();
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let served = Arc::new(
        ResultStore::serving_at(format!("http://127.0.0.1:{port}"))
            .with_policy(FetchPolicy::loopback()),
    );
    let server = results::serve(
        served.clone(),
        Arc::new(Metrics::default()),
        &format!("127.0.0.1:{port}"),
    )
    .unwrap();
    std::mem::forget(server);
    let honest = &mut s.providers[0];
    honest.ctx.store = served;
    // reward 10 on a tiny job is below its floor; 3 000 000 is well above it
    honest.policy.min_reward_per_gwork = 1_000;
    honest.max_active = 4;
    let flooder = &mut s.providers[1];
    flooder.ctx.store = Arc::new(ResultStore::serving_at(flood_url));
    (
        flooder.max_active,
        flooder.claim_backoff,
        flooder.corrupt_fraction,
    ) = (256, 0, 0.0);
    let fetching = Arc::new(ResultStore::default().with_policy(FetchPolicy {
        timeout: Duration::from_secs(30),
        ..FetchPolicy::loopback()
    }));
    for v in &mut s.verifiers[..3] {
        v.ctx.store = fetching.clone();
        v.background = true;
        v.max_checks = 8;
    }
    s
}

/// One pass of the market as the test runs it: the honest provider, the three honest
/// verifiers and the cranker step; then a slot passes (200 ms of wall time, so fetch
/// deadlines in seconds and windows in slots keep their proportion).
fn pass(s: &mut Scenario) {
    let chain = s.roles_chain.clone();
    s.providers[0].step(chain.as_ref()).ok();
    for v in &mut s.verifiers[..3] {
        v.step(chain.as_ref()).ok();
    }
    s.cranker.step(chain.as_ref()).ok();
    s.chain.advance(1);
    std::thread::sleep(Duration::from_millis(200));
}

/// Finding 2: eight never-answering tasks (reward 10 each) every 2 s each held one of a
/// verifier's 8 check places until their join-by slot, and a verifier with every place busy
/// does not compete for seats: of 11 honest tasks 7 escalated and 5 ended Undecided. Now the
/// capacity goes by expected pay, each provider first held to its share, and an attempt
/// nobody answers yields its place within seconds: every honest task is fully seated in its
/// first round and accepted.
#[test]
fn a_flood_of_cheap_never_answering_tasks_does_not_starve_the_checks_of_paying_ones() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = market(dir.path(), &never_answers());
    let chain = s.chain.clone();
    let client = Keypair::try_from(&s.client.to_bytes()[..]).unwrap();
    let terms = |reward: u64| TaskTerms {
        market: 1,
        reward,
        ..Default::default()
    };
    let (mut id, mut honest) = (1_000u64, vec![]);
    // whether each honest task had every seat of its round 0 taken at some pass
    let mut seated_first = std::collections::HashMap::new();
    let observe = |chain: &compute_market_keeper::chain::embedded::EmbeddedChain,
                   honest: &[Pubkey],
                   seated: &mut std::collections::HashMap<Pubkey, bool>| {
        for k in honest {
            if let Some(t) = chain.task(k).unwrap() {
                if t.status == TaskStatus::Verifying && t.round == 0 {
                    let full = t.tally().seats == t.tally().quorum;
                    *seated.entry(*k).or_insert(false) |= full;
                }
            }
        }
    };
    let started = Instant::now();
    for wave in 0..12u64 {
        // the flood: eight cheap tasks, claimed and submitted by the flooder at once
        let cheap: Vec<(u64, JobSpec)> = (0..8)
            .map(|i| {
                id += 1;
                (id, JobSpec::hash_batch(8, 4, 1, [(wave * 8 + i) as u8; 32]))
            })
            .collect();
        cli::task_post(chain.as_ref(), &client, terms(10), cheap).unwrap();
        let roles = s.roles_chain.clone();
        for _ in 0..3 {
            s.providers[1].step(roles.as_ref()).ok();
        }
        // every other wave, an honest task
        if wave % 2 == 0 {
            id += 1;
            let job = JobSpec::hash_batch(256, 16, 8, [200 + wave as u8; 32]);
            cli::task_post(chain.as_ref(), &client, terms(3_000_000), vec![(id, job)]).unwrap();
            honest.push(compute_market::pda::task(&client.pubkey(), id));
        }
        // 2 s of passes
        for _ in 0..10 {
            pass(&mut s);
            observe(&chain, &honest, &mut seated_first);
        }
    }
    let in_flood = chain
        .tasks()
        .unwrap()
        .iter()
        .filter(|(_, t)| t.reward == 10 && t.status == TaskStatus::Verifying)
        .count();
    assert!(
        in_flood >= 24,
        "the flood kept its tasks in verification: {in_flood}"
    );
    // until every honest task is decided
    let t0 = Instant::now();
    loop {
        observe(&chain, &honest, &mut seated_first);
        let decided = honest.iter().all(|k| {
            chain
                .task(k)
                .unwrap()
                .is_none_or(|t| t.status != TaskStatus::Verifying && t.status != TaskStatus::Open)
        });
        if decided || t0.elapsed() > Duration::from_secs(120) {
            break;
        }
        pass(&mut s);
    }
    let outcomes: Vec<_> = honest
        .iter()
        .map(|k| {
            let closed = s.cranker.ledger.closed.iter().any(|(c, _)| c == k);
            chain
                .task(k)
                .unwrap()
                .map_or(if closed { "closed" } else { "gone" }.to_string(), |t| {
                    format!("{:?} (round {})", t.status, t.round)
                })
        })
        .collect();
    let full = honest
        .iter()
        .filter(|k| seated_first.get(*k).copied().unwrap_or(false))
        .count();
    println!(
        "check flood: {} honest tasks among {} cheap ones ({in_flood} in verification at the end of the flood, {:.0} s): {full} fully seated in round 0; outcomes {outcomes:?}",
        honest.len(),
        id - 1_000 - honest.len() as u64,
        started.elapsed().as_secs_f64()
    );
    assert_eq!(
        full,
        honest.len(),
        "every honest task fully seated in round 0"
    );
    let mut finalized: Vec<(Pubkey, TaskStatus)> = s
        .cranker
        .ledger
        .finalized
        .iter()
        .map(|f| (f.task, f.status))
        .collect();
    for v in &s.verifiers[..3] {
        finalized.extend(
            v.finalized
                .lock()
                .unwrap()
                .iter()
                .map(|f| (f.task, f.status)),
        );
    }
    for k in &honest {
        let accepted = finalized
            .iter()
            .any(|(t, st)| t == k && *st == TaskStatus::Accepted)
            || chain
                .task(k)
                .unwrap()
                .is_some_and(|t| t.status == TaskStatus::Accepted);
        assert!(accepted, "honest task {k} accepted: {outcomes:?}");
    }
}

/// Finding 3: four cheap tasks whose inputs never arrive were the oldest open tasks, so the
/// provider's plan took them as its `--max-active` 4 picks and claimed a pick only once its
/// inputs were held; a failed pick was never replaced, and honest tasks waited 58–64 s. Now a
/// pick whose inputs are not held is replaced at once by the next task that fits, and the
/// host that did not answer is paused: honest tasks are claimed within a pass or two.
#[test]
fn tasks_whose_inputs_never_arrive_do_not_block_the_claims_of_others() {
    let dir = tempfile::tempdir().unwrap();
    let stall = never_answers();
    let mut s = market(dir.path(), "http://127.0.0.1:9");
    let chain = s.chain.clone();
    let client = Keypair::try_from(&s.client.to_bytes()[..]).unwrap();
    let p = &mut s.providers[0];
    (p.background, p.policy.min_reward_per_gwork, p.claim_backoff) = (true, 0, 0);
    // the flood: four cheap tasks on "the client's data", at a host that never answers
    let cheap: Vec<(u64, JobSpec)> = (0..4u8)
        .map(|i| {
            let mut j = JobSpec::matmul(64, 64, 64, [100 + i; 32]);
            j.input_mode = InputMode::ContentHash;
            (2_000 + u64::from(i), j)
        })
        .collect();
    cli::task_post(
        chain.as_ref(),
        &client,
        TaskTerms {
            input_uri: stall.clone(),
            market: 1,
            reward: 10,
            ..Default::default()
        },
        cheap,
    )
    .unwrap();
    pass(&mut s);
    // then honest tasks, one every 2 s; each must be claimed within its usual time
    let mut waits = vec![];
    for i in 0..4u64 {
        let id = 2_100 + i;
        let job = JobSpec::matmul(64, 64, 64, [150 + i as u8; 32]);
        cli::task_post(
            chain.as_ref(),
            &client,
            TaskTerms {
                market: 1,
                reward: 3_000_000,
                ..Default::default()
            },
            vec![(id, job)],
        )
        .unwrap();
        let key = compute_market::pda::task(&client.pubkey(), id);
        let posted = Instant::now();
        let mut claimed = None;
        for _ in 0..10 {
            pass(&mut s);
            if chain
                .task(&key)
                .unwrap()
                .is_some_and(|t| t.status != TaskStatus::Open)
            {
                claimed = Some(posted.elapsed());
                break;
            }
        }
        waits.push(claimed);
    }
    println!("claim flood: honest tasks claimed after {waits:?} (4 cheap tasks with unreachable inputs posted first)");
    for (i, w) in waits.iter().enumerate() {
        let w = w.unwrap_or_else(|| panic!("honest task {i} was not claimed within 10 passes"));
        assert!(
            w < Duration::from_secs(2),
            "honest task {i} claimed within its usual time: {w:?}"
        );
    }
    let cheap_claimed = (0..4u64)
        .filter(|i| {
            chain
                .task(&compute_market::pda::task(&client.pubkey(), 2_000 + i))
                .unwrap()
                .is_some_and(|t| t.status != TaskStatus::Open)
        })
        .count();
    assert_eq!(
        cheap_claimed, 0,
        "a task whose inputs never arrived is never claimed"
    );
}

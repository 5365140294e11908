//! The daemon's roles side by side, claims a provider can keep, and results kept on disk
//! within a budget: a long computation never delays the same keeper's reveals, a job that
//! cannot finish in its window is not claimed, a restarted provider serves at once.

mod common;

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use compute_market::state::Windows;
use compute_market::{pda, state::TaskStatus};
use compute_market_keeper::{
    card::SkipReason,
    chain::{Chain, ChainExt},
    cli::{self, TaskTerms},
    compute::{cpu::CpuBackend, Backend},
    daemon::{self, DaemonOptions},
    demo::{DemoConfig, Scenario},
    metrics::Metrics,
    results::{self, hex, store::file_len, FetchPolicy, ResultStore},
    roles::provider::{refusal, Capacity, ClaimPolicy, Holding, Throughput},
};
use compute_market_protocol::job::JobSpec;
use solana_signer::Signer;

/// The CPU, but every real job (not the throughput probe, seeded `[7; 32]`) takes at least
/// `delay` longer: a long computation without burning the test machine's cores.
struct Slow {
    delay: Duration,
    computed: Mutex<Vec<(Instant, Instant)>>,
}

impl Backend for Slow {
    fn name(&self) -> String {
        "slow cpu".into()
    }
    fn tiles(&self, job: &JobSpec, indices: &[u32]) -> anyhow::Result<Vec<Vec<u8>>> {
        CpuBackend.tiles(job, indices)
    }
    fn run_with_progress(
        &self,
        job: &JobSpec,
        progress: &compute_market_keeper::compute::Progress<'_>,
    ) -> anyhow::Result<Vec<Vec<u8>>> {
        let start = Instant::now();
        if job.input != [7; 32] {
            std::thread::sleep(self.delay);
        }
        let out = CpuBackend.run_with_progress(job, progress);
        self.computed.lock().unwrap().push((start, Instant::now()));
        out
    }
    fn freivalds(&self, job: &JobSpec, rs: &[Vec<u32>]) -> anyhow::Result<Vec<Vec<u32>>> {
        CpuBackend.freivalds(job, rs)
    }
}

/// The cluster, noting when a `reveal_vote` lands.
struct Watching {
    inner: Arc<dyn Chain>,
    reveals: Mutex<Vec<Instant>>,
}

impl Chain for Watching {
    fn slot(&self) -> anyhow::Result<u64> {
        self.inner.slot()
    }
    fn account(&self, key: &anchor_lang::prelude::Pubkey) -> anyhow::Result<Option<Vec<u8>>> {
        self.inner.account(key)
    }
    fn program_accounts(
        &self,
        d: &[u8],
    ) -> anyhow::Result<Vec<(anchor_lang::prelude::Pubkey, Vec<u8>)>> {
        self.inner.program_accounts(d)
    }
    fn program_accounts_matching(
        &self,
        d: &[u8],
        offset: usize,
        bytes: &[u8],
    ) -> anyhow::Result<Vec<(anchor_lang::prelude::Pubkey, Vec<u8>)>> {
        self.inner.program_accounts_matching(d, offset, bytes)
    }
    fn token_balance(&self, key: &anchor_lang::prelude::Pubkey) -> anyhow::Result<u64> {
        self.inner.token_balance(key)
    }
    fn rent_exempt(&self, len: usize) -> anyhow::Result<u64> {
        self.inner.rent_exempt(len)
    }
    fn send(
        &self,
        ixs: &[solana_instruction::Instruction],
        payer: &solana_keypair::Keypair,
        signers: &[&solana_keypair::Keypair],
    ) -> anyhow::Result<compute_market_keeper::chain::TxReport> {
        use anchor_lang::Discriminator;
        let r = self.inner.send(ixs, payer, signers)?;
        let reveal = compute_market::instruction::RevealVote::DISCRIMINATOR;
        if r.ok && ixs.iter().any(|ix| ix.data.starts_with(reveal)) {
            self.reveals.lock().unwrap().push(Instant::now());
        }
        Ok(r)
    }
}

/// A daemon run in this process until the returned sender is dropped or sent to.
fn spawn_daemon(
    chain: Arc<dyn Chain>,
    kp: &solana_keypair::Keypair,
    backend: Arc<dyn Backend>,
    opts: DaemonOptions,
) -> (
    tokio::sync::oneshot::Sender<()>,
    std::thread::JoinHandle<anyhow::Result<()>>,
) {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let kp = solana_keypair::Keypair::try_from(&kp.to_bytes()[..]).unwrap();
    let h = std::thread::spawn(move || {
        daemon::run(chain, kp, backend, opts, async move {
            let _ = rx.await;
        })
    });
    (tx, h)
}

/// A free loopback port (bound, then released).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn a_long_compute_does_not_delay_the_same_keepers_reveals() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = DemoConfig {
        tasks: 2,
        windows: Windows {
            submit: 300,
            join: 20,
            commit: 20,
            reveal: 20,
        },
        ..Default::default()
    };
    let mut s = Scenario::new(&cfg, Arc::new(CpuBackend), dir.path()).unwrap();
    // the scenario's honest provider serves over HTTP, its verifiers fetch from loopback
    let port = free_port();
    let served = Arc::new(ResultStore::serving_at(format!("http://127.0.0.1:{port}")));
    let _server = results::serve(
        served.clone(),
        Arc::new(Metrics::default()),
        &format!("127.0.0.1:{port}"),
    )
    .unwrap();
    s.providers[0].ctx.store = served;
    s.providers[0].max_active = 1;
    let fetching = Arc::new(ResultStore::default().with_policy(FetchPolicy::loopback()));
    for v in &mut s.verifiers {
        v.ctx.store = fetching.clone();
    }
    // the keeper under test: provider and verifier in one daemon, every computation 6 s
    let both = s.onboard("both", 3).unwrap();
    let slow = Arc::new(Slow {
        delay: Duration::from_secs(6),
        computed: Mutex::new(vec![]),
    });
    let mut opts = DaemonOptions::new(1, dir.path().join("both.redb"));
    (opts.provider, opts.verifier) = (true, true);
    opts.listen = "127.0.0.1:0".into();
    opts.poll = Duration::from_millis(20);
    opts.max_active = 1;
    opts.fetch = FetchPolicy::loopback();
    let watching = Arc::new(Watching {
        inner: s.chain.clone(),
        reveals: Mutex::new(vec![]),
    });
    let (stop, daemon) = spawn_daemon(watching.clone(), &both.kp, slow.clone(), opts);

    // the rest of the market, one slot every 100 ms: the honest provider, two honest
    // verifiers and the cranker (the cheater and the careless verifier stay idle)
    let chain = s.chain.clone();
    let me = both.node;
    let (mut theirs, mut mine) = (None, None);
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(90) {
        let roles_chain = s.roles_chain.clone();
        s.providers[0].step(roles_chain.as_ref()).ok();
        for v in &mut s.verifiers[..2] {
            v.step(roles_chain.as_ref()).ok();
        }
        s.cranker.step(roles_chain.as_ref()).ok();
        for (k, t) in chain.tasks().unwrap() {
            if t.provider == s.providers[0].ctx.node {
                theirs = Some(k);
                // one task each: the honest provider claims no other (done with its first
                // before the keeper's start-up measure ends, it would take the keeper's too)
                s.providers[0].policy.min_reward_per_gwork = u64::MAX;
            } else if t.provider == me {
                mine = Some(k);
            }
        }
        let submitted = mine
            .and_then(|a| chain.task(&a).unwrap())
            .is_some_and(|t| t.status != TaskStatus::Claimed);
        let settled = theirs.is_some_and(|b| {
            s.cranker
                .ledger
                .settled
                .iter()
                .any(|e| e.task == b && e.verifier == me)
        });
        if settled && submitted {
            break;
        }
        chain.advance(1);
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = stop.send(());
    daemon.join().unwrap().unwrap();
    let computed = slow.computed.lock().unwrap().clone();
    let (start, end) = *computed
        .iter()
        .find(|(s, e)| e.duration_since(*s) >= Duration::from_secs(6))
        .expect("the keeper computed its task");
    let revealed = *watching
        .reveals
        .lock()
        .unwrap()
        .first()
        .expect("the keeper revealed its vote on the other task");
    println!(
        "compute ran {:.2}–{:.2} s, reveal landed at {:.2} s",
        start.duration_since(t0).as_secs_f64(),
        end.duration_since(t0).as_secs_f64(),
        revealed.duration_since(t0).as_secs_f64()
    );
    assert!(
        revealed > start && revealed < end,
        "the reveal landed while the same keeper was computing"
    );
    let a = chain.task(&mine.unwrap()).unwrap().unwrap();
    assert_ne!(
        a.status,
        TaskStatus::Claimed,
        "and its own task was submitted"
    );
    let paid = s
        .cranker
        .ledger
        .settled
        .iter()
        .find(|e| e.task == theirs.unwrap() && e.verifier == me)
        .unwrap();
    assert!(
        paid.paid > 0 && paid.slashed == 0,
        "its vote was paid: {} paid, {} slashed",
        paid.paid,
        paid.slashed
    );
    let n = chain.node(&me).unwrap().unwrap();
    assert_eq!(n.times_slashed, 0);
}

#[test]
fn a_job_the_provider_cannot_finish_in_its_window_is_not_claimed() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Scenario::new(
        &DemoConfig {
            tasks: 2,
            ..Default::default()
        },
        Arc::new(CpuBackend),
        dir.path(),
    )
    .unwrap();
    // the largest HashBatch a client may post: 2.7·10^14 compressions, 8 GiB of output
    let huge = JobSpec::hash_batch(65_536, 4_096, 1_024, [1; 32]);
    let terms = TaskTerms {
        market: 1,
        reward: 50_000_000,
        quorum: 0,
        samples: 0,
        region: 0,
        ..Default::default()
    };
    cli::task_post(s.chain.as_ref(), &s.client, terms, vec![(100, huge)]).unwrap();
    let key = pda::task(&s.client.pubkey(), 100);
    s.run_to_end(3_000).unwrap();
    common::assert_outcomes(&s.report().unwrap());
    let t = s.chain.task(&key).unwrap().expect("still posted");
    assert_eq!(t.status, TaskStatus::Open, "nobody claimed it");
    assert!(s
        .providers
        .iter()
        .all(|p| p.records.iter().all(|r| r.task != key)));
    // and why, in the provider's words
    let rate = Throughput::default();
    rate.measure(&CpuBackend).unwrap();
    let why = refused_by_default_policy(&t, &huge, &rate);
    println!("{why}");
    assert!(
        why.contains("exceeds 50% of its 24 s submit window"),
        "{why}"
    );
}

/// Issue 24, finding 3: a quorum-1 task lets one seat — a client's own second wallet —
/// reject an honest result and take the bond. In a market that allows quorum 1, the providers
/// (`--min-quorum` 3 by default) leave such a task alone and say why; a quorum-3 task posted
/// beside it is claimed and accepted.
#[test]
fn a_task_below_the_providers_minimum_quorum_is_not_claimed() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Scenario::new(
        &DemoConfig {
            tasks: 1,
            min_quorum: 1,
            ..Default::default()
        },
        Arc::new(CpuBackend),
        dir.path(),
    )
    .unwrap();
    let job = JobSpec::matmul(64, 64, 64, [4; 32]);
    for (id, quorum) in [(200u64, 1u8), (201, 3)] {
        let terms = TaskTerms {
            market: 1,
            reward: 1_000_000,
            quorum,
            samples: 0,
            region: 0,
            ..Default::default()
        };
        cli::task_post(s.chain.as_ref(), &s.client, terms, vec![(id, job)]).unwrap();
    }
    // until the quorum-3 task is closed (or 400 slots)
    let three_key = pda::task(&s.client.pubkey(), 201);
    for _ in 0..400 {
        if s.done() && s.chain.task(&three_key).unwrap().is_none() {
            break;
        }
        s.tick().unwrap();
    }
    let one = s.chain.task(&pda::task(&s.client.pubkey(), 200)).unwrap();
    assert_eq!(
        one.expect("still posted").status,
        TaskStatus::Open,
        "nobody claimed it"
    );
    assert!(
        s.chain.task(&three_key).unwrap().is_none(),
        "the quorum-3 task was claimed, decided and closed"
    );
    assert!(
        s.providers
            .iter()
            .any(|p| p.records.iter().any(|r| r.task == three_key)),
        "a provider computed the quorum-3 task"
    );
    let t = s
        .chain
        .task(&pda::task(&s.client.pubkey(), 200))
        .unwrap()
        .unwrap();
    let rate = Throughput::default();
    rate.set(job.kind, 1e12);
    let why = refused_by_default_policy(&t, &job, &rate);
    assert!(why.contains("--min-quorum"), "{why}");
    println!("{why}");
}

#[test]
fn a_provider_below_its_reward_floor_does_not_claim() {
    let job = JobSpec::matmul(256, 256, 256, [3; 32]);
    let rate = Throughput::default();
    rate.set(job.kind, 1e12);
    let mut t = blank_task();
    t.windows.submit = 300;
    t.reward = 1_000;
    let policy = ClaimPolicy {
        min_reward_per_gwork: 100_000,
        ..ClaimPolicy::default()
    };
    let cap = Capacity {
        memory: u64::MAX,
        throughput: &rate,
        policy: &policy,
    };
    let held = Holding {
        disk: u64::MAX,
        ..Holding::default()
    };
    // 16.7·10^6 work units at 10^5 per 10^9: a floor of 1,677; 1,000 is below it
    let why = refusal(&t, &job, &held, &cap).expect("refused");
    assert_eq!(why.reason, SkipReason::Reward);
    assert!(why.detail.contains("below the floor"), "{why:?}");
    t.reward = 1_678;
    assert_eq!(refusal(&t, &job, &held, &cap), None);
    // the store's budget: a result that does not fit is not claimed
    let small = Holding {
        disk: file_len(&job) - 1,
        ..held
    };
    let why = refusal(&t, &job, &small, &cap).expect("refused");
    assert_eq!(why.reason, SkipReason::Disk);
    assert!(why.detail.contains("the store has"), "{why:?}");
}

/// Why a provider with the default policy, unbounded memory and disk and throughput `rate`
/// does not claim `t` (panics if it would).
fn refused_by_default_policy(
    t: &compute_market::state::Task,
    job: &JobSpec,
    rate: &Throughput,
) -> String {
    let policy = ClaimPolicy::default();
    refusal(
        t,
        job,
        &Holding {
            disk: u64::MAX,
            ..Holding::default()
        },
        &Capacity {
            memory: u64::MAX,
            throughput: rate,
            policy: &policy,
        },
    )
    .expect("refused")
    .detail
}

fn blank_task() -> compute_market::state::Task {
    use anchor_lang::{AccountDeserialize, Discriminator, Space};
    let mut bytes = compute_market::state::Task::DISCRIMINATOR.to_vec();
    bytes.resize(8 + compute_market::state::Task::INIT_SPACE, 0);
    let mut t = compute_market::state::Task::try_deserialize(&mut bytes.as_slice()).unwrap();
    // the terms every provider accepts
    (t.quorum, t.samples) = (3, 16);
    t
}

#[test]
fn results_within_the_disk_budget_are_evicted_after_their_tasks_close() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = DemoConfig {
        tasks: 6,
        ..Default::default()
    };
    let mut s = Scenario::new(&cfg, Arc::new(CpuBackend), dir.path()).unwrap();
    // one provider (the others claim nothing), its store with room for about two of the
    // largest results at once, kept no longer than their tasks
    let largest = JobSpec::matmul(256, 256, 256, [0; 32]);
    let budget = 2 * file_len(&largest) + file_len(&largest) / 2;
    let store = Arc::new(ResultStore::open(&dir.path().join("budgeted"), budget, None).unwrap());
    for p in &mut s.providers {
        p.max_active = 0;
    }
    s.providers[0].max_active = 4;
    s.providers[0].ctx.store = store.clone();
    s.providers[0].retention = Duration::ZERO;
    for v in &mut s.verifiers {
        v.ctx.store = store.clone();
    }
    let mut most = 0;
    while !s.done() {
        assert!(s.chain.slot().unwrap() < 5_000, "the market finished");
        s.tick().unwrap();
        most = most.max(store.stats().bytes);
        assert!(store.stats().bytes <= budget, "{:?}", store.stats());
    }
    common::assert_outcomes(&s.report().unwrap());
    // the tasks are closed: one more pass evicts what is left
    for p in &mut s.providers {
        p.step(s.roles_chain.as_ref()).unwrap();
    }
    println!(
        "budget {budget} B, most held {most} B, left {:?}",
        store.stats()
    );
    assert!(most > 0);
    assert_eq!(
        store.stats().results,
        0,
        "every closed task's result evicted"
    );
    assert_eq!(
        std::fs::read_dir(dir.path().join("budgeted"))
            .unwrap()
            .count(),
        0
    );
}

#[test]
fn a_restarted_provider_serves_its_results_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let results_dir = dir.path().join("both.results");
    // a provider that served 200 results, then stopped
    let jobs: Vec<JobSpec> = (0..200u32)
        .map(|i| {
            let mut seed = [0u8; 32];
            seed[..4].copy_from_slice(&i.to_le_bytes());
            JobSpec::hash_batch(64, 64, 1, seed)
        })
        .collect();
    let mut roots = vec![];
    let bytes;
    {
        let store = ResultStore::open(&results_dir, u64::MAX, None).unwrap();
        for (i, job) in jobs.iter().enumerate() {
            let tiles = CpuBackend.run(job).unwrap();
            roots.push(store.publish([i as u8; 32], *job, tiles).unwrap().0);
        }
        bytes = store.stats().bytes;
    }
    // a corrupt file is skipped, not fatal
    std::fs::write(
        results_dir.join(format!("{}.res", "ab".repeat(32))),
        b"junk",
    )
    .unwrap();

    let s = Scenario::new(
        &DemoConfig {
            tasks: 1,
            ..Default::default()
        },
        Arc::new(CpuBackend),
        dir.path(),
    )
    .unwrap();
    let both = s.onboard("both", 1).unwrap();
    let port = free_port();
    let mut opts = DaemonOptions::new(1, dir.path().join("both.redb"));
    opts.provider = true;
    opts.listen = format!("127.0.0.1:{port}");
    opts.results_dir = Some(results_dir.clone());
    opts.poll = Duration::from_millis(50);
    let t0 = Instant::now();
    let (stop, daemon) = spawn_daemon(s.chain.clone(), &both.kp, Arc::new(CpuBackend), opts);
    let lo = ResultStore::default().with_policy(FetchPolicy::loopback());
    let url = format!("http://127.0.0.1:{port}/r/{}", hex(&roots[199]));
    let served = loop {
        assert!(t0.elapsed() < Duration::from_secs(20), "never served");
        if let Ok(t) = lo.fetch(&url, &jobs[199], &[0, 5, 63]) {
            break t;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let first = t0.elapsed();
    assert_eq!(served.len(), 3);
    let _ = stop.send(());
    daemon.join().unwrap().unwrap();
    println!(
        "restart with 200 results ({} MiB): first tiles served after {:.0} ms",
        bytes >> 20,
        first.as_secs_f64() * 1e3
    );
    assert!(first < Duration::from_secs(5), "{first:?}");
}

/// A provider whose public URL would make every result URI longer than the program takes is
/// refused at start, naming the limit, before it can claim (each claim would be reclaimed with a
/// late slash once its submits were refused).
#[test]
fn a_provider_whose_result_uris_would_be_too_long_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let s = Scenario::new(&DemoConfig::default(), Arc::new(CpuBackend), dir.path()).unwrap();
    let mut opts = DaemonOptions::new(1, dir.path().join("long.redb"));
    opts.provider = true;
    opts.listen = "127.0.0.1:0".into();
    let host = "x".repeat(52);
    opts.public_url = Some(format!("http://{host}.example"));
    let kp = solana_keypair::Keypair::new();
    let e = daemon::run(s.chain.clone(), kp, Arc::new(CpuBackend), opts, async {})
        .unwrap_err()
        .to_string();
    assert!(e.contains("is 67 bytes"), "{e}");
    assert!(e.contains("at most 61 bytes"), "{e}");
    // at the limit (61 bytes) it runs
    let mut opts = DaemonOptions::new(1, dir.path().join("limit.redb"));
    opts.provider = true;
    opts.listen = "127.0.0.1:0".into();
    opts.passes = Some(1);
    opts.public_url = Some(format!("http://{}.example", "x".repeat(46)));
    let kp = solana_keypair::Keypair::new();
    daemon::run(s.chain.clone(), kp, Arc::new(CpuBackend), opts, async {
        std::future::pending::<()>().await
    })
    .unwrap();
}

//! `keeper run`: the daemon. Any combination of provider, verifier and cranker over one chain,
//! with results and `/metrics` served over HTTP, a crash-safe store, and a clean shutdown when
//! the `shutdown` future passed in completes (the binary passes [`signals`]: Ctrl-C or
//! SIGTERM): the pass in hand finishes, the HTTP server stops and releases its port, the store
//! is closed. Every pass is derived from chain state plus the store, so a restarted daemon
//! continues where it stopped.

use std::{
    path::PathBuf,
    sync::{
        atomic::{AtomicBool, Ordering},
        mpsc::{Receiver, RecvTimeoutError},
        Arc, Condvar, Mutex,
    },
    time::{Duration, Instant},
};

use anchor_lang::prelude::Pubkey;
use anyhow::{Context, Result};
use compute_market::{
    pda,
    state::{Node, Task},
};
use solana_keypair::Keypair;
use solana_signer::Signer;

use crate::{
    chain::{metered::MeteredChain, Chain, ChainExt},
    compute::Backend,
    db::Db,
    metrics::Metrics,
    results::{FetchPolicy, ResultStore},
    roles::{cranker::Cranker, provider::Provider, verifier::Verifier, NodeCtx},
};

/// What to run.
pub struct DaemonOptions {
    /// Claim, compute and serve tasks.
    pub provider: bool,
    /// Verify and vote.
    pub verifier: bool,
    /// Finalize, settle, expire, close, sweep.
    pub crank: bool,
    /// Market id.
    pub market: u16,
    /// Store file.
    pub store: PathBuf,
    /// HTTP listen address.
    pub listen: String,
    /// Public base URL of the HTTP server (defaults to `http://<listen>`).
    pub public_url: Option<String>,
    /// Poll interval.
    pub poll: Duration,
    /// Stop after this many passes (tests); run until signalled when `None`.
    pub passes: Option<u64>,
    /// Websocket URL for program-account notifications (`None`: poll only).
    pub ws_url: Option<String>,
    /// Tasks handled at once in a pass (RPC round trips overlap).
    pub parallel: usize,
    /// Provider: most tasks held at once.
    pub max_active: usize,
    /// Provider: least-loaded-first back-off, slots per task held ([`Provider::claim_backoff`]).
    pub claim_backoff: u64,
    /// Test only: fraction of tiles the provider corrupts.
    pub corrupt_fraction: f64,
    /// Test only: the verifier waits this long after each commit lands.
    pub hold_after_commit: Option<Duration>,
    /// Test only: the verifier votes VALID without checking (a lazy or colluding seat).
    pub careless: bool,
    /// Test only: the verifier votes INVALID without checking, pointing at a right element.
    pub lying: bool,
    /// Check held Accepted results and dispute wrong ones (PROTOCOL §8): whose.
    pub watch: Option<crate::roles::watcher::Watched>,
    /// Where long work (a provider's computation) reports progress.
    pub progress: Option<Arc<crate::roles::Reporter>>,
    /// Directory of served results [default: the store file's path with `.results`].
    pub results_dir: Option<PathBuf>,
    /// Most bytes of served results kept on disk.
    pub disk_budget: u64,
    /// How long a result is kept once its task no longer needs it.
    pub retention: Duration,
    /// What remote results may be fetched from.
    pub fetch: FetchPolicy,
    /// Provider: least reward per 10^9 work units.
    pub min_reward_per_gwork: u64,
    /// Provider: least quorum of a task it claims.
    pub min_quorum: u8,
    /// Provider: least samples per verifier of a task it claims.
    pub min_samples: u16,
    /// Origins browser pages may fetch results and inputs from
    /// ([`crate::results::server::ServerLimits::cors_origins`]).
    pub cors_origins: Vec<String>,
    /// Verifier: other keepers asked for a result its provider does not serve
    /// ([`Verifier::mirrors`]).
    pub mirrors: Vec<String>,
    /// Least stake (free + bonded, token base units) of a market node whose signed requests
    /// this keeper's server admits ahead of strangers' ([`admitted_nodes`]); at least 1.
    pub admit_min_stake: u64,
    /// Verifier: most bytes kept of the results it checked, served again (PROTOCOL §8.12;
    /// the oldest kept is evicted first). 0: nothing is kept.
    pub reserve_max_bytes: u64,
    /// Verifier: least time a result it checked is kept (longer while its dispute window runs).
    pub reserve_retention: Duration,
    /// How long a keeper asked to stop keeps running to finish what it owes (docs/PROTOCOL.md
    /// §3.8); zero: it stops after the pass in hand.
    pub drain_timeout: Duration,
    /// `/livez` fails unless the backend computes on a GPU.
    pub require_gpu: bool,
}

/// Default disk budget for served results, bytes.
pub const DISK_BUDGET: u64 = 16 << 30;

impl DaemonOptions {
    /// Options for `market` with the store at `store`, every role off, the defaults otherwise.
    pub fn new(market: u16, store: PathBuf) -> Self {
        DaemonOptions {
            provider: false,
            verifier: false,
            crank: false,
            market,
            store,
            listen: "127.0.0.1:9100".into(),
            public_url: None,
            poll: Duration::from_millis(400),
            passes: None,
            ws_url: None,
            parallel: 16,
            max_active: 4,
            claim_backoff: crate::roles::provider::CLAIM_BACKOFF,
            corrupt_fraction: 0.0,
            hold_after_commit: None,
            careless: false,
            lying: false,
            watch: None,
            progress: None,
            results_dir: None,
            disk_budget: DISK_BUDGET,
            retention: crate::roles::provider::RETENTION,
            fetch: FetchPolicy::default(),
            min_reward_per_gwork: 0,
            min_quorum: crate::roles::provider::MIN_QUORUM_ACCEPTED,
            min_samples: 1,
            cors_origins: vec![],
            mirrors: vec![],
            admit_min_stake: ADMIT_MIN_STAKE,
            reserve_max_bytes: crate::results::reserve::DEFAULT_MAX_BYTES,
            reserve_retention: crate::results::reserve::DEFAULT_RETENTION,
            drain_timeout: Duration::ZERO,
            require_gpu: false,
        }
    }
}

/// The websocket URL of an RPC URL (the validator's convention: RPC port + 1).
pub fn ws_url(rpc: &str) -> String {
    let ws = rpc
        .replacen("https://", "wss://", 1)
        .replacen("http://", "ws://", 1);
    match ws.rsplit_once(':') {
        Some((head, port)) if port.chars().all(|c| c.is_ascii_digit()) && !port.is_empty() => {
            format!("{head}:{}", port.parse::<u32>().unwrap_or(0) + 1)
        }
        _ => ws,
    }
}

/// Subscribes to changes of the program's accounts (`solana-client`'s nonblocking
/// `PubsubClient`, on its own thread and runtime); every notification wakes the loop early.
/// `None` when the subscription cannot be made. The channel disconnects when the
/// subscription ends (the validator went away), and the [`Waker`] makes a new one.
fn subscribe(url: &str) -> Option<Receiver<()>> {
    let (tx, rx) = std::sync::mpsc::channel();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<(), String>>();
    let owned = url.to_string();
    std::thread::spawn(move || {
        let subscribed = ready_tx.clone();
        let run = async move {
            use futures_util::StreamExt;
            let client = solana_client::nonblocking::pubsub_client::PubsubClient::new(&owned)
                .await
                .map_err(|e| e.to_string())?;
            let (mut notifications, _unsubscribe) = client
                .program_subscribe(&compute_market::ID, None)
                .await
                .map_err(|e| e.to_string())?;
            let _ = subscribed.send(Ok(()));
            while notifications.next().await.is_some() {
                if tx.send(()).is_err() {
                    return Ok(());
                }
            }
            tracing::warn!("program subscription ended; polling until it is back");
            Ok::<(), String>(())
        };
        let ended = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())
            .and_then(|rt| rt.block_on(run));
        // only read when it failed before subscribing; ignored once the subscription was made
        if let Err(e) = ended {
            let _ = ready_tx.send(Err(e));
        }
    });
    match ready_rx.recv_timeout(Duration::from_secs(10)) {
        Ok(Ok(())) => {
            tracing::info!(url, "subscribed to program accounts");
            Some(rx)
        }
        Ok(Err(e)) => {
            tracing::warn!(url, error = %e, "cannot subscribe to program accounts; polling until it can");
            None
        }
        Err(_) => {
            tracing::warn!(
                url,
                "no answer to the subscription within 10 s; polling until it can"
            );
            None
        }
    }
}

/// What ends the wait between passes: a program-account notification or the poll interval,
/// whichever comes first. A lost subscription (the validator restarted, the connection
/// dropped) is re-made every [`Waker::RESUBSCRIBE`]; meanwhile the daemon polls.
struct Waker {
    url: Option<String>,
    rx: Option<Receiver<()>>,
    last_try: Option<Instant>,
}

impl Waker {
    const RESUBSCRIBE: Duration = Duration::from_secs(5);

    fn new(url: Option<String>) -> Self {
        let mut w = Waker {
            url,
            rx: None,
            last_try: None,
        };
        w.resubscribe();
        w
    }

    fn resubscribe(&mut self) {
        let Some(url) = &self.url else { return };
        if self.rx.is_some()
            || self
                .last_try
                .is_some_and(|t| t.elapsed() < Self::RESUBSCRIBE)
        {
            return;
        }
        self.last_try = Some(Instant::now());
        self.rx = subscribe(url);
    }

    fn wait(&mut self, poll: Duration) {
        self.resubscribe();
        match &self.rx {
            Some(rx) => match rx.recv_timeout(poll) {
                Ok(()) => while rx.try_recv().is_ok() {},
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    self.rx = None;
                    std::thread::sleep(poll);
                }
            },
            None => std::thread::sleep(poll),
        }
    }
}

/// [`signals`], listened for from now on, on a thread of its own: `keeper run` calls it first
/// thing. In a container the keeper is PID 1, whose signals the kernel drops while no handler
/// is installed, and its start (a GPU's self-test, the first chain reads) may take minutes: a
/// SIGTERM then must still count.
pub fn signals_from_now() -> impl std::future::Future<Output = ()> + Send + 'static {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let spawned = std::thread::Builder::new()
        .name("keeper-signals".into())
        .spawn(move || {
            if let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                rt.block_on(async move {
                    signals().await;
                    let _ = tx.send(());
                });
            }
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "cannot listen for signals early; listening once running");
    }
    async move {
        // a listener that could not start leaves the daemon's own to stop it
        if rx.await.is_err() {
            signals().await;
        }
    }
}

/// Completes on SIGINT (Ctrl-C) or SIGTERM: what `keeper run` stops on.
pub async fn signals() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM; Ctrl-C only");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Raises the soft limit on open files to the hard one: every HTTP connection is a descriptor,
/// and a results server at the usual soft limit (1 024) would run out long before its
/// connection cap. Logs what it got; the limit now (soft, hard), when it could be read.
pub fn raise_open_files() -> Option<(u64, u64)> {
    #[cfg(unix)]
    // SAFETY: getrlimit/setrlimit only read and write the struct passed to them.
    unsafe {
        let mut l = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) != 0 {
            tracing::warn!("cannot read the open-file limit");
            return None;
        }
        let was = l.rlim_cur;
        if l.rlim_cur < l.rlim_max {
            l.rlim_cur = l.rlim_max;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &l) != 0 {
                tracing::warn!(
                    soft = was,
                    hard = l.rlim_max,
                    "cannot raise the open-file limit"
                );
                l.rlim_cur = was;
            }
        }
        let (soft, hard): (u64, u64) = (l.rlim_cur, l.rlim_max);
        tracing::info!(
            was,
            soft,
            hard,
            "open-file limit (each connection takes one)"
        );
        Some((soft, hard))
    }
    #[cfg(not(unix))]
    None
}

/// How often the daemon reads the market's nodes to admit their signed requests ahead of
/// strangers' ([`crate::results::admission`]).
const NODES_EVERY: Duration = Duration::from_secs(60);

/// The default floor of stake for admission ([`DaemonOptions::admit_min_stake`], `keeper
/// serve --admit-min-stake`): any nonzero stake. The market sets no floor yet (a field of
/// the Market account would be a program change); a keeper sets its own.
pub const ADMIT_MIN_STAKE: u64 = 1;

/// `--admit-min-stake` checked: a floor of 0 would admit nodes without stake, which anyone
/// can register for the rent of an account, so the least is 1.
pub fn admit_min_stake(v: u64) -> Result<u64> {
    anyhow::ensure!(
        v >= 1,
        "--admit-min-stake 0 would admit nodes without stake (anyone can register one and take \
         the nodes' places): give at least 1 (token base units; the default, {ADMIT_MIN_STAKE}, \
         admits any nonzero stake)"
    );
    Ok(v)
}

/// The stake of a node that admission weighs: free + bonded (what it can lose to a slash;
/// stake waiting for its cooldown is leaving).
pub fn admission_stake(n: &Node) -> u64 {
    n.free.saturating_add(n.bonded)
}

/// `market`'s nodes holding at least `min_stake` ([`admission_stake`]), as the admitted
/// signers of a keeper's server: each node's authority with its stake. Nodes below the floor
/// (a registered node with no stake costs only its rent) are strangers.
pub fn admitted_nodes(
    chain: &dyn Chain,
    market: &Pubkey,
    min_stake: u64,
) -> Result<crate::results::admission::Admitted> {
    let min_stake = min_stake.max(1);
    Ok(crate::results::admission::Admitted::new(
        chain
            .nodes_of(market)?
            .iter()
            .map(|(_, n)| (n.authority, admission_stake(n)))
            .filter(|(_, stake)| *stake >= min_stake),
    ))
}

/// Keeps `admitted` to `market`'s nodes holding at least `min_stake` ([`admitted_nodes`]) and
/// the `fixed` signers besides (`keeper serve --admit`), read every [`NODES_EVERY`] on a
/// thread of its own (a slow RPC never delays a role), until `stop`.
pub fn admit_nodes(
    chain: Arc<dyn Chain>,
    market: Pubkey,
    min_stake: u64,
    fixed: crate::results::admission::Admitted,
    admitted: crate::results::admission::Signers,
    stop: Arc<AtomicBool>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("keeper-nodes".into())
        .spawn(move || {
            let mut next = Instant::now();
            while !stop.load(Ordering::SeqCst) {
                if Instant::now() >= next {
                    match admitted_nodes(chain.as_ref(), &market, min_stake) {
                        Ok(mut set) => {
                            tracing::debug!(
                                nodes = set.len(),
                                min_stake,
                                "admitting the market's staked nodes"
                            );
                            for (k, w) in fixed.iter() {
                                set.insert(*k, w);
                            }
                            *admitted.write().expect("signers lock") = set;
                        }
                        Err(e) => {
                            tracing::warn!(error = %format!("{e:#}"), "cannot read the market's nodes (the admitted set is kept)")
                        }
                    }
                    next = Instant::now() + NODES_EVERY;
                }
                std::thread::sleep(Duration::from_millis(250));
            }
        })
}

/// One read of the market's tasks shared by the roles: a role asking within [`TaskCache`]'s
/// age of the last read gets that read (one filtered `getProgramAccounts` per pass for every
/// role together, not one per role).
struct TaskCache {
    market: Pubkey,
    max_age: Duration,
    last: Mutex<Option<(Instant, u64, Arc<Vec<(Pubkey, Task)>>)>>,
}

impl TaskCache {
    fn read(&self, chain: &dyn Chain) -> Result<(u64, Arc<Vec<(Pubkey, Task)>>)> {
        let mut last = self.last.lock().expect("cache lock");
        if let Some((at, slot, tasks)) = last.as_ref() {
            if at.elapsed() < self.max_age {
                return Ok((*slot, tasks.clone()));
            }
        }
        let slot = chain.slot()?;
        let tasks = Arc::new(chain.tasks_of(&self.market)?);
        *last = Some((Instant::now(), slot, tasks.clone()));
        Ok((slot, tasks))
    }
}

/// Wakes the role threads: a generation counter bumped on every program-account notification
/// or poll tick.
#[derive(Default)]
struct Pulse {
    generation: Mutex<u64>,
    cv: Condvar,
}

impl Pulse {
    fn bump(&self) {
        *self.generation.lock().expect("pulse lock") += 1;
        self.cv.notify_all();
    }

    /// Waits until the generation passes `seen` or `timeout`; the generation now.
    fn wait(&self, seen: u64, timeout: Duration) -> u64 {
        let g = self.generation.lock().expect("pulse lock");
        let (g, _) = self
            .cv
            .wait_timeout_while(g, timeout, |g| *g <= seen)
            .expect("pulse lock");
        *g
    }
}

/// Slots between two reads of the chain that must both find nothing owed before a draining
/// role ends (docs/PROTOCOL.md §3.8).
const DRAINED_SLOTS: u64 = 4;

/// Runs until `shutdown` completes (or `passes`), then stops cleanly. Each role runs on its
/// own thread, and the provider's computations and the verifier's checks on threads of their
/// own: a long computation never delays a reveal.
pub fn run(
    chain: Arc<dyn Chain>,
    kp: Keypair,
    backend: Arc<dyn Backend>,
    opts: DaemonOptions,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<()> {
    raise_open_files();
    let metrics = Arc::new(Metrics::default());
    // listening for the signal from the start: a SIGTERM while the keeper binds, serves its
    // first /metrics or announces its endpoint stops it cleanly too, after that step
    let stop = Arc::new(AtomicBool::new(false));
    let draining = Arc::new(AtomicBool::new(false));
    {
        let (stop, draining, metrics) = (stop.clone(), draining.clone(), metrics.clone());
        let drain_timeout = opts.drain_timeout;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        std::thread::spawn(move || {
            rt.block_on(shutdown);
            if drain_timeout.is_zero() {
                tracing::info!("shutting down after this pass");
                stop.store(true, Ordering::SeqCst);
                return;
            }
            // docs/PROTOCOL.md §3.8: nothing new is taken on; what is owed is finished
            tracing::info!(timeout_s = drain_timeout.as_secs(), "asked to stop: draining (nothing new is claimed or joined; what it owes is finished first; signal again to stop now)");
            draining.store(true, Ordering::SeqCst);
            metrics.health.draining.store(true, Ordering::SeqCst);
            metrics.draining.set(1);
            let timed_out = rt.block_on(async {
                tokio::select! {
                    _ = signals() => false,
                    _ = tokio::time::sleep(drain_timeout) => true,
                }
            });
            if !stop.load(Ordering::SeqCst) {
                let why = if timed_out {
                    "the drain timed out"
                } else {
                    "signalled again"
                };
                tracing::warn!("{why}: stopping after this pass; what is still owed is resumed from the store by the next start");
            }
            stop.store(true, Ordering::SeqCst);
        });
    }
    let chain: Arc<dyn Chain> = Arc::new(MeteredChain::new(chain, metrics.clone()));
    let db = Arc::new(Db::open(&opts.store)?);
    let market = pda::market(opts.market);
    let results_dir = opts
        .results_dir
        .clone()
        .unwrap_or_else(|| opts.store.with_extension("results"));
    // bound first: published URLs name the address actually bound (`--listen …:0` works)
    let listener = std::net::TcpListener::bind(&opts.listen)
        .with_context(|| format!("cannot listen on {}", opts.listen))?;
    let base = opts
        .public_url
        .clone()
        .unwrap_or(format!("http://{}", listener.local_addr()?));
    let local = listener.local_addr()?;
    // a result URI is `<base>/r/<64 hex>` and the program takes at most MAX_URI_LEN: a base
    // longer than that leaves every submit refused, each claim then reclaimed with a late slash
    let most = compute_market::constants::MAX_URI_LEN - "/r/".len() - 64;
    let base_len = base.trim_end_matches('/').len();
    anyhow::ensure!(
        !opts.provider || base_len <= most,
        "the public URL {base:?} is {base_len} bytes: result URIs (<public URL>/r/<64 hex digits>) would be {} bytes, over the program's {}; a provider needs a --public-url of at most {most} bytes (a shorter host name)",
        base_len + 67,
        compute_market::constants::MAX_URI_LEN
    );
    let hosts = crate::results::server::own_hosts(Some(&base), local);
    let started = Instant::now();
    // every fetch (a verifier's of results, a provider's of inputs) is signed by the node's
    // key: other keepers' servers admit it ahead of strangers
    let signer = Arc::new(Keypair::try_from(&kp.to_bytes()[..]).expect("keypair copy"));
    // what its verifier checked, kept to be served again (PROTOCOL §8.12)
    let reserve = crate::results::reserve::Reserve::open(
        &results_dir.join("reserve"),
        opts.reserve_max_bytes,
        opts.reserve_retention,
    )?;
    let tiles = Arc::new(
        ResultStore::open(&results_dir, opts.disk_budget, Some(base))?
            .with_policy(opts.fetch.clone())
            .with_signer(signer)
            .with_reserve(reserve),
    );
    let _ = tiles.metrics.set(metrics.clone());
    let server = crate::results::server::serve_listener(
        tiles.clone(),
        metrics.clone(),
        listener,
        crate::results::server::ServerLimits {
            cors_origins: opts.cors_origins.clone(),
            // signed requests count as a node's only when they name this server
            own_hosts: hosts,
            ..Default::default()
        },
    )?;
    let addr = server.addr;
    if opts.provider {
        if let Some(host) = tiles
            .base_url
            .as_deref()
            .and_then(|b| reqwest::Url::parse(b).ok())
            .and_then(|u| u.host_str().map(str::to_string))
        {
            let ip = host.trim_matches(['[', ']']).parse::<std::net::IpAddr>();
            if let Some(class) = ip.ok().and_then(crate::results::net::classify) {
                tracing::warn!(base = tiles.base_url.as_deref().unwrap_or(""), class, "results are published under a {class} address: verifiers elsewhere cannot fetch them (set --public-url)");
            }
        }
    }
    let stats = tiles.stats();
    metrics.store_bytes.set(stats.bytes as i64);
    metrics
        .reserve_bytes
        .set(tiles.reserve.stats().bytes as i64);
    let kept = tiles.reserve.stats();
    tracing::info!(%addr, public = tiles.base_url.as_deref().unwrap_or(""), results = stats.results, bytes = stats.bytes, kept = kept.results, kept_bytes = kept.bytes, ms = started.elapsed().as_millis() as u64, "serving results and /metrics");
    let node = pda::node(&kp.pubkey());
    let ctx = |name: &str, kp: Keypair| NodeCtx {
        name: name.into(),
        kp,
        node,
        market,
        backend: backend.clone(),
        store: tiles.clone(),
        parallel: opts.parallel,
        progress: opts.progress.clone(),
    };
    let clone = |k: &Keypair| Keypair::try_from(&k.to_bytes()[..]).expect("keypair copy");
    let provider = opts.provider.then(|| {
        let mut p = Provider::new(ctx("provider", clone(&kp)), db.clone(), opts.max_active);
        p.claim_backoff = opts.claim_backoff;
        p.corrupt_fraction = opts.corrupt_fraction;
        p.background = true;
        p.retention = opts.retention;
        p.policy.min_reward_per_gwork = opts.min_reward_per_gwork;
        p.policy.min_quorum = opts.min_quorum;
        p.policy.min_samples = opts.min_samples;
        p.draining = draining.clone();
        p
    });
    if provider.is_some() || opts.verifier {
        // clients read the provider's card at its announced endpoint (PROTOCOL §2), and fetch
        // the results a verifier kept from it (§8.12)
        let mut base = tiles.base_url.clone().unwrap_or_default();
        if !compute_market::instructions::endpoint_ok(base.as_bytes()) {
            tracing::warn!(endpoint = base, "the public URL cannot be announced (an http(s) base URL of at most 56 bytes): clients will not see why it skips tasks, nor fetch the results it checked");
            // an endpoint announced earlier no longer answers for this keeper
            base.clear();
        }
        match crate::cli::node_announce(chain.as_ref(), &kp, &base) {
            Ok(Some(_)) => tracing::info!(endpoint = base, "announced the node's endpoint"),
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(endpoint = base, error = %format!("{e:#}"), "cannot announce the node's endpoint: clients will not see why it skips tasks, nor fetch the results it checked")
            }
        }
    }
    let verifier = opts.verifier.then(|| {
        let mut v = Verifier::new(ctx("verifier", clone(&kp)), db.clone());
        v.hold_after_commit = opts.hold_after_commit;
        v.careless = opts.careless;
        v.lying = opts.lying;
        v.background = true;
        v.mirrors = opts.mirrors.clone();
        v.draining = draining.clone();
        v
    });
    let watcher = opts
        .watch
        .clone()
        .map(|w| crate::roles::watcher::Watcher::new(ctx("watcher", clone(&kp)), db.clone(), w));
    let treasury = crate::cli::config(chain.as_ref())?.treasury;
    let cranker = opts
        .crank
        .then(|| Cranker::new(clone(&kp), treasury, market, opts.parallel));
    tracing::info!(node = %node, provider = opts.provider, verifier = opts.verifier, crank = opts.crank, watch = ?opts.watch, "keeper running; polling every {:?} (Ctrl-C or SIGTERM stops)", opts.poll);

    let cache = Arc::new(TaskCache {
        market,
        max_age: opts.poll / 2,
        last: Mutex::new(None),
    });
    let pulse = Arc::new(Pulse::default());
    let nodes = admit_nodes(
        chain.clone(),
        market,
        opts.admit_min_stake,
        Default::default(),
        server.admitted.clone(),
        stop.clone(),
    )?;
    let survive = |who: &str, r: Result<()>| {
        if let Err(e) = r {
            tracing::warn!(who, error = %format!("{e:#}"), "pass failed; retrying");
        }
    };
    if opts.require_gpu && !backend.name().starts_with("cuda") {
        let why = format!(
            "--require-gpu: the keeper computes on {} (no GPU passed its self-test); a restart probes again",
            backend.name()
        );
        tracing::error!("{why}");
        *metrics.health.dead.lock().expect("health lock") = Some(why);
    }
    metrics.health.roles.store(true, Ordering::SeqCst);
    metrics.health.stale_ms.store(
        // a pass may argue a dispute for many transactions: only a long silence is a wedge
        (opts.poll * 50).max(Duration::from_secs(1800)).as_millis() as u64,
        Ordering::SeqCst,
    );
    // what each owing role (provider, verifier) still owes while draining
    let owed_by: Arc<[std::sync::atomic::AtomicI64; 3]> = Arc::default();
    // one loop per role: `step` runs a pass over the tasks read (or shared) this pass and, while
    // draining, says what that role still owes; a role that owes (`owes`) ends once it owes
    // nothing, the others run until the stop
    let role_loop = |who: &'static str,
                     owes: Option<usize>,
                     mut step: Box<
        dyn FnMut(u64, &[(Pubkey, Task)], u64, bool) -> Result<Vec<crate::roles::Owed>> + Send,
    >| {
        let (chain, cache, pulse, stop, draining, metrics, owed_by) = (
            chain.clone(),
            cache.clone(),
            pulse.clone(),
            stop.clone(),
            draining.clone(),
            metrics.clone(),
            owed_by.clone(),
        );
        let (passes, poll) = (opts.passes, opts.poll);
        std::thread::Builder::new()
            .name(format!("keeper-{who}"))
            .spawn(move || {
                let (mut pass, mut seen) = (0u64, 0u64);
                // when it last said what is still owed (an Instant an hour back would panic on
                // a machine up for less than that)
                let mut told: Option<Instant> = None;
                // the slot of the first read that found nothing owed: a role ends only when a
                // read DRAINED_SLOTS later finds nothing either (a transaction of the pass in
                // hand, landed but not yet seen by the RPC node read, shows up by then)
                let mut clear_since: Option<u64> = None;
                while !stop.load(Ordering::SeqCst) && passes.is_none_or(|n| pass < n) {
                    let drain = draining.load(Ordering::SeqCst);
                    let r = crate::roles::guard(|| {
                        let (now, tasks) = cache.read(chain.as_ref())?;
                        Ok((now, step(now, &tasks, pass, drain)?))
                    });
                    if r.as_ref()
                        .is_err_and(|e| e.to_string().starts_with("panicked"))
                    {
                        metrics.panics.inc();
                    }
                    metrics.health.pass(r.is_ok());
                    match (r, owes) {
                        (Ok((now, owed)), Some(slot)) if drain => {
                            owed_by[slot].store(owed.len() as i64, Ordering::SeqCst);
                            metrics.owed.set(
                                owed_by.iter().map(|n| n.load(Ordering::SeqCst)).sum(),
                            );
                            if !owed.is_empty() {
                                clear_since = None;
                            } else if clear_since.is_some_and(|s| now >= s + DRAINED_SLOTS) {
                                tracing::info!(who, "drained: nothing owed");
                                break;
                            } else {
                                clear_since = clear_since.or(Some(now));
                            }
                            if !owed.is_empty()
                                && told.is_none_or(|t| t.elapsed() >= Duration::from_secs(10))
                            {
                                told = Some(Instant::now());
                                let first = &owed[0];
                                tracing::info!(who, owed = owed.len(), task = %first.task, what = first.what, "draining: still owed");
                            }
                        }
                        (r, _) => survive(who, r.map(|_| ())),
                    }
                    pass += 1;
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    seen = pulse.wait(seen, poll);
                }
            })
    };
    let mut threads = vec![];
    let mut owing = vec![];
    if let Some(mut p) = provider {
        let (chain, metrics) = (chain.clone(), metrics.clone());
        let mut reported = (0usize, 0.0f64);
        owing.push(role_loop(
            "provider",
            Some(0),
            Box::new(move |now, tasks, _, drain| {
                let r = p.step_with(chain.as_ref(), now, tasks);
                let new = &p.records[reported.0..];
                metrics.jobs_run.inc_by(new.len() as u64);
                let secs: f64 = new.iter().map(|r| r.seconds).sum();
                metrics.compute_seconds.inc_by(secs);
                reported = (p.records.len(), reported.1 + secs);
                metrics.store_bytes.set(p.ctx.store.stats().bytes as i64);
                metrics.claimable.set(p.claimable as i64);
                r?;
                Ok(if drain { p.owed(now, tasks) } else { vec![] })
            }),
        )?);
    }
    if let Some(mut v) = verifier {
        let (chain, metrics) = (chain.clone(), metrics.clone());
        let mut reported = 0usize;
        owing.push(role_loop(
            "verifier",
            Some(1),
            Box::new(move |now, tasks, _, drain| {
                let r = v.step_with(chain.as_ref(), now, tasks);
                let new = &v.records[reported..];
                metrics.verifications.inc_by(new.len() as u64);
                metrics
                    .reserve_bytes
                    .set(v.ctx.store.reserve.stats().bytes as i64);
                metrics
                    .verify_seconds
                    .inc_by(new.iter().map(|r| r.seconds).sum::<f64>());
                reported = v.records.len();
                r?;
                if drain {
                    v.owed(chain.as_ref(), now, tasks)
                } else {
                    Ok(vec![])
                }
            }),
        )?);
    }
    if let Some(mut w) = watcher {
        let chain = chain.clone();
        w.draining = draining.clone();
        owing.push(role_loop(
            "watcher",
            Some(2),
            Box::new(move |now, tasks, _, drain| {
                w.step_with(chain.as_ref(), now, tasks)?;
                if drain {
                    w.owed(tasks)
                } else {
                    Ok(vec![])
                }
            }),
        )?);
    }
    if let Some(mut c) = cranker {
        let chain = chain.clone();
        threads.push(role_loop(
            "cranker",
            None,
            Box::new(move |now, tasks, pass, _| {
                let r = c.step_with(chain.as_ref(), now, tasks.to_vec());
                if pass.is_multiple_of(50) {
                    survive("cranker", c.sweep(chain.as_ref()).map(|_| ()));
                }
                r.map(|()| vec![])
            }),
        )?);
    }
    // this thread wakes the roles and keeps the task gauges; it ends when they all have
    let mut waker = Waker::new(opts.ws_url.clone());
    while threads.iter().chain(&owing).any(|t| !t.is_finished()) {
        // drained: the roles that owe have nothing left, so the rest (a cranker that
        // finalized their tasks, a watcher) stop too
        if draining.load(Ordering::SeqCst)
            && owing.iter().all(|t| t.is_finished())
            && !stop.swap(true, Ordering::SeqCst)
        {
            tracing::info!("drained: nothing owed; stopping");
        }
        waker.wait(opts.poll);
        pulse.bump();
        if let Some((_, _, tasks)) = cache.last.lock().expect("cache lock").as_ref() {
            let mut by: std::collections::BTreeMap<String, u64> = Default::default();
            for (_, t) in tasks.iter() {
                *by.entry(format!("{:?}", t.status)).or_default() += 1;
            }
            metrics.set_tasks(&by.into_iter().collect::<Vec<_>>());
        }
    }
    for t in threads.into_iter().chain(owing) {
        let _ = t.join();
    }
    stop.store(true, Ordering::SeqCst);
    let _ = nodes.join();
    // every role's pass in hand is done: stop serving (the port is released), then close
    server.shutdown();
    drop(db);
    tracing::info!("stopped cleanly");
    Ok(())
}

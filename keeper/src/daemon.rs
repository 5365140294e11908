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
        Arc,
    },
    time::{Duration, Instant},
};

use anyhow::Result;
use compute_market::pda;
use solana_keypair::Keypair;
use solana_signer::Signer;

use crate::{
    chain::{metered::MeteredChain, Chain, ChainExt},
    compute::Backend,
    db::Db,
    metrics::Metrics,
    results::ResultStore,
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
    /// Where long work (a provider's computation) reports progress.
    pub progress: Option<Arc<crate::roles::Reporter>>,
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

/// Runs until `shutdown` completes (or `passes`), then stops cleanly.
pub fn run(
    chain: Arc<dyn Chain>,
    kp: Keypair,
    backend: Arc<dyn Backend>,
    opts: DaemonOptions,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let metrics = Arc::new(Metrics::default());
    let chain: Arc<dyn Chain> = Arc::new(MeteredChain::new(chain, metrics.clone()));
    let db = Arc::new(Db::open(&opts.store)?);
    let market = pda::market(opts.market);
    let tiles = Arc::new(ResultStore::serving_at(
        opts.public_url
            .clone()
            .unwrap_or_else(|| format!("http://{}", opts.listen)),
    ));
    let server = crate::results::serve(tiles.clone(), metrics.clone(), &opts.listen)?;
    let addr = server.addr;
    tracing::info!(%addr, public = tiles.base_url.as_deref().unwrap_or(""), "serving results and /metrics");
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
    let mut provider = opts.provider.then(|| {
        let mut p = Provider::new(ctx("provider", clone(&kp)), db.clone(), opts.max_active);
        p.claim_backoff = opts.claim_backoff;
        p.corrupt_fraction = opts.corrupt_fraction;
        p
    });
    let mut verifier = opts.verifier.then(|| {
        let mut v = Verifier::new(ctx("verifier", clone(&kp)), db.clone());
        v.hold_after_commit = opts.hold_after_commit;
        v
    });
    let treasury = crate::cli::config(chain.as_ref())?.treasury;
    let mut cranker = opts
        .crank
        .then(|| Cranker::new(clone(&kp), treasury, opts.parallel));
    if let Some(p) = provider.as_mut() {
        let n = p.restore()?;
        tracing::info!(results = n, "restored served results");
    }
    tracing::info!(node = %node, provider = opts.provider, verifier = opts.verifier, crank = opts.crank, "keeper running; polling every {:?} (Ctrl-C or SIGTERM stops)", opts.poll);

    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        std::thread::spawn(move || {
            rt.block_on(shutdown);
            tracing::info!("shutting down after this pass");
            stop.store(true, Ordering::SeqCst);
        });
    }
    let mut waker = Waker::new(opts.ws_url.clone());
    let mut pass = 0u64;
    while !stop.load(Ordering::SeqCst) && opts.passes.is_none_or(|n| pass < n) {
        let survive = |who: &str, r: Result<()>| {
            if let Err(e) = r {
                tracing::warn!(who, error = %format!("{e:#}"), "pass failed; retrying");
            }
        };
        if let Some(p) = provider.as_mut() {
            survive("provider", p.step(chain.as_ref()));
            metrics
                .jobs_run
                .store(p.records.len() as u64, Ordering::Relaxed);
            metrics.compute_us.store(
                (p.records.iter().map(|r| r.seconds).sum::<f64>() * 1e6) as u64,
                Ordering::Relaxed,
            );
        }
        if let Some(v) = verifier.as_mut() {
            survive("verifier", v.step(chain.as_ref()));
            metrics
                .verifications
                .store(v.records.len() as u64, Ordering::Relaxed);
            metrics.verify_us.store(
                (v.records.iter().map(|r| r.seconds).sum::<f64>() * 1e6) as u64,
                Ordering::Relaxed,
            );
        }
        if let Some(c) = cranker.as_mut() {
            survive("cranker", c.step(chain.as_ref()));
            if pass.is_multiple_of(50) {
                survive("cranker", c.sweep(chain.as_ref()).map(|_| ()));
            }
        }
        if let Ok(tasks) = chain.tasks() {
            let mut by: std::collections::BTreeMap<String, u64> = Default::default();
            for (_, t) in tasks.iter().filter(|(_, t)| t.market == market) {
                *by.entry(format!("{:?}", t.status)).or_default() += 1;
            }
            *metrics.tasks_by_state.lock().expect("metrics lock") = by.into_iter().collect();
        }
        pass += 1;
        if stop.load(Ordering::SeqCst) {
            break;
        }
        waker.wait(opts.poll);
    }
    // the pass in hand is done: stop serving (the port is released), then close the store
    server.shutdown();
    drop((provider, verifier, cranker));
    drop(db);
    tracing::info!("stopped cleanly");
    Ok(())
}

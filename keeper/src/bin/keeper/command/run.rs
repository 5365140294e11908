//! `keeper run`: the daemon, stopped cleanly by Ctrl-C or SIGTERM.

use std::time::Duration;

use anyhow::{ensure, Result};
use clap::Args;
use compute_market_keeper::{
    config::expand, daemon, results::FetchPolicy, roles::watcher::Watched,
};
use solana_signer::Signer;

use crate::context::{progress_bars, select, Backend, Ctx};

/// What the daemon runs.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// Claim, compute and serve tasks.
    #[arg(long)]
    provider: bool,
    /// Verify results and vote.
    #[arg(long)]
    verifier: bool,
    /// Finalize, settle, expire, close and sweep.
    #[arg(long)]
    crank: bool,
    /// Watch this wallet's own tasks: while an Accepted verdict is held for its dispute window,
    /// check a sample of its result and dispute a wrong element (PROTOCOL §8); when no source
    /// serves the sample for max(2, D/8) slots, challenge its availability on chain (PROTOCOL
    /// §8.11: the provider publishes the tiles or is slashed). Bonds come from this wallet's
    /// token account of the stake mint.
    #[arg(long)]
    watch: bool,
    /// Watch every task of the market, as --watch does its own (a watchtower: a won dispute
    /// pays an award).
    #[arg(long, conflicts_with = "watch")]
    watch_all: bool,
    /// Market id.
    #[arg(long)]
    market: Option<u16>,
    /// Store file [default: ~/.local/share/compute-market/<node>.redb].
    #[arg(long)]
    store: Option<String>,
    /// HTTP listen address for results and /metrics.
    #[arg(long)]
    listen: Option<String>,
    /// Public base URL of that server [default: http://<listen>].
    #[arg(long)]
    public_url: Option<String>,
    /// Least stake (free + bonded, token base units) of a market node whose signed requests
    /// this keeper's server admits ahead of strangers' (each within its share by stake).
    /// The market sets no floor yet: a keeper sets its own.
    #[arg(long, default_value_t = daemon::ADMIT_MIN_STAKE)]
    admit_min_stake: u64,
    /// Poll interval, ms.
    #[arg(long)]
    poll_ms: Option<u64>,
    /// Compute backend: auto (CUDA when a GPU passes its self-test, else the CPU; the choice is
    /// logged), cpu or cuda.
    #[arg(long, value_enum, default_value_t = Backend::Auto)]
    backend: Backend,
    /// Tasks handled at once in a pass (transactions in flight together).
    #[arg(long, default_value_t = 16)]
    parallel: usize,
    /// Provider: most tasks held (claimed, not yet submitted) at once.
    #[arg(long, default_value_t = 4)]
    max_active: usize,
    /// Provider: slots a fresh task waits per task already held before this provider claims it
    /// (least-loaded providers claim first).
    #[arg(long, default_value_t = compute_market_keeper::roles::provider::CLAIM_BACKOFF)]
    claim_backoff: u64,
    /// Directory of served results [default: the store file's path with `.results`].
    #[arg(long)]
    results_dir: Option<String>,
    /// Most disk served results may take, MiB (claims whose result would not fit are skipped).
    #[arg(long, default_value_t = daemon::DISK_BUDGET >> 20)]
    disk_budget_mib: u64,
    /// Most memory clients' checked inputs (matrices, models, batches) are held in, MiB; the
    /// least recently used are dropped beyond it (and fetched again from the content store).
    #[arg(long, default_value_t = (compute_market_keeper::compute::inputs::HELD_BYTES >> 20) as u64)]
    held_inputs_mib: u64,
    /// An origin (`https://app.example`, or `*`) whose pages may fetch results and inputs from
    /// this keeper and upload to it (CORS); repeat for more. None: no page elsewhere can.
    #[arg(long = "cors-origin")]
    cors_origins: Vec<String>,
    /// Hours a served result is kept after its task is closed (the client may still fetch it).
    #[arg(long, default_value_t = 24.0)]
    retain_hours: f64,
    /// Provider: least reward per 10^9 work units (multiply-adds or SHA-256 compressions),
    /// token base units; cheaper tasks are not claimed.
    #[arg(long, default_value_t = 0)]
    min_reward_per_gwork: u64,
    /// Provider: least quorum V of a task it claims (below it, too few seats stand between an
    /// honest result and a client's own second wallet).
    #[arg(long, default_value_t = 3)]
    min_quorum: u8,
    /// Provider: least samples k per verifier of a task it claims.
    #[arg(long, default_value_t = 1)]
    min_samples: u16,
    /// Verifier: a keeper to ask for a result (`<URL>/r/<root>`) or an input (`<URL>/c/<hash>`)
    /// when the provider does not serve it, before voting UNAVAILABLE; repeat for more. What a
    /// mirror serves is checked against the committed root like the provider's answer.
    #[arg(long = "mirror")]
    mirrors: Vec<String>,
    /// Verifier: most bytes kept of the results it checked (the whole of a MatMulModP, the
    /// sampled tiles with their proofs otherwise), served again to clients whose provider
    /// does not (PROTOCOL §8.12); the oldest kept is evicted first. 0 keeps nothing.
    #[arg(long, default_value_t = compute_market_keeper::results::reserve::DEFAULT_MAX_BYTES)]
    reserve_max_bytes: u64,
    /// Verifier: hours a result it checked is kept at the least (longer while its task's
    /// dispute window runs).
    #[arg(long, default_value_t = 1.0)]
    reserve_hours: f64,
    /// Fetch results from loopback addresses (a single-machine cluster, tests).
    #[arg(long)]
    allow_loopback_urls: bool,
    /// Fetch results from private, link-local and other non-global addresses (a private
    /// network; implies loopback).
    #[arg(long)]
    allow_private_urls: bool,
    /// Seconds a result fetch may take, body included.
    #[arg(long, default_value_t = 30)]
    fetch_timeout_s: u64,
    /// Seconds a keeper asked to stop (SIGTERM, Ctrl-C) keeps running to finish what it owes:
    /// it claims and joins nothing new, submits what it claimed, serves and defends its results
    /// through their verdict and dispute window, reveals the votes it committed, then exits.
    /// A second signal, or this timeout, stops it after the pass in hand (what is still owed is
    /// resumed from the store by the next start). 0: stop after the pass in hand. Under
    /// Kubernetes, set it below `terminationGracePeriodSeconds` (the chart does).
    #[arg(long, default_value_t = 600)]
    drain_timeout_s: u64,
    /// Fail the liveness check (`GET /livez`) unless a GPU passed its self-test and computes
    /// (a GPU node whose GPU was lost restarts rather than computing on the CPU).
    #[arg(long)]
    require_gpu: bool,
    /// Test only: corrupt this fraction of every result's tiles (a dishonest provider).
    #[arg(long, hide = true, default_value_t = 0.0)]
    corrupt_fraction: f64,
    /// Test only: the verifier votes VALID without checking (a lazy or colluding seat).
    #[arg(long, hide = true)]
    careless: bool,
    /// Test only: the verifier votes INVALID without checking, pointing at a right element.
    #[arg(long, hide = true, conflicts_with = "careless")]
    lying: bool,
    /// Test only: after each vote commit lands, wait this many ms before anything else (a test
    /// kills the process in that window, between commit and reveal).
    #[arg(long, hide = true)]
    hold_after_commit_ms: Option<u64>,
}

impl RunArgs {
    /// Runs the daemon until it is signalled.
    pub fn execute(self, ctx: &Ctx) -> Result<()> {
        // first thing: a SIGTERM during the start (the GPU self-test) must count
        let shutdown = daemon::signals_from_now();
        ensure!(
            self.provider || self.verifier || self.crank || self.watch || self.watch_all,
            "choose at least one of --provider, --verifier, --crank, --watch, --watch-all"
        );
        let backend = select(self.backend)?;
        let kp = ctx.keypair()?;
        let store = self
            .store
            .or(ctx.file.store.clone())
            .map(|s| expand(&s))
            .unwrap_or_else(|| {
                expand(&format!(
                    "~/.local/share/compute-market/{}.redb",
                    kp.pubkey()
                ))
            });
        let mut opts = daemon::DaemonOptions::new(ctx.market(self.market), store);
        (opts.provider, opts.verifier, opts.crank) = (self.provider, self.verifier, self.crank);
        opts.listen = self
            .listen
            .or(ctx.file.listen.clone())
            .unwrap_or_else(|| "127.0.0.1:9100".into());
        opts.public_url = self.public_url.or(ctx.file.public_url.clone());
        opts.poll = Duration::from_millis(self.poll_ms.or(ctx.file.poll_ms).unwrap_or(400));
        opts.parallel = self.parallel;
        opts.max_active = self.max_active;
        opts.claim_backoff = self.claim_backoff;
        opts.corrupt_fraction = self.corrupt_fraction;
        opts.hold_after_commit = self.hold_after_commit_ms.map(Duration::from_millis);
        (opts.careless, opts.lying) = (self.careless, self.lying);
        opts.watch = if self.watch_all {
            Some(Watched::All)
        } else {
            self.watch.then(|| Watched::Clients(vec![kp.pubkey()]))
        };
        opts.progress = Some(progress_bars());
        opts.ws_url = Some(daemon::ws_url(
            &compute_market_keeper::chain::rpc::resolve_url(&ctx.url),
        ));
        opts.results_dir = self.results_dir.map(|d| expand(&d));
        opts.disk_budget = self.disk_budget_mib << 20;
        ensure!(
            self.held_inputs_mib >= 1,
            "--held-inputs-mib must be at least 1"
        );
        compute_market_keeper::compute::inputs::set_held_budget(
            usize::try_from(self.held_inputs_mib << 20).unwrap_or(usize::MAX),
        );
        ensure!(
            self.retain_hours.is_finite() && self.retain_hours >= 0.0,
            "--retain-hours must be a non-negative number of hours"
        );
        opts.retention = Duration::from_secs_f64(self.retain_hours * 3600.0);
        ensure!(
            self.reserve_hours.is_finite() && self.reserve_hours >= 0.0,
            "--reserve-hours must be a non-negative number of hours, got {}",
            self.reserve_hours
        );
        opts.drain_timeout = Duration::from_secs(self.drain_timeout_s);
        opts.require_gpu = self.require_gpu;
        opts.reserve_max_bytes = self.reserve_max_bytes;
        opts.reserve_retention = Duration::from_secs_f64(self.reserve_hours * 3600.0);
        opts.min_reward_per_gwork = self.min_reward_per_gwork;
        opts.min_quorum = self.min_quorum;
        opts.min_samples = self.min_samples;
        opts.cors_origins = self.cors_origins;
        opts.admit_min_stake = daemon::admit_min_stake(self.admit_min_stake)?;
        for m in &self.mirrors {
            ensure!(
                m.starts_with("http://") || m.starts_with("https://"),
                "--mirror {m}: a mirror is an http(s) URL of a keeper"
            );
        }
        // bases without a trailing slash: `<mirror>/r/<root>`, `<mirror>/c/<hash>`
        opts.mirrors = self
            .mirrors
            .iter()
            .map(|m| m.trim_end_matches('/').to_string())
            .collect();
        opts.fetch = FetchPolicy {
            allow_loopback: self.allow_loopback_urls,
            allow_private: self.allow_private_urls,
            timeout: Duration::from_secs(self.fetch_timeout_s.max(1)),
            ..FetchPolicy::default()
        };
        daemon::run(ctx.rpc(), kp, backend, opts, shutdown)
    }
}

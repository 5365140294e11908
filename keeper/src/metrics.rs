//! Prometheus metrics (`prometheus-client`, the Prometheus project's Rust client; OpenMetrics
//! text), served at `/metrics` by the keeper's HTTP server: tasks by state, jobs run, the
//! verification cost ratio, transaction outcomes, RPC latency, and what the HTTP server turned
//! away.

use std::sync::atomic::AtomicU64;

use prometheus_client::{
    encoding::{text::encode, EncodeLabelSet},
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
    registry::Registry,
};

/// The label of [`Metrics::tasks`].
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabel {
    /// The task state (`Open`, `Verifying`, …).
    pub state: String,
}

/// The label of [`Metrics::claims_skipped`].
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    /// Why ([`crate::card::SkipReason::label`]).
    pub reason: String,
}

/// What `/livez` and `/readyz` answer (Kubernetes probes): set by the daemon, read by the
/// HTTP server.
#[derive(Default)]
pub struct Health {
    /// Why the process should be restarted (a GPU required and not computing), if it should.
    pub dead: std::sync::Mutex<Option<String>>,
    /// Whether roles run (a daemon): then readiness needs recent passes.
    pub roles: std::sync::atomic::AtomicBool,
    /// When the last role pass ended ([`now_ms`]).
    pub last_pass_ms: AtomicU64,
    /// When the last role pass that read the chain without error ended, the same.
    pub last_ok_ms: AtomicU64,
    /// Longest time between passes that still counts as live, milliseconds.
    pub stale_ms: AtomicU64,
    /// Asked to stop and finishing what it owes: not ready for new work.
    pub draining: std::sync::atomic::AtomicBool,
}

/// Milliseconds on a monotonic clock (wall-clock steps never make a keeper look stuck), from an
/// origin a day before the process first asked (so that no reading is 0, "never").
pub fn now_ms() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_millis() as u64
        + 86_400_000
}

impl Health {
    /// Records a finished role pass, and whether it went without error.
    pub fn pass(&self, ok: bool) {
        let now = now_ms();
        self.last_pass_ms
            .store(now, std::sync::atomic::Ordering::Relaxed);
        if ok {
            self.last_ok_ms
                .store(now, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// `Err(why)` when the process should be restarted: a required GPU is not computing, or
    /// the roles have made no pass for longer than [`Health::stale_ms`] (wedged).
    pub fn live(&self) -> Result<(), String> {
        use std::sync::atomic::Ordering::Relaxed;
        if let Some(why) = self.dead.lock().expect("health lock").clone() {
            return Err(why);
        }
        let stale = self.stale_ms.load(Relaxed);
        let last = self.last_pass_ms.load(Relaxed);
        let since = now_ms().saturating_sub(last);
        if self.roles.load(Relaxed) && stale > 0 && last > 0 && since > stale {
            return Err(format!(
                "no pass for {} s (more than {} s): the keeper is stuck",
                since / 1000,
                stale / 1000
            ));
        }
        Ok(())
    }

    /// `Err(why)` when it should get no new work: not live, draining, or no pass yet (the
    /// chain not read since the start).
    pub fn ready(&self) -> Result<(), String> {
        use std::sync::atomic::Ordering::Relaxed;
        self.live()?;
        if self.draining.load(Relaxed) {
            return Err("draining: finishing what it owes before it stops".into());
        }
        if self.roles.load(Relaxed) {
            let ok = self.last_ok_ms.load(Relaxed);
            if ok == 0 {
                return Err(
                    "starting: no pass over the chain without error yet (is the RPC reachable?)"
                        .into(),
                );
            }
            // a tenth of the liveness bound (at least 30 s) without a clean read of the chain
            let bound = (self.stale_ms.load(Relaxed) / 10).max(30_000);
            let since = now_ms().saturating_sub(ok);
            if since > bound {
                return Err(format!(
                    "no pass over the chain without error for {} s: is the RPC reachable? (the log says why)",
                    since / 1000
                ));
            }
        }
        Ok(())
    }
}

/// Counters and gauges of one keeper process (cheap to clone: every metric is shared).
pub struct Metrics {
    registry: Registry,
    /// What the probes answer.
    pub health: Health,
    /// Open tasks of its market this provider would claim had it room (what an autoscaler
    /// scales providers on).
    pub claimable: Gauge,
    /// 1 while asked to stop and finishing what it owes.
    pub draining: Gauge,
    /// Tasks on which it still owes something (claimed, being verified, a vote to reveal, a
    /// dispute to answer), counted while draining.
    pub owed: Gauge,
    /// Jobs computed (provider).
    pub jobs_run: Counter,
    /// Results checked (verifier).
    pub verifications: Counter,
    /// Seconds spent computing.
    pub compute_seconds: Counter<f64, AtomicU64>,
    /// Seconds spent verifying.
    pub verify_seconds: Counter<f64, AtomicU64>,
    /// Transactions sent and confirmed.
    pub tx_ok: Counter,
    /// Transactions refused by the program.
    pub tx_refused: Counter,
    /// Calls that failed to reach the cluster.
    pub rpc_errors: Counter,
    /// RPC round trips, seconds.
    pub rpc_latency: Histogram,
    /// Program accounts returned by account scans (`getProgramAccounts`).
    pub accounts_read: Counter,
    /// Tasks of this keeper's market per state, as last seen.
    pub tasks: Family<StateLabel, Gauge>,
    /// Result transfers refused because too many were in flight (per peer or in all).
    pub http_busy: Counter,
    /// Objects stored by `PUT /c/<hash>`.
    pub content_uploads: Counter,
    /// Input objects found in the content store (no fetch).
    pub content_hits: Counter,
    /// Input objects fetched from the network.
    pub content_fetches: Counter,
    /// Connections closed on accept because too many were open.
    pub http_connections_refused: Counter,
    /// Connections closed because their transfer stood still (a reader that stopped reading).
    pub http_stalled: Counter,
    /// Idle connections closed to admit a newcomer from a peer holding fewer
    /// ([`crate::results::admission`]).
    pub http_connections_evicted: Counter,
    /// Requests signed by an admitted node (served from the nodes' pools).
    pub http_signed: Counter,
    /// Admitted nodes' requests refused (403) for naming a host that is not one of the
    /// server's names: signatures made for another server ([`crate::results::admission`]).
    pub http_signed_elsewhere: Counter,
    /// Bytes of served results held on disk.
    pub store_bytes: Gauge,
    /// Bytes kept of results its verifier checked, served again (PROTOCOL §8.12).
    pub reserve_bytes: Gauge,
    /// Panics caught in one task's work (that task failed; the process went on).
    pub panics: Counter,
    /// Open tasks the provider did not claim, once per task and reason.
    pub claims_skipped: Family<ReasonLabel, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("keeper");
        let m = Metrics {
            jobs_run: Counter::default(),
            verifications: Counter::default(),
            compute_seconds: Counter::default(),
            verify_seconds: Counter::default(),
            tx_ok: Counter::default(),
            tx_refused: Counter::default(),
            rpc_errors: Counter::default(),
            rpc_latency: Histogram::new(
                [
                    0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                ]
                .into_iter(),
            ),
            accounts_read: Counter::default(),
            tasks: Family::default(),
            http_busy: Counter::default(),
            content_uploads: Counter::default(),
            content_hits: Counter::default(),
            content_fetches: Counter::default(),
            http_connections_refused: Counter::default(),
            http_stalled: Counter::default(),
            http_connections_evicted: Counter::default(),
            http_signed: Counter::default(),
            http_signed_elsewhere: Counter::default(),
            store_bytes: Gauge::default(),
            reserve_bytes: Gauge::default(),
            panics: Counter::default(),
            claims_skipped: Family::default(),
            health: Health::default(),
            claimable: Gauge::default(),
            draining: Gauge::default(),
            owed: Gauge::default(),
            registry: Registry::default(),
        };
        registry.register(
            "jobs_run",
            "Jobs computed by this provider",
            m.jobs_run.clone(),
        );
        registry.register(
            "verifications",
            "Results checked by this verifier",
            m.verifications.clone(),
        );
        registry.register(
            "compute_seconds",
            "Seconds spent computing jobs",
            m.compute_seconds.clone(),
        );
        registry.register(
            "verify_seconds",
            "Seconds spent verifying results",
            m.verify_seconds.clone(),
        );
        registry.register("transactions", "Transactions confirmed", m.tx_ok.clone());
        registry.register(
            "transaction_failures",
            "Transactions refused by the program",
            m.tx_refused.clone(),
        );
        registry.register(
            "rpc_errors",
            "Calls that failed to reach the cluster",
            m.rpc_errors.clone(),
        );
        registry.register(
            "rpc_latency_seconds",
            "RPC round trips",
            m.rpc_latency.clone(),
        );
        registry.register(
            "accounts_read",
            "Program accounts returned by account scans",
            m.accounts_read.clone(),
        );
        registry.register(
            "tasks",
            "Tasks of this keeper's market by state, as last seen",
            m.tasks.clone(),
        );
        registry.register(
            "http_busy",
            "Result transfers refused with 503: too many in flight",
            m.http_busy.clone(),
        );
        registry.register(
            "content_uploads",
            "Objects stored by PUT /c/<hash>",
            m.content_uploads.clone(),
        );
        registry.register(
            "content_cache_hits",
            "Input objects found in the content store, not fetched",
            m.content_hits.clone(),
        );
        registry.register(
            "content_fetches",
            "Input objects fetched from the network",
            m.content_fetches.clone(),
        );
        registry.register(
            "http_connections_refused",
            "Connections closed on accept: too many open",
            m.http_connections_refused.clone(),
        );
        registry.register(
            "http_stalled",
            "Connections closed: their transfer stood still",
            m.http_stalled.clone(),
        );
        registry.register(
            "http_connections_evicted",
            "Idle connections closed to admit a peer holding fewer",
            m.http_connections_evicted.clone(),
        );
        registry.register(
            "http_signed",
            "Requests signed by an admitted node",
            m.http_signed.clone(),
        );
        registry.register(
            "http_signed_elsewhere",
            "Admitted nodes' requests refused for naming another server's host",
            m.http_signed_elsewhere.clone(),
        );
        registry.register(
            "store_bytes",
            "Bytes of served results held on disk",
            m.store_bytes.clone(),
        );
        registry.register(
            "reserve_bytes",
            "Bytes kept of results this keeper's verifier checked, served again",
            m.reserve_bytes.clone(),
        );
        registry.register(
            "panics",
            "Panics caught in one task's work",
            m.panics.clone(),
        );
        registry.register(
            "claims_skipped",
            "Open tasks this provider did not claim, once per task and reason",
            m.claims_skipped.clone(),
        );
        registry.register(
            "claimable_tasks",
            "Open tasks this provider would claim had it room (scale providers on it)",
            m.claimable.clone(),
        );
        registry.register(
            "draining",
            "1 while asked to stop and finishing what it owes",
            m.draining.clone(),
        );
        registry.register(
            "owed_tasks",
            "Tasks on which a draining keeper still owes a submit, a reveal or a defence",
            m.owed.clone(),
        );
        Metrics { registry, ..m }
    }
}

impl Metrics {
    /// Sets the per-state task gauges to `by` (states not listed drop to zero).
    pub fn set_tasks(&self, by: &[(String, u64)]) {
        self.tasks.clear();
        for (state, n) in by {
            self.tasks
                .get_or_create(&StateLabel {
                    state: state.clone(),
                })
                .set(*n as i64);
        }
    }

    /// Counts a task skipped for `reason`.
    pub fn claim_skipped(&self, reason: crate::card::SkipReason) {
        self.claims_skipped
            .get_or_create(&ReasonLabel {
                reason: reason.label().into(),
            })
            .inc();
    }

    /// Seconds verifying per second computing (0 before any compute).
    pub fn verification_cost_ratio(&self) -> f64 {
        let c = self.compute_seconds.get();
        if c > 0.0 {
            self.verify_seconds.get() / c
        } else {
            0.0
        }
    }

    /// The exposition text (OpenMetrics).
    pub fn render(&self) -> String {
        let mut s = String::new();
        if encode(&mut s, &self.registry).is_err() {
            return "# metrics could not be encoded\n".into();
        }
        // a ratio of two counters, computed at scrape time
        let ratio = format!(
            "# HELP keeper_verification_cost_ratio Seconds verifying per second computing.\n# TYPE keeper_verification_cost_ratio gauge\nkeeper_verification_cost_ratio {}\n",
            self.verification_cost_ratio()
        );
        match s.rfind("# EOF") {
            Some(i) => s.insert_str(i, &ratio),
            None => s.push_str(&ratio),
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering::Relaxed;

    use super::*;

    #[test]
    fn probes_say_why_a_keeper_is_not_live_or_not_ready() {
        let h = Health::default();
        // a content store (no roles): live and ready at once
        assert_eq!((h.live(), h.ready()), (Ok(()), Ok(())));
        h.roles.store(true, Relaxed);
        h.stale_ms.store(300_000, Relaxed);
        assert!(h.ready().unwrap_err().starts_with("starting"));
        // a failed pass (the RPC down) is progress, not a clean read
        h.pass(false);
        assert_eq!(h.live(), Ok(()));
        assert!(h.ready().unwrap_err().contains("RPC"));
        h.pass(true);
        assert_eq!(h.ready(), Ok(()));
        // no clean read for a while: not ready; no pass at all for longer: not live
        h.last_ok_ms.store(now_ms() - 40_000, Relaxed);
        assert!(h.ready().unwrap_err().contains("for 40 s"));
        h.last_pass_ms.store(now_ms() - 400_000, Relaxed);
        assert!(h.live().unwrap_err().contains("stuck"));
        h.pass(true);
        h.draining.store(true, Relaxed);
        assert_eq!(h.live(), Ok(()));
        assert!(h.ready().unwrap_err().starts_with("draining"));
        *h.dead.lock().unwrap() = Some("--require-gpu: no GPU".into());
        assert_eq!(h.live(), Err("--require-gpu: no GPU".into()));
        assert!(h.ready().is_err());
    }
}

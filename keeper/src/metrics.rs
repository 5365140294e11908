//! Prometheus metrics (text exposition format), served at `/metrics` by the keeper's HTTP
//! server: tasks by state, jobs run, verification cost ratio, transaction failures, RPC latency.

use std::sync::{
    atomic::{AtomicU64, Ordering::Relaxed},
    Mutex,
};

/// Counters and gauges of one keeper process.
#[derive(Default)]
pub struct Metrics {
    /// Jobs computed (provider).
    pub jobs_run: AtomicU64,
    /// Results checked (verifier).
    pub verifications: AtomicU64,
    /// Microseconds spent computing.
    pub compute_us: AtomicU64,
    /// Microseconds spent verifying.
    pub verify_us: AtomicU64,
    /// Transactions sent and confirmed.
    pub tx_ok: AtomicU64,
    /// Transactions refused by the program.
    pub tx_refused: AtomicU64,
    /// Calls that failed to reach the cluster.
    pub rpc_errors: AtomicU64,
    /// Sum and count of RPC round trips, microseconds.
    pub rpc_us: AtomicU64,
    /// Number of RPC round trips.
    pub rpc_calls: AtomicU64,
    /// Tasks per state, as last seen.
    pub tasks_by_state: Mutex<Vec<(String, u64)>>,
}

impl Metrics {
    /// Adds `v` to a counter.
    pub fn add(c: &AtomicU64, v: u64) {
        c.fetch_add(v, Relaxed);
    }

    /// The exposition text.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let mut counter = |name: &str, help: &str, v: f64| {
            s += &format!("# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}\n");
        };
        counter(
            "keeper_jobs_run_total",
            "Jobs computed by this provider.",
            self.jobs_run.load(Relaxed) as f64,
        );
        counter(
            "keeper_verifications_total",
            "Results checked by this verifier.",
            self.verifications.load(Relaxed) as f64,
        );
        counter(
            "keeper_compute_seconds_total",
            "Seconds spent computing jobs.",
            self.compute_us.load(Relaxed) as f64 / 1e6,
        );
        counter(
            "keeper_verify_seconds_total",
            "Seconds spent verifying results.",
            self.verify_us.load(Relaxed) as f64 / 1e6,
        );
        counter(
            "keeper_transactions_total",
            "Transactions confirmed.",
            self.tx_ok.load(Relaxed) as f64,
        );
        counter(
            "keeper_transaction_failures_total",
            "Transactions refused by the program.",
            self.tx_refused.load(Relaxed) as f64,
        );
        counter(
            "keeper_rpc_errors_total",
            "Calls that failed to reach the cluster.",
            self.rpc_errors.load(Relaxed) as f64,
        );
        let calls = self.rpc_calls.load(Relaxed);
        let us = self.rpc_us.load(Relaxed);
        s += &format!(
            "# HELP keeper_rpc_latency_seconds RPC round trips.\n# TYPE keeper_rpc_latency_seconds summary\nkeeper_rpc_latency_seconds_sum {}\nkeeper_rpc_latency_seconds_count {calls}\n",
            us as f64 / 1e6
        );
        let (c, v) = (self.compute_us.load(Relaxed), self.verify_us.load(Relaxed));
        s += &format!(
            "# HELP keeper_verification_cost_ratio Seconds verifying per second computing.\n# TYPE keeper_verification_cost_ratio gauge\nkeeper_verification_cost_ratio {}\n",
            if c > 0 { v as f64 / c as f64 } else { 0.0 }
        );
        s += "# HELP keeper_tasks Tasks on chain by state, as last seen.\n# TYPE keeper_tasks gauge\n";
        for (state, n) in self.tasks_by_state.lock().expect("metrics lock").iter() {
            s += &format!("keeper_tasks{{state=\"{state}\"}} {n}\n");
        }
        s
    }
}

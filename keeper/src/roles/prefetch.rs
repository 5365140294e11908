//! Inputs fetched ahead of claims (PROTOCOL §5, Inputs: pre-fetch).
//!
//! A provider claims a task on a client's data only once that task's inputs are held and
//! checked: an honest provider never bonds stake on data it cannot get. Fetching them inside
//! the claim pass would hold every other claim and submission of the pass behind one slow
//! host, and fetching only once a task is picked leaves the provider's capacity idle while the
//! bytes arrive. So the inputs are fetched here, on threads of their own and a few at a time,
//! for the tasks the provider is about to claim (this pass's picks) and for the next
//! best-ranked open tasks it would claim as soon as it has room; a pick whose inputs are held
//! is claimed at once, the others in a later pass once their fetch is done.
//!
//! Fetches are keyed by the job's manifest hash (two tasks on the same data share one fetch
//! and one held copy). A fetch that failed is not tried again before a pause (longer when what
//! was served broke the protocol than when the host was only unreachable), so a bad task does
//! not cost a download every pass.

use std::{
    collections::HashMap,
    thread::JoinHandle,
    time::{Duration, Instant},
};

use compute_market_protocol::{
    hash::Digest,
    job::{InputMode, JobSpec},
};

use crate::{compute::inputs, results::FetchError};

/// First pause before inputs that could not be fetched are tried again (doubled after each
/// failure in a row, up to [`RETRY_MAX`]).
pub const RETRY_UNAVAILABLE: Duration = Duration::from_secs(3);

/// First pause before inputs that break the protocol (a malformed manifest or file, an
/// element out of the field) are tried again: the input URI is fixed on chain, but another
/// source (a provider that holds them) may appear.
pub const RETRY_INVALID: Duration = Duration::from_secs(60);

/// Longest pause.
pub const RETRY_MAX: Duration = Duration::from_secs(300);

/// The pause after `count` failures in a row (≥ 1) starting at `base`: doubled after each,
/// at most [`RETRY_MAX`]. Shared by the fetches here and the provider's input hosts.
pub fn pause(base: Duration, count: u32) -> Duration {
    base.saturating_mul(1 << (count.max(1) - 1).min(16))
        .min(RETRY_MAX)
}

/// A failure is forgotten this long after its pause ended (the task is long gone).
const FORGET: Duration = Duration::from_secs(600);

/// Where a job's inputs stand.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ready {
    /// Held and checked (or generated from the job's seed): it may be claimed.
    Held,
    /// Being fetched, or waiting for a free fetch.
    Fetching,
    /// The last fetch failed, for this reason; tried again after a pause.
    Failed(String),
}

struct Failure {
    retry_at: Instant,
    why: String,
    /// Failures in a row.
    count: u32,
    /// Whether the last one may pass (nothing answered in time), rather than what was
    /// served breaking the protocol.
    transient: bool,
}

/// The provider's fetches ahead of claims.
pub struct Prefetcher {
    /// Fetches running at once.
    pub parallel: usize,
    running: HashMap<Digest, JoinHandle<Result<(), FetchError>>>,
    failed: HashMap<Digest, Failure>,
}

impl Prefetcher {
    /// At most `parallel` fetches at once.
    pub fn new(parallel: usize) -> Self {
        Prefetcher {
            parallel: parallel.max(1),
            running: HashMap::new(),
            failed: HashMap::new(),
        }
    }

    /// Fetches running now.
    pub fn fetching(&self) -> usize {
        self.running.len()
    }

    /// Collects finished fetches: a failure is kept (with its pause), a success forgets any.
    fn reap(&mut self) {
        let done: Vec<Digest> = self
            .running
            .iter()
            .filter(|(_, h)| h.is_finished())
            .map(|(k, _)| *k)
            .collect();
        for k in done {
            let h = self.running.remove(&k).expect("listed");
            let outcome = h
                .join()
                .unwrap_or_else(|_| Err(FetchError::Invalid("the fetch panicked".into())));
            self.record(k, outcome);
        }
        let now = Instant::now();
        self.failed.retain(|_, f| now < f.retry_at + FORGET);
    }

    /// Keeps the outcome of a fetch of `key`: a failure with its pause, a success forgets any.
    fn record(&mut self, key: Digest, outcome: Result<(), FetchError>) -> Ready {
        match outcome {
            Ok(()) => {
                self.failed.remove(&key);
                Ready::Held
            }
            Err(e) => {
                let count = self
                    .failed
                    .get(&key)
                    .map_or(1, |f| f.count.saturating_add(1));
                let base = if e.is_transient() {
                    RETRY_UNAVAILABLE
                } else {
                    RETRY_INVALID
                };
                let pause = pause(base, count);
                let why = e.to_string();
                tracing::warn!(manifest = %crate::results::hex(&key), error = %why, retry_s = pause.as_secs(), failures = count, "inputs not fetched; their tasks are not claimed");
                self.failed.insert(
                    key,
                    Failure {
                        retry_at: Instant::now() + pause,
                        why: why.clone(),
                        count,
                        transient: e.is_transient(),
                    },
                );
                Ready::Failed(why)
            }
        }
    }

    /// Whether the last fetch of `job`'s inputs failed because nothing answered in time.
    pub fn failed_transiently(&self, job: &JobSpec) -> bool {
        self.failed.get(&job.input).is_some_and(|f| f.transient)
    }

    /// A failure of `key` still in its pause.
    fn pausing(&self, key: &Digest) -> Option<Ready> {
        self.failed
            .get(key)
            .filter(|f| Instant::now() < f.retry_at)
            .map(|f| Ready::Failed(f.why.clone()))
    }

    /// [`Prefetcher::ready`] in line: `fetch` runs now, on this thread, unless the inputs are
    /// held or a failure is in its pause (the in-order demo, whose passes must not race).
    pub fn ready_now(
        &mut self,
        job: &JobSpec,
        fetch: impl FnOnce() -> Result<(), FetchError>,
    ) -> Ready {
        if job.input_mode != InputMode::ContentHash || inputs::is_held(job) {
            return Ready::Held;
        }
        if let Some(r) = self.pausing(&job.input) {
            return r;
        }
        let outcome = fetch();
        self.record(job.input, outcome)
    }

    /// Where the inputs of `job` stand. When they are neither held nor being fetched, nor in
    /// their pause after a failure, `fetch` is started on a thread of its own if fewer than
    /// [`Prefetcher::parallel`] are running — fewer than one less for a fetch `ahead` of
    /// need (a task not picked yet), so tasks about to be claimed always find a place.
    pub fn ready(
        &mut self,
        job: &JobSpec,
        ahead: bool,
        fetch: impl FnOnce() -> Result<(), FetchError> + Send + 'static,
    ) -> Ready {
        if job.input_mode != InputMode::ContentHash || inputs::is_held(job) {
            return Ready::Held;
        }
        self.reap();
        let key = job.input;
        if self.running.contains_key(&key) {
            return Ready::Fetching;
        }
        if let Some(r) = self.pausing(&key) {
            return r;
        }
        let places = if ahead {
            self.parallel.saturating_sub(1).max(1)
        } else {
            self.parallel
        };
        if self.running.len() >= places {
            return Ready::Fetching;
        }
        let h = std::thread::Builder::new()
            .name(format!("prefetch-{}", &crate::results::hex(&key)[..8]))
            .spawn(fetch);
        match h {
            Ok(h) => {
                self.running.insert(key, h);
                Ready::Fetching
            }
            Err(e) => Ready::Failed(format!("cannot start a fetch: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(tag: u8) -> JobSpec {
        let mut j = JobSpec::matmul(64, 64, 64, [tag; 32]);
        j.input_mode = InputMode::ContentHash;
        j
    }

    fn until(p: &mut Prefetcher, j: &JobSpec, want: impl Fn(&Ready) -> bool) -> Ready {
        let t = Instant::now();
        loop {
            let r = p.ready(j, false, || {
                Err(FetchError::Invalid("never asked again".into()))
            });
            if want(&r) || t.elapsed() > Duration::from_secs(10) {
                return r;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn fetches_run_a_few_at_a_time_and_failures_wait_their_pause() {
        let mut p = Prefetcher::new(2);
        // generated inputs need nothing
        assert_eq!(
            p.ready(
                &JobSpec::matmul(64, 64, 64, [1; 32]),
                false,
                || unreachable!()
            ),
            Ready::Held
        );
        let gate = std::sync::Arc::new(std::sync::Barrier::new(3));
        for tag in [201, 202] {
            let g = gate.clone();
            assert_eq!(
                p.ready(&job(tag), false, move || {
                    g.wait();
                    Err(FetchError::Unavailable(format!("host {tag} down")))
                }),
                Ready::Fetching
            );
        }
        // a third waits for a free place: its fetch is not started
        let started = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s = started.clone();
        assert_eq!(
            p.ready(&job(203), false, move || {
                s.store(true, std::sync::atomic::Ordering::SeqCst);
                Ok(())
            }),
            Ready::Fetching
        );
        assert!(!started.load(std::sync::atomic::Ordering::SeqCst));
        // a fetch ahead of need leaves one place to the tasks about to be claimed
        assert_eq!(
            Prefetcher::new(2).ready(&job(204), true, || Ok(())),
            Ready::Fetching
        );
        let mut q = Prefetcher::new(2);
        let g = std::sync::Arc::new(std::sync::Barrier::new(2));
        let g2 = g.clone();
        q.ready(&job(205), true, move || {
            g2.wait();
            Ok(())
        });
        assert_eq!(q.ready(&job(206), true, || unreachable!()), Ready::Fetching);
        assert_eq!(q.fetching(), 1, "the second fetch ahead waits");
        assert_eq!(
            q.ready(&job(207), false, || Ok(())),
            Ready::Fetching,
            "a pick still gets a place"
        );
        assert_eq!(q.fetching(), 2);
        g.wait();
        assert_eq!(p.fetching(), 2);
        // asked again while running: not started twice
        assert_eq!(
            p.ready(&job(201), false, || unreachable!()),
            Ready::Fetching
        );
        gate.wait();
        let r = until(&mut p, &job(201), |r| matches!(r, Ready::Failed(_)));
        assert_eq!(r, Ready::Failed("host 201 down".into()), "its reason, kept");
        // within its pause the failure stands and nothing is fetched
        let r = until(&mut p, &job(202), |r| matches!(r, Ready::Failed(_)));
        assert_eq!(r, Ready::Failed("host 202 down".into()));
        assert_eq!(p.fetching(), 0);
        assert_eq!(
            p.ready(&job(202), false, || unreachable!()),
            Ready::Failed("host 202 down".into())
        );
        // failures in a row wait longer each time
        let mut r = Prefetcher::new(1);
        let j = job(208);
        let pause = |r: &Prefetcher| r.failed[&j.input].retry_at - Instant::now();
        r.ready_now(&j, || Err(FetchError::Unavailable("down".into())));
        assert!(pause(&r) <= RETRY_UNAVAILABLE);
        r.failed.get_mut(&j.input).unwrap().retry_at = Instant::now();
        r.ready_now(&j, || Err(FetchError::Unavailable("down".into())));
        assert!(pause(&r) > RETRY_UNAVAILABLE && pause(&r) <= 2 * RETRY_UNAVAILABLE);
    }
}

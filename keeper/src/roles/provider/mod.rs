//! Provider: claims tasks of its market that it can bond, that fit its memory, its disk budget
//! and — from its measured throughput — its submit window, that pay at least its minimum, nearest
//! region first and least-loaded provider first; computes them (in the background in the
//! daemon, so nothing else waits for a computation), keeps the tiles on disk, serves them and
//! submits the Merkle root.

use std::{
    collections::HashMap,
    sync::Arc,
    thread::JoinHandle,
    time::{Duration, Instant},
};

use anchor_lang::prelude::Pubkey;
use anyhow::{Context, Result};
use compute_market::{
    client,
    instructions::SubmitResultArgs,
    state::{Node, Task, TaskStatus},
};
use compute_market_protocol::{
    hash::{hashv, Digest},
    job::JobSpec,
    P,
};
use solana_signer::Signer;

use super::{
    prefetch::{Prefetcher, Ready},
    send, NodeCtx, Reporter,
};
use crate::{
    card::{Skip, SkipReason},
    chain::{Chain, ChainExt},
    compute::Backend,
    db::Db,
    results::{store::file_len, ResultStore},
};

mod claims;

pub use claims::*;

/// Default least-loaded back-off ([`Provider::claim_backoff`]), slots per task held.
pub const CLAIM_BACKOFF: u64 = 2;

/// Default retention of a served result after its task is closed (or no longer uses it).
pub const RETENTION: Duration = Duration::from_secs(24 * 3600);

/// Inputs fetched at once ahead of claims ([`super::prefetch`]).
pub const PREFETCH_PARALLEL: usize = 2;

/// Work a provider did on one task.
#[derive(Clone, Debug)]
pub struct ComputeRecord {
    /// The task.
    pub task: Pubkey,
    /// Seconds spent computing tiles and the tree.
    pub seconds: f64,
    /// Work units of the job.
    pub work: u64,
    /// Tiles corrupted on purpose.
    pub corrupted: u32,
}

/// A computed result, stored and ready to submit.
#[derive(Clone, Debug)]
struct Computed {
    root: Digest,
    uri: String,
    record: ComputeRecord,
}

/// What a computation needs, owned (it may run on its own thread).
#[derive(Clone)]
struct Work {
    name: String,
    backend: Arc<dyn Backend>,
    store: Arc<ResultStore>,
    progress: Option<Arc<Reporter>>,
    corrupt_fraction: f64,
    throughput: Arc<Throughput>,
}

/// A provider.
pub struct Provider {
    /// Identity, backend and result store.
    pub ctx: NodeCtx,
    /// Fraction of tiles it corrupts (0 for an honest provider).
    pub corrupt_fraction: f64,
    /// Most tasks held at once.
    pub max_active: usize,
    /// Least-loaded first: a task becomes claimable for this provider `claim_backoff` slots
    /// after it was posted for every task the provider already holds (claimed, not yet
    /// submitted, including those claimed earlier in the same pass), so idle providers win
    /// fresh tasks and work spreads over the market.
    pub claim_backoff: u64,
    /// Crash-safe database (shared with the verifier).
    pub db: Arc<Db>,
    /// What it computed.
    pub records: Vec<ComputeRecord>,
    /// Its measured speed.
    pub throughput: Arc<Throughput>,
    /// Reward floor and window margin.
    pub policy: ClaimPolicy,
    /// Compute on background threads (the daemon): a pass only starts computations and
    /// submits finished ones. Off, a pass computes in line (the embedded demo, in order).
    pub background: bool,
    /// How long a result is kept once its task no longer needs it ([`RETENTION`]).
    pub retention: Duration,
    /// Draining (the daemon's first SIGTERM): nothing new is claimed or prefetched; what it
    /// holds is finished, served and defended ([`Provider::owed`]).
    pub draining: Arc<std::sync::atomic::AtomicBool>,
    /// Open tasks of its market it would claim had it room, as of its last pass (0 while
    /// draining): the autoscaler's measure of work waiting.
    pub claimable: usize,
    running: HashMap<Pubkey, JoinHandle<Result<Computed>>>,
    unneeded_since: HashMap<Digest, Instant>,
    prefetcher: Prefetcher,
    /// Input hosts that did not answer: (paused until, failures in a row).
    source_failures: HashMap<String, (Instant, u32)>,
    /// The parts of the manifests it pins ([`Provider::pin_inputs`]), read once each.
    manifest_parts: HashMap<Digest, Vec<Digest>>,
    /// The disputes it plays: of Rejected verdicts of its right results (PROTOCOL §8).
    disputes: super::challenger::Disputes,
    /// Why it skips each open task it does not claim, and since which slot ([`Provider::note_skips`]).
    skips: HashMap<Pubkey, (Skip, u64)>,
    /// Tasks whose inputs failed to arrive or to check, with why.
    input_failures: HashMap<Pubkey, String>,
}

impl Provider {
    /// An honest provider holding at most `max_active` tasks, with the default back-off.
    pub fn new(ctx: NodeCtx, db: Arc<Db>, max_active: usize) -> Self {
        Provider {
            ctx,
            corrupt_fraction: 0.0,
            max_active,
            claim_backoff: CLAIM_BACKOFF,
            db,
            records: vec![],
            throughput: Arc::default(),
            policy: ClaimPolicy::default(),
            background: false,
            retention: RETENTION,
            draining: Arc::default(),
            claimable: 0,
            running: HashMap::new(),
            unneeded_since: HashMap::new(),
            prefetcher: Prefetcher::new(PREFETCH_PARALLEL),
            source_failures: HashMap::new(),
            manifest_parts: HashMap::new(),
            disputes: Default::default(),
            skips: HashMap::new(),
            input_failures: HashMap::new(),
        }
    }

    /// Disputes the Rejected verdicts of its results that INVALID seats decided, when every
    /// INVALID vote points at an element its result holds right (PROTOCOL §8, kind 2: checked
    /// here first, as the program will, so it never bonds on a claim that is true); the proofs
    /// come from its result store. Argued to the end, or resumed after a restart.
    fn dispute_rejections(&self, chain: &dyn Chain, now: u64, tasks: &[(Pubkey, Task)]) {
        use super::challenger::{claims_all_false, Claim};
        let kind = compute_market_protocol::dispute::DISPUTE_CLAIMS_FALSE;
        self.disputes.sweep_lanes(chain, &self.ctx, &self.db);
        for (key, t) in tasks {
            if !t.held || t.provider != self.ctx.node {
                continue;
            }
            if !self.disputes.wants(&self.db, key, t, kind, now) {
                continue;
            }
            let Some(entry) = self.ctx.store.entry(&t.result_root) else {
                tracing::warn!(provider = self.ctx.name, task = %key, "its result was Rejected, and the result is no longer in its store: cannot dispute");
                self.disputes.forgo(key);
                continue;
            };
            let tile = |i: u32| -> Result<(Vec<u8>, Vec<Digest>)> {
                let proof = entry.tree()?.proof(i).context("no such tile")?;
                Ok((entry.tile(i)?, proof))
            };
            if !matches!(self.db.disputed(key), Ok(Some(_))) {
                let data = self.disputes.inputs_of(chain, &self.ctx, key);
                match claims_all_false(chain, key, t, &tile, data.as_deref()) {
                    Ok(true) => {}
                    Ok(false) => {
                        tracing::info!(provider = self.ctx.name, task = %key, "Rejected, and an INVALID vote points at an element its result holds wrong: not disputing");
                        self.disputes.forgo(key);
                        continue;
                    }
                    Err(e) => {
                        tracing::warn!(provider = self.ctx.name, task = %key, error = %format!("{e:#}"), "cannot judge the INVALID votes yet");
                        continue;
                    }
                }
            }
            self.disputes
                .play(chain, &self.ctx, &self.db, key, &Claim::ClaimsFalse(&tile));
        }
    }

    fn work(&self) -> Work {
        Work {
            name: self.ctx.name.clone(),
            backend: self.ctx.backend.clone(),
            store: self.ctx.store.clone(),
            progress: self.ctx.progress.clone(),
            corrupt_fraction: self.corrupt_fraction,
            throughput: self.throughput.clone(),
        }
    }

    /// Tasks being computed in the background now.
    pub fn computing(&self) -> usize {
        self.running.len()
    }
}

/// The host (with its port) of `t`'s input URI, when it has one.
fn input_host(t: &Task) -> Option<String> {
    let u = reqwest::Url::parse(super::input_uri(t)).ok()?;
    Some(format!("{}:{}", u.host_str()?, u.port_or_known_default()?))
}

/// Bytes the task's job needs at once (0 for a spec that does not decode: such a task fails
/// on its own when computed).
fn job_memory(t: &Task) -> u64 {
    JobSpec::decode(&t.job).map_or(0, |j| j.memory_bytes())
}

impl Work {
    /// Corrupts about `corrupt_fraction` of the tiles — of the rows, for an `Mlp` — (chosen
    /// deterministically, at least one tile when the fraction is positive), keeping each tile
    /// well-formed so only a real check notices; returns how many it corrupted.
    fn corrupt(&self, job: &JobSpec, tiles: &mut [Vec<u8>]) -> u32 {
        if self.corrupt_fraction <= 0.0 {
            return 0;
        }
        let hit = |t: &mut Vec<u8>| {
            let v = u32::from_le_bytes(t[..4].try_into().expect("4 bytes"));
            t[..4].copy_from_slice(&(((v as u64 + 1) % P) as u32).to_le_bytes());
        };
        let chosen = |i: usize| {
            let h = hashv(&[b"corrupt", &job.input, &(i as u32).to_le_bytes()]);
            (h[0] as f64) < self.corrupt_fraction * 256.0
        };
        let mut n = 0;
        if job.kind.is_inference() {
            // rows, not tiles: a fraction of the batch's rows get a wrong first value (a
            // logit, or an embedding's first int16)
            let per = usize::from(job.rows_per_tile);
            let len = job.tile_len() / per;
            let mut rows: Vec<usize> = (0..job.dims[0] as usize).filter(|&r| chosen(r)).collect();
            if rows.is_empty() {
                rows.push(0);
            }
            for r in rows {
                let t = &mut tiles[r / per][(r % per) * len..];
                if job.kind == compute_market_protocol::job::JobKind::Generate {
                    // one token of the completion, in its middle, one id higher
                    let count = u32::from_le_bytes(t[..4].try_into().expect("4 bytes")) as usize;
                    let at = 4 + 4 * (count / 2);
                    t[at] = t[at].wrapping_add(1);
                } else {
                    t[0] = t[0].wrapping_add(1);
                }
                n += 1;
            }
            return n;
        }
        for (i, t) in tiles.iter_mut().enumerate() {
            if chosen(i) {
                hit(t);
                n += 1;
            }
        }
        if n == 0 {
            hit(&mut tiles[0]);
            n = 1;
        }
        n
    }

    /// Makes the inputs of task `key` held: nothing for generated inputs; the client's parts
    /// from its input URI, checked, for a job on its data.
    fn fetch_inputs(&self, key: &Pubkey, t: &Task) -> Result<(), crate::results::FetchError> {
        let job = JobSpec::decode(&t.job)
            .map_err(|e| crate::results::FetchError::Invalid(format!("malformed job spec: {e}")))?;
        let bases = crate::results::input_bases(super::input_uri(t), &[]);
        let (fetched, found) = self.store.ensure_inputs(&job, &bases, None)?;
        if fetched > 0 {
            tracing::info!(provider = self.name, task = %key, fetched, found, "inputs held and checked");
        }
        Ok(())
    }

    /// [`Work::fetch_inputs`], as an error that names what failed.
    fn inputs(&self, key: &Pubkey, t: &Task) -> Result<()> {
        self.fetch_inputs(key, t)
            .map_err(|e| anyhow::anyhow!("its inputs: {e}"))
    }

    /// Computes the job of `key`, stores the tiles (on disk, before anything is submitted: a
    /// restarted provider serves them again without recomputing) and folds the time into the
    /// throughput figure.
    fn compute(&self, key: Pubkey, t: &Task, job: JobSpec) -> Result<Computed> {
        // the inputs again (from its own content store after a restart or an eviction, else
        // from the client): a claimed task is always computed
        self.inputs(&key, t)?;
        let start = Instant::now();
        let what = format!("{} task {}", self.name, &key.to_string()[..8]);
        let report = |done: u64, all: u64| {
            if let Some(p) = &self.progress {
                p(&what, done, all)
            }
        };
        let mut tiles = self
            .backend
            .run_with_progress(&job, &report)
            .with_context(|| format!("computing task {key}"))?;
        let corrupted = self.corrupt(&job, &mut tiles);
        let (root, uri) = self.store.publish(key.to_bytes(), job, tiles)?;
        let seconds = start.elapsed().as_secs_f64();
        self.throughput.record(&job, seconds);
        Ok(Computed {
            root,
            uri,
            record: ComputeRecord {
                task: key,
                seconds,
                work: job.work(),
                corrupted,
            },
        })
    }
}

/// What a held task needs this pass.
enum Due {
    /// Its result is stored: submit it.
    Submit(Computed),
    /// Compute it in line, then submit.
    Compute(JobSpec),
}

impl Provider {
    /// After a restart: what the store holds is served at once, nothing recomputed; returns
    /// how many results it holds.
    pub fn restore(&mut self) -> Result<usize> {
        Ok(self.ctx.store.stats().results)
    }

    /// The stored result of `job` for task `key` (a restart, or a submission that was refused
    /// or lost: never computed twice). The same job gives the same tiles, whichever task it
    /// was computed for.
    fn stored(&self, key: &Pubkey, job: &JobSpec) -> Option<Computed> {
        let e = self
            .ctx
            .store
            .entries()
            .into_iter()
            .find(|e| e.job == *job)?;
        Some(Computed {
            root: e.root,
            uri: self.ctx.store.uri(&e.root),
            record: ComputeRecord {
                task: *key,
                seconds: 0.0,
                work: job.work(),
                corrupted: 0,
            },
        })
    }

    /// Submits a stored result.
    fn submit(&self, chain: &dyn Chain, key: &Pubkey, t: &Task, c: &Computed) -> Result<bool> {
        let ix = client::submit_result(
            self.ctx.kp.pubkey(),
            *key,
            t.market,
            SubmitResultArgs {
                result_root: c.root,
                result_uri: c.uri.clone(),
            },
        );
        let ok = send(
            chain,
            &self.ctx.name,
            "submit_result",
            key,
            ix,
            &self.ctx.kp,
        )?
        .ok;
        if ok {
            tracing::info!(provider = self.ctx.name, task = %key, seconds = c.record.seconds, corrupted = c.record.corrupted, "result submitted");
        }
        Ok(ok)
    }

    /// What each held task needs now: a stored or finished result to submit, a computation
    /// to run in line, or (background) a computation started or still running.
    fn due(&mut self, now: u64, held: &[&(Pubkey, Task)]) -> Vec<(Pubkey, Task, Due)> {
        // computations of tasks no longer held (reclaimed, given up) are dropped once they
        // finish; until then they count against the provider's capacity
        let keys: std::collections::HashSet<Pubkey> = held.iter().map(|(k, _)| *k).collect();
        self.running
            .retain(|k, h| keys.contains(k) || !h.is_finished());
        let mut due = vec![];
        for (key, t) in held.iter().map(|kt| (&kt.0, &kt.1)) {
            if now > t.submit_deadline {
                // too late: reclaim_task will settle it; its result, if it ever lands, is
                // evicted like any unneeded one
                continue;
            }
            let Ok(job) = JobSpec::decode(&t.job) else {
                tracing::warn!(provider = self.ctx.name, task = %key, "malformed job spec; not computed");
                continue;
            };
            if let Some(h) = self.running.remove(key) {
                if !h.is_finished() {
                    self.running.insert(*key, h);
                    continue;
                }
                match h.join() {
                    Ok(Ok(c)) => {
                        self.records.push(c.record.clone());
                        due.push((*key, t.clone(), Due::Submit(c)));
                    }
                    Ok(Err(e)) => {
                        tracing::warn!(provider = self.ctx.name, task = %key, error = %format!("{e:#}"), "computation failed; will retry")
                    }
                    Err(_) => {
                        tracing::warn!(provider = self.ctx.name, task = %key, "computation panicked; will retry")
                    }
                }
                continue;
            }
            if let Some(c) = self.stored(key, &job) {
                due.push((*key, t.clone(), Due::Submit(c)));
            } else if self.background {
                let (w, k, t) = (self.work(), *key, t.clone());
                let h = std::thread::Builder::new()
                    .name(format!("compute-{}", &k.to_string()[..8]))
                    .spawn(move || super::guard(|| w.compute(k, &t, job)));
                match h {
                    Ok(h) => {
                        self.running.insert(*key, h);
                    }
                    Err(e) => {
                        tracing::warn!(provider = self.ctx.name, task = %key, error = %e, "cannot start a computation")
                    }
                }
            } else {
                due.push((*key, t.clone(), Due::Compute(job)));
            }
        }
        due
    }

    /// Deletes results no task needs any more (closed, reopened for another provider, given
    /// up) once [`Provider::retention`] has passed since that was first seen. `tasks` are the
    /// tasks of its market as read this pass (a result is only ever computed for one of them):
    /// a result is needed while any of them names its root, or while this provider holds a
    /// task with its job.
    pub fn evict(&mut self, tasks: &[(Pubkey, Task)]) -> Result<usize> {
        let me = self.ctx.node;
        let roots: std::collections::HashSet<Digest> =
            tasks.iter().map(|(_, t)| t.result_root).collect();
        let held: std::collections::HashSet<[u8; 64]> = tasks
            .iter()
            .filter(|(_, t)| t.status == TaskStatus::Claimed && t.provider == me)
            .map(|(_, t)| t.job)
            .collect();
        let mut evicted = 0;
        for e in self.ctx.store.entries() {
            if roots.contains(&e.root) || held.contains(&e.job.encode()) {
                self.unneeded_since.remove(&e.root);
                continue;
            }
            let since = *self
                .unneeded_since
                .entry(e.root)
                .or_insert_with(Instant::now);
            if since.elapsed() >= self.retention {
                self.ctx.store.remove(&e.root)?;
                self.unneeded_since.remove(&e.root);
                evicted += 1;
                tracing::info!(provider = self.ctx.name, root = %crate::results::hex(&e.root), "evicted a served result");
            }
        }
        Ok(evicted)
    }

    /// Whether `job`'s inputs fit, at their bound, in the room left in its content store and
    /// among the held inputs, so fetching them ahead of need evicts nothing.
    fn room_ahead(&self, job: &JobSpec) -> bool {
        use compute_market_protocol::manifest::{part_bound, roles_of, MAX_LEN};
        let Some(roles) = roles_of(job) else {
            return false;
        };
        let bytes: u64 = roles
            .iter()
            .filter_map(|r| part_bound(job, *r))
            .sum::<u64>()
            + MAX_LEN as u64;
        let c = &self.ctx.store.content;
        c.bytes().saturating_add(bytes) <= c.budget && crate::compute::inputs::room_for(job)
    }

    /// The claims of a background pass: the picks of [`plan_claims`] whose inputs are held.
    /// A pick whose inputs are not (being fetched, or failed) is replaced at once by the next
    /// ranked task that fits, so tasks whose inputs never arrive cannot hold every claim (issue
    /// 29, finding 3); a task whose input host failed to answer waits out that host's pause
    /// without a fetch of its own. The inputs of the next best-ranked open tasks are fetched
    /// ahead ([`super::prefetch`]).
    #[allow(clippy::too_many_arguments)]
    fn plan_background(
        &mut self,
        tasks: &[(Pubkey, Task)],
        ranked: &[&(Pubkey, Task)],
        node: &Node,
        held: Holding,
        now: u64,
        cap: &Capacity,
    ) -> Vec<(Pubkey, u64, usize)> {
        let paused: std::collections::HashSet<Pubkey> = ranked
            .iter()
            .filter(|(_, t)| self.source_paused(t))
            .map(|(k, _)| *k)
            .collect();
        let mut skip = paused.clone();
        let mut ready = vec![];
        // each round replaces at least one pick; a few rounds cover any `max_active`
        for _ in 0..=self.max_active.min(16) {
            let candidates: Vec<&(Pubkey, Task)> = ranked
                .iter()
                .filter(|(k, _)| !skip.contains(k))
                .copied()
                .collect();
            let picks = plan_claims(
                candidates,
                node,
                held,
                self.max_active,
                self.claim_backoff,
                now,
                cap,
            );
            let (r, waiting) = self.prefetch(tasks, picks);
            ready = r;
            if waiting.is_empty() {
                break;
            }
            skip.extend(waiting);
        }
        let rest: Vec<&(Pubkey, Task)> = ranked
            .iter()
            .filter(|(k, _)| !paused.contains(k))
            .copied()
            .collect();
        self.prefetch_ahead(&rest, held, cap);
        ready
    }

    /// Pins in the content store the inputs (manifest and parts) of the tasks it holds or has
    /// in verification: verifiers fetch them from it, so fetching the next task's inputs must
    /// never evict them (issue 29).
    fn pin_inputs(&mut self, tasks: &[(Pubkey, Task)]) {
        use compute_market_protocol::{job::InputMode, manifest::Manifest};
        let me = self.ctx.node;
        let content = &self.ctx.store.content;
        let manifests: std::collections::HashSet<Digest> = tasks
            .iter()
            .filter(|(_, t)| {
                t.provider == me && matches!(t.status, TaskStatus::Claimed | TaskStatus::Verifying)
            })
            .filter_map(|(_, t)| JobSpec::decode(&t.job).ok())
            .filter(|j| j.input_mode == InputMode::ContentHash)
            .map(|j| j.input)
            .collect();
        // a manifest is read from the store once, not every pass
        self.manifest_parts.retain(|k, _| manifests.contains(k));
        let mut keys = manifests.clone();
        for m in &manifests {
            if !self.manifest_parts.contains_key(m) {
                let Some(decoded) = content.get(m).and_then(|raw| Manifest::decode(&raw).ok())
                else {
                    continue;
                };
                self.manifest_parts
                    .insert(*m, decoded.parts.iter().map(|p| p.hash).collect());
            }
            keys.extend(self.manifest_parts[m].iter().copied());
        }
        content.pin(keys);
    }

    /// Whether `t`'s input host is in its pause after failing to answer.
    fn source_paused(&self, t: &Task) -> bool {
        input_host(t).is_some_and(|h| {
            self.source_failures
                .get(&h)
                .is_some_and(|(until, _)| Instant::now() < *until)
        })
    }

    /// Keeps what a fetch from `t`'s input host showed: a host that did not answer is paused
    /// (3 s, doubled after each failure in a row, at most 300 s); one that served is cleared.
    /// Only unavailability pauses a host: a task naming an honest host with a hash it does
    /// not hold must not delay that host's other tasks.
    fn record_source(&mut self, t: &Task, answered: bool) {
        let Some(h) = input_host(t) else { return };
        if answered {
            self.source_failures.remove(&h);
            return;
        }
        // hosts whose pause ended long ago are forgotten (the map stays as small as the
        // hosts failing now)
        let now = Instant::now();
        self.source_failures
            .retain(|_, (until, _)| now < *until + super::prefetch::RETRY_MAX);
        let count = self.source_failures.get(&h).map_or(1, |(_, n)| n + 1);
        let pause = super::prefetch::pause(super::prefetch::RETRY_UNAVAILABLE, count);
        tracing::info!(
            provider = self.ctx.name,
            host = h,
            pause_s = pause.as_secs(),
            "an input host did not answer: its tasks wait"
        );
        self.source_failures
            .insert(h, (Instant::now() + pause, count));
    }

    /// The picks whose inputs are held (claimed now), and those whose inputs are not (being
    /// fetched in the background, or failed): claimed in a later pass, once held.
    fn prefetch(
        &mut self,
        tasks: &[(Pubkey, Task)],
        picks: Vec<(Pubkey, u64, usize)>,
    ) -> (Vec<(Pubkey, u64, usize)>, Vec<Pubkey>) {
        let (mut ready, mut waiting) = (vec![], vec![]);
        for (key, bond, load) in picks {
            let Some((_, t)) = tasks.iter().find(|(k, _)| *k == key) else {
                continue;
            };
            let Ok(job) = JobSpec::decode(&t.job) else {
                continue;
            };
            let (w, k, task) = (self.work(), key, t.clone());
            match self
                .prefetcher
                .ready(&job, false, move || w.fetch_inputs(&k, &task))
            {
                Ready::Held => {
                    self.input_failures.remove(&key);
                    if job.input_mode == compute_market_protocol::job::InputMode::ContentHash {
                        self.record_source(t, true);
                    }
                    ready.push((key, bond, load))
                }
                Ready::Fetching => {
                    tracing::debug!(provider = self.ctx.name, task = %key, "inputs being fetched; claimed once held");
                    waiting.push(key);
                }
                Ready::Failed(why) => {
                    tracing::debug!(provider = self.ctx.name, task = %key, why, "inputs not held; not claimed");
                    self.input_failures.insert(key, why.clone());
                    if self.prefetcher.failed_transiently(&job) {
                        self.record_source(t, false);
                    }
                    waiting.push(key);
                }
            }
        }
        (ready, waiting)
    }

    /// Starts fetching the inputs of the next best-ranked open tasks that would fit this
    /// provider on their own, into room only, so they are held when it has room to claim them.
    fn prefetch_ahead(&mut self, ranked: &[&(Pubkey, Task)], held: Holding, cap: &Capacity) {
        let alone = Holding {
            disk: held.disk,
            ..Holding::default()
        };
        let next: Vec<(&(Pubkey, Task), JobSpec)> = ranked
            .iter()
            .filter_map(|&kt| Some((kt, JobSpec::decode(&kt.1.job).ok()?)))
            .filter(|((_, t), j)| {
                j.input_mode == compute_market_protocol::job::InputMode::ContentHash
                    && refusal(t, j, &alone, cap).is_none()
            })
            .take(self.max_active)
            .collect();
        for ((key, t), job) in next {
            // ahead of need only into room: never evicting the inputs of tasks it holds
            if !self.room_ahead(&job) {
                continue;
            }
            let (w, k, task) = (self.work(), *key, t.clone());
            let _ = self
                .prefetcher
                .ready(&job, true, move || w.fetch_inputs(&k, &task));
        }
    }

    /// One pass: submit what it holds (starting or finishing computations), then claim what
    /// it can (up to `parallel` transactions in flight at once), then evict what no task needs.
    pub fn step(&mut self, chain: &dyn Chain) -> Result<()> {
        let now = chain.slot()?;
        let tasks = chain.tasks_of(&self.ctx.market)?;
        self.step_with(chain, now, &tasks)
    }

    /// What it still owes on `tasks` (read at `now`), so that a keeper asked to stop keeps
    /// running until this is empty (docs/PROTOCOL.md §3.8): a claimed task not yet submitted
    /// (else it is reclaimed with a late slash), a result being verified (served until the
    /// verdict, else withheld), and a held verdict of its result while a dispute or an
    /// availability challenge may still be opened or is open (answered, else lost).
    pub fn owed(&self, now: u64, tasks: &[(Pubkey, Task)]) -> Vec<super::Owed> {
        let me = self.ctx.node;
        let mut out: Vec<super::Owed> = tasks
            .iter()
            .filter(|(_, t)| t.provider == me)
            .filter_map(|(k, t)| {
                let what = match t.status {
                    // past its deadline it can no longer submit: the late slash is done
                    TaskStatus::Claimed if now > t.submit_deadline => return None,
                    TaskStatus::Claimed => "claimed, its result not yet submitted",
                    TaskStatus::Verifying => "its result being verified",
                    _ if t.held && (t.disputes_open > 0 || t.challenges_open > 0) => {
                        "a dispute or availability challenge of its result open"
                    }
                    _ if t.held && now <= t.dispute_deadline => "in its dispute window",
                    _ => return None,
                };
                Some(super::Owed { task: *k, what })
            })
            .collect();
        // a computation under way is for a claim that landed, even if the tasks read do not
        // show it yet (an RPC node behind the one that confirmed the claim)
        for k in self.running.keys() {
            if !out.iter().any(|o| o.task == *k) {
                out.push(super::Owed {
                    task: *k,
                    what: "its computation running",
                });
            }
        }
        out
    }

    /// [`Provider::step`] over tasks already read (the daemon reads them once per pass).
    pub fn step_with(
        &mut self,
        chain: &dyn Chain,
        now: u64,
        tasks: &[(Pubkey, Task)],
    ) -> Result<()> {
        let me = self.ctx.node;
        self.pin_inputs(tasks);
        let held: Vec<&(Pubkey, Task)> = tasks
            .iter()
            .filter(|(_, t)| t.status == TaskStatus::Claimed && t.provider == me)
            .collect();
        let mut load = held.len();
        let mut memory_held: u64 = held.iter().map(|(_, t)| job_memory(t)).sum();
        let mut seconds_held: f64 = held
            .iter()
            .filter_map(|(_, t)| JobSpec::decode(&t.job).ok())
            .map(|j| self.throughput.seconds(&j))
            .filter(|s| s.is_finite())
            .sum();
        // its results being verified go ahead of bulk transfers until their commit deadline
        for (_, t) in tasks
            .iter()
            .filter(|(_, t)| t.status == TaskStatus::Verifying && t.provider == me)
        {
            let left = t.commit_deadline.saturating_sub(now) as f64 * SLOT_SECONDS;
            self.ctx.store.set_hot(
                t.result_root,
                Instant::now() + std::time::Duration::from_secs_f64(left + SLOT_SECONDS),
            );
        }
        let due = self.due(now, &held);
        // computations still running for tasks it no longer holds take their share too
        load += self
            .running
            .keys()
            .filter(|k| !held.iter().any(|(h, _)| h == *k))
            .count();
        let done = super::parallel(self.ctx.parallel, due, |(key, t, due)| {
            let r = super::guard(|| {
                let (c, computed) = match due {
                    Due::Submit(c) => (c, false),
                    Due::Compute(job) => (self.work().compute(key, &t, job)?, true),
                };
                Ok((
                    self.submit(chain, &key, &t, &c)?,
                    computed.then_some(c.record),
                ))
            });
            (key, r, t)
        });
        for (key, r, t) in done {
            match r {
                Ok((submitted, record)) => {
                    self.records.extend(record);
                    if submitted {
                        load -= 1;
                        memory_held -= job_memory(&t);
                        if let Ok(j) = JobSpec::decode(&t.job) {
                            let s = self.throughput.seconds(&j);
                            if s.is_finite() {
                                seconds_held = (seconds_held - s).max(0.0);
                            }
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(provider = self.ctx.name, task = %key, error = %format!("{e:#}"), "will retry")
                }
            }
        }
        self.dispute_rejections(chain, now, tasks);
        // its held results whose availability is challenged, or rejected as withheld: published
        // on chain (PROTOCOL §8.11)
        for (key, t) in tasks {
            let withheld = t.tally().majority == compute_market_protocol::commit::VERDICT_WITHHELD;
            if t.held && t.provider == me && (t.challenges_open > 0 || (withheld && t.contest == 0))
            {
                if let Err(e) =
                    super::guard(|| super::availability::answer(chain, &self.ctx, now, key, t))
                {
                    tracing::warn!(provider = self.ctx.name, task = %key, error = %format!("{e:#}"), "could not answer an availability challenge; will retry");
                }
            }
        }
        if let Err(e) = super::availability::close_ended(chain, &self.ctx.name, &self.ctx.kp) {
            tracing::debug!(provider = self.ctx.name, error = %format!("{e:#}"), "closing ended availability accounts");
        }
        // its Accepted results against game claims its own trace finds wrong (PROTOCOL §8.10)
        for (key, t) in tasks {
            if t.held && t.provider == self.ctx.node && t.disputes_open > 0 {
                let data = || self.disputes.inputs_of(chain, &self.ctx, key);
                super::games::defend_claims(chain, &self.ctx, &data, key, t);
            }
        }
        if self.draining.load(std::sync::atomic::Ordering::SeqCst) {
            self.claimable = 0;
            // its rounds that ended by their deadline are finalized here rather than waited
            // on: the release's crankers may have drained already (docs/PROTOCOL.md §3.8)
            for (key, t) in tasks {
                if t.provider == me && t.status == TaskStatus::Verifying && now > t.reveal_deadline
                {
                    let ix = client::finalize_task(*key, t.provider, t.market);
                    if let Err(e) = send(
                        chain,
                        &self.ctx.name,
                        "finalize_task",
                        key,
                        ix,
                        &self.ctx.kp,
                    ) {
                        tracing::debug!(provider = self.ctx.name, task = %key, error = %format!("{e:#}"), "finalizing its own task while draining");
                    }
                }
            }
            return Ok(());
        }
        let Some(node) = chain.node(&self.ctx.node)? else {
            return Ok(());
        };
        if let Err(e) = self.throughput.measure(self.ctx.backend.as_ref()) {
            tracing::warn!(provider = self.ctx.name, error = %format!("{e:#}"), "cannot measure the backend; claiming nothing");
            return Ok(());
        }
        // the store's room, less what the held tasks not yet stored will take
        let stats = self.ctx.store.stats();
        let pending: u64 = tasks
            .iter()
            .filter(|(_, t)| t.status == TaskStatus::Claimed && t.provider == me)
            .filter_map(|(k, t)| Some((k, JobSpec::decode(&t.job).ok()?)))
            .filter(|(k, j)| self.stored(k, j).is_none())
            .map(|(_, j)| file_len(&j))
            .sum();
        let held = Holding {
            load,
            memory: memory_held,
            seconds: seconds_held,
            disk: stats
                .budget
                .saturating_sub(stats.bytes)
                .saturating_sub(pending),
        };
        let memory = node_memory(&node, self.ctx.backend.as_ref());
        let (throughput, policy) = (self.throughput.clone(), self.policy.clone());
        let cap = Capacity {
            memory,
            throughput: &throughput,
            policy: &policy,
        };
        let ranked = rank_open(tasks, &self.ctx.market, &node, memory, now);
        self.claimable = ranked.len();
        let picks = if self.background {
            self.plan_background(tasks, &ranked, &node, held, now, &cap)
        } else {
            let mut picks = plan_claims(
                ranked.clone(),
                &node,
                held,
                self.max_active,
                self.claim_backoff,
                now,
                &cap,
            );
            // in line, in order; a failure still waits its pause
            picks.retain(|(key, _, _)| {
                let Some((_, t)) = tasks.iter().find(|(k, _)| k == key) else {
                    return false;
                };
                let Ok(job) = JobSpec::decode(&t.job) else {
                    return true;
                };
                let w = self.work();
                self.prefetcher.ready_now(&job, || w.fetch_inputs(key, t)) == Ready::Held
            });
            picks
        };
        let claims = super::parallel(self.ctx.parallel, picks, |(key, bond, load)| {
            // never bond stake on data it cannot get: a job on the client's data is claimed
            // only once its inputs are fetched, hashed and checked here (in the background
            // pass the prefetcher has done it and this finds them held)
            if let Some((_, t)) = tasks.iter().find(|(k, _)| *k == key) {
                let held =
                    JobSpec::decode(&t.job).is_ok_and(|j| crate::compute::inputs::is_held(&j));
                // held since the prefetch, or fetched now in line (the in-order demo); in the
                // background pass a pick whose inputs were evicted meanwhile waits for the
                // prefetcher again rather than fetching in the claim pass
                let r = if held || !self.background {
                    self.work().inputs(&key, t)
                } else {
                    Err(anyhow::anyhow!(
                        "its inputs are no longer held; fetching them again"
                    ))
                };
                if let Err(e) = r {
                    return (key, bond, load, Err(e));
                }
            }
            let r = send(
                chain,
                &self.ctx.name,
                "claim_task",
                &key,
                client::claim_task(self.ctx.kp.pubkey(), key),
                &self.ctx.kp,
            );
            (key, bond, load, r)
        });
        let mut claimed = std::collections::HashSet::new();
        for (key, bond, load, r) in claims {
            match r {
                Ok(r) if r.ok => {
                    claimed.insert(key);
                    tracing::info!(provider = self.ctx.name, task = %key, bond, load, "claimed")
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(provider = self.ctx.name, task = %key, error = %format!("{e:#}"), "not claimed; will retry")
                }
            }
        }
        // what it holds after this pass's claims, so that their load is not reported one
        // pass late
        let (mut after, mut node_after) = (held, node.clone());
        for (_, t) in tasks.iter().filter(|(k, _)| claimed.contains(k)) {
            let Ok(job) = JobSpec::decode(&t.job) else {
                continue;
            };
            node_after.free = node_after.free.saturating_sub(t.provider_bond);
            after = Holding {
                load: after.load + 1,
                memory: after.memory + job.memory_bytes(),
                seconds: after.seconds + cap.throughput.seconds(&job),
                disk: after.disk.saturating_sub(file_len(&job)),
            };
        }
        self.note_skips(tasks, &node_after, now, after, stats.budget, &cap, &claimed);
        if let Err(e) = self.evict(tasks) {
            tracing::warn!(provider = self.ctx.name, error = %format!("{e:#}"), "eviction will be retried");
        }
        Ok(())
    }

    /// Why it does not claim `t` (`key`), an open task of its market: first the reasons it
    /// never would (its job; its bond beyond its whole stake; [`refusal`] with nothing held and
    /// its store empty), then its inputs failing, then its load (its bonds, memory, window or
    /// store taken by the tasks it holds: Busy). `None`: it claims it once its turn comes
    /// (back-off, inputs being fetched).
    fn skip_of(
        &self,
        key: &Pubkey,
        t: &Task,
        node: &Node,
        held: Holding,
        budget: u64,
        cap: &Capacity,
    ) -> Option<Skip> {
        let Ok(job) = JobSpec::decode(&t.job) else {
            return Some(Skip::new(SkipReason::Job, "its job spec does not decode"));
        };
        if t.provider_bond > node.stake() {
            return Some(Skip::new(
                SkipReason::Stake,
                format!(
                    "its bond of {} is more than this provider's stake of {}",
                    t.provider_bond,
                    node.stake()
                ),
            ));
        }
        let alone = Holding {
            disk: budget,
            ..Holding::default()
        };
        if let Some(s) = refusal(t, &job, &alone, cap) {
            return Some(s);
        }
        if let Some(why) = self.input_failures.get(key) {
            return Some(Skip::new(SkipReason::Inputs, format!("its inputs: {why}")));
        }
        if held.load >= self.max_active {
            return Some(Skip::new(
                SkipReason::Busy,
                format!("it holds {} tasks, the most it takes at once", held.load),
            ));
        }
        if t.provider_bond > node.free {
            return Some(Skip::new(
                SkipReason::Busy,
                format!(
                    "its bond of {} is more than the {} of its stake not bonded to the tasks \
                     it holds",
                    t.provider_bond, node.free
                ),
            ));
        }
        refusal(t, &job, &held, cap).map(|s| {
            Skip::new(
                SkipReason::Busy,
                format!("with the {} tasks it holds: {}", held.load, s.detail),
            )
        })
    }

    /// Keeps why it skips each open task of its market it did not claim: a task skipped for
    /// a new reason is counted (`keeper_claims_skipped_total{reason}`) and logged once — at
    /// info, or at debug when it only waits for room (Busy) — and its reason is kept until it
    /// leaves Open or gets another one (a pass where it only waits its turn changes nothing).
    /// The reasons are listed on its card ([`crate::card`], served at `/provider`), with its
    /// rates and policy.
    #[allow(clippy::too_many_arguments)]
    fn note_skips(
        &mut self,
        tasks: &[(Pubkey, Task)],
        node: &Node,
        now: u64,
        held: Holding,
        budget: u64,
        cap: &Capacity,
        claimed: &std::collections::HashSet<Pubkey>,
    ) {
        let open: std::collections::HashSet<Pubkey> = tasks
            .iter()
            .filter(|(k, t)| {
                t.status == TaskStatus::Open
                    && t.market == self.ctx.market
                    && now <= t.open_deadline
                    && !claimed.contains(k)
            })
            .map(|(k, _)| *k)
            .collect();
        self.skips.retain(|k, _| open.contains(k));
        self.input_failures.retain(|k, _| open.contains(k));
        for (key, t) in tasks.iter().filter(|(k, _)| open.contains(k)) {
            let Some(skip) = self.skip_of(key, t, node, held, budget, cap) else {
                continue;
            };
            if self
                .skips
                .get(key)
                .is_some_and(|(old, _)| old.reason == skip.reason)
            {
                continue;
            }
            if skip.reason == SkipReason::Busy {
                tracing::debug!(provider = self.ctx.name, task = %key, reason = skip.reason.label(), why = skip.detail, "not claiming");
            } else {
                tracing::info!(provider = self.ctx.name, task = %key, reason = skip.reason.label(), why = skip.detail, "not claiming");
            }
            if let Some(m) = self.ctx.store.metrics.get() {
                m.claim_skipped(skip.reason);
            }
            self.skips.insert(*key, (skip, now));
        }
        let mut skipped: Vec<crate::card::Skipped> = self
            .skips
            .iter()
            .map(|(k, (skip, since))| crate::card::Skipped {
                task: k.to_string(),
                skip: skip.clone(),
                since_slot: *since,
            })
            .collect();
        skipped.sort_by(|a, b| b.since_slot.cmp(&a.since_slot).then(a.task.cmp(&b.task)));
        crate::card::bound_skips(&mut skipped);
        let p = cap.policy;
        self.ctx.store.set_card(crate::card::Card {
            node: self.ctx.node.to_string(),
            rates: cap
                .throughput
                .all()
                .into_iter()
                .map(|(k, r)| (format!("{k:?}"), r))
                .collect(),
            memory_bytes: cap.memory,
            disk_bytes: budget,
            policy: crate::card::CardPolicy {
                min_reward_per_gwork: p.min_reward_per_gwork,
                min_quorum: p.min_quorum,
                min_samples: p.min_samples,
                margin: p.margin,
                slot_seconds: p.slot_seconds,
            },
            load: held.load,
            max_active: self.max_active,
            skipped,
        });
    }
}

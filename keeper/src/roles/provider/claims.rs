//! The claim rule: which open tasks a provider takes and why it leaves the others — its
//! measured speed ([`Throughput`]), its policy ([`ClaimPolicy`]), what it holds ([`Holding`])
//! and can hold ([`Capacity`]): [`rank_open`] orders the candidates, [`refusal`] says why one
//! is not taken, [`plan_claims`] picks a pass's claims. Clients judge a job by the same rule
//! on a provider's card ([`crate::outlook`]).

use std::{collections::HashMap, sync::Mutex, time::Instant};

use anchor_lang::prelude::Pubkey;
use anyhow::Result;
use compute_market::state::{Node, Task, TaskStatus};
use compute_market_protocol::{
    job::{JobKind, JobSpec},
    region,
};

use crate::{
    card::{Skip, SkipReason},
    compute::Backend,
    results::store::file_len,
};

/// Seconds per slot assumed when a window in slots is turned into time (Solana's 400 ms).
pub const SLOT_SECONDS: f64 = 0.4;

/// A claim must be expected to finish within this fraction of its submit window.
pub const WINDOW_MARGIN: f64 = 0.5;

/// A provider's own speed, work units per second per job kind: measured on a small job of
/// each kind when first needed, then kept as a running figure from the jobs it computes. Text
/// generation's per decoder shape too: the integer kernels' speed depends on a model's shapes
/// (widths, heads, layers, vocabulary), never on its weights, and one shape's figure would
/// misjudge another's.
#[derive(Default)]
pub struct Throughput {
    rates: Mutex<HashMap<JobKind, f64>>,
    decoders: Mutex<HashMap<DecoderShape, f64>>,
}

/// A decoder's shape: layers, width, feed-forward, heads, key/value heads, head width,
/// vocabulary.
pub type DecoderShape = [usize; 7];

/// The shape of the decoder a `Generate` job's held inputs hold.
fn decoder_shape(job: &JobSpec) -> Option<DecoderShape> {
    let g = crate::compute::inputs::generate(job).ok()?;
    let d = &g.model.decoder;
    Some([
        d.layers.len(),
        d.width,
        d.ffn(),
        d.heads,
        d.kv_heads,
        d.head_dim,
        d.vocab(),
    ])
}

/// A running mean weighting the newest figure by 1/4.
fn folded(old: Option<f64>, seen: f64) -> f64 {
    old.map_or(seen, |old| 0.75 * old + 0.25 * seen)
}

impl Throughput {
    /// Work units per second for `kind`, when known.
    pub fn rate(&self, kind: JobKind) -> Option<f64> {
        self.rates.lock().expect("rates lock").get(&kind).copied()
    }

    /// Every rate known, by kind.
    pub fn all(&self) -> Vec<(JobKind, f64)> {
        let r = self.rates.lock().expect("rates lock");
        let mut v: Vec<(JobKind, f64)> = r.iter().map(|(k, r)| (*k, *r)).collect();
        v.sort_by_key(|(k, _)| *k as u8);
        v
    }

    /// Sets the rate of `kind`.
    pub fn set(&self, kind: JobKind, rate: f64) {
        self.rates.lock().expect("rates lock").insert(kind, rate);
    }

    /// Folds a computed job in (a running mean weighting the newest job by 1/4): into its
    /// kind's figure, and a `Generate` job's into its decoder shape's too.
    pub fn record(&self, job: &JobSpec, seconds: f64) {
        let work = job.work();
        if seconds <= 0.0 || work == 0 {
            return;
        }
        let seen = work as f64 / seconds;
        if job.kind == JobKind::Generate {
            if let Some(shape) = decoder_shape(job) {
                let mut d = self.decoders.lock().expect("decoder rates lock");
                let rate = folded(d.get(&shape).copied(), seen);
                d.insert(shape, rate);
            }
        }
        let mut r = self.rates.lock().expect("rates lock");
        let rate = folded(r.get(&job.kind).copied(), seen);
        r.insert(job.kind, rate);
    }

    /// The generation rate of decoders of `shape`, when known.
    pub fn decoder_rate(&self, shape: &DecoderShape) -> Option<f64> {
        self.decoders
            .lock()
            .expect("decoder rates lock")
            .get(shape)
            .copied()
    }

    /// Measures `backend` on a small job of every kind whose rate is unknown (tens of ms).
    pub fn measure(&self, backend: &dyn Backend) -> Result<()> {
        for job in [
            JobSpec::matmul(256, 256, 256, [7; 32]),
            JobSpec::hash_batch(64, 64, 16, [7; 32]),
        ] {
            if self.rate(job.kind).is_some() {
                continue;
            }
            // once to warm up (kernels compiled, caches filled), once measured
            backend.run(&job)?;
            let t = Instant::now();
            backend.run(&job)?;
            self.set(
                job.kind,
                job.work() as f64 / t.elapsed().as_secs_f64().max(1e-6),
            );
        }
        if self.rate(JobKind::Encoder).is_none() {
            // likewise the encoder: a synthetic one-block encoder over 8 texts of 32 tokens
            let (work, seconds) = crate::compute::encoder::synthetic_run(8);
            self.set(JobKind::Encoder, work as f64 / seconds.max(1e-6));
        }
        if self.rate(JobKind::Mlp).is_none() {
            // every backend runs the integer MLP on the CPU path: a synthetic 256-wide model
            let (rows, work) = (512, crate::compute::mlp::synthetic_work());
            let t = Instant::now();
            crate::compute::mlp::synthetic_run(rows);
            self.set(
                JobKind::Mlp,
                (rows as u64 * work) as f64 / t.elapsed().as_secs_f64().max(1e-6),
            );
        }
        Ok(())
    }

    /// Measures text generation on the decoder of `job`, once its inputs are held (a provider
    /// claims a job on the client's data only then): its first prompt and 4 tokens after it,
    /// counted as a job of that shape is ([`JobSpec::work`]: the decode steps at their floor).
    /// The figure is its decoder shape's (and the kind's, for reports).
    fn measure_generate(&self, job: &JobSpec) {
        let (Ok(g), Some(shape)) = (crate::compute::inputs::generate(job), decoder_shape(job))
        else {
            return;
        };
        // at most 64 of its first prompt's tokens: a client's long prompt never slows the pass
        let first = &g.prompts.ids[0];
        let (prompt, new) = (&first[..first.len().min(64)], 4u32);
        let probe = JobSpec {
            dims: [1, prompt.len() as u32, new],
            work_per_row: g.model.work_per_token(prompt.len() + new as usize),
            ..*job
        };
        let t = Instant::now();
        // a model that breaks on its own prompt is that job's failure, never the claim pass's
        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            crate::compute::decoder::generate(&g.model, prompt, new as usize)
        }));
        if ran.is_err() {
            tracing::warn!("measuring generation on a job's model failed: its speed stays unknown");
            return;
        }
        let rate = probe.work() as f64 / t.elapsed().as_secs_f64().max(1e-6);
        self.decoders
            .lock()
            .expect("decoder rates lock")
            .insert(shape, rate);
        if self.rate(JobKind::Generate).is_none() {
            self.set(JobKind::Generate, rate);
        }
    }

    /// Expected seconds to compute `job` (infinite when its kind was never measured). Text
    /// generation is judged by its decoder shape's rate, measured on the job's own model once
    /// its inputs are held: until then its time is not judged (0), so that they are fetched;
    /// the claim, made only once they are held, is judged on the measured rate.
    pub fn seconds(&self, job: &JobSpec) -> f64 {
        if job.kind == JobKind::Generate {
            let Some(shape) = decoder_shape(job) else {
                return 0.0;
            };
            if self.decoder_rate(&shape).is_none() {
                self.measure_generate(job);
            }
            return match self.decoder_rate(&shape) {
                Some(r) if r > 0.0 => job.work() as f64 / r,
                Some(_) => f64::INFINITY,
                None => 0.0,
            };
        }
        match self.rate(job.kind) {
            Some(r) if r > 0.0 => job.work() as f64 / r,
            _ => f64::INFINITY,
        }
    }
}

/// The least quorum a provider claims by default (`keeper run --min-quorum`), the protocol's
/// default market minimum.
pub const MIN_QUORUM_ACCEPTED: u8 = compute_market::constants::DEFAULT_MIN_QUORUM;

/// What a provider agrees to claim besides bond and memory.
#[derive(Clone, Debug)]
pub struct ClaimPolicy {
    /// Least reward per 10^9 work units, token base units (0: any reward).
    pub min_reward_per_gwork: u64,
    /// Least quorum V a task may have to be claimed ([`MIN_QUORUM_ACCEPTED`]): with fewer
    /// seats, a client's own second wallet could hold the seat that rejects an honest result
    /// and takes the bond.
    pub min_quorum: u8,
    /// Least samples k a task may have to be claimed.
    pub min_samples: u16,
    /// Seconds per slot ([`SLOT_SECONDS`]).
    pub slot_seconds: f64,
    /// Fraction of the submit window a claim may be expected to take ([`WINDOW_MARGIN`]).
    pub margin: f64,
}

impl Default for ClaimPolicy {
    fn default() -> Self {
        ClaimPolicy {
            min_reward_per_gwork: 0,
            min_quorum: MIN_QUORUM_ACCEPTED,
            min_samples: 1,
            slot_seconds: SLOT_SECONDS,
            margin: WINDOW_MARGIN,
        }
    }
}

/// Open tasks of `market` that a provider with `node`'s stake and hardware can claim at `now`,
/// in the order it should try them: nearest region first ([`region::distance`]), then the
/// oldest, then the best paid. Tasks whose bond exceeds its free stake or whose job does not
/// fit `memory` bytes are left out.
pub fn rank_open<'a>(
    tasks: &'a [(Pubkey, Task)],
    market: &Pubkey,
    node: &Node,
    memory: u64,
    now: u64,
) -> Vec<&'a (Pubkey, Task)> {
    let mut open: Vec<&(Pubkey, Task)> = tasks
        .iter()
        .filter(|(_, t)| {
            t.status == TaskStatus::Open
                && t.market == *market
                && now <= t.open_deadline
                && t.provider_bond <= node.free
        })
        .filter(|(_, t)| JobSpec::decode(&t.job).is_ok_and(|j| j.memory_bytes() <= memory))
        .collect();
    open.sort_by_key(|(_, t)| {
        (
            region::distance(t.region, node.hardware.region),
            t.posted_slot,
            u64::MAX - t.reward,
        )
    });
    open
}

/// What a provider holds when it plans its claims: tasks claimed and not yet submitted, the
/// memory their jobs need together, the seconds they take together on this node, and the
/// disk its result store has left.
#[derive(Clone, Copy, Debug, Default)]
pub struct Holding {
    /// Tasks held.
    pub load: usize,
    /// Bytes their jobs need at once.
    pub memory: u64,
    /// Expected seconds to compute them all (they share the device).
    pub seconds: f64,
    /// Bytes the result store may still take.
    pub disk: u64,
}

/// What limits a provider's claims besides its stake: its memory (declared, or measured when
/// undeclared), its speed, its reward floor.
pub struct Capacity<'a> {
    /// Bytes it computes in.
    pub memory: u64,
    /// Its speed.
    pub throughput: &'a Throughput,
    /// Its reward floor and window margin.
    pub policy: &'a ClaimPolicy,
}

/// Why a task is not claimed (for logs, the card and tests); `None`: it can be. With nothing
/// held, the reasons it is never claimed by this provider; with its holdings, also the reasons
/// it waits for room.
pub fn refusal(t: &Task, job: &JobSpec, held: &Holding, cap: &Capacity) -> Option<Skip> {
    let window = f64::from(t.windows.submit) * cap.policy.slot_seconds * cap.policy.margin;
    let seconds = cap.throughput.seconds(job);
    if held.seconds + seconds > window {
        return Some(Skip::new(
            SkipReason::Window,
            format!(
            "expected {seconds:.1} s (plus {:.1} s held) exceeds {:.0}% of its {:.0} s submit window",
            held.seconds,
            cap.policy.margin * 100.0,
            f64::from(t.windows.submit) * cap.policy.slot_seconds
        ),
        ));
    }
    if held.memory + job.memory_bytes() > cap.memory {
        return Some(Skip::new(
            SkipReason::Memory,
            format!(
                "needs {} MiB with {} MiB held, {} MiB available",
                job.memory_bytes() >> 20,
                held.memory >> 20,
                cap.memory >> 20
            ),
        ));
    }
    if file_len(job) > held.disk {
        return Some(Skip::new(
            SkipReason::Disk,
            format!(
                "its result takes {} MiB, the store has {} MiB left",
                file_len(job) >> 20,
                held.disk >> 20
            ),
        ));
    }
    if t.quorum < cap.policy.min_quorum {
        return Some(Skip::new(
            SkipReason::Quorum,
            format!(
            "it asks for a quorum of {}, below the {} this provider accepts (--min-quorum): too \
             few seats to keep one wallet from rejecting an honest result",
            t.quorum, cap.policy.min_quorum
        ),
        ));
    }
    if t.samples < cap.policy.min_samples {
        return Some(Skip::new(
            SkipReason::Samples,
            format!(
            "its verifiers check {} samples each, below the {} this provider accepts (--min-samples)",
            t.samples, cap.policy.min_samples
        ),
        ));
    }
    let floor = u128::from(cap.policy.min_reward_per_gwork) * u128::from(job.work());
    if u128::from(t.reward) * 1_000_000_000 < floor {
        return Some(Skip::new(
            SkipReason::Reward,
            format!(
                "pays {} for {} work units, below the floor of {} per 10^9",
                t.reward,
                job.work(),
                cap.policy.min_reward_per_gwork
            ),
        ));
    }
    None
}

/// The claims to send this pass, from `ranked` ([`rank_open`]'s order): each with its bond and
/// the load it brings the provider to. A task is taken when the provider holds fewer than
/// `max_active`, its free stake covers the bond, the held jobs plus this one fit its memory
/// and its disk and are expected to finish within the margin of the submit window (held jobs
/// are computed side by side), it pays at least the floor, and — least-loaded first — at
/// least `load · backoff` slots have passed since it was posted.
pub fn plan_claims(
    ranked: Vec<&(Pubkey, Task)>,
    node: &Node,
    held: Holding,
    max_active: usize,
    backoff: u64,
    now: u64,
    cap: &Capacity,
) -> Vec<(Pubkey, u64, usize)> {
    let (mut free, mut held) = (node.free, held);
    let mut picks = vec![];
    for (key, t) in ranked {
        if held.load >= max_active {
            break;
        }
        let Ok(job) = JobSpec::decode(&t.job) else {
            continue;
        };
        if t.provider_bond > free || now < t.posted_slot.saturating_add(held.load as u64 * backoff)
        {
            continue;
        }
        if let Some(why) = refusal(t, &job, &held, cap) {
            tracing::debug!(task = %key, why = why.detail, "not claimed");
            continue;
        }
        free -= t.provider_bond;
        held = Holding {
            load: held.load + 1,
            memory: held.memory + job.memory_bytes(),
            seconds: held.seconds + cap.throughput.seconds(&job),
            disk: held.disk - file_len(&job),
        };
        picks.push((*key, t.provider_bond, held.load));
    }
    picks
}

/// The memory a node may compute in: what it declared, or — undeclared — three quarters of
/// what its backend has.
pub fn node_memory(node: &Node, backend: &dyn Backend) -> u64 {
    match u64::from(node.hardware.memory_gb) << 30 {
        0 => backend.memory_bytes() / 4 * 3,
        declared => declared,
    }
}

#[cfg(test)]
mod tests {
    use anchor_lang::{AccountDeserialize, Discriminator, Space};

    use super::*;

    /// An account with every field zero (what borsh reads from zero bytes), to fill in.
    fn blank<T: AccountDeserialize + Discriminator + Space>() -> T {
        let mut bytes = T::DISCRIMINATOR.to_vec();
        bytes.resize(8 + T::INIT_SPACE, 0);
        T::try_deserialize(&mut bytes.as_slice()).expect("zeroed account decodes")
    }

    fn task(
        id: u8,
        market: Pubkey,
        region: u16,
        posted: u64,
        reward: u64,
        job: JobSpec,
    ) -> (Pubkey, Task) {
        let mut t: Task = blank();
        (t.market, t.region, t.posted_slot, t.reward, t.job) =
            (market, region, posted, reward, job.encode());
        t.status = TaskStatus::Open;
        t.open_deadline = 1_000;
        t.provider_bond = 10;
        t.windows.submit = 300;
        (t.quorum, t.samples) = (3, 16);
        (Pubkey::new_from_array([id; 32]), t)
    }

    #[test]
    fn nearest_region_first_then_oldest_then_best_paid_and_only_what_fits() {
        let market = Pubkey::new_unique();
        let small = JobSpec::matmul(64, 64, 64, [1; 32]);
        let big = JobSpec::hash_batch(65_536, 4_096, 1, [1; 32]); // 8 GiB of outputs
        assert_eq!(big.memory_bytes(), 8 << 30);
        let mut node: Node = blank();
        node.free = 100;
        node.hardware.region = 301;
        let mut other_market = task(9, market, 301, 1, 5, small);
        other_market.1.market = Pubkey::new_unique();
        let mut claimed = task(10, market, 301, 1, 5, small);
        claimed.1.status = TaskStatus::Claimed;
        let mut expired = task(11, market, 301, 1, 5, small);
        expired.1.open_deadline = 5;
        let mut too_big_bond = task(12, market, 301, 1, 5, small);
        too_big_bond.1.provider_bond = 101;
        let tasks = vec![
            task(1, market, 101, 1, 5, small), // other continent
            task(2, market, 0, 3, 5, small),   // any region, newer
            task(3, market, 0, 2, 5, small),   // any region, older
            task(4, market, 302, 1, 5, small), // same continent
            task(5, market, 301, 4, 5, small), // same region
            task(6, market, 301, 4, 9, big),   // same region, as old, better paid, 8 GiB
            other_market,
            claimed,
            expired,
            too_big_bond,
        ];
        let order = |node: &Node| {
            let memory = match u64::from(node.hardware.memory_gb) << 30 {
                0 => u64::MAX,
                m => m,
            };
            rank_open(&tasks, &market, node, memory, 10)
                .iter()
                .map(|(k, _)| k.to_bytes()[0])
                .collect::<Vec<_>>()
        };
        // memory undeclared (0): what the backend has (here: no limit)
        assert_eq!(order(&node), vec![6, 5, 3, 2, 4, 1]);
        node.hardware.memory_gb = 8;
        assert_eq!(
            order(&node),
            vec![6, 5, 3, 2, 4, 1],
            "8 GiB fits in 8 GB declared"
        );
        node.hardware.memory_gb = 7;
        assert_eq!(
            order(&node),
            vec![5, 3, 2, 4, 1],
            "the 8 GiB job does not fit in 7"
        );
        node.hardware.region = 0;
        assert_eq!(
            order(&node),
            vec![3, 2, 1, 4, 5],
            "an undeclared node: any-region tasks first, then oldest"
        );
    }

    /// A `Generate` job's time is judged by its own decoder shape's rate: unjudged until its
    /// inputs are held, then measured on its model; a slow run of one shape leaves another's
    /// figure as it was.
    #[test]
    fn generation_is_judged_by_its_own_decoder_shapes_rate() {
        use crate::compute::decoder::{job, random};
        use crate::compute::inputs::{hold_generate, release};
        let t = Throughput::default();
        let jobs: Vec<JobSpec> = random::ODD_SHAPES
            .iter()
            .enumerate()
            .map(|(i, &shape)| {
                let model = random::random_model(shape, 3);
                let manifest = [0x90 + i as u8; 32];
                let spec = JobSpec::generate(2, 4, 6, model.work_per_token(10), 1, manifest);
                hold_generate(
                    manifest,
                    job::GenerateInputs {
                        model: std::sync::Arc::new(model),
                        prompts: std::sync::Arc::new(job::Prompts {
                            texts: vec![String::new(); 2],
                            ids: vec![vec![1, 2, 3], vec![4, 5]],
                            sampling: compute_market_protocol::decoder::Sampling::GREEDY,
                        }),
                    },
                );
                spec
            })
            .collect();
        let unheld = JobSpec::generate(2, 4, 6, 1_000, 1, [0x77; 32]);
        assert_eq!(
            t.seconds(&unheld),
            0.0,
            "not judged before its inputs are held"
        );
        let first = t.seconds(&jobs[0]);
        assert!(first > 0.0 && first.is_finite(), "measured: {first}");
        t.record(&jobs[1], 1_000.0);
        assert!((t.seconds(&jobs[1]) - 1_000.0).abs() < 1e-6);
        assert_eq!(
            t.seconds(&jobs[0]),
            first,
            "the other shape's figure stands"
        );
        for j in &jobs {
            release(&j.input);
        }
    }

    #[test]
    fn claims_respect_load_back_off_bond_and_memory_together() {
        let market = Pubkey::new_unique();
        let job = JobSpec::hash_batch(1024, 1024, 1, [1; 32]); // 32 MiB of outputs
        let tasks: Vec<(Pubkey, Task)> = (1..=5).map(|i| task(i, market, 0, 10, 5, job)).collect();
        let ranked = || tasks.iter().collect::<Vec<_>>();
        let fast = Throughput::default();
        fast.set(JobKind::HashBatch, 1e12);
        let policy = ClaimPolicy::default();
        let cap = Capacity {
            memory: u64::MAX,
            throughput: &fast,
            policy: &policy,
        };
        let idle = Holding {
            disk: u64::MAX,
            ..Holding::default()
        };
        let ids = |p: Vec<(Pubkey, u64, usize)>| {
            p.iter()
                .map(|(k, _, load)| (k.to_bytes()[0], *load))
                .collect::<Vec<_>>()
        };
        let mut node: Node = blank();
        node.free = 100;
        // idle, at the posting slot: one task (the next would need 1 · 2 slots of back-off)
        assert_eq!(
            ids(plan_claims(ranked(), &node, idle, 4, 2, 10, &cap)),
            vec![(1, 1)]
        );
        // 4 slots later: loads 0, 1, 2 are past their back-off (0, 2, 4 slots), load 3 is not
        assert_eq!(
            ids(plan_claims(ranked(), &node, idle, 4, 2, 14, &cap)),
            vec![(1, 1), (2, 2), (3, 3)]
        );
        // already holding 2: its first claim waits 4 slots
        let two = Holding { load: 2, ..idle };
        assert!(plan_claims(ranked(), &node, two, 4, 2, 13, &cap).is_empty());
        assert_eq!(
            ids(plan_claims(ranked(), &node, two, 4, 2, 14, &cap)),
            vec![(1, 3)]
        );
        // at most max_active held
        assert_eq!(plan_claims(ranked(), &node, idle, 2, 0, 10, &cap).len(), 2);
        // free stake for two bonds of 10... with 25 free
        node.free = 25;
        assert_eq!(plan_claims(ranked(), &node, idle, 9, 0, 10, &cap).len(), 2);
        // 1 GiB to compute in, 1000 MiB already held: one more 32 MiB job does not fit
        node.free = 100;
        let cap = Capacity {
            memory: 1 << 30,
            ..cap
        };
        let heavy = Holding {
            memory: 1000 << 20,
            ..idle
        };
        assert!(plan_claims(ranked(), &node, heavy, 9, 0, 10, &cap).is_empty());
        let light = Holding {
            memory: 950 << 20,
            ..idle
        };
        assert_eq!(
            plan_claims(ranked(), &node, light, 9, 0, 10, &cap).len(),
            2,
            "1024 − 950 MiB leaves room for two 32 MiB jobs"
        );
    }
}

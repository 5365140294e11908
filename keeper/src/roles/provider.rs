//! Provider: claims tasks of its market that it can bond and that fit its memory, nearest
//! region first and least-loaded provider first; computes them, serves the tiles and submits
//! the Merkle root.

use std::{sync::Arc, time::Instant};

use anchor_lang::prelude::Pubkey;
use anyhow::{Context, Result};
use compute_market::{
    client,
    instructions::SubmitResultArgs,
    state::{Node, Task, TaskStatus},
};
use compute_market_protocol::{hash::hashv, job::JobSpec, region, P};
use solana_signer::Signer;

use super::{send, NodeCtx};
use crate::{
    chain::{Chain, ChainExt},
    db::Db,
    results::hex,
};

/// Default least-loaded back-off ([`Provider::claim_backoff`]), slots per task held.
pub const CLAIM_BACKOFF: u64 = 2;

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
    /// Crash-safe record of served results.
    pub db: Arc<Db>,
    /// What it computed.
    pub records: Vec<ComputeRecord>,
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
        }
    }
}

/// Open tasks of `market` that a provider with `node`'s stake and hardware can claim at `now`,
/// in the order it should try them: nearest region first ([`region::distance`]), then the
/// oldest, then the best paid. Tasks whose bond exceeds its free stake or whose job does not
/// fit its declared memory (when declared) are left out.
pub fn rank_open<'a>(
    tasks: &'a [(Pubkey, Task)],
    market: &Pubkey,
    node: &Node,
    now: u64,
) -> Vec<&'a (Pubkey, Task)> {
    let memory = node_memory(node);
    let mut open: Vec<&(Pubkey, Task)> = tasks
        .iter()
        .filter(|(_, t)| {
            t.status == TaskStatus::Open
                && t.market == *market
                && now <= t.open_deadline
                && t.provider_bond <= node.free
        })
        .filter(|(_, t)| {
            memory == 0 || JobSpec::decode(&t.job).is_ok_and(|j| j.memory_bytes() <= memory)
        })
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

/// What a provider holds when it plans its claims: tasks claimed and not yet submitted, and
/// the memory their jobs need together.
#[derive(Clone, Copy, Debug, Default)]
pub struct Holding {
    /// Tasks held.
    pub load: usize,
    /// Bytes their jobs need at once.
    pub memory: u64,
}

/// The claims to send this pass, from `ranked` ([`rank_open`]'s order): each with its bond and
/// the load it brings the provider to. A task is taken when the provider holds fewer than
/// `max_active`, its free stake covers the bond, the held jobs plus this one fit the declared
/// memory (held jobs are computed side by side), and — least-loaded first — at least
/// `load · backoff` slots have passed since it was posted.
pub fn plan_claims(
    ranked: Vec<&(Pubkey, Task)>,
    node: &Node,
    held: Holding,
    max_active: usize,
    backoff: u64,
    now: u64,
) -> Vec<(Pubkey, u64, usize)> {
    let memory = node_memory(node);
    let (mut free, mut held) = (node.free, held);
    let mut picks = vec![];
    for (key, t) in ranked {
        if held.load >= max_active {
            break;
        }
        let need = job_memory(t);
        if t.provider_bond > free
            || now < t.posted_slot.saturating_add(held.load as u64 * backoff)
            || (memory > 0 && held.memory + need > memory)
        {
            continue;
        }
        free -= t.provider_bond;
        held = Holding {
            load: held.load + 1,
            memory: held.memory + need,
        };
        picks.push((*key, t.provider_bond, held.load));
    }
    picks
}

/// The memory a node declared, bytes (0: undeclared, no memory limit applies).
fn node_memory(node: &Node) -> u64 {
    u64::from(node.hardware.memory_gb) << 30
}

/// Bytes the task's job needs at once (0 for a spec that does not decode: such a task fails
/// on its own when computed).
fn job_memory(t: &Task) -> u64 {
    JobSpec::decode(&t.job).map_or(0, |j| j.memory_bytes())
}

impl Provider {
    /// Corrupts about `corrupt_fraction` of the tiles (deterministically, at least one when the
    /// fraction is positive), keeping each tile well-formed so only a real check notices.
    fn corrupt(&self, job: &JobSpec, tiles: &mut [Vec<u8>]) -> u32 {
        if self.corrupt_fraction <= 0.0 {
            return 0;
        }
        let hit = |t: &mut Vec<u8>| {
            let v = u32::from_le_bytes(t[..4].try_into().expect("4 bytes"));
            t[..4].copy_from_slice(&(((v as u64 + 1) % P) as u32).to_le_bytes());
        };
        let mut n = 0;
        for (i, t) in tiles.iter_mut().enumerate() {
            let h = hashv(&[b"corrupt", &job.input, &(i as u32).to_le_bytes()]);
            if (h[0] as f64) < self.corrupt_fraction * 256.0 {
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

    /// After a restart: recomputes and serves again every result it recorded.
    pub fn restore(&mut self) -> Result<usize> {
        let results = self.db.results()?;
        for r in &results {
            let root = &r.root;
            let job =
                JobSpec::decode(&r.job).map_err(|e| anyhow::anyhow!("stored job spec: {e}"))?;
            let mut tiles = self.ctx.backend.run(&job)?;
            self.corrupt(&job, &mut tiles);
            let (again, _) = self.ctx.store.publish(job, tiles);
            anyhow::ensure!(
                again == *root,
                "recomputed result {} does not match its recorded root",
                hex(root)
            );
        }
        Ok(results.len())
    }

    /// Computes, serves and submits one claimed task.
    fn submit(
        &self,
        chain: &dyn Chain,
        now: u64,
        key: &Pubkey,
        t: &Task,
    ) -> Result<Option<ComputeRecord>> {
        if now > t.submit_deadline {
            return Ok(None);
        }
        let job = JobSpec::decode(&t.job)
            .map_err(|e| anyhow::anyhow!("task {key}: malformed job spec: {e}"))?;
        let start = Instant::now();
        let what = format!("{} task {}", self.ctx.name, &key.to_string()[..8]);
        let report = |done: u64, all: u64| {
            if let Some(p) = &self.ctx.progress {
                p(&what, done, all)
            }
        };
        let mut tiles = self
            .ctx
            .backend
            .run_with_progress(&job, &report)
            .with_context(|| format!("computing task {key}"))?;
        let corrupted = self.corrupt(&job, &mut tiles);
        let (root, uri) = self.ctx.store.publish(job, tiles);
        // recorded before the submission: a restarted provider serves it again
        self.db.put_result(&root, &t.job, self.corrupt_fraction)?;
        let seconds = start.elapsed().as_secs_f64();
        let ix = client::submit_result(
            self.ctx.kp.pubkey(),
            *key,
            t.market,
            SubmitResultArgs {
                result_root: root,
                result_uri: uri,
            },
        );
        if !send(
            chain,
            &self.ctx.name,
            "submit_result",
            key,
            ix,
            &self.ctx.kp,
        )?
        .ok
        {
            return Ok(None);
        }
        tracing::info!(provider = self.ctx.name, task = %key, seconds, corrupted, "result submitted");
        Ok(Some(ComputeRecord {
            task: *key,
            seconds,
            work: job.work(),
            corrupted,
        }))
    }

    /// One pass: submit what it holds, then claim what it can (up to `parallel` transactions
    /// in flight at once).
    pub fn step(&mut self, chain: &dyn Chain) -> Result<()> {
        let now = chain.slot()?;
        let tasks = chain.tasks()?;
        let me = self.ctx.node;
        let held: Vec<&(Pubkey, Task)> = tasks
            .iter()
            .filter(|(_, t)| t.status == TaskStatus::Claimed && t.provider == me)
            .collect();
        let mut load = held.len();
        let mut memory_held: u64 = held.iter().map(|(_, t)| job_memory(t)).sum();
        let done = super::parallel(self.ctx.parallel, held, |(key, t)| {
            (key, self.submit(chain, now, key, t), job_memory(t))
        });
        for (key, r, memory) in done {
            match r {
                Ok(Some(record)) => {
                    load -= 1;
                    memory_held -= memory;
                    self.records.push(record)
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(provider = self.ctx.name, task = %key, error = %format!("{e:#}"), "will retry")
                }
            }
        }
        let Some(node) = chain.node(&self.ctx.node)? else {
            return Ok(());
        };
        let held = Holding {
            load,
            memory: memory_held,
        };
        let picks = plan_claims(
            rank_open(&tasks, &self.ctx.market, &node, now),
            &node,
            held,
            self.max_active,
            self.claim_backoff,
            now,
        );
        let claims = super::parallel(self.ctx.parallel, picks, |(key, bond, load)| {
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
        for (key, bond, load, r) in claims {
            match r {
                Ok(r) if r.ok => {
                    tracing::info!(provider = self.ctx.name, task = %key, bond, load, "claimed")
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(provider = self.ctx.name, task = %key, error = %format!("{e:#}"), "claim will be retried")
                }
            }
        }
        Ok(())
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
            rank_open(&tasks, &market, node, 10)
                .iter()
                .map(|(k, _)| k.to_bytes()[0])
                .collect::<Vec<_>>()
        };
        // memory undeclared (0): no memory filter
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

    #[test]
    fn claims_respect_load_back_off_bond_and_memory_together() {
        let market = Pubkey::new_unique();
        let job = JobSpec::hash_batch(1024, 1024, 1, [1; 32]); // 32 MiB of outputs
        let tasks: Vec<(Pubkey, Task)> = (1..=5).map(|i| task(i, market, 0, 10, 5, job)).collect();
        let ranked = || tasks.iter().collect::<Vec<_>>();
        let ids = |p: Vec<(Pubkey, u64, usize)>| {
            p.iter()
                .map(|(k, _, load)| (k.to_bytes()[0], *load))
                .collect::<Vec<_>>()
        };
        let mut node: Node = blank();
        node.free = 100;
        // idle, at the posting slot: one task (the next would need 1 · 2 slots of back-off)
        assert_eq!(
            ids(plan_claims(ranked(), &node, Holding::default(), 4, 2, 10)),
            vec![(1, 1)]
        );
        // 4 slots later: loads 0, 1, 2 are past their back-off (0, 2, 4 slots), load 3 is not
        assert_eq!(
            ids(plan_claims(ranked(), &node, Holding::default(), 4, 2, 14)),
            vec![(1, 1), (2, 2), (3, 3)]
        );
        // already holding 2: its first claim waits 4 slots
        let two = Holding { load: 2, memory: 0 };
        assert!(plan_claims(ranked(), &node, two, 4, 2, 13).is_empty());
        assert_eq!(
            ids(plan_claims(ranked(), &node, two, 4, 2, 14)),
            vec![(1, 3)]
        );
        // at most max_active held
        assert_eq!(
            plan_claims(ranked(), &node, Holding::default(), 2, 0, 10).len(),
            2
        );
        // free stake for two bonds of 10... with 25 free
        node.free = 25;
        assert_eq!(
            plan_claims(ranked(), &node, Holding::default(), 9, 0, 10).len(),
            2
        );
        // 1 GB declared, 1000 MiB already held: one more 32 MiB job does not fit
        node.free = 100;
        node.hardware.memory_gb = 1;
        let heavy = Holding {
            load: 0,
            memory: 1000 << 20,
        };
        assert!(plan_claims(ranked(), &node, heavy, 9, 0, 10).is_empty());
        let light = Holding {
            load: 0,
            memory: 950 << 20,
        };
        assert_eq!(
            plan_claims(ranked(), &node, light, 9, 0, 10).len(),
            2,
            "1024 − 950 MiB leaves room for two 32 MiB jobs"
        );
    }
}

//! Provider: claims tasks of its market that it can bond, computes them, serves the tiles and
//! submits the Merkle root.

use std::{sync::Arc, time::Instant};

use anchor_lang::prelude::Pubkey;
use anyhow::{Context, Result};
use compute_market::{client, instructions::SubmitResultArgs, state::TaskStatus};
use compute_market_protocol::{hash::hashv, job::JobSpec, P};
use solana_signer::Signer;

use super::{send, NodeCtx};
use crate::{store::Store, tiles::hex};
use crate::{
    chain::{Chain, ChainExt},
};

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
    /// Crash-safe record of served results.
    pub db: Arc<Store>,
    /// What it computed.
    pub records: Vec<ComputeRecord>,
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
        for (root, job, _) in &results {
            let job = JobSpec::decode(job).map_err(|e| anyhow::anyhow!("stored job spec: {e}"))?;
            let mut tiles = self.ctx.backend.run(&job)?;
            self.corrupt(&job, &mut tiles);
            let (again, _) = self.ctx.store.publish(job, tiles);
            anyhow::ensure!(again == *root, "recomputed result {} does not match its recorded root", hex(root));
        }
        Ok(results.len())
    }

    /// Computes, serves and submits one claimed task.
    fn submit(&mut self, chain: &dyn Chain, now: u64, key: &Pubkey, t: &compute_market::state::Task) -> Result<()> {
        if now > t.submit_deadline {
            return Ok(());
        }
        let job = JobSpec::decode(&t.job).map_err(|e| anyhow::anyhow!("task {key}: malformed job spec: {e}"))?;
        let start = Instant::now();
        let bar = indicatif::ProgressBar::new(0).with_style(
            indicatif::ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} tiles {elapsed}").expect("template"),
        );
        bar.set_prefix(format!("{} task {}", self.ctx.name, &key.to_string()[..8]));
        let mut tiles = self.ctx.backend.run_with_progress(&job, &bar).with_context(|| format!("computing task {key}"))?;
        let corrupted = self.corrupt(&job, &mut tiles);
        let (root, uri) = self.ctx.store.publish(job, tiles);
        // recorded before the submission: a restarted provider serves it again
        self.db.put_result(&root, &t.job, self.corrupt_fraction)?;
        let seconds = start.elapsed().as_secs_f64();
        let ix = client::submit_result(self.ctx.kp.pubkey(), *key, SubmitResultArgs { result_root: root, result_uri: uri });
        if send(chain, &self.ctx.name, "submit_result", key, ix, &self.ctx.kp)?.ok {
            tracing::info!(provider = self.ctx.name, task = %key, seconds, corrupted, "result submitted");
            self.records.push(ComputeRecord { task: *key, seconds, work: job.work(), corrupted });
        }
        Ok(())
    }

    /// One pass: submit what it holds, then claim what it can.
    pub fn step(&mut self, chain: &dyn Chain) -> Result<()> {
        let now = chain.slot()?;
        let tasks = chain.tasks()?;
        let me = self.ctx.node;
        for (key, t) in tasks.iter().filter(|(_, t)| t.status == TaskStatus::Claimed && t.provider == me) {
            if let Err(e) = self.submit(chain, now, key, t) {
                tracing::warn!(provider = self.ctx.name, task = %key, error = %format!("{e:#}"), "will retry");
            }
        }
        let Some(node) = chain.node(&self.ctx.node)? else { return Ok(()) };
        let active = tasks.iter().filter(|(_, t)| t.status == TaskStatus::Claimed && t.provider == self.ctx.node).count();
        let mut free = node.free;
        let mut open: Vec<&(Pubkey, compute_market::state::Task)> = tasks
            .iter()
            .filter(|(_, t)| t.status == TaskStatus::Open && t.market == self.ctx.market && now <= t.open_deadline && t.provider_bond <= free)
            .collect();
        // oldest first, then the best-paid
        open.sort_by_key(|(_, t)| (t.posted_slot, u64::MAX - t.reward));
        for (key, t) in open.into_iter().take(self.max_active.saturating_sub(active)) {
            if t.provider_bond > free {
                continue;
            }
            if send(chain, &self.ctx.name, "claim_task", key, client::claim_task(self.ctx.kp.pubkey(), *key), &self.ctx.kp)?.ok {
                free -= t.provider_bond;
                tracing::info!(provider = self.ctx.name, task = %key, bond = t.provider_bond, "claimed");
            }
        }
        Ok(())
    }
}

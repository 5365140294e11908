//! `keeper demo`: the whole market on the embedded cluster. 3 providers (one corrupts a
//! fraction of its tiles), 5 verifiers (one votes "valid" without checking), a client posting
//! tasks of mixed kinds, a cranker; everything runs until every task is closed, then the run is
//! reported: outcome per task, slashes, payouts, verification vs compute cost, slots per phase,
//! and the performance model P = N·G·E/(1+L/C) next to the measured throughput.

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    sync::Arc,
};

use anchor_lang::prelude::Pubkey;
use anyhow::{bail, ensure, Context, Result};
use compute_market::{
    client,
    instructions::{InitializeConfigArgs, PostTaskArgs, RegisterNodeArgs},
    pda,
    state::{Hardware, MarketArgs, Params, TaskStatus, Windows},
};
use compute_market_embedded::Cluster;
use compute_market_protocol::job::{JobKind, JobSpec};
use serde::Serialize;
use solana_signer::Signer;

use crate::{
    chain::{embedded::EmbeddedChain, must, Chain, ChainExt},
    compute::Backend,
    db::Db,
    results::ResultStore,
    roles::{cranker::Cranker, provider::Provider, verifier::Verifier, NodeCtx},
};

/// Seconds per slot assumed when turning slots into time (Solana's target).
pub const SLOT_SECONDS: f64 = 0.4;

/// What the demo runs.
#[derive(Clone, Debug)]
pub struct DemoConfig {
    /// Providers (the last one is dishonest).
    pub providers: usize,
    /// Verifiers (the last one is careless).
    pub verifiers: usize,
    /// Tasks posted.
    pub tasks: usize,
    /// Fraction of tiles the dishonest provider corrupts.
    pub corrupt_fraction: f64,
    /// Give up after this many slots.
    pub max_slots: u64,
}

impl Default for DemoConfig {
    fn default() -> Self {
        DemoConfig {
            providers: 3,
            verifiers: 5,
            tasks: 20,
            corrupt_fraction: 0.25,
            max_slots: 5_000,
        }
    }
}

/// One task's story.
#[derive(Clone, Debug, Serialize)]
pub struct TaskRow {
    /// Task number.
    pub id: u64,
    /// Job kind and size.
    pub job: String,
    /// Reward.
    pub reward: u64,
    /// Provider that submitted the result (last claimant).
    pub provider: String,
    /// Final status.
    pub outcome: String,
    /// Whether it was escalated to 2V seats.
    pub escalated: bool,
    /// Revealed valid / invalid votes of the deciding round.
    pub votes: String,
    /// Paid to the provider.
    pub provider_paid: u64,
    /// Slashed from the provider.
    pub provider_slashed: u64,
    /// Slots from post to claim, claim to submit, submit to finalize, finalize to close.
    pub slots: [u64; 4],
}

/// One node's result.
#[derive(Clone, Debug, Serialize)]
pub struct NodeRow {
    /// Name.
    pub name: String,
    /// Role and behaviour.
    pub role: String,
    /// Earned (rewards) over the run.
    pub earned: u64,
    /// Slashed over the run.
    pub slashed: u64,
    /// Times slashed.
    pub times_slashed: u32,
    /// Tasks completed (providers) or votes revealed (verifiers).
    pub work: u32,
    /// Tokens staked at the start.
    pub staked: u64,
    /// Tokens in the node's vault at the end (stake ± outcomes; fees already swept).
    pub vault: u64,
    /// Verifiers: votes against the task's final outcome (valid on a rejected result or
    /// invalid on an accepted one), counting only seats it kept (a displaced verifier's check
    /// never reached a vote).
    pub sided_with_loser: u32,
}

/// The performance model of the seed, filled with measured values.
#[derive(Clone, Debug, Serialize)]
pub struct Model {
    /// Providers.
    pub n: f64,
    /// Work units per second of one provider while computing.
    pub g: f64,
    /// Useful fraction: accepted results / submitted results.
    pub e: f64,
    /// On-chain latency per task (claim to finalize), seconds at 0.4 s/slot.
    pub l: f64,
    /// Compute time per task, seconds.
    pub c: f64,
    /// P = N·G·E/(1+L/C), work units per second.
    pub p: f64,
    /// Measured: accepted work / (slots run × 0.4 s).
    pub measured: f64,
}

/// The report.
#[derive(Clone, Debug, Serialize)]
pub struct DemoReport {
    /// Per task.
    pub tasks: Vec<TaskRow>,
    /// Per node.
    pub nodes: Vec<NodeRow>,
    /// Seconds verifying / seconds computing, all tasks.
    pub verification_over_compute: f64,
    /// The same per job kind.
    pub verification_over_compute_by_kind: HashMap<String, f64>,
    /// Slots the run took.
    pub slots: u64,
    /// Fees swept to the treasury.
    pub treasury: u64,
    /// The model.
    pub model: Model,
}

fn job_of(i: u64) -> (JobSpec, u64) {
    let seed = compute_market_protocol::hash::hashv(&[b"demo job", &i.to_le_bytes()]);
    let job = match i % 4 {
        0 => JobSpec::matmul(128, 128, 128, seed),
        1 => JobSpec::hash_batch(128, 16, 8, seed),
        2 => JobSpec::matmul(192, 96, 160, seed),
        _ => JobSpec::matmul(256, 256, 256, seed),
    };
    let reward = 1_000_000 + job.work() / 16;
    (job, reward)
}

fn describe(job: &JobSpec) -> String {
    let [a, b, c] = job.dims;
    match job.kind {
        JobKind::MatMulModP => format!("MatMulModP {a}×{b}·{b}×{c}"),
        JobKind::HashBatch => format!("HashBatch {a}×{b}×{c}"),
    }
}

/// A running market on the embedded cluster: set up by [`Scenario::new`], advanced one slot at
/// a time by [`Scenario::tick`], summarised by [`Scenario::report`]. Roles talk to `roles_chain`
/// (the cluster itself, or a wrapper that injects faults); role errors are logged and retried on
/// the next slot, as the daemon does.
pub struct Scenario {
    /// The cluster (set-up and clock).
    pub chain: Arc<EmbeddedChain>,
    /// What the roles talk to.
    pub roles_chain: Arc<dyn Chain>,
    /// Providers (the last one cheats).
    pub providers: Vec<Provider>,
    /// Verifiers (the last one is careless).
    pub verifiers: Vec<Verifier>,
    /// The cranker.
    pub cranker: Cranker,
    /// Posted tasks: address, job, reward.
    pub tasks: Vec<(Pubkey, JobSpec, u64)>,
    /// Where the nodes keep their stores.
    pub dir: PathBuf,
    /// Role errors seen (and survived).
    pub errors: usize,
    stake: u64,
    start: u64,
    tick: usize,
    treasury_total: u64,
    first_seen: HashMap<(Pubkey, &'static str), u64>,
    last_provider: HashMap<Pubkey, Pubkey>,
}

impl Scenario {
    /// Sets up config, market, nodes and stakes in `dir`, and posts every task.
    pub fn new(cfg: &DemoConfig, backend: Arc<dyn Backend>, dir: &Path) -> Result<Self> {
        let dir = dir.to_path_buf();
        ensure!(
            cfg.providers >= 2 && cfg.verifiers >= 3 && cfg.tasks >= 1,
            "the demo needs ≥ 2 providers, ≥ 3 verifiers and ≥ 1 task"
        );
        let cluster = Cluster::new().map_err(anyhow::Error::msg)?;
        let chain = Arc::new(EmbeddedChain::new(cluster));
        let store = Arc::new(ResultStore::default());
        let (admin, cranker_kp, client_kp) = chain.with(|c| {
            (
                c.keypair("admin"),
                c.keypair("cranker"),
                c.keypair("client"),
            )
        });
        let (mint, treasury, client_wallet) = chain.with(|c| {
            for k in [&admin, &cranker_kp, &client_kp] {
                c.airdrop(&k.pubkey(), 1_000_000_000_000);
            }
            let mint = c.create_mint(&admin.pubkey());
            let treasury = c.token_account(&mint, &admin.pubkey(), 0);
            let wallet = c.token_account(&mint, &client_kp.pubkey(), 10_000_000_000_000);
            (mint, treasury, wallet)
        });
        let windows = Windows {
            submit: 60,
            join: 20,
            commit: 20,
            reveal: 20,
        };
        let params = Params::defaults(1_000);
        // the embedded program is loaded upgradeable; its upgrade authority initializes
        chain.with(|c| c.set_upgrade_authority(Some(&admin.pubkey())));
        must(
            "initialize_config",
            chain.send(
                &[client::initialize_config(
                    admin.pubkey(),
                    mint,
                    treasury,
                    InitializeConfigArgs {
                        params,
                        update_delay: 100,
                    },
                )],
                &admin,
                &[],
            )?,
        )?;
        let market_args = MarketArgs {
            id: 1,
            name: "demo-gpus".into(),
            min_gflops: 1_000,
            min_memory_gb: 16,
            quorum: 3,
            samples: 16,
            windows,
            task_ttl: 2_000,
        };
        must(
            "create_market",
            chain.send(
                &[client::create_market(admin.pubkey(), market_args)],
                &admin,
                &[],
            )?,
        )?;
        let market = pda::market(1);

        let hw = Hardware {
            gflops: 50_000,
            memory_gb: 80,
            bandwidth_gbps: 2_000,
            region: 1,
        };
        let stake = 2_000_000_000u64;
        // a funded, registered and staked node, as its roles see it
        let onboard = |name: &str, roles: u8| -> Result<NodeCtx> {
            let kp = chain.with(|c| c.keypair(name));
            let wallet = chain.with(|c| {
                c.airdrop(&kp.pubkey(), 100_000_000_000);
                c.token_account(&mint, &kp.pubkey(), stake)
            });
            must(
                "register_node",
                chain.send(
                    &[client::register_node(
                        kp.pubkey(),
                        market,
                        mint,
                        RegisterNodeArgs {
                            roles,
                            hardware: hw,
                        },
                    )],
                    &kp,
                    &[],
                )?,
            )?;
            must(
                "stake",
                chain.send(
                    &[client::stake(kp.pubkey(), market, wallet, stake)],
                    &kp,
                    &[],
                )?,
            )?;
            Ok(NodeCtx {
                name: name.to_string(),
                node: pda::node(&kp.pubkey()),
                kp,
                market,
                backend: backend.clone(),
                store: store.clone(),
                parallel: 1,
                progress: None,
            })
        };
        let mut providers = vec![];
        for i in 0..cfg.providers {
            let dishonest = i + 1 == cfg.providers;
            let name = if dishonest {
                format!("provider{i}(cheats)")
            } else {
                format!("provider{i}")
            };
            let db = Arc::new(Db::open(&dir.join(format!("provider{i}.redb")))?);
            let mut p = Provider::new(onboard(&name, 1)?, db, 2);
            if dishonest {
                p.corrupt_fraction = cfg.corrupt_fraction;
            }
            providers.push(p);
        }
        let mut verifiers = vec![];
        for i in 0..cfg.verifiers {
            let careless = i + 1 == cfg.verifiers;
            let name = if careless {
                format!("verifier{i}(careless)")
            } else {
                format!("verifier{i}")
            };
            let ctx = onboard(&name, 2)?;
            let db = Arc::new(Db::open(&dir.join(format!("verifier{i}.redb")))?);
            let mut v = Verifier::new(ctx, db);
            v.careless = careless;
            verifiers.push(v);
        }
        let cranker = Cranker::new(cranker_kp, treasury, 1);

        // the client posts every task
        let mut tasks: Vec<(Pubkey, JobSpec, u64)> = vec![];
        for i in 0..cfg.tasks as u64 {
            let (job, reward) = job_of(i);
            let args = PostTaskArgs {
                task_id: i,
                job: job.encode(),
                reward,
                quorum: 0,
                samples: 0,
                input_uri: String::new(),
                region: 0,
            };
            must(
                "post_task",
                chain.send(
                    &[client::post_task(
                        client_kp.pubkey(),
                        client_wallet,
                        mint,
                        market,
                        args,
                    )],
                    &client_kp,
                    &[],
                )?,
            )?;
            tasks.push((pda::task(&client_kp.pubkey(), i), job, reward));
        }

        let start = chain.slot()?;
        let roles_chain: Arc<dyn Chain> = chain.clone();
        Ok(Scenario {
            chain,
            roles_chain,
            providers,
            verifiers,
            cranker,
            tasks,
            dir,
            errors: 0,
            stake,
            start,
            tick: 0,
            treasury_total: 0,
            first_seen: HashMap::new(),
            last_provider: HashMap::new(),
        })
    }

    /// Records the first slot each task was seen claimed, submitted and finalized.
    fn observe(&mut self) -> Result<()> {
        let now = self.chain.slot()?;
        for (key, t) in self.chain.tasks()? {
            let phase = match t.status {
                TaskStatus::Claimed => "claimed",
                TaskStatus::Verifying => "submitted",
                s if s.is_terminal() => "finalized",
                _ => continue,
            };
            self.first_seen.entry((key, phase)).or_insert(now);
            if t.provider != Pubkey::default() {
                self.last_provider.insert(key, t.provider);
            }
        }
        Ok(())
    }

    fn survive(errors: &mut usize, who: &str, r: Result<()>) {
        if let Err(e) = r {
            *errors += 1;
            tracing::warn!(who, error = %format!("{e:#}"), "step failed; retrying next slot");
        }
    }

    /// How many posted tasks are closed.
    pub fn closed(&self) -> usize {
        self.tasks
            .iter()
            .filter(|(k, _, _)| self.cranker.ledger.closed.iter().any(|(c, _)| c == k))
            .count()
    }

    /// Whether every task posted is closed.
    pub fn done(&self) -> bool {
        self.tasks
            .iter()
            .all(|(k, _, _)| self.cranker.ledger.closed.iter().any(|(c, _)| c == k))
    }

    /// One slot: every role steps once, in an order that rotates (who reaches a seat first
    /// changes, as on a real network); then the clock moves on.
    pub fn tick(&mut self) -> Result<()> {
        let chain = self.roles_chain.clone();
        let np = self.providers.len();
        for i in 0..np {
            let p = &mut self.providers[(self.tick + i) % np];
            Self::survive(
                &mut self.errors,
                &p.ctx.name.clone(),
                p.step(chain.as_ref()),
            );
        }
        self.observe()?;
        let nv = self.verifiers.len();
        for i in 0..nv {
            let v = &mut self.verifiers[(self.tick + i) % nv];
            Self::survive(
                &mut self.errors,
                &v.ctx.name.clone(),
                v.step(chain.as_ref()),
            );
        }
        Self::survive(
            &mut self.errors,
            "cranker",
            self.cranker.step(chain.as_ref()),
        );
        self.observe()?;
        if self.tick.is_multiple_of(25) {
            match self.cranker.sweep(chain.as_ref()) {
                Ok(n) => self.treasury_total += n,
                Err(e) => Self::survive(&mut self.errors, "cranker", Err(e)),
            }
        }
        self.chain.advance(1);
        self.tick += 1;
        Ok(())
    }

    /// Ticks until every task is closed, or fails after `max_slots`.
    pub fn run_to_end(&mut self, max_slots: u64) -> Result<()> {
        self.run_to_end_with(max_slots, &mut |_, _| {})
    }

    /// [`Scenario::run_to_end`], telling `progress(closed, total)` after every slot.
    pub fn run_to_end_with(
        &mut self,
        max_slots: u64,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<()> {
        while !self.done() {
            if self.chain.slot()? - self.start > max_slots {
                bail!("the market did not finish within {max_slots} slots");
            }
            self.tick()?;
            progress(self.closed(), self.tasks.len());
        }
        self.treasury_total += self.cranker.sweep(self.chain.as_ref())?;
        Ok(())
    }

    /// The report of the run so far.
    pub fn report(&self) -> Result<DemoReport> {
        let slots = self.chain.slot()? - self.start;
        let name_of = |node: &Pubkey| -> String {
            self.providers
                .iter()
                .find(|p| p.ctx.node == *node)
                .map(|p| p.ctx.name.clone())
                .unwrap_or_else(|| node.to_string())
        };
        let mut rows = vec![];
        for (i, (key, job, reward)) in self.tasks.iter().enumerate() {
            let fin = self
                .cranker
                .ledger
                .finalized
                .iter()
                .find(|f| f.task == *key);
            let closed = self
                .cranker
                .ledger
                .closed
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, s)| *s)
                .unwrap_or(0);
            let posted = self.start;
            let claimed = self
                .first_seen
                .get(&(*key, "claimed"))
                .copied()
                .unwrap_or(posted);
            let submitted = self
                .first_seen
                .get(&(*key, "submitted"))
                .copied()
                .unwrap_or(claimed);
            let finalized = self
                .first_seen
                .get(&(*key, "finalized"))
                .copied()
                .unwrap_or(submitted);
            rows.push(TaskRow {
                id: i as u64,
                job: describe(job),
                reward: *reward,
                provider: self
                    .last_provider
                    .get(key)
                    .map(name_of)
                    .unwrap_or_else(|| "-".into()),
                outcome: fin
                    .map(|f| format!("{:?}", f.status))
                    .unwrap_or_else(|| "Expired/Cancelled".into()),
                escalated: self.cranker.ledger.escalated.contains(key),
                votes: fin
                    .map(|f| format!("{}/{}", f.valid, f.invalid))
                    .unwrap_or_default(),
                provider_paid: fin.map_or(0, |f| f.provider_paid),
                provider_slashed: fin.map_or(0, |f| f.provider_slashed),
                slots: [
                    claimed - posted,
                    submitted - claimed,
                    finalized - submitted,
                    closed.saturating_sub(finalized),
                ],
            });
        }
        let mut nodes = vec![];
        for p in &self.providers {
            let n = self.chain.node(&p.ctx.node)?.context("provider node")?;
            let slashed: u64 = rows
                .iter()
                .filter(|r| r.provider == p.ctx.name)
                .map(|r| r.provider_slashed)
                .sum();
            let role = if p.corrupt_fraction > 0.0 {
                format!(
                    "provider, corrupts {:.0}% of tiles",
                    p.corrupt_fraction * 100.0
                )
            } else {
                "provider".into()
            };
            nodes.push(NodeRow {
                name: p.ctx.name.clone(),
                role,
                earned: n.earned,
                slashed,
                times_slashed: n.times_slashed,
                work: n.tasks_completed,
                staked: self.stake,
                vault: self.chain.token_balance(&pda::vault(&p.ctx.node))?,
                sided_with_loser: 0,
            });
        }
        for v in &self.verifiers {
            let n = self.chain.node(&v.ctx.node)?.context("verifier node")?;
            let slashed: u64 = self
                .cranker
                .ledger
                .settled
                .iter()
                .filter(|s| s.verifier == v.ctx.node)
                .map(|s| s.slashed)
                .sum();
            let role = if v.careless {
                "verifier, votes valid unchecked".into()
            } else {
                "verifier".into()
            };
            let outcome_of = |t: &Pubkey| {
                self.tasks
                    .iter()
                    .position(|(k, _, _)| k == t)
                    .map(|i| rows[i].outcome.as_str())
            };
            let kept = |task: &Pubkey| {
                self.cranker
                    .ledger
                    .settled
                    .iter()
                    .any(|s| s.verifier == v.ctx.node && s.task == *task)
            };
            let sided_with_loser = v
                .records
                .iter()
                .filter(|r| kept(&r.task))
                .filter(|r| match outcome_of(&r.task) {
                    Some("Accepted") => r.vote == compute_market_protocol::commit::VOTE_INVALID,
                    Some("Rejected") => r.vote == compute_market_protocol::commit::VOTE_VALID,
                    _ => false,
                })
                .count() as u32;
            nodes.push(NodeRow {
                name: v.ctx.name.clone(),
                role,
                earned: n.earned,
                slashed,
                times_slashed: n.times_slashed,
                work: n.verifications,
                staked: self.stake,
                vault: self.chain.token_balance(&pda::vault(&v.ctx.node))?,
                sided_with_loser,
            });
        }
        let compute_s: f64 = self
            .providers
            .iter()
            .flat_map(|p| &p.records)
            .map(|r| r.seconds)
            .sum();
        let verify_s: f64 = self
            .verifiers
            .iter()
            .flat_map(|v| &v.records)
            .map(|r| r.seconds)
            .sum();
        let mut by_kind: HashMap<String, f64> = HashMap::new();
        for kind in ["MatMulModP", "HashBatch"] {
            let of_kind = |t: &Pubkey| {
                self.tasks
                    .iter()
                    .any(|(k, j, _)| k == t && format!("{:?}", j.kind) == kind)
            };
            let c: f64 = self
                .providers
                .iter()
                .flat_map(|p| &p.records)
                .filter(|r| of_kind(&r.task))
                .map(|r| r.seconds)
                .sum();
            let v: f64 = self
                .verifiers
                .iter()
                .flat_map(|v| &v.records)
                .filter(|r| of_kind(&r.task))
                .map(|r| r.seconds)
                .sum();
            if c > 0.0 {
                by_kind.insert(kind.into(), v / c);
            }
        }
        let records: Vec<_> = self.providers.iter().flat_map(|p| &p.records).collect();
        let submitted = records.len().max(1) as f64;
        let accepted: Vec<&TaskRow> = rows.iter().filter(|r| r.outcome == "Accepted").collect();
        let accepted_work: u64 = accepted
            .iter()
            .map(|r| self.tasks[r.id as usize].1.work())
            .sum();
        let g = records.iter().map(|r| r.work as f64).sum::<f64>() / compute_s.max(1e-9);
        let c = compute_s / submitted;
        let l = rows
            .iter()
            .map(|r| (r.slots[1] + r.slots[2]) as f64)
            .sum::<f64>()
            / rows.len() as f64
            * SLOT_SECONDS;
        let e = accepted.len() as f64 / submitted;
        let n = self.providers.len() as f64;
        let model = Model {
            n,
            g,
            e,
            l,
            c,
            p: n * g * e / (1.0 + l / c.max(1e-9)),
            measured: accepted_work as f64 / (slots as f64 * SLOT_SECONDS),
        };
        Ok(DemoReport {
            tasks: rows,
            nodes,
            verification_over_compute: verify_s / compute_s.max(1e-9),
            verification_over_compute_by_kind: by_kind,
            slots,
            treasury: self.treasury_total,
            model,
        })
    }
}

/// Runs the demo with `backend` doing every computation (stores in a temporary directory).
pub fn run(cfg: &DemoConfig, backend: Arc<dyn Backend>) -> Result<DemoReport> {
    run_with(cfg, backend, &mut |_, _| {})
}

/// [`run`], telling `progress(closed, total)` as tasks close (the binary draws a bar).
pub fn run_with(
    cfg: &DemoConfig,
    backend: Arc<dyn Backend>,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<DemoReport> {
    let dir = std::env::temp_dir().join(format!("compute-market-demo-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut s = Scenario::new(cfg, backend, &dir)?;
    s.run_to_end_with(cfg.max_slots, progress)?;
    let report = s.report();
    let _ = std::fs::remove_dir_all(&dir);
    report
}

/// The report as text tables.
pub fn render(r: &DemoReport) -> String {
    let mut s = format!(
        "{:>3} {:<28} {:>9} {:<20} {:<10} {:>4} {:>6} {:>11} {:>11}  {}\n",
        "id",
        "job",
        "reward",
        "provider",
        "outcome",
        "esc",
        "v/i",
        "paid",
        "slashed",
        "slots claim/submit/final/close"
    );
    for t in &r.tasks {
        s += &format!(
            "{:>3} {:<28} {:>9} {:<20} {:<10} {:>4} {:>6} {:>11} {:>11}  {}/{}/{}/{}\n",
            t.id,
            t.job,
            t.reward,
            t.provider,
            t.outcome,
            if t.escalated { "yes" } else { "" },
            t.votes,
            t.provider_paid,
            t.provider_slashed,
            t.slots[0],
            t.slots[1],
            t.slots[2],
            t.slots[3]
        );
    }
    s += &format!(
        "\n{:<24} {:<34} {:>12} {:>12} {:>8} {:>6} {:>14}\n",
        "node", "role", "earned", "slashed", "slashes", "work", "sided w/ loser"
    );
    for n in &r.nodes {
        s += &format!(
            "{:<24} {:<34} {:>12} {:>12} {:>8} {:>6} {:>14}\n",
            n.name, n.role, n.earned, n.slashed, n.times_slashed, n.work, n.sided_with_loser
        );
    }
    let m = &r.model;
    s += &format!(
        "\nverification / compute: {:.4} overall ({})\nslots run: {}; fees swept to the treasury: {}\n\
         performance model P = N·G·E/(1+L/C) with N = {}, G = {:.3e} work/s, E = {:.2}, L = {:.1} s, C = {:.3} s  =>  P = {:.3e} work/s\n\
         measured throughput (accepted work / (slots × {SLOT_SECONDS} s)): {:.3e} work/s\n",
        r.verification_over_compute,
        r.verification_over_compute_by_kind.iter().map(|(k, v)| format!("{k} {v:.4}")).collect::<Vec<_>>().join(", "),
        r.slots,
        r.treasury,
        m.n, m.g, m.e, m.l, m.c, m.p, m.measured
    );
    s
}

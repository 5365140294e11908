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
use anyhow::{bail, ensure, Result};
use compute_market::{
    client,
    instructions::PostTaskArgs,
    pda,
    state::{Hardware, MarketArgs, Params, TaskStatus, Windows},
};
use compute_market_embedded::Cluster;
use compute_market_protocol::job::{JobKind, JobSpec};
use solana_keypair::Keypair;
use solana_signer::Signer;

pub mod render;
pub mod report;

pub use render::render;
pub use report::{DemoReport, Model, NodeRow, TaskRow};

use crate::{
    chain::{embedded::EmbeddedChain, must, Chain, ChainExt},
    cli,
    compute::Backend,
    db::Db,
    deploy,
    results::ResultStore,
    roles::{cranker::Cranker, provider::Provider, verifier::Verifier, watcher::Watcher, NodeCtx},
};

/// The least submit window of a demo market that posts the sentences task, slots: room for
/// the 300 held-out texts at the longest one's tokens.
pub const SENTENCES_SUBMIT_WINDOW: u32 = 600;

/// The prompts of the demo's generation task.
pub const GENERATE_PROMPTS: [&str; 2] = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
];

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
    /// The market's windows, slots.
    pub windows: Windows,
    /// Also post the digits model over the 450 held-out digits (an `Mlp` task on the
    /// client's data; the report says how well the market's verified result classifies them).
    pub digits: bool,
    /// Also post the MiniLM encoder over the 300 held-out texts (an `Encoder` task on the
    /// client's data, its slices named: its disputes are games over a text's trace when the
    /// window holds one, about 2 700 slots; the report gives the verified embeddings' cosine
    /// to the fp32 model's). Needs the model made by `scripts/minilm-model`.
    pub sentences: bool,
    /// Also post a `Generate` task: SmolLM2-135M-Instruct (the integer model
    /// `scripts/smollm2-model` makes) completing [`GENERATE_PROMPTS`] greedily, 32 new tokens
    /// each; the report prints the verified completions.
    pub generate: bool,
    /// Also post an `Mlp` task of 12 rows through a random 64-512-512-10 model, too large to
    /// read in a dispute: its disputes are games over a claimed trace (PROTOCOL §8.10) when the
    /// window holds one (about 2 000 slots).
    pub wide: bool,
    /// The market's minimum quorum (0: the protocol's default, 3).
    pub min_quorum: u8,
    /// The market's dispute window, slots (0: verdicts final at once; PROTOCOL §8).
    pub dispute_window: u32,
}

impl Default for DemoConfig {
    fn default() -> Self {
        DemoConfig {
            providers: 3,
            verifiers: 5,
            tasks: 20,
            corrupt_fraction: 0.25,
            max_slots: 5_000,
            windows: Windows {
                submit: 60,
                join: 20,
                commit: 20,
                reveal: 20,
            },
            digits: false,
            sentences: false,
            generate: false,
            wide: false,
            min_quorum: 0,
            dispute_window: 0,
        }
    }
}

/// The demo's model too large to read in a dispute (and the real-validator test's): widths
/// `widths`, weights from a fixed generator.
pub fn wide_model(widths: &[usize]) -> compute_market_protocol::infer::Mlp {
    compute_market_protocol::infer::random_mlp(widths, 0x5eed)
}

/// Puts a client's input parts and their manifest in `store` (as if every node had fetched
/// them already); returns the manifest, naming each part's `slices` when given (version 2:
/// the program can referee the job, PROTOCOL §8.7).
fn stored_inputs(
    store: &crate::results::ResultStore,
    parts: &[(compute_market_protocol::manifest::Role, &[u8])],
    slices: Option<&[compute_market_protocol::manifest::Slices]>,
) -> Result<compute_market_protocol::manifest::Manifest> {
    use compute_market_protocol::manifest::{Manifest, Part};
    let manifest = Manifest::new(
        parts
            .iter()
            .enumerate()
            .map(|(i, (role, bytes))| {
                let p = Part::new(*role, bytes);
                match slices {
                    Some(s) => p.with_slices(s[i]),
                    None => p,
                }
            })
            .collect(),
    );
    let encoded = manifest.encode();
    for (hash, bytes) in parts
        .iter()
        .map(|(role, bytes)| (Part::new(*role, bytes).hash, *bytes))
        .chain([(manifest.hash(), &encoded[..])])
    {
        store
            .content
            .put(&hash, bytes, false)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    Ok(manifest)
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
        JobKind::Mlp => format!("Mlp {a} rows × {b} → {c}"),
        JobKind::Encoder => format!("Encoder {a} texts ≤ {b} tokens → {c}"),
        JobKind::Generate => format!("Generate {a} prompts ≤ {b} tokens → ≤ {c} new"),
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
    /// Watchers (none unless a test adds one): they check held Accepted results and dispute.
    pub watchers: Vec<Watcher>,
    /// Each task's last status and verdict (`majority`, PROTOCOL §8.5) seen before it closed.
    pub verdicts: HashMap<Pubkey, (TaskStatus, u8)>,
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
    /// The admin (mint authority: funds new nodes).
    pub admin: Keypair,
    /// The client that posted the tasks.
    pub client: Keypair,
    /// The results store its nodes share.
    pub store: Arc<ResultStore>,
    /// The backend its nodes compute on.
    pub backend: Arc<dyn Backend>,
    /// The wide model's task, its model and batch, when posted.
    pub wide: Option<(Pubkey, compute_market_protocol::infer::Mlp, Vec<i8>)>,
    /// The digits task and the held-out labels, when posted.
    pub digits: Option<(Pubkey, Vec<u8>)>,
    /// The sentences task and the fp32 model's embeddings of its texts, when posted.
    pub sentences: Option<(Pubkey, Vec<f32>)>,
    /// The generation task, when posted.
    pub generate: Option<Pubkey>,
    /// Each task's result root, once submitted.
    pub roots: HashMap<Pubkey, compute_market_protocol::hash::Digest>,
}

/// Stake of every node of the scenario.
pub const STAKE: u64 = 2_000_000_000;

/// Hardware every node of the scenario declares.
const HARDWARE: Hardware = Hardware {
    gflops: 50_000,
    memory_gb: 80,
    bandwidth_gbps: 2_000,
    region: 1,
};

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
        // served results on disk, as the daemon keeps them
        let store = Arc::new(ResultStore::open(&dir.join("results"), u64::MAX, None)?);
        let (admin, cranker_kp, client_kp) = chain.with(|c| {
            (
                c.keypair("admin"),
                c.keypair("cranker"),
                c.keypair("client"),
            )
        });
        chain.with(|c| {
            for k in [&admin, &cranker_kp, &client_kp] {
                c.airdrop(&k.pubkey(), 1_000_000_000_000);
            }
            // the embedded program is loaded upgradeable; its upgrade authority initializes
            c.set_upgrade_authority(Some(&admin.pubkey()));
        });
        // the same flows as `keeper init`, `keeper fund` and `keeper node register/stake`
        let mut windows = cfg.windows;
        if cfg.sentences {
            // the 300 held-out texts are priced at the longest one's 81 tokens (README,
            // Encoder pricing): a provider claims the task only if that fits half the window
            windows.submit = windows.submit.max(SENTENCES_SUBMIT_WINDOW);
        }
        // the cooldown outlasts twice the longest task, disputes included (PROTOCOL §7, §8.1)
        let longest = u64::from(windows.submit)
            + 2 * u64::from(windows.join + windows.commit + windows.reveal)
            + 2 * u64::from(cfg.dispute_window);
        let cooldown = (2 * longest + 100).max(1_000);
        let init = deploy::init(
            chain.as_ref(),
            &admin,
            &deploy::InitOptions {
                mint: None,
                mint_keypair_out: dir.join("mint.json"),
                params: Params::defaults(cooldown),
                update_delay: 100,
                market: MarketArgs {
                    id: 1,
                    name: "demo-gpus".into(),
                    min_gflops: 1_000,
                    min_memory_gb: 16,
                    quorum: 3,
                    samples: 16,
                    windows,
                    task_ttl: 2_000,
                    min_quorum: cfg.min_quorum,
                    dispute_window: cfg.dispute_window,
                },
            },
        )?;
        let mint: Pubkey = init.stake_mint.parse()?;
        let treasury: Pubkey = init.treasury.parse()?;
        let client_wallet = deploy::fund(
            chain.as_ref(),
            &admin,
            &client_kp.pubkey(),
            10_000_000_000_000,
        )?
        .token_account
        .parse()?;
        let market = pda::market(1);

        let stake = STAKE;
        let mut s = Scenario {
            chain: chain.clone(),
            roles_chain: chain.clone(),
            providers: vec![],
            verifiers: vec![],
            cranker: Cranker::new(cranker_kp, treasury, market, 1),
            watchers: vec![],
            verdicts: HashMap::new(),
            tasks: vec![],
            dir: dir.clone(),
            errors: 0,
            stake,
            start: 0,
            tick: 0,
            treasury_total: 0,
            first_seen: HashMap::new(),
            last_provider: HashMap::new(),
            admin,
            client: client_kp,
            store: store.clone(),
            backend: backend.clone(),
            digits: None,
            wide: None,
            sentences: None,
            generate: None,
            roots: HashMap::new(),
        };
        let onboard = |name: &str, roles: u8| s.onboard(name, roles);
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
        // the client posts every task
        let mut tasks: Vec<(Pubkey, JobSpec, u64)> = vec![];
        let client_kp = &s.client;
        let post = |args: PostTaskArgs| -> Result<Pubkey> {
            let key = pda::task(&client_kp.pubkey(), args.task_id);
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
                    client_kp,
                    &[],
                )?,
            )?;
            Ok(key)
        };
        for i in 0..cfg.tasks as u64 {
            let (job, reward) = job_of(i);
            tasks.push((post(PostTaskArgs::new(i, &job, reward))?, job, reward));
        }
        if cfg.digits {
            // the client's own data: the model and the batch are in the store every node
            // shares (as if fetched already), named by the manifest of an Mlp task
            use crate::compute::mlp;
            use compute_market_protocol::manifest::Role;
            let (batch, labels) = mlp::digits_heldout()?;
            let model = mlp::parse_model(mlp::DIGITS_MODEL, 64, 10)?;
            let x = mlp::parse_batch(&batch, labels.len(), 64)?;
            let named = [
                crate::compute::slices::of_model(&model),
                crate::compute::slices::of_batch(&x),
            ];
            let manifest = stored_inputs(
                &store,
                &[(Role::Model, mlp::DIGITS_MODEL), (Role::Batch, &batch)],
                Some(&named),
            )?;
            let rows = (labels.len()) as u32;
            let job = JobSpec {
                slices_len: named[0].len,
                ..JobSpec::mlp(rows, 64, 10, model.work_per_row(), 8, manifest.hash())
            };
            let (id, reward) = (cfg.tasks as u64, 1_000_000 + job.work() / 16);
            let mut args = PostTaskArgs::new(id, &job, reward);
            args.input_uri = "http://digits.demo.invalid".into();
            let key = post(args)?;
            tasks.push((key, job, reward));
            s.digits = Some((key, labels));
        }
        if cfg.wide {
            // a model too large to read in a dispute, on the client's data
            use crate::compute::mlp;
            use compute_market_protocol::manifest::Role;
            let model = wide_model(&[64, 512, 512, 10]);
            let x: Vec<i8> = (0..12 * 64).map(|i| ((i * 7 + 3) % 17) as i8).collect();
            let (model_file, batch_file) = (mlp::model_file(&model)?, mlp::batch_file(&x, 64)?);
            let named = [
                crate::compute::slices::of_model(&model),
                crate::compute::slices::of_batch(&mlp::parse_batch(&batch_file, 12, 64)?),
            ];
            let manifest = stored_inputs(
                &store,
                &[(Role::Model, &model_file), (Role::Batch, &batch_file)],
                Some(&named),
            )?;
            let job = JobSpec {
                slices_len: named[0].len,
                ..JobSpec::mlp(12, 64, 10, model.work_per_row(), 4, manifest.hash())
            };
            let (id, reward) = (cfg.tasks as u64 + 1, 1_000_000 + job.work() / 16);
            let mut args = PostTaskArgs::new(id, &job, reward);
            args.input_uri = "http://wide.demo.invalid".into();
            let key = post(args)?;
            tasks.push((key, job, reward));
            s.wide = Some((key, model, x));
        }
        if cfg.sentences {
            // likewise the MiniLM encoder over the held-out texts
            use crate::compute::encoder;
            use compute_market_protocol::manifest::Role;
            let model_bytes = encoder::minilm_bytes()?;
            let model = encoder::parse_model(&model_bytes)?;
            let (texts, fp32, ids) = encoder::minilm_heldout_ids(&model)?;
            let longest = ids.iter().map(Vec::len).max().unwrap_or(1) as u32;
            // the model's and the ids' slices: the program referees the task by a game over a
            // text's trace when the window holds one (PROTOCOL §8.10)
            let named = [
                crate::compute::slices::of_encoder(&model.encoder),
                crate::compute::slices::of_ids(&ids, longest),
            ];
            let manifest = stored_inputs(
                &store,
                &[(Role::Model, &model_bytes), (Role::Texts, &texts)],
                Some(&named),
            )?;
            let e = &model.encoder;
            let job = JobSpec {
                slices_len: named[0].len,
                ..JobSpec::encoder(
                    ids.len() as u32,
                    longest,
                    e.hidden as u32,
                    e.work_per_token(longest as usize),
                    crate::clientdata::ENCODER_ROWS_PER_TILE,
                    manifest.hash(),
                )
            };
            // the 300 texts are priced at the longest one's tokens (README, Encoder pricing):
            // a reward at the other tasks' rate would ask a bond past the demo providers' stake
            let (id, reward) = (cfg.tasks as u64 + 1, 1_000_000 + job.work() / 512);
            let mut args = PostTaskArgs::new(id, &job, reward);
            args.input_uri = "http://sentences.demo.invalid".into();
            let key = post(args)?;
            tasks.push((key, job, reward));
            s.sentences = Some((key, fp32));
        }
        if cfg.generate {
            // SmolLM2 completing two prompts, greedily: verified by a prefill per sampled one
            use crate::compute::decoder;
            use compute_market_protocol::{decoder::Sampling, manifest::Role};
            let model_bytes = decoder::smollm2_bytes()?;
            let model = decoder::parse_model(&model_bytes)?;
            let texts: Vec<String> = GENERATE_PROMPTS.iter().map(|t| t.to_string()).collect();
            let ids: Vec<Vec<u32>> = texts
                .iter()
                .map(|t| model.prompt_ids(t))
                .collect::<Result<_>>()?;
            let prompts = decoder::job::prompts_bytes(&texts, &ids, &Sampling::GREEDY)?;
            let (longest, new) = (ids.iter().map(Vec::len).max().unwrap_or(1) as u32, 32);
            // the model's and the prompts' slices: the program referees the task by a game
            // over a token's trace when the window holds one (PROTOCOL §8.13)
            let named = [
                crate::compute::slices::of_decoder(&model.decoder, model.eos),
                crate::compute::slices::of_prompts(&ids, longest, &Sampling::GREEDY),
            ];
            let manifest = stored_inputs(
                &store,
                &[(Role::Model, &model_bytes), (Role::Prompts, &prompts)],
                Some(&named),
            )?;
            let job = JobSpec {
                slices_len: named[0].len,
                ..JobSpec::generate(
                    texts.len() as u32,
                    longest,
                    new,
                    model.work_per_token((longest + new) as usize),
                    crate::clientdata::GENERATE_ROWS_PER_TILE,
                    manifest.hash(),
                )
            };
            let (id, reward) = (cfg.tasks as u64 + 2, 1_000_000 + job.work() / 4096);
            let mut args = PostTaskArgs::new(id, &job, reward);
            args.input_uri = "http://generate.demo.invalid".into();
            let key = post(args)?;
            tasks.push((key, job, reward));
            s.generate = Some(key);
        }
        s.providers = providers;
        s.verifiers = verifiers;
        s.tasks = tasks;
        s.start = chain.slot()?;
        Ok(s)
    }

    /// A new node of the market named `name` with `roles`: funded, registered and staked with
    /// [`STAKE`], as its roles see it (computing on the scenario's backend, serving from its
    /// store).
    pub fn onboard(&self, name: &str, roles: u8) -> Result<NodeCtx> {
        let chain = &self.chain;
        let kp = chain.with(|c| {
            let kp = c.keypair(name);
            c.airdrop(&kp.pubkey(), 100_000_000_000);
            kp
        });
        // the stake, and a tenth more left in the wallet: what a dispute bonds (PROTOCOL §8.3)
        deploy::fund(
            chain.as_ref(),
            &self.admin,
            &kp.pubkey(),
            STAKE + STAKE / 10,
        )?;
        cli::node_register(chain.as_ref(), &kp, 1, roles, HARDWARE)?;
        cli::node_stake(chain.as_ref(), &kp, STAKE, None)?;
        Ok(NodeCtx {
            name: name.to_string(),
            node: pda::node(&kp.pubkey()),
            kp,
            market: pda::market(1),
            backend: self.backend.clone(),
            store: self.store.clone(),
            parallel: 1,
            progress: None,
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
            if t.status.is_decided() {
                self.verdicts.insert(key, (t.status, t.tally().majority));
            }
            if t.result_root != [0; 32] {
                self.roots.insert(key, t.result_root);
            }
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
        // (seen before the cranker can conclude and close what a dispute overturned)
        self.observe()?;
        if !self.watchers.is_empty() {
            let now = self.chain.slot()?;
            let tasks = self.chain.tasks_of(&pda::market(1))?;
            for w in &mut self.watchers {
                Self::survive(
                    &mut self.errors,
                    &w.ctx.name.clone(),
                    w.step_with(chain.as_ref(), now, &tasks),
                );
            }
            self.observe()?;
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

//! # compute-market-svm-tests
//!
//! A small world around the built `compute_market.so` running in litesvm 0.16 (the Agave
//! 4.2.2 runtime): a stake mint, a treasury, a config and a market, actors with wallets, a
//! slot clock that keeps the SlotHashes sysvar honest, and one method per instruction.
//! Every transaction is recorded (compute units, writable accounts, bytes created and
//! closed) for the CU report. The tests in `tests/` and the `cu-report` binary use it.

use std::collections::{BTreeMap, HashMap};

use anchor_lang::{prelude::Pubkey, AccountDeserialize};
use compute_market::constants::SEAT_OVERSAMPLE;
use compute_market::{
    client,
    instructions::{
        InitializeConfigArgs, PostTaskArgs, RegisterNodeArgs, RevealVoteArgs, SubmitResultArgs,
    },
    pda,
    state::{Hardware, MarketArgs, Node, Params, Task, TaskStatus, Vote, Windows},
};
use compute_market_embedded::Cluster;
use compute_market_protocol::{
    commit::vote_commitment, hash::hashv, job::JobSpec, seats::SeatScore,
};
use solana_instruction::Instruction;
use solana_keypair::Keypair;
use solana_signer::Signer;

pub mod availability;
pub mod disputes;
pub mod games;

pub use compute_market;
pub use compute_market_embedded::{program_path, slot_hash};
pub use compute_market_protocol as protocol;

/// What one transaction did.
#[derive(Clone, Debug)]
pub struct TxRecord {
    /// Label (the instruction's name).
    pub label: String,
    /// Compute units consumed.
    pub cu: u64,
    /// Whether it succeeded.
    pub ok: bool,
    /// Writable accounts, by their registered names.
    pub writable: Vec<String>,
    /// Bytes of accounts that did not exist before.
    pub bytes_created: u64,
    /// Bytes of accounts that no longer exist.
    pub bytes_closed: u64,
    /// Program logs.
    pub logs: Vec<String>,
    /// The transaction error, if it failed.
    pub error: Option<String>,
    /// Bytes of the signed transaction (at most 1 232 fit a packet).
    pub tx_bytes: usize,
}

impl TxRecord {
    /// Whether the logs name Anchor error `name` (or contain `name` in a runtime error).
    pub fn has_error(&self, name: &str) -> bool {
        !self.ok
            && (self.logs.iter().any(|l| l.contains(name))
                || self.error.as_deref().is_some_and(|e| e.contains(name)))
    }
}

/// A keypair with a wallet token account and (once registered) a node.
pub struct Actor {
    /// Name used in reports.
    pub name: String,
    /// The signer.
    pub kp: Keypair,
    /// Its token account of the stake mint.
    pub wallet: Pubkey,
    /// Its node PDA (whether registered or not).
    pub node: Pubkey,
    /// Its node's vault PDA.
    pub vault: Pubkey,
}

impl Clone for Actor {
    fn clone(&self) -> Self {
        Actor {
            name: self.name.clone(),
            kp: self.kp.insecure_clone(),
            wallet: self.wallet,
            node: self.node,
            vault: self.vault,
        }
    }
}

impl Actor {
    /// The signer's public key.
    pub fn key(&self) -> Pubkey {
        self.kp.pubkey()
    }
}

/// A sealed vote: what is committed and later revealed.
#[derive(Clone, Copy, Debug)]
pub struct Ballot {
    /// 1 valid, 2 invalid, 3 unavailable.
    pub vote: u8,
    /// Evidence hash.
    pub evidence: [u8; 32],
    /// Salt.
    pub salt: [u8; 32],
}

impl Ballot {
    /// A ballot with evidence and salt derived from `tag`.
    pub fn new(vote: u8, tag: u64) -> Self {
        Ballot {
            vote,
            evidence: hashv(&[b"evidence", &tag.to_le_bytes()]),
            salt: hashv(&[b"salt", &tag.to_le_bytes()]),
        }
    }

    /// Its commitment for `verifier_node` on `task` in `round`.
    pub fn commitment(&self, verifier_node: &Pubkey, task: &Pubkey, round: u8) -> [u8; 32] {
        vote_commitment(
            &verifier_node.to_bytes(),
            &task.to_bytes(),
            round,
            self.vote,
            &self.evidence,
            &self.salt,
        )
    }
}

/// Default parameters of the test world: PROTOCOL §7 with a short cooldown.
pub fn test_params() -> Params {
    Params::defaults(5_000)
}

/// Default market of the test world.
pub fn test_market(id: u16) -> MarketArgs {
    MarketArgs {
        id,
        name: "h100-class".into(),
        min_gflops: 1_000,
        min_memory_gb: 16,
        quorum: 3,
        samples: 16,
        windows: Windows::DEFAULT,
        task_ttl: 1_000,
        min_quorum: 0,
        dispute_window: 0,
    }
}

/// Hardware that meets [`test_market`].
pub fn gpu() -> Hardware {
    Hardware {
        gflops: 60_000,
        memory_gb: 80,
        bandwidth_gbps: 3_000,
        region: 1,
    }
}

/// The world: program, mint, treasury, config, one market, a clock.
pub struct World {
    /// The embedded cluster (runtime and clock).
    pub c: Cluster,
    /// The config admin (also mint authority).
    pub admin: Keypair,
    /// A permissionless cranker.
    pub cranker: Keypair,
    /// The stake mint.
    pub mint: Pubkey,
    /// The treasury token account.
    pub treasury: Pubkey,
    /// The market used by default.
    pub market: Pubkey,
    /// Names of accounts, for reports.
    pub names: HashMap<Pubkey, String>,
    /// Accounts shared by all tasks (config, market, treasury, mint).
    pub shared: Vec<Pubkey>,
    /// Every transaction sent.
    pub records: Vec<TxRecord>,
    /// Every token account created by the world (for conservation checks).
    pub token_accounts: Vec<Pubkey>,
    /// Tokens sent into vaults and escrows from outside the protocol, per account.
    pub donated: HashMap<Pubkey, u64>,
    /// The slot each task was last posted at (its availability accounts' seeds, which outlive
    /// it).
    pub posted: HashMap<Pubkey, u64>,
}

impl World {
    /// A world with [`test_params`] and [`test_market`].
    pub fn new() -> Self {
        Self::with(test_params(), test_market(1))
    }

    /// A world with the given parameters and first market.
    pub fn with(params: Params, market: MarketArgs) -> Self {
        let mut c = Cluster::new().unwrap_or_else(|e| panic!("{e}"));
        let admin = Keypair::new_from_array([1; 32]);
        let cranker = Keypair::new_from_array([2; 32]);
        c.airdrop(&admin.pubkey(), 1_000_000_000_000);
        c.airdrop(&cranker.pubkey(), 1_000_000_000_000);
        let mint = c.create_mint(&admin.pubkey());
        let mut w = World {
            c,
            admin,
            cranker,
            mint,
            treasury: Pubkey::default(),
            market: pda::market(market.id),
            names: HashMap::new(),
            posted: HashMap::new(),
            shared: vec![],
            records: vec![],
            token_accounts: vec![],
            donated: HashMap::new(),
        };
        w.treasury = w.token_account(&w.admin.pubkey(), 0);
        let (admin_key, mint, treasury) = (w.admin.pubkey(), w.mint, w.treasury);
        w.names.insert(mint, "mint".into());
        w.names.insert(treasury, "treasury".into());
        w.names.insert(pda::config(), "config".into());
        w.names.insert(w.market, "market".into());
        w.names.insert(admin_key, "admin".into());
        w.shared = vec![pda::config(), w.market, treasury, mint];
        let admin = w.admin.insecure_clone();
        // the program is loaded upgradeable: its upgrade authority initializes the config
        w.c.set_upgrade_authority(Some(&admin_key));
        w.send(
            "initialize_config",
            &admin,
            &[],
            client::initialize_config(
                admin_key,
                mint,
                treasury,
                InitializeConfigArgs {
                    params,
                    update_delay: 50,
                },
            ),
        )
        .expect("initialize_config");
        w.send(
            "create_market",
            &admin,
            &[],
            client::create_market(admin_key, market),
        )
        .expect("create_market");
        w
    }

    /// A token account of the stake mint owned by `owner` holding `amount`.
    pub fn token_account(&mut self, owner: &Pubkey, amount: u64) -> Pubkey {
        let key = self.c.token_account(&self.mint, owner, amount);
        self.token_accounts.push(key);
        key
    }

    /// A token account of any `mint` owned by `owner` (not counted in conservation checks).
    pub fn token_account_of(&mut self, mint: Pubkey, owner: &Pubkey, amount: u64) -> Pubkey {
        if mint == self.mint {
            return self.token_account(owner, amount);
        }
        self.c.token_account(&mint, owner, amount)
    }

    /// A second mint (for wrong-mint attacks).
    pub fn other_mint(&mut self) -> Pubkey {
        let admin = self.admin.pubkey();
        self.c.create_mint(&admin)
    }

    /// A new actor with SOL and `tokens` in its wallet.
    pub fn actor(&mut self, name: &str, tokens: u64) -> Actor {
        let kp = self.c.keypair("actor");
        self.c.airdrop(&kp.pubkey(), 100_000_000_000);
        let wallet = self.token_account(&kp.pubkey(), tokens);
        let node = pda::node(&kp.pubkey());
        let vault = pda::vault(&node);
        self.names.insert(kp.pubkey(), name.to_string());
        self.names.insert(wallet, format!("{name}.wallet"));
        self.names.insert(node, format!("{name}.node"));
        self.names.insert(vault, format!("{name}.vault"));
        self.token_accounts.push(vault);
        Actor {
            name: name.into(),
            kp,
            wallet,
            node,
            vault,
        }
    }

    /// `n` verifier-only actors named `{prefix}{i}`, each with `tokens` in its wallet and
    /// `stake` of them staked.
    pub fn verifiers(&mut self, prefix: &str, n: usize, tokens: u64, stake: u64) -> Vec<Actor> {
        (0..n)
            .map(|i| {
                let v = self.actor(&format!("{prefix}{i}"), tokens);
                self.onboard(&v, 2, stake);
                v
            })
            .collect()
    }

    /// Current slot.
    pub fn slot(&self) -> u64 {
        self.c.slot()
    }

    /// Advances the clock by `n` slots.
    pub fn advance(&mut self, n: u64) {
        self.c.advance(n);
    }

    /// Advances the clock past `slot` (to `slot + 1`), or by one slot if it is past already.
    pub fn advance_past(&mut self, slot: u64) {
        self.c.advance(slot.saturating_sub(self.slot()) + 1);
    }

    /// Sends one instruction signed by `payer` and `extra`; records it.
    pub fn send(
        &mut self,
        label: &str,
        payer: &Keypair,
        extra: &[&Keypair],
        ix: Instruction,
    ) -> Result<TxRecord, TxRecord> {
        self.send_all(label, payer, extra, &[ix])
    }

    /// Sends `ixs` as one transaction signed by `payer` and `extra`; records it.
    pub fn send_all(
        &mut self,
        label: &str,
        payer: &Keypair,
        extra: &[&Keypair],
        ixs: &[Instruction],
    ) -> Result<TxRecord, TxRecord> {
        let mut writable: Vec<Pubkey> = vec![];
        for m in ixs.iter().flat_map(|ix| ix.accounts.iter()) {
            if m.is_writable && !writable.contains(&m.pubkey) {
                writable.push(m.pubkey);
            }
        }
        let before: BTreeMap<Pubkey, usize> = writable
            .iter()
            .filter_map(|k| {
                self.c
                    .svm
                    .get_account(k)
                    .filter(|a| a.lamports > 0)
                    .map(|a| (*k, a.data.len()))
            })
            .collect();
        let out = self.c.send(ixs, payer, extra);
        let (ok, cu, logs, error, tx_bytes) = (out.ok, out.cu, out.logs, out.error, out.bytes);
        let (mut created, mut closed) = (0u64, 0u64);
        for k in &writable {
            let after = self
                .c
                .svm
                .get_account(k)
                .filter(|a| a.lamports > 0)
                .map(|a| a.data.len());
            match (before.get(k), after) {
                (None, Some(n)) => created += n as u64,
                (Some(&n), None) => closed += n as u64,
                _ => {}
            }
        }
        let names = writable
            .iter()
            .map(|k| {
                let n = self
                    .names
                    .get(k)
                    .cloned()
                    .unwrap_or_else(|| k.to_string()[..8].to_string());
                if self.shared.contains(k) {
                    format!("{n}*")
                } else {
                    n
                }
            })
            .collect();
        let rec = TxRecord {
            label: label.into(),
            cu,
            ok,
            writable: names,
            bytes_created: created,
            bytes_closed: closed,
            logs,
            error,
            tx_bytes,
        };
        self.records.push(rec.clone());
        if ok {
            Ok(rec)
        } else {
            Err(rec)
        }
    }

    /// Sends `ix` signed by `actor`.
    pub fn send_as(
        &mut self,
        label: &str,
        actor: &Actor,
        ix: Instruction,
    ) -> Result<TxRecord, TxRecord> {
        let kp = actor.kp.insecure_clone();
        self.send(label, &kp, &[], ix)
    }

    /// Sends `ix` paid and signed by the cranker (a stranger to every task).
    pub fn crank(&mut self, label: &str, ix: Instruction) -> Result<TxRecord, TxRecord> {
        let kp = self.cranker.insecure_clone();
        self.send(label, &kp, &[], ix)
    }

    /// Token balance of a token account (0 when it does not exist).
    pub fn balance(&self, account: &Pubkey) -> u64 {
        self.c.balance(account)
    }

    /// Balances of every stake-mint token account of the world.
    pub fn balances(&self) -> BTreeMap<Pubkey, u64> {
        self.token_accounts
            .iter()
            .map(|k| (*k, self.balance(k)))
            .collect()
    }

    /// Whether an account exists (has lamports).
    pub fn exists(&self, key: &Pubkey) -> bool {
        self.c.exists(key)
    }

    fn decode<T: AccountDeserialize>(&self, key: &Pubkey) -> Option<T> {
        let a = self.c.svm.get_account(key).filter(|a| a.lamports > 0)?;
        T::try_deserialize(&mut a.data.as_slice()).ok()
    }

    /// The task account.
    pub fn task(&self, key: &Pubkey) -> Task {
        self.decode(key).expect("task account")
    }

    /// The task's current round (0 when the task does not exist).
    pub fn round_of(&self, task: &Pubkey) -> u8 {
        self.try_task(task).map_or(0, |t| t.round)
    }

    /// The task account, if it exists.
    pub fn try_task(&self, key: &Pubkey) -> Option<Task> {
        self.decode(key)
    }

    /// The node account.
    pub fn node(&self, key: &Pubkey) -> Node {
        self.decode(key).expect("node account")
    }

    /// The node account, if it exists.
    pub fn try_node(&self, key: &Pubkey) -> Option<Node> {
        self.decode(key)
    }

    /// A vote account.
    pub fn vote(&self, key: &Pubkey) -> Option<Vote> {
        self.decode(key)
    }

    /// The market account.
    pub fn market_account(&self) -> compute_market::state::Market {
        self.decode(&self.market).expect("market")
    }

    /// The config account.
    pub fn config(&self) -> compute_market::state::Config {
        self.decode(&pda::config()).expect("config")
    }

    // ---- one method per instruction -------------------------------------------------------

    /// `register_node` with roles and hardware.
    pub fn register(
        &mut self,
        a: &Actor,
        roles: u8,
        hardware: Hardware,
    ) -> Result<TxRecord, TxRecord> {
        let ix = client::register_node(
            a.key(),
            self.market,
            self.mint,
            RegisterNodeArgs { roles, hardware },
        );
        self.send_as("register_node", a, ix)
    }

    /// `stake` from the actor's wallet.
    pub fn stake(&mut self, a: &Actor, amount: u64) -> Result<TxRecord, TxRecord> {
        let ix = client::stake(a.key(), self.market, a.wallet, amount);
        self.send_as("stake", a, ix)
    }

    /// Registers with `roles` and stakes `amount`.
    pub fn onboard(&mut self, a: &Actor, roles: u8, amount: u64) {
        self.register(a, roles, gpu()).expect("register_node");
        self.stake(a, amount).expect("stake");
    }

    /// `post_task`; returns the task address.
    pub fn post(
        &mut self,
        client_actor: &Actor,
        task_id: u64,
        job: JobSpec,
        reward: u64,
    ) -> Result<Pubkey, TxRecord> {
        self.post_with(client_actor, PostTaskArgs::new(task_id, &job, reward))
    }

    /// `post_task` with explicit arguments.
    pub fn post_with(&mut self, c: &Actor, args: PostTaskArgs) -> Result<Pubkey, TxRecord> {
        let task = pda::task(&c.key(), args.task_id);
        self.names.insert(task, format!("task{}", args.task_id));
        self.names
            .insert(pda::escrow(&task), format!("task{}.escrow", args.task_id));
        let ix = client::post_task(c.key(), c.wallet, self.mint, self.market, args);
        self.send_as("post_task", c, ix)?;
        self.token_accounts.push(pda::escrow(&task));
        let slot = self.task(&task).posted_slot;
        self.posted.insert(task, slot);
        Ok(task)
    }

    /// Posts task `task_id` for `R` and cancels it at once (a task whose escrow holds the
    /// reward, ready to close).
    pub fn cancelled(&mut self, c: &Actor, task_id: u64) -> Pubkey {
        let task = self
            .post(c, task_id, small_job(task_id as u8), R)
            .expect("post");
        self.send_as("cancel_task", c, client::cancel_task(c.key(), task))
            .expect("cancel");
        task
    }

    /// `claim_task`.
    pub fn claim(&mut self, p: &Actor, task: Pubkey) -> Result<TxRecord, TxRecord> {
        self.send_as("claim_task", p, client::claim_task(p.key(), task))
    }

    /// `submit_result` with `root`.
    pub fn submit(
        &mut self,
        p: &Actor,
        task: Pubkey,
        root: [u8; 32],
    ) -> Result<TxRecord, TxRecord> {
        let args = SubmitResultArgs {
            result_root: root,
            result_uri: "http://127.0.0.1:9000/r/".into(),
        };
        let market = self.try_task(&task).map_or(self.market, |t| t.market);
        self.send_as(
            "submit_result",
            p,
            client::submit_result(p.key(), task, market, args),
        )
    }

    /// The score of `node` for seat `seat` of `task`'s current round at snapshot weight
    /// `weight` (the seed must be drawn).
    pub fn seat_score(&self, task: &Pubkey, node: &Pubkey, seat: u8, weight: u64) -> SeatScore {
        SeatScore::new(&self.task(task).seed, &node.to_bytes(), seat, weight)
    }

    /// The holder of seat `seat` of `task`'s round as `join_task` weighs it: its score at the
    /// stake it still has in the snapshot, and its authority. `None` while the seat is free.
    pub fn holder(&self, task: &Pubkey, seat: u8) -> Option<(SeatScore, Pubkey)> {
        let t = self.try_task(task)?;
        let s = *t.round_seats().get(seat as usize)?;
        if !s.taken() {
            return None;
        }
        let n = self.try_node(&s.node)?;
        let weight = n.weight_at(t.snapshot_slot).min(s.weight);
        Some((
            SeatScore {
                weight,
                ..s.score()
            },
            n.authority,
        ))
    }

    /// A seat `v` can take now in `task`'s round, as `join_task` decides: a free seat its ticket
    /// is eligible for, else one whose holder it beats (with that holder's authority). Before
    /// the seed is drawn, the first free seat (the program draws and decides).
    pub fn winnable_seat(&self, v: &Actor, task: &Pubkey) -> Option<(u8, Option<Pubkey>)> {
        let t = self.try_task(task)?;
        let seats = t.round_seats();
        if !t.seed_drawn {
            let free = seats.iter().position(|s| !s.taken())?;
            return Some((free as u8, None));
        }
        let w = self.try_node(&v.node)?.weight_at(t.snapshot_slot);
        let mut displace = None;
        for (j, s) in seats.iter().enumerate() {
            let mine = SeatScore::new(&t.seed, &v.node.to_bytes(), j as u8, w);
            if s.node == v.node
                || !protocol::seats::seat_eligible(&mine, t.snapshot_stake, SEAT_OVERSAMPLE)
            {
                continue;
            }
            match self.holder(task, j as u8) {
                None => return Some((j as u8, None)),
                Some((h, auth)) if protocol::seats::wins_seat(Some(&h), &mine) => {
                    displace = displace.or(Some((j as u8, Some(auth))));
                }
                Some(_) => {}
            }
        }
        displace
    }

    /// `join_task` in the task's current round, for a seat it can take now
    /// ([`World::winnable_seat`]); with none, for the first free seat or seat 0, so that the
    /// program names the refusal.
    pub fn join(&mut self, v: &Actor, task: Pubkey) -> Result<TxRecord, TxRecord> {
        let (seat, displaced) = self.winnable_seat(v, &task).unwrap_or_else(|| {
            let free = self
                .try_task(&task)
                .and_then(|t| t.round_seats().iter().position(|s| !s.taken()));
            let seat = free.unwrap_or(0) as u8;
            (seat, self.holder(&task, seat).map(|(_, a)| a))
        });
        self.join_displacing(v, task, seat, displaced)
    }

    /// `join_task` for seat `seat`, naming its holder when it is taken.
    pub fn join_seat(&mut self, v: &Actor, task: Pubkey, seat: u8) -> Result<TxRecord, TxRecord> {
        let displaced = self.holder(&task, seat).map(|(_, a)| a);
        self.join_displacing(v, task, seat, displaced)
    }

    /// `join_task` for seat `seat` naming `displaced` (the authority of the seat's holder)
    /// explicitly.
    pub fn join_displacing(
        &mut self,
        v: &Actor,
        task: Pubkey,
        seat: u8,
        displaced: Option<Pubkey>,
    ) -> Result<TxRecord, TxRecord> {
        let round = self.round_of(&task);
        let vote = pda::vote(&task, &v.node, round);
        self.names.insert(
            vote,
            format!(
                "vote[{}:{}]",
                self.names.get(&task).cloned().unwrap_or_default(),
                v.name
            ),
        );
        let ix = client::join_task(v.key(), task, round, seat, displaced);
        self.send_as("join_task", v, ix)
    }

    /// `commit_vote` of `ballot` in the task's current round.
    pub fn commit(
        &mut self,
        v: &Actor,
        task: Pubkey,
        ballot: &Ballot,
    ) -> Result<TxRecord, TxRecord> {
        let round = self.round_of(&task);
        let c = ballot.commitment(&v.node, &task, round);
        self.send_as(
            "commit_vote",
            v,
            client::commit_vote(v.key(), task, round, c),
        )
    }

    /// Advances the clock, if needed, to the first slot where the task's seats are final
    /// (after its join deadline): reveals and early finalization open only then.
    pub fn close_join_window(&mut self, task: &Pubkey) {
        if let Some(t) = self.try_task(task) {
            let now = self.slot();
            if t.status == TaskStatus::Verifying && now <= t.join_deadline {
                self.advance(t.join_deadline + 1 - now);
            }
        }
    }

    /// `reveal_vote` of `ballot` in the task's current round, as soon as reveals may open
    /// (the clock moves past the join deadline first if needed).
    pub fn reveal(
        &mut self,
        v: &Actor,
        task: Pubkey,
        ballot: &Ballot,
    ) -> Result<TxRecord, TxRecord> {
        self.close_join_window(&task);
        self.reveal_now(v, task, ballot)
    }

    /// `reveal_vote` of `ballot` at the current slot.
    pub fn reveal_now(
        &mut self,
        v: &Actor,
        task: Pubkey,
        ballot: &Ballot,
    ) -> Result<TxRecord, TxRecord> {
        let round = self.round_of(&task);
        let args = RevealVoteArgs {
            vote: ballot.vote,
            evidence: ballot.evidence,
            salt: ballot.salt,
        };
        self.send_as(
            "reveal_vote",
            v,
            client::reveal_vote(v.key(), task, round, args),
        )
    }

    /// `finalize_task`, by the cranker.
    pub fn finalize(&mut self, task: Pubkey) -> Result<TxRecord, TxRecord> {
        let (provider, market) = self
            .try_task(&task)
            .map_or((Pubkey::default(), self.market), |t| (t.provider, t.market));
        self.crank(
            "finalize_task",
            client::finalize_task(task, provider, market),
        )
    }

    /// `settle_vote` of verifier `v` in `round`, by the cranker.
    pub fn settle(&mut self, task: Pubkey, v: &Actor, round: u8) -> Result<TxRecord, TxRecord> {
        self.crank("settle_vote", client::settle_vote(task, v.key(), round))
    }

    /// `close_task`, by the cranker; the treasury is passed only when the escrow holds more
    /// than the refund.
    pub fn close(&mut self, task: Pubkey) -> Result<TxRecord, TxRecord> {
        let (client, client_token, treasury) = match self.try_task(&task) {
            Some(t) => {
                let refund = t.client_refund().unwrap_or(0);
                let extra = self.balance(&pda::escrow(&task)) > refund;
                (t.client, t.client_token, extra.then_some(self.treasury))
            }
            None => (Pubkey::default(), Pubkey::default(), None),
        };
        self.crank(
            "close_task",
            client::close_task(task, client, client_token, treasury),
        )
    }

    /// `propose_params`, signed by the admin.
    pub fn propose(&mut self, params: Params) -> Result<TxRecord, TxRecord> {
        let admin = self.admin.insecure_clone();
        let ix = client::propose_params(admin.pubkey(), params);
        self.send("propose_params", &admin, &[], ix)
    }

    /// `sync_stake` of a node, by the cranker.
    pub fn sync(&mut self, node: Pubkey) -> Result<TxRecord, TxRecord> {
        let market = self.try_node(&node).map_or(self.market, |n| n.market);
        self.crank("sync_stake", client::sync_stake(node, market))
    }

    /// Sends `amount` stake tokens from `from`'s wallet straight into `to` (a vault or an
    /// escrow), outside the protocol: what a griefer can always do.
    pub fn donate(&mut self, from: &Actor, to: Pubkey, amount: u64) -> Result<TxRecord, TxRecord> {
        let ix = anchor_spl::token::spl_token::instruction::transfer(
            &anchor_spl::token::ID,
            &from.wallet,
            &to,
            &from.key(),
            &[],
            amount,
        )
        .expect("transfer instruction");
        let r = self.send_as("donate", from, ix)?;
        *self.donated.entry(to).or_default() += amount;
        Ok(r)
    }

    /// `sweep_fees` of a node, by the cranker.
    pub fn sweep(&mut self, node: Pubkey) -> Result<TxRecord, TxRecord> {
        let treasury = self.treasury;
        self.crank("sweep_fees", client::sweep_fees(node, treasury))
    }

    /// Joins and commits `ballot` for each verifier.
    pub fn join_and_commit(&mut self, task: Pubkey, votes: &[(&Actor, Ballot)]) {
        for (v, _) in votes {
            self.join(v, task)
                .unwrap_or_else(|r| panic!("join {}: {:?}", v.name, r.logs));
        }
        for (v, b) in votes {
            self.commit(v, task, b)
                .unwrap_or_else(|r| panic!("commit {}: {:?}", v.name, r.logs));
        }
    }

    /// Decides `task`'s round with `votes`: every voter joins and commits, the join window
    /// closes, every vote is revealed and the round is finalized (panics on a refusal).
    pub fn decide(&mut self, task: Pubkey, votes: &[(&Actor, Ballot)]) {
        self.join_and_commit(task, votes);
        self.close_join_window(&task);
        for (v, b) in votes {
            self.reveal(v, task, b)
                .unwrap_or_else(|r| panic!("reveal {}: {:?}", v.name, r.logs));
        }
        self.finalize(task)
            .unwrap_or_else(|r| panic!("finalize: {:?}", r.logs));
    }

    /// Panics unless the vault invariant holds for `nodes` and every live escrow matches its
    /// task's accounting, each plus exactly what strangers sent into it ([`World::donate`]).
    pub fn check_invariants(&self, nodes: &[&Actor], tasks: &[Pubkey]) {
        let donated = |k: &Pubkey| self.donated.get(k).copied().unwrap_or(0);
        for a in nodes {
            if let Some(n) = self.try_node(&a.node) {
                assert_eq!(
                    self.balance(&a.vault),
                    n.free
                        + n.bonded
                        + n.pending_unstake
                        + n.earned
                        + n.fees_due
                        + donated(&a.vault),
                    "vault of {} != free + bonded + pending + earned + fees (+ donations)",
                    a.name
                );
            }
        }
        for t in tasks {
            if let Some(task) = self.try_task(t) {
                let e = pda::escrow(t);
                assert_eq!(
                    self.balance(&e),
                    task.escrow_balance + donated(&e),
                    "escrow of {t} != its accounting (+ donations)"
                );
            }
        }
    }
}

impl Default for World {
    fn default() -> Self {
        Self::new()
    }
}

/// Runs `f`, which must fail with `error`, and checks that no token account changed.
pub fn refused(
    w: &mut World,
    error: &str,
    f: impl FnOnce(&mut World) -> Result<TxRecord, TxRecord>,
) {
    let before = w.balances();
    match f(w) {
        Ok(r) => panic!("expected {error}, but {} succeeded", r.label),
        Err(r) => assert!(
            r.has_error(error),
            "expected {error} from {}, got {:?}\n{}",
            r.label,
            r.error,
            r.logs.join("\n")
        ),
    }
    assert_eq!(before, w.balances(), "a refused instruction moved tokens");
}

/// Reward of the scenario tasks.
pub const R: u64 = 1_000_000;
/// Stake of every scenario node.
pub const STAKE: u64 = 10_000_000;

/// A fresh world with a funded client, a staked provider and staked verifiers.
pub struct Cast {
    /// The world.
    pub w: World,
    /// Posts tasks (100 R in its wallet).
    pub client: Actor,
    /// Claims and submits.
    pub provider: Actor,
    /// Verifier-only nodes.
    pub verifiers: Vec<Actor>,
}

/// A [`Cast`] with `n` verifiers and a provider with roles `provider_roles`.
pub fn cast(n: usize, provider_roles: u8) -> Cast {
    cast_in(n, provider_roles, test_market(1))
}

/// A [`cast`] in a world whose first market is `market`.
pub fn cast_in(n: usize, provider_roles: u8, market: MarketArgs) -> Cast {
    cast_with(n, provider_roles, test_params(), market)
}

/// A [`cast_in`] under `params` (a long dispute window needs a longer unstake cooldown).
pub fn cast_with(n: usize, provider_roles: u8, params: Params, market: MarketArgs) -> Cast {
    let mut w = World::with(params, market);
    let client = w.actor("client", 100 * R);
    let provider = w.actor("provider", STAKE);
    w.onboard(&provider, provider_roles, STAKE);
    let verifiers = w.verifiers("v", n, STAKE, STAKE);
    // one slot on: every node above is in the stake snapshot of a task submitted from now
    w.advance(1);
    Cast {
        w,
        client,
        provider,
        verifiers,
    }
}

impl Cast {
    /// Posts task `id`, claims it and submits root `[7; 32]`, then moves two slots on so the
    /// seed can be drawn (at slot N, SlotHashes holds only the slots before N). The clock first
    /// moves one slot so that every node staked so far is in the round's stake snapshot.
    pub fn submitted(&mut self, id: u64) -> Pubkey {
        self.w.advance(1);
        let task = self
            .w
            .post(&self.client, id, small_job(id as u8), R)
            .expect("post");
        self.w.claim(&self.provider, task).expect("claim");
        self.w
            .submit(&self.provider, task, [7; 32])
            .expect("submit");
        self.w.advance(2);
        task
    }

    /// Posts task `id` running `job` with `samples` per verifier (0: the market's), claims it
    /// and submits `root`, then moves on as [`Cast::submitted`] does.
    pub fn submitted_job(&mut self, id: u64, job: JobSpec, samples: u16, root: [u8; 32]) -> Pubkey {
        self.w.advance(1);
        let mut args = PostTaskArgs::new(id, &job, R);
        args.samples = samples;
        if job.input_mode == compute_market_protocol::job::InputMode::ContentHash {
            args.input_uri = "http://store.test".into();
        }
        let task = self.w.post_with(&self.client, args).expect("post");
        self.w.claim(&self.provider, task).expect("claim");
        self.w.submit(&self.provider, task, root).expect("submit");
        self.w.advance(2);
        task
    }
}

/// A small `MatMulModP` job.
pub fn small_job(seed: u8) -> JobSpec {
    JobSpec::matmul(128, 128, 128, [seed; 32])
}

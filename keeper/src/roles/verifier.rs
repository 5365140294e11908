//! Verifier: competes for a seat when its ticket can still win one (PROTOCOL §3, Seats: its
//! snapshot stake, the lowest stake-weighted tickets), checks the result (Freivalds over the
//! whole product for `MatMulModP`, proven recomputed samples otherwise), commits its vote, and
//! reveals it once commits are closed.
//!
//! What it fetched and checked it keeps in its store's reserve and serves again (PROTOCOL
//! §8.12): the whole result of a `MatMulModP`, its sampled tiles with their proofs otherwise,
//! until the task's dispute window ends (at least the reserve's retention), so a client whose
//! provider went away still has sources.
//!
//! It checks before joining, then joins and commits in one transaction (one fee, one slot),
//! at its own risk: the seat may be taken meanwhile, or a better ticket may still displace it
//! during the join window, which costs it the check only — the program releases a displaced
//! verifier's bond and returns its vote account's rent.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    thread::JoinHandle,
    time::Instant,
};

use anchor_lang::prelude::Pubkey;
use anyhow::Result;
use compute_market::{
    client,
    constants::SEAT_OVERSAMPLE,
    events::{TaskEscalated, TaskFinalized},
    instructions::RevealVoteArgs,
    pda,
    state::{Node, Task, TaskStatus, Vote},
};
use compute_market_protocol::{
    commit::{vote_commitment, VOTE_INVALID, VOTE_UNAVAILABLE, VOTE_VALID},
    hash::{hashv, Digest},
    job::{JobKind, JobSpec},
    sampling::sample_indices,
    seats::{seat_eligible, wins_seat, SeatScore},
};
use solana_signer::Signer;

use super::{provider::SLOT_SECONDS, send, NodeCtx};
use crate::db::{Db, Sealed};
use crate::{
    chain::{Chain, ChainExt},
    results::{hex, input_bases, FetchError},
    verify::{check_matmul, check_sampled, distinct, Verdict},
};

/// A verifier stops retrying an unreachable result this many slots before the commit deadline
/// (at most half the commit window) and votes it UNAVAILABLE (PROTOCOL §3.4): time left to seal
/// and land the commit.
pub const GIVE_UP_SLOTS: u64 = 8;

/// The slot by which a verifier that has no seat yet must have checked `t`'s result, to join
/// (and commit) before the join deadline: a quarter of the join window before it, at most 4
/// slots.
pub fn join_by(t: &Task) -> u64 {
    let margin = 4u64.min(u64::from(t.windows.join) / 4);
    t.join_deadline.saturating_sub(margin)
}

/// The slot by which a verifier must have fetched `t`'s result: [`GIVE_UP_SLOTS`] before the
/// commit deadline, or half the commit window when that is shorter.
pub fn give_up_slot(t: &Task) -> u64 {
    let margin = GIVE_UP_SLOTS.min(u64::from(t.windows.commit) / 2);
    t.commit_deadline.saturating_sub(margin)
}

/// Longest one attempt at fetching a result of `job` (`samples` tiles of it, unless it is a
/// `MatMulModP`, fetched whole) may take: 2 s, plus the time its bytes take at 1 MiB/s. An attempt that runs out is no verdict, only a retry on a later pass (within
/// capacity, [`Verifier::admit`]), so a fetch nobody answers holds a check's place for
/// seconds, not for the rest of the join or commit window.
pub fn attempt_budget(job: &JobSpec, samples: u16) -> std::time::Duration {
    let bytes = match job.kind {
        JobKind::MatMulModP => crate::results::wire::all_len(job),
        _ => crate::results::wire::proven_len(job, usize::from(samples)),
    };
    std::time::Duration::from_secs(2)
        + std::time::Duration::from_secs_f64(bytes as f64 / f64::from(1u32 << 20))
}

/// What one seat of `t`'s current round is expected to earn: the verifiers' pool over the
/// round's seats (PROTOCOL §4.2), the measure check capacity is shared by.
pub fn expected_pay(t: &Task) -> u64 {
    let pool = u128::from(t.reward) * u128::from(t.terms.verifier_pool_bps) / 10_000;
    (pool / u128::from(t.tally().quorum.max(1))) as u64
}

/// Work a verifier did on one task.
#[derive(Clone, Debug)]
pub struct VerifyRecord {
    /// The task.
    pub task: Pubkey,
    /// Seconds spent fetching and checking.
    pub seconds: f64,
    /// The vote.
    pub vote: u8,
    /// Why.
    pub reason: String,
    /// The node whose seat this verifier took by displacing it (its ticket was worse).
    pub displaced: Option<Pubkey>,
}

/// A verifier.
pub struct Verifier {
    /// Identity, backend and result store.
    pub ctx: NodeCtx,
    /// A careless verifier votes "valid" without checking.
    pub careless: bool,
    /// A lying verifier votes "invalid" without checking, pointing at a right element (tests
    /// and demos: what a provider's dispute answers).
    pub lying: bool,
    /// Crash-safe store of sealed votes.
    pub db: Arc<Db>,
    /// What it checked.
    pub records: Vec<VerifyRecord>,
    /// Test only: after a commit lands, wait this long before anything else (a window in
    /// which a test kills the process between commit and reveal).
    pub hold_after_commit: Option<std::time::Duration>,
    /// Check on background threads (the daemon): a pass only starts checks and commits the
    /// finished ones, so a long check never delays another task's commit or reveal. Off, a
    /// pass checks in line (the embedded demo, in order).
    pub background: bool,
    /// Background checks run at once, at most (four per core by default: most checks take
    /// milliseconds, and a pass joins many tasks at once): beyond them the verifier does not
    /// compete for new seats, so it never holds seats it cannot check in time.
    pub max_checks: usize,
    /// Other keepers that may hold a result (bases without a trailing slash:
    /// `<mirror>/r/<root>`, `<mirror>/c/<hash>`),
    /// asked when the provider does not answer, before voting UNAVAILABLE (PROTOCOL §5,
    /// Fetching, bounded).
    pub mirrors: Vec<String>,
    /// Draining (the daemon's first SIGTERM): no new seat is taken; the votes it holds are
    /// committed and revealed, its verdicts under dispute defended ([`Verifier::owed`]).
    pub draining: Arc<std::sync::atomic::AtomicBool>,
    running: Mutex<HashMap<(Pubkey, u8), JoinHandle<Result<(VerifyRecord, Sealed)>>>>,
    finalize_tried: Mutex<std::collections::HashSet<(Pubkey, u8)>>,
    /// Records of checks whose join was refused (the seat taken meanwhile), by task and round.
    unjoined: Mutex<HashMap<(Pubkey, u8), VerifyRecord>>,
    /// Rounds it finalized with its own last reveal.
    pub finalized: Mutex<Vec<TaskFinalized>>,
    /// Tasks whose round it escalated with its own last reveal.
    pub escalated: Mutex<Vec<Pubkey>>,
    /// The disputes it plays: of Accepted verdicts its INVALID votes lost (PROTOCOL §8).
    disputes: super::challenger::Disputes,
}

/// What a check needs, owned (it may run on its own thread).
#[derive(Clone)]
struct Checker {
    name: String,
    node: Pubkey,
    secret: [u8; 32],
    backend: Arc<dyn crate::compute::Backend>,
    store: Arc<crate::results::ResultStore>,
    db: Arc<Db>,
    careless: bool,
    lying: bool,
    mirrors: Vec<String>,
}

impl Verifier {
    /// An honest verifier.
    pub fn new(ctx: NodeCtx, db: Arc<Db>) -> Self {
        Verifier {
            ctx,
            careless: false,
            lying: false,
            db,
            records: vec![],
            hold_after_commit: None,
            background: false,
            max_checks: 4 * std::thread::available_parallelism().map_or(2, |n| n.get()),
            mirrors: vec![],
            draining: Arc::default(),
            running: Mutex::new(HashMap::new()),
            finalize_tried: Mutex::default(),
            unjoined: Mutex::default(),
            finalized: Mutex::default(),
            escalated: Mutex::default(),
            disputes: Default::default(),
        }
    }

    /// Disputes the Accepted verdicts its INVALID votes lost (PROTOCOL §8): a held task of its
    /// market whose deciding round it voted INVALID in with a pointer kept in its store; the
    /// dispute is argued to its end, or resumed where the chain has it after a restart.
    fn dispute_lost(&self, chain: &dyn Chain, now: u64, tasks: &[(Pubkey, Task)]) {
        use super::challenger::Claim;
        use crate::dispute::Pointer;
        for (key, t) in tasks {
            if !t.held {
                continue;
            }
            let Ok(Some(bytes)) = self.db.pointer(key, t.round) else {
                continue;
            };
            let Some(p) = Pointer::decode(&bytes) else {
                continue;
            };
            let kind = compute_market_protocol::dispute::DISPUTE_RESULT_WRONG;
            if self.disputes.wants(&self.db, key, t, kind, now) {
                self.disputes
                    .play(chain, &self.ctx, &self.db, key, &Claim::ResultWrong(&p));
            }
        }
    }

    /// What it still owes on `tasks` (read at `now`), so that a keeper asked to stop keeps
    /// running until this is empty (docs/PROTOCOL.md §3.8): a seat's vote to commit while the
    /// commit window is open, a committed vote to reveal while the reveal window is (else the
    /// no-reveal slash), and a verdict it voted in under a dispute or game (its bond at stake).
    pub fn owed(
        &self,
        chain: &dyn Chain,
        now: u64,
        tasks: &[(Pubkey, Task)],
    ) -> Result<Vec<super::Owed>> {
        let mut out = vec![];
        for (key, t) in tasks {
            let voting = t.status == TaskStatus::Verifying && self.seated_at(t);
            let disputed = t.held && (t.games_open > 0 || t.disputes_open > 0);
            if !voting && !disputed {
                continue;
            }
            let Some(v): Option<Vote> = chain.decoded(&pda::vote(key, &self.ctx.node, t.round))?
            else {
                continue;
            };
            let what = if voting && !v.committed && now <= t.commit_deadline {
                "seated, its vote not yet committed"
            } else if voting && v.committed && !v.revealed && now <= t.reveal_deadline {
                "its vote committed, not yet revealed"
            } else if disputed {
                "a verdict it voted in under dispute"
            } else {
                continue;
            };
            out.push(super::Owed { task: *key, what });
        }
        Ok(out)
    }

    /// Defends the held verdicts it voted in against game claims its own trace finds wrong
    /// (PROTOCOL §8.10): a VALID vote's bond is at stake in a kind-1 claim, an INVALID vote's
    /// in a kind-2 one.
    fn defend_verdicts(&self, chain: &dyn Chain, tasks: &[(Pubkey, Task)]) {
        for (key, t) in tasks {
            if !t.held || t.games_open == 0 && t.disputes_open == 0 {
                continue;
            }
            let voted = chain
                .account(&compute_market::pda::vote(key, &self.ctx.node, t.round))
                .ok()
                .flatten()
                .is_some();
            if voted {
                let data = || self.disputes.inputs_of(chain, &self.ctx, key);
                super::games::defend_claims(chain, &self.ctx, &data, key, t);
            }
        }
    }

    fn checker(&self) -> Checker {
        let mut secret = [0u8; 32];
        secret.copy_from_slice(&self.ctx.kp.to_bytes()[..32]);
        Checker {
            name: self.ctx.name.clone(),
            node: self.ctx.node,
            secret,
            backend: self.ctx.backend.clone(),
            store: self.ctx.store.clone(),
            db: self.db.clone(),
            careless: self.careless,
            lying: self.lying,
            mirrors: self.mirrors.clone(),
        }
    }

    /// Checks being run in the background now (finished ones waiting for their commit are
    /// not counted).
    pub fn checking(&self) -> usize {
        self.running
            .lock()
            .expect("running lock")
            .values()
            .filter(|h| !h.is_finished())
            .count()
    }

    /// Drops finished checks no pass will commit: their task left verification or moved to
    /// another round, or its commit window closed (their sealed votes stay on disk).
    fn reap(&self, now: u64, due: &[(Pubkey, Task)]) {
        let live: std::collections::HashSet<(Pubkey, u8)> = due
            .iter()
            .filter(|(_, t)| now <= t.commit_deadline)
            .map(|(k, t)| (*k, t.round))
            .collect();
        let mut running = self.running.lock().expect("running lock");
        let dead: Vec<(Pubkey, u8)> = running
            .iter()
            .filter(|(k, h)| h.is_finished() && !live.contains(k))
            .map(|(k, _)| *k)
            .collect();
        for k in dead {
            if let Some(h) = running.remove(&k) {
                let _ = h.join();
            }
        }
    }

    /// Commits `sealed`; with `join`, joins in the same transaction (one fee, one slot).
    /// Whether it landed.
    fn commit(
        &self,
        chain: &dyn Chain,
        task: &Pubkey,
        round: u8,
        sealed: &Sealed,
        join: Vec<solana_instruction::Instruction>,
    ) -> Result<bool> {
        let c = vote_commitment(
            &self.ctx.node.to_bytes(),
            &task.to_bytes(),
            round,
            sealed.vote,
            &sealed.evidence,
            &sealed.salt,
        );
        let what = if !join.is_empty() {
            "join_task+commit_vote"
        } else {
            "commit_vote"
        };
        let mut ixs = join;
        ixs.push(client::commit_vote(self.ctx.kp.pubkey(), *task, round, c));
        let ok = super::send_packed(chain, &self.ctx.name, what, task, ixs, &self.ctx.kp)?
            .iter()
            .all(|r| r.ok);
        if let (true, Some(hold)) = (ok, self.hold_after_commit) {
            tracing::warn!(task = %task, ?hold, "--hold-after-commit-ms: holding between commit and reveal");
            std::thread::sleep(hold);
        }
        Ok(ok)
    }

    /// The sealed vote on disk for `t`'s current round, when it was checked under `t`'s seed (a
    /// task re-posted at the same address has another seed: its vote is never reused). With
    /// `legacy`, a record written before seeds were kept counts too (a seat already holds it).
    fn sealed_for(&self, key: &Pubkey, t: &Task, legacy: bool) -> Result<Option<Sealed>> {
        Ok(self
            .db
            .sealed(key, t.round)?
            .filter(|s| s.seed == t.seed || (legacy && s.seed == [0; 32])))
    }

    /// The sealed vote on `t`: already on disk (checked before: a refused join, a restart),
    /// or checked, sealed and persisted now — in line, or in the background, where the check
    /// runs on its own thread and `None` comes back until a later pass finds it finished. The
    /// record comes with a check run now. A crash at any point leaves either nothing sealed or
    /// a sealed vote on disk, written before anything commits to it.
    #[allow(clippy::too_many_arguments)]
    fn sealed_vote(
        &self,
        now: u64,
        key: &Pubkey,
        t: &Task,
        by: u64,
        may_give_up: bool,
        may_start: bool,
    ) -> Result<Option<(Option<VerifyRecord>, Sealed)>> {
        if let Some(sealed) = self.sealed_for(key, t, may_give_up)? {
            self.running
                .lock()
                .expect("running lock")
                .remove(&(*key, t.round));
            return Ok(Some((None, sealed)));
        }
        if !self.background {
            let (record, sealed) = self
                .checker()
                .check_and_seal(now, key, t, by, may_give_up)?;
            return Ok(Some((Some(record), sealed)));
        }
        let mut running = self.running.lock().expect("running lock");
        match running.remove(&(*key, t.round)) {
            Some(h) if !h.is_finished() => {
                running.insert((*key, t.round), h);
                Ok(None)
            }
            Some(h) => {
                drop(running);
                let (record, sealed) = h
                    .join()
                    .map_err(|_| anyhow::anyhow!("the check of task {key} panicked"))??;
                Ok(Some((Some(record), sealed)))
            }
            // a new check only where this pass's capacity went (`admit`)
            None if !may_start => Ok(None),
            None => {
                let (c, k, task) = (self.checker(), *key, t.clone());
                let h = std::thread::Builder::new()
                    .name(format!("check-{}", &k.to_string()[..8]))
                    .spawn(move || {
                        super::guard(|| c.check_and_seal(now, &k, &task, by, may_give_up))
                    })?;
                running.insert((*key, t.round), h);
                Ok(None)
            }
        }
    }

    /// What is due on one task; the record of a check when one ran.
    fn on_task(
        &self,
        chain: &dyn Chain,
        now: u64,
        node: &Node,
        key: Pubkey,
        t: &Task,
        admitted: bool,
    ) -> Result<Option<VerifyRecord>> {
        let round = t.round;
        // past its give-up slot a seated check needs no capacity: it ends within a slot
        let may_start = admitted || (self.seated_at(t) && now >= give_up_slot(t));
        // the task's seats say whether this verifier holds one: its vote account is read only
        // then (or while its check runs, the seat newer than the task read)
        let seated = t.seats_held_by(&self.ctx.node) > 0
            || self
                .running
                .lock()
                .expect("running lock")
                .contains_key(&(key, round));
        let seat: Option<Vote> = if seated {
            chain.decoded(&pda::vote(&key, &self.ctx.node, round))?
        } else {
            None
        };
        if let Some(v) = seat {
            match self.sealed_for(&key, t, true)? {
                Some(sealed) if !v.committed && now <= t.commit_deadline => {
                    self.commit(chain, &key, round, &sealed, vec![])?;
                }
                Some(sealed)
                    if v.committed
                        && !v.revealed
                        && t.reveal_open(now)
                        && now <= t.reveal_deadline =>
                {
                    let args = RevealVoteArgs {
                        vote: sealed.vote,
                        evidence: sealed.evidence,
                        salt: sealed.salt,
                    };
                    let reveal = client::reveal_vote(self.ctx.kp.pubkey(), key, round, args);
                    // the last reveal of a full round finalizes it in the same transaction (one
                    // transaction fewer per task); once such a pair was refused, the reveal
                    // goes alone, so a finalize that cannot land never holds a reveal back
                    let tally = t.tally();
                    let last = tally.seats == tally.quorum
                        && u16::from(tally.revealed) + u16::from(v.seats)
                            == u16::from(tally.quorum);
                    let tried = self
                        .finalize_tried
                        .lock()
                        .expect("tried lock")
                        .contains(&(key, round));
                    if last && !tried {
                        let finalize = client::finalize_task(key, t.provider, t.market);
                        let r = super::send_packed(
                            chain,
                            &self.ctx.name,
                            "reveal_vote+finalize_task",
                            &key,
                            vec![reveal, finalize],
                            &self.ctx.kp,
                        )?;
                        for r in &r {
                            self.finalized
                                .lock()
                                .expect("finalized lock")
                                .extend(r.events::<TaskFinalized>());
                            if !r.events::<TaskEscalated>().is_empty() {
                                self.escalated.lock().expect("escalated lock").push(key);
                            }
                        }
                        if !r.iter().all(|r| r.ok) {
                            self.finalize_tried
                                .lock()
                                .expect("tried lock")
                                .insert((key, round));
                        }
                    } else {
                        super::send_packed(
                            chain,
                            &self.ctx.name,
                            "reveal_vote",
                            &key,
                            vec![reveal],
                            &self.ctx.kp,
                        )?;
                    }
                }
                // joined, then crashed before sealing: nothing was committed, check again
                None if !v.committed && now <= t.commit_deadline => {
                    if let Some((record, sealed)) =
                        self.sealed_vote(now, &key, t, give_up_slot(t), true, may_start)?
                    {
                        self.commit(chain, &key, round, &sealed, vec![])?;
                        return Ok(record);
                    }
                }
                _ => {}
            }
            return Ok(None);
        }
        // draining: no new seat (the seats it holds were handled above)
        if self.draining.load(std::sync::atomic::Ordering::SeqCst) {
            return Ok(None);
        }
        // draw the seed ourselves rather than wait for a cranker: the sooner it is drawn, the
        // less anyone can wait for its reference to age out of SlotHashes
        // a few slots after a cranker would (staggered by key), so that one draw lands
        // rather than one per keeper
        let stagger = 4 + u64::from(self.ctx.node.to_bytes()[0] % 4);
        if !t.seed_drawn && now >= t.reference_slot + 2 + stagger && now <= t.join_deadline {
            send(
                chain,
                &self.ctx.name,
                "draw_seed",
                &key,
                client::draw_seed(key),
                &self.ctx.kp,
            )?;
            return Ok(None);
        }
        // without a place for a new check this pass, it competes only with a vote already
        // checked (a refused join to retry) or a check under way
        if self.background
            && !admitted
            && !self.is_running(&key, round)
            && self.sealed_for(&key, t, false)?.is_none()
        {
            return Ok(None);
        }
        // one seat a round for now (the first it wins: a free one before a displacement);
        // the program lets a node hold every seat its tickets win (PROTOCOL §3.3)
        let plan: Vec<SeatPlan> = seat_plan(t, node, &self.ctx.node, &self.ctx.kp.pubkey(), now)
            .into_iter()
            .min_by_key(|p| p.holder.is_some())
            .into_iter()
            .collect();
        let join = self.joins(chain, &key, round, &plan)?;
        if join.is_empty() {
            return Ok(None);
        }
        // check first, at its own risk (the seats may be taken meanwhile, or displaced until
        // the join window closes), then join and commit in one transaction
        // unseated, the check must end in time to join; running out of time is no verdict:
        // then it joins alone and goes on checking seated, until the commit's give-up slot
        let checked = self.sealed_vote(now, &key, t, join_by(t), false, may_start);
        let (record, sealed) = match checked {
            Ok(Some(done)) => done,
            Ok(None) | Err(_) if now >= join_by(t) => {
                if let Err(e) = &checked {
                    tracing::info!(verifier = self.ctx.name, task = %key, error = %format!("{e:#}"), "not checked before the join window closes: joining, checking seated");
                }
                super::send_packed(chain, &self.ctx.name, "join_task", &key, join, &self.ctx.kp)?;
                return Ok(None);
            }
            Ok(None) => return Ok(None),
            Err(e) => return Err(e),
        };
        if self.commit(chain, &key, round, &sealed, join)? {
            // the check's own record when an earlier join of it was refused
            let kept = self
                .unjoined
                .lock()
                .expect("unjoined lock")
                .remove(&(key, round));
            // (none for a vote checked before a restart, or rejoined after a displacement:
            // its check was recorded then)
            let Some(mut record) = record.or(kept) else {
                return Ok(None);
            };
            record.displaced = plan.iter().find_map(|p| p.holder);
            return Ok(Some(record));
        }
        if let Some(record) = record {
            // the seat was taken meanwhile: keep what the check found for a later join
            self.unjoined
                .lock()
                .expect("unjoined lock")
                .insert((key, round), record);
        }
        Ok(None)
    }

    /// The `join_task` instructions for `plan`'s seats; a taken seat's holder receives its
    /// vote's rent if it loses its last seat, so its authority is read from its node (a seat
    /// whose holder node cannot be read is left out).
    fn joins(
        &self,
        chain: &dyn Chain,
        task: &Pubkey,
        round: u8,
        plan: &[SeatPlan],
    ) -> Result<Vec<solana_instruction::Instruction>> {
        let mut out = vec![];
        for p in plan {
            let displaced = match p.holder {
                None => None,
                Some(holder) => match chain.node(&holder)? {
                    Some(n) => Some(n.authority),
                    None => continue,
                },
            };
            out.push(client::join_task(
                self.ctx.kp.pubkey(),
                *task,
                round,
                p.seat,
                displaced,
            ));
        }
        Ok(out)
    }

    /// Whether it holds a seat of `t`'s current round.
    fn seated_at(&self, t: &Task) -> bool {
        t.seats_held_by(&self.ctx.node) > 0
    }

    /// Whether a check of `key`'s `round` is running (or finished, not yet committed).
    fn is_running(&self, key: &Pubkey, round: u8) -> bool {
        self.running
            .lock()
            .expect("running lock")
            .contains_key(&(*key, round))
    }

    /// The tasks that may start a new background check this pass (issue 29, finding 2): the
    /// free capacity (`max_checks` less the checks running) goes to what pays, by expected
    /// pay per seat, then nearest deadline, with each provider's tasks first held to an
    /// equal share of the capacity (so one provider's tasks cannot hold all of it) and the
    /// rest handed out after. A check that gets no answer yields its place within its
    /// attempt ([`attempt_budget`]), so a flood of never-answering tasks delays a paying one
    /// by an attempt at most. Candidates: seated without a commit, or unseated with a seat
    /// its ticket can win, and neither checked nor being checked.
    fn admit(
        &self,
        now: u64,
        node: &Node,
        due: &[(Pubkey, Task)],
    ) -> std::collections::HashSet<Pubkey> {
        let mut out = std::collections::HashSet::new();
        if !self.background {
            return out;
        }
        // draining: checks only for the seats it holds (a retry of a timed-out check)
        let draining = self.draining.load(std::sync::atomic::Ordering::SeqCst);
        let mut per_provider: HashMap<Pubkey, usize> = HashMap::new();
        let mut candidates = vec![];
        for (key, t) in due {
            if self.is_running(key, t.round) {
                *per_provider.entry(t.provider).or_default() += 1;
                continue;
            }
            if self.sealed_for(key, t, true).ok().flatten().is_some() {
                continue;
            }
            let wanted = if self.seated_at(t) {
                now <= t.commit_deadline
            } else if draining {
                false
            } else {
                !seat_plan(t, node, &self.ctx.node, &self.ctx.kp.pubkey(), now).is_empty()
            };
            if wanted {
                candidates.push((key, t));
            }
        }
        let mut free = self.max_checks.saturating_sub(self.checking());
        if free == 0 || candidates.is_empty() {
            return out;
        }
        candidates.sort_by_key(|(k, t)| {
            let deadline = if self.seated_at(t) {
                give_up_slot(t)
            } else {
                join_by(t)
            };
            (std::cmp::Reverse(expected_pay(t)), deadline, **k)
        });
        let providers: std::collections::HashSet<Pubkey> = candidates
            .iter()
            .map(|(_, t)| t.provider)
            .chain(per_provider.keys().copied())
            .collect();
        let share = self.max_checks.div_ceil(providers.len().max(1)).max(1);
        // first within each provider's share, then whatever capacity is left, in rank order
        for within_share in [true, false] {
            for (k, t) in &candidates {
                if free == 0 {
                    return out;
                }
                if out.contains(*k) {
                    continue;
                }
                let n = per_provider.entry(t.provider).or_default();
                if within_share && *n >= share {
                    continue;
                }
                *n += 1;
                free -= 1;
                out.insert(**k);
            }
        }
        out
    }

    /// One pass over the tasks of its market in verification.
    pub fn step(&mut self, chain: &dyn Chain) -> Result<()> {
        let now = chain.slot()?;
        let tasks = chain.tasks_of(&self.ctx.market)?;
        self.step_with(chain, now, &tasks)
    }

    /// [`Verifier::step`] over tasks already read (the daemon reads them once per pass).
    /// Time-critical work goes first: tasks where it holds a seat (a sealed vote to commit or
    /// reveal before its deadline) come before seats to compete for, nearest deadline first.
    pub fn step_with(
        &mut self,
        chain: &dyn Chain,
        now: u64,
        tasks: &[(Pubkey, Task)],
    ) -> Result<()> {
        let Some(node) = chain.node(&self.ctx.node)? else {
            return Ok(());
        };
        let mut due: Vec<(Pubkey, Task)> = tasks
            .iter()
            .filter(|(_, t)| t.status == TaskStatus::Verifying && t.market == self.ctx.market)
            .cloned()
            .collect();
        self.reap(now, &due);
        due.sort_by_key(|(k, t)| (!self.seated_at(t), t.reveal_deadline, *k));
        let admitted = self.admit(now, &node, &due);
        // up to `parallel` tasks at once; one task's failure (an RPC error, an unreachable
        // result, a panic) never blocks the others
        let results = super::parallel(self.ctx.parallel, due, |(key, t)| {
            let admitted = !self.background || admitted.contains(&key);
            (
                key,
                super::guard(|| self.on_task(chain, now, &node, key, &t, admitted)),
            )
        });
        for (key, r) in results {
            match r {
                Ok(Some(record)) => self.records.push(record),
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(verifier = self.ctx.name, task = %key, error = %format!("{e:#}"), "will retry")
                }
            }
        }
        self.dispute_lost(chain, now, tasks);
        self.defend_verdicts(chain, tasks);
        self.upkeep_reserve(now, tasks);
        Ok(())
    }

    /// Keeps what it kept of a held task's result until its dispute window ends (the deadline
    /// is known once the verdict is), and deletes what is past its time (PROTOCOL §8.12).
    fn upkeep_reserve(&self, now: u64, tasks: &[(Pubkey, Task)]) {
        let reserve = &self.ctx.store.reserve;
        for (_, t) in tasks {
            if t.held && t.dispute_deadline > now {
                reserve.extend(&t.result_root, slot_time(now, t.dispute_deadline));
            }
        }
        reserve.sweep(std::time::SystemTime::now());
    }
}

/// The wall-clock time of slot `at`, seen from slot `now` (at [`SLOT_SECONDS`] a slot).
fn slot_time(now: u64, at: u64) -> std::time::SystemTime {
    std::time::SystemTime::now()
        + std::time::Duration::from_secs_f64(at.saturating_sub(now) as f64 * SLOT_SECONDS)
}

impl Checker {
    /// Fetches and checks the result of `t`: from its provider, else from a mirror (whose
    /// answer counts only when it checks VALID). What the provider served that breaks the
    /// protocol is INVALID; a result no source served by [`GIVE_UP_SLOTS`] before the commit
    /// deadline is UNAVAILABLE, never a losing vote (PROTOCOL §3.4; until then a transient
    /// failure is an error, and the check is tried again on the next pass).
    fn check(
        &self,
        task: &Pubkey,
        t: &Task,
        now: u64,
        give_up: u64,
        may_give_up: bool,
    ) -> Result<Verdict> {
        let job = JobSpec::decode(&t.job)
            .map_err(|e| anyhow::anyhow!("task {task}: malformed job spec: {e}"))?;
        let uri = super::result_uri(t);
        // every fetch ends by the give-up slot (one slot from now when that has passed): a
        // provider that holds a connection open cannot make the verifier miss its commit;
        // and each attempt within its budget, so a fetch nobody answers yields its place
        let give_up_at = Instant::now()
            + std::time::Duration::from_secs_f64(
                give_up.saturating_sub(now).max(1) as f64 * SLOT_SECONDS,
            );
        let deadline = give_up_at.min(Instant::now() + attempt_budget(&job, t.samples));
        // a job on the client's data: its inputs first, from the task's input URI or from
        // the provider (which serves what it computed on)
        let sources: Vec<&str> = std::iter::once(uri)
            .chain(self.mirrors.iter().map(String::as_str))
            .collect();
        let inputs = self.store.ensure_inputs(
            &job,
            &input_bases(super::input_uri(t), &sources),
            Some(deadline),
        );
        let held = inputs.is_ok();
        // what it checks is kept until the dispute window that follows the reveals ends
        let keep = Keep {
            task: *task,
            until: self.store.reserve.until(slot_time(
                now,
                t.reveal_deadline
                    .saturating_add(u64::from(t.dispute_window)),
            )),
        };
        let fetched = inputs.and_then(|_| self.check_from(uri, t, &job, deadline, &keep));
        // the provider did not answer: any mirror holding the root (a VALID verdict only; the
        // mirrors were asked for the inputs already)
        let fetched = match fetched {
            Err(e) if e.is_transient() && held => {
                let root = hex(&t.result_root);
                let from_mirror = self.mirrors.iter().find_map(|m| {
                    let at = format!("{m}/r/{root}");
                    // each mirror its own attempt: a provider that held its connection open
                    // to the end of the first must not leave the mirrors no time
                    let deadline =
                        give_up_at.min(Instant::now() + attempt_budget(&job, t.samples));
                    match self.check_from(&at, t, &job, deadline, &keep) {
                        Ok(Ok(v)) if v.vote == VOTE_VALID => Some(Ok(Verdict {
                            reason: format!("{} (served by the mirror {m})", v.reason),
                            ..v
                        })),
                        Ok(Ok(v)) => {
                            tracing::info!(task = %task, mirror = %m, reason = v.reason, "a mirror's answer does not check: ignored");
                            None
                        }
                        Ok(Err(e)) => {
                            tracing::info!(task = %task, mirror = %m, error = %format!("{e:#}"), "a mirror could not check the result: ignored");
                            None
                        }
                        Err(e) => {
                            tracing::debug!(task = %task, mirror = %m, error = %e, "a mirror did not serve the result");
                            None
                        }
                    }
                });
                match from_mirror {
                    Some(v) => Ok(v),
                    None => Err(e),
                }
            }
            other => other,
        };
        match fetched {
            Ok(verdict) => verdict,
            Err(e)
                if e.is_transient()
                    && (!may_give_up || (now < give_up && Instant::now() < give_up_at)) =>
            {
                Err(anyhow::anyhow!(e).context(format!(
                    "fetching the inputs or the result of task {task} (retrying until slot {give_up})"
                )))
            }
            Err(e) if e.is_transient() => Ok(Verdict::plain(
                VOTE_UNAVAILABLE,
                format!("no source served the inputs or the result by slot {give_up}: {e}"),
            )),
            Err(e) => Ok(Verdict::plain(
                VOTE_INVALID,
                format!("what was served breaks the protocol: {e}"),
            )),
        }
    }

    /// Fetches `t`'s result (the samples its seed draws for this verifier, or all of a
    /// `MatMulModP` product) from `uri`, its inputs held, checks it, and keeps what it fetched
    /// as `keep` says when it proves against the root (PROTOCOL §8.12).
    fn check_from(
        &self,
        uri: &str,
        t: &Task,
        job: &JobSpec,
        deadline: Instant,
        keep: &Keep,
    ) -> Result<Result<Verdict>, FetchError> {
        let me = self.node.to_bytes();
        match job.kind {
            JobKind::MatMulModP => self
                .store
                .fetch_all_by(uri, job, Some(deadline))
                .map(|tiles| {
                    let v = check_matmul(
                        self.backend.as_ref(),
                        job,
                        &tiles,
                        &t.result_root,
                        &t.seed,
                        &me,
                        t.samples as u32,
                    );
                    // (a keeper that serves the root itself, its own provider's, keeps no copy)
                    if self.store.entry(&t.result_root).is_none() {
                        let kept = self.store.reserve.keep_whole(
                            keep.task.to_bytes(),
                            *job,
                            t.result_root,
                            tiles,
                            keep.until,
                        );
                        self.kept(&keep.task, kept);
                    }
                    v
                }),
            JobKind::HashBatch | JobKind::Mlp | JobKind::Encoder | JobKind::Generate => {
                let picked = sample_indices(&t.seed, &me, t.samples as u32, t.tile_count);
                let want = distinct(&picked);
                self.store
                    .fetch_by(uri, job, &want, Some(deadline))
                    .map(|served| {
                        let v = check_sampled(
                            self.backend.as_ref(),
                            job,
                            &picked,
                            &served,
                            &t.result_root,
                        );
                        if self.store.entry(&t.result_root).is_none() {
                            let kept = self.store.reserve.keep_tiles(
                                *job,
                                t.result_root,
                                &served,
                                keep.until,
                            );
                            self.kept(&keep.task, kept);
                        }
                        v
                    })
            }
        }
    }

    /// Logs what keeping a checked result came to.
    fn kept(&self, task: &Pubkey, kept: Result<bool>) {
        match kept {
            Ok(true) => {
                tracing::debug!(verifier = self.name, task = %task, "kept the result it checked, to serve it again")
            }
            Ok(false) if self.store.reserve.max_bytes == 0 => {}
            Ok(false) => {
                let s = self.store.reserve.stats();
                tracing::warn!(verifier = self.name, task = %task, max_bytes = s.max_bytes, "the result it checked is larger than the reserve: not kept (raise --reserve-max-bytes)")
            }
            // it does not prove against the root: nothing to serve under it
            Err(e) => {
                tracing::info!(verifier = self.name, task = %task, error = %format!("{e:#}"), "what was served is not kept")
            }
        }
    }

    fn seal(&self, task: &Pubkey, t: &Task, vote: u8, evidence: Digest) -> Sealed {
        let salt = hashv(&[b"salt", &self.secret, task.as_ref(), &[t.round], &t.seed]);
        Sealed {
            vote,
            evidence,
            salt,
            seed: t.seed,
        }
    }

    /// Checks the result and seals the vote, persisted before it returns.
    fn check_and_seal(
        &self,
        now: u64,
        key: &Pubkey,
        t: &Task,
        give_up: u64,
        may_give_up: bool,
    ) -> Result<(VerifyRecord, Sealed)> {
        let start = Instant::now();
        let verdict = if self.careless {
            Verdict::plain(VOTE_VALID, "careless: did not check")
        } else if self.lying {
            lie(t, &self.node)
        } else {
            pointerless_invalid(t, self.check(key, t, now, give_up, may_give_up)?)
        };
        let seconds = start.elapsed().as_secs_f64();
        tracing::info!(verifier = self.name, task = %key, round = t.round, vote = verdict.vote, reason = verdict.reason, seconds, "checked");
        let sealed = self.seal(key, t, verdict.vote, verdict.evidence);
        // what proves the vote's pointer first: a vote that lost can always be disputed
        if let Some(p) = &verdict.pointer {
            self.db.put_pointer(key, t.round, &p.encode())?;
        }
        self.db.put_sealed(key, t.round, &sealed)?;
        Ok((
            VerifyRecord {
                task: *key,
                seconds,
                vote: verdict.vote,
                reason: verdict.reason,
                displaced: None,
            },
            sealed,
        ))
    }
}

/// What a check keeps of what it fetched: for which task, until when.
struct Keep {
    task: Pubkey,
    until: std::time::SystemTime,
}

/// A seat of a task's current round a verifier can take now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeatPlan {
    /// The seat's index.
    pub seat: u8,
    /// Its holder's node when taken (this verifier's ticket beats it), `None` when free.
    pub holder: Option<Pubkey>,
}

/// The seats the verifier `me` (node `node`, wallet `wallet`) can still win in `t` at slot
/// `now`, computed as `join_task` will: the task verifying with its seed drawn and its join
/// window open, neither its provider nor its client, registered before the round's stake
/// snapshot, free stake for each seat's bond, for each seat it does not hold an eligible score
/// from its snapshot weight and a free seat or a better score than the holder's (weighed at
/// the weight the holder won the seat with: a holder that unstaked since is weaker on chain,
/// never stronger). Empty: joining would be refused.
pub fn seat_plan(t: &Task, node: &Node, me: &Pubkey, wallet: &Pubkey, now: u64) -> Vec<SeatPlan> {
    if t.status != TaskStatus::Verifying
        || !t.seed_drawn
        || now > t.join_deadline
        || t.provider == *me
        || t.client == *wallet
        || node.registered_slot >= t.snapshot_slot
        || t.verifier_bond == 0
    {
        return vec![];
    }
    let weight = node.weight_at(t.snapshot_slot);
    let affordable = (node.free / t.verifier_bond) as usize;
    let mut out = vec![];
    for (j, s) in t.round_seats().iter().enumerate() {
        if out.len() >= affordable {
            break;
        }
        if s.node == *me {
            continue;
        }
        let score = SeatScore::new(&t.seed, &me.to_bytes(), j as u8, weight);
        if !seat_eligible(&score, t.snapshot_stake, SEAT_OVERSAMPLE) {
            continue;
        }
        let holder = s.taken().then(|| s.score());
        if wins_seat(holder.as_ref(), &score) {
            out.push(SeatPlan {
                seat: j as u8,
                holder: s.taken().then_some(s.node),
            });
        }
    }
    out
}

/// In a market with a dispute window, an INVALID vote on a job the program referees must point
/// at the element it says is wrong, or a dispute refutes it and takes its whole bond (PROTOCOL
/// §8.2). A verifier points when it holds a proven element that recomputes differently; what
/// proves nothing about the commitment (a bad proof, other tiles, a malformed answer) is an
/// UNAVAILABLE vote there: never a losing vote, and a majority of them still rejects the
/// result as withheld.
fn pointerless_invalid(t: &Task, v: Verdict) -> Verdict {
    let refereed = JobSpec::decode(&t.job)
        .is_ok_and(|j| compute_market_protocol::dispute::refereed(&j, t.dispute_window));
    if t.dispute_window == 0 || !refereed || v.vote != VOTE_INVALID || v.pointer.is_some() {
        return v;
    }
    Verdict::plain(
        VOTE_UNAVAILABLE,
        format!(
            "{} (UNAVAILABLE, not INVALID: what was served proves no element wrong, and this market takes disputes)",
            v.reason
        ),
    )
}

/// A lying verifier's vote (tests and demos of disputes): INVALID without checking, pointing at
/// the first element of its first sampled tile, which an honest provider's dispute refutes.
fn lie(t: &Task, me: &Pubkey) -> Verdict {
    let tile = sample_indices(
        &t.seed,
        &me.to_bytes(),
        t.samples.max(1) as u32,
        t.tile_count,
    )
    .first()
    .copied()
    .unwrap_or(0);
    Verdict {
        vote: VOTE_INVALID,
        evidence: compute_market_protocol::dispute::invalid_evidence(tile, 0, &[0; 32]),
        reason: format!("lying: did not check; says tile {tile} element 0 is wrong"),
        pointer: None,
    }
}

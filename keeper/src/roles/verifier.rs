//! Verifier: competes for a seat when its ticket can still win one (PROTOCOL §3, Seats: its
//! snapshot stake, the lowest stake-weighted tickets), checks the result (Freivalds over the
//! whole product for `MatMulModP`, proven recomputed samples otherwise), commits its vote, and
//! reveals it once commits are closed.
//!
//! It checks right after joining, before its seat is final: a better ticket may still displace
//! it during the join window, which costs it the check only — the program releases a displaced
//! verifier's bond and returns its vote account's rent.

use std::{sync::Arc, time::Instant};

use anchor_lang::prelude::Pubkey;
use anyhow::Result;
use compute_market::{
    client,
    constants::SEAT_OVERSAMPLE,
    instructions::RevealVoteArgs,
    pda,
    state::{Node, Task, TaskStatus, Vote},
};
use compute_market_protocol::{
    commit::{vote_commitment, VOTE_VALID},
    hash::{hashv, Digest},
    job::{JobKind, JobSpec},
    sampling::sample_indices,
    seats::{place, seat_eligible, Placement, SeatScore},
};
use solana_signer::Signer;

use super::{send, NodeCtx};
use crate::db::{Db, Sealed};
use crate::{
    chain::{Chain, ChainExt},
    verify::{check_matmul, check_sampled, Verdict},
};

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
    /// Crash-safe store of sealed votes.
    pub db: Arc<Db>,
    /// What it checked.
    pub records: Vec<VerifyRecord>,
    /// Test only: after a commit lands, wait this long before anything else (a window in
    /// which a test kills the process between commit and reveal).
    pub hold_after_commit: Option<std::time::Duration>,
}

impl Verifier {
    /// An honest verifier.
    pub fn new(ctx: NodeCtx, db: Arc<Db>) -> Self {
        Verifier {
            ctx,
            careless: false,
            db,
            records: vec![],
            hold_after_commit: None,
        }
    }

    fn check(&self, task: &Pubkey, t: &Task) -> Result<Verdict> {
        let job = JobSpec::decode(&t.job)
            .map_err(|e| anyhow::anyhow!("task {task}: malformed job spec: {e}"))?;
        let uri = std::str::from_utf8(&t.result_uri[..t.result_uri_len as usize]).unwrap_or("");
        let me = self.ctx.node.to_bytes();
        let fetched = match job.kind {
            JobKind::MatMulModP => self.ctx.store.fetch_all(uri).map(|tiles| {
                check_matmul(
                    self.ctx.backend.as_ref(),
                    &job,
                    &tiles,
                    &t.result_root,
                    &t.seed,
                    &me,
                    t.samples as u32,
                )
            }),
            JobKind::HashBatch => {
                let picked = sample_indices(&t.seed, &me, t.samples as u32, t.tile_count);
                self.ctx.store.fetch(uri, &picked).map(|served| {
                    check_sampled(self.ctx.backend.as_ref(), &job, &served, &t.result_root)
                })
            }
        };
        match fetched {
            Ok(verdict) => verdict,
            // a result that cannot be fetched is a result that cannot be verified: invalid
            Err(e) => Ok(Verdict {
                vote: compute_market_protocol::commit::VOTE_INVALID,
                evidence: [0; 32],
                reason: format!("fetching the result failed: {e}"),
            }),
        }
    }

    fn seal(&self, task: &Pubkey, round: u8, vote: u8, evidence: Digest) -> Sealed {
        let salt = hashv(&[
            b"salt",
            &self.ctx.kp.to_bytes()[..32],
            task.as_ref(),
            &[round],
        ]);
        Sealed {
            vote,
            evidence,
            salt,
        }
    }

    fn commit(&self, chain: &dyn Chain, task: &Pubkey, round: u8, sealed: &Sealed) -> Result<()> {
        let c = vote_commitment(
            &self.ctx.node.to_bytes(),
            &task.to_bytes(),
            round,
            sealed.vote,
            &sealed.evidence,
            &sealed.salt,
        );
        let r = send(
            chain,
            &self.ctx.name,
            "commit_vote",
            task,
            client::commit_vote(self.ctx.kp.pubkey(), *task, round, c),
            &self.ctx.kp,
        )?;
        if let (true, Some(hold)) = (r.ok, self.hold_after_commit) {
            tracing::warn!(task = %task, ?hold, "--hold-after-commit-ms: holding between commit and reveal");
            std::thread::sleep(hold);
        }
        Ok(())
    }

    /// Checks the result, seals the vote, persists it, then commits it: a crash at any point
    /// leaves either nothing committed or a sealed vote on disk to reveal.
    fn check_seal_commit(&self, chain: &dyn Chain, key: &Pubkey, t: &Task) -> Result<VerifyRecord> {
        let start = Instant::now();
        let verdict = if self.careless {
            Verdict {
                vote: VOTE_VALID,
                evidence: [0; 32],
                reason: "careless: did not check".into(),
            }
        } else {
            self.check(key, t)?
        };
        let seconds = start.elapsed().as_secs_f64();
        tracing::info!(verifier = self.ctx.name, task = %key, round = t.round, vote = verdict.vote, reason = verdict.reason, seconds, "checked");
        let sealed = self.seal(key, t.round, verdict.vote, verdict.evidence);
        self.db.put_sealed(key, t.round, &sealed)?;
        self.commit(chain, key, t.round, &sealed)?;
        Ok(VerifyRecord {
            task: *key,
            seconds,
            vote: verdict.vote,
            reason: verdict.reason,
            displaced: None,
        })
    }

    /// What is due on one task; the record of a check when one ran.
    fn on_task(
        &self,
        chain: &dyn Chain,
        now: u64,
        node: &Node,
        key: Pubkey,
        t: &Task,
    ) -> Result<Option<VerifyRecord>> {
        let round = t.round;
        let seat: Option<Vote> = chain.decoded(&pda::vote(&key, &self.ctx.node, round))?;
        if let Some(v) = seat {
            match self.db.sealed(&key, round)? {
                Some(sealed) if !v.committed && now <= t.commit_deadline => {
                    self.commit(chain, &key, round, &sealed)?
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
                    send(
                        chain,
                        &self.ctx.name,
                        "reveal_vote",
                        &key,
                        client::reveal_vote(self.ctx.kp.pubkey(), key, round, args),
                        &self.ctx.kp,
                    )?;
                }
                // joined, then crashed before sealing: nothing was committed, check again
                None if !v.committed && now <= t.commit_deadline => {
                    return self.check_seal_commit(chain, &key, t).map(Some)
                }
                _ => {}
            }
            return Ok(None);
        }
        // draw the seed ourselves rather than wait for a cranker: the sooner it is drawn, the
        // less anyone can wait for its reference to age out of SlotHashes
        if !t.seed_drawn && now >= t.reference_slot + 2 && now <= t.join_deadline {
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
        let Some(plan) = seat_plan(t, node, &self.ctx.node, &self.ctx.kp.pubkey(), now) else {
            return Ok(None);
        };
        // the displaced seat's authority receives its vote's rent: read it from its node
        let displaced = match plan {
            SeatPlan::Free => None,
            SeatPlan::Displace(worst) => match chain.node(&worst)? {
                Some(n) => Some(n.authority),
                None => return Ok(None),
            },
        };
        if send(
            chain,
            &self.ctx.name,
            "join_task",
            &key,
            client::join_task(self.ctx.kp.pubkey(), key, round, displaced),
            &self.ctx.kp,
        )?
        .ok
        {
            let mut record = self.check_seal_commit(chain, &key, t)?;
            if let SeatPlan::Displace(worst) = plan {
                record.displaced = Some(worst);
            }
            return Ok(Some(record));
        }
        Ok(None)
    }

    /// One pass over the tasks in verification.
    pub fn step(&mut self, chain: &dyn Chain) -> Result<()> {
        let now = chain.slot()?;
        let Some(node) = chain.node(&self.ctx.node)? else {
            return Ok(());
        };
        let market_key = self.ctx.market;
        let due: Vec<_> = chain
            .tasks()?
            .into_iter()
            .filter(|(_, t)| t.status == TaskStatus::Verifying && t.market == market_key)
            .collect();
        // up to `parallel` tasks at once; one task's failure (an RPC error, an unreachable
        // result) never blocks the others
        let results = super::parallel(self.ctx.parallel, due, |(key, t)| {
            (key, self.on_task(chain, now, &node, key, &t))
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
        Ok(())
    }
}

/// How a verifier may take a seat of a task's current round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeatPlan {
    /// A seat is free.
    Free,
    /// Every seat is taken; this verifier's score beats the worst seated one, that node's.
    Displace(Pubkey),
}

/// Whether the verifier `me` (node `node`, wallet `wallet`) can still win a seat of `t` at slot
/// `now`, computed exactly as `join_task` will: the task verifying with its seed drawn and its
/// join window open, neither its provider nor its client, registered before the round's stake
/// snapshot, free stake for the bond, an eligible score from its snapshot weight, and a free
/// seat or a better score than the worst seated verifier. `None`: joining would be refused.
pub fn seat_plan(
    t: &Task,
    node: &Node,
    me: &Pubkey,
    wallet: &Pubkey,
    now: u64,
) -> Option<SeatPlan> {
    if t.status != TaskStatus::Verifying
        || !t.seed_drawn
        || now > t.join_deadline
        || t.provider == *me
        || t.client == *wallet
        || node.registered_slot >= t.snapshot_slot
        || node.free < t.verifier_bond
    {
        return None;
    }
    let score = SeatScore::new(&t.seed, &me.to_bytes(), node.weight_at(t.snapshot_slot));
    let quorum = t.tally().quorum;
    if !seat_eligible(&score, t.snapshot_stake, SEAT_OVERSAMPLE * quorum as u64) {
        return None;
    }
    let seated: Vec<SeatScore> = t.seated().iter().map(|s| s.score()).collect();
    if seated.iter().any(|s| s.node == me.to_bytes()) {
        return None;
    }
    match place(&seated, quorum as usize, &score) {
        Placement::Free => Some(SeatPlan::Free),
        Placement::Displace(i) => Some(SeatPlan::Displace(t.seated()[i].node)),
        Placement::Refused => None,
    }
}

//! Cranker: anyone's job. Draws seeds, expires and reopens tasks, finalizes rounds, settles
//! votes (losers first, so the majority's share is in escrow), closes finished tasks and sweeps
//! fees to the treasury.

use anchor_lang::prelude::Pubkey;
use anyhow::Result;
use compute_market::{
    client,
    events::{TaskFinalized, VoteSettled},
    state::TaskStatus,
};
use solana_keypair::Keypair;

use super::send;
use crate::chain::{Chain, ChainExt};

/// What the cranker saw settle.
#[derive(Default)]
pub struct Ledger {
    /// Finalization events (one per decided or escalated round that ended in a decision).
    pub finalized: Vec<TaskFinalized>,
    /// Vote settlements.
    pub settled: Vec<VoteSettled>,
    /// Tasks closed, with the slot.
    pub closed: Vec<(Pubkey, u64)>,
    /// Tasks escalated.
    pub escalated: Vec<Pubkey>,
}

/// A cranker.
pub struct Cranker {
    /// Its signer (pays the fees).
    pub kp: Keypair,
    /// The treasury token account.
    pub treasury: Pubkey,
    /// What it saw.
    pub ledger: Ledger,
}

impl Cranker {
    fn on_task(&mut self, chain: &dyn Chain, now: u64, key: Pubkey, t: compute_market::state::Task) -> Result<()> {
        match t.status {
            TaskStatus::Open if now > t.open_deadline => {
                send(chain, "cranker", "expire_task", &key, client::expire_task(key), &self.kp)?;
            }
            TaskStatus::Claimed if now > t.submit_deadline => {
                send(chain, "cranker", "reclaim_task", &key, client::reclaim_task(key, t.provider), &self.kp)?;
            }
            TaskStatus::Verifying => {
                if !t.seed_drawn && now >= t.reference_slot + 2 && now <= t.join_deadline {
                    send(chain, "cranker", "draw_seed", &key, client::draw_seed(key), &self.kp)?;
                }
                if t.finalize_ready(now) {
                    let r = send(chain, "cranker", "finalize_task", &key, client::finalize_task(key, t.provider), &self.kp)?;
                    if r.ok {
                        self.ledger.finalized.extend(r.events::<TaskFinalized>());
                        if !r.events::<compute_market::events::TaskEscalated>().is_empty() {
                            self.ledger.escalated.push(key);
                        }
                    }
                }
            }
            _ => {}
        }
        // settle whatever is settleable: losers of a decided round first
        let Some(t) = chain.task(&key)? else { return Ok(()) };
        let mut votes: Vec<_> = chain
            .votes(&key)?
            .into_iter()
            .filter(|(_, v)| v.round < t.round || t.status.is_decided())
            .collect();
        votes.sort_by_key(|(_, v)| {
            let m = t.rounds[v.round as usize].majority;
            m == 0 || (v.revealed && v.vote == m)
        });
        for (_, v) in &votes {
            let r = send(chain, "cranker", "settle_vote", &key, client::settle_vote(key, v.authority, v.round), &self.kp)?;
            self.ledger.settled.extend(r.events::<VoteSettled>());
        }
        let Some(t) = chain.task(&key)? else { return Ok(()) };
        if t.status.is_terminal() && t.open_votes == 0 {
            let provider = (t.provider != Pubkey::default()).then_some(t.provider);
            let ix = client::close_task(key, t.client, t.client_token, provider);
            if send(chain, "cranker", "close_task", &key, ix, &self.kp)?.ok {
                self.ledger.closed.push((key, now));
            }
        }
        Ok(())
    }

    /// One pass over everything due.
    pub fn step(&mut self, chain: &dyn Chain) -> Result<()> {
        let now = chain.slot()?;
        for (key, t) in chain.tasks()? {
            // one task's failure never blocks the others
            if let Err(e) = self.on_task(chain, now, key, t) {
                tracing::warn!(task = %key, error = %format!("{e:#}"), "cranker will retry");
            }
        }
        Ok(())
    }

    /// Sweeps every node's accrued fees to the treasury.
    pub fn sweep(&mut self, chain: &dyn Chain) -> Result<u64> {
        let mut swept = 0;
        for (key, n) in chain.nodes()? {
            if n.fees_due > 0 && send(chain, "cranker", "sweep_fees", &key, client::sweep_fees(key, self.treasury), &self.kp)?.ok {
                swept += n.fees_due;
            }
        }
        Ok(swept)
    }
}

//! Cranker: anyone's job. Draws seeds, expires and reopens tasks, finalizes rounds, settles
//! votes (losers first, so the majority's share is in escrow), concludes verdicts held for a
//! dispute window, ends disputes that are over (timed out, moot, or won and payable), closes
//! finished tasks and sweeps fees to the treasury.

use std::collections::HashMap;

use anchor_lang::prelude::Pubkey;
use anyhow::Result;
use compute_market::{
    client,
    events::{TaskClosed, TaskFinalized, VoteSettled},
    pda,
    state::{Task, TaskStatus, Vote, DISPUTE_WON},
};
use compute_market_protocol::commit::{side, Side};
use solana_instruction::Instruction;
use solana_keypair::Keypair;
use solana_signer::Signer;

use super::send;
use crate::chain::{Chain, ChainExt};

/// More tasks than this with settleable votes in a pass: every vote is read at once.
const BULK_VOTES: usize = 4;

/// Whether `t` has votes to settle (losers of a past round, or any of a decided one).
fn settleable(t: &Task) -> bool {
    t.open_votes > 0 && (t.round > 0 || (t.status.is_decided() && !t.held))
}

/// `close_task` of `t` to travel after its settlements: the treasury is named only when
/// strangers sent tokens into the escrow (beyond what the task's accounting says it holds,
/// which the settlements before the close move in step with the escrow), so closes never
/// write-lock it otherwise. `None` — the close then goes alone once the votes are settled, with
/// its fallbacks — when a read fails or the client's refund account is no longer a token
/// account (the refund then goes to its associated account, created by that close).
fn close_in_pack(
    chain: &dyn Chain,
    key: Pubkey,
    t: &Task,
    treasury: Pubkey,
) -> Option<Instruction> {
    // a dispute still to end or to be paid closes first (`end_disputes`), after the votes;
    // so does a game (its bond is in the escrow)
    if t.disputes_open > 0 || t.award_pending || t.games_open > 0 {
        return None;
    }
    let refund_account = chain.account(&t.client_token).ok()??;
    crate::chain::decode::<anchor_spl::token::TokenAccount>(&refund_account)?;
    let extra = chain.token_balance(&pda::escrow(&key)).ok()? > t.escrow_balance;
    Some(client::close_task(
        key,
        t.client,
        t.client_token,
        extra.then_some(treasury),
    ))
}

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
    /// Tasks cranked at once ([`super::parallel`]).
    pub parallel: usize,
    /// The market it cranks (others' tasks are never read, nor paid for).
    pub market: Pubkey,
    /// Tasks whose finalize-and-settle transaction was refused: finalized alone from then on.
    combined_refused: std::sync::Mutex<std::collections::HashSet<Pubkey>>,
}

impl Cranker {
    /// A cranker of `market` signing with `kp`, sweeping fees to `treasury`, `parallel` tasks
    /// at once.
    pub fn new(kp: Keypair, treasury: Pubkey, market: Pubkey, parallel: usize) -> Self {
        Cranker {
            kp,
            treasury,
            ledger: Ledger::default(),
            parallel,
            market,
            combined_refused: Default::default(),
        }
    }
}

impl Ledger {
    fn absorb(&mut self, other: Ledger) {
        self.finalized.extend(other.finalized);
        self.settled.extend(other.settled);
        self.closed.extend(other.closed);
        self.escalated.extend(other.escalated);
    }
}

impl Cranker {
    /// Ends what can be ended of `t`'s disputes (PROTOCOL §8.4, §8.5): a challenger past its
    /// answer deadline times out; a dispute another's win made moot gets its bond back; a won
    /// one is paid once every vote is settled. Returns whether anything was sent.
    fn end_disputes(&self, chain: &dyn Chain, now: u64, key: Pubkey, t: &Task) -> Result<bool> {
        let overturned = compute_market_protocol::commit::overturned(t.tally().majority);
        let mut sent = false;
        // games first: a moot dispute closes, and a dispute times out, only once its games have
        super::games::crank_games(chain, "cranker", &self.kp, &key, t);
        for (_, d) in chain.disputes(&key)? {
            let closable = if d.state == DISPUTE_WON {
                !t.held && t.open_votes == 0
            } else {
                overturned
            };
            if closable {
                sent |= self.close_dispute(chain, key, &d)?;
            } else if d.state != DISPUTE_WON && now > d.answer_deadline {
                let ix = client::dispute_timeout(key, d.challenger);
                sent |= send(chain, "cranker", "dispute_timeout", &key, ix, &self.kp)?.ok;
            }
        }
        Ok(sent)
    }

    /// Sends `ix(mint)` (a payment to `owner`'s associated token account of the stake mint)
    /// after creating that account if it does not exist: a payment is never blocked by an
    /// account its owner closed.
    fn to_associated(
        &self,
        chain: &dyn Chain,
        key: Pubkey,
        what: &str,
        owner: &Pubkey,
        ix: impl FnOnce(Pubkey) -> Instruction,
    ) -> Result<crate::chain::TxReport> {
        let mint = chain
            .decoded::<compute_market::state::Config>(&pda::config())?
            .map(|c| c.stake_mint)
            .ok_or_else(|| anyhow::anyhow!("no config on this cluster"))?;
        let ixs = [
            anchor_spl::associated_token::spl_associated_token_account::instruction::create_associated_token_account_idempotent(
                &self.kp.pubkey(),
                owner,
                &mint,
                &anchor_spl::token::ID,
            ),
            ix(mint),
        ];
        super::send_all(chain, "cranker", what, &key, &ixs, &self.kp)
    }

    /// `close_dispute` of `d`: paid to its payout account, or, when the challenger closed that
    /// meanwhile, to its associated token account, created here (a payment is never blocked).
    fn close_dispute(
        &self,
        chain: &dyn Chain,
        key: Pubkey,
        d: &compute_market::state::Dispute,
    ) -> Result<bool> {
        let ix = client::close_dispute(key, d.challenger, d.payout, None);
        let r = send(chain, "cranker", "close_dispute", &key, ix, &self.kp)?;
        if r.ok || r.error_code().as_deref() != Some("ClientRefundAccountClosed") {
            return Ok(r.ok);
        }
        Ok(self
            .to_associated(chain, key, "close_dispute", &d.challenger, |mint| {
                client::close_dispute(key, d.challenger, d.payout, Some(mint))
            })?
            .ok)
    }

    /// Everything due on one task. Its votes are read (filtered on the task) only when some
    /// are settleable. What it saw lands in `ledger` as it happens, so an error later in the
    /// pass loses nothing already recorded.
    fn on_task(
        &self,
        chain: &dyn Chain,
        now: u64,
        key: Pubkey,
        t: Task,
        read: Option<Vec<(Pubkey, Vote)>>,
        ledger: &mut Ledger,
    ) -> Result<()> {
        let mut sent = false;
        match t.status {
            TaskStatus::Open if now > t.open_deadline => {
                sent |= send(
                    chain,
                    "cranker",
                    "expire_task",
                    &key,
                    client::expire_task(key),
                    &self.kp,
                )?
                .ok;
            }
            TaskStatus::Claimed if now > t.submit_deadline => {
                sent |= send(
                    chain,
                    "cranker",
                    "reclaim_task",
                    &key,
                    client::reclaim_task(key, t.provider),
                    &self.kp,
                )?
                .ok;
            }
            TaskStatus::Verifying => {
                if !t.seed_drawn && now >= t.reference_slot + 2 && now <= t.join_deadline {
                    send(
                        chain,
                        "cranker",
                        "draw_seed",
                        &key,
                        client::draw_seed(key),
                        &self.kp,
                    )?;
                }
                if t.finalize_ready(now) {
                    // a full round revealed and unanimous has no losers: its settlements need
                    // no order and travel with the finalize (one transaction for all of them)
                    let tally = t.tally();
                    let mut ixs = vec![client::finalize_task(key, t.provider, t.market)];
                    let tried = self
                        .combined_refused
                        .lock()
                        .expect("refused lock")
                        .contains(&key);
                    // (a verdict held for a dispute window settles only once concluded)
                    if !tried
                        && t.dispute_window == 0
                        && tally.seats == tally.quorum
                        && tally.revealed == tally.quorum
                    {
                        let votes = match read.as_ref() {
                            Some(v) => v.clone(),
                            None => chain.votes(&key)?,
                        };
                        let round: Vec<&Vote> = votes
                            .iter()
                            .map(|(_, v)| v)
                            .filter(|v| v.round == t.round)
                            .collect();
                        // a node may hold several seats: its one vote counts for each
                        let seats: usize = round.iter().map(|v| v.seats as usize).sum();
                        let unanimous = seats == tally.quorum as usize
                            && round.iter().all(|v| v.revealed && v.vote == round[0].vote);
                        if unanimous {
                            ixs.extend(
                                round
                                    .iter()
                                    .map(|v| client::settle_vote(key, v.authority, v.round)),
                            );
                            // and the close, when no other round's vote is open
                            if t.open_votes as usize == round.len() {
                                ixs.extend(close_in_pack(chain, key, &t, self.treasury));
                            }
                        }
                    }
                    let what = if ixs.len() > 1 {
                        "finalize_task+settle_vote"
                    } else {
                        "finalize_task"
                    };
                    let combined = ixs.len() > 1;
                    for r in super::send_packed(chain, "cranker", what, &key, ixs, &self.kp)? {
                        if !r.ok && combined {
                            // next time the finalize goes alone
                            self.combined_refused
                                .lock()
                                .expect("refused lock")
                                .insert(key);
                        }
                        if r.ok {
                            sent = true;
                            ledger.finalized.extend(r.events::<TaskFinalized>());
                            ledger.settled.extend(r.events::<VoteSettled>());
                            if !r.events::<TaskClosed>().is_empty() {
                                ledger.closed.push((key, now));
                            }
                            if !r
                                .events::<compute_market::events::TaskEscalated>()
                                .is_empty()
                            {
                                ledger.escalated.push(key);
                            }
                        }
                    }
                }
            }
            TaskStatus::Accepted | TaskStatus::Rejected if t.held && t.challenges_open > 0 => {
                // availability challenges past their deadline, or moot, end first (PROTOCOL
                // §8.11); the conclusion follows on a later pass
                sent |=
                    super::availability::end_expired(chain, "cranker", &self.kp, now, &key, &t)?;
            }
            TaskStatus::Accepted | TaskStatus::Rejected
                if t.held
                    && t.disputes_open == 0
                    && (now > t.dispute_deadline
                        || compute_market::instructions::availability::concludes_at_once(
                            t.tally().majority,
                        )) =>
            {
                // the dispute window closed (or a dispute overturned the verdict): its money
                // moves now (PROTOCOL §8.1)
                sent |= send(
                    chain,
                    "cranker",
                    "conclude_task",
                    &key,
                    client::conclude_task(key, t.provider),
                    &self.kp,
                )?
                .ok;
            }
            _ => {}
        }
        // settle whatever is settleable: losers of a decided round first
        let t = if sent {
            match chain.task(&key)? {
                Some(t) => t,
                None => return Ok(()),
            }
        } else {
            t
        };
        let votes: Vec<(Pubkey, Vote)> = if !settleable(&t) {
            vec![]
        } else {
            match read {
                // read with every other vote at the start of the pass, nothing sent since
                Some(v) if !sent => v,
                _ => chain.votes(&key)?,
            }
        };
        if votes.is_empty() && !t.status.is_terminal() {
            return Ok(());
        }
        let mut votes: Vec<_> = votes
            .into_iter()
            .filter(|(_, v)| v.round < t.round || (t.status.is_decided() && !t.held))
            .collect();
        votes.sort_by_key(|(_, v)| {
            let m = t.rounds[v.round as usize].majority;
            m == 0 || side(m, v.revealed, v.vote) == Side::Winner
        });
        // every settlement of the task in as few transactions as fit, in this order, and the
        // close after the last when these are all its open votes
        let settles: Vec<_> = votes
            .iter()
            .map(|(_, v)| client::settle_vote(key, v.authority, v.round))
            .collect();
        if !settles.is_empty() {
            let mut packed = settles.clone();
            if t.status.is_terminal() && votes.len() == t.open_votes as usize {
                packed.extend(close_in_pack(chain, key, &t, self.treasury));
            }
            let reports =
                super::send_packed(chain, "cranker", "settle_vote", &key, packed, &self.kp)?;
            if reports
                .iter()
                .any(|r| r.ok && !r.events::<TaskClosed>().is_empty())
            {
                ledger.closed.push((key, now));
            }
            let landed: usize = reports
                .iter()
                .filter(|r| r.ok)
                .map(|r| r.events::<VoteSettled>().len())
                .sum();
            for r in &reports {
                ledger.settled.extend(r.events::<VoteSettled>());
            }
            // a refused batch: the rest one at a time, so one settlement that cannot land
            // never holds back the others
            if reports.iter().any(|r| !r.ok) {
                for ix in settles.into_iter().skip(landed) {
                    let r =
                        super::send_all(chain, "cranker", "settle_vote", &key, &[ix], &self.kp)?;
                    ledger.settled.extend(r.events::<VoteSettled>());
                }
            }
        }
        if !t.status.is_terminal() {
            return Ok(());
        }
        let Some(mut t) = chain.task(&key)? else {
            return Ok(());
        };
        if (t.disputes_open > 0 || t.award_pending || t.games_open > 0)
            && self.end_disputes(chain, now, key, &t)?
        {
            let Some(again) = chain.task(&key)? else {
                return Ok(());
            };
            t = again;
        }
        if t.status.is_terminal()
            && t.open_votes == 0
            && !t.held
            && t.disputes_open == 0
            && !t.award_pending
        {
            // the treasury only when strangers sent tokens into the escrow: otherwise closes
            // never write-lock it
            let extra = chain.token_balance(&pda::escrow(&key))? > t.client_refund()?;
            let treasury = extra.then_some(self.treasury);
            let ix = client::close_task(key, t.client, t.client_token, treasury);
            let mut r = send(chain, "cranker", "close_task", &key, ix, &self.kp)?;
            if r.error_code().as_deref() == Some("ClientRefundAccountClosed") {
                // the client closed its refund account: refund to its associated token
                // account, created here (the close can never be blocked)
                r = self.to_associated(chain, key, "close_task", &t.client, |mint| {
                    client::close_task_to(key, t.client, t.client_token, treasury, Some(mint))
                })?;
            }
            if r.ok {
                ledger.closed.push((key, now));
            }
        }
        Ok(())
    }

    /// One pass over everything due in its market: the market's tasks are read once (votes
    /// only of tasks with settleable ones), then each task is handled on its own (up to
    /// `parallel` at once); one task's failure never blocks the others.
    pub fn step(&mut self, chain: &dyn Chain) -> Result<()> {
        let now = chain.slot()?;
        let tasks = chain.tasks_of(&self.market)?;
        self.step_with(chain, now, tasks)
    }

    /// [`Cranker::step`] over tasks already read (the daemon reads them once per pass).
    pub fn step_with(
        &mut self,
        chain: &dyn Chain,
        now: u64,
        tasks: Vec<(Pubkey, Task)>,
    ) -> Result<()> {
        // votes are read per task (a `memcmp` on the task) when few tasks have settleable
        // ones; when many do, one read of every vote costs the cluster less than a scan each
        let due = tasks
            .iter()
            .filter(|(_, t)| {
                settleable(t) || (t.status == TaskStatus::Verifying && t.finalize_ready(now))
            })
            .count();
        let mut all: Option<HashMap<Pubkey, Vec<(Pubkey, Vote)>>> = None;
        if due > BULK_VOTES {
            let mut by: HashMap<Pubkey, Vec<(Pubkey, Vote)>> = HashMap::new();
            for (k, v) in chain.all_votes()? {
                by.entry(v.task).or_default().push((k, v));
            }
            all = Some(by);
        }
        let work: Vec<_> = tasks
            .into_iter()
            .map(|(k, t)| {
                let read = all.as_mut().map(|a| a.remove(&k).unwrap_or_default());
                (k, t, read)
            })
            .collect();
        let results = super::parallel(self.parallel, work, |(key, t, read)| {
            let mut ledger = Ledger::default();
            let r = super::guard(|| self.on_task(chain, now, key, t, read, &mut ledger));
            (key, ledger, r)
        });
        for (key, ledger, r) in results {
            self.ledger.absorb(ledger);
            if let Err(e) = r {
                tracing::warn!(task = %key, error = %format!("{e:#}"), "cranker will retry");
            }
        }
        Ok(())
    }

    /// Sweeps the accrued fees of its market's nodes to the treasury, and subtracts every
    /// slashed node's stake debt from the market's sortition total (`sync_stake`).
    pub fn sweep(&mut self, chain: &dyn Chain) -> Result<u64> {
        let mut swept = 0;
        for (key, n) in chain.nodes_of(&self.market)? {
            if n.stake_debt > 0 {
                send(
                    chain,
                    "cranker",
                    "sync_stake",
                    &key,
                    client::sync_stake(key, n.market),
                    &self.kp,
                )?;
            }
            if n.fees_due > 0
                && send(
                    chain,
                    "cranker",
                    "sweep_fees",
                    &key,
                    client::sweep_fees(key, self.treasury),
                    &self.kp,
                )?
                .ok
            {
                swept += n.fees_due;
            }
        }
        Ok(swept)
    }
}

//! The money of a verdict (PROTOCOL §4.2–§4.4, §8.5), moved once: by `finalize_task` when
//! nothing is held, else by `conclude_task` after the dispute window, under the verdict then in
//! force (perhaps one a dispute overturned).
use anchor_lang::prelude::*;
use anchor_spl::token::{Token, TokenAccount};
use compute_market_protocol::commit::{
    sides, VERDICT_CLAIMS_REFUTED, VERDICT_PROVEN_WRONG, VERDICT_SERVED, VERDICT_UNSERVED,
    VERDICT_WITHHELD, VOTE_INVALID, VOTE_VALID,
};

use crate::{constants::*, errors::MarketError, math, state::*, transfer};

/// The accounts a verdict's money moves between.
pub struct Parties<'a, 'info> {
    pub task: &'a mut Box<Account<'info, Task>>,
    pub escrow: &'a Account<'info, TokenAccount>,
    pub provider_node: &'a mut Box<Account<'info, Node>>,
    pub provider_vault: &'a Account<'info, TokenAccount>,
    pub token_program: &'a Program<'info, Token>,
}

/// What moved, for the events.
#[derive(Default)]
pub struct Settlement {
    pub status: Option<TaskStatus>,
    pub provider_paid: u64,
    pub provider_slashed: u64,
    pub fee: u64,
}

impl Parties<'_, '_> {
    /// Escrow → provider vault.
    fn pay_provider(&mut self, amount: u64) -> Result<()> {
        let id = self.task.task_id.to_le_bytes();
        let bump = [self.task.bump];
        transfer::from_pda(
            self.token_program,
            self.escrow,
            self.provider_vault,
            self.task.to_account_info(),
            &self.task.signer_seeds(&id, &bump),
            amount,
        )?;
        self.task.escrow_balance = math::sub(self.task.escrow_balance, amount)?;
        Ok(())
    }

    /// Provider vault → escrow (a slash of its bonded stake).
    fn take_from_provider(&mut self, amount: u64) -> Result<()> {
        let bump = [self.provider_node.bump];
        transfer::from_pda(
            self.token_program,
            self.provider_vault,
            self.escrow,
            self.provider_node.to_account_info(),
            &self.provider_node.signer_seeds(&bump),
            amount,
        )?;
        self.task.escrow_balance = math::add(self.task.escrow_balance, amount)?;
        Ok(())
    }

    /// Slashes the provider's whole bond: its `reject_client_bps` part to the client (paid at
    /// close with the refund), the rest to the treasury; nobody else is paid. Returns the
    /// treasury's part.
    fn slash_bond_to_client(&mut self) -> Result<u64> {
        let bond = self.task.provider_bond;
        let client_part = math::bps_of(bond, self.task.terms.reject_client_bps as u64)?;
        self.take_from_provider(client_part)?;
        let node = &mut self.provider_node;
        node.release(bond, bond)?;
        let treasury_part = math::sub(bond, client_part)?;
        node.fees_due = math::add(node.fees_due, treasury_part)?;
        self.task.client_extra = math::add(self.task.client_extra, client_part)?;
        self.task.majority_share = 0;
        Ok(treasury_part)
    }

    /// Pays an accepted (or claims-refuted) result: provider, fee, and the pool shared by the
    /// VALID seats (to the fee when there are none).
    fn accept(&mut self, valid: u8, extra_to_provider: u64) -> Result<Settlement> {
        self.accept_shared(valid, valid, extra_to_provider)
    }

    /// [`Parties::accept`] with the pool cut in `parts` shares, `valid` of them paid (the
    /// rest to the fee): a served result pays each VALID seat what a seat of the whole round
    /// would get, so serving only a few seats never enlarges their shares (PROTOCOL §8.11).
    fn accept_shared(
        &mut self,
        valid: u8,
        parts: u8,
        extra_to_provider: u64,
    ) -> Result<Settlement> {
        let terms = self.task.terms;
        let bond = self.task.provider_bond;
        // the provider's and the pool's parts are rounded down; the remainder is the fee, so
        // rounding dust goes to the treasury (PROTOCOL §4)
        let pool = math::bps_of(self.task.reward, terms.verifier_pool_bps as u64)?;
        let provider_bps = BPS
            .checked_sub(terms.fee_bps as u64 + terms.verifier_pool_bps as u64)
            .ok_or(MarketError::MathOverflow)?;
        let provider_pay = math::bps_of(self.task.reward, provider_bps)?;
        let fee = math::sub(math::sub(self.task.reward, provider_pay)?, pool)?;
        let (share, dust) = if valid > 0 {
            let (share, _) = math::split(pool, parts.max(valid) as u64)?;
            (share, math::sub(pool, math::mul(share, valid as u64)?)?)
        } else {
            (0, pool)
        };
        let earned = math::add(provider_pay, extra_to_provider)?;
        self.pay_provider(math::add(math::add(earned, fee)?, dust)?)?;
        let node = &mut self.provider_node;
        node.release(bond, 0)?;
        node.earned = math::add(node.earned, earned)?;
        node.fees_due = math::add(node.fees_due, math::add(fee, dust)?)?;
        node.tasks_completed = node.tasks_completed.saturating_add(1);
        self.task.majority_share = share;
        Ok(Settlement {
            status: Some(TaskStatus::Accepted),
            provider_paid: provider_pay,
            provider_slashed: 0,
            fee,
        })
    }
}

/// Moves the money of verdict `majority` of the deciding round: the provider's pay or slash,
/// the shares the seats' settlements will pay, the losers' slash. Returns what moved.
pub fn settle(p: &mut Parties, majority: u8) -> Result<Settlement> {
    let t = *p.task.tally();
    let bond = p.task.provider_bond;
    let forfeit = p.task.dispute_forfeit;
    p.task.dispute_forfeit = 0;
    let (winners, released) = if majority != 0 {
        sides(majority, t.revealed, t.valid, t.invalid)
    } else {
        (0, 0)
    };
    let s = match majority {
        // the forfeits of disputes that lost against this result go to its provider
        VOTE_VALID => p.accept(t.valid, forfeit)?,
        VERDICT_SERVED => p.accept_shared(t.valid, t.quorum, forfeit)?,
        VERDICT_UNSERVED => {
            // the provider did not publish what a client could not fetch (PROTOCOL §8.11):
            // its whole bond, the client's part to the client, the rest to the treasury; the
            // reward refunded in full; forfeits of lost disputes to the client
            let treasury_part = p.slash_bond_to_client()?;
            p.task.client_extra = math::add(p.task.client_extra, forfeit)?;
            Settlement {
                status: Some(TaskStatus::Rejected),
                provider_paid: 0,
                provider_slashed: bond,
                fee: treasury_part,
            }
        }
        VOTE_INVALID => {
            let terms = p.task.terms;
            let client_part = math::bps_of(bond, terms.reject_client_bps as u64)?;
            let verifier_part = math::bps_of(bond, terms.reject_verifier_bps as u64)?;
            let treasury_part = math::sub(math::sub(bond, client_part)?, verifier_part)?;
            let (share, dust) = math::split(verifier_part, winners as u64)?;
            // forfeits of disputes that lost against the INVALID seats are theirs; the
            // rounding of that split (never more than the seats) goes to the client
            let (fshare, fdust) = math::split(forfeit, winners as u64)?;
            p.take_from_provider(math::add(client_part, math::mul(share, winners as u64)?)?)?;
            let node = &mut p.provider_node;
            node.release(bond, bond)?;
            node.fees_due = math::add(node.fees_due, math::add(treasury_part, dust)?)?;
            p.task.client_extra = math::add(math::add(p.task.client_extra, client_part)?, fdust)?;
            p.task.majority_share = math::add(share, fshare)?;
            Settlement {
                status: Some(TaskStatus::Rejected),
                provider_paid: 0,
                provider_slashed: bond,
                fee: treasury_part,
            }
        }
        VERDICT_WITHHELD => {
            // withheld: the whole bond to the treasury, nothing to the client or the seats
            // (PROTOCOL §4.3): "I could not get it" carries no evidence, so saying it must
            // never pay, or a coalition of clients and verifiers would profit from saying it
            // of honest results
            let node = &mut p.provider_node;
            node.release(bond, bond)?;
            node.fees_due = math::add(node.fees_due, bond)?;
            p.task.majority_share = 0;
            Settlement {
                status: Some(TaskStatus::Rejected),
                provider_paid: 0,
                provider_slashed: bond,
                fee: bond,
            }
        }
        VERDICT_PROVEN_WRONG => {
            // the provider's whole bond: the client's part to the client (with its reward,
            // at close), the rest to the treasury; never to the challenger, whom the accused
            // could race with a dispute of its own (PROTOCOL §8.5). The forfeits of disputes
            // that lost against this wrong result go to the challenger who proved it.
            let treasury_part = p.slash_bond_to_client()?;
            p.task.dispute_award = math::add(p.task.dispute_award, forfeit)?;
            Settlement {
                status: Some(TaskStatus::Rejected),
                provider_paid: 0,
                provider_slashed: bond,
                fee: treasury_part,
            }
        }
        VERDICT_CLAIMS_REFUTED => {
            // paid as accepted, the pool to the VALID seats; forfeits to the challenger
            let s = p.accept(t.valid, 0)?;
            p.task.dispute_award = math::add(p.task.dispute_award, forfeit)?;
            s
        }
        _ => {
            p.provider_node.release(bond, 0)?;
            // no verdict: nothing was held, nothing can be forfeit
            p.task.client_extra = math::add(p.task.client_extra, forfeit)?;
            Settlement {
                status: Some(TaskStatus::Undecided),
                ..Settlement::default()
            }
        }
    };

    let task = &mut p.task;
    if majority != 0 {
        let losers = t
            .seats
            .checked_sub(winners)
            .and_then(|s| s.checked_sub(released))
            .ok_or(MarketError::MathOverflow)?;
        // per losing seat; at least one unit, so silence and minority votes are never free
        task.loser_slash = math::penalty(task.verifier_bond, task.terms.verifier_slash_bps as u64)?;
        if compute_market_protocol::commit::overturned(majority) {
            // the losers' slashes (and the false statements' bonds) go to the challenger's
            // award as each vote settles, not to the winners
            task.loser_bonus = 0;
            task.loser_dust = 0;
            task.tally_mut().losers_pending = 0;
        } else {
            let collected = math::mul(task.loser_slash, losers as u64)?;
            // no winner to share the losers' slashes (a served result no seat vouched for, an
            // unserved one): all of it to the treasury through the losers' own nodes
            let (bonus, dust) = if winners > 0 {
                math::split(collected, winners as u64)?
            } else {
                (0, collected)
            };
            task.loser_bonus = bonus;
            task.loser_dust = if task.loser_slash > 0 { dust } else { 0 };
            task.tally_mut().losers_pending = if task.loser_slash > 0 { losers } else { 0 };
        }
    }
    task.tally_mut().majority = majority;
    if let Some(status) = s.status {
        task.status = status;
    }
    Ok(s)
}

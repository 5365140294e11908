//! The demo's report: one row per task and per node, costs, slots per phase and the
//! performance model, read back from the chain and the roles' records once the run is over.

use std::collections::HashMap;

use anchor_lang::prelude::Pubkey;
use anyhow::{Context, Result};
use compute_market::pda;
use serde::Serialize;

use crate::chain::{Chain, ChainExt};

use super::{describe, Scenario, SLOT_SECONDS};

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
    /// The digits task, when posted.
    pub digits: Option<DigitsRow>,
    /// The sentences task, when posted.
    pub sentences: Option<SentencesRow>,
    /// The generation task, when posted.
    pub generate: Option<GenerateRow>,
}

/// The generation task's verified completions.
#[derive(Clone, Debug, Serialize)]
pub struct GenerateRow {
    /// The task's outcome.
    pub outcome: String,
    /// Each prompt and its verified completion (from the Accepted result; none otherwise).
    pub completions: Vec<crate::clientdata::Completion>,
}

/// How near the market's verified embeddings of the held-out texts are to the fp32 model's.
#[derive(Clone, Debug, Serialize)]
pub struct SentencesRow {
    /// The task's outcome.
    pub outcome: String,
    /// Texts embedded.
    pub texts: usize,
    /// Mean and least cosine to the fp32 embeddings, from the Accepted result (none otherwise).
    pub cosine: Option<(f64, f64)>,
    /// The same by kind of text, then `all` (the README's MiniLM accuracy table).
    pub by_kind: Vec<crate::compute::encoder::KindFigures>,
}

/// How the market's verified result classified the held-out digits.
#[derive(Clone, Debug, Serialize)]
pub struct DigitsRow {
    /// The task's outcome.
    pub outcome: String,
    /// Rows classified.
    pub rows: usize,
    /// Fraction classified right, from the Accepted result (none otherwise).
    pub accuracy: Option<f64>,
    /// The float model's, for comparison.
    pub float_accuracy: Option<f64>,
}

impl Scenario {
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
        // a round is finalized by the cranker, or by the verifier whose reveal was its last
        let by_verifiers: Vec<_> = self
            .verifiers
            .iter()
            .map(|v| v.finalized.lock().expect("finalized lock"))
            .collect();
        let escalated_by_verifiers: Vec<Pubkey> = self
            .verifiers
            .iter()
            .flat_map(|v| v.escalated.lock().expect("escalated lock").clone())
            .collect();
        let mut rows = vec![];
        for (i, (key, job, reward)) in self.tasks.iter().enumerate() {
            let fin = self
                .cranker
                .ledger
                .finalized
                .iter()
                .chain(by_verifiers.iter().flat_map(|g| g.iter()))
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
                escalated: self.cranker.ledger.escalated.contains(key)
                    || escalated_by_verifiers.contains(key),
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
                // an UNAVAILABLE vote is never on the losing side (PROTOCOL §4.4)
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
        for kind in ["MatMulModP", "HashBatch", "Mlp", "Encoder"] {
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
        let outcome_of = |key: &Pubkey| {
            self.tasks
                .iter()
                .position(|(k, _, _)| k == key)
                .and_then(|i| rows.get(i))
                .map_or("not closed".to_string(), |r| r.outcome.clone())
        };
        let digits = match &self.digits {
            None => None,
            Some((key, labels)) => {
                let outcome = outcome_of(key);
                let accuracy = if outcome == "Accepted" {
                    self.roots
                        .get(key)
                        .and_then(|root| self.store.entry(root))
                        .and_then(|e| e.tiles().ok())
                        .map(|tiles| {
                            let len = compute_market_protocol::infer::row_len(10);
                            let all = tiles.concat();
                            let right = all
                                .chunks_exact(len)
                                .zip(labels)
                                .filter(|(r, &l)| {
                                    u32::from_le_bytes(r[40..44].try_into().expect("4 bytes"))
                                        == u32::from(l)
                                })
                                .count();
                            right as f64 / labels.len() as f64
                        })
                } else {
                    None
                };
                Some(DigitsRow {
                    outcome,
                    rows: labels.len(),
                    accuracy,
                    float_accuracy: crate::compute::mlp::digits_float_accuracy(),
                })
            }
        };
        let sentences = self.sentences.as_ref().map(|(key, fp32)| {
            let outcome = outcome_of(key);
            let h = self
                .tasks
                .iter()
                .find(|(k, _, _)| k == key)
                .map_or(1, |(_, job, _)| job.dims[2] as usize);
            let texts = fp32.len() / h.max(1);
            let kinds = crate::compute::encoder::minilm_kinds().unwrap_or_default();
            let by_kind = (outcome == "Accepted")
                .then(|| self.roots.get(key).and_then(|root| self.store.entry(root)))
                .flatten()
                .and_then(|e| e.tiles().ok())
                .map(|tiles| {
                    let all = tiles.concat();
                    let rows = all.len().min(texts * 2 * h);
                    crate::compute::encoder::accuracy(&kinds, &all[..rows], fp32, h)
                })
                .unwrap_or_default();
            SentencesRow {
                outcome,
                texts,
                cosine: by_kind.last().map(|r| (r.mean, r.least)),
                by_kind,
            }
        });
        let generate = self.generate.as_ref().map(|key| {
            let outcome = outcome_of(key);
            let completions = (outcome == "Accepted")
                .then(|| {
                    let job = self.tasks.iter().find(|(k, _, _)| k == key)?.1;
                    let tiles = self.store.entry(self.roots.get(key)?)?.tiles().ok()?;
                    crate::clientdata::completions(&job, &tiles.concat(), &(0..job.dims[0]))
                })
                .flatten()
                .unwrap_or_default();
            GenerateRow {
                outcome,
                completions,
            }
        });
        Ok(DemoReport {
            generate,
            sentences,
            digits,
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

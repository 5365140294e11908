//! Watcher: the one honest party a dispute needs (PROTOCOL §8). While an Accepted verdict is
//! held for its dispute window, a watcher checks the result whoever voted: a client its own
//! tasks (`keeper run --watch`), or anyone every task of its market (`--watch-all`). A
//! `MatMulModP` product it checks whole (hashed to the root, Freivalds with vectors from a secret
//! of its own); of a `HashBatch` it draws its own sample of tiles from that secret (the provider
//! cannot know which it will check), fetches them with their proofs and recomputes them. It
//! disputes a wrong element at once. Only jobs the program referees are watched; each task is
//! checked once. It fetches from the provider's result URL first, then from every verifier
//! seated on the task (their keepers keep what they checked, PROTOCOL §8.12), each tile checked
//! against the root: a provider that serves its verifiers and then refuses the client does
//! not keep the client from its result.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Instant,
};

use anchor_lang::prelude::Pubkey;
use anyhow::Result;
use compute_market::state::Task;
use compute_market_protocol::{
    commit::VOTE_VALID,
    dispute::{refereed, DISPUTE_RESULT_WRONG},
    hash::hashv,
    job::{JobKind, JobSpec},
    sampling::sample_indices,
};

use super::{
    challenger::{Claim, Disputes},
    NodeCtx,
};
use crate::{
    chain::{Chain, ChainExt},
    db::Db,
    dispute::{first_difference, Pointer},
    results::sources,
    verify::{check_matmul, check_sampled, distinct},
};

/// Where a watcher keeps the element it found in its store: the pointer table's round byte,
/// beside a verifier's rounds 0 and 1.
pub const WATCH_SLOT: u8 = 0xFF;

/// Tiles a watcher checks of a task at the least (more when the task's verifiers sample more).
pub const WATCH_SAMPLES: u32 = 8;

/// A result nobody served: the tiles the watcher wanted and why it did not get them.
#[derive(Debug)]
pub struct Unserved {
    /// The tiles it wanted.
    pub tiles: Vec<u32>,
    /// What the fetch said.
    pub why: String,
}

impl Unserved {
    fn of(tiles: Vec<u32>, e: &crate::results::FetchError) -> anyhow::Error {
        anyhow::Error::new(Unserved {
            tiles,
            why: format!("fetching the result from every source: {e}"),
        })
    }
}

impl std::fmt::Display for Unserved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.why)
    }
}

impl std::error::Error for Unserved {}

/// Slots a result must go unserved before a client's watcher challenges its availability, as
/// a part of the dispute window: `max(2, D / 8)` (a fetch that failed once may be a network's
/// blip, and a challenge the provider then answers costs the bond), or less when the window's
/// end is nearer than that (a challenge is opened within the window).
pub fn unserved_grace(window: u32) -> u64 {
    (u64::from(window) / 8).max(2)
}

/// Whose tasks a watcher checks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Watched {
    /// Every task of its market.
    All,
    /// Tasks these clients (wallets) posted.
    Clients(Vec<Pubkey>),
}

/// A watcher.
pub struct Watcher {
    /// Its identity (a wallet that bonds disputes: a node is not needed), backend and store.
    pub ctx: NodeCtx,
    /// Its store: disputes it opened, so a restart resumes them.
    pub db: Arc<Db>,
    /// Whose tasks it checks.
    pub watched: Watched,
    /// What it found of each task it checked: a wrong element, or none.
    checked: Mutex<HashMap<Pubkey, Option<Pointer>>>,
    disputes: Disputes,
    /// The slot since which each task's result could not be fetched from any source.
    unserved: Mutex<HashMap<Pubkey, u64>>,
    /// Whether it challenges the availability of a result nobody serves (PROTOCOL §8.11): a
    /// client's watcher does; a watcher of every task (`--watch-all`) leaves that to clients.
    pub challenges: bool,
    /// Draining (the daemon's first SIGTERM): no new check, dispute or challenge; the disputes
    /// it opened are argued to their end ([`Watcher::owed`]).
    pub draining: Arc<std::sync::atomic::AtomicBool>,
}

impl Watcher {
    /// A watcher of `watched`'s tasks.
    pub fn new(ctx: NodeCtx, db: Arc<Db>, watched: Watched) -> Self {
        let challenges = matches!(watched, Watched::Clients(_));
        Watcher {
            ctx,
            db,
            watched,
            checked: Mutex::default(),
            disputes: Disputes::default(),
            unserved: Mutex::default(),
            challenges,
            draining: Arc::default(),
        }
    }

    /// What it still owes on `tasks` (docs/PROTOCOL.md §3.8): a dispute it opened (its pointer
    /// kept) still open, and an availability challenge of a task it watches still open (its
    /// bond is in them).
    pub fn owed(&self, tasks: &[(Pubkey, Task)]) -> Result<Vec<super::Owed>> {
        let mut out = vec![];
        for (key, t) in tasks {
            if !t.held || t.market != self.ctx.market {
                continue;
            }
            let disputing = (t.disputes_open > 0 || t.games_open > 0)
                && self.db.pointer(key, WATCH_SLOT)?.is_some();
            let watched = match &self.watched {
                Watched::Clients(c) => c.contains(&t.client),
                Watched::All => true,
            };
            let challenging = self.challenges && watched && t.challenges_open > 0;
            if disputing {
                out.push(super::Owed {
                    task: *key,
                    what: "a dispute it opened still open",
                });
            } else if challenging {
                out.push(super::Owed {
                    task: *key,
                    what: "an availability challenge of a task it watches open",
                });
            }
        }
        Ok(out)
    }

    /// One pass over the tasks of its market: checks each held Accepted result it watches once,
    /// and disputes a wrong one (or carries on with a dispute it opened).
    pub fn step_with(
        &mut self,
        chain: &dyn Chain,
        now: u64,
        tasks: &[(Pubkey, Task)],
    ) -> Result<()> {
        for (key, t) in tasks {
            if !t.held || t.market != self.ctx.market {
                continue;
            }
            if let Watched::Clients(c) = &self.watched {
                if !c.contains(&t.client) {
                    continue;
                }
            }
            if !self
                .disputes
                .wants(&self.db, key, t, DISPUTE_RESULT_WRONG, now)
            {
                continue;
            }
            // its own verifier disputes what its vote pointed at
            if self.db.pointer(key, t.round)?.is_some() {
                continue;
            }
            // what it found before a restart: a dispute it opened resumes without a fetch
            let kept = self
                .db
                .pointer(key, WATCH_SLOT)?
                .and_then(|b| Pointer::decode(&b))
                .map(Some);
            // draining: only the disputes it already opened go on
            if kept.is_none() && self.draining.load(std::sync::atomic::Ordering::SeqCst) {
                continue;
            }
            let known =
                kept.or_else(|| self.checked.lock().expect("checked lock").get(key).cloned());
            let found = match known {
                Some(found) => found,
                None => match super::guard(|| self.check(chain, key, t)) {
                    Ok(found) => {
                        self.unserved.lock().expect("unserved lock").remove(key);
                        self.checked
                            .lock()
                            .expect("checked lock")
                            .insert(*key, found.clone());
                        found
                    }
                    Err(e) => {
                        if let Some(u) = e.downcast_ref::<Unserved>() {
                            // nobody serves it: the provider must publish it on chain or lose
                            // its bond (PROTOCOL §8.11)
                            tracing::warn!(watcher = self.ctx.name, task = %key, error = %u.why, "the provider is not serving the result");
                            let since = *self
                                .unserved
                                .lock()
                                .expect("unserved lock")
                                .entry(*key)
                                .or_insert(now);
                            let grace = unserved_grace(t.dispute_window);
                            let due = now >= since + grace || now + grace >= t.dispute_deadline;
                            if self.challenges && due {
                                if let Err(e) = super::availability::challenge_missing(
                                    chain, &self.ctx, key, t, &u.tiles,
                                ) {
                                    tracing::warn!(watcher = self.ctx.name, task = %key, error = %format!("{e:#}"), "could not challenge the result's availability");
                                }
                            }
                        } else {
                            tracing::warn!(watcher = self.ctx.name, task = %key, error = %format!("{e:#}"), "could not check the result; will retry");
                        }
                        continue;
                    }
                },
            };
            if let Some(p) = found {
                // kept before anything is bonded, as a verifier keeps its vote's pointer
                self.db.put_pointer(key, WATCH_SLOT, &p.encode())?;
                self.disputes
                    .play(chain, &self.ctx, &self.db, key, &Claim::ResultWrong(&p));
            }
        }
        if self.challenges {
            // its ended challenges of concluded tasks: rent back
            if let Err(e) = super::availability::close_ended(chain, &self.ctx.name, &self.ctx.kp) {
                tracing::debug!(watcher = self.ctx.name, error = %format!("{e:#}"), "closing ended availability challenges");
            }
        }
        Ok(())
    }

    /// Checks its own sample of `t`'s result: the wrong element it found, or `None` when every
    /// tile it drew recomputes equal (or the job is not one the program referees). Among the
    /// wrong tiles it found, it names the one the most VALID voters sampled: each of them loses
    /// its whole bond for a false statement (PROTOCOL §8.9).
    fn check(&self, chain: &dyn Chain, key: &Pubkey, t: &Task) -> Result<Option<Pointer>> {
        let job = JobSpec::decode(&t.job)
            .map_err(|e| anyhow::anyhow!("the task's job does not decode: {e:?}"))?;
        if !refereed(&job, t.dispute_window) {
            return Ok(None);
        }
        if !compute_market_protocol::dispute::one_step(&job) {
            // on the client's data: its inputs held (and their slices checked) before any check
            super::challenger::sliced_inputs(&self.ctx.store, t, &job)?;
        }
        let uri = super::result_uri(t);
        let sources = sources::ordered(
            uri,
            chain
                .endpoints_of(&chain.seated(key, t)?)
                .into_iter()
                .map(|e| sources::result_url(&e, &t.result_root)),
        );
        let secret = hashv(&[b"watch", &self.ctx.kp.to_bytes()[..32], key.as_ref()]);
        let start = Instant::now();
        if job.kind == JobKind::MatMulModP {
            // all of C, hashed to the root and Freivalds-checked (vectors from its secret): a
            // wrong entry anywhere is found, whichever tiles the provider corrupted
            let g = self
                .ctx
                .store
                .gather_all(&sources, &job, &t.result_root, None)
                .map_err(|e| Unserved::of((0..t.tile_count).collect(), &e))?;
            tracing::info!(watcher = self.ctx.name, task = %key, from = g.served_by(), "fetched the result");
            let tiles = g.tiles;
            let v = check_matmul(
                self.ctx.backend.as_ref(),
                &job,
                &tiles,
                &t.result_root,
                &secret,
                &secret,
                u32::from(t.samples),
            )?;
            tracing::info!(watcher = self.ctx.name, task = %key, vote = v.vote, reason = v.reason, seconds = start.elapsed().as_secs_f64(), "checked a held result");
            return Ok(v.pointer);
        }
        let draws = WATCH_SAMPLES.max(u32::from(t.samples));
        let picked = sample_indices(&t.seed, &secret, draws, t.tile_count);
        let want = distinct(&picked);
        let served = self
            .ctx
            .store
            .gather(&sources, &job, &t.result_root, &want, None)
            .map_err(|e| Unserved::of(want.clone(), &e))?
            .tiles;
        let v = check_sampled(
            self.ctx.backend.as_ref(),
            &job,
            &picked,
            &served,
            &t.result_root,
        )?;
        tracing::info!(watcher = self.ctx.name, task = %key, tiles = want.len(), vote = v.vote, reason = v.reason, seconds = start.elapsed().as_secs_f64(), "checked a held result");
        let Some(first) = v.pointer else {
            return Ok(None);
        };
        let vouched: Vec<[u8; 32]> = chain
            .votes(key)?
            .into_iter()
            .filter(|(_, v)| v.round == t.round && v.revealed && v.vote == VOTE_VALID)
            .map(|(_, v)| v.node.to_bytes())
            .collect();
        let samples =
            |node: &[u8; 32]| sample_indices(&t.seed, node, u32::from(t.samples), t.tile_count);
        let drawn: Vec<Vec<u32>> = vouched.iter().map(samples).collect();
        let mine = self.ctx.backend.tiles(&job, &want)?;
        let best = served
            .iter()
            .zip(&mine)
            .enumerate()
            .filter_map(|(i, (s, m))| {
                let element = first_difference(&job, &s.tile, m)?;
                let hits = drawn.iter().filter(|d| d.contains(&s.index)).count();
                Some((hits, std::cmp::Reverse(i), s, element))
            })
            .max_by_key(|(hits, i, _, _)| (*hits, *i))
            .map(|(_, _, s, element)| Pointer {
                tile: s.index,
                element,
                bytes: s.tile.clone(),
                proof: s.proof.clone(),
            });
        Ok(best.or(Some(first)))
    }
}

//! Games over a claimed trace in the test world (PROTOCOL §8.10): a party's [`Trace`] of one
//! `Mlp` row or one `Encoder` text (right, or computed with another model), and one method per
//! game instruction,
//! plus [`World::play`], which plays a game between a challenger and a defender, each by its
//! own trace, to its end.

use anchor_lang::prelude::Pubkey;
use compute_market::{
    client::{self, GameRef},
    pda,
    state::{Game, STAGE_BISECT, TURN_CHALLENGER},
};
use compute_market_protocol::{
    feed::{self, Target},
    job::JobSpec,
    merkle::CHUNK_LEN,
    slices::build as sb,
    trace::{
        self,
        build::{self, with_siblings},
        encoder, Slots, Source, Traced, WRITE_LEN,
    },
};

use crate::{disputes::Inputs, Actor, TxRecord, World};

pub use compute_market_protocol::trace::build::Trace;

/// What one honest challenger spent and gained against `n` sybil defenders of a wrong result
/// ([`World::against_sybils`]).
#[derive(Debug, PartialEq, Eq)]
pub struct Spent {
    /// Its transactions to its claim.
    pub claim: usize,
    /// Its splits.
    pub splits: usize,
    /// Its resolution's transactions.
    pub resolve: usize,
    /// Slots from the dispute's opening to its verdict.
    pub slots: u64,
    /// Tokens owed to it at the verdict (its bond back, every defender's bond).
    pub gained: u64,
}

impl Spent {
    /// Its transactions in all.
    pub fn transactions(&self) -> usize {
        self.claim + self.splits + self.resolve
    }
}

/// A kind-1 claim: the wrong committed result, the element, the inputs, the right trace and the
/// element's word in it.
pub struct Claimed<'a, L: Layout> {
    /// The committed (wrong) result.
    pub committed: &'a crate::disputes::Committed,
    /// (tile, element).
    pub at: (u32, u32),
    /// The job's inputs (the result's too, for a `Generate` job).
    pub inputs: &'a Inputs,
    /// The right trace.
    pub truth: &'a Trace<L>,
    /// The element's word in the trace.
    pub word: u32,
}

/// A trace's layout the game helpers take: an `Mlp` row's or an `Encoder` text's.
pub trait Layout: Slots + Copy + Into<Traced> {}
impl<L: Slots + Copy + Into<Traced>> Layout for L {}

/// A task of `job` committed to `root`, Accepted by every seat of `c`, and `n` sybils (funded
/// actors) to defend it.
pub fn vouched_with_sybils(
    c: &mut crate::Cast,
    job: JobSpec,
    root: [u8; 32],
    n: usize,
) -> (Pubkey, Vec<Actor>) {
    let task = c.submitted_job(1, job, job.tile_count() as u16, root);
    let sybils: Vec<Actor> = (0..n)
        .map(|i| c.w.actor(&format!("sybil{i}"), 10 * crate::R))
        .collect();
    let vs: Vec<&Actor> = c.verifiers.iter().collect();
    c.w.vouch(task, &vs, 0);
    (task, sybils)
}

impl World {
    /// `defender`'s game against `challenger`'s dispute of `task`: the one open now, else the
    /// task's latest.
    pub fn game_ref(&self, task: &Pubkey, challenger: &Actor, defender: &Actor) -> GameRef {
        let nonce = self
            .dispute(task, challenger)
            .map(|d| d.nonce)
            .or_else(|| self.try_task(task).map(|t| t.dispute_nonce))
            .unwrap_or(0);
        GameRef {
            task: *task,
            challenger: challenger.key(),
            nonce,
            defender: defender.key(),
        }
    }

    /// Every seat in `vs` votes VALID on `task` (commitment tags from `tag`): a unanimous
    /// Accepted verdict, held for disputes.
    pub fn vouch(&mut self, task: Pubkey, vs: &[&Actor], tag: u64) {
        let ballots: Vec<(&Actor, crate::Ballot)> = vs
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let vote = compute_market_protocol::commit::VOTE_VALID;
                (*v, crate::Ballot::new(vote, tag + i as u64))
            })
            .collect();
        self.decide(task, &ballots);
    }

    /// `defender`'s game against `challenger`'s claim on `task`, if open.
    pub fn game(&self, task: &Pubkey, challenger: &Actor, defender: &Actor) -> Option<Game> {
        let r = self.game_ref(task, challenger, defender);
        let a = self
            .c
            .svm
            .get_account(&r.game())
            .filter(|a| a.lamports > 0)?;
        Game::from_account_data(&a.data)
    }

    /// `dispute_layout`: chunk 0 of the model's slices and its siblings, written and proven;
    /// for an `Encoder`, then the chunk of the texts' ids that holds the disputed text's count.
    pub fn lay_out(
        &mut self,
        who: &Actor,
        task: Pubkey,
        inputs: &Inputs,
    ) -> Result<TxRecord, TxRecord> {
        let job = JobSpec::decode(&self.task(&task).job).expect("job");
        let mut pieces = vec![(0usize, 0u64)];
        if job.kind == compute_market_protocol::job::JobKind::Generate {
            // the prompt's count, then the sampling rule's temperature
            let d = self.dispute(&task, who).expect("a dispute");
            let Some(Target::Word(row, _)) = feed::target(&job, d.tile, d.element) else {
                panic!("a word of a completion")
            };
            let stride = compute_market_protocol::slices::decoder::prompt_stride(job.dims[1]);
            pieces.push((1, row as u64 * stride / CHUNK_LEN as u64));
            pieces.push((1, job.dims[0] as u64 * stride / CHUNK_LEN as u64));
        }
        if job.kind == compute_market_protocol::job::JobKind::Encoder {
            let d = self.dispute(&task, who).expect("a dispute");
            let Some(Target::Word(row, _)) = feed::target(&job, d.tile, d.element) else {
                panic!("a word of a text")
            };
            pieces.push((1, encoder::count_at(&job, row) / CHUNK_LEN as u64));
        }
        let mut last = None;
        for (input, chunk) in pieces {
            let (bytes, path) = sb::chunk_proof(&inputs.slices[input], chunk);
            self.write_proof(who, task, &with_siblings(bytes, CHUNK_LEN, &path))?;
            last = Some(self.send_as(
                "dispute_layout",
                who,
                client::dispute_layout(task, who.key(), path.len() as u8),
            )?);
        }
        Ok(last.expect("a piece"))
    }

    /// `dispute_claim` of `trace` for the dispute's element (word `w` of its row).
    pub fn claim_trace<L: Layout>(
        &mut self,
        who: &Actor,
        task: Pubkey,
        trace: &Trace<L>,
        w: u32,
    ) -> Result<TxRecord, TxRecord> {
        let off = trace.lay.into().word_at(w);
        let index = off / trace::LEAF_LEN as u64;
        let (leaf, path) = build::leaf_proof(&trace.lay, &trace.mem, index);
        self.write_proof(
            who,
            task,
            &with_siblings(leaf.to_vec(), trace::LEAF_LEN, &path),
        )?;
        let root = trace.root_at(trace.lay.step_count());
        self.send_as(
            "dispute_claim",
            who,
            client::dispute_claim(task, who.key(), root, path.len() as u8),
        )
    }

    /// A kind-1 dispute of (tile, element) of `task` by `who`, argued to its claim: opened,
    /// the element proven against `committed`, the inputs proven, the trace laid out, and
    /// `trace` claimed (the element being word `w` of its row).
    #[allow(clippy::too_many_arguments)]
    pub fn claim_against<L: Layout>(
        &mut self,
        who: &Actor,
        task: Pubkey,
        committed: &crate::disputes::Committed,
        (tile, element): (u32, u32),
        inputs: &Inputs,
        trace: &Trace<L>,
        w: u32,
    ) -> Result<TxRecord, TxRecord> {
        self.open_dispute(who, task, 1, tile, element)?;
        self.prove_element(who, task, committed, tile, element)?;
        self.prove_inputs(who, task, inputs)?;
        self.lay_out(who, task, inputs)?;
        self.claim_trace(who, task, trace, w)
    }

    /// `dispute_resolve` of `who`'s claimed dispute; `vote`: a kind-2 dispute's target.
    pub fn resolve(
        &mut self,
        who: &Actor,
        task: Pubkey,
        vote: Option<Pubkey>,
    ) -> Result<TxRecord, TxRecord> {
        self.send_as(
            "dispute_resolve",
            who,
            client::dispute_resolve(task, who.key(), vote),
        )
    }

    /// `defend` by `defender` against `challenger`'s claim, its bond from and payout to its
    /// wallet.
    pub fn defend(
        &mut self,
        defender: &Actor,
        task: Pubkey,
        challenger: &Actor,
    ) -> Result<TxRecord, TxRecord> {
        let r = self.game_ref(&task, challenger, defender);
        self.names.insert(
            r.game(),
            format!("game[{}→{}]", defender.name, challenger.name),
        );
        self.send_as(
            "defend",
            defender,
            client::defend(
                task,
                challenger.key(),
                r.nonce,
                defender.key(),
                defender.wallet,
                defender.wallet,
            ),
        )
    }

    /// The challenger's split: its roots at the inner points of the game's range.
    pub fn split<L: Layout>(
        &mut self,
        challenger: &Actor,
        task: Pubkey,
        defender: &Actor,
        trace: &Trace<L>,
    ) -> Result<TxRecord, TxRecord> {
        let g = self.game(&task, challenger, defender).expect("a game");
        let roots = trace.split_roots(g.lo, g.hi);
        self.send_as(
            "game_split",
            challenger,
            client::game_split(self.game_ref(&task, challenger, defender), roots),
        )
    }

    /// The defender's pick by its own trace: the first segment whose end root is not its own.
    pub fn pick<L: Layout>(
        &mut self,
        defender: &Actor,
        task: Pubkey,
        challenger: &Actor,
        truth: &Trace<L>,
    ) -> Result<TxRecord, TxRecord> {
        let g = self.game(&task, challenger, defender).expect("a game");
        let segment = truth.pick(g.lo, g.hi, &g.roots, &g.hi_root);
        self.send_as(
            "game_pick",
            defender,
            client::game_pick(self.game_ref(&task, challenger, defender), segment),
        )
    }

    /// The defender replays the one step left from its own trace (the memory before the step
    /// is the one it agreed to), piece by piece, until the game ends: the challenger's root
    /// after the step matched (the challenger won the game) or did not (the defender won the
    /// dispute).
    pub fn replay<L: Layout>(
        &mut self,
        defender: &Actor,
        task: Pubkey,
        challenger: &Actor,
        trace: &Trace<L>,
        inputs: &Inputs,
    ) -> Result<Vec<TxRecord>, TxRecord> {
        let lay: Traced = trace.lay.into();
        let job = JobSpec::decode(&self.task(&task).job).expect("job");
        let d = self.dispute(&task, challenger).expect("a dispute");
        let Some(Target::Word(row, _)) = feed::target(&job, d.tile, d.element) else {
            panic!("a word of a row")
        };
        let mut out = vec![];
        let gr = self.game_ref(&task, challenger, defender);
        while let Some(g) = self.game(&task, challenger, defender) {
            let pre = trace.state(g.lo);
            let (src, index) = lay
                .next(&job, row, g.hi, &g.replay)
                .expect("more to replay");
            let bytes = match src {
                Source::Trace => {
                    let (leaf, path) = build::leaf_proof(&trace.lay, &pre, index);
                    with_siblings(leaf.to_vec(), trace::LEAF_LEN, &path)
                }
                Source::Model | Source::Batch => {
                    let (chunk, path) = sb::chunk_proof(&inputs.slices[src.code() as usize], index);
                    with_siblings(chunk, CHUNK_LEN, &path)
                }
                Source::Result => {
                    let (chunk, path) = sb::chunk_proof(&inputs.result, index);
                    with_siblings(chunk, CHUNK_LEN, &path)
                }
            };
            let siblings = match src {
                Source::Trace => lay.tree_depth() as usize,
                _ => (bytes.len() - CHUNK_LEN) / 32,
            };
            for (i, part) in bytes.chunks(WRITE_LEN).enumerate() {
                self.send_as(
                    "game_write",
                    defender,
                    client::game_write(gr, (i * WRITE_LEN) as u16, part.to_vec()),
                )?;
            }
            let kp = defender.kp.insecure_clone();
            let last = lay.at_slot(&job, row, g.hi, &g.replay);
            let ix = if last {
                client::game_settle(gr, defender.wallet, None, index, siblings as u8)
            } else {
                client::game_feed(gr, src.code(), index, siblings as u8)
            };
            out.push(self.send_all(
                if last { "game_settle" } else { "game_feed" },
                &kp,
                &[],
                &[client::compute_unit_limit(1_400_000), ix],
            )?);
        }
        Ok(out)
    }

    /// Plays `defender`'s game against `challenger`'s claim, each party by its own trace,
    /// until it ends (the defender's replay decides it) or a move is refused (returned).
    /// Returns every record of the game.
    #[allow(clippy::too_many_arguments)]
    pub fn play<L: Layout>(
        &mut self,
        challenger: &Actor,
        claimed: &Trace<L>,
        defender: &Actor,
        truth: &Trace<L>,
        task: Pubkey,
        inputs: &Inputs,
    ) -> Result<Vec<TxRecord>, TxRecord> {
        let mut out = vec![];
        while let Some(g) = self.game(&task, challenger, defender) {
            if g.stage != STAGE_BISECT {
                out.extend(self.replay(defender, task, challenger, truth, inputs)?);
            } else if g.turn == TURN_CHALLENGER {
                out.push(self.split(challenger, task, defender, claimed)?);
            } else {
                out.push(self.pick(defender, task, challenger, truth)?);
            }
        }
        Ok(out)
    }

    /// `challenger`'s right claim against an Accepted wrong result of `task`, defended by every
    /// sybil in `sybils` (PROTOCOL §8.10, "Many opponents"). Each sybil fans out to its own
    /// segment at every split (the most splits it can force), spends its whole clock on its
    /// first pick (the longest stall its clock allows), then replays its step and loses. The
    /// challenger answers every split due in the slot it falls due, except the first ones: those
    /// a turn late, made up by its clock. Returns what it spent and is owed.
    pub fn against_sybils<L: Layout>(
        &mut self,
        task: Pubkey,
        challenger: &Actor,
        c: &Claimed<L>,
        sybils: &[Actor],
    ) -> Spent {
        let job = JobSpec::decode(&self.task(&task).job).expect("job");
        let clock = trace::clock(&job, self.task(&task).dispute_window).expect("a game");
        let wallet = self.balance(&challenger.wallet);
        let opened = self.slot();
        let mut mark = self.records.len();
        self.claim_against(
            challenger,
            task,
            c.committed,
            c.at,
            c.inputs,
            c.truth,
            c.word,
        )
        .unwrap_or_else(|r| panic!("{:?}\n{}", r.error, r.logs.join("\n")));
        let claim = self.records.len() - mark;
        for y in sybils {
            self.defend(y, task, challenger).unwrap();
        }
        // the first splits a turn late: the challenger's clock makes it up
        self.advance(clock.turn + 1);
        let games: Vec<_> = sybils.iter().map(|y| (challenger, c.truth, y)).collect();
        let fan_out = |k: usize, g: &Game| {
            let level = trace::levels(g.hi - g.lo) as usize;
            ((5 * k + 3 + level) % g.segments as usize) as u8
        };
        let splits = self.lockstep(task, &games, fan_out, c.inputs).iter().sum();
        let d = self.dispute(&task, challenger).expect("the dispute");
        self.advance_past(d.defend_deadline);
        mark = self.records.len();
        self.resolve(challenger, task, None).unwrap();
        let resolve = self.records.len() - mark;
        let slots = self.slot() - opened;
        assert_eq!(
            self.task(&task).tally().majority,
            compute_market_protocol::commit::VERDICT_PROVEN_WRONG,
            "proven wrong"
        );
        // paid at close_dispute, once the votes have settled
        let owed = self.dispute(&task, challenger).expect("won").bond;
        let n = sybils.len() as u64;
        assert_eq!(self.balance(&challenger.wallet), wallet - owed / (n + 1));
        Spent {
            claim,
            splits,
            resolve,
            slots,
            gained: owed,
        }
    }

    /// Plays games against honest claims side by side, in rounds (PROTOCOL §8.10, "Many
    /// opponents"): `(challenger, its trace, defender)` each. In a round every challenger
    /// splits at once in every game where it owes a split; then the defenders, stalling as
    /// long as their clocks allow, move together at the earliest of their deadlines: a pick
    /// by `pick(k, game)`, or, one step left, the replay (from the agreed memory, which is the
    /// claimed trace's). Returns the splits of each game.
    pub fn lockstep<L: Layout>(
        &mut self,
        task: Pubkey,
        games: &[(&Actor, &Trace<L>, &Actor)],
        pick: impl Fn(usize, &Game) -> u8,
        inputs: &Inputs,
    ) -> Vec<usize> {
        let mut splits = vec![0; games.len()];
        loop {
            let open: Vec<(usize, Game)> = (games.iter().enumerate())
                .filter_map(|(k, (c, _, d))| self.game(&task, c, d).map(|g| (k, g)))
                .collect();
            if open.is_empty() {
                return splits;
            }
            for (k, g) in &open {
                let (c, claimed, d) = games[*k];
                if g.stage == STAGE_BISECT && g.turn == TURN_CHALLENGER {
                    assert!(self.slot() <= g.deadline, "in time by its clock");
                    self.split(c, task, d, claimed).unwrap();
                    splits[*k] += 1;
                }
            }
            let open: Vec<(usize, Game)> = (games.iter().enumerate())
                .filter_map(|(k, (c, _, d))| self.game(&task, c, d).map(|g| (k, g)))
                .collect();
            let last = open.iter().map(|(_, g)| g.deadline).min().expect("open");
            self.advance(last - self.slot());
            for (k, g) in open {
                let (c, claimed, d) = games[k];
                if g.stage == STAGE_BISECT {
                    let r = self.game_ref(&task, c, d);
                    self.send_as("game_pick", d, client::game_pick(r, pick(k, &g)))
                        .unwrap();
                } else {
                    self.replay(d, task, c, claimed, inputs)
                        .unwrap_or_else(|r| panic!("{:?}\n{}", r.error, r.logs.join("\n")));
                }
            }
        }
    }

    /// Plays `defender`'s game by both traces until one step is left (or the game ended);
    /// returns the game then.
    #[allow(clippy::too_many_arguments)]
    pub fn bisect<L: Layout>(
        &mut self,
        challenger: &Actor,
        claimed: &Trace<L>,
        defender: &Actor,
        truth: &Trace<L>,
        task: Pubkey,
    ) -> Result<Option<Game>, TxRecord> {
        while let Some(g) = self.game(&task, challenger, defender) {
            if g.stage != STAGE_BISECT {
                return Ok(Some(g));
            } else if g.turn == TURN_CHALLENGER {
                self.split(challenger, task, defender, claimed)?;
            } else {
                self.pick(defender, task, challenger, truth)?;
            }
        }
        Ok(None)
    }

    /// `game_timeout` of `defender`'s game against `challenger`'s claim, by the cranker.
    pub fn game_timeout(
        &mut self,
        task: Pubkey,
        challenger: &Actor,
        defender: &Actor,
    ) -> Result<TxRecord, TxRecord> {
        self.crank(
            "game_timeout",
            client::game_timeout(
                self.game_ref(&task, challenger, defender),
                defender.wallet,
                None,
            ),
        )
    }

    /// `close_game` of `defender`'s game against `challenger`'s dispute number `nonce`, by the
    /// cranker.
    pub fn close_game(
        &mut self,
        task: Pubkey,
        challenger: &Actor,
        nonce: u32,
        defender: &Actor,
    ) -> Result<TxRecord, TxRecord> {
        self.crank(
            "close_game",
            client::close_game(
                task,
                pda::dispute(&task, &challenger.key()),
                nonce,
                defender.key(),
                defender.wallet,
                None,
            ),
        )
    }
}

//! Games over a claimed trace as keepers play them (PROTOCOL §8.10), from chain state alone:
//!
//! * the challenger ([`challenger_turn`], one turn at a time inside
//!   [`super::challenger::argue`]): proves the model's header, claims its own trace of the
//!   disputed row, splits every game whose turn is its own with its own roots, times out
//!   silent defenders, and resolves once the defence is closed and every game won;
//! * a defender ([`defend_claims`]): a provider or a voter of a task checks every claim made
//!   against its verdict with its own trace, and only when the claim is wrong, bonds, opens a
//!   game, picks the first segment whose end root is not its own, and replays the one step
//!   left through the program, which then rules the claim wrong;
//! * anyone ([`crank_games`]): times out silent parties and closes games whose dispute ended.
//!
//! Every move is read back from the chain before the next, so a keeper that restarts carries on
//! where its games stand; a move is sent only in its party's turn and before its deadline.

use anchor_lang::prelude::Pubkey;
use anyhow::{Context, Result};
use compute_market::{
    client::{self, GameRef},
    pda,
    state::{Dispute, Game, Task, DISPUTE_OPEN, STAGE_BISECT, TURN_CHALLENGER, TURN_DEFENDER},
};
use compute_market_protocol::{
    commit::overturned,
    dispute::{self as rule, Method, DISPUTE_CLAIMS_FALSE},
    feed::{self, Target},
    job::JobSpec,
    merkle::CHUNK_LEN,
    trace::{self, build::with_siblings, encoder, Slots, Source, LEAF_LEN, WRITE_LEN},
};
use solana_instruction::Instruction;
use solana_keypair::Keypair;
use solana_signer::Signer;

use super::{send_all, NodeCtx};
use crate::{
    chain::{Chain, ChainExt},
    dispute::{PlayTrace, SlicedInputs},
};

/// A trace as a game plays it.
type Trace = dyn PlayTrace;

/// Most moves one pass makes in one game before it returns (a replay is at most 18 pieces of
/// three transactions each).
const MAX_MOVES: usize = 64;

/// What the challenger does next in a game dispute.
pub enum Turn {
    /// Send these instructions (the buffer is written already), named `what`.
    Send(&'static str, Vec<Instruction>),
    /// Send these transactions side by side, each its own game's (PROTOCOL §8.10, "Many
    /// opponents"): every split and timeout the challenger owes now, in one round.
    Each(Vec<(&'static str, Vec<Instruction>)>),
    /// Nothing to do until a defender moves or a deadline passes.
    Wait,
}

/// The row and word of a dispute's element when it is a word of an `Mlp` row or of an
/// `Encoder` text's embedding.
fn word(job: &JobSpec, d: &Dispute) -> Option<(u32, u32)> {
    match feed::target(job, d.tile, d.element)? {
        Target::Word(r, w) => Some((r, w)),
        _ => None,
    }
}

/// Whether `job`'s disputes are games in a window of `window` slots.
pub fn is_game(job: &JobSpec, window: u32) -> bool {
    rule::method(job, window) == Some(Method::Game)
}

/// The challenger's next turn in its game dispute `d` of task `key` (its element proven, the
/// manifest proven) of a task in a market of dispute window `window`, writing the dispute's
/// buffer first when the turn needs it (`write` sends `bytes` there and returns the
/// transactions it took). `None` when the element is not played by a game (padding:
/// `dispute_step` decides it).
#[allow(clippy::too_many_arguments)]
pub fn challenger_turn(
    chain: &dyn Chain,
    me: &Pubkey,
    key: &Pubkey,
    job: &JobSpec,
    window: u32,
    d: &Dispute,
    data: &SlicedInputs,
    now: u64,
    write: &mut dyn FnMut(&[u8]) -> Result<usize>,
) -> Result<Option<Turn>> {
    let Some((row, w)) = word(job, d) else {
        return Ok(None);
    };
    let vote = (d.kind == DISPUTE_CLAIMS_FALSE).then_some(d.target);
    let Some(lay) = d.layout() else {
        // the model's header; an Encoder's text count next; a Generate's prompt count and
        // sampling rule
        let pieces = SlicedInputs::layout_pieces(job, row);
        let done = if job.kind == compute_market_protocol::job::JobKind::Generate {
            trace::decoder::Layout::decode(&d.feed).map_or(0, |(_, s)| usize::from(s) + 1)
        } else {
            usize::from(encoder::Layout::decode(&d.enc_layout).is_some())
        };
        let (input, c) = pieces[done.min(pieces.len() - 1)];
        let (chunk, path) = data.chunk(input, c);
        write(&with_siblings(chunk, CHUNK_LEN, &path))?;
        let ix = client::dispute_layout(*key, *me, path.len() as u8);
        return Ok(Some(Turn::Send("dispute_layout", vec![ix])));
    };
    let _ = row;
    let mine = data.play_trace(job, d.tile, d.element)?;
    anyhow::ensure!(
        mine.layout() == lay,
        "the model's header proven on chain is not the model held here"
    );
    let steps = lay.step_count();
    if d.claimed == 0 {
        // the program refuses a claim whose games could not end before the answer deadline
        let clock =
            trace::clock(job, window).context("the job's disputes are not games in this window")?;
        anyhow::ensure!(
            now + clock.after_claim() <= d.answer_deadline,
            "ClaimTooLate: a claim now could not end its games before slot {}",
            d.answer_deadline
        );
        let off = lay.word_at(w);
        let (leaf, path) = mine.leaf(steps, off / LEAF_LEN as u64);
        write(&with_siblings(leaf.to_vec(), LEAF_LEN, &path))?;
        let ix = client::dispute_claim(*key, *me, mine.root(steps), path.len() as u8);
        return Ok(Some(Turn::Send("dispute_claim", vec![ix])));
    }
    let dispute_key = pda::dispute(key, me);
    let mut games: Vec<Game> = chain
        .games(&dispute_key)?
        .into_iter()
        .map(|(_, g)| g)
        .filter(|g| g.nonce == d.nonce)
        .collect();
    // every move owed now, sent in one round: the games are apart, so n defenders cost
    // the round's time of one (the most urgent first)
    games.sort_by_key(|g| g.deadline);
    let mut owed = vec![];
    for g in games {
        let r = GameRef {
            task: *key,
            challenger: *me,
            nonce: g.nonce,
            defender: g.defender,
        };
        if g.stage == STAGE_BISECT && g.turn == TURN_CHALLENGER && now <= g.deadline {
            let roots = mine.split(g.lo, g.hi);
            owed.push(("game_split", vec![client::game_split(r, roots)]));
        } else if g.turn == TURN_DEFENDER && now > g.deadline {
            let ix = client::game_timeout(r, g.payout, payout_fallback(chain, &g.payout)?);
            owed.push(("game_timeout", vec![ix]));
        }
    }
    if owed.len() == 1 {
        let (what, ixs) = owed.pop().expect("one");
        return Ok(Some(Turn::Send(what, ixs)));
    }
    if !owed.is_empty() {
        return Ok(Some(Turn::Each(owed)));
    }
    if d.games_open == 0 && now > d.defend_deadline {
        let ix = client::dispute_resolve(*key, *me, vote);
        return Ok(Some(Turn::Send("dispute_resolve", vec![ix])));
    }
    Ok(Some(Turn::Wait))
}

/// When the token account `payout` is gone (its owner closed it), the stake mint, so that a
/// payment goes to the owner's associated token account instead (PROTOCOL §3.7).
fn payout_fallback(chain: &dyn Chain, payout: &Pubkey) -> Result<Option<Pubkey>> {
    if chain.account(payout)?.is_some() {
        return Ok(None);
    }
    Ok(Some(
        chain
            .decoded::<compute_market::state::Config>(&pda::config())?
            .context("the program has no config on this cluster")?
            .stake_mint,
    ))
}

/// Defends task `key`'s verdict against every claim made in a game dispute that this
/// keeper's own trace finds wrong (PROTOCOL §8.10): a right claim is left alone (a game
/// against it would lose the bond). Called for tasks whose verdict this keeper has a stake in
/// (its result, its vote); failures are logged and retried on the next pass.
pub fn defend_claims(
    chain: &dyn Chain,
    ctx: &NodeCtx,
    data: &dyn Fn() -> Option<std::sync::Arc<SlicedInputs>>,
    key: &Pubkey,
    t: &Task,
) {
    let Ok(job) = JobSpec::decode(&t.job) else {
        return;
    };
    if !t.held || !is_game(&job, t.dispute_window) || overturned(t.tally().majority) {
        return;
    }
    let me = ctx.kp.pubkey();
    let disputes = match chain.disputes(key) {
        Ok(d) => d,
        Err(e) => {
            tracing::warn!(who = ctx.name, task = %key, error = %format!("{e:#}"), "cannot read the task's disputes");
            return;
        }
    };
    for (dk, d) in disputes {
        if d.challenger == me || d.claimed == 0 || d.state != DISPUTE_OPEN {
            continue;
        }
        let Some(inputs) = data() else {
            return;
        };
        if let Err(e) = defend_one(chain, ctx, &inputs, key, &job, &dk, &d) {
            tracing::warn!(who = ctx.name, task = %key, dispute = %dk, error = %format!("{e:#}"), "defence: will retry");
        }
    }
}

/// Plays this keeper's game against claim `d` (dispute `dk` of task `key`) for up to
/// [`MAX_MOVES`] moves, or until it must wait for the challenger.
fn defend_one(
    chain: &dyn Chain,
    ctx: &NodeCtx,
    data: &SlicedInputs,
    key: &Pubkey,
    job: &JobSpec,
    dk: &Pubkey,
    d: &Dispute,
) -> Result<()> {
    let (who, kp) = (ctx.name.as_str(), &ctx.kp);
    let me = kp.pubkey();
    let (row, _) = word(job, d).context("the claim is not of a row's word")?;
    if job.kind == compute_market_protocol::job::JobKind::Generate
        && data.held_tile(d.tile).is_none()
    {
        hold_disputed_tile(chain, ctx, data, key, job, d.tile)?;
    }
    let mine = data.play_trace(job, d.tile, d.element)?;
    let steps = mine.layout().step_count();
    if mine.root(steps) == d.claim_root {
        tracing::debug!(who, task = %key, dispute = %dk, "the claim is this keeper's own trace: not defending");
        return Ok(());
    }
    let r = GameRef {
        task: *key,
        challenger: d.challenger,
        nonce: d.nonce,
        defender: me,
    };
    let game_key = r.game();
    for _ in 0..MAX_MOVES {
        let now = chain.slot()?;
        let g = chain
            .account(&game_key)?
            .and_then(|a| Game::from_account_data(&a));
        let Some(g) = g else {
            if now > d.defend_deadline {
                return Ok(());
            }
            open_game(chain, kp, who, key, d, mine.as_ref())?;
            continue;
        };
        let (what, ix) = if g.turn == TURN_CHALLENGER {
            if now <= g.deadline {
                return Ok(()); // the challenger's turn
            }
            (
                "game_timeout",
                client::game_timeout(r, g.payout, payout_fallback(chain, &g.payout)?),
            )
        } else if now > g.deadline {
            return Ok(()); // missed: the challenger times it out
        } else if g.stage == STAGE_BISECT {
            let segment = mine.choose(g.lo, g.hi, &g.roots, &g.hi_root);
            ("game_pick", client::game_pick(r, segment))
        } else {
            replay_move(chain, kp, who, r, job, &g, mine.as_ref(), data, row)?
        };
        let r = send_all(
            chain,
            who,
            what,
            key,
            &[client::compute_unit_limit(1_400_000), ix],
            kp,
        )?;
        crate::chain::must(what, r)?;
        tracing::info!(who, task = %key, dispute = %dk, step = what, lo = g.lo, hi = g.hi, "game move");
        if matches!(what, "game_settle" | "game_timeout") {
            return Ok(());
        }
    }
    Ok(())
}

/// Bonds (from the wallet's associated token account, paid back there) and opens a game.
fn open_game(
    chain: &dyn Chain,
    kp: &Keypair,
    who: &str,
    key: &Pubkey,
    d: &Dispute,
    mine: &Trace,
) -> Result<()> {
    let me = kp.pubkey();
    let mint = chain
        .decoded::<compute_market::state::Config>(&pda::config())?
        .context("the program has no config on this cluster")?
        .stake_mint;
    let wallet = anchor_spl::associated_token::get_associated_token_address(&me, &mint);
    let t = chain.task(key)?.context("the task is gone")?;
    let bond = t.verifier_bond.max(1);
    let balance = chain.token_balance(&wallet)?;
    anyhow::ensure!(
        balance >= bond,
        "defending task {key} bonds {bond} base units from {wallet}, which holds {balance}: fund the wallet to defend"
    );
    let ix = client::defend(*key, d.challenger, d.nonce, me, wallet, wallet);
    let r = send_all(chain, who, "defend", key, &[ix], kp)?;
    crate::chain::must("defend", r)?;
    tracing::info!(who, task = %key, challenger = %d.challenger, bond, steps = mine.layout().step_count(), "a claim its own trace finds wrong: defending");
    Ok(())
}

/// The defender's next replay move: the next piece written into the game's buffer (those
/// writes sent here), and the feed (or, for the step's own leaf, the settle) that takes it.
#[allow(clippy::too_many_arguments)]
fn replay_move(
    chain: &dyn Chain,
    kp: &Keypair,
    who: &str,
    r: GameRef,
    job: &JobSpec,
    g: &Game,
    mine: &Trace,
    data: &SlicedInputs,
    row: u32,
) -> Result<(&'static str, Instruction)> {
    let lay = mine.layout();
    let (src, index) = lay
        .next(job, row, g.hi, &g.replay)
        .context("the replay needs no more pieces")?;
    let (bytes, siblings) = match src {
        Source::Trace => {
            let (leaf, path) = mine.leaf(g.lo, index);
            (with_siblings(leaf.to_vec(), LEAF_LEN, &path), path.len())
        }
        Source::Model | Source::Batch => {
            let (chunk, path) = data.chunk(src.code(), index);
            (with_siblings(chunk, CHUNK_LEN, &path), path.len())
        }
        Source::Result => {
            // a chunk of the committed string: of the disputed tile, held with its proof
            let slot = compute_market_protocol::merkle::slot_len(job.tile_len()) as u64;
            let at = index * CHUNK_LEN as u64;
            let tile = (at / slot) as u32;
            let (tb, proof) = data
                .held_tile(tile)
                .with_context(|| format!("the committed tile {tile} is not held here"))?;
            let (chunk, path) = compute_market_protocol::merkle::chunk_proof(
                tile,
                job.tile_count(),
                &tb,
                &proof,
                (at % slot) as usize,
            );
            (with_siblings(chunk, CHUNK_LEN, &path), path.len())
        }
    };
    for (i, part) in bytes.chunks(WRITE_LEN).enumerate() {
        let ix = client::game_write(r, (i * WRITE_LEN) as u16, part.to_vec());
        let rep = send_all(chain, who, "game_write", &r.task, &[ix], kp)?;
        crate::chain::must("game_write", rep)?;
    }
    Ok(if lay.at_slot(job, row, g.hi, &g.replay) {
        let fallback = payout_fallback(chain, &g.payout)?;
        (
            "game_settle",
            client::game_settle(r, g.payout, fallback, index, siblings as u8),
        )
    } else {
        (
            "game_feed",
            client::game_feed(r, src.code(), index, siblings as u8),
        )
    })
}

/// Fetches committed tile `tile` of task `key` with its proof (from the provider's result URL,
/// then the keepers seated on it; each tile checked against the root), unless its own store
/// holds it (checked too), and holds it for a
/// `Generate` trace: a defender that did not sample the disputed tile reads it as the
/// challenger did.
fn hold_disputed_tile(
    chain: &dyn Chain,
    ctx: &NodeCtx,
    data: &SlicedInputs,
    key: &Pubkey,
    job: &JobSpec,
    tile: u32,
) -> Result<()> {
    let t = chain.task(key)?.context("the task is gone")?;
    // its own store first (a provider's whole result), the tile checked against the root as a
    // fetched one is
    if let Some(entry) = ctx.store.entry(&t.result_root) {
        let own = entry
            .tree()
            .ok()
            .and_then(|tree| tree.proof(tile))
            .zip(entry.tile(tile).ok())
            .map(|(proof, bytes)| crate::verify::ProvenTile {
                index: tile,
                tile: bytes,
                proof,
            })
            .filter(|p| crate::results::reserve::proves(job, &t.result_root, p));
        if let Some(p) = own {
            data.hold_tile(p.index, p.tile, p.proof);
            return Ok(());
        }
    }
    let sources = crate::results::sources::ordered(
        super::result_uri(&t),
        chain
            .endpoints_of(&chain.seated(key, &t)?)
            .into_iter()
            .map(|e| crate::results::sources::result_url(&e, &t.result_root)),
    );
    let deadline = Some(std::time::Instant::now() + std::time::Duration::from_secs(30));
    let g = ctx
        .store
        .gather(&sources, job, &t.result_root, &[tile], deadline)
        .map_err(|e| anyhow::anyhow!("fetching the disputed tile {tile}: {e}"))?;
    let p = g.tiles.into_iter().next().context("no tile served")?;
    data.hold_tile(p.index, p.tile, p.proof);
    Ok(())
}

/// The cranker's part (anyone): times out the silent party of every expired game of task
/// `key`, and closes the games whose dispute has ended or is moot (their bonds back).
pub fn crank_games(chain: &dyn Chain, who: &str, kp: &Keypair, key: &Pubkey, t: &Task) {
    if t.games_open == 0 {
        return;
    }
    let Ok(now) = chain.slot() else { return };
    let Ok(games) = chain.games_of_task(key) else {
        return;
    };
    for (_, g) in games {
        let d = chain
            .account(&g.dispute)
            .ok()
            .flatten()
            .and_then(|a| Dispute::from_account_data(&a));
        let fallback = match payout_fallback(chain, &g.payout) {
            Ok(f) => f,
            Err(_) => continue,
        };
        let (what, ix) = match d {
            Some(d) if d.nonce == g.nonce && !overturned(t.tally().majority) => {
                if now <= g.deadline || d.state != DISPUTE_OPEN {
                    continue;
                }
                let r = GameRef {
                    task: *key,
                    challenger: d.challenger,
                    nonce: g.nonce,
                    defender: g.defender,
                };
                ("game_timeout", client::game_timeout(r, g.payout, fallback))
            }
            _ => (
                "close_game",
                client::close_game(*key, g.dispute, g.nonce, g.defender, g.payout, fallback),
            ),
        };
        let mut ixs = vec![];
        if let Some(mint) = fallback {
            // the defender's associated token account, created if need be
            ixs.push(anchor_spl::associated_token::spl_associated_token_account::instruction::create_associated_token_account_idempotent(
                &kp.pubkey(),
                &g.defender,
                &mint,
                &anchor_spl::token::ID,
            ));
        }
        ixs.push(ix);
        match send_all(chain, who, what, key, &ixs, kp) {
            Ok(r) if r.ok => {
                tracing::info!(who, task = %key, defender = %g.defender, what, "game cranked")
            }
            Ok(_) => {}
            Err(e) => {
                tracing::debug!(who, task = %key, error = %format!("{e:#}"), "game crank not sent")
            }
        }
    }
}

//! The challenger: disputes as keepers play them (PROTOCOL §8), deciding before bonding whether
//! a dispute would win and arguing one to its end from chain state alone.
//!
//! Every role that disputes goes through [`argue`]: a verifier whose INVALID vote lost, a
//! watcher (a client over its own tasks, or anyone) that finds an Accepted result wrong, a
//! provider whose right result was Rejected by INVALID seats, and `keeper task dispute`. The
//! dispute's progress lives on chain (proven, terms done, the vote targeted), so a keeper that
//! restarts mid-dispute carries on from where the chain says it is; what proves the element
//! (the wrong tile and its proof) is kept by the caller: a verifier in its store
//! ([`Db::put_pointer`]), a provider in its result store.

use anchor_lang::prelude::Pubkey;
use anyhow::{bail, Context, Result};
use compute_market::{
    client,
    instructions::OpenDisputeArgs,
    pda,
    state::{Dispute, Task, TaskStatus, DISPUTE_WON},
};
use compute_market_protocol::{
    commit::{overturned, VOTE_INVALID, VOTE_VALID},
    dispute::{self as rule, DISPUTE_CLAIMS_FALSE, DISPUTE_RESULT_WRONG, MAX_STEP_TERMS},
    hash::Digest,
    job::JobSpec,
    merkle::CHUNK_LEN,
};
use solana_keypair::Keypair;
use solana_signer::Signer;

use super::{guard, send_all, NodeCtx};
use crate::{
    chain::{Chain, ChainExt},
    db::Db,
    dispute::{element_is_right_with, element_proof, Pointer, SlicedInputs},
};

/// Bytes of proof written by one `dispute_write`: a chunk and its siblings (at most 23) in two
/// transactions, each within a packet with a priority-fee instruction added.
const WRITE_BYTES: usize = 900;

/// Most transactions one [`argue`] sends before it returns (a product entry on the client's
/// data at k = 8 192 is about 200); the next pass carries on.
const MAX_TURNS: usize = 1_024;

/// What a challenger disputes, with what proves it.
pub enum Claim<'a> {
    /// Kind 1: the element the pointer names is wrong (against an Accepted verdict).
    ResultWrong(&'a Pointer),
    /// Kind 2: every INVALID vote of the deciding round points at a right element (against a
    /// Rejected one); `tile(t)` gives the committed tile t and its proof.
    ClaimsFalse(&'a (dyn Fn(u32) -> Result<(Vec<u8>, Vec<Digest>)> + Sync)),
}

/// One more wallet of a keeper, arguing one more dispute of a task beside its own (PROTOCOL
/// §8.10, "Many opponents"): a kind-2 dispute argues one element at a time, so one facing
/// several INVALID votes of a job on the client's data (fed or refereed by games) refutes one
/// vote a lane, side by side. A lane's key is
/// derived from the keeper's ([`lane_keypair`]), so a restart finds its disputes again; the
/// keeper's wallet funds it (the dispute's rent and fees, the bond) and is paid its awards.
pub struct Lane<'a> {
    /// The INVALID vote this lane's dispute refutes.
    pub vote: Pubkey,
    /// The keeper's wallet, which funds the lane and is paid; `None` for the keeper's own
    /// wallet (lane 0).
    pub funder: Option<&'a Keypair>,
    /// Records the lane before it is funded (so it is swept back after a restart).
    pub on_fund: Option<&'a (dyn Fn() -> Result<()> + Sync)>,
}

/// Lane `i` of a keeper's disputes of a task, as a pass sees it: its key, its dispute's
/// address, and the key its opening is kept under in the store (the task's for lane 0, as a
/// single dispute's; its dispute's address for the others).
struct LaneId {
    kp: Keypair,
    dispute: Pubkey,
    record: Pubkey,
}

impl LaneId {
    fn of(main: &Keypair, task: &Pubkey, i: usize) -> LaneId {
        let kp = lane_keypair(main, task, i as u32);
        let dispute = pda::dispute(task, &kp.pubkey());
        let record = if i == 0 { *task } else { dispute };
        LaneId {
            kp,
            dispute,
            record,
        }
    }
}

/// Lamports a lane is given for its transactions' fees beside its dispute's rent (returned to
/// the keeper's wallet when the dispute has closed).
const LANE_FEES: u64 = 50_000_000;

/// The key of lane `lane` of `main`'s disputes of `task` (lane 0 is `main` itself): derived
/// from `main`'s secret, so only it can sign for the lane and a restart derives it again.
pub fn lane_keypair(main: &Keypair, task: &Pubkey, lane: u32) -> Keypair {
    if lane == 0 {
        return main.insecure_clone();
    }
    Keypair::new_from_array(compute_market_protocol::hash::hashv(&[
        b"compute-market dispute lane",
        &main.to_bytes()[..32],
        task.as_ref(),
        &lane.to_le_bytes(),
    ]))
}

/// A system transfer of `lamports` from `from` to `to`.
fn system_transfer(from: &Pubkey, to: &Pubkey, lamports: u64) -> solana_instruction::Instruction {
    let mut data = vec![2, 0, 0, 0];
    data.extend_from_slice(&lamports.to_le_bytes());
    solana_instruction::Instruction {
        program_id: anchor_lang::system_program::ID,
        accounts: vec![
            solana_instruction::AccountMeta::new(*from, true),
            solana_instruction::AccountMeta::new(*to, false),
        ],
        data,
    }
}

/// Funds `lane` from `funder` for one dispute of `t`: its rent and fees in lamports, its
/// associated token account of the stake mint, and the bond in it (what it holds already is
/// counted). One transaction, paid by the funder.
fn fund_lane(
    chain: &dyn Chain,
    funder: &Keypair,
    lane: &Pubkey,
    t: &Task,
    who: &str,
) -> Result<()> {
    let mint = stake_mint(chain)?;
    let (from, to) = (
        stake_account(chain, &funder.pubkey())?,
        stake_account(chain, lane)?,
    );
    let bond = t.verifier_bond.max(1);
    let need = bond.saturating_sub(chain.token_balance(&to)?);
    let rent = chain.rent_exempt(Dispute::SPACE_WITH_WORK)? + LANE_FEES;
    let have = chain.lamports(lane)?.unwrap_or(0);
    let mut ixs = vec![];
    if have < rent {
        ixs.push(system_transfer(&funder.pubkey(), lane, rent - have));
    }
    ixs.push(
        anchor_spl::associated_token::spl_associated_token_account::instruction::create_associated_token_account_idempotent(
            &funder.pubkey(),
            lane,
            &mint,
            &anchor_spl::token::ID,
        ),
    );
    if need > 0 {
        let balance = chain.token_balance(&from)?;
        if balance < need {
            bail!("a dispute lane bonds {need} base units from {from}, which holds {balance}: fund the wallet");
        }
        ixs.push(anchor_spl::token::spl_token::instruction::transfer(
            &anchor_spl::token::ID,
            &from,
            &to,
            &funder.pubkey(),
            &[],
            need,
        )?);
    }
    crate::chain::must("fund a dispute lane", chain.send(&ixs, funder, &[])?)?;
    tracing::info!(who, %lane, bond = need, "funded a dispute lane");
    Ok(())
}

/// Tops `lane` up from `funder` to [`LANE_FEES`] beside its rent once it holds less than a
/// fifth of that for fees (a dispute against many defenders sends many splits).
fn top_up_lane(chain: &dyn Chain, funder: &Keypair, lane: &Pubkey, who: &str) -> Result<()> {
    let Some(have) = chain.lamports(lane)? else {
        return Ok(());
    };
    let rent = chain.rent_exempt(0)?;
    if have >= rent + LANE_FEES / 5 {
        return Ok(());
    }
    let ix = system_transfer(&funder.pubkey(), lane, LANE_FEES);
    crate::chain::must("top up a dispute lane", chain.send(&[ix], funder, &[])?)?;
    tracing::info!(who, %lane, lamports = LANE_FEES, "topped up a dispute lane");
    Ok(())
}

/// Returns what `lane` holds to `funder` once its task is closed (no dispute of it can be open;
/// its rent came back to it): its lamports, its token account's balance (a bond funded but
/// never bonded) and that account's rent. Nothing when the chain cannot say what it holds.
fn sweep_lane(chain: &dyn Chain, funder: &Keypair, lane: &Keypair, who: &str) -> Result<()> {
    let Some(have) = chain.lamports(&lane.pubkey())? else {
        return Ok(());
    };
    let mut ixs = vec![];
    // what its token account holds (a bond never bonded) back to the funder's, then the
    // account closes, its rent to the funder
    let ata = stake_account(chain, &lane.pubkey())?;
    if chain.account(&ata)?.is_some() {
        let tokens = chain.token_balance(&ata)?;
        if tokens > 0 {
            ixs.push(anchor_spl::token::spl_token::instruction::transfer(
                &anchor_spl::token::ID,
                &ata,
                &stake_account(chain, &funder.pubkey())?,
                &lane.pubkey(),
                &[],
                tokens,
            )?);
        }
        ixs.push(anchor_spl::token::spl_token::instruction::close_account(
            &anchor_spl::token::ID,
            &ata,
            &funder.pubkey(),
            &lane.pubkey(),
            &[],
        )?);
    }
    if have > 0 {
        ixs.push(system_transfer(&lane.pubkey(), &funder.pubkey(), have));
    }
    if ixs.is_empty() {
        return Ok(());
    }
    crate::chain::must("sweep a dispute lane", chain.send(&ixs, funder, &[lane])?)?;
    tracing::info!(who, lane = %lane.pubkey(), lamports = have, "swept a dispute lane");
    Ok(())
}

/// Whether `v` is an INVALID vote of `t`'s deciding round (revealed), the votes a kind-2
/// dispute refutes.
fn invalid_of_round(t: &Task, v: &compute_market::state::Vote) -> bool {
    v.round == t.round && v.revealed && v.vote == VOTE_INVALID
}

/// Where a dispute stands after [`argue`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// It overturned the verdict: the cranker pays it once the votes are settled.
    Won,
    /// Its account is gone: it lost (its bond forfeit) or was paid and closed.
    Closed,
    /// Another dispute overturned the verdict first: the cranker returns the bond.
    Moot,
    /// Past its answer deadline: the cranker ends it as lost.
    Expired,
    /// Still open: [`MAX_TURNS`] were sent; the next pass carries on.
    Open,
}

/// Whether `t` is a held verdict a dispute of `kind` may still be opened against at `now`.
pub fn disputable(t: &Task, kind: u8, now: u64) -> bool {
    let majority = t.tally().majority;
    let against = if kind == DISPUTE_RESULT_WRONG {
        (VOTE_VALID, TaskStatus::Accepted)
    } else {
        (VOTE_INVALID, TaskStatus::Rejected)
    };
    t.held
        && !overturned(majority)
        && (majority, t.status) == against
        && now <= t.dispute_deadline
        && JobSpec::decode(&t.job).is_ok_and(|j| rule::refereed(&j, t.dispute_window))
}

/// Whether every INVALID vote of `t`'s deciding round points at an element the committed
/// result holds right (or outside it): a kind-2 dispute the program will decide for the
/// challenger. `tile(t)` gives the committed tile t. Errors name what could not be read.
pub fn claims_all_false(
    chain: &dyn Chain,
    key: &Pubkey,
    t: &Task,
    tile: &dyn Fn(u32) -> Result<(Vec<u8>, Vec<Digest>)>,
    data: Option<&SlicedInputs>,
) -> Result<bool> {
    let job = JobSpec::decode(&t.job)
        .map_err(|e| anyhow::anyhow!("the task's job does not decode: {e:?}"))?;
    let mut any = false;
    for (_, v) in chain.votes(key)? {
        if !invalid_of_round(t, &v) || v.refuted {
            continue;
        }
        any = true;
        let (ti, e) = rule::pointer(&v.evidence);
        if !rule::in_range(&job, ti, e) {
            continue;
        }
        let (bytes, _) = tile(ti)?;
        if element_is_right_with(&job, ti, e, &bytes, data) != Some(true) {
            return Ok(false);
        }
    }
    Ok(any)
}

/// Argues `challenger`'s dispute of task `key` for `claim` from wherever the chain says it
/// stands: opens it (bonding from the wallet's token account of the stake mint, paid back
/// there) unless `opened` says it was opened before (then a missing account means it ended),
/// targets the next INVALID vote (kind 2), writes and proves the element's chunk, and steps the
/// recomputation until the program decides. `on_open` runs once the open has landed (a keeper
/// records it, so a dispute that lost is never opened again).
#[allow(clippy::too_many_arguments)]
pub fn argue(
    chain: &dyn Chain,
    challenger: &Keypair,
    who: &str,
    key: &Pubkey,
    claim: &Claim,
    data: Option<&SlicedInputs>,
    opened: bool,
    lane: Option<&Lane>,
    on_open: &mut dyn FnMut() -> Result<()>,
) -> Result<Outcome> {
    let on_fund = || lane.and_then(|l| l.on_fund).map_or(Ok(()), |f| f());
    let me = challenger.pubkey();
    let dispute_key = pda::dispute(key, &me);
    let mut opened = opened;
    let mut sent = 0;
    // reads of the dispute account since this call opened it (0: it did not, or it was seen)
    let mut just_opened = 0u32;
    while sent < MAX_TURNS {
        let Some(t) = chain.task(key)? else {
            return Ok(Outcome::Closed);
        };
        let job = JobSpec::decode(&t.job)
            .map_err(|e| anyhow::anyhow!("the task's job does not decode: {e:?}"))?;
        let now = chain.slot()?;
        let d = chain
            .account(&dispute_key)?
            .and_then(|a| Dispute::from_account_data(&a));
        let Some(d) = d else {
            if just_opened > 0 && just_opened < 20 {
                // an RPC node behind the one that confirmed the open: read again
                just_opened += 1;
                std::thread::sleep(std::time::Duration::from_millis(500));
                continue;
            }
            if just_opened > 0 {
                return Ok(Outcome::Open);
            }
            if opened {
                return Ok(Outcome::Closed);
            }
            let (kind, tile, element) = match claim {
                Claim::ResultWrong(p) => (DISPUTE_RESULT_WRONG, p.tile, p.element),
                Claim::ClaimsFalse(_) => (DISPUTE_CLAIMS_FALSE, 0, 0),
            };
            if !rule::one_step(&job) && data.is_none() {
                bail!("the inputs of task {key} are not held here: a dispute of a job on the client's data recomputes from them (PROTOCOL §8.7)");
            }
            if let Claim::ResultWrong(p) = claim {
                // judged as the program will before anything is bonded
                if p.bytes.len() != job.tile_len()
                    || element_is_right_with(&job, p.tile, p.element, &p.bytes, data) != Some(false)
                {
                    bail!(
                        "{NOT_WRONG}: tile {} element {} of task {key}",
                        p.tile,
                        p.element
                    );
                }
            }
            if !disputable(&t, kind, now) {
                bail!("task {key} can no longer be disputed (kind {kind}): its window closed, its verdict changed, or its job cannot be refereed");
            }
            // a transaction confirmed before the next takes up to two slots; a dispute that
            // cannot finish within its answer deadline (the window) forfeits its bond. An
            // element takes at most what the program allows for it (`element_transactions`);
            // a game's element its claim's transactions, then the game's own clock, which the
            // program fits to the window (one element a dispute)
            let game = super::games::is_game(&job, t.dispute_window);
            let per_element = if game {
                compute_market_protocol::trace::claim_transactions(&job)
            } else {
                rule::element_transactions(&job).unwrap_or(0)
            };
            let turns = match claim {
                Claim::ResultWrong(_) => 1 + per_element,
                Claim::ClaimsFalse(_) => {
                    1 + chain
                        .votes(key)?
                        .into_iter()
                        .filter(|(k, v)| {
                            invalid_of_round(&t, v)
                                && !v.refuted
                                && lane.is_none_or(|l| l.vote == *k)
                        })
                        .map(|(_, v)| {
                            let (ti, e) = rule::pointer(&v.evidence);
                            // a pointer outside the result is refuted by its target alone
                            if rule::in_range(&job, ti, e) {
                                1 + per_element
                            } else {
                                1
                            }
                        })
                        .sum::<u64>()
                }
            };
            let slots = turns * rule::SLOTS_PER_TRANSACTION;
            // the opening, then a target and an element per vote
            let elements = (turns - 1).div_ceil(1 + per_element);
            if (game && elements > 1) || slots > u64::from(t.dispute_window) * 3 / 4 {
                bail!(
                    "{TOO_SLOW}: about {turns} transactions ({slots} slots), the window is {} slots",
                    t.dispute_window
                );
            }
            if let Some(funder) = lane.and_then(|l| l.funder) {
                on_fund()?;
                fund_lane(chain, funder, &me, &t, who)?;
            }
            let (wallet, bond) = bond_wallet(chain, &me, &t, &format!("a dispute of task {key}"))?;
            // a lane is paid to the keeper's wallet
            let payout = match lane.and_then(|l| l.funder) {
                Some(f) => stake_account(chain, &f.pubkey())?,
                None => wallet,
            };
            let args = OpenDisputeArgs {
                kind,
                tile,
                element,
            };
            let r = send_all(
                chain,
                who,
                "open_dispute",
                key,
                &[client::open_dispute(*key, me, wallet, payout, args)],
                challenger,
            )?;
            sent += 1;
            crate::chain::must("open_dispute", r)?;
            tracing::info!(who, task = %key, kind, tile, element, bond, "opened a dispute");
            opened = true;
            just_opened = 1;
            on_open()?;
            continue;
        };
        just_opened = 0;
        if d.state == DISPUTE_WON {
            return Ok(Outcome::Won);
        }
        // a Generate game reads the committed tile of its element (the earlier tokens, the
        // count) and proves it: held for the trace (also after a restart)
        if let Some(data) =
            data.filter(|_| job.kind == compute_market_protocol::job::JobKind::Generate)
        {
            if data.held_tile(d.tile).is_none() {
                match claim {
                    Claim::ResultWrong(p) if p.tile == d.tile => {
                        data.hold_tile(p.tile, p.bytes.clone(), p.proof.clone())
                    }
                    Claim::ClaimsFalse(tile) if d.target != Pubkey::default() => {
                        let (bytes, proof) = tile(d.tile)?;
                        data.hold_tile(d.tile, bytes, proof);
                    }
                    _ => {}
                }
            }
        }
        if overturned(t.tally().majority) {
            return Ok(Outcome::Moot);
        }
        if now > d.answer_deadline {
            return Ok(Outcome::Expired);
        }
        let (what, ixs, vote) = if d.kind == DISPUTE_CLAIMS_FALSE && d.target == Pubkey::default() {
            let next = chain.votes(key)?.into_iter().find(|(k, v)| {
                invalid_of_round(&t, v) && !v.refuted && lane.is_none_or(|l| l.vote == *k)
            });
            let Some((vote, _)) = next else {
                // every INVALID vote refuted: the last refutation won; read it next turn
                return Ok(Outcome::Open);
            };
            (
                "dispute_target",
                vec![client::dispute_target(*key, me, vote)],
                None,
            )
        } else if d.proven == 0 {
            let (chunk, path) = match claim {
                Claim::ResultWrong(p) => {
                    if (p.tile, p.element) != (d.tile, d.element) {
                        bail!("the open dispute of task {key} names tile {} element {}, not this keeper's pointer", d.tile, d.element);
                    }
                    p.chunk_proof(&job)
                }
                Claim::ClaimsFalse(tile) => {
                    let (bytes, proof) = tile(d.tile)?;
                    element_proof(&job, d.tile, d.element, &bytes, &proof)
                }
            };
            let mut bytes = chunk;
            for s in &path {
                bytes.extend_from_slice(s);
            }
            sent += write_buffer(chain, challenger, who, key, &bytes)?;
            (
                "dispute_prove",
                vec![client::dispute_prove(*key, me, path.len() as u8)],
                None,
            )
        } else if let Some(turn) = game_turn(chain, challenger, who, key, &job, &t, &d, data, now)?
        {
            // a game over the claimed trace (PROTOCOL §8.10)
            match turn {
                super::games::Turn::Wait => return Ok(Outcome::Open),
                super::games::Turn::Each(moves) => {
                    sent += moves.len();
                    send_side_by_side(chain, who, key, moves, challenger)?;
                    continue;
                }
                super::games::Turn::Send(what, ixs) => {
                    sent += 1;
                    let mut all = vec![client::compute_unit_limit(1_400_000)];
                    all.extend(ixs);
                    (
                        what,
                        all,
                        (d.kind == DISPUTE_CLAIMS_FALSE).then_some(d.target),
                    )
                }
            }
        } else if let Some(fed) = fed_turn(&job, &d, data) {
            // on the client's data: the manifest, then the chunks the recomputation asks for
            let (what, ix, bytes) = fed?;
            sent += write_buffer(chain, challenger, who, key, &bytes)?;
            let vote = (d.kind == DISPUTE_CLAIMS_FALSE).then_some(d.target);
            (what, vec![client::compute_unit_limit(1_400_000), ix], vote)
        } else {
            let vote = (d.kind == DISPUTE_CLAIMS_FALSE).then_some(d.target);
            (
                "dispute_step",
                vec![
                    client::compute_unit_limit(1_400_000),
                    client::dispute_step(*key, me, vote, MAX_STEP_TERMS),
                ],
                vote,
            )
        };
        let r = send_all(chain, who, what, key, &ixs, challenger)?;
        sent += 1;
        crate::chain::must(what, r)?;
        tracing::info!(who, task = %key, step = what, vote = ?vote, "dispute turn");
    }
    Ok(Outcome::Open)
}

/// Sends independent transactions side by side (each game's move touches only its game), each
/// with the compute budget a game's move may need; fails on the first refusal, after all were
/// sent.
fn send_side_by_side(
    chain: &dyn Chain,
    who: &str,
    key: &Pubkey,
    moves: Vec<(&'static str, Vec<solana_instruction::Instruction>)>,
    kp: &Keypair,
) -> Result<()> {
    let reports: Vec<(&str, Result<crate::chain::TxReport>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = moves
            .into_iter()
            .map(|(what, ixs)| {
                let mut all = vec![client::compute_unit_limit(1_400_000)];
                all.extend(ixs);
                (
                    what,
                    scope.spawn(move || send_all(chain, who, what, key, &all, kp)),
                )
            })
            .collect();
        handles
            .into_iter()
            .map(|(what, h)| (what, h.join().expect("a sending thread")))
            .collect()
    });
    let n = reports.len();
    for (what, r) in reports {
        crate::chain::must(what, r?)?;
    }
    tracing::info!(who, task = %key, moves = n, "dispute turn: game moves side by side");
    Ok(())
}

/// Writes `bytes` into the dispute's buffer from its start, [`WRITE_BYTES`] a transaction, each
/// confirmed; the transactions sent.
pub(super) fn write_buffer(
    chain: &dyn Chain,
    challenger: &Keypair,
    who: &str,
    key: &Pubkey,
    bytes: &[u8],
) -> Result<usize> {
    let me = challenger.pubkey();
    for (i, part) in bytes.chunks(WRITE_BYTES).enumerate() {
        let ix = client::dispute_write(*key, me, (i * WRITE_BYTES) as u16, part.to_vec());
        let r = send_all(chain, who, "dispute_write", key, &[ix], challenger)?;
        crate::chain::must("dispute_write", r)?;
    }
    Ok(bytes.len().div_ceil(WRITE_BYTES))
}

/// The challenger's turn in a game (PROTOCOL §8.10) once its element and the manifest are
/// proven; `None` when the dispute is not a game, or its element is padding.
#[allow(clippy::too_many_arguments)]
fn game_turn(
    chain: &dyn Chain,
    challenger: &Keypair,
    who: &str,
    key: &Pubkey,
    job: &JobSpec,
    t: &Task,
    d: &Dispute,
    data: Option<&SlicedInputs>,
    now: u64,
) -> Result<Option<super::games::Turn>> {
    if !super::games::is_game(job, t.dispute_window) || d.proven == 0 || d.inputs == 0 {
        return Ok(None);
    }
    let data = data.with_context(|| {
        format!("the inputs of task {key} are not held here: its game is played from them")
    })?;
    super::games::challenger_turn(
        chain,
        &challenger.pubkey(),
        key,
        job,
        t.dispute_window,
        d,
        data,
        now,
        &mut |bytes| write_buffer(chain, challenger, who, key, bytes),
    )
}

/// The next turn of a proven element of a job on the client's data (PROTOCOL §8.7): what to
/// write into the buffer and the instruction that takes it — the manifest and
/// `dispute_inputs`, or the next input chunk with its siblings and `dispute_feed`. `None` for
/// an element the program recomputes alone, or one in the padding (`dispute_step` decides it).
#[allow(clippy::type_complexity)]
fn fed_turn(
    job: &JobSpec,
    d: &Dispute,
    data: Option<&SlicedInputs>,
) -> Option<Result<(&'static str, solana_instruction::Instruction, Vec<u8>)>> {
    use compute_market_protocol::feed::{self, Feed, Target};
    if rule::one_step(job) {
        return None;
    }
    let target = feed::target(job, d.tile, d.element)?;
    if target == Target::Padding {
        return None;
    }
    let (task, me) = (d.task, d.challenger);
    let Some(data) = data else {
        return Some(Err(anyhow::anyhow!(
            "the inputs of task {task} are not held here: its dispute recomputes from them"
        )));
    };
    let vote = (d.kind == DISPUTE_CLAIMS_FALSE).then_some(d.target);
    if d.inputs == 0 {
        let m = data.manifest.clone();
        let ix = client::dispute_inputs(task, me, m.len() as u16);
        return Some(Ok(("dispute_inputs", ix, m)));
    }
    let state: [u8; compute_market_protocol::feed::STATE_LEN] = d.feed;
    let (input, c) = Feed::decode(&state).next(job, target)?;
    let (mut bytes, path) = data.chunk(input, c);
    bytes.resize(CHUNK_LEN, 0);
    for s in &path {
        bytes.extend_from_slice(s);
    }
    let ix = client::dispute_feed(task, me, vote, input, c, path.len() as u8);
    Some(Ok(("dispute_feed", ix, bytes)))
}

/// The sliced inputs of task `t`'s job on the client's data (PROTOCOL §8.7): its inputs made
/// held through `store` (from the task's input location, or the provider that serves its
/// result), its manifest's bytes, and the slice strings rebuilt from what was parsed.
pub fn sliced_inputs(
    store: &crate::results::ResultStore,
    t: &Task,
    job: &JobSpec,
) -> Result<SlicedInputs> {
    use crate::compute::inputs;
    use compute_market_protocol::{job::JobKind, manifest::MAX_LEN, slices::build};
    let result_uri = super::result_uri(t);
    let bases = crate::results::input_bases(super::input_uri(t), &[result_uri]);
    let deadline = Some(std::time::Instant::now() + std::time::Duration::from_secs(60));
    store
        .ensure_inputs(job, &bases, deadline)
        .map_err(|e| anyhow::anyhow!("fetching the job's inputs: {e}"))?;
    let (manifest, _) = store
        .fetch_content(&bases, &job.input, MAX_LEN as u64, deadline)
        .map_err(|e| anyhow::anyhow!("fetching the job's manifest: {e}"))?;
    let [m, k, n] = job.dims;
    let slices = match job.kind {
        JobKind::Mlp => {
            let i = inputs::mlp(job)?;
            [build::model(&i.model), build::batch(&i.batch.x)]
        }
        JobKind::MatMulModP => {
            let i = inputs::matrices(job)?;
            [
                build::matrix_rows(&i.a.data, m, k),
                build::matrix_columns(&i.b.data, k, n),
            ]
        }
        JobKind::Encoder => {
            use compute_market_protocol::slices::encoder::build as eb;
            let i = inputs::encoder(job)?;
            [eb::model(&i.encoder), eb::ids(&i.ids, k)]
        }
        JobKind::Generate => {
            use compute_market_protocol::slices::decoder::build as db;
            let i = inputs::generate(job)?;
            [
                db::model(&i.model.decoder, i.model.eos),
                db::prompts(&i.prompts.ids, k, &i.prompts.sampling),
            ]
        }
        kind => bail!("{kind:?} jobs are not refereed from slices"),
    };
    SlicedInputs::new(job, manifest.to_vec(), slices)
}

/// Refusals the same turn would meet again (a proof that does not lead to the root, an element
/// or kind the program will not take): the dispute is given up rather than retried every pass.
const FINAL_REFUSALS: [&str; 9] = [
    NOT_WRONG,
    TOO_SLOW,
    "ClaimTooLate",
    "ProofMismatch",
    "ProofTooLong",
    "ElementOutOfRange",
    "InvalidDisputeKind",
    "DisputeNotSupported",
    "NotDisputable",
];

/// What [`argue`] says of a pointer the program's own rule finds right (or a stored tile of the
/// wrong length): never bonded on.
const NOT_WRONG: &str =
    "the protocol's rule finds the element right, or the kept tile is malformed: not disputing";

/// What [`argue`] says of a kind-2 dispute with more turns than its answer window holds.
const TOO_SLOW: &str = "more turns than the answer window holds";

/// A keeper's disputes across passes: which it has ended with, so a finished one costs no
/// reads; which it opened is in its store ([`Db::disputed`]), so a restart resumes them and never
/// opens one that lost again.
#[derive(Default)]
pub struct Disputes {
    ended: std::sync::Mutex<std::collections::HashSet<Pubkey>>,
    /// The sliced inputs of disputed jobs on the client's data, built once per task.
    inputs: std::sync::Mutex<std::collections::HashMap<Pubkey, std::sync::Arc<SlicedInputs>>>,
    /// The last failure logged per task: the same one again is logged at debug, not every pass.
    failed: std::sync::Mutex<std::collections::HashMap<Pubkey, String>>,
}

impl Disputes {
    /// Whether this keeper has a dispute of `kind` to play on `key` at `now`: one it opened and
    /// has not seen end, or a verdict it may still dispute.
    pub fn wants(&self, db: &Db, key: &Pubkey, t: &Task, kind: u8, now: u64) -> bool {
        if self.ended.lock().expect("disputes lock").contains(key) {
            return false;
        }
        matches!(db.disputed(key), Ok(Some(k)) if k == kind)
            || disputable(t, kind, now)
            || db
                .lanes()
                .is_ok_and(|l| l.iter().any(|(task, _)| task == key))
    }

    /// The sliced inputs of `key`'s job when it is on the client's data (built once; `None`
    /// for a job the program recomputes alone, or, logged, when they cannot be had now).
    pub fn inputs_of(
        &self,
        chain: &dyn Chain,
        ctx: &NodeCtx,
        key: &Pubkey,
    ) -> Option<std::sync::Arc<SlicedInputs>> {
        let t = chain.task(key).ok().flatten()?;
        let job = JobSpec::decode(&t.job).ok()?;
        if rule::one_step(&job) {
            return None;
        }
        if let Some(d) = self.inputs.lock().expect("inputs lock").get(key) {
            return Some(d.clone());
        }
        // built (and fetched, if need be) outside the lock; kept until the dispute ends
        match sliced_inputs(&ctx.store, &t, &job) {
            Ok(d) => {
                let d = std::sync::Arc::new(d);
                self.inputs
                    .lock()
                    .expect("inputs lock")
                    .insert(*key, d.clone());
                Some(d)
            }
            Err(e) => {
                tracing::warn!(who = ctx.name, task = %key, error = format!("{e:#}"), "the inputs of a disputed job are not at hand");
                None
            }
        }
    }

    /// Gives up on `key` for good (nothing to dispute there).
    pub fn forgo(&self, key: &Pubkey) {
        self.inputs.lock().expect("inputs lock").remove(key);
        self.ended.lock().expect("disputes lock").insert(*key);
    }

    /// Plays the dispute of `key` for `claim` ([`argue`]) as `ctx`'s wallet, its openings kept
    /// in `db`; logs where it stands and remembers a dispute that ended. A failure is logged and
    /// retried on the next pass. A kind-2 dispute of a job refereed by games facing several
    /// INVALID votes is argued in lanes, one vote each, side by side ([`Lane`]).
    pub fn play(&self, chain: &dyn Chain, ctx: &NodeCtx, db: &Db, key: &Pubkey, claim: &Claim) {
        let kind = match claim {
            Claim::ResultWrong(_) => DISPUTE_RESULT_WRONG,
            Claim::ClaimsFalse(_) => DISPUTE_CLAIMS_FALSE,
        };
        let votes = match claim {
            Claim::ClaimsFalse(_) => lane_votes(chain, key).unwrap_or_default(),
            Claim::ResultWrong(_) => vec![],
        };
        let data = self.inputs_of(chain, ctx, key);
        if votes.len() < 2 {
            let opened = matches!(db.disputed(key), Ok(Some(_)));
            let r = guard(|| {
                argue(
                    chain,
                    &ctx.kp,
                    &ctx.name,
                    key,
                    claim,
                    data.as_deref(),
                    opened,
                    None,
                    &mut || db.put_disputed(key, kind),
                )
            });
            match r {
                Ok(Outcome::Open) => {}
                Ok(outcome) => self.ended_with(chain, &ctx.name, key, kind, outcome),
                Err(e) => self.failed(&ctx.name, key, key, kind, e),
            }
            return;
        }
        // one lane a vote, side by side; lane 0 is the keeper's own wallet (its opening kept
        // under the task's key, as a single dispute's), lane i's under its dispute's address.
        // A kind-2 dispute wins only once every vote is refuted: lanes not yet opened start only
        // when the wallet holds what all of them need, so none bonds in vain
        let ids: Vec<LaneId> = (0..votes.len())
            .map(|i| LaneId::of(&ctx.kp, key, i))
            .collect();
        let fresh = match self.lanes_to_open(chain, ctx, db, key, &votes, &ids) {
            Ok(f) => f,
            Err(e) => {
                self.failed(&ctx.name, key, key, kind, e);
                return;
            }
        };
        let results: Vec<Result<Outcome>> = std::thread::scope(|scope| {
            let handles: Vec<_> = votes
                .iter()
                .enumerate()
                .map(|(i, vote)| {
                    let (data, fresh, id) = (data.as_deref(), &fresh, &ids[i]);
                    scope.spawn(move || {
                        let (kp, at) = (&id.kp, id.record);
                        let record = || db.put_lane(&kp.pubkey(), key, i as u32);
                        let lane = Lane {
                            vote: *vote,
                            funder: (i > 0).then_some(&ctx.kp),
                            on_fund: (i > 0).then_some(&record),
                        };
                        let who = format!("{}.lane{i}", ctx.name);
                        let opened = matches!(db.disputed(&at), Ok(Some(_)));
                        let live = chain.account(&id.dispute)?.is_some();
                        let moot = chain
                            .task(key)?
                            .is_none_or(|t| overturned(t.tally().majority));
                        if i > 0 && live {
                            // a lane pays its own fees: topped up while it plays
                            top_up_lane(chain, &ctx.kp, &kp.pubkey(), &who)?;
                        }
                        let r = if !opened && !live && (moot || !fresh.contains(&i)) {
                            // the verdict is overturned (or the task gone) before this lane
                            // opened, its vote is refuted already, or the wallet cannot fund
                            // every lane: nothing to open for it now
                            Ok(if moot { Outcome::Closed } else { Outcome::Open })
                        } else {
                            guard(|| {
                                argue(
                                    chain,
                                    kp,
                                    &who,
                                    key,
                                    claim,
                                    data,
                                    opened,
                                    Some(&lane),
                                    &mut || db.put_disputed(&at, kind),
                                )
                            })
                        };
                        r
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(anyhow::anyhow!("a lane panicked")))
                })
                .collect()
        });
        let mut closed = 0;
        for (i, r) in results.into_iter().enumerate() {
            let who = format!("{}.lane{i}", ctx.name);
            match r {
                Ok(Outcome::Closed) => closed += 1,
                Ok(outcome) => tracing::debug!(who, task = %key, ?outcome, "dispute lane"),
                // a lane given up is its own: its siblings play on
                Err(e) => self.failed(&who, key, &ids[i].dispute, kind, e),
            }
        }
        let given_up = ids
            .iter()
            .filter(|id| {
                self.ended
                    .lock()
                    .expect("disputes lock")
                    .contains(&id.dispute)
            })
            .count();
        if closed + given_up >= votes.len() {
            self.ended_with(chain, &ctx.name, key, kind, Outcome::Closed);
        }
    }

    /// Sweeps back every lane of `ctx`'s wallet whose task has closed (so its dispute has, its
    /// rent back to it: a lagging read of one dispute account never drains a lane still
    /// playing), as kept in `db`: a restart between a close and its sweep loses nothing.
    pub fn sweep_lanes(&self, chain: &dyn Chain, ctx: &NodeCtx, db: &Db) {
        let lanes = match db.lanes() {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(
                    who = ctx.name,
                    error = format!("{e:#}"),
                    "cannot read the dispute lanes"
                );
                return;
            }
        };
        for (task, i) in lanes {
            let kp = lane_keypair(&ctx.kp, &task, i);
            let r = (|| -> Result<bool> {
                if chain.task(&task)?.is_some() {
                    return Ok(false);
                }
                sweep_lane(chain, &ctx.kp, &kp, &ctx.name)?;
                db.remove_lane(&kp.pubkey())?;
                Ok(true)
            })();
            if let Err(e) = r {
                tracing::warn!(who = ctx.name, lane = %kp.pubkey(), error = format!("{e:#}"), "cannot sweep a dispute lane yet");
            }
        }
    }

    /// The lanes of `votes` that may open a dispute now: those not opened yet whose vote is not
    /// refuted, when the wallet holds the bonds (and lamports) of all of them; none otherwise
    /// (logged: a kind-2 dispute wins only once every vote is refuted).
    fn lanes_to_open(
        &self,
        chain: &dyn Chain,
        ctx: &NodeCtx,
        db: &Db,
        key: &Pubkey,
        votes: &[Pubkey],
        ids: &[LaneId],
    ) -> Result<Vec<usize>> {
        let Some(t) = chain.task(key)? else {
            return Ok(vec![]);
        };
        let refuted: Vec<Pubkey> = chain
            .votes(key)?
            .into_iter()
            .filter(|(_, v)| v.refuted)
            .map(|(k, _)| k)
            .collect();
        let mut fresh = vec![];
        for (i, (vote, id)) in votes.iter().zip(ids).enumerate() {
            let opened = matches!(db.disputed(&id.record), Ok(Some(_)))
                || chain.account(&id.dispute)?.is_some();
            if !opened && !refuted.contains(vote) {
                fresh.push(i);
            }
        }
        if fresh.is_empty() {
            return Ok(fresh);
        }
        let bond = t.verifier_bond.max(1);
        let n = fresh.len() as u64;
        let tokens = chain.token_balance(&stake_account(chain, &ctx.kp.pubkey())?)?;
        let lanes = fresh.iter().filter(|&&i| i > 0).count() as u64;
        let lamports = lanes * (chain.rent_exempt(Dispute::SPACE_WITH_WORK)? + LANE_FEES);
        let have = chain.lamports(&ctx.kp.pubkey())?;
        if tokens < n * bond || have.is_some_and(|h| h < lamports) {
            bail!(
                "refuting {} INVALID votes takes {n} bonds of {bond} base units and {lamports} lamports for {lanes} lanes; the wallet {} holds {tokens} and {} lamports: fund the wallet",
                votes.len(),
                ctx.kp.pubkey(),
                have.map_or("an unknown number of".into(), |h| h.to_string()),
            );
        }
        Ok(fresh)
    }

    /// Remembers that `who`'s dispute of `key` ended with `outcome`.
    fn ended_with(&self, chain: &dyn Chain, who: &str, key: &Pubkey, kind: u8, outcome: Outcome) {
        let majority = chain.task(key).ok().flatten().map(|t| t.tally().majority);
        tracing::info!(who, task = %key, kind, ?outcome, ?majority, "dispute ended");
        self.inputs.lock().expect("inputs lock").remove(key);
        self.ended.lock().expect("disputes lock").insert(*key);
    }

    /// Logs a failed pass of `who`'s dispute of `key` (once per distinct error); gives up `at`
    /// (the task, or one lane's dispute) when the program would refuse the same turn again.
    fn failed(&self, who: &str, key: &Pubkey, at: &Pubkey, kind: u8, e: anyhow::Error) {
        let error = format!("{e:#}");
        if FINAL_REFUSALS.iter().any(|code| error.contains(code)) {
            // the program will refuse it again: retrying only spends fees
            tracing::error!(who, task = %key, kind, error, "dispute refused for good: given up");
            if at == key {
                self.forgo(key);
            } else {
                self.ended.lock().expect("disputes lock").insert(*at);
            }
            return;
        }
        let mut failed = self.failed.lock().expect("disputes lock");
        if failed.get(key) == Some(&error) {
            tracing::debug!(who, task = %key, kind, error, "dispute: will retry");
        } else {
            tracing::warn!(who, task = %key, kind, error, "dispute: will retry");
            failed.insert(*key, error);
        }
    }
}

/// The INVALID votes of `key`'s deciding round, in address order, when its job is on the
/// client's data (an element recomputed from fed inputs, or by a game): a kind-2 dispute refutes
/// them in lanes, one each (PROTOCOL §8.10); empty for a job the program recomputes in one step.
/// The order is fixed, so a vote keeps its lane across passes and restarts.
fn lane_votes(chain: &dyn Chain, key: &Pubkey) -> Result<Vec<Pubkey>> {
    let Some(t) = chain.task(key)? else {
        return Ok(vec![]);
    };
    let Ok(job) = JobSpec::decode(&t.job) else {
        return Ok(vec![]);
    };
    if rule::one_step(&job) {
        return Ok(vec![]);
    }
    let mut votes: Vec<Pubkey> = chain
        .votes(key)?
        .into_iter()
        .filter(|(_, v)| invalid_of_round(&t, v))
        .map(|(k, _)| k)
        .collect();
    votes.sort();
    Ok(votes)
}

/// The wallet `me` bonds one seat's bond of `t` from (its associated token account of the stake
/// mint) and that bond, once the wallet is seen to hold it; `what` names what bonds, for the
/// error that says to fund it.
pub fn bond_wallet(chain: &dyn Chain, me: &Pubkey, t: &Task, what: &str) -> Result<(Pubkey, u64)> {
    let wallet = stake_account(chain, me)?;
    let bond = t.verifier_bond.max(1);
    let balance = chain.token_balance(&wallet)?;
    if balance < bond {
        bail!(
            "{what} bonds {bond} base units from {wallet}, which holds {balance}: fund the wallet"
        );
    }
    Ok((wallet, bond))
}

/// The stake mint of the program's config.
fn stake_mint(chain: &dyn Chain) -> Result<Pubkey> {
    Ok(chain
        .decoded::<compute_market::state::Config>(&pda::config())?
        .context("the program has no config on this cluster")?
        .stake_mint)
}

/// `owner`'s associated token account of the stake mint.
fn stake_account(chain: &dyn Chain, owner: &Pubkey) -> Result<Pubkey> {
    Ok(anchor_spl::associated_token::get_associated_token_address(
        owner,
        &stake_mint(chain)?,
    ))
}

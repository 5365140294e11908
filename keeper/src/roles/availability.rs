//! Availability (PROTOCOL §8.11), every side of it, with no human step:
//!
//! * a **provider** answers every open challenge of its held results and contests a withheld
//!   verdict, publishing the named tiles from its result store chunk by chunk (what is already
//!   written and proven on chain is skipped, so a restart resumes where it stood);
//! * a **client's watcher** that cannot fetch a held Accepted result challenges the tiles it is
//!   missing (at most `availability::max_tiles` a challenge, one open at a time), and reads what
//!   was published from the accounts;
//! * the **cranker** ends accounts past their deadline (or moot), returning bonds;
//! * every opener closes its ended accounts once their task has concluded (rent back).

use anchor_lang::prelude::Pubkey;
use anyhow::{bail, Context, Result};
use compute_market::{
    client,
    instructions::availability::in_play,
    pda,
    state::{Availability, Task, AVAILABILITY_ANSWERED, AVAILABILITY_OPEN},
};
use compute_market_protocol::{
    availability::{self, chunks_per_tile, KIND_CHALLENGE},
    commit::VERDICT_WITHHELD,
    job::JobSpec,
    merkle::{chunk_proof, slot_len, CHUNK_LEN},
};
use solana_signer::Signer;

use super::{send, NodeCtx};
use crate::chain::{must, Chain, ChainExt};

/// Transactions a provider sends in one pass answering a task's availability accounts: a
/// large answer goes on over several passes (each resumes from what is on chain), so its other
/// tasks' turns (disputes, games, submissions) wait at most this long.
pub const PUBLISH_PER_PASS: usize = 48;

/// Bytes one `publish_write` carries: half a chunk, so the write and its accounts fit a
/// transaction packet.
pub const WRITE_LEN: usize = 512;

/// One availability account of a task, its fields and its whole data.
pub struct Account {
    /// Its address.
    pub key: Pubkey,
    /// Its fields.
    pub a: Availability,
    /// Its data (the published tiles after the fields).
    pub data: Vec<u8>,
}

/// The availability accounts of `task` (filtered on their task field).
pub fn accounts(chain: &dyn Chain, task: &Pubkey) -> Result<Vec<Account>> {
    use anchor_lang::Discriminator;
    Ok(chain
        .program_accounts_matching(
            Availability::DISCRIMINATOR,
            Availability::TASK_OFFSET,
            task.as_ref(),
        )?
        .into_iter()
        .filter_map(|(key, data)| {
            let a = Availability::from_account_data(&data)?;
            (a.task == *task).then_some(Account { key, a, data })
        })
        .collect())
}

/// The tiles published in `task`'s answered accounts: (index, bytes of the tile's length),
/// each proven against the result root by the program, chunk by chunk.
/// Accounts opened before `since` (the task's posted slot, when known) are of an earlier task
/// posted at the same address, whose root was another: they are skipped.
pub fn published(
    chain: &dyn Chain,
    task: &Pubkey,
    job: &JobSpec,
    since: u64,
) -> Result<Vec<(u32, Vec<u8>)>> {
    Ok(published_in(&accounts(chain, task)?, job, since))
}

/// [`published`] from accounts already read.
pub fn published_in(accounts: &[Account], job: &JobSpec, since: u64) -> Vec<(u32, Vec<u8>)> {
    let mut out: Vec<(u32, Vec<u8>)> = vec![];
    for acc in accounts {
        if acc.a.state != AVAILABILITY_ANSWERED
            || acc.a.opened_slot < since
            || acc.a.slot_len as usize != slot_len(job.tile_len())
        {
            continue;
        }
        for (i, &tile) in acc.a.named().iter().enumerate() {
            if out.iter().any(|(t, _)| *t == tile) {
                continue;
            }
            if let Some(b) = acc.a.tile_bytes(&acc.data, i) {
                out.push((tile, b[..job.tile_len()].to_vec()));
            }
        }
    }
    out.sort_by_key(|(t, _)| *t);
    out
}

/// Whether the verdict in force is one a client may challenge (a held Accepted result), by
/// the program's own rule.
pub fn challengeable(t: &Task) -> bool {
    t.held && in_play(KIND_CHALLENGE, t.tally().majority)
}

/// The provider's side, for one of its tasks: contests a held withheld verdict of a result it
/// holds, and answers every open account in play. Returns the transactions sent.
pub fn answer(chain: &dyn Chain, ctx: &NodeCtx, now: u64, key: &Pubkey, t: &Task) -> Result<usize> {
    if t.provider != ctx.node || !t.held {
        return Ok(0);
    }
    let job = JobSpec::decode(&t.job).map_err(|e| anyhow::anyhow!("job: {e:?}"))?;
    if availability::max_tiles(&job, t.dispute_window) == 0 {
        return Ok(0);
    }
    let entry = ctx.store.entry(&t.result_root);
    let mut sent = 0;
    if t.tally().majority == VERDICT_WITHHELD && t.contest == 0 && now <= t.dispute_deadline {
        if entry.is_none() {
            bail!("task {key} was rejected as withheld, but its result is no longer in the store: it cannot be contested");
        }
        let tiles = availability::contest_tiles(&job, t.dispute_window, &t.seed, &key.to_bytes());
        let me = ctx.kp.pubkey();
        let av = pda::availability(key, t.posted_slot, t.availability_nonce);
        let ixs = client::opened_and_grown(
            client::contest_withheld(*key, t.posted_slot, t.availability_nonce, me),
            av,
            me,
            &job,
            tiles.len(),
        );
        must(
            "contest_withheld",
            super::send_all(chain, &ctx.name, "contest_withheld", key, &ixs, &ctx.kp)?,
        )?;
        tracing::info!(provider = ctx.name, task = %key, "contested a withheld verdict: publishing the tiles the seed drew");
        sent += 1;
    }
    let open: Vec<Account> = accounts(chain, key)?
        .into_iter()
        .filter(|x| x.a.state == AVAILABILITY_OPEN && now <= x.a.answer_deadline)
        .collect();
    if open.is_empty() {
        return Ok(sent);
    }
    let entry = entry.with_context(|| {
        format!("task {key} has {} open availability challenge(s), but its result is no longer in the store: they will fail and the bond with them", open.len())
    })?;
    let tree = entry.tree()?;
    // earliest deadline first; one account that cannot be answered (never grown, of an
    // earlier task at this address) never keeps the others from being answered
    let mut open = open;
    open.sort_by_key(|x| x.a.answer_deadline);
    for acc in open {
        if acc.a.opened_slot < t.posted_slot
            || acc.data.len() < acc.a.full_len()
            || sent >= PUBLISH_PER_PASS
        {
            continue;
        }
        let budget = PUBLISH_PER_PASS - sent;
        match publish(chain, ctx, key, &job, &acc, budget, |tile| {
            Ok((entry.tile(tile)?, tree.proof(tile).context("tile proof")?))
        }) {
            Ok(n) => {
                sent += n;
                tracing::info!(provider = ctx.name, task = %key, account = %acc.key, tiles = ?acc.a.named(), kind = acc.a.kind, transactions = n, "published on chain");
            }
            Err(e) => {
                tracing::warn!(provider = ctx.name, task = %key, account = %acc.key, error = %format!("{e:#}"), "could not publish; will retry")
            }
        }
    }
    Ok(sent)
}

/// Publishes every named tile of `acc` that is not proven yet: the chunks whose bytes on
/// chain differ from the tile's are written, then each is proven. `tile(i)` gives a tile's
/// bytes and its proof. Returns the transactions sent.
pub fn publish(
    chain: &dyn Chain,
    ctx: &NodeCtx,
    key: &Pubkey,
    job: &JobSpec,
    acc: &Account,
    budget: usize,
    tile: impl Fn(u32) -> Result<(Vec<u8>, Vec<[u8; 32]>)>,
) -> Result<usize> {
    let slot = slot_len(job.tile_len());
    let per = chunks_per_tile(job) as usize;
    let me = ctx.kp.pubkey();
    let mut sent = 0;
    for (i, &index) in acc.a.named().iter().enumerate() {
        if acc.a.proven[i].count_ones() as usize == per {
            continue;
        }
        let (bytes, proof) = tile(index)?;
        let mut padded = bytes.clone();
        padded.resize(slot, 0);
        for c in 0..per {
            if acc.a.proven[i] & (1u64 << c) != 0 {
                continue;
            }
            if sent + CHUNK_LEN / WRITE_LEN + 1 > budget {
                return Ok(sent);
            }
            let want = &padded[c * CHUNK_LEN..(c + 1) * CHUNK_LEN];
            let at = Availability::HEADER + i * slot + c * CHUNK_LEN;
            let have = acc.data.get(at..at + CHUNK_LEN).unwrap_or(&[]);
            for h in 0..CHUNK_LEN / WRITE_LEN {
                let part = &want[h * WRITE_LEN..(h + 1) * WRITE_LEN];
                if have.get(h * WRITE_LEN..(h + 1) * WRITE_LEN) == Some(part) {
                    continue;
                }
                let offset = (i * slot + c * CHUNK_LEN + h * WRITE_LEN) as u32;
                let ix = client::publish_write(*key, acc.key, me, offset, part.to_vec());
                must(
                    "publish_write",
                    send(chain, &ctx.name, "publish_write", key, ix, &ctx.kp)?,
                )?;
                sent += 1;
            }
            let (_, siblings) = chunk_proof(index, job.tile_count(), &bytes, &proof, c * CHUNK_LEN);
            let ix = client::publish_prove(*key, acc.key, me, i as u8, c as u8, siblings);
            must(
                "publish_prove",
                send(chain, &ctx.name, "publish_prove", key, ix, &ctx.kp)?,
            )?;
            sent += 1;
        }
    }
    Ok(sent)
}

/// The client's side, for a held Accepted task whose result it could not fetch: `missing` the
/// tiles it wanted and could not get. Tiles already published are not asked again; while a
/// challenge of its own is open it waits; otherwise it challenges the next
/// `availability::max_tiles` of them, bonding from its wallet's associated token account.
/// Returns the tiles it challenged (none when it waits or nothing is missing).
pub fn challenge_missing(
    chain: &dyn Chain,
    ctx: &NodeCtx,
    key: &Pubkey,
    t: &Task,
    missing: &[u32],
) -> Result<Vec<u32>> {
    challenge_tiles(chain, &ctx.name, &ctx.kp, key, t, missing)
}

/// [`challenge_missing`] by the wallet `kp` (logs as `who`): `keeper task result` challenges
/// through it when nobody serves the tiles it was asked for.
pub fn challenge_tiles(
    chain: &dyn Chain,
    who: &str,
    kp: &solana_keypair::Keypair,
    key: &Pubkey,
    t: &Task,
    missing: &[u32],
) -> Result<Vec<u32>> {
    if !challengeable(t) {
        return Ok(vec![]);
    }
    let job = JobSpec::decode(&t.job).map_err(|e| anyhow::anyhow!("job: {e:?}"))?;
    let max = availability::max_tiles(&job, t.dispute_window);
    if max == 0 {
        bail!("the provider of task {key} does not serve its result, and this job cannot be challenged for availability in this market (a tile's slot does not fit half the dispute window)");
    }
    let me = kp.pubkey();
    let all = accounts(chain, key)?;
    if all
        .iter()
        .any(|x| x.a.opener == me && x.a.kind == KIND_CHALLENGE && x.a.state == AVAILABILITY_OPEN)
    {
        return Ok(vec![]);
    }
    let have: Vec<u32> = published_in(&all, &job, t.posted_slot)
        .into_iter()
        .map(|(t, _)| t)
        .collect();
    let mut want: Vec<u32> = missing
        .iter()
        .copied()
        .filter(|x| *x < t.tile_count && !have.contains(x))
        .collect();
    want.sort_unstable();
    want.dedup();
    want.truncate(max);
    if want.is_empty() {
        return Ok(vec![]);
    }
    let (wallet, bond) = super::challenger::bond_wallet(
        chain,
        &me,
        t,
        &format!("a challenge of task {key}'s availability"),
    )?;
    let ix = client::challenge_availability(
        *key,
        t.posted_slot,
        t.availability_nonce,
        me,
        wallet,
        wallet,
        want.clone(),
    );
    let av = pda::availability(key, t.posted_slot, t.availability_nonce);
    let ixs = client::opened_and_grown(ix, av, me, &job, want.len());
    must(
        "challenge_availability",
        super::send_all(chain, who, "challenge_availability", key, &ixs, kp)?,
    )?;
    tracing::warn!(who, task = %key, tiles = ?want, bond, "the provider is not serving the result: challenged its availability on chain");
    Ok(want)
}

/// The cranker's side: ends every open account of `task` past its deadline (with no dispute
/// open) or no longer in play, its bond to its payout account. Returns whether anything landed.
pub fn end_expired(
    chain: &dyn Chain,
    who: &str,
    kp: &solana_keypair::Keypair,
    now: u64,
    key: &Pubkey,
    t: &Task,
) -> Result<bool> {
    let mut landed = false;
    for acc in accounts(chain, key)? {
        if acc.a.state != AVAILABILITY_OPEN {
            continue;
        }
        let live = in_play(acc.a.kind, t.tally().majority);
        if live && (now <= acc.a.answer_deadline || t.disputes_open > 0) {
            continue;
        }
        let ix = client::availability_timeout(
            *key,
            t.provider,
            acc.key,
            acc.a.payout,
            acc.a.opener,
            None,
        );
        let mut r = send(chain, who, "availability_timeout", key, ix, kp)?;
        if !r.ok && r.error_code().as_deref() == Some("ClientRefundAccountClosed") {
            let mint = chain
                .decoded::<compute_market::state::Config>(&pda::config())?
                .context("no config on this cluster")?
                .stake_mint;
            let ixs = [
                anchor_spl::associated_token::spl_associated_token_account::instruction::create_associated_token_account_idempotent(
                    &kp.pubkey(),
                    &acc.a.opener,
                    &mint,
                    &anchor_spl::token::ID,
                ),
                client::availability_timeout(
                    *key,
                    t.provider,
                    acc.key,
                    acc.a.payout,
                    acc.a.opener,
                    Some(mint),
                ),
            ];
            r = super::send_all(chain, who, "availability_timeout", key, &ixs, kp)?;
        }
        landed |= r.ok;
    }
    Ok(landed)
}

/// Closes the ended accounts `kp` opened whose task has concluded or closed (their rent back).
/// Returns how many it closed.
pub fn close_ended(chain: &dyn Chain, who: &str, kp: &solana_keypair::Keypair) -> Result<usize> {
    use anchor_lang::Discriminator;
    let me = kp.pubkey();
    let mut closed = 0;
    for (key, data) in chain.program_accounts_matching(
        Availability::DISCRIMINATOR,
        Availability::OPENER_OFFSET,
        me.as_ref(),
    )? {
        let Some(a) = Availability::from_account_data(&data) else {
            continue;
        };
        if a.opener != me || a.state == AVAILABILITY_OPEN {
            continue;
        }
        if chain
            .task(&a.task)?
            .is_some_and(|t| t.held && t.posted_slot <= a.opened_slot)
        {
            // readable while its task's verdict is held: the client may not have read it yet
            continue;
        }
        let r = send(
            chain,
            who,
            "close_availability",
            &a.task,
            client::close_availability(key, me),
            kp,
        )?;
        closed += r.ok as usize;
    }
    Ok(closed)
}

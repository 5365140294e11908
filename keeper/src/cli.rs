//! The client-side subcommands (`node ...`, `task ...`, `market list`) over any [`Chain`].

use anchor_lang::prelude::Pubkey;
use anyhow::{bail, Context, Result};
use compute_market::{
    client,
    instructions::{PostTaskArgs, RegisterNodeArgs},
    pda,
    state::{Config, Hardware, Market, Node, Task},
};
use compute_market_protocol::job::JobSpec;
use serde_json::{json, Value};
use solana_keypair::Keypair;
use solana_signer::Signer;

use crate::chain::{decode, must, Chain, ChainExt};

/// The program's config on this cluster.
pub fn config(chain: &dyn Chain) -> Result<Config> {
    chain.decoded(&pda::config())?.context(
        "the Compute Market program has no config on this cluster (deploy and initialize it first)",
    )
}

/// The associated token account of `owner` for the stake mint.
pub fn wallet(chain: &dyn Chain, owner: &Pubkey) -> Result<Pubkey> {
    Ok(anchor_spl::associated_token::get_associated_token_address(
        owner,
        &config(chain)?.stake_mint,
    ))
}

fn send(
    chain: &dyn Chain,
    kp: &Keypair,
    what: &str,
    ix: anchor_lang::solana_program::instruction::Instruction,
) -> Result<Value> {
    let r = must(what, chain.send(&[ix], kp, &[])?)?;
    Ok(json!({ "ok": true, "instruction": what, "compute_units": r.cu }))
}

/// `node register`.
pub fn node_register(
    chain: &dyn Chain,
    kp: &Keypair,
    market: u16,
    roles: u8,
    hardware: Hardware,
) -> Result<Value> {
    let mint = config(chain)?.stake_mint;
    let ix = client::register_node(
        kp.pubkey(),
        pda::market(market),
        mint,
        RegisterNodeArgs { roles, hardware },
    );
    let mut v = send(chain, kp, "register_node", ix)?;
    v["node"] = json!(pda::node(&kp.pubkey()).to_string());
    Ok(v)
}

/// `node stake`.
pub fn node_stake(
    chain: &dyn Chain,
    kp: &Keypair,
    amount: u64,
    from: Option<Pubkey>,
) -> Result<Value> {
    let node = node_of(chain, &kp.pubkey())?;
    let from = match from {
        Some(f) => f,
        None => wallet(chain, &kp.pubkey())?,
    };
    send(
        chain,
        kp,
        "stake",
        client::stake(kp.pubkey(), node.market, from, amount),
    )
}

/// `node unstake`.
pub fn node_unstake(chain: &dyn Chain, kp: &Keypair, amount: u64) -> Result<Value> {
    let node = node_of(chain, &kp.pubkey())?;
    if node.pending_unstake > 0 {
        anyhow::bail!(
            "{} tokens are already pending unstake (unlock slot {}): `keeper node withdraw` once the cooldown has passed, then request more",
            node.pending_unstake,
            node.unlock_slot
        );
    }
    send(
        chain,
        kp,
        "request_unstake",
        client::request_unstake(kp.pubkey(), node.market, amount),
    )
}

/// `node withdraw` (pending unstake after the cooldown, then earnings).
pub fn node_withdraw(chain: &dyn Chain, kp: &Keypair, to: Option<Pubkey>) -> Result<Value> {
    let node = node_of(chain, &kp.pubkey())?;
    let to = match to {
        Some(t) => t,
        None => wallet(chain, &kp.pubkey())?,
    };
    let mut done = vec![];
    if node.pending_unstake > 0 {
        send(chain, kp, "withdraw", client::withdraw(kp.pubkey(), to))?;
        done.push(json!({ "withdrawn": node.pending_unstake }));
    }
    if node.earned > 0 {
        send(
            chain,
            kp,
            "claim_earnings",
            client::claim_earnings(kp.pubkey(), to),
        )?;
        done.push(json!({ "earnings": node.earned }));
    }
    if done.is_empty() {
        bail!("nothing to withdraw: no pending unstake and no earnings");
    }
    Ok(json!({ "ok": true, "paid": done }))
}

fn node_of(chain: &dyn Chain, authority: &Pubkey) -> Result<Node> {
    chain
        .node(&pda::node(authority))?
        .with_context(|| format!("{authority} has no node (run `keeper node register` first)"))
}

/// `node status`.
pub fn node_status(chain: &dyn Chain, authority: &Pubkey) -> Result<Value> {
    let n = node_of(chain, authority)?;
    Ok(json!({
        "node": pda::node(authority).to_string(),
        "authority": n.authority.to_string(),
        "market": n.market.to_string(),
        "roles": match n.roles { 1 => "provider", 2 => "verifier", _ => "provider+verifier" },
        "free": n.free, "bonded": n.bonded, "pending_unstake": n.pending_unstake, "unlock_slot": n.unlock_slot,
        "earned": n.earned, "fees_due": n.fees_due,
        // the stake snapshot (PROTOCOL §3): the newest stake counts for seats only in rounds
        // that start after its slot
        "activating": n.activating, "activating_slot": n.activating_slot, "settled_slot": n.settled_slot,
        "stake_debt": n.stake_debt,
        "hardware": { "gflops": n.hardware.gflops, "memory_gb": n.hardware.memory_gb, "bandwidth_gbps": n.hardware.bandwidth_gbps, "region": n.hardware.region },
        "tasks_completed": n.tasks_completed, "verifications": n.verifications, "times_slashed": n.times_slashed,
    }))
}

/// Terms of the tasks `task post` posts.
#[derive(Clone, Copy, Debug)]
pub struct TaskTerms {
    /// Market id.
    pub market: u16,
    /// Reward per task, base units.
    pub reward: u64,
    /// Quorum V (0: the market's).
    pub quorum: u8,
    /// Samples k (0: the market's).
    pub samples: u16,
    /// Preferred region (0: any).
    pub region: u16,
}

/// `task post`: one task per `(id, job)`, up to 16 transactions in flight at once. One JSON
/// object per task, in order; the first refusal is the error.
pub fn task_post(
    chain: &dyn Chain,
    kp: &Keypair,
    terms: TaskTerms,
    jobs: Vec<(u64, JobSpec)>,
) -> Result<Vec<Value>> {
    let cfg = config(chain)?;
    let wallet = wallet(chain, &kp.pubkey())?;
    // say what is missing rather than let the transaction fail in simulation
    let needed = terms.reward.saturating_mul(jobs.len() as u64);
    let balance = chain.token_balance(&wallet)?;
    anyhow::ensure!(
        balance >= needed,
        "the wallet's stake-token account {wallet} holds {balance}, but {} task(s) at a reward of {} need {needed}",
        jobs.len(),
        terms.reward
    );
    crate::roles::parallel(16, jobs, |(id, job)| {
        let TaskTerms {
            market,
            reward,
            quorum,
            samples,
            region,
        } = terms;
        let args = PostTaskArgs {
            task_id: id,
            job: job.encode(),
            reward,
            quorum,
            samples,
            input_uri: String::new(),
            region,
        };
        let mut v = send(
            chain,
            kp,
            "post_task",
            client::post_task(
                kp.pubkey(),
                wallet,
                cfg.stake_mint,
                pda::market(market),
                args,
            ),
        )
        .with_context(|| format!("task id {id}"))?;
        v["task"] = json!(pda::task(&kp.pubkey(), id).to_string());
        Ok(v)
    })
    .into_iter()
    .collect()
}

/// `task cancel`.
pub fn task_cancel(chain: &dyn Chain, kp: &Keypair, id: u64) -> Result<Value> {
    send(
        chain,
        kp,
        "cancel_task",
        client::cancel_task(kp.pubkey(), pda::task(&kp.pubkey(), id)),
    )
}

fn task_json(key: &Pubkey, t: &Task) -> Value {
    let job = JobSpec::decode(&t.job)
        .map(|j| format!("{:?} {:?}", j.kind, j.dims))
        .unwrap_or_else(|e| format!("invalid: {e}"));
    json!({
        "task": key.to_string(), "client": t.client.to_string(), "id": t.task_id, "market": t.market.to_string(),
        "status": format!("{:?}", t.status), "job": job, "reward": t.reward, "quorum": t.quorum, "samples": t.samples, "region": t.region,
        "provider": (t.provider != Pubkey::default()).then(|| t.provider.to_string()), "round": t.round,
        "valid": t.tally().valid, "invalid": t.tally().invalid, "seats": t.tally().seats,
    })
}

/// `task status`.
pub fn task_status(chain: &dyn Chain, task: &Pubkey) -> Result<Value> {
    let t = chain.task(task)?.with_context(|| {
        format!("no task at {task} (closed tasks are gone; see the TaskClosed event)")
    })?;
    Ok(task_json(task, &t))
}

/// `task list`.
pub fn task_list(chain: &dyn Chain, market: Option<u16>) -> Result<Value> {
    let m = market.map(pda::market);
    let mut tasks = chain.tasks()?;
    tasks.retain(|(_, t)| m.is_none_or(|m| t.market == m));
    tasks.sort_by_key(|(_, t)| t.posted_slot);
    Ok(Value::Array(
        tasks.iter().map(|(k, t)| task_json(k, t)).collect(),
    ))
}

/// `market list`.
pub fn market_list(chain: &dyn Chain) -> Result<Value> {
    let markets: Vec<Value> = chain
        .program_accounts(<Market as anchor_lang::Discriminator>::DISCRIMINATOR)?
        .into_iter()
        .filter_map(|(k, d)| Some((k, decode::<Market>(&d)?)))
        .map(|(k, m)| {
            let name = String::from_utf8_lossy(&m.name).trim_end_matches('\0').to_string();
            json!({
                "market": k.to_string(), "id": m.id, "name": name, "min_gflops": m.min_gflops, "min_memory_gb": m.min_memory_gb,
                "quorum": m.quorum, "samples": m.samples, "providers": m.providers, "verifiers": m.verifiers,
                "verifier_stake": m.verifier_stake,
                "windows": { "submit": m.windows.submit, "join": m.windows.join, "commit": m.windows.commit, "reveal": m.windows.reveal },
            })
        })
        .collect();
    Ok(Value::Array(markets))
}

//! The client operations (`node ...`, `task ...`, `market list`) over any [`Chain`]. Each
//! returns a typed result (serializable); the binary alone turns it into text or JSON.

use anchor_lang::prelude::Pubkey;
use anyhow::{bail, Context, Result};
use compute_market::{
    client,
    instructions::{PostTaskArgs, RegisterNodeArgs, UpdateNodeArgs},
    pda,
    state::{Config, Hardware, Market, Node, Task},
};
use compute_market_protocol::job::JobSpec;
use serde::Serialize;
use solana_instruction::Instruction;
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

/// A transaction the program accepted.
#[derive(Clone, Debug, Serialize)]
pub struct Sent {
    /// Always true (a refusal is an error).
    pub ok: bool,
    /// The instruction.
    pub instruction: String,
    /// Compute units its transaction used (`null`: the node did not return the confirmed
    /// transaction within a few seconds, so they are unknown — never reported as 0).
    pub compute_units: Option<u64>,
}

/// A node registered.
#[derive(Clone, Debug, Serialize)]
pub struct Registered {
    /// The transaction.
    #[serde(flatten)]
    pub sent: Sent,
    /// The node's address.
    pub node: String,
}

/// A task posted.
#[derive(Clone, Debug, Serialize)]
pub struct Posted {
    /// The transaction.
    #[serde(flatten)]
    pub sent: Sent,
    /// The task's address.
    pub task: String,
}

/// What `node withdraw` paid out.
#[derive(Clone, Debug, Serialize)]
pub struct Paid {
    /// Always true.
    pub ok: bool,
    /// Each payout: `withdrawn` (pending unstake) and/or `earnings`.
    pub paid: Vec<Payout>,
}

/// One payout of `node withdraw`.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Payout {
    /// Pending unstake paid after its cooldown.
    Withdrawn(u64),
    /// Earnings claimed.
    Earnings(u64),
}

/// Declared hardware, as shown.
#[derive(Clone, Debug, Serialize)]
pub struct HardwareView {
    /// GFLOPS.
    pub gflops: u32,
    /// Memory, GB.
    pub memory_gb: u32,
    /// Bandwidth, GB/s.
    pub bandwidth_gbps: u32,
    /// Region code.
    pub region: u16,
}

/// A node, as `node status` shows it.
#[derive(Clone, Debug, Serialize)]
pub struct NodeView {
    /// Its address.
    pub node: String,
    /// Its authority.
    pub authority: String,
    /// Its market.
    pub market: String,
    /// provider, verifier or provider+verifier.
    pub roles: String,
    /// Free stake.
    pub free: u64,
    /// Bonded stake.
    pub bonded: u64,
    /// Pending unstake.
    pub pending_unstake: u64,
    /// When the pending unstake unlocks.
    pub unlock_slot: u64,
    /// Claimable earnings.
    pub earned: u64,
    /// Fees due to the treasury.
    pub fees_due: u64,
    /// The stake snapshot (PROTOCOL §3): the newest stake counts for seats only in rounds that
    /// start after `activating_slot`.
    pub activating: u64,
    /// Slot of the activating stake.
    pub activating_slot: u64,
    /// The rest of the stake was in place at this slot.
    pub settled_slot: u64,
    /// Slashed stake not yet subtracted from the market's total.
    pub stake_debt: u64,
    /// Declared hardware.
    pub hardware: HardwareView,
    /// Where its keeper serves its card (PROTOCOL §2; empty: none announced).
    pub endpoint: String,
    /// Tasks completed.
    pub tasks_completed: u32,
    /// Votes revealed.
    pub verifications: u32,
    /// Times slashed.
    pub times_slashed: u32,
}

/// A task, as `task status` and `task list` show it.
#[derive(Clone, Debug, Serialize)]
pub struct TaskView {
    /// Its address.
    pub task: String,
    /// Its client.
    pub client: String,
    /// Client-chosen id.
    pub id: u64,
    /// Its market.
    pub market: String,
    /// Its status.
    pub status: String,
    /// Kind and dimensions.
    pub job: String,
    /// Reward.
    pub reward: u64,
    /// Quorum V.
    pub quorum: u8,
    /// Samples k.
    pub samples: u16,
    /// Preferred region.
    pub region: u16,
    /// Its provider, once claimed.
    pub provider: Option<String>,
    /// Verification round.
    pub round: u8,
    /// Valid votes revealed this round.
    pub valid: u8,
    /// Invalid votes revealed this round.
    pub invalid: u8,
    /// "Unavailable" votes revealed this round (PROTOCOL §3.4).
    pub unavailable: u8,
    /// Seats taken this round.
    pub seats: u8,
    /// The verdict in force (PROTOCOL §8.5: 1 Accepted, 2 Rejected, 3 withheld, 4 proven wrong
    /// by a dispute, 5 INVALID claims refuted by a dispute; 0 undecided).
    pub verdict: u8,
    /// Whether its money is held for disputes, and until which slot they may be opened
    /// (PROTOCOL §8.1).
    pub dispute_until: Option<u64>,
    /// Disputes still open against it.
    pub disputes_open: u32,
}

/// Phase windows, as shown.
#[derive(Clone, Debug, Serialize)]
pub struct WindowsView {
    /// Submit window.
    pub submit: u32,
    /// Join window.
    pub join: u32,
    /// Commit window.
    pub commit: u32,
    /// Reveal window.
    pub reveal: u32,
}

/// A market, as `market list` shows it.
#[derive(Clone, Debug, Serialize)]
pub struct MarketView {
    /// Its address.
    pub market: String,
    /// Its id.
    pub id: u16,
    /// Its name.
    pub name: String,
    /// Providers' minimum GFLOPS.
    pub min_gflops: u32,
    /// Providers' minimum memory, GB.
    pub min_memory_gb: u32,
    /// Default quorum.
    pub quorum: u8,
    /// Default samples.
    pub samples: u16,
    /// Registered providers.
    pub providers: u32,
    /// Registered verifiers.
    pub verifiers: u32,
    /// The sortition total.
    pub verifier_stake: u64,
    /// Phase windows.
    pub windows: WindowsView,
    /// Slots a decided round stays open to disputes (PROTOCOL §8.1); 0: none. A keeper asked
    /// to stop serves its results through it (§3.8).
    pub dispute_window: u32,
}

fn send(
    chain: &dyn Chain,
    kp: &Keypair,
    what: &str,
    ix: anchor_lang::solana_program::instruction::Instruction,
) -> Result<Sent> {
    let r = must(what, chain.send(&[ix], kp, &[])?)?;
    Ok(Sent {
        ok: true,
        instruction: what.to_string(),
        compute_units: (r.cu > 0).then_some(r.cu),
    })
}

/// `node register`.
pub fn node_register(
    chain: &dyn Chain,
    kp: &Keypair,
    market: u16,
    roles: u8,
    hardware: Hardware,
) -> Result<Registered> {
    let mint = config(chain)?.stake_mint;
    let ix = client::register_node(
        kp.pubkey(),
        pda::market(market),
        mint,
        RegisterNodeArgs { roles, hardware },
    );
    Ok(Registered {
        sent: send(chain, kp, "register_node", ix)?,
        node: pda::node(&kp.pubkey()).to_string(),
    })
}

/// `node stake`.
pub fn node_stake(
    chain: &dyn Chain,
    kp: &Keypair,
    amount: u64,
    from: Option<Pubkey>,
) -> Result<Sent> {
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
pub fn node_unstake(chain: &dyn Chain, kp: &Keypair, amount: u64) -> Result<Sent> {
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
pub fn node_withdraw(chain: &dyn Chain, kp: &Keypair, to: Option<Pubkey>) -> Result<Paid> {
    let node = node_of(chain, &kp.pubkey())?;
    let to = match to {
        Some(t) => t,
        None => wallet(chain, &kp.pubkey())?,
    };
    let mut done = vec![];
    if node.pending_unstake > 0 {
        send(chain, kp, "withdraw", client::withdraw(kp.pubkey(), to))?;
        done.push(Payout::Withdrawn(node.pending_unstake));
    }
    if node.earned > 0 {
        send(
            chain,
            kp,
            "claim_earnings",
            client::claim_earnings(kp.pubkey(), to),
        )?;
        done.push(Payout::Earnings(node.earned));
    }
    if done.is_empty() {
        bail!("nothing to withdraw: no pending unstake and no earnings");
    }
    Ok(Paid {
        ok: true,
        paid: done,
    })
}

fn node_of(chain: &dyn Chain, authority: &Pubkey) -> Result<Node> {
    chain
        .node(&pda::node(authority))?
        .with_context(|| format!("{authority} has no node (run `keeper node register` first)"))
}

/// Announces `endpoint` as the node's (PROTOCOL §2, node endpoint), keeping its declared
/// hardware; `None` when the node already names it. `keeper run` calls it for a provider, so
/// clients find its card.
pub fn node_announce(chain: &dyn Chain, kp: &Keypair, endpoint: &str) -> Result<Option<Sent>> {
    let n = node_of(chain, &kp.pubkey())?;
    if n.endpoint() == endpoint.as_bytes() {
        return Ok(None);
    }
    anyhow::ensure!(
        compute_market::instructions::endpoint_ok(endpoint.as_bytes()),
        "the endpoint {endpoint:?} is not an http(s) URL of at most {} printable ASCII bytes",
        compute_market::constants::MAX_ENDPOINT_LEN
    );
    let ix = client::update_node(
        kp.pubkey(),
        n.market,
        UpdateNodeArgs {
            hardware: n.hardware,
            endpoint: endpoint.to_string(),
        },
    );
    send(chain, kp, "update_node", ix).map(Some)
}

/// `node status`.
pub fn node_status(chain: &dyn Chain, authority: &Pubkey) -> Result<NodeView> {
    let n = node_of(chain, authority)?;
    Ok(NodeView {
        node: pda::node(authority).to_string(),
        authority: n.authority.to_string(),
        market: n.market.to_string(),
        roles: match n.roles {
            1 => "provider",
            2 => "verifier",
            _ => "provider+verifier",
        }
        .into(),
        free: n.free,
        bonded: n.bonded,
        pending_unstake: n.pending_unstake,
        unlock_slot: n.unlock_slot,
        earned: n.earned,
        fees_due: n.fees_due,
        activating: n.activating,
        activating_slot: n.activating_slot,
        settled_slot: n.settled_slot,
        stake_debt: n.stake_debt,
        hardware: HardwareView {
            gflops: n.hardware.gflops,
            memory_gb: n.hardware.memory_gb,
            bandwidth_gbps: n.hardware.bandwidth_gbps,
            region: n.hardware.region,
        },
        endpoint: String::from_utf8_lossy(n.endpoint()).into_owned(),
        tasks_completed: n.tasks_completed,
        verifications: n.verifications,
        times_slashed: n.times_slashed,
    })
}

/// Terms of the tasks `task post` posts.
#[derive(Clone, Debug, Default)]
pub struct TaskTerms {
    /// Where a job on the client's data finds its inputs (a content store's base URL; empty
    /// for generated inputs).
    pub input_uri: String,
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

/// Says what is missing when `owner`'s stake-token account cannot pay `count` tasks at
/// `reward` (rather than letting the transaction fail in simulation); returns the account.
pub fn ensure_funds(chain: &dyn Chain, owner: &Pubkey, reward: u64, count: u64) -> Result<Pubkey> {
    let wallet = wallet(chain, owner)?;
    let needed = reward.saturating_mul(count);
    let balance = chain.token_balance(&wallet)?;
    if balance < needed {
        let d = crate::amount::stake_token(chain)?.1;
        let t = |x: u64| crate::amount::format_ui(x, d);
        anyhow::bail!(
            "the wallet's stake-token account {wallet} holds {} tokens, but {count} task(s) at a reward of {} tokens need {} ({balance} and {needed} base units): fund it (keeper fund on a local cluster)",
            t(balance),
            t(reward),
            t(needed)
        );
    }
    Ok(wallet)
}

/// `task post`: one task per `(id, job)`, up to 16 transactions in flight at once. One JSON
/// object per task, in order; the first refusal is the error.
pub fn task_post(
    chain: &dyn Chain,
    kp: &Keypair,
    terms: TaskTerms,
    jobs: Vec<(u64, JobSpec)>,
) -> Result<Vec<Posted>> {
    let cfg = config(chain)?;
    let wallet = ensure_funds(chain, &kp.pubkey(), terms.reward, jobs.len() as u64)?;
    let TaskTerms {
        input_uri,
        market,
        reward,
        quorum,
        samples,
        region,
    } = terms;
    let ixs: Vec<(u64, Instruction)> = jobs
        .into_iter()
        .map(|(id, job)| {
            let args = PostTaskArgs {
                task_id: id,
                job: job.encode(),
                reward,
                quorum,
                samples,
                input_uri: input_uri.clone(),
                region,
            };
            let ix = client::post_task(
                kp.pubkey(),
                wallet,
                cfg.stake_mint,
                pda::market(market),
                args,
            );
            (id, ix)
        })
        .collect();
    // as many posts per transaction as fit (one fee, one confirmation for several tasks),
    // up to 16 transactions in flight; packing keeps the order, so each transaction's posts
    // are the next ids
    let groups =
        crate::chain::pack::pack(ixs.iter().map(|(_, ix)| ix.clone()).collect(), &kp.pubkey());
    let mut ids = ixs.into_iter().map(|(id, _)| id);
    let batches: Vec<(Vec<u64>, Vec<Instruction>)> = groups
        .into_iter()
        .map(|g| {
            let posts = g
                .iter()
                .filter(|i| i.program_id == compute_market::ID)
                .count();
            (ids.by_ref().take(posts).collect(), g)
        })
        .collect();
    let sent = crate::roles::parallel(16, batches, |(ids, group)| {
        let r = chain
            .send(&group, kp, &[])
            .and_then(|r| must("post_task", r))
            .with_context(|| format!("task ids {ids:?}"));
        (ids, r)
    });
    let mut out = vec![];
    for (ids, r) in sent {
        let r = r?;
        for id in ids {
            out.push(Posted {
                sent: Sent {
                    ok: true,
                    instruction: "post_task".into(),
                    compute_units: (r.cu > 0).then_some(r.cu),
                },
                task: pda::task(&kp.pubkey(), id).to_string(),
            });
        }
    }
    Ok(out)
}

/// `task cancel`.
pub fn task_cancel(chain: &dyn Chain, kp: &Keypair, id: u64) -> Result<Sent> {
    send(
        chain,
        kp,
        "cancel_task",
        client::cancel_task(kp.pubkey(), pda::task(&kp.pubkey(), id)),
    )
}

fn task_view(key: &Pubkey, t: &Task) -> TaskView {
    let job = JobSpec::decode(&t.job)
        .map(|j| format!("{:?} {:?}", j.kind, j.dims))
        .unwrap_or_else(|e| format!("invalid: {e}"));
    TaskView {
        task: key.to_string(),
        client: t.client.to_string(),
        id: t.task_id,
        market: t.market.to_string(),
        status: format!("{:?}", t.status),
        job,
        reward: t.reward,
        quorum: t.quorum,
        samples: t.samples,
        region: t.region,
        provider: (t.provider != Pubkey::default()).then(|| t.provider.to_string()),
        round: t.round,
        valid: t.tally().valid,
        invalid: t.tally().invalid,
        unavailable: compute_market_protocol::commit::unavailable(
            t.tally().revealed,
            t.tally().valid,
            t.tally().invalid,
        ),
        seats: t.tally().seats,
        verdict: t.tally().majority,
        dispute_until: t.held.then_some(t.dispute_deadline),
        disputes_open: t.disputes_open,
    }
}

/// What `task status` shows: a task on chain (an open one with how long it has waited and why
/// each provider leaves it), or a closed one's outcome from its history.
#[derive(Clone, Debug, Serialize)]
#[serde(untagged)]
pub enum StatusReport {
    /// The task's account.
    Live {
        /// The task.
        #[serde(flatten)]
        task: TaskView,
        /// An open task: how long it has waited and why.
        #[serde(skip_serializing_if = "Option::is_none")]
        waiting: Option<Waiting>,
        /// A decided task: what its status means for the client.
        #[serde(skip_serializing_if = "Option::is_none")]
        meaning: Option<&'static str>,
    },
    /// Its account is closed: the outcome from its transactions.
    Closed(crate::outlook::Closed),
}

/// How long an open task has waited, and why each provider leaves it.
#[derive(Clone, Debug, Serialize)]
pub struct Waiting {
    /// Slots since it was posted.
    pub slots: u64,
    /// The same in seconds, at the cluster's recent slot time.
    pub seconds: f64,
    /// Slots left until it expires unclaimed.
    pub expires_in_slots: u64,
    /// Each provider's reason (from its card when it published one).
    pub providers: crate::outlook::Outlook,
}

/// `task status`: the task, and for an open one why it waits (the providers' cards read under
/// `policy`, seconds at `slot_seconds`); a closed task's outcome from its history (`logs`).
pub fn task_report(
    chain: &dyn Chain,
    task: &Pubkey,
    policy: &crate::results::FetchPolicy,
    slot_seconds: f64,
    logs: impl FnOnce() -> Result<Vec<Vec<String>>>,
) -> Result<StatusReport> {
    let Some(t) = chain.task(task)? else {
        return Ok(StatusReport::Closed(crate::outlook::closed(
            task,
            &logs()?,
        )?));
    };
    let now = chain.slot()?;
    let lapsed = t.status == compute_market::state::TaskStatus::Open && now > t.open_deadline;
    let waiting = match (t.status, JobSpec::decode(&t.job)) {
        (compute_market::state::TaskStatus::Open, Ok(job)) if !lapsed => {
            let known = crate::outlook::providers(chain, &t.market, t.provider_bond, policy)?;
            let slots = now.saturating_sub(t.posted_slot);
            Some(Waiting {
                slots,
                seconds: (slots as f64 * slot_seconds * 10.0).round() / 10.0,
                expires_in_slots: t.open_deadline.saturating_sub(now),
                providers: crate::outlook::waiting(&known, task, &t, &job),
            })
        }
        _ => None,
    };
    Ok(StatusReport::Live {
        task: task_view(task, &t),
        waiting,
        meaning: if lapsed {
            Some(
                "its deadline passed unclaimed: it is refunded by expire_task, which anyone may \
                 send (a cranker does)",
            )
        } else {
            Some(crate::outlook::meaning(t.status)).filter(|m| !m.is_empty())
        },
    })
}

/// Whether any provider of `market` would take `job` posted at these terms (`task post` asks
/// before it uploads or pays).
pub fn task_outlook(
    chain: &dyn Chain,
    market: u16,
    reward: u64,
    quorum: u8,
    samples: u16,
    job: &JobSpec,
    policy: &crate::results::FetchPolicy,
) -> Result<crate::outlook::Outlook> {
    let cfg = config(chain)?;
    let m: Market = chain
        .decoded(&pda::market(market))?
        .with_context(|| format!("no market {market}"))?;
    let t = crate::outlook::would_post(&cfg, &m, reward, quorum, samples, job);
    let known = crate::outlook::providers(chain, &pda::market(market), t.provider_bond, policy)?;
    Ok(crate::outlook::estimate(&known, &t, job))
}

/// Refuses `job` when its [`task_outlook`] says no provider would take it at these terms,
/// saying why and what to change (`task post` asks before it uploads or pays, unless
/// `--anyway`). An outlook that could not be read is logged and passes.
pub fn refuse_untaken(outlook: Result<crate::outlook::Outlook>, job: &JobSpec) -> Result<()> {
    let o = match outlook {
        Ok(o) => o,
        Err(e) => {
            tracing::warn!("cannot tell whether a provider would take it ({e:#}); posting");
            return Ok(());
        }
    };
    if o.able > 0 {
        return Ok(());
    }
    let mut why = format!("no provider would take this task: {}", o.summary());
    let slow = o
        .each
        .iter()
        .any(|p| p.reason == Some(crate::card::SkipReason::Window));
    if slow && job.kind == compute_market_protocol::job::JobKind::Encoder {
        why.push_str(&format!(
            " (an Encoder is timed with every text at its token limit, {} here: post the \
             longest texts in a task of their own)",
            job.dims[1]
        ));
    }
    bail!(
        "{why}. It would wait unclaimed until it expires; change the job or its terms, or post \
         it --anyway (its reward is refunded when it expires or is cancelled)"
    )
}

/// `task list`.
pub fn task_list(chain: &dyn Chain, market: Option<u16>) -> Result<Vec<TaskView>> {
    let m = market.map(pda::market);
    let mut tasks = chain.tasks()?;
    tasks.retain(|(_, t)| m.is_none_or(|m| t.market == m));
    tasks.sort_by_key(|(_, t)| t.posted_slot);
    Ok(tasks.iter().map(|(k, t)| task_view(k, t)).collect())
}

/// `market list`.
pub fn market_list(chain: &dyn Chain) -> Result<Vec<MarketView>> {
    Ok(chain
        .program_accounts(<Market as anchor_lang::Discriminator>::DISCRIMINATOR)?
        .into_iter()
        .filter_map(|(k, d)| Some((k, decode::<Market>(&d)?)))
        .map(|(k, m)| MarketView {
            market: k.to_string(),
            id: m.id,
            name: String::from_utf8_lossy(&m.name)
                .trim_end_matches('\0')
                .to_string(),
            min_gflops: m.min_gflops,
            min_memory_gb: m.min_memory_gb,
            quorum: m.quorum,
            samples: m.samples,
            providers: m.providers,
            verifiers: m.verifiers,
            verifier_stake: m.verifier_stake,
            windows: WindowsView {
                submit: m.windows.submit,
                join: m.windows.join,
                commit: m.windows.commit,
                reveal: m.windows.reveal,
            },
            dispute_window: m.dispute_window,
        })
        .collect())
}

/// What `task dispute` did.
#[derive(Serialize, Debug)]
pub struct DisputeReport {
    /// The task.
    pub task: String,
    /// The tiles recomputed on this machine before bonding.
    pub checked: Vec<u32>,
    /// The element found wrong (tile, element), disputed.
    pub tile: u32,
    /// The element within the tile.
    pub element: u32,
    /// Where the dispute stands: Won (paid by the cranker once the votes are settled), Closed
    /// (lost, or already paid), Moot, Expired or Open (run the command again to carry on).
    pub outcome: String,
    /// The task's verdict now (PROTOCOL §8.5: 4, proven wrong).
    pub majority: u8,
}

/// `task dispute`: recomputes `tiles` of an Accepted result held for its dispute window (all
/// of them when empty) on this machine, fetched with their proofs from its provider through
/// `store` (its fetch policy: which addresses it may reach); refuses
/// to bond when every one recomputes equal (a dispute of a right result loses its bond), else
/// disputes the first wrong element and argues to the end (PROTOCOL §8). Run again, it resumes
/// the dispute it opened.
pub fn task_dispute(
    chain: &dyn Chain,
    kp: &Keypair,
    backend: &dyn crate::compute::Backend,
    store: &crate::results::ResultStore,
    task: &Pubkey,
    tiles: &[u32],
) -> Result<DisputeReport> {
    use crate::roles::challenger::{argue, disputable, Claim};
    use compute_market_protocol::dispute::DISPUTE_RESULT_WRONG;
    let t = chain
        .task(task)?
        .with_context(|| format!("no task at {task} (a closed task can no longer be disputed)"))?;
    let job = JobSpec::decode(&t.job)
        .map_err(|e| anyhow::anyhow!("the task's job does not decode: {e:?}"))?;
    ensure_disputable(&t, &job)?;
    let mine = chain.account(&pda::dispute(task, &kp.pubkey()))?.is_some();
    if !mine && !disputable(&t, DISPUTE_RESULT_WRONG, chain.slot()?) {
        bail!(
            "task {task} cannot be disputed now: status {:?}, verdict {} (a dispute of a result needs an Accepted verdict, until slot {})",
            t.status,
            t.tally().majority,
            t.dispute_deadline
        );
    }
    let count = t.tile_count;
    if let Some(bad) = tiles.iter().find(|&&i| i >= count) {
        bail!("tile {bad} is out of range: the result has {count} tiles");
    }
    let want: Vec<u32> = if tiles.is_empty() {
        (0..count).collect()
    } else {
        crate::verify::distinct(tiles)
    };
    let uri = crate::roles::result_uri(&t).to_string();
    // on the client's data: the inputs held here (fetched if need be) and their slices, which
    // the program recomputes the element from (PROTOCOL §8.7)
    let data = if compute_market_protocol::dispute::one_step(&job) {
        None
    } else {
        Some(crate::roles::challenger::sliced_inputs(store, &t, &job)?)
    };
    // from its provider, else from the verifiers seated on it (PROTOCOL §8.12)
    let sources = crate::results::sources::ordered(
        &uri,
        chain
            .endpoints_of(&chain.seated(task, &t)?)
            .into_iter()
            .map(|e| crate::results::sources::result_url(&e, &t.result_root)),
    );
    let served = store
        .gather(&sources, &job, &t.result_root, &want, None)
        .map_err(|e| anyhow::anyhow!("fetching tiles of {task}: {e}"))?
        .tiles;
    let v = crate::verify::check_sampled(backend, &job, &want, &served, &t.result_root)?;
    let Some(p) = v.pointer else {
        bail!(
            "not disputing task {task}: {} ({}); a dispute of a right result loses its bond",
            if v.vote == compute_market_protocol::commit::VOTE_VALID {
                "every tile checked recomputes equal"
            } else {
                "what was served proves no element wrong"
            },
            v.reason
        );
    };
    let mut outcome = argue(
        chain,
        kp,
        "client",
        task,
        &Claim::ResultWrong(&p),
        data.as_ref(),
        mine,
        None,
        &mut || Ok(()),
    )?;
    // a game (PROTOCOL §8.10) waits for its defence and its defenders' moves: play it to its
    // end while the cluster moves on (a cluster whose slot stops for a minute is left to
    // `keeper run --watch`, which resumes it from chain state)
    let mut last = (chain.slot()?, std::time::Instant::now());
    if outcome == crate::roles::challenger::Outcome::Open {
        tracing::info!(task = %task, "the dispute is a game: playing it until the defence closes and every defender has moved (PROTOCOL §8.10)");
    }
    while outcome == crate::roles::challenger::Outcome::Open {
        std::thread::sleep(std::time::Duration::from_millis(400));
        let now = chain.slot()?;
        if now != last.0 {
            last = (now, std::time::Instant::now());
        } else if last.1.elapsed() > std::time::Duration::from_secs(60) {
            tracing::warn!(task = %task, "the cluster's slot has not moved for a minute: the dispute stays open; `keeper run --watch` carries it on");
            break;
        }
        tracing::debug!(task = %task, slot = now, "waiting for the defence and the defenders' moves");
        outcome = argue(
            chain,
            kp,
            "client",
            task,
            &Claim::ResultWrong(&p),
            data.as_ref(),
            true,
            None,
            &mut || Ok(()),
        )?;
    }
    let majority = chain.task(task)?.map_or(0, |t| t.tally().majority);
    Ok(DisputeReport {
        task: task.to_string(),
        checked: want,
        tile: p.tile,
        element: p.element,
        outcome: format!("{outcome:?}"),
        majority,
    })
}

/// Refuses, by name, a task whose verdict no dispute can reach: not Accepted and held, or a
/// job the program does not referee yet.
fn ensure_disputable(t: &Task, job: &JobSpec) -> Result<()> {
    if !compute_market_protocol::dispute::refereed(job, t.dispute_window) {
        use compute_market_protocol::dispute::{element_transactions, supported};
        if !supported(job) {
            bail!("{:?} jobs cannot be disputed yet: the program referees HashBatch, MatMulModP and Mlp (PROTOCOL §8.7)", job.kind);
        }
        match element_transactions(job) {
            None => bail!("the task's manifest names no slices of its inputs (posted with a version-1 manifest): the program cannot referee it (PROTOCOL §8.7)"),
            Some(n) if t.dispute_window > 0 => bail!("a dispute of this job takes about {n} transactions, more than half the market's window of {} slots: the program does not referee it there", t.dispute_window),
            Some(_) => {}
        }
    }
    if t.dispute_window == 0 {
        bail!("this task's market has no dispute window: its verdict was final when decided");
    }
    if !t.held {
        bail!(
            "the task's verdict is no longer held for disputes (status {:?})",
            t.status
        );
    }
    Ok(())
}

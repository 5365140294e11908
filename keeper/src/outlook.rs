//! What a client can expect of its market's providers: before it pays, whether any of them can
//! take a job (`keeper task post`); after, why an open task waits and how a closed one ended
//! (`keeper task status`).
//!
//! Each provider-role node of the market is judged by the rule its keeper claims by
//! ([`refusal`], with nothing held, and its free stake against the bond), with the numbers of
//! its card ([`crate::card`], served at the endpoint it announced) when it answers, else with
//! what it declared on chain: its memory, and its peak GFLOPS as a rate of `gflops · 10^9 / 2`
//! work units a second, an upper bound (so a node without a card is never called too slow
//! unless even its declared peak is). For an open task, a card that lists the task gives the
//! provider's own reason, which also covers what only it knows (its load, inputs that failed).

use anchor_lang::prelude::Pubkey;
use anyhow::Result;
use compute_market::{
    constants::ROLE_PROVIDER,
    state::{Market, Node, Task, TaskStatus},
};
use compute_market_protocol::job::{JobKind, JobSpec};
use serde::Serialize;

use crate::{
    card::{Card, Skip, SkipReason, MAX_CARD_BYTES},
    chain::{decode_events, Chain, ChainExt},
    results::{client::Client, FetchPolicy},
    roles::provider::{refusal, Capacity, ClaimPolicy, Holding, Throughput},
};

/// Most providers whose cards are read at once.
const CARD_READS: usize = 8;
/// Most cards read for one answer (the best-staked providers first): a market's other nodes
/// are judged on what they declared, so strangers registering many nodes cannot make a
/// client's post slow.
const MOST_CARDS: usize = 64;
/// All the cards of one answer are read within this time; a card not read by then counts as
/// absent (the node is judged on what it declared).
const CARDS_TIME: std::time::Duration = std::time::Duration::from_secs(10);
/// Most providers named in [`Outlook::summary`].
const SUMMARY_LINES: usize = 8;

/// A provider of the market, with its card or why it has none.
pub struct Known {
    /// The node's address.
    pub key: Pubkey,
    /// The node.
    pub node: Node,
    /// Its card, or why it could not be read.
    pub card: Result<Card, String>,
}

/// One provider's view of a job.
#[derive(Clone, Debug, Serialize)]
pub struct ProviderOutlook {
    /// The node's address.
    pub node: String,
    /// Where its numbers come from: `card`, or `declared` (with why there is no card).
    pub source: String,
    /// Whether it would take the job.
    pub takes: bool,
    /// Why not (`window`, `memory`, …).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<SkipReason>,
    /// Its words.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
    /// Since which slot it has skipped the task (an open task, from its card).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since_slot: Option<u64>,
}

/// Every provider's view of a job.
#[derive(Clone, Debug, Serialize)]
pub struct Outlook {
    /// Provider-role nodes in the market.
    pub providers: usize,
    /// Those that would take it.
    pub able: usize,
    /// Each one.
    pub each: Vec<ProviderOutlook>,
}

impl Outlook {
    /// One line naming why no provider takes the job, for an error or a warning.
    pub fn summary(&self) -> String {
        if self.providers == 0 {
            return "the market has no providers".into();
        }
        let refusing: Vec<&ProviderOutlook> = self.each.iter().filter(|p| !p.takes).collect();
        let mut reasons: Vec<String> = refusing
            .iter()
            .take(SUMMARY_LINES)
            .map(|p| {
                format!(
                    "{}: {} ({})",
                    p.node,
                    p.why.as_deref().unwrap_or("?"),
                    p.source
                )
            })
            .collect();
        if refusing.len() > SUMMARY_LINES {
            reasons.push(format!("and {} more", refusing.len() - SUMMARY_LINES));
        }
        format!(
            "{} of {} providers would take it; {}",
            self.able,
            self.providers,
            reasons.join("; ")
        )
    }
}

/// The market's provider-role nodes, those whose stake could bond `bond` with their card read
/// from its endpoint (the `MOST_CARDS` (64) best-staked, all within `CARDS_TIME` (10 s), each bounded in
/// bytes and time by `policy` and [`MAX_CARD_BYTES`], and checked); the others are judged on
/// what they declared.
pub fn providers(
    chain: &dyn Chain,
    market: &Pubkey,
    bond: u64,
    policy: &FetchPolicy,
) -> Result<Vec<Known>> {
    let (mut nodes, short): (Vec<(Pubkey, Node)>, Vec<(Pubkey, Node)>) = chain
        .nodes_of(market)?
        .into_iter()
        .filter(|(_, n)| n.has(ROLE_PROVIDER))
        .partition(|(_, n)| n.stake() >= bond);
    nodes.sort_by_key(|(k, n)| (std::cmp::Reverse(n.stake()), *k));
    let mut policy = policy.clone();
    policy.timeout = policy.timeout.min(std::time::Duration::from_secs(5));
    policy.connect_timeout = policy
        .connect_timeout
        .min(std::time::Duration::from_secs(2));
    let client = Client::new(&policy)?;
    let deadline = std::time::Instant::now() + CARDS_TIME;
    let rest = nodes.split_off(nodes.len().min(MOST_CARDS));
    let mut known = crate::roles::parallel(CARD_READS, nodes, |(key, node)| {
        let card = if std::time::Instant::now() < deadline {
            card_of(&client, &key, &node, deadline)
        } else {
            Err("not read in time".into())
        };
        Known { key, node, card }
    });
    known.extend(rest.into_iter().map(|(key, node)| Known {
        key,
        node,
        card: Err(format!(
            "not read: only the {MOST_CARDS} best-staked cards are"
        )),
    }));
    // a node whose stake cannot bond the task is refused on chain alone
    known.extend(short.into_iter().map(|(key, node)| Known {
        key,
        node,
        card: Err("not read: its stake cannot bond the task".into()),
    }));
    Ok(known)
}

/// The card URL of an announced endpoint: an http(s) base with a host and nothing a stranger
/// could use to point clients elsewhere (no user info, query or fragment).
fn card_url(endpoint: &str) -> Result<reqwest::Url, String> {
    let base = reqwest::Url::parse(endpoint).map_err(|e| format!("its endpoint: {e}"))?;
    let plain = matches!(base.scheme(), "http" | "https")
        && base.host_str().is_some()
        && base.username().is_empty()
        && base.password().is_none()
        && base.query().is_none()
        && base.fragment().is_none();
    if !plain {
        return Err("its endpoint is not a plain http(s) base URL".into());
    }
    let path = format!("{}/provider", base.path().trim_end_matches('/'));
    let mut url = base;
    url.set_path(&path);
    Ok(url)
}

/// `node`'s card, read from the endpoint it announced, by `deadline`.
fn card_of(
    client: &Client,
    key: &Pubkey,
    node: &Node,
    deadline: std::time::Instant,
) -> Result<Card, String> {
    let endpoint = std::str::from_utf8(node.endpoint()).map_err(|_| "its endpoint is not UTF-8")?;
    if endpoint.is_empty() {
        return Err("it announced no endpoint".into());
    }
    let url = card_url(endpoint)?;
    let body = client
        .fetch_small(url.as_str(), MAX_CARD_BYTES, deadline)
        .map_err(|e| format!("{url}: {e}"))?;
    let card: Card =
        serde_json::from_slice(&body).map_err(|e| format!("{url} is not a card: {e}"))?;
    card.check().map_err(|e| format!("{url}: {e}"))?;
    if card.node != key.to_string() {
        return Err(format!("{url} serves the card of another node"));
    }
    Ok(card)
}

/// The kinds a card names its rates by.
const KINDS: [JobKind; 4] = [
    JobKind::MatMulModP,
    JobKind::HashBatch,
    JobKind::Mlp,
    JobKind::Encoder,
];

/// Judges `t` (a posted task, or the one `task post` would post) by `p`'s rule and numbers.
fn judge(p: &Known, t: &Task, job: &JobSpec) -> ProviderOutlook {
    let (throughput, memory, disk, policy, source) = match &p.card {
        Ok(c) => {
            let tp = Throughput::default();
            for k in KINDS {
                if let Some(r) = c.rates.get(&format!("{k:?}")) {
                    tp.set(k, *r);
                }
            }
            let policy = ClaimPolicy {
                min_reward_per_gwork: c.policy.min_reward_per_gwork,
                min_quorum: c.policy.min_quorum,
                min_samples: c.policy.min_samples,
                slot_seconds: c.policy.slot_seconds,
                margin: c.policy.margin,
            };
            (tp, c.memory_bytes, c.disk_bytes, policy, "card".to_string())
        }
        Err(why) => {
            let tp = Throughput::default();
            let peak = f64::from(p.node.hardware.gflops) * 1e9 / 2.0;
            for k in KINDS {
                tp.set(k, peak);
            }
            let memory = match u64::from(p.node.hardware.memory_gb) << 30 {
                0 => u64::MAX,
                m => m,
            };
            let source = format!("declared (no card: {why})");
            (tp, memory, u64::MAX, ClaimPolicy::default(), source)
        }
    };
    let cap = Capacity {
        memory,
        throughput: &throughput,
        policy: &policy,
    };
    let skip = if t.provider_bond > p.node.stake() {
        Some(Skip::new(
            SkipReason::Stake,
            format!(
                "its bond of {} is more than this provider's stake of {}",
                t.provider_bond,
                p.node.stake()
            ),
        ))
    } else {
        let alone = Holding {
            disk,
            ..Holding::default()
        };
        refusal(t, job, &alone, &cap)
    };
    ProviderOutlook {
        node: p.key.to_string(),
        source,
        takes: skip.is_none(),
        reason: skip.as_ref().map(|s| s.reason),
        why: skip.map(|s| s.detail),
        since_slot: None,
    }
}

/// Whether each provider would take `t`'s job.
pub fn estimate(known: &[Known], t: &Task, job: &JobSpec) -> Outlook {
    let each: Vec<ProviderOutlook> = known.iter().map(|p| judge(p, t, job)).collect();
    Outlook {
        providers: each.len(),
        able: each.iter().filter(|p| p.takes).count(),
        each,
    }
}

/// Why each provider leaves the open task `key` waiting: the reason its card lists for it,
/// else the rule's verdict on its numbers (a provider whose card lists no reason is shown as
/// taking it: it claims it when its turn comes).
pub fn waiting(known: &[Known], key: &Pubkey, t: &Task, job: &JobSpec) -> Outlook {
    let each: Vec<ProviderOutlook> = known
        .iter()
        .map(|p| {
            let listed = p
                .card
                .as_ref()
                .ok()
                .and_then(|c| c.skip_of(&key.to_string()));
            match listed {
                Some(s) => ProviderOutlook {
                    node: p.key.to_string(),
                    source: "card".into(),
                    takes: false,
                    reason: Some(s.skip.reason),
                    why: Some(s.skip.detail.clone()),
                    since_slot: Some(s.since_slot),
                },
                None => judge(p, t, job),
            }
        })
        .collect();
    Outlook {
        providers: each.len(),
        able: each.iter().filter(|p| p.takes).count(),
        each,
    }
}

/// The task `task post` would post for `reward`, `quorum`, `samples` (0: the market's) in
/// `market` under the program's parameters: what [`refusal`] reads of it.
pub fn would_post(
    cfg: &compute_market::state::Config,
    market: &Market,
    reward: u64,
    quorum: u8,
    samples: u16,
    job: &JobSpec,
) -> Task {
    use anchor_lang::{AccountDeserialize, Discriminator, Space};
    let mut bytes = Task::DISCRIMINATOR.to_vec();
    bytes.resize(8 + Task::INIT_SPACE, 0);
    let mut t = Task::try_deserialize(&mut bytes.as_slice()).expect("a zeroed task decodes");
    t.status = TaskStatus::Open;
    t.job = job.encode();
    t.reward = reward;
    t.provider_bond = (u128::from(reward) * u128::from(cfg.params.provider_bond_bps) / 10_000)
        .try_into()
        .unwrap_or(u64::MAX);
    t.quorum = if quorum == 0 { market.quorum } else { quorum };
    t.samples = if samples == 0 {
        market.samples
    } else {
        samples
    };
    t.windows = market.windows;
    t
}

/// A closed task, as its transactions tell it.
#[derive(Clone, Debug, Serialize)]
pub struct Closed {
    /// Its address.
    pub task: String,
    /// Always "closed".
    pub account: &'static str,
    /// How it ended (`Accepted`, `Rejected`, `Cancelled`, `Expired`, `Undecided`, …).
    pub status: String,
    /// What it means for the client.
    pub meaning: String,
    /// Its client.
    pub client: String,
    /// Client-chosen id.
    pub id: u64,
    /// Kind and dimensions.
    pub job: String,
    /// Reward.
    pub reward: u64,
    /// The provider that claimed it, if one did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// What its escrow returned to the client at close (`null` when the close's log was cut
    /// short and the outcome comes from the finalize).
    pub refunded: Option<u64>,
    /// Transactions read.
    pub transactions: usize,
}

/// What `status` means for the client who posted the task.
pub fn meaning(status: TaskStatus) -> &'static str {
    match status {
        TaskStatus::Accepted => {
            "verified: `keeper task result` downloads the result, checked against its root"
        }
        TaskStatus::Rejected => {
            "its result was found wrong: the provider's bond was slashed and the reward refunded"
        }
        TaskStatus::Cancelled => "cancelled by its client before any provider claimed it; refunded",
        TaskStatus::Expired => "no provider claimed it before its deadline; refunded",
        TaskStatus::Undecided => {
            "its verifiers did not reach a majority (too few seats taken or revealed); refunded"
        }
        _ => "",
    }
}

/// The outcome of the closed task `key` from its transactions' events (`logs`, oldest
/// first, each decoded on its own): its last post, and the claim and the close (or, when the
/// close's log was cut short, the conclusion or the finalize) that came after it — a task address is reused
/// when its client posts the same id again after a close. Errors name what is missing (the
/// node may not have indexed the close yet).
pub fn closed(key: &Pubkey, logs: &[Vec<String>]) -> Result<Closed> {
    use compute_market::events;
    let posted = logs.iter().enumerate().rev().find_map(|(i, l)| {
        decode_events::<events::TaskPosted>(l)
            .into_iter()
            .rev()
            .find(|e| e.task == *key)
            .map(|e| (i, e))
    });
    let Some((from, p)) = posted else {
        anyhow::bail!("no task at {key}, and no record of one in its transactions");
    };
    let after = &logs[from..];
    let close = after.iter().rev().find_map(|l| {
        decode_events::<events::TaskClosed>(l)
            .into_iter()
            .rev()
            .find(|e| e.task == *key)
    });
    let finalized = after.iter().rev().find_map(|l| {
        decode_events::<events::TaskFinalized>(l)
            .into_iter()
            .rev()
            .find(|e| e.task == *key)
            .map(|e| e.status)
    });
    // a verdict held for disputes moves its money at its conclusion, which may overturn it
    let concluded = after.iter().rev().find_map(|l| {
        decode_events::<events::TaskConcluded>(l)
            .into_iter()
            .rev()
            .find(|e| e.task == *key)
            .map(|e| e.status)
    });
    let status = close
        .as_ref()
        .map(|c| c.status)
        .or(concluded)
        .or(finalized)
        .ok_or_else(|| {
            anyhow::anyhow!("task {key} is gone but its close is not in its history yet")
        })?;
    let provider = after.iter().rev().find_map(|l| {
        decode_events::<events::TaskClaimed>(l)
            .into_iter()
            .rev()
            .find(|e| e.task == *key)
            .map(|e| e.provider.to_string())
    });
    Ok(Closed {
        task: key.to_string(),
        account: "closed",
        status: format!("{status:?}"),
        meaning: meaning(status).into(),
        client: p.client.to_string(),
        id: p.task_id,
        job: JobSpec::decode(&p.job)
            .map(|j| format!("{:?} {:?}", j.kind, j.dims))
            .unwrap_or_else(|e| format!("invalid: {e}")),
        reward: p.reward,
        provider,
        refunded: close.map(|c| c.refunded),
        transactions: logs.len(),
    })
}

#[cfg(test)]
mod tests {
    use anchor_lang::Event;
    use base64::Engine;
    use compute_market::events::{TaskClaimed, TaskClosed, TaskFinalized, TaskPosted};

    use super::*;

    /// One transaction's logs: the program invoked, emitting `events`.
    fn tx(events: &[Vec<u8>]) -> Vec<String> {
        let id = compute_market::ID.to_string();
        let mut l = vec![format!("Program {id} invoke [1]")];
        for e in events {
            l.push(format!(
                "Program data: {}",
                base64::engine::general_purpose::STANDARD.encode(e)
            ));
        }
        l.push(format!("Program {id} success"));
        l
    }

    fn posted(task: Pubkey, id: u64) -> Vec<u8> {
        TaskPosted {
            task,
            client: Pubkey::new_unique(),
            market: Pubkey::new_unique(),
            task_id: id,
            job: JobSpec::matmul(64, 64, 64, [1; 32]).encode(),
            reward: 7,
            quorum: 3,
            samples: 1,
            open_deadline: 9,
            region: 0,
        }
        .data()
    }

    fn finalized(task: Pubkey, status: TaskStatus) -> Vec<u8> {
        TaskFinalized {
            task,
            status,
            valid: 0,
            invalid: 0,
            unavailable: 0,
            majority: 0,
            provider_paid: 0,
            provider_slashed: 0,
            fee: 0,
            majority_share: 0,
            held_until: 0,
        }
        .data()
    }

    #[test]
    fn a_closed_tasks_outcome_is_read_after_its_last_post_and_from_the_finalize_if_need_be() {
        let task = Pubkey::new_unique();
        let provider = Pubkey::new_unique();
        let claimed = TaskClaimed {
            task,
            provider,
            bond: 1,
            submit_deadline: 5,
        }
        .data();
        let closed_as = |status| {
            TaskClosed {
                task,
                status,
                refunded: 7,
                leftover_to_treasury: 0,
            }
            .data()
        };
        // a first life Accepted, then the same address posted again and cancelled
        let logs = vec![
            tx(&[posted(task, 1)]),
            tx(&[claimed.clone()]),
            tx(&[
                finalized(task, TaskStatus::Accepted),
                closed_as(TaskStatus::Accepted),
            ]),
            tx(&[posted(task, 1)]),
            tx(&[closed_as(TaskStatus::Cancelled)]),
        ];
        let c = closed(&task, &logs).unwrap();
        assert_eq!(
            (c.status.as_str(), c.provider, c.refunded),
            ("Cancelled", None, Some(7))
        );
        // a close whose log was cut short: the finalize says how it ended
        let logs = vec![
            tx(&[posted(task, 2)]),
            tx(&[claimed]),
            tx(&[finalized(task, TaskStatus::Rejected)]),
        ];
        let c = closed(&task, &logs).unwrap();
        assert_eq!(
            (c.status.as_str(), c.provider, c.refunded),
            ("Rejected", Some(provider.to_string()), None)
        );
        // neither yet: said so (the caller reads the history again)
        let e = closed(&task, &logs[..2]).unwrap_err().to_string();
        assert!(e.contains("not in its history yet"), "{e}");
        let e = closed(&Pubkey::new_unique(), &logs)
            .unwrap_err()
            .to_string();
        assert!(e.contains("no record of one"), "{e}");
    }
}

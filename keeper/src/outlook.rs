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
        let reasons: Vec<String> = self
            .each
            .iter()
            .filter(|p| !p.takes)
            .map(|p| {
                format!(
                    "{}: {} ({})",
                    p.node,
                    p.why.as_deref().unwrap_or("?"),
                    p.source
                )
            })
            .collect();
        format!(
            "{} of {} providers would take it; {}",
            self.able,
            self.providers,
            reasons.join("; ")
        )
    }
}

/// The market's provider-role nodes, each with its card read from its endpoint (bounded in
/// bytes and time by `policy`, [`MAX_CARD_BYTES`], and checked).
pub fn providers(chain: &dyn Chain, market: &Pubkey, policy: &FetchPolicy) -> Result<Vec<Known>> {
    let nodes: Vec<(Pubkey, Node)> = chain
        .nodes_of(market)?
        .into_iter()
        .filter(|(_, n)| n.has(ROLE_PROVIDER))
        .collect();
    let mut policy = policy.clone();
    policy.timeout = policy.timeout.min(std::time::Duration::from_secs(5));
    policy.connect_timeout = policy
        .connect_timeout
        .min(std::time::Duration::from_secs(2));
    let client = Client::new(&policy)?;
    Ok(crate::roles::parallel(CARD_READS, nodes, |(key, node)| {
        let card = card_of(&client, &key, &node);
        Known { key, node, card }
    }))
}

/// `node`'s card, read from the endpoint it announced.
fn card_of(client: &Client, key: &Pubkey, node: &Node) -> Result<Card, String> {
    let endpoint = std::str::from_utf8(node.endpoint()).map_err(|_| "its endpoint is not UTF-8")?;
    if endpoint.is_empty() {
        return Err("it announced no endpoint".into());
    }
    let url = format!("{}/provider", endpoint.trim_end_matches('/'));
    let body = client
        .fetch_small(&url, MAX_CARD_BYTES)
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
    let skip = if t.provider_bond > p.node.free {
        Some(Skip::new(
            SkipReason::Stake,
            format!(
                "its bond of {} is more than this provider's free stake of {}",
                t.provider_bond, p.node.free
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
    /// What its escrow returned to the client at close.
    pub refunded: u64,
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
/// first): its post, its claim, its close. Errors name what is missing (the node may not
/// have indexed the close yet).
pub fn closed(key: &Pubkey, logs: &[Vec<String>]) -> Result<Closed> {
    use compute_market::events;
    let all: Vec<String> = logs.concat();
    let posted = decode_events::<events::TaskPosted>(&all);
    let Some(p) = posted.iter().rev().find(|e| e.task == *key) else {
        anyhow::bail!("no task at {key}, and no record of one in its transactions");
    };
    let close = decode_events::<events::TaskClosed>(&all)
        .into_iter()
        .rev()
        .find(|e| e.task == *key)
        .ok_or_else(|| {
            anyhow::anyhow!("task {key} is gone but its close is not in its history yet")
        })?;
    let provider = decode_events::<events::TaskClaimed>(&all)
        .into_iter()
        .rev()
        .find(|e| e.task == *key)
        .map(|e| e.provider.to_string());
    Ok(Closed {
        task: key.to_string(),
        account: "closed",
        status: format!("{:?}", close.status),
        meaning: meaning(close.status).into(),
        client: p.client.to_string(),
        id: p.task_id,
        job: JobSpec::decode(&p.job)
            .map(|j| format!("{:?} {:?}", j.kind, j.dims))
            .unwrap_or_else(|e| format!("invalid: {e}")),
        reward: p.reward,
        provider,
        refunded: close.refunded,
        transactions: logs.len(),
    })
}

//! A provider's card (PROTOCOL §2, node endpoint): what the node can take — the throughput it
//! measured per job kind, the memory it computes in, its claim policy — and why it skips the
//! open tasks it does not claim. Its keeper serves it at `GET <endpoint>/provider`; a client
//! reads the cards of its market's providers to know, before it pays, whether any can finish
//! its job, and, after, why its task waits (`keeper task post`, `keeper task status`).
//!
//! A card is a stranger's word: a client reads at most [`MAX_CARD_BYTES`] of it within a
//! bounded time and [`Card::check`]s it before use. It moves no funds and the program never
//! reads it, so a lying card can only mislead the estimate of the node that wrote it.

use serde::{Deserialize, Serialize};

/// The most skipped tasks a card lists (the newest).
pub const MAX_SKIPS: usize = 256;
/// The longest reason a card gives, bytes.
pub const MAX_REASON: usize = 256;
/// The most bytes a client reads of a card.
pub const MAX_CARD_BYTES: u64 = 128 << 10;

/// Why a provider does not claim a task: the `reason` label of
/// `keeper_claims_skipped_total` and of a card's skips.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SkipReason {
    /// Expected to take more than its share of the submit window.
    Window,
    /// Needs more memory than the provider computes in.
    Memory,
    /// Its result does not fit the provider's store.
    Disk,
    /// Its quorum is below the provider's least.
    Quorum,
    /// Its samples are below the provider's least.
    Samples,
    /// It pays below the provider's floor.
    Reward,
    /// Its bond is more than the provider's free stake.
    Stake,
    /// Its inputs could not be fetched or checked.
    Inputs,
    /// The provider holds as many tasks as it takes at once, or this one with them would not
    /// fit.
    Busy,
    /// Its job spec does not decode.
    Job,
}

impl SkipReason {
    /// The label (`window`, `memory`, …).
    pub fn label(self) -> &'static str {
        match self {
            SkipReason::Window => "window",
            SkipReason::Memory => "memory",
            SkipReason::Disk => "disk",
            SkipReason::Quorum => "quorum",
            SkipReason::Samples => "samples",
            SkipReason::Reward => "reward",
            SkipReason::Stake => "stake",
            SkipReason::Inputs => "inputs",
            SkipReason::Busy => "busy",
            SkipReason::Job => "job",
        }
    }
}

/// One reason with its words.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Skip {
    /// The kind of reason.
    pub reason: SkipReason,
    /// What the provider saw ("expected 3.1 s … exceeds 50% of its 4 s submit window").
    pub detail: String,
}

impl Skip {
    /// A reason with its words, cut to [`MAX_REASON`] bytes.
    pub fn new(reason: SkipReason, detail: impl Into<String>) -> Self {
        // the words may quote what a stranger chose (an input URI): no control characters
        let mut detail: String = detail
            .into()
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        if detail.len() > MAX_REASON {
            let mut cut = MAX_REASON;
            while !detail.is_char_boundary(cut) {
                cut -= 1;
            }
            detail.truncate(cut);
        }
        Skip { reason, detail }
    }
}

/// A task a provider skipped, as its card lists it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Skipped {
    /// The task's address.
    pub task: String,
    /// Why.
    #[serde(flatten)]
    pub skip: Skip,
    /// Slot it was first skipped for this reason.
    pub since_slot: u64,
}

/// Keeps the newest skips (`skipped` newest first) that fit a card a client reads whole: at
/// most [`MAX_SKIPS`], and at most half of [`MAX_CARD_BYTES`] of JSON between them (a
/// detail's escapes can double it), so an honest card is never refused for its size.
pub fn bound_skips(skipped: &mut Vec<Skipped>) {
    skipped.truncate(MAX_SKIPS);
    let mut bytes = 0u64;
    let fits = skipped
        .iter()
        .position(|s| {
            bytes += serde_json::to_vec(s).map_or(u64::MAX / 2, |v| v.len() as u64 + 1);
            bytes > MAX_CARD_BYTES / 2
        })
        .unwrap_or(skipped.len());
    skipped.truncate(fits);
}

/// A provider's claim policy, as its card states it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CardPolicy {
    /// Least reward per 10^9 work units.
    pub min_reward_per_gwork: u64,
    /// Least quorum.
    pub min_quorum: u8,
    /// Least samples.
    pub min_samples: u16,
    /// Share of the submit window a job may be expected to take.
    pub margin: f64,
    /// Seconds per slot it plans with.
    pub slot_seconds: f64,
}

/// A provider's card.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Card {
    /// The node's address.
    pub node: String,
    /// Work units per second it measured, by job kind (`MatMulModP`, `HashBatch`, `Mlp`,
    /// `Encoder`).
    pub rates: std::collections::BTreeMap<String, f64>,
    /// Bytes it computes in.
    pub memory_bytes: u64,
    /// Bytes its result store may take in all (its budget: a result larger never fits).
    pub disk_bytes: u64,
    /// Its policy.
    pub policy: CardPolicy,
    /// Tasks it holds now.
    pub load: usize,
    /// The most tasks it holds at once.
    pub max_active: usize,
    /// Open tasks it skips, newest first (at most [`MAX_SKIPS`]).
    pub skipped: Vec<Skipped>,
}

impl Card {
    /// Refuses a card a client must not use: too many skips, reasons too long, rates or a
    /// policy that are not finite positive numbers.
    pub fn check(&self) -> Result<(), String> {
        if self.skipped.len() > MAX_SKIPS {
            return Err(format!(
                "{} skips, more than {MAX_SKIPS}",
                self.skipped.len()
            ));
        }
        if let Some(s) = self
            .skipped
            .iter()
            .find(|s| s.skip.detail.len() > MAX_REASON || s.task.len() > 44)
        {
            let task: String = s.task.chars().take(44).collect();
            return Err(format!("a skip of task {task:?} is too long"));
        }
        if self.rates.len() > 16 || self.rates.keys().any(|k| k.len() > 32) {
            return Err("too many or too long rate names".into());
        }
        if let Some((k, r)) = self
            .rates
            .iter()
            .find(|(_, r)| !(r.is_finite() && **r >= 0.0))
        {
            return Err(format!(
                "rate {k} = {r} is not a finite non-negative number"
            ));
        }
        let p = &self.policy;
        let in_range =
            (p.margin > 0.0 && p.margin <= 1.0) && (p.slot_seconds > 0.0 && p.slot_seconds < 60.0);
        if !in_range {
            return Err(format!(
                "policy margin {} or slot seconds {} out of range",
                p.margin, p.slot_seconds
            ));
        }
        Ok(())
    }

    /// The skip it lists for `task`.
    pub fn skip_of(&self, task: &str) -> Option<&Skipped> {
        self.skipped.iter().find(|s| s.task == task)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn card() -> Card {
        Card {
            node: "n".into(),
            rates: [("Encoder".to_string(), 1e9)].into_iter().collect(),
            memory_bytes: 1 << 30,
            disk_bytes: 1 << 30,
            policy: CardPolicy {
                min_reward_per_gwork: 0,
                min_quorum: 3,
                min_samples: 1,
                margin: 0.5,
                slot_seconds: 0.4,
            },
            load: 0,
            max_active: 4,
            skipped: vec![],
        }
    }

    #[test]
    fn a_card_with_long_reasons_or_odd_numbers_is_refused() {
        assert_eq!(card().check(), Ok(()));
        let mut c = card();
        c.skipped = vec![
            Skipped {
                task: "t".into(),
                skip: Skip::new(SkipReason::Window, "x"),
                since_slot: 1,
            };
            MAX_SKIPS + 1
        ];
        assert!(c.check().unwrap_err().contains("skips"));
        let mut c = card();
        c.skipped.push(Skipped {
            task: "t".into(),
            skip: Skip {
                reason: SkipReason::Window,
                detail: "é".repeat(MAX_REASON),
            },
            since_slot: 1,
        });
        assert!(c.check().unwrap_err().contains("too long"));
        let mut c = card();
        c.rates.insert("Mlp".into(), f64::NAN);
        assert!(c.check().unwrap_err().contains("Mlp"));
        let mut c = card();
        c.policy.margin = 0.0;
        assert!(c.check().unwrap_err().contains("margin"));
        // a stranger's words lose their control characters; skips that would make the card
        // too large to read are dropped, oldest first
        let s = Skip::new(SkipReason::Inputs, "a\x1b[31mred\n");
        assert_eq!(s.detail, "a [31mred ");
        let quoted = Skipped {
            task: "t".repeat(44),
            skip: Skip::new(SkipReason::Inputs, "\"".repeat(MAX_REASON)),
            since_slot: 1,
        };
        let mut many = vec![quoted; MAX_SKIPS];
        bound_skips(&mut many);
        let mut c = card();
        c.skipped = many;
        let len = serde_json::to_vec(&c).unwrap().len() as u64;
        assert!(len <= MAX_CARD_BYTES && !c.skipped.is_empty(), "{len}");
        assert!(c.skipped.len() < MAX_SKIPS);
        // a reason is cut at a character boundary, within the bound
        let s = Skip::new(SkipReason::Inputs, "é".repeat(MAX_REASON));
        assert!(s.detail.len() <= MAX_REASON && s.detail.len() >= MAX_REASON - 1);
    }
}

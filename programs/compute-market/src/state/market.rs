use anchor_lang::prelude::*;

use crate::{constants::*, errors::MarketError};

/// Phase windows of a task, slots.
#[derive(AnchorSerialize, AnchorDeserialize, Clone, Copy, PartialEq, Eq, Debug, InitSpace)]
pub struct Windows {
    /// From claim to the submit deadline.
    pub submit: u32,
    /// From the result (or escalation) to the join deadline.
    pub join: u32,
    /// From the join deadline to the commit deadline.
    pub commit: u32,
    /// From the commit deadline to the reveal deadline.
    pub reveal: u32,
}

impl Windows {
    /// PROTOCOL §7 defaults.
    pub const DEFAULT: Windows = Windows {
        submit: 300,
        join: 100,
        commit: 100,
        reveal: 100,
    };

    /// Checks the bounds.
    pub fn validate(&self) -> Result<()> {
        require!(
            (MIN_SUBMIT_WINDOW..=MAX_SUBMIT_WINDOW).contains(&self.submit),
            MarketError::WindowOutOfBounds
        );
        for w in [self.join, self.commit, self.reveal] {
            require!(
                (MIN_PHASE_WINDOW..=MAX_PHASE_WINDOW).contains(&w),
                MarketError::WindowOutOfBounds
            );
        }
        Ok(())
    }

    /// Slots of one verification round (join + commit + reveal).
    pub fn round(&self) -> u64 {
        self.join as u64 + self.commit as u64 + self.reveal as u64
    }

    /// Longest time a bond can be at stake: submit plus two rounds (one escalation).
    pub fn longest_task(&self) -> u64 {
        self.submit as u64 + 2 * self.round()
    }
}

/// Validates a quorum V.
pub fn validate_quorum(q: u8) -> Result<()> {
    require!(
        (MIN_QUORUM..=MAX_QUORUM).contains(&q) && q % 2 == 1,
        MarketError::QuorumInvalid
    );
    Ok(())
}

/// Validates a sample count k.
pub fn validate_samples(k: u16) -> Result<()> {
    require!(
        (MIN_SAMPLES..=MAX_SAMPLES).contains(&k),
        MarketError::SamplesOutOfBounds
    );
    Ok(())
}

/// What a market is created with.
#[derive(AnchorSerialize, AnchorDeserialize, Clone, PartialEq, Eq, Debug)]
pub struct MarketArgs {
    /// Market id (PDA seed).
    pub id: u16,
    /// Human-readable name (≤ 32 bytes).
    pub name: String,
    /// Providers must declare at least this much compute, GFLOPS.
    pub min_gflops: u32,
    /// Providers must declare at least this much device memory, GB.
    pub min_memory_gb: u32,
    /// Default quorum V.
    pub quorum: u8,
    /// Default samples k per verifier.
    pub samples: u16,
    /// Phase windows.
    pub windows: Windows,
    /// Slots an unclaimed task stays open.
    pub task_ttl: u32,
}

/// A sub-network for one GPU class.
#[account]
#[derive(InitSpace)]
pub struct Market {
    /// Layout version ([`crate::constants::ACCOUNT_VERSION`]).
    pub version: u8,
    /// Market id.
    pub id: u16,
    /// Name, zero-padded.
    pub name: [u8; MAX_NAME_LEN],
    /// Minimum declared GFLOPS of a provider.
    pub min_gflops: u32,
    /// Minimum declared memory of a provider, GB.
    pub min_memory_gb: u32,
    /// Default quorum V.
    pub quorum: u8,
    /// Default samples k.
    pub samples: u16,
    /// Phase windows.
    pub windows: Windows,
    /// Slots an unclaimed task stays open.
    pub task_ttl: u32,
    /// Registered nodes with the provider role.
    pub providers: u32,
    /// Registered nodes with the verifier role.
    pub verifiers: u32,
    /// Stake (free + bonded) of verifier nodes: the sortition denominator, copied into each
    /// task at submit (and escalation). Written by stake, unstake, close_node and sync_stake,
    /// never on a task's path: a slash is booked in the node's `stake_debt` and subtracted
    /// here by the node's next stake instruction or by anyone's `sync_stake`.
    pub verifier_stake: u64,
    /// Slot of the latest stake into a verifier node: a round starting in that very slot
    /// leaves what was added in it out of its denominator (it has no weight in that round).
    pub stake_slot: u64,
    /// Verifier stake added in `stake_slot`.
    pub stake_in_slot: u64,
    /// Canonical bump.
    pub bump: u8,
    /// Zeroed space for fields of later versions.
    pub reserved: [u8; 64],
}

impl Market {
    /// Books `amount` of verifier stake added at `slot`.
    pub fn add_verifier_stake(&mut self, amount: u64, slot: u64) -> Result<()> {
        self.verifier_stake = crate::math::add(self.verifier_stake, amount)?;
        if self.stake_slot == slot {
            self.stake_in_slot = crate::math::add(self.stake_in_slot, amount)?;
        } else {
            self.stake_slot = slot;
            self.stake_in_slot = amount;
        }
        Ok(())
    }

    /// The sortition denominator of a round whose snapshot is `slot`: verifier stake in place
    /// before that slot (stake added in the slot itself, say in the submitting transaction,
    /// would shrink everyone's chance while counting for nobody).
    pub fn snapshot_stake(&self, slot: u64) -> u64 {
        if self.stake_slot == slot {
            self.verifier_stake.saturating_sub(self.stake_in_slot)
        } else {
            self.verifier_stake
        }
    }
}

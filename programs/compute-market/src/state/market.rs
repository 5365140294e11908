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
        // a join window past the SlotHashes horizon would let a late draw re-roll the seed
        require!(self.join <= MAX_JOIN_WINDOW, MarketError::JoinWindowTooLong);
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

    /// Longest time a bond can be at stake: submit plus two rounds (one escalation), plus
    /// twice the dispute window `dispute` (a dispute opened in its last slot has one more window
    /// to end, PROTOCOL §8.1).
    pub fn longest_task(&self, dispute: u32) -> u64 {
        self.submit as u64 + 2 * self.round() + 2 * dispute as u64
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

/// Validates a market's minimum quorum and its default quorum against it.
pub fn validate_market_quorum(min_quorum: u8, quorum: u8) -> Result<()> {
    validate_quorum(min_quorum)?;
    validate_quorum(quorum)?;
    require!(quorum >= min_quorum, MarketError::QuorumBelowMarketMinimum);
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
    /// Smallest quorum a task's override may ask for (0: [`DEFAULT_MIN_QUORUM`]); `quorum` must
    /// be at least this.
    pub min_quorum: u8,
    /// Slots a decided round stays open to disputes (PROTOCOL §8.1; 0 ..=
    /// [`MAX_DISPUTE_WINDOW`]); 0: no disputes, the verdict settles at once.
    pub dispute_window: u32,
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
    /// Stake (free + bonded + unsettled debt) of verifier nodes: the sortition denominator,
    /// copied into each task at submit (and escalation) as it stood before that slot. Written
    /// by stake, unstake, close_node and sync_stake, never on a task's path: a slash is booked
    /// in the node's `stake_debt` and subtracted here by the node's next stake instruction or
    /// by anyone's `sync_stake`.
    pub verifier_stake: u64,
    /// Slot of the latest change of `verifier_stake`.
    pub stake_slot: u64,
    /// `verifier_stake` as it stood before the first change in `stake_slot`: the denominator
    /// of a round starting in that slot, so nothing done in the round's own slot (stake added,
    /// removed, or both) moves it (PROTOCOL §3.1).
    pub slot_start_stake: u64,
    /// Canonical bump.
    pub bump: u8,
    /// Smallest quorum a task may ask for; 0 in markets created before it existed, read as
    /// [`MIN_QUORUM`] ([`Market::min_quorum`]).
    pub min_quorum: u8,
    /// Slots a decided round of its tasks stays open to disputes (PROTOCOL §8.1); 0 in
    /// markets created before disputes existed: no window.
    pub dispute_window: u32,
    /// Zeroed space for fields of later versions.
    pub reserved: [u8; 59],
}

impl Market {
    /// Smallest quorum a task of this market may ask for.
    pub fn min_quorum(&self) -> u8 {
        self.min_quorum.max(MIN_QUORUM)
    }

    /// Records, before the first change of `verifier_stake` in `slot`, what it stood at.
    fn touch(&mut self, slot: u64) {
        if self.stake_slot != slot {
            self.stake_slot = slot;
            self.slot_start_stake = self.verifier_stake;
        }
    }

    /// Books `amount` of verifier stake added at `slot`.
    pub fn add_verifier_stake(&mut self, amount: u64, slot: u64) -> Result<()> {
        self.touch(slot);
        self.verifier_stake = crate::math::add(self.verifier_stake, amount)?;
        Ok(())
    }

    /// Subtracts `node`'s stake debt from `verifier_stake` at `slot` (every decrease of the
    /// sortition total goes through here); returns what was subtracted.
    pub fn settle_debt(&mut self, node: &mut crate::state::Node, slot: u64) -> u64 {
        if node.stake_debt == 0 {
            return 0;
        }
        self.touch(slot);
        node.settle_debt(&mut self.verifier_stake)
    }

    /// The sortition denominator of a round whose snapshot is `slot`: verifier stake as it
    /// stood before that slot. Stake added in the slot itself (say, in the submitting
    /// transaction) would dilute everyone while counting for nobody; stake removed in it would
    /// shrink the denominator below the weights that still count (their stake was in place
    /// before the slot). Neither moves it.
    pub fn snapshot_stake(&self, slot: u64) -> u64 {
        if self.stake_slot == slot {
            self.slot_start_stake
        } else {
            self.verifier_stake
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{Hardware, Node};

    fn market() -> Market {
        Market {
            version: 1,
            id: 1,
            name: [0; MAX_NAME_LEN],
            min_gflops: 0,
            min_memory_gb: 0,
            quorum: 3,
            samples: 16,
            windows: Windows::DEFAULT,
            task_ttl: 100,
            providers: 0,
            verifiers: 0,
            verifier_stake: 0,
            stake_slot: 0,
            slot_start_stake: 0,
            bump: 0,
            min_quorum: 0,
            dispute_window: 0,
            reserved: [0; 59],
        }
    }

    fn verifier() -> Node {
        Node {
            version: 1,
            authority: Pubkey::default(),
            market: Pubkey::default(),
            roles: ROLE_VERIFIER,
            free: 0,
            bonded: 0,
            pending_unstake: 0,
            unlock_slot: 0,
            earned: 0,
            fees_due: 0,
            activating: 0,
            activating_slot: 0,
            settled_slot: 0,
            stake_debt: 0,
            hardware: Hardware::default(),
            tasks_completed: 0,
            verifications: 0,
            times_slashed: 0,
            registered_slot: 0,
            bump: 0,
            vault_bump: 0,
            endpoint: [0; MAX_ENDPOINT_LEN],
            endpoint_len: 0,
            reserved: [0; 7],
        }
    }

    /// The same-slot shrink (issue 24): stake added and removed in the submitting slot must
    /// leave the denominator where it stood before the slot.
    #[test]
    fn stake_added_and_removed_in_the_snapshot_slot_does_not_move_the_denominator() {
        let mut m = market();
        let (mut old, mut z) = (verifier(), verifier());
        old.add_stake(1_000_000, 5).unwrap();
        m.add_verifier_stake(1_000_000, 5).unwrap();
        m.settle_debt(&mut old, 5);
        // slot 10: Z stakes X and unstakes it again, then the round starts
        z.add_stake(400_000, 10).unwrap();
        m.add_verifier_stake(400_000, 10).unwrap();
        z.unstake(400_000, 99).unwrap();
        m.settle_debt(&mut z, 10);
        assert_eq!(m.verifier_stake, 1_000_000);
        assert_eq!(m.snapshot_stake(10), 1_000_000);
        // unstaking older stake in the slot does not shrink it either
        old.unstake(300_000, 99).unwrap();
        m.settle_debt(&mut old, 10);
        assert_eq!(m.snapshot_stake(10), 1_000_000);
        // the next slot sees what is left
        assert_eq!(m.snapshot_stake(11), 700_000);
    }
}

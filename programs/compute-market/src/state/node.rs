use anchor_lang::prelude::*;

use crate::{constants::*, errors::MarketError, math};

/// Hardware a node declares at registration.
#[derive(
    AnchorSerialize, AnchorDeserialize, Clone, Copy, PartialEq, Eq, Debug, Default, InitSpace,
)]
pub struct Hardware {
    /// Peak compute, GFLOPS.
    pub gflops: u32,
    /// Device memory, GB.
    pub memory_gb: u32,
    /// Memory bandwidth, GB/s.
    pub bandwidth_gbps: u32,
    /// Region code (keepers prefer the closest).
    pub region: u16,
}

/// A provider and/or verifier, one per authority. Its tokens sit in its own vault
/// (`[SEED_VAULT, node]`), whose balance always equals
/// `free + bonded + pending_unstake + earned + fees_due`.
#[account]
#[derive(InitSpace)]
pub struct Node {
    /// Layout version ([`crate::constants::ACCOUNT_VERSION`]).
    pub version: u8,
    /// The wallet that controls the node.
    pub authority: Pubkey,
    /// The market the node serves.
    pub market: Pubkey,
    /// Role bits ([`ROLE_PROVIDER`], [`ROLE_VERIFIER`]).
    pub roles: u8,
    /// Stake that can be bonded or unstaked.
    pub free: u64,
    /// Stake bonded to tasks and votes; never withdrawable.
    pub bonded: u64,
    /// Stake waiting for the cooldown.
    pub pending_unstake: u64,
    /// Slot from which `pending_unstake` can be withdrawn.
    pub unlock_slot: u64,
    /// Rewards, claimable at any time.
    pub earned: u64,
    /// Protocol fees and dust accrued through this node's tasks, swept to the treasury by anyone.
    pub fees_due: u64,
    /// Part of `free + bonded` added most recently, at `activating_slot` (PROTOCOL §3, the
    /// stake snapshot): it counts for a task only if `activating_slot` is before the task's
    /// snapshot slot.
    pub activating: u64,
    /// Slot of the stake in `activating`.
    pub activating_slot: u64,
    /// Every other part of `free + bonded` was in place at this slot.
    pub settled_slot: u64,
    /// Slashed stake not yet subtracted from the market's `verifier_stake` (slashes happen on
    /// a task's path, where the market is never written; `sync_stake` settles it).
    pub stake_debt: u64,
    /// Declared hardware.
    pub hardware: Hardware,
    /// Tasks completed and accepted.
    pub tasks_completed: u32,
    /// Votes revealed.
    pub verifications: u32,
    /// Times slashed.
    pub times_slashed: u32,
    /// Slot of registration.
    pub registered_slot: u64,
    /// Canonical bump of the node PDA.
    pub bump: u8,
    /// Canonical bump of the vault PDA.
    pub vault_bump: u8,
    /// The keeper's public base URL ([`MAX_ENDPOINT_LEN`] bytes, `endpoint_len` used; taken
    /// from the reserved bytes: 0 = none announced). Its `/provider` card says what the node
    /// takes and why it skips the tasks it skips (PROTOCOL §2).
    pub endpoint: [u8; MAX_ENDPOINT_LEN],
    /// Bytes of `endpoint` in use.
    pub endpoint_len: u8,
    /// Zeroed space for fields of later versions.
    pub reserved: [u8; 7],
}

impl Node {
    /// Byte offset of `market` in the account data (after the discriminator, the version and
    /// the authority): clients read one market's nodes with a `memcmp` here.
    pub const MARKET_OFFSET: usize = 8 + 1 + 32;

    /// The announced endpoint (empty: none).
    pub fn endpoint(&self) -> &[u8] {
        &self.endpoint[..usize::from(self.endpoint_len).min(MAX_ENDPOINT_LEN)]
    }

    /// Sets the endpoint (checked by the caller to fit).
    pub fn set_endpoint(&mut self, e: &[u8]) {
        let n = e.len().min(MAX_ENDPOINT_LEN);
        self.endpoint = [0; MAX_ENDPOINT_LEN];
        self.endpoint[..n].copy_from_slice(&e[..n]);
        self.endpoint_len = n as u8;
    }

    /// Whether the node has `role`.
    pub fn has(&self, role: u8) -> bool {
        self.roles & role != 0
    }

    /// Stake at risk: free + bonded.
    pub fn stake(&self) -> u64 {
        self.free.saturating_add(self.bonded)
    }

    /// The node's weight in a sortition whose snapshot is `snapshot_slot`: only stake in
    /// place before that slot counts, and never more than the node holds now (PROTOCOL §3).
    /// Conservative: a node that staked twice since the snapshot may count for less.
    pub fn weight_at(&self, snapshot_slot: u64) -> u64 {
        let st = self.stake();
        let recent = self.activating.min(st);
        let settled = st - recent;
        let mut w = 0u64;
        if self.settled_slot < snapshot_slot {
            w = settled;
        }
        if self.activating_slot < snapshot_slot {
            w = w.saturating_add(recent);
        }
        w
    }

    /// Books `amount` of new stake at `slot`: the previous activating part settles (at its
    /// own slot) unless it was added in this same slot.
    pub fn add_stake(&mut self, amount: u64, slot: u64) -> Result<()> {
        self.free = math::add(self.free, amount)?;
        if self.activating > 0 && self.activating_slot < slot {
            self.settled_slot = self.settled_slot.max(self.activating_slot);
            self.activating = 0;
        }
        self.activating = math::add(self.activating, amount)?;
        self.activating_slot = slot;
        Ok(())
    }

    /// Stake leaves `free + bonded` (unstake, slash): taken from the activating part first.
    fn stake_left(&mut self, amount: u64) {
        self.activating = self.activating.saturating_sub(amount);
        if self.has(ROLE_VERIFIER) && amount > 0 {
            self.stake_debt = self.stake_debt.saturating_add(amount);
        }
    }

    /// free → pending unstake.
    pub fn unstake(&mut self, amount: u64, unlock_slot: u64) -> Result<()> {
        require!(self.free >= amount, MarketError::InsufficientFreeStake);
        self.free = math::sub(self.free, amount)?;
        self.pending_unstake = math::add(self.pending_unstake, amount)?;
        self.unlock_slot = unlock_slot;
        self.stake_left(amount);
        Ok(())
    }

    /// Moves the node's stake debt off `verifier_stake` (the market's sortition total);
    /// returns what was subtracted.
    pub fn settle_debt(&mut self, verifier_stake: &mut u64) -> u64 {
        let debt = self.stake_debt;
        // a denominator, not a balance: it can never go below zero
        *verifier_stake = verifier_stake.saturating_sub(debt);
        self.stake_debt = 0;
        debt
    }

    /// Everything the vault must hold for this node.
    pub fn vault_total(&self) -> Result<u64> {
        let a = math::add(self.free, self.bonded)?;
        let b = math::add(self.pending_unstake, self.earned)?;
        math::add(math::add(a, b)?, self.fees_due)
    }

    /// free → bonded.
    pub fn bond(&mut self, amount: u64) -> Result<()> {
        require!(self.free >= amount, MarketError::InsufficientFreeStake);
        self.free = math::sub(self.free, amount)?;
        self.bonded = math::add(self.bonded, amount)?;
        Ok(())
    }

    /// bonded → free, less `slash` which leaves the bond (the caller moves or books it).
    pub fn release(&mut self, bond: u64, slash: u64) -> Result<()> {
        self.bonded = math::sub(self.bonded, bond)?;
        self.free = math::add(self.free, math::sub(bond, slash)?)?;
        if slash > 0 {
            self.times_slashed = self.times_slashed.saturating_add(1);
            self.stake_left(slash);
        }
        Ok(())
    }

    /// Signer seeds of the node PDA (authority of its vault).
    pub fn signer_seeds<'a>(&'a self, bump: &'a [u8; 1]) -> [&'a [u8]; 3] {
        [SEED_NODE, self.authority.as_ref(), bump]
    }
}

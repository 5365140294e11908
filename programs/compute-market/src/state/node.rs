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
}

impl Node {
    /// Whether the node has `role`.
    pub fn has(&self, role: u8) -> bool {
        self.roles & role != 0
    }

    /// Stake that counts for sortition: free + bonded.
    pub fn stake(&self) -> u64 {
        self.free.saturating_add(self.bonded)
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
        }
        Ok(())
    }

    /// Signer seeds of the node PDA (authority of its vault).
    pub fn signer_seeds<'a>(&'a self, bump: &'a [u8; 1]) -> [&'a [u8]; 3] {
        [SEED_NODE, self.authority.as_ref(), bump]
    }
}

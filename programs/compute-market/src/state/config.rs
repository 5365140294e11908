use anchor_lang::prelude::*;

use crate::{constants::*, errors::MarketError, math};

/// Protocol economics (PROTOCOL §7). Every task copies them when posted, so a later update
/// never changes the terms of a running task.
#[derive(AnchorSerialize, AnchorDeserialize, Clone, Copy, PartialEq, Eq, Debug, InitSpace)]
pub struct Params {
    /// Protocol fee on an accepted task's reward, bps (≤ 10%).
    pub fee_bps: u16,
    /// Share of the reward paid to the majority verifiers of an accepted task, bps (≤ 30%).
    pub verifier_pool_bps: u16,
    /// Provider bond as a multiple of the reward, bps (≥ 10 000).
    pub provider_bond_bps: u32,
    /// Bond of each verifier seat as a fraction of the reward, bps.
    pub verifier_bond_bps: u32,
    /// Rejected provider: share of its slashed bond paid to the client, bps.
    pub reject_client_bps: u16,
    /// Rejected provider: share of its slashed bond paid to the majority verifiers, bps.
    /// The rest of the bond goes to the treasury.
    pub reject_verifier_bps: u16,
    /// Minority and non-revealing verifiers lose this share of their bond, bps (≤ 100%).
    pub verifier_slash_bps: u16,
    /// A provider missing its submit deadline loses this share of its bond, bps (≤ 50%).
    pub late_slash_bps: u16,
    /// Slots between an unstake request and the withdrawal.
    pub unstake_cooldown: u64,
}

impl Params {
    /// PROTOCOL §7 defaults with the given cooldown.
    pub fn defaults(unstake_cooldown: u64) -> Self {
        Params {
            fee_bps: 200,
            verifier_pool_bps: 1_000,
            provider_bond_bps: 20_000,
            verifier_bond_bps: 5_000,
            reject_client_bps: 5_000,
            reject_verifier_bps: 4_000,
            verifier_slash_bps: 5_000,
            late_slash_bps: 1_000,
            unstake_cooldown,
        }
    }

    /// Checks every hard-coded bound; `longest_task` is the longest task lifetime of any
    /// market (the cooldown must exceed twice it).
    pub fn validate(&self, longest_task: u64) -> Result<()> {
        require!(self.fee_bps <= MAX_FEE_BPS, MarketError::ParamOutOfBounds);
        require!(
            self.verifier_pool_bps <= MAX_VERIFIER_POOL_BPS,
            MarketError::ParamOutOfBounds
        );
        require!(
            (MIN_PROVIDER_BOND_BPS..=MAX_PROVIDER_BOND_BPS).contains(&self.provider_bond_bps),
            MarketError::ParamOutOfBounds
        );
        require!(
            (MIN_VERIFIER_BOND_BPS..=MAX_VERIFIER_BOND_BPS).contains(&self.verifier_bond_bps),
            MarketError::ParamOutOfBounds
        );
        require!(
            self.reject_client_bps as u64 + self.reject_verifier_bps as u64 <= BPS,
            MarketError::SlashSplitInvalid
        );
        require!(
            (MIN_VERIFIER_SLASH_BPS..=MAX_VERIFIER_SLASH_BPS).contains(&self.verifier_slash_bps),
            MarketError::ParamOutOfBounds
        );
        require!(
            (MIN_LATE_SLASH_BPS..=MAX_LATE_SLASH_BPS).contains(&self.late_slash_bps),
            MarketError::ParamOutOfBounds
        );
        require!(
            self.unstake_cooldown > longest_task.saturating_mul(2),
            MarketError::CooldownTooShort
        );
        require!(
            self.unstake_cooldown <= MAX_UNSTAKE_COOLDOWN,
            MarketError::CooldownTooLong
        );
        Ok(())
    }
}

/// The protocol's singleton configuration.
#[account]
#[derive(InitSpace)]
pub struct Config {
    /// Layout version ([`crate::constants::ACCOUNT_VERSION`]).
    pub version: u8,
    /// May create markets and propose bounded parameter updates; never moves user funds.
    pub admin: Pubkey,
    /// The SPL token staked, bonded and paid.
    pub stake_mint: Pubkey,
    /// Token account (stake mint) that receives swept protocol fees.
    pub treasury: Pubkey,
    /// Parameters in force.
    pub params: Params,
    /// Proposed parameters, valid when `pending_effective_slot != 0`.
    pub pending: Params,
    /// Slot from which `pending` may be applied; 0 when nothing is pending.
    pub pending_effective_slot: u64,
    /// Slots between a proposal and its earliest application.
    pub update_delay: u64,
    /// Longest task lifetime (submit + 2 × (join + commit + reveal)) of any market, slots.
    pub longest_task: u64,
    /// Markets created.
    pub market_count: u16,
    /// Canonical bump.
    pub bump: u8,
    /// Zeroed space for fields of later versions.
    pub reserved: [u8; 128],
}

impl Config {
    /// The delay a proposal made now waits: the configured delay, and always longer than the
    /// longest task plus the cooldown in force, so a staker who disagrees — even one whose
    /// stake is bonded to a task that just started — can request an unstake and withdraw
    /// before the change applies.
    pub fn effective_delay(&self) -> Result<u64> {
        let leave = math::add(
            math::add(self.longest_task, self.params.unstake_cooldown)?,
            1,
        )?;
        Ok(self.update_delay.max(leave))
    }
}

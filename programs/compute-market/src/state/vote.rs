use anchor_lang::prelude::*;

/// One verifier's seat in one round of one task: `[SEED_VOTE, task, node, round]`.
/// Created by `join_task`, closed by `settle_vote` (rent back to the verifier).
#[account]
#[derive(InitSpace)]
pub struct Vote {
    /// Layout version ([`crate::constants::ACCOUNT_VERSION`]).
    pub version: u8,
    /// The task.
    pub task: Pubkey,
    /// The verifier's node.
    pub node: Pubkey,
    /// The verifier's authority (signs commit and reveal, gets the rent back).
    pub authority: Pubkey,
    /// Round 0, or 1 after an escalation.
    pub round: u8,
    /// Stake bonded for this seat.
    pub bond: u64,
    /// SHA-256(verifier ‖ task ‖ round ‖ vote ‖ evidence ‖ salt).
    pub commitment: [u8; 32],
    /// Whether the commitment is set.
    pub committed: bool,
    /// Whether the vote was revealed.
    pub revealed: bool,
    /// Revealed vote: 1 valid, 2 invalid (0 until revealed).
    pub vote: u8,
    /// Revealed evidence: hash of the recomputed samples.
    pub evidence: [u8; 32],
    /// Slot of joining.
    pub joined_slot: u64,
    /// Canonical bump.
    pub bump: u8,
    /// Zeroed space for fields of later versions.
    pub reserved: [u8; 32],
}

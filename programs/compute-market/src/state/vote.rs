use anchor_lang::prelude::*;

/// One verifier's seats in one round of one task, and its one vote for all of them:
/// `[SEED_VOTE, task, node, round]`. Created by the node's first `join_task` of the round,
/// closed by `settle_vote` or when a displacement leaves it no seat (rent back to the verifier).
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
    /// Stake bonded for its seats (`seats × verifier_bond`).
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
    /// Seats of the round it holds (PROTOCOL §3.3: a node may win several); its vote counts
    /// once for each.
    pub seats: u8,
    /// Whether a dispute refuted its INVALID claim (PROTOCOL §8.4): a false statement.
    pub refuted: bool,
    /// Zeroed space for fields of later versions.
    pub reserved: [u8; 30],
}

impl Vote {
    /// Byte offset of `task` in the account data (after the discriminator and the version):
    /// clients filter a task's votes with a `memcmp` here.
    pub const TASK_OFFSET: usize = 8 + 1;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_offset_points_at_the_task_key() {
        let task = Pubkey::new_from_array([7; 32]);
        let v = Vote {
            version: 1,
            task,
            node: Pubkey::default(),
            authority: Pubkey::default(),
            round: 0,
            bond: 0,
            commitment: [0; 32],
            committed: false,
            revealed: false,
            vote: 0,
            evidence: [0; 32],
            joined_slot: 0,
            bump: 0,
            seats: 1,
            refuted: false,
            reserved: [0; 30],
        };
        let mut data = vec![];
        v.try_serialize(&mut data).unwrap();
        assert_eq!(
            &data[Vote::TASK_OFFSET..Vote::TASK_OFFSET + 32],
            task.as_ref()
        );
    }
}

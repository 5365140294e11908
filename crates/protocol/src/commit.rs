//! Vote commitments and the verification seed (seat sortition: [`crate::seats`]).

use crate::hash::{hashv, Digest};

/// A revealed "the result is valid" vote.
pub const VOTE_VALID: u8 = 1;
/// A revealed "the result is invalid" vote.
pub const VOTE_INVALID: u8 = 2;

/// Commitment to a vote: SHA-256("cm:vote:v1" ‖ verifier ‖ task ‖ round ‖ vote ‖ evidence ‖ salt).
///
/// Binding the verifier's node and the task and round stops one verifier's reveal from being
/// replayed by another or in another round.
pub fn vote_commitment(
    verifier: &[u8; 32],
    task: &[u8; 32],
    round: u8,
    vote: u8,
    evidence: &Digest,
    salt: &[u8; 32],
) -> Digest {
    hashv(&[
        b"cm:vote:v1",
        verifier,
        task,
        &[round, vote],
        evidence,
        salt,
    ])
}

/// The verification seed of a round: SHA-256("cm:seed:v1" ‖ slot hash ‖ task ‖ result root ‖ round),
/// where the slot hash is that of the first slot strictly after the round's reference slot
/// (the submit slot, or the slot of the escalation). Nobody knows it when the root is committed.
pub fn verification_seed(
    slot_hash: &Digest,
    task: &[u8; 32],
    result_root: &Digest,
    round: u8,
) -> Digest {
    hashv(&[b"cm:seed:v1", slot_hash, task, result_root, &[round]])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commitment_binds_every_field() {
        let base = vote_commitment(&[1; 32], &[2; 32], 0, VOTE_VALID, &[3; 32], &[4; 32]);
        assert_ne!(
            base,
            vote_commitment(&[9; 32], &[2; 32], 0, VOTE_VALID, &[3; 32], &[4; 32])
        );
        assert_ne!(
            base,
            vote_commitment(&[1; 32], &[9; 32], 0, VOTE_VALID, &[3; 32], &[4; 32])
        );
        assert_ne!(
            base,
            vote_commitment(&[1; 32], &[2; 32], 1, VOTE_VALID, &[3; 32], &[4; 32])
        );
        assert_ne!(
            base,
            vote_commitment(&[1; 32], &[2; 32], 0, VOTE_INVALID, &[3; 32], &[4; 32])
        );
        assert_ne!(
            base,
            vote_commitment(&[1; 32], &[2; 32], 0, VOTE_VALID, &[9; 32], &[4; 32])
        );
        assert_ne!(
            base,
            vote_commitment(&[1; 32], &[2; 32], 0, VOTE_VALID, &[3; 32], &[9; 32])
        );
    }
}

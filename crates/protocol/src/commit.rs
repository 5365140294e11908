//! Vote commitments, the verification seed and stake-weighted seat sortition.

use crate::hash::{digest_u64, hashv, Digest};

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

/// A verifier's sortition ticket for a seed: uniform in `u64`.
pub fn seat_ticket(seed: &Digest, verifier: &[u8; 32]) -> u64 {
    digest_u64(&hashv(&[b"cm:seat:v1", seed, verifier]))
}

/// Stake-weighted sortition: is a verifier with `stake` out of `total_stake` eligible for a
/// seat, aiming at `expected` eligible verifiers in all?
///
/// Eligible when `ticket < 2^64 · min(1, expected · stake / total_stake)`. The first eligible
/// verifiers to join take the seats. Computed in `u128` without overflow.
pub fn seat_eligible(ticket: u64, stake: u64, total_stake: u64, expected: u64) -> bool {
    if stake == 0 {
        return false;
    }
    let weight = (stake as u128) * (expected as u128);
    if total_stake == 0 || weight >= total_stake as u128 {
        return true;
    }
    // weight < total_stake <= 2^64 - 1, so the shift cannot overflow
    let threshold = (weight << 64) / total_stake as u128;
    (ticket as u128) < threshold
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

    #[test]
    fn sortition_is_stake_weighted() {
        assert!(!seat_eligible(0, 0, 100, 3));
        assert!(seat_eligible(u64::MAX, 50, 100, 3)); // weight >= total: always
                                                      // stake 1 of 1000 with 3 expected: probability 0.003
        let seed = [5u8; 32];
        let hits = (0..20_000u32)
            .filter(|i| {
                let mut v = [0u8; 32];
                v[..4].copy_from_slice(&i.to_le_bytes());
                seat_eligible(seat_ticket(&seed, &v), 1, 1000, 3)
            })
            .count();
        assert!(
            (30..=95).contains(&hits),
            "expected about 60 of 20000, got {hits}"
        );
        assert!(seat_eligible(0, 1, u64::MAX, 1)); // tiny threshold still admits ticket 0
    }
}

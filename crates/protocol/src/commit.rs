//! Vote commitments and the verification seed (seat sortition: [`crate::seats`]).

use crate::hash::{hashv, Digest};

/// A revealed "the result is valid" vote.
pub const VOTE_VALID: u8 = 1;
/// A revealed "the result is invalid" vote.
pub const VOTE_INVALID: u8 = 2;
/// A revealed "I could not get the result from any source in time" vote (PROTOCOL §3.4): never
/// a losing vote, since a provider chooses whom it serves; a majority of them rejects.
pub const VOTE_UNAVAILABLE: u8 = 3;
/// The verdict of a round whose majority of seats said invalid or unavailable, with the
/// invalid seats alone short of a majority (PROTOCOL §3.5): the result is rejected as withheld.
pub const VERDICT_WITHHELD: u8 = 3;
/// The verdict after a won dispute showed the result wrong (PROTOCOL §8.4): it was Accepted,
/// now Rejected.
pub const VERDICT_PROVEN_WRONG: u8 = 4;
/// The verdict after a won dispute refuted every INVALID claim (PROTOCOL §8.4): it was
/// Rejected, now Accepted.
pub const VERDICT_CLAIMS_REFUTED: u8 = 5;
/// The verdict after the provider of a withheld result published the tiles its contest drew
/// (PROTOCOL §8.11): it was Rejected as withheld, now Accepted, still open to disputes of its
/// content; its UNAVAILABLE votes are false statements.
pub const VERDICT_SERVED: u8 = 6;
/// The verdict after the provider of an Accepted result let an availability challenge of it
/// pass unanswered (PROTOCOL §8.11): it was Accepted, now Rejected; the provider's bond is
/// slashed and the client refunded in full.
pub const VERDICT_UNSERVED: u8 = 7;

/// Whether a verdict came from a dispute rather than the seats' majority.
pub fn overturned(majority: u8) -> bool {
    matches!(majority, VERDICT_PROVEN_WRONG | VERDICT_CLAIMS_REFUTED)
}

/// Revealed seats that said "unavailable": the revealed ones neither valid nor invalid (the
/// tally keeps no count of its own for them).
pub fn unavailable(revealed: u8, valid: u8, invalid: u8) -> u8 {
    revealed.saturating_sub(valid).saturating_sub(invalid)
}

/// The verdict of a round of `quorum` seats with `valid` and `invalid` revealed seats out of
/// `revealed` (the rest of the revealed are unavailable): [`VOTE_VALID`], [`VOTE_INVALID`],
/// [`VERDICT_WITHHELD`], or 0 for no majority (PROTOCOL §3.5). Unfilled and unrevealed seats
/// count for no side.
pub fn verdict(quorum: u8, revealed: u8, valid: u8, invalid: u8) -> u8 {
    let q = u16::from(quorum);
    let unavailable = u16::from(unavailable(revealed, valid, invalid));
    if u16::from(valid) * 2 > q {
        VOTE_VALID
    } else if u16::from(invalid) * 2 > q {
        VOTE_INVALID
    } else if (u16::from(invalid) + unavailable) * 2 > q {
        VERDICT_WITHHELD
    } else {
        0
    }
}

/// Where one vote stands once its round has a verdict (PROTOCOL §4.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// On the majority's side: paid its share and the losers' bonus.
    Winner,
    /// On neither side: its bond released in full, nothing paid. An unavailable vote under a
    /// valid or invalid verdict; a valid vote under a withheld one (the provider chose whom to
    /// serve, so a verifier it served cannot be told from one that made its answer up).
    Released,
    /// Against the majority, or silent: slashed.
    Loser,
    /// Its claim was disproved by a dispute (PROTOCOL §8.5): a VALID vote on a result proven
    /// wrong, an INVALID vote whose pointer recomputed equal. Its whole bond is slashed.
    FalseStatement,
}

/// The side of a vote (`vote`, when `revealed`) under a round's `majority` (non-zero). Under
/// [`VERDICT_PROVEN_WRONG`] a VALID vote is a false statement only if it vouched for the
/// disputed tile; the program checks that and releases it otherwise (PROTOCOL §8.5).
pub fn side(majority: u8, revealed: bool, vote: u8) -> Side {
    if !revealed {
        return Side::Loser;
    }
    match (majority, vote) {
        (VERDICT_SERVED, VOTE_VALID) => Side::Winner,
        (VERDICT_SERVED, VOTE_UNAVAILABLE) => Side::FalseStatement,
        (VERDICT_UNSERVED, _) => Side::Released,
        (VERDICT_PROVEN_WRONG, VOTE_VALID) | (VERDICT_CLAIMS_REFUTED, VOTE_INVALID) => {
            Side::FalseStatement
        }
        (VERDICT_PROVEN_WRONG, _) | (VERDICT_CLAIMS_REFUTED, VOTE_UNAVAILABLE) => Side::Released,
        (VERDICT_CLAIMS_REFUTED, VOTE_VALID) => Side::Winner,
        (VOTE_VALID, VOTE_VALID) | (VOTE_INVALID, VOTE_INVALID) => Side::Winner,
        (VERDICT_WITHHELD, VOTE_INVALID | VOTE_UNAVAILABLE) => Side::Winner,
        (VOTE_VALID | VOTE_INVALID, VOTE_UNAVAILABLE) | (VERDICT_WITHHELD, VOTE_VALID) => {
            Side::Released
        }
        _ => Side::Loser,
    }
}

/// Seats on each side of a round with verdict `majority` (non-zero): (winners, released).
/// The losers are the rest of the round's seats.
pub fn sides(majority: u8, revealed: u8, valid: u8, invalid: u8) -> (u8, u8) {
    let unavailable = unavailable(revealed, valid, invalid);
    match majority {
        VOTE_VALID => (valid, unavailable),
        VOTE_INVALID => (invalid, unavailable),
        // the false statements and the silent are the losers; nothing is shared among winners
        VERDICT_PROVEN_WRONG => (0, invalid.saturating_add(unavailable)),
        VERDICT_CLAIMS_REFUTED => (valid, unavailable),
        // the UNAVAILABLE seats' false statements are settled apart (their whole bonds to the
        // treasury): neither winners nor released, nor among the losers that pay a bonus
        VERDICT_SERVED => (valid, unavailable),
        // a provider chooses whom it serves: every revealed seat is released
        VERDICT_UNSERVED => (0, revealed),
        _ => (invalid.saturating_add(unavailable), valid),
    }
}

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

    #[test]
    fn an_unavailable_vote_is_never_a_loser_and_a_majority_of_them_rejects() {
        // the selective-serving case: two served verifiers say valid, the stalled one unavailable
        assert_eq!(verdict(3, 3, 2, 0), VOTE_VALID);
        assert_eq!(side(VOTE_VALID, true, VOTE_UNAVAILABLE), Side::Released);
        assert_eq!(sides(VOTE_VALID, 3, 2, 0), (2, 1));
        // nobody served: withheld, every unavailable seat wins
        assert_eq!(verdict(3, 3, 0, 0), VERDICT_WITHHELD);
        assert_eq!(side(VERDICT_WITHHELD, true, VOTE_UNAVAILABLE), Side::Winner);
        // one verifier served (perhaps the provider's own): withheld, the valid seat released
        assert_eq!(verdict(3, 3, 1, 0), VERDICT_WITHHELD);
        assert_eq!(side(VERDICT_WITHHELD, true, VOTE_VALID), Side::Released);
        assert_eq!(sides(VERDICT_WITHHELD, 3, 1, 0), (2, 1));
        // invalid and unavailable together reject; an invalid majority stays "invalid"
        assert_eq!(verdict(5, 5, 2, 2), VERDICT_WITHHELD);
        assert_eq!(verdict(3, 3, 1, 2), VOTE_INVALID);
        assert_eq!(side(VOTE_INVALID, true, VOTE_VALID), Side::Loser);
        assert_eq!(side(VOTE_INVALID, true, VOTE_UNAVAILABLE), Side::Released);
        // unfilled or silent seats count for nobody; silence always loses
        assert_eq!(verdict(3, 2, 1, 0), 0);
        assert_eq!(verdict(6, 3, 0, 0), 0);
        assert_eq!(side(VOTE_VALID, false, 0), Side::Loser);
        assert_eq!(side(VERDICT_WITHHELD, false, 0), Side::Loser);
    }

    #[test]
    fn an_overturned_verdict_makes_the_disproved_votes_false_statements() {
        assert_eq!(
            side(VERDICT_PROVEN_WRONG, true, VOTE_VALID),
            Side::FalseStatement
        );
        assert_eq!(
            side(VERDICT_PROVEN_WRONG, true, VOTE_INVALID),
            Side::Released
        );
        assert_eq!(
            side(VERDICT_PROVEN_WRONG, true, VOTE_UNAVAILABLE),
            Side::Released
        );
        assert_eq!(side(VERDICT_PROVEN_WRONG, false, 0), Side::Loser);
        assert_eq!(
            side(VERDICT_CLAIMS_REFUTED, true, VOTE_INVALID),
            Side::FalseStatement
        );
        assert_eq!(side(VERDICT_CLAIMS_REFUTED, true, VOTE_VALID), Side::Winner);
        assert_eq!(
            side(VERDICT_CLAIMS_REFUTED, true, VOTE_UNAVAILABLE),
            Side::Released
        );
        assert!(overturned(VERDICT_PROVEN_WRONG) && !overturned(VERDICT_WITHHELD));
    }
}

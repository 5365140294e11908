//! Stake-weighted seat sortition (PROTOCOL §3, Seats): who may sit on a task's verifier seats.
//!
//! Each verifier's ticket `H(seed ‖ node)` is turned into an exponent `E = −log2(u)` with
//! `u = (ticket + 1) / 2^64` uniform in (0, 1], so `E · ln 2` is exponential with rate one.
//! Its *score* `E / w`, with `w` the verifier's snapshot stake, is then exponential with a rate
//! proportional to `w`: the V lowest scores are a stake-weighted sample without replacement
//! (an exponential race). Whatever the order in which verifiers arrive, a set holding a
//! fraction q of the stake expects a fraction q of the seats: arriving first buys nothing.
//!
//! Everything is integer arithmetic (no floats on-chain): `E` is a Q32.32 fixed-point number
//! computed bit by bit, and scores are compared by cross-multiplying in `u128`.

use crate::hash::{digest_u64, hashv, Digest};

/// `2^32 / ln 2`, rounded: converts an expected count of eligible verifiers into the threshold
/// of [`seat_eligible`] in Q32 `log2` units.
pub const INV_LN2_Q32: u64 = 6_196_328_019;

/// A verifier's sortition ticket for a seed: SHA-256("cm:seat:v1" ‖ seed ‖ node), uniform in `u64`.
pub fn seat_ticket(seed: &Digest, verifier: &[u8; 32]) -> u64 {
    digest_u64(&hashv(&[b"cm:seat:v1", seed, verifier]))
}

/// `−log2((ticket + 1) / 2^64)` in Q32.32 fixed point, rounded down at every bit: in
/// `0..64·2^32`. A lower ticket gives a larger exponent.
pub fn ticket_exponent(ticket: u64) -> u64 {
    if ticket == u64::MAX {
        return 0; // u = 1
    }
    let y = ticket + 1;
    let lz = y.leading_zeros();
    let int_part = 63 - lz as u64;
    // mantissa in [1, 2) as Q1.63
    let mut m = (y as u128) << lz;
    let mut frac = 0u64;
    for _ in 0..32 {
        m = (m * m) >> 63;
        frac <<= 1;
        if m >= 1u128 << 64 {
            frac |= 1;
            m >>= 1;
        }
    }
    (64u64 << 32) - ((int_part << 32) | frac)
}

/// One verifier's standing in a task's sortition: exponent, snapshot weight and node key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SeatScore {
    /// [`ticket_exponent`] of its ticket.
    pub exponent: u64,
    /// Its stake in the task's snapshot (> 0).
    pub weight: u64,
    /// Its node key (breaks exact ties).
    pub node: [u8; 32],
}

impl SeatScore {
    /// The score of `node` for `seed` with snapshot weight `weight`.
    pub fn new(seed: &Digest, node: &[u8; 32], weight: u64) -> Self {
        SeatScore {
            exponent: ticket_exponent(seat_ticket(seed, node)),
            weight,
            node: *node,
        }
    }

    /// Whether this score is lower (better) than `other`'s: `E_a / w_a < E_b / w_b`, compared
    /// as `E_a · w_b < E_b · w_a` in `u128` (both products < 2^102), ties by node key.
    pub fn better_than(&self, other: &SeatScore) -> bool {
        let a = self.exponent as u128 * other.weight as u128;
        let b = other.exponent as u128 * self.weight as u128;
        a < b || (a == b && self.node < other.node)
    }
}

/// Whether a verifier may compete for a seat at all. It bounds the number of join
/// transactions to about `expected` per round; the seats themselves go by
/// [`SeatScore::better_than`]. Eligible when
///
/// * its score is below the threshold that admits about `expected` verifiers in all,
///   `E · total < expected · (2^32/ln 2) · w` (probability `1 − e^(−expected·w/total)`), or
/// * it holds at least `1/expected` of the stake (`w · expected ≥ total`): always.
///
/// Whenever at least V scores fall below the threshold (all but rarely, with `expected` = 3V),
/// the V lowest scores among eligible verifiers are the V lowest of all, so seats stay exactly
/// proportional to stake; in a small market every verifier is eligible and it is exact too.
pub fn seat_eligible(score: &SeatScore, total_stake: u64, expected: u64) -> bool {
    if score.weight == 0 {
        return false;
    }
    if score.weight as u128 * expected as u128 >= total_stake as u128 {
        return true;
    }
    let lhs = score.exponent as u128 * total_stake as u128;
    let rhs = expected as u128 * INV_LN2_Q32 as u128 * score.weight as u128;
    lhs < rhs
}

/// Where a candidate goes among the seats already taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// A seat is free: take it.
    Free,
    /// Every seat is taken and the candidate beats the worst seated one, at this index: it
    /// takes that seat and the displaced verifier gets its bond back.
    Displace(usize),
    /// Every seat is taken by a better score.
    Refused,
}

/// The index of the worst (highest) score among `seated`, `None` when empty.
pub fn worst_seat(seated: &[SeatScore]) -> Option<usize> {
    let mut worst: Option<usize> = None;
    for (i, s) in seated.iter().enumerate() {
        match worst {
            Some(w) if !seated[w].better_than(s) => {}
            _ => worst = Some(i),
        }
    }
    worst
}

/// Where `candidate` goes given the `seated` scores and `quorum` seats.
pub fn place(seated: &[SeatScore], quorum: usize, candidate: &SeatScore) -> Placement {
    if seated.len() < quorum {
        return Placement::Free;
    }
    match worst_seat(seated) {
        Some(w) if candidate.better_than(&seated[w]) => Placement::Displace(w),
        _ => Placement::Refused,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Seats `arrivals` one by one with [`place`] (what `join_task` does), keeping only
    /// eligible candidates; returns the seated nodes.
    fn seat_in_order(
        arrivals: &[SeatScore],
        quorum: usize,
        total_stake: u64,
        expected: u64,
    ) -> Vec<SeatScore> {
        let mut seated: Vec<SeatScore> = Vec::with_capacity(quorum);
        for c in arrivals {
            if !seat_eligible(c, total_stake, expected) {
                continue;
            }
            match place(&seated, quorum, c) {
                Placement::Free => seated.push(*c),
                Placement::Displace(i) => seated[i] = *c,
                Placement::Refused => {}
            }
        }
        seated
    }

    #[test]
    fn exponent_is_minus_log2() {
        assert_eq!(ticket_exponent(u64::MAX), 0);
        // u = 2^-64 → 64; u = 1/2 → 1; u = 1/4 → 2
        assert_eq!(ticket_exponent(0), 64 << 32);
        assert_eq!(ticket_exponent((1u64 << 63) - 1), 1 << 32);
        assert_eq!(ticket_exponent((1u64 << 62) - 1), 2 << 32);
        // u = 3/4: -log2(0.75) = 0.4150375
        let e = ticket_exponent(3 * (1u64 << 62) - 1) as f64 / 2f64.powi(32);
        assert!((e - 0.415_037_5).abs() < 1e-6, "{e}");
        // monotone: a lower ticket never has a smaller exponent
        for i in 0..2000u64 {
            let t = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 1;
            assert!(ticket_exponent(t) >= ticket_exponent(t + (1 << 40)));
        }
    }

    #[test]
    fn better_is_a_strict_order() {
        let a = SeatScore {
            exponent: 10,
            weight: 2,
            node: [1; 32],
        };
        let b = SeatScore {
            exponent: 6,
            weight: 1,
            node: [2; 32],
        };
        assert!(a.better_than(&b)); // 5 < 6
        assert!(!b.better_than(&a));
        let c = SeatScore {
            exponent: 12,
            weight: 2,
            node: [0; 32],
        };
        // 12/2 == 6/1: ties go to the lower key
        assert!(c.better_than(&b) && !b.better_than(&c));
        assert!(!a.better_than(&a));
    }

    #[test]
    fn eligibility_is_stake_weighted() {
        let seed = [5u8; 32];
        assert!(!seat_eligible(&SeatScore::new(&seed, &[1; 32], 0), 100, 3));
        assert!(seat_eligible(&SeatScore::new(&seed, &[1; 32], 1), 0, 3));
        // a third of the stake with 3 expected: always, whatever the ticket
        assert!((0..500u32).all(|i| {
            let mut v = [0u8; 32];
            v[..4].copy_from_slice(&i.to_le_bytes());
            seat_eligible(&SeatScore::new(&seed, &v, 334), 1000, 3)
        }));
        // stake 1 of 1000 with 3 expected: probability about 0.003
        let hits = (0..20_000u32)
            .filter(|i| {
                let mut v = [0u8; 32];
                v[..4].copy_from_slice(&i.to_le_bytes());
                seat_eligible(&SeatScore::new(&seed, &v, 1), 1000, 3)
            })
            .count();
        assert!(
            (30..=95).contains(&hits),
            "expected about 60 of 20000, got {hits}"
        );
    }

    fn key(set: u8, i: u32) -> [u8; 32] {
        let mut k = [0u8; 32];
        k[0] = set;
        k[1..5].copy_from_slice(&i.to_le_bytes());
        hashv(&[&k])
    }

    /// The seat share of a set holding a fraction `q` of the stake, over `seeds` seeds, with
    /// that set's many small nodes arriving first; also checks that any other arrival order
    /// seats the very same nodes, and measures what first-come seating would have given.
    /// Returns (share, P(≥ 2 of 3 seats), first-come share, first-come P(≥ 2 of 3)).
    fn simulate(q_percent: u64, seeds: u32) -> (f64, f64, f64, f64) {
        const V: usize = 3;
        let total: u64 = 1_000_000;
        let minority_stake = total * q_percent / 100;
        // the minority spreads its stake over 40 nodes, the rest is 20 honest nodes
        let minority: Vec<u64> = (0..40).map(|_| minority_stake / 40).collect();
        let honest: Vec<u64> = (0..20).map(|_| (total - minority_stake) / 20).collect();
        let denom: u64 = minority.iter().chain(&honest).sum();
        let (mut seats, mut won, mut two) = (0u64, 0u64, 0u64);
        let (mut fc_seats, mut fc_won, mut fc_two) = (0u64, 0u64, 0u64);
        for s in 0..seeds {
            let seed = hashv(&[b"sim", &s.to_le_bytes()]);
            let m: Vec<SeatScore> = minority
                .iter()
                .enumerate()
                .map(|(i, &w)| SeatScore::new(&seed, &key(1, i as u32), w))
                .collect();
            let h: Vec<SeatScore> = honest
                .iter()
                .enumerate()
                .map(|(i, &w)| SeatScore::new(&seed, &key(2, i as u32), w))
                .collect();
            let fast_first: Vec<SeatScore> = m.iter().chain(&h).copied().collect();
            let honest_first: Vec<SeatScore> =
                h.iter().rev().chain(m.iter().rev()).copied().collect();
            let a = seat_in_order(&fast_first, V, denom, 3 * V as u64);
            let b = seat_in_order(&honest_first, V, denom, 3 * V as u64);
            let mut ka: Vec<_> = a.iter().map(|x| x.node).collect();
            let mut kb: Vec<_> = b.iter().map(|x| x.node).collect();
            ka.sort();
            kb.sort();
            assert_eq!(ka, kb, "seed {s}: the arrival order changed the seats");
            let mine = a
                .iter()
                .filter(|x| m.iter().any(|y| y.node == x.node))
                .count() as u64;
            seats += a.len() as u64;
            won += mine;
            two += (mine >= 2) as u64;
            // first-come: the first V eligible arrivals (the minority is faster)
            let fc: Vec<&SeatScore> = fast_first
                .iter()
                .filter(|c| seat_eligible(c, denom, 3 * V as u64))
                .take(V)
                .collect();
            let fc_mine = fc
                .iter()
                .filter(|x| m.iter().any(|y| y.node == x.node))
                .count() as u64;
            fc_seats += fc.len() as u64;
            fc_won += fc_mine;
            fc_two += (fc_mine >= 2) as u64;
        }
        (
            won as f64 / seats as f64,
            two as f64 / seeds as f64,
            fc_won as f64 / fc_seats as f64,
            fc_two as f64 / seeds as f64,
        )
    }

    /// PROTOCOL §3: seats in proportion to stake whatever the arrival order. Prints the
    /// figures quoted in the README (`cargo test -p compute-market-protocol seat_share -- --nocapture`).
    #[test]
    fn seat_share_is_proportional_to_stake_whatever_the_arrival_order() {
        for q in [20u64, 40] {
            let seeds = 10_000;
            let (share, two, fc_share, fc_two) = simulate(q, seeds);
            println!(
                "seat share, q = {:.1}, V = 3, {seeds} seeds: lowest tickets {share:.3} (≥ 2 of 3 seats: {two:.3}); first-come with the minority first {fc_share:.3} (≥ 2 of 3: {fc_two:.3})",
                q as f64 / 100.0
            );
            let qf = q as f64 / 100.0;
            assert!((share - qf).abs() < 0.02, "q = {qf}: share {share}");
            // proportional sampling of 3 seats from many small nodes: 3q²(1−q) + q³
            let expect_two = 3.0 * qf * qf * (1.0 - qf) + qf * qf * qf;
            assert!(
                (two - expect_two).abs() < 0.03,
                "q = {qf}: P(≥2) {two} vs {expect_two}"
            );
            assert!(
                fc_share > share + 0.2,
                "first-come should favour the fast minority"
            );
        }
    }
}

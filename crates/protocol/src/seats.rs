//! Stake-weighted seat sortition (PROTOCOL §3.3, Seats): who sits on each of a task's verifier
//! seats.
//!
//! Every seat `j` of a round is its own race. A verifier's ticket for seat `j`,
//! `H(seed ‖ node ‖ j)`, is turned into an exponent `E = −log2(u)` with `u = (ticket + 1) / 2^64`
//! uniform in (0, 1], so `E · ln 2` is exponential with rate one. Its *score* `E / w`, with `w`
//! the verifier's snapshot stake, is then exponential with a rate proportional to `w`, and the
//! lowest score for seat `j` belongs to a verifier with probability exactly `w / W`. The seats'
//! races are independent, so the seats are a stake-weighted sample **with replacement**: a set
//! of verifiers holding a fraction q of the stake holds Binomial(V, q) of V seats however its
//! stake, and everyone else's, is split over nodes. A node may win several seats (each bonded).
//! Sampling without replacement (one seat a node) would under-count large nodes, so a swarm of
//! many small nodes would win more than its share.
//!
//! Everything is integer arithmetic (no floats on-chain): `E` is a Q32.32 fixed-point number
//! computed bit by bit, and scores are compared by cross-multiplying in `u128`.

use crate::hash::{digest_u64, hashv, Digest};

/// `2^32 / ln 2`, rounded: converts an expected count of eligible verifiers into the threshold
/// of [`seat_eligible`] in Q32 `log2` units.
pub const INV_LN2_Q32: u64 = 6_196_328_019;

/// A verifier's sortition ticket for seat `seat` of a round with `seed`:
/// SHA-256("cm:seat:v2" ‖ seed ‖ node ‖ [seat]), uniform in `u64`.
pub fn seat_ticket(seed: &Digest, verifier: &[u8; 32], seat: u8) -> u64 {
    digest_u64(&hashv(&[b"cm:seat:v2", seed, verifier, &[seat]]))
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

/// One verifier's standing in one seat's race: exponent, snapshot weight and node key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SeatScore {
    /// [`ticket_exponent`] of its ticket for the seat.
    pub exponent: u64,
    /// Its stake in the task's snapshot (> 0 to be seated).
    pub weight: u64,
    /// Its node key (breaks exact ties).
    pub node: [u8; 32],
}

impl SeatScore {
    /// The score of `node` for seat `seat` of a round with `seed`, snapshot weight `weight`.
    pub fn new(seed: &Digest, node: &[u8; 32], seat: u8, weight: u64) -> Self {
        SeatScore {
            exponent: ticket_exponent(seat_ticket(seed, node, seat)),
            weight,
            node: *node,
        }
    }

    /// Whether this score is lower (better) than `other`'s: `E_a / w_a < E_b / w_b`, compared
    /// as `E_a · w_b < E_b · w_a` in `u128` (both products < 2^102), ties by node key. A weight
    /// of 0 scores worse than any positive weight.
    pub fn better_than(&self, other: &SeatScore) -> bool {
        let a = self.exponent as u128 * other.weight as u128;
        let b = other.exponent as u128 * self.weight as u128;
        a < b || (a == b && self.node < other.node)
    }
}

/// Whether a verifier may compete for one seat at all. It bounds the join transactions to
/// about `oversample` per seat; the seat itself goes by [`SeatScore::better_than`]. Eligible
/// when
///
/// * its score is below the threshold that admits about `oversample` verifiers for the seat,
///   `E · total < oversample · (2^32/ln 2) · w` (probability `1 − e^(−oversample·w/total)`),
/// * or it holds at least `1/oversample` of the stake (`w · oversample ≥ total`): always.
///
/// Whenever some score falls below the threshold (all but `e^(−oversample)` of seats), the
/// lowest score among eligible verifiers is the lowest of all, so the seat goes to a verifier
/// with probability exactly proportional to its stake; in a small market every verifier is
/// eligible and it is exact too.
pub fn seat_eligible(score: &SeatScore, total_stake: u64, oversample: u64) -> bool {
    if score.weight == 0 {
        return false;
    }
    if score.weight as u128 * oversample as u128 >= total_stake as u128 {
        return true;
    }
    let lhs = score.exponent as u128 * total_stake as u128;
    let rhs = oversample as u128 * INV_LN2_Q32 as u128 * score.weight as u128;
    lhs < rhs
}

/// Whether `candidate` takes a seat now held by `holder` (`None`: the seat is free). A holder
/// is compared at its weight now, [`SeatScore::weight`] lowered to the stake it still has.
pub fn wins_seat(holder: Option<&SeatScore>, candidate: &SeatScore) -> bool {
    match holder {
        None => true,
        Some(h) => h.node != candidate.node && candidate.better_than(h),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        // a holder whose stake left (weight 0) loses to any staked candidate
        let gone = SeatScore { weight: 0, ..b };
        assert!(a.better_than(&gone) && wins_seat(Some(&gone), &a));
        assert!(!wins_seat(Some(&a), &a), "a node never displaces itself");
        assert!(wins_seat(None, &b));
    }

    #[test]
    fn each_seat_has_its_own_ticket() {
        let (seed, node) = ([5u8; 32], [9u8; 32]);
        let t: Vec<u64> = (0..30).map(|j| seat_ticket(&seed, &node, j)).collect();
        let mut d = t.clone();
        d.sort();
        d.dedup();
        assert_eq!(d.len(), 30, "seats' tickets must differ");
        assert_ne!(seat_ticket(&[6; 32], &node, 0), t[0]);
    }

    #[test]
    fn eligibility_is_stake_weighted() {
        let seed = [5u8; 32];
        assert!(!seat_eligible(
            &SeatScore::new(&seed, &[1; 32], 0, 0),
            100,
            3
        ));
        assert!(seat_eligible(&SeatScore::new(&seed, &[1; 32], 0, 1), 0, 3));
        // a third of the stake with 3 expected: always, whatever the ticket
        assert!((0..500u32).all(|i| {
            let mut v = [0u8; 32];
            v[..4].copy_from_slice(&i.to_le_bytes());
            seat_eligible(&SeatScore::new(&seed, &v, 0, 334), 1000, 3)
        }));
        // stake 1 of 1000 with 3 expected: probability about 0.003
        let hits = (0..20_000u32)
            .filter(|i| {
                let mut v = [0u8; 32];
                v[..4].copy_from_slice(&i.to_le_bytes());
                seat_eligible(&SeatScore::new(&seed, &v, 1, 1), 1000, 3)
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

    /// The seat rule's oversample per seat (the program's `SEAT_OVERSAMPLE`).
    const OVERSAMPLE: u64 = 6;

    /// Seat `j` filled from `arrivals` one by one as `join_task` does: eligible candidates only,
    /// each taking the seat when it beats the holder.
    fn race(arrivals: &[SeatScore], total: u64) -> Option<SeatScore> {
        let mut holder: Option<SeatScore> = None;
        for c in arrivals {
            if seat_eligible(c, total, OVERSAMPLE) && wins_seat(holder.as_ref(), c) {
                holder = Some(*c);
            }
        }
        holder
    }

    /// A split of the stake: the swarm's node stakes and the honest side's.
    struct Split {
        name: &'static str,
        swarm: Vec<u64>,
        honest: Vec<u64>,
    }

    fn splits(q_percent: u64) -> Vec<Split> {
        let total: u64 = 1_000_000;
        let s = total * q_percent / 100;
        let h = total - s;
        let even = |stake: u64, n: u64| (0..n).map(|_| stake / n).collect::<Vec<u64>>();
        vec![
            Split {
                name: "swarm 40 small, honest in 10% nodes",
                swarm: even(s, 40),
                honest: even(h, h / (total / 10)),
            },
            Split {
                name: "swarm 40 small, honest 40 small",
                swarm: even(s, 40),
                honest: even(h, 40),
            },
            Split {
                name: "swarm in 10% nodes, honest 40 small",
                swarm: even(s, s / (total / 10)),
                honest: even(h, 40),
            },
            Split {
                name: "swarm 1 node, honest 1 node",
                swarm: even(s, 1),
                honest: even(h, 1),
            },
        ]
    }

    /// P(X ≥ need) for X ~ Binomial(n, q).
    fn binomial_at_least(n: u64, q: f64, need: u64) -> f64 {
        let choose = |n: u64, k: u64| (0..k).fold(1.0, |c, i| c * (n - i) as f64 / (i + 1) as f64);
        (need..=n)
            .map(|k| choose(n, k) * q.powi(k as i32) * (1.0 - q).powi((n - k) as i32))
            .sum()
    }

    /// Measured over `seeds` seeds: the swarm's share of `v` seats and P(it holds a majority),
    /// with the seat rule (each seat its own race, the swarm arriving first, and the same seats
    /// whatever the arrival order), and with the old rule (one seat a node: the `v` lowest
    /// node tickets) for comparison.
    struct Figures {
        share: f64,
        majority: f64,
        empty: f64,
        old_share: f64,
        old_majority: f64,
    }

    fn measure(split: &Split, v: u8, seeds: u32, salt: u8) -> Figures {
        let total: u64 = split.swarm.iter().chain(&split.honest).sum();
        let need = v as u64 / 2 + 1;
        let (mut won, mut seated, mut maj, mut empty) = (0u64, 0u64, 0u64, 0u64);
        let (mut old_won, mut old_maj) = (0u64, 0u64);
        for s in 0..seeds {
            let seed = hashv(&[b"sim", &[salt, v], &s.to_le_bytes()]);
            let nodes: Vec<([u8; 32], u64, bool)> = split
                .swarm
                .iter()
                .enumerate()
                .map(|(i, &w)| (key(1, i as u32), w, true))
                .chain(
                    split
                        .honest
                        .iter()
                        .enumerate()
                        .map(|(i, &w)| (key(2, i as u32), w, false)),
                )
                .collect();
            let mut mine = 0u64;
            for j in 0..v {
                let scores: Vec<SeatScore> = nodes
                    .iter()
                    .map(|(k, w, _)| SeatScore::new(&seed, k, j, *w))
                    .collect();
                let first = race(&scores, total);
                let reversed: Vec<SeatScore> = scores.iter().rev().copied().collect();
                assert_eq!(
                    first.map(|x| x.node),
                    race(&reversed, total).map(|x| x.node),
                    "seed {s}, seat {j}: the arrival order changed the seat"
                );
                match first {
                    Some(h) => {
                        seated += 1;
                        if nodes.iter().any(|(k, _, sw)| *sw && *k == h.node) {
                            mine += 1;
                        }
                    }
                    None => empty += 1,
                }
            }
            won += mine;
            maj += (mine >= need) as u64;
            // the old rule: one seat a node, the v lowest of the seat-0 scores
            let mut old: Vec<(SeatScore, bool)> = nodes
                .iter()
                .map(|(k, w, sw)| (SeatScore::new(&seed, k, 0, *w), *sw))
                .collect();
            old.sort_by(|a, b| {
                if a.0.better_than(&b.0) {
                    std::cmp::Ordering::Less
                } else {
                    std::cmp::Ordering::Greater
                }
            });
            let old_mine = old.iter().take(v as usize).filter(|x| x.1).count() as u64;
            old_won += old_mine;
            old_maj += (old_mine >= need) as u64;
        }
        let per_seed = (v as usize).min(split.swarm.len() + split.honest.len()) as u64;
        let taken = per_seed * seeds as u64;
        Figures {
            share: won as f64 / seated as f64,
            majority: maj as f64 / seeds as f64,
            empty: empty as f64 / (v as u64 * seeds as u64) as f64,
            old_share: old_won as f64 / taken as f64,
            old_majority: old_maj as f64 / seeds as f64,
        }
    }

    /// PROTOCOL §3.3: a fraction q of the stake holds a fraction q of the seats and a majority
    /// as often as Binomial(V, q) says, however either side splits its stake over nodes and
    /// whatever the arrival order. Prints the table quoted in the README
    /// (`cargo test -p compute-market-protocol seat_share -- --nocapture`).
    #[test]
    fn seat_share_is_proportional_to_stake_under_any_split() {
        const SEEDS: u32 = 20_000;
        let rows: Vec<String> = std::thread::scope(|scope| {
            let jobs: Vec<_> = [20u64, 40]
                .into_iter()
                .map(|q| {
                    scope.spawn(move || {
                        let qf = q as f64 / 100.0;
                        let mut out = vec![];
                        for (n, split) in splits(q).iter().enumerate() {
                            for v in [3u8, 6] {
                                let f = measure(split, v, SEEDS, n as u8);
                                let need = v as u64 / 2 + 1;
                                let expect = binomial_at_least(v as u64, qf, need);
                                out.push(format!(
                                    "| {qf:.1} | {} ({} + {} nodes) | {v} | {:.3} | {:.3} | {expect:.3} | {:.4} | {:.3} | {:.3} |",
                                    split.name,
                                    split.swarm.len(),
                                    split.honest.len(),
                                    f.share,
                                    f.majority,
                                    f.empty,
                                    f.old_share,
                                    f.old_majority,
                                ));
                                assert!(
                                    (f.share - qf).abs() <= 0.01,
                                    "q = {qf}, {}, V = {v}: share {}",
                                    split.name,
                                    f.share
                                );
                                assert!(
                                    (f.majority - expect).abs() <= 0.01,
                                    "q = {qf}, {}, V = {v}: P(majority) {} vs binomial {expect}",
                                    split.name,
                                    f.majority
                                );
                                assert!(f.empty < 0.01, "{}: {} of seats empty", split.name, f.empty);
                            }
                        }
                        out
                    })
                })
                .collect();
            jobs.into_iter()
                .flat_map(|j| j.join().expect("simulation thread"))
                .collect()
        });
        println!("seat share, {SEEDS} seeds a row, oversample {OVERSAMPLE} a seat:");
        println!("| q | split (swarm + honest) | seats | swarm's share | P(swarm majority) | binomial | seats empty | one-seat-a-node share | one-seat-a-node P(majority) |");
        println!("|---|---|---|---|---|---|---|---|---|");
        for r in rows {
            println!("{r}");
        }
    }

    /// The old rule (one seat a node) is what the test above can fail on: with honest stake in
    /// few large nodes a swarm of small ones wins more than its share.
    #[test]
    fn one_seat_a_node_over_counts_a_swarm() {
        let split = &splits(20)[0];
        let f = measure(split, 3, 4_000, 99);
        assert!(f.old_share > 0.21, "one seat a node gave {}", f.old_share);
    }
}

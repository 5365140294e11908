//! The lazy voter's cost (PROTOCOL §8.6): what a verifier that votes VALID without checking
//! expects to lose per task once verdicts can be disputed, by simulation over the protocol's
//! own rules (the seat verdict of [`crate::commit::verdict`], sample draws of
//! [`crate::sampling::sample_indices`], and §8.5's false statements).
//!
//! One trial is one task on which the lazy voter holds a seat. The provider cheats with
//! probability `cheat` (each tile of a cheated result wrong with probability `wrong_tiles`, at
//! least one). Each other seat is another lazy voter with probability `colluders`, else an
//! honest verifier that votes INVALID when one of its samples is wrong. Then:
//! * a right result: the lazy voter is paid like everyone (loses nothing);
//! * a wrong result Rejected by the vote: the lazy voter is a losing minority and loses
//!   `slash_bps` of its bond (§4.4);
//! * a wrong result Accepted: one honest watcher (or the outvoted honest seat) disputes the first
//!   wrong tile it finds among its own `watch` samples that the most VALID votes vouched for
//!   (none found: the wrong result stands and the lazy voter loses nothing); the verdict is overturned and the lazy voter's VALID vote is
//!   a false statement, its whole bond lost, when it vouched for that tile: always for
//!   `MatMulModP` (a VALID vote covers all of C), else when the tile is among its own samples.
//!
//! The loss is in units of the seat's bond B.

use crate::{
    commit::{verdict, VOTE_INVALID},
    hash::{digest_u64, hashv, Digest},
    sampling::sample_indices,
};

/// One market and one cheating provider.
#[derive(Clone, Copy, Debug)]
pub struct LazyCase {
    /// Seats V.
    pub quorum: u8,
    /// Tiles T of a result.
    pub tiles: u32,
    /// Samples k per seat.
    pub samples: u32,
    /// Samples the disputing watcher checks.
    pub watch: u32,
    /// Whether a VALID vote vouches for every tile (`MatMulModP`).
    pub vouches_all: bool,
    /// Fraction f of results the provider cheats on.
    pub cheat: f64,
    /// Fraction of a cheated result's tiles that are wrong.
    pub wrong_tiles: f64,
    /// Probability that each other seat is lazy too.
    pub colluders: f64,
    /// A losing minority's slash, basis points of its bond.
    pub slash_bps: u16,
}

/// What a lazy voter expects per task.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LazyCost {
    /// Expected bond lost per task, in bonds B.
    pub loss_per_task: f64,
    /// Probability per task of losing the whole bond (a false statement proven).
    pub p_false_statement: f64,
    /// Probability per task of a minority's slash.
    pub p_minority: f64,
    /// Probability per task that a wrong result stands (no watcher sample found it).
    pub p_wrong_stands: f64,
}

/// A uniform number in [0, 1) from `seed` and a counter.
fn uniform(seed: &Digest, what: &[u8], i: u64) -> f64 {
    (digest_u64(&hashv(&[seed, what, &i.to_le_bytes()])) >> 11) as f64 / (1u64 << 53) as f64
}

/// Simulates `trials` tasks of `case` from `seed`.
pub fn simulate(case: &LazyCase, trials: u64, seed: &Digest) -> LazyCost {
    let (mut lost, mut whole, mut minority, mut stands) = (0.0, 0u64, 0u64, 0u64);
    let lazy_key = [1u8; 32];
    for trial in 0..trials {
        let s = hashv(&[seed, &trial.to_le_bytes()]);
        if uniform(&s, b"cheat", 0) >= case.cheat {
            continue;
        }
        let mut wrong: Vec<bool> = (0..case.tiles)
            .map(|t| uniform(&s, b"tile", t as u64) < case.wrong_tiles)
            .collect();
        if !wrong.contains(&true) {
            let t = (digest_u64(&hashv(&[&s, b"one"])) % case.tiles as u64) as usize;
            wrong[t] = true;
        }
        let mut invalid = 0u8;
        let mut pointer = None;
        // what each VALID vote vouched for (the lazy voter's own samples first)
        let mut vouchers = vec![sample_indices(&s, &lazy_key, case.samples, case.tiles)];
        for seat in 1..case.quorum {
            let key = hashv(&[b"seat", &[seat]]);
            let drawn = sample_indices(&s, &key, case.samples, case.tiles);
            if uniform(&s, b"lazy", seat as u64) < case.colluders {
                vouchers.push(drawn);
                continue;
            }
            match drawn.iter().find(|&&t| wrong[t as usize]) {
                Some(&t) => {
                    invalid += 1;
                    pointer.get_or_insert(t);
                }
                None => vouchers.push(drawn),
            }
        }
        let valid = case.quorum - invalid;
        if verdict(case.quorum, case.quorum, valid, invalid) == VOTE_INVALID {
            lost += f64::from(case.slash_bps) / 10_000.0;
            minority += 1;
            continue;
        }
        // Accepted: the outvoted honest seat disputes its pointer, else a watcher the wrong
        // tile of its sample that the most VALID votes vouched for (as the keeper's does)
        let hits = |t: u32| vouchers.iter().filter(|d| d.contains(&t)).count();
        let disputed = pointer.or_else(|| {
            sample_indices(&s, &hashv(&[b"watcher"]), case.watch, case.tiles)
                .into_iter()
                .enumerate()
                .filter(|&(_, t)| wrong[t as usize])
                .max_by_key(|&(i, t)| (hits(t), std::cmp::Reverse(i)))
                .map(|(_, t)| t)
        });
        let Some(tile) = disputed else {
            stands += 1;
            continue;
        };
        let vouched = case.vouches_all
            || sample_indices(&s, &lazy_key, case.samples, case.tiles).contains(&tile);
        if vouched {
            lost += 1.0;
            whole += 1;
        }
    }
    let n = trials.max(1) as f64;
    LazyCost {
        loss_per_task: lost / n,
        p_false_statement: whole as f64 / n,
        p_minority: minority as f64 / n,
        p_wrong_stands: stands as f64 / n,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn case(vouches_all: bool, cheat: f64, colluders: f64) -> LazyCase {
        LazyCase {
            quorum: 3,
            tiles: 128,
            samples: 16,
            watch: 16,
            vouches_all,
            cheat,
            wrong_tiles: 0.25,
            colluders,
            slash_bps: 5_000,
        }
    }

    /// The README's table (PROTOCOL §8.6): printed with `--nocapture`; the assertions hold
    /// the shape of it.
    #[test]
    fn a_lazy_voter_loses_about_its_bond_times_the_cheat_rate() {
        let seed = [7u8; 32];
        println!("| f | q | MatMulModP: loss/task (B) | P(whole bond) | HashBatch T=128 k=16: loss/task (B) | P(whole bond) |");
        println!("|---|---|---:|---:|---:|---:|");
        for q in [0.0, 0.5, 1.0] {
            for f in [0.01, 0.05, 0.25] {
                let m = simulate(&case(true, f, q), 20_000, &seed);
                let h = simulate(&case(false, f, q), 20_000, &seed);
                println!(
                    "| {f} | {q} | {:.4} | {:.4} | {:.4} | {:.4} |",
                    m.loss_per_task, m.p_false_statement, h.loss_per_task, h.p_false_statement
                );
                // with every other seat lazy the result is always Accepted, a watcher always
                // finds a wrong tile among 16 of which a quarter are wrong (but 1 in 99):
                // a MatMulModP lazy voter loses about f·B per task
                if q == 1.0 {
                    assert!((m.loss_per_task - f).abs() < 0.25 * f + 0.002, "{f}: {m:?}");
                    assert!(m.p_wrong_stands < 0.01 * f + 0.001);
                }
                // sampled kinds vouch for fewer tiles: a lazy voter loses less, never more
                assert!(h.loss_per_task <= m.loss_per_task + 1e-9);
                assert!(m.loss_per_task > 0.0);
            }
        }
        // nobody cheats: nothing is lost
        assert_eq!(
            simulate(&case(true, 0.0, 0.5), 1_000, &seed).loss_per_task,
            0.0
        );
    }
}

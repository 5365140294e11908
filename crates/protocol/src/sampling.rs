//! What each verifier checks: its own sample indices, Freivalds vectors and vote evidence.
//!
//! Detection: if a fraction `f` of the T tiles is wrong, one verifier checking `k` independent
//! samples misses all of them with probability `(1 − f)^k`.

use crate::hash::{digest_u64, hashv, Digest};

/// Sample `i` of verifier `verifier` for a result of `tile_count` tiles:
/// SHA-256("cm:sample:v1" ‖ seed ‖ verifier ‖ i) mod T.
pub fn sample_index(seed: &Digest, verifier: &[u8; 32], i: u32, tile_count: u32) -> u32 {
    (digest_u64(&hashv(&[b"cm:sample:v1", seed, verifier, &i.to_le_bytes()]))
        % tile_count.max(1) as u64) as u32
}

/// The `k` sample indices of a verifier, in draw order (repeats possible when k is close to T).
pub fn sample_indices(seed: &Digest, verifier: &[u8; 32], k: u32, tile_count: u32) -> Vec<u32> {
    (0..k)
        .map(|i| sample_index(seed, verifier, i, tile_count))
        .collect()
}

/// Freivalds random vector `r` (length `len`, entries in `[0, P)`) for `round` of a verifier's
/// check: derived from the seed so that the provider cannot know it when it commits.
pub fn freivalds_vector(seed: &Digest, verifier: &[u8; 32], round: u32, len: u32) -> Vec<u32> {
    let key = digest_u64(&hashv(&[
        b"cm:freivalds:v1",
        seed,
        verifier,
        &round.to_le_bytes(),
    ]));
    (0..len as u64)
        .map(|i| crate::job::matrix_element(&key, i))
        .collect()
}

/// Vote evidence: SHA-256("cm:evidence:v1" ‖ for each checked sample: index ‖ recomputed leaf),
/// what the verifier itself computed, revealed with its vote.
pub fn evidence_hash(samples: &[(u32, Digest)]) -> Digest {
    let mut acc = hashv(&[b"cm:evidence:v1"]);
    for (i, leaf) in samples {
        acc = hashv(&[&acc, &i.to_le_bytes(), leaf]);
    }
    acc
}

/// Probability that a verifier checking `k` samples catches a result whose fraction `f` of
/// tiles is wrong.
pub fn detection_probability(f: f64, k: u32) -> f64 {
    1.0 - (1.0 - f).powi(k as i32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verifiers_sample_differently() {
        let seed = [1u8; 32];
        let a = sample_indices(&seed, &[2; 32], 16, 1000);
        let b = sample_indices(&seed, &[3; 32], 16, 1000);
        assert_eq!(a.len(), 16);
        assert!(a.iter().all(|&i| i < 1000));
        assert_ne!(a, b);
        assert_eq!(
            a,
            sample_indices(&seed, &[2; 32], 16, 1000),
            "deterministic"
        );
    }

    #[test]
    fn freivalds_in_field() {
        let r = freivalds_vector(&[0; 32], &[1; 32], 0, 100);
        assert!(r.iter().all(|&x| (x as u64) < crate::P));
        assert_ne!(r, freivalds_vector(&[0; 32], &[1; 32], 1, 100));
    }

    #[test]
    fn detection() {
        assert!((detection_probability(0.1, 16) - 0.8147).abs() < 1e-3);
    }
}

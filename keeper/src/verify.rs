//! Building a result commitment (provider) and checking one (verifier).

use anyhow::{ensure, Result};
use compute_market_protocol::{
    commit::{VOTE_INVALID, VOTE_VALID},
    hash::Digest,
    job::{JobKind, JobSpec},
    merkle::{leaf_hash, verify_proof, MerkleTree},
    sampling::{evidence_hash, freivalds_vector, sample_indices},
};
use rayon::prelude::*;

use crate::compute::{freivalds::c_times, Backend};

/// Freivalds rounds per verification (PROTOCOL §5: at least 2).
pub const FREIVALDS_ROUNDS: u32 = 2;

/// The Merkle tree over `tiles` (leaves hashed in parallel).
pub fn commit(tiles: &[Vec<u8>]) -> MerkleTree {
    MerkleTree::new(tiles.par_iter().enumerate().map(|(i, t)| leaf_hash(i as u32, t)).collect())
}

/// A verifier's conclusion.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// [`VOTE_VALID`] or [`VOTE_INVALID`].
    pub vote: u8,
    /// Hash of the verifier's recomputed samples (revealed with the vote).
    pub evidence: Digest,
    /// Why, in words (for logs).
    pub reason: String,
}

impl Verdict {
    fn new(ok: bool, evidence: Digest, reason: impl Into<String>) -> Self {
        Verdict { vote: if ok { VOTE_VALID } else { VOTE_INVALID }, evidence, reason: reason.into() }
    }
}

/// Checks a `MatMulModP` result as PROTOCOL §5 says: Freivalds ([`FREIVALDS_ROUNDS`] random
/// vectors from the seed and the verifier's key) over the whole served C, plus spot checks of
/// the verifier's `samples` sampled tiles: each must come with a Merkle proof to `root` and be
/// the very tile served in `tiles`.
///
/// Freivalds makes a wrong C (any wrong element) pass with probability at most
/// (1/p)^rounds; the spot checks tie the served C to the committed root (a provider that serves
/// one C and commits another is caught with probability 1 − (1 − f)^k per verifier, f the
/// fraction of tiles that differ). Cost: O(m·k + k·n + m·n) for the products (A and B are
/// generated on the fly, never stored) plus k tile hashes, against O(m·k·n) to compute.
#[allow(clippy::too_many_arguments)]
pub fn check_matmul(
    backend: &dyn Backend,
    job: &JobSpec,
    tiles: &[Vec<u8>],
    proven: &[ProvenTile],
    root: &Digest,
    seed: &Digest,
    verifier: &[u8; 32],
    samples: u32,
) -> Result<Verdict> {
    ensure!(job.kind == JobKind::MatMulModP, "check_matmul needs a MatMulModP job");
    let picked = sample_indices(seed, verifier, samples, job.tile_count());
    // each sampled tile hashed once (in parallel), for the evidence and the proof
    let leaves: Vec<(u32, Digest)> = proven.par_iter().map(|t| (t.index, leaf_hash(t.index, &t.tile))).collect();
    let evidence = evidence_hash(&leaves);
    if proven.iter().map(|t| t.index).ne(picked.iter().copied()) {
        return Ok(Verdict::new(false, evidence, "the server returned other tiles than the samples asked for"));
    }
    for (t, (_, leaf)) in proven.iter().zip(&leaves) {
        if !verify_proof(root, t.index, job.tile_count(), leaf, &t.proof) {
            return Ok(Verdict::new(false, evidence, format!("tile {} has no valid proof to the root", t.index)));
        }
        if tiles.get(t.index as usize) != Some(&t.tile) {
            return Ok(Verdict::new(false, evidence, format!("tile {} served in C differs from its proven copy", t.index)));
        }
    }
    let rs: Vec<Vec<u32>> = (0..FREIVALDS_ROUNDS).map(|r| freivalds_vector(seed, verifier, r, job.dims[2])).collect();
    let cr = match c_times(job, tiles, &rs) {
        Ok(cr) => cr,
        Err(e) => return Ok(Verdict::new(false, evidence, format!("malformed tiles: {e}"))),
    };
    let abr = backend.freivalds(job, &rs)?;
    match abr.iter().zip(&cr).position(|(a, c)| a != c) {
        Some(r) => Ok(Verdict::new(false, evidence, format!("Freivalds round {r} failed: C ≠ A·B"))),
        None => Ok(Verdict::new(
            true,
            evidence,
            format!("{} sampled tiles proven, {FREIVALDS_ROUNDS} Freivalds rounds hold", proven.len()),
        )),
    }
}

/// A tile served with its Merkle proof.
#[derive(Clone, Debug)]
pub struct ProvenTile {
    /// Tile index.
    pub index: u32,
    /// Tile bytes.
    pub tile: Vec<u8>,
    /// Sibling path.
    pub proof: Vec<Digest>,
}

/// Checks sampled tiles of any job: each proof must lead to `root` and each tile must equal the
/// verifier's own recomputation.
pub fn check_sampled(backend: &dyn Backend, job: &JobSpec, served: &[ProvenTile], root: &Digest) -> Result<Verdict> {
    let count = job.tile_count();
    let indices: Vec<u32> = served.iter().map(|t| t.index).collect();
    let mine = backend.tiles(job, &indices)?;
    let evidence = evidence_hash(&indices.iter().zip(&mine).map(|(&i, t)| (i, leaf_hash(i, t))).collect::<Vec<_>>());
    for (s, own) in served.iter().zip(&mine) {
        if !verify_proof(root, s.index, count, &leaf_hash(s.index, &s.tile), &s.proof) {
            return Ok(Verdict::new(false, evidence, format!("tile {} has no valid proof to the root", s.index)));
        }
        if s.tile != *own {
            return Ok(Verdict::new(false, evidence, format!("tile {} differs from the recomputation", s.index)));
        }
    }
    Ok(Verdict::new(true, evidence, format!("{} sampled tiles proven and recomputed", served.len())))
}

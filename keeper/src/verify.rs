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

use crate::compute::{Backend, Matrix};

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

/// Checks a whole `MatMulModP` result: the tiles must hash to `root`, and Freivalds
/// ([`FREIVALDS_ROUNDS`] random vectors from the seed) must hold over the whole C.
pub fn check_matmul(
    backend: &dyn Backend,
    job: &JobSpec,
    tiles: &[Vec<u8>],
    root: &Digest,
    seed: &Digest,
    verifier: &[u8; 32],
    samples: u32,
) -> Result<Verdict> {
    ensure!(job.kind == JobKind::MatMulModP, "check_matmul needs a MatMulModP job");
    let tree = commit(tiles);
    let picked = sample_indices(seed, verifier, samples, job.tile_count());
    let evidence = evidence_hash(&picked.iter().map(|&i| (i, tree.leaf(i).expect("in range"))).collect::<Vec<_>>());
    if tree.root() != *root {
        return Ok(Verdict::new(false, evidence, "served tiles do not hash to the committed root"));
    }
    let c = match Matrix::from_tiles(job, tiles) {
        Ok(c) => c,
        Err(e) => return Ok(Verdict::new(false, evidence, format!("malformed tiles: {e}"))),
    };
    let rs: Vec<Vec<u32>> = (0..FREIVALDS_ROUNDS).map(|r| freivalds_vector(seed, verifier, r, job.dims[2])).collect();
    let products = backend.freivalds(job, &c, &rs)?;
    match products.iter().position(|p| p.abr != p.cr) {
        Some(r) => Ok(Verdict::new(false, evidence, format!("Freivalds round {r} failed: C ≠ A·B"))),
        None => Ok(Verdict::new(true, evidence, format!("root matches, {FREIVALDS_ROUNDS} Freivalds rounds hold"))),
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

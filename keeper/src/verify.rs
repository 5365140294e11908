//! Building a result commitment (provider) and checking one (verifier).

use crate::{
    compute::{freivalds::tile_pass, Backend},
    dispute::{element_is_right, first_difference, matmul_wrong_entry, Pointer},
};
use anyhow::{ensure, Result};
use compute_market_protocol::{
    commit::{VOTE_INVALID, VOTE_VALID},
    dispute::invalid_evidence,
    hash::Digest,
    job::{JobKind, JobSpec},
    merkle::{leaf_hash, verify_proof, MerkleTree},
    sampling::{evidence_hash, freivalds_vector, sample_indices},
};

/// Freivalds rounds per verification (PROTOCOL §5: at least 2).
pub const FREIVALDS_ROUNDS: u32 = 2;

/// The commitment tree over `tiles` (PROTOCOL §5), its leaves hashed in parallel.
pub fn commit(tiles: &[Vec<u8>]) -> MerkleTree {
    use rayon::prelude::*;
    let count = tiles.len() as u32;
    MerkleTree::new(
        tiles
            .par_iter()
            .enumerate()
            .map(|(i, t)| leaf_hash(i as u32, count, t))
            .collect(),
    )
}

/// The sample indices a verifier asks for: its draws without repeats, in draw order. A served
/// answer must hold exactly these, in this order.
pub fn distinct(indices: &[u32]) -> Vec<u32> {
    let mut seen = std::collections::HashSet::new();
    indices
        .iter()
        .copied()
        .filter(|i| seen.insert(*i))
        .collect()
}

/// Whether `served` is exactly the `asked` tiles, in that order, each of `job`'s tile length;
/// the reason when it is not.
pub fn proven_shape(job: &JobSpec, asked: &[u32], served: &[ProvenTile]) -> Result<(), String> {
    if served.len() != asked.len() {
        return Err(format!(
            "served {} tiles, {} were sampled",
            served.len(),
            asked.len()
        ));
    }
    for (s, &want) in served.iter().zip(asked) {
        if s.index != want {
            return Err(format!(
                "served tile {} where tile {want} was sampled",
                s.index
            ));
        }
        if s.tile.len() != job.tile_len() {
            return Err(format!(
                "served tile {} is {} bytes, the job's tiles are {}",
                s.index,
                s.tile.len(),
                job.tile_len()
            ));
        }
    }
    Ok(())
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
    /// An INVALID vote's proven wrong element (PROTOCOL §8.2), when the verifier holds one:
    /// its evidence then points at it, and the verifier keeps it to dispute with.
    pub pointer: Option<Pointer>,
}

impl Verdict {
    fn new(ok: bool, evidence: Digest, reason: impl Into<String>) -> Self {
        Verdict {
            vote: if ok { VOTE_VALID } else { VOTE_INVALID },
            evidence,
            reason: reason.into(),
            pointer: None,
        }
    }

    /// A vote with no pointer.
    pub fn plain(vote: u8, reason: impl Into<String>) -> Self {
        Verdict {
            vote,
            evidence: [0; 32],
            reason: reason.into(),
            pointer: None,
        }
    }

    /// INVALID, pointing at `p`: the evidence starts with its tile and element (PROTOCOL §8.2).
    /// For a job the program referees, the element is first judged by the program's own rule
    /// (one element, [`element_is_right`]): when that says it is right, this machine's
    /// recomputation is at fault, and the vote keeps no pointer (in a market with a dispute
    /// window it becomes UNAVAILABLE) rather than one a dispute would refute at the cost of
    /// the whole bond.
    fn wrong(job: &JobSpec, p: Pointer, evidence: Digest, reason: String) -> Self {
        if element_is_right(job, p.tile, p.element, &p.bytes) == Some(true) {
            tracing::error!(tile = p.tile, element = p.element, "this machine's recomputation differs from the committed element, which the protocol's rule says is right: a backend fault; not pointing at it");
            return Verdict::new(
                false,
                evidence,
                format!("{reason}, but the protocol's rule gives tile {} element {} as committed (a fault of this machine's backend)", p.tile, p.element),
            );
        }
        Verdict {
            vote: VOTE_INVALID,
            evidence: invalid_evidence(p.tile, p.element, &evidence),
            reason: format!("{reason}: tile {} element {}", p.tile, p.element),
            pointer: Some(p),
        }
    }
}

/// The element of `served` (tiles proven against the root) that first differs from `mine`
/// (the job's own tiles at the same indices): the tile in served order, then the element.
pub fn first_wrong(job: &JobSpec, served: &[ProvenTile], mine: &[Vec<u8>]) -> Option<Pointer> {
    served.iter().zip(mine).find_map(|(s, m)| {
        first_difference(job, &s.tile, m).map(|element| Pointer {
            tile: s.index,
            element,
            bytes: s.tile.clone(),
            proof: s.proof.clone(),
        })
    })
}

/// Checks a `MatMulModP` result: the served tiles must hash to the committed `root`, and
/// Freivalds ([`FREIVALDS_ROUNDS`] random vectors from the seed and the verifier's key) must
/// hold over the whole C. The evidence is the verifier's leaves at its `samples` sampled
/// indices.
///
/// Why the whole root and not only sampled proofs: the Freivalds vectors derive from public
/// data (the seed, the verifier's key), so once the seed is drawn a provider can compute them.
/// Only the root, committed before the seed existed, stops it from serving a C built to pass
/// those vectors (a C that agrees with a garbage commitment on the sampled tiles and solves
/// C·r = A·(B·r) elsewhere, without ever computing A·B). With C bound to the root, a wrong C
/// passes with probability at most (1/p)^rounds. Cost: hashing C plus O(m·k + k·n + m·n) for
/// the products (A and B are generated on the fly, never stored), against O(m·k·n) to compute.
pub fn check_matmul(
    backend: &dyn Backend,
    job: &JobSpec,
    tiles: &[Vec<u8>],
    root: &Digest,
    seed: &Digest,
    verifier: &[u8; 32],
    samples: u32,
) -> Result<Verdict> {
    ensure!(
        job.kind == JobKind::MatMulModP,
        "check_matmul needs a MatMulModP job"
    );
    if tiles.len() != job.tile_count() as usize {
        return Ok(Verdict::new(
            false,
            [0; 32],
            format!(
                "malformed tiles: expected {}, got {}",
                job.tile_count(),
                tiles.len()
            ),
        ));
    }
    let rs: Vec<Vec<u32>> = (0..FREIVALDS_ROUNDS)
        .map(|r| freivalds_vector(seed, verifier, r, job.dims[2]))
        .collect();
    // one pass over C hashes its tiles and multiplies them by the vectors; the input side's
    // products run beside it
    let (pass, abr) = rayon::join(
        || tile_pass(job, tiles, &rs),
        || backend.freivalds(job, &rs),
    );
    // the input side's failure (a GPU error) matters only if the tiles leave the vote open
    let pass = pass?;
    let tree = MerkleTree::new(pass.leaves);
    let picked = sample_indices(seed, verifier, samples, job.tile_count());
    let evidence = evidence_hash(
        &picked
            .iter()
            .map(|&i| (i, tree.leaf(i).expect("in range")))
            .collect::<Vec<_>>(),
    );
    if tree.root() != *root {
        return Ok(Verdict::new(
            false,
            evidence,
            "served tiles do not hash to the committed root",
        ));
    }
    // the root holds: a wrong entry can be pointed at, its tile proven by the tree
    // (only tiles of the job's length: the program proves chunks of the job's layout)
    let point = |rows: Vec<usize>, reason: String| -> Verdict {
        if tiles.iter().any(|t| t.len() != job.tile_len()) {
            return Verdict::new(false, evidence, reason);
        }
        match matmul_wrong_entry(job, tiles, rows) {
            Some((t, e)) => Verdict::wrong(
                job,
                Pointer {
                    tile: t,
                    element: e,
                    bytes: tiles[t as usize].clone(),
                    proof: tree.proof(t).expect("in range"),
                },
                evidence,
                reason,
            ),
            None => Verdict::new(false, evidence, reason),
        }
    };
    let cr = match pass.products {
        Ok(cr) => cr,
        Err(e) => return Ok(point(vec![], format!("malformed tiles: {e}"))),
    };
    let abr = abr?;
    match abr.iter().zip(&cr).position(|(a, c)| a != c) {
        Some(r) => {
            let rows = (0..cr[r].len())
                .filter(|&i| abr[r].get(i) != cr[r].get(i))
                .collect();
            Ok(point(rows, format!("Freivalds round {r} failed: C ≠ A·B")))
        }
        None => Ok(Verdict::new(
            true,
            evidence,
            format!("root matches, {FREIVALDS_ROUNDS} Freivalds rounds hold"),
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

/// Checks sampled tiles of any job (PROTOCOL §5): `served` must be exactly the verifier's
/// `picked` draws without repeats ([`distinct`]), in draw order, each a tile of
/// the job's length whose proof leads to `root`; all of that is checked **before** anything is
/// recomputed, so a hostile answer (no tiles, other tiles, an index `≥ T`, a million entries)
/// costs the verifier nothing and is an INVALID vote with its reason, never an error. Only
/// then are the sampled tiles recomputed and compared. The evidence is the verifier's own
/// leaves at its draws.
pub fn check_sampled(
    backend: &dyn Backend,
    job: &JobSpec,
    picked: &[u32],
    served: &[ProvenTile],
    root: &Digest,
) -> Result<Verdict> {
    let count = job.tile_count();
    let want = distinct(picked);
    if let Some(bad) = want.iter().find(|&&i| i >= count) {
        anyhow::bail!("sample index {bad} is out of range (T = {count})");
    }
    let refuse = |why: String| Ok(Verdict::new(false, [0; 32], why));
    if let Err(e) = proven_shape(job, &want, served) {
        return refuse(e);
    }
    for s in served {
        if !verify_proof(
            root,
            s.index,
            count,
            &leaf_hash(s.index, count, &s.tile),
            &s.proof,
        ) {
            return refuse(format!("tile {} has no valid proof to the root", s.index));
        }
    }
    // a Generate tile is checked by a teacher-forced prefill of what was served (a fraction of
    // generating it); every other kind recomputed
    let mine = if job.kind == compute_market_protocol::job::JobKind::Generate {
        let inputs = crate::compute::inputs::generate(job)?;
        let by_index: std::collections::HashMap<u32, &[u8]> = served
            .iter()
            .map(|s| (s.index, s.tile.as_slice()))
            .collect();
        let claimed: Vec<(u32, &[u8])> = want.iter().map(|&i| (i, by_index[&i])).collect();
        // on the backend's GPU where its decoder kernels passed the self-test; a difference
        // found there is confirmed on the CPU before anyone is accused (a GPU that computes
        // wrong without an error must not cost an honest provider its bond)
        use crate::compute::decoder::{job::checked_tiles, Path};
        let gpu = backend.decoder_offload(&inputs.model);
        let mine = checked_tiles(&inputs, job, &claimed, Path::fast_or(gpu.as_deref()))?;
        let differs = mine
            .iter()
            .zip(&claimed)
            .any(|(m, (_, c))| m.as_slice() != *c);
        if gpu.is_some() && differs {
            tracing::info!("a sampled completion differs on the GPU: confirming on the CPU");
            checked_tiles(&inputs, job, &claimed, Path::Fast)?
        } else {
            mine
        }
    } else {
        backend.tiles(job, &want)?
    };
    let own: std::collections::HashMap<u32, Digest> = want
        .iter()
        .zip(&mine)
        .map(|(&i, t)| (i, leaf_hash(i, count, t)))
        .collect();
    let evidence = evidence_hash(&picked.iter().map(|&i| (i, own[&i])).collect::<Vec<_>>());
    if let Some(p) = first_wrong(job, served, &mine) {
        let reason = format!("tile {} differs from the recomputation", p.tile);
        return Ok(Verdict::wrong(job, p, evidence, reason));
    }
    Ok(Verdict::new(
        true,
        evidence,
        format!("{} sampled tiles proven and recomputed", served.len()),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compute::cpu::CpuBackend;

    /// The CPU, except that every tile it computes has its first byte flipped.
    struct Faulty;

    impl Backend for Faulty {
        fn name(&self) -> String {
            "faulty".into()
        }
        fn tiles(&self, job: &JobSpec, indices: &[u32]) -> Result<Vec<Vec<u8>>> {
            let mut t = CpuBackend.tiles(job, indices)?;
            for x in &mut t {
                x[0] ^= 1;
            }
            Ok(t)
        }
        fn freivalds(&self, job: &JobSpec, rs: &[Vec<u32>]) -> Result<Vec<Vec<u32>>> {
            CpuBackend.freivalds(job, rs)
        }
    }

    fn proven(job: &JobSpec, tiles: &[Vec<u8>], want: &[u32]) -> (Digest, Vec<ProvenTile>) {
        let tree = commit(tiles);
        let served = want
            .iter()
            .map(|&i| ProvenTile {
                index: i,
                tile: tiles[i as usize].clone(),
                proof: tree.proof(i).unwrap(),
            })
            .collect();
        let _ = job;
        (tree.root(), served)
    }

    #[test]
    fn a_wrong_element_is_pointed_at_and_a_fault_of_this_machine_is_not() {
        let job = JobSpec::hash_batch(6, 8, 2, [3; 32]);
        let mut tiles = CpuBackend.run(&job).unwrap();
        tiles[4][3 * 32 + 1] ^= 0x40;
        let picked = [4, 1, 4];
        let (root, served) = proven(&job, &tiles, &distinct(&picked));
        // an honest machine points at nonce 3 of tile 4, and its evidence says so
        let v = check_sampled(&CpuBackend, &job, &picked, &served, &root).unwrap();
        assert_eq!(v.vote, VOTE_INVALID);
        let p = v.pointer.expect("a pointer");
        assert_eq!((p.tile, p.element), (4, 3));
        assert_eq!(
            compute_market_protocol::dispute::pointer(&v.evidence),
            (4, 3)
        );
        // a machine whose recomputation is wrong finds tile 1 "wrong" at element 0, which the
        // protocol's rule gives as committed: no pointer, the fault named
        let picked = [1];
        let (root, served) = proven(&job, &CpuBackend.run(&job).unwrap(), &picked);
        let v = check_sampled(&Faulty, &job, &picked, &served, &root).unwrap();
        assert_eq!(v.vote, VOTE_INVALID);
        assert!(v.pointer.is_none(), "{v:?}");
        assert!(v.reason.contains("backend"), "{}", v.reason);
    }

    /// A backend whose decoder device computes wrong without an error (every accumulator off
    /// by one): a right completion differs on it, is confirmed on the CPU, and its provider is
    /// not accused; a wrong one is still caught.
    #[test]
    fn a_gpu_wrong_without_an_error_does_not_accuse_an_honest_provider() {
        use crate::compute::decoder::{job, random, Offload};
        use compute_market_protocol::decoder::Dense;
        struct OffByOne;
        impl Offload for OffByOne {
            fn name(&self) -> String {
                "off by one".into()
            }
            fn acc(&self, d: &Dense, xs: &[Vec<i64>]) -> Result<Vec<Vec<i64>>> {
                let mut a = compute_market_protocol::decoder::reference_acc(d, xs);
                a.iter_mut().flatten().for_each(|v| *v += 1 << 20);
                Ok(a)
            }
            fn logit_accs(&self, ys: &[Vec<i64>]) -> Result<Vec<Vec<i64>>> {
                Ok(ys.iter().map(|_| vec![0; 37]).collect())
            }
        }
        struct WrongGpu;
        impl Backend for WrongGpu {
            fn name(&self) -> String {
                "wrong gpu".into()
            }
            fn tiles(&self, job: &JobSpec, indices: &[u32]) -> Result<Vec<Vec<u8>>> {
                CpuBackend.tiles(job, indices)
            }
            fn freivalds(&self, job: &JobSpec, rs: &[Vec<u32>]) -> Result<Vec<Vec<u32>>> {
                CpuBackend.freivalds(job, rs)
            }
            fn decoder_offload(
                &self,
                _model: &std::sync::Arc<crate::compute::decoder::Model>,
            ) -> Option<Box<dyn Offload + '_>> {
                Some(Box::new(OffByOne))
            }
        }
        let model = random::random_model(random::ODD_SHAPES[0], 5);
        let ids: Vec<Vec<u32>> = (0..4u32).map(|i| vec![3 + i, 7, 11 + i]).collect();
        let manifest = [0x47; 32];
        let spec = JobSpec::generate(4, 3, 6, model.work_per_token(9), 1, manifest);
        crate::compute::inputs::hold_generate(
            manifest,
            job::GenerateInputs {
                model: std::sync::Arc::new(model),
                prompts: std::sync::Arc::new(job::Prompts {
                    texts: vec![String::new(); 4],
                    ids,
                    sampling: Default::default(),
                }),
            },
        );
        let mut tiles = CpuBackend.run(&spec).unwrap();
        let picked = [2, 0];
        let (root, served) = proven(&spec, &tiles, &distinct(&picked));
        let v = check_sampled(&WrongGpu, &spec, &picked, &served, &root).unwrap();
        assert_eq!(v.vote, VOTE_VALID, "{v:?}");
        // one token changed: caught all the same
        tiles[2][4] ^= 1;
        let (root, served) = proven(&spec, &tiles, &distinct(&picked));
        let v = check_sampled(&WrongGpu, &spec, &picked, &served, &root).unwrap();
        assert_eq!(v.vote, VOTE_INVALID, "{v:?}");
        crate::compute::inputs::release(&manifest);
    }
}

//! What a dispute proves and recomputes (PROTOCOL §8): the *elements* of a tile (the smallest
//! part the program recomputes), where one lies in the committed string, the one-step
//! recomputation of `HashBatch` and generated `MatMulModP` elements, and the pointer an
//! INVALID vote's evidence carries.
//!
//! The program and every keeper use these same functions, so a challenger knows before it
//! bonds what the program will compute.

use crate::{
    hash::Digest,
    job::{InputMode, JobKind, JobSpec, MATMUL_TILE},
    merkle::{slot_len, CHUNK_LEN},
    P,
};

/// Kind 1: "element e of tile t is not what the job gives" (against an Accepted verdict).
pub const DISPUTE_RESULT_WRONG: u8 = 1;
/// Kind 2: "the INVALID votes' claims are false" (against a Rejected verdict, vote by vote).
pub const DISPUTE_CLAIMS_FALSE: u8 = 2;
/// Most multiply-adds of a `MatMulModP` element one `dispute_step` takes (PROTOCOL §8.4): the
/// bound on k, so one step always suffices (measured: about 85 CU a term, 696 000 CU at
/// k = 8 192, within a transaction's 1 400 000); a caller may take fewer at a time.
pub const MAX_STEP_TERMS: u32 = 8_192;
/// Most sibling chaining values a chunk proof may carry (a committed string of 2^32 chunks).
pub const MAX_CHUNK_SIBLINGS: usize = 32;
/// Bytes of a dispute's proof buffer: one chunk and its siblings.
pub const PROOF_BUFFER_LEN: usize = CHUNK_LEN + 32 * MAX_CHUNK_SIBLINGS;

/// Whether the program referees disputes of this job (PROTOCOL §8.4, §8.7): `HashBatch` and
/// generated `MatMulModP` from the job alone; `MatMulModP` and `Mlp` on the client's data from
/// proven slices of its inputs (which needs a version-2 manifest); `Encoder` of an even width
/// by a game over one text's trace (PROTOCOL §8.10), its elements the embeddings' words;
/// `Generate` by a game over one token's teacher-forced trace (PROTOCOL §8.13), its elements
/// the completions' words. Each needs a version-2 manifest ([`method`]).
pub fn supported(job: &JobSpec) -> bool {
    match job.kind {
        JobKind::HashBatch | JobKind::MatMulModP | JobKind::Mlp => true,
        JobKind::Encoder => job.dims[2].is_multiple_of(2),
        JobKind::Generate => true,
    }
}

/// Transactions one element of this job takes to argue once its dispute is open, at most
/// (PROTOCOL §8.7): two writes, a prove and a step (or a target) for an element recomputed
/// from the job alone; on the client's data also the manifest (a write and `dispute_inputs`)
/// and three per input chunk fed (two writes and `dispute_feed`): 2 · ⌈k / 256⌉ chunks for a
/// product entry, the model's whole slice string and the batch's row for an `Mlp` word.
/// `None` when the program cannot referee the job (an `Encoder`, or a manifest that names no
/// slices: `slices_len` 0).
pub fn element_transactions(job: &JobSpec) -> Option<u64> {
    const ELEMENT: u64 = 5;
    if one_step(job) {
        return Some(ELEMENT);
    }
    if job.slices_len == 0 {
        return None;
    }
    let chunks = match job.kind {
        JobKind::MatMulModP => 2 * (job.dims[1] as u64).div_ceil(256),
        JobKind::Mlp => {
            job.slices_len.div_ceil(CHUNK_LEN as u64)
                + (job.dims[1] as u64).div_ceil(CHUNK_LEN as u64)
                + 1
        }
        _ => return None,
    };
    Some(ELEMENT + 2 + 3 * chunks)
}

/// Slots a challenger's transaction is allowed, one after the other, each confirmed before
/// the next: what [`refereed`] and a keeper's own estimate count.
pub const SLOTS_PER_TRANSACTION: u64 = 2;

/// How the program referees one element of a job in a market of dispute window `window`
/// (PROTOCOL §8.4, §8.7, §8.10).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// Recomputed from the job alone (`dispute_step`).
    Step,
    /// Recomputed from proven slices of the client's inputs, one chunk a transaction
    /// (`dispute_feed`): the challenger alone proves it.
    Feed,
    /// Too long to recompute: the challenger claims the element's trace and anyone defends
    /// against it by bisection to one step the program replays ([`crate::trace`]).
    Game,
}

/// The method the program referees this job's elements by in a window of `window` slots:
/// one step or a feed when the challenger can argue one element in half the window at
/// [`SLOTS_PER_TRANSACTION`] slots a transaction; else a game when one fits the window
/// ([`crate::trace::clock`]: `Mlp` models too large to read in a dispute); else `None`, and the
/// verdict settles at once.
pub fn method(job: &JobSpec, window: u32) -> Option<Method> {
    if !supported(job) {
        return None;
    }
    let fits = element_transactions(job)
        .is_some_and(|n| n * SLOTS_PER_TRANSACTION <= u64::from(window) / 2);
    match () {
        _ if fits && one_step(job) => Some(Method::Step),
        _ if fits => Some(Method::Feed),
        _ if crate::trace::clock(job, window).is_some() => Some(Method::Game),
        _ => None,
    }
}

/// Whether the program referees this job's verdicts in a market of dispute window `window`
/// ([`method`]). Anything else settles at once.
pub fn refereed(job: &JobSpec, window: u32) -> bool {
    method(job, window).is_some()
}

/// Whether the element is recomputed from the job alone (one step); otherwise from proven
/// slices of the client's inputs ([`crate::feed`]).
pub fn one_step(job: &JobSpec) -> bool {
    job.kind == JobKind::HashBatch
        || (job.kind == JobKind::MatMulModP && job.input_mode == InputMode::Generated)
}

/// Elements in one tile: entries of a 64 × 64 block, nonces of a `HashBatch` tile, the 4-byte
/// words of an `Mlp` tile (row e / (C + 1), word e mod (C + 1): a logit, or the class), the
/// 4-byte words of an `Encoder` tile of an even width H (text e / (H/2), channels 2w and
/// 2w + 1 of its embedding), else its texts; the 4-byte words of a `Generate` tile (completion
/// e / (G + 1), word e mod (G + 1): its count, or token w − 1).
pub fn elements_per_tile(job: &JobSpec) -> u32 {
    match job.kind {
        JobKind::MatMulModP => MATMUL_TILE * MATMUL_TILE,
        JobKind::HashBatch => job.dims[1],
        JobKind::Mlp => u32::from(job.rows_per_tile) * (job.dims[2] + 1),
        JobKind::Encoder if job.dims[2].is_multiple_of(2) => {
            u32::from(job.rows_per_tile) * (job.dims[2] / 2)
        }
        JobKind::Generate => u32::from(job.rows_per_tile) * (job.dims[2] + 1),
        JobKind::Encoder => u32::from(job.rows_per_tile),
    }
}

/// Bytes of one element in a tile.
pub fn element_width(job: &JobSpec) -> usize {
    job.tile_len() / elements_per_tile(job).max(1) as usize
}

/// Whether (tile, element) names an element of the result.
pub fn in_range(job: &JobSpec, tile: u32, element: u32) -> bool {
    tile < job.tile_count() && element < elements_per_tile(job)
}

/// Chunks of the committed string: T · S / 1 024.
pub fn chunk_count(job: &JobSpec) -> u64 {
    job.tile_count() as u64 * (slot_len(job.tile_len()) / CHUNK_LEN) as u64
}

/// Byte offset of (tile, element) in the committed string: `t·S + e·w`.
pub fn element_offset(job: &JobSpec, tile: u32, element: u32) -> u64 {
    tile as u64 * slot_len(job.tile_len()) as u64 + element as u64 * element_width(job) as u64
}

/// The chunk holding (tile, element) and the element's offset inside it. An element of a
/// one-step kind never straddles two chunks (its width divides 1 024).
pub fn element_chunk(job: &JobSpec, tile: u32, element: u32) -> (u64, usize) {
    let o = element_offset(job, tile, element);
    (o / CHUNK_LEN as u64, (o % CHUNK_LEN as u64) as usize)
}

/// Entry (i, j) of C that element `element` of `MatMulModP` tile `tile` holds, or `None` in the
/// zero padding past m rows or n columns.
pub fn matmul_entry(job: &JobSpec, tile: u32, element: u32) -> Option<(u32, u32)> {
    let (_, cols) = job.tile_grid();
    let (t, e, w) = (tile as u64, element as u64, MATMUL_TILE as u64);
    let i = (t / cols.max(1) as u64) * w + e / w;
    let j = (t % cols.max(1) as u64) * w + e % w;
    (i < job.dims[0] as u64 && j < job.dims[2] as u64).then_some((i as u32, j as u32))
}

/// Adds the terms `l ∈ [from, to)` of C[i][j] = Σ_l A[i][l] · B[l][j] (mod p) to `acc`, the
/// inputs generated from the job (PROTOCOL §5): a resumable sum, so an element of a long k
/// takes several transactions.
pub fn matmul_terms(job: &JobSpec, i: u32, j: u32, from: u32, to: u32, mut acc: u64) -> u64 {
    let (ka, kb) = (job.matrix_key(b'A'), job.matrix_key(b'B'));
    let (k, n) = (job.dims[1] as u64, job.dims[2] as u64);
    for l in from as u64..to as u64 {
        let a = crate::job::matrix_element(&ka, i as u64 * k + l) as u64;
        let b = crate::job::matrix_element(&kb, l * n + j as u64) as u64;
        acc = crate::job::mod_p(acc + a * b);
    }
    debug_assert!(acc < P);
    acc
}

/// The bytes element (tile, element) of a one-step job must hold (its width), computed from
/// the job alone: a `HashBatch` nonce's output, or a `MatMulModP` entry (LE `u32`; 0 in the
/// padding). `None` for kinds that need bisection.
pub fn expected_element(job: &JobSpec, tile: u32, element: u32) -> Option<[u8; 32]> {
    let mut out = [0u8; 32];
    match job.kind {
        JobKind::HashBatch => {
            let nonce = tile as u64 * job.dims[1] as u64 + element as u64;
            out = job.hash_nonce(nonce);
        }
        JobKind::MatMulModP if job.input_mode == InputMode::Generated => {
            if let Some((i, j)) = matmul_entry(job, tile, element) {
                let v = matmul_terms(job, i, j, 0, job.dims[1], 0) as u32;
                out[..4].copy_from_slice(&v.to_le_bytes());
            }
        }
        _ => return None,
    }
    Some(out)
}

/// The evidence of an INVALID vote (PROTOCOL §8.2): the tile and element it says are wrong,
/// then the first 24 bytes of the evidence hash.
pub fn invalid_evidence(tile: u32, element: u32, evidence: &Digest) -> Digest {
    let mut e = [0u8; 32];
    e[..4].copy_from_slice(&tile.to_le_bytes());
    e[4..8].copy_from_slice(&element.to_le_bytes());
    e[8..].copy_from_slice(&evidence[..24]);
    e
}

/// The (tile, element) an INVALID vote's evidence points at.
pub fn pointer(evidence: &Digest) -> (u32, u32) {
    let w = |o: usize| {
        u32::from_le_bytes([
            evidence[o],
            evidence[o + 1],
            evidence[o + 2],
            evidence[o + 3],
        ])
    };
    (w(0), w(4))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::merkle::{
        chunk_leaf, chunk_proof, leaf_hash, root_of_tiles, verify_chunk_proof, MerkleTree,
    };

    fn committed(job: &JobSpec, tiles: &[Vec<u8>]) -> (Digest, MerkleTree) {
        let t = tiles.len() as u32;
        let leaves = tiles
            .iter()
            .enumerate()
            .map(|(i, x)| leaf_hash(i as u32, t, x))
            .collect();
        let tree = MerkleTree::new(leaves);
        assert_eq!(tree.root(), root_of_tiles(tiles));
        assert_eq!(tiles[0].len(), job.tile_len());
        (tree.root(), tree)
    }

    fn matmul_tiles(job: &JobSpec) -> Vec<Vec<u8>> {
        (0..job.tile_count())
            .map(|t| {
                (0..elements_per_tile(job))
                    .flat_map(|e| expected_element(job, t, e).unwrap()[..4].to_vec())
                    .collect()
            })
            .collect()
    }

    #[test]
    fn every_element_is_proven_by_its_chunk_and_a_changed_one_is_not() {
        // 70 × 5 × 130: a 2 × 3 grid with padding in the last row and column of tiles
        let job = JobSpec::matmul(70, 5, 130, [3; 32]);
        let tiles = matmul_tiles(&job);
        let (root, tree) = committed(&job, &tiles);
        let n = chunk_count(&job);
        assert_eq!(n, 6 * 16);
        for (t, e) in [(0, 0), (0, 4095), (2, 64), (5, 4095), (3, 100), (4, 2000)] {
            let (c, at) = element_chunk(&job, t, e);
            let (chunk, path) = chunk_proof(
                t,
                6,
                &tiles[t as usize],
                &tree.proof(t).unwrap(),
                at + (c as usize % 16) * CHUNK_LEN,
            );
            assert_eq!(
                &chunk[at..at + 4],
                &expected_element(&job, t, e).unwrap()[..4]
            );
            let leaf = chunk_leaf(c, n, &chunk);
            assert!(
                verify_chunk_proof(&root, c, n, &leaf, &path),
                "tile {t} element {e}"
            );
            let mut bad = chunk.clone();
            bad[at] ^= 1;
            assert!(!verify_chunk_proof(
                &root,
                c,
                n,
                &chunk_leaf(c, n, &bad),
                &path
            ));
            assert!(!verify_chunk_proof(&root, c ^ 1, n, &leaf, &path));
        }
        // the padding is zero, and the entries are the product's
        assert_eq!(matmul_entry(&job, 2, 64 * 5 + 2), None);
        assert_eq!(expected_element(&job, 5, 4095).unwrap(), [0; 32]);
        assert_eq!(matmul_entry(&job, 4, 2000), None);
        let (i, j) = matmul_entry(&job, 1, 2000).unwrap();
        assert_eq!((i, j), (31, 64 + 16));
        let direct = (0..5u64).fold(0u64, |acc, l| {
            (acc + job.matrix_element(b'A', i as u64 * 5 + l) as u64
                * job.matrix_element(b'B', l * 130 + j as u64) as u64)
                % P
        });
        assert_eq!(matmul_terms(&job, i, j, 0, 5, 0), direct);
        // resumable in steps
        let half = matmul_terms(&job, i, j, 0, 2, 0);
        assert_eq!(matmul_terms(&job, i, j, 2, 5, half), direct);
    }

    #[test]
    fn a_one_chunk_result_and_hash_batch_tiles_prove_too() {
        // one tile of 32 nonces: 1 024 bytes, the whole string one chunk (its leaf is the root)
        let job = JobSpec::hash_batch(1, 32, 3, [9; 32]);
        let tile: Vec<u8> = (0..32)
            .flat_map(|e| expected_element(&job, 0, e).unwrap())
            .collect();
        let (root, _) = committed(&job, std::slice::from_ref(&tile));
        assert_eq!(chunk_count(&job), 1);
        let (chunk, path) = chunk_proof(0, 1, &tile, &[], 31 * 32);
        assert!(path.is_empty());
        assert!(verify_chunk_proof(
            &root,
            0,
            1,
            &chunk_leaf(0, 1, &chunk),
            &path
        ));
        // five tiles of 64 nonces (2 KiB slots): an odd tile count promotes the last
        let job = JobSpec::hash_batch(5, 64, 2, [1; 32]);
        let tiles: Vec<Vec<u8>> = (0..5)
            .map(|t| {
                (0..64)
                    .flat_map(|e| expected_element(&job, t, e).unwrap())
                    .collect()
            })
            .collect();
        let (root, tree) = committed(&job, &tiles);
        let n = chunk_count(&job);
        for (t, e) in [(0, 0), (4, 63), (4, 31), (2, 40)] {
            let (c, at) = element_chunk(&job, t, e);
            let (chunk, path) = chunk_proof(
                t,
                5,
                &tiles[t as usize],
                &tree.proof(t).unwrap(),
                (c as usize % 2) * CHUNK_LEN + at,
            );
            assert_eq!(&chunk[at..at + 32], &expected_element(&job, t, e).unwrap());
            assert!(verify_chunk_proof(
                &root,
                c,
                n,
                &chunk_leaf(c, n, &chunk),
                &path
            ));
        }
    }

    #[test]
    fn an_invalid_votes_evidence_carries_its_pointer() {
        let e = invalid_evidence(7, 4095, &[0xAB; 32]);
        assert_eq!(pointer(&e), (7, 4095));
        assert_eq!(&e[8..], &[0xAB; 24]);
        let job = JobSpec::hash_batch(4, 8, 1, [0; 32]);
        assert!(in_range(&job, 3, 7) && !in_range(&job, 4, 0) && !in_range(&job, 0, 8));
        assert!(supported(&job));
    }

    #[test]
    fn a_job_on_the_clients_data_is_refereed_when_it_names_slices_and_its_dispute_fits() {
        use crate::job::{InputMode, JOB_SPEC_LEN};
        let digits = JobSpec::mlp(450, 64, 10, 9_472, 8, [1; 32]);
        assert!(
            !refereed(&digits, 10_000),
            "a version-1 manifest: no slices"
        );
        let sliced = JobSpec {
            slices_len: 11_144,
            ..digits
        };
        // 11 chunks of model, the row's chunk and one more: 7 + 3 · 13 transactions
        assert_eq!(element_transactions(&sliced), Some(46));
        assert!(refereed(&sliced, 184) && !refereed(&sliced, 183));
        assert_eq!(method(&sliced, 184), Some(Method::Feed));
        // a model too large to feed in the window is refereed by a game where one fits
        let wide = JobSpec {
            slices_len: 200_000,
            ..sliced
        };
        assert_eq!(method(&wide, 2_400), Some(Method::Game));
        assert_eq!(method(&wide, 1_000), None, "turns of a minute do not fit");
        let product = JobSpec {
            input_mode: InputMode::ContentHash,
            ..JobSpec::matmul(2, 8_192, 2, [2; 32])
        };
        assert!(!refereed(&product, 10_000));
        let product = JobSpec {
            slices_len: 2 * 32_768,
            ..product
        };
        assert_eq!(element_transactions(&product), Some(7 + 3 * 64));
        assert!(refereed(&product, 800) && !refereed(&product, 795));
        // a pointer far outside the result names nothing (and overflows nothing)
        assert_eq!(crate::feed::target(&product, u32::MAX, u32::MAX), None);
        assert_eq!(matmul_entry(&product, u32::MAX, u32::MAX), None);
        // the spec carries it, checked: A's length is its shape's; none for generated jobs
        let b = product.encode();
        assert_eq!(JobSpec::decode(&b), Ok(product));
        let mut wrong = b;
        wrong[56..64].copy_from_slice(&(2 * 32_768u64 + 1).to_le_bytes());
        assert!(JobSpec::decode(&wrong).is_err());
        let mut generated: [u8; JOB_SPEC_LEN] = JobSpec::matmul(2, 8, 2, [0; 32]).encode();
        generated[56] = 1;
        assert!(JobSpec::decode(&generated).is_err());
        assert_eq!(JobSpec::decode(&sliced.encode()), Ok(sliced));
        // one-step kinds need a few slots of any window
        assert!(refereed(&JobSpec::hash_batch(4, 8, 1, [0; 32]), 20));
        assert!(!refereed(
            &JobSpec::encoder(4, 8, 32, 100_000, 2, [0; 32]),
            10_000
        ));
    }
}

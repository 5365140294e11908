//! The CPU reference backend against a naive definition, and the verifier's checks against
//! honest and corrupted results.

use compute_market_keeper::{
    compute::{cpu::CpuBackend, Backend, Matrix},
    verify::{check_matmul, check_sampled, commit, ProvenTile},
};
use compute_market_protocol::{
    commit::{VOTE_INVALID, VOTE_VALID},
    job::JobSpec,
    merkle::{leaf_hash, MerkleTree},
    sampling::sample_indices,
    P,
};

fn naive(job: &JobSpec) -> Matrix {
    let a = Matrix::input_a(job);
    let b = Matrix::input_b(job);
    let mut c = Matrix::zeros(a.rows, b.cols);
    for i in 0..a.rows {
        for j in 0..b.cols {
            let mut acc: u128 = 0;
            for l in 0..a.cols {
                acc += a.data[i * a.cols + l] as u128 * b.data[l * b.cols + j] as u128;
            }
            c.data[i * b.cols + j] = (acc % P as u128) as u32;
        }
    }
    c
}

#[test]
fn matmul_tiles_match_the_naive_product_for_ragged_sizes() {
    for (m, k, n) in [(1, 1, 1), (64, 64, 64), (65, 3, 130), (100, 77, 63), (129, 200, 64)] {
        let job = JobSpec::matmul(m, k, n, [m as u8; 32]);
        let tiles = CpuBackend.run(&job).unwrap();
        assert_eq!(tiles.len() as u32, job.tile_count());
        assert!(tiles.iter().all(|t| t.len() == job.tile_len()));
        assert_eq!(Matrix::from_tiles(&job, &tiles).unwrap(), naive(&job), "{m}×{k}×{n}");
        // padding is zero
        let last = tiles.last().unwrap();
        if n % 64 != 0 {
            assert_eq!(&last[4 * 63..4 * 64], &[0, 0, 0, 0]);
        }
    }
}

#[test]
fn subset_of_tiles_equals_the_same_tiles_of_the_full_run() {
    let job = JobSpec::matmul(200, 50, 130, [9; 32]);
    let all = CpuBackend.run(&job).unwrap();
    let some = CpuBackend.tiles(&job, &[7, 0, 3]).unwrap();
    assert_eq!(some, vec![all[7].clone(), all[0].clone(), all[3].clone()]);
    assert!(CpuBackend.tiles(&job, &[job.tile_count()]).is_err());
}

#[test]
fn hash_batch_tiles_follow_the_protocol() {
    let job = JobSpec::hash_batch(5, 3, 4, [1; 32]);
    let tiles = CpuBackend.run(&job).unwrap();
    assert_eq!(tiles.len(), 5);
    assert_eq!(&tiles[2][32..64], &job.hash_nonce(7));
}

/// The verifier's spot checks: its sampled tiles as the provider serves them, with proofs.
fn proven(tiles: &[Vec<u8>], tree: &MerkleTree, k: u32) -> Vec<ProvenTile> {
    sample_indices(&SEED, &ME, k, tiles.len() as u32)
        .into_iter()
        .map(|i| ProvenTile { index: i, tile: tiles[i as usize].clone(), proof: tree.proof(i).unwrap() })
        .collect()
}

const SEED: [u8; 32] = [1; 32];
const ME: [u8; 32] = [2; 32];

#[test]
fn freivalds_accepts_honest_and_rejects_one_wrong_element() {
    let job = JobSpec::matmul(96, 80, 70, [4; 32]);
    let tiles = CpuBackend.run(&job).unwrap();
    let tree = commit(&tiles);
    let check = |served: &[Vec<u8>], proven: &[ProvenTile], root: compute_market_protocol::hash::Digest| check_matmul(&CpuBackend, &job, served, proven, &root, &SEED, &ME, 4).unwrap();
    let v = check(&tiles, &proven(&tiles, &tree, 4), tree.root());
    assert_eq!(v.vote, VOTE_VALID, "{}", v.reason);
    // one element off by 2^31 - 2 (mod 2^32 Freivalds would miss some such errors; mod p never)
    let mut bad = tiles.clone();
    // tile 1 covers columns 64..70 of C: element (0, 67)
    let x = u32::from_le_bytes(bad[1][12..16].try_into().unwrap());
    bad[1][12..16].copy_from_slice(&(((x as u64 + P - 1) % P) as u32).to_le_bytes());
    let bad_tree = commit(&bad);
    let v = check(&bad, &proven(&bad, &bad_tree, 4), bad_tree.root());
    assert_eq!(v.vote, VOTE_INVALID);
    assert!(v.reason.contains("Freivalds"), "{}", v.reason);
    // honest tiles and proofs against a different root
    let v = check(&tiles, &proven(&tiles, &tree, 4), bad_tree.root());
    assert_eq!(v.vote, VOTE_INVALID);
    assert!(v.reason.contains("proof"), "{}", v.reason);
    // the right C served, a different one committed: the sampled tiles' proven copies differ
    let mut committed = tiles.clone();
    for t in committed.iter_mut() {
        t[0] ^= 1;
    }
    let committed_tree = commit(&committed);
    let v = check(&tiles, &proven(&committed, &committed_tree, 4), committed_tree.root());
    assert_eq!(v.vote, VOTE_INVALID);
    assert!(v.reason.contains("differs"), "{}", v.reason);
    // a server that answers with other tiles than the samples asked for
    let mut others = proven(&tiles, &tree, 4);
    others[0] = ProvenTile { index: (others[0].index + 1) % 4, tile: tiles[((others[0].index + 1) % 4) as usize].clone(), proof: tree.proof((others[0].index + 1) % 4).unwrap() };
    let v = check(&tiles, &others, tree.root());
    assert_eq!(v.vote, VOTE_INVALID);
    assert!(v.reason.contains("other tiles"), "{}", v.reason);
    // garbage in the padding (column 74 of a 70-column C) is a malformed result
    let mut padded = tiles.clone();
    padded[1][40..44].copy_from_slice(&1u32.to_le_bytes());
    let padded_tree = commit(&padded);
    let v = check(&padded, &proven(&padded, &padded_tree, 4), padded_tree.root());
    assert_eq!(v.vote, VOTE_INVALID);
    assert!(v.reason.contains("padding"), "{}", v.reason);
    // a value that is not a field element
    let mut big = tiles.clone();
    big[0][0..4].copy_from_slice(&(P as u32).to_le_bytes());
    let big_tree = commit(&big);
    let v = check(&big, &proven(&big, &big_tree, 4), big_tree.root());
    assert_eq!(v.vote, VOTE_INVALID);
    assert!(v.reason.contains("not a field element"), "{}", v.reason);
}

#[test]
fn sampled_check_rejects_bad_tiles_and_bad_proofs() {
    let job = JobSpec::hash_batch(20, 2, 2, [6; 32]);
    let tiles = CpuBackend.run(&job).unwrap();
    let tree = commit(&tiles);
    let serve = |i: u32, tile: Vec<u8>| ProvenTile { index: i, tile, proof: tree.proof(i).unwrap() };
    let good: Vec<ProvenTile> = [3, 11, 19].iter().map(|&i| serve(i, tiles[i as usize].clone())).collect();
    assert_eq!(check_sampled(&CpuBackend, &job, &good, &tree.root()).unwrap().vote, VOTE_VALID);
    // a wrong tile committed honestly in the tree: proof fine, recomputation differs
    let mut wrong = tiles.clone();
    wrong[11][0] ^= 0xff;
    let wrong_tree = commit(&wrong);
    let served = vec![ProvenTile { index: 11, tile: wrong[11].clone(), proof: wrong_tree.proof(11).unwrap() }];
    let v = check_sampled(&CpuBackend, &job, &served, &wrong_tree.root()).unwrap();
    assert_eq!(v.vote, VOTE_INVALID);
    assert!(v.reason.contains("differs"));
    // a right tile with a proof that does not reach the root
    let v = check_sampled(&CpuBackend, &job, &[serve(3, tiles[3].clone())], &leaf_hash(0, b"other")).unwrap();
    assert_eq!(v.vote, VOTE_INVALID);
    assert!(v.reason.contains("proof"));
}

#[test]
fn chunked_run_with_progress_equals_the_plain_run() {
    let job = JobSpec::matmul(300, 40, 200, [5; 32]);
    let bar = indicatif::ProgressBar::hidden();
    let chunked = CpuBackend.run_with_progress(&job, &bar).unwrap();
    assert_eq!(chunked, CpuBackend.run(&job).unwrap());
    assert_eq!(bar.position(), job.tile_count() as u64);
}

#[test]
fn websocket_urls_follow_the_validator_convention() {
    use compute_market_keeper::daemon::ws_url;
    assert_eq!(ws_url("http://127.0.0.1:8899"), "ws://127.0.0.1:8900");
    assert_eq!(ws_url("https://api.devnet.solana.com"), "wss://api.devnet.solana.com");
}

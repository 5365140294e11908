//! The CPU reference backend against a naive definition, and the verifier's checks against
//! honest and corrupted results.

use compute_market_keeper::{
    compute::{cpu::CpuBackend, Backend, Matrix},
    verify::{check_matmul, check_sampled, commit, ProvenTile},
};
use compute_market_protocol::{
    commit::{VOTE_INVALID, VOTE_VALID},
    job::JobSpec,
    merkle::leaf_hash,
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
    for (m, k, n) in [
        (1, 1, 1),
        (64, 64, 64),
        (65, 3, 130),
        (100, 77, 63),
        (129, 200, 64),
    ] {
        let job = JobSpec::matmul(m, k, n, [m as u8; 32]);
        let tiles = CpuBackend.run(&job).unwrap();
        assert_eq!(tiles.len() as u32, job.tile_count());
        assert!(tiles.iter().all(|t| t.len() == job.tile_len()));
        assert_eq!(
            Matrix::from_tiles(&job, &tiles).unwrap(),
            naive(&job),
            "{m}×{k}×{n}"
        );
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

const SEED: [u8; 32] = [1; 32];
const ME: [u8; 32] = [2; 32];

#[test]
fn freivalds_accepts_honest_and_rejects_one_wrong_element() {
    let job = JobSpec::matmul(96, 80, 70, [4; 32]);
    let tiles = CpuBackend.run(&job).unwrap();
    let root = commit(&tiles).root();
    let check = |served: &[Vec<u8>], root: compute_market_protocol::hash::Digest| {
        check_matmul(&CpuBackend, &job, served, &root, &SEED, &ME, 4).unwrap()
    };
    let v = check(&tiles, root);
    assert_eq!(v.vote, VOTE_VALID, "{}", v.reason);
    // one element off by 2^31 - 2 (mod 2^32 Freivalds would miss some such errors; mod p never)
    let mut bad = tiles.clone();
    // tile 1 covers columns 64..70 of C: element (0, 67)
    let x = u32::from_le_bytes(bad[1][12..16].try_into().unwrap());
    bad[1][12..16].copy_from_slice(&(((x as u64 + P - 1) % P) as u32).to_le_bytes());
    let v = check(&bad, commit(&bad).root());
    assert_eq!(v.vote, VOTE_INVALID);
    assert!(v.reason.contains("Freivalds"), "{}", v.reason);
    // the right C served against a different commitment
    let v = check(&tiles, commit(&bad).root());
    assert_eq!(v.vote, VOTE_INVALID);
    assert!(v.reason.contains("root"), "{}", v.reason);
    // garbage in the padding (column 74 of a 70-column C) is a malformed result
    let mut padded = tiles.clone();
    padded[1][40..44].copy_from_slice(&1u32.to_le_bytes());
    let v = check(&padded, commit(&padded).root());
    assert_eq!(v.vote, VOTE_INVALID);
    assert!(v.reason.contains("padding"), "{}", v.reason);
    // a value that is not a field element
    let mut big = tiles.clone();
    big[0][0..4].copy_from_slice(&(P as u32).to_le_bytes());
    let v = check(&big, commit(&big).root());
    assert_eq!(v.vote, VOTE_INVALID);
    assert!(v.reason.contains("not a field element"), "{}", v.reason);
    // a tile missing
    let v = check(&tiles[..3], root);
    assert_eq!(v.vote, VOTE_INVALID);
}

/// The attack that sampled proofs alone would let through: commit garbage, then — once the
/// seed (hence the verifier's Freivalds vectors) is public — serve a C that agrees with the
/// commitment on the verifier's sampled tiles and satisfies C·r = A·(B·r) for its vectors
/// elsewhere, without computing A·B. The whole-root check refuses it.
#[test]
fn a_c_forged_for_public_freivalds_vectors_is_refused() {
    use compute_market_keeper::compute::freivalds::abr;
    use compute_market_protocol::sampling::{freivalds_vector, sample_indices};
    // 64×64·64×128: two tiles side by side; the verifier samples one
    let job = JobSpec::matmul(64, 64, 128, [9; 32]);
    let garbage: Vec<Vec<u8>> = (0..2u8)
        .map(|t| {
            (0..64 * 64)
                .flat_map(|i| ((i as u32 * 7 + t as u32) % 1000).to_le_bytes())
                .collect()
        })
        .collect();
    let committed = commit(&garbage).root();
    let sampled = sample_indices(&SEED, &ME, 1, 2)[0] as usize;
    let free = 1 - sampled;
    // the forger knows the vectors and A·(B·r); it solves, row by row, for two columns of the
    // free tile so that C·r = A·(B·r) for both rounds (mod p), leaving the sampled tile as committed
    let rs: Vec<Vec<u32>> = (0..2)
        .map(|r| freivalds_vector(&SEED, &ME, r, 128))
        .collect();
    let target = abr(&job, &rs).unwrap();
    let mut forged = garbage.clone();
    // x^(p−2) = x^−1 (mod p), square-and-multiply
    let inv = |x: u64| -> u64 {
        let (mut acc, mut base, mut e) = (1u64, x % P, P - 2);
        while e > 0 {
            if e & 1 == 1 {
                acc = acc * base % P;
            }
            base = base * base % P;
            e >>= 1;
        }
        acc
    };
    let get = |t: &Vec<Vec<u8>>, tile: usize, row: usize, col: usize| {
        u32::from_le_bytes(
            t[tile][4 * (row * 64 + col)..4 * (row * 64 + col) + 4]
                .try_into()
                .unwrap(),
        ) as u64
    };
    for row in 0..64 {
        // residual of each round without columns (free tile, 0) and (free tile, 1)
        let res: Vec<u64> = (0..2)
            .map(|r| {
                let mut s = 0u64;
                for (col, &rv) in rs[r].iter().enumerate() {
                    let (tile, c) = (col / 64, col % 64);
                    if tile == free && c < 2 {
                        continue;
                    }
                    s = (s + get(&forged, tile, row, c) * rv as u64) % P;
                }
                (target[r][row] as u64 + P - s) % P
            })
            .collect();
        // solve [r0a r0b; r1a r1b]·[x; y] = res (mod p) by Cramer's rule
        let (a, b) = (rs[0][free * 64] as u64, rs[0][free * 64 + 1] as u64);
        let (c, d) = (rs[1][free * 64] as u64, rs[1][free * 64 + 1] as u64);
        let det = (a * d % P + P - b * c % P) % P;
        let x = (res[0] * d % P + P - b * res[1] % P) % P * inv(det) % P;
        let y = (a * res[1] % P + P - c * res[0] % P) % P * inv(det) % P;
        for (c, v) in [(0, x), (1, y)] {
            forged[free][4 * (row * 64 + c)..4 * (row * 64 + c) + 4]
                .copy_from_slice(&(v as u32).to_le_bytes());
        }
    }
    // the forgery does satisfy the verifier's Freivalds equations...
    let cr = compute_market_keeper::compute::freivalds::c_times(&job, &forged, &rs).unwrap();
    assert_eq!(
        cr, target,
        "the forged C passes Freivalds for these public vectors"
    );
    assert_eq!(
        forged[sampled], garbage[sampled],
        "and agrees with the commitment on the sampled tile"
    );
    // ...but not the commitment
    let v = check_matmul(&CpuBackend, &job, &forged, &committed, &SEED, &ME, 1).unwrap();
    assert_eq!(v.vote, VOTE_INVALID, "{}", v.reason);
    assert!(v.reason.contains("root"), "{}", v.reason);
}

#[test]
fn sampled_check_rejects_bad_tiles_and_bad_proofs() {
    let job = JobSpec::hash_batch(20, 2, 2, [6; 32]);
    let tiles = CpuBackend.run(&job).unwrap();
    let tree = commit(&tiles);
    let serve = |i: u32, tile: Vec<u8>| ProvenTile {
        index: i,
        tile,
        proof: tree.proof(i).unwrap(),
    };
    // draws with a repeat: the answer holds each distinct draw once, in draw order
    let picked = [3, 11, 3, 19];
    let good: Vec<ProvenTile> = [3, 11, 19]
        .iter()
        .map(|&i| serve(i, tiles[i as usize].clone()))
        .collect();
    let v = check_sampled(&CpuBackend, &job, &picked, &good, &tree.root()).unwrap();
    assert_eq!(v.vote, VOTE_VALID, "{}", v.reason);
    // a wrong tile committed honestly in the tree: proof fine, recomputation differs
    let mut wrong = tiles.clone();
    wrong[11][0] ^= 0xff;
    let wrong_tree = commit(&wrong);
    let served = vec![ProvenTile {
        index: 11,
        tile: wrong[11].clone(),
        proof: wrong_tree.proof(11).unwrap(),
    }];
    let v = check_sampled(&CpuBackend, &job, &[11], &served, &wrong_tree.root()).unwrap();
    assert_eq!(v.vote, VOTE_INVALID);
    assert!(v.reason.contains("differs"));
    // a right tile with a proof that does not reach the root
    let v = check_sampled(
        &CpuBackend,
        &job,
        &[3],
        &[serve(3, tiles[3].clone())],
        &leaf_hash(0, 2, b"other"),
    )
    .unwrap();
    assert_eq!(v.vote, VOTE_INVALID);
    assert!(v.reason.contains("proof"));
}

/// A hostile provider answers a sampled fetch with what it likes; every answer but exactly
/// the sampled tiles is an INVALID vote with its reason — never an error, never a VALID vote
/// from tiles the verifier did not pick.
#[test]
fn sampled_check_refuses_answers_that_are_not_exactly_the_samples() {
    let job = JobSpec::hash_batch(20, 2, 2, [6; 32]);
    let tiles = CpuBackend.run(&job).unwrap();
    let tree = commit(&tiles);
    let serve = |i: u32| ProvenTile {
        index: i,
        tile: tiles[i as usize].clone(),
        proof: tree.proof(i).unwrap(),
    };
    let picked = [3, 11, 19];
    let invalid = |served: &[ProvenTile], why: &str| {
        let v = check_sampled(&CpuBackend, &job, &picked, served, &tree.root()).unwrap();
        assert_eq!(v.vote, VOTE_INVALID, "{why}: {}", v.reason);
        assert!(!v.reason.is_empty());
        v.reason
    };
    // zero tiles: nothing to check is not a pass
    let r = invalid(&[], "zero tiles");
    assert!(r.contains("served 0 tiles, 3 were sampled"), "{r}");
    // only tiles the provider computed (honest ones, valid proofs), not the sampled ones
    let r = invalid(&[serve(0), serve(1), serve(2)], "other tiles");
    assert!(r.contains("served tile 0 where tile 3 was sampled"), "{r}");
    // the right tiles in another order
    let r = invalid(&[serve(11), serve(3), serve(19)], "reordered");
    assert!(r.contains("where tile 3 was sampled"), "{r}");
    // an index ≥ T
    let mut beyond = serve(19);
    beyond.index = 20;
    let r = invalid(&[serve(3), serve(11), beyond], "index ≥ T");
    assert!(
        r.contains("served tile 20 where tile 19 was sampled"),
        "{r}"
    );
    // a million entries: refused on the count, before anything is recomputed
    let million: Vec<ProvenTile> = (0..1_000_000).map(|_| serve(3)).collect();
    let t = std::time::Instant::now();
    let r = invalid(&million, "a million entries");
    assert!(r.contains("served 1000000 tiles, 3 were sampled"), "{r}");
    assert!(
        t.elapsed() < std::time::Duration::from_millis(500),
        "refused without recomputing: {:?}",
        t.elapsed()
    );
    // a tile of the wrong length
    let mut short = serve(19);
    short.tile.pop();
    let r = invalid(&[serve(3), serve(11), short], "short tile");
    assert!(r.contains("bytes"), "{r}");
}

#[test]
fn chunked_run_with_progress_equals_the_plain_run() {
    let job = JobSpec::matmul(300, 40, 200, [5; 32]);
    let seen = std::sync::Mutex::new(vec![]);
    let chunked = CpuBackend
        .run_with_progress(&job, &|done, all| seen.lock().unwrap().push((done, all)))
        .unwrap();
    assert_eq!(chunked, CpuBackend.run(&job).unwrap());
    let seen = seen.into_inner().unwrap();
    let all = job.tile_count() as u64;
    assert_eq!(seen.first(), Some(&(0, all)));
    assert_eq!(seen.last(), Some(&(all, all)));
    assert!(
        seen.windows(2).all(|w| w[0].0 < w[1].0),
        "monotone: {seen:?}"
    );
}

#[test]
fn websocket_urls_follow_the_validator_convention() {
    use compute_market_keeper::daemon::ws_url;
    assert_eq!(ws_url("http://127.0.0.1:8899"), "ws://127.0.0.1:8900");
    assert_eq!(
        ws_url("https://api.devnet.solana.com"),
        "wss://api.devnet.solana.com"
    );
}

/// `node register --measure`: compute, memory and bandwidth come from measurements.
#[test]
fn hardware_is_measured_not_assumed() {
    let h = compute_market_keeper::bench::measure_hardware(&CpuBackend).unwrap();
    assert!(h.gflops >= 1, "{h:?}");
    let ram_gb = CpuBackend.memory_bytes() >> 30;
    assert!(ram_gb > 0 && u64::from(h.memory_gb) == ram_gb, "{h:?}");
    assert!(h.bandwidth_gbps >= 1, "{h:?}");
    assert_eq!(h.region, 0, "the region is declared, not measured");
}

#[test]
fn commitment_forms_are_measured_on_proofs_that_check() {
    // each form's proofs are checked against its root inside, and the commitment's root against
    // `blake3::hash` of the concatenated tiles; tile counts need not be powers of two
    for tiles in [64, 48] {
        let rows = compute_market_keeper::bench::hash_forms(tiles, 4).unwrap();
        assert_eq!(rows.len(), 6, "three forms, 1 and 2 threads");
        assert!(rows
            .iter()
            .all(|r| r.root_mb_s > 0.0 && r.k_proofs_us > 0.0));
    }
}

//! Availability (PROTOCOL §8.11): how many tiles one challenge or contest may name, which tiles
//! a contest of a withheld verdict publishes, and where a named tile's chunks lie. The program
//! and every keeper use these, so a keeper knows before it bonds what the program will accept.

use crate::{
    dispute,
    hash::Digest,
    job::JobSpec,
    merkle::{slot_len, CHUNK_LEN},
    sampling::sample_index,
};

/// A challenge of a client that could not fetch (against an Accepted verdict), bonded.
pub const KIND_CHALLENGE: u8 = 1;
/// A provider's contest of a withheld verdict, its tiles drawn from the round's seed.
pub const KIND_CONTEST: u8 = 2;
/// Most tiles one availability account names.
pub const MAX_TILES: usize = 8;
/// Most chunks (1 KiB each) one availability account holds: 64 KiB, the rent its opener
/// fronts under half a SOL, created in one instruction.
pub const MAX_CHUNKS: u64 = 64;
/// Slots one published chunk costs at the keepers' pace: three transactions (two writes and a
/// prove), two slots each, each confirmed before the next.
pub const SLOTS_PER_CHUNK: u64 = 6;
/// Most bytes one `publish_write` carries.
pub const MAX_WRITE: usize = CHUNK_LEN;
/// Availability challenges open on one task at once.
pub const MAX_OPEN: u8 = 8;

/// Chunks in one tile's slot.
pub fn chunks_per_tile(job: &JobSpec) -> u64 {
    (slot_len(job.tile_len()) / CHUNK_LEN) as u64
}

/// Most tiles one availability account of this job may name in a market of dispute window
/// `window`: their chunks within [`MAX_CHUNKS`], their answer (at [`SLOTS_PER_CHUNK`]) within
/// half the window, and never more than [`MAX_TILES`] nor the result's tiles. 0: the job
/// cannot be challenged or contested (PROTOCOL §8.11), nor without a dispute it can referee.
pub fn max_tiles(job: &JobSpec, window: u32) -> usize {
    if !dispute::refereed(job, window) {
        return 0;
    }
    let per = chunks_per_tile(job).max(1);
    let by_window = (window as u64 / 2) / (SLOTS_PER_CHUNK * per);
    let by_size = MAX_CHUNKS / per;
    by_window
        .min(by_size)
        .min(MAX_TILES as u64)
        .min(job.tile_count() as u64) as usize
}

/// Whether `tiles` may be named by one availability challenge of this job: 1 ..= `max` of
/// them, strictly increasing, each below T.
pub fn tiles_valid(job: &JobSpec, window: u32, tiles: &[u32]) -> bool {
    !tiles.is_empty()
        && tiles.len() <= max_tiles(job, window)
        && tiles.windows(2).all(|w| w[0] < w[1])
        && tiles.iter().all(|&t| t < job.tile_count())
}

/// The tiles a contest of a withheld verdict publishes (PROTOCOL §8.11): the distinct values of
/// `sample_index(seed, task, i, T)` for i = 0, 1, … until [`max_tiles`] of them or four times
/// that many draws, increasing. Drawn from the deciding round's seed, like every seat's
/// samples, so the provider could not know them when it committed.
pub fn contest_tiles(job: &JobSpec, window: u32, seed: &Digest, task: &[u8; 32]) -> Vec<u32> {
    let want = max_tiles(job, window);
    let mut tiles: Vec<u32> = Vec::with_capacity(want);
    let mut i = 0u32;
    while tiles.len() < want && (i as usize) < 4 * want {
        let t = sample_index(seed, task, i, job.tile_count());
        if !tiles.contains(&t) {
            tiles.push(t);
        }
        i += 1;
    }
    tiles.sort_unstable();
    tiles
}

/// Chunk `chunk` of named tile `tile` as a chunk of the committed string: its index among the
/// string's [`dispute::chunk_count`] chunks.
pub fn string_chunk(job: &JobSpec, tile: u32, chunk: u64) -> u64 {
    tile as u64 * chunks_per_tile(job) + chunk
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::merkle::{chunk_leaf, chunk_proof, root_of_tiles, verify_chunk_proof, MerkleTree};

    #[test]
    fn bounds_follow_the_window_and_the_slot() {
        // 512 × 512 generated product: 64 tiles of a 16 KiB slot
        let job = JobSpec::matmul(512, 64, 512, [1; 32]);
        assert_eq!(chunks_per_tile(&job), 16);
        assert_eq!(max_tiles(&job, 0), 0, "no window, no challenge");
        assert_eq!(
            max_tiles(&job, 20),
            0,
            "a 16 KiB slot needs 96 slots of a half window"
        );
        assert_eq!(max_tiles(&job, 192), 1);
        assert_eq!(max_tiles(&job, 10_000), 4, "64 chunks at most");
        // a HashBatch of 4 nonces a tile: 1 KiB slots
        let hb = JobSpec::hash_batch(5, 4, 10, [2; 32]);
        assert_eq!(max_tiles(&hb, 200), 5, "never more than T");
        assert_eq!(max_tiles(&hb, 60), 5);
        assert_eq!(max_tiles(&hb, 24), 2);
        let hb = JobSpec::hash_batch(100, 4, 10, [2; 32]);
        assert_eq!(max_tiles(&hb, 10_000), MAX_TILES);
        assert!(tiles_valid(&hb, 200, &[0, 3, 99]));
        assert!(!tiles_valid(&hb, 200, &[3, 0]), "increasing");
        assert!(!tiles_valid(&hb, 200, &[3, 3]), "distinct");
        assert!(!tiles_valid(&hb, 200, &[100]), "below T");
        assert!(!tiles_valid(&hb, 200, &[]), "at least one");
        assert!(
            !tiles_valid(&hb, 200, &[0, 1, 2, 3, 4, 5, 6, 7, 8]),
            "at most 8"
        );
    }

    #[test]
    fn a_contest_draws_distinct_tiles_from_the_seed() {
        let hb = JobSpec::hash_batch(100, 4, 10, [2; 32]);
        let a = contest_tiles(&hb, 10_000, &[7; 32], &[9; 32]);
        assert_eq!(a.len(), MAX_TILES);
        assert!(a.windows(2).all(|w| w[0] < w[1]));
        assert!(tiles_valid(&hb, 10_000, &a));
        let b = contest_tiles(&hb, 10_000, &[8; 32], &[9; 32]);
        assert_ne!(a, b, "another seed draws other tiles");
        // a result of 3 tiles: all of them (the draws repeat, at most 4 × 3 of them)
        let small = JobSpec::hash_batch(3, 4, 10, [2; 32]);
        assert_eq!(
            contest_tiles(&small, 10_000, &[7; 32], &[9; 32]),
            vec![0, 1, 2]
        );
    }

    #[test]
    fn a_named_tiles_chunks_prove_against_the_root() {
        // 3 tiles of a 2 KiB slot: chunk 1 of tile 2 is chunk 5 of the string
        let job = JobSpec::hash_batch(3, 40, 10, [2; 32]);
        assert_eq!(chunks_per_tile(&job), 2);
        let tiles: Vec<Vec<u8>> = (0..3u8).map(|t| vec![t + 1; job.tile_len()]).collect();
        let root = root_of_tiles(&tiles);
        let tree = MerkleTree::new(
            (0..3)
                .map(|i| crate::merkle::leaf_hash(i, 3, &tiles[i as usize]))
                .collect(),
        );
        let (chunk, siblings) = chunk_proof(2, 3, &tiles[2], &tree.proof(2).unwrap(), 1024);
        let c = string_chunk(&job, 2, 1);
        assert_eq!(c, 5);
        let total = dispute::chunk_count(&job);
        let leaf = chunk_leaf(c, total, &chunk);
        assert!(verify_chunk_proof(&root, c, total, &leaf, &siblings));
        let wrong = chunk_leaf(c - 1, total, &chunk);
        assert!(!verify_chunk_proof(&root, c - 1, total, &wrong, &siblings));
    }
}

//! The result commitment (PROTOCOL §5): the output as one BLAKE3 hash, each tile a subtree of it.
//!
//! The committed byte string is the job's tiles in index order, each followed by zeros up to
//! its *slot* of [`slot_len`] bytes (the smallest power-of-two multiple of BLAKE3's 1 KiB chunk
//! that holds a tile). The root is plain BLAKE3 of that string, so any BLAKE3 library computes
//! it in one call. Because every slot is a power-of-two number of chunks at an offset that is
//! a multiple of its own length, BLAKE3's own chunk tree has each tile as a complete subtree:
//!
//! * leaf `i` = the BLAKE3 chaining value of slot `i` at input offset `i · S` (the chunk
//!   counters bind the tile to its index; BLAKE3's chunk and parent flags keep a leaf from
//!   ever being read as an inner node); a one-tile output has the root as its only leaf;
//! * node = BLAKE3's parent compression of (left, right) — with the root flag for the last one;
//! * a level with an odd number of nodes promotes its last node unchanged. Pairing with
//!   promotion builds exactly BLAKE3's left-balanced tree (the left subtree of every node holds
//!   the largest power of two of slots below its width), so the root equals `blake3(string)`.
//!
//! A tile's proof is the chaining values of its siblings, bottom-up. Verifiers check proofs of
//! sampled tiles; a `MatMulModP` verifier hashes all of C, at BLAKE3's SIMD speed (`keeper
//! bench` measures it against the SHA-256 tree this replaced).

use blake3::hazmat::{merge_subtrees_non_root, merge_subtrees_root, HasherExt, Mode};

use crate::hash::Digest;

/// BLAKE3's chunk: slots are power-of-two multiples of it.
pub const CHUNK_LEN: usize = 1024;

/// Bytes each tile occupies in the committed string: the smallest power-of-two multiple of
/// [`CHUNK_LEN`] that is at least `tile_len`.
pub fn slot_len(tile_len: usize) -> usize {
    tile_len.next_power_of_two().max(CHUNK_LEN)
}

/// Hashes `tile` followed by zeros up to its slot into `h`.
fn absorb_slot(h: &mut blake3::Hasher, tile: &[u8]) {
    h.update(tile);
    let mut pad = slot_len(tile.len()) - tile.len();
    const ZEROS: [u8; CHUNK_LEN] = [0; CHUNK_LEN];
    while pad > 0 {
        let n = pad.min(CHUNK_LEN);
        h.update(&ZEROS[..n]);
        pad -= n;
    }
}

/// Leaf `index` of an output of `count` tiles, tile contents `tile` (every tile of a job has the
/// same length): the chaining value of its slot, or the root when `count` is 1.
pub fn leaf_hash(index: u32, count: u32, tile: &[u8]) -> Digest {
    let mut h = blake3::Hasher::new();
    if count <= 1 {
        absorb_slot(&mut h, tile);
        return *h.finalize().as_bytes();
    }
    h.set_input_offset(index as u64 * slot_len(tile.len()) as u64);
    absorb_slot(&mut h, tile);
    h.finalize_non_root()
}

/// Hash of an inner node; `root` for the topmost.
pub fn node_hash(left: &Digest, right: &Digest, root: bool) -> Digest {
    if root {
        *merge_subtrees_root(left, right, Mode::Hash).as_bytes()
    } else {
        merge_subtrees_non_root(left, right, Mode::Hash)
    }
}

/// The root straight from the tiles, in index order (one BLAKE3 pass over the committed string;
/// what [`MerkleTree`] over their leaves must equal).
///
/// # Panics
/// If the tiles are not all of one length (a job's tiles are).
pub fn root_of_tiles<T: AsRef<[u8]>>(tiles: &[T]) -> Digest {
    assert!(
        tiles
            .windows(2)
            .all(|w| w[0].as_ref().len() == w[1].as_ref().len()),
        "a job's tiles all have its tile length"
    );
    let mut h = blake3::Hasher::new();
    for t in tiles {
        absorb_slot(&mut h, t.as_ref());
    }
    *h.finalize().as_bytes()
}

/// A complete tree, every level kept, for serving proofs.
#[derive(Clone, Debug)]
pub struct MerkleTree {
    levels: Vec<Vec<Digest>>,
}

impl MerkleTree {
    /// Builds the tree over `leaves` (at least one, each from [`leaf_hash`] with the same count).
    ///
    /// # Panics
    /// If `leaves` is empty.
    pub fn new(leaves: Vec<Digest>) -> Self {
        assert!(!leaves.is_empty(), "a Merkle tree needs at least one leaf");
        let mut levels = vec![leaves];
        while levels.last().map_or(0, Vec::len) > 1 {
            let prev = levels.last().expect("non-empty");
            let top = prev.len() == 2;
            let next: Vec<Digest> = prev
                .chunks(2)
                .map(|c| {
                    if c.len() == 2 {
                        node_hash(&c[0], &c[1], top)
                    } else {
                        c[0]
                    }
                })
                .collect();
            levels.push(next);
        }
        MerkleTree { levels }
    }

    /// The root.
    pub fn root(&self) -> Digest {
        self.levels.last().expect("non-empty")[0]
    }

    /// Number of leaves.
    pub fn len(&self) -> usize {
        self.levels[0].len()
    }

    /// Always false: a tree has at least one leaf.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Leaf `index`.
    pub fn leaf(&self, index: u32) -> Option<Digest> {
        self.levels[0].get(index as usize).copied()
    }

    /// The sibling path of leaf `index`, bottom-up; promoted levels contribute nothing.
    pub fn proof(&self, index: u32) -> Option<Vec<Digest>> {
        let mut i = index as usize;
        if i >= self.len() {
            return None;
        }
        let mut path = Vec::new();
        for level in &self.levels[..self.levels.len() - 1] {
            let sib = i ^ 1;
            if sib < level.len() {
                path.push(level[sib]);
            }
            i /= 2;
        }
        Some(path)
    }
}

/// Checks that `leaf` is leaf `index` of a tree of `leaf_count` leaves with root `root`.
pub fn verify_proof(
    root: &Digest,
    index: u32,
    leaf_count: u32,
    leaf: &Digest,
    proof: &[Digest],
) -> bool {
    verify_chunk_proof(root, index.into(), leaf_count.into(), leaf, proof)
}

/// The leaf of BLAKE3 chunk `index` of a committed string of `count` chunks (PROTOCOL §8.4):
/// its chaining value at input offset `index · 1 024`, or the root when the string is one
/// chunk. Folded with its siblings by [`verify_proof`] over `count` leaves it gives the root:
/// BLAKE3's own chunk tree, of which the tile tree is the top.
pub fn chunk_leaf(index: u64, count: u64, chunk: &[u8]) -> Digest {
    let mut h = blake3::Hasher::new();
    if count <= 1 {
        h.update(chunk);
        return *h.finalize().as_bytes();
    }
    h.set_input_offset(index * CHUNK_LEN as u64);
    h.update(chunk);
    h.finalize_non_root()
}

/// Like [`verify_proof`], for a tree of up to 2^64 leaves (a committed string's chunks).
pub fn verify_chunk_proof(
    root: &Digest,
    index: u64,
    leaf_count: u64,
    leaf: &Digest,
    proof: &[Digest],
) -> bool {
    root_from_proof(index, leaf_count, leaf, proof).is_some_and(|r| r == *root)
}

/// The root that `leaf`, leaf `index` of `leaf_count`, and its siblings `proof` (bottom-up,
/// none for promoted levels) lead to; `None` when the proof has the wrong length.
pub fn root_from_proof(
    index: u64,
    leaf_count: u64,
    leaf: &Digest,
    proof: &[Digest],
) -> Option<Digest> {
    if index >= leaf_count {
        return None;
    }
    let (mut i, mut width, mut acc) = (index, leaf_count, *leaf);
    let mut it = proof.iter();
    while width > 1 {
        let sib = i ^ 1;
        if sib < width {
            let s = it.next()?;
            let top = width == 2;
            acc = if i & 1 == 0 {
                node_hash(&acc, s, top)
            } else {
                node_hash(s, &acc, top)
            };
        }
        i /= 2;
        width = width.div_ceil(2);
    }
    it.next().is_none().then_some(acc)
}

/// Siblings a proof of leaf `index` of `leaf_count` carries (levels where it is not promoted).
pub fn proof_len(index: u64, leaf_count: u64) -> usize {
    let (mut i, mut width, mut n) = (index, leaf_count, 0);
    while width > 1 {
        if i ^ 1 < width {
            n += 1;
        }
        i /= 2;
        width = width.div_ceil(2);
    }
    n
}

/// The proof of the chunk holding byte `byte` of tile `index` (of `count` tiles, each of
/// `tile.len()` bytes, `tile_proof` its proof): the chunk's 1 024 bytes (zero padding included)
/// and its siblings bottom-up, those inside the tile's slot first, then the tile's proof.
/// Anyone holding a tile and its proof can build it (PROTOCOL §8.4).
///
/// # Panics
/// If `byte` is not inside the tile's slot.
#[cfg(not(target_os = "solana"))]
pub fn chunk_proof(
    index: u32,
    count: u32,
    tile: &[u8],
    tile_proof: &[Digest],
    byte: usize,
) -> (Vec<u8>, Vec<Digest>) {
    let slot = slot_len(tile.len());
    assert!(byte < slot, "the byte is inside the tile's slot");
    let mut padded = tile.to_vec();
    padded.resize(slot, 0);
    let per_slot = slot / CHUNK_LEN;
    let total = count as u64 * per_slot as u64;
    let first = index as u64 * per_slot as u64;
    let local = byte / CHUNK_LEN;
    let chunk = padded[local * CHUNK_LEN..(local + 1) * CHUNK_LEN].to_vec();
    let mut path = Vec::new();
    if per_slot > 1 {
        let leaves: Vec<Digest> = padded
            .chunks(CHUNK_LEN)
            .enumerate()
            .map(|(c, b)| chunk_leaf(first + c as u64, total, b))
            .collect();
        path = MerkleTree::new(leaves)
            .proof(local as u32)
            .expect("the chunk is in the slot");
    }
    path.extend_from_slice(tile_proof);
    (chunk, path)
}

/// The root over `leaves` without keeping the tree.
pub fn root_of(leaves: Vec<Digest>) -> Digest {
    MerkleTree::new(leaves).root()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiles(n: u32, len: usize) -> Vec<Vec<u8>> {
        (0..n)
            .map(|i| (0..len).map(|j| (i as usize * 31 + j * 7) as u8).collect())
            .collect()
    }

    fn leaves(t: &[Vec<u8>]) -> Vec<Digest> {
        let n = t.len() as u32;
        t.iter()
            .enumerate()
            .map(|(i, t)| leaf_hash(i as u32, n, t))
            .collect()
    }

    #[test]
    fn slots_are_power_of_two_chunks() {
        assert_eq!(slot_len(1), 1024);
        assert_eq!(slot_len(1024), 1024);
        assert_eq!(slot_len(1025), 2048);
        assert_eq!(slot_len(16 * 1024), 16 * 1024);
        assert_eq!(slot_len(3 * 1024), 4 * 1024);
    }

    #[test]
    fn the_tree_is_blake3_of_the_padded_output() {
        // tile lengths below, at and above a chunk, not powers of two, and whole 16-chunk tiles
        for len in [1, 128, 1000, 1024, 1500, 2048, 3000, 16 * 1024] {
            for n in [1u32, 2, 3, 4, 5, 7, 8, 9, 13, 16, 17] {
                let t = tiles(n, len);
                let root = root_of(leaves(&t));
                assert_eq!(root, root_of_tiles(&t), "len={len} n={n}");
                // and that is plain BLAKE3 of tiles padded to their slots
                let mut s = Vec::new();
                for tile in &t {
                    s.extend_from_slice(tile);
                    s.resize(s.len() + slot_len(len) - len, 0);
                }
                assert_eq!(root, *blake3::hash(&s).as_bytes(), "len={len} n={n}");
            }
        }
    }

    #[test]
    fn proofs_verify_for_all_shapes() {
        for n in 1..=33u32 {
            let t = tiles(n, 200);
            let tree = MerkleTree::new(leaves(&t));
            for i in 0..n {
                let p = tree.proof(i).unwrap();
                let leaf = leaf_hash(i, n, &t[i as usize]);
                assert_eq!(tree.leaf(i), Some(leaf));
                assert!(verify_proof(&tree.root(), i, n, &leaf, &p), "n={n} i={i}");
                // a wrong tile, index or count fails
                assert!(!verify_proof(
                    &tree.root(),
                    i,
                    n,
                    &leaf_hash(i, n, b"x"),
                    &p
                ));
                if n > 1 {
                    let j = (i + 1) % n;
                    assert!(!verify_proof(&tree.root(), j, n, &leaf, &p));
                    // the same tile moved to another index hashes differently
                    assert_ne!(leaf_hash(j, n, &t[i as usize]), leaf);
                }
            }
            assert!(tree.proof(n).is_none());
        }
    }

    #[test]
    fn the_tile_length_comes_from_the_job_not_the_root() {
        // a tile and the same tile with trailing zeros up to its slot hash alike: the root binds
        // the slot's bytes, and the job fixes every tile's length (verifiers refuse a served
        // tile of any other length before they look at its proof)
        let a = vec![5u8; 100];
        let mut b = a.clone();
        b.resize(200, 0);
        assert_eq!(root_of_tiles(&[&a]), root_of_tiles(&[&b]));
        assert_eq!(slot_len(a.len()), slot_len(b.len()));
    }

    #[test]
    fn odd_promotion_not_duplication() {
        let t = tiles(3, 64);
        let l = leaves(&t);
        let mut dup = l.clone();
        dup.push(l[2]);
        assert_ne!(root_of(l), root_of(dup));
    }
}

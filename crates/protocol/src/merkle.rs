//! The result commitment: a binary SHA-256 Merkle tree over output tiles.
//!
//! * leaf `i` = SHA-256(0x00 ‖ i as u32 LE ‖ tile bytes);
//! * node = SHA-256(0x01 ‖ left ‖ right);
//! * a level with an odd number of nodes promotes its last node unchanged (no duplication, so
//!   no two different leaf lists share a root).
//!
//! The domain bytes keep a leaf from ever being read as an inner node.

use crate::hash::{hashv, Digest};

/// Hash of tile `index` with contents `tile`.
pub fn leaf_hash(index: u32, tile: &[u8]) -> Digest {
    hashv(&[&[0u8], &index.to_le_bytes(), tile])
}

/// Hash of an inner node.
pub fn node_hash(left: &Digest, right: &Digest) -> Digest {
    hashv(&[&[1u8], left, right])
}

/// A complete tree, every level kept, for serving proofs.
#[derive(Clone, Debug)]
pub struct MerkleTree {
    levels: Vec<Vec<Digest>>,
}

impl MerkleTree {
    /// Builds the tree over `leaves` (at least one).
    ///
    /// # Panics
    /// If `leaves` is empty.
    pub fn new(leaves: Vec<Digest>) -> Self {
        assert!(!leaves.is_empty(), "a Merkle tree needs at least one leaf");
        let mut levels = vec![leaves];
        while levels.last().map_or(0, Vec::len) > 1 {
            let prev = levels.last().expect("non-empty");
            let next: Vec<Digest> = prev
                .chunks(2)
                .map(|c| {
                    if c.len() == 2 {
                        node_hash(&c[0], &c[1])
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
    if index >= leaf_count {
        return false;
    }
    let (mut i, mut width, mut acc) = (index as u64, leaf_count as u64, *leaf);
    let mut it = proof.iter();
    while width > 1 {
        let sib = i ^ 1;
        if sib < width {
            let Some(s) = it.next() else { return false };
            acc = if i & 1 == 0 {
                node_hash(&acc, s)
            } else {
                node_hash(s, &acc)
            };
        }
        i /= 2;
        width = width.div_ceil(2);
    }
    it.next().is_none() && acc == *root
}

/// The root over `leaves` without keeping the tree.
pub fn root_of(leaves: Vec<Digest>) -> Digest {
    MerkleTree::new(leaves).root()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaves(n: u32) -> Vec<Digest> {
        (0..n).map(|i| leaf_hash(i, &i.to_be_bytes())).collect()
    }

    #[test]
    fn proofs_verify_for_all_shapes() {
        for n in 1..=33u32 {
            let t = MerkleTree::new(leaves(n));
            for i in 0..n {
                let p = t.proof(i).unwrap();
                assert!(
                    verify_proof(&t.root(), i, n, &t.leaf(i).unwrap(), &p),
                    "n={n} i={i}"
                );
                // a wrong leaf, index or count fails
                assert!(!verify_proof(&t.root(), i, n, &leaf_hash(i, b"x"), &p));
                if n > 1 {
                    assert!(!verify_proof(
                        &t.root(),
                        (i + 1) % n,
                        n,
                        &t.leaf(i).unwrap(),
                        &p
                    ));
                }
            }
            assert!(t.proof(n).is_none());
        }
    }

    #[test]
    fn single_leaf_root_is_leaf() {
        let l = leaves(1);
        assert_eq!(root_of(l.clone()), l[0]);
    }

    #[test]
    fn odd_promotion_not_duplication() {
        let l = leaves(3);
        let mut dup = l.clone();
        dup.push(l[2]);
        assert_ne!(root_of(l), root_of(dup));
    }
}

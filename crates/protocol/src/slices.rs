//! Inputs by slices (PROTOCOL §8.7): each input part of a job on the client's data laid out as
//! a *slice string* whose BLAKE3 root a version-2 manifest names, so that the program can prove
//! exactly the slices one element is computed from with BLAKE3 chunk proofs, as it proves a
//! result's committed elements (PROTOCOL §8.4).
//!
//! * `MatMulModP`'s A (m × k): row i is `k` LE `u32` at byte `i · stride(k)`, zero-padded to
//!   the stride, `stride(k) = ⌈4k / 1 024⌉ · 1 024`; B (k × n) **by columns**: column j at
//!   `j · stride(k)`. Block c of a row and of a column (terms `256c ..`) is chunk c of each, so
//!   an entry of C is fed one chunk of A and one of B at a time.
//! * `Mlp`'s batch: the N × F int8 values row-major (the tensor's own bytes).
//! * `Mlp`'s model: a header `L: u32`, widths `w_0 … w_L: u32` (LE), then for each layer l
//!   and output o a 12-byte record head `bias: i32, multiplier: i32, shift: i32` (0 and 0 in
//!   the last layer) followed by the weights `W_l[o][0 … w_l)` as int8: a row is fed through the
//!   model by reading it front to back, one chunk at a time.
//! * `Encoder`'s model and texts: laid out for the replay of one step of a text's trace,
//!   the texts as token ids ([`encoder`]).
//!
//! Content stores hold, and the manifest's SHA-256 names, the part's own bytes; a keeper
//! rebuilds the slice string from what it parsed and refuses a manifest whose slices do not
//! match (the provider never claims such a task).

pub mod decoder;
pub mod encoder;

use crate::{
    job::{JobKind, JobSpec, MAX_MLP_LAYERS, MAX_MLP_WIDTH},
    manifest::Role,
    merkle::CHUNK_LEN,
};

/// `u32` values in one chunk of a matrix row or column.
pub const VALUES_PER_CHUNK: u32 = (CHUNK_LEN / 4) as u32;
/// Bytes of an `Mlp` record head: bias, multiplier, shift.
pub const RECORD_HEAD: u64 = 12;
/// Most bytes of an `Mlp` model header (`L` and `L + 1` widths).
pub const MAX_MODEL_HEADER: u64 = 4 + 4 * (MAX_MLP_LAYERS + 1);

/// Bytes from one matrix row (or column) of `k` values to the next: ⌈4k / 1 024⌉ chunks.
pub fn matrix_stride(k: u32) -> u64 {
    (k as u64).div_ceil(VALUES_PER_CHUNK as u64) * CHUNK_LEN as u64
}

/// Bytes of an `Mlp` model header for `layers` layers.
pub fn model_header_len(layers: usize) -> u64 {
    4 + 4 * (layers as u64 + 1)
}

/// Bytes of an `Mlp` model's slice string for widths `w_0 … w_L`.
pub fn model_slices_len(widths: &[u32]) -> u64 {
    let records: u64 = widths
        .windows(2)
        .map(|w| w[1] as u64 * (RECORD_HEAD + w[0] as u64))
        .sum();
    model_header_len(widths.len().saturating_sub(1)) + records
}

/// Byte offset of layer `layer`'s record `o` in an `Mlp` model's slice string.
pub fn record_offset(widths: &[u32], layer: usize, o: u32) -> u64 {
    let before: u64 = widths[..=layer]
        .windows(2)
        .map(|w| w[1] as u64 * (RECORD_HEAD + w[0] as u64))
        .sum();
    model_header_len(widths.len() - 1) + before + o as u64 * (RECORD_HEAD + widths[layer] as u64)
}

/// The slice-string length a part of `role` must have for `job`, where the job alone fixes it
/// (matrices and batches; a model's follows from its header: [`model_slices_len`]).
pub fn expected_len(job: &JobSpec, role: Role) -> Option<u64> {
    let [m, k, n] = job.dims;
    match (job.kind, role) {
        (JobKind::MatMulModP, Role::A) => Some(m as u64 * matrix_stride(k)),
        (JobKind::MatMulModP, Role::B) => Some(n as u64 * matrix_stride(k)),
        (JobKind::Mlp, Role::Batch) => Some(m as u64 * k as u64),
        (JobKind::Encoder, Role::Texts) => Some(m as u64 * encoder::ids_stride(k)),
        (JobKind::Generate, Role::Prompts) => {
            Some(m as u64 * decoder::prompt_stride(k) + decoder::SAMPLING_LEN)
        }
        _ => None,
    }
}

/// The two parts a refereed job on the client's data is recomputed from, in the order the
/// program keeps their slices (`0`, `1`): A and B, or model and batch (an `Encoder`'s texts by
/// their ids).
pub fn refereed_roles(job: &JobSpec) -> Option<[Role; 2]> {
    match job.kind {
        JobKind::MatMulModP => Some([Role::A, Role::B]),
        JobKind::Mlp => Some([Role::Model, Role::Batch]),
        JobKind::Encoder => Some([Role::Model, Role::Texts]),
        JobKind::Generate => Some([Role::Model, Role::Prompts]),
        _ => None,
    }
}

/// Whether widths `w_0 … w_L` are an `Mlp` model's the job can have: 1 ..= 8 layers, every
/// width 1 ..= 4 096, the batch width first, the class count last, and the job's multiply-adds
/// per row.
pub fn widths_fit(job: &JobSpec, widths: &[u32]) -> bool {
    let layers = widths.len().saturating_sub(1);
    let work: u64 = widths.windows(2).map(|w| w[0] as u64 * w[1] as u64).sum();
    (1..=MAX_MLP_LAYERS as usize).contains(&layers)
        && widths.iter().all(|&w| (1..=MAX_MLP_WIDTH).contains(&w))
        && widths[0] == job.dims[1]
        && widths[layers] == job.dims[2]
        && work == job.work_per_row
}

/// Slice strings of the host's own parts, built by keepers and clients.
#[cfg(not(target_os = "solana"))]
pub mod build {
    use super::*;
    use crate::{hash::Digest, infer::Mlp, manifest::Slices};

    /// The slices of a finished slice string: its length and BLAKE3.
    pub fn slices_of(bytes: &[u8]) -> Slices {
        Slices {
            len: bytes.len() as u64,
            root: *blake3::hash(bytes).as_bytes(),
        }
    }

    /// A's slice string: `rows × cols` row-major values, each row padded to its stride.
    pub fn matrix_rows(values: &[u32], rows: u32, cols: u32) -> Vec<u8> {
        let stride = matrix_stride(cols) as usize;
        let mut out = vec![0u8; rows as usize * stride];
        for (r, row) in values.chunks(cols as usize).take(rows as usize).enumerate() {
            for (c, v) in row.iter().enumerate() {
                out[r * stride + 4 * c..][..4].copy_from_slice(&v.to_le_bytes());
            }
        }
        out
    }

    /// B's slice string: `rows × cols` row-major values laid out by columns, each column padded
    /// to its stride.
    pub fn matrix_columns(values: &[u32], rows: u32, cols: u32) -> Vec<u8> {
        let stride = matrix_stride(rows) as usize;
        let mut out = vec![0u8; cols as usize * stride];
        for (r, row) in values.chunks(cols as usize).take(rows as usize).enumerate() {
            for (c, v) in row.iter().enumerate() {
                out[c * stride + 4 * r..][..4].copy_from_slice(&v.to_le_bytes());
            }
        }
        out
    }

    /// An `Mlp` batch's slice string: its int8 values.
    pub fn batch(x: &[i8]) -> Vec<u8> {
        x.iter().map(|&v| v as u8).collect()
    }

    /// An `Mlp` model's slice string: header, then every layer's records.
    pub fn model(m: &Mlp) -> Vec<u8> {
        let mut widths: Vec<u32> = vec![m.layers.first().map_or(0, |l| l.inp as u32)];
        widths.extend(m.layers.iter().map(|l| l.out as u32));
        let mut out = Vec::with_capacity(model_slices_len(&widths) as usize);
        out.extend_from_slice(&(m.layers.len() as u32).to_le_bytes());
        for w in &widths {
            out.extend_from_slice(&w.to_le_bytes());
        }
        for l in &m.layers {
            for o in 0..l.out {
                let (mul, shift) = l.requant.as_ref().map_or((0, 0), |(m, s)| (m[o], s[o]));
                out.extend_from_slice(&l.bias[o].to_le_bytes());
                out.extend_from_slice(&mul.to_le_bytes());
                out.extend_from_slice(&shift.to_le_bytes());
                out.extend(
                    l.weight[o * l.inp..(o + 1) * l.inp]
                        .iter()
                        .map(|&w| w as u8),
                );
            }
        }
        debug_assert_eq!(out.len() as u64, model_slices_len(&widths));
        out
    }

    /// The BLAKE3 chunk tree of a slice string: its leaves are the chunks' chaining values
    /// ([`crate::merkle::chunk_leaf`]), its root the string's BLAKE3.
    pub fn chunk_tree(bytes: &[u8]) -> crate::merkle::MerkleTree {
        let count = chunk_count(bytes.len() as u64);
        crate::merkle::MerkleTree::new(
            bytes
                .chunks(CHUNK_LEN)
                .enumerate()
                .map(|(c, b)| crate::merkle::chunk_leaf(c as u64, count, b))
                .collect(),
        )
    }

    /// The siblings of chunk `index` in `tree` (a [`chunk_tree`] of `count` chunks), bottom-up;
    /// none for a one-chunk string (its leaf is the root) or an index past the string.
    pub fn chunk_path(tree: &crate::merkle::MerkleTree, count: u64, index: u64) -> Vec<Digest> {
        if count > 1 {
            tree.proof(index as u32).unwrap_or_default()
        } else {
            Vec::new()
        }
    }

    /// Chunk `index` of a slice string (its bytes, the last one short) and its siblings to the
    /// root, bottom-up (PROTOCOL §8.7).
    ///
    /// # Panics
    /// If `index` is past the string.
    pub fn chunk_proof(bytes: &[u8], index: u64) -> (Vec<u8>, Vec<Digest>) {
        let count = chunk_count(bytes.len() as u64);
        assert!(index < count, "chunk {index} of {count}");
        let path = chunk_path(&chunk_tree(bytes), count, index);
        (chunk(bytes, index).to_vec(), path)
    }
}

/// Chunk `index` of a slice string (empty past its end; the last one may be short).
pub fn chunk(bytes: &[u8], index: u64) -> &[u8] {
    let start = (index.saturating_mul(CHUNK_LEN as u64)).min(bytes.len() as u64) as usize;
    &bytes[start..(start + CHUNK_LEN).min(bytes.len())]
}

/// Chunks of a slice string of `len` bytes (the last may be short; at least one).
pub fn chunk_count(len: u64) -> u64 {
    len.div_ceil(CHUNK_LEN as u64).max(1)
}

/// Bytes of chunk `index` of a slice string of `len` bytes.
pub fn chunk_len(len: u64, index: u64) -> usize {
    (len.saturating_sub(index * CHUNK_LEN as u64)).min(CHUNK_LEN as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::{build::*, *};
    use crate::merkle::{chunk_leaf, verify_chunk_proof};

    #[test]
    fn matrices_are_laid_out_by_rows_and_columns_at_chunk_strides() {
        assert_eq!(matrix_stride(1), 1024);
        assert_eq!(matrix_stride(256), 1024);
        assert_eq!(matrix_stride(257), 2048);
        let (r, c) = (3u32, 300u32);
        let v: Vec<u32> = (0..r * c).collect();
        let a = matrix_rows(&v, r, c);
        assert_eq!(a.len(), 3 * 2048);
        let at = |b: &[u8], o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
        assert_eq!(at(&a, 2048 + 4 * 299), 599);
        assert_eq!(at(&a, 2048 + 4 * 300), 0, "padding");
        let b = matrix_columns(&v, r, c);
        assert_eq!(b.len(), 300 * 1024);
        // column 7: rows 0, 1, 2 → 7, 307, 607
        assert_eq!(
            [at(&b, 7 * 1024), at(&b, 7 * 1024 + 4), at(&b, 7 * 1024 + 8)],
            [7, 307, 607]
        );
        let job = JobSpec::matmul(3, 300, 3, [0; 32]);
        assert_eq!(expected_len(&job, Role::A), Some(a.len() as u64));
    }

    #[test]
    fn every_chunk_of_a_slice_string_proves_and_a_changed_one_does_not() {
        for len in [1usize, 1000, 1024, 1025, 5000, 9 * 1024] {
            let s: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
            let root = slices_of(&s).root;
            let n = chunk_count(len as u64);
            for c in 0..n {
                let (chunk, path) = chunk_proof(&s, c);
                assert_eq!(chunk.len(), chunk_len(len as u64, c));
                let leaf = chunk_leaf(c, n, &chunk);
                assert!(verify_chunk_proof(&root, c, n, &leaf, &path), "{len} {c}");
                let mut bad = chunk.clone();
                bad[0] ^= 1;
                assert!(!verify_chunk_proof(
                    &root,
                    c,
                    n,
                    &chunk_leaf(c, n, &bad),
                    &path
                ));
            }
        }
    }
}

//! The results' wire format (PROTOCOL §5, Serving results), compressed only as HTTP negotiates
//! (`Accept-Encoding`: zstd or gzip):
//!
//! * `/all`: the T tiles concatenated, each exactly the job's tile length (T·`tile_len` bytes);
//! * `/tiles?i=…`: for each requested index, in the order asked: index (u32 LE), tile length
//!   (u32 LE), the tile, proof length (u32 LE), the proof's digests.
//!
//! Whatever is decoded is checked against the root on chain by the verifier, so the format
//! needs no trust; the decoder refuses what is malformed, truncated or larger than the job
//! implies, and the shape checks refuse an answer that is not exactly what was asked.

use compute_market_protocol::job::JobSpec;

use super::FetchError;
use crate::verify::ProvenTile;

/// Most digests in a proof: the tree over at most 2^32 leaves.
pub const MAX_PROOF: usize = 32;

/// Bytes of a whole result of `job` on the wire.
pub fn all_len(job: &JobSpec) -> u64 {
    u64::from(job.tile_count()) * job.tile_len() as u64
}

/// Most bytes a sampled answer for `n` tiles of `job` can take.
pub fn proven_len(job: &JobSpec, n: usize) -> u64 {
    n as u64 * (12 + job.tile_len() as u64 + 32 * MAX_PROOF as u64)
}

fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn u32(&mut self) -> Result<u32, FetchError> {
        let b = self.bytes(4)?;
        Ok(u32::from_le_bytes(b.try_into().expect("4 bytes")))
    }
    fn bytes(&mut self, n: usize) -> Result<&[u8], FetchError> {
        if self.0.len() < n {
            return Err(FetchError::Invalid("served body is truncated".into()));
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
}

/// Splits a `/all` body into `job`'s tiles: exactly T·`tile_len` bytes.
pub fn decode_all(job: &JobSpec, b: &[u8]) -> Result<Vec<Vec<u8>>, FetchError> {
    if b.len() as u64 != all_len(job) {
        return Err(FetchError::Invalid(format!(
            "served {} bytes, the job's {} tiles are {} bytes",
            b.len(),
            job.tile_count(),
            all_len(job)
        )));
    }
    Ok(b.chunks_exact(job.tile_len()).map(<[u8]>::to_vec).collect())
}

/// Encodes proven tiles.
pub fn encode_proven(tiles: &[ProvenTile]) -> Vec<u8> {
    let mut out = vec![];
    for t in tiles {
        encode_one(&mut out, t);
    }
    out
}

/// Appends one proven tile.
pub fn encode_one(out: &mut Vec<u8>, t: &ProvenTile) {
    put_u32(out, t.index);
    put_u32(out, t.tile.len() as u32);
    out.extend_from_slice(&t.tile);
    put_u32(out, t.proof.len() as u32);
    for d in &t.proof {
        out.extend_from_slice(d);
    }
}

/// Decodes [`encode_proven`] for a request of `asked` tiles of `job`: at most `asked` entries,
/// each tile of the job's tile length and each proof at most [`MAX_PROOF`] digests, or an
/// error naming what is wrong.
pub fn decode_proven(job: &JobSpec, asked: usize, b: &[u8]) -> Result<Vec<ProvenTile>, FetchError> {
    let mut r = Reader(b);
    let mut out = Vec::with_capacity(asked);
    while !r.0.is_empty() {
        if out.len() == asked {
            return Err(FetchError::Invalid(format!(
                "served more than the {asked} tiles asked for"
            )));
        }
        let index = r.u32()?;
        let len = r.u32()? as usize;
        if len != job.tile_len() {
            return Err(FetchError::Invalid(format!(
                "served tile {index} is {len} bytes, the job's tiles are {}",
                job.tile_len()
            )));
        }
        let tile = r.bytes(len)?.to_vec();
        let p = r.u32()? as usize;
        if p > MAX_PROOF {
            return Err(FetchError::Invalid(format!(
                "served tile {index} has a proof of {p} digests"
            )));
        }
        let proof = (0..p)
            .map(|_| Ok(r.bytes(32)?.try_into().expect("32 bytes")))
            .collect::<Result<Vec<[u8; 32]>, FetchError>>()?;
        out.push(ProvenTile { index, tile, proof });
    }
    Ok(out)
}

/// A whole result must be T tiles of the job's tile length.
pub fn check_all_shape(job: &JobSpec, tiles: &[Vec<u8>]) -> Result<(), FetchError> {
    if tiles.len() != job.tile_count() as usize || tiles.iter().any(|t| t.len() != job.tile_len()) {
        return Err(FetchError::Invalid(format!(
            "served {} tiles, the job has {} of {} bytes",
            tiles.len(),
            job.tile_count(),
            job.tile_len()
        )));
    }
    Ok(())
}

/// A sampled answer must be exactly the `asked` tiles, in that order, each of the job's tile
/// length ([`crate::verify::proven_shape`]).
pub fn check_proven_shape(
    job: &JobSpec,
    asked: &[u32],
    served: &[ProvenTile],
) -> Result<(), FetchError> {
    crate::verify::proven_shape(job, asked, served).map_err(FetchError::Invalid)
}

/// An answer from a keeper that may hold only some of the `asked` tiles (a verifier that kept
/// its sample, PROTOCOL §8.12): tiles among those asked, each once, in the order asked, each of
/// the job's tile length. Whether each proves against the root is the caller's check.
pub fn check_subset(job: &JobSpec, asked: &[u32], served: &[ProvenTile]) -> Result<(), FetchError> {
    let mut at = 0usize;
    for s in served {
        match asked[at..].iter().position(|&i| i == s.index) {
            Some(p) => at += p + 1,
            None => {
                return Err(FetchError::Invalid(format!(
                    "served tile {} that was not asked for (or out of order, or twice)",
                    s.index
                )))
            }
        }
        if s.tile.len() != job.tile_len() {
            return Err(FetchError::Invalid(format!(
                "served tile {} is {} bytes, the job's tiles are {}",
                s.index,
                s.tile.len(),
                job.tile_len()
            )));
        }
    }
    Ok(())
}

//! The results' wire format: a simple length-prefixed encoding of tiles (and of tiles with
//! their Merkle proofs), carried in zstd frames. Whatever is decoded is checked against the
//! root on chain by the verifier, so the format needs no trust; the decoder only refuses what
//! is malformed or truncated.

use anyhow::{ensure, Result};

use crate::verify::ProvenTile;

/// zstd level of served bodies.
pub const ZSTD_LEVEL: i32 = 3;

fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn u32(&mut self) -> Result<u32> {
        ensure!(self.0.len() >= 4, "truncated body");
        let v = u32::from_le_bytes(self.0[..4].try_into()?);
        self.0 = &self.0[4..];
        Ok(v)
    }
    fn bytes(&mut self, n: usize) -> Result<&[u8]> {
        ensure!(self.0.len() >= n, "truncated body");
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
}

/// Encodes tiles: count, then (len, bytes) each.
pub fn encode_all(tiles: &[Vec<u8>]) -> Vec<u8> {
    let mut out = vec![];
    put_u32(&mut out, tiles.len() as u32);
    for t in tiles {
        put_u32(&mut out, t.len() as u32);
        out.extend_from_slice(t);
    }
    out
}

/// Decodes [`encode_all`].
pub fn decode_all(b: &[u8]) -> Result<Vec<Vec<u8>>> {
    let mut r = Reader(b);
    let n = r.u32()?;
    (0..n)
        .map(|_| {
            let len = r.u32()? as usize;
            Ok(r.bytes(len)?.to_vec())
        })
        .collect()
}

/// Encodes proven tiles: count, then (index, len, bytes, proof count, proof) each.
pub fn encode_proven(tiles: &[ProvenTile]) -> Vec<u8> {
    let mut out = vec![];
    put_u32(&mut out, tiles.len() as u32);
    for t in tiles {
        put_u32(&mut out, t.index);
        put_u32(&mut out, t.tile.len() as u32);
        out.extend_from_slice(&t.tile);
        put_u32(&mut out, t.proof.len() as u32);
        for d in &t.proof {
            out.extend_from_slice(d);
        }
    }
    out
}

/// Decodes [`encode_proven`].
pub fn decode_proven(b: &[u8]) -> Result<Vec<ProvenTile>> {
    let mut r = Reader(b);
    let n = r.u32()?;
    (0..n)
        .map(|_| {
            let index = r.u32()?;
            let len = r.u32()? as usize;
            let tile = r.bytes(len)?.to_vec();
            let p = r.u32()? as usize;
            let proof = (0..p)
                .map(|_| Ok(r.bytes(32)?.try_into()?))
                .collect::<Result<Vec<[u8; 32]>>>()?;
            Ok(ProvenTile { index, tile, proof })
        })
        .collect()
}

//! Fetching a result from another keeper over HTTP, bounded: one request with a timeout, at
//! most [`MAX_BODY`] compressed bytes read.

use std::io::Read;

use anyhow::{anyhow, Context, Result};

use super::wire::{decode_all, decode_proven};
use crate::verify::ProvenTile;

/// Largest response body accepted (compressed), bytes.
pub const MAX_BODY: u64 = 1 << 30;

fn get(url: &str) -> Result<Vec<u8>> {
    let resp = ureq::get(url)
        .timeout(std::time::Duration::from_secs(30))
        .call()
        .map_err(|e| anyhow!("result URL {url:?} is unreachable: {e}"))?;
    let mut compressed = vec![];
    resp.into_reader()
        .take(MAX_BODY)
        .read_to_end(&mut compressed)
        .with_context(|| format!("reading {url}"))?;
    zstd::decode_all(&compressed[..]).with_context(|| format!("{url} did not return a zstd body"))
}

/// Every tile of the result at `base` (`http://host:port/r/<root>`).
pub fn fetch_all(base: &str) -> Result<Vec<Vec<u8>>> {
    decode_all(&get(&format!("{base}/all"))?)
}

/// Tiles `indices` with proofs of the result at `base`.
pub fn fetch(base: &str, indices: &[u32]) -> Result<Vec<ProvenTile>> {
    let q: Vec<String> = indices.iter().map(|i| i.to_string()).collect();
    decode_proven(&get(&format!("{base}/tiles?i={}", q.join(",")))?)
}

//! Results: a content-addressed store of computed tiles (by Merkle root), the verifier's
//! fetches with proofs (in-process `mem://<root>` for the embedded cluster, `http://` from
//! another keeper), the wire format and the HTTP server that serves the store.
//!
//! One-way layers: [`wire`] (encoding) ← [`client`] (fetch over HTTP) and [`server`] (serve
//! over HTTP) ← this module's [`ResultStore`]; nothing here imports the roles, the chain or
//! the commands.

use std::{
    collections::HashMap,
    sync::{Arc, RwLock},
};

use anyhow::{anyhow, bail, Context, Result};
use compute_market_protocol::{hash::Digest, job::JobSpec, merkle::MerkleTree};

use crate::verify::{commit, ProvenTile};

pub mod client;
pub mod server;
pub mod wire;

pub use server::{serve, HttpServer};

/// One served result.
pub struct ServedResult {
    /// The job.
    pub job: JobSpec,
    /// Its tiles.
    pub tiles: Vec<Vec<u8>>,
    /// The tree over them.
    pub tree: MerkleTree,
}

/// Results by Merkle root.
#[derive(Default)]
pub struct ResultStore {
    results: RwLock<HashMap<Digest, Arc<ServedResult>>>,
    /// When set (`http://host:port`), published URLs point at this keeper's HTTP server.
    pub base_url: Option<String>,
}

/// Lower-case hex of a digest (how roots appear in URLs).
pub fn hex(d: &Digest) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

fn parse_uri(uri: &str) -> Result<Digest> {
    let Some(h) = uri.strip_prefix("mem://") else {
        bail!(
            "unsupported result URL {uri:?} (expected mem://<root> or http://host:port/r/<root>)"
        );
    };
    if h.len() != 64 {
        bail!("result URL {uri:?} does not name a 32-byte root");
    }
    let mut d = [0u8; 32];
    for (i, b) in d.iter_mut().enumerate() {
        *b = u8::from_str_radix(&h[2 * i..2 * i + 2], 16)
            .with_context(|| format!("result URL {uri:?} is not hex"))?;
    }
    Ok(d)
}

impl ResultStore {
    /// A store whose published URLs point at `base_url` (`http://host:port`).
    pub fn serving_at(base_url: impl Into<String>) -> Self {
        ResultStore {
            base_url: Some(base_url.into()),
            ..Default::default()
        }
    }

    /// Stores `tiles` of `job`; returns the root and the URL to publish.
    pub fn publish(&self, job: JobSpec, tiles: Vec<Vec<u8>>) -> (Digest, String) {
        let tree = commit(&tiles);
        let root = tree.root();
        self.results
            .write()
            .expect("store lock")
            .insert(root, Arc::new(ServedResult { job, tiles, tree }));
        let uri = match &self.base_url {
            Some(base) => format!("{base}/r/{}", hex(&root)),
            None => format!("mem://{}", hex(&root)),
        };
        (root, uri)
    }

    fn get(&self, uri: &str) -> Result<Arc<ServedResult>> {
        let root = parse_uri(uri)?;
        self.results
            .read()
            .expect("store lock")
            .get(&root)
            .cloned()
            .ok_or_else(|| {
                anyhow!("result URL {uri:?} is unreachable: nothing served under that root")
            })
    }

    /// Every tile of the result at `uri` (`mem://` from this store, `http://` from a keeper).
    pub fn fetch_all(&self, uri: &str) -> Result<Vec<Vec<u8>>> {
        if uri.starts_with("http://") || uri.starts_with("https://") {
            return client::fetch_all(uri);
        }
        Ok(self.get(uri)?.tiles.clone())
    }

    /// Tiles `indices` of the result at `uri`, with Merkle proofs.
    pub fn fetch(&self, uri: &str, indices: &[u32]) -> Result<Vec<ProvenTile>> {
        if uri.starts_with("http://") || uri.starts_with("https://") {
            return client::fetch(uri, indices);
        }
        let r = self.get(uri)?;
        indices
            .iter()
            .map(|&i| {
                let tile = r
                    .tiles
                    .get(i as usize)
                    .cloned()
                    .ok_or_else(|| anyhow!("tile {i} out of range"))?;
                Ok(ProvenTile {
                    index: i,
                    tile,
                    proof: r.tree.proof(i).expect("in range"),
                })
            })
            .collect()
    }
}

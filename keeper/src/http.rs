//! The keeper's HTTP server and client: results served content-addressed by Merkle root and
//! compressed with zstd, plus `/metrics`.
//!
//! * `GET /r/<root>/all` — every tile of the result;
//! * `GET /r/<root>/tiles?i=3,17,42` — those tiles with their Merkle proofs;
//! * `GET /metrics` — Prometheus text.
//!
//! Bodies are zstd frames of a simple length-prefixed encoding. Whatever comes back is checked
//! against the root on chain by the verifier, so the transport needs no trust.

use std::{io::Read, net::SocketAddr, sync::Arc, thread::JoinHandle};

use anyhow::{anyhow, bail, ensure, Context, Result};

use crate::{metrics::Metrics, tiles::TileStore, verify::ProvenTile};

const ZSTD_LEVEL: i32 = 3;
/// Largest response body accepted (compressed), bytes.
const MAX_BODY: u64 = 1 << 30;

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

fn respond(store: &TileStore, metrics: &Metrics, url: &str) -> Result<(Vec<u8>, &'static str)> {
    if url == "/metrics" {
        return Ok((metrics.render().into_bytes(), "text/plain; version=0.0.4"));
    }
    let rest = url
        .strip_prefix("/r/")
        .ok_or_else(|| anyhow!("not found"))?;
    let (root, what) = rest.split_once('/').ok_or_else(|| anyhow!("not found"))?;
    let uri = format!("mem://{root}");
    let body = if what == "all" {
        encode_all(&store.fetch_all(&uri)?)
    } else if let Some(q) = what.strip_prefix("tiles?i=") {
        let idx = q
            .split(',')
            .map(|x| x.parse::<u32>().context("tile index"))
            .collect::<Result<Vec<_>>>()?;
        encode_proven(&store.fetch(&uri, &idx)?)
    } else {
        bail!("not found");
    };
    Ok((zstd::encode_all(&body[..], ZSTD_LEVEL)?, "application/zstd"))
}

/// Serves `store` and `metrics` on `addr` from a background thread; returns the bound address.
pub fn serve(store: Arc<TileStore>, metrics: Arc<Metrics>, addr: &str) -> Result<HttpServer> {
    let server = Arc::new(
        tiny_http::Server::http(addr).map_err(|e| anyhow!("cannot listen on {addr}: {e}"))?,
    );
    let bound = server
        .server_addr()
        .to_ip()
        .ok_or_else(|| anyhow!("not an IP listener"))?;
    let serving = server.clone();
    let handle = std::thread::spawn(move || {
        let server = serving;
        for req in server.incoming_requests() {
            let url = req.url().to_string();
            let resp = match respond(&store, &metrics, &url) {
                Ok((body, ctype)) => tiny_http::Response::from_data(body)
                    .with_header(
                        tiny_http::Header::from_bytes("Content-Type", ctype).expect("header"),
                    )
                    .with_header(
                        tiny_http::Header::from_bytes(
                            "Cache-Control",
                            "public, max-age=31536000, immutable",
                        )
                        .expect("header"),
                    ),
                Err(e) => {
                    tiny_http::Response::from_data(e.to_string().into_bytes()).with_status_code(404)
                }
            };
            if let Err(e) = req.respond(resp) {
                tracing::debug!(error = %e, "client went away");
            }
        }
    });
    Ok(HttpServer {
        addr: bound,
        server,
        thread: Some(handle),
    })
}

/// A running results server: stops (and releases its port) on [`HttpServer::shutdown`] or
/// when dropped.
pub struct HttpServer {
    /// Where it listens.
    pub addr: SocketAddr,
    server: Arc<tiny_http::Server>,
    thread: Option<JoinHandle<()>>,
}

impl HttpServer {
    /// Stops accepting, finishes the request in hand, and waits for the server thread.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.stop();
    }
}

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

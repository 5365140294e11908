//! The keeper's HTTP server: results content-addressed by Merkle root and compressed with
//! zstd, plus `/metrics`.
//!
//! * `GET /r/<root>/all` — every tile of the result;
//! * `GET /r/<root>/tiles?i=3,17,42` — those tiles with their Merkle proofs;
//! * `GET /metrics` — Prometheus text.

use std::{net::SocketAddr, sync::Arc, thread::JoinHandle};

use anyhow::{anyhow, bail, Context, Result};

use super::{
    wire::{encode_all, encode_proven, ZSTD_LEVEL},
    ResultStore,
};
use crate::metrics::Metrics;

fn respond(store: &ResultStore, metrics: &Metrics, url: &str) -> Result<(Vec<u8>, &'static str)> {
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
pub fn serve(store: Arc<ResultStore>, metrics: Arc<Metrics>, addr: &str) -> Result<HttpServer> {
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

//! The keeper's HTTP server (hyper under `axum`, layers from `tower-http`): results
//! content-addressed by Merkle root, plus `/metrics`.
//!
//! * `GET /r/<root>/all` — every tile of the result, streamed;
//! * `GET /r/<root>/tiles?i=3,17,42` — those tiles (distinct, each `< T`, at most
//!   [`ServerLimits::max_indices`]) with their Merkle proofs;
//! * `GET /metrics` — Prometheus text;
//! * `GET /provider` — the provider's card ([`crate::card`]).
//!
//! Results are served under the roots of this keeper's own results and of those its verifier
//! kept (PROTOCOL §8.12): of a result kept whole, the same; of one whose sampled tiles only
//! were kept, `/tiles` answers those of the asked tiles it holds, in the order asked (none: an
//! empty body), and `/all` is 404.
//!
//! Any client may connect, so nothing one client does may keep the others from being served:
//! each connection is its own task (a reader that stops reading stalls only itself, and only
//! until [`ServerLimits::connection_lifetime`]); request heads are bounded in size and in the
//! time they may take to arrive; connections are admitted by fair shares that shrink with
//! load, a full server evicting an idle connection of the largest holder for a newcomer, and
//! a market's nodes (signed requests) kept ahead of strangers ([`super::admission`]);
//! transfers are capped per peer (an IPv4 address or an IPv6 /64) and in all, refused with
//! 503 and `Retry-After` beyond that; content objects are streamed from disk, only the range
//! asked for being read; bodies are compressed as the client's `Accept-Encoding` asks (zstd,
//! gzip); CORS lets a dApp in a browser fetch results.

use std::{
    collections::HashMap,
    convert::Infallible,
    net::{IpAddr, SocketAddr},
    os::unix::fs::FileExt,
    sync::{Arc, Mutex},
    thread::JoinHandle,
    time::{Duration, Instant},
};

use anchor_lang::prelude::Pubkey;

use anyhow::{Context, Result};
use axum::{
    body::Body,
    extract::{Path, RawQuery, State},
    http::{header, HeaderValue, Method, Request, StatusCode},
    response::{IntoResponse, Response},
    routing::get,
    Extension, Router,
};
use bytes::Bytes;
use futures_util::StreamExt;
use hyper_util::rt::{TokioIo, TokioTimer};
use tower::ServiceExt;
use tower_http::{
    compression::{CompressionLayer, CompressionLevel},
    cors::CorsLayer,
    timeout::TimeoutLayer,
};

use super::{
    admission::{peer_key, verify_request, Admission, Conn, Place, Progress, Signers, Verdict},
    content::Opened,
    parse_hex_digest,
    wire::encode_one,
    ResultStore,
};
use crate::metrics::Metrics;
use crate::verify::ProvenTile;

/// How much of the server one client can take.
#[derive(Clone, Debug)]
pub struct ServerLimits {
    /// Strangers' connections open at once (connections of admitted nodes are counted apart,
    /// [`ServerLimits::node_connections`]). When full, a newcomer from a peer holding fewer
    /// connections than the largest holder closes an idle connection of that holder; else it
    /// is closed on accept.
    pub max_connections: usize,
    /// Result transfers in flight at once, in all.
    pub transfers: usize,
    /// Result transfers in flight at once from one peer.
    pub transfers_per_peer: usize,
    /// Transfers of results in their voting window (marked hot by their provider,
    /// [`ResultStore::set_hot`]) in flight at once, in all: a pool of their own, so bulk
    /// traffic (clients pulling results, keepers fetching inputs) cannot make a verifier miss
    /// its commit deadline.
    pub urgent_transfers: usize,
    /// The same from one peer.
    pub urgent_per_peer: usize,
    /// Uploads (`PUT /c/<hash>`) in flight at once, in all: a pool of their own, so uploads
    /// that send nothing cannot hold the transfers downloads need.
    pub uploads: usize,
    /// The same from one peer.
    pub uploads_per_peer: usize,
    /// Bytes of content objects being read for their bodies at once: each `GET /c/` streams
    /// its range a chunk (at most 256 KiB) at a time and holds one chunk's worth of this
    /// budget while it streams; beyond it a `GET /c/` is answered `503`.
    pub content_bytes_in_flight: u64,
    /// Longest a request head may take to arrive (idle and slow-header connections end).
    pub header_timeout: Duration,
    /// Longest a connection may stay open, whatever it does.
    pub connection_lifetime: Duration,
    /// The window over which a transfer's rate is judged ([`ServerLimits::min_rate`]).
    pub stall_timeout: Duration,
    /// Longest a response may take to start.
    pub response_timeout: Duration,
    /// Largest request head, bytes (the request line with its query included).
    pub max_request_head: usize,
    /// Most tiles one `/tiles` request may ask for (a verifier's k ≤ `MAX_SAMPLES`).
    pub max_indices: usize,
    /// Connections open at once from one peer while strangers hold at most half of
    /// [`ServerLimits::max_connections`]; past that the allowance falls linearly to
    /// [`ServerLimits::connections_per_peer_min`] at the cap, so that a few hundred addresses
    /// cannot fill the server.
    pub connections_per_peer: usize,
    /// The least a peer may hold however full the server is.
    pub connections_per_peer_min: usize,
    /// Connections of admitted nodes (a request on them signed by a key in
    /// [`HttpServer::admitted`]) open at once, apart from the strangers' cap: never evicted.
    /// Each signer holds at most its share by stake (a place at least while the pool has one
    /// for every signer, [`super::admission::Admitted::share`]), and never more than
    /// [`ServerLimits::connections_per_peer`]. Past it a node's connection stays in the
    /// strangers' places.
    pub node_connections: usize,
    /// Transfers of admitted nodes' signed requests in flight at once, in all: a pool
    /// strangers cannot draw from (a node's request finding it full, or its signer holding
    /// its share by stake of it, falls back to the strangers' pools).
    pub node_transfers: usize,
    /// The most for one signer, whatever its stake.
    pub node_transfers_per_signer: usize,
    /// How far a signed request's time may be from the server's clock; a request signed
    /// longer ago (or ahead) is a stranger's.
    pub signature_skew: Duration,
    /// The names (`host[:port]`, as a request's `Host` says them) this server answers to: an
    /// admitted node's signed request naming another host — a signature collected by another
    /// server, replayed here — is refused with `403`. Empty: any name (a library server that
    /// cannot know its names; `keeper run` and `keeper serve` set their public URL's and their
    /// listening address's, [`own_hosts`]).
    pub own_hosts: Vec<String>,
    /// Least rate a transfer must keep, bytes per second averaged over each
    /// [`ServerLimits::stall_timeout`]: a reader slower than that (or stopped) loses its
    /// connection, so a few slow readers cannot hold every transfer for the connection's life.
    pub min_rate: u64,
    /// Origins a browser page may call the content store and results from (`PUT`/`GET /c/`,
    /// `GET /r/`), as `scheme://host[:port]`, or `*` for any; none (the default): no CORS
    /// headers, so no page elsewhere can upload into the store. `/metrics` never has them.
    pub cors_origins: Vec<String>,
}

impl Default for ServerLimits {
    fn default() -> Self {
        ServerLimits {
            max_connections: 4096,
            transfers: 64,
            transfers_per_peer: 8,
            urgent_transfers: 64,
            urgent_per_peer: 8,
            uploads: 8,
            uploads_per_peer: 2,
            content_bytes_in_flight: 1 << 30,
            header_timeout: Duration::from_secs(10),
            connection_lifetime: Duration::from_secs(300),
            stall_timeout: Duration::from_secs(10),
            response_timeout: Duration::from_secs(30),
            max_request_head: 64 << 10,
            max_indices: compute_market::constants::MAX_SAMPLES as usize,
            connections_per_peer: 32,
            connections_per_peer_min: 4,
            node_connections: 1024,
            node_transfers: 64,
            node_transfers_per_signer: 16,
            signature_skew: Duration::from_secs(60),
            own_hosts: vec![],
            min_rate: 32 << 10,
            cors_origins: vec![],
        }
    }
}

/// The peer of a connection.
#[derive(Clone, Copy)]
struct Peer(SocketAddr);

/// A transfer in flight: its place among the peer's transfers, and its connection's progress.
struct Transfer {
    _permit: Permit,
    progress: Arc<Progress>,
}

impl Transfer {
    fn new(permit: Permit, conn: &Conn) -> Self {
        let progress = conn.progress.clone();
        progress
            .active
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        progress.touch(0);
        Transfer {
            _permit: permit,
            progress,
        }
    }
}

impl Drop for Transfer {
    fn drop(&mut self) {
        self.progress
            .active
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Who holds a transfer place: a peer (strangers), or an admitted node's key.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Holder {
    Peer(IpAddr),
    Node(Pubkey),
}

/// Transfer places in use, per holder and in all.
#[derive(Default)]
struct Transfers {
    held: Mutex<(usize, HashMap<Holder, usize>)>,
}

/// One transfer's place; released when the body is done or dropped.
struct Permit {
    transfers: Arc<Transfers>,
    key: Holder,
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut h = self.transfers.held.lock().expect("transfers lock");
        h.0 -= 1;
        if let Some(n) = h.1.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                h.1.remove(&self.key);
            }
        }
    }
}

impl Transfers {
    fn acquire(self: &Arc<Self>, ip: IpAddr, limits: &ServerLimits) -> Option<Permit> {
        self.take(
            Holder::Peer(peer_key(ip)),
            limits.transfers_per_peer,
            limits.transfers,
        )
    }

    /// A place for `key`: at most `per_holder` of them, `all` in all.
    fn take(self: &Arc<Self>, key: Holder, per_holder: usize, all: usize) -> Option<Permit> {
        let mut h = self.held.lock().expect("transfers lock");
        let mine = h.1.get(&key).copied().unwrap_or(0);
        if h.0 >= all || mine >= per_holder {
            return None;
        }
        h.0 += 1;
        *h.1.entry(key).or_default() += 1;
        Some(Permit {
            transfers: self.clone(),
            key,
        })
    }
}

#[derive(Clone)]
struct App {
    store: Arc<ResultStore>,
    metrics: Arc<Metrics>,
    limits: Arc<ServerLimits>,
    transfers: Arc<Transfers>,
    urgent: Arc<Transfers>,
    uploads: Arc<Transfers>,
    /// Admitted nodes' signed transfers ([`ServerLimits::node_transfers`]).
    nodes: Arc<Transfers>,
    /// The admitted signers and their stakes (their shares of `nodes`).
    admitted: Signers,
    /// Bytes of content objects held by `GET /c/` bodies now.
    reading: Arc<std::sync::atomic::AtomicU64>,
}

/// A share of [`App::reading`], given back when the body that holds it is done.
struct Reading {
    bytes: u64,
    total: Arc<std::sync::atomic::AtomicU64>,
}

impl Drop for Reading {
    fn drop(&mut self) {
        self.total
            .fetch_sub(self.bytes, std::sync::atomic::Ordering::Relaxed);
    }
}

impl App {
    /// A place in the nodes' pool for a connection whose requests an admitted node signed,
    /// within its signer's share by stake of the pool.
    fn node_place(&self, conn: &Conn) -> Option<Permit> {
        let signer = conn.signer.get()?;
        let share = self
            .admitted
            .read()
            .expect("signers lock")
            .share(signer, self.limits.node_transfers, 1)
            .min(self.limits.node_transfers_per_signer);
        self.nodes
            .take(Holder::Node(*signer), share, self.limits.node_transfers)
    }

    /// A transfer place for `ip` to fetch the result under `root`: from the nodes' pool for
    /// an admitted node, else from the urgent pool while the result is in its voting window,
    /// else from the bulk one.
    fn place_for(
        &self,
        root: &compute_market_protocol::hash::Digest,
        ip: IpAddr,
        conn: &Conn,
    ) -> Option<Permit> {
        if let Some(p) = self.node_place(conn) {
            return Some(p);
        }
        if self.store.is_hot(root) {
            self.urgent.take(
                Holder::Peer(peer_key(ip)),
                self.limits.urgent_per_peer,
                self.limits.urgent_transfers,
            )
        } else {
            self.transfers.acquire(ip, &self.limits)
        }
    }
}

fn refuse(status: StatusCode, msg: impl Into<String>) -> Response {
    (status, msg.into()).into_response()
}

fn busy() -> Response {
    let mut r = refuse(
        StatusCode::SERVICE_UNAVAILABLE,
        "too many transfers in flight; retry",
    );
    r.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    r
}

/// Bytes of a body sampled to decide whether compressing it pays.
const SAMPLE: usize = 64 << 10;

/// Largest body compressed on the fly: compression runs once per request on the server's few
/// worker threads, so larger bodies go as they are (a stranger asking again and again for a
/// large compressible object must not cost the server a compression each time).
pub const COMPRESS_MAX: u64 = 16 << 20;

/// Whether compressing a body that starts with `sample` pays: zstd at its fastest level must
/// shrink the sample below 90% (random field elements do not compress; int8 activations and
/// zero padding do). A body that does not pay is sent as it is (`Content-Encoding: identity`
/// keeps the compression layer off it), saving both sides the CPU.
pub fn compression_pays(sample: &[u8]) -> bool {
    let sample = &sample[..sample.len().min(SAMPLE)];
    if sample.len() < 1024 {
        return true;
    }
    zstd::bulk::compress(sample, 1).is_ok_and(|c| (c.len() as f64) < 0.9 * sample.len() as f64)
}

/// Marks `r` as sent uncompressed unless `pays`.
fn encoding(mut r: Response, pays: bool) -> Response {
    if !pays {
        r.headers_mut().insert(
            header::CONTENT_ENCODING,
            HeaderValue::from_static("identity"),
        );
    }
    r
}

/// A streamed, immutable body of `len` bytes, compressed only when it `pays` (fused: hyper may
/// poll a stream once more after its end).
fn streamed<S>(stream: S, len: u64, pays: bool) -> Response
where
    S: futures_util::Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static,
{
    let mut r = Body::from_stream(stream.fuse()).into_response();
    r.headers_mut()
        .insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    immutable(encoding(r, pays))
}

fn immutable(mut r: Response) -> Response {
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=31536000, immutable"),
    );
    r
}

/// What is served under a root: a whole result, or the sampled tiles a verifier kept.
enum Served {
    Whole(Arc<super::Entry>),
    Sampled(Arc<super::reserve::Sampled>),
}

fn lookup_any(app: &App, root: &str) -> Result<Served, Response> {
    let d = parse_hex_digest(root)
        .ok_or_else(|| refuse(StatusCode::BAD_REQUEST, "a root is 64 hex characters"))?;
    if let Some(e) = app.store.served(&d) {
        return Ok(Served::Whole(e));
    }
    app.store
        .reserve
        .sampled(&d)
        .map(Served::Sampled)
        .ok_or_else(|| refuse(StatusCode::NOT_FOUND, "nothing served under that root"))
}

fn lookup(app: &App, root: &str) -> Result<Arc<super::Entry>, Response> {
    match lookup_any(app, root)? {
        Served::Whole(e) => Ok(e),
        Served::Sampled(s) => Err(refuse(
            StatusCode::NOT_FOUND,
            format!(
                "this keeper holds only {} tiles of that result, with their proofs: ask for them at /tiles?i=…",
                s.tiles.len()
            ),
        )),
    }
}

/// Tiles per chunk of a streamed `/all` body.
const CHUNK_TILES: u32 = 16;

async fn all(
    State(app): State<App>,
    Extension(Peer(peer)): Extension<Peer>,
    Extension(conn): Extension<Arc<Conn>>,
    Path(root): Path<String>,
) -> Response {
    let entry = match lookup(&app, &root) {
        Ok(e) => e,
        Err(r) => return r,
    };
    let Some(permit) = app.place_for(&entry.root, peer.ip(), &conn) else {
        app.metrics.http_busy.inc();
        return busy();
    };
    let len = super::wire::all_len(&entry.job);
    // the first tile is read for the sample only when the body is small enough to compress
    let pays = len <= COMPRESS_MAX && {
        let e = entry.clone();
        match tokio::task::spawn_blocking(move || e.tile(0)).await {
            Ok(Ok(t)) => compression_pays(&t),
            _ => true,
        }
    };
    let transfer = Transfer::new(permit, &conn);
    let count = entry.count();
    let deadline = Instant::now() + app.limits.connection_lifetime;
    // the transfer travels with the body: released when it ends, however it ends
    let stream = futures_util::stream::unfold(
        (0u32, entry, transfer),
        move |(i, entry, transfer)| async move {
            if i >= count {
                return None;
            }
            if Instant::now() > deadline {
                let e = std::io::Error::new(std::io::ErrorKind::TimedOut, "transfer too slow");
                return Some((Err(e), (count, entry, transfer)));
            }
            let end = (i + CHUNK_TILES).min(count);
            let e = entry.clone();
            let chunk = tokio::task::spawn_blocking(move || {
                let mut out = Vec::with_capacity((end - i) as usize * e.tile_len());
                for t in i..end {
                    out.extend_from_slice(&e.tile(t)?);
                }
                Ok::<_, anyhow::Error>(Bytes::from(out))
            })
            .await
            .map_err(std::io::Error::other)
            .and_then(|r| r.map_err(std::io::Error::other));
            if let Ok(b) = &chunk {
                transfer.progress.touch(b.len() as u64);
            }
            Some((chunk, (end, entry, transfer)))
        },
    );
    streamed(stream, len, pays)
}

async fn tiles(
    State(app): State<App>,
    Extension(Peer(peer)): Extension<Peer>,
    Extension(conn): Extension<Arc<Conn>>,
    Path(root): Path<String>,
    RawQuery(query): RawQuery,
) -> Response {
    let served = match lookup_any(&app, &root) {
        Ok(s) => s,
        Err(r) => return r,
    };
    let count = match &served {
        Served::Whole(e) => e.count(),
        Served::Sampled(s) => s.job.tile_count(),
    };
    let Some(list) = query.as_deref().and_then(|q| q.strip_prefix("i=")) else {
        return refuse(StatusCode::BAD_REQUEST, "expected ?i=<index>,<index>,…");
    };
    let most = app.limits.max_indices.min(count as usize);
    let mut indices: Vec<u32> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for part in list.split(',') {
        if indices.len() == most {
            return refuse(
                StatusCode::BAD_REQUEST,
                format!("at most {most} tiles per request"),
            );
        }
        let Ok(i) = part.parse::<u32>() else {
            return refuse(
                StatusCode::BAD_REQUEST,
                format!("{part:?} is not a tile index"),
            );
        };
        if i >= count {
            return refuse(
                StatusCode::BAD_REQUEST,
                format!("tile {i} out of range (T = {count})"),
            );
        }
        if !seen.insert(i) {
            return refuse(StatusCode::BAD_REQUEST, format!("tile {i} asked twice"));
        }
        indices.push(i);
    }
    let entry = match served {
        Served::Whole(e) => e,
        Served::Sampled(s) => {
            // the tiles a verifier kept: those asked for that it holds, in the order asked
            let Some(permit) = app.place_for(&s.root, peer.ip(), &conn) else {
                app.metrics.http_busy.inc();
                return busy();
            };
            let transfer = Transfer::new(permit, &conn);
            let body = super::wire::encode_proven(&s.held(&indices));
            transfer.progress.touch(body.len() as u64);
            let mut r = Body::from(body).into_response();
            let h = r.headers_mut();
            h.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/octet-stream"),
            );
            // another verifier's tiles may be kept here later: not for caches to keep
            h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            return r;
        }
    };
    let Some(permit) = app.place_for(&entry.root, peer.ip(), &conn) else {
        app.metrics.http_busy.inc();
        return busy();
    };
    let indices = Arc::new(indices);
    let transfer = Transfer::new(permit, &conn);
    // the tree first (rebuilt from the stored leaves when not cached), then one tile at a time
    let e = entry.clone();
    let tree = match tokio::task::spawn_blocking(move || e.tree()).await {
        Ok(Ok(t)) => t,
        Ok(Err(e)) => return refuse(StatusCode::INTERNAL_SERVER_ERROR, format!("{e:#}")),
        Err(e) => return refuse(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    let stream = futures_util::stream::unfold(
        (0usize, entry, tree, transfer),
        move |(n, entry, tree, transfer)| {
            let indices = indices.clone();
            async move {
                if n >= indices.len() {
                    return None;
                }
                // as many tiles as make about 1 MiB per chunk (at least one)
                let per = ((1usize << 20) / entry.tile_len().max(1)).max(1);
                let end = (n + per).min(indices.len());
                let (e, t, idx) = (entry.clone(), tree.clone(), indices.clone());
                let chunk = tokio::task::spawn_blocking(move || {
                    let mut out = Vec::new();
                    for &i in &idx[n..end] {
                        let tile = ProvenTile {
                            index: i,
                            tile: e.tile(i)?,
                            proof: t.proof(i).context("tile out of range")?,
                        };
                        encode_one(&mut out, &tile);
                    }
                    Ok::<_, anyhow::Error>(Bytes::from(out))
                })
                .await
                .map_err(std::io::Error::other)
                .and_then(|r| r.map_err(std::io::Error::other));
                if let Ok(b) = &chunk {
                    transfer.progress.touch(b.len() as u64);
                }
                Some((chunk, (end, entry, tree, transfer)))
            }
        },
    );
    immutable(Body::from_stream(stream.fuse()).into_response())
}

/// The object named by `hash` and a transfer place for `peer`, or the answer refusing them.
fn admit(
    app: &App,
    peer: SocketAddr,
    conn: &Conn,
    hash: &str,
    upload: bool,
) -> Result<(compute_market_protocol::hash::Digest, Permit), Response> {
    let d = parse_hex_digest(hash).ok_or_else(|| {
        refuse(
            StatusCode::BAD_REQUEST,
            "a content hash is 64 hex characters",
        )
    })?;
    let permit = if upload {
        app.uploads.take(
            Holder::Peer(peer_key(peer.ip())),
            app.limits.uploads_per_peer,
            app.limits.uploads,
        )
    } else {
        app.node_place(conn)
            .or_else(|| app.transfers.acquire(peer.ip(), &app.limits))
    };
    let permit = permit.ok_or_else(|| {
        app.metrics.http_busy.inc();
        busy()
    })?;
    Ok((d, permit))
}

/// Bytes per chunk of a streamed `/c/<hash>` body.
const CONTENT_CHUNK: usize = 256 << 10;

/// Where a `/c/` body's bytes come from.
#[derive(Clone)]
enum Source {
    Memory(Arc<Vec<u8>>),
    File(Arc<std::fs::File>),
}

impl Source {
    /// Bytes `at..at + n`, read from the file only as far as asked.
    async fn read(&self, at: u64, n: usize) -> std::io::Result<Bytes> {
        match self {
            Source::Memory(b) => Ok(Bytes::copy_from_slice(&b[at as usize..at as usize + n])),
            Source::File(f) => {
                let f = f.clone();
                tokio::task::spawn_blocking(move || {
                    let mut buf = vec![0u8; n];
                    f.read_exact_at(&mut buf, at)?;
                    Ok(Bytes::from(buf))
                })
                .await
                .map_err(std::io::Error::other)?
            }
        }
    }
}

/// `GET` (and `HEAD`) `/c/<hash>`: an object of the content store, streamed from where it
/// lies, only the range asked for being read; `HEAD` reads nothing.
async fn content_get(
    State(app): State<App>,
    Extension(Peer(peer)): Extension<Peer>,
    Extension(conn): Extension<Arc<Conn>>,
    method: Method,
    Path(hash): Path<String>,
    headers: axum::http::HeaderMap,
) -> Response {
    if method == Method::HEAD {
        let Some(d) = parse_hex_digest(&hash) else {
            return refuse(
                StatusCode::BAD_REQUEST,
                "a content hash is 64 hex characters",
            );
        };
        let Some(len) = app.store.content.len_of(&d) else {
            return refuse(StatusCode::NOT_FOUND, "no object under that hash");
        };
        return match ranged(&headers, len) {
            Err(r) => r,
            Ok(range) => {
                let (start, end) = range.unwrap_or((0, len));
                let r = encoding(Body::empty().into_response(), false);
                content_headers(immutable(r), range, start, end, len)
            }
        };
    }
    let (d, permit) = match admit(&app, peer, &conn, &hash, false) {
        Ok(v) => v,
        Err(r) => return r,
    };
    let store = app.store.clone();
    let opened = tokio::task::spawn_blocking(move || store.content.open_checked(&d)).await;
    let (source, len) = match opened {
        Ok(Ok(Opened::Memory(b))) => {
            let len = b.len() as u64;
            (Source::Memory(b), len)
        }
        Ok(Ok(Opened::File(f, len))) => (Source::File(Arc::new(f)), len),
        Ok(Ok(Opened::Missing)) => {
            return refuse(StatusCode::NOT_FOUND, "no object under that hash")
        }
        Ok(Ok(Opened::Checking)) => {
            app.metrics.http_busy.inc();
            let mut r = refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                "the object is being checked against its hash; retry",
            );
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            return r;
        }
        Ok(Err(e)) => {
            tracing::warn!(object = %hash, error = %e, "cannot read a content object now");
            let mut r = refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("the object cannot be read now ({e}); retry"),
            );
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            return r;
        }
        Err(e) => return refuse(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    // a download resuming after a cut asks for the rest: one range, sent uncompressed
    let range = match ranged(&headers, len) {
        Ok(r) => r,
        Err(r) => return r,
    };
    let (start, end) = range.unwrap_or((0, len));
    // what this body holds at once against the budget: one chunk, not the object
    let held = (end - start).min(CONTENT_CHUNK as u64);
    use std::sync::atomic::Ordering;
    if app.reading.fetch_add(held, Ordering::Relaxed) + held > app.limits.content_bytes_in_flight {
        app.reading.fetch_sub(held, Ordering::Relaxed);
        app.metrics.http_busy.inc();
        return busy();
    }
    let reading = Reading {
        bytes: held,
        total: app.reading.clone(),
    };
    // compression is judged on the first 64 KiB, read only for a whole body small enough
    let pays = range.is_none()
        && len <= COMPRESS_MAX
        && match source.read(0, len.min(SAMPLE as u64) as usize).await {
            Ok(sample) => compression_pays(&sample),
            Err(_) => true,
        };
    let transfer = Transfer::new(permit, &conn);
    let stream = futures_util::stream::unfold(
        (start, source, transfer, reading),
        move |(at, source, transfer, reading)| async move {
            if at >= end {
                return None;
            }
            let n = (end - at).min(CONTENT_CHUNK as u64) as usize;
            match source.read(at, n).await {
                Ok(chunk) => {
                    transfer.progress.touch(chunk.len() as u64);
                    Some((Ok(chunk), (at + n as u64, source, transfer, reading)))
                }
                // the body ends with the error: the client sees a cut-off transfer
                Err(e) => Some((Err(e), (end, source, transfer, reading))),
            }
        },
    );
    content_headers(streamed(stream, end - start, pays), range, start, end, len)
}

/// The `Range` of a `/c/` request against an object of `len` bytes: `Ok(None)` for the whole
/// object, or the 416 refusing it (a `Response` by value, as [`lookup`] and [`admit`]).
#[allow(clippy::result_large_err)]
fn ranged(headers: &axum::http::HeaderMap, len: u64) -> Result<Option<(u64, u64)>, Response> {
    match headers
        .get(header::RANGE)
        .map(|v| byte_range(v.as_bytes(), len as usize))
    {
        None | Some(Range::Ignored) => Ok(None),
        Some(Range::Unsatisfiable) => {
            let mut r = refuse(
                StatusCode::RANGE_NOT_SATISFIABLE,
                "the range asked for is not within the object",
            );
            r.headers_mut().insert(
                header::CONTENT_RANGE,
                HeaderValue::from_str(&format!("bytes */{len}")).expect("ascii"),
            );
            Err(r)
        }
        Some(Range::Bytes(a, b)) => Ok(Some((a as u64, b as u64))),
    }
}

/// A `/c/` answer's length and range headers.
fn content_headers(
    mut r: Response,
    range: Option<(u64, u64)>,
    start: u64,
    end: u64,
    len: u64,
) -> Response {
    r.headers_mut()
        .insert(header::CONTENT_LENGTH, HeaderValue::from(end - start));
    r.headers_mut()
        .insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    if range.is_some() {
        *r.status_mut() = StatusCode::PARTIAL_CONTENT;
        r.headers_mut().insert(
            header::CONTENT_RANGE,
            HeaderValue::from_str(&format!("bytes {start}-{}/{len}", end - 1)).expect("ascii"),
        );
    }
    r
}

/// A `Range` header read against an object of `len` bytes.
#[derive(Debug, PartialEq, Eq)]
enum Range {
    /// Bytes `start..end`.
    Bytes(usize, usize),
    /// Outside the object: 416.
    Unsatisfiable,
    /// Not one byte range (several, another unit, malformed): the whole object is sent, as
    /// RFC 9110 §14.2 allows.
    Ignored,
}

/// Reads `bytes=<first>-[<last>]` or `bytes=-<suffix>` (one range only).
fn byte_range(v: &[u8], len: usize) -> Range {
    if len == 0 {
        // no byte of an empty object can be asked for (RFC 9110 §14.1.2)
        return if v.starts_with(b"bytes=") {
            Range::Unsatisfiable
        } else {
            Range::Ignored
        };
    }
    let Some(spec) = std::str::from_utf8(v)
        .ok()
        .and_then(|v| v.trim().strip_prefix("bytes="))
    else {
        return Range::Ignored;
    };
    if spec.contains(',') {
        return Range::Ignored;
    }
    let Some((a, b)) = spec.trim().split_once('-') else {
        return Range::Ignored;
    };
    let num = |x: &str| x.trim().parse::<u64>().ok();
    match (a.trim().is_empty(), b.trim().is_empty()) {
        // the last `b` bytes
        (true, false) => match num(b) {
            Some(0) => Range::Unsatisfiable,
            Some(n) => Range::Bytes(len.saturating_sub(n.min(len as u64) as usize), len),
            None => Range::Ignored,
        },
        (false, _) => {
            let (Some(first), last) = (num(a), if b.trim().is_empty() { None } else { num(b) })
            else {
                return Range::Ignored;
            };
            if !b.trim().is_empty() && last.is_none_or(|l| l < first) {
                return Range::Ignored;
            }
            if first >= len as u64 {
                return Range::Unsatisfiable;
            }
            let end = last.map_or(len as u64, |l| l.saturating_add(1).min(len as u64));
            Range::Bytes(first as usize, end as usize)
        }
        (true, true) => Range::Ignored,
    }
}

/// Bytes of an upload gathered before they are written out (and hashed) in one go.
const UPLOAD_BATCH: usize = 1 << 20;

/// `PUT /c/<hash>`: stores the body if it hashes to `<hash>`, within the object size cap and
/// the store's budget (an upload never evicts what is in use). The body is hashed as it is
/// written to a temporary file, a batch of at most [`UPLOAD_BATCH`] bytes at a time, so an
/// upload holds about a megabyte of memory whatever its size; it becomes the object only if
/// it matches, else the file is deleted.
async fn content_put(
    State(app): State<App>,
    Extension(Peer(peer)): Extension<Peer>,
    Extension(conn): Extension<Arc<Conn>>,
    Path(hash): Path<String>,
    headers: axum::http::HeaderMap,
    body: Body,
) -> Response {
    use super::content::PutError;
    let (d, permit) = match admit(&app, peer, &conn, &hash, true) {
        Ok(v) => v,
        Err(r) => return r,
    };
    let max = app.store.content.max_object;
    // refused before a byte of the body is read: too large as announced, or held already
    let announced = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if announced.is_some_and(|n| n > max) {
        return refuse(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("an object is at most {max} bytes here"),
        );
    }
    if app.store.content.contains(&d) {
        // held already: the body is read and dropped before the answer, so that a client
        // still sending it never has its connection closed mid-body (clients ask with a HEAD
        // first; this is a race's, or an older client's, upload)
        let transfer = Transfer::new(permit, &conn);
        let (mut read, mut frames) = (0u64, body.into_data_stream());
        while let Some(frame) = frames.next().await {
            let Ok(frame) = frame else {
                return refuse(StatusCode::BAD_REQUEST, "the upload broke off");
            };
            read += frame.len() as u64;
            if read > max {
                return refuse(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("an object is at most {max} bytes here"),
                );
            }
            transfer.progress.touch(frame.len() as u64);
        }
        return StatusCode::CREATED.into_response();
    }
    let refused = |e: PutError| match e {
        PutError::HashMismatch => refuse(StatusCode::BAD_REQUEST, e.to_string()),
        PutError::TooLarge(_) => refuse(StatusCode::PAYLOAD_TOO_LARGE, e.to_string()),
        PutError::OverBudget => refuse(StatusCode::INSUFFICIENT_STORAGE, e.to_string()),
        PutError::Io(_) => refuse(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    let store = app.store.clone();
    let mut upload = match tokio::task::spawn_blocking(move || store.content.upload(&d)).await {
        Ok(Ok(u)) => u,
        Ok(Err(e)) => {
            return refuse(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("cannot start the upload: {e}"),
            )
        }
        Err(e) => return refuse(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    // writes (and hashes) a batch off the runtime's threads
    async fn flush(
        mut upload: super::content::Upload,
        batch: Vec<u8>,
    ) -> Result<super::content::Upload, Response> {
        let done = tokio::task::spawn_blocking(move || {
            let r = upload.write(&batch);
            (upload, r)
        })
        .await;
        match done {
            Ok((u, Ok(()))) => Ok(u),
            Ok((_, Err(e))) => Err(refuse(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())),
            Err(e) => Err(refuse(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())),
        }
    }
    let transfer = Transfer::new(permit, &conn);
    // read frame by frame, counted by the stall watchdog: an upload that sends nothing loses
    // its connection like a reader that reads nothing
    let mut batch = Vec::new();
    let mut frames = body.into_data_stream();
    while let Some(frame) = frames.next().await {
        let Ok(frame) = frame else {
            return refuse(StatusCode::BAD_REQUEST, "the upload broke off");
        };
        if upload.len() + (batch.len() + frame.len()) as u64 > max {
            return refused(PutError::TooLarge(max));
        }
        transfer.progress.touch(frame.len() as u64);
        batch.extend_from_slice(&frame);
        if batch.len() >= UPLOAD_BATCH {
            upload = match flush(upload, std::mem::take(&mut batch)).await {
                Ok(u) => u,
                Err(r) => return r,
            };
        }
    }
    if !batch.is_empty() {
        upload = match flush(upload, batch).await {
            Ok(u) => u,
            Err(r) => return r,
        };
    }
    let store = app.store.clone();
    let put = tokio::task::spawn_blocking(move || upload.finish(&store.content, true)).await;
    match put {
        Ok(Ok(())) => {
            app.metrics.content_uploads.inc();
            StatusCode::CREATED.into_response()
        }
        Ok(Err(e)) => refused(e),
        Err(e) => refuse(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

/// `GET /provider`: the provider's card ([`crate::card`]), 404 when this keeper runs none.
async fn provider_card(State(app): State<App>) -> Response {
    match app.store.card() {
        Some(card) => match serde_json::to_vec(card.as_ref()) {
            Ok(body) => (
                [(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                )],
                body,
            )
                .into_response(),
            Err(e) => refuse(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        },
        None => refuse(
            StatusCode::NOT_FOUND,
            "this keeper runs no provider".to_string(),
        ),
    }
}

async fn metrics(State(app): State<App>) -> Response {
    let mut r = app.metrics.render().into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
    );
    r
}

/// Liveness (a Kubernetes probe): 200, or 503 naming why the process should be restarted.
async fn livez(State(app): State<App>) -> Response {
    match app.metrics.health.live() {
        Ok(()) => "live\n".into_response(),
        Err(why) => refuse(StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")),
    }
}

/// Readiness (a Kubernetes probe): 200, or 503 naming why it should get no new work.
async fn readyz(State(app): State<App>) -> Response {
    match app.metrics.health.ready() {
        Ok(()) => "ready\n".into_response(),
        Err(why) => refuse(StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")),
    }
}

/// The CORS layer for `origins` (see [`ServerLimits::cors_origins`]); `None` when there are
/// none. An origin that is not a valid header value is refused by name.
pub fn cors_layer(origins: &[String]) -> Result<Option<CorsLayer>> {
    cors_layer_for(origins, [Method::GET, Method::HEAD, Method::PUT])
}

/// [`cors_layer`] allowing `methods` (the faucet's `GET` and `POST`): the same
/// origins, spelled and checked the same way (`--cors-origin`).
pub fn cors_layer_for(
    origins: &[String],
    methods: impl Into<tower_http::cors::AllowMethods>,
) -> Result<Option<CorsLayer>> {
    use tower_http::cors::AllowOrigin;
    if origins.is_empty() {
        return Ok(None);
    }
    let allow = if origins.iter().any(|o| o == "*") {
        AllowOrigin::any()
    } else {
        let list = origins
            .iter()
            .map(|o| {
                let ok = (o.starts_with("http://") || o.starts_with("https://"))
                    && !o
                        .trim_end_matches('/')
                        .contains(|c: char| c.is_whitespace())
                    && o.matches('/').count() == 2;
                anyhow::ensure!(
                    ok,
                    "--cors-origin {o:?}: an origin is scheme://host[:port] (no path), or *"
                );
                HeaderValue::from_str(o).with_context(|| format!("--cors-origin {o:?}"))
            })
            .collect::<Result<Vec<_>>>()?;
        AllowOrigin::list(list)
    };
    Ok(Some(
        CorsLayer::new()
            .allow_origin(allow)
            .allow_methods(methods)
            .allow_headers([header::CONTENT_TYPE, header::RANGE])
            .expose_headers([
                header::CONTENT_LENGTH,
                header::CONTENT_RANGE,
                header::CONTENT_ENCODING,
            ])
            .max_age(Duration::from_secs(600)),
    ))
}

fn router(app: App) -> Router {
    let limits = app.limits.clone();
    let mut data = Router::new()
        .route("/r/{root}/all", get(all))
        .route("/r/{root}/tiles", get(tiles))
        .route("/c/{hash}", get(content_get).put(content_put))
        .with_state(app.clone());
    // checked when the server starts (serve_listener)
    if let Ok(Some(cors)) = cors_layer(&limits.cors_origins) {
        data = data.layer(cors);
    }
    Router::new()
        .route("/metrics", get(metrics))
        .route("/livez", get(livez))
        .route("/readyz", get(readyz))
        .route("/provider", get(provider_card))
        .with_state(app)
        .merge(data)
        .layer(CompressionLayer::new().quality(CompressionLevel::Fastest))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::SERVICE_UNAVAILABLE,
            limits.response_timeout,
        ))
}

/// Marks a request as in flight on its connection until its response head is ready (a
/// connection with none in flight and no transfer streaming is idle: evictable).
struct InFlight(Arc<Progress>);

impl InFlight {
    fn new(p: &Arc<Progress>) -> Self {
        p.requests
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        InFlight(p.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0
            .requests
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The refusal (403) of an admitted node's request signed for `host`, which is not one of
/// `own`: it names both and the fix, and marks itself ([`super::admission::REFUSED`]) so that
/// a node reaching the server under a name it was not told asks again as a stranger.
fn refuse_other_host(host: &str, own: &[String]) -> Response {
    let mut r = refuse(
        StatusCode::FORBIDDEN,
        format!(
            "this request is signed for host {host:?}, which is not one of this server's names \
             ({}): a signature made for another server is not accepted here. If this server is \
             reached as {host:?}, its operator must name it (--public-url)",
            own.join(", ")
        ),
    );
    r.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    r.headers_mut().insert(
        super::admission::REFUSED,
        HeaderValue::from_static("other-host"),
    );
    r
}

/// The names a server answers to, as requests' `Host` headers say them: its public URL's
/// `host[:port]` (the port only when not the scheme's default, as clients send it), and its
/// listening address when that is one a client can reach (not `0.0.0.0` or `[::]`), with
/// `localhost:<port>` for a loopback one.
pub fn own_hosts(public: Option<&str>, local: SocketAddr) -> Vec<String> {
    let mut out = vec![];
    if !local.ip().is_unspecified() {
        out.push(local.to_string());
        if local.ip().is_loopback() {
            out.push(format!("localhost:{}", local.port()));
        }
    }
    if let Some(u) = public.and_then(|p| reqwest::Url::parse(p).ok()) {
        if let Some(h) = u.host_str() {
            let h = h.to_ascii_lowercase();
            let name = match u.port() {
                Some(p) => format!("{h}:{p}"),
                None => h,
            };
            if !out.contains(&name) {
                out.push(name);
            }
        }
    }
    out
}

/// Bytes of `req`'s head as it came: the request line and every header line.
fn head_len<B>(req: &Request<B>) -> usize {
    let line = req.method().as_str().len()
        + req.uri().path_and_query().map_or(1, |p| p.as_str().len())
        + " HTTP/1.1\r\n".len();
    req.headers()
        .iter()
        .map(|(k, v)| k.as_str().len() + v.len() + 4)
        .sum::<usize>()
        + line
        + 2
}

/// What the accept loop needs besides the router.
struct Serving {
    limits: Arc<ServerLimits>,
    metrics: Arc<Metrics>,
    admission: Arc<Admission>,
    admitted: Signers,
    replays: Arc<super::admission::Replays>,
}

/// The next connection `listener` accepts, or `None` once `stop` turns: finished connections
/// in `conns` are reaped first (the set does not grow), and a failed accept (out of
/// descriptors, a reset before accept) waits a little and goes on.
pub(crate) async fn next_connection<T: 'static>(
    listener: &tokio::net::TcpListener,
    stop: &mut tokio::sync::watch::Receiver<bool>,
    conns: &mut tokio::task::JoinSet<T>,
) -> Option<(tokio::net::TcpStream, SocketAddr)> {
    loop {
        let accepted = tokio::select! {
            _ = stop.changed() => return None,
            a = listener.accept() => a,
        };
        while conns.try_join_next().is_some() {}
        match accepted {
            Ok(a) => return Some(a),
            Err(e) => {
                tracing::debug!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

async fn accept_loop(
    listener: tokio::net::TcpListener,
    app: Router,
    serving: Serving,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let Serving {
        limits,
        metrics,
        admission,
        admitted,
        replays,
    } = serving;
    let mut conns = tokio::task::JoinSet::new();
    let mut evicted = 0u64;
    while let Some((stream, peer)) = next_connection(&listener, &mut stop, &mut conns).await {
        // a streamed body's head and first chunk go in separate writes: without this the
        // second waits for the peer's delayed ACK (tens of milliseconds a request)
        let _ = stream.set_nodelay(true);
        let place = match admission.admit(peer.ip()) {
            Ok(p) => p,
            Err(why) => {
                tracing::trace!(%peer, ?why, "connection refused on accept");
                metrics.http_connections_refused.inc();
                drop(stream);
                continue;
            }
        };
        let now = admission.evicted.load(std::sync::atomic::Ordering::Relaxed);
        metrics.http_connections_evicted.inc_by(now - evicted);
        evicted = now;
        let app = app.clone();
        let limits = limits.clone();
        let metrics = metrics.clone();
        let (admission, admitted, replays) = (admission.clone(), admitted.clone(), replays.clone());
        // one signature check per connection at most: junk signatures cost one each
        let tried = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let own_hosts = Arc::new(limits.own_hosts.clone());
        conns.spawn(async move {
            let place: Place = place;
            let conn = place.conn.clone();
            let watched = conn.progress.clone();
            let served = conn.clone();
            let skew = limits.signature_skew;
            let signed = metrics.clone();
            let max_head = limits.max_request_head;
            let svc = hyper::service::service_fn(move |mut req: Request<hyper::body::Incoming>| {
                let busy = InFlight::new(&served.progress);
                // hyper bounds its read buffer only while a head is incomplete: a head that
                // arrives in one read may pass the limit, so it is measured here
                if head_len(&req) > max_head {
                    let mut r = refuse(
                        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
                        format!("the request head is larger than {max_head} bytes"),
                    );
                    r.headers_mut()
                        .insert(header::CONNECTION, HeaderValue::from_static("close"));
                    return futures_util::future::Either::Left(std::future::ready(Ok::<
                        _,
                        Infallible,
                    >(
                        r
                    )));
                }
                // the first request signed by an admitted node makes the connection a node's
                if served.signer.get().is_none()
                    && req.headers().contains_key(super::admission::SIGNER)
                    && !tried.swap(true, std::sync::atomic::Ordering::Relaxed)
                {
                    let pq = req.uri().path_and_query().map_or("/", |p| p.as_str());
                    let verdict = verify_request(
                        req.headers(),
                        req.method().as_str(),
                        pq,
                        &admitted,
                        skew,
                        &own_hosts,
                        &replays,
                    );
                    if let Verdict::OtherHost(host) = &verdict {
                        // a signature made for another server: refused, saying so
                        signed.http_signed_elsewhere.inc();
                        let r = refuse_other_host(host, &own_hosts);
                        return futures_util::future::Either::Left(std::future::ready(Ok(r)));
                    }
                    if let Verdict::Node(signer) = verdict {
                        let _ = served.signer.set(signer);
                        let share =
                            admission.node_share(&admitted.read().expect("signers lock"), &signer);
                        admission.promote(served.id, signer, share);
                    }
                }
                if served.signer.get().is_some() {
                    signed.http_signed.inc();
                }
                req.extensions_mut().insert(Peer(peer));
                req.extensions_mut().insert(served.clone());
                let app = app.clone();
                futures_util::future::Either::Right(async move {
                    let r = app.oneshot(req).await.into_response();
                    drop(busy);
                    Ok::<_, Infallible>(r)
                })
            });
            let conn_fut = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_timeout)
                .max_buf_size(limits.max_request_head.max(8192))
                .serve_connection(TokioIo::new(stream), svc);
            let (window, min_rate) = (limits.stall_timeout, limits.min_rate);
            let watchdog = async move {
                use std::sync::atomic::Ordering::Relaxed;
                let mut mark = (Instant::now(), watched.bytes.load(Relaxed));
                loop {
                    tokio::time::sleep(Duration::from_millis(250).min(window)).await;
                    let bytes = watched.bytes.load(Relaxed);
                    if watched.active.load(Relaxed) == 0 {
                        mark = (Instant::now(), bytes);
                        continue;
                    }
                    if mark.0.elapsed() >= window {
                        let needed = (min_rate as f64 * window.as_secs_f64()) as u64;
                        if bytes - mark.1 < needed {
                            return;
                        }
                        mark = (Instant::now(), bytes);
                    }
                }
            };
            tokio::select! {
                _ = tokio::time::timeout(limits.connection_lifetime, conn_fut) => {}
                _ = watchdog => {
                    metrics.http_stalled.inc();
                    tracing::debug!(%peer, "closed a connection whose transfer stood still");
                }
                _ = conn.close.notified() => {
                    tracing::trace!(%peer, "closed an idle connection for a newcomer");
                }
            }
            drop(place);
        });
    }
    // dropping the set aborts every connection
}

/// Serves `store` and `metrics` on `addr` with the default [`ServerLimits`].
pub fn serve(store: Arc<ResultStore>, metrics: Arc<Metrics>, addr: &str) -> Result<HttpServer> {
    serve_with(store, metrics, addr, ServerLimits::default())
}

/// Serves `store` and `metrics` on `addr` from a background thread (its own tokio runtime);
/// returns once it listens.
pub fn serve_with(
    store: Arc<ResultStore>,
    metrics: Arc<Metrics>,
    addr: &str,
    limits: ServerLimits,
) -> Result<HttpServer> {
    let listener =
        std::net::TcpListener::bind(addr).with_context(|| format!("cannot listen on {addr}"))?;
    serve_listener(store, metrics, listener, limits)
}

/// [`serve_with`] on a listener already bound (its address known before the store publishes
/// URLs under it).
pub fn serve_listener(
    store: Arc<ResultStore>,
    metrics: Arc<Metrics>,
    std_listener: std::net::TcpListener,
    limits: ServerLimits,
) -> Result<HttpServer> {
    cors_layer(&limits.cors_origins)?;
    std_listener.set_nonblocking(true)?;
    let bound = std_listener.local_addr()?;
    let limits = Arc::new(limits);
    let admitted = Signers::default();
    let app = router(App {
        store,
        metrics: metrics.clone(),
        limits: limits.clone(),
        transfers: Default::default(),
        urgent: Default::default(),
        uploads: Default::default(),
        nodes: Default::default(),
        admitted: admitted.clone(),
        reading: Default::default(),
    });
    let serving = Serving {
        admission: Arc::new(Admission::new(
            limits.max_connections,
            limits.connections_per_peer,
            limits.connections_per_peer_min,
            limits.node_connections,
        )),
        limits,
        metrics,
        admitted: admitted.clone(),
        replays: Default::default(),
    };
    let server = ServerThread::spawn("keeper-http", std_listener, move |l, stop| {
        accept_loop(l, app, serving, stop)
    })?;
    Ok(HttpServer {
        addr: bound,
        admitted,
        server,
    })
}

/// An HTTP server on its own thread and tokio runtime (the results server, the faucet): stops
/// accepting, ends every connection and releases its port on [`ServerThread::shutdown`] or
/// when dropped.
pub struct ServerThread {
    stop: tokio::sync::watch::Sender<bool>,
    thread: Option<JoinHandle<()>>,
}

impl ServerThread {
    /// Runs `serve(listener, stop)` on a thread named `name` with a runtime of its own; `stop`
    /// turns true when the server is to stop.
    pub fn spawn<F, Fut>(name: &str, listener: std::net::TcpListener, serve: F) -> Result<Self>
    where
        F: FnOnce(tokio::net::TcpListener, tokio::sync::watch::Receiver<bool>) -> Fut
            + Send
            + 'static,
        Fut: std::future::Future<Output = ()>,
    {
        listener.set_nonblocking(true)?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name(name)
            .enable_all()
            .build()?;
        let (tx, rx) = tokio::sync::watch::channel(false);
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                rt.block_on(async move {
                    match tokio::net::TcpListener::from_std(listener) {
                        Ok(l) => serve(l, rx).await,
                        Err(e) => tracing::error!(error = %e, "cannot serve"),
                    }
                });
                rt.shutdown_timeout(Duration::from_secs(1));
            })?;
        Ok(ServerThread {
            stop: tx,
            thread: Some(thread),
        })
    }

    /// Stops accepting, ends every connection, and waits for the server thread.
    pub fn shutdown(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        let _ = self.stop.send(true);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for ServerThread {
    fn drop(&mut self) {
        self.halt();
    }
}

/// A running results server: stops (and releases its port) on [`HttpServer::shutdown`] or
/// when dropped.
pub struct HttpServer {
    /// Where it listens.
    pub addr: SocketAddr,
    /// The keys whose signed requests are a market node's, with their stakes
    /// ([`super::admission`]): empty at start; the daemon fills it with the market's staked
    /// nodes as it reads them from chain, and `keeper serve` with the keys it is given
    /// (`--admit`) and those it reads from chain (`--admit-market`).
    pub admitted: Signers,
    server: ServerThread,
}

impl HttpServer {
    /// Stops accepting, ends every connection, and waits for the server thread.
    pub fn shutdown(self) {
        self.server.shutdown();
    }
}

#[cfg(test)]
mod tests {
    use super::{byte_range, own_hosts, Range};

    #[test]
    fn a_servers_names_are_those_a_client_sends() {
        let at = |a: &str| a.parse().unwrap();
        assert_eq!(
            own_hosts(None, at("127.0.0.1:9200")),
            ["127.0.0.1:9200", "localhost:9200"]
        );
        // the scheme's default port is not in the Host header clients send
        assert_eq!(
            own_hosts(Some("https://Store.Example/"), at("0.0.0.0:9200")),
            ["store.example"]
        );
        assert_eq!(
            own_hosts(Some("http://203.0.113.5:9200"), at("[::]:9200")),
            ["203.0.113.5:9200"]
        );
        assert_eq!(
            own_hosts(Some("http://[2001:db8::1]:80"), at("[2001:db8::1]:9200")),
            ["[2001:db8::1]:9200", "[2001:db8::1]"]
        );
        assert!(
            own_hosts(None, at("0.0.0.0:9200")).is_empty(),
            "a wildcard names nothing"
        );
    }

    #[test]
    fn one_byte_range_is_read_everything_else_is_the_whole_object() {
        let r = |v: &str| byte_range(v.as_bytes(), 100);
        assert_eq!(r("bytes=10-"), Range::Bytes(10, 100));
        assert_eq!(r("bytes=10-19"), Range::Bytes(10, 20));
        assert_eq!(r("bytes=90-500"), Range::Bytes(90, 100));
        assert_eq!(r("bytes=-30"), Range::Bytes(70, 100));
        assert_eq!(r("bytes=-300"), Range::Bytes(0, 100));
        assert_eq!(r("bytes=100-"), Range::Unsatisfiable);
        assert_eq!(r("bytes=-0"), Range::Unsatisfiable);
        assert_eq!(
            byte_range(b"bytes=-1", 0),
            Range::Unsatisfiable,
            "an empty object"
        );
        assert_eq!(byte_range(b"bytes=0-", 0), Range::Unsatisfiable);
        for ignored in [
            "bytes=1-2,5-6",
            "items=1-",
            "bytes=x-",
            "bytes=5-4",
            "bytes=-",
            "10-",
        ] {
            assert_eq!(r(ignored), Range::Ignored, "{ignored}");
        }
    }
}

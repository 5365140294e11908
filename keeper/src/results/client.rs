//! Fetching a result from another keeper over HTTP(S) (`reqwest`), bounded in every way a
//! hostile server could stretch it: addresses ([`FetchPolicy`]: checked for the URL, every
//! address its name resolves to and every redirect), redirects, time (connect and whole
//! request, body included), and bytes — the body is read, decompressed, to at most what the
//! job implies and refused beyond it, so a decompression bomb costs its limit and no more.
//! A body larger than the server ever compresses ([`COMPRESS_MAX`]) is asked for and read
//! uncompressed, so what it costs in memory is what crossed the wire: a fake result of a few
//! kilobytes costs a few kilobytes, whatever the job's dims. A whole result is split into
//! tiles as it arrives, never held twice.
//!
//! A client given a node's keypair ([`Client::signed_by`]) signs every request
//! ([`super::admission`]): a server that knows the node admits it ahead of strangers.

use std::{
    io::Read,
    net::SocketAddr,
    sync::Arc,
    time::{Duration, Instant},
};

use compute_market_protocol::job::JobSpec;
use reqwest::{
    dns::{Addrs, Name, Resolve, Resolving},
    redirect, StatusCode, Url,
};

use solana_keypair::Keypair;

use super::{
    net::FetchPolicy,
    server::COMPRESS_MAX,
    wire::{all_len, decode_proven, proven_len},
    FetchError,
};
use crate::verify::ProvenTile;

/// A resolver that drops the addresses the policy refuses (and fails when none is left).
struct Guarded(FetchPolicy);

impl Resolve for Guarded {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = self.0.clone();
        let host = name.as_str().to_string();
        Box::pin(async move {
            let all: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let (ok, refused): (Vec<_>, Vec<_>) = all
                .into_iter()
                .partition(|a| policy.refuses(a.ip()).is_none());
            if ok.is_empty() {
                let why = refused
                    .first()
                    .and_then(|a| policy.refuses(a.ip()))
                    .unwrap_or("no address");
                return Err(format!(
                    "{host} resolves only to refused addresses ({why}; allowed with \
                     --allow-private-urls, a local cluster)"
                )
                .into());
            }
            Ok(Box::new(ok.into_iter()) as Addrs)
        })
    }
}

/// Checks the scheme and, for an address written in the URL, its range.
fn check_url(url: &Url, policy: &FetchPolicy) -> Result<(), String> {
    if url.scheme() != "http" && url.scheme() != "https" {
        return Err(format!("scheme {:?} is not http(s)", url.scheme()));
    }
    let ip = match url.host() {
        Some(url::Host::Ipv4(v4)) => Some(std::net::IpAddr::V4(v4)),
        Some(url::Host::Ipv6(v6)) => Some(std::net::IpAddr::V6(v6)),
        Some(url::Host::Domain(_)) => None,
        None => return Err("no host".into()),
    };
    if let Some(why) = ip.and_then(|ip| policy.refuses(ip)) {
        return Err(format!(
            "{} is a {why} address, refused unless --allow-private-urls (a local cluster)",
            url.host_str().unwrap_or("")
        ));
    }
    Ok(())
}

/// An HTTP client under a [`FetchPolicy`].
pub struct Client {
    http: reqwest::blocking::Client,
    /// The same without decompression: bodies asked for uncompressed are read as they come,
    /// so a server that compresses anyway sends bytes that are refused, not expanded.
    raw: reqwest::blocking::Client,
    policy: FetchPolicy,
    signer: Option<Arc<Keypair>>,
}

impl Client {
    /// Builds the client (connection pools, resolver, redirect policy).
    pub fn new(policy: &FetchPolicy) -> anyhow::Result<Self> {
        let build = |decompress: bool| {
            let p = policy.clone();
            let redirects = redirect::Policy::custom(move |attempt| {
                if attempt.previous().len() > p.max_redirects {
                    attempt.error(format!("more than {} redirects", p.max_redirects))
                } else if let Err(e) = check_url(attempt.url(), &p) {
                    attempt.error(format!("redirect refused: {e}"))
                } else {
                    attempt.follow()
                }
            });
            let b = reqwest::blocking::Client::builder()
                .timeout(policy.timeout)
                .connect_timeout(policy.connect_timeout)
                .redirect(redirects)
                .dns_resolver(Arc::new(Guarded(policy.clone())))
                // a proxy would resolve names itself, past the guarded resolver
                .no_proxy()
                .user_agent(concat!("compute-market-keeper/", env!("CARGO_PKG_VERSION")));
            let b = if decompress { b } else { b.no_zstd().no_gzip() };
            b.build()
        };
        Ok(Client {
            http: build(true)?,
            raw: build(false)?,
            policy: policy.clone(),
            signer: None,
        })
    }

    /// This client with every request signed by `kp` (a node's keypair: a verifier's or a
    /// provider's), so that servers that know the node admit it ahead of strangers
    /// ([`super::admission`]). A server that does not know the key serves it as a stranger.
    pub fn signed_by(mut self, kp: Arc<Keypair>) -> Self {
        self.signer = Some(kp);
        self
    }

    /// `req` with the signature headers for `method` of `url`, when this client signs.
    fn sign(
        &self,
        mut req: reqwest::blocking::RequestBuilder,
        method: &str,
        url: &Url,
    ) -> reqwest::blocking::RequestBuilder {
        if let Some(kp) = &self.signer {
            let pq = &url[url::Position::BeforePath..url::Position::AfterQuery];
            // the host as the `Host` header names it (the port only when not the default)
            let host = match url.port() {
                Some(p) => format!("{}:{p}", url.host_str().unwrap_or("")),
                None => url.host_str().unwrap_or("").to_string(),
            };
            for (k, v) in super::admission::sign_request(kp, method, &host, pq) {
                req = req.header(k, v);
            }
        }
        req
    }

    /// GETs `url` and reads at most `limit` (decompressed) bytes of its body, all of it by
    /// `deadline`.
    fn get(&self, url: &str, limit: u64, deadline: Instant) -> Result<Vec<u8>, FetchError> {
        let mut sink = Sink::default();
        self.get_into(url, limit, deadline, &mut sink)?;
        Ok(sink.body)
    }

    /// Whether a body of at most `limit` bytes going to `sink` is asked for uncompressed:
    /// bytes kept on disk are bytes that crossed the wire, and a body larger than a server
    /// compresses ([`COMPRESS_MAX`]) costs no bandwidth uncompressed and no more memory than
    /// was received.
    fn identity(limit: u64, sink: &dyn BodySink) -> bool {
        sink.on_disk() || limit > COMPRESS_MAX
    }

    /// [`Client::get`] into `sink`: a sink already holding bytes asks for the rest only
    /// (`Range: bytes=<held>-`, uncompressed); a server that answers with the whole body
    /// (200) starts it again. What arrived before a failure stays in the sink.
    fn get_into(
        &self,
        url: &str,
        limit: u64,
        deadline: Instant,
        sink: &mut dyn BodySink,
    ) -> Result<(), FetchError> {
        let parsed = Url::parse(url)
            .map_err(|e| FetchError::Invalid(format!("{url:?} is not a URL: {e}")))?;
        check_url(&parsed, &self.policy)
            .map_err(|e| FetchError::Invalid(format!("{url:?} is refused: {e}")))?;
        let left = |what: &str| {
            deadline
                .checked_duration_since(Instant::now())
                .filter(|d| !d.is_zero())
                .ok_or_else(|| FetchError::Unavailable(format!("{url}: no time left {what}")))
        };
        let held = sink.held();
        let identity = Self::identity(limit, sink);
        let http = if identity { &self.raw } else { &self.http };
        let send = |signed: bool| {
            let mut req = http.get(parsed.clone()).timeout(left("to ask")?);
            if signed {
                req = self.sign(req, "GET", &parsed);
            }
            if identity {
                req = req.header(reqwest::header::ACCEPT_ENCODING, "identity");
            }
            if held > 0 {
                req = req.header(reqwest::header::RANGE, format!("bytes={held}-"));
            }
            req.send().map_err(|e| {
                let chain = error_chain(&e);
                if e.is_redirect() || chain.contains("refused addresses") || e.is_builder() {
                    FetchError::Invalid(format!("{url:?} is refused: {chain}"))
                } else {
                    FetchError::Unavailable(format!("{url:?} is unreachable: {chain}"))
                }
            })
        };
        let mut resp = send(self.signer.is_some())?;
        if self.signer.is_some()
            && resp.status() == StatusCode::FORBIDDEN
            && resp.headers().contains_key(super::admission::REFUSED)
        {
            // the server does not answer to the name the URL gives it (its operator has not
            // told it): asked again unsigned, the request is served as a stranger's
            let why = resp.text().unwrap_or_default();
            tracing::warn!(
                url,
                why,
                "a server refused this node's signature: asking as a stranger"
            );
            resp = send(false)?;
        }
        let status = resp.status();
        if status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error() {
            return Err(FetchError::Unavailable(format!(
                "{url:?} is busy: HTTP {status}"
            )));
        }
        // what the body holds: the rest after `held` (206), or all of it (200)
        let from = if held > 0 && status == StatusCode::PARTIAL_CONTENT {
            let range = resp
                .headers()
                .get(reqwest::header::CONTENT_RANGE)
                .and_then(|v| v.to_str().ok())
                .and_then(content_range);
            match range {
                Some((start, total)) if start == held && total <= limit => held,
                Some((start, total)) => {
                    return Err(FetchError::Invalid(format!(
                        "{url} answered a request for bytes {held}- with bytes {start}- of {total} (the job implies at most {limit})"
                    )))
                }
                None => {
                    return Err(FetchError::Invalid(format!(
                        "{url} answered a range request without a valid Content-Range"
                    )))
                }
            }
        } else if held > 0 && status == StatusCode::RANGE_NOT_SATISFIABLE {
            // nothing after what is held: the caller's hash check judges it
            return Ok(());
        } else if status == StatusCode::PARTIAL_CONTENT {
            return Err(FetchError::Invalid(format!(
                "{url} answered part of the body to a request for all of it"
            )));
        } else if status.is_success() {
            sink.restart();
            0
        } else {
            return Err(FetchError::Invalid(format!(
                "{url:?} is unreachable: HTTP {status}"
            )));
        };
        if identity {
            let enc = resp
                .headers()
                .get(reqwest::header::CONTENT_ENCODING)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("identity");
            if !enc.eq_ignore_ascii_case("identity") {
                return Err(FetchError::Invalid(format!(
                    "{url} sent a body compressed as {enc:?} to a request for it uncompressed"
                )));
            }
        }
        let room = limit - from;
        if resp.content_length().is_some_and(|n| n > room) {
            return Err(FetchError::Invalid(format!(
                "{url} announces {} bytes, the job implies at most {limit}",
                from.saturating_add(resp.content_length().unwrap_or(0))
            )));
        }
        // the client's timeout bounds each read; the deadline bounds the whole body, so a
        // body trickled a byte at a time is cut off too
        let mut reader = resp.take(room + 1);
        let mut chunk = vec![0u8; 64 << 10];
        let mut got = 0u64;
        loop {
            left("to read the body").map_err(|_| {
                FetchError::Unavailable(format!("{url} is too slow: the body missed its deadline"))
            })?;
            match reader.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => {
                    got += n as u64;
                    if got > room {
                        break;
                    }
                    sink.push(&chunk[..n]);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    let chain = error_chain(&e);
                    return Err(if timed_out(&e) {
                        FetchError::Unavailable(format!(
                            "{url} is too slow: {got} bytes of the body came before the time ran out ({chain})"
                        ))
                    } else if transient(&e) {
                        FetchError::Unavailable(format!("reading {url} failed: {chain}"))
                    } else {
                        FetchError::Invalid(format!("{url} sent a malformed body: {chain}"))
                    });
                }
            }
        }
        if got > room {
            sink.restart();
            return Err(FetchError::Invalid(format!(
                "{url} sent more than the {limit} bytes the job implies"
            )));
        }
        Ok(())
    }

    /// Every tile of `job`'s result at `base` (`http://host:port/r/<root>`), by `deadline`.
    /// The body is split into tiles as it arrives (memory grows with what was received, up
    /// to the job's size, and is never held twice).
    pub fn fetch_all(
        &self,
        base: &str,
        job: &JobSpec,
        deadline: Instant,
    ) -> Result<Vec<Vec<u8>>, FetchError> {
        let mut sink = TileSink::new(job.tile_len());
        self.get_into(&format!("{base}/all"), all_len(job), deadline, &mut sink)?;
        sink.finish(job)
    }

    /// Tiles `indices` of `job`'s result at `base`, with proofs, by `deadline`.
    pub fn fetch(
        &self,
        base: &str,
        job: &JobSpec,
        indices: &[u32],
        deadline: Instant,
    ) -> Result<Vec<ProvenTile>, FetchError> {
        let q: Vec<String> = indices.iter().map(|i| i.to_string()).collect();
        let url = format!("{base}/tiles?i={}", q.join(","));
        let limit = proven_len(job, indices.len());
        decode_proven(job, indices.len(), &self.get(&url, limit, deadline)?)
    }

    /// Those of tiles `indices` of `job`'s result that `base` holds, with proofs, by
    /// `deadline`: a verifier that kept its sample serves only those (PROTOCOL §8.12), in the
    /// order asked; an answer with tiles not asked for is refused.
    pub fn fetch_held(
        &self,
        base: &str,
        job: &JobSpec,
        indices: &[u32],
        deadline: Instant,
    ) -> Result<Vec<ProvenTile>, FetchError> {
        let served = self.fetch(base, job, indices, deadline)?;
        super::wire::check_subset(job, indices, &served)?;
        Ok(served)
    }
}

impl Client {
    /// The body of `url`, at most `limit` bytes, by `deadline` and within the policy's time
    /// (a small document: a provider's card).
    pub fn fetch_small(
        &self,
        url: &str,
        limit: u64,
        deadline: Instant,
    ) -> Result<Vec<u8>, FetchError> {
        self.get(
            url,
            limit,
            deadline.min(Instant::now() + self.policy.timeout),
        )
    }

    /// The object `hash` at `base` (`<base>/c/<hex>`): at most `limit` bytes, refused unless
    /// its SHA-256 is `hash`. With a `partial` file (one per object and source), every byte is
    /// also written there as it arrives — asked for uncompressed, so the disk holds no more
    /// than the wire carried — and a download cut off (a dropped connection, a crash, a
    /// restart) resumes from what that file holds; a resumed download that fails other than
    /// for now, or does not hash right, is fetched again whole once. The caller removes the
    /// file once the object is kept.
    pub fn fetch_content(
        &self,
        base: &str,
        hash: &compute_market_protocol::hash::Digest,
        limit: u64,
        deadline: Instant,
        partial: Option<&std::path::Path>,
    ) -> Result<Vec<u8>, FetchError> {
        let url = format!("{}/c/{}", base.trim_end_matches('/'), super::hex(hash));
        let mut sink = Sink::resume(partial, limit);
        let resumed = sink.body.len();
        if resumed > 0 {
            tracing::info!(object = %super::hex(hash), at = resumed, "resuming a download");
        }
        let matches = |b: &[u8]| compute_market_protocol::hash::hashv(&[b]) == *hash;
        let mismatch = || {
            FetchError::Invalid(format!(
                "{url} served bytes whose SHA-256 is not the one asked for"
            ))
        };
        let first = self
            .get_into(&url, limit, deadline, &mut sink)
            .and_then(|()| {
                if matches(&sink.body) {
                    Ok(())
                } else {
                    Err(mismatch())
                }
            });
        match first {
            Ok(()) => return Ok(sink.body),
            // cut off again: what arrived is kept for the next try
            Err(e) if e.is_transient() => return Err(e),
            Err(e) if resumed == 0 => {
                sink.restart();
                return Err(e);
            }
            Err(e) => {
                tracing::warn!(object = %super::hex(hash), at = resumed, error = %e, "a resumed download failed: fetching it whole");
            }
        }
        sink.restart();
        let whole = self.get_into(&url, limit, deadline, &mut sink);
        match whole {
            Ok(()) if matches(&sink.body) => Ok(sink.body),
            Ok(()) => {
                sink.restart();
                Err(mismatch())
            }
            Err(e) => {
                if !e.is_transient() {
                    sink.restart();
                }
                Err(e)
            }
        }
    }

    /// Uploads `bytes` as `<base>/c/<hex of their SHA-256>` (a content store: `keeper serve`)
    /// unless the store holds them already (a `HEAD` first: a model posted again is not sent
    /// again). Returns whether the bytes were sent.
    pub fn put_content(&self, base: &str, bytes: Vec<u8>) -> Result<bool, FetchError> {
        let hash = compute_market_protocol::hash::hashv(&[&bytes]);
        let url = format!("{}/c/{}", base.trim_end_matches('/'), super::hex(&hash));
        let parsed = Url::parse(&url)
            .map_err(|e| FetchError::Invalid(format!("{url:?} is not a URL: {e}")))?;
        check_url(&parsed, &self.policy)
            .map_err(|e| FetchError::Invalid(format!("{url:?} is refused: {e}")))?;
        let held = || {
            let head = self.sign(self.http.head(parsed.clone()), "HEAD", &parsed);
            head.send().is_ok_and(|r| r.status().is_success())
        };
        if held() {
            return Ok(false);
        }
        // a connection may close under the upload (a pooled keep-alive connection the server
        // just closed, or an early answer to an object it already holds): then a HEAD says
        // whether the object is there, and the upload is tried once more if it is not
        // a busy store answers 503 or 429 with Retry-After: waited out (each wait capped),
        // until BUSY_PATIENCE has passed, before the upload is called unavailable
        let mut tries = 0;
        let started = Instant::now();
        let resp = loop {
            tries += 1;
            let req = self.sign(self.http.put(parsed.clone()), "PUT", &parsed);
            match req.body(bytes.clone()).send() {
                Ok(r) if busy_status(r.status()) => {
                    let wait = retry_after(&r).min(BUSY_WAIT_MAX);
                    if started.elapsed() + wait > BUSY_PATIENCE {
                        let status = r.status();
                        return Err(FetchError::Unavailable(format!(
                            "{url} stayed busy for {}s (HTTP {status}: {}); retry later or use a less loaded store",
                            started.elapsed().as_secs(),
                            r.text().unwrap_or_default().trim()
                        )));
                    }
                    tracing::debug!(%url, wait_ms = wait.as_millis() as u64, "store busy: waiting to upload again");
                    tries = 0;
                    std::thread::sleep(wait + jitter(wait));
                }
                Ok(r) => break r,
                Err(e) => {
                    if held() {
                        return Ok(true);
                    }
                    if tries >= 2 {
                        return Err(FetchError::Unavailable(format!(
                            "{url} is unreachable: {}",
                            error_chain(&e)
                        )));
                    }
                }
            }
        };
        if !resp.status().is_success() {
            let status = resp.status();
            let why = resp.text().unwrap_or_default();
            return Err(FetchError::Invalid(format!(
                "{url} refused the upload: HTTP {status}: {why}"
            )));
        }
        Ok(true)
    }
}

/// How long an upload waits out a busy store (503 or 429) before it gives up.
const BUSY_PATIENCE: Duration = Duration::from_secs(60);
/// The longest single wait a store's Retry-After may ask of an upload.
const BUSY_WAIT_MAX: Duration = Duration::from_secs(5);

/// Whether a status says "busy, come back" rather than "no".
fn busy_status(status: StatusCode) -> bool {
    status == StatusCode::SERVICE_UNAVAILABLE || status == StatusCode::TOO_MANY_REQUESTS
}

/// The wait a busy answer asks for: its Retry-After in whole seconds (bounded by the caller),
/// at least half a second (each try sends the whole body again).
fn retry_after(resp: &reqwest::blocking::Response) -> Duration {
    resp.headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map_or(Duration::from_millis(500), |s| {
            Duration::from_secs(s).max(Duration::from_millis(500))
        })
}

/// Up to half of `wait` more, so that clients told the same Retry-After do not all come back in
/// the same instant.
fn jitter(wait: Duration) -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    wait.mul_f64(f64::from(nanos % 1000) / 2000.0)
}

/// Where a body goes as it arrives.
trait BodySink {
    /// Bytes held (a resumed download asks for the rest).
    fn held(&self) -> u64;
    /// Appends what arrived.
    fn push(&mut self, bytes: &[u8]);
    /// Drops what is held (the next bytes start the body again).
    fn restart(&mut self);
    /// Whether the bytes are also kept on disk (asked for uncompressed).
    fn on_disk(&self) -> bool;
}

/// A whole result's tiles, filled as the bytes arrive: each tile is allocated when its first
/// byte comes, so memory follows what was received.
struct TileSink {
    tile_len: usize,
    tiles: Vec<Vec<u8>>,
    held: u64,
}

impl TileSink {
    fn new(tile_len: usize) -> Self {
        TileSink {
            tile_len: tile_len.max(1),
            tiles: vec![],
            held: 0,
        }
    }

    /// The tiles, exactly the job's count of its tile length, or the error naming the
    /// difference.
    fn finish(self, job: &JobSpec) -> Result<Vec<Vec<u8>>, FetchError> {
        if self.held != all_len(job) {
            return Err(FetchError::Invalid(format!(
                "served {} bytes, the job's {} tiles are {} bytes",
                self.held,
                job.tile_count(),
                all_len(job)
            )));
        }
        Ok(self.tiles)
    }
}

impl BodySink for TileSink {
    fn held(&self) -> u64 {
        0
    }

    fn push(&mut self, mut bytes: &[u8]) {
        self.held += bytes.len() as u64;
        while !bytes.is_empty() {
            if self.tiles.last().is_none_or(|t| t.len() == self.tile_len) {
                self.tiles.push(vec![]);
            }
            let t = self.tiles.last_mut().expect("a tile");
            let n = (self.tile_len - t.len()).min(bytes.len());
            if t.capacity() < t.len() + n {
                // doubling, but never past the tile's length
                let want = (t.len() * 2)
                    .max(t.len() + n)
                    .max(64 << 10)
                    .min(self.tile_len);
                t.reserve_exact(want - t.len());
            }
            t.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
        }
    }

    fn restart(&mut self) {
        self.tiles.clear();
        self.held = 0;
    }

    fn on_disk(&self) -> bool {
        false
    }
}

impl BodySink for Sink {
    fn held(&self) -> u64 {
        self.body.len() as u64
    }

    fn push(&mut self, bytes: &[u8]) {
        Sink::push(self, bytes)
    }

    fn restart(&mut self) {
        Sink::restart(self)
    }

    fn on_disk(&self) -> bool {
        self.file.is_some()
    }
}

/// Where a body goes as it arrives: memory, and a file when the download may be resumed
/// (each chunk appended as it comes, so a process killed mid-download leaves what it had).
#[derive(Default)]
struct Sink {
    body: Vec<u8>,
    file: Option<std::fs::File>,
}

impl Sink {
    /// A sink over `partial` (none: memory only), holding what the file already has when
    /// that is at most `limit` bytes (anything longer is not a prefix of this object).
    fn resume(partial: Option<&std::path::Path>, limit: u64) -> Self {
        let Some(p) = partial else {
            return Sink::default();
        };
        if let Some(dir) = p.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let file = std::fs::OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(p);
        let Ok(mut file) = file else {
            tracing::warn!(file = %p.display(), "cannot write a partial download: it will not resume");
            return Sink::default();
        };
        let mut body = vec![];
        let fits = file.metadata().is_ok_and(|m| m.len() <= limit);
        if !fits || (&mut file).take(limit).read_to_end(&mut body).is_err() {
            body.clear();
            let _ = file.set_len(0);
        }
        Sink {
            body,
            file: Some(file),
        }
    }

    fn push(&mut self, bytes: &[u8]) {
        use std::io::Write;
        self.body.extend_from_slice(bytes);
        if let Some(f) = &mut self.file {
            if f.write_all(bytes).is_err() {
                // a disk that fails only costs the resume
                let _ = f.set_len(0);
                self.file = None;
            }
        }
    }

    /// Drops what is held (the next bytes start the object again).
    fn restart(&mut self) {
        self.body.clear();
        if let Some(f) = &self.file {
            let _ = f.set_len(0);
        }
    }
}

/// `(first byte, total length)` of a `Content-Range: bytes <first>-<last>/<total>` header.
fn content_range(v: &str) -> Option<(u64, u64)> {
    let (range, total) = v.strip_prefix("bytes ")?.split_once('/')?;
    let (first, last) = range.split_once('-')?;
    let (first, last, total): (u64, u64, u64) =
        (first.parse().ok()?, last.parse().ok()?, total.parse().ok()?);
    (first <= last && last < total).then_some((first, total))
}

/// Whether a read failed because its time ran out (judged on the error kinds in its source
/// chain).
fn timed_out(e: &std::io::Error) -> bool {
    let mut src: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = src {
        if c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
            || c.downcast_ref::<reqwest::Error>()
                .is_some_and(|r| r.is_timeout())
            || c.downcast_ref::<hyper::Error>()
                .is_some_and(|h| h.is_timeout())
        {
            return true;
        }
        src = c.source();
    }
    false
}

/// Whether a failure while reading a body may pass (a timeout, a dropped connection), as
/// opposed to a body that is malformed (a corrupt compressed stream): judged on the error
/// kinds in its source chain, never on its words.
fn transient(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    let mut src: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = src {
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            if matches!(
                io.kind(),
                TimedOut
                    | ConnectionReset
                    | ConnectionAborted
                    | BrokenPipe
                    | UnexpectedEof
                    | WouldBlock
            ) {
                return true;
            }
        }
        if let Some(r) = c.downcast_ref::<reqwest::Error>() {
            if r.is_timeout() || r.is_connect() {
                return true;
            }
        }
        if let Some(h) = c.downcast_ref::<hyper::Error>() {
            if h.is_incomplete_message() || h.is_closed() || h.is_timeout() {
                return true;
            }
        }
        src = c.source();
    }
    false
}

/// An error with its sources, one line.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        let m = c.to_string();
        if !s.contains(&m) {
            s += ": ";
            s += &m;
        }
        src = c.source();
    }
    s
}

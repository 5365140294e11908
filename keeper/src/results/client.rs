//! Fetching a result from another keeper over HTTP(S) (`reqwest`), bounded in every way a
//! hostile server could stretch it: addresses ([`FetchPolicy`]: checked for the URL, every
//! address its name resolves to and every redirect), redirects, time (connect and whole
//! request, body included), and bytes — the body is read, decompressed, to at most what the
//! job implies and refused beyond it, so a decompression bomb costs its limit and no more.

use std::{io::Read, net::SocketAddr, sync::Arc, time::Instant};

use compute_market_protocol::job::JobSpec;
use reqwest::{
    dns::{Addrs, Name, Resolve, Resolving},
    redirect, StatusCode, Url,
};

use super::{
    net::FetchPolicy,
    wire::{all_len, decode_all, decode_proven, proven_len},
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
                return Err(format!("{host} resolves only to refused addresses ({why})").into());
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
            "{} is a {why} address",
            url.host_str().unwrap_or("")
        ));
    }
    Ok(())
}

/// An HTTP client under a [`FetchPolicy`].
pub struct Client {
    http: reqwest::blocking::Client,
    policy: FetchPolicy,
}

impl Client {
    /// Builds the client (connection pool, resolver, redirect policy).
    pub fn new(policy: &FetchPolicy) -> anyhow::Result<Self> {
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
        let http = reqwest::blocking::Client::builder()
            .timeout(policy.timeout)
            .connect_timeout(policy.connect_timeout)
            .redirect(redirects)
            .dns_resolver(Arc::new(Guarded(policy.clone())))
            // a proxy would resolve names itself, past the guarded resolver
            .no_proxy()
            .user_agent(concat!("compute-market-keeper/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(Client {
            http,
            policy: policy.clone(),
        })
    }

    /// GETs `url` and reads at most `limit` (decompressed) bytes of its body, all of it by
    /// `deadline`.
    fn get(&self, url: &str, limit: u64, deadline: Instant) -> Result<Vec<u8>, FetchError> {
        let mut sink = Sink::default();
        self.get_into(url, limit, deadline, &mut sink)?;
        Ok(sink.body)
    }

    /// [`Client::get`] into `sink`: a sink already holding bytes asks for the rest only
    /// (`Range: bytes=<held>-`, uncompressed); a server that answers with the whole body
    /// (200) starts it again. What arrived before a failure stays in the sink.
    fn get_into(
        &self,
        url: &str,
        limit: u64,
        deadline: Instant,
        sink: &mut Sink,
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
        let held = sink.body.len() as u64;
        let mut req = self.http.get(parsed).timeout(left("to ask")?);
        if sink.file.is_some() {
            // bytes kept on disk are bytes that crossed the wire: no decompressed expansion
            req = req.header(reqwest::header::ACCEPT_ENCODING, "identity");
        }
        if held > 0 {
            req = req.header(reqwest::header::RANGE, format!("bytes={held}-"));
        }
        let resp = req.send().map_err(|e| {
            let chain = error_chain(&e);
            if e.is_redirect() || chain.contains("refused addresses") || e.is_builder() {
                FetchError::Invalid(format!("{url:?} is refused: {chain}"))
            } else {
                FetchError::Unavailable(format!("{url:?} is unreachable: {chain}"))
            }
        })?;
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
    pub fn fetch_all(
        &self,
        base: &str,
        job: &JobSpec,
        deadline: Instant,
    ) -> Result<Vec<Vec<u8>>, FetchError> {
        decode_all(
            job,
            &self.get(&format!("{base}/all"), all_len(job), deadline)?,
        )
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
}

impl Client {
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

    /// Uploads `bytes` as `<base>/c/<hex of their SHA-256>` (a content store: `keeper serve`).
    pub fn put_content(&self, base: &str, bytes: Vec<u8>) -> Result<(), FetchError> {
        let hash = compute_market_protocol::hash::hashv(&[&bytes]);
        let url = format!("{}/c/{}", base.trim_end_matches('/'), super::hex(&hash));
        let parsed = Url::parse(&url)
            .map_err(|e| FetchError::Invalid(format!("{url:?} is not a URL: {e}")))?;
        check_url(&parsed, &self.policy)
            .map_err(|e| FetchError::Invalid(format!("{url:?} is refused: {e}")))?;
        let resp = self.http.put(parsed).body(bytes).send().map_err(|e| {
            FetchError::Unavailable(format!("{url} is unreachable: {}", error_chain(&e)))
        })?;
        if !resp.status().is_success() {
            let status = resp.status();
            let why = resp.text().unwrap_or_default();
            return Err(FetchError::Invalid(format!(
                "{url} refused the upload: HTTP {status}: {why}"
            )));
        }
        Ok(())
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

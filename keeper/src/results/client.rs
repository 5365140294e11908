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
        let parsed = Url::parse(url)
            .map_err(|e| FetchError::Invalid(format!("result URL {url:?} is not a URL: {e}")))?;
        check_url(&parsed, &self.policy)
            .map_err(|e| FetchError::Invalid(format!("result URL {url:?} is refused: {e}")))?;
        let left = |what: &str| {
            deadline
                .checked_duration_since(Instant::now())
                .filter(|d| !d.is_zero())
                .ok_or_else(|| FetchError::Unavailable(format!("{url}: no time left {what}")))
        };
        let resp = self
            .http
            .get(parsed)
            .timeout(left("to ask")?)
            .send()
            .map_err(|e| {
                let chain = error_chain(&e);
                if e.is_redirect() || chain.contains("refused addresses") || e.is_builder() {
                    FetchError::Invalid(format!("result URL {url:?} is refused: {chain}"))
                } else {
                    FetchError::Unavailable(format!("result URL {url:?} is unreachable: {chain}"))
                }
            })?;
        let status = resp.status();
        if status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error() {
            return Err(FetchError::Unavailable(format!(
                "result URL {url:?} is busy: HTTP {status}"
            )));
        }
        if !status.is_success() {
            return Err(FetchError::Invalid(format!(
                "result URL {url:?} is unreachable: HTTP {status}"
            )));
        }
        if resp.content_length().is_some_and(|n| n > limit) {
            return Err(FetchError::Invalid(format!(
                "{url} announces {} bytes, the job implies at most {limit}",
                resp.content_length().unwrap_or(0)
            )));
        }
        // the client's timeout bounds each read; the deadline bounds the whole body, so a
        // body trickled a byte at a time is cut off too
        let mut body = Vec::new();
        let mut reader = resp.take(limit + 1);
        let mut chunk = vec![0u8; 64 << 10];
        loop {
            left("to read the body").map_err(|_| {
                FetchError::Unavailable(format!("{url} is too slow: the body missed its deadline"))
            })?;
            match reader.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => body.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    let chain = error_chain(&e);
                    return Err(if transient(&e) {
                        FetchError::Unavailable(format!("reading {url} failed: {chain}"))
                    } else {
                        FetchError::Invalid(format!("{url} sent a malformed body: {chain}"))
                    });
                }
            }
        }
        if body.len() as u64 > limit {
            return Err(FetchError::Invalid(format!(
                "{url} sent more than the {limit} bytes the job implies"
            )));
        }
        Ok(body)
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
    /// its SHA-256 is `hash`.
    pub fn fetch_content(
        &self,
        base: &str,
        hash: &compute_market_protocol::hash::Digest,
        limit: u64,
        deadline: Instant,
    ) -> Result<Vec<u8>, FetchError> {
        let url = format!("{}/c/{}", base.trim_end_matches('/'), super::hex(hash));
        let b = self.get(&url, limit, deadline)?;
        if compute_market_protocol::hash::hashv(&[&b]) != *hash {
            return Err(FetchError::Invalid(format!(
                "{url} served bytes whose SHA-256 is not the one asked for"
            )));
        }
        Ok(b)
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

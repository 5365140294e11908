//! `keeper faucet`: stake tokens for anyone who asks, on a local or dev cluster, so that a page
//! can offer "Get test tokens". The faucet's keypair is the stake mint's mint authority (the
//! admin that ran `keeper init` when it created the mint); each grant is what `keeper fund`
//! does ([`crate::deploy::fund`]): the owner's associated token account, created if missing
//! (paid by the faucet), then `mint_to`.
//!
//! * `GET /` — `{"mint", "amount", "base_units", "decimals", "every_s", "cluster"}`: what a
//!   grant is, for a page to check before it offers the button;
//! * `POST /fund/<base58 address>` — mints the grant to that owner: 200 with `{"signature",
//!   "amount", "base_units", "owner", "token_account", "balance"}`; 400 for an address that is
//!   not one; 429 with `Retry-After` for an owner granted less than `every` ago; 503 with
//!   `Retry-After` while [`FaucetLimits::in_flight`] grants are being minted; 502 when the
//!   cluster refused or could not be reached. Request bodies are never read. Every error is
//!   `{"error": "<a sentence>"}`.
//!
//! It refuses to start on mainnet-beta and testnet (told by their genesis hashes, whatever the
//! URL), and with a keypair that is not the mint authority. CORS is `keeper serve`'s
//! (`--cors-origin`, [`crate::results::server::cors_layer_for`]), allowing `GET` and `POST`.

use std::{
    collections::HashMap,
    convert::Infallible,
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use anchor_lang::prelude::Pubkey;
use anyhow::{bail, Context, Result};
use axum::{
    extract::{Path, State},
    http::{header, HeaderValue, Method, Request, StatusCode},
    response::{IntoResponse, Response},
    routing::{get, post},
    Extension, Router,
};
use hyper_util::rt::{TokioIo, TokioTimer};
use serde::Serialize;
use solana_keypair::Keypair;
use solana_signer::Signer;
use tower::ServiceExt;

use crate::{
    chain::{decode, Chain},
    cli, deploy,
    results::server::{next_connection, ServerThread},
};

/// The genesis hashes of the public clusters the faucet refuses to run on: their tokens are
/// not for giving away (mainnet-beta's are real; testnet is the validators' cluster).
pub const REFUSED_CLUSTERS: [(&str, &str); 2] = [
    (
        "mainnet-beta",
        "5eykt4UsFv8P8NJdTREpY1vzqKqZKvdpKuc147dw2N9d",
    ),
    ("testnet", "4uhcVJyU9pJkvQyS88uRDiswHXSCkY3zQawwpjk2NsNY"),
];

/// Devnet's genesis hash (the faucet runs there: devnet tokens are test tokens).
pub const DEVNET_GENESIS: &str = "EtWTRABZaYq6iMfeYKouRu166VU2xqa1wcaWoxPkrZBG";

/// The cluster's name by its genesis hash: `mainnet-beta`, `testnet`, `devnet`, else
/// `localnet` (any other cluster: a test validator, a private one).
pub fn cluster_name(genesis: &str) -> &'static str {
    REFUSED_CLUSTERS
        .iter()
        .find(|(_, g)| *g == genesis)
        .map(|(n, _)| *n)
        .unwrap_or(if genesis == DEVNET_GENESIS {
            "devnet"
        } else {
            "localnet"
        })
}

/// Refuses mainnet-beta and testnet, naming the cluster and the fix.
pub fn check_cluster(genesis: &str) -> Result<()> {
    if let Some((name, _)) = REFUSED_CLUSTERS.iter().find(|(_, g)| *g == genesis) {
        bail!(
            "this cluster is {name} (genesis {genesis}): the faucet gives tokens away and runs on \
             a local or dev cluster only; point -u at localhost, devnet or your own validator"
        );
    }
    Ok(())
}

/// `--amount` in base units: tokens, more than zero.
pub fn parse_amount(s: &str, decimals: u8) -> Result<u64> {
    let base = crate::amount::parse_ui(s, decimals)?;
    if base == 0 {
        bail!("the amount {s:?} is zero: give the tokens each request receives (e.g. 1000)");
    }
    Ok(base)
}

pub use crate::amount::format_ui as format_amount;

/// What one grant is and where it comes from (`GET /`).
#[derive(Clone, Debug, Serialize)]
pub struct FaucetInfo {
    /// The stake mint.
    pub mint: String,
    /// Tokens a grant mints (a UI amount).
    pub amount: String,
    /// The same in base units (a string: JavaScript numbers are not exact past 2^53).
    pub base_units: String,
    /// The mint's decimals.
    pub decimals: u8,
    /// Seconds an owner waits between two grants.
    pub every_s: u64,
    /// `localnet` or `devnet`.
    pub cluster: String,
}

/// One grant (`POST /fund/<owner>`).
#[derive(Clone, Debug, Serialize)]
pub struct Grant {
    /// The `mint_to` transaction.
    pub signature: String,
    /// Tokens minted (a UI amount).
    pub amount: String,
    /// The same in base units.
    pub base_units: String,
    /// The wallet funded.
    pub owner: String,
    /// Its associated token account.
    pub token_account: String,
    /// Its balance afterwards, base units.
    pub balance: String,
}

/// The faucet: the chain, the mint authority, the grant, and who was granted when.
pub struct Faucet {
    chain: Arc<dyn Chain>,
    authority: Keypair,
    info: FaucetInfo,
    base_units: u64,
    every: Duration,
    granted: Mutex<HashMap<Pubkey, Instant>>,
}

impl Faucet {
    /// Checks the cluster (by its `genesis` hash: not mainnet-beta, not testnet), that the
    /// config exists, that `authority` is its stake mint's mint authority and holds SOL for
    /// fees, and converts `amount` (a UI amount) with the mint's decimals.
    pub fn new(
        chain: Arc<dyn Chain>,
        authority: Keypair,
        genesis: &str,
        amount: &str,
        every: Duration,
    ) -> Result<Self> {
        check_cluster(genesis)?;
        let mint = cli::config(chain.as_ref())?.stake_mint;
        let data = chain
            .account(&mint)?
            .with_context(|| format!("the stake mint {mint} does not exist on this cluster"))?;
        let state: anchor_spl::token::Mint = decode(&data)
            .with_context(|| format!("the stake mint {mint} is not an SPL token mint"))?;
        let me = authority.pubkey();
        match Option::<Pubkey>::from(state.mint_authority) {
            Some(a) if a == me => {}
            Some(a) => bail!(
                "this keypair ({me}) is not the mint authority of the stake mint {mint}; its \
                 authority is {a}: start the faucet with -k that keypair (the admin that ran \
                 `keeper init` when it created the mint)"
            ),
            None => bail!(
                "the stake mint {mint} has no mint authority (its supply is fixed): no faucet can \
                 mint it"
            ),
        }
        if chain.lamports(&me)? == Some(0) {
            bail!(
                "the faucet's keypair {me} has no SOL to pay fees and token accounts: \
                 `solana airdrop 10 {me}` on this cluster first"
            );
        }
        let base_units = parse_amount(amount, state.decimals).context("--amount")?;
        Ok(Faucet {
            chain,
            authority,
            info: FaucetInfo {
                mint: mint.to_string(),
                amount: format_amount(base_units, state.decimals),
                base_units: base_units.to_string(),
                decimals: state.decimals,
                every_s: every.as_secs(),
                cluster: cluster_name(genesis).into(),
            },
            base_units,
            every,
            granted: Mutex::new(HashMap::new()),
        })
    }

    /// What a grant is.
    pub fn info(&self) -> &FaucetInfo {
        &self.info
    }

    /// Reserves a grant for `owner` at `now`, or says how long it must wait: an owner granted
    /// (or being granted) less than `every` ago waits out the rest.
    pub fn claim(&self, owner: &Pubkey, now: Instant) -> std::result::Result<(), Duration> {
        let mut granted = self.granted.lock().expect("faucet lock");
        if let Some(&at) = granted.get(owner) {
            let since = now.saturating_duration_since(at);
            if since < self.every {
                return Err(self.every - since);
            }
        }
        // the table only holds owners still waiting: pruned as it grows
        if granted.len() >= 4096 {
            let every = self.every;
            granted.retain(|_, at| now.saturating_duration_since(*at) < every);
        }
        granted.insert(*owner, now);
        Ok(())
    }

    /// Gives back `owner`'s claim (its grant failed: it may ask again at once).
    pub fn release(&self, owner: &Pubkey) {
        self.granted.lock().expect("faucet lock").remove(owner);
    }

    /// Mints the grant to `owner` (blocking: the chain's calls are), as `keeper fund` does.
    pub fn grant(&self, owner: &Pubkey) -> Result<Grant> {
        let f = deploy::fund(self.chain.as_ref(), &self.authority, owner, self.base_units)?;
        Ok(Grant {
            signature: f.signature,
            amount: self.info.amount.clone(),
            base_units: self.info.base_units.clone(),
            owner: f.owner,
            token_account: f.token_account,
            balance: f.balance.to_string(),
        })
    }
}

/// How much of the faucet clients can take at once.
#[derive(Clone, Debug)]
pub struct FaucetLimits {
    /// Grants being minted at once; more are answered 503 with `Retry-After`.
    pub in_flight: usize,
    /// Connections open at once; more are closed on accept.
    pub connections: usize,
    /// Longest a request head may take to arrive.
    pub header_timeout: Duration,
    /// Longest a connection may stay open.
    pub connection_lifetime: Duration,
    /// Origins whose pages may call the faucet (`--cors-origin`, as `keeper serve`'s).
    pub cors_origins: Vec<String>,
}

impl Default for FaucetLimits {
    fn default() -> Self {
        FaucetLimits {
            in_flight: 4,
            connections: 256,
            header_timeout: Duration::from_secs(10),
            connection_lifetime: Duration::from_secs(120),
            cors_origins: vec![],
        }
    }
}

#[derive(Clone)]
struct App {
    faucet: Arc<Faucet>,
    minting: Arc<tokio::sync::Semaphore>,
}

/// The peer of a connection.
#[derive(Clone, Copy)]
struct Peer(SocketAddr);

/// A JSON answer.
fn json(status: StatusCode, v: &impl Serialize) -> Response {
    let body = serde_json::to_string(v).unwrap_or_else(|_| "{}".into());
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body + "\n",
    )
        .into_response()
}

/// A refusal: `{"error": msg}`.
fn error(status: StatusCode, msg: impl Into<String>) -> Response {
    json(status, &serde_json::json!({ "error": msg.into() }))
}

/// A refusal to try again after `secs` seconds (`Retry-After`).
fn retry_after(status: StatusCode, secs: u64, msg: impl Into<String>) -> Response {
    let mut r = error(status, msg);
    r.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(secs.max(1)));
    r
}

async fn info(State(app): State<App>) -> Response {
    json(StatusCode::OK, app.faucet.info())
}

async fn fund(
    State(app): State<App>,
    Extension(Peer(peer)): Extension<Peer>,
    headers: axum::http::HeaderMap,
    Path(arg): Path<String>,
) -> Response {
    // a JSON request only: a browser sends one cross-origin only after a CORS preflight, so a
    // page the faucet does not name cannot mint through its visitors (a bodyless or form POST
    // is a "simple" request, sent without asking)
    let json_asked = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !json_asked {
        tracing::info!(%peer, status = 415, "faucet: not a JSON request");
        return error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "send the request with Content-Type: application/json (its body is not read)",
        );
    }
    let Ok(owner) = arg.parse::<Pubkey>() else {
        let shown: String = arg.chars().take(64).collect();
        tracing::info!(%peer, owner = ?shown, status = 400, "faucet: not an address");
        return error(
            StatusCode::BAD_REQUEST,
            format!(
                "{shown:?} is not a base58 address (a 32-byte public key): POST /fund/<your \
                 wallet's address>"
            ),
        );
    };
    let Ok(permit) = app.minting.clone().try_acquire_owned() else {
        tracing::info!(%peer, %owner, status = 503, "faucet: busy");
        return retry_after(
            StatusCode::SERVICE_UNAVAILABLE,
            1,
            "the faucet is minting for others right now: try again in a second",
        );
    };
    if let Err(wait) = app.faucet.claim(&owner, Instant::now()) {
        let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
        tracing::info!(%peer, %owner, status = 429, retry_after_s = secs, "faucet: too soon");
        return retry_after(
            StatusCode::TOO_MANY_REQUESTS,
            secs,
            format!(
                "{owner} was given tokens less than {} s ago: try again in {secs} s",
                app.faucet.every.as_secs()
            ),
        );
    }
    let faucet = app.faucet.clone();
    let started = Instant::now();
    let done = tokio::task::spawn_blocking(move || faucet.grant(&owner)).await;
    drop(permit);
    match done {
        Ok(Ok(g)) => {
            // the wait runs from when the tokens landed
            app.faucet
                .granted
                .lock()
                .expect("faucet lock")
                .insert(owner, Instant::now());
            tracing::info!(%peer, %owner, amount = %g.amount, signature = %g.signature, ms = started.elapsed().as_millis() as u64, status = 200, "faucet: funded");
            json(StatusCode::OK, &g)
        }
        Ok(Err(e)) => {
            app.faucet.release(&owner);
            tracing::warn!(%peer, %owner, error = format!("{e:#}"), status = 502, "faucet: minting failed");
            // the cause stays in the log: it may name the RPC's URL (and a key in it)
            error(
                StatusCode::BAD_GATEWAY,
                format!(
                    "minting to {owner} failed on the cluster: try again in a moment (the \
                     faucet's log has the cause)"
                ),
            )
        }
        Err(e) => {
            app.faucet.release(&owner);
            tracing::error!(%peer, %owner, error = %e, status = 500, "faucet: the grant panicked");
            error(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("minting to {owner} failed: the faucet's log has the cause"),
            )
        }
    }
}

async fn not_found(method: Method, uri: axum::http::Uri) -> Response {
    error(
        StatusCode::NOT_FOUND,
        format!(
            "no {method} {}: the faucet answers GET / and POST /fund/<address>",
            uri.path()
        ),
    )
}

fn router(faucet: Arc<Faucet>, limits: &FaucetLimits) -> Result<Router> {
    let app = App {
        faucet,
        minting: Arc::new(tokio::sync::Semaphore::new(limits.in_flight.max(1))),
    };
    let mut r = Router::new()
        .route("/", get(info))
        .route("/fund/{owner}", post(fund))
        .fallback(not_found)
        .with_state(app);
    if let Some(cors) =
        crate::results::server::cors_layer_for(&limits.cors_origins, [Method::GET, Method::POST])?
    {
        // a page reads how long to wait
        r = r.layer(cors.expose_headers([header::RETRY_AFTER]));
    }
    Ok(r)
}

async fn accept_loop(
    listener: tokio::net::TcpListener,
    app: Router,
    limits: FaucetLimits,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let slots = Arc::new(tokio::sync::Semaphore::new(limits.connections.max(1)));
    let mut conns = tokio::task::JoinSet::new();
    while let Some((stream, peer)) = next_connection(&listener, &mut stop, &mut conns).await {
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tracing::debug!(%peer, "faucet: too many connections, closed on accept");
            continue;
        };
        let app = app.clone();
        let (header_timeout, lifetime) = (limits.header_timeout, limits.connection_lifetime);
        conns.spawn(async move {
            let svc = hyper::service::service_fn(move |mut req: Request<hyper::body::Incoming>| {
                req.extensions_mut().insert(Peer(peer));
                let app = app.clone();
                async move { Ok::<_, Infallible>(app.oneshot(req).await.into_response()) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(header_timeout)
                .max_buf_size(16 << 10)
                .serve_connection(TokioIo::new(stream), svc);
            let _ = tokio::time::timeout(lifetime, conn).await;
            drop(slot);
        });
    }
}

/// Serves `faucet` on a listener already bound, from a background thread (its own tokio
/// runtime); returns once it listens.
pub fn serve_listener(
    faucet: Arc<Faucet>,
    std_listener: std::net::TcpListener,
    limits: FaucetLimits,
) -> Result<FaucetServer> {
    let app = router(faucet, &limits)?;
    let addr = std_listener.local_addr()?;
    let server = ServerThread::spawn("keeper-faucet", std_listener, move |l, stop| {
        accept_loop(l, app, limits, stop)
    })?;
    Ok(FaucetServer { addr, server })
}

/// A running faucet: stops (and releases its port) on [`FaucetServer::shutdown`] or when
/// dropped.
pub struct FaucetServer {
    /// Where it listens.
    pub addr: SocketAddr,
    server: ServerThread,
}

impl FaucetServer {
    /// Stops accepting, ends every connection, and waits for the server thread.
    pub fn shutdown(self) {
        self.server.shutdown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_convert_exactly_both_ways() {
        assert_eq!(parse_amount("1000", 6).unwrap(), 1_000_000_000);
        assert_eq!(parse_amount("0.5", 6).unwrap(), 500_000);
        assert_eq!(parse_amount(".000001", 6).unwrap(), 1);
        assert_eq!(parse_amount("12.", 6).unwrap(), 12_000_000);
        assert_eq!(parse_amount("7", 0).unwrap(), 7);
        assert_eq!(
            parse_amount("18446744073709.551615", 6).unwrap(),
            u64::MAX,
            "the largest amount, to the last unit"
        );
        for bad in [
            "",
            ".",
            "-1",
            "1e3",
            "1.2.3",
            "0",
            "0.000",
            "1.0000001",
            "18446744073709.551616",
            "99999999999999999999",
            " 1 0",
        ] {
            assert!(parse_amount(bad, 6).is_err(), "{bad:?} was accepted");
        }
        assert_eq!(format_amount(1_000_000_000, 6), "1000");
        assert_eq!(format_amount(500_000, 6), "0.5");
        assert_eq!(format_amount(1, 6), "0.000001");
        assert_eq!(format_amount(u64::MAX, 6), "18446744073709.551615");
        assert_eq!(format_amount(7, 0), "7");
    }

    #[test]
    fn public_clusters_are_refused_by_genesis() {
        assert!(
            check_cluster("5eykt4UsFv8P8NJdTREpY1vzqKqZKvdpKuc147dw2N9d")
                .unwrap_err()
                .to_string()
                .contains("mainnet-beta")
        );
        assert!(
            check_cluster("4uhcVJyU9pJkvQyS88uRDiswHXSCkY3zQawwpjk2NsNY")
                .unwrap_err()
                .to_string()
                .contains("testnet")
        );
        assert!(check_cluster(DEVNET_GENESIS).is_ok());
        assert_eq!(cluster_name(DEVNET_GENESIS), "devnet");
        assert_eq!(cluster_name("11111111111111111111111111111111"), "localnet");
    }
}

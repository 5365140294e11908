//! `keeper faucet` on a real validator, as a separate process over HTTP: a fresh address gets
//! exactly the grant on chain, the same address again within the window is told to wait (429),
//! a bad address is told why (400), CORS is `keeper serve`'s, and a keypair that is not the
//! mint authority is refused at start.

use std::{
    process::{Command, Stdio},
    time::Duration,
};

use anchor_lang::prelude::Pubkey;
use anyhow::{Context, Result};
use compute_market_cluster_tests::*;
use compute_market_keeper::chain::Chain;
use solana_keypair::Keypair;
use solana_signer::Signer;

#[test]
fn the_faucet_grants_a_fresh_address_once_a_window_and_refuses_bad_addresses_and_strangers(
) -> Result<()> {
    let v = Validator::start()?;
    let mint_out = v.dir.path().join("mint.json");
    let init = v.keeper(
        &v.admin,
        &[
            "init",
            "--mint-keypair-out",
            mint_out.to_str().context("a UTF-8 temporary path")?,
        ],
    )?;
    let mint: Pubkey = init["stake_mint"].as_str().context("the mint")?.parse()?;

    // a keypair that is not the mint authority is refused at start, naming both
    let stranger = v.dir.path().join("stranger.json");
    keygen(&stranger)?;
    v.solana(&["airdrop", "10", &pubkey(&stranger)?])?;
    let out = Command::new(keeper_bin())
        .args(["-u", &v.url, "-k"])
        .arg(&stranger)
        .args(["faucet", "--listen", "127.0.0.1:0"])
        .output()?;
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a stranger's faucet started: {err}");
    assert!(
        err.contains("is not the mint authority")
            && err.contains(&pubkey(&stranger)?)
            && err.contains(&pubkey(&v.admin)?),
        "{err}"
    );

    let port = free_port();
    let log = std::fs::File::create(v.dir.path().join("faucet.log"))?;
    let _faucet = Proc {
        child: Command::new(keeper_bin())
            .args(["-u", &v.url, "-k"])
            .arg(&v.admin)
            .args(["faucet", "--listen", &format!("127.0.0.1:{port}")])
            .args(["--amount", "1000", "--every-s", "30"])
            .args(["--cors-origin", "http://page.example"])
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()?,
        name: "faucet".into(),
    };
    let base = format!("http://127.0.0.1:{port}");
    wait_for(30, "keeper faucet to listen", || {
        Ok(std::net::TcpStream::connect(("127.0.0.1", port))
            .ok()
            .map(|_| ()))
    })
    .with_context(|| log_tails(&v, &["faucet"]))?;
    let http = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()?;

    // what a page checks first
    let info: serde_json::Value = http.get(format!("{base}/")).send()?.json()?;
    assert_eq!(info["mint"], mint.to_string(), "{info}");
    assert_eq!(info["amount"], "1000", "{info}");
    assert_eq!(info["decimals"], 6, "{info}");
    assert_eq!(info["cluster"], "localnet", "{info}");

    // a fresh address (no SOL, no token account) gets exactly 1000 tokens; a request that is
    // not JSON (a "simple" cross-origin POST, sent without a preflight) is refused first
    let owner = Keypair::new().pubkey();
    let r = http.post(format!("{base}/fund/{owner}")).send()?;
    assert_eq!(r.status(), 415, "a bodyless POST mints nothing");
    let r = http
        .post(format!("{base}/fund/{owner}"))
        .header("content-type", "application/json")
        .send()?;
    let status = r.status();
    let body: serde_json::Value = r.json()?;
    assert_eq!(status, 200, "{body}\n{}", log_tails(&v, &["faucet"]));
    assert_eq!(body["amount"], "1000", "{body}");
    assert_eq!(body["base_units"], "1000000000", "{body}");
    assert_eq!(body["owner"], owner.to_string(), "{body}");
    let sig = body["signature"].as_str().context("a signature")?;
    assert!(sig.len() >= 64 && bs58_ok(sig), "not a signature: {sig:?}");
    let ata = anchor_spl::associated_token::get_associated_token_address(&owner, &mint);
    assert_eq!(v.chain().token_balance(&ata)?, 1_000_000_000, "on chain");

    // the same owner again within the window: told to wait, nothing minted
    let r = http
        .post(format!("{base}/fund/{owner}"))
        .header("content-type", "application/json")
        .send()?;
    assert_eq!(r.status(), 429);
    let wait: u64 = r
        .headers()
        .get("retry-after")
        .context("Retry-After")?
        .to_str()?
        .parse()?;
    assert!((1..=30).contains(&wait), "Retry-After: {wait}");
    let body: serde_json::Value = r.json()?;
    assert!(
        body["error"].as_str().unwrap_or("").contains("try again"),
        "{body}"
    );
    assert_eq!(
        v.chain().token_balance(&ata)?,
        1_000_000_000,
        "nothing more"
    );

    // a bad address: 400, saying what is wrong
    let r = http
        .post(format!("{base}/fund/not-an-address"))
        .header("content-type", "application/json")
        .send()?;
    assert_eq!(r.status(), 400);
    let body: serde_json::Value = r.json()?;
    assert!(
        body["error"]
            .as_str()
            .unwrap_or("")
            .contains("is not a base58 address"),
        "{body}"
    );

    // CORS as `keeper serve` does it: the named origin only, a preflight for POST
    let pre = |origin: &str| -> Result<reqwest::blocking::Response> {
        Ok(http
            .request(reqwest::Method::OPTIONS, format!("{base}/fund/{owner}"))
            .header("Origin", origin)
            .header("Access-Control-Request-Method", "POST")
            .send()?)
    };
    let r = pre("http://page.example")?;
    assert!(r.status().is_success(), "preflight: {}", r.status());
    assert_eq!(
        r.headers()
            .get("access-control-allow-origin")
            .map(|h| h.to_str().unwrap_or("")),
        Some("http://page.example")
    );
    assert!(
        r.headers()
            .get("access-control-allow-methods")
            .and_then(|h| h.to_str().ok())
            .is_some_and(|m| m.contains("POST")),
        "{:?}",
        r.headers()
    );
    let r = pre("http://elsewhere.example")?;
    assert!(
        r.headers().get("access-control-allow-origin").is_none(),
        "another origin was allowed"
    );

    // one line a request in its log
    let log = std::fs::read_to_string(v.dir.path().join("faucet.log"))?;
    for status in ["status=200", "status=429", "status=400"] {
        assert!(log.contains(status), "no {status} line in\n{log}");
    }
    Ok(())
}

/// Whether `s` is spelled in base58 (a signature's 64 bytes are 86–88 characters of it).
fn bs58_ok(s: &str) -> bool {
    s.chars()
        .all(|c| c.is_ascii_alphanumeric() && !"0OIl".contains(c))
}

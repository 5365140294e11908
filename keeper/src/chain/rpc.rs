//! A real cluster over JSON-RPC (Agave 4.2.2's `solana-client`, nonblocking client).
//!
//! Transactions get a fresh blockhash, an optional priority fee, retries with backoff while the
//! cluster is unreachable, and confirmation tracking. Re-sending after a timeout cannot
//! double-apply: every instruction of the program is guarded by the state it moves (a task is
//! claimed once, a vote committed once, ...), so a duplicate is refused with a named error.

use std::{thread::sleep, time::Duration};

use anchor_lang::prelude::Pubkey;
use anyhow::{Context, Result};
use solana_client::{
    client_error::{ClientError, ClientErrorKind},
    nonblocking::rpc_client::RpcClient,
    rpc_config::{RpcAccountInfoConfig, RpcProgramAccountsConfig, RpcTransactionConfig},
    rpc_filter::{Memcmp, RpcFilterType},
    rpc_request::{RpcError, RpcResponseErrorData},
};
use solana_commitment_config::CommitmentConfig;
use solana_instruction::Instruction;
use solana_keypair::Keypair;
use solana_signer::Signer;
use solana_transaction::Transaction;
use solana_transaction_status_client_types::{
    option_serializer::OptionSerializer, UiTransactionEncoding,
};

use super::{Chain, TxReport};

/// Expands the Solana CLI's URL monikers.
pub fn resolve_url(url: &str) -> String {
    match url {
        "localhost" | "l" => "http://127.0.0.1:8899".into(),
        "devnet" | "d" => "https://api.devnet.solana.com".into(),
        "testnet" | "t" => "https://api.testnet.solana.com".into(),
        "mainnet-beta" | "m" => "https://api.mainnet-beta.solana.com".into(),
        other => other.into(),
    }
}

/// A cluster reached over RPC: `solana-client`'s nonblocking client on the chain's own tokio
/// runtime. Roles call it from many threads at once (a pass handles tasks in parallel), each
/// Most signatures [`RpcChain::logs_of`] reads for one address (five pages).
pub const MAX_SIGNATURES: usize = 5_000;

/// call driving its request on the runtime's workers.
pub struct RpcChain {
    client: RpcClient,
    rt: tokio::runtime::Runtime,
    /// Micro-lamports per compute unit added to every transaction (0: none).
    pub priority_fee: u64,
    /// Attempts for a call while the cluster is unreachable.
    pub attempts: u32,
}

fn preflight_logs(e: &ClientError) -> Option<Vec<String>> {
    match e.kind() {
        ClientErrorKind::RpcError(RpcError::RpcResponseError {
            data: RpcResponseErrorData::SendTransactionPreflightFailure(sim),
            ..
        }) => Some(sim.logs.clone().unwrap_or_default()),
        _ => None,
    }
}

fn is_transient(e: &ClientError) -> bool {
    matches!(
        e.kind(),
        ClientErrorKind::Io(_) | ClientErrorKind::Reqwest(_)
    )
    // getAccountInfo wraps a refused connection in "AccountNotFound: … error sending request"
    || e.to_string().contains("error sending request")
}

impl RpcChain {
    /// A client for `url` (monikers accepted) at `confirmed` commitment.
    pub fn new(url: &str) -> Self {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("rpc")
            .enable_all()
            .build()
            .expect("a tokio runtime for RPC");
        RpcChain {
            client: RpcClient::new_with_commitment(resolve_url(url), CommitmentConfig::confirmed()),
            rt,
            priority_fee: 0,
            attempts: 5,
        }
    }

    /// Seconds per slot over the cluster's most recent performance sample (`None` before the
    /// node has one: it samples once a minute).
    pub fn slot_seconds(&self) -> Option<f64> {
        let s = self
            .wait(self.client.get_recent_performance_samples(Some(1)))
            .ok()?;
        let s = s.first()?;
        (s.num_slots > 0).then(|| f64::from(s.sample_period_secs) / s.num_slots as f64)
    }

    /// The cluster's genesis hash (base58): which cluster this is, whatever its URL says.
    pub fn genesis_hash(&self) -> Result<String> {
        self.retry("getGenesisHash", || {
            self.wait(self.client.get_genesis_hash())
        })
        .map(|h| h.to_string())
    }

    /// The underlying (nonblocking) client.
    pub fn client(&self) -> &RpcClient {
        &self.client
    }

    /// The program logs of every successful transaction that touched `address`, oldest
    /// first (events of a closed task are read from them), among its newest
    /// [`MAX_SIGNATURES`]: the signatures are read a page of 1,000 at a time, so transactions
    /// a stranger sends naming the address cannot push a task's own out of view for less than
    /// that many fees.
    pub fn logs_of(&self, address: &Pubkey) -> Result<Vec<Vec<String>>> {
        use solana_client::rpc_client::GetConfirmedSignaturesForAddress2Config;
        use solana_rpc_client_api::config::RpcTransactionConfig;
        let mut sigs = vec![];
        let mut before = None;
        while sigs.len() < MAX_SIGNATURES {
            let config = || GetConfirmedSignaturesForAddress2Config {
                before,
                until: None,
                limit: Some(1_000),
                commitment: Some(self.client.commitment()),
            };
            let page = self.retry("getSignaturesForAddress", || {
                self.wait(
                    self.client
                        .get_signatures_for_address_with_config(address, config()),
                )
            })?;
            let last = page.last().and_then(|s| s.signature.parse().ok());
            let full = page.len() == 1_000;
            sigs.extend(page);
            match last {
                Some(l) if full => before = Some(l),
                _ => break,
            }
        }
        sigs.truncate(MAX_SIGNATURES);
        let mut out = vec![];
        for s in sigs.into_iter().rev().filter(|s| s.err.is_none()) {
            let signature = s.signature.parse().map_err(|e| anyhow::anyhow!("{e}"))?;
            let config = RpcTransactionConfig {
                encoding: Some(solana_transaction_status_client_types::UiTransactionEncoding::Json),
                commitment: Some(self.client.commitment()),
                max_supported_transaction_version: Some(0),
            };
            let tx = self.retry("getTransaction", || {
                self.wait(self.client.get_transaction_with_config(&signature, config))
            })?;
            if let Some(meta) = tx.transaction.meta {
                let logs: Option<Vec<String>> = meta.log_messages.into();
                out.push(logs.unwrap_or_default());
            }
        }
        Ok(out)
    }

    /// Runs one request to completion.
    fn wait<T>(&self, f: impl std::future::Future<Output = T>) -> T {
        self.rt.block_on(f)
    }

    /// The program's accounts that pass every filter.
    fn program_accounts_filtered(
        &self,
        filters: Vec<RpcFilterType>,
    ) -> Result<Vec<(Pubkey, Vec<u8>)>> {
        let config = RpcProgramAccountsConfig {
            filters: Some(filters),
            account_config: RpcAccountInfoConfig {
                encoding: Some(solana_account_decoder_client_types::UiAccountEncoding::Base64),
                commitment: Some(self.client.commitment()),
                ..Default::default()
            },
            ..Default::default()
        };
        let accounts = self.retry("getProgramAccounts", || {
            self.wait(
                self.client
                    .get_program_ui_accounts_with_config(&compute_market::ID, config.clone()),
            )
        })?;
        Ok(accounts
            .into_iter()
            .filter_map(|(k, a)| Some((k, a.data.decode()?)))
            .collect())
    }

    /// Retries `f` with exponential backoff while the error is a transport error.
    fn retry<T>(&self, what: &str, f: impl Fn() -> Result<T, ClientError>) -> Result<T> {
        let mut delay = Duration::from_millis(200);
        for attempt in 1..=self.attempts {
            match f() {
                Ok(v) => return Ok(v),
                Err(e) if is_transient(&e) && attempt < self.attempts => {
                    // said once, by the caller, if every attempt fails
                    tracing::debug!(what, attempt, error = %e, "RPC unreachable, retrying");
                    sleep(delay);
                    delay = (delay * 2).min(Duration::from_secs(5));
                }
                Err(e) if is_transient(&e) => {
                    return Err(anyhow::anyhow!(
                        "cannot reach the cluster at {} ({} attempts at {what}): is a validator \
                         running there? Start one (solana-test-validator, or scripts/app for a \
                         local market) or point -u at another",
                        self.client.url(),
                        self.attempts
                    ))
                }
                Err(e) => return Err(e).with_context(|| format!("RPC {what}")),
            }
        }
        unreachable!("the last attempt returns")
    }
}

impl Chain for RpcChain {
    fn slot(&self) -> Result<u64> {
        self.retry("getSlot", || self.wait(self.client.get_slot()))
    }

    fn account(&self, key: &Pubkey) -> Result<Option<Vec<u8>>> {
        let r = self.retry("getAccountInfo", || {
            self.wait(
                self.client
                    .get_account_with_commitment(key, self.client.commitment()),
            )
        })?;
        Ok(r.value.filter(|a| a.lamports > 0).map(|a| a.data))
    }

    fn program_accounts(&self, discriminator: &[u8]) -> Result<Vec<(Pubkey, Vec<u8>)>> {
        self.program_accounts_filtered(vec![RpcFilterType::Memcmp(Memcmp::new_raw_bytes(
            0,
            discriminator.to_vec(),
        ))])
    }

    fn program_accounts_matching(
        &self,
        discriminator: &[u8],
        offset: usize,
        bytes: &[u8],
    ) -> Result<Vec<(Pubkey, Vec<u8>)>> {
        self.program_accounts_filtered(vec![
            RpcFilterType::Memcmp(Memcmp::new_raw_bytes(0, discriminator.to_vec())),
            RpcFilterType::Memcmp(Memcmp::new_raw_bytes(offset, bytes.to_vec())),
        ])
    }

    fn token_balance(&self, key: &Pubkey) -> Result<u64> {
        match self.wait(self.client.get_token_account_balance(key)) {
            Ok(b) => b.amount.parse().context("token balance"),
            Err(_) if self.account(key)?.is_none() => Ok(0),
            Err(e) => Err(e).context("RPC getTokenAccountBalance"),
        }
    }

    fn rent_exempt(&self, len: usize) -> Result<u64> {
        self.retry("getMinimumBalanceForRentExemption", || {
            self.wait(self.client.get_minimum_balance_for_rent_exemption(len))
        })
    }

    fn lamports(&self, key: &Pubkey) -> Result<Option<u64>> {
        self.retry("getBalance", || self.wait(self.client.get_balance(key)))
            .map(Some)
    }

    fn send(&self, ixs: &[Instruction], payer: &Keypair, signers: &[&Keypair]) -> Result<TxReport> {
        let mut all: Vec<Instruction> = vec![];
        if self.priority_fee > 0 {
            all.push(
                solana_compute_budget_interface::ComputeBudgetInstruction::set_compute_unit_price(
                    self.priority_fee,
                ),
            );
        }
        all.extend_from_slice(ixs);
        let mut keys = vec![payer];
        keys.extend_from_slice(signers);
        let blockhash = self.retry("getLatestBlockhash", || {
            self.wait(self.client.get_latest_blockhash())
        })?;
        let tx = Transaction::new_signed_with_payer(&all, Some(&payer.pubkey()), &keys, blockhash);
        let sig = match self.wait(self.client.send_and_confirm_transaction(&tx)) {
            Ok(sig) => sig,
            Err(e) => {
                if let Some(logs) = preflight_logs(&e) {
                    return Ok(TxReport {
                        ok: false,
                        cu: 0,
                        logs,
                        error: Some(e.to_string()),
                        signature: Some(tx.signatures[0].to_string()),
                    });
                }
                return Err(e).context("sending the transaction");
            }
        };
        let config = RpcTransactionConfig {
            encoding: Some(UiTransactionEncoding::Json),
            commitment: Some(self.client.commitment()),
            max_supported_transaction_version: Some(0),
        };
        // a confirmed transaction can take a moment to be indexed: asked again for ~3 s before
        // its logs and compute units are reported unknown
        let mut meta = None;
        for wait in [0, 100, 200, 300, 400, 500, 700, 800] {
            sleep(Duration::from_millis(wait));
            let got = self.retry("getTransaction", || {
                self.wait(self.client.get_transaction_with_config(&sig, config))
            });
            if let Ok(t) = got {
                meta = t.transaction.meta;
                break;
            }
        }
        let (logs, cu) = match meta {
            Some(m) => (
                match m.log_messages {
                    OptionSerializer::Some(l) => l,
                    _ => vec![],
                },
                match m.compute_units_consumed {
                    OptionSerializer::Some(c) => c,
                    _ => 0,
                },
            ),
            None => (vec![], 0),
        };
        Ok(TxReport {
            ok: true,
            cu,
            logs,
            error: None,
            signature: Some(sig.to_string()),
        })
    }
}

//! A [`Chain`] wrapper that fails calls on purpose (about one call in `n`, chosen by a fixed
//! pseudo-random sequence, so runs are reproducible), to show
//! that roles survive RPC errors: every step is derived from chain state, so a failed call is
//! simply retried on the next pass.

use std::sync::{
    atomic::{AtomicU64, Ordering},
    Arc,
};

use anchor_lang::prelude::Pubkey;
use anyhow::{bail, Result};
use solana_instruction::Instruction;
use solana_keypair::Keypair;

use super::{Chain, TxReport};

/// Fails about one call in `every`.
pub struct FlakyChain {
    inner: Arc<dyn Chain>,
    every: u64,
    calls: AtomicU64,
    /// Calls failed so far.
    pub failed: AtomicU64,
}

impl FlakyChain {
    /// Wraps `inner`, failing about one call in `every` (`every` ≥ 2).
    pub fn new(inner: Arc<dyn Chain>, every: u64) -> Self {
        FlakyChain {
            inner,
            every: every.max(2),
            calls: AtomicU64::new(0),
            failed: AtomicU64::new(0),
        }
    }

    fn tick(&self, what: &str) -> Result<()> {
        let n = self.calls.fetch_add(1, Ordering::Relaxed) + 1;
        if compute_market_protocol::job::splitmix64(n).is_multiple_of(self.every) {
            self.failed.fetch_add(1, Ordering::Relaxed);
            bail!("injected RPC failure #{n} ({what}): connection reset");
        }
        Ok(())
    }
}

impl Chain for FlakyChain {
    fn slot(&self) -> Result<u64> {
        self.tick("getSlot")?;
        self.inner.slot()
    }
    fn account(&self, key: &Pubkey) -> Result<Option<Vec<u8>>> {
        self.tick("getAccountInfo")?;
        self.inner.account(key)
    }
    fn program_accounts(&self, discriminator: &[u8]) -> Result<Vec<(Pubkey, Vec<u8>)>> {
        self.tick("getProgramAccounts")?;
        self.inner.program_accounts(discriminator)
    }
    fn token_balance(&self, key: &Pubkey) -> Result<u64> {
        self.tick("getTokenAccountBalance")?;
        self.inner.token_balance(key)
    }
    fn rent_exempt(&self, len: usize) -> Result<u64> {
        self.tick("getMinimumBalanceForRentExemption")?;
        self.inner.rent_exempt(len)
    }
    fn lamports(&self, key: &Pubkey) -> Result<Option<u64>> {
        self.tick("getBalance")?;
        self.inner.lamports(key)
    }
    fn send(&self, ixs: &[Instruction], payer: &Keypair, signers: &[&Keypair]) -> Result<TxReport> {
        self.tick("sendTransaction")?;
        self.inner.send(ixs, payer, signers)
    }
}

//! A [`Chain`] wrapper that feeds the Prometheus [`Metrics`]: RPC latency and errors,
//! transactions confirmed and refused.

use std::{sync::Arc, time::Instant};

use anchor_lang::prelude::Pubkey;
use anyhow::Result;
use solana_instruction::Instruction;
use solana_keypair::Keypair;

use super::{Chain, TxReport};
use crate::metrics::Metrics;

/// Measures every call of the wrapped chain.
pub struct MeteredChain {
    inner: Arc<dyn Chain>,
    metrics: Arc<Metrics>,
}

impl MeteredChain {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn Chain>, metrics: Arc<Metrics>) -> Self {
        MeteredChain { inner, metrics }
    }

    fn measure<T>(&self, f: impl FnOnce() -> Result<T>) -> Result<T> {
        let t = Instant::now();
        let r = f();
        self.metrics.rpc_latency.observe(t.elapsed().as_secs_f64());
        if r.is_err() {
            self.metrics.rpc_errors.inc();
        }
        r
    }
}

impl Chain for MeteredChain {
    fn slot(&self) -> Result<u64> {
        self.measure(|| self.inner.slot())
    }
    fn account(&self, key: &Pubkey) -> Result<Option<Vec<u8>>> {
        self.measure(|| self.inner.account(key))
    }
    fn program_accounts(&self, discriminator: &[u8]) -> Result<Vec<(Pubkey, Vec<u8>)>> {
        let r = self.measure(|| self.inner.program_accounts(discriminator))?;
        self.metrics.accounts_read.inc_by(r.len() as u64);
        Ok(r)
    }
    fn program_accounts_matching(
        &self,
        discriminator: &[u8],
        offset: usize,
        bytes: &[u8],
    ) -> Result<Vec<(Pubkey, Vec<u8>)>> {
        let r = self.measure(|| {
            self.inner
                .program_accounts_matching(discriminator, offset, bytes)
        })?;
        self.metrics.accounts_read.inc_by(r.len() as u64);
        Ok(r)
    }
    fn token_balance(&self, key: &Pubkey) -> Result<u64> {
        self.measure(|| self.inner.token_balance(key))
    }
    fn rent_exempt(&self, len: usize) -> Result<u64> {
        self.measure(|| self.inner.rent_exempt(len))
    }
    fn lamports(&self, key: &Pubkey) -> Result<Option<u64>> {
        self.measure(|| self.inner.lamports(key))
    }
    fn send(&self, ixs: &[Instruction], payer: &Keypair, signers: &[&Keypair]) -> Result<TxReport> {
        let r = self.measure(|| self.inner.send(ixs, payer, signers))?;
        if r.ok {
            self.metrics.tx_ok.inc();
        } else {
            self.metrics.tx_refused.inc();
        }
        Ok(r)
    }
}

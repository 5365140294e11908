//! The embedded cluster as a [`Chain`]: litesvm with the program, a clock the keeper advances.

use std::sync::Mutex;

use anchor_lang::prelude::Pubkey;
use anyhow::Result;
use compute_market_embedded::Cluster;
use solana_instruction::Instruction;
use solana_keypair::Keypair;

use super::{Chain, TxReport};

/// A [`Cluster`] shared by every role of the process.
pub struct EmbeddedChain {
    cluster: Mutex<Cluster>,
}

impl EmbeddedChain {
    /// Wraps a cluster.
    pub fn new(cluster: Cluster) -> Self {
        EmbeddedChain {
            cluster: Mutex::new(cluster),
        }
    }

    /// Runs `f` with the cluster (set-up: mints, token accounts, airdrops).
    pub fn with<T>(&self, f: impl FnOnce(&mut Cluster) -> T) -> T {
        f(&mut self.cluster.lock().expect("cluster lock"))
    }

    /// Advances the clock by `n` slots.
    pub fn advance(&self, n: u64) {
        self.with(|c| c.advance(n));
    }
}

impl Chain for EmbeddedChain {
    fn slot(&self) -> Result<u64> {
        Ok(self.with(|c| c.slot()))
    }

    fn account(&self, key: &Pubkey) -> Result<Option<Vec<u8>>> {
        Ok(self.with(|c| {
            c.svm
                .get_account(key)
                .filter(|a| a.lamports > 0)
                .map(|a| a.data)
        }))
    }

    fn program_accounts(&self, discriminator: &[u8]) -> Result<Vec<(Pubkey, Vec<u8>)>> {
        Ok(self.with(|c| {
            c.svm
                .get_program_accounts(&compute_market::ID)
                .into_iter()
                .filter(|(_, a)| a.lamports > 0 && a.data.starts_with(discriminator))
                .map(|(k, a)| (k, a.data))
                .collect()
        }))
    }

    fn token_balance(&self, key: &Pubkey) -> Result<u64> {
        Ok(self.with(|c| c.balance(key)))
    }

    fn rent_exempt(&self, len: usize) -> Result<u64> {
        Ok(self.with(|c| c.svm.minimum_balance_for_rent_exemption(len)))
    }

    fn lamports(&self, key: &Pubkey) -> Result<Option<u64>> {
        Ok(Some(self.with(|c| {
            c.svm.get_account(key).map_or(0, |a| a.lamports)
        })))
    }

    fn send(&self, ixs: &[Instruction], payer: &Keypair, signers: &[&Keypair]) -> Result<TxReport> {
        let o = self.with(|c| c.send(ixs, payer, signers));
        Ok(TxReport {
            ok: o.ok,
            cu: o.cu,
            logs: o.logs,
            error: o.error,
            signature: Some(o.signature),
        })
    }
}

//! The keeper's roles. Each is a `step` over the [`Chain`](crate::chain::Chain) trait and the
//! [`Backend`](crate::compute::Backend) trait: it reads chain state, decides, and sends what is
//! due. Steps are idempotent: everything they do is derived from chain state, so a restarted
//! keeper picks up where the chain is.

pub mod cranker;
pub mod provider;
pub mod verifier;

use std::sync::Arc;

use anchor_lang::prelude::Pubkey;
use anyhow::Result;
use solana_instruction::Instruction;
use solana_keypair::Keypair;

use crate::{
    chain::{Chain, TxReport},
    compute::Backend,
    tiles::TileStore,
};

/// Who a provider or verifier acts as, and with what.
pub struct NodeCtx {
    /// Name for logs and reports.
    pub name: String,
    /// The node's authority (signs and pays).
    pub kp: Keypair,
    /// The node PDA.
    pub node: Pubkey,
    /// The node's market.
    pub market: Pubkey,
    /// Where it computes.
    pub backend: Arc<dyn Backend>,
    /// Where results are served and fetched.
    pub store: Arc<TileStore>,
}

/// Sends `ix` signed by `kp`; logs refusals with the program's error name.
pub fn send(chain: &dyn Chain, who: &str, what: &str, task: &Pubkey, ix: Instruction, kp: &Keypair) -> Result<TxReport> {
    let r = chain.send(&[ix], kp, &[])?;
    if r.ok {
        tracing::debug!(who, what, %task, cu = r.cu, "sent");
    } else {
        tracing::warn!(who, what, %task, error = r.error_code().unwrap_or_else(|| r.error.clone().unwrap_or_default()), "refused");
    }
    Ok(r)
}

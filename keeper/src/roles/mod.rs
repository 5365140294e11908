//! The keeper's roles. Each is a `step` over the [`Chain`](crate::chain::Chain) trait and the
//! [`Backend`](crate::compute::Backend) trait: it reads chain state, decides, and sends what is
//! due. Steps are idempotent: everything they do is derived from chain state, so a restarted
//! keeper picks up where the chain is.

pub mod availability;
pub mod challenger;
pub mod cranker;
pub mod games;
pub mod liar;
pub mod prefetch;
pub mod provider;
pub mod verifier;
pub mod watcher;

use std::sync::{Arc, Mutex};

use anchor_lang::prelude::Pubkey;
use anyhow::Result;
use solana_instruction::Instruction;
use solana_keypair::Keypair;

use crate::{
    chain::{Chain, TxReport},
    compute::Backend,
    results::ResultStore,
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
    pub store: Arc<ResultStore>,
    /// Tasks handled at once in a pass ([`parallel`]); 1 keeps a pass in order (the embedded
    /// demo, for reproducible runs).
    pub parallel: usize,
    /// Where long work reports its progress: (what, done, in all). `None`: nowhere.
    pub progress: Option<Arc<Reporter>>,
}

/// Something a keeper asked to stop still owes on a task (docs/PROTOCOL.md §3.8).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owed {
    /// The task.
    pub task: Pubkey,
    /// What is owed, in words.
    pub what: &'static str,
}

/// The task's input URI (empty when it has none or it is not UTF-8).
pub fn input_uri(t: &compute_market::state::Task) -> &str {
    t.input_uri
        .get(..t.input_uri_len as usize)
        .and_then(|b| std::str::from_utf8(b).ok())
        .unwrap_or("")
}

/// The task's result URI, as its provider submitted it ("" when none or not UTF-8).
pub fn result_uri(t: &compute_market::state::Task) -> &str {
    t.result_uri
        .get(..t.result_uri_len as usize)
        .and_then(|b| std::str::from_utf8(b).ok())
        .unwrap_or("")
}

/// A progress sink shared by the roles: (what, units done, units in all).
pub type Reporter = dyn Fn(&str, u64, u64) + Send + Sync;

/// Runs `f` over `items` with up to `width` of them in flight at once (scoped threads: RPC
/// round trips overlap, so a keeper with hundreds of due tasks does not wait for each
/// confirmation in turn). `width <= 1` runs them in order on this thread. Results come back in
/// the order of `items`.
pub fn parallel<T: Send, R: Send>(
    width: usize,
    items: Vec<T>,
    f: impl Fn(T) -> R + Sync,
) -> Vec<R> {
    if width <= 1 || items.len() <= 1 {
        return items.into_iter().map(f).collect();
    }
    let count = items.len();
    let queue = Mutex::new(items.into_iter().enumerate());
    let done = Mutex::new(Vec::with_capacity(count));
    std::thread::scope(|s| {
        for _ in 0..width.min(count) {
            s.spawn(|| loop {
                let next = queue.lock().expect("queue lock").next();
                let Some((i, item)) = next else { break };
                let r = f(item);
                done.lock().expect("results lock").push((i, r));
            });
        }
    });
    let mut done = done.into_inner().expect("results lock");
    done.sort_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, r)| r).collect()
}

/// Runs one task's work, turning a panic in it (hostile input reaching a bug) into that task's
/// error: the process, and every other task, goes on.
pub fn guard<R>(f: impl FnOnce() -> Result<R>) -> Result<R> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => {
            let msg = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into());
            anyhow::bail!("panicked: {msg}")
        }
    }
}

/// Sends `ix` signed by `kp`; logs refusals with the program's error name.
pub fn send(
    chain: &dyn Chain,
    who: &str,
    what: &str,
    task: &Pubkey,
    ix: Instruction,
    kp: &Keypair,
) -> Result<TxReport> {
    send_all(chain, who, what, task, &[ix], kp)
}

/// [`send`] of several instructions in one transaction.
pub fn send_all(
    chain: &dyn Chain,
    who: &str,
    what: &str,
    task: &Pubkey,
    ixs: &[Instruction],
    kp: &Keypair,
) -> Result<TxReport> {
    let r = chain.send(ixs, kp, &[])?;
    if r.ok {
        tracing::debug!(who, what, %task, cu = r.cu, "sent");
    } else {
        tracing::warn!(who, what, %task, error = r.error_code().unwrap_or_else(|| r.error.clone().unwrap_or_default()), "refused");
    }
    Ok(r)
}

/// Sends `ixs` packed into as few transactions as fit ([`crate::chain::pack`]), in order,
/// stopping at the first refused one; the reports of those sent.
pub fn send_packed(
    chain: &dyn Chain,
    who: &str,
    what: &str,
    task: &Pubkey,
    ixs: Vec<Instruction>,
    kp: &Keypair,
) -> Result<Vec<TxReport>> {
    use solana_signer::Signer;
    let mut out = vec![];
    for group in crate::chain::pack::pack(ixs, &kp.pubkey()) {
        let r = send_all(chain, who, what, task, &group, kp)?;
        let ok = r.ok;
        out.push(r);
        if !ok {
            break;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn parallel_keeps_order_and_runs_everything() {
        let items: Vec<u64> = (0..100).collect();
        for width in [0, 1, 3, 16, 200] {
            let out = super::parallel(width, items.clone(), |x| {
                std::thread::sleep(std::time::Duration::from_micros(100 - x));
                x * x
            });
            assert_eq!(
                out,
                items.iter().map(|x| x * x).collect::<Vec<_>>(),
                "width {width}"
            );
        }
    }
}

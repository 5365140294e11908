//! One chain-access trait for every role, with two implementations: the embedded cluster
//! (litesvm) and a real cluster over RPC (plus wrappers that meter calls or inject faults).
//! Roles never know which one they talk to.

pub mod embedded;
pub mod flaky;
pub mod metered;
pub mod pack;
pub mod rpc;

use anchor_lang::{prelude::Pubkey, AccountDeserialize, Discriminator, Event};
use anyhow::Result;
use base64::Engine;
use compute_market::state::{Dispute, Game, Node, Task, Vote};
use solana_instruction::Instruction;
use solana_keypair::Keypair;

/// What a sent transaction did.
#[derive(Clone, Debug)]
pub struct TxReport {
    /// Whether it succeeded.
    pub ok: bool,
    /// Compute units consumed.
    pub cu: u64,
    /// Program logs (events are decoded from them).
    pub logs: Vec<String>,
    /// The error when it failed.
    pub error: Option<String>,
    /// The transaction's signature (base58), its id on the cluster; `None` where the chain
    /// cannot say.
    pub signature: Option<String>,
}

impl TxReport {
    /// The Anchor error name in the logs, if any (`"SeedNotReady"`).
    pub fn error_code(&self) -> Option<String> {
        self.logs.iter().find_map(|l| {
            let i = l.find("Error Code: ")?;
            Some(l[i + 12..].split('.').next()?.to_string())
        })
    }

    /// Events of type `E` emitted by the transaction.
    pub fn events<E: Event + Discriminator>(&self) -> Vec<E> {
        decode_events(&self.logs)
    }
}

/// `r` when its transaction succeeded, else an error naming `what` and why it was refused.
pub fn must(what: &str, r: TxReport) -> Result<TxReport> {
    if !r.ok {
        anyhow::bail!(
            "{what} was refused: {}",
            r.error_code()
                .or(r.error.clone())
                .unwrap_or_else(|| "unknown error".into())
        );
    }
    Ok(r)
}

/// Decodes events of type `E` from `Program data:` log lines written by the Compute Market
/// program itself: the runtime's `Program <id> invoke` / `success` / `failed` lines are followed
/// as a stack, and a data line counts only while this program is the one running — any other
/// program can log bytes that look like its events (a transaction that merely names a task's
/// address can carry them).
pub fn decode_events<E: Event + Discriminator>(logs: &[String]) -> Vec<E> {
    let ours = compute_market::ID.to_string();
    let mut stack: Vec<&str> = vec![];
    let mut out = vec![];
    for l in logs {
        if let Some(rest) = l.strip_prefix("Program ") {
            let mut words = rest.split(' ');
            let (id, what) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
            match what {
                "invoke" => stack.push(id),
                "success" | "failed" | "failed:" if stack.last() == Some(&id) => {
                    stack.pop();
                }
                _ => {}
            }
        }
        let Some(b) = l.strip_prefix("Program data: ") else {
            continue;
        };
        if stack.last() != Some(&ours.as_str()) {
            continue;
        }
        if let Ok(d) = base64::engine::general_purpose::STANDARD.decode(b) {
            if d.starts_with(E::DISCRIMINATOR) {
                if let Ok(e) = E::try_from_slice(&d[E::DISCRIMINATOR.len()..]) {
                    out.push(e);
                }
            }
        }
    }
    out
}

/// Access to a cluster running the Compute Market program.
pub trait Chain: Send + Sync {
    /// The current slot.
    fn slot(&self) -> Result<u64>;
    /// The data of a live account.
    fn account(&self, key: &Pubkey) -> Result<Option<Vec<u8>>>;
    /// Every account of the program whose data starts with `discriminator`.
    fn program_accounts(&self, discriminator: &[u8]) -> Result<Vec<(Pubkey, Vec<u8>)>>;
    /// Like [`Chain::program_accounts`], keeping only accounts whose bytes at `offset` equal
    /// `bytes` (a server-side `memcmp` filter over RPC).
    fn program_accounts_matching(
        &self,
        discriminator: &[u8],
        offset: usize,
        bytes: &[u8],
    ) -> Result<Vec<(Pubkey, Vec<u8>)>> {
        Ok(self
            .program_accounts(discriminator)?
            .into_iter()
            .filter(|(_, d)| d.get(offset..offset + bytes.len()) == Some(bytes))
            .collect())
    }
    /// The balance of an SPL token account (0 when it does not exist).
    fn token_balance(&self, key: &Pubkey) -> Result<u64>;
    /// Lamports that make an account of `len` bytes rent-exempt.
    fn rent_exempt(&self, len: usize) -> Result<u64>;
    /// The lamports an account holds (0 when it does not exist); `None` from a chain that
    /// cannot say (test doubles).
    fn lamports(&self, _key: &Pubkey) -> Result<Option<u64>> {
        Ok(None)
    }
    /// Sends one transaction paid by `payer`. `Ok` with `ok: false` when the program refused it;
    /// `Err` when it could not be sent.
    fn send(&self, ixs: &[Instruction], payer: &Keypair, signers: &[&Keypair]) -> Result<TxReport>;
}

/// Decodes an Anchor account (discriminator checked); `None` when it is not a `T`.
pub fn decode<T: AccountDeserialize>(data: &[u8]) -> Option<T> {
    T::try_deserialize(&mut &data[..]).ok()
}

/// Typed reads shared by every role.
pub trait ChainExt: Chain {
    /// All tasks.
    fn tasks(&self) -> Result<Vec<(Pubkey, Task)>> {
        Ok(self
            .program_accounts(Task::DISCRIMINATOR)?
            .into_iter()
            .filter_map(|(k, d)| Some((k, decode(&d)?)))
            .collect())
    }
    /// The tasks of `market` (filtered on the task's market field, server-side over RPC:
    /// other markets' tasks, spam included, are never sent).
    fn tasks_of(&self, market: &Pubkey) -> Result<Vec<(Pubkey, Task)>> {
        Ok(self
            .program_accounts_matching(Task::DISCRIMINATOR, Task::MARKET_OFFSET, market.as_ref())?
            .into_iter()
            .filter_map(|(k, d)| Some((k, decode::<Task>(&d)?)))
            .filter(|(_, t)| t.market == *market)
            .collect())
    }
    /// The nodes of `market` (filtered on the node's market field).
    fn nodes_of(&self, market: &Pubkey) -> Result<Vec<(Pubkey, Node)>> {
        Ok(self
            .program_accounts_matching(Node::DISCRIMINATOR, Node::MARKET_OFFSET, market.as_ref())?
            .into_iter()
            .filter_map(|(k, d)| Some((k, decode::<Node>(&d)?)))
            .filter(|(_, n)| n.market == *market)
            .collect())
    }
    /// The disputes of `task` (filtered on the dispute's task field).
    fn disputes(&self, task: &Pubkey) -> Result<Vec<(Pubkey, Dispute)>> {
        Ok(self
            .program_accounts_matching(Dispute::DISCRIMINATOR, Dispute::TASK_OFFSET, task.as_ref())?
            .into_iter()
            .filter_map(|(k, d)| Some((k, Dispute::from_account_data(&d)?)))
            .filter(|(_, x)| x.task == *task)
            .collect())
    }
    /// The games of `dispute` (PROTOCOL §8.10; filtered on the game's dispute field).
    fn games(&self, dispute: &Pubkey) -> Result<Vec<(Pubkey, Game)>> {
        Ok(self
            .program_accounts_matching(Game::DISCRIMINATOR, Game::DISPUTE_OFFSET, dispute.as_ref())?
            .into_iter()
            .filter_map(|(k, d)| Some((k, Game::from_account_data(&d)?)))
            .filter(|(_, g)| g.dispute == *dispute)
            .collect())
    }
    /// The games of every dispute of `task` (filtered on the game's task field).
    fn games_of_task(&self, task: &Pubkey) -> Result<Vec<(Pubkey, Game)>> {
        Ok(self
            .program_accounts_matching(Game::DISCRIMINATOR, Game::TASK_OFFSET, task.as_ref())?
            .into_iter()
            .filter_map(|(k, d)| Some((k, Game::from_account_data(&d)?)))
            .filter(|(_, g)| g.task == *task)
            .collect())
    }
    /// All votes of `task` (filtered on the vote's first field, the task).
    fn votes(&self, task: &Pubkey) -> Result<Vec<(Pubkey, Vote)>> {
        Ok(self
            .program_accounts_matching(Vote::DISCRIMINATOR, Vote::TASK_OFFSET, task.as_ref())?
            .into_iter()
            .filter_map(|(k, d)| Some((k, decode::<Vote>(&d)?)))
            .filter(|(_, v)| v.task == *task)
            .collect())
    }
    /// Every vote of every task.
    fn all_votes(&self) -> Result<Vec<(Pubkey, Vote)>> {
        Ok(self
            .program_accounts(Vote::DISCRIMINATOR)?
            .into_iter()
            .filter_map(|(k, d)| Some((k, decode(&d)?)))
            .collect())
    }
    /// The program account at `key`, decoded as a `T` (`None` when absent or not a `T`).
    fn decoded<T: AccountDeserialize>(&self, key: &Pubkey) -> Result<Option<T>> {
        Ok(self.account(key)?.and_then(|d| decode(&d)))
    }
    /// A task.
    fn task(&self, key: &Pubkey) -> Result<Option<Task>> {
        self.decoded(key)
    }
    /// A node.
    fn node(&self, key: &Pubkey) -> Result<Option<Node>> {
        self.decoded(key)
    }
    /// The nodes seated on the task `key` (`t`): the holders of its round's seats, then every
    /// node with a vote account on it (a round escalated keeps the first round's votes), each
    /// once (PROTOCOL §8.12: the keepers a client may fetch its result from).
    fn seated(&self, key: &Pubkey, t: &Task) -> Result<Vec<Pubkey>> {
        let mut out: Vec<Pubkey> = t
            .seats
            .iter()
            .filter(|s| s.taken())
            .map(|s| s.node)
            .collect();
        for (_, v) in self.votes(key)? {
            out.push(v.node);
        }
        let mut seen = std::collections::HashSet::new();
        out.retain(|n| seen.insert(*n));
        Ok(out)
    }
    /// The endpoints `nodes` announced (PROTOCOL §2), in order, each once; a node that is gone,
    /// announced none, or cannot be read is left out (logged).
    fn endpoints_of(&self, nodes: &[Pubkey]) -> Vec<String> {
        let mut out: Vec<String> = vec![];
        for n in nodes {
            match self.node(n) {
                Ok(Some(node)) => match std::str::from_utf8(node.endpoint()) {
                    Ok(e) if !e.is_empty() => {
                        let e = e.trim_end_matches('/').to_string();
                        if !out.contains(&e) {
                            out.push(e);
                        }
                    }
                    _ => tracing::debug!(node = %n, "the node announced no endpoint"),
                },
                Ok(None) => tracing::debug!(node = %n, "the node is gone"),
                Err(e) => {
                    tracing::info!(node = %n, error = %format!("{e:#}"), "cannot read the node's endpoint")
                }
            }
        }
        out
    }
    /// All nodes.
    fn nodes(&self) -> Result<Vec<(Pubkey, Node)>> {
        Ok(self
            .program_accounts(Node::DISCRIMINATOR)?
            .into_iter()
            .filter_map(|(k, d)| Some((k, decode(&d)?)))
            .collect())
    }
}

impl<C: Chain + ?Sized> ChainExt for C {}

#[cfg(test)]
mod tests {
    use anchor_lang::{AccountDeserialize, AccountSerialize, Discriminator, Space};
    use compute_market::state::{Node, Task};

    use super::*;

    fn blank<T: AccountDeserialize + Discriminator + Space>() -> T {
        let mut bytes = T::DISCRIMINATOR.to_vec();
        bytes.resize(8 + T::INIT_SPACE, 0);
        T::try_deserialize(&mut bytes.as_slice()).expect("zeroed account decodes")
    }

    #[test]
    fn market_offsets_point_at_the_market_key() {
        let market = Pubkey::new_from_array([7; 32]);
        let mut t: Task = blank();
        t.market = market;
        let mut data = vec![];
        t.try_serialize(&mut data).unwrap();
        assert_eq!(&data[Task::MARKET_OFFSET..][..32], market.as_ref());
        let mut n: Node = blank();
        n.market = market;
        let mut data = vec![];
        n.try_serialize(&mut data).unwrap();
        assert_eq!(&data[Node::MARKET_OFFSET..][..32], market.as_ref());
    }
}

//! What a keeper reads from the cluster per pass while a stranger spams another market with
//! a thousand tasks: its reads are filtered by its own market, so the spam costs it nothing.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
};

use anchor_lang::prelude::Pubkey;
use compute_market::{
    client,
    state::{MarketArgs, Windows},
};
use compute_market_keeper::{
    chain::{must, Chain, ChainExt, TxReport},
    cli::{self, TaskTerms},
    compute::cpu::CpuBackend,
    demo::{DemoConfig, Scenario},
};
use compute_market_protocol::job::JobSpec;
use solana_instruction::Instruction;
use solana_keypair::Keypair;
use solana_signer::Signer;

/// The cluster, counting calls by kind and the accounts scans return.
struct Counting {
    inner: Arc<dyn Chain>,
    calls: Mutex<BTreeMap<&'static str, u64>>,
    accounts: Mutex<u64>,
}

impl Counting {
    fn count(&self, what: &'static str) {
        *self.calls.lock().unwrap().entry(what).or_default() += 1;
    }
    fn take(&self) -> (BTreeMap<&'static str, u64>, u64) {
        (
            std::mem::take(&mut *self.calls.lock().unwrap()),
            std::mem::take(&mut *self.accounts.lock().unwrap()),
        )
    }
}

impl Chain for Counting {
    fn slot(&self) -> anyhow::Result<u64> {
        self.count("getSlot");
        self.inner.slot()
    }
    fn account(&self, key: &Pubkey) -> anyhow::Result<Option<Vec<u8>>> {
        self.count("getAccountInfo");
        self.inner.account(key)
    }
    fn program_accounts(&self, d: &[u8]) -> anyhow::Result<Vec<(Pubkey, Vec<u8>)>> {
        self.count("getProgramAccounts");
        let r = self.inner.program_accounts(d)?;
        *self.accounts.lock().unwrap() += r.len() as u64;
        Ok(r)
    }
    fn program_accounts_matching(
        &self,
        d: &[u8],
        offset: usize,
        bytes: &[u8],
    ) -> anyhow::Result<Vec<(Pubkey, Vec<u8>)>> {
        self.count("getProgramAccounts (memcmp)");
        let r = self.inner.program_accounts_matching(d, offset, bytes)?;
        *self.accounts.lock().unwrap() += r.len() as u64;
        Ok(r)
    }
    fn token_balance(&self, key: &Pubkey) -> anyhow::Result<u64> {
        self.count("getTokenAccountBalance");
        self.inner.token_balance(key)
    }
    fn rent_exempt(&self, len: usize) -> anyhow::Result<u64> {
        self.count("getMinimumBalanceForRentExemption");
        self.inner.rent_exempt(len)
    }
    fn send(
        &self,
        ixs: &[Instruction],
        payer: &Keypair,
        s: &[&Keypair],
    ) -> anyhow::Result<TxReport> {
        self.count("sendTransaction");
        self.inner.send(ixs, payer, s)
    }
}

#[test]
fn a_thousand_spam_tasks_in_another_market_cost_a_keeper_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Scenario::new(
        &DemoConfig {
            tasks: 4,
            ..Default::default()
        },
        Arc::new(CpuBackend),
        dir.path(),
    )
    .unwrap();
    // a second market, and a stranger's thousand tasks in it
    let market = MarketArgs {
        id: 2,
        name: "spam".into(),
        min_gflops: 1_000,
        min_memory_gb: 16,
        quorum: 3,
        samples: 16,
        windows: Windows {
            submit: 60,
            join: 20,
            commit: 20,
            reveal: 20,
        },
        task_ttl: 100_000,
        min_quorum: 0,
        dispute_window: 0,
    };
    let admin = Keypair::try_from(&s.admin.to_bytes()[..]).unwrap();
    must(
        "create_market",
        s.chain
            .send(
                &[client::create_market(admin.pubkey(), market)],
                &admin,
                &[],
            )
            .unwrap(),
    )
    .unwrap();
    let terms = TaskTerms {
        market: 2,
        reward: 1_000_000,
        quorum: 0,
        samples: 0,
        region: 0,
        ..Default::default()
    };
    let spam: Vec<(u64, JobSpec)> = (0..1000)
        .map(|i| (10_000 + i, JobSpec::hash_batch(1, 1, 1, [i as u8; 32])))
        .collect();
    cli::task_post(s.chain.as_ref(), &s.client, terms, spam).unwrap();
    assert!(s.chain.tasks().unwrap().len() >= 1004);

    let counting = Arc::new(Counting {
        inner: s.chain.clone(),
        calls: Mutex::new(BTreeMap::new()),
        accounts: Mutex::new(0),
    });
    // mid-market: some tasks claimed, some verifying
    for _ in 0..6 {
        s.tick().unwrap();
    }
    // one pass of a keeper running every role: each role's own step
    let chain: Arc<dyn Chain> = counting.clone();
    s.providers[0].step(chain.as_ref()).unwrap();
    s.verifiers[0].step(chain.as_ref()).unwrap();
    s.cranker.step(chain.as_ref()).unwrap();
    let (calls, accounts) = counting.take();
    let scans: u64 = calls
        .iter()
        .filter(|(k, _)| k.starts_with("getProgramAccounts"))
        .map(|(_, v)| v)
        .sum();
    println!("one pass of provider + verifier + cranker: {calls:?}; accounts returned by scans: {accounts}");
    assert!(
        accounts < 100,
        "the spam never reaches the keeper: {accounts} accounts"
    );
    assert!(scans <= 4, "{calls:?}");
    // the daemon's pass: one market read shared by the roles
    let now = chain.slot().unwrap();
    let tasks = chain.tasks_of(&compute_market::pda::market(1)).unwrap();
    s.providers[0]
        .step_with(chain.as_ref(), now, &tasks)
        .unwrap();
    s.verifiers[0]
        .step_with(chain.as_ref(), now, &tasks)
        .unwrap();
    s.cranker.step_with(chain.as_ref(), now, tasks).unwrap();
    let (calls, accounts) = counting.take();
    println!(
        "the daemon's pass (one shared read): {calls:?}; accounts returned by scans: {accounts}"
    );
    assert!(accounts < 100, "{accounts}");
}

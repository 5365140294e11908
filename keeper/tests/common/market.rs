//! A client's task on the client's data run on the embedded market.

/// A client's inference task on the embedded market: its parts uploaded to a content store,
/// the task posted on them, every node fetching them, the result read back from the provider's
/// store once the task is closed. `corrupt`: the fraction of rows the provider corrupts.
/// Returns (provider's tasks completed, times slashed, the output's bytes).
pub fn on_the_market(
    prepared: compute_market_keeper::clientdata::PreparedInputs,
    corrupt: f64,
    samples: u16,
) -> (u32, u32, Vec<u8>) {
    use std::sync::Arc;

    use compute_market::pda;
    use compute_market_keeper::{
        chain::ChainExt,
        cli::{self, TaskTerms},
        clientdata,
        compute::cpu::CpuBackend,
        demo::{DemoConfig, Scenario},
        metrics::Metrics,
        results::{self, FetchPolicy, ResultStore},
    };
    use solana_signer::Signer;

    let policy = FetchPolicy {
        allow_loopback: true,
        ..FetchPolicy::default()
    };
    let host = Arc::new(ResultStore::default().with_policy(policy.clone()));
    let server = results::serve(host, Arc::new(Metrics::default()), "127.0.0.1:0").unwrap();
    let url = format!("http://{}", server.addr);
    let dir = tempfile::tempdir().unwrap();
    clientdata::upload(&url, &prepared, &policy).unwrap();
    let mut s = Scenario::new(
        &DemoConfig {
            providers: 2,
            verifiers: 3,
            tasks: 1,
            corrupt_fraction: 0.0,
            ..Default::default()
        },
        Arc::new(CpuBackend),
        dir.path(),
    )
    .unwrap();
    s.run_to_end(3_000).unwrap();
    // every node shares one store that may fetch from loopback
    let shared = Arc::new(ResultStore::default().with_policy(policy));
    for p in &mut s.providers {
        p.ctx.store = shared.clone();
        p.corrupt_fraction = 0.0;
    }
    // one provider takes it: the first, corrupting `corrupt` of its tiles
    s.providers[1].max_active = 0;
    s.providers[0].corrupt_fraction = corrupt;
    for v in &mut s.verifiers {
        v.ctx.store = shared.clone();
    }
    let node = s.providers[0].ctx.node;
    let before = s.chain.node(&node).unwrap().unwrap();
    let terms = TaskTerms {
        input_uri: url,
        market: 1,
        reward: 1_000_000,
        samples,
        ..Default::default()
    };
    cli::task_post(
        s.chain.as_ref(),
        &s.client,
        terms,
        vec![(900, prepared.job)],
    )
    .unwrap();
    let key = pda::task(&s.client.pubkey(), 900);
    let mut root = None;
    for _ in 0..400 {
        if let Some(t) = s.chain.task(&key).unwrap() {
            root = root.or((t.result_root != [0; 32]).then_some(t.result_root));
        } else {
            break;
        }
        s.tick().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    let left = s.chain.task(&key).unwrap();
    assert!(
        left.is_none(),
        "the task closed: {:?}, {} role errors",
        left.map(|t| (t.status, t.submit_deadline, t.result_root != [0; 32])),
        s.errors
    );
    let after = s.chain.node(&node).unwrap().unwrap();
    let entry = shared
        .entry(&root.expect("a result was submitted"))
        .unwrap();
    (
        after.tasks_completed - before.tasks_completed,
        after.times_slashed - before.times_slashed,
        entry.tiles().unwrap().concat(),
    )
}

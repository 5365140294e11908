//! The demo scenario as an integration test: outcomes and balances follow the protocol's
//! rules (the dishonest provider is slashed, the careless verifier loses stake whenever it
//! sides with a rejected result).

mod common;

use std::sync::Arc;

use compute_market_keeper::{
    compute::cpu::CpuBackend,
    demo::{run, DemoConfig},
};

#[test]
fn demo_slashes_the_cheater_and_the_careless_verifier() {
    let cfg = DemoConfig {
        tasks: 8,
        ..Default::default()
    };
    let r = run(&cfg, Arc::new(CpuBackend)).expect("demo runs to the end");
    assert_eq!(r.tasks.len(), 8);
    let cheater = r.nodes.iter().find(|n| n.name.contains("cheats")).unwrap();
    let cheats: Vec<_> = r
        .tasks
        .iter()
        .filter(|t| t.provider.contains("cheats"))
        .collect();
    assert!(!cheats.is_empty(), "the cheater computed some tasks");
    for t in &cheats {
        assert_eq!(
            t.outcome, "Rejected",
            "task {} by the cheater: {:?}",
            t.id, t
        );
        assert!(t.provider_slashed > 0);
    }
    assert!(cheater.times_slashed as usize >= cheats.len());
    for t in r.tasks.iter().filter(|t| !t.provider.contains("cheats")) {
        assert_eq!(t.outcome, "Accepted", "honest task {}: {:?}", t.id, t);
        assert!(t.provider_paid > 0);
    }
    // the careless verifier always votes valid: every rejected task it sat on cost it stake
    let careless = r
        .nodes
        .iter()
        .find(|n| n.name.contains("careless"))
        .unwrap();
    let honest_verifiers = r.nodes.iter().filter(|n| n.role == "verifier");
    assert!(
        honest_verifiers.clone().all(|n| n.times_slashed == 0),
        "honest verifiers are never slashed"
    );
    assert!(honest_verifiers.map(|n| n.earned).sum::<u64>() > 0);
    assert!(
        careless.sided_with_loser > 0,
        "the careless verifier sat on a rejected task"
    );
    // slashed whenever it sided with the loser of a decided round; a vote in an escalated
    // round 0 (no majority) is released, though the report counts it against the final outcome
    assert!(
        careless.times_slashed > 0 && careless.times_slashed <= careless.sided_with_loser,
        "slashed when it sided with the loser: {} of {}",
        careless.times_slashed,
        careless.sided_with_loser
    );
    assert!(careless.slashed > 0);
    assert!(r.treasury > 0, "fees reached the treasury");
    // balances: every vault holds its stake plus what it earned minus what it lost
    for n in &r.nodes {
        assert_eq!(
            n.vault as i128,
            n.staked as i128 + n.earned as i128 - n.slashed as i128,
            "vault of {}",
            n.name
        );
    }
    assert_eq!(cheater.earned, 0);
    assert!(cheater.vault < cheater.staked);
    assert!(r.model.p > 0.0 && r.model.measured > 0.0);
}

/// Least-loaded first: with every task posted in the same slot, one pass of the providers
/// leaves each of them holding one task (without the back-off the first would take two).
#[test]
fn fresh_tasks_go_to_the_least_loaded_providers() {
    use compute_market::state::TaskStatus;
    use compute_market_keeper::{chain::ChainExt, demo::Scenario};
    let dir = std::env::temp_dir().join(format!("cm-least-loaded-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = DemoConfig {
        tasks: 6,
        ..Default::default()
    };
    let mut s = Scenario::new(&cfg, Arc::new(CpuBackend), &dir).expect("scenario");
    let chain = s.roles_chain.clone();
    let held = |s: &Scenario| -> Vec<usize> {
        let tasks = chain.tasks().unwrap();
        s.providers
            .iter()
            .map(|p| {
                tasks
                    .iter()
                    .filter(|(_, t)| t.status == TaskStatus::Claimed && t.provider == p.ctx.node)
                    .count()
            })
            .collect()
    };
    for p in s.providers.iter_mut() {
        assert!(p.max_active >= 2);
        p.step(chain.as_ref()).unwrap();
    }
    assert_eq!(
        held(&s),
        vec![1; cfg.providers],
        "one fresh task per provider"
    );
    // next pass: the first provider submits its task (load back to 0) and claims another
    s.chain.advance(1);
    s.providers[0].step(chain.as_ref()).unwrap();
    let tasks = chain.tasks().unwrap();
    let mine: Vec<_> = tasks
        .iter()
        .filter(|(_, t)| t.provider == s.providers[0].ctx.node)
        .map(|(_, t)| t.status)
        .collect();
    assert_eq!(mine.len(), 2, "{mine:?}");
    assert!(
        mine.contains(&TaskStatus::Verifying) && mine.contains(&TaskStatus::Claimed),
        "{mine:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Seats by lowest tickets (PROTOCOL §3, Seats): five verifiers for three seats join as they
/// come, so later, better tickets displace seated ones. Every displaced verifier got its bond
/// back, and every task still ends as it should.
#[test]
fn displaced_verifiers_keep_their_bonds_and_tasks_still_finish() {
    use compute_market_keeper::{chain::ChainExt, demo::Scenario};
    let dir = tempfile::tempdir().unwrap();
    let cfg = DemoConfig {
        tasks: 8,
        ..Default::default()
    };
    let mut s = Scenario::new(&cfg, Arc::new(CpuBackend), dir.path()).expect("scenario");
    s.run_to_end(2_000).unwrap();
    let displaced: Vec<_> = s
        .verifiers
        .iter()
        .flat_map(|v| &v.records)
        .filter_map(|r| r.displaced.map(|d| (r.task, d)))
        .collect();
    assert!(
        !displaced.is_empty(),
        "with five verifiers for three seats some later ticket displaced a seated one"
    );
    for v in &s.verifiers {
        let n = s.chain.node(&v.ctx.node).unwrap().expect("verifier node");
        assert_eq!(n.bonded, 0, "{}: no bond left behind", v.ctx.name);
    }
    common::assert_outcomes(&s.report().unwrap());
}

#[test]
fn the_demo_posts_the_digits_and_sentences_and_reports_what_the_market_verified() {
    let cfg = DemoConfig {
        tasks: 4,
        digits: true,
        sentences: true,
        // every provider honest: the inference tasks are Accepted whoever takes them
        corrupt_fraction: 0.0,
        ..Default::default()
    };
    let r = run(&cfg, Arc::new(CpuBackend)).expect("demo runs to the end");
    assert_eq!(r.tasks.len(), 6, "four tasks, the digits and the sentences");
    let e = r.sentences.clone().expect("the sentences task is reported");
    assert_eq!((e.outcome.as_str(), e.texts), ("Accepted", 300));
    let (mean, min) = e.cosine.expect("embedded");
    assert!(
        mean >= 0.99 && min >= 0.98,
        "cosine {mean} mean, {min} least"
    );
    assert_eq!(e.by_kind.len(), 14, "the first 60, twelve kinds, all");
    assert!(e.by_kind.iter().all(|k| k.least >= 0.98), "{:?}", e.by_kind);
    assert!(r.verification_over_compute_by_kind.contains_key("Encoder"));
    let d = r.digits.clone().expect("the digits task is reported");
    assert_eq!((d.outcome.as_str(), d.rows), ("Accepted", 450));
    let (a, f) = (d.accuracy.expect("classified"), d.float_accuracy.unwrap());
    assert!(a >= f - 0.01, "{a} vs the float model's {f}");
    assert!(r.verification_over_compute_by_kind.contains_key("Mlp"));
    let text = compute_market_keeper::demo::render(&r);
    assert!(
        text.contains("the market's verified result classifies")
            && text.contains("the market's verified embeddings have cosine")
            && text.contains("multilingual")
            && text.contains("emoji"),
        "{text}"
    );
}

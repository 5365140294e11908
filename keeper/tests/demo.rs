//! The demo scenario as an integration test: outcomes and balances follow the protocol's
//! rules (the dishonest provider is slashed, the careless verifier loses stake whenever it
//! sides with a rejected result).

use std::sync::Arc;

use compute_market_keeper::{
    compute::cpu::CpuBackend,
    demo::{run, DemoConfig},
};

#[test]
fn demo_slashes_the_cheater_and_the_careless_verifier() {
    let cfg = DemoConfig { tasks: 8, ..Default::default() };
    let r = run(&cfg, Arc::new(CpuBackend)).expect("demo runs to the end");
    assert_eq!(r.tasks.len(), 8);
    let cheater = r.nodes.iter().find(|n| n.name.contains("cheats")).unwrap();
    let cheats: Vec<_> = r.tasks.iter().filter(|t| t.provider.contains("cheats")).collect();
    assert!(!cheats.is_empty(), "the cheater computed some tasks");
    for t in &cheats {
        assert_eq!(t.outcome, "Rejected", "task {} by the cheater: {:?}", t.id, t);
        assert!(t.provider_slashed > 0);
    }
    assert!(cheater.times_slashed as usize >= cheats.len());
    for t in r.tasks.iter().filter(|t| !t.provider.contains("cheats")) {
        assert_eq!(t.outcome, "Accepted", "honest task {}: {:?}", t.id, t);
        assert!(t.provider_paid > 0);
    }
    // the careless verifier always votes valid: every rejected task it sat on cost it stake
    let careless = r.nodes.iter().find(|n| n.name.contains("careless")).unwrap();
    let honest_verifiers = r.nodes.iter().filter(|n| n.role == "verifier");
    assert!(honest_verifiers.clone().all(|n| n.times_slashed == 0), "honest verifiers are never slashed");
    assert!(honest_verifiers.map(|n| n.earned).sum::<u64>() > 0);
    assert!(careless.sided_with_loser > 0, "the careless verifier sat on a rejected task");
    assert_eq!(careless.times_slashed, careless.sided_with_loser, "slashed exactly when it sided with the loser");
    assert!(careless.slashed > 0);
    assert!(r.treasury > 0, "fees reached the treasury");
    // balances: every vault holds its stake plus what it earned minus what it lost
    for n in &r.nodes {
        assert_eq!(n.vault as i128, n.staked as i128 + n.earned as i128 - n.slashed as i128, "vault of {}", n.name);
    }
    assert_eq!(cheater.earned, 0);
    assert!(cheater.vault < cheater.staked);
    assert!(r.model.p > 0.0 && r.model.measured > 0.0);
}

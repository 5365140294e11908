//! Helpers shared by the keeper's integration tests.

use compute_market_keeper::demo::DemoReport;

/// Every task of the demo ends as its provider deserves: the cheater's rejected, the others
/// accepted.
#[allow(dead_code)]
pub fn assert_outcomes(r: &DemoReport) {
    for t in &r.tasks {
        let expected = if t.provider.contains("cheats") {
            "Rejected"
        } else {
            "Accepted"
        };
        assert_eq!(t.outcome, expected, "{t:?}");
    }
}

#[allow(dead_code)]
pub mod hostile;
#[allow(dead_code)]
pub mod market;

#[allow(dead_code)]
pub mod serve;

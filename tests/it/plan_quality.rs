//! The quality targets, kept as a test at R = 64 with 64 samples a
//! rank on every scenario (the table in `BENCHMARKS.md` also has R = 1024):
//! predicted step time over its lower bound at most 1.01 with one barrier
//! per step and 1.05 with per-phase barriers, and better than balancing by
//! tokens (the same planner with cost = tokens) under every sync model.
#![cfg(feature = "scenarios")]

use microbatch::cost::Tokens;
use microbatch::plan::{Planner, SyncModel};
use microbatch::scenario::Scenario;

#[test]
fn targets_hold_on_every_scenario() {
    for scenario in Scenario::ALL {
        let model = scenario.preset().cost_model();
        for seed in [42, 7] {
            let batch = scenario.generate(64 * 64, seed);
            for sync in SyncModel::ALL {
                let plan = scenario.planner(64).sync(sync).plan(&batch).unwrap();
                let r = plan.report();
                let limit = match sync {
                    SyncModel::Step => 1.01,
                    _ => 1.05,
                };
                assert!(
                    r.ratio() <= limit,
                    "{scenario} {sync} seed {seed}: {}",
                    r.ratio()
                );
                let mut by_tokens = Planner::new(Tokens::new(1.0).unwrap())
                    .ranks(64)
                    .seq_len(scenario.seq_len())
                    .sync(sync);
                if let Some(u) = scenario.max_units() {
                    by_tokens = by_tokens.max_units(u);
                }
                let tokens = by_tokens
                    .plan(&batch)
                    .unwrap()
                    .predict(&batch, &model, sync)
                    .unwrap();
                assert!(
                    r.predicted < tokens,
                    "{scenario} {sync} seed {seed}: {} >= {tokens}",
                    r.predicted
                );
                assert!(r.predicted < r.baseline, "{scenario} {sync} seed {seed}");
            }
        }
    }
}

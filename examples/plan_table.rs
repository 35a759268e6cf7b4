//! Prints the planner's table for `BENCHMARKS.md`: for every scenario, at
//! R = 64 and R = 1024 ranks with 64 samples a rank, and every sync model,
//! the predicted step time of the naive baseline, of token-count balancing
//! (the same planner with cost = tokens, as verl and OpenRLHF balance) and
//! of `microbatch`, each over the lower bound, with the planning time.
//!
//! ```text
//! cargo run --release --example plan_table
//! cargo run --release --example plan_table -- 64,1024 42   # ranks, seed
//! ```

use microbatch::cost::{preset, Tokens};
use microbatch::plan::{Planner, SyncModel};
use microbatch::scenario::Scenario;

fn main() {
    let mut args = std::env::args().skip(1);
    let ranks: Vec<usize> = args
        .next()
        .map(|s| s.split(',').map(|x| x.parse().expect("ranks")).collect())
        .unwrap_or_else(|| vec![64, 1024]);
    let seed: u64 = args.next().map_or(42, |s| s.parse().expect("seed"));
    println!("| scenario | R | sync model | A | baseline | token-balanced | microbatch | lower bound | planning |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for scenario in Scenario::ALL {
        let model = preset(scenario.preset()).unwrap().cost_model().unwrap();
        for &r in &ranks {
            let batch = scenario.generate(64 * r, seed);
            for sync in SyncModel::ALL {
                let plan = scenario
                    .planner(r)
                    .unwrap()
                    .sync(sync)
                    .plan(&batch)
                    .unwrap();
                let mut by_tokens =
                    Planner::new(Tokens::new(1.0).unwrap(), r, scenario.seq_len()).sync(sync);
                if let Some(u) = scenario.max_units() {
                    by_tokens = by_tokens.max_units(u);
                }
                let tokens = by_tokens
                    .plan(&batch)
                    .unwrap()
                    .predict(&batch, &model, sync)
                    .unwrap();
                let rep = plan.report();
                let lb = rep.lower_bound;
                println!(
                    "| {} | {} | {} | {} | {:.4} | {:.4} | **{:.4}** | 1 ({:.4e}) | {:.1} ms |",
                    scenario,
                    r,
                    sync,
                    plan.micro_steps(),
                    rep.baseline / lb,
                    tokens / lb,
                    rep.ratio(),
                    lb,
                    rep.planning_time.map_or(0.0, |t| t.as_secs_f64() * 1e3),
                );
            }
        }
    }
}

//! Prints the planner's table for `BENCHMARKS.md`: for every scenario, at
//! R = 64 and R = 1024 ranks with 64 samples a rank, and every sync model,
//! the predicted step time (on the phase-aware cost model) over its lower
//! bound of
//!
//! - the naive baseline (the data loader's order, packed greedily, dealt to
//!   ranks in turn);
//! - verl-style balancing: Karmarkar-Karp over the ranks with equal sample
//!   counts on verl's workload `24576 * T + T^2` ([`microbatch::partition`]),
//!   then first-fit-decreasing within each rank, every rank padded to the
//!   largest micro-step count (verl, OpenRLHF);
//! - token-balanced: this planner with the cost model replaced by the token
//!   count;
//! - microbatch: this planner with the phase-aware model;
//!
//! with the planning time.
//!
//! ```text
//! cargo run --release --example plan_table
//! cargo run --release --example plan_table -- 64,1024 42   # ranks, seed
//! ```

use microbatch::cost::{CostModel, Phases, Sample, Tokens};
use microbatch::pack::first_fit_decreasing;
use microbatch::partition::{Algorithm, Partitioner};
use microbatch::plan::{Planner, StepSample, SyncModel};
use microbatch::scenario::Scenario;

/// The step time of a layout `rank -> micro-step -> samples` under `sync`.
fn step_time(layout: &[Vec<Vec<&Sample>>], model: &impl CostModel, sync: SyncModel) -> f64 {
    let steps = layout.iter().map(Vec::len).max().unwrap_or(0);
    let cost =
        |r: usize, j: usize| -> Phases { model.cost(layout[r].get(j).map_or(&[], Vec::as_slice)) };
    let ranks = layout.len();
    match sync {
        SyncModel::Step => (0..ranks)
            .map(|r| (0..steps).map(|j| cost(r, j).total()).sum::<f64>())
            .fold(0.0, f64::max),
        SyncModel::MicroStep => (0..steps)
            .map(|j| (0..ranks).map(|r| cost(r, j).total()).fold(0.0, f64::max))
            .sum(),
        SyncModel::Phase => (0..steps)
            .map(|j| {
                (0..ranks)
                    .map(|r| cost(r, j))
                    .fold(Phases::ZERO, Phases::max)
                    .total()
            })
            .sum(),
        _ => unimplemented!("the sync model {sync} is not in this table"),
    }
}

/// verl's balancing: KK over ranks with equal counts on `24576 T + T^2`,
/// then FFD into sequences within each rank (one sequence a micro-step).
fn verl_layout(batch: &[StepSample], ranks: usize, scenario: Scenario) -> Vec<Vec<Vec<&Sample>>> {
    let workload: Vec<(u64, u64)> = batch
        .iter()
        .map(|s| {
            let t = s.sample().tokens();
            (s.id(), 24576 * t + t * t)
        })
        .collect();
    let parts = Partitioner::new(ranks)
        .algorithm(Algorithm::KarmarkarKarp)
        .equal_count(true)
        .partition(&workload)
        .expect("a partition");
    let cap = [scenario.seq_len(), scenario.max_units().unwrap_or(u32::MAX)];
    parts
        .parts()
        .map(|part| {
            let items: Vec<(u64, [u32; 2])> = part
                .iter()
                .map(|&i| {
                    let s = &batch[i];
                    (s.id(), [s.sample().tokens() as u32, s.units() as u32])
                })
                .collect();
            let packing = first_fit_decreasing(&items, cap).expect("samples fit");
            packing
                .bins()
                .map(|bin| {
                    bin.items()
                        .iter()
                        .map(|&k| batch[part[k]].sample())
                        .collect()
                })
                .collect()
        })
        .collect()
}

fn main() {
    let mut args = std::env::args().skip(1);
    let ranks: Vec<usize> = args
        .next()
        .map(|s| s.split(',').map(|x| x.parse().expect("ranks")).collect())
        .unwrap_or_else(|| vec![64, 1024]);
    let seed: u64 = args.next().map_or(42, |s| s.parse().expect("seed"));
    println!(
        "| scenario | R | sync model | A | baseline | verl-style KK | token-balanced | microbatch | lower bound | planning |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for scenario in Scenario::ALL {
        let model = scenario.preset().cost_model();
        for &r in &ranks {
            let batch = scenario.generate(64 * r, seed);
            let verl = verl_layout(&batch, r, scenario);
            for sync in SyncModel::ALL {
                let plan = scenario.planner(r).sync(sync).plan(&batch).unwrap();
                let mut by_tokens = Planner::new(Tokens::new(1.0).unwrap())
                    .ranks(r)
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
                let rep = plan.report();
                let lb = rep.lower_bound;
                println!(
                    "| {} | {} | {} | {} | {:.4} | {:.4} | {:.4} | **{:.4}** | 1 ({:.4e}) | {:.1} ms |",
                    scenario,
                    r,
                    sync,
                    plan.micro_steps(),
                    rep.baseline / lb,
                    step_time(&verl, &model, sync) / lb,
                    tokens / lb,
                    rep.ratio(),
                    lb,
                    rep.planning_time.map_or(0.0, |t| t.as_secs_f64() * 1e3),
                );
            }
        }
    }
}

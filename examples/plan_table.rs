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
//! with the planning time. The rows "given" do the same on per-sample costs
//! in seconds from an independent "measured" model of the same model pair
//! ([`measured`]: other throughputs per term and fixed overheads per image,
//! tile and sample that no preset knows), attached with
//! [`Sample::with_cost`] and planned with [`Given`]: the planner told the
//! exact costs, as a trainer with its own profiler would.
//!
//! ```text
//! cargo run --release --example plan_table
//! cargo run --release --example plan_table -- 64,1024 42   # ranks, seed
//! ```
//!
//! With `seeds` first, the plans of one sync model over the 13 seeds the
//! tables of `BENCHMARKS.md` use (42 7 1 3 5 2 4 6 8 9 10 11 12), with the
//! given costs, the preset's or both (the default), at each of the listed
//! search efforts (`default`: the planner's): per scenario and effort, the mean
//! and the worst of `predicted / lower_bound`, how many seeds are within
//! 1.01, and the wall time of the 13 plans:
//!
//! ```text
//! cargo run --release --example plan_table -- seeds phase 1024 45,70 given   # sync, ranks, efforts, costs
//! ```

use microbatch::cost::{CostModel, Given, Incremental, Phases, Sample, Tokens};
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

/// H100 dense BF16 peak, FLOP/s.
const PEAK: f64 = 989e12;

/// The batch with per-sample costs in seconds from a "measured" model of
/// the scenario's model pair: vision = the preset's vision FLOPs at 40% of
/// peak + 0.35 ms per image + 0.05 ms per ViT unit; language = the LLM's
/// linear FLOPs at 55% of peak + its attention FLOPs at 30% of peak + 0.15
/// ms per sample. Additive per sample, so [`Given`] is exact for it.
fn measured(batch: &[StepSample], scenario: Scenario) -> Vec<StepSample> {
    let model = scenario.preset().cost_model();
    let (vit, llm) = model.terms();
    let (linear, attention) = llm.terms();
    batch
        .iter()
        .map(|s| {
            let x = s.sample();
            let one = [x];
            let vision = vit.cost(&one).vision / (0.40 * PEAK)
                + 0.35e-3 * x.images().len() as f64
                + 0.05e-3 * s.units() as f64;
            let language = linear.cost(&one).language / (0.55 * PEAK)
                + attention.cost(&one).language / (0.30 * PEAK)
                + 0.15e-3;
            let cost = Phases::new(vision, language);
            let sample = x.clone().with_cost(cost).expect("finite costs");
            let mut out = StepSample::new(s.id(), sample).with_loss_tokens(s.loss_tokens());
            if let Some(o) = s.origin() {
                out = out.with_origin(o);
            }
            out
        })
        .collect()
}

/// One row of the table: `plan`'s report against the baseline, verl-style
/// balancing and token balancing, all under `model`.
#[allow(clippy::too_many_arguments)]
fn row<M: CostModel + Incremental>(
    scenario: Scenario,
    costs: &str,
    r: usize,
    sync: SyncModel,
    batch: &[StepSample],
    model: &M,
    plan: &microbatch::plan::Plan,
) {
    let verl = verl_layout(batch, r, scenario);
    let mut by_tokens = Planner::new(Tokens::new(1.0).unwrap())
        .ranks(r)
        .seq_len(scenario.seq_len())
        .sync(sync);
    if let Some(u) = scenario.max_units() {
        by_tokens = by_tokens.max_units(u);
    }
    let tokens = by_tokens
        .plan(batch)
        .unwrap()
        .predict(batch, model, sync)
        .unwrap();
    let rep = plan.report();
    let lb = rep.lower_bound;
    println!(
        "| {} | {} | {} | {} | {} | {:.4} | {:.4} | {:.4} | **{:.4}** | 1 ({:.4e}) | {:.1} ms |",
        scenario,
        costs,
        r,
        sync,
        plan.micro_steps(),
        rep.baseline / lb,
        step_time(&verl, model, sync) / lb,
        tokens / lb,
        rep.ratio(),
        lb,
        plan.planning_time().map_or(0.0, |t| t.as_secs_f64() * 1e3),
    );
}

/// The planner of the "given" rows: told each sample's cost ([`Given`]),
/// with the scenario's caps, over `r` ranks under `sync`.
fn given_planner(scenario: Scenario, r: usize, sync: SyncModel) -> Planner<Given> {
    let planner = Planner::new(Given)
        .ranks(r)
        .seq_len(scenario.seq_len())
        .sync(sync);
    match scenario.max_units() {
        Some(u) => planner.max_units(u),
        None => planner,
    }
}

/// The seeds of the 13-seed tables of `BENCHMARKS.md`.
const SEEDS: [u64; 13] = [42, 7, 1, 3, 5, 2, 4, 6, 8, 9, 10, 11, 12];

/// The `seeds` mode (see the module docs): `sync`, `ranks`, the efforts
/// and the costs (`given`, `preset` or `both`) from `args`.
fn seeds(mut args: impl Iterator<Item = String>) {
    let sync: SyncModel = args
        .next()
        .expect("a sync model")
        .parse()
        .expect("step, micro-step or phase");
    let r: usize = args.next().map_or(1024, |s| s.parse().expect("ranks"));
    // `None`: the planner's default effort.
    let efforts: Vec<Option<u32>> = match args.next().as_deref() {
        None | Some("default") => vec![None],
        Some(s) => s
            .split(',')
            .map(|x| Some(x.parse().expect("an effort")))
            .collect(),
    };
    let costs = args.next().unwrap_or_else(|| "both".to_string());
    let kinds: &[&str] = match costs.as_str() {
        "given" => &["given"],
        "preset" => &["preset"],
        "both" => &["given", "preset"],
        other => panic!("costs: given, preset or both (got {other:?})"),
    };
    let count = SEEDS.len();
    println!("| scenario | costs | sync model | R | effort | mean | worst | seeds within 1.01 | seed {} | time of {count} plans |", SEEDS[0]);
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for &kind in kinds {
        for scenario in Scenario::ALL {
            let batches: Vec<Vec<StepSample>> = SEEDS
                .iter()
                .map(|&seed| {
                    let batch = scenario.generate(64 * r, seed);
                    if kind == "given" {
                        measured(&batch, scenario)
                    } else {
                        batch
                    }
                })
                .collect();
            for &effort in &efforts {
                let start = std::time::Instant::now();
                let ratios: Vec<f64> = if kind == "given" {
                    let planner = with_effort(given_planner(scenario, r, sync), effort);
                    batches.iter().map(|b| ratio(&planner, b)).collect()
                } else {
                    let planner = with_effort(scenario.planner(r).sync(sync), effort);
                    batches.iter().map(|b| ratio(&planner, b)).collect()
                };
                let time = start.elapsed();
                let effort = effort.map_or_else(|| "default".to_string(), |e| e.to_string());
                let mean = ratios.iter().sum::<f64>() / ratios.len() as f64;
                let worst = ratios.iter().copied().fold(0.0, f64::max);
                let within = ratios.iter().filter(|&&x| x <= 1.01).count();
                println!(
                    "| {scenario} | {kind} | {sync} | {r} | {effort} | {mean:.4} | {worst:.4} | {within} of {count} | {:.4} | {:.2} s |",
                    ratios[0],
                    time.as_secs_f64()
                );
            }
        }
    }
}

/// `planner` with the search effort `effort` (`None`: its default).
fn with_effort<M: Incremental>(planner: Planner<M>, effort: Option<u32>) -> Planner<M> {
    match effort {
        Some(e) => planner.search_effort(e),
        None => planner,
    }
}

/// The plan's predicted step time over its lower bound.
fn ratio<M: Incremental>(planner: &Planner<M>, batch: &[StepSample]) -> f64 {
    let plan = planner.plan(batch).unwrap();
    plan.report().predicted / plan.report().lower_bound
}

fn main() {
    let mut args = std::env::args().skip(1).peekable();
    if args.peek().map(String::as_str) == Some("seeds") {
        args.next();
        seeds(args);
        return;
    }
    let ranks: Vec<usize> = args
        .next()
        .map(|s| s.split(',').map(|x| x.parse().expect("ranks")).collect())
        .unwrap_or_else(|| vec![64, 1024]);
    let seed: u64 = args.next().map_or(42, |s| s.parse().expect("seed"));
    println!(
        "| scenario | costs | R | sync model | A | baseline | verl-style KK | token-balanced | microbatch | lower bound | planning |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for scenario in Scenario::ALL {
        let model = scenario.preset().cost_model();
        for &r in &ranks {
            let batch = scenario.generate(64 * r, seed);
            for sync in SyncModel::ALL {
                let plan = scenario.planner(r).sync(sync).plan(&batch).unwrap();
                row(scenario, "preset", r, sync, &batch, &model, &plan);
            }
            let given = measured(&batch, scenario);
            for sync in SyncModel::ALL {
                let plan = given_planner(scenario, r, sync).plan(&given).unwrap();
                row(scenario, "given", r, sync, &given, &Given, &plan);
            }
        }
    }
}

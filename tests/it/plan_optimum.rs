//! The planner and its bound against exact optima ([`common::exact`]) on
//! seeded families of small instances, under every sync model:
//!
//! - **random**: 8 to 12 samples on 2 or 3 ranks and 1 to 4 micro-steps,
//!   sequences of `L` tokens filled to 50-90% on average, each sample a
//!   random vector (tokens skewed short; language cost linear and quadratic
//!   in its tokens, with noise; a vision cost for 60% of them);
//! - **scenario**: 8 to 12 samples of each scenario
//!   ([`Scenario::generate`]), each costed alone by the scenario's preset
//!   model (attached with [`Sample::with_cost`](microbatch::cost::Sample::with_cost)),
//!   the scenario's `L` and units cap, 2 or 3 ranks, the smallest feasible
//!   number of micro-steps or one more (at most 4).
//!
//! The oracle is checked against plain enumeration on tiny instances, and
//! its definition of a plan and its step time against the planner's own
//! evaluation on the planner's plans. On every instance, the bound is at
//! most the optimum (the bound's validity proof on the class) and the
//! planner at least the optimum; the ratios (planner over optimum, bound
//! over optimum) are kept within the figures measured in `BENCHMARKS.md`
//! (`cargo test --release --test it plan_optimum::table -- --ignored
//! --nocapture` prints them).

use crate::common::exact::{optimum, optimum_below, Instance, Item};
use crate::common::TestRng;
use microbatch::cost::Given;
use microbatch::cost::{CostModel, Phases};
use microbatch::plan::{Planner, StepSample, SyncModel};
use microbatch::scenario::Scenario;

/// The node budget of one search (a few million at most on the families).
const BUDGET: u64 = 200_000_000;

/// The random family's instance of `seed`.
pub fn random(seed: u64) -> Instance {
    let mut rng = TestRng::new(seed);
    let n = 8 + rng.below(5) as usize;
    let ranks = 2 + rng.below(2) as usize;
    let micro_steps = 1 + rng.below(4) as usize;
    let items: Vec<Item> = (0..n)
        .map(|_| {
            let u = rng.unit();
            let tokens = 50 + (950.0 * u * u) as u64;
            let x = tokens as f64 / 1000.0;
            let language = x * (0.5 + rng.unit()) + x * x * 2.0 * rng.unit();
            let vision = if rng.unit() < 0.6 {
                0.8 * rng.unit()
            } else {
                0.0
            };
            Item {
                tokens,
                units: 0,
                cost: Phases::new(vision, language),
            }
        })
        .collect();
    let fill = 0.5 + 0.4 * rng.unit();
    let sum: u64 = items.iter().map(|i| i.tokens).sum();
    let most = items.iter().map(|i| i.tokens).max().unwrap_or(1);
    let seq_len = most.max((sum as f64 / ((ranks * micro_steps) as f64 * fill)).ceil() as u64);
    Instance {
        items,
        ranks,
        micro_steps,
        seq_len: seq_len as u32,
        max_units: None,
    }
}

/// The scenario family's instance of `scenario` and `seed`, or `None` if
/// the planner finds no plan of at most 4 micro-steps: 8 to 12 samples over
/// 2 or 3 ranks.
pub fn scenario(scenario: Scenario, seed: u64) -> Option<Instance> {
    let mut rng = TestRng::new(seed ^ 0x5ce0_a210);
    let n = 8 + rng.below(5) as usize;
    let ranks = 2 + rng.below(2) as usize;
    let extra = rng.below(2) as usize;
    scenario_instance(scenario, seed, n, ranks, extra)
}

/// `n` samples of `scenario` (the batch of `seed`), each costed alone by the
/// scenario's preset, over `ranks` ranks, the scenario's `L` and cap, the
/// smallest feasible number of micro-steps plus `extra` (at most 4); `None`
/// if no plan of at most 4 micro-steps exists.
fn scenario_instance(
    scenario: Scenario,
    seed: u64,
    n: usize,
    ranks: usize,
    extra: usize,
) -> Option<Instance> {
    let batch = scenario.generate(n, seed);
    let model = scenario.preset().cost_model();
    let items: Vec<Item> = batch
        .iter()
        .map(|s| Item {
            tokens: s.sample().tokens(),
            units: s.units(),
            cost: model.cost(&[s.sample()]),
        })
        .collect();
    let mut inst = Instance {
        items,
        ranks,
        micro_steps: 1,
        seq_len: scenario.seq_len(),
        max_units: scenario.max_units(),
    };
    let smallest = (1..=4).find(|&a| {
        inst.micro_steps = a;
        inst.planner(SyncModel::Step).plan(&inst.samples()).is_ok()
    })?;
    inst.micro_steps = (smallest + extra).min(4);
    Some(inst)
}

/// The family: 40 random instances and 10 of each scenario.
fn family() -> Vec<(String, Instance)> {
    let mut out: Vec<(String, Instance)> = (0..40)
        .map(|s| (format!("random {s}"), random(s)))
        .collect();
    for sc in Scenario::ALL {
        for seed in 0..10 {
            if let Some(inst) = scenario(sc, seed) {
                out.push((format!("{} {seed}", sc.name()), inst));
            }
        }
    }
    out
}

/// One instance under one sync model: the planner's time, the bound and
/// the optimum (`None` when the planner finds no plan of `A` micro-steps).
struct Row {
    plan: f64,
    bound: f64,
    optimum: f64,
}

fn row(name: &str, inst: &Instance, sync: SyncModel) -> Option<Row> {
    let plan = inst.planner(sync).plan(&inst.samples()).ok()?;
    let layout = inst
        .layout_of(&plan)
        .unwrap_or_else(|| panic!("{name}: the plan's layout"));
    assert!(
        inst.is_plan(&layout),
        "{name} {sync}: the planner's plan is not a plan"
    );
    // The oracle's step time is the planner's.
    let time = inst.time(sync, &layout);
    let predicted = plan.report().predicted;
    assert!(
        (time - predicted).abs() <= 1e-9 * predicted.max(1e-300),
        "{name} {sync}: the oracle's time {time}, the planner's {predicted}"
    );
    let best = optimum(inst, sync, BUDGET).unwrap_or_else(|| panic!("{name} {sync}: no optimum"));
    assert!(inst.is_plan(&best.slots), "{name} {sync}");
    Some(Row {
        plan: predicted,
        bound: plan.report().lower_bound,
        optimum: best.time,
    })
}

/// Plain enumeration of every assignment (for tiny instances).
fn enumerate(inst: &Instance, sync: SyncModel) -> Option<f64> {
    let k = inst.ranks * inst.micro_steps;
    let n = inst.items.len();
    let mut slots = vec![0usize; n];
    let mut best: Option<f64> = None;
    loop {
        if inst.is_plan(&slots) {
            let t = inst.time(sync, &slots);
            best = Some(best.map_or(t, |b: f64| b.min(t)));
        }
        let mut i = 0;
        while i < n {
            slots[i] += 1;
            if slots[i] < k {
                break;
            }
            slots[i] = 0;
            i += 1;
        }
        if i == n {
            return best;
        }
    }
}

/// The branch and bound finds what enumerating every assignment finds, on
/// tiny instances of every shape (including tight lengths and caps, where
/// no plan may exist).
#[test]
fn the_oracle_is_exhaustive() {
    let mut compared = 0;
    for seed in 0..60u64 {
        let mut rng = TestRng::new(1000 + seed);
        let n = 3 + rng.below(4) as usize;
        let ranks = 1 + rng.below(3) as usize;
        let micro_steps = 1 + rng.below(3) as usize;
        if ranks * micro_steps > 6 || n < ranks {
            continue;
        }
        let items: Vec<Item> = (0..n)
            .map(|_| Item {
                tokens: 1 + rng.below(10),
                units: rng.below(3),
                cost: Phases::new(rng.below(4) as f64, rng.below(7) as f64),
            })
            .collect();
        let inst = Instance {
            items,
            ranks,
            micro_steps,
            seq_len: 8 + rng.below(8) as u32,
            max_units: (rng.below(2) == 0).then_some(3),
        };
        for sync in SyncModel::ALL {
            let exact = optimum(&inst, sync, BUDGET).map(|o| o.time);
            assert_eq!(
                exact,
                enumerate(&inst, sync),
                "seed {seed} {sync}: {inst:?}"
            );
            compared += usize::from(exact.is_some());
        }
    }
    assert!(compared > 60, "{compared}");
}

/// On every instance of the family under every sync model: the oracle
/// evaluates the planner's plans as the planner does, the bound is at most
/// the optimum, the optimum at most the plan; and the ratios stay within
/// the measured figures.
#[test]
fn planner_and_bound_against_the_optimum() {
    for (name, inst) in family() {
        for sync in SyncModel::ALL {
            let Some(r) = row(&name, &inst, sync) else {
                continue;
            };
            let eps = 1e-9 * r.optimum;
            assert!(
                r.bound <= r.optimum + eps,
                "{name} {sync}: bound {} above the optimum {}",
                r.bound,
                r.optimum
            );
            assert!(
                r.optimum <= r.plan + eps,
                "{name} {sync}: optimum {} above the plan {}",
                r.optimum,
                r.plan
            );
            // The targets (per-micro-step and per-phase plans within
            // 1.01 of the optimum; measured at most 1.0066) and the measured
            // worst under one barrier a step (1.0747).
            let worst = match sync {
                SyncModel::Step => 1.08,
                _ => 1.01,
            };
            // The bound: the target (at least 0.98 of the optimum;
            // measured at least 0.9922, where the proof of optimality does
            // not fit the budget and a bar below the plan's time is proven).
            assert!(
                r.bound >= 0.98 * r.optimum,
                "{name} {sync}: bound {} / {}",
                r.bound,
                r.optimum
            );
            assert!(
                r.plan <= worst * r.optimum,
                "{name} {sync}: {} / {}",
                r.plan,
                r.optimum
            );
        }
    }
}

/// Prints the ratios per family and sync model (mean and worst of the plan
/// over the optimum, mean and least of the bound over the optimum).
#[test]
#[ignore = "prints the table of BENCHMARKS.md; run in release"]
fn table() {
    let fam = family();
    println!("| family | sync model | instances | plan / optimum: mean | worst | within 1.01 | bound / optimum: mean | least | nodes (max) |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for group in ["random", "llava-sft", "anyres-mix", "interleaved"] {
        for sync in SyncModel::ALL {
            let (mut count, mut sum_p, mut worst_p, mut within, mut sum_b, mut least_b) =
                (0, 0.0, 1.0f64, 0, 0.0, f64::INFINITY);
            let mut worst_name = String::new();
            let mut least_name = String::new();
            let mut nodes = 0u64;
            for (name, inst) in fam.iter().filter(|(n, _)| n.starts_with(group)) {
                let Some(r) = row(name, inst, sync) else {
                    continue;
                };
                let o = optimum(inst, sync, BUDGET).unwrap();
                nodes = nodes.max(o.nodes);
                let p = r.plan / r.optimum;
                let b = r.bound / r.optimum;
                count += 1;
                sum_p += p;
                sum_b += b;
                within += usize::from(p <= 1.01);
                if p > worst_p {
                    worst_p = p;
                    worst_name = name.clone();
                }
                if b < least_b {
                    least_b = b;
                    least_name = name.clone();
                }
            }
            println!(
                "| {group} | {sync} | {count} | {:.4} | {:.4} ({worst_name}) | {within} | {:.4} | {:.4} ({least_name}) | {nodes} |",
                sum_p / count as f64,
                worst_p,
                sum_b / count as f64,
                least_b
            );
        }
    }
}

/// Per-micro-step barriers: on these batches, beyond the exact stage's
/// size, the plan is no worse, under them, than the per-phase plan of the
/// same batch evaluated under them (the search starts from the same
/// per-phase start, and searches on the barriers that count).
#[test]
fn micro_step_is_no_worse_than_the_phase_plan() {
    for sc in Scenario::ALL {
        for (seed, ranks) in [(3u64, 4usize), (4, 8)] {
            let model = sc.preset().cost_model();
            let batch: Vec<StepSample> = sc
                .generate(48 * ranks, seed)
                .into_iter()
                .map(|s| {
                    let cost = model.cost(&[s.sample()]);
                    StepSample::new(s.id(), s.sample().clone().with_cost(cost).unwrap())
                })
                .collect();
            let mut planner = Planner::new(Given).ranks(ranks).seq_len(sc.seq_len());
            if let Some(u) = sc.max_units() {
                planner = planner.max_units(u);
            }
            let ms = planner
                .clone()
                .sync(SyncModel::MicroStep)
                .plan(&batch)
                .unwrap();
            let phase = planner.sync(SyncModel::Phase).plan(&batch).unwrap();
            let t = phase.predict(&batch, &Given, SyncModel::MicroStep).unwrap();
            let own = ms.report().predicted;
            assert!(own <= t * (1.0 + 1e-9), "{} {seed}: {own} > {t}", sc.name());
        }
    }
}

/// Small steps: 16 to 24 samples of each scenario over 3 or 4 ranks (a
/// single node with a small global batch), the smallest feasible number of
/// micro-steps or one more (at most 4).
pub fn small_step(scenario: Scenario, seed: u64) -> Option<Instance> {
    let mut rng = TestRng::new(seed ^ 0x5a11_57e9);
    let n = 16 + rng.below(9) as usize;
    let ranks = 3 + rng.below(2) as usize;
    let extra = rng.below(2) as usize;
    scenario_instance(scenario, seed + 1000, n, ranks, extra)
}

/// The seeds of each scenario in [`small_steps_are_near_optimal`] (the
/// table prints 6).
const SMALL_SEEDS: u64 = 2;

/// The node budget of one search of the oracle on the small steps.
const SMALL_BUDGET: u64 = 300_000;

/// Small steps (a single node with a small global batch, [`small_step`]):
/// under every sync model the plan is within 1.005 of the optimum (the
/// issue's target) wherever the oracle decides it within its budget: it
/// searches only below the plan's time over 1.005 ([`optimum_below`]),
/// and a plan found there fails the test. Most instances are decided (at
/// least the count below); the others are left to `small_step_table`.
#[test]
fn small_steps_are_near_optimal() {
    let (mut decided, mut all) = (0, 0);
    for sc in Scenario::ALL {
        for seed in 0..SMALL_SEEDS {
            let Some(inst) = small_step(sc, seed) else {
                continue;
            };
            let name = format!("{} {seed}", sc.name());
            for sync in SyncModel::ALL {
                let plan = inst.planner(sync).plan(&inst.samples()).expect("plan");
                let layout = inst.layout_of(&plan).expect("the plan's layout");
                assert!(inst.is_plan(&layout), "{name} {sync}: not a plan");
                let p = plan.report().predicted;
                let time = inst.time(sync, &layout);
                assert!((time - p).abs() <= 1e-9 * p, "{name} {sync}: {time} vs {p}");
                all += 1;
                match optimum_below(&inst, sync, SMALL_BUDGET, p / 1.005) {
                    Ok(None) => decided += 1,
                    Ok(Some(o)) => panic!("{name} {sync}: plan / optimum {}", p / o.time),
                    Err(_) => {}
                }
            }
        }
    }
    println!("{decided} of {all} decided");
    assert!(decided >= MIN_DECIDED, "{decided} of {all} decided");
}

/// The instances [`small_steps_are_near_optimal`] must decide.
const MIN_DECIDED: usize = 15;

/// Prints plan / optimum on the small steps (16 to 24 samples over 3 or 4
/// ranks), every sync model: per scenario and sync model, the instances,
/// those where the oracle proved the optimum within its budget (else it
/// proves only that no plan is 0.5% below the planner's), the mean and
/// worst plan / optimum over those, how many are proven within 1.005, the
/// least bound / optimum, and the worst planning time.
#[test]
#[ignore = "prints a table; run in release"]
fn small_step_table() {
    println!("| scenario | sync model | instances | optimum proven | plan / optimum: mean | worst | within 1.005 | bound / optimum: least | planning time (max) |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for sc in Scenario::ALL {
        for sync in SyncModel::ALL {
            let (mut count, mut proven, mut sum, mut worst, mut within, mut least) =
                (0, 0, 0.0, 1.0f64, 0, f64::INFINITY);
            let mut slowest = std::time::Duration::ZERO;
            for seed in 0..6 {
                let Some(inst) = small_step(sc, seed) else {
                    continue;
                };
                let t0 = std::time::Instant::now();
                let plan = inst.planner(sync).plan(&inst.samples()).expect("plan");
                slowest = slowest.max(t0.elapsed());
                let p = plan.report().predicted;
                count += 1;
                match optimum_below(&inst, sync, 2_000_000, p * (1.0 + 1e-9)) {
                    Ok(Some(o)) => {
                        proven += 1;
                        sum += p / o.time;
                        worst = worst.max(p / o.time);
                        within += usize::from(p <= 1.005 * o.time);
                        least = least.min(plan.report().lower_bound / o.time);
                    }
                    Ok(None) => panic!(
                        "{} {seed} {sync}: no plan as good as the planner's",
                        sc.name()
                    ),
                    Err(_) => {
                        let near = optimum_below(&inst, sync, 2_000_000, p / 1.005);
                        within += usize::from(matches!(near, Ok(None)));
                    }
                }
            }
            println!(
                "| {} | {sync} | {count} | {proven} | {:.4} | {:.4} | {within} | {:.4} | {slowest:.1?} |",
                sc.name(),
                sum / proven.max(1) as f64,
                worst,
                least
            );
        }
    }
}

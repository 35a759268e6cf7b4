//! Prints the locality tables for `BENCHMARKS.md`: for every scenario at
//! R = 64 and R = 1024 ranks with 64 samples a rank, the data loader's
//! round-robin placement as origins (sample `i` on rank `i mod R`), and
//! every sync model,
//!
//! - the share of samples and of image bytes the plan moves, and its step
//!   time over the lower bound, without locality and with a 0.5% tolerance
//!   (with its step time over the locality-free one);
//! - the bytes moved against the tolerance (0, 0.5, 1, 2, 5%);
//! - the planning time with locality over the planning time without, both
//!   measured in this run (best of 5, CPU time of the thread where Linux
//!   gives it), at 65,536 samples over 1,024 ranks.
//!
//!
//! With `seeds FIRST..END [RANKS [EFFORT]]`, the held-out table instead: over the
//! seeds, the image bytes moved at 0.5% (median, worst and its seed), the
//! worst step time over the free plan's, and a lower bound on the bytes any
//! plan within the budget moves; with `big [SEED [SYNCS]]`, the planning-time table
//! at 10^6 samples over 16,384 ranks (every sync model, or those named); with
//! `wall [RUNS [SYNCS [EFFORT]]]`, the planning time at 65,536 samples over 1,024
//! ranks in wall-clock time, the medians of RUNS plans (15 by default)
//! without and with locality alternated (the thread's CPU clock ticks in 4 ms
//! on some machines, too coarse for the plans under step barriers), with the
//! bytes moved and the plan's fingerprint (to tell that a change kept the
//! plans). `EFFORT` bounds locality's exchange ([`Locality::effort`]).
//!
//! ```text
//! cargo run --release --example locality_table
//! cargo run --release --example locality_table -- 64,1024 42   # ranks, seed
//! cargo run --release --example locality_table -- seeds 1..11 64,1024
//! cargo run --release --example locality_table -- big
//! cargo run --release --example locality_table -- big 42 step   # seed, sync models
//! cargo run --release --example locality_table -- wall 15 step   # runs, sync models
//! cargo run --release --example locality_table -- wall 15 micro-step,phase 4   # effort 4
//! ```

use std::time::{Duration, Instant};

use microbatch::cost::CostModel;
use microbatch::plan::{Locality, Plan, StepSample, SyncModel};
use microbatch::scenario::Scenario;

const TOLERANCES: [f64; 5] = [0.0, 0.005, 0.01, 0.02, 0.05];

fn moved(plan: &Plan) -> (f64, f64) {
    let t = plan.report().traffic.expect("origins give a traffic");
    (
        t.samples_moved as f64 / plan.len() as f64,
        t.moved_fraction(),
    )
}

/// 64 samples a rank of `scenario`, sample `i` held by rank `i mod r` (the
/// data loader's round-robin placement).
fn round_robin(scenario: Scenario, r: usize, seed: u64) -> Vec<StepSample> {
    scenario
        .generate(64 * r, seed)
        .into_iter()
        .enumerate()
        .map(|(i, s)| s.with_origin(i % r))
        .collect()
}

fn best_of(runs: usize, mut f: impl FnMut() -> Duration) -> Duration {
    (0..runs).map(|_| f()).min().unwrap_or_default()
}

/// The CPU time of this thread so far (`/proc/thread-self/schedstat`, in
/// nanoseconds, on Linux), so that other processes on a loaded machine do
/// not count; `None` elsewhere.
fn thread_cpu() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns: u64 = stat.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(ns))
}

/// The best of `runs` planning times of `batch` by `planner`: the thread's
/// CPU time where it can be read, else the wall time.
fn planning_time<M: microbatch::cost::Incremental>(
    runs: usize,
    planner: &microbatch::plan::Planner<M>,
    batch: &[StepSample],
) -> Duration {
    best_of(runs, || {
        let (cpu, wall) = (thread_cpu(), Instant::now());
        let plan = planner.plan(batch).expect("plan");
        let t = match (cpu, thread_cpu()) {
            (Some(a), Some(b)) => b.saturating_sub(a),
            _ => wall.elapsed(),
        };
        std::hint::black_box(plan);
        t
    })
}

/// One row a sync model: `scenario`'s planning time over `r` ranks without
/// locality and with 0.5% (best of `runs` each), in ms with `decimals`
/// decimals, and their ratio.
fn time_rows(
    scenario: Scenario,
    r: usize,
    batch: &[StepSample],
    runs: usize,
    decimals: usize,
    syncs: &[SyncModel],
) {
    for &sync in syncs {
        let planner = scenario.planner(r).sync(sync);
        let local = planner
            .clone()
            .locality(Locality::new(0.005).expect("tolerance"));
        let (a, b) = (
            planning_time(runs, &planner, batch),
            planning_time(runs, &local, batch),
        );
        println!(
            "| {} | {sync} | {:.*} ms | {:.*} ms | {:.2} |",
            scenario.name(),
            decimals,
            a.as_secs_f64() * 1e3,
            decimals,
            b.as_secs_f64() * 1e3,
            b.as_secs_f64() / a.as_secs_f64()
        );
    }
}

fn main() {
    let mut args = std::env::args().skip(1).peekable();
    // `time` first: only the planning-time table.
    let only_time = args.next_if(|a| a == "time").is_some();
    // `seeds FIRST..END [RANKS]`: the held-out table over several seeds.
    if args.next_if(|a| a == "seeds").is_some() {
        let range = args.next().unwrap_or_else(|| "1..11".into());
        let (a, b) = range.split_once("..").expect("seeds FIRST..END");
        let seeds: Vec<u64> = (a.parse().expect("seed")..b.parse().expect("seed")).collect();
        let ranks: Vec<usize> = args.next().map_or(vec![64, 1024], |s| {
            s.split(',').map(|x| x.parse().expect("ranks")).collect()
        });
        seeds_table(&seeds, &ranks, locality(args.next()));
        return;
    }
    // `big [SEED [SYNCS]]`: the planning-time table at 10^6 samples over
    // 16,384 ranks, for the sync models named (comma-separated; all by
    // default).
    if args.next_if(|a| a == "big").is_some() {
        let seed = args.next().map_or(42, |s| s.parse().expect("seed"));
        big_time_table(seed, &sync_models(args.next()));
        return;
    }
    // `wall [RUNS [SYNCS [EFFORT]]]`: wall-clock medians at 65,536 x
    // 1,024, with `Locality::effort(EFFORT)` if given.
    if args.next_if(|a| a == "wall").is_some() {
        let runs = args.next().map_or(15, |s| s.parse().expect("runs"));
        let syncs = sync_models(args.next());
        wall_table(runs.max(1), &syncs, locality(args.next()));
        return;
    }
    let ranks: Vec<usize> = args.next().map_or(vec![64, 1024], |s| {
        s.split(',').map(|x| x.parse().expect("ranks")).collect()
    });
    let seed: u64 = args.next().map_or(42, |s| s.parse().expect("seed"));
    if only_time {
        time_table(seed);
        return;
    }

    println!("| scenario | R | sync | free: samples moved | free: bytes moved | free: time / bound | 0.5%: samples moved | 0.5%: bytes moved | 0.5%: time / bound | 0.5%: time / free |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let mut sweep = Vec::new();
    for scenario in Scenario::ALL {
        for &r in &ranks {
            let batch = round_robin(scenario, r, seed);
            for sync in SyncModel::ALL {
                let planner = scenario.planner(r).sync(sync);
                let free = planner.plan(&batch).expect("plan");
                let mut row = Vec::new();
                for tol in TOLERANCES {
                    let local = planner
                        .clone()
                        .locality(Locality::new(tol).expect("tolerance"))
                        .plan(&batch)
                        .expect("plan");
                    assert!(local.report().predicted <= (1.0 + tol) * free.report().predicted);
                    row.push(local);
                }
                let (fs, fb) = moved(&free);
                let half = &row[1];
                let (ls, lb) = moved(half);
                println!(
                    "| {} | {r} | {} | {:.1}% | {:.1}% | {:.4} | {:.1}% | {:.1}% | {:.4} | {:.4} |",
                    scenario.name(),
                    sync,
                    100.0 * fs,
                    100.0 * fb,
                    free.report().ratio(),
                    100.0 * ls,
                    100.0 * lb,
                    half.report().ratio(),
                    half.report().predicted / free.report().predicted,
                );
                sweep.push((scenario.name(), r, sync, fb, row));
            }
        }
    }

    println!();
    print!("| scenario | R | sync | free |");
    for tol in TOLERANCES {
        print!(" {}% |", 100.0 * tol);
    }
    println!();
    println!("|---|---|---|---|{}", "---|".repeat(TOLERANCES.len()));
    for (name, r, sync, fb, row) in &sweep {
        print!("| {name} | {r} | {sync} | {:.1}% |", 100.0 * fb);
        for plan in row {
            print!(" {:.1}% |", 100.0 * moved(plan).1);
        }
        println!();
    }

    println!();
    time_table(seed);
}

/// Planning time with and without locality at 65,536 samples over 1,024
/// ranks (best of 5 each, alternating).
fn time_table(seed: u64) {
    println!("| scenario | sync | plan without locality | with 0.5% | ratio |");
    println!("|---|---|---|---|---|");
    let r = 1024;
    for scenario in Scenario::ALL {
        let batch = round_robin(scenario, r, seed);
        time_rows(scenario, r, &batch, 5, 1, &SyncModel::ALL);
    }
}

/// A lower bound of the share of image bytes any plan moves whose rank
/// totals stay within `budget`: every rank whose home samples cost more
/// sheds the excess, fractionally, by its samples of fewest bytes per cost
/// (a fractional knapsack a rank). Valid under every sync model for an
/// additive model (a rank's total is at most the step time).
fn bytes_bound(scenario: Scenario, batch: &[StepSample], ranks: usize, budget: f64) -> f64 {
    let model = scenario.preset().cost_model();
    let mut per_rank: Vec<Vec<(f64, u64)>> = vec![Vec::new(); ranks];
    let mut total = 0u64;
    for s in batch {
        let c = model.cost(&[s.sample()]).total();
        per_rank[s.origin().expect("origin")].push((c, s.bytes()));
        total += s.bytes();
    }
    let mut moved = 0.0;
    for list in &mut per_rank {
        let mut excess = list.iter().map(|x| x.0).sum::<f64>() - budget;
        if excess <= 0.0 {
            continue;
        }
        list.sort_by(|a, b| (a.1 as f64 / a.0).total_cmp(&(b.1 as f64 / b.0)));
        for &(c, b) in list.iter() {
            if excess <= 0.0 {
                break;
            }
            let take = (excess / c).min(1.0);
            moved += take * b as f64;
            excess -= c;
        }
    }
    moved / total as f64
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Over `seeds`, for every scenario, rank count and sync model: the image
/// bytes moved at 0.5% (median and worst), the worst step time over the
/// free plan's, and the median bound of [`bytes_bound`].
fn seeds_table(seeds: &[u64], ranks: &[usize], loc: Locality) {
    println!(
        "| scenario | R | sync | 0.5%: bytes moved, median | worst | worst seed | worst time / free | bound, median |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for scenario in Scenario::ALL {
        for &r in ranks {
            let batches: Vec<_> = seeds.iter().map(|&s| round_robin(scenario, r, s)).collect();
            for sync in SyncModel::ALL {
                let planner = scenario.planner(r).sync(sync);
                let local = planner.clone().locality(loc);
                let (mut moved_all, mut bounds) = (Vec::new(), Vec::new());
                let (mut worst, mut worst_seed, mut worst_time) = (0.0f64, 0, 0.0f64);
                for (batch, &seed) in batches.iter().zip(seeds) {
                    let free = planner.plan(batch).expect("plan");
                    let plan = local.plan(batch).expect("plan");
                    let ratio = plan.report().predicted / free.report().predicted;
                    assert!(ratio <= 1.005, "seed {seed}: {ratio}");
                    let (_, b) = moved(&plan);
                    if b >= worst {
                        (worst, worst_seed) = (b, seed);
                    }
                    worst_time = worst_time.max(ratio);
                    moved_all.push(b);
                    let t0 = free.report().predicted * 1.005;
                    bounds.push(bytes_bound(scenario, batch, r, t0));
                }
                println!(
                    "| {} | {r} | {sync} | {:.1}% | {:.1}% | {worst_seed} | {:.4} | {:.1}% |",
                    scenario.name(),
                    100.0 * median(&mut moved_all),
                    100.0 * worst,
                    worst_time,
                    100.0 * median(&mut bounds),
                );
            }
        }
    }
}

/// Locality of 0.5% tolerance, with `Locality::effort` of `arg` if given.
fn locality(arg: Option<String>) -> Locality {
    let loc = Locality::new(0.005).expect("tolerance");
    match arg {
        Some(e) => loc.effort(e.parse().expect("effort")),
        None => loc,
    }
}

/// The sync models named in `arg` (comma-separated), every one without it.
fn sync_models(arg: Option<String>) -> Vec<SyncModel> {
    arg.map_or(SyncModel::ALL.to_vec(), |s| {
        s.split(',')
            .map(|x| x.parse().expect("a sync model"))
            .collect()
    })
}

/// Wall-clock planning time at 65,536 samples over 1,024 ranks (seed 42,
/// round-robin origins): `runs` plans without locality and with 0.5%,
/// alternated, their medians and ratio, the share of image bytes moved and
/// the fingerprint of the plan with locality.
fn wall_table(runs: usize, syncs: &[SyncModel], loc: Locality) {
    println!("| scenario | sync | plan without locality | with 0.5% | ratio | bytes moved | fingerprint |");
    println!("|---|---|---|---|---|---|---|");
    let r = 1024;
    for scenario in Scenario::ALL {
        let batch = round_robin(scenario, r, 42);
        for &sync in syncs {
            let planner = scenario.planner(r).sync(sync);
            let local = planner.clone().locality(loc);
            let (mut a, mut b) = (Vec::new(), Vec::new());
            let mut last = None;
            for _ in 0..runs {
                let t = Instant::now();
                std::hint::black_box(planner.plan(&batch).expect("plan"));
                a.push(t.elapsed().as_secs_f64() * 1e3);
                let t = Instant::now();
                let plan = local.plan(&batch).expect("plan");
                b.push(t.elapsed().as_secs_f64() * 1e3);
                last = Some(plan);
            }
            let plan = last.expect("one run at least");
            let (ma, mb) = (median(&mut a), median(&mut b));
            println!(
                "| {} | {sync} | {ma:.1} ms | {mb:.1} ms | {:.2} | {:.2}% | {:016x} |",
                scenario.name(),
                mb / ma,
                100.0 * moved(&plan).1,
                plan.fingerprint(),
            );
        }
    }
}

/// Planning time with and without locality at 10^6 samples over 16,384
/// ranks (best of 3 each, alternating), with round-robin origins.
fn big_time_table(seed: u64, syncs: &[SyncModel]) {
    println!("| scenario | sync | plan without locality | with 0.5% | ratio |");
    println!("|---|---|---|---|---|");
    let r = 16384;
    for scenario in Scenario::ALL {
        let batch: Vec<_> = scenario
            .generate(1_000_000, seed)
            .into_iter()
            .enumerate()
            .map(|(i, s)| s.with_origin(i % r))
            .collect();
        time_rows(scenario, r, &batch, 3, 0, syncs);
    }
}

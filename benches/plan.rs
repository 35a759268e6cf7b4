//! Criterion benches of the planner, with sorting the samples' ids in every
//! group as the baseline (any planner sorts by id first).
//!
//! The baseline sorts the ids *scrambled*: the generated ids are `0..n`,
//! already sorted (and so is any monotone map of them, such as the
//! `id.rotate_left(17)` this bench used to sort, which made its ratios
//! meaningless), so each id is multiplied by an odd constant (a bijection
//! of `u64`, Knuth's multiplicative hash), which puts them in an order
//! unrelated to their values, as a data loader's shuffled dataset indices
//! are. The copy of the ids is made outside the timed routine.
//!
//! Run: `cargo bench --bench plan`. Groups:
//!
//! - `plan/anyres-mix 65536 x 1024`: 65,536 `anyres-mix` samples over 1,024
//!   ranks at L = 16384, every sync model (the target: 50 ms);
//! - `plan/anyres-mix 1e6 x 16384`: 10^6 samples over 16,384 ranks (the
//!   target: 1 s);
//! - with `MICROBATCH_BENCH_ROUNDS=<rounds>` set, instead of the criterion
//!   groups: `<rounds>` rounds at 10^6 x 16,384 (or
//!   `MICROBATCH_BENCH_SIZE=<samples>,<ranks>`), each sorting the scrambled
//!   ids and planning with every sync model in turn in this one process
//!   (so that a load on a shared machine hits both alike), printing per
//!   sync model the median planning time, the median sorting time, the
//!   median of the rounds' ratios and each plan's fingerprint (the same in
//!   every round, and the same before and after a change that must not
//!   change plans); `MICROBATCH_BENCH_SYNCS=<sync>,...` (say `step`) times
//!   only those sync models, and `MICROBATCH_BENCH_EFFORT=<effort>` plans
//!   (here and in the one-plan mode below) with that [`search_effort`](microbatch::plan::Planner::search_effort)
//!   (each plan's ratio over its lower bound is printed too: the trade of
//!   quality for time);
//! - with `MICROBATCH_BENCH_PLAN=<sync>,<samples>,<ranks>` set, instead of
//!   the groups: one plan of that many `anyres-mix` samples (seed 42) with
//!   that sync model, printing its fingerprint; for profilers (for example
//!   `valgrind --tool=callgrind --toggle-collect='*Planner*plan*'`, whose
//!   instruction counts do not depend on the machine's load);
//! - before the groups, the extra memory of one plan of 10^6 samples (peak
//!   resident memory while planning over the samples' count, Linux only;
//!   the target: 128 bytes a sample), each sync model in a fresh process;
//!   `MICROBATCH_BENCH_MEMORY=<sync>` measures only that one, of the
//!   scenario `MICROBATCH_BENCH_SCENARIO=<scenario>` (`anyres-mix` if
//!   unset).

use criterion::{criterion_group, BatchSize, BenchmarkId, Criterion, Throughput};
use microbatch::plan::{StepSample, SyncModel};
use microbatch::scenario::Scenario;
use std::hint::black_box;
use std::time::{Duration, Instant};

fn group(c: &mut Criterion, n: usize, ranks: usize, syncs: &[SyncModel], label: &str) {
    let batch = Scenario::AnyresMix.generate(n, 42);
    let mut group = c.benchmark_group(format!("plan/anyres-mix {label}"));
    group.throughput(Throughput::Elements(n as u64));
    if n > 100_000 {
        group.sample_size(10);
        group.measurement_time(Duration::from_secs(12));
    }
    for &sync in syncs {
        let planner = Scenario::AnyresMix.planner(ranks).sync(sync);
        group.bench_function(BenchmarkId::from_parameter(sync), |b| {
            b.iter(|| planner.plan(black_box(&batch)).unwrap())
        });
    }
    let ids = scrambled_ids(&batch);
    group.bench_function(BenchmarkId::from_parameter("sort ids (baseline)"), |b| {
        b.iter_batched(
            || ids.clone(),
            |mut v| {
                v.sort_unstable();
                v
            },
            BatchSize::LargeInput,
        )
    });
    group.finish();
}

/// The samples' ids in a scrambled order: each multiplied by
/// `0x9E37_79B9_7F4A_7C15` (odd, so the map is a bijection of `u64` and no
/// two ids collide), which leaves them in no particular order.
fn scrambled_ids(batch: &[StepSample]) -> Vec<u64> {
    batch
        .iter()
        .map(|s| s.id().wrapping_mul(0x9E37_79B9_7F4A_7C15))
        .collect()
}

fn bench_plan(c: &mut Criterion) {
    group(c, 65_536, 1024, &SyncModel::ALL, "65536 x 1024");
    group(c, 1_000_000, 16_384, &SyncModel::ALL, "1e6 x 16384");
}

/// A field of `/proc/self/status`, in bytes.
fn status_bytes(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// The environment variable that makes the bench binary measure the memory
/// of one plan (of the sync model it names) and exit.
const MEMORY_CHILD: &str = "MICROBATCH_BENCH_MEMORY";

/// The environment variable that names the scenario of the memory mode.
const MEMORY_SCENARIO: &str = "MICROBATCH_BENCH_SCENARIO";

/// Peak resident memory while planning 10^6 samples of `scenario`, over
/// the samples, for the sync model `sync`; in a fresh process, so that no
/// page freed by an earlier plan hides the peak.
fn memory(scenario: Scenario, sync: SyncModel) {
    let n = 1_000_000;
    let batch = scenario.generate(n, 42);
    let planner = scenario.planner(16_384).sync(sync);
    // Writing 5 to clear_refs resets the peak (VmHWM) to the current RSS.
    if std::fs::write("/proc/self/clear_refs", "5").is_err() {
        println!("extra memory: not measured (needs Linux /proc)");
        return;
    }
    let Some(before) = status_bytes("VmRSS:") else {
        return;
    };
    let plan = planner.plan(&batch).unwrap();
    let peak = status_bytes("VmHWM:").unwrap_or(before);
    let slots = plan.ranks() * plan.micro_steps() * plan.sequences_per_micro_step();
    println!(
        "extra memory, {n} {scenario} samples over 16384 ranks, {sync}: {:.1} bytes a sample at peak \
         (of which the plan itself: {:.1})",
        peak.saturating_sub(before) as f64 / n as f64,
        (plan.len() * 8 + (slots + 1) * 8 + slots * 16) as f64 / n as f64,
    );
}

/// The environment variable that makes the bench binary time alternating
/// rounds of sorting and planning instead of the criterion groups.
const ROUNDS: &str = "MICROBATCH_BENCH_ROUNDS";

/// The environment variable that restricts the rounds to some sync models
/// (`step,micro-step,phase`, comma-separated; all of them when unset).
const SYNCS: &str = "MICROBATCH_BENCH_SYNCS";

/// The environment variable that sets the rounds' search effort (the
/// planner's default when unset).
const EFFORT: &str = "MICROBATCH_BENCH_EFFORT";

/// The search effort [`EFFORT`] sets, if any.
fn effort() -> Option<u32> {
    std::env::var(EFFORT)
        .ok()
        .map(|e| e.trim().parse().expect("a search effort"))
}

/// The median of `v` (the upper one of an even count).
fn median(v: &mut [f64]) -> f64 {
    v.sort_unstable_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The environment variable that sets the rounds' batch
/// (`<samples>,<ranks>`; 10^6 samples over 16,384 ranks when unset).
const SIZE: &str = "MICROBATCH_BENCH_SIZE";

/// `rounds` rounds at 10^6 x 16,384 (or [`SIZE`]), each timing the sort of
/// the scrambled ids, then a plan with every sync model, then the sort again
/// (the ratio of a round is the plan over the mean of the two sorts around
/// it).
fn alternate(rounds: usize) {
    let (n, ranks) = match std::env::var(SIZE) {
        Ok(spec) => match spec.split_once(',') {
            Some((n, r)) => (
                n.trim().parse().expect("a number of samples"),
                r.trim().parse().expect("a number of ranks"),
            ),
            None => panic!("{SIZE}=<samples>,<ranks>, got {spec:?}"),
        },
        Err(_) => (1_000_000, 16_384),
    };
    let batch = Scenario::AnyresMix.generate(n, 42);
    let ids = scrambled_ids(&batch);
    assert!(
        ids.windows(2).any(|w| w[0] > w[1]),
        "the reference sorts nothing"
    );
    let sort = || {
        let mut v = ids.clone();
        let t = Instant::now();
        v.sort_unstable();
        let s = t.elapsed().as_secs_f64();
        black_box(v);
        s
    };
    // `MICROBATCH_BENCH_SYNCS=step,phase` times only those sync models.
    let syncs: Vec<SyncModel> = match std::env::var(SYNCS) {
        Ok(list) => list
            .split(',')
            .map(|s| s.trim().parse().expect("a sync model"))
            .collect(),
        Err(_) => SyncModel::ALL.to_vec(),
    };
    let effort = effort();
    let planners: Vec<_> = syncs
        .iter()
        .map(|&sync| {
            let planner = Scenario::AnyresMix.planner(ranks).sync(sync);
            match effort {
                Some(e) => planner.search_effort(e),
                None => planner,
            }
        })
        .collect();
    let k = planners.len();
    let (mut plan_s, mut sort_s, mut ratio) = (vec![vec![]; k], vec![], vec![vec![]; k]);
    let mut prints = vec![None; k];
    let mut over = vec![0.0; k];
    for _ in 0..rounds {
        for (i, planner) in planners.iter().enumerate() {
            let before = sort();
            let t = Instant::now();
            let plan = planner.plan(black_box(&batch)).unwrap();
            let p = t.elapsed().as_secs_f64();
            let after = sort();
            assert!(prints[i].map_or(true, |f| f == plan.fingerprint()));
            prints[i] = Some(plan.fingerprint());
            over[i] = plan.report().ratio();
            plan_s[i].push(p);
            sort_s.extend([before, after]);
            ratio[i].push(p / ((before + after) / 2.0));
        }
    }
    let sort_median = median(&mut sort_s);
    println!(
        "{n} anyres-mix samples over {ranks} ranks, {rounds} rounds: sorting {n} scrambled ids \
         {:.1} ms (median)",
        sort_median * 1e3
    );
    for (i, sync) in syncs.iter().enumerate() {
        println!(
            "{sync}: {:.0} ms (median), {:.1}x the sort (median of the rounds' ratios), \
             {:.4} over its bound, fingerprint {:016x}",
            median(&mut plan_s[i]) * 1e3,
            median(&mut ratio[i]),
            over[i],
            prints[i].unwrap_or(0)
        );
    }
}

/// The environment variable that makes the bench binary make one plan
/// (`<sync>,<samples>,<ranks>`) and exit.
const ONE_PLAN: &str = "MICROBATCH_BENCH_PLAN";

/// One plan of `spec` (`<sync>,<samples>,<ranks>`), its fingerprint printed.
fn one_plan(spec: &str) {
    let parts: Vec<&str> = spec.split(',').collect();
    let [sync, n, ranks] = parts[..] else {
        panic!("{ONE_PLAN}=<sync>,<samples>,<ranks>, got {spec:?}");
    };
    let sync: SyncModel = sync.parse().expect("a sync model");
    let n: usize = n.parse().expect("a number of samples");
    let ranks: usize = ranks.parse().expect("a number of ranks");
    let batch = Scenario::AnyresMix.generate(n, 42);
    let mut planner = Scenario::AnyresMix.planner(ranks).sync(sync);
    if let Some(e) = effort() {
        planner = planner.search_effort(e);
    }
    let plan = planner.plan(black_box(&batch)).unwrap();
    println!(
        "{n} anyres-mix samples over {ranks} ranks, {sync}: fingerprint {:016x}",
        plan.fingerprint()
    );
}

criterion_group!(benches, bench_plan);

fn main() {
    if let Ok(sync) = std::env::var(MEMORY_CHILD) {
        let scenario = match std::env::var(MEMORY_SCENARIO) {
            Ok(name) => name
                .parse()
                .expect("a scenario: llava-sft, anyres-mix, interleaved"),
            Err(_) => Scenario::AnyresMix,
        };
        memory(
            scenario,
            sync.parse().expect("a sync model: step, micro-step, phase"),
        );
        return;
    }
    if let Ok(spec) = std::env::var(ONE_PLAN) {
        one_plan(&spec);
        return;
    }
    if let Ok(rounds) = std::env::var(ROUNDS) {
        alternate(rounds.parse().expect("a number of rounds"));
        return;
    }
    if std::env::args().any(|a| a == "--bench") {
        for sync in SyncModel::ALL {
            let me = std::env::current_exe().unwrap();
            let out = std::process::Command::new(me)
                .env(MEMORY_CHILD, sync.name())
                .output()
                .unwrap();
            print!("{}", String::from_utf8_lossy(&out.stdout));
        }
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}

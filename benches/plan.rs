//! Criterion benches of the planner, with sorting the samples' ids in every
//! group as the baseline (any planner sorts by id first).
//!
//! Run: `cargo bench --bench plan`. Groups:
//!
//! - `plan/anyres-mix 65536 x 1024`: 65,536 `anyres-mix` samples over 1,024
//!   ranks at L = 16384, every sync model (the target: 50 ms);
//! - `plan/anyres-mix 1e6 x 16384`: 10^6 samples over 16,384 ranks (the
//!   target: 1 s);
//! - before the groups, the extra memory of one plan of 10^6 samples (peak
//!   resident memory while planning over the samples' count, Linux only;
//!   the target: 128 bytes a sample).

use criterion::{criterion_group, BenchmarkId, Criterion, Throughput};
use microbatch::plan::SyncModel;
use microbatch::scenario::Scenario;
use std::hint::black_box;
use std::time::Duration;

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
    let ids: Vec<u64> = batch.iter().map(|s| s.id().rotate_left(17)).collect();
    group.bench_function(BenchmarkId::from_parameter("sort ids (baseline)"), |b| {
        b.iter(|| {
            let mut v = ids.clone();
            v.sort_unstable();
            v
        })
    });
    group.finish();
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

/// Peak resident memory while planning 10^6 samples, over the samples, for
/// the sync model `sync`; in a fresh process, so that no page freed by an
/// earlier plan hides the peak.
fn memory(sync: SyncModel) {
    let n = 1_000_000;
    let batch = Scenario::AnyresMix.generate(n, 42);
    let planner = Scenario::AnyresMix.planner(16_384).sync(sync);
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
        "extra memory, {n} anyres-mix samples over 16384 ranks, {sync}: {:.1} bytes a sample at peak \
         (of which the plan itself: {:.1})",
        peak.saturating_sub(before) as f64 / n as f64,
        (plan.len() * 8 + (slots + 1) * 8 + slots * 16) as f64 / n as f64,
    );
}

criterion_group!(benches, bench_plan);

fn main() {
    if let Ok(sync) = std::env::var(MEMORY_CHILD) {
        memory(sync.parse().unwrap());
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

//! Benchmarks of `microbatch::partition`, each group with `sort_unstable` of
//! the same keys as the baseline, so that a ratio can be read.
//!
//! Run: `cargo bench --bench partition -- --warm-up-time 2 --measurement-time 5`
//!
//! The group `karmarkar_karp k=1024` compares Karmarkar-Karp over 1,024
//! parts on uniform weights with verl's workload `24576 T + T^2` of the
//! built-in vision-language batches (heavy-tailed; with the `scenarios`
//! feature), 65,536 items each.

use core::hint::black_box;

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, Throughput};
use microbatch::partition::{exact, karmarkar_karp, lpt, refine, Dims, Partitioner};

// The seeded inputs, shared with the quality tables (`examples/quality_table.rs`).
mod inputs;
use inputs::uniform_lengths as lengths;

fn sort_baseline(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    keys: &[u32],
) {
    group.bench_with_input(
        BenchmarkId::new("sort_unstable", keys.len()),
        keys,
        |b, keys| {
            b.iter_batched(
                || keys.to_vec(),
                |mut v| {
                    v.sort_unstable();
                    v
                },
                BatchSize::LargeInput,
            );
        },
    );
}

fn bench_lpt(c: &mut Criterion) {
    let mut group = c.benchmark_group("lpt");
    group.sample_size(10);
    let k = 1024;
    for n in [10_000usize, 100_000, 1_000_000] {
        let keys = lengths(n, 1);
        group.throughput(Throughput::Elements(n as u64));
        group.bench_with_input(BenchmarkId::from_parameter(n), &keys, |b, keys| {
            b.iter(|| lpt(black_box(keys), k).unwrap());
        });
        sort_baseline(&mut group, &keys);
    }
    // Off the counting path, at 10^6 items: the same lengths with ids (a
    // radix sort, then the bucket queue), and lengths scaled to about 2^30
    // (too many values to count: a radix sort, then a binary heap).
    let n = 1_000_000;
    let keys = lengths(n, 1);
    let with_ids: Vec<(u32, u32)> = keys
        .iter()
        .enumerate()
        .map(|(i, &x)| (i as u32, x))
        .collect();
    group.throughput(Throughput::Elements(n as u64));
    group.bench_with_input(BenchmarkId::new("ids", n), &with_ids, |b, items| {
        b.iter(|| lpt(black_box(items), k).unwrap());
    });
    let large: Vec<u32> = keys.iter().map(|&x| x * 65_521).collect();
    group.bench_with_input(BenchmarkId::new("large", n), &large, |b, items| {
        b.iter(|| lpt(black_box(items), k).unwrap());
    });
    group.finish();
}

fn bench_karmarkar_karp(c: &mut Criterion) {
    let mut group = c.benchmark_group("karmarkar_karp");
    group.sample_size(10);
    let k = 64;
    for n in [10_000usize, 100_000] {
        let keys = lengths(n, 2);
        group.throughput(Throughput::Elements(n as u64));
        group.bench_with_input(BenchmarkId::from_parameter(n), &keys, |b, keys| {
            b.iter(|| karmarkar_karp(black_box(keys), k).unwrap());
        });
        sort_baseline(&mut group, &keys);
    }
    group.finish();
}

/// Karmarkar-Karp over 1,024 parts, 65,536 items: uniform weights in
/// `1..=10^6`, then verl's workload `24576 T + T^2` over the token counts of
/// each built-in scenario (seed 42).
fn bench_karmarkar_karp_1024(c: &mut Criterion) {
    let mut group = c.benchmark_group("karmarkar_karp k=1024");
    group.sample_size(10);
    let (n, k) = (65_536usize, 1024);
    let mut rng = inputs::TestRng::new(5);
    #[cfg_attr(not(feature = "scenarios"), allow(unused_mut))]
    let mut inputs: Vec<(String, Vec<u64>)> = vec![(
        "uniform".into(),
        (0..n).map(|_| 1 + rng.below(1_000_000)).collect(),
    )];
    #[cfg(feature = "scenarios")]
    for s in microbatch::scenario::Scenario::ALL {
        let workload = s
            .generate(n, 42)
            .iter()
            .map(|x| {
                let t = x.sample().tokens();
                24576 * t + t * t
            })
            .collect();
        inputs.push((format!("verl {}", s.name()), workload));
    }
    group.throughput(Throughput::Elements(n as u64));
    for (name, w) in &inputs {
        group.bench_with_input(BenchmarkId::new(name.as_str(), n), w, |b, w| {
            b.iter(|| karmarkar_karp(black_box(w), k).unwrap());
        });
    }
    group.finish();
}

fn bench_refine(c: &mut Criterion) {
    let mut group = c.benchmark_group("refine");
    group.sample_size(10);
    let k = 64;
    for n in [10_000usize, 100_000] {
        let keys = lengths(n, 3);
        let start = lpt(&keys, k).unwrap();
        group.throughput(Throughput::Elements(n as u64));
        group.bench_with_input(BenchmarkId::from_parameter(n), &keys, |b, keys| {
            b.iter(|| refine(black_box(keys), &start).unwrap());
        });
        sort_baseline(&mut group, &keys);
    }
    group.finish();
}

fn bench_exact(c: &mut Criterion) {
    let mut group = c.benchmark_group("exact");
    group.sample_size(10);
    for n in [12usize, 16, 20] {
        let keys = lengths(n, 4);
        group.throughput(Throughput::Elements(n as u64));
        group.bench_with_input(BenchmarkId::from_parameter(n), &keys, |b, keys| {
            b.iter(|| exact(black_box(keys), 3, 1_000_000).unwrap());
        });
        sort_baseline(&mut group, &keys);
    }
    group.finish();
}

/// The default `Partitioner` (LPT, refined within its work budget) against
/// LPT alone on the same items: the ratio issue 10 asks about (n = 10^5,
/// k = 1000), and the per-dimension objective with equal counts.
fn bench_partitioner(c: &mut Criterion) {
    let mut group = c.benchmark_group("partitioner");
    group.sample_size(10);
    let (n, k) = (100_000usize, 1000);
    let keys = lengths(n, 1);
    group.throughput(Throughput::Elements(n as u64));
    group.bench_with_input(BenchmarkId::new("lpt", n), &keys, |b, keys| {
        b.iter(|| lpt(black_box(keys), k).unwrap());
    });
    group.bench_with_input(BenchmarkId::new("default", n), &keys, |b, keys| {
        b.iter(|| Partitioner::new(k).partition(black_box(keys)).unwrap());
    });
    let (a, c2) = (lengths(5000, 2), lengths(5000, 3));
    let pairs: Vec<[u32; 2]> = a.iter().zip(&c2).map(|(&x, &y)| [x, y]).collect();
    let per_dim = |refined: bool| {
        Partitioner::new(250)
            .dims(Dims::PerDim)
            .equal_count(true)
            .refinement(refined)
    };
    group.throughput(Throughput::Elements(5000));
    group.bench_with_input(BenchmarkId::new("per_dim_lpt", 5000), &pairs, |b, items| {
        b.iter(|| per_dim(false).partition(black_box(items)).unwrap());
    });
    group.bench_with_input(
        BenchmarkId::new("per_dim_refined", 5000),
        &pairs,
        |b, items| {
            b.iter(|| per_dim(true).partition(black_box(items)).unwrap());
        },
    );
    group.finish();
}

criterion_group!(
    benches,
    bench_partitioner,
    bench_lpt,
    bench_karmarkar_karp,
    bench_karmarkar_karp_1024,
    bench_refine,
    bench_exact
);
criterion_main!(benches);

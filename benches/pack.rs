//! Criterion benches of the bin-packing family, with `slice::sort_unstable`
//! of the same keys in every group as the baseline.
//!
//! Run: `cargo bench --bench pack`. Sizes are sample lengths of a VLM batch:
//! log-normal tokens (median 1500, sigma 1), clipped to [1, 16384], packed
//! into sequences of 16384 tokens. The two-dimensional groups pack
//! (tokens, tiles) samples, InternVL-like: 0 to 12 tiles of 256 tokens plus
//! log-normal text (median 300), against 16384 tokens and 48 tiles.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use microbatch::pack::{self, Packing};
use std::hint::black_box;

// The seeded inputs, shared with the quality tables (`examples/quality_table.rs`).
mod inputs;
use inputs::{pack_lengths as lengths, pack_samples as samples, CAPACITY, TILES};

const SIZES: [usize; 4] = [1_000, 10_000, 100_000, 1_000_000];

/// One group: `sort_unstable` of the keys as the baseline, then `f`, at
/// every size; `make(n)` builds the seeded keys.
fn group<K: Clone + Ord>(
    c: &mut Criterion,
    name: &str,
    make: fn(usize) -> Vec<K>,
    f: impl Fn(&[K]) -> usize,
) {
    let mut group = c.benchmark_group(name);
    for n in SIZES {
        if n >= 100_000 {
            group.sample_size(10);
        }
        let keys = make(n);
        group.throughput(Throughput::Elements(n as u64));
        group.bench_with_input(BenchmarkId::new("sort_unstable", n), &keys, |b, keys| {
            b.iter_batched_ref(
                || keys.clone(),
                |k| k.sort_unstable(),
                criterion::BatchSize::LargeInput,
            )
        });
        group.bench_with_input(BenchmarkId::new(name, n), &keys, |b, keys| {
            b.iter(|| f(black_box(keys)))
        });
    }
    group.finish();
}

/// A packing function over items `I`, as the groups call it.
type Pack<I> = fn(&[I], I) -> Result<Packing<u32>, microbatch::Error>;

fn benches(c: &mut Criterion) {
    let algorithms_1d: [(&str, Pack<u32>); 5] = [
        ("first_fit_decreasing", pack::first_fit_decreasing),
        ("best_fit_decreasing", pack::best_fit_decreasing),
        ("first_fit", pack::first_fit),
        ("best_fit", pack::best_fit),
        ("next_fit", pack::next_fit),
    ];
    for (name, f) in algorithms_1d {
        let packed = move |k: &[u32]| f(k, CAPACITY).map_or(0, |p| p.len());
        group(c, name, |n| lengths(n, n as u64), packed);
    }
    group(
        c,
        "streaming_ffd_4096",
        |n| lengths(n, n as u64),
        |k| {
            let mut packer = pack::StreamingPacker::new(CAPACITY, 4096).expect("valid capacity");
            let mut bins = 0;
            for &x in k {
                packer.push(x).expect("valid item");
                while packer.pop().is_some() {
                    bins += 1;
                }
            }
            bins + packer.finish().len()
        },
    );
    let algorithms_2d: [(&str, Pack<[u32; 2]>); 4] = [
        ("first_fit_decreasing_2d", pack::first_fit_decreasing),
        ("best_fit_decreasing_2d", pack::best_fit_decreasing),
        ("first_fit_2d", pack::first_fit),
        ("best_fit_2d", pack::best_fit),
    ];
    for (name, f) in algorithms_2d {
        let packed = move |k: &[[u32; 2]]| f(k, [CAPACITY, TILES]).map_or(0, |p| p.len());
        group(c, name, |n| samples(n, n as u64), packed);
    }
}

/// Best fit over 50,000 two-dimensional items whose second capacity is too
/// large for the groups by remaining capacity (more than 256 values), so
/// that the search tree answers the queries: (tokens, image tokens) samples
/// against 16384 tokens and 4096 image tokens, and the walk's worst case
/// (every bin has room in tokens, none in the second dimension), each with
/// `sort_unstable` of the same keys.
fn best_fit_2d_tree(c: &mut Criterion) {
    const N: usize = 50_000;
    let mut group = c.benchmark_group("best_fit_decreasing_2d_tree");
    let vlm: Vec<[u32; 2]> = samples(N, N as u64)
        .into_iter()
        .map(|[tokens, tiles]| [tokens, (tiles * 256).min(4096)])
        .collect();
    let full = vec![[1u32, 1000]; N];
    for (name, keys, cap) in [
        ("vlm", &vlm, [CAPACITY, 4096]),
        ("second_full", &full, [100_000, 1000]),
    ] {
        group.throughput(Throughput::Elements(N as u64));
        group.bench_with_input(
            BenchmarkId::new(format!("sort_unstable_{name}"), N),
            keys,
            |b, keys| {
                b.iter_batched_ref(
                    || keys.clone(),
                    |k| k.sort_unstable(),
                    criterion::BatchSize::LargeInput,
                )
            },
        );
        group.bench_with_input(
            BenchmarkId::new(format!("best_fit_decreasing_{name}"), N),
            keys,
            |b, keys| {
                b.iter(|| pack::best_fit_decreasing(black_box(keys), cap).map_or(0, |p| p.len()))
            },
        );
    }
    group.finish();
}

criterion_group!(pack_benches, benches, best_fit_2d_tree);
criterion_main!(pack_benches);

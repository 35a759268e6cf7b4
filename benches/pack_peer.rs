//! Best-fit-decreasing against the `seqpacker` crate, the peer for packing
//! sequences of tokens, on the same instances in the same process.
//!
//! Run: `cargo bench --bench pack_peer`. Instances: `n` sizes drawn uniformly
//! from `1..=4096` (seeded), packed into bins of 4096, both crates reading
//! the same `Vec<usize>`. The setup asserts that every variant opens the same
//! number of bins (best-fit-decreasing's count does not depend on how ties
//! are broken), so the comparison is of equal work.
//!
//! The seqpacker variants, fastest first:
//! - `seqpacker_obfd_lengths`: `optimized_best_fit_decreasing_lengths`, its
//!   hot path (counting sort, segment tree over the capacities), returning
//!   the bins as lists of indices, as [`Packing`](microbatch::pack::Packing)
//!   does;
//! - `seqpacker_obfd`: the same through its `Packer` API
//!   (`PackStrategy::OptimizedBestFitDecreasing`, `pack_lengths`);
//! - `seqpacker_bfd`: `PackStrategy::BestFitDecreasing` (comparison sort and
//!   a B-tree of remaining capacities).
//!
//! Its `ParallelOptimizedBestFitDecreasing` is left out: it splits the input
//! over threads and repacks their last bins, a different packing with a
//! different bin count, on however many cores the machine lends.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use microbatch::pack::best_fit_decreasing;
use seqpacker::algorithms::optimized_best_fit_decreasing::optimized_best_fit_decreasing_lengths;
use seqpacker::{PackStrategy, Packer};
use std::hint::black_box;

#[path = "../tests/it/common/rng.rs"]
mod rng;
use rng::TestRng;

const CAPACITY: usize = 4096;

/// `n` sizes uniform in `1..=CAPACITY`, from the shared seeded generator.
fn uniform(n: usize, seed: u64) -> Vec<usize> {
    let mut rng = TestRng::new(seed);
    (0..n)
        .map(|_| 1 + rng.below(CAPACITY as u64) as usize)
        .collect()
}

fn ours(sizes: &[usize]) -> usize {
    best_fit_decreasing(sizes, CAPACITY).map_or(0, |p| p.len())
}

fn obfd_lengths(sizes: &[usize]) -> usize {
    optimized_best_fit_decreasing_lengths(sizes, CAPACITY).map_or(0, |bins| bins.len())
}

fn packer(strategy: PackStrategy) -> impl Fn(&[usize]) -> usize {
    let packer = Packer::new(CAPACITY).with_strategy(strategy);
    move |sizes| packer.pack_lengths(sizes).map_or(0, |r| r.packs.len())
}

/// A packer, as the group calls it: the sizes in, the number of bins out.
type Variant = dyn Fn(&[usize]) -> usize;

fn benches(c: &mut Criterion) {
    let mut group = c.benchmark_group("bfd_vs_seqpacker");
    group.sample_size(10);
    let obfd = packer(PackStrategy::OptimizedBestFitDecreasing);
    let bfd = packer(PackStrategy::BestFitDecreasing);
    let variants: [(&str, &Variant); 4] = [
        ("microbatch", &ours),
        ("seqpacker_obfd_lengths", &obfd_lengths),
        ("seqpacker_obfd", &obfd),
        ("seqpacker_bfd", &bfd),
    ];
    for n in [100_000, 1_000_000] {
        let sizes = uniform(n, n as u64);
        let bins = ours(&sizes);
        for (name, f) in &variants {
            assert_eq!(
                f(&sizes),
                bins,
                "{name} opens a different number of bins at n = {n}"
            );
        }
        group.throughput(Throughput::Elements(n as u64));
        for (name, f) in &variants {
            group.bench_with_input(BenchmarkId::new(*name, n), &sizes, |b, sizes| {
                b.iter(|| f(black_box(sizes)))
            });
        }
    }
    group.finish();
}

criterion_group!(peer_benches, benches);
criterion_main!(peer_benches);

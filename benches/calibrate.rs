//! Benchmarks of `cost::Calibrator::refit` over windows of 1,024 to 16,384
//! micro-batches (InternVL's 7 terms, timed per phase, 3% noise, 2% of rows
//! slowed 2x), with `sort_unstable_by(f64::total_cmp)` of the window's
//! 7 x W feature values as the baseline, so that a ratio can be read and
//! the refit's linear growth in the window checked.
//!
//! Run: `cargo bench --bench calibrate -- --warm-up-time 1 --measurement-time 3`

use core::hint::black_box;

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, Throughput};
use microbatch::cost::{Calibrator, CostModel, Image, Linear, Preset, Sample, Term, Timing};

#[path = "../tests/it/common/rng.rs"]
mod rng;

/// A calibrator of InternVL's terms holding `w` seeded rows.
fn filled(w: usize) -> (Calibrator, Vec<f64>) {
    let mut rng = rng::TestRng::new(7);
    let preset = Linear::preset(Preset::InternVl25_8b);
    let truth = preset
        .with_coefficients(
            &preset
                .terms()
                .iter()
                .map(|t| match t {
                    Term::Images => 2e-3,
                    Term::Samples => 4e-4,
                    Term::Groups => 1e-3,
                    Term::Units => 0.0,
                    _ => 1e-15,
                })
                .collect::<Vec<f64>>(),
        )
        .unwrap();
    let mut c = Calibrator::new(preset).window(w);
    let mut keys = Vec::with_capacity(w * preset.len());
    for _ in 0..w {
        let n = 1 + rng.below(12) as usize;
        let group: Vec<Sample> = (0..n)
            .map(|_| {
                let images = rng.below(3) as usize;
                Sample::new(
                    20 + rng.below(3000) as u32,
                    (0..images).map(|_| Image::new(16 + rng.below(2000) as u32)),
                )
            })
            .collect();
        let refs: Vec<&Sample> = group.iter().collect();
        let mut t = truth.cost(&refs);
        t = t * (1.0 + 0.03 * rng.normal()).max(0.5);
        if rng.unit() < 0.02 {
            t = t * 2.0;
        }
        for term in preset.terms() {
            let one = Linear::new([(*term, 1.0)]).unwrap();
            keys.push(one.cost(&refs).total());
        }
        c.observe(&group, Timing::Phases(t)).unwrap();
    }
    (c, keys)
}

fn bench_refit(c: &mut Criterion) {
    let mut group = c.benchmark_group("calibrator_refit");
    for w in [1024usize, 4096, 16384] {
        let (cal, keys) = filled(w);
        group.throughput(Throughput::Elements(w as u64));
        group.bench_with_input(BenchmarkId::new("refit", w), &cal, |b, cal| {
            b.iter_batched(
                || cal.clone(),
                |mut cal| {
                    black_box(cal.refit().fitted());
                    cal
                },
                BatchSize::LargeInput,
            );
        });
        group.bench_with_input(
            BenchmarkId::new("sort_unstable_features", w),
            &keys,
            |b, keys| {
                b.iter_batched(
                    || keys.clone(),
                    |mut v| {
                        v.sort_unstable_by(f64::total_cmp);
                        v
                    },
                    BatchSize::LargeInput,
                );
            },
        );
    }
    group.finish();
}

criterion_group!(benches, bench_refit);
criterion_main!(benches);

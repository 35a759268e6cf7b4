//! Criterion benches of the type-erased cost model: planning with a model
//! composed at run time (`Incremental::boxed` at every node, as the Python
//! binding builds it) against the same composition with its static type, and
//! boxed once at the top.
//!
//! Run: `cargo bench --bench cost_boxed`. One group a scenario (100,000
//! samples over 256 ranks, the scenario's sequence length and cap), with:
//!
//! - `preset static` and `preset boxed`: the scenario's preset model;
//! - `7 terms static`, `7 terms boxed at the top`, `7 terms boxed at every
//!   node`: a composition of every combinator (sums, `scale`, `in_phase`,
//!   `max`) over seven terms (the preset's three among them).
//!
//! The ratio of a boxed row to its static row is the cost of the erasure.

use criterion::{criterion_group, BenchmarkId, Criterion, Throughput};
use microbatch::cost::{
    BoxCostModel, CostModel, DocumentAttention, Incremental, PerGroup, PerSample, PerTile, Phase,
    Tokens, Training,
};
use microbatch::plan::{Planner, StepSample};
use microbatch::scenario::Scenario;
use std::fmt::Debug;
use std::hint::black_box;
use std::time::Duration;

const SAMPLES: usize = 100_000;
const RANKS: usize = 256;

/// The scenario's settings around `model`.
fn planner<M: Incremental>(scenario: Scenario, model: M) -> Planner<M> {
    let p = Planner::new(model).ranks(RANKS).seq_len(scenario.seq_len());
    match scenario.max_units() {
        Some(u) => p.max_units(u),
        None => p,
    }
}

/// The seven-term composition, built by `b` at every node (`boxed` or the
/// identity): `(vit + group cost in vision).max(per sample in vision) +
/// 1.5 * (tokens + attention + per sample) + 1e-15 * preset`.
macro_rules! seven {
    ($scenario:expr, $b:ident) => {{
        let vit = $b(PerTile::new(4e-3, 256, Training::Trained).unwrap());
        let group = $b($b(PerGroup::new(5e-3).unwrap()).in_phase(Phase::Vision));
        let sample = $b($b(PerSample::new(1e-4).unwrap()).in_phase(Phase::Vision));
        let llm = $b($b(
            $b(Tokens::new(2e-5).unwrap()).plus($b(DocumentAttention::new(3e-10).unwrap()))
        )
        .plus($b(PerSample::new(1e-3).unwrap())));
        let preset = $b($b($scenario.preset().cost_model()).scale(1e-15).unwrap());
        $b($b($b($b(vit.plus(group)).max(sample)).plus($b(llm.scale(1.5).unwrap()))).plus(preset))
    }};
}

fn boxed<M>(model: M) -> BoxCostModel
where
    M: Incremental + Debug + Send + Sync + 'static,
    M::State: Send + Sync + 'static,
{
    model.boxed()
}

fn same<M>(model: M) -> M {
    model
}

fn bench<M: Incremental>(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    name: &str,
    planner: &Planner<M>,
    batch: &[StepSample],
) {
    group.bench_function(BenchmarkId::from_parameter(name), |b| {
        b.iter(|| planner.plan(black_box(batch)).unwrap())
    });
}

fn bench_boxed(c: &mut Criterion) {
    for scenario in Scenario::ALL {
        let batch = scenario.generate(SAMPLES, 42);
        let mut group = c.benchmark_group(format!(
            "cost_boxed/{} {SAMPLES} x {RANKS}",
            scenario.name()
        ));
        group.throughput(Throughput::Elements(SAMPLES as u64));
        group.sample_size(10);
        group.measurement_time(Duration::from_secs(6));

        let preset = scenario.preset().cost_model();
        bench(
            &mut group,
            "preset static",
            &planner(scenario, preset),
            &batch,
        );
        bench(
            &mut group,
            "preset boxed",
            &planner(scenario, preset.boxed()),
            &batch,
        );

        let stat = seven!(scenario, same);
        let every = seven!(scenario, boxed);
        assert_eq!(format!("{stat:?}"), format!("{every:?}"));
        let (a, b) = (planner(scenario, stat), planner(scenario, every.clone()));
        assert_eq!(
            a.plan(&batch).unwrap().fingerprint(),
            b.plan(&batch).unwrap().fingerprint()
        );
        bench(&mut group, "7 terms static", &a, &batch);
        bench(
            &mut group,
            "7 terms boxed at the top",
            &planner(scenario, stat.boxed()),
            &batch,
        );
        bench(&mut group, "7 terms boxed at every node", &b, &batch);
        group.finish();
    }
}

criterion_group!(benches, bench_boxed);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
}

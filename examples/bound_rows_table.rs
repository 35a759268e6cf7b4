//! What the lower bound says of plans of a model with costs per row: bound / predicted step time
//! of the calibrated small Qwen2-VL model (bench_hf_vlm's fitted coefficients: a cost per row in
//! both phases, attention over the packed row) on batches drawn like the bench's, 4 ranks, rows of
//! 1,024 tokens, with the model's group floor (the bound since issue 22's fourth pass) and with
//! it hidden (the bound before), the plans checked identical (the history of BENCHMARKS.md:
//! `git show 99d715a:BENCHMARKS.md`, "Lower bound with per-row costs").
//!
//! ```sh
//! cargo run --release --example bound_rows_table -- [SAMPLES=48] [BATCHES=20]
//! ```
use microbatch::cost::{CostModel, Image, Incremental, Linear, Phases, Sample, Term};
use microbatch::plan::{Planner, StepSample, SyncModel};
use rand::{Rng, SeedableRng};

/// The model without its group floor: the old bound.
#[derive(Debug, Clone)]
struct Old(Linear);
impl CostModel for Old {
    fn cost(&self, g: &[&Sample]) -> Phases {
        self.0.cost(g)
    }
    fn floor(&self, s: &Sample) -> Phases {
        self.0.floor(s)
    }
}
impl Incremental for Old {
    type State = <Linear as Incremental>::State;
    fn empty(&self) -> Self::State {
        self.0.empty()
    }
    fn insert(&self, st: &mut Self::State, s: &Sample) {
        self.0.insert(st, s)
    }
    fn evaluate(&self, st: &Self::State) -> Phases {
        self.0.evaluate(st)
    }
}

fn step(n: usize, heavy: f64, seq_len: u32, rng: &mut rand_pcg::Pcg64) -> Vec<StepSample> {
    (0..n)
        .map(|i| {
            let u: f64 = rng.random();
            let count = if u < heavy {
                rng.random_range(8..17)
            } else if u < heavy + 0.15 {
                1
            } else {
                0
            };
            let imgs: Vec<u32> = (0..count)
                .map(|_| rng.random_range(2..7u32) * rng.random_range(2..7u32))
                .collect();
            let text: u32 = rng.random_range(32..481);
            let sum: u32 = imgs.iter().sum();
            let text = text.min(seq_len - sum - 2 * count);
            StepSample::new(
                i as u64,
                Sample::new(text + 2 * count, imgs.into_iter().map(Image::new)),
            )
        })
        .collect()
}

fn main() {
    let model = Linear::new([
        (Term::VisionGroups, 6e-3),
        (Term::Groups, 1.1e-2),
        (Term::Samples, 2.1e-3),
        (Term::RowAttention, 6.4e-8),
        (Term::ImageTokens, 7.4e-5),
    ])
    .unwrap();
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).map_or(48, |a| a.parse().unwrap());
    let steps: u64 = args.get(2).map_or(20, |a| a.parse().unwrap());
    for sync in [SyncModel::Step, SyncModel::MicroStep, SyncModel::Phase] {
        let (mut old_r, mut new_r, mut same) = (Vec::new(), Vec::new(), true);
        for seed in 0..steps {
            let mut rng = rand_pcg::Pcg64::seed_from_u64(seed);
            let samples = step(n, 0.15, 1024, &mut rng);
            let p = Planner::new(model).ranks(4).seq_len(1024).sync(sync);
            let q = Planner::new(Old(model)).ranks(4).seq_len(1024).sync(sync);
            let a = p.plan(&samples).unwrap();
            let b = q.plan(&samples).unwrap();
            same &=
                a.fingerprint() == b.fingerprint() && a.report().predicted == b.report().predicted;
            assert!(a.report().lower_bound <= a.report().predicted);
            new_r.push(a.report().lower_bound / a.report().predicted);
            old_r.push(b.report().lower_bound / b.report().predicted);
        }
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
        let min = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
        let max = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
        println!(
            "{sync:?}: bound/predicted before mean {:.3} [{:.3}, {:.3}] after mean {:.3} [{:.3}, {:.3}]; plans identical: {same}",
            mean(&old_r), min(&old_r), max(&old_r), mean(&new_r), min(&new_r), max(&new_r)
        );
    }
}

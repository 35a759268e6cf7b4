//! The closed-loop simulation of online calibration, shared by the
//! `closed_loop` example and `tests/cost_calibrator.rs` (included with
//! `#[path]`): plan each step with the calibrator's model, "measure" every
//! micro-batch of the plan under a hidden truth (noise and outliers),
//! observe, refit.

use microbatch::cost::{Calibrator, CostModel, Linear, Phases, Sample, Term, Timing};
use microbatch::plan::{Planner, StepSample, SyncModel};
use microbatch::scenario::Scenario;
use microbatch::Error;

/// A tiny seeded generator (splitmix64): the simulation's only randomness.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `(0, 1)`.
    pub fn unit(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    /// Standard normal (Box-Muller).
    pub fn normal(&mut self) -> f64 {
        let (u, v) = (self.unit(), self.unit());
        (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
    }
}

/// The hidden truth of a scenario, in seconds: the preset's terms at other
/// efficiencies than the FLOPs model assumes (vision at 25% of an H100's
/// 989 TFLOP/s, linear LLM work at 55%, attention at 30%), plus overheads
/// no preset knows: 0.35 ms an image, 0.05 ms a unit, 0.15 ms a sample and
/// 2 ms a micro-batch.
pub fn truth(scenario: Scenario) -> Result<Linear, Error> {
    let preset = Linear::preset(scenario.preset());
    let peak = 989e12;
    let c: Vec<f64> = preset
        .terms()
        .iter()
        .zip(preset.coefficients())
        .map(|(&term, &c)| match term {
            Term::Images => 0.35e-3,
            Term::Units => 0.05e-3,
            Term::Samples => 0.15e-3,
            Term::Groups => 2e-3,
            Term::Tokens => c / (0.55 * peak),
            Term::DocumentAttention => c / (0.30 * peak),
            _ => c / (0.25 * peak),
        })
        .collect();
    preset.with_coefficients(&c)
}

/// One micro-batch's measured time under `truth`: each phase times
/// `1 + noise * N(0, 1)` (at least 0), and with probability `outliers` the
/// whole micro-batch twice as long (a network hiccup).
pub fn measure(
    truth: &Linear,
    group: &[&Sample],
    noise: f64,
    outliers: f64,
    rng: &mut Rng,
) -> (Phases, bool) {
    let exact = truth.cost(group);
    let mut jitter = |x: f64| x * (1.0 + noise * rng.normal()).max(0.0);
    let mut t = Phases::new(jitter(exact.vision), jitter(exact.language));
    let slow = rng.unit() < outliers;
    if slow {
        t = t * 2.0;
    }
    (t, slow)
}

/// One step of the loop: the truth's step time over its lower bound for
/// the plans of the calibrated model, the uncalibrated preset and the truth.
#[derive(Clone, Debug)]
pub struct Step {
    pub calibrated: f64,
    pub preset: f64,
    pub truth: f64,
    /// The rows observed this step, and how many were slowed 2x.
    pub rows: usize,
    pub slowed: usize,
    /// After this step's refit: fitted, R^2, rows rejected.
    pub fitted: bool,
    pub r_squared: f64,
    pub rejected: usize,
    /// The drift of the model planned with on this step's rows.
    pub drift: f64,
}

fn planner(scenario: Scenario, ranks: usize, model: Linear) -> Planner<Linear> {
    let p = Planner::new(model)
        .ranks(ranks)
        .seq_len(scenario.seq_len())
        .sync(SyncModel::Phase);
    match scenario.max_units() {
        Some(u) => p.max_units(u),
        None => p,
    }
}

/// Runs `steps` steps of `64 x ranks` samples of `scenario` (step `s` drawn
/// with seed `seed + s`), measuring with `noise` and `outliers`.
pub fn run(
    scenario: Scenario,
    ranks: usize,
    steps: usize,
    seed: u64,
    noise: f64,
    outliers: f64,
) -> Result<Vec<Step>, Error> {
    let truth = truth(scenario)?;
    let preset = Linear::preset(scenario.preset());
    let mut calibrator = Calibrator::new(preset);
    let mut rng = Rng::new(seed ^ 0x5eed);
    let mut out = Vec::with_capacity(steps);
    for step in 0..steps {
        let batch: Vec<StepSample> = scenario.generate(64 * ranks, seed + step as u64);
        let sync = SyncModel::Phase;
        let ratio = |model: Linear| -> Result<(f64, microbatch::plan::Plan), Error> {
            let plan = planner(scenario, ranks, model).plan(&batch)?;
            Ok((plan.predict(&batch, &truth, sync)?, plan))
        };
        let (best, truth_plan) = ratio(truth)?;
        let bound = truth_plan.report().lower_bound;
        let (calibrated, plan) = ratio(calibrator.model())?;
        let (uncalibrated, _) = ratio(preset)?;
        // Every micro-batch of every rank, timed per phase.
        let (mut rows, mut slowed) = (0, 0);
        let mut group: Vec<&Sample> = Vec::new();
        for r in 0..plan.ranks() {
            for j in 0..plan.micro_steps() {
                group.clear();
                // Ids are the batch's positions.
                group.extend(
                    plan.micro_batch(r, j)
                        .iter()
                        .map(|&id| batch[id as usize].sample()),
                );
                if group.is_empty() {
                    continue;
                }
                let (time, slow) = measure(&truth, &group, noise, outliers, &mut rng);
                calibrator.observe(group.iter().copied(), Timing::Phases(time))?;
                rows += 1;
                slowed += usize::from(slow);
            }
        }
        let drift = calibrator.drift().mean_relative_error;
        let status = calibrator.refit();
        out.push(Step {
            calibrated: calibrated / bound,
            preset: uncalibrated / bound,
            truth: best / bound,
            rows,
            slowed,
            fitted: status.fitted(),
            r_squared: status.r_squared().unwrap_or(f64::NAN),
            rejected: status.rejected().len(),
            drift,
        });
    }
    Ok(out)
}

//! Gradient-order invariance: running a plan rank by rank, micro-step by
//! micro-step, with the plan's loss scales and an all-reduce, gives the
//! unbalanced step's gradient: exactly in integer (rational) arithmetic,
//! within `n * eps * sum|g|` in `f64`. Per-micro-batch mean normalization
//! does not, which the counter-test shows on generated batches.
//!
//! The toy models have per-token gradients in closed form:
//!
//! - integer: token `t` of sample `id` has gradient `g(id, t)`, a vector
//!   of small integers;
//! - `f64`: a linear model `w . x` with squared loss per token, whose
//!   gradient for token `t` of sample `id` is `(w . x - y) x`, with
//!   features `x` and target `y` drawn from `(id, t)`.
//!
//! Only loss tokens carry gradient.

use microbatch::cost::{Image, Sample, Tokens};
use microbatch::plan::{
    GroupScope, Locality, Normalization, Plan, Planner, Reduction, StepSample, SyncModel,
};
use proptest::prelude::*;
use std::collections::HashMap;

use crate::common::rng;
use rng::hash;

const DIM: usize = 3;

/// The integer gradient of token `t` of sample `id`.
fn int_grad(id: u64, t: u64) -> [i128; DIM] {
    std::array::from_fn(|d| {
        (hash(id.wrapping_mul(1_000_003) ^ (t << 8) ^ d as u64) % 41) as i128 - 20
    })
}

/// The summed integer gradient of one sample's loss tokens.
fn int_sample_sum(s: &StepSample) -> [i128; DIM] {
    let mut g = [0i128; DIM];
    for t in 0..s.loss_tokens() {
        for (a, b) in g.iter_mut().zip(int_grad(s.id(), t)) {
            *a += b;
        }
    }
    g
}

fn gcd(a: i128, b: i128) -> i128 {
    if b == 0 {
        a.abs()
    } else {
        gcd(b, a % b)
    }
}

/// A vector of fractions with one common denominator.
#[derive(Clone, Copy, Debug)]
struct Frac {
    num: [i128; DIM],
    den: i128,
}

impl Frac {
    fn new(num: [i128; DIM], den: i128) -> Self {
        Frac { num, den }.reduced()
    }

    fn reduced(self) -> Self {
        let g = self.num.iter().fold(self.den, |g, &n| gcd(g, n)).max(1);
        let sign = if self.den < 0 { -1 } else { 1 };
        Frac {
            num: self.num.map(|n| sign * n / g),
            den: sign * self.den / g,
        }
    }

    fn add(self, o: Frac) -> Frac {
        let l = self.den / gcd(self.den, o.den) * o.den;
        let (a, b) = (l / self.den, l / o.den);
        Frac::new(std::array::from_fn(|d| self.num[d] * a + o.num[d] * b), l)
    }

    fn scale(self, num: i128, den: i128) -> Frac {
        Frac::new(self.num.map(|n| n * num), self.den * den)
    }

    fn eq(self, o: Frac) -> bool {
        (0..DIM).all(|d| self.num[d] * o.den == o.num[d] * self.den)
    }
}

const ZERO: Frac = Frac {
    num: [0; DIM],
    den: 1,
};

/// The unbalanced step's gradient: every sample's contribution over the
/// step-global denominator.
fn naive_int(samples: &[StepSample], norm: Normalization) -> Frac {
    match norm {
        Normalization::Token => {
            let d: u64 = samples.iter().map(StepSample::loss_tokens).sum();
            let sum = samples
                .iter()
                .fold(ZERO, |acc, s| acc.add(Frac::new(int_sample_sum(s), 1)));
            sum.scale(1, d.max(1) as i128)
        }
        Normalization::Sample => samples
            .iter()
            .filter(|s| s.loss_tokens() > 0)
            .fold(ZERO, |acc, s| {
                acc.add(Frac::new(int_sample_sum(s), s.loss_tokens() as i128))
            })
            .scale(1, samples.len() as i128),
    }
}

/// One micro-batch's summed loss gradient: over its loss tokens (token
/// normalization), or over its samples of each sample's mean (sample
/// normalization).
fn micro_batch_sum(ids: &[u64], by_id: &HashMap<u64, &StepSample>, norm: Normalization) -> Frac {
    ids.iter().fold(ZERO, |acc, id| {
        let s = by_id[id];
        match norm {
            Normalization::Token => acc.add(Frac::new(int_sample_sum(s), 1)),
            Normalization::Sample if s.loss_tokens() == 0 => acc,
            Normalization::Sample => acc.add(Frac::new(int_sample_sum(s), s.loss_tokens() as i128)),
        }
    })
}

/// The plan's gradient: each rank accumulates its micro-batches' summed
/// loss times the plan's scale, then an all-reduce sums (or averages).
fn planned_int(plan: &Plan, samples: &[StepSample], norm: Normalization, red: Reduction) -> Frac {
    let by_id: HashMap<u64, &StepSample> = samples.iter().map(|s| (s.id(), s)).collect();
    let (num, den) = plan.loss().scale_ratio(norm, red);
    let mut reduced = ZERO;
    for r in 0..plan.ranks() {
        let mut rank = ZERO;
        for j in 0..plan.micro_steps() {
            let mb = micro_batch_sum(plan.micro_batch(r, j), &by_id, norm);
            rank = rank.add(mb.scale(num as i128, den as i128));
        }
        reduced = reduced.add(rank);
    }
    match red {
        Reduction::Sum => reduced,
        Reduction::Mean => reduced.scale(1, plan.ranks() as i128),
    }
}

/// The common bug: each micro-batch divides by its own loss tokens, and the
/// micro-batch losses are averaged over micro-steps and ranks.
fn per_micro_batch_mean(plan: &Plan, samples: &[StepSample]) -> Frac {
    let by_id: HashMap<u64, &StepSample> = samples.iter().map(|s| (s.id(), s)).collect();
    let mut total = ZERO;
    for r in 0..plan.ranks() {
        for j in 0..plan.micro_steps() {
            let ids = plan.micro_batch(r, j);
            let k: u64 = ids.iter().map(|id| by_id[id].loss_tokens()).sum();
            if k == 0 {
                continue;
            }
            let mb = micro_batch_sum(ids, &by_id, Normalization::Token);
            total = total.add(mb.scale(1, k as i128));
        }
    }
    total.scale(1, (plan.ranks() * plan.micro_steps()) as i128)
}

/// A batch of `n` samples from `seed`: text, images and loss tokens.
fn batch(n: usize, seed: u64) -> Vec<StepSample> {
    (0..n as u64)
        .map(|i| {
            let x = hash(seed ^ (i << 20));
            let text = 20 + (x % 400) as u32;
            let images =
                (0..(x >> 12) % 3).map(|k| Image::new(64 + ((x >> (20 + k)) % 300) as u32));
            // Few distinct loss-token counts keep the rational denominators small.
            let loss = 1 + (x >> 40) % 12;
            StepSample::new(i * 3 + 1, Sample::new(text, images)).with_loss_tokens(loss)
        })
        .collect()
}

fn plan_of(samples: &[StepSample], ranks: usize, sync: SyncModel) -> Plan {
    Planner::new(Tokens::new(1.0).unwrap())
        .ranks(ranks)
        .seq_len(1500)
        .sync(sync)
        .plan(samples)
        .unwrap()
}

fn settings() -> impl Strategy<Value = (usize, u64, usize, SyncModel, Normalization, Reduction)> {
    (
        4usize..40,
        any::<u64>(),
        1usize..5,
        prop::sample::select(SyncModel::ALL.to_vec()),
        prop::sample::select(vec![Normalization::Token, Normalization::Sample]),
        prop::sample::select(vec![Reduction::Sum, Reduction::Mean]),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Exact equality in rational arithmetic, for both normalizations and
    /// both reductions.
    #[test]
    fn integer_gradient_equals_the_unbalanced_one((n, seed, ranks, sync, norm, red) in settings()) {
        let samples = batch(n, seed);
        let plan = plan_of(&samples, ranks.min(n), sync);
        let planned = planned_int(&plan, &samples, norm, red);
        let naive = naive_int(&samples, norm);
        prop_assert!(planned.eq(naive), "{planned:?} != {naive:?}");
    }

    /// With origins (round robin, or all on one rank) and locality, the
    /// plan moves samples elsewhere and the update is still the unbalanced
    /// one, exactly.
    #[test]
    fn integer_gradient_with_origins_and_locality((n, seed, ranks, sync, norm, red) in settings(), skew in any::<bool>()) {
        let ranks = ranks.min(n);
        let samples: Vec<StepSample> = batch(n, seed)
            .into_iter()
            .enumerate()
            .map(|(i, s)| s.with_origin(if skew { 0 } else { i % ranks }))
            .collect();
        let plan = Planner::new(Tokens::new(1.0).unwrap())
            .ranks(ranks)
            .seq_len(1500)
            .sync(sync)
            .locality(Locality::new(0.02).unwrap())
            .plan(&samples)
            .unwrap();
        prop_assert!(plan.exchange().is_some());
        let planned = planned_int(&plan, &samples, norm, red);
        let naive = naive_int(&samples, norm);
        prop_assert!(planned.eq(naive), "{planned:?} != {naive:?}");
    }

    /// The same with groups (three consecutive ids a group), in either
    /// scope: keeping samples together does not change the update.
    #[test]
    fn integer_gradient_with_groups_equals_the_unbalanced_one(
        (n, seed, ranks, sync, norm, red) in settings(),
        scope in prop::sample::select(GroupScope::ALL.to_vec()),
    ) {
        let samples: Vec<StepSample> =
            batch(n, seed).into_iter().map(|s| { let g = s.id() / 9; s.with_group(g) }).collect();
        let plan = Planner::new(Tokens::new(1.0).unwrap())
            .ranks(ranks.min(n.div_ceil(3)))
            .seq_len(3000) // a group of three fits one sequence
            .sync(sync)
            .group_scope(scope)
            .plan(&samples)
            .unwrap();
        let planned = planned_int(&plan, &samples, norm, red);
        let naive = naive_int(&samples, norm);
        prop_assert!(planned.eq(naive), "{planned:?} != {naive:?}");
    }

    /// In f64 the reordered sum stays within n * eps * sum|g|.
    #[test]
    fn float_gradient_is_within_the_rounding_bound((n, seed, ranks, sync, _norm, red) in settings()) {
        let samples = batch(n, seed);
        let plan = plan_of(&samples, ranks.min(n), sync);
        let w = [0.5, -1.25, 2.0, 0.75];
        // Per-token gradient of 0.5 * (w . x - y)^2.
        let grad = |id: u64, t: u64| -> [f64; 4] {
            let x: [f64; 4] = std::array::from_fn(|d| ((hash(id ^ (t << 16) ^ d as u64) % 2001) as f64 - 1000.0) / 1000.0);
            let y = ((hash(id ^ (t << 16) ^ 99) % 2001) as f64 - 1000.0) / 500.0;
            let e = w.iter().zip(&x).map(|(a, b)| a * b).sum::<f64>() - y;
            x.map(|v| e * v)
        };
        let by_id: HashMap<u64, &StepSample> = samples.iter().map(|s| (s.id(), s)).collect();
        let d: u64 = samples.iter().map(StepSample::loss_tokens).sum();
        // Naive: all tokens in id order, then one division.
        let mut naive = [0.0f64; 4];
        let mut abs = [0.0f64; 4];
        let mut terms = 0usize;
        for s in &samples {
            for t in 0..s.loss_tokens() {
                let g = grad(s.id(), t);
                for k in 0..4 {
                    naive[k] += g[k];
                    abs[k] += g[k].abs();
                }
                terms += 1;
            }
        }
        let naive = naive.map(|v| v / d as f64);
        // Planned: micro-batch sums times the scale, rank accumulation, all-reduce.
        let scale = plan.loss().scale(Normalization::Token, red);
        let mut reduced = [0.0f64; 4];
        for r in 0..plan.ranks() {
            let mut rank = [0.0f64; 4];
            for j in 0..plan.micro_steps() {
                let mut mb = [0.0f64; 4];
                for id in plan.micro_batch(r, j) {
                    for t in 0..by_id[id].loss_tokens() {
                        let g = grad(*id, t);
                        for k in 0..4 {
                            mb[k] += g[k];
                        }
                    }
                }
                for k in 0..4 {
                    rank[k] += mb[k] * scale;
                }
            }
            for k in 0..4 {
                reduced[k] += rank[k];
            }
        }
        if red == Reduction::Mean {
            reduced = reduced.map(|v| v / plan.ranks() as f64);
        }
        let n_ops = (terms + plan.micro_steps() * plan.ranks() + plan.ranks() + 4) as f64;
        for k in 0..4 {
            let bound = n_ops * f64::EPSILON * abs[k] / d as f64;
            prop_assert!((reduced[k] - naive[k]).abs() <= bound, "dim {k}: {} vs {}, bound {bound}", reduced[k], naive[k]);
        }
    }
}

/// The counter-test: per-micro-batch mean normalization (each micro-batch
/// divides by its own loss tokens) gives a different gradient on generated
/// batches, while the plan's scales give the unbalanced one on the same
/// batches. If this test ever failed, the invariance test above could not
/// tell a correct normalization from the common bug.
#[test]
fn per_micro_batch_mean_breaks_invariance() {
    let mut broken = 0;
    for seed in 0..20 {
        let samples = batch(24, seed);
        let plan = plan_of(&samples, 3, SyncModel::Phase);
        assert!(plan.micro_steps() * plan.ranks() > 1);
        let naive = naive_int(&samples, Normalization::Token);
        assert!(planned_int(&plan, &samples, Normalization::Token, Reduction::Mean).eq(naive));
        if !per_micro_batch_mean(&plan, &samples).eq(naive) {
            broken += 1;
        }
    }
    assert!(
        broken >= 19,
        "per-micro-batch means matched on {} of 20 batches",
        20 - broken
    );
}

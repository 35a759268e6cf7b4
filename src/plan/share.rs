//! Share stage: for a cost model that is not additive (a cost per packed sequence, attention over the whole packed row), each sample's planning cost becomes its share of the exact cost of the sequence a plan puts it in.
//!
//! The stages from `pack` to `search` balance sums of per-sample costs. For
//! an additive model a sample's cost alone is exactly what it adds to any
//! sequence; for the others it is not, and the difference can dominate:
//! with [`PerGroup`](crate::cost::PerGroup) (`language.groups`) every
//! sample alone pays the whole per-sequence cost, so a sequence of ten short
//! samples looks ten times as costly as it is; with
//! [`FullAttention`](crate::cost::FullAttention) (`language.row_attention`,
//! sdpa and eager attention on packed rows) a sample of `t` tokens alone
//! costs `c t^2` but adds about `c t T` to a row of `T` tokens. Balancing
//! those costs balances the wrong thing (`tests/it/plan_share.rs`).
//!
//! The planner first probes the model ([`additive`]) on at most [`SHARE_PROBES`]
//! pairs of samples spread over the batch: when every pair costs the sum of
//! its two costs alone (to `1e-9` relative, phase by phase), the model is
//! taken as additive and nothing changes (the built-in additive models, the
//! presets with varlen attention). Otherwise [`share`] evaluates every sequence of a plan exactly
//! as a group, and gives each sample, per phase, its floor
//! ([`CostModel::floor`]) plus the sequence's cost above its samples'
//! floors split in proportion to the samples' tokens: the shares of a
//! sequence sum to its exact cost, a sample alone keeps its own cost, and
//! every share is at least the sample's floor. For `c T^2` the share is `c
//! t^2 + c (T^2 - sum t^2) t / T`, about `c t T`; for a cost `G` a
//! sequence, `G t / T`. The planner runs its stages again on the shares
//! (and again on the shares of that plan) while the exact step time drops,
//! so the plan is never worse than the plan of the own costs; the
//! [`Report`](super::Report) still evaluates every sequence exactly, and
//! the lower bound still sums the floors.
//!
//! # Complexity
//!
//! O(1) model evaluations for the probe; for a non-additive model O(n)
//! model insertions and floors and O(n) extra space (the shares beside the
//! prepared samples).

use alloc::vec::Vec;

use super::finish::Context;
use super::prepare::Prepared;
use super::tuning::SHARE_PROBES;
use crate::cost::{Incremental, Phases};
use crate::num::abs;

/// Relative difference under which two costs are equal for the probe.
const CLOSE: f64 = 1e-9;

/// The batch with each sample's cost replaced by its share of the exact
/// cost of its sequence in `sequences` (every sample's position in one);
/// for a model that is not [`additive`] (for one that is, every share is
/// the sample's own cost up to rounding).
pub(crate) fn share<M: Incremental>(
    prep: &Prepared,
    cx: &Context<'_, M>,
    sequences: &[Vec<u32>],
) -> Prepared {
    let sample = |p: u32| cx.samples[prep.items[p as usize].input as usize].sample();
    let mut items = prep.items.clone();
    for members in sequences {
        // Each member's cost its floor first, their sum what the
        // sequence's exact cost is above.
        let mut state = cx.model.empty();
        let (mut floors, mut tokens) = (Phases::ZERO, 0u64);
        for &p in members {
            let floor = cx.model.floor(sample(p));
            cx.model.insert(&mut state, sample(p));
            items[p as usize].cost = floor;
            floors += floor;
            tokens += prep.size(p as usize)[0];
        }
        let exact = cx.model.evaluate(&state);
        // At least zero: a floor sum above the cost is rounding only.
        let over = Phases::new(
            (exact.vision - floors.vision).max(0.0),
            (exact.language - floors.language).max(0.0),
        );
        for &p in members {
            // Every sample has a token (checked by `StepSample`); the
            // guard keeps an empty sum harmless all the same.
            let weight = if tokens == 0 {
                1.0 / members.len() as f64
            } else {
                prep.size(p as usize)[0] as f64 / tokens as f64
            };
            items[p as usize].cost += over * weight;
        }
    }
    prep.with_items(items)
}

/// Whether every probed pair of samples costs the sum of its two costs
/// alone: pairs `(i, i + 1)` at `SHARE_PROBES` positions spread evenly over the
/// samples in id order.
pub(crate) fn additive<M: Incremental>(prep: &Prepared, cx: &Context<'_, M>) -> bool {
    let n = prep.len();
    if n < 2 {
        return true;
    }
    let probes = (n / 2).min(SHARE_PROBES);
    let close = |a: f64, b: f64| abs(a - b) <= CLOSE * abs(a).max(abs(b));
    (0..probes).all(|k| {
        // Even positions in 0..n - 1, so that `i + 1` is a sample.
        let i = k * (n - 1) / probes;
        let (a, b) = (&prep.items[i], &prep.items[i + 1]);
        let mut state = cx.model.empty();
        cx.model
            .insert(&mut state, cx.samples[a.input as usize].sample());
        let pair = cx
            .model
            .evaluate_with(&state, cx.samples[b.input as usize].sample());
        let sum = a.cost + b.cost;
        close(pair.vision, sum.vision) && close(pair.language, sum.language)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::{
        CostModel, FullAttention, Image, Linear, PerGroup, Preset, Sample, Term, Tokens,
    };
    use crate::plan::pack::{pack, Request};
    use crate::plan::prepare::prepare;
    use crate::plan::{StepSample, SyncModel};
    use alloc::vec;
    use proptest::prelude::*;

    fn batch(items: &[(u32, u32)]) -> Vec<StepSample> {
        items
            .iter()
            .enumerate()
            .map(|(i, &(text, image))| {
                let images = (image > 0).then(|| Image::new(image));
                StepSample::new(i as u64, Sample::new(text, images))
            })
            .collect()
    }

    fn context<'a, M>(samples: &'a [StepSample], model: &'a M) -> Context<'a, M> {
        Context {
            samples,
            model,
            sync: SyncModel::Step,
            seq_len: 4096,
            ranks_per_node: None,
            fixed_steps: false,
        }
    }

    /// The sequences of the `pack` stage for 2 ranks, one sequence a
    /// micro-step.
    fn packed<M: Incremental>(model: &M, samples: &[StepSample]) -> (Prepared, Vec<Vec<u32>>) {
        let caps = [4096, u64::MAX, u64::MAX];
        let prep = prepare(samples, model, caps, 2, 1, SyncModel::Step).unwrap();
        let request = Request {
            ranks: 2,
            per_step: 1,
            micro_steps: None,
            phases: false,
            min_steps: 1,
        };
        let sequences = pack(&prep, request).unwrap().sequences;
        (prep, sequences)
    }

    #[test]
    fn additive_models_keep_their_costs() {
        let samples = batch(&[(100, 0), (200, 64), (300, 0), (50, 16)]);
        let model = Preset::Qwen25Vl7b.cost_model();
        let (prep, _) = packed(&model, &samples);
        assert!(additive(&prep, &context(&samples, &model)));
        let linear = Linear::preset(Preset::Llava15_7b);
        let (prep, _) = packed(&linear, &samples);
        assert!(additive(&prep, &context(&samples, &linear)));
    }

    #[test]
    fn a_cost_per_sequence_is_split_by_tokens() -> Result<(), crate::Error> {
        // Two sequences' worth: every sample alone pays the 10 of its
        // group; in a sequence of three, each pays its share of one 10.
        let model = Tokens::new(1.0)? + PerGroup::new(10.0)?;
        let samples = batch(&[(1000, 0), (1000, 0), (2000, 0), (4000, 0)]);
        let cx = context(&samples, &model);
        let (prep, _) = packed(&model, &samples);
        let seqs = vec![vec![0, 1, 2], vec![3]];
        assert!(!additive(&prep, &cx), "PerGroup is not additive");
        let shared = share(&prep, &cx, &seqs);
        let got: Vec<f64> = (0..4).map(|p| shared.cost(p).language).collect();
        assert_eq!(got, [1002.5, 1002.5, 2005.0, 4010.0]);
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// The shares of a sequence sum to its exact cost, phase by phase;
        /// each is at least the sample's floor; a sample alone keeps its
        /// own cost.
        #[test]
        fn shares_sum_to_the_sequences_costs(
            items in prop::collection::vec((1u32..1500, 0u32..300), 2..60),
            row in 0.0f64..1e-3,
            group in 0.0f64..5.0,
        ) {
            let model = Linear::new([
                (Term::Tokens, 1e-3),
                (Term::RowAttention, row),
                (Term::ImageTokens, 2e-3),
                (Term::Groups, group),
                (Term::VisionGroups, group / 2.0),
            ]).unwrap() + FullAttention::new(1e-7).unwrap();
            let samples = batch(&items);
            let cx = context(&samples, &model);
            let (prep, seqs) = packed(&model, &samples);
            prop_assert!(!additive(&prep, &cx), "row attention is not additive");
            let shared = share(&prep, &cx, &seqs);
            for members in &seqs {
                let group: Vec<&Sample> =
                    members.iter().map(|&p| samples[prep.items[p as usize].input as usize].sample()).collect();
                let exact = model.cost(&group);
                let sum = members.iter().fold(Phases::ZERO, |a, &p| a + shared.cost(p as usize));
                for (x, y) in [(sum.vision, exact.vision), (sum.language, exact.language)] {
                    prop_assert!((x - y).abs() <= 1e-9 * y.max(1.0), "{x} vs {y}");
                }
                for &p in members {
                    let sample = samples[prep.items[p as usize].input as usize].sample();
                    let (c, floor) = (shared.cost(p as usize), model.floor(sample));
                    prop_assert!(c.vision >= floor.vision * (1.0 - 1e-12) && c.language >= floor.language * (1.0 - 1e-12));
                    if members.len() == 1 {
                        let own = prep.cost(p as usize);
                        prop_assert!((c.total() - own.total()).abs() <= 1e-9 * own.total().max(1.0));
                    }
                }
            }
        }
    }
}

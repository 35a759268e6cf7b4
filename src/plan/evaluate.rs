//! Predicted step times and lower bounds under each sync model.

use alloc::vec;
use alloc::vec::Vec;

use super::shape::Shape;
use super::sync::SyncModel;
use crate::cost::Phases;

/// The cost of every (rank, micro-step): the sum of its `S` sequences.
/// `costs` is indexed by slot; a missing tail (a baseline with fewer
/// sequences) counts as zero.
fn micro_batches(shape: Shape, costs: &[Phases]) -> Vec<Phases> {
    let mut out = vec![Phases::ZERO; shape.ranks * shape.steps];
    for (k, c) in costs.iter().enumerate() {
        if let Some(slot) = out.get_mut(k / shape.per_step) {
            *slot += *c;
        }
    }
    out
}

/// The predicted step time of the sequences' `costs` (by slot) under
/// `sync`.
pub(crate) fn step_time(sync: SyncModel, shape: Shape, costs: &[Phases]) -> f64 {
    let (ranks, steps) = (shape.ranks, shape.steps);
    let mb = micro_batches(shape, costs);
    match sync {
        SyncModel::Step => (0..ranks)
            .map(|r| {
                mb[r * steps..(r + 1) * steps]
                    .iter()
                    .map(Phases::total)
                    .sum::<f64>()
            })
            .fold(0.0, f64::max),
        SyncModel::MicroStep => (0..steps)
            .map(|j| {
                (0..ranks)
                    .map(|r| mb[r * steps + j].total())
                    .fold(0.0, f64::max)
            })
            .sum(),
        SyncModel::Phase => (0..steps)
            .map(|j| {
                (0..ranks)
                    .map(|r| mb[r * steps + j])
                    .fold(Phases::ZERO, Phases::max)
                    .total()
            })
            .sum(),
    }
}

/// Per phase, the largest rank total over the mean rank total.
pub(crate) fn imbalance(shape: Shape, costs: &[Phases]) -> Phases {
    let mut max = Phases::ZERO;
    let mut sum = Phases::ZERO;
    for rank in costs.chunks(shape.per_rank()).take(shape.ranks) {
        let t: Phases = rank.iter().sum();
        max = max.max(t);
        sum += t;
    }
    let ratio = |m: f64, s: f64| {
        if s > 0.0 {
            m / (s / shape.ranks as f64)
        } else {
            1.0
        }
    };
    Phases::new(
        ratio(max.vision, sum.vision),
        ratio(max.language, sum.language),
    )
}

/// The lower bound of any plan's step time under `sync` over `ranks`
/// ranks, from the sum of the samples' floors and the largest floor of a
/// single sample (summed over phases).
///
/// Valid for every model whose floors obey the law of
/// [`CostModel::floor`](crate::cost::CostModel::floor), `cost(g) >= sum
/// of the floors of g` for every group `g`: the rank times sum the costs of
/// groups that cover every sample once, so their sum is at least the floors'
/// sum (and their maximum at least a `1 / R` share of it), and the group
/// holding the sample of the largest floor costs at least that floor. For
/// additive and superadditive models the floor is the cost alone, and the
/// bound is the classic `max(total / R, largest sample)`.
pub(crate) fn lower_bound(sync: SyncModel, ranks: usize, floors: Phases, largest: f64) -> f64 {
    let r = ranks as f64;
    match sync {
        SyncModel::Step | SyncModel::MicroStep => f64::max(floors.total() / r, largest),
        SyncModel::Phase => floors.vision / r + floors.language / r,
    }
}

/// The bound `bound` rounded down to the smallest of the step times
/// `times` when it exceeds one by rounding only (a relative `1e-9`): the
/// bound sums the samples' floors one by one, a step time sums the groups'
/// costs, and the two roundings differ in the last bits. A larger excess is
/// kept, so that a floor that breaks its law shows.
pub(crate) fn rounded_down(bound: f64, times: &[f64]) -> f64 {
    let least = times.iter().copied().fold(bound, f64::min);
    if bound > least && bound <= least * (1.0 + ROUNDING) {
        least
    } else {
        bound
    }
}

/// The relative difference between a bound and a step time that rounding
/// alone can make.
const ROUNDING: f64 = 1e-9;

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
/// ranks, from the total cost and the largest single sample's cost.
pub(crate) fn lower_bound(sync: SyncModel, ranks: usize, total: Phases, largest: f64) -> f64 {
    let r = ranks as f64;
    match sync {
        SyncModel::Step | SyncModel::MicroStep => f64::max(total.total() / r, largest),
        SyncModel::Phase => total.vision / r + total.language / r,
    }
}

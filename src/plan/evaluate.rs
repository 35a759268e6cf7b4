//! Predicted step times and lower bounds under each sync model.

use alloc::vec;
use alloc::vec::Vec;

use super::types::SyncModel;
use crate::cost::Phases;

/// The cost of every (rank, micro-step): the sum of its `S` sequences.
/// `costs` is indexed by slot `(rank * A + micro_step) * S + index`; a
/// missing tail (a baseline with fewer sequences) counts as zero.
fn micro_batches(ranks: usize, steps: usize, per_step: usize, costs: &[Phases]) -> Vec<Phases> {
    let mut out = vec![Phases::ZERO; ranks * steps];
    for (k, c) in costs.iter().enumerate() {
        if let Some(slot) = out.get_mut(k / per_step) {
            *slot += *c;
        }
    }
    out
}

/// The predicted step time of a layout under `sync`.
pub(crate) fn step_time(
    sync: SyncModel,
    ranks: usize,
    steps: usize,
    per_step: usize,
    costs: &[Phases],
) -> f64 {
    let mb = micro_batches(ranks, steps, per_step, costs);
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
pub(crate) fn imbalance(ranks: usize, steps: usize, per_step: usize, costs: &[Phases]) -> Phases {
    let per_rank = steps * per_step;
    let mut max = Phases::ZERO;
    let mut sum = Phases::ZERO;
    for r in 0..ranks {
        let t: Phases = costs[r * per_rank..(r + 1) * per_rank].iter().sum();
        max = max.max(t);
        sum += t;
    }
    let ratio = |m: f64, s: f64| {
        if s > 0.0 {
            m / (s / ranks as f64)
        } else {
            1.0
        }
    };
    Phases::new(
        ratio(max.vision, sum.vision),
        ratio(max.language, sum.language),
    )
}

/// The lower bound of any plan's step time under `sync`, from the total
/// cost and the largest single sample's cost.
pub(crate) fn lower_bound(sync: SyncModel, ranks: usize, total: Phases, largest: f64) -> f64 {
    let r = ranks as f64;
    match sync {
        SyncModel::Step | SyncModel::MicroStep => f64::max(total.total() / r, largest),
        SyncModel::Phase => total.vision / r + total.language / r,
    }
}

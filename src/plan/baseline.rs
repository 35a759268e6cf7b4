//! The naive baseline: the data loader's order, packed by next fit, micro-batches dealt to ranks in turn.
//!
//! Next fit in id order packs consecutive runs of positions; the runs are
//! found here rather than with [`pack::next_fit`](crate::pack::next_fit)
//! because the report needs only their ends (no packing, no bounds).

use alloc::vec;
use alloc::vec::Vec;

use super::evaluate::step_time;
use super::prepare::Prepared;
use super::sample::StepSample;
use super::shape::Shape;
use super::sync::SyncModel;
use crate::cost::{Incremental, Phases};

/// The naive layout: samples in ascending id packed by next fit (a new
/// sequence whenever the next sample does not fit), micro-batches of `S`
/// consecutive sequences dealt to ranks in turn (micro-batch `m` to rank
/// `m % R`, micro-step `m / R`), `A` what that takes.
pub(crate) struct Naive {
    pub(crate) shape: Shape,
    /// The end position of every sequence, in id order.
    ends: Vec<u32>,
}

impl Naive {
    /// The naive layout of `prep` for `R` ranks and `S` sequences a
    /// micro-step. O(n) time, O(n / sequence) extra space.
    pub(crate) fn new(prep: &Prepared, ranks: usize, per_step: usize) -> Self {
        let mut ends: Vec<u32> = Vec::new();
        let mut load = [0u64; 3];
        for p in 0..prep.len() {
            if p > 0 && !prep.fits(load, p) {
                ends.push(p as u32);
                load = [0; 3];
            }
            for (l, x) in load.iter_mut().zip(prep.size(p)) {
                *l += x;
            }
        }
        if prep.len() > 0 {
            ends.push(prep.len() as u32);
        }
        let batches = ends.len().div_ceil(per_step);
        let shape = Shape {
            ranks,
            steps: batches.div_ceil(ranks).max(1),
            per_step,
        };
        Naive { shape, ends }
    }

    /// The slot of sequence `k`.
    fn slot(&self, k: usize) -> usize {
        let per_step = self.shape.per_step;
        let (m, s) = (k / per_step, k % per_step);
        self.shape
            .micro_batch(m % self.shape.ranks, m / self.shape.ranks)
            + s
    }

    /// The sequences by slot, each listing its positions.
    pub(crate) fn slots(&self) -> Vec<Vec<u32>> {
        let mut slots = vec![Vec::new(); self.shape.slots()];
        let mut start = 0;
        for (k, &end) in self.ends.iter().enumerate() {
            slots[self.slot(k)] = (start..end).collect();
            start = end;
        }
        slots
    }

    /// The predicted step time under `sync`, each sequence evaluated as a
    /// group with `model`.
    pub(crate) fn step_time<M: Incremental>(
        &self,
        prep: &Prepared,
        samples: &[StepSample],
        model: &M,
        sync: SyncModel,
    ) -> f64 {
        let mut costs = vec![Phases::ZERO; self.shape.slots()];
        let mut start = 0;
        for (k, &end) in self.ends.iter().enumerate() {
            let mut state = model.empty();
            for e in &prep.items[start as usize..end as usize] {
                model.insert(&mut state, samples[e.input as usize].sample());
            }
            costs[self.slot(k)] = model.evaluate(&state);
            start = end;
        }
        step_time(sync, self.shape, &costs)
    }
}

//! The naive baseline: the data loader's order, packed by next fit, sequences dealt to ranks in turn.

use alloc::vec::Vec;

use super::evaluate::step_time;
use super::planner::Prepared;
use super::types::{StepSample, SyncModel};
use crate::cost::{Incremental, Phases};

/// The naive plan's step time and micro-steps: samples in ascending id
/// packed by next fit (a new sequence whenever the next sample does not
/// fit), micro-batches of `S` consecutive sequences dealt to ranks in turn
/// (micro-batch `m` to rank `m % R`, micro-step `m / R`).
///
/// O(n) time, O(n / sequence) extra space.
pub(crate) fn naive<M: Incremental>(
    prep: &Prepared,
    samples: &[StepSample],
    model: &M,
    sync: SyncModel,
    ranks: usize,
    per_step: usize,
) -> (f64, usize) {
    let mut costs: Vec<Phases> = Vec::new();
    let mut state = model.empty();
    let mut load = [0u64; 3];
    let mut open = false;
    for p in 0..prep.len() {
        let size = prep.size(p);
        let fits = (0..3).all(|d| load[d] + size[d] <= prep.caps[d]);
        if open && !fits {
            costs.push(model.evaluate(&state));
            state = model.empty();
            load = [0; 3];
        }
        open = true;
        for d in 0..3 {
            load[d] += size[d];
        }
        model.insert(&mut state, &samples[prep.input(p) as usize].sample);
    }
    if open {
        costs.push(model.evaluate(&state));
    }
    let batches = costs.len().div_ceil(per_step);
    let steps = batches.div_ceil(ranks).max(1);
    // Slot of micro-batch m: rank m % R, micro-step m / R.
    let mut slotted = alloc::vec![Phases::ZERO; ranks * steps * per_step];
    for (k, c) in costs.iter().enumerate() {
        let (m, s) = (k / per_step, k % per_step);
        let (r, j) = (m % ranks, m / ranks);
        slotted[(r * steps + j) * per_step + s] = *c;
    }
    (step_time(sync, ranks, steps, per_step, &slotted), steps)
}

/// The naive layout: `(A, slots)` with each slot's sorted positions, next
/// fit in id order, micro-batch `m` to rank `m % R`, micro-step `m / R`.
pub(crate) fn naive_layout(
    prep: &Prepared,
    ranks: usize,
    per_step: usize,
) -> (usize, Vec<Vec<u32>>) {
    let mut sequences: Vec<Vec<u32>> = Vec::new();
    let mut load = [0u64; 3];
    for p in 0..prep.len() {
        if sequences.is_empty() || !prep.fits(load, p) {
            sequences.push(Vec::new());
            load = [0; 3];
        }
        for (l, x) in load.iter_mut().zip(prep.size(p)) {
            *l += x;
        }
        if let Some(last) = sequences.last_mut() {
            last.push(p as u32);
        }
    }
    let batches = sequences.len().div_ceil(per_step);
    let steps = batches.div_ceil(ranks).max(1);
    let mut slots = alloc::vec![Vec::new(); ranks * steps * per_step];
    for (k, seq) in sequences.into_iter().enumerate() {
        let (m, s) = (k / per_step, k % per_step);
        let (r, j) = (m % ranks, m / ranks);
        slots[(r * steps + j) * per_step + s] = seq;
    }
    (steps, slots)
}

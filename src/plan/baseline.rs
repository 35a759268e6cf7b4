//! The baselines: the naive one (the data loader's order, packed by next fit, micro-batches dealt to ranks in turn) and the users' one ([`users_step_time`]: dealt as `DistributedSampler` does, fixed micro-batches packed by first fit).
//!
//! Next fit in id order packs consecutive runs of positions; the runs are
//! found here rather than with [`pack::next_fit`](crate::pack::next_fit)
//! because the report needs only their ends (no packing, no bounds).

use alloc::collections::BTreeMap;
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

/// The users' baseline: what a data-parallel loop without the planner runs.
///
/// 1. *Units.* The samples in ascending id (the data loader's order, as
///    everywhere in the planner: the report does not depend on the order
///    of the input slice). A group
///    ([`StepSample::with_group`](crate::plan::StepSample::with_group))
///    is one unit at the place of its smallest id, its samples in ascending
///    id; an ungrouped sample is a unit alone.
/// 2. *Deal.* As `DistributedSampler` without shuffling or padding: unit
///    `k` to rank `k % R`.
/// 3. *Micro-batches.* Every micro-batch holds `b = ceil(U / (R * A))`
///    units (`U` units, `A` the plan's micro-steps; the fixed
///    per-device batch size of a training script): each rank's units are
///    cut in order into runs of `b`, run `j` in micro-step `j` (a rank has
///    at most `ceil(U / R) <= A * b` units, so `A` micro-steps hold them;
///    the last runs may be shorter or empty, as with `R > n`). A group is
///    thus in one micro-batch, which satisfies both
///    [`GroupScope`](crate::plan::GroupScope)s.
/// 4. *Packing.* Each micro-batch's samples, in order, packed by first fit
///    into sequences of the planner's caps (`L`, units, images): each
///    sample goes into the first sequence it fits, or a new one.
///
/// A micro-batch's cost is the sum of its sequences' costs (each sequence
/// evaluated as a group with the model), and the step time is that of the
/// sync model over the `R x A` micro-batches. A micro-batch that packs
/// into more than the plan's `S` sequences is evaluated as it is, all its
/// sequences run in its micro-step (a fixed batch size does not know the
/// sequence budget): its time is then not that of an `S`-sequence plan,
/// and the users' baseline may be below the plan's lower bound.
///
/// # Complexity
///
/// O(n log G) for the units (a map of the G groups; only their members
/// are listed apart), O(n + R A) to place them by micro-batch (a counting
/// sort into one array, no list a unit), O(n k) for the packing with at
/// most `k` sequences in a micro-batch (first fit scans the open
/// sequences), O(n + R A) extra space.
pub(crate) fn users_step_time<M: Incremental>(
    prep: &Prepared,
    samples: &[StepSample],
    model: &M,
    sync: SyncModel,
    shape: Shape,
) -> f64 {
    // 1. Units: positions in ascending id, a group at its first member
    // (only the groups' members are listed apart).
    let mut groups: BTreeMap<u64, Vec<u32>> = BTreeMap::new();
    let mut loose = 0usize;
    for (p, e) in prep.items.iter().enumerate() {
        match samples[e.input as usize].group() {
            Some(g) => groups.entry(g).or_default().push(p as u32),
            None => loose += 1,
        }
    }
    let unit_count = loose + groups.len();
    // 2. and 3. Unit k is the (k / R)-th of rank k % R, in micro-step
    // (k / R) / b; the micro-batches' positions in one array (a counting
    // sort by micro-batch, units in order within each).
    let (ranks, steps) = (shape.ranks.max(1), shape.steps.max(1));
    let per_batch = unit_count.div_ceil(ranks * steps).max(1);
    // `j < A` (see above); `min` keeps an index in range regardless.
    let batch_of = |k: usize| (k % ranks) * steps + ((k / ranks) / per_batch).min(steps - 1);
    let mut start = vec![0usize; ranks * steps + 1];
    each_unit(prep, samples, &groups, |k, unit| {
        start[batch_of(k) + 1] += unit.len();
    });
    for b in 0..ranks * steps {
        start[b + 1] += start[b];
    }
    let mut next = start.clone();
    let mut batched = vec![0u32; prep.len()];
    each_unit(prep, samples, &groups, |k, unit| {
        let b = batch_of(k);
        batched[next[b]..next[b] + unit.len()].copy_from_slice(unit);
        next[b] += unit.len();
    });
    drop((groups, next));
    // 4. First fit within each micro-batch; its cost the sum of its
    // sequences'.
    let mut costs = vec![Phases::ZERO; ranks * steps];
    let mut loads: Vec<[u64; 3]> = Vec::new();
    let mut states = Vec::new();
    for (b, cost) in costs.iter_mut().enumerate() {
        loads.clear();
        states.clear();
        for &p in &batched[start[b]..start[b + 1]] {
            let p = p as usize;
            let k = match loads.iter().position(|&l| prep.fits(l, p)) {
                Some(k) => k,
                None => {
                    loads.push([0; 3]);
                    states.push(model.empty());
                    loads.len() - 1
                }
            };
            for (l, x) in loads[k].iter_mut().zip(prep.size(p)) {
                *l += x;
            }
            let e = &prep.items[p];
            model.insert(&mut states[k], samples[e.input as usize].sample());
        }
        *cost = states.iter().map(|s| model.evaluate(s)).sum();
    }
    let grid = Shape {
        ranks,
        steps,
        per_step: 1,
    };
    step_time(sync, grid, &costs)
}

/// Calls `f(k, members)` for every unit `k` of the users' baseline in
/// order: the positions in ascending id, an ungrouped one a unit alone, a
/// group (its members in `groups`, ascending) one unit at its first
/// member. O(n log G) time for G groups.
fn each_unit(
    prep: &Prepared,
    samples: &[StepSample],
    groups: &BTreeMap<u64, Vec<u32>>,
    mut f: impl FnMut(usize, &[u32]),
) {
    let mut k = 0;
    for (p, e) in prep.items.iter().enumerate() {
        let p = p as u32;
        let unit: &[u32] = match samples[e.input as usize].group() {
            None => core::slice::from_ref(&p),
            Some(g) => match groups.get(&g) {
                Some(members) if members.first() == Some(&p) => members,
                _ => continue,
            },
        };
        f(k, unit);
        k += 1;
    }
}

//! The baselines: the naive one ([`Naive`]: the data loader's order, packed by next fit, micro-batches dealt to ranks in turn) and the users' one ([`users_step_time`]: dealt as `DistributedSampler` does, fixed micro-batches packed by first fit); both keep every group together ([`each_unit`]).

use alloc::collections::BTreeMap;
use alloc::vec;
use alloc::vec::Vec;

use super::evaluate::step_time;
use super::prepare::Prepared;
use super::sample::StepSample;
use super::shape::Shape;
use super::sync::SyncModel;
use crate::cost::{Incremental, Phases};

/// The units of the baselines, one at a time: positions in ascending id
/// (the data loader's order), a group
/// ([`StepSample::with_group`](crate::plan::StepSample::with_group)) one
/// unit at the place of its smallest id holding its samples in ascending
/// id (its members in `groups`, from [`group_members`]), an ungrouped
/// sample a unit alone. Calls `f(k, members)` for every unit `k` in order.
/// O(n log G) time for `G` groups, no allocation.
fn each_unit(
    prep: &Prepared,
    samples: &[StepSample],
    groups: &BTreeMap<u64, Vec<u32>>,
    mut f: impl FnMut(usize, &[u32]),
) {
    if groups.is_empty() {
        // No sample has a group: every position is a unit alone (the
        // samples need not be read).
        for p in 0..prep.len() as u32 {
            f(p as usize, core::slice::from_ref(&p));
        }
        return;
    }
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

/// The members of every group in ascending id (only the groups' members
/// are listed apart), and the number of units ([`each_unit`]). O(n log G)
/// time, O(members) extra space. Made once for both baselines by
/// [`finish`](super::finish::finish).
pub(crate) type Units = (BTreeMap<u64, Vec<u32>>, usize);

/// The [`Units`] of `prep`, whose samples are `samples`.
pub(crate) fn group_members(prep: &Prepared, samples: &[StepSample]) -> Units {
    let mut units = UnitsOf::default();
    for (p, e) in prep.items.iter().enumerate() {
        units.add(p as u32, samples[e.input as usize].group());
    }
    units.finish()
}

/// [`Units`] made a sample at a time, the positions in ascending order
/// (for a pass over the samples that reads them for more than this).
#[derive(Default)]
pub(crate) struct UnitsOf {
    groups: BTreeMap<u64, Vec<u32>>,
    loose: usize,
}

impl UnitsOf {
    /// Position `p`, of group `group` (or none). O(log G).
    #[inline]
    pub(crate) fn add(&mut self, p: u32, group: Option<u64>) {
        match group {
            Some(g) => self.groups.entry(g).or_default().push(p),
            None => self.loose += 1,
        }
    }

    /// The units of the positions added.
    pub(crate) fn finish(self) -> Units {
        let units = self.loose + self.groups.len();
        (self.groups, units)
    }
}

/// `load += size`.
fn add(load: &mut [u64; 3], size: [u64; 3]) {
    for (l, x) in load.iter_mut().zip(size) {
        *l += x;
    }
}

/// The naive layout: the units ([`each_unit`]: samples in ascending id, a
/// group whole at the place of its smallest id) packed by next fit (a new
/// sequence whenever the next unit does not fit the current one),
/// micro-batches of `S` consecutive sequences dealt to ranks in turn
/// (micro-batch `m` to rank `m % R`, micro-step `m / R`), `A` what that
/// takes. A group that fits a sequence is in one sequence, hence in one
/// micro-batch and on one rank, as
/// [`GroupScope::MicroBatch`](crate::plan::GroupScope::MicroBatch) asks.
/// A group larger than a sequence (possible under
/// [`GroupScope::Rank`](crate::plan::GroupScope::Rank) only) takes
/// sequences of its own (its samples by next fit) from the start of the
/// next micro-batch `m`, `S` a micro-step on rank `m % R` from micro-step
/// `m / R` on, so that it stays on one rank; the deal goes on after its
/// last micro-batch (the other ranks' micro-batches of the micro-steps it
/// spans beyond the first stay empty). Without groups, this is next fit of
/// the samples in id order.
pub(crate) struct Naive {
    pub(crate) shape: Shape,
    /// The positions of every sequence, in order, one after the other
    /// (no list a sequence: one allocation, read in sequence).
    members: Vec<u32>,
    /// Sequence `k` holds `members[starts[k]..starts[k + 1]]`.
    starts: Vec<usize>,
    /// The slot of every sequence.
    slot_of: Vec<usize>,
}

impl Naive {
    /// The naive layout of `prep` (whose samples are `samples`) for `R`
    /// ranks and `S` sequences a micro-step. O(n log G) time for `G`
    /// groups, O(n) extra space.
    pub(crate) fn new(
        prep: &Prepared,
        samples: &[StepSample],
        ranks: usize,
        per_step: usize,
    ) -> Self {
        Self::of_units(
            prep,
            samples,
            &group_members(prep, samples),
            ranks,
            per_step,
        )
    }

    /// [`Naive::new`] with the batch's [`Units`] made already.
    pub(crate) fn of_units(
        prep: &Prepared,
        samples: &[StepSample],
        units: &Units,
        ranks: usize,
        per_step: usize,
    ) -> Self {
        let (ranks, per_step) = (ranks.max(1), per_step.max(1));
        // Sequences, each by its start in `members` and the unit of the
        // group larger than a sequence it belongs to (`None` for the
        // others).
        let mut members: Vec<u32> = Vec::with_capacity(prep.len());
        let mut sequences: Vec<(usize, Option<usize>)> = Vec::new();
        let mut load = [0u64; 3];
        let mut open = false;
        let groups = &units.0;
        each_unit(prep, samples, groups, |u, unit| {
            let mut size = [0u64; 3];
            for &p in unit {
                add(&mut size, prep.size(p as usize));
            }
            if prep.fits_size([0; 3], size) {
                if !open || !prep.fits_size(load, size) {
                    sequences.push((members.len(), None));
                    load = [0; 3];
                    open = true;
                }
                add(&mut load, size);
                members.extend_from_slice(unit);
                return;
            }
            let mut part = [0u64; 3];
            for (i, &p) in unit.iter().enumerate() {
                let size = prep.size(p as usize);
                if i == 0 || !prep.fits_size(part, size) {
                    sequences.push((members.len(), Some(u)));
                    part = [0; 3];
                }
                add(&mut part, size);
                members.push(p);
            }
            open = false;
        });
        // The deal: micro-batch `m` holds `held` sequences so far.
        let (mut m, mut held) = (0usize, 0usize);
        let mut places: Vec<(usize, usize, usize)> = Vec::with_capacity(sequences.len());
        let mut k = 0;
        while k < sequences.len() {
            let Some(group) = sequences[k].1 else {
                if held == per_step {
                    m += 1;
                    held = 0;
                }
                places.push((m % ranks, m / ranks, held));
                held += 1;
                k += 1;
                continue;
            };
            if held > 0 {
                m += 1;
                held = 0;
            }
            let (rank, first) = (m % ranks, m / ranks);
            let mut i = 0;
            while k < sequences.len() && sequences[k].1 == Some(group) {
                places.push((rank, first + i / per_step, i % per_step));
                i += 1;
                k += 1;
            }
            // The next micro-batch after the group's last one.
            m = (first + (i - 1) / per_step) * ranks + rank + 1;
        }
        let steps = places.iter().map(|&(_, j, _)| j + 1).max().unwrap_or(1);
        let shape = Shape {
            ranks,
            steps,
            per_step,
        };
        let slot_of = places
            .iter()
            .map(|&(r, j, s)| shape.micro_batch(r, j) + s)
            .collect();
        let mut starts: Vec<usize> = Vec::with_capacity(sequences.len() + 1);
        starts.extend(sequences.iter().map(|&(start, _)| start));
        starts.push(members.len());
        Naive {
            shape,
            members,
            starts,
            slot_of,
        }
    }

    /// The positions of every sequence, in order.
    fn sequences(&self) -> impl Iterator<Item = &[u32]> + '_ {
        self.starts.windows(2).map(|w| &self.members[w[0]..w[1]])
    }

    /// The sequences by slot, each listing its positions in ascending
    /// order (what a plan's layout holds: a group's unit lists its members
    /// at the place of its smallest id, so a sequence holding a group and
    /// later samples is in unit order, not in id order). O(n log n).
    pub(crate) fn slots(&self) -> Vec<Vec<u32>> {
        let mut slots = vec![Vec::new(); self.shape.slots()];
        for (seq, &slot) in self.sequences().zip(&self.slot_of) {
            slots[slot].extend_from_slice(seq);
            slots[slot].sort_unstable();
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
        for (seq, &slot) in self.sequences().zip(&self.slot_of) {
            let mut state = model.empty();
            for &p in seq {
                let e = &prep.items[p as usize];
                model.insert(&mut state, samples[e.input as usize].sample());
            }
            costs[slot] = model.evaluate(&state);
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
/// are listed apart), O(n + R A) to place them by micro-batch (without
/// groups read in place, in order, a micro-step at a time, else a
/// counting sort into one array, no list a unit), O(n k) for the packing
/// with at
/// most `k` sequences in a micro-batch (first fit scans the open
/// sequences), O(n + R A) extra space.
pub(crate) fn users_step_time<M: Incremental>(
    prep: &Prepared,
    samples: &[StepSample],
    units: &Units,
    model: &M,
    sync: SyncModel,
    shape: Shape,
) -> f64 {
    // 1. Units: positions in ascending id, a group at its first member
    // (only the groups' members are listed apart; made by the caller).
    let (groups, unit_count) = (&units.0, units.1);
    // 2. and 3. Unit k is the (k / R)-th of rank k % R, in micro-step
    // (k / R) / b; without groups read in place, else the micro-batches'
    // positions in one array (a counting sort by micro-batch, units in
    // order within each). 4. First fit within each micro-batch; its cost
    // the sum of its sequences'.
    let (ranks, steps) = (shape.ranks.max(1), shape.steps.max(1));
    let per_batch = unit_count.div_ceil(ranks * steps).max(1);
    // `j < A` (see above); `min` keeps an index in range regardless.
    let batch_of = |k: usize| (k % ranks) * steps + ((k / ranks) / per_batch).min(steps - 1);
    let mut costs = vec![Phases::ZERO; ranks * steps];
    if groups.is_empty() {
        // Every unit a sample, unit k at position k: micro-step j holds the
        // positions k in [R j b, R (j + 1) b) (the last one every k from
        // R j b on), micro-batch (k % R, j) each. Read in order (no cache
        // miss a sample), each rank's micro-batch of the micro-step open.
        let n = prep.len();
        let mut open: Vec<Open<M>> = (0..ranks).map(|_| (Vec::new(), Vec::new())).collect();
        let row = |j: usize| ranks.saturating_mul(j.saturating_mul(per_batch)).min(n);
        for j in 0..steps {
            let to = if j + 1 == steps { n } else { row(j + 1) };
            for (loads, states) in open.iter_mut() {
                loads.clear();
                states.clear();
            }
            for k in row(j)..to {
                let (loads, states) = &mut open[k % ranks];
                first_fit(prep, samples, model, loads, states, k);
            }
            for (r, (_, states)) in open.iter().enumerate() {
                costs[r * steps + j] = states.iter().map(|s| model.evaluate(s)).sum();
            }
        }
    } else {
        let mut start = vec![0usize; ranks * steps + 1];
        each_unit(prep, samples, groups, |k, unit| {
            start[batch_of(k) + 1] += unit.len();
        });
        for b in 0..ranks * steps {
            start[b + 1] += start[b];
        }
        let mut next = start.clone();
        let mut batched = vec![0u32; prep.len()];
        each_unit(prep, samples, groups, |k, unit| {
            let b = batch_of(k);
            batched[next[b]..next[b] + unit.len()].copy_from_slice(unit);
            next[b] += unit.len();
        });
        drop(next);
        let (mut loads, mut states) = (Vec::new(), Vec::new());
        for (b, cost) in costs.iter_mut().enumerate() {
            loads.clear();
            states.clear();
            for &p in &batched[start[b]..start[b + 1]] {
                first_fit(prep, samples, model, &mut loads, &mut states, p as usize);
            }
            *cost = states.iter().map(|s| model.evaluate(s)).sum();
        }
    }
    let grid = Shape {
        ranks,
        steps,
        per_step: 1,
    };
    step_time(sync, grid, &costs)
}

/// A micro-batch's open sequences: their sizes and model states.
type Open<M> = (Vec<[u64; 3]>, Vec<<M as Incremental>::State>);

/// First fit of sample `p` into the sequences `loads` (their sizes) and
/// `states` (their model states) of a micro-batch: the first it fits, else
/// a new one (the users' baseline, step 4). O(k) for k sequences, besides
/// the model.
fn first_fit<M: Incremental>(
    prep: &Prepared,
    samples: &[StepSample],
    model: &M,
    loads: &mut Vec<[u64; 3]>,
    states: &mut Vec<M::State>,
    p: usize,
) {
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

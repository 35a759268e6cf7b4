//! Dealing stage: the packed sequences to (rank, micro-step) slots for each sync model.
//!
//! - [`SyncModel::Step`]: LPT over the ranks with exactly `A * S` sequences
//!   each ([`Partitioner`] with equal counts; among sequences of equal cost
//!   the one with more samples first); a rank's micro-steps then follow the
//!   data loader's order (the smallest id of each sequence).
//! - [`SyncModel::MicroStep`] and [`SyncModel::Phase`]: the sequences are
//!   sorted by a [`RowKey`] (the total; for per-phase barriers the caller
//!   tries each key) and cut into rows of `R * S`; each row is one
//!   micro-step on every rank, so sequences that wait for each other cost
//!   alike. Within a row the heaviest sequences go to the ranks with the
//!   least total so far (in snake order when `S > 1`); rows follow the
//!   loader's order of their smallest id. This is the planner's own: a
//!   micro-step's barrier couples one sequence of every rank, which no
//!   partition of the sequences alone expresses.
//!
//! O(K log K) for K sequences (each sort key computed once).

use alloc::vec;
use alloc::vec::Vec;
use core::cmp::Reverse;

use ordered_float::NotNan;

use super::prepare::Prepared;
use super::shape::Shape;
use super::sync::SyncModel;
use crate::cost::Phases;
use crate::partition::{Algorithm, Partitioner};

/// How sequences are ordered into micro-steps for [`SyncModel::Phase`]
/// (the other sync models always use the total); the planner tries both.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RowKey {
    /// The larger excess over the mean in either phase: the outliers of
    /// both phases share the first micro-steps.
    Excess,
    /// The language cost.
    Language,
}

/// One sequence's positions, up to 8 held inline: no allocation of its own
/// for a sequence of a few samples (peak memory a sample: `BENCHMARKS.md`,
/// "Memory").
pub(crate) type Members = smallvec::SmallVec<[u32; 8]>;

/// The packed sequences with what the dealing and the refinement read:
/// each sequence's sorted positions, the sum of its samples' own costs
/// (exact for additive models, and only a guide for the others: the report
/// evaluates the groups) and its sizes.
#[derive(Clone, Debug, Default)]
pub(crate) struct Sequences {
    pub(crate) members: Vec<Members>,
    pub(crate) costs: Vec<Phases>,
    pub(crate) loads: Vec<[u64; 3]>,
}

impl Sequences {
    /// The sequences `members` of `prep`'s positions, each sorted here.
    pub(crate) fn new(prep: &Prepared, members: Vec<Vec<u32>>) -> Self {
        let mut members: Vec<Members> = members.into_iter().map(Members::from_vec).collect();
        let mut costs = vec![Phases::ZERO; members.len()];
        let mut loads = vec![[0u64; 3]; members.len()];
        for (b, list) in members.iter_mut().enumerate() {
            list.sort_unstable();
            for &p in list.iter() {
                let e = &prep.items[p as usize];
                costs[b] += e.cost;
                for (l, &x) in loads[b].iter_mut().zip(&e.sizes) {
                    *l += u64::from(x);
                }
            }
        }
        Sequences {
            members,
            costs,
            loads,
        }
    }

    /// The sequences with every member list in ascending order again
    /// (the stages that trade samples leave them in any order).
    pub(crate) fn sorted(mut self) -> Self {
        for b in self.members.iter_mut() {
            b.sort_unstable();
        }
        self
    }

    /// The sequences with only their members kept (the costs and loads
    /// freed): for a layout that is only held (its time known) while
    /// another is made, then turned into slots.
    pub(crate) fn members_only(self) -> Self {
        Sequences {
            members: self.members,
            costs: Vec::new(),
            loads: Vec::new(),
        }
    }

    /// The slots' members: `order[k]` is the sequence in slot `k`.
    pub(crate) fn into_slots(mut self, order: Vec<u32>) -> Vec<Vec<u32>> {
        order
            .into_iter()
            .map(|b| core::mem::take(&mut self.members[b as usize]).into_vec())
            .collect()
    }

    /// The loader-order key of sequence `b`: its smallest position, empty
    /// last.
    pub(crate) fn first(&self, b: u32) -> u32 {
        self.members[b as usize]
            .first()
            .copied()
            .unwrap_or(u32::MAX)
    }
}

/// `slot -> sequence` for the `shape.slots()` slots and as many sequences.
pub(crate) fn deal(sync: SyncModel, row_key: RowKey, shape: Shape, seqs: &Sequences) -> Vec<u32> {
    debug_assert_eq!(seqs.costs.len(), shape.slots());
    match sync {
        SyncModel::Step => by_rank(shape, seqs),
        SyncModel::MicroStep | SyncModel::Phase => by_row(sync, row_key, shape, seqs),
    }
}

/// A sequence as an item of the LPT over ranks: (more samples first, then
/// the index) as its id, its total cost as its size.
type RankItem = ((Reverse<usize>, u32), NotNan<f64>);

/// [`SyncModel::Step`]: LPT with equal counts over the ranks, each rank's
/// sequences in loader order.
fn by_rank(shape: Shape, seqs: &Sequences) -> Vec<u32> {
    // Decreasing cost, then more samples first, then by sequence index.
    let items: Option<Vec<RankItem>> = seqs
        .costs
        .iter()
        .zip(&seqs.members)
        .enumerate()
        .map(|(b, (c, m))| Some(((Reverse(m.len()), b as u32), NotNan::new(c.total()).ok()?)))
        .collect();
    let partition = items.and_then(|items| {
        Partitioner::new(shape.ranks)
            .algorithm(Algorithm::Lpt)
            .refinement(false)
            .equal_count(true)
            .partition(&items)
            .ok()
    });
    let mut slots: Vec<u32> = Vec::with_capacity(shape.slots());
    match partition {
        Some(partition) => {
            for part in partition.parts() {
                let start = slots.len();
                slots.extend(part.iter().map(|&b| b as u32));
                slots[start..].sort_unstable_by_key(|&b| (seqs.first(b), b));
            }
        }
        // Unreachable (costs are finite sums of finite costs, counts
        // divide evenly): the sequences in turn.
        None => slots.extend(0..shape.slots() as u32),
    }
    slots
}

/// The per-micro-step models: rows of sequences of similar `row_key`, each
/// row dealt to the ranks by load in snake order.
fn by_row(sync: SyncModel, row_key: RowKey, shape: Shape, seqs: &Sequences) -> Vec<u32> {
    let (ranks, costs) = (shape.ranks, &seqs.costs);
    let k = costs.len();
    let mean = costs.iter().sum::<Phases>() * (1.0 / k.max(1) as f64);
    let key = |b: u32| -> f64 {
        let c = costs[b as usize];
        match (sync, row_key) {
            (SyncModel::Phase, RowKey::Language) => c.language,
            (SyncModel::Phase, RowKey::Excess) => {
                f64::max(c.vision - mean.vision, c.language - mean.language)
            }
            _ => c.total(),
        }
    };
    // Decreasing key, then more samples first, then by sequence index (a
    // total order: the keys are computed once, not at every comparison).
    let mut keyed: Vec<(f64, usize, u32)> = (0..k as u32)
        .map(|b| (key(b), seqs.members[b as usize].len(), b))
        .collect();
    keyed.sort_unstable_by(|a, b| b.0.total_cmp(&a.0).then(b.1.cmp(&a.1)).then(a.2.cmp(&b.2)));
    let order: Vec<u32> = keyed.into_iter().map(|(_, _, b)| b).collect();
    let mut rows: Vec<&[u32]> = order.chunks(shape.per_row()).collect();
    rows.sort_by_cached_key(|row| (row.iter().map(|&b| seqs.first(b)).min(), row[0]));
    let total: Vec<f64> = costs.iter().map(|c| c.total()).collect();
    let mut slots = vec![0u32; k];
    let mut load = vec![0.0f64; ranks];
    let mut by_load: Vec<usize> = (0..ranks).collect();
    let mut row_sorted: Vec<u32> = Vec::with_capacity(shape.per_row());
    for (j, row) in rows.into_iter().enumerate() {
        row_sorted.clear();
        row_sorted.extend_from_slice(row);
        row_sorted.sort_unstable_by(|&a, &b| {
            total[b as usize]
                .total_cmp(&total[a as usize])
                .then(a.cmp(&b))
        });
        by_load.sort_unstable_by(|&a, &b| load[a].total_cmp(&load[b]).then(a.cmp(&b)));
        // Deal in snake order over the ranks by load: S sequences each.
        for (i, &b) in row_sorted.iter().enumerate() {
            let (round, pos) = (i / ranks, i % ranks);
            let r = by_load[if round % 2 == 0 { pos } else { ranks - 1 - pos }];
            load[r] += total[b as usize];
            slots[shape.micro_batch(r, j) + round] = b;
        }
    }
    slots
}

/// Moves single samples from ranks with several to ranks with none, so that
/// no rank idles at the collective (a sample alone always fits a sequence).
/// `slots` lists each slot's positions; only those `movable` accepts move
/// (the last such of the donor sequence).
pub(crate) fn give_every_rank_work(
    slots: &mut [Vec<u32>],
    shape: Shape,
    movable: impl Fn(u32) -> bool,
) {
    let per_rank = shape.per_rank();
    let count = |slots: &[Vec<u32>], r: usize| -> usize {
        slots[r * per_rank..(r + 1) * per_rank]
            .iter()
            .map(Vec::len)
            .sum()
    };
    for r in 0..shape.ranks {
        if count(slots, r) > 0 {
            continue;
        }
        // The fullest sequence of any rank with at least two samples.
        let donor = (0..slots.len())
            .filter(|&k| count(slots, k / per_rank) >= 2 && slots[k].iter().any(|&p| movable(p)))
            .max_by_key(|&k| (slots[k].len(), Reverse(k)));
        if let Some(k) = donor {
            if let Some(i) = slots[k].iter().rposition(|&p| movable(p)) {
                let p = slots[k].remove(i);
                // Into the empty first slot of the rank: still in order.
                slots[r * per_rank].push(p);
            }
        }
    }
}

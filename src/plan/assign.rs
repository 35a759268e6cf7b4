//! Dealing packed sequences to (rank, micro-step) slots for each sync model.
//!
//! - [`SyncModel::Step`]: LPT over the ranks with exactly `A * S` sequences
//!   each (heaviest sequence to the lightest rank that still has a free
//!   slot); a rank's micro-steps then follow the data loader's order (the
//!   smallest id of each sequence).
//! - [`SyncModel::MicroStep`] and [`SyncModel::Phase`]: the sequences are
//!   sorted by a [`RowKey`] (the total; for per-phase barriers the caller
//!   tries each key) and cut into rows of `R * S`; each row is one
//!   micro-step on every rank, so sequences that wait for each other cost
//!   alike. Within a row the heaviest sequences go to the ranks with the
//!   least total so far (in snake order when `S > 1`); rows follow the
//!   loader's order of their smallest id.
//!
//! O(K log K) for K sequences.

use alloc::collections::BinaryHeap;
use alloc::vec;
use alloc::vec::Vec;
use core::cmp::Reverse;

use super::types::SyncModel;
use crate::cost::Phases;

/// How sequences are ordered into micro-steps for [`SyncModel::Phase`]
/// (the other sync models always use the total).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RowKey {
    /// The larger excess over the mean in either phase: the outliers of
    /// both phases share the first micro-steps.
    Excess,
    /// The language cost.
    Language,
    /// The vision cost.
    Vision,
    /// The total cost.
    Total,
}

impl RowKey {
    /// The keys tried for per-phase barriers, in order of preference.
    pub(crate) const ALL: [RowKey; 4] = [
        RowKey::Excess,
        RowKey::Language,
        RowKey::Vision,
        RowKey::Total,
    ];
}

/// The loader-order key of a sequence: its smallest position, empty last.
fn first(bins: &[Vec<u32>], b: u32) -> u32 {
    bins[b as usize].first().copied().unwrap_or(u32::MAX)
}

/// `slot -> sequence`, for `ranks * steps * per_step` slots and as many
/// sequences (`costs` and `bins` indexed by sequence, bins sorted).
pub(crate) fn assign(
    sync: SyncModel,
    row_key: RowKey,
    ranks: usize,
    steps: usize,
    per_step: usize,
    costs: &[Phases],
    bins: &[Vec<u32>],
) -> Vec<u32> {
    let k = costs.len();
    debug_assert_eq!(k, ranks * steps * per_step);
    let per_rank = steps * per_step;
    let mut order: Vec<u32> = (0..k as u32).collect();
    let mean = costs.iter().sum::<Phases>() * (1.0 / k.max(1) as f64);
    // Sequences that would wait for each other should cost alike: by total,
    // or for per-phase barriers by the larger excess over the mean in
    // either phase (outliers of both phases share the first micro-steps).
    let key = |b: u32| -> f64 {
        let c = costs[b as usize];
        match (sync, row_key) {
            (SyncModel::Step | SyncModel::MicroStep, _) | (SyncModel::Phase, RowKey::Total) => {
                c.total()
            }
            (SyncModel::Phase, RowKey::Vision) => c.vision,
            (SyncModel::Phase, RowKey::Language) => c.language,
            (SyncModel::Phase, RowKey::Excess) => {
                f64::max(c.vision - mean.vision, c.language - mean.language)
            }
        }
    };
    // Decreasing key, then more samples first, then by sequence index.
    order.sort_unstable_by(|&a, &b| {
        key(b)
            .total_cmp(&key(a))
            .then(bins[b as usize].len().cmp(&bins[a as usize].len()))
            .then(a.cmp(&b))
    });

    let mut slots = vec![0u32; k];
    match sync {
        SyncModel::Step => {
            let mut members: Vec<Vec<u32>> = vec![Vec::with_capacity(per_rank); ranks];
            let mut heap: BinaryHeap<(Reverse<u64>, Reverse<usize>)> =
                (0..ranks).map(|r| (Reverse(0), Reverse(r))).collect();
            let mut load = vec![0.0f64; ranks];
            for &b in &order {
                let Some((_, Reverse(r))) = heap.pop() else {
                    break;
                };
                members[r].push(b);
                load[r] += costs[b as usize].total();
                if members[r].len() < per_rank {
                    heap.push((Reverse(load[r].to_bits()), Reverse(r)));
                }
            }
            for (r, mut m) in members.into_iter().enumerate() {
                m.sort_unstable_by_key(|&b| (first(bins, b), b));
                slots[r * per_rank..(r + 1) * per_rank].copy_from_slice(&m);
            }
        }
        SyncModel::MicroStep | SyncModel::Phase => {
            let row_len = ranks * per_step;
            let mut rows: Vec<&[u32]> = order.chunks(row_len).collect();
            rows.sort_by_key(|row| (row.iter().map(|&b| first(bins, b)).min(), row[0]));
            let mut load = vec![0.0f64; ranks];
            let mut by_load: Vec<usize> = (0..ranks).collect();
            let mut row_sorted: Vec<u32> = Vec::with_capacity(row_len);
            for (j, row) in rows.into_iter().enumerate() {
                row_sorted.clear();
                row_sorted.extend_from_slice(row);
                row_sorted.sort_unstable_by(|&a, &b| {
                    costs[b as usize]
                        .total()
                        .total_cmp(&costs[a as usize].total())
                        .then(a.cmp(&b))
                });
                by_load.sort_unstable_by(|&a, &b| load[a].total_cmp(&load[b]).then(a.cmp(&b)));
                // Deal in snake order over the ranks by load: S sequences each.
                for (i, &b) in row_sorted.iter().enumerate() {
                    let (round, pos) = (i / ranks, i % ranks);
                    let r = by_load[if round % 2 == 0 { pos } else { ranks - 1 - pos }];
                    load[r] += costs[b as usize].total();
                    slots[(r * steps + j) * per_step + round] = b;
                }
            }
        }
    }
    slots
}

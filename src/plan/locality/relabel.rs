//! Step 1, the relabelling: whole blocks of the plan given to other ranks, so that more bytes stay home at exactly the same step time.
//!
//! A *block* is a micro-batch of one micro-step, or a whole rank under
//! [`SyncModel::Step`] (or when groups span ranks). The blocks of each
//! column (a micro-step, or all ranks) are matched to ranks greedily on
//! the bytes (then samples) that stay home: a micro-step's micro-batches
//! may run on any ranks and whole ranks may swap under every sync model,
//! so the step time is unchanged. [`relabel_floor`] bounds what any such
//! matching of whole ranks can keep home, so that a fill that beats it
//! makes the relabelling unnecessary.
//!
//! O(n log n + K) time, O(n + K) extra space.

use alloc::vec;
use alloc::vec::Vec;

use super::super::shape::Shape;
use super::super::sync::SyncModel;
use super::homes::{Homes, NONE};

/// The blocks (micro-batches of one micro-step; whole ranks for
/// [`SyncModel::Step`] or with `whole_ranks`) of each column matched to
/// ranks, greedily on the bytes (then samples) that stay home: edges by
/// decreasing bytes, then samples, then block rank and origin rank. Falls
/// back to `slots` when the matching would leave a rank without samples.
pub(super) fn relabel(
    homes: &Homes,
    sync: SyncModel,
    whole_ranks: bool,
    shape: Shape,
    mut slots: Vec<Vec<u32>>,
) -> Vec<Vec<u32>> {
    let ranks = shape.ranks;
    let whole_ranks = whole_ranks || sync == SyncModel::Step;
    // `cols` columns of `ranks` blocks; block (c, r) is the `width`
    // consecutive slots from `first_slot(c, r)`.
    let (cols, width) = if whole_ranks {
        (1, shape.per_rank())
    } else {
        (shape.steps, shape.per_step)
    };
    let first_slot = |c: usize, r: usize| -> usize {
        if whole_ranks {
            r * shape.per_rank()
        } else {
            shape.micro_batch(r, c)
        }
    };
    // Edges (column, bytes, samples, block rank, origin rank), summed per
    // (block, origin) exactly in `u128`.
    let mut edges: Vec<(usize, u128, usize, usize, usize)> = Vec::new();
    let mut buf: Vec<(u32, u64)> = Vec::new();
    for c in 0..cols {
        for r in 0..ranks {
            let k = first_slot(c, r);
            buf.clear();
            for &p in slots[k..k + width].iter().flatten() {
                let (o, b) = homes.of(p as usize);
                if o != NONE {
                    buf.push((o, b));
                }
            }
            buf.sort_unstable_by_key(|&(o, _)| o);
            for run in buf.chunk_by(|a, b| a.0 == b.0) {
                let bytes = run.iter().map(|x| u128::from(x.1)).sum();
                edges.push((c, bytes, run.len(), r, run[0].0 as usize));
            }
        }
    }
    // By column, then decreasing bytes, then decreasing samples; the edges
    // came in (column, block rank, origin rank) order, which a stable sort
    // keeps among equal keys.
    edges.sort_by(|a, b| (a.0, b.1, b.2).cmp(&(b.0, a.1, a.2)));
    let mut to = vec![usize::MAX; cols * ranks];
    let mut taken = vec![false; ranks];
    let mut start = 0;
    for c in 0..cols {
        let end = start + edges[start..].partition_point(|e| e.0 == c);
        for &(_, _, _, r, o) in &edges[start..end] {
            if to[c * ranks + r] == usize::MAX && !taken[o] {
                to[c * ranks + r] = o;
                taken[o] = true;
            }
        }
        // The rest in ascending order.
        let mut free = (0..ranks).filter(|&q| !taken[q]);
        for r in 0..ranks {
            if to[c * ranks + r] == usize::MAX {
                to[c * ranks + r] = free.next().unwrap_or(r);
            }
        }
        taken.iter_mut().for_each(|t| *t = false);
        start = end;
    }
    // A rank ends up without samples when every block given to it is
    // empty (each column's blocks go to the ranks one to one): then
    // nothing moves.
    let mut filled = vec![false; ranks];
    for c in 0..cols {
        for r in 0..ranks {
            let k = first_slot(c, r);
            filled[to[c * ranks + r]] |= slots[k..k + width].iter().any(|s| !s.is_empty());
        }
    }
    if filled.contains(&false) {
        return slots;
    }
    let mut out: Vec<Vec<u32>> = vec![Vec::new(); slots.len()];
    for c in 0..cols {
        for r in 0..ranks {
            let (from, dest) = (first_slot(c, r), first_slot(c, to[c * ranks + r]));
            for i in 0..width {
                out[dest + i] = core::mem::take(&mut slots[from + i]);
            }
        }
    }
    out
}

/// A lower bound on the bytes moved (weighted as [`Homes::cost`] weighs
/// them without nodes) by any layout that gives whole ranks of `slots` to
/// ranks one to one, as [`relabel`] does under [`SyncModel::Step`]: each
/// rank's samples stay home only on the one rank they go to, so at most
/// the bytes of the origin holding the most of them there. O(n + K) time,
/// O(R) extra space.
pub(super) fn relabel_floor(homes: &Homes, shape: Shape, slots: &[Vec<u32>]) -> u128 {
    let mut held = vec![0u128; shape.ranks];
    let mut seen: Vec<u32> = Vec::new();
    let (mut total, mut kept) = (0u128, 0u128);
    for rank in slots.chunks(shape.per_rank()) {
        let mut most = 0u128;
        for &p in rank.iter().flatten() {
            let (o, b) = homes.of(p as usize);
            if o == NONE {
                continue;
            }
            let b = u128::from(b);
            total += b;
            if held[o as usize] == 0 {
                seen.push(o);
            }
            held[o as usize] += b;
            most = most.max(held[o as usize]);
        }
        kept += most;
        for o in seen.drain(..) {
            held[o as usize] = 0;
        }
    }
    total - kept
}

#[cfg(test)]
mod tests {
    use super::super::batch;
    use super::{relabel, relabel_floor};
    use crate::plan::shape::Shape;
    use crate::plan::SyncModel;
    use alloc::vec;
    use alloc::vec::Vec;
    use proptest::prelude::*;

    #[test]
    fn the_relabelling_floor_is_what_the_best_origin_of_each_rank_leaves() {
        // Rank 0 holds 10 and 5 bytes of rank 1's and 3 of its own; rank 1
        // 7 of rank 0's: at best rank 0 goes to rank 1 and keeps 15, rank
        // 1 to rank 0 and keeps 7, so 3 of the 25 bytes move (which the
        // relabelling reaches here).
        let shape = Shape {
            ranks: 2,
            steps: 1,
            per_step: 1,
        };
        let samples = [
            (1, 1.0, 0.0, 1, 10),
            (1, 1.0, 0.0, 1, 5),
            (1, 1.0, 0.0, 0, 3),
            (1, 1.0, 0.0, 0, 7),
        ];
        let sync = SyncModel::Step;
        let (_, homes) = batch(&samples, 8, shape, sync);
        let slots = vec![vec![0, 1, 2], vec![3]];
        assert_eq!(relabel_floor(&homes, shape, &slots), 3);
        let relabelled = relabel(&homes, sync, true, shape, slots.clone());
        assert_eq!(homes.cost(shape, &relabelled).0, 3);
        assert_eq!(homes.cost(shape, &slots).0, 22);
    }

    #[test]
    fn a_matching_that_would_empty_a_rank_moves_nothing() {
        // Two ranks of two micro-steps: rank 0 holds a sample of rank 1 in
        // micro-step 0, rank 1 another in micro-step 1. Matched greedily,
        // both micro-batches go to rank 1 and rank 0 would get none: the
        // layout stays as it is.
        let shape = Shape {
            ranks: 2,
            steps: 2,
            per_step: 1,
        };
        let samples = [(1, 1.0, 0.0, 1, 10), (1, 1.0, 0.0, 1, 10)];
        let (_, homes) = batch(&samples, 8, shape, SyncModel::MicroStep);
        let slots = vec![vec![0], vec![], vec![], vec![1]];
        let kept = relabel(&homes, SyncModel::MicroStep, false, shape, slots.clone());
        assert_eq!(kept, slots);
        // With one of them at home on rank 0 instead, each rank keeps one.
        let samples = [(1, 1.0, 0.0, 0, 10), (1, 1.0, 0.0, 1, 10)];
        let (_, homes) = batch(&samples, 8, shape, SyncModel::MicroStep);
        let moved = relabel(&homes, SyncModel::MicroStep, false, shape, slots.clone());
        assert_eq!(homes.cost(shape, &moved).0, 0);
    }

    proptest! {
        /// Any layout of any samples over whole ranks: the floor is at most
        /// what the layout itself and its relabelling move.
        #[test]
        fn the_relabelling_floor_is_a_floor(
            samples in prop::collection::vec((0usize..6, 0u64..1000, 0usize..7), 1..60),
            ranks in 1usize..6,
            per_rank in 1usize..4,
        ) {
            let shape = Shape { ranks, steps: per_rank, per_step: 1 };
            let list: Vec<(u32, f64, f64, usize, u64)> = samples
                .iter()
                .map(|&(o, b, _)| (1, 1.0, 0.0, if o < ranks { o } else { usize::MAX }, b))
                .collect();
            let (_, homes) = batch(&list, 1 << 20, shape, SyncModel::Step);
            let mut slots = vec![Vec::new(); shape.slots()];
            for (p, &(_, _, k)) in samples.iter().enumerate() {
                slots[k % shape.slots()].push(p as u32);
            }
            let floor = relabel_floor(&homes, shape, &slots);
            prop_assert!(floor <= homes.cost(shape, &slots).0);
            let relabelled = relabel(&homes, SyncModel::Step, true, shape, slots.clone());
            prop_assert!(floor <= homes.cost(shape, &relabelled).0);
        }
    }
}

//! The swap pass of the exchange: two samples away from home traded between their ranks, one for one.
//!
//! Under the per-micro-step models, where most samples start away from
//! home, [`Search::swap`] brings home many of them at the cost of one
//! index sort a round: every sample `x` away from home, in decreasing
//! bytes, is swapped with a sample `y` away from home on `x`'s home rank
//! (in any micro-batch: `x` takes `y`'s place, `y` `x`'s), among the
//! [`LOCALITY_NEAR`] nearest in tokens below and the [`LOCALITY_NEAR`]
//! from it up, one whose home is `x`'s rank first (both go home), else
//! the nearest in tokens, then the lowest position; only if both
//! sequences keep the caps, both groups their budgets, and the swap saves
//! weight. Every swap saves weight, so the pass never moves more than
//! before it.
//!
//! O(rounds * n * (log n + LOCALITY_NEAR + m)) time and O(n) extra space
//! for n samples, m the most samples of a sequence.

use alloc::vec;
use alloc::vec::Vec;
use core::cmp::Reverse;

use super::super::tuning::LOCALITY_NEAR;
use super::state::{add, sub3, Search};

impl Search<'_> {
    /// Up to `rounds` rounds of the swap pass (see the module docs), while
    /// a round swaps some; the number of swaps.
    pub(super) fn swap(&mut self, rounds: usize) -> usize {
        let ranks = self.budget.shape.ranks;
        // (rank, tokens, position) of every sample away from home, sorted,
        // and where each rank's run starts.
        let mut index: Vec<(u32, u32, u32)> = Vec::new();
        let mut start = vec![0usize; ranks + 1];
        let mut order: Vec<u32> = Vec::new();
        let mut swaps = 0;
        for _ in 0..rounds {
            index.clear();
            for p in 0..self.prep.len() {
                if self.away(p) {
                    let r = self.rank(self.slot_of[p] as usize);
                    index.push((r as u32, self.info[p].size[0], p as u32));
                }
            }
            index.sort_unstable();
            start.iter_mut().for_each(|x| *x = 0);
            for e in &index {
                start[e.0 as usize + 1] += 1;
            }
            for r in 0..ranks {
                start[r + 1] += start[r];
            }
            order.clear();
            order.extend(index.iter().map(|e| e.2));
            order.sort_unstable_by_key(|&p| (Reverse(self.info[p as usize].bytes), p));
            let before = swaps;
            for &x in &order {
                let x = x as usize;
                if !self.away(x) {
                    continue;
                }
                let h = self.info[x].origin as usize;
                if let Some(y) = self.partner(x, &index[start[h]..start[h + 1]]) {
                    let (sa, sb) = (self.slot_of[x] as usize, self.slot_of[y] as usize);
                    self.shift(x, sa, sb);
                    self.shift(y, sb, sa);
                    swaps += 1;
                }
            }
            if swaps == before {
                break;
            }
        }
        swaps
    }

    /// The sample of `list` (the samples away from home on `x`'s home
    /// rank, by tokens, when the round began) that `x` swaps with, if any.
    fn partner(&self, x: usize, list: &[(u32, u32, u32)]) -> Option<usize> {
        let per_rank = self.budget.shape.per_rank();
        let h = self.info[x].origin as usize;
        let t = self.info[x].size[0];
        let mid = list.partition_point(|e| e.1 < t);
        let near = &list[mid.saturating_sub(LOCALITY_NEAR)..(mid + LOCALITY_NEAR).min(list.len())];
        let sa = self.slot_of[x] as usize;
        let a = sa / per_rank;
        // (not both home, token distance, position)
        let mut pick: Option<((bool, u32, u32), usize)> = None;
        for &(_, ty, y) in near {
            let (y, sb) = (y as usize, self.slot_of[y as usize] as usize);
            let key = (self.info[y].origin as usize != a, ty.abs_diff(t), y as u32);
            // A sample that left `h` since the index was built is skipped.
            if sb / per_rank != h
                || pick.is_some_and(|(k, _)| k <= key)
                || !self.swap_fits(x, sa, y, sb)
            {
                continue;
            }
            pick = Some((key, y));
        }
        pick.map(|(_, y)| y)
    }

    /// Whether swapping sample `x` of slot `sa` and sample `y` of slot
    /// `sb` (of another rank) saves weight and keeps both slots within the
    /// caps and both groups within their budgets. O(1).
    fn swap_fits(&self, x: usize, sa: usize, y: usize, sb: usize) -> bool {
        let (a, b) = (self.rank(sa), self.rank(sb));
        let (ix, iy) = (&self.info[x], &self.info[y]);
        let w = |i: &super::state::Info, r: usize| self.homes.tied(i.origin, i.bytes, r);
        let before = w(ix, a) + w(iy, b);
        let after = w(ix, b) + w(iy, a);
        let (sx, sy) = (ix.size.map(u64::from), iy.size.map(u64::from));
        let (ga, gb) = (self.budget.group(sa), self.budget.group(sb));
        after < before
            && self.fits(add(sub3(self.size[sa], sx), sy))
            && self.fits(add(sub3(self.size[sb], sy), sx))
            && self.room(ga, self.load[ga] - ix.cost + iy.cost) >= 0.0
            && self.room(gb, self.load[gb] - iy.cost + ix.cost) >= 0.0
    }
}

#[cfg(test)]
mod tests {
    use super::super::batch;
    use super::super::budget::Budget;
    use super::super::homes::Homes;
    use super::super::state::Search;
    use crate::cost::Phases;
    use crate::plan::prepare::Prepared;
    use crate::plan::shape::Shape;
    use crate::plan::tuning::LOCALITY_SWAP_ROUNDS;
    use crate::plan::SyncModel;
    use alloc::vec;
    use alloc::vec::Vec;
    use proptest::prelude::*;

    /// The swap pass run on `slots` under the budgets of `slots` scaled by
    /// `1 + tol`: the layout after it, the swaps, and the budgets.
    fn swapped(
        (prep, homes): &(Prepared, Homes),
        sync: SyncModel,
        shape: Shape,
        slots: Vec<Vec<u32>>,
        tol: f64,
    ) -> (Vec<Vec<u32>>, usize, Budget) {
        let budget = Budget::largest(prep, sync, shape, &slots).scaled(tol);
        let mut search = Search::new(prep, homes, slots, budget.clone());
        let swaps = search.swap(LOCALITY_SWAP_ROUNDS);
        for (k, members) in search.slots.iter().enumerate() {
            for &p in members {
                assert_eq!(search.slot_of[p as usize] as usize, k);
            }
        }
        (search.slots, swaps, budget)
    }

    #[test]
    fn the_swap_pass_brings_two_samples_home_when_the_caps_allow() {
        // Two ranks of one sequence: each holds the other's sample, of the
        // same cost; swapped, both are home.
        let shape = Shape {
            ranks: 2,
            steps: 1,
            per_step: 1,
        };
        let samples = [(4, 1.0, 1.0, 1, 100), (4, 1.0, 1.0, 0, 100)];
        for sync in SyncModel::ALL {
            let b = batch(&samples, 4, shape, sync);
            let (slots, swaps, _) = swapped(&b, sync, shape, vec![vec![0], vec![1]], 0.0);
            assert_eq!((slots, swaps), (vec![vec![1], vec![0]], 1));
            assert_eq!(b.1.cost(shape, &[vec![1], vec![0]]), (0, 0));
        }
        // Rank 0 also holds one of its own samples (1 token): the 4 tokens
        // of rank 1's sample break its cap of 4 tokens: no swap.
        let samples = [
            (3, 1.0, 1.0, 1, 100),
            (4, 1.0, 1.0, 0, 100),
            (1, 1.0, 1.0, 0, 100),
        ];
        let b = batch(&samples, 4, shape, SyncModel::Step);
        let layout = vec![vec![0, 2], vec![1]];
        let (slots, swaps, _) = swapped(&b, SyncModel::Step, shape, layout.clone(), 0.5);
        assert_eq!((slots, swaps), (layout, 0));
        // Rank 0 holds one of its own samples (cost 2) and rank 1's
        // (cost 2), rank 1 rank 0's (cost 3): swapped, rank 0's total would
        // be 5, above the budget of the largest rank total, 4, with the
        // tolerance at 0: no swap; at 30% (5.2), the swap.
        let samples = [
            (4, 1.0, 1.0, 1, 100),
            (4, 2.0, 1.0, 0, 100),
            (4, 1.0, 1.0, 0, 100),
        ];
        let b = batch(&samples, 8, shape, SyncModel::Step);
        let layout = vec![vec![0, 2], vec![1]];
        let (_, swaps, _) = swapped(&b, SyncModel::Step, shape, layout.clone(), 0.0);
        assert_eq!(swaps, 0);
        let (slots, swaps, _) = swapped(&b, SyncModel::Step, shape, layout, 0.3);
        assert_eq!((slots, swaps), (vec![vec![2, 1], vec![0]], 1));
    }

    proptest! {
        /// Any layout of any samples: after the swap pass every sample is
        /// in one sequence, every sequence within the caps, every group
        /// within its budget, and the weight moved never more than before
        /// (less when there was a swap).
        #[test]
        fn the_swap_pass_keeps_every_sample_the_caps_and_budgets_and_moves_less(
            samples in prop::collection::vec(
                (1u32..40, 0.0f64..4.0, 0.1f64..4.0, 0usize..5, 0u64..1000, 0usize..1000),
                1..80,
            ),
            sync in prop::sample::select(SyncModel::ALL.to_vec()),
            ranks in 2usize..5,
            steps in 1usize..4,
            per_step in 1usize..3,
            tol in prop::sample::select(vec![0.0, 0.005, 0.05]),
        ) {
            let shape = Shape { ranks, steps, per_step };
            let k = shape.slots();
            let mut slots = vec![Vec::new(); k];
            for (i, s) in samples.iter().enumerate() {
                slots[s.5 % k].push(i as u32);
            }
            // The caps as tight as the layout allows: the fullest
            // sequence's tokens.
            let tokens = |s: &[u32]| s.iter().map(|&p| u64::from(samples[p as usize].0)).sum::<u64>();
            let seq_len = slots.iter().map(|s| tokens(s)).max().unwrap_or(1);
            let samples: Vec<_> = samples
                .iter()
                .map(|&(t, v, l, o, b, _)| (t, v, l, if o < ranks { o } else { usize::MAX }, b))
                .collect();
            let b = batch(&samples, seq_len, shape, sync);
            let before = b.1.cost(shape, &slots);
            let (after, swaps, budget) = swapped(&b, sync, shape, slots, tol);
            let mut all: Vec<u32> = after.iter().flatten().copied().collect();
            all.sort_unstable();
            prop_assert_eq!(all, (0..samples.len() as u32).collect::<Vec<_>>());
            let mut load = vec![Phases::ZERO; budget.groups()];
            for (k, s) in after.iter().enumerate() {
                prop_assert!(tokens(s) <= seq_len);
                for &p in s {
                    load[budget.group(k)] += b.0.cost(p as usize);
                }
            }
            for (g, &l) in load.iter().enumerate() {
                prop_assert!(budget.room(g, l) >= -1e-9, "group {} over", g);
            }
            let cost = b.1.cost(shape, &after);
            prop_assert!(cost <= before);
            prop_assert_eq!(swaps > 0, cost < before);
        }
    }
}

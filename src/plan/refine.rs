//! Refinement stage: moves and swaps of samples between the slowest group and the fastest ones while the predicted time drops.
//!
//! A *contest* is a set of groups that wait for each other: the ranks (one
//! group of `A * S` sequences each) for [`SyncModel::Step`], or the ranks'
//! micro-batches of one micro-step (`S` sequences each) for the
//! per-micro-step models. Per contest and per phase ([`SyncModel::Phase`]:
//! the costlier phase first, then the other, then the first again) or on
//! the total (the others), the slowest group `x` trades with the
//! [`REFINE_CANDIDATES`] fastest groups `y` (then [`REFINE_WIDE`] of them if none can):
//! moves of one of its samples to `y`, and swaps with a sample of `y`,
//! keeping every cap. The change that leaves `max(x, y)` lowest is applied
//! if it brings both below the old maximum without raising the other
//! phase's maximum; otherwise the contest is done. On the total, only the
//! swaps nearest to moving half the gap are tried
//! ([`balancing_window`](crate::partition::balancing_window) in `y`'s
//! samples sorted by cost, as the partition refinement does) and moves go
//! to `y`'s roomiest sequence; per phase the pair's search of the pairing
//! stage weighs them ([`best_trade`]: every swap where `y` holds at most
//! [`PAIR_WINDOW`] movable samples, else the [`PAIR_WINDOW`] nearest to
//! moving half the gap; moves to `y`'s first sequence with room). Every
//! applied change lowers the contest's multiset of group costs, so the
//! loop ends; it also stops when the slowest group is within
//! [`REFINE_TOLERANCE`] of the mean, after [`REFINE_ROUNDS`] iterations per
//! group, and when the work budget is spent: at most
//! [`REFINE_WORK`]` * (n + K)` candidate changes weighed (a move or swap
//! scored, or a sample of a candidate group sorted) for n samples in K
//! sequences, counted, not timed, so the plan stays deterministic.
//!
//! This is the planner's own rather than [`partition::refine`](crate::partition::refine)
//! because its groups are sets of capacity-bounded sequences (a move must
//! fit one sequence of the group, not a cap on the group's sum) and under
//! per-phase barriers it lowers one phase's maximum without raising the
//! other's, which no objective of a partition expresses.
//!
//! Costs are the samples' own costs added up (exact for additive models).
//!
//! O(min(iterations * candidates * |x| * log |y|, REFINE_WORK * (n + K) * log n))
//! time on the total, O(min(iterations * candidates * (|x| (PAIR_WINDOW + log
//! |y| + f) + |y| log |y|), REFINE_WORK * (n + K) * log n)) per phase (`f` a
//! first-fit query, see [`best_trade`]); O(groups + n) extra space.

use alloc::collections::BinaryHeap;
use alloc::vec;
use alloc::vec::Vec;
use core::cell::Cell;
use core::cmp::Reverse;

use super::deal::Sequences;
use super::sync::SyncModel;
use super::tuning::{
    PAIR_WINDOW, REFINE_CANDIDATES, REFINE_POOLS, REFINE_ROUNDS, REFINE_TOLERANCE, REFINE_WIDE,
    REFINE_WORK,
};
use super::work::{self, best_trade, swap_fits, Dim, Goal, Side, Stage, Trade};
use crate::cost::Phases;
use crate::num::{from_order_bits, order_bits};
use crate::partition::balancing_window;

struct Contest<'a> {
    stage: &'a Stage<'a>,
    /// The sequences of each group.
    groups: Vec<&'a [u32]>,
    cost: Vec<Phases>,
    version: Vec<u32>,
    /// The work left to the whole refinement (shared by its contests).
    left: &'a Cell<u64>,
    /// The sorted pools ([`pool_key`]s) of the last [`REFINE_POOLS`] groups
    /// [`best_change_sorted`](Contest::best_change_sorted) traded with,
    /// each dropped when its group changes: the fastest groups are asked
    /// again and again while another one trades.
    pools: Vec<(usize, Vec<u128>)>,
}

impl Contest<'_> {
    /// Spends `units` of work; `false` (and nothing left) when the budget
    /// does not hold them.
    #[inline]
    fn spend(&self, units: u64) -> bool {
        work::spend(self.left, units)
    }
}

/// The phase a change is scored on, and the most the other phase's
/// maximum may become.
#[derive(Clone, Copy)]
struct Target {
    d: Dim,
    limit_other: f64,
}

type MaxEntry = (u64, Reverse<u32>, u32);
type MinEntry = (Reverse<u64>, Reverse<u32>, u32);

/// A change: move `a` (position in sequence `bx`) to sequence `by`, and `b`
/// (position in `by`) back to `bx` if a swap.
#[derive(Clone, Copy)]
struct Change {
    bx: u32,
    a: usize,
    by: u32,
    b: Option<usize>,
    y: usize,
    score: f64,
}

/// The sequences `seqs` refined for the stage's sync model in its deal
/// (see the module docs): members and sizes are kept up to date, the costs
/// are read as the groups' starting costs and left as they were; pinned
/// positions never move.
pub(crate) fn refine(stage: &Stage<'_>, mut seqs: Sequences) -> Sequences {
    let Stage {
        prep,
        sync,
        shape,
        slots,
        ..
    } = *stage;
    let dims = Dim::barriers(sync);
    let contests: Vec<Vec<&[u32]>> = match sync {
        SyncModel::Step => vec![slots.chunks(shape.per_rank()).collect()],
        _ => (0..shape.steps)
            .map(|j| {
                (0..shape.ranks)
                    .map(|r| {
                        let first = shape.micro_batch(r, j);
                        &slots[first..first + shape.per_step]
                    })
                    .collect()
            })
            .collect(),
    };
    let left =
        Cell::new((prep.len() as u64 + seqs.members.len() as u64).saturating_mul(REFINE_WORK));
    for groups in contests {
        let cost = groups
            .iter()
            .map(|g| g.iter().map(|&b| seqs.costs[b as usize]).sum())
            .collect();
        let n = groups.len();
        let mut contest = Contest {
            stage,
            groups,
            cost,
            version: vec![0; n],
            left: &left,
            pools: Vec::new(),
        };
        contest.run(dims, &mut seqs);
        if left.get() == 0 {
            break;
        }
    }
    seqs
}

impl Contest<'_> {
    fn run(&mut self, dims: &[Dim], seqs: &mut Sequences) {
        let n = self.groups.len();
        if n < 2 {
            return;
        }
        // The phase that costs more first: its barrier weighs more, and the
        // other phase's maximum then only caps it once that is refined too.
        let total: Phases = self.cost.iter().sum();
        let mut order: Vec<Dim> = dims.to_vec();
        order.sort_by(|&a, &b| b.of(total).total_cmp(&a.of(total)));
        if order.len() == 2 {
            order.push(order[0]);
        }
        for d in order {
            let other = d.other();
            let mut max_heap: BinaryHeap<MaxEntry> = BinaryHeap::with_capacity(n);
            let mut min_heap: BinaryHeap<MinEntry> = BinaryHeap::with_capacity(n);
            for g in 0..n {
                let k = d.of(self.cost[g]).to_bits();
                max_heap.push((k, Reverse(g as u32), self.version[g]));
                min_heap.push((Reverse(k), Reverse(g as u32), self.version[g]));
            }
            let other_max = |cost: &[Phases]| {
                other.map_or(f64::INFINITY, |o| {
                    cost.iter().map(|&c| o.of(c)).fold(0.0, f64::max)
                })
            };
            let mut limit_other = other_max(&self.cost);
            let mean = self.cost.iter().map(|&c| d.of(c)).sum::<f64>() / n as f64;
            let good_enough = mean.max(d.largest(self.stage.prep)) * (1.0 + REFINE_TOLERANCE);
            for _ in 0..REFINE_ROUNDS * n {
                if self.left.get() == 0 {
                    return;
                }
                // The slowest group.
                let x = loop {
                    let Some(e) = max_heap.pop() else { return };
                    if e.2 == self.version[e.1 .0 as usize] {
                        break e.1 .0 as usize;
                    }
                };
                if d.of(self.cost[x]) <= good_enough {
                    break;
                }
                // The fastest groups: a few, then more when none of them
                // can trade.
                let mut ys: Vec<MinEntry> = Vec::with_capacity(REFINE_WIDE);
                let mut best = None;
                for width in [REFINE_CANDIDATES, REFINE_WIDE] {
                    let seen = ys.len();
                    while ys.len() < width {
                        let Some(e) = min_heap.pop() else { break };
                        let g = e.1 .0 as usize;
                        if e.2 == self.version[g] {
                            ys.push(e); // x's own entry too: it goes back below
                        }
                    }
                    let fresh = &ys[seen..];
                    best = if d == Dim::Total {
                        self.best_change_sorted(x, fresh, seqs)
                    } else {
                        let target = Target { d, limit_other };
                        self.best_change(x, fresh, target, seqs)
                    };
                    if best.is_some() {
                        break;
                    }
                }
                min_heap.extend(ys.iter().copied());
                let Some(c) = best else {
                    break; // the slowest group cannot get faster
                };
                self.apply(x, c, seqs);
                for g in [x, c.y] {
                    let k = d.of(self.cost[g]).to_bits();
                    max_heap.push((k, Reverse(g as u32), self.version[g]));
                    min_heap.push((Reverse(k), Reverse(g as u32), self.version[g]));
                }
                if let Some(o) = other {
                    limit_other = limit_other
                        .max(o.of(self.cost[x]))
                        .max(o.of(self.cost[c.y]));
                }
            }
        }
    }

    /// [`best_change`](Self::best_change) on the total alone, in
    /// O(|x| log |y|) per candidate: the best swap moves half the gap, so
    /// for each sample of `x` only the samples of `y` whose cost is nearest
    /// to "its cost minus half the gap" are tried.
    fn best_change_sorted(
        &mut self,
        x: usize,
        ys: &[MinEntry],
        seqs: &Sequences,
    ) -> Option<Change> {
        let (bins, loads) = (&seqs.members, &seqs.loads);
        const NEAR: usize = 3;
        let prep = self.stage.prep;
        let gx = self.cost[x].total();
        let mut best: Option<Change> = None;
        // x's samples that may move (sequence, index, cost), read once for
        // every candidate.
        let mut xs: Vec<(u32, usize, f64)> = Vec::new();
        for &bx in self.groups[x] {
            for (ia, &pa) in bins[bx as usize].iter().enumerate() {
                if !self.stage.pinned(pa) {
                    xs.push((bx, ia, prep.cost(pa as usize).total()));
                }
            }
        }
        for e in ys {
            let y = e.1 .0 as usize;
            let gy = self.cost[y].total();
            if y == x || gy >= gx {
                continue;
            }
            let half = (gx - gy) / 2.0;
            let size: usize = self.groups[y].iter().map(|&b| bins[b as usize].len()).sum();
            if !self.spend(size as u64) {
                return best;
            }
            // y's samples as sort keys ([`pool_key`]): by cost, then
            // sequence, then index, in one integer comparison; kept while
            // y does not change.
            let k = match self.pools.iter().position(|(g, _)| *g == y) {
                Some(k) => k,
                None => {
                    let mut pool = if self.pools.len() == REFINE_POOLS {
                        self.pools.remove(0).1
                    } else {
                        Vec::new()
                    };
                    pool.clear();
                    for &by in self.groups[y] {
                        for (ib, &pb) in bins[by as usize].iter().enumerate() {
                            if !self.stage.pinned(pb) {
                                pool.push(pool_key(prep.cost(pb as usize).total(), by, ib));
                            }
                        }
                    }
                    pool.sort_unstable();
                    self.pools.push((y, pool));
                    self.pools.len() - 1
                }
            };
            let pool = &self.pools[k].1;
            let roomiest = self.groups[y]
                .iter()
                .copied()
                .min_by_key(|&b| (loads[b as usize][0], b))
                .unwrap_or(0);
            // Sample `ia` of sequence `bx` (cost `ca`) to `by`, and sample
            // `ib` of `by` (cost `cb`) back if a swap. The sizes are read
            // only for a change that would be the best so far.
            let consider = |bx: u32,
                            ia: usize,
                            ca: f64,
                            by: u32,
                            swap: Option<(usize, f64)>,
                            best: &mut Option<Change>| {
                let cb = swap.map_or(0.0, |(_, cb)| cb);
                let (kx, ky) = (gx - ca + cb, gy + ca - cb);
                if !(kx < gx && ky < gx) {
                    return;
                }
                let score = kx.max(ky);
                if best.is_some_and(|b| b.score <= score) {
                    return;
                }
                let sa = prep.size(bins[bx as usize][ia] as usize);
                let sb = swap.map_or([0u64; 3], |(ib, _)| {
                    prep.size(bins[by as usize][ib] as usize)
                });
                if swap_fits(prep, loads[bx as usize], loads[by as usize], sa, sb) {
                    *best = Some(Change {
                        bx,
                        a: ia,
                        by,
                        b: swap.map(|(ib, _)| ib),
                        y,
                        score,
                    });
                }
            };
            for &(bx, ia, ca) in &xs {
                // A move and at most 2 * NEAR swaps.
                if !work::spend(self.left, 1 + 2 * NEAR as u64) {
                    return best;
                }
                // A move into the sequence of y with the most room.
                if ca < 2.0 * half {
                    consider(bx, ia, ca, roomiest, None, &mut best);
                }
                let want = ca - half;
                let at = pool.partition_point(|&q| pool_cost(q) < want);
                for &q in &pool[balancing_window(pool.len(), at, NEAR)] {
                    let (by, ib) = pool_place(q);
                    consider(bx, ia, ca, by, Some((ib, pool_cost(q))), &mut best);
                }
            }
        }
        best
    }

    /// The best move or swap between `x` and one of `ys` on `target`'s
    /// dimension, by [`best_trade`]: every pair is tried where `y` holds at
    /// most [`PAIR_WINDOW`] movable samples, else the swaps nearest to half
    /// the gap. Each candidate `y` spends `|x| * (min(|y|, window) + 1)` of
    /// the budget before it is weighed.
    fn best_change(
        &self,
        x: usize,
        ys: &[MinEntry],
        target: Target,
        seqs: &Sequences,
    ) -> Option<Change> {
        let Target { d, limit_other } = target;
        let gx = self.cost[x];
        let m = d.of(gx);
        let other = d.other();
        let (mut xs, mut my) = (Vec::new(), Vec::new());
        work::gather(self.stage, seqs, self.groups[x], &mut xs);
        let mut best: Option<Change> = None;
        for e in ys {
            let y = e.1 .0 as usize;
            let gy = self.cost[y];
            if y == x || d.of(gy) >= m {
                continue;
            }
            my.clear();
            work::gather(self.stage, seqs, self.groups[y], &mut my);
            let weighed = my.len().min(PAIR_WINDOW) as u64 + 1;
            if !self.spend(xs.len() as u64 * weighed) {
                return best;
            }
            let goal = Goal {
                // The larger of the two in `d`; `x` is at `m`, the largest.
                score: |nx: Phases, ny: Phases| d.of(nx).max(d.of(ny)),
                ok: |nx: Phases, ny: Phases| {
                    other.map_or(0.0, |o| o.of(nx).max(o.of(ny))) <= limit_other
                },
                dim: d,
                want: (m - d.of(gy)) / 2.0,
                window: PAIR_WINDOW,
            };
            let side = |g: usize, members| Side {
                cost: self.cost[g],
                seqs: self.groups[g],
                members,
            };
            let found = best_trade(
                self.stage.prep,
                &goal,
                side(x, &xs),
                side(y, &my),
                &seqs.loads,
            );
            if let Some((score, t)) = found {
                if best.map_or(true, |b| score < b.score) {
                    best = Some(Change {
                        bx: t.from,
                        a: t.a,
                        by: t.to,
                        b: t.back,
                        y,
                        score,
                    });
                }
            }
        }
        best
    }

    fn apply(&mut self, x: usize, c: Change, seqs: &mut Sequences) {
        let trade = Trade {
            from: c.bx,
            a: c.a,
            to: c.by,
            back: c.b,
        };
        let [ca, cb] = trade.apply(self.stage.prep, seqs);
        if c.b.is_none() {
            self.cost[x] = self.cost[x] - ca;
            self.cost[c.y] += ca;
        } else {
            self.cost[x] = self.cost[x] - ca + cb;
            self.cost[c.y] = self.cost[c.y] + ca - cb;
        }
        self.version[x] = self.version[x].wrapping_add(1);
        self.version[c.y] = self.version[c.y].wrapping_add(1);
        self.pools.retain(|(g, _)| *g != x && *g != c.y);
    }
}

/// Sample `ib` of sequence `by`, of cost `cost`, as one integer whose order
/// is that of `(cost, by, ib)` with costs in [`f64::total_cmp`]'s order:
/// the cost's bits mapped to an unsigned key in the high half (negative
/// values below positive ones, each in order), then `by`, then `ib`.
#[inline]
fn pool_key(cost: f64, by: u32, ib: usize) -> u128 {
    // `ib` indexes a sequence of at most `u32::MAX` positions.
    (u128::from(order_bits(cost)) << 64) | (u128::from(by) << 32) | ib as u128
}

/// The cost of a [`pool_key`], bit for bit.
#[inline]
fn pool_cost(q: u128) -> f64 {
    from_order_bits((q >> 64) as u64)
}

/// The sequence and the index in it of a [`pool_key`].
#[inline]
fn pool_place(q: u128) -> (u32, usize) {
    ((q >> 32) as u32, (q as u32) as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_keys_order_as_cost_sequence_index_and_read_back() {
        let costs = [
            0.0,
            -0.0,
            1.0,
            1.0 + f64::EPSILON,
            0.5,
            f64::MIN_POSITIVE,
            5e-324,
            1e300,
            f64::MAX,
            f64::INFINITY,
            -1.0,
            -1e-300,
            f64::NEG_INFINITY,
        ];
        let mut items = Vec::new();
        for (i, &c) in costs.iter().enumerate() {
            for by in [0u32, 7, u32::MAX] {
                for ib in [0usize, 3, u32::MAX as usize] {
                    items.push((c, by, ib, i));
                }
            }
        }
        for &(c, by, ib, _) in &items {
            let q = pool_key(c, by, ib);
            assert_eq!(pool_cost(q).to_bits(), c.to_bits());
            assert_eq!(pool_place(q), (by, ib));
        }
        let mut by_keys = items.clone();
        by_keys.sort_unstable_by_key(|&(c, by, ib, _)| pool_key(c, by, ib));
        items.sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
        let ids =
            |v: &[(f64, u32, usize, usize)]| v.iter().map(|t| (t.3, t.1, t.2)).collect::<Vec<_>>();
        assert_eq!(ids(&by_keys), ids(&items));
    }
}

//! The re-split of a pair of sequences of two ranks, the exchange's move.
//!
//! [`Search::split`] puts every sample of sequences `a` and `b` on the
//! side where it weighs less (ties: where it is); then, while a side
//! breaks a cap (`L`, units, images) or its group's budget, one of its
//! samples that fits the other side goes there: of least extra weight,
//! one that alone mends the side if any (the cheapest), else the costliest
//! (then the lowest index); first from `a`, then from `b`. This moves one
//! sample or several at once (1-for-2, 2-for-1, ...), so that tightly
//! packed sequences still trade. When the pushes find no split that fits,
//! the samples of equal weight on both sides (up to [`LOCALITY_FREE`], the
//! costliest; the others stay) are placed by a depth-first search
//! ([`Dfs`]), each where it is first, then on the other side, cut where a
//! side breaks a cap or its budget or where the samples left exceed the
//! two sides' room together, at most [`LOCALITY_NODES`] choices; the
//! choice of most room is kept. A split is a candidate if both sides fit
//! and it saves weight (weighted bytes, then samples moved) without
//! emptying a rank.
//!
//! `a`'s samples are read once for every sequence `b` of a rank
//! ([`Search::half`]), and each pair starts from that read bit for bit as
//! from reading both sequences in one pass. O(m * (1 + pushes) +
//! LOCALITY_NODES) a pair for its m <= [`LOCALITY_PAIR`] samples; pairs
//! holding more are not weighed.

use alloc::vec::Vec;

use super::super::sync::SyncModel;
use super::super::tuning::{LOCALITY_FREE, LOCALITY_NODES, LOCALITY_PAIR};
use super::state::{add, sub3, Info, Search};
use crate::cost::Phases;

/// The samples of a pair (or of one sequence of it) as listed for a
/// re-split: each one's side (true: `a`'s), weights on `a`'s rank and on
/// `b`'s, and demands ([`Search::demands`]), and the sums over them.
#[derive(Default)]
pub(super) struct Listed {
    pub(super) side: Vec<bool>,
    w: Vec<(u128, u128)>,
    v: Vec<[f64; 5]>,
    sums: Sums,
}

impl Listed {
    /// `self` made equal to `other`, reusing its allocations.
    fn copy_from(&mut self, other: &Listed) {
        self.side.clone_from(&other.side);
        self.w.clone_from(&other.w);
        self.v.clone_from(&other.v);
        self.sums = other.sums;
    }
}

/// Scratch of the exchange, reused from pair to pair.
#[derive(Default)]
pub(super) struct Pair {
    /// The pair being weighed.
    pub(super) now: Listed,
    /// The sides of the best split found so far.
    pub(super) best: Vec<bool>,
    /// The candidate sequences of a rank and their keys.
    pub(super) cands: Vec<(f64, usize)>,
    /// The samples of the pair applied, and on which side they were.
    pub(super) items: Vec<(u32, bool)>,
    /// The samples of a pair that weigh the same on both sides.
    free: Vec<usize>,
    /// The sides before the pushes.
    init: Vec<bool>,
    /// The samples of `a` against the rank of the sequences `b` weighed
    /// ([`Search::half`]).
    pub(super) half: Listed,
}

/// The sums over the samples of a pair `(a, b)` that [`Search::split`]
/// starts from.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) struct Sums {
    /// The cost of `a` and of `b` as they are.
    old: [Phases; 2],
    /// Each side's cost, sizes and demands, every sample on the side
    /// where it weighs less.
    sides: Sides,
    /// The weight of the samples where they are.
    before: u128,
}

/// The cost, sizes and demands ([`Search::demands`]) of the two sides of
/// a pair.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Sides {
    now: [Phases; 2],
    size: [[u64; 3]; 2],
    load: [[f64; 5]; 2],
}

impl Sides {
    /// Sample `it`, of demands `v`, onto side `k`.
    fn put(&mut self, k: usize, it: &Info, v: [f64; 5]) {
        self.now[k] += it.cost;
        self.size[k] = add(self.size[k], it.size.map(u64::from));
        for (l, x) in self.load[k].iter_mut().zip(v) {
            *l += x;
        }
    }

    /// Sample `it`, of demands `v`, off side `k`.
    fn take(&mut self, k: usize, it: &Info, v: [f64; 5]) {
        self.now[k] = self.now[k] - it.cost;
        self.size[k] = sub3(self.size[k], it.size.map(u64::from));
        for (l, x) in self.load[k].iter_mut().zip(v) {
            *l -= x;
        }
    }
}

/// What a re-split of the pair `(a, b)` weighs against: the slots, their
/// groups, their groups' loads without the pair, each side's capacity in
/// the terms of the demands, and the weight where the samples are.
struct Frame {
    a: usize,
    b: usize,
    /// The samples of `a` (listed first).
    na: usize,
    groups: [usize; 2],
    base: [Phases; 2],
    caps: [[f64; 5]; 2],
    before: u128,
}

impl Search<'_> {
    /// A sample's demands on a side of a pair: its cost (per phase for
    /// [`SyncModel::Phase`], else in total and 0), tokens, units, images.
    #[inline]
    fn demands(&self, it: &Info) -> [f64; 5] {
        let c = it.cost;
        let (first, second) = match self.budget.sync {
            SyncModel::Phase => (c.vision, c.language),
            _ => (c.total(), 0.0),
        };
        let z = it.size.map(f64::from);
        [first, second, z[0], z[1], z[2]]
    }

    /// The samples of sequence `a` as [`Search::split`] starts from them
    /// against every sequence of rank `rb`, into `half`. O(m) for the m
    /// samples of `a`.
    pub(super) fn half(&self, a: usize, rb: usize, half: &mut Listed) {
        half.side.clear();
        half.w.clear();
        half.v.clear();
        half.sums = Sums::default();
        self.read(a, self.rank(a), rb, half);
    }

    /// The samples of sequence `k` (of `a`'s rank `ra` or `b`'s `rb`)
    /// read for a pair: each one's side (where it weighs less, ties where
    /// it is), weights on `ra` and `rb` and demands pushed, and added to
    /// the sums in turn. O(m) for the m samples of `k`.
    fn read(&self, k: usize, ra: usize, rb: usize, into: &mut Listed) {
        let in_a = self.rank(k) == ra;
        for &x in &self.slots[k] {
            let it = &self.info[x as usize];
            let wa = self.homes.tied(it.origin, it.bytes, ra);
            let wb = self.homes.tied(it.origin, it.bytes, rb);
            into.sums.before += if in_a { wa } else { wb };
            into.sums.old[usize::from(!in_a)] += it.cost;
            let to_b = if in_a { wa > wb } else { wa >= wb };
            let d = self.demands(it);
            into.side.push(!to_b);
            into.w.push((wa, wb));
            into.v.push(d);
            into.sums.sides.put(usize::from(to_b), it, d);
        }
    }

    /// The pair `(a, b)` as [`Search::split`] starts from it, into
    /// `pair.now`: `a`'s samples as `pair.half` holds them, then `b`'s,
    /// each added in turn, as when both sequences are read in one pass.
    fn start(&self, a: usize, b: usize, pair: &mut Pair) {
        debug_assert_eq!(pair.half.side.len(), self.slots[a].len());
        pair.now.copy_from(&pair.half);
        self.read(b, self.rank(a), self.rank(b), &mut pair.now);
    }

    /// The best split found of the samples of sequences `a` and `b` (of
    /// different ranks) between them, in `pair.now.side` (true: in `a`):
    /// the weight saved and the room left, if both sides fit and it saves
    /// weight. `pair.half` holds `a`'s samples against `b`'s rank.
    pub(super) fn split(&self, a: usize, b: usize, pair: &mut Pair) -> Option<(u128, f64)> {
        let (na, nb) = (self.slots[a].len(), self.slots[b].len());
        if na + nb > LOCALITY_PAIR {
            return None;
        }
        self.start(a, b, pair);
        let Sums {
            old,
            mut sides,
            before,
        } = pair.now.sums;
        let groups = [self.budget.group(a), self.budget.group(b)];
        let base = [self.load[groups[0]] - old[0], self.load[groups[1]] - old[1]];
        let phase = self.budget.sync == SyncModel::Phase;
        // Each side's capacity in the terms of the demands.
        let cap = |k: usize| {
            let b = self.budget.of(groups[k]);
            let c = |d: usize| {
                let x = self.prep.caps[d];
                if x == u64::MAX {
                    f64::INFINITY
                } else {
                    x as f64
                }
            };
            let (first, second) = if phase {
                (b.vision - base[k].vision, b.language - base[k].language)
            } else {
                (b.total() - base[k].total(), f64::INFINITY)
            };
            [first, second, c(0), c(1), c(2)]
        };
        let frame = Frame {
            a,
            b,
            na,
            groups,
            base,
            caps: [cap(0), cap(1)],
            before,
        };
        pair.init.clone_from(&pair.now.side);
        let pushed = self.push(&frame, &mut sides, pair);
        if !(pushed && self.side_fits(&frame, &sides, 0) && self.side_fits(&frame, &sides, 1)) {
            return self.split_free(&frame, pair);
        }
        self.verdict(&frame, pair, sides.now)
    }

    /// Whether side `k` of the pair keeps the caps and its group's budget.
    fn side_fits(&self, f: &Frame, sides: &Sides, k: usize) -> bool {
        self.fits(sides.size[k]) && self.room(f.groups[k], f.base[k] + sides.now[k]) >= 0.0
    }

    /// The weight saved by the sides `pair.now.side` of the pair, whose
    /// loads are `now`, and the room they leave: `None` unless it saves
    /// weight and empties no rank. O(m) for the m samples of the pair.
    fn verdict(&self, f: &Frame, pair: &Pair, now: [Phases; 2]) -> Option<(u128, f64)> {
        let (ra, rb) = (self.rank(f.a), self.rank(f.b));
        let nb = pair.now.side.len() - f.na;
        let mut count = [0usize; 2];
        let mut after = 0u128;
        for (&side, &(wa, wb)) in pair.now.side.iter().zip(&pair.now.w) {
            after += if side { wa } else { wb };
            count[usize::from(!side)] += 1;
        }
        if after >= f.before || self.count[ra] + count[0] <= f.na || self.count[rb] + count[1] <= nb
        {
            return None;
        }
        let room = f64::min(
            self.room(f.groups[0], f.base[0] + now[0]),
            self.room(f.groups[1], f.base[1] + now[1]),
        );
        Some((f.before - after, room))
    }

    /// The pushes of [`Search::split`]: while a side breaks the caps or
    /// its group's budget, one of its samples that fits the other side is
    /// pushed there: of least extra weight, one that alone makes the side
    /// fit (the cheapest such), else the costliest (then the lowest
    /// index); first from `a`, then from `b`. False when a side finds
    /// nothing to push. O(m * (1 + pushes)) for the m samples of the pair.
    fn push(&self, f: &Frame, sides: &mut Sides, pair: &mut Pair) -> bool {
        let m = pair.now.side.len();
        for k in 0..2 {
            let o = 1 - k;
            for _ in 0..m {
                if self.side_fits(f, sides, k) {
                    break;
                }
                let over: [f64; 5] = core::array::from_fn(|d| sides.load[k][d] - f.caps[k][d]);
                let free: [f64; 5] = core::array::from_fn(|d| f.caps[o][d] - sides.load[o][d]);
                // (extra weight, whether it alone is not enough, cost
                // (ascending if enough, descending if not), index)
                let mut pick: Option<(u128, bool, f64, usize)> = None;
                for i in 0..m {
                    if usize::from(!pair.now.side[i]) != k {
                        continue;
                    }
                    let v = &pair.now.v[i];
                    if (0..5).any(|d| v[d] > free[d]) {
                        continue;
                    }
                    let (wa, wb) = pair.now.w[i];
                    let extra = if k == 0 {
                        wb.saturating_sub(wa)
                    } else {
                        wa.saturating_sub(wb)
                    };
                    let short = (0..5).any(|d| over[d] > 0.0 && v[d] < over[d]);
                    let c = v[0] + v[1];
                    let key = (extra, short, if short { -c } else { c }, i);
                    let better = pick.map_or(true, |p| {
                        (key.0, key.1)
                            .cmp(&(p.0, p.1))
                            .then(key.2.total_cmp(&p.2))
                            .then(key.3.cmp(&p.3))
                            .is_lt()
                    });
                    if better {
                        pick = Some(key);
                    }
                }
                let Some((_, _, _, i)) = pick else {
                    return false;
                };
                let it = &self.info[self.item(f, i)];
                sides.take(k, it, pair.now.v[i]);
                sides.put(o, it, pair.now.v[i]);
                pair.now.side[i] = k == 1;
            }
        }
        true
    }

    /// The fallback of [`Search::split`] when its pushes find no split:
    /// every sample on the side where it weighs less (ties: where it is;
    /// `pair.init`) and, of the samples that weigh the same on both sides
    /// (at most [`LOCALITY_FREE`] of them, the costliest, then the lowest
    /// index), the choice of sides by [`Dfs`] that fits both sides with
    /// the most room, in `pair.now.side`. The weight saved and that room,
    /// if it saves weight and empties no rank.
    ///
    /// O(m log m + LOCALITY_NODES) for the m samples of the pair.
    fn split_free(&self, f: &Frame, pair: &mut Pair) -> Option<(u128, f64)> {
        let m = pair.init.len();
        pair.now.side.clone_from(&pair.init);
        pair.free.clear();
        let mut load = [[0f64; 5]; 2];
        for i in 0..m {
            let (wa, wb) = pair.now.w[i];
            if wa == wb {
                pair.free.push(i);
            } else {
                let k = usize::from(!pair.now.side[i]);
                for (l, x) in load[k].iter_mut().zip(pair.now.v[i]) {
                    *l += x;
                }
            }
        }
        if pair.free.is_empty() {
            return None;
        }
        // The free samples placed one by one, the costliest first.
        let v = &pair.now.v;
        pair.free.sort_unstable_by(|&x, &y| {
            (v[y][0] + v[y][1])
                .total_cmp(&(v[x][0] + v[x][1]))
                .then(x.cmp(&y))
        });
        let n_free = pair.free.len().min(LOCALITY_FREE);
        // Those past `n_free` stay where they are: loaded now.
        for &i in &pair.free[n_free..] {
            let k = usize::from(!pair.now.side[i]);
            for d in 0..5 {
                load[k][d] += v[i][d];
            }
        }
        // What the free samples from the `j`-th on need.
        let mut rest = [[0f64; 5]; LOCALITY_FREE + 1];
        for j in (0..n_free).rev() {
            for d in 0..5 {
                rest[j][d] = rest[j + 1][d] + v[pair.free[j]][d];
            }
        }
        let mut dfs = Dfs {
            v,
            free: &pair.free[..n_free],
            side: &pair.now.side,
            rest: &rest,
            caps: f.caps,
            phase: self.budget.sync == SyncModel::Phase,
            nodes: LOCALITY_NODES,
            best: None,
        };
        dfs.go(0, &mut load, 0);
        let (_, mask) = dfs.best?;
        for j in 0..n_free {
            if mask >> j & 1 == 1 {
                let i = pair.free[j];
                pair.now.side[i] = !pair.now.side[i];
            }
        }
        // Checked again in the sums of the budgets.
        let mut sides = Sides::default();
        for (i, &side) in pair.now.side.iter().enumerate() {
            sides.put(
                usize::from(!side),
                &self.info[self.item(f, i)],
                pair.now.v[i],
            );
        }
        if !(0..2).all(|k| self.side_fits(f, &sides, k)) {
            return None;
        }
        self.verdict(f, pair, sides.now)
    }

    /// The sample at index `i` of the pair (`a`'s samples first).
    #[inline]
    fn item(&self, f: &Frame, i: usize) -> usize {
        if i < f.na {
            self.slots[f.a][i] as usize
        } else {
            self.slots[f.b][i - f.na] as usize
        }
    }
}

/// The depth-first search of [`Search::split_free`]: the free samples
/// `free` (indices of `v`, the costliest first) each put on its side
/// `side` or the other, under `caps`; `rest[j]` is what the samples from
/// the `j`-th on need. Keeps the choice (a mask of the samples moved) of
/// most room; weighs at most `nodes` choices.
struct Dfs<'p> {
    v: &'p [[f64; 5]],
    free: &'p [usize],
    side: &'p [bool],
    rest: &'p [[f64; 5]],
    caps: [[f64; 5]; 2],
    phase: bool,
    nodes: usize,
    best: Option<(f64, u32)>,
}

impl Dfs<'_> {
    /// Places the free samples from the `j`-th on, the sides loaded with
    /// `load`, those before placed as `mask` says.
    fn go(&mut self, j: usize, load: &mut [[f64; 5]; 2], mask: u32) {
        if self.nodes == 0 {
            return;
        }
        self.nodes -= 1;
        let caps = &self.caps;
        if (0..2).any(|k| (0..5).any(|d| load[k][d] > caps[k][d])) {
            return;
        }
        if (0..5).any(|d| self.rest[j][d] > caps[0][d] - load[0][d] + caps[1][d] - load[1][d]) {
            return;
        }
        if j == self.free.len() {
            let room = (0..2)
                .map(|k| {
                    if self.phase {
                        f64::min(caps[k][0] - load[k][0], caps[k][1] - load[k][1])
                    } else {
                        caps[k][0] - load[k][0]
                    }
                })
                .fold(f64::INFINITY, f64::min);
            if self.best.map_or(true, |b| room > b.0) {
                self.best = Some((room, mask));
            }
            return;
        }
        let i = self.free[j];
        let v = self.v[i];
        for flip in [false, true] {
            let k = usize::from(self.side[i] == flip);
            for d in 0..5 {
                load[k][d] += v[d];
            }
            self.go(j + 1, load, mask | u32::from(flip) << j);
            for d in 0..5 {
                load[k][d] -= v[d];
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::batch;
    use super::super::budget::Budget;
    use super::super::state::Search;
    use super::{Dfs, Listed, Pair, Sums};
    use crate::plan::shape::Shape;
    use crate::plan::SyncModel;
    use alloc::vec;
    use alloc::vec::Vec;
    use proptest::prelude::*;

    /// The pair `(a, b)` listed in one pass over both sequences, each
    /// sample on the side where it weighs less (ties: where it is).
    fn start_in_one_pass(search: &Search<'_>, a: usize, b: usize) -> Listed {
        let (ra, rb, na) = (search.rank(a), search.rank(b), search.slots[a].len());
        let mut out = Listed::default();
        for (i, &x) in search.slots[a].iter().chain(&search.slots[b]).enumerate() {
            let it = &search.info[x as usize];
            let wa = search.homes.tied(it.origin, it.bytes, ra);
            let wb = search.homes.tied(it.origin, it.bytes, rb);
            let in_a = i < na;
            out.sums.before += if in_a { wa } else { wb };
            out.sums.old[usize::from(!in_a)] += it.cost;
            let s = match wa.cmp(&wb) {
                core::cmp::Ordering::Less => true,
                core::cmp::Ordering::Greater => false,
                core::cmp::Ordering::Equal => in_a,
            };
            let d = search.demands(it);
            out.side.push(s);
            out.w.push((wa, wb));
            out.v.push(d);
            out.sums.sides.put(usize::from(!s), it, d);
        }
        out
    }

    proptest! {
        // `a`'s half, read once for every sequence `b` of a rank, starts
        // each pair bit for bit as reading both sequences in one pass does,
        // and `split` leaves it as it was: every re-split weighs as before.
        // (Checked to fail with `b`'s weight summed on the wrong side,
        // `a`'s ties sent to `b`, and the half changed by `split`.)
        #[test]
        fn a_half_read_once_starts_every_pair_as_one_pass(
            samples in prop::collection::vec(
                (1u32..60, 0.0f64..4.0, 0.1f64..8.0, 0usize..5, 0u64..4),
                8..40,
            ),
            spread in 1usize..16,
            sync in prop::sample::select(vec![SyncModel::Step, SyncModel::MicroStep, SyncModel::Phase]),
            tol in 0.0f64..0.2,
        ) {
            let shape = Shape { ranks: 4, steps: 2, per_step: 2 };
            // Origins 0..4, and none for 4.
            let samples: Vec<_> = samples
                .into_iter()
                .map(|(t, v, l, o, b)| (t, v, l, if o == 4 { usize::MAX } else { o }, b))
                .collect();
            let (prep, homes) = batch(&samples, 100, shape, sync);
            let mut slots = vec![Vec::new(); shape.slots()];
            for p in 0..prep.len() {
                slots[(p * spread + p / 3) % shape.slots()].push(p as u32);
            }
            let budget = Budget::largest(&prep, sync, shape, &slots).scaled(tol);
            let search = Search::new(&prep, &homes, slots, budget);
            let per_rank = shape.per_rank();
            for a in 0..shape.slots() {
                let ra = a / per_rank;
                for rb in (0..shape.ranks).filter(|&r| r != ra) {
                    let mut once = Pair::default();
                    search.half(a, rb, &mut once.half);
                    for b in rb * per_rank..(rb + 1) * per_rank {
                        search.start(a, b, &mut once);
                        let want = start_in_one_pass(&search, a, b);
                        prop_assert_eq!(&once.now.side, &want.side);
                        prop_assert_eq!(&once.now.w, &want.w);
                        prop_assert_eq!(&once.now.v, &want.v);
                        prop_assert_eq!(once.now.sums, want.sums);
                        let kept: (Vec<bool>, Sums) = (once.half.side.clone(), once.half.sums);
                        let reused = search.split(a, b, &mut once);
                        prop_assert_eq!(&(once.half.side.clone(), once.half.sums), &kept);
                        let mut fresh = Pair::default();
                        search.half(a, rb, &mut fresh.half);
                        prop_assert_eq!(reused, search.split(a, b, &mut fresh));
                    }
                }
            }
        }
    }

    /// Three free samples (one cost each; tokens in the third column),
    /// all on side 0 at first; side 0 holds 1 more cost and side 1 takes
    /// 2 cost and 2 tokens: only the 2-token sample and the 1-token sample
    /// together are too many tokens, so the search moves exactly the first
    /// two (costliest first: the order given) or one cheaper choice.
    fn search(nodes: usize, caps: [[f64; 5]; 2]) -> Option<(f64, u32)> {
        let v = [
            [1.0, 0.0, 2.0, 0.0, 0.0],
            [1.0, 0.0, 1.0, 0.0, 0.0],
            [1.0, 0.0, 0.0, 0.0, 0.0],
        ];
        let free = [0, 1, 2];
        let side = [true; 3];
        let mut rest = [[0.0; 5]; 4];
        for j in (0..3).rev() {
            for d in 0..5 {
                rest[j][d] = rest[j + 1][d] + v[free[j]][d];
            }
        }
        let mut dfs = Dfs {
            v: &v,
            free: &free,
            side: &side,
            rest: &rest,
            caps,
            phase: false,
            nodes,
            best: None,
        };
        dfs.go(0, &mut [[0.0; 5]; 2], 0);
        dfs.best
    }

    #[test]
    fn the_search_finds_the_one_split_that_fits() {
        let inf = f64::INFINITY;
        // Side 0: 1 cost; side 1: 2 cost, 1 token: the 1-token sample goes
        // with the 0-token one (mask 0b110), the 2-token one stays.
        let caps = [[1.0, inf, inf, inf, inf], [2.0, inf, 1.0, inf, inf]];
        assert_eq!(search(usize::MAX, caps), Some((0.0, 0b110)));
        // Of two that fit, the one of most room: side 1 may take 3 cost.
        let caps = [[3.0, inf, inf, inf, inf], [3.0, inf, 3.0, inf, inf]];
        let (room, _) = search(usize::MAX, caps).unwrap();
        assert_eq!(room, 1.0);
        // Nothing fits 3 cost into 2 in all.
        let caps = [[1.0, inf, inf, inf, inf], [1.0, inf, inf, inf, inf]];
        assert_eq!(search(usize::MAX, caps), None);
        // The choices weighed are bounded: 3 nodes do not reach a leaf
        // past the first sample's side (depth 3 needs 4).
        let caps = [[1.0, inf, inf, inf, inf], [2.0, inf, 1.0, inf, inf]];
        assert_eq!(search(3, caps), None);
    }
}

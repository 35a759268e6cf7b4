//! Refinement: moves and swaps between the heaviest (or lightest) part and
//! the others, accepted only when they improve.

use alloc::vec;
use alloc::vec::Vec;
use core::cmp::Ordering;

use crate::error::Error;
use crate::num::{Item, Size, Total, TotalOps};

use super::bounds;
use super::instance::{self, Config, Instance, Load};
use super::options::{Dims, Objective};
use super::result::Partition;
use super::steps;

/// Improves `partition` of `items` by moving single items and swapping
/// pairs between an extreme part (the heaviest, for the spread also the
/// lightest) and any other part, as long as one improves; the result is
/// never worse than the input.
///
/// Each step takes the best candidate by (objective after, the larger of the
/// two parts after, their imbalance after); it is taken only when the
/// objective drops, or stays and the larger of the two parts drops (for the
/// spread: the two get closer). For one objective dimension the objective
/// never rises and the sum of squared part sums falls at every step, so the
/// pass ends. The sums of the two parts of a step are recomputed afresh
/// after it, so that float sums are exactly those the result reports, and a
/// step whose fresh sums would break the cap is undone. Use [`Partitioner::refine`] for constraints and other
/// objectives; this function keeps the defaults (largest part, no empty part
/// created).
///
/// [`Partitioner::refine`]: super::Partitioner::refine
/// [`Partitioner::max_rounds`]: super::Partitioner::max_rounds
/// [`Partitioner::partition`]: super::Partitioner::partition
///
/// # Complexity
///
/// Per step, for one objective dimension, O(n + k h) time where `h` is the
/// size of the extreme part (moves are scanned, the best swap partners are
/// found by a merge-like walk of the two parts' sorted items); for several
/// objective dimensions, swaps are scanned, O(h n d). The number of steps is
/// small in practice and capped by [`Partitioner::max_rounds`] (by default
/// `16 (n + k)`), and the whole pass by a work budget of `max(2^18, 2 (n +
/// k)) d` candidate evaluations (each O(d)): it stops there with the best
/// partition so far, so refinement costs at most a small multiple of
/// building the partition (a deterministic count, not a clock). O(n + k d)
/// extra space.
///
/// # Approximation
///
/// Never worse than its input. Without constraints and for one dimension,
/// when the pass stops because no step improves (not at the step cap), no
/// item of the largest part fits below its sum elsewhere, so the largest
/// part is within `2 - 2/(k + 1)` of the optimum (the bound of such local
/// optima, Finn & Horowitz 1979).
///
/// # References
///
/// G. Finn and E. Horowitz, "A linear time approximation algorithm for
/// multiprocessor scheduling", BIT 19, 1979. The move-and-swap pass follows
/// LoongForge's post-LPT refinement.
///
/// # Errors
///
/// [`Error::NotAPartition`] when `partition` does not hold each item of
/// `items` exactly once, and the errors of [`Partitioner::partition`] for
/// invalid items.
///
/// # Examples
///
/// ```
/// use microbatch::partition::{lpt, refine};
///
/// let items = [8u32, 7, 6, 5, 4];
/// let greedy = lpt(&items, 2)?; // {8, 5, 4} and {7, 6}: 17
/// let better = refine(&items, &greedy)?;
/// assert_eq!(better.objective(), 15); // the optimum
/// # Ok::<(), microbatch::Error>(())
/// ```
pub fn refine<I: Item>(
    items: &[I],
    partition: &Partition<<I::Size as Size>::Total>,
) -> Result<Partition<<I::Size as Size>::Total>, Error> {
    let k = partition.len();
    let inst = instance::instance(items, Dims::Combined, None)?;
    steps::check_parts(inst.n, k, false)?;
    let by_rank = by_rank(&inst, partition, false)?;
    let cfg = steps::unconstrained(k);
    // Without a cap `refined` cannot fail; the error names the dimension
    // all the same.
    refined(&inst, &cfg, by_rank, steps::default_rounds(inst.n, k))
        .map_err(|(dim, best)| steps::cap_exceeded(&cfg, dim, best, false, None))
}

/// The part of each item by rank, from `partition` of the items of `inst`:
/// [`Error::NotAPartition`] when it does not hold every item exactly once,
/// [`Error::UnequalCounts`] under `equal_count` when its parts' counts
/// differ by more than one.
pub(super) fn by_rank<T: Total>(
    inst: &Instance<T>,
    partition: &Partition<T>,
    equal_count: bool,
) -> Result<Vec<usize>, Error> {
    let k = partition.len();
    let mut rank_of = vec![0; inst.n];
    for (r, &i) in inst.index.iter().enumerate() {
        rank_of[i] = r;
    }
    let mut part_of = vec![usize::MAX; inst.n];
    for (p, items_of) in partition.parts().enumerate() {
        for &i in items_of {
            match part_of.get_mut(i) {
                Some(slot) if *slot == usize::MAX => *slot = p,
                _ => {
                    let times = partition
                        .parts()
                        .map(|q| q.iter().filter(|&&j| j == i).count())
                        .sum();
                    return Err(Error::NotAPartition {
                        items: inst.n,
                        index: i,
                        times,
                    });
                }
            }
        }
    }
    if let Some(index) = part_of.iter().position(|&p| p == usize::MAX) {
        return Err(Error::NotAPartition {
            items: inst.n,
            index,
            times: 0,
        });
    }
    if equal_count {
        let fewest = inst.n / k;
        let most = fewest + usize::from(inst.n % k != 0);
        if let Some((part, p)) = partition
            .parts()
            .enumerate()
            .find(|(_, p)| !(fewest..=most).contains(&p.len()))
        {
            return Err(Error::UnequalCounts {
                part,
                items: p.len(),
                fewest,
            });
        }
    }
    Ok(inst.index.iter().map(|&i| part_of[i]).collect())
}

/// Refines the assignment by rank `by_rank` under `cfg` in at most `rounds`
/// improving steps, never worse than its input evaluated the same way; the
/// first (dimension, part sum) above the cap instead, if any.
pub(super) fn refined<T: Total>(
    inst: &Instance<T>,
    cfg: &Config<T>,
    mut by_rank: Vec<usize>,
    rounds: usize,
) -> Result<Partition<T>, (usize, T)> {
    // Floats only: steps are taken on running sums, so a float result
    // could be an ulp above the input evaluated the same way (integer
    // sums are exact and steps only improve them).
    let start = (!<T as TotalOps>::INTEGER).then(|| by_rank.clone());
    run(inst, cfg, &mut by_rank, rounds);
    match (steps::finish(inst, cfg, by_rank, false), start) {
        (Ok(r), Some(start)) => match steps::finish(inst, cfg, start, false) {
            Ok(s) if instance::cmp(r.objective(), s.objective()) == Ordering::Greater => Ok(s),
            _ => Ok(r),
        },
        (refined, _) => refined,
    }
}

/// A candidate step: move `x` to `to` (and `y` the other way, for a swap).
#[derive(Clone, Copy, Debug)]
struct Step {
    from: usize,
    to: usize,
    x: usize,
    y: Option<usize>,
}

/// The refinement state by rank.
struct State<'a, T> {
    inst: &'a Instance<T>,
    cfg: &'a Config<T>,
    /// Ranks of each part, increasing (so decreasing weight).
    lists: Vec<Vec<usize>>,
    sums: Vec<T>,
    osums: Vec<T>,
    /// Per objective dimension, the three largest and three smallest parts.
    top: Vec<[usize; 3]>,
    bottom: Vec<[usize; 3]>,
}

/// The work budget of one refinement, in candidate evaluations of `d`
/// sizes each: `max(WORK_FLOOR, WORK_PER_ITEM (n + k)) d`, so that
/// refinement costs a small multiple of building the partition.
pub(crate) const WORK_PER_ITEM: usize = 2;

/// The least work budget: small inputs refine until no step improves.
pub(crate) const WORK_FLOOR: usize = 1 << 18;

/// The work budget of a refinement of `n` items into `k` parts of `d`
/// dimensions (see [`WORK_PER_ITEM`]).
pub(crate) fn work_budget(n: usize, k: usize, d: usize) -> usize {
    n.saturating_add(k)
        .saturating_mul(WORK_PER_ITEM)
        .max(WORK_FLOOR)
        .saturating_mul(d.max(1))
}

/// Refines an assignment by rank in place, for at most `max_rounds` steps
/// and [`work_budget`] operations.
pub(crate) fn run<T: Total>(
    inst: &Instance<T>,
    cfg: &Config<T>,
    part_of: &mut [usize],
    max_rounds: usize,
) {
    let k = cfg.k;
    if k < 2 || inst.n == 0 {
        return;
    }
    let mut work = Work {
        left: work_budget(inst.n, k, inst.d),
        // A candidate costs O(od + d).
        per_candidate: inst.od + inst.d,
    };
    let mut lists = vec![Vec::new(); k];
    for (r, &p) in part_of.iter().enumerate() {
        lists[p].push(r);
    }
    let sums = inst.sums(k, part_of);
    let osums = inst.objective_sums(k, &sums);
    let mut st = State {
        inst,
        cfg,
        lists,
        sums,
        osums,
        top: vec![[usize::MAX; 3]; inst.od],
        bottom: vec![[usize::MAX; 3]; inst.od],
    };
    // Nothing beats the lower bound.
    let bound = bounds::objective_bound(inst, cfg);
    for _ in 0..max_rounds {
        if work.left == 0 || instance::cmp(st.objective(), bound) != Ordering::Greater {
            break;
        }
        work.spend(k.saturating_mul(inst.od));
        st.extremes();
        let Some(step) = st.best_step(&mut work) else {
            break;
        };
        if !st.apply_checked(step, part_of, &mut work) {
            break;
        }
    }
}

/// The operations refinement may still spend.
struct Work {
    left: usize,
    per_candidate: usize,
}

impl Work {
    /// Spends `ops` operations (at most what is left).
    fn spend(&mut self, ops: usize) {
        self.left = self.left.saturating_sub(ops);
    }
}

impl<T: Total> State<'_, T> {
    fn k(&self) -> usize {
        self.cfg.k
    }

    /// Recomputes the three largest and smallest parts of every objective
    /// dimension (ties by lower index).
    fn extremes(&mut self) {
        let (k, od) = (self.k(), self.inst.od);
        for j in 0..od {
            let mut order: [usize; 3] = [usize::MAX; 3];
            let mut low: [usize; 3] = [usize::MAX; 3];
            for p in 0..k {
                insert3(&mut order, p, |a, b| {
                    instance::cmp(self.osums[b * od + j], self.osums[a * od + j])
                });
                insert3(&mut low, p, |a, b| {
                    instance::cmp(self.osums[a * od + j], self.osums[b * od + j])
                });
            }
            self.top[j] = order;
            self.bottom[j] = low;
        }
    }

    fn objective(&self) -> T {
        instance::objective_value(self.cfg.objective, self.k(), self.inst.od, &self.osums)
    }

    /// The objective after parts `a` and `b` take objective sums `na(j)` and
    /// `nb(j)`, O(od).
    fn objective_after(
        &self,
        a: usize,
        b: usize,
        na: &impl Fn(usize) -> T,
        nb: &impl Fn(usize) -> T,
    ) -> T {
        let od = self.inst.od;
        let mut value = T::ZERO;
        for j in 0..od {
            let (va, vb) = (na(j), nb(j));
            let other = |list: &[usize; 3]| {
                list.iter()
                    .copied()
                    .find(|&p| p != a && p != b && p != usize::MAX)
            };
            let mut hi = instance::max(va, vb);
            if let Some(p) = other(&self.top[j]) {
                hi = instance::max(hi, self.osums[p * od + j]);
            }
            value = value.add(match self.cfg.objective {
                Objective::MaxPart => hi,
                Objective::Spread => {
                    let mut lo = instance::min(va, vb);
                    if let Some(p) = other(&self.bottom[j]) {
                        lo = instance::min(lo, self.osums[p * od + j]);
                    }
                    hi.saturating_sub(lo)
                }
            });
        }
        value
    }

    /// How two parts with objective sums `na(j)` and `nb(j)` stand, for
    /// steps that keep the objective: (the sum over dimensions of the larger
    /// of the two for [`Objective::MaxPart`], else of `|a - b|`; the sum of
    /// `|a - b|`). Lower is better; both fall when the pair gets closer with
    /// its total kept.
    fn pair(&self, na: &impl Fn(usize) -> T, nb: &impl Fn(usize) -> T) -> (T, T) {
        let (mut hi, mut gap) = (T::ZERO, T::ZERO);
        for j in 0..self.inst.od {
            let (a, b) = (na(j), nb(j));
            hi = hi.add(instance::max(a, b));
            gap = gap.add(instance::max(a, b).saturating_sub(instance::min(a, b)));
        }
        match self.cfg.objective {
            Objective::MaxPart => (hi, gap),
            Objective::Spread => (gap, gap),
        }
    }

    /// Whether the step keeps the cap: in every dimension the larger excess
    /// over the cap of the two parts does not grow (so parts within the cap
    /// stay within it, and parts above it get no further above).
    fn within_cap(&self, step: Step) -> bool {
        let Some(cap) = &self.cfg.cap else {
            return true;
        };
        let d = self.inst.d;
        let x = self.inst.sizes(step.x);
        let y = step.y.map(|y| self.inst.sizes(y));
        (0..d).all(|j| {
            let yj = y.map_or(T::ZERO, |y| y[j]);
            let (old_to, old_from) = (self.sums[step.to * d + j], self.sums[step.from * d + j]);
            let to = old_to.add(x[j]).saturating_sub(yj);
            let from = old_from.add(yj).saturating_sub(x[j]);
            let excess = |a: T, b: T| instance::max(a, b).saturating_sub(cap[j]);
            instance::cmp(excess(to, from), excess(old_to, old_from)) != Ordering::Greater
        })
    }

    /// Whether a move keeps the count constraints.
    fn move_allowed(&self, from: usize, to: usize) -> bool {
        let (cf, ct) = (self.lists[from].len(), self.lists[to].len());
        if !self.cfg.allow_empty && cf == 1 {
            return false;
        }
        !self.cfg.equal_count || cf == ct + 1
    }

    /// (objective, [`State::pair`]) after the step.
    fn score(&self, step: Step) -> (T, (T, T)) {
        let inst = self.inst;
        let od = inst.od;
        let (a, b) = (step.from, step.to);
        let na = |j: usize| {
            let y = step.y.map_or(T::ZERO, |y| inst.ow(y, j));
            self.osums[a * od + j]
                .add(y)
                .saturating_sub(inst.ow(step.x, j))
        };
        let nb = |j: usize| {
            let y = step.y.map_or(T::ZERO, |y| inst.ow(y, j));
            self.osums[b * od + j]
                .add(inst.ow(step.x, j))
                .saturating_sub(y)
        };
        (self.objective_after(a, b, &na, &nb), self.pair(&na, &nb))
    }

    /// The best improving step, if any: moves out of (and for the spread
    /// into) the first extreme part of each objective dimension, and swaps
    /// between it and every other part.
    fn best_step(&self, work: &mut Work) -> Option<Step> {
        let (k, od) = (self.k(), self.inst.od);
        let spread = self.cfg.objective == Objective::Spread;
        let mut extreme = vec![false; k];
        for j in 0..od {
            extreme[self.top[j][0]] = true;
            if spread {
                extreme[self.bottom[j][0]] = true;
            }
        }
        let objective = self.objective();
        let mut best: Option<(Step, T, (T, T))> = None;
        let mut consider = |this: &Self, step: Step, base: (T, T)| {
            // Out of budget: the best step so far (it improves) is taken.
            if work.left == 0 {
                return;
            }
            work.spend(work.per_candidate);
            let (obj, pair) = this.score(step);
            let improves = match instance::cmp(obj, objective) {
                Ordering::Less => true,
                Ordering::Equal => instance::cmp(pair.0, base.0) == Ordering::Less,
                Ordering::Greater => false,
            };
            let key = |o: T, p: (T, T)| (Load(o), Load(p.0), Load(p.1));
            let better = match &best {
                None => true,
                Some((_, bo, bp)) => key(obj, pair) < key(*bo, *bp),
            };
            if improves && better && this.within_cap(step) {
                best = Some((step, obj, pair));
            }
        };
        for a in (0..k).filter(|&a| extreme[a]) {
            for b in (0..k).filter(|&b| b != a && !(extreme[b] && b < a)) {
                let base = self.pair(&|j| self.osums[a * od + j], &|j| self.osums[b * od + j]);
                let mut step = |from: usize, to: usize, x: usize, y: Option<usize>| {
                    consider(self, Step { from, to, x, y }, base);
                };
                // Moves into a part at the maximum never help the maximum.
                let directions: &[(usize, usize)] = if spread || extreme[b] {
                    &[(a, b), (b, a)]
                } else {
                    &[(a, b)]
                };
                for &(from, to) in directions {
                    if self.move_allowed(from, to) {
                        for &x in &self.lists[from] {
                            step(from, to, x, None);
                        }
                    }
                }
                if od == 1 {
                    self.balanced_swaps(a, b, |y, x| step(a, b, x, Some(y)));
                } else {
                    for &x in &self.lists[a] {
                        for &y in &self.lists[b] {
                            step(a, b, x, Some(y));
                        }
                    }
                }
            }
        }
        best.map(|(step, _, _)| step)
    }

    /// For one objective dimension, calls `f(y, x)` for each `x` in part `a`
    /// with the two `y` in part `b` around the one that balances the pair:
    /// `sum_a - x + y` against `sum_b + x - y`. Both lists have decreasing
    /// weights, so the balancing position only moves forward: O(|a| + |b|).
    fn balanced_swaps(&self, a: usize, b: usize, mut f: impl FnMut(usize, usize)) {
        let (sa, sb) = (self.osums[a], self.osums[b]);
        let list = &self.lists[b];
        let mut i = 0;
        for &x in &self.lists[a] {
            let wx = self.inst.key(x);
            let target = sb.add(wx).add(wx);
            // Past `i`, part `a` would end no heavier than part `b`.
            while i < list.len() && {
                let wy = self.inst.key(list[i]);
                instance::cmp(sa.add(wy).add(wy), target) == Ordering::Greater
            } {
                i += 1;
            }
            for &y in &list[balancing_window(list.len(), i, 1)] {
                f(y, x);
            }
        }
    }

    /// Applies the step and recomputes the two parts' sums afresh (in rank
    /// order, as [`Instance::sums`]); undoes it and returns `false` when the
    /// fresh sums break the cap where the step's estimate (which rounds
    /// differently for floats) did not.
    fn apply_checked(&mut self, step: Step, part_of: &mut [usize], work: &mut Work) -> bool {
        let before = self.cap_excess(step);
        self.apply(step, part_of, work);
        let after = self.cap_excess(step);
        if after.iter().zip(&before).any(|(a, b)| a > b) {
            let back = Step {
                from: step.to,
                to: step.from,
                x: step.x,
                y: step.y,
            };
            self.apply(back, part_of, work);
            return false;
        }
        true
    }

    /// Per dimension, the larger excess over the cap of the step's two
    /// parts (none without a cap).
    fn cap_excess(&self, step: Step) -> Vec<Load<T>> {
        let Some(cap) = &self.cfg.cap else {
            return Vec::new();
        };
        let d = self.inst.d;
        (0..d)
            .map(|j| {
                let hi = instance::max(self.sums[step.from * d + j], self.sums[step.to * d + j]);
                Load(hi.saturating_sub(cap[j]))
            })
            .collect()
    }

    fn apply(&mut self, step: Step, part_of: &mut [usize], work: &mut Work) {
        self.shift(step.x, step.from, step.to, part_of);
        if let Some(y) = step.y {
            self.shift(y, step.to, step.from, part_of);
        }
        for p in [step.from, step.to] {
            self.resum(p);
            work.spend(self.lists[p].len().saturating_mul(work.per_candidate));
        }
    }

    /// Moves rank `r` from part `from` to part `to`.
    fn shift(&mut self, r: usize, from: usize, to: usize, part_of: &mut [usize]) {
        if let Ok(i) = self.lists[from].binary_search(&r) {
            self.lists[from].remove(i);
        }
        let i = self.lists[to].binary_search(&r).unwrap_or_else(|i| i);
        self.lists[to].insert(i, r);
        part_of[r] = to;
    }

    /// Recomputes part `p`'s sums from its items in rank order: the sums of
    /// [`Instance::sums`] and [`Instance::objective_sums`], exactly.
    fn resum(&mut self, p: usize) {
        let (d, od) = (self.inst.d, self.inst.od);
        let sums = &mut self.sums[p * d..(p + 1) * d];
        sums.fill(T::ZERO);
        for &r in &self.lists[p] {
            for (s, &x) in sums.iter_mut().zip(self.inst.sizes(r)) {
                *s = s.add(x);
            }
        }
        if od == d {
            self.osums[p * od..(p + 1) * od].copy_from_slice(sums);
        } else {
            self.osums[p] = sums.iter().fold(T::ZERO, |acc, &x| acc.add(x));
        }
    }
}

/// The swap partners worth trying around the balancing point of a sorted
/// list of `len` items: the `near` items before position `at` (the first
/// item that would leave the heavier group no heavier than the lighter
/// one) and the `near` from it on. The best balancing swap of an item is
/// with one of the two items around `at`; `near > 1` leaves room for
/// capacities that rule them out.
pub(crate) fn balancing_window(len: usize, at: usize, near: usize) -> core::ops::Range<usize> {
    at.saturating_sub(near).min(len)..at.saturating_add(near).min(len)
}

/// Inserts `p` into the sorted three-slot list by `before` (ties keep the
/// earlier part first).
fn insert3(list: &mut [usize; 3], p: usize, before: impl Fn(usize, usize) -> Ordering) {
    let mut cur = p;
    for slot in list.iter_mut() {
        if *slot == usize::MAX {
            *slot = cur;
            return;
        }
        if before(cur, *slot) == Ordering::Less {
            core::mem::swap(slot, &mut cur);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::partition::Dims;

    #[test]
    fn balancing_window_clamps() {
        assert_eq!(balancing_window(5, 2, 1), 1..3);
        assert_eq!(balancing_window(5, 0, 3), 0..3);
        assert_eq!(balancing_window(5, 5, 3), 2..5);
        assert_eq!(balancing_window(0, 0, 3), 0..0);
    }

    #[test]
    fn three_slot_order() {
        let vals = [5u32, 9, 1, 9, 7];
        let mut top = [usize::MAX; 3];
        for p in 0..vals.len() {
            insert3(&mut top, p, |a, b| vals[b].cmp(&vals[a]));
        }
        assert_eq!(top, [1, 3, 4]);
    }

    #[test]
    fn refines_lpt_to_the_optimum() {
        let inst = instance::instance(&[8u32, 7, 6, 5, 4], Dims::Combined, None).unwrap();
        let cfg = Config {
            k: 2,
            objective: Objective::MaxPart,
            equal_count: false,
            allow_empty: false,
            cap: None,
        };
        let mut part_of = vec![0, 1, 1, 0, 0]; // 17 / 13
        run(&inst, &cfg, &mut part_of, usize::MAX);
        let sums = inst.sums(2, &part_of);
        assert_eq!(sums.iter().max(), Some(&15));
    }
}

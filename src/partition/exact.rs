//! The exact solver: depth-first branch and bound over the parts of each
//! item, with a node budget.

use alloc::vec;
use alloc::vec::Vec;
use core::cmp::Ordering;

use crate::error::Error;
use crate::num::{Item, Total};

use super::bounds;
use super::instance::{self, Config, Instance, Load};
use super::options::{Dims, Objective};
use super::result::{Partition, TotalOf};
use super::{karmarkar_karp, lpt, refine, steps};

/// Partitions `items` into `k` parts optimally, or as well as `node_budget`
/// branch-and-bound nodes allow: the result is the best partition found and
/// [`Partition::proven_optimal`] says whether the search proved it optimal.
///
/// The search starts from the refined LPT partition as the incumbent, takes
/// items in decreasing order and tries each item's parts least-loaded first
/// (the first leaf is LPT), skips parts in the same state as one already
/// tried (so that the `k!` relabelings of a partition are seen once), and
/// prunes a branch when its largest part already reaches the incumbent; it
/// stops early when the incumbent meets the lower bound. This is the
/// sequential branch and bound of Korf's multiway-partitioning survey (the
/// complete greedy algorithm with symmetry pruning), which on small `n * k`
/// is competitive with complete Karmarkar-Karp.
///
/// Use it as an oracle for small inputs, or with a budget as an anytime
/// improvement over the heuristics. [`Partitioner`](super::Partitioner) with
/// [`Algorithm::Exact`](super::Algorithm::Exact) adds constraints and other objectives.
///
/// # Complexity
///
/// At most `node_budget` nodes (candidate placements, tried or pruned),
/// each O(k d) time; O(n + k d) extra space. Without a budget the search is
/// exponential in `n` (the problem is NP-hard): random inputs of 20 items
/// into 3 parts finish in a few milliseconds, while perfect partitions of
/// 20 or more items can need tens of millions of nodes.
///
/// # References
///
/// R. E. Korf, "A complete anytime algorithm for number partitioning",
/// Artificial Intelligence 106, 1998. R. E. Korf, "Multi-way number
/// partitioning", IJCAI 2009. E. L. Schreiber, R. E. Korf and M. D. Moffitt,
/// "Optimal multi-way number partitioning", Journal of the ACM 65(4), 2018.
///
/// # Errors
///
/// As [`lpt`](super::lpt).
///
/// # Examples
///
/// ```
/// use microbatch::partition::exact;
///
/// let p = exact(&[46u32, 39, 27, 26, 16, 13, 10], 3, 1_000_000)?;
/// assert_eq!(p.objective(), 62); // LPT and KK both reach 63
/// assert!(p.proven_optimal());
///
/// // With a tiny budget the result is the best found, not proven.
/// let p = exact(&[46u32, 39, 27, 26, 16, 13, 10], 3, 2)?;
/// assert!(p.objective() >= 62);
/// # Ok::<(), microbatch::Error>(())
/// ```
pub fn exact<I: Item>(
    items: &[I],
    k: usize,
    node_budget: u64,
) -> Result<Partition<TotalOf<I>>, Error> {
    let inst = instance::instance(items, Dims::Combined, None)?;
    steps::check_parts(inst.n, k, false)?;
    let cfg = steps::unconstrained(k);
    let (part_of, proven) = solve(&inst, &cfg, steps::default_rounds(inst.n, k), node_budget);
    Ok(steps::uncapped(&inst, &cfg, part_of, proven))
}

/// [`Algorithm::Exact`](super::Algorithm::Exact) by rank: refined LPT, or
/// refined KK where it is better (with one objective dimension), as the
/// incumbent when within the cap, then branch and bound within
/// `node_budget` nodes. The best assignment and whether it is proven
/// optimal.
pub(super) fn solve<T: Total>(
    inst: &Instance<T>,
    cfg: &Config<T>,
    rounds: usize,
    node_budget: u64,
) -> (Vec<usize>, bool) {
    let mut part_of = lpt::run(inst, cfg);
    refine::run(inst, cfg, &mut part_of, rounds);
    // The incumbent: the better of refined LPT and refined KK (KK only
    // where it sees the objective, one objective dimension).
    if inst.od == 1 {
        let mut kk = karmarkar_karp::run(inst, cfg);
        refine::run(inst, cfg, &mut kk, rounds);
        if rank(inst, cfg, &kk) < rank(inst, cfg, &part_of) {
            part_of = kk;
        }
    }
    let within_cap = cfg.cap.as_ref().map_or(true, |cap| {
        instance::cap_violation(cap, inst.d, &inst.sums(cfg.k, &part_of)).is_none()
    });
    let incumbent = within_cap.then(|| part_of.clone());
    let (found, proven) = run(inst, cfg, incumbent, node_budget);
    (found.unwrap_or(part_of), proven)
}

/// Orders candidate assignments: within the cap first, then by objective.
fn rank<T: Total>(inst: &Instance<T>, cfg: &Config<T>, part_of: &[usize]) -> (bool, Load<T>) {
    let sums = inst.sums(cfg.k, part_of);
    let over = cfg
        .cap
        .as_ref()
        .is_some_and(|cap| instance::cap_violation(cap, inst.d, &sums).is_some());
    let osums = inst.objective_sums(cfg.k, &sums);
    (
        over,
        Load(instance::objective_value(
            cfg.objective,
            cfg.k,
            inst.od,
            &osums,
        )),
    )
}

const NONE: usize = usize::MAX;

/// Branch and bound by rank. Returns the best assignment (the incumbent if
/// nothing better, `None` if there is neither) and whether the search
/// proved it optimal (or, with no assignment, proved that none exists).
pub(crate) fn run<T: Total>(
    inst: &Instance<T>,
    cfg: &Config<T>,
    incumbent: Option<Vec<usize>>,
    node_budget: u64,
) -> (Option<Vec<usize>>, bool) {
    let (n, k, d, od) = (inst.n, cfg.k, inst.d, inst.od);
    let value = |part_of: &[usize]| {
        let sums = inst.sums(k, part_of);
        instance::objective_value(cfg.objective, k, od, &inst.objective_sums(k, &sums))
    };
    let mut best_value = incumbent.as_deref().map(value);
    let mut best = incumbent;
    if n == 0 {
        return (Some(Vec::new()), true);
    }
    let lb = bounds::objective_bound(inst, cfg);
    let at_bound = |v: Option<T>| v.is_some_and(|v| instance::cmp(v, lb) != Ordering::Greater);
    if at_bound(best_value) {
        return (best, true);
    }
    // Remaining weight per objective dimension after each rank (for the
    // spread bound).
    let mut rest = vec![T::ZERO; (n + 1) * od];
    for r in (0..n).rev() {
        for j in 0..od {
            rest[r * od + j] = rest[(r + 1) * od + j].add(inst.ow(r, j));
        }
    }
    let (lo, hi, extra) = cfg.counts(n);
    let mut s = Search {
        saved: vec![T::ZERO; n * (d + od)],
        sums: vec![T::ZERO; k * d],
        osums: vec![T::ZERO; k * od],
        counts: vec![0; k],
        part_of: vec![0; n],
        at_hi: 0,
        empty: k,
        deficit: if cfg.equal_count { lo * k } else { 0 },
        equal_count: cfg.equal_count,
        lo,
        hi,
        extra,
    };
    let mut last = vec![NONE; n];
    let mut nodes = 0u64;
    let mut depth = 0;
    loop {
        let Some(p) = s.next_part(inst, k, last[depth]) else {
            last[depth] = NONE;
            if depth == 0 {
                return (best, true);
            }
            depth -= 1;
            s.unplace(inst, depth, last[depth]);
            continue;
        };
        last[depth] = p;
        // Every candidate counts, placed or not, so that a node costs O(k d).
        nodes += 1;
        if nodes > node_budget {
            return (best, false);
        }
        if !s.fits(inst, cfg, depth, p) {
            continue;
        }
        s.place(inst, depth, p);
        let remaining = n - depth - 1;
        let feasible = s.deficit <= remaining && (cfg.allow_empty || s.empty <= remaining);
        let bound = s.bound(cfg, k, od, &rest[(depth + 1) * od..(depth + 2) * od]);
        let rest_now = &rest[(depth + 1) * od..(depth + 2) * od];
        let promising = best_value.map_or(true, |b| {
            instance::cmp(bound, b) == Ordering::Less && s.room(cfg, k, od, b, rest_now)
        });
        if feasible && promising && depth + 1 == n {
            let v = instance::objective_value(cfg.objective, k, od, &s.osums);
            if best_value.map_or(true, |b| instance::cmp(v, b) == Ordering::Less) {
                best_value = Some(v);
                best = Some(s.part_of.clone());
                if at_bound(best_value) {
                    return (best, true);
                }
            }
        }
        if feasible && promising && depth + 1 < n {
            depth += 1;
        } else {
            s.unplace(inst, depth, p);
        }
    }
}

/// The search state: part sums, counts and the current assignment.
struct Search<T> {
    /// The sums of the part of rank `r` before `r` was placed (`d + od` a
    /// rank), restored when it is taken out: the sums never drift by
    /// rounding, each is the float sum in rank order of its items, as
    /// [`Instance::sums`] computes it, so the cap is checked exactly.
    saved: Vec<T>,
    sums: Vec<T>,
    osums: Vec<T>,
    counts: Vec<usize>,
    part_of: Vec<usize>,
    /// Parts at the larger count `hi` (equal counts).
    at_hi: usize,
    /// Empty parts.
    empty: usize,
    /// Items still needed to bring every part to the smaller count `lo`.
    deficit: usize,
    /// Equal counts: every part gets `lo` or `hi` items, `extra` parts `hi`.
    equal_count: bool,
    lo: usize,
    hi: usize,
    extra: usize,
}

impl<T: Total> Search<T> {
    /// Orders parts for branching: combined load, then the sums, then the
    /// count. Parts in equal states are interchangeable.
    fn state_cmp(&self, inst: &Instance<T>, p: usize, q: usize) -> Ordering {
        let d = inst.d;
        let (sp, sq) = (
            &self.sums[p * d..(p + 1) * d],
            &self.sums[q * d..(q + 1) * d],
        );
        let load = |s: &[T]| s.iter().fold(T::ZERO, |acc, &x| acc.add(x));
        instance::cmp(load(sp), load(sq))
            .then_with(|| sp.iter().map(|&x| Load(x)).cmp(sq.iter().map(|&x| Load(x))))
            .then(self.counts[p].cmp(&self.counts[q]))
    }

    /// The next part to try after `last`: the least state strictly above
    /// `last`'s (lowest index among equal states), so each state once.
    fn next_part(&self, inst: &Instance<T>, k: usize, last: usize) -> Option<usize> {
        let mut next: Option<usize> = None;
        for p in 0..k {
            if last != NONE && self.state_cmp(inst, p, last) != Ordering::Greater {
                continue;
            }
            let better = match next {
                None => true,
                Some(q) => self.state_cmp(inst, p, q) == Ordering::Less,
            };
            if better {
                next = Some(p);
            }
        }
        next
    }

    /// The most items a part may take now under equal counts.
    fn limit(&self) -> usize {
        if self.extra > 0 && self.at_hi == self.extra {
            self.lo
        } else {
            self.hi
        }
    }

    /// Whether rank `r` may go to part `p`: the cap and the counts.
    fn fits(&self, inst: &Instance<T>, cfg: &Config<T>, r: usize, p: usize) -> bool {
        if self.equal_count && self.counts[p] >= self.limit() {
            return false;
        }
        let d = inst.d;
        cfg.cap.as_ref().map_or(true, |cap| {
            inst.sizes(r).iter().enumerate().all(|(j, &x)| {
                instance::cmp(self.sums[p * d + j].add(x), cap[j]) != Ordering::Greater
            })
        })
    }

    /// Puts rank `r` into part `p`.
    fn place(&mut self, inst: &Instance<T>, r: usize, p: usize) {
        self.shift(inst, r, p, true);
        self.part_of[r] = p;
    }

    /// Takes rank `r` out of part `p` again.
    fn unplace(&mut self, inst: &Instance<T>, r: usize, p: usize) {
        self.shift(inst, r, p, false);
    }

    /// Adds rank `r` to part `p`, or removes it, with the counters.
    fn shift(&mut self, inst: &Instance<T>, r: usize, p: usize, add: bool) {
        let (d, od) = (inst.d, inst.od);
        let saved = &mut self.saved[r * (d + od)..(r + 1) * (d + od)];
        let (sums, osums) = (
            &mut self.sums[p * d..(p + 1) * d],
            &mut self.osums[p * od..(p + 1) * od],
        );
        if add {
            saved[..d].copy_from_slice(sums);
            saved[d..].copy_from_slice(osums);
            for (s, &x) in sums.iter_mut().zip(inst.sizes(r)) {
                *s = s.add(x);
            }
            for (j, s) in osums.iter_mut().enumerate() {
                *s = s.add(inst.ow(r, j));
            }
        } else {
            sums.copy_from_slice(&saved[..d]);
            osums.copy_from_slice(&saved[d..]);
        }
        // The counters as functions of the count, before and after.
        let (before, after) = if add {
            (self.counts[p], self.counts[p] + 1)
        } else {
            (self.counts[p], self.counts[p] - 1)
        };
        self.counts[p] = after;
        self.empty = self.empty + usize::from(after == 0) - usize::from(before == 0);
        if self.equal_count {
            // The deficit counts items, not parts: the sum over parts of
            // `lo - count` where the count is below `lo`.
            self.deficit =
                self.deficit + self.lo.saturating_sub(after) - self.lo.saturating_sub(before);
            if self.extra > 0 {
                self.at_hi =
                    self.at_hi + usize::from(after == self.hi) - usize::from(before == self.hi);
            }
        }
    }

    /// For the largest part in one objective dimension: whether the parts
    /// have room for the remaining weight `rest` while all staying below
    /// `best` (the sum over parts of `best - 1 - sum`, or `best - sum` for
    /// floats, must reach it). Always `true` otherwise.
    fn room(&self, cfg: &Config<T>, k: usize, od: usize, best: T, rest: &[T]) -> bool {
        if cfg.objective != Objective::MaxPart || od != 1 {
            return true;
        }
        let below = best.saturating_sub(instance::unit());
        let slack = (0..k).fold(T::ZERO, |acc, p| {
            acc.add(below.saturating_sub(self.osums[p]))
        });
        match instance::cmp(slack, rest[0]) {
            Ordering::Greater => true,
            Ordering::Equal => instance::is_integer::<T>(),
            Ordering::Less => false,
        }
    }

    /// A lower bound on the objective of every completion: the largest
    /// parts so far (sums only grow), or for the spread the largest part
    /// minus what the smallest can still reach with all remaining weight.
    fn bound(&self, cfg: &Config<T>, k: usize, od: usize, rest: &[T]) -> T {
        let mut value = T::ZERO;
        for (j, &rest) in rest.iter().enumerate() {
            let (mut hi, mut lo) = (self.osums[j], self.osums[j]);
            for p in 1..k {
                hi = instance::max(hi, self.osums[p * od + j]);
                lo = instance::min(lo, self.osums[p * od + j]);
            }
            value = value.add(match cfg.objective {
                Objective::MaxPart => hi,
                Objective::Spread => hi.saturating_sub(lo.add(rest)),
            });
        }
        value
    }
}

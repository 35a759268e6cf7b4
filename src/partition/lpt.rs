//! Longest processing time first (LPT): each item, largest first, to the
//! least-loaded part.

use alloc::collections::BinaryHeap;
use alloc::vec;
use alloc::vec::Vec;
use core::cmp::{Ordering, Reverse};

use crate::error::Error;
use crate::grouped::Grouped;
use crate::num::{Item, SizeOps, Total};

use super::bounds;
use super::instance::{self, Config, Instance, Load};
use super::load_heap::LoadHeap;
use super::load_queue::LoadQueue;
use super::options::Dims;
use super::result::{Partition, TotalOf};
use super::steps;

/// Partitions `items` into `k` parts with LPT: items in decreasing order
/// (ties by id, then input index); the first `k` open the `k` parts, each
/// later one goes to the least-loaded part. Among parts of equal load the
/// one that reached that load first takes the item (first come, first
/// served; parts opened by equal items come in index order). Any rule among
/// equal loads gives the same part sums up to the numbering of the parts;
/// this one keeps the queue O(1) a placement.
///
/// Items with several dimensions go by their combined weight (the sum over
/// dimensions). No part is left empty; use [`Partitioner`](super::Partitioner) for constraints,
/// other objectives and refinement.
///
/// # Complexity
///
/// O(n log n + n log k) time and O(n + k) extra space in general: a sort
/// (a radix sort for integer sizes below 2^32), then a 4-ary heap of the `k`
/// parts keyed by (sum, arrival). Integer sizes below `max(2^16, n)` take
/// O(n + largest) time instead (plus sorting equal sizes by id, for items
/// with ids): a counting sort by size, then a bucket queue with one bucket
/// per load in a circular window of `largest + 1` loads (all loads lie
/// within the largest item of the least one), a placement costing O(1) plus
/// a search of a 64-ary bitset of the buckets (O(log_64 largest)).
/// `BENCHMARKS.md` has both paths at 10^6 items against `sort_unstable`.
///
/// # Approximation
///
/// The largest part is at most `4/3 - 1/(3k)` times the optimum (Graham
/// 1969), and at most the optimum plus the smallest item of the part that
/// ends largest.
///
/// # References
///
/// R. L. Graham, "Bounds on multiprocessing timing anomalies", SIAM Journal
/// on Applied Mathematics 17(2), 1969.
///
/// # Errors
///
/// [`Error::ZeroParts`] for `k == 0`, [`Error::TooManyParts`] for `k > n`,
/// and [`Error::DimensionMismatch`], [`Error::NoDimensions`] or
/// [`Error::Invalid`] at a [size](crate::Locator::Size) for invalid items.
///
/// # Examples
///
/// ```
/// use microbatch::partition::lpt;
///
/// let p = lpt(&[8u32, 7, 6, 5, 4], 2)?;
/// assert_eq!(p.part(0), &[0, 3]); // 8 + 5
/// // 7 + 6 reached 13 before 8 + 5 did, so the 4 joins them.
/// assert_eq!(p.part(1), &[1, 2, 4]);
/// assert_eq!(p.objective(), 17); // the optimum is 15: {8, 7}, {6, 5, 4}
/// # Ok::<(), microbatch::Error>(())
/// ```
pub fn lpt<I: Item>(items: &[I], k: usize) -> Result<Partition<TotalOf<I>>, Error> {
    if let Some(p) = counting(items, k) {
        return Ok(p);
    }
    let inst = instance::instance(items, Dims::Combined, None)?;
    steps::check_parts(inst.n, k, false)?;
    let cfg = steps::unconstrained(k);
    let part_of = run(&inst, &cfg);
    Ok(steps::uncapped(&inst, &cfg, part_of, false))
}

/// The most size values (`largest + 1`) that [`counting`] counts, and that
/// [`LoadQueue`] takes, for `n` items: one per item (or 2^16), so that the
/// counts and the buckets (12 bytes a value together) stay O(n) in time and
/// memory.
fn value_limit(n: usize) -> usize {
    n.max(1 << 16)
}

/// LPT without constraints for one-dimensional integer items whose sizes
/// are few enough to count (below [`value_limit`]): the partition of the
/// general path (sort, then [`heap`]), in O(n + largest) time (plus sorting
/// items of equal size by id, if they have ids).
///
/// A counting pass gives the size classes and a counting sort the input
/// indices in rank order (size descending, then id, then index), one slot a
/// rank.
/// LPT runs over the ranks, placing each item on the part the
/// [`LoadQueue`] gives and writing the part into the item's slot; a last
/// pass over the slots writes each part's items, in rank order, to their
/// place in the result.
///
/// `None`, having only read the items, when they do not qualify (invalid
/// input included: the general path reports it).
pub(crate) fn counting<I: Item>(items: &[I], k: usize) -> Option<Partition<TotalOf<I>>> {
    let n = items.len();
    // Fewer than `u32::MAX` items: counts and parts in `u32`.
    if k == 0 || k > n || n >= u32::MAX as usize {
        return None;
    }
    let mut largest = 0usize;
    for it in items {
        if it.dims() != 1 {
            return None;
        }
        largest = largest.max(it.size(0).to_index()?);
    }
    if largest >= value_limit(n) {
        return None;
    }
    // Sums fit in `u64`: fewer than 2^32 items below `max(2^16, n)`.
    let size = |it: &I| it.size(0).to_index().unwrap_or(0);
    let mut counts = vec![0u32; largest + 1];
    for it in items {
        counts[size(it)] += 1;
    }
    let classes = Classes::of(&counts);

    let bits = |x: usize| usize::BITS - x.leading_zeros();
    let shift = bits(n - 1);
    let (out, offsets, loads) = if shift + bits(k - 1) <= 32 {
        place::<u32, I>(items, k, counts, &classes, shift)
    } else {
        place::<u64, I>(items, k, counts, &classes, shift)
    };

    let total = |x: u64| instance::u128_total::<TotalOf<I>>(u128::from(x));
    let sums: Vec<_> = loads.iter().map(|&l| total(l)).collect();
    let objective = total(loads.iter().copied().max().unwrap_or(0));
    let sum = loads.iter().map(|&l| u128::from(l)).sum::<u128>();
    let bound = bounds::bound_from(
        n,
        k,
        None,
        total(largest as u64),
        instance::u128_total(sum),
        |ranks| total(classes.sum(ranks)),
    );
    let proven = instance::cmp(objective, bound) != Ordering::Greater;
    Some(Partition::from_flat(
        out, offsets, 1, sums, objective, bound, proven,
    ))
}

/// The LPT of [`counting`] from the counts by size and their classes:
/// the items of each part in rank order, the offsets of the parts and
/// their loads. `S` holds an item's index and its part, `index | part <<
/// shift`, one slot by rank.
fn place<S: Slot, I: Item>(
    items: &[I],
    k: usize,
    counts: Vec<u32>,
    classes: &Classes,
    shift: u32,
) -> (Vec<usize>, Vec<usize>, Vec<u64>) {
    let n = items.len();
    let size = |it: &I| it.size(0).to_index().unwrap_or(0);
    let largest = counts.len() - 1;

    // The input indices in rank order: a counting sort.
    let mut rank = counts;
    let mut start = 0u32;
    for v in (0..rank.len()).rev() {
        (rank[v], start) = (start, start + rank[v]);
    }
    let mut slots = vec![S::default(); n];
    for (i, it) in items.iter().enumerate() {
        let v = size(it);
        slots[rank[v] as usize] = S::pack(i, 0, shift);
        rank[v] += 1;
    }
    // Ids break ties: each class by id, then index.
    if core::mem::size_of::<I::Id>() != 0 {
        let mut start = 0;
        for &end in &classes.ends {
            if end - start > 1 {
                slots[start..end].sort_unstable_by(|a, b| {
                    let (a, b) = (a.index(shift), b.index(shift));
                    items[a].id().cmp(items[b].id()).then(a.cmp(&b))
                });
            }
            start = end;
        }
    }

    // LPT by rank: the first `k` ranks open the parts, the others go to
    // the part the queue gives.
    let mut counts = vec![1usize; k];
    let mut loads = Vec::with_capacity(k);
    let mut queue = None;
    let mut r = 0;
    for (&end, &v) in classes.ends.iter().zip(&classes.values) {
        while r < end.min(k) {
            slots[r] = slots[r].with_part(r, shift);
            loads.push(v);
            r += 1;
        }
        if r == end {
            continue;
        }
        let queue = queue
            .get_or_insert_with(|| LoadQueue::new(core::mem::take(&mut loads), largest as u64));
        for slot in &mut slots[r..end] {
            let p = queue.least().unwrap_or(0);
            queue.raise_least(v);
            *slot = slot.with_part(p, shift);
            counts[p] += 1;
        }
        r = end;
    }
    let loads = queue.map_or(loads, LoadQueue::into_loads);

    let ranked = slots.iter().map(|s| (s.part(shift), s.index(shift)));
    let (out, offsets) = Grouped::scatter(counts, ranked).into_flat();
    (out, offsets, loads)
}

/// An item's index and its part in one integer, `index | part << shift`.
trait Slot: Copy + Default {
    fn pack(index: usize, part: usize, shift: u32) -> Self;
    fn with_part(self, part: usize, shift: u32) -> Self;
    fn index(self, shift: u32) -> usize;
    fn part(self, shift: u32) -> usize;
}

// In `u64` arithmetic: `shift` can be 32, as wide as `usize` on 32-bit
// targets.
macro_rules! slot {
    ($($t:ty),*) => {$(
        impl Slot for $t {
            #[inline]
            fn pack(index: usize, part: usize, shift: u32) -> Self {
                (index as u64 | (part as u64) << shift) as $t
            }
            #[inline]
            fn with_part(self, part: usize, shift: u32) -> Self {
                self | ((part as u64) << shift) as $t
            }
            #[inline]
            fn index(self, shift: u32) -> usize {
                (self as u64 & ((1u64 << shift) - 1)) as usize
            }
            #[inline]
            fn part(self, shift: u32) -> usize {
                (self as u64 >> shift) as usize
            }
        }
    )*};
}
slot!(u32, u64);

/// The non-empty size classes in decreasing order of size, as rank ranges.
struct Classes {
    /// The end rank of each class (its start is the end of the one before).
    ends: Vec<usize>,
    /// The size of each class.
    values: Vec<u64>,
}

impl Classes {
    /// The classes of the counts by size.
    fn of(counts: &[u32]) -> Self {
        let (mut ends, mut values) = (Vec::new(), Vec::new());
        let mut end = 0;
        for (v, &c) in counts.iter().enumerate().rev().filter(|(_, &c)| c > 0) {
            end += c as usize;
            ends.push(end);
            values.push(v as u64);
        }
        Classes { ends, values }
    }

    /// The sum of the sizes of the items of ranks `ranks`, in O(log C + the
    /// classes they span).
    fn sum(&self, ranks: core::ops::Range<usize>) -> u64 {
        let mut c = self.ends.partition_point(|&end| end <= ranks.start);
        let mut from = ranks.start;
        let mut sum = 0;
        while from < ranks.end && c < self.ends.len() {
            let to = self.ends[c].min(ranks.end);
            sum += (to - from) as u64 * self.values[c];
            from = to;
            c += 1;
        }
        sum
    }
}

/// LPT by rank: the heap for one objective dimension, else a scan of the
/// parts for the placement that least raises the objective.
pub(crate) fn run<T: Total>(inst: &Instance<T>, cfg: &Config<T>) -> Vec<usize> {
    if inst.od == 1 && (cfg.cap.is_none() || inst.d == 1) {
        heap(inst, cfg)
    } else {
        scan(inst, cfg)
    }
}

/// One objective dimension: the first `k` items open the `k` parts, then
/// each item goes to the least-loaded part, among equal loads the one that
/// reached its load first: from a [`LoadQueue`] for small integer weights,
/// else from a [`LoadHeap`] (or, for integer sums beyond `u64`, a binary
/// heap over (load, arrival, part)). With a
/// one-dimensional cap the least-loaded part is the only candidate anyway.
fn heap<T: Total>(inst: &Instance<T>, cfg: &Config<T>) -> Vec<usize> {
    let opened = 0..cfg.k.min(inst.n);
    if let Some(largest) = small_largest(inst) {
        let loads = opened.map(|r| weight(inst, r)).collect();
        let queue = LoadQueue::new(loads, largest);
        return greedy(inst, cfg, Ints { queue, inst });
    }
    let total = (0..inst.n).fold(T::ZERO, |acc, r| acc.add(inst.key(r)));
    let loads = opened.clone().map(|r| inst.key(r)).collect();
    if let Some(heap) = LoadHeap::new(loads, inst.n, total) {
        return greedy(inst, cfg, Packed { heap, inst });
    }
    let heap = opened.map(|p| Reverse((Load(inst.key(p)), p, p))).collect();
    greedy(
        inst,
        cfg,
        Heap {
            heap,
            arrival: cfg.k,
            inst,
        },
    )
}

/// The largest combined weight, for integer weights below [`value_limit`]
/// whose sums fit in `u64` (fewer than 2^32 items and parts).
fn small_largest<T: Total>(inst: &Instance<T>) -> Option<u64> {
    if inst.n == 0 {
        return None;
    }
    // Ranks are in decreasing combined weight.
    let largest = u64::try_from(instance::as_u128(inst.key(0))?).ok()?;
    let small = u32::try_from(inst.n).is_ok_and(|n| n < u32::MAX)
        && usize::try_from(largest).is_ok_and(|l| l < value_limit(inst.n));
    small.then_some(largest)
}

/// The combined weight of rank `r` as `u64` (for [`small_largest`]
/// instances).
fn weight<T: Total>(inst: &Instance<T>, r: usize) -> u64 {
    instance::as_u128(inst.key(r)).map_or(0, |w| w as u64)
}

/// The parts of [`greedy`], by load and arrival.
trait Parts {
    /// The least-loaded part that reached its load first.
    fn least(&mut self) -> Option<usize>;
    /// Adds rank `r` to the part [`Parts::least`] just returned.
    fn raise_least(&mut self, r: usize);
    /// Removes the part [`Parts::least`] just returned.
    fn remove_least(&mut self);
}

/// Small integer weights: a [`LoadQueue`].
struct Ints<'a, T> {
    queue: LoadQueue,
    inst: &'a Instance<T>,
}

impl<T: Total> Parts for Ints<'_, T> {
    fn least(&mut self) -> Option<usize> {
        self.queue.least()
    }
    fn raise_least(&mut self, r: usize) {
        self.queue.raise_least(weight(self.inst, r));
    }
    fn remove_least(&mut self) {
        self.queue.remove_least();
    }
}

/// Large integer or float weights: a [`LoadHeap`].
struct Packed<'a, T> {
    heap: LoadHeap<T>,
    inst: &'a Instance<T>,
}

impl<T: Total> Parts for Packed<'_, T> {
    fn least(&mut self) -> Option<usize> {
        self.heap.least()
    }
    fn raise_least(&mut self, r: usize) {
        self.heap.raise_least(self.inst.key(r));
    }
    fn remove_least(&mut self) {
        self.heap.remove_least();
    }
}

/// Any weights (integer sums beyond `u64`): a binary heap of (load,
/// arrival, part), where arrivals count up as parts are raised.
struct Heap<'a, T> {
    heap: BinaryHeap<Reverse<(Load<T>, usize, usize)>>,
    arrival: usize,
    inst: &'a Instance<T>,
}

impl<T: Total> Parts for Heap<'_, T> {
    fn least(&mut self) -> Option<usize> {
        self.heap.peek().map(|top| top.0 .2)
    }
    fn raise_least(&mut self, r: usize) {
        if let Some(mut top) = self.heap.peek_mut() {
            let Reverse((load, arrival, _)) = &mut *top;
            load.0 = load.0.add(self.inst.key(r));
            *arrival = self.arrival;
            self.arrival += 1;
        }
    }
    fn remove_least(&mut self) {
        self.heap.pop();
    }
}

/// LPT by rank from a queue holding the first `k` ranks' parts. Equal
/// counts: at most `hi` items a part, and only `extra` parts may reach
/// `hi`; after that the limit drops to `lo`. Full parts leave the queue
/// when they come up.
fn greedy<T: Total>(inst: &Instance<T>, cfg: &Config<T>, mut queue: impl Parts) -> Vec<usize> {
    let (n, k) = (inst.n, cfg.k);
    let mut part_of: Vec<usize> = (0..n).map(|r| r.min(k)).collect();
    if n <= k {
        return part_of;
    }
    let mut limit = CountLimit::new(cfg, n);
    let mut counts = vec![1; k];
    for (r, slot) in part_of.iter_mut().enumerate().skip(k) {
        let p = loop {
            match queue.least() {
                Some(p) if limit.full(counts[p]) => queue.remove_least(),
                Some(p) => break p,
                // Unreachable: the counts add up to `n`.
                None => return part_of,
            }
        };
        *slot = p;
        queue.raise_least(r);
        counts[p] += 1;
        limit.count(counts[p]);
    }
    part_of
}

/// The item counts that equal counts allow: at most `hi` items a part, and
/// only `extra` parts may reach `hi`; after that the limit drops to `lo`.
/// No limit without equal counts.
struct CountLimit {
    lo: usize,
    hi: usize,
    extra: usize,
    at_hi: usize,
    limit: usize,
}

impl CountLimit {
    fn new<T: Total>(cfg: &Config<T>, n: usize) -> Self {
        let (lo, hi, extra) = cfg.counts(n);
        let limit = if cfg.equal_count { hi } else { usize::MAX };
        // Without equal counts no part is ever counted towards `hi`.
        let extra = if cfg.equal_count { extra } else { 0 };
        CountLimit {
            lo,
            hi,
            extra,
            at_hi: 0,
            limit,
        }
    }

    /// Whether a part with `count` items may take no more.
    #[inline]
    fn full(&self, count: usize) -> bool {
        count >= self.limit
    }

    /// A part now holds `count` items.
    #[inline]
    fn count(&mut self, count: usize) {
        if self.extra > 0 && count == self.hi {
            self.at_hi += 1;
            if self.at_hi == self.extra {
                self.limit = self.lo;
            }
        }
    }
}

/// Several objective dimensions or a cap in several dimensions: each item
/// to the part where it fits the cap (if any does) and least raises the
/// objective, ties by combined load, then the part that reached its load
/// first (as in [`heap`]). O(n k d).
fn scan<T: Total>(inst: &Instance<T>, cfg: &Config<T>) -> Vec<usize> {
    let (k, d, od) = (cfg.k, inst.d, inst.od);
    let mut limit = CountLimit::new(cfg, inst.n);
    let mut part_of = vec![0; inst.n];
    let mut sums = vec![T::ZERO; k * d];
    let mut osums = vec![T::ZERO; k * od];
    let mut loads = vec![T::ZERO; k];
    let mut counts = vec![0usize; k];
    // The rank that last raised each part's load.
    let mut arrival = vec![0usize; k];
    let mut top = vec![T::ZERO; od];
    for (r, slot) in part_of.iter_mut().enumerate() {
        let x = inst.sizes(r);
        // (does not fit, objective after, load, arrival, part); the first
        // `k` items open the parts.
        let mut best: Option<(bool, T, T, usize, usize)> =
            (r < k).then_some((false, T::ZERO, T::ZERO, r, r));
        for p in (0..k).filter(|_| r >= k) {
            if limit.full(counts[p]) {
                continue;
            }
            let misfit = cfg.cap.as_ref().is_some_and(|cap| {
                (0..d)
                    .any(|j| instance::cmp(sums[p * d + j].add(x[j]), cap[j]) == Ordering::Greater)
            });
            let after = (0..od).fold(T::ZERO, |acc, j| {
                acc.add(instance::max(top[j], osums[p * od + j].add(inst.ow(r, j))))
            });
            let cand = (misfit, after, loads[p], arrival[p], p);
            let better = match &best {
                None => true,
                Some(b) => {
                    (cand.0, Load(cand.1), Load(cand.2), cand.3) < (b.0, Load(b.1), Load(b.2), b.3)
                }
            };
            if better {
                best = Some(cand);
            }
        }
        let Some((_, _, _, _, p)) = best else {
            continue;
        };
        *slot = p;
        arrival[p] = r;
        for (j, &xj) in x.iter().enumerate() {
            sums[p * d + j] = sums[p * d + j].add(xj);
        }
        for (j, t) in top.iter_mut().enumerate() {
            osums[p * od + j] = osums[p * od + j].add(inst.ow(r, j));
            *t = instance::max(*t, osums[p * od + j]);
        }
        loads[p] = loads[p].add(inst.key(r));
        counts[p] += 1;
        limit.count(counts[p]);
    }
    part_of
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::partition::Dims;

    fn cfg(k: usize, equal_count: bool) -> Config<u128> {
        Config {
            k,
            objective: crate::partition::Objective::MaxPart,
            equal_count,
            allow_empty: false,
            cap: None,
        }
    }

    #[test]
    fn heap_and_scan_agree_on_one_dimension() {
        let items = [9u32, 7, 7, 5, 4, 4, 3, 2, 2, 1, 0, 0];
        let inst = instance::instance(&items, Dims::Combined, None).unwrap();
        for k in 1..=5 {
            for eq in [false, true] {
                let c = cfg(k, eq);
                assert_eq!(heap(&inst, &c), scan(&inst, &c), "k = {k}, equal = {eq}");
            }
        }
    }

    #[test]
    fn queue_agrees_with_the_generic_heap() {
        let ints: Vec<u32> = (0..5000u32).map(|i| (i * 7919 + 13) % 1009).collect();
        let floats: Vec<ordered_float::NotNan<f64>> = ints
            .iter()
            .map(|&x| ordered_float::NotNan::new(f64::from(x)).unwrap())
            .collect();
        let a = instance::instance(&ints, Dims::Combined, None).unwrap();
        let b = instance::instance(&floats, Dims::Combined, None).unwrap();
        for k in [1, 2, 3, 5, 64, 1000] {
            let cb = Config {
                k,
                objective: crate::partition::Objective::MaxPart,
                equal_count: false,
                allow_empty: false,
                cap: None,
            };
            // Integers take the bucket queue, floats the binary heap.
            assert_eq!(heap(&a, &cfg(k, false)), heap(&b, &cb), "k = {k}");
        }
    }

    /// The general path, the instance in decreasing order, then [`heap`]
    /// (or [`scan`], the O(n k) oracle of both).
    fn general<I: Item>(items: &[I], k: usize, oracle: bool) -> Partition<TotalOf<I>> {
        let inst = instance::instance(items, Dims::Combined, None).unwrap();
        let c = Config {
            k,
            objective: crate::partition::Objective::MaxPart,
            equal_count: false,
            allow_empty: false,
            cap: None,
        };
        let part_of = if oracle {
            scan(&inst, &c)
        } else {
            heap(&inst, &c)
        };
        crate::partition::steps::finish(&inst, &c, part_of, false)
            .unwrap_or_else(|_| unreachable!())
    }

    #[test]
    fn counting_path_equals_the_general_path_and_the_oracle() {
        let mut next = crate::test_rng::uniform(0x2545_F491_4F6C_DD1Du64);
        // (n, largest size, k, whether the counting path takes it)
        for (n, largest, k, counted) in [
            (1usize, 0u64, 1usize, true),
            (5, 0, 5, true),
            (10, 1, 3, true),
            (100, 3, 7, true),
            (1000, 50, 64, true),
            (3000, 16384, 1024, true),
            (3000, 65_535, 2, true),
            (3000, 65_536, 2, false), // 2^16 + 1 size values, more than n
            (70_000, 69_999, 3, true),
            (70_000, 70_000, 3, false),
            (4096, 2, 4096, true),
            (4097, 1, 4096, true),
        ] {
            let mut items: Vec<u32> = (0..n).map(|_| next(largest + 1) as u32).collect();
            // The largest size itself decides, not the draw.
            items[n / 2] = largest as u32;
            let at = alloc::format!("n = {n}, largest = {largest}, k = {k}");
            match counting(&items, k) {
                Some(fast) => {
                    assert!(counted, "{at}: counted");
                    assert_eq!(fast, general(&items, k, false), "{at}");
                    if n * k <= 4_000_000 {
                        assert_eq!(fast, general(&items, k, true), "{at}: oracle");
                    }
                }
                None => assert!(!counted, "{at}: not counted"),
            }
        }
    }

    /// Items with ids: each class of equal sizes in id order, then index.
    #[test]
    fn counting_path_sorts_equal_sizes_by_id() {
        let mut next = crate::test_rng::uniform(0x9E37_79B9_7F4A_7C15u64);
        for (n, largest, k) in [(10usize, 2u64, 3usize), (500, 9, 16), (3000, 200, 64)] {
            let items: Vec<(u16, u32)> = (0..n)
                .map(|_| (next(20) as u16, next(largest + 1) as u32))
                .collect();
            let fast = counting(&items, k).unwrap();
            assert_eq!(fast, general(&items, k, false), "n = {n}, k = {k}");
            assert_eq!(fast, general(&items, k, true), "n = {n}, k = {k}: oracle");
        }
        // Equal sizes: the smaller id opens the first part.
        let p = counting(&[("b", 5u32), ("a", 5), ("c", 5)], 3).unwrap();
        assert_eq!(p.into_parts(), [[1], [0], [2]]);
    }

    #[test]
    fn counting_path_leaves_other_items_to_the_general_path() {
        let big = [1u64 << 40, 3, 2];
        assert!(counting(&big, 2).is_none());
        let floats = crate::not_nan(&[1.0f64, 1.0, 1.0]).unwrap();
        assert!(counting(&floats, 2).is_none());
        let pairs = [[1u32, 2], [3, 4]];
        assert!(counting(&pairs, 2).is_none());
        assert!(counting(&[1u32, 2], 3).is_none());
        assert!(counting(&[1u32, 2], 0).is_none());
        // Each still gets its LPT partition from `lpt`.
        assert_eq!(lpt(&big, 2).unwrap().sum(1), &[5]);
    }

    /// The four queues (bucket queue, packed heap, binary heap, and the scan
    /// as the oracle) give the same LPT, with and without equal counts.
    #[test]
    fn every_queue_gives_the_same_lpt() {
        let mut next = crate::test_rng::uniform(0x2545_F491_4F6C_DD1D);
        for (n, largest) in [(50usize, 3u64), (200, 1000), (333, 1), (1000, 40)] {
            let items: Vec<u32> = (0..n).map(|_| next(largest + 1) as u32).collect();
            let inst = instance::instance(&items, Dims::Combined, None).unwrap();
            for k in [1, 2, 7, 16, n / 3] {
                for eq in [false, true] {
                    let c = cfg(k, eq);
                    let opened = 0..k;
                    let ints = Ints {
                        queue: LoadQueue::new(
                            opened.clone().map(|r| weight(&inst, r)).collect(),
                            u64::from(items.iter().copied().max().unwrap()),
                        ),
                        inst: &inst,
                    };
                    let total = inst.sums(1, &alloc::vec![0; n])[0];
                    let packed = Packed {
                        heap: LoadHeap::new(
                            opened.clone().map(|r| inst.key(r)).collect(),
                            n,
                            total,
                        )
                        .unwrap(),
                        inst: &inst,
                    };
                    let binary = Heap {
                        heap: opened.map(|p| Reverse((Load(inst.key(p)), p, p))).collect(),
                        arrival: k,
                        inst: &inst,
                    };
                    let oracle = scan(&inst, &c);
                    let at = alloc::format!("n = {n}, k = {k}, equal = {eq}");
                    assert_eq!(greedy(&inst, &c, ints), oracle, "{at}: bucket queue");
                    assert_eq!(greedy(&inst, &c, packed), oracle, "{at}: packed heap");
                    assert_eq!(greedy(&inst, &c, binary), oracle, "{at}: binary heap");
                }
            }
        }
    }

    /// Sums beyond `u64` take the binary heap, and still the LPT of the scan.
    #[test]
    fn huge_sums_take_the_binary_heap() {
        let items: Vec<u64> = (0..40u64).map(|i| u64::MAX / 8 - i % 5).collect();
        let inst = instance::instance(&items, Dims::Combined, None).unwrap();
        assert!(small_largest(&inst).is_none());
        let total = inst.sums(1, &[0; 40])[0];
        assert!(LoadHeap::new(alloc::vec![0u128; 3], 40, total).is_none());
        for k in [1, 3, 8] {
            assert_eq!(
                heap(&inst, &cfg(k, false)),
                scan(&inst, &cfg(k, false)),
                "k = {k}"
            );
        }
    }

    #[test]
    fn zero_weights_fill_every_part() {
        let inst = instance::instance(&[0u32; 5], Dims::Combined, None).unwrap();
        let part_of = heap(&inst, &cfg(5, false));
        assert_eq!(part_of, [0, 1, 2, 3, 4]);
    }
}

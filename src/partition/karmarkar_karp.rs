//! The Karmarkar-Karp largest differencing method for `k` parts.

use alloc::collections::BinaryHeap;
use alloc::vec;
use alloc::vec::Vec;
use core::cmp::{Ordering, Reverse};

use crate::error::Error;
use crate::num::{Item, Total};

use super::instance::{self, Config, Instance, Load};
use super::options::Dims;
use super::result::{Partition, TotalOf};
use super::steps;

/// Partitions `items` into `k` parts with the Karmarkar-Karp largest
/// differencing method (KK).
///
/// Every item starts as a partial partition of its own: a `k`-tuple of part
/// sums, the item and `k - 1` empty parts. KK repeatedly takes the two
/// partial partitions of largest spread (largest minus smallest part) and
/// merges them, pairing the largest part of one with the smallest of the
/// other, until one is left. Ties go by id, then input index.
///
/// Parts of equal sum and item count are ordered by a fixed rule, never by
/// a sort's handling of ties (so the result does not depend on the standard
/// library's version): within a partial partition, a part that takes an
/// item (or a new one-item part) goes after the parts equal to it; a merge
/// lists `a`'s parts that meet an empty part of `b` first, then the
/// combined parts in the order of `a`'s parts, then `b`'s parts that meet
/// an empty part of `a` (`a` is the partial partition taken first). Only
/// which items share a part among equal parts depends on this rule: every
/// part's (combined) sum and item count, and the objective, do not.
///
/// Items with several dimensions go by their combined weight. No part is
/// left empty; use [`Partitioner`](super::Partitioner) for constraints (equal counts are met by
/// starting from groups of `k` consecutive items), other objectives and
/// refinement.
///
/// # Complexity
///
/// O(n log n + n k log k) time. Singletons are never materialized: a merge
/// with one costs O(log k) (a tuple of more than a few non-empty parts keeps
/// them in a heap while it takes singletons, so that heavy-tailed weights,
/// where one tuple of the largest items takes item after item, cost no more
/// than uniform ones). Item lists are linked through one next-index array so
/// that a merge of two tuples moves no item and costs O(m + c log c) for the
/// `m <= k` non-empty parts of the result, `c` of which combine a part of
/// each (the others keep their order, so the result is a merge of three
/// sorted runs; O(k log k) at worst, O(k) for a tuple of a few parts merged
/// into a full one), and a tuple stores only its non-empty parts, so that
/// all live tuples together take O(n) space whatever `k` (O(n + k) extra
/// space in all).
///
/// # Approximation
///
/// For `k = 2` the larger part is at most 7/6 of the optimum (Fischetti &
/// Martello 1987); for `k > 2` it is within `4/3 - 1/(3k)` (Michiels et al.
/// 2007). On random instances it is almost always at least as good as LPT,
/// though not always (see the module docs, "KK against LPT").
///
/// # References
///
/// N. Karmarkar and R. M. Karp, "The differencing method of set
/// partitioning", Technical Report UCB/CSD 82/113, UC Berkeley, 1982.
/// W. Michiels, J. Korst, E. Aarts and J. van Leeuwen, "Performance ratios
/// of the Karmarkar-Karp differencing method", Journal of Combinatorial
/// Optimization 13, 2007.
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
/// use microbatch::partition::karmarkar_karp;
///
/// let p = karmarkar_karp(&[8u32, 7, 6, 5, 4], 2)?;
/// assert_eq!(p.part(0), &[1, 3, 4]); // 7 + 5 + 4
/// assert_eq!(p.part(1), &[0, 2]); // 8 + 6
/// assert_eq!((p.sum(0), p.sum(1)), (&[16][..], &[14][..]));
/// assert_eq!(p.objective(), 16);
/// # Ok::<(), microbatch::Error>(())
/// ```
pub fn karmarkar_karp<I: Item>(items: &[I], k: usize) -> Result<Partition<TotalOf<I>>, Error> {
    let inst = instance::instance(items, Dims::Combined, None)?;
    steps::check_parts(inst.n, k, false)?;
    let cfg = steps::unconstrained(k);
    let part_of = run(&inst, &cfg);
    Ok(steps::uncapped(&inst, &cfg, part_of, false))
}

const NONE: usize = usize::MAX;

/// One part of a partial partition: its sum, item count and linked list of
/// ranks (`head..tail` through `next`).
#[derive(Clone, Copy, Debug)]
struct Entry<T> {
    sum: T,
    count: usize,
    head: usize,
    tail: usize,
}

/// A part placed into a split tuple ([`Tuple::Split`]), with its place
/// among the parts of equal sum and count (`stamp`, increasing as parts are
/// placed).
#[derive(Clone, Copy, Debug)]
struct Placed<T> {
    part: Entry<T>,
    stamp: u64,
}

/// [`Entry::order`], ties by stamp: a total order.
impl<T: Total> Ord for Placed<T> {
    fn cmp(&self, other: &Self) -> Ordering {
        self.part
            .order(&other.part)
            .then(self.stamp.cmp(&other.stamp))
    }
}
impl<T: Total> PartialOrd for Placed<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<T: Total> PartialEq for Placed<T> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl<T: Total> Eq for Placed<T> {}

impl<T: Total> Entry<T> {
    /// Decreasing sum, then decreasing count (so that among equal sums an
    /// empty part is the smallest and gets filled first).
    fn order(&self, other: &Self) -> Ordering {
        instance::cmp(other.sum, self.sum).then(other.count.cmp(&self.count))
    }

    /// Appends `other`'s items and sum.
    fn absorb(&mut self, other: &Self, next: &mut [usize]) {
        if other.head == NONE {
            return;
        }
        if self.head == NONE {
            self.head = other.head;
        } else {
            next[self.tail] = other.head;
        }
        self.tail = other.tail;
        self.sum = self.sum.add(other.sum);
        self.count += other.count;
    }
}

/// KK by rank over the combined weight; part 0 ends heaviest.
pub(crate) fn run<T: Total>(inst: &Instance<T>, cfg: &Config<T>) -> Vec<usize> {
    run_with_peak(inst, cfg).0
}

/// [`run`], with the largest number of tuple entries alive at once.
fn run_with_peak<T: Total>(inst: &Instance<T>, cfg: &Config<T>) -> (Vec<usize>, usize) {
    run_moving(inst, cfg, LONGEST_MOVE)
}

/// [`run_with_peak`], a sorted tuple becoming a heap when a part would
/// move past more than `longest_move` others (the result is the same for
/// every `longest_move`; `usize::MAX` never makes a heap).
fn run_moving<T: Total>(
    inst: &Instance<T>,
    cfg: &Config<T>,
    longest_move: usize,
) -> (Vec<usize>, usize) {
    run_in(inst, cfg, Kk::new(cfg.k, inst.n, longest_move))
}

/// [`run_moving`] with the state `kk` (fresh, for `cfg.k` parts and
/// `inst.n` items).
fn run_in<T: Total>(inst: &Instance<T>, cfg: &Config<T>, mut kk: Kk<T>) -> (Vec<usize>, usize) {
    let (n, k) = (inst.n, cfg.k);
    let mut part_of = vec![0; n];
    if k == 1 || n == 0 {
        return (part_of, 0);
    }
    let mut peak = 0;
    // Singletons wait in rank order (decreasing weight); a singleton's
    // spread is its weight.
    let mut single = 0;
    if cfg.equal_count {
        for start in (0..n).step_by(k) {
            let slot = kk.alloc();
            for r in start..(start + k).min(n) {
                let leaf = kk.leaf(r, inst.key(r));
                kk.sorted(slot).push(leaf);
                kk.entries += 1;
            }
            kk.push(slot);
        }
        single = n;
    }
    while kk.heap.len() + (n - single) > 1 {
        let a = kk.take(&mut single, inst);
        let b = kk.take(&mut single, inst);
        let slot = match (a, b) {
            (Taken::Single(ra), Taken::Single(rb)) => {
                let slot = kk.alloc();
                let (la, lb) = (kk.leaf(ra, inst.key(ra)), kk.leaf(rb, inst.key(rb)));
                kk.sorted(slot).extend([la, lb]);
                kk.entries += 2;
                slot
            }
            (Taken::Tuple(slot), Taken::Single(r)) | (Taken::Single(r), Taken::Tuple(slot)) => {
                let leaf = kk.leaf(r, inst.key(r));
                kk.add_to_smallest(slot, leaf);
                slot
            }
            (Taken::Tuple(sa), Taken::Tuple(sb)) => {
                kk.merge(sa, sb);
                sa
            }
        };
        kk.push(slot);
        peak = peak.max(kk.entries);
    }
    let parts: Vec<Entry<T>> = match kk.heap.pop() {
        Some((_, _, slot)) => core::mem::take(kk.sorted(slot)),
        // One item, never materialized.
        None => vec![kk.leaf(0, inst.key(0))],
    };
    for (p, e) in parts.iter().enumerate() {
        let mut r = e.head;
        while r != NONE {
            part_of[r] = p;
            r = kk.next[r];
        }
    }
    if !cfg.allow_empty {
        fill_empty(inst, k, &mut part_of);
    }
    (part_of, peak)
}

enum Taken {
    Single(usize),
    Tuple(usize),
}

/// A sorted tuple whose smallest part, having taken a singleton, would move
/// past more parts than this splits ([`Tuple::Split`]): an insertion that
/// moves few parts is cheaper, and the common one moves none (a tuple
/// collecting singletons in decreasing order as parts of their own).
const LONGEST_MOVE: usize = 16;

/// The non-empty parts of a partial partition, a sequence sorted by
/// [`Entry::order`] (equal parts in the order they were placed in), in one
/// of two forms:
///
/// - `Sorted`: the sequence itself;
/// - `Split`, while the tuple takes singletons (heavy-tailed weights make
///   one tuple of the largest items take item after item, each joining its
///   smallest part, which then moves up past many): the parts unchanged
///   since the tuple was sorted (`rest`, in order) and those placed since,
///   grown or new (`moved`, a max-heap by [`Placed`]'s `Ord`, stamps in the
///   order of placing, so that its root is the last of them in the
///   sequence), with the largest sum. The sequence is the two merged, a
///   part of `rest` before the equal parts of `moved` (placed later); its
///   last part, the smallest, is the later of `rest`'s last and `moved`'s
///   root. Sorting it again costs O(m + h log h) for `h` parts moved.
enum Tuple<T> {
    Sorted(Vec<Entry<T>>),
    Split {
        rest: Vec<Entry<T>>,
        moved: BinaryHeap<Placed<T>>,
        largest: T,
    },
}

impl<T: Total> Tuple<T> {
    /// The number of non-empty parts.
    fn len(&self) -> usize {
        match self {
            Tuple::Sorted(parts) => parts.len(),
            Tuple::Split { rest, moved, .. } => rest.len() + moved.len(),
        }
    }

    /// The sums of the first part (the largest) and of the last (the
    /// smallest non-empty one); zeros for no part.
    fn extremes(&self) -> (T, T) {
        match self {
            Tuple::Sorted(parts) => (
                parts.first().map_or(T::ZERO, |e| e.sum),
                parts.last().map_or(T::ZERO, |e| e.sum),
            ),
            Tuple::Split {
                rest,
                moved,
                largest,
            } => {
                let last = match (rest.last(), moved.peek()) {
                    (Some(r), Some(h)) if h.part.order(r) == Ordering::Less => r.sum,
                    (_, Some(h)) => h.part.sum,
                    (Some(r), None) => r.sum,
                    (None, None) => T::ZERO,
                };
                (*largest, last)
            }
        }
    }

    /// Removes the last part (the smallest).
    fn pop_last(&mut self) -> Option<Entry<T>> {
        match self {
            Tuple::Sorted(parts) => parts.pop(),
            Tuple::Split { rest, moved, .. } => match (rest.last(), moved.peek()) {
                (Some(r), Some(h)) if h.part.order(r) == Ordering::Less => rest.pop(),
                (_, Some(_)) => moved.pop().map(|h| h.part),
                _ => rest.pop(),
            },
        }
    }

    /// The parts, sorted: a split tuple is merged, O(m + h log h) for `h`
    /// parts moved (their stamps are unique, so any sort gives the one
    /// order).
    fn sorted(&mut self) -> &mut Vec<Entry<T>> {
        if let Tuple::Split { rest, moved, .. } = self {
            let mut placed = core::mem::take(moved).into_vec();
            placed.sort_unstable();
            let mut parts = Vec::with_capacity(rest.len() + placed.len());
            let (mut i, mut j) = (0, 0);
            while i < rest.len() && j < placed.len() {
                if placed[j].part.order(&rest[i]) == Ordering::Less {
                    parts.push(placed[j].part);
                    j += 1;
                } else {
                    parts.push(rest[i]);
                    i += 1;
                }
            }
            parts.extend_from_slice(&rest[i..]);
            parts.extend(placed[j..].iter().map(|h| h.part));
            *self = Tuple::Sorted(parts);
        }
        match self {
            Tuple::Sorted(parts) => parts,
            Tuple::Split { .. } => unreachable!("sorted just above"),
        }
    }
}

/// The KK state. A tuple keeps only its non-empty parts, sorted by
/// [`Entry::order`] ([`Tuple`]); the other `k - len` parts are empty (sum
/// zero) and come last. So all tuples together hold at most `n` entries,
/// whatever `k`. Tuples sit in a max-heap by spread (ties: older first);
/// freed tuples' buffers are reused.
struct Kk<T> {
    k: usize,
    next: Vec<usize>,
    tuples: Vec<Tuple<T>>,
    free: Vec<usize>,
    /// The combined parts of a merge, stamped by position.
    combined: Vec<Placed<T>>,
    /// The next merge's output buffer.
    spare: Vec<Entry<T>>,
    heap: BinaryHeap<(Load<T>, Reverse<u64>, usize)>,
    stamp: u64,
    /// Entries held by all tuples (at most `n`).
    entries: usize,
    /// A sorted tuple becomes a heap rather than move a part past more
    /// parts than this.
    longest_move: usize,
    /// The last stamp given to a part in a heap.
    placed: u64,
    /// Re-sort every merge's result with `sort_unstable_by` (the method
    /// before the three-run merge; tests only).
    #[cfg(test)]
    resort: bool,
}

impl<T: Total> Kk<T> {
    fn new(k: usize, n: usize, longest_move: usize) -> Self {
        Kk {
            k,
            next: vec![NONE; n],
            tuples: Vec::new(),
            free: Vec::new(),
            combined: Vec::new(),
            spare: Vec::new(),
            heap: BinaryHeap::new(),
            stamp: 0,
            entries: 0,
            longest_move,
            placed: 0,
            #[cfg(test)]
            resort: false,
        }
    }

    /// The parts of tuple `slot`, sorted.
    fn sorted(&mut self, slot: usize) -> &mut Vec<Entry<T>> {
        self.tuples[slot].sorted()
    }

    fn leaf(&self, r: usize, w: T) -> Entry<T> {
        Entry {
            sum: w,
            count: 1,
            head: r,
            tail: r,
        }
    }

    /// An empty tuple (a reused buffer when one is free).
    fn alloc(&mut self) -> usize {
        match self.free.pop() {
            Some(slot) => slot,
            None => {
                self.tuples.push(Tuple::Sorted(Vec::new()));
                self.tuples.len() - 1
            }
        }
    }

    fn push(&mut self, slot: usize) {
        let tuple = &self.tuples[slot];
        let (largest, last) = tuple.extremes();
        let smallest = if tuple.len() == self.k { last } else { T::ZERO };
        self.stamp += 1;
        self.heap.push((
            Load(largest.saturating_sub(smallest)),
            Reverse(self.stamp),
            slot,
        ));
    }

    /// The partial partition of largest spread: the next singleton on a tie
    /// (it entered first).
    fn take(&mut self, single: &mut usize, inst: &Instance<T>) -> Taken {
        let tuple_first = match (self.heap.peek(), *single < inst.n) {
            (Some(top), true) => instance::cmp(top.0 .0, inst.key(*single)) == Ordering::Greater,
            (Some(_), false) => true,
            (None, _) => false,
        };
        if tuple_first {
            if let Some((_, _, slot)) = self.heap.pop() {
                return Taken::Tuple(slot);
            }
        }
        *single += 1;
        Taken::Single(*single - 1)
    }

    /// Adds a one-item part to the smallest part of `slot` (an empty one if
    /// any) and restores the order: in a sorted tuple by insertion, O(j) for
    /// a part that moves past `j` others, unless `j` would exceed
    /// `longest_move`; then the tuple splits ([`Tuple::Split`]), and a split
    /// one takes it in O(log k).
    fn add_to_smallest(&mut self, slot: usize, leaf: Entry<T>) {
        let tuple = &mut self.tuples[slot];
        // The part that changes leaves the sequence, grown.
        let e = if tuple.len() < self.k {
            self.entries += 1;
            leaf
        } else {
            match tuple.pop_last() {
                Some(mut last) => {
                    last.absorb(&leaf, &mut self.next);
                    last
                }
                None => leaf,
            }
        };
        if let Tuple::Sorted(parts) = tuple {
            // It goes after every part it does not precede (after equal
            // ones): past the `j` last parts it precedes.
            let len = parts.len();
            let mut j = 0;
            while j < len
                && j <= self.longest_move
                && e.order(&parts[len - 1 - j]) == Ordering::Less
            {
                j += 1;
            }
            if j <= self.longest_move {
                parts.insert(len - j, e);
                return;
            }
            let rest = core::mem::take(parts);
            let largest = rest.first().map_or(T::ZERO, |p| p.sum);
            *tuple = Tuple::Split {
                rest,
                moved: BinaryHeap::new(),
                largest,
            };
        }
        if let Tuple::Split { moved, largest, .. } = tuple {
            *largest = instance::max(*largest, e.sum);
            self.placed += 1;
            moved.push(Placed {
                part: e,
                stamp: self.placed,
            });
        }
    }

    /// Merges tuple `b` into tuple `a`, the `i`-th largest part of `a` with
    /// the `i`-th smallest of `b` (empty parts included), and frees `b`.
    ///
    /// Part `i` of the result is `a[i] + b[k - 1 - i]`, and it falls in one
    /// of three runs: `a`'s parts that meet an empty part of `b` (`a[i]`
    /// alone, `i < a_alone`, already in order), the `c` combined parts (in
    /// order of `i`, then sorted stably) and `b`'s parts that meet an empty
    /// part of `a` (already in order). The result is the three runs merged
    /// by [`Entry::order`]; among equal parts (same sum and count) those of
    /// `a` alone come first, then the combined ones, then those of `b`
    /// alone, each run in its own order. So the order is fully determined by
    /// the two tuples' orders, never by a sort's handling of ties.
    ///
    /// O(m + c log c) for the `m <= k` non-empty parts of the result; no
    /// allocation once the two scratch buffers have grown to the largest
    /// tuple.
    fn merge(&mut self, a: usize, b: usize) {
        let k = self.k;
        let ta = core::mem::take(self.sorted(a));
        let mut tb = core::mem::take(self.sorted(b));
        let (la, lb) = (ta.len(), tb.len());
        // Part i pairs a[i] (if i < la) with b[k - 1 - i] (if k - 1 - i <
        // lb): a alone for i < k - lb, b alone (b[0..b_alone]) for i >= la.
        let a_alone = la.min(k - lb);
        let b_alone = lb.min(k - la);
        self.combined.clear();
        for i in a_alone..la {
            let mut e = ta[i];
            e.absorb(&tb[k - 1 - i], &mut self.next);
            // The stamp `i` breaks ties: the sort below is the stable one.
            self.combined.push(Placed {
                part: e,
                stamp: i as u64,
            });
        }
        self.combined.sort_unstable();
        let mut out = core::mem::take(&mut self.spare);
        out.clear();
        out.reserve(a_alone + self.combined.len() + b_alone);
        let (mut x, mut y, mut z) = (0, 0, 0);
        loop {
            // The first part of the earliest run that no later run's first
            // part strictly precedes.
            let mut best = match (x < a_alone, self.combined.get(y)) {
                (true, Some(c)) if c.part.order(&ta[x]) == Ordering::Less => Some((1, c.part)),
                (true, _) => Some((0, ta[x])),
                (false, c) => c.map(|c| (1, c.part)),
            };
            if z < b_alone && best.map_or(true, |(_, e)| tb[z].order(&e) == Ordering::Less) {
                best = Some((2, tb[z]));
            }
            let Some((run, e)) = best else { break };
            out.push(e);
            match run {
                0 => x += 1,
                1 => y += 1,
                _ => z += 1,
            }
        }
        #[cfg(test)]
        if self.resort {
            out.sort_unstable_by(Entry::order);
        }
        self.entries = self.entries + out.len() - la - lb;
        self.tuples[a] = Tuple::Sorted(out);
        // `a`'s old buffer is the next merge's output buffer.
        self.spare = ta;
        tb.clear();
        self.tuples[b] = Tuple::Sorted(tb);
        self.free.push(b);
    }
}

/// Moves items into empty parts (possible only with zero weights): each
/// empty part takes the lightest item of a part with the most items.
pub(crate) fn fill_empty<T: Total>(inst: &Instance<T>, k: usize, part_of: &mut [usize]) {
    let mut counts = vec![0usize; k];
    for &p in part_of.iter() {
        counts[p] += 1;
    }
    for empty in 0..k {
        if counts[empty] > 0 {
            continue;
        }
        let Some(from) = (0..k)
            .filter(|&p| counts[p] > 1)
            .max_by_key(|&p| (counts[p], Reverse(p)))
        else {
            return;
        };
        // Ranks are in decreasing weight: the last rank of `from` is lightest.
        if let Some(r) = (0..inst.n).rev().find(|&r| part_of[r] == from) {
            part_of[r] = empty;
            counts[from] -= 1;
            counts[empty] += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::partition::{Dims, Objective};

    fn run_on(items: &[u32], k: usize, equal_count: bool) -> Vec<usize> {
        let inst = instance::instance(items, Dims::Combined, None).unwrap();
        let cfg = Config {
            k,
            objective: Objective::MaxPart,
            equal_count,
            allow_empty: false,
            cap: None,
        };
        run(&inst, &cfg)
    }

    #[test]
    fn two_way_is_differencing() {
        // 8,7,6,5,4 -> 6,5,4,1 -> 4,1,1 -> 3,1 -> 2: parts 16 and 14.
        let part_of = run_on(&[8, 7, 6, 5, 4], 2, false);
        assert_eq!(part_of, [1, 0, 1, 0, 0]);
    }

    #[test]
    fn zero_weights_leave_no_part_empty() {
        for k in 1..6 {
            let part_of = run_on(&[5, 0, 0, 0, 0, 0], k, false);
            let mut counts = vec![0; k];
            for p in part_of {
                counts[p] += 1;
            }
            assert!(counts.iter().all(|&c| c > 0), "k = {k}: {counts:?}");
        }
    }

    #[test]
    fn equal_counts_from_groups() {
        for n in 3..20 {
            let items: Vec<u32> = (0..n).map(|i| (i * 37 % 11) as u32).collect();
            for k in 1..=n.min(6) {
                let part_of = run_on(&items, k, true);
                let mut counts = vec![0; k];
                for p in part_of {
                    counts[p] += 1;
                }
                let (lo, hi) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
                assert!(hi - lo <= 1, "n = {n}, k = {k}: {counts:?}");
            }
        }
    }

    #[test]
    fn live_entries_stay_within_n() {
        // Equal weights made the dense k-tuples of the textbook method
        // take n k / 2 entries here.
        for (items, k) in [
            (vec![7u32; 3000], 512),
            ((0..3000).map(|i| i % 17).collect(), 64),
        ] {
            let inst = instance::instance(&items, Dims::Combined, None).unwrap();
            let cfg = Config {
                k,
                objective: Objective::MaxPart,
                equal_count: false,
                allow_empty: false,
                cap: None,
            };
            let (_, peak) = run_with_peak(&inst, &cfg);
            assert!(peak <= items.len(), "k = {k}: {peak} entries");
        }
    }

    /// Heavy-tailed weights with many ties (a few huge items, many equal
    /// small ones): the heap form of a tuple gives the partition of the
    /// sorted form (`usize::MAX`, the algorithm before the heap) for every
    /// longest move, item for item, so ties among equal parts go the same
    /// way.
    #[test]
    fn heap_gives_the_sorted_result() {
        let mut next = crate::test_rng::uniform(23);
        for case in 0..60 {
            let n = 50 + next(1500) as usize;
            let levels = 1 + next(40);
            let items: Vec<u64> = (0..n)
                .map(|_| {
                    // 1 / u^2 over coarse levels: a heavy tail with ties.
                    let u = 1 + next(levels);
                    let base = 1_000_000 / (u * u);
                    if next(4) == 0 {
                        base + next(3)
                    } else {
                        base
                    }
                })
                .collect();
            let inst = instance::instance(&items, Dims::Combined, None).unwrap();
            for k in [2, 3, 5, 33, 64, 200, n / 2, n] {
                for equal_count in [false, true] {
                    let cfg = Config {
                        k,
                        objective: Objective::MaxPart,
                        equal_count,
                        allow_empty: false,
                        cap: None,
                    };
                    let (want, _) = run_moving(&inst, &cfg, usize::MAX);
                    for longest_move in [0, 1, 4, LONGEST_MOVE] {
                        let (got, _) = run_moving(&inst, &cfg, longest_move);
                        assert_eq!(
                            got, want,
                            "case {case}: n = {n}, k = {k}, equal counts {equal_count}, \
                             longest move {longest_move}"
                        );
                    }
                }
            }
        }
    }

    /// The tie rule of [`Kk::merge`]: among equal parts, `a`'s parts alone,
    /// then the combined ones in the order of `a`'s parts, then `b`'s parts
    /// alone. Four parts of equal sum and count, one from each place.
    #[test]
    fn merge_breaks_ties_by_run_then_position() {
        let part = |sum: u128, count: usize, r: usize| Entry {
            sum,
            count,
            head: r,
            tail: r,
        };
        let mut kk = Kk::new(4, 6, LONGEST_MOVE);
        let (a, b) = (kk.alloc(), kk.alloc());
        // a: ranks 0..3, b: ranks 3..6; part i of the result pairs a[i] with
        // b[3 - i]: a[0] alone, a[1] + b[2], a[2] + b[1], b[0] alone.
        kk.sorted(a)
            .extend([part(10, 2, 0), part(7, 1, 1), part(5, 1, 2)]);
        kk.sorted(b)
            .extend([part(10, 2, 3), part(5, 1, 4), part(3, 1, 5)]);
        kk.entries = 6;
        kk.merge(a, b);
        let got: Vec<_> = kk
            .sorted(a)
            .iter()
            .map(|e| (e.sum, e.count, e.head, e.tail))
            .collect();
        assert_eq!(
            got,
            [(10, 2, 0, 0), (10, 2, 1, 5), (10, 2, 2, 4), (10, 2, 3, 3)]
        );
        assert_eq!(kk.entries, 4);
        assert!(kk.sorted(b).is_empty());
    }

    /// The tie rule end to end: 4, 4 and 3, 3 make two tuples of two equal
    /// parts; merging them gives two parts of 7 (4 + 3), the first the one
    /// of the first tuple's first part (rank 0) and the second tuple's
    /// second (rank 3).
    #[test]
    fn equal_parts_go_by_the_tie_rule() {
        assert_eq!(run_on(&[4, 4, 3, 3], 2, false), [0, 1, 1, 0]);
        let p = karmarkar_karp(&[4u32, 4, 3, 3], 2).unwrap();
        assert_eq!((p.part(0), p.part(1)), (&[0, 3][..], &[1, 2][..]));
    }

    /// The three-run merge changes only the order among equal parts (same
    /// sum and count): re-sorting every merge's result (the method before)
    /// gives the same sum and count for every part, on heavy-tailed weights
    /// with many ties.
    #[test]
    fn merge_moves_only_equal_parts() {
        let mut next = crate::test_rng::uniform(29);
        for case in 0..60 {
            let n = 20 + next(1200) as usize;
            let levels = 1 + next(30);
            let items: Vec<u64> = (0..n)
                .map(|_| {
                    let u = 1 + next(levels);
                    1_000_000 / (u * u) + if next(3) == 0 { next(2) } else { 0 }
                })
                .collect();
            let inst = instance::instance(&items, Dims::Combined, None).unwrap();
            for k in [2, 3, 7, 64, n / 3 + 1, n] {
                for equal_count in [false, true] {
                    let cfg = Config {
                        k,
                        objective: Objective::MaxPart,
                        equal_count,
                        allow_empty: false,
                        cap: None,
                    };
                    let (got, _) = run_moving(&inst, &cfg, LONGEST_MOVE);
                    let mut kk = Kk::new(k, n, LONGEST_MOVE);
                    kk.resort = true;
                    let (want, _) = run_in(&inst, &cfg, kk);
                    let shape = |part_of: &[usize]| {
                        let mut counts = vec![0; k];
                        for &p in part_of {
                            counts[p] += 1;
                        }
                        (inst.sums(k, part_of), counts)
                    };
                    assert_eq!(
                        shape(&got),
                        shape(&want),
                        "case {case}: n = {n}, k = {k}, equal counts {equal_count}"
                    );
                }
            }
        }
    }

    #[test]
    fn linked_lists_hold_every_item_once() {
        let items: Vec<u32> = (0..200).map(|i| (i * 7919 % 1000) as u32).collect();
        let part_of = run_on(&items, 7, false);
        assert_eq!(part_of.len(), 200);
        assert!(part_of.iter().all(|&p| p < 7));
    }
}

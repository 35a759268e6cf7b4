//! Longest processing time first (LPT): each item, largest first, to the
//! least-loaded part.

use alloc::collections::BinaryHeap;
use alloc::vec;
use alloc::vec::Vec;
use core::cmp::{Ordering, Reverse};

use crate::error::Error;
use crate::num::{Item, Total};

use super::instance::{self, Config, Instance, Load};
use super::{Algorithm, Partition, Partitioner, TotalOf};

/// Partitions `items` into `k` parts with LPT: items in decreasing order
/// (ties by id, then input index); the first `k` open the `k` parts, each
/// later one goes to the least-loaded part (ties by lower part index).
///
/// Items with several dimensions go by their combined weight (the sum over
/// dimensions). No part is left empty; use [`Partitioner`] for constraints,
/// other objectives and refinement.
///
/// # Complexity
///
/// O(n log n + n log k) time (a sort, then a heap of the `k` parts keyed by
/// (sum, part index)), O(n + k) extra space. Integer sizes below 2^32 are
/// sorted by a radix sort in O(n), and integer sums below 2^54 (for 1024
/// parts) use a 4-ary heap of packed `u64` keys.
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
/// [`Error::InvalidSize`] for invalid items.
///
/// # Examples
///
/// ```
/// use microbatch::partition::lpt;
///
/// let p = lpt(&[8u32, 7, 6, 5, 4], 2)?;
/// assert_eq!(p.part(0), &[0, 3, 4]); // 8 + 5 + 4
/// assert_eq!(p.part(1), &[1, 2]); // 7 + 6
/// assert_eq!(p.objective(), 17); // the optimum is 15: {8, 7}, {6, 5, 4}
/// # Ok::<(), microbatch::Error>(())
/// ```
pub fn lpt<I: Item>(items: &[I], k: usize) -> Result<Partition<TotalOf<I>>, Error> {
    Partitioner::new(k)
        .algorithm(Algorithm::Lpt)
        .refinement(false)
        .partition(items)
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
/// each item goes to the part of least (sum, index), from a min-heap. With a
/// one-dimensional cap the least-loaded part is the only candidate anyway.
fn heap<T: Total>(inst: &Instance<T>, cfg: &Config<T>) -> Vec<usize> {
    let (n, k) = (inst.n, cfg.k);
    let mut part_of: Vec<usize> = (0..n).map(|r| r.min(k)).collect();
    if n <= k {
        return part_of;
    }
    if !cfg.equal_count && packed(inst, k, &mut part_of) {
        return part_of;
    }
    let mut heap: BinaryHeap<Reverse<(Load<T>, usize)>> =
        (0..k).map(|p| Reverse((Load(inst.key(p)), p))).collect();
    if !cfg.equal_count {
        for (r, slot) in part_of.iter_mut().enumerate().skip(k) {
            let Some(mut top) = heap.peek_mut() else {
                break;
            };
            let Reverse((load, p)) = &mut *top;
            load.0 = load.0.add(inst.key(r));
            *slot = *p;
        }
        return part_of;
    }
    // Equal counts: at most `hi` items a part, and only `extra` parts may
    // reach `hi`; after that the limit drops to `lo`. Full parts leave the
    // heap (lazily, when popped). Here `n > k`, so `hi >= 2`.
    let (lo, hi, extra) = cfg.counts(n);
    let mut counts = vec![1; k];
    let mut limit = hi;
    let mut at_hi = 0;
    for (r, slot) in part_of.iter_mut().enumerate().skip(k) {
        while let Some(Reverse((load, p))) = heap.pop() {
            if counts[p] >= limit {
                continue;
            }
            *slot = p;
            counts[p] += 1;
            if extra > 0 && counts[p] == hi {
                at_hi += 1;
                if at_hi == extra {
                    limit = lo;
                }
            }
            if counts[p] < limit {
                heap.push(Reverse((Load(load.0.add(inst.key(r))), p)));
            }
            break;
        }
    }
    part_of
}

/// The heap of [`heap`] without equal counts, for integer sums that fit in
/// `64 - b` bits where `b` bits hold a part index: each part is one `u64`
/// key `sum << b | part`, so that the order is one comparison and an item
/// one addition, in a 4-ary heap (half the depth of a binary one, the four
/// children loaded together) whose top is replaced by sifting the hole to
/// the bottom with branch-free child selection, then the new key up. The
/// result is that of the generic heap: both take the least (sum, part).
/// Returns `false`, doing nothing, when the sums do not fit.
fn packed<T: Total>(inst: &Instance<T>, k: usize, part_of: &mut [usize]) -> bool {
    let b = (usize::BITS - (k - 1).leading_zeros()).max(1);
    let Some(total) = (0..inst.n).try_fold(0u64, |acc, r| {
        let w = u64::try_from(instance::as_u128(inst.key(r))?).ok()?;
        acc.checked_add(w)
    }) else {
        return false;
    };
    if b >= 64 || total >> (64 - b) != 0 {
        return false;
    }
    let weight = |r: usize| instance::as_u128(inst.key(r)).map_or(0, |w| w as u64);
    // Sorted keys are a valid heap; padding makes missing children read as
    // `u64::MAX`.
    let mut keys: Vec<u64> = (0..k).map(|p| weight(p) << b | p as u64).collect();
    keys.sort_unstable();
    keys.resize(4 * k + 4, u64::MAX);
    let mask = (1u64 << b) - 1;
    for (r, slot) in part_of.iter_mut().enumerate().skip(k) {
        let new = keys[0] + (weight(r) << b);
        *slot = (keys[0] & mask) as usize;
        let mut i = 0;
        loop {
            let c = 4 * i + 1;
            if c >= k {
                break;
            }
            let x = c + usize::from(keys[c + 1] < keys[c]);
            let y = c + 2 + usize::from(keys[c + 3] < keys[c + 2]);
            let m = if keys[y] < keys[x] { y } else { x };
            keys[i] = keys[m];
            i = m;
        }
        while i > 0 {
            let parent = (i - 1) / 4;
            if keys[parent] <= new {
                break;
            }
            keys[i] = keys[parent];
            i = parent;
        }
        keys[i] = new;
    }
    true
}

/// Several objective dimensions or a cap in several dimensions: each item
/// to the part where it fits the cap (if any does) and least raises the
/// objective, ties by combined load, then part index. O(n k d).
fn scan<T: Total>(inst: &Instance<T>, cfg: &Config<T>) -> Vec<usize> {
    let (k, d, od) = (cfg.k, inst.d, inst.od);
    let (lo, hi, extra) = cfg.counts(inst.n);
    let mut limit = if cfg.equal_count { hi } else { usize::MAX };
    let mut at_hi = 0;
    let mut part_of = vec![0; inst.n];
    let mut sums = vec![T::ZERO; k * d];
    let mut osums = vec![T::ZERO; k * od];
    let mut loads = vec![T::ZERO; k];
    let mut counts = vec![0usize; k];
    let mut top = vec![T::ZERO; od];
    for (r, slot) in part_of.iter_mut().enumerate() {
        let x = inst.sizes(r);
        // (does not fit, objective after, load, part); the first `k` items
        // open the parts.
        let mut best: Option<(bool, T, T, usize)> = (r < k).then_some((false, T::ZERO, T::ZERO, r));
        for p in (0..k).filter(|_| r >= k) {
            if counts[p] >= limit {
                continue;
            }
            let misfit = cfg.cap.as_ref().is_some_and(|cap| {
                (0..d)
                    .any(|j| instance::cmp(sums[p * d + j].add(x[j]), cap[j]) == Ordering::Greater)
            });
            let after = (0..od).fold(T::ZERO, |acc, j| {
                acc.add(instance::max(top[j], osums[p * od + j].add(inst.ow(r, j))))
            });
            let cand = (misfit, after, loads[p], p);
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
        let Some((_, _, _, p)) = best else {
            continue;
        };
        *slot = p;
        for (j, &xj) in x.iter().enumerate() {
            sums[p * d + j] = sums[p * d + j].add(xj);
        }
        for (j, t) in top.iter_mut().enumerate() {
            osums[p * od + j] = osums[p * od + j].add(inst.ow(r, j));
            *t = instance::max(*t, osums[p * od + j]);
        }
        loads[p] = loads[p].add(inst.key(r));
        counts[p] += 1;
        if cfg.equal_count && extra > 0 && counts[p] == hi {
            at_hi += 1;
            if at_hi == extra {
                limit = lo;
            }
        }
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
    fn packed_heap_agrees_with_the_generic_heap() {
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
            // Integers take the packed heap, floats the generic one.
            assert_eq!(heap(&a, &cfg(k, false)), heap(&b, &cb), "k = {k}");
        }
    }

    #[test]
    fn zero_weights_fill_every_part() {
        let inst = instance::instance(&[0u32; 5], Dims::Combined, None).unwrap();
        let part_of = heap(&inst, &cfg(5, false));
        assert_eq!(part_of, [0, 1, 2, 3, 4]);
    }
}

//! Private plumbing shared by the partitioning algorithms: the validated
//! instance in decreasing order, the options, and exact helpers on totals.

use alloc::vec;
use alloc::vec::Vec;
use core::cmp::Ordering;

use crate::error::{Error, Locator, Oversize, Scalar};
use crate::num::{Item, Size, SizeOps, Total, TotalOps, MAX_DIMS};

use super::{Dims, Objective};

/// Compares two totals with their total order.
#[inline]
pub(crate) fn cmp<T: Total>(a: T, b: T) -> Ordering {
    a.total_cmp(&b)
}

/// The larger of two totals.
#[inline]
pub(crate) fn max<T: Total>(a: T, b: T) -> T {
    if cmp(a, b) == Ordering::Less {
        b
    } else {
        a
    }
}

/// The smaller of two totals.
#[inline]
pub(crate) fn min<T: Total>(a: T, b: T) -> T {
    if cmp(a, b) == Ordering::Greater {
        b
    } else {
        a
    }
}

/// `ceil(x / k)` for integer totals, `x / k` for floats; `x` for `k == 0`.
pub(crate) fn div_ceil<T: Total>(x: T, k: usize) -> T {
    x.div_ceil_parts(k)
}

/// A total as an error payload, exact: integers above `u64::MAX` are
/// [`Scalar::Wide`].
pub(crate) fn scalar<T: Total>(x: T) -> Scalar {
    match x.as_u128() {
        Some(v) => u64::try_from(v).map_or(Scalar::Wide(v), Scalar::Int),
        None => x.to_scalar(),
    }
}

/// A total with `Ord` by its total order, for heaps and sorting.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Load<T>(pub(crate) T);

impl<T: Total> PartialEq for Load<T> {
    fn eq(&self, other: &Self) -> bool {
        cmp(self.0, other.0) == Ordering::Equal
    }
}
impl<T: Total> Eq for Load<T> {}
impl<T: Total> PartialOrd for Load<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<T: Total> Ord for Load<T> {
    fn cmp(&self, other: &Self) -> Ordering {
        cmp(self.0, other.0)
    }
}

/// The options every algorithm sees, with the cap widened to totals.
#[derive(Clone, Debug)]
pub(crate) struct Config<T> {
    pub(crate) k: usize,
    pub(crate) objective: Objective,
    pub(crate) equal_count: bool,
    pub(crate) allow_empty: bool,
    /// One cap per original dimension.
    pub(crate) cap: Option<Vec<T>>,
}

impl<T: Total> Config<T> {
    /// The smallest and largest item count of a part under equal counts,
    /// and how many parts get the larger count.
    pub(crate) fn counts(&self, n: usize) -> (usize, usize, usize) {
        let lo = n / self.k;
        let extra = n % self.k;
        (lo, if extra == 0 { lo } else { lo + 1 }, extra)
    }
}

/// A validated instance: items in decreasing order of their combined weight
/// (ties by id, then input index), addressed by their rank in that order.
#[derive(Clone, Debug)]
pub(crate) struct Instance<T> {
    /// The number of items.
    pub(crate) n: usize,
    /// The number of dimensions of every item.
    pub(crate) d: usize,
    /// The number of objective dimensions: `d` for [`Dims::PerDim`], else 1.
    pub(crate) od: usize,
    /// Input index of the item of each rank.
    pub(crate) index: Vec<usize>,
    /// Rank-major widened sizes, `n * d`.
    pub(crate) w: Vec<T>,
    /// Combined weight of each rank; empty when `d == 1` (then `w` serves).
    key: Vec<T>,
}

impl<T: Total> Instance<T> {
    /// The combined weight (sum over dimensions) of rank `r`.
    #[inline]
    pub(crate) fn key(&self, r: usize) -> T {
        if self.d == 1 {
            self.w[r]
        } else {
            self.key[r]
        }
    }

    /// The weight of rank `r` in objective dimension `j`.
    #[inline]
    pub(crate) fn ow(&self, r: usize, j: usize) -> T {
        if self.od == 1 {
            self.key(r)
        } else {
            self.w[r * self.d + j]
        }
    }

    /// The sizes of rank `r`, one per original dimension.
    #[inline]
    pub(crate) fn sizes(&self, r: usize) -> &[T] {
        &self.w[r * self.d..(r + 1) * self.d]
    }

    /// Part sums per original dimension (`k * d`) of an assignment by rank.
    pub(crate) fn sums(&self, k: usize, part_of: &[usize]) -> Vec<T> {
        let mut sums = vec![T::ZERO; k * self.d];
        for (r, &p) in part_of.iter().enumerate() {
            for (s, &x) in sums[p * self.d..(p + 1) * self.d]
                .iter_mut()
                .zip(self.sizes(r))
            {
                *s = s.add(x);
            }
        }
        sums
    }

    /// Part sums per objective dimension (`k * od`) from sums per original
    /// dimension.
    pub(crate) fn objective_sums(&self, k: usize, sums: &[T]) -> Vec<T> {
        if self.od == self.d {
            return sums.to_vec();
        }
        (0..k)
            .map(|p| {
                sums[p * self.d..(p + 1) * self.d]
                    .iter()
                    .fold(T::ZERO, |acc, &x| acc.add(x))
            })
            .collect()
    }
}

/// The objective value of objective-dimension part sums `osums` (`k * od`):
/// the sum over objective dimensions of the largest part, or of the spread.
pub(crate) fn objective_value<T: Total>(
    objective: Objective,
    k: usize,
    od: usize,
    osums: &[T],
) -> T {
    let mut value = T::ZERO;
    for j in 0..od {
        let mut hi = osums[j];
        let mut lo = osums[j];
        for p in 1..k {
            hi = max(hi, osums[p * od + j]);
            lo = min(lo, osums[p * od + j]);
        }
        value = value.add(match objective {
            Objective::MaxPart => hi,
            Objective::Spread => hi.saturating_sub(lo),
        });
    }
    value
}

/// The first (dimension, part sum) that exceeds the cap, if any.
pub(crate) fn cap_violation<T: Total>(cap: &[T], d: usize, sums: &[T]) -> Option<(usize, T)> {
    cap.iter().enumerate().find_map(|(j, &c)| {
        let hi = (0..sums.len() / d).fold(T::ZERO, |acc, p| max(acc, sums[p * d + j]));
        (cmp(hi, c) == Ordering::Greater).then_some((j, hi))
    })
}

/// Validates `items` (and the cap) and lays them out in decreasing order.
///
/// Checks, in this order: dimensions (every item has as many as the first
/// item, or as the cap), sizes (finite, non-negative), and items larger than
/// the cap (all of them listed).
pub(crate) fn instance<I: Item>(
    items: &[I],
    dims: Dims,
    cap: Option<&[I::Size]>,
) -> Result<Instance<<I::Size as Size>::Total>, Error> {
    let n = items.len();
    let d = match (cap, items.first()) {
        (Some(c), _) => c.len(),
        (None, Some(first)) => first.dims(),
        (None, None) => 1,
    };
    if d == 0 {
        return Err(Error::NoDimensions);
    }
    if d > MAX_DIMS {
        return Err(Error::setting(
            if cap.is_some() {
                "cap dimensions"
            } else {
                "item dimensions"
            },
            d as u64,
            "at most 65536",
        ));
    }
    if let Some(c) = cap {
        for (dim, &x) in c.iter().enumerate() {
            x.check().map_err(|reason| Error::Invalid {
                at: Locator::Capacity { dim },
                value: x.to_scalar(),
                reason,
            })?;
        }
    }
    // One dimension: the sizes come back with the order, read sequentially.
    let mut w = Vec::with_capacity(if d == 1 { 0 } else { n * d });
    let mut oversize = Vec::new();
    // Float sums must stay finite for the parts' sums to mean anything.
    let mut totals = vec![<<I::Size as Size>::Total as TotalOps>::ZERO; d];
    for (index, item) in items.iter().enumerate() {
        let found = item.dims();
        if found != d {
            return Err(Error::DimensionMismatch {
                index,
                expected: d,
                found,
            });
        }
        for dim in 0..d {
            let x = item.size(dim);
            x.check().map_err(|reason| Error::Invalid {
                at: Locator::Size { index, dim },
                value: x.to_scalar(),
                reason,
            })?;
            if let Some(c) = cap {
                if x > c[dim] {
                    oversize.push(Oversize {
                        index,
                        id: None,
                        dim,
                        name: None,
                        size: x.to_scalar(),
                        capacity: c[dim].to_scalar(),
                    });
                }
            }
            totals[dim] = totals[dim].add(x.widen());
            if d > 1 {
                w.push(x.widen());
            }
        }
    }
    if !oversize.is_empty() {
        return Err(Error::Oversize { items: oversize });
    }
    let mut all = <<I::Size as Size>::Total as TotalOps>::ZERO;
    for (dim, &t) in totals.iter().enumerate() {
        all = all.add(t);
        if !t.to_f64().is_finite() {
            return Err(Error::SizeOverflow { dim: Some(dim) });
        }
    }
    if !all.to_f64().is_finite() {
        return Err(Error::SizeOverflow { dim: None });
    }
    let od = if dims == Dims::PerDim { d } else { 1 };
    if d == 1 {
        let (index, w) = decreasing_scalar(items);
        return Ok(Instance {
            n,
            d,
            od,
            index,
            w,
            key: Vec::new(),
        });
    }
    let key: Vec<_> = w
        .chunks_exact(d)
        .map(|c| {
            c.iter()
                .fold(TotalOps::ZERO, |acc: <I::Size as Size>::Total, &x| {
                    acc.add(x)
                })
        })
        .collect();
    let mut index: Vec<usize> = (0..n).collect();
    index.sort_unstable_by(|&a, &b| cmp(key[b], key[a]).then(a.cmp(&b)));
    break_ties_by_id(items, &mut index, |a, b| {
        cmp(key[a], key[b]) == Ordering::Equal
    });
    let mut wr = Vec::with_capacity(n * d);
    for &i in &index {
        wr.extend_from_slice(&w[i * d..(i + 1) * d]);
    }
    let key = index.iter().map(|&i| key[i]).collect();
    Ok(Instance {
        n,
        d,
        od,
        index,
        w: wr,
        key,
    })
}

/// Input indices of one-dimensional items in decreasing order of size, ties
/// by id, then index, with the widened sizes in that order.
///
/// Integer sizes below 2^32 (with fewer than 2^32 items) are sorted as packed
/// `u64` keys (see [`sort_packed`]).
fn decreasing_scalar<I: Item>(items: &[I]) -> (Vec<usize>, Vec<<I::Size as Size>::Total>) {
    let n = items.len();
    let small = u32::try_from(n).is_ok()
        && items
            .iter()
            .all(|it| matches!(it.size(0).to_index(), Some(v) if v <= u32::MAX as usize));
    let (mut index, w): (Vec<usize>, Vec<_>) = if small {
        let mut packed: Vec<u64> = items
            .iter()
            .enumerate()
            .map(|(i, it)| {
                let v = it.size(0).to_index().unwrap_or(0) as u64;
                (u64::from(u32::MAX) - v) << 32 | i as u64
            })
            .collect();
        sort_packed(&mut packed);
        // The packed key holds the size: no random access to `items`.
        let w = packed
            .iter()
            .map(|&p| {
                u128_total::<<I::Size as Size>::Total>(u128::from(u32::MAX - (p >> 32) as u32))
            })
            .collect();
        // Collected in place: `u64` and `usize` share a layout on 64-bit.
        let index = packed
            .into_iter()
            .map(|p| (p & u64::from(u32::MAX)) as usize)
            .collect();
        (index, w)
    } else {
        let mut pairs: Vec<(I::Size, usize)> = items
            .iter()
            .enumerate()
            .map(|(i, it)| (it.size(0), i))
            .collect();
        pairs.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        pairs.iter().map(|&(x, i)| (i, x.widen())).unzip()
    };
    if core::mem::size_of::<I::Id>() != 0 {
        break_ties_by_id(items, &mut index, |a, b| {
            items[a].size(0) == items[b].size(0)
        });
    }
    (index, w)
}

/// Sorts packed keys `(u32::MAX - size) << 32 | index`, built in index
/// order. Large inputs use a stable least-significant-digit radix sort over
/// only the bits the sizes use (two passes of 8 bits for sizes below 2^16),
/// O(n) time and O(n) extra space; small ones `sort_unstable`. Both give the
/// same order, the keys being distinct.
fn sort_packed(packed: &mut Vec<u64>) {
    const RADIX_FROM: usize = 1 << 12;
    if packed.len() < RADIX_FROM {
        packed.sort_unstable();
        return;
    }
    // Bits in which the inverted sizes differ; the rest are equal.
    let first = packed[0] >> 32;
    let varying = packed
        .iter()
        .fold(0u64, |acc, &p| acc | ((p >> 32) ^ first));
    let bits = 64 - varying.leading_zeros() as usize;
    let mut scratch = alloc::vec![0u64; packed.len()];
    let mut shift = 32;
    while shift < 32 + bits {
        let mut counts = [0usize; 257];
        for &p in packed.iter() {
            counts[((p >> shift) & 0xFF) as usize + 1] += 1;
        }
        for b in 1..257 {
            counts[b] += counts[b - 1];
        }
        for &p in packed.iter() {
            let b = ((p >> shift) & 0xFF) as usize;
            scratch[counts[b]] = p;
            counts[b] += 1;
        }
        core::mem::swap(packed, &mut scratch);
        shift += 8;
    }
}

/// An integer as an integer total (only called for `u128` totals).
pub(crate) fn u128_total<T: Total>(v: u128) -> T {
    T::from_u128(v).unwrap_or(T::ZERO)
}

/// Re-sorts each run of equal keys in `index` (sorted by key, then index) by
/// id, then index. A no-op for items without id.
fn break_ties_by_id<I: Item>(
    items: &[I],
    index: &mut [usize],
    same: impl Fn(usize, usize) -> bool,
) {
    if core::mem::size_of::<I::Id>() == 0 {
        // A zero-sized id carries no information: all ids compare equal.
        return;
    }
    let mut start = 0;
    while start < index.len() {
        let mut end = start + 1;
        while end < index.len() && same(index[start], index[end]) {
            end += 1;
        }
        if end - start > 1 {
            index[start..end]
                .sort_unstable_by(|&a, &b| items[a].id().cmp(items[b].id()).then(a.cmp(&b)));
        }
        start = end;
    }
}

/// Whether totals are integers (`u128`), whose arithmetic is exact.
pub(crate) fn is_integer<T: Total>() -> bool {
    T::INTEGER
}

/// Whether an integer total is not a multiple of `k` (always `false` for
/// floats).
pub(crate) fn has_remainder<T: Total>(x: T, k: usize) -> bool {
    match x.as_u128() {
        Some(v) if k > 0 => v % k as u128 != 0,
        _ => false,
    }
}

/// One, for integer totals (the smallest positive difference); zero for
/// floats.
pub(crate) fn unit<T: Total>() -> T {
    T::UNIT
}

/// An integer total as `u128`; `None` for floats.
#[inline]
pub(crate) fn as_u128<T: Total>(x: T) -> Option<u128> {
    x.as_u128()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn radix_sort_matches_sort_unstable() {
        let mut next = crate::test_rng::uniform(7);
        for (n, max) in [
            (5000usize, 1u64 << 14),
            (6000, 3),
            (4096, u64::from(u32::MAX)),
            (9000, 1),
        ] {
            let mut packed: Vec<u64> = (0..n as u64)
                .map(|i| {
                    let v = next(max + 1);
                    (u64::from(u32::MAX) - v) << 32 | i
                })
                .collect();
            let mut expected = packed.clone();
            expected.sort_unstable();
            sort_packed(&mut packed);
            assert_eq!(packed, expected, "n = {n}, max = {max}");
        }
    }
}

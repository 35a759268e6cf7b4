//! Lower bounds on the largest part of a multiway partition.

use alloc::vec::Vec;

use crate::error::Error;
use crate::num::{Item, Total};

use super::instance::{self, Config, Instance};
use super::{Dims, Objective, TotalOf};

/// A lower bound on the largest part of every partition of `items` into `k`
/// parts: the largest of `ceil(sum / k)`, the largest item, and for every
/// `j >= 1` with `j * k < n` the sum of the `j + 1` smallest among the
/// `j * k + 1` largest items (some part holds `j + 1` of them; for `j = 1`
/// the `k`-th and `(k + 1)`-th largest items).
///
/// Items with several dimensions are bounded on their combined weight (the
/// sum over dimensions). Float bounds are rounded down, by a relative
/// `(n d + 2) 2^-51` at most, so that they hold under rounding: the bound
/// never exceeds the objective of a partition this module returns (whose
/// sums are float sums too). Values that would overflow the sum to infinity
/// are left out of it, so the bound stays finite (at least the largest
/// item).
///
/// # Complexity
///
/// O(n log n) time for the sort, O(n) extra space; the `j` bounds are taken
/// for `j * (j + 1) / 2 <= n`, so they cost O(n).
///
/// # Errors
///
/// [`Error::ZeroParts`] for `k == 0`; [`Error::DimensionMismatch`],
/// [`Error::NoDimensions`] and [`Error::Invalid`] at a
/// [size](crate::Locator::Size) for invalid items.
///
/// # Examples
///
/// ```
/// use microbatch::partition::lower_bound;
///
/// assert_eq!(lower_bound(&[4u32, 5, 6, 7, 8], 2)?, 15); // ceil(30 / 2)
/// assert_eq!(lower_bound(&[9u32, 1, 1], 2)?, 9); // the largest item
/// assert_eq!(lower_bound(&[5u32, 5, 5], 2)?, 10); // two of three share a part
/// # Ok::<(), microbatch::Error>(())
/// ```
pub fn lower_bound<I: Item>(items: &[I], k: usize) -> Result<TotalOf<I>, Error> {
    if k == 0 {
        return Err(Error::ZeroParts);
    }
    let inst = instance::instance(items, Dims::Combined, None)?;
    Ok(max_part_bound(inst.n, |r| inst.key(r), k, None, inst.d))
}

/// The bound of [`lower_bound`] on the `n` values `at(0), at(1), ...`, in
/// decreasing order, with the equal-count bounds when `lo` gives the
/// smallest part count. Each value is a float sum of `terms` sizes (1 for a
/// size, `d` for a combined weight), which the rounding margin accounts for.
fn max_part_bound<T: Total>(
    n: usize,
    at: impl Fn(usize) -> T,
    k: usize,
    lo: Option<usize>,
    terms: usize,
) -> T {
    if n == 0 {
        return T::ZERO;
    }
    let sum_of = |range: core::ops::Range<usize>| sum_down(range.map(&at), terms);
    bound_from(n, k, lo, at(0), sum_of(0..n), sum_of)
}

/// The bound of [`max_part_bound`] from the largest value, a lower bound on
/// the sum, and lower bounds on the sums over ranges of ranks (called for
/// `O(sqrt(n))` ranges of `O(sqrt(n))` ranks each, so that summing rank by
/// rank costs O(n)).
///
/// Float bounds are rounded down (see [`down`]): each is at most the float
/// sum of every part it bounds, computed in rank order as
/// [`Instance::sums`] does, so a bound never exceeds a result's objective
/// and a bound above a cap proves the cap infeasible.
pub(crate) fn bound_from<T: Total>(
    n: usize,
    k: usize,
    lo: Option<usize>,
    largest: T,
    sum: T,
    sum_of: impl Fn(core::ops::Range<usize>) -> T,
) -> T {
    if n == 0 {
        return T::ZERO;
    }
    let mut bound = instance::max(largest, down(instance::div_ceil(sum, k), 1));
    let mut j = 1;
    while j * k < n && j * (j + 1) / 2 <= n {
        let top = j * k;
        bound = instance::max(bound, sum_of(top - j..top + 1));
        j += 1;
    }
    if let Some(lo) = lo {
        // The part of the largest item holds `lo - 1` more items, and some
        // part holds `ceil(n / k)` items.
        if lo > 1 {
            bound = instance::max(bound, down(largest.add(sum_of(n - (lo - 1)..n)), 2));
        }
        let hi = n.div_ceil(k);
        if hi > 1 {
            bound = instance::max(bound, sum_of(n - hi..n));
        }
    }
    bound
}

/// A lower bound on the sum of `values`, each a float sum of `terms` sizes:
/// values that would overflow the sum to infinity are left out, and the
/// float sum is rounded down by [`down`]. Exact for integers.
pub(crate) fn sum_down<T: Total>(values: impl Iterator<Item = T>, terms: usize) -> T {
    let (mut acc, mut m) = (T::ZERO, 0usize);
    for x in values {
        let next = acc.add(x);
        // NaN-safe: only a finite sum is kept.
        if next.to_f64().is_finite() {
            acc = next;
            m += 1;
        }
    }
    down(acc, m.saturating_mul(terms.max(1)))
}

/// Smaller floats than this are bounded by zero (the relative margin of
/// [`down`] needs normal numbers).
const TINY: f64 = 1e-280;

/// A float total lowered below every real number that a float computation
/// of `terms` roundings (a sum of `terms + 1` non-negative values, or a
/// quotient for `terms = 1`) could have rounded up to it: `x (1 - (terms +
/// 2) 2^-51)`, at least four times the worst relative error `terms 2^-53`
/// plus the rounding of this product. Zero for tiny or non-finite `x`,
/// `x` itself for integers.
pub(crate) fn down<T: Total>(x: T, terms: usize) -> T {
    if instance::is_integer::<T>() {
        return x;
    }
    let v = x.to_f64();
    // NaN-safe: `is_finite` is false for NaN.
    if !v.is_finite() || v < TINY {
        return T::ZERO;
    }
    // Powers of two divide exactly (`x 2^-51` is normal above `TINY`).
    let slack = x
        .div_ceil_parts(1 << 26)
        .div_ceil_parts(1 << 25)
        .mul_count(terms as u64 + 2);
    x.saturating_sub(slack)
}

/// A lower bound on the largest part sum in original dimension `j` of
/// every partition of `inst` under `cfg`'s counts: cap checks compare it
/// with the cap before any search. O(n log n) for several dimensions (a
/// sort of dimension `j`), O(n) for one.
pub(crate) fn dim_bound<T: Total>(inst: &Instance<T>, cfg: &Config<T>, j: usize) -> T {
    let lo = cfg.equal_count.then_some(inst.n / cfg.k);
    if inst.d == 1 {
        return max_part_bound(inst.n, |r| inst.w[r], cfg.k, lo, 1);
    }
    let mut sorted: Vec<T> = (0..inst.n).map(|r| inst.w[r * inst.d + j]).collect();
    sorted.sort_unstable_by(|a, b| instance::cmp(*b, *a));
    max_part_bound(inst.n, |r| sorted[r], cfg.k, lo, 1)
}

/// A lower bound on the objective of `cfg` over `inst`.
pub(crate) fn objective_bound<T: Total>(inst: &Instance<T>, cfg: &Config<T>) -> T {
    let lo = cfg.equal_count.then_some(inst.n / cfg.k);
    // A combined weight is a float sum of `d` sizes.
    let terms = if inst.od > 1 { 1 } else { inst.d };
    let mut total = T::ZERO;
    for j in 0..inst.od {
        // Ranks are in decreasing combined weight: one objective dimension
        // is read in place, several are sorted per dimension.
        let mut sorted: Vec<T> = Vec::new();
        if inst.od > 1 {
            sorted = (0..inst.n).map(|r| inst.ow(r, j)).collect();
            sorted.sort_unstable_by(|a, b| instance::cmp(*b, *a));
        }
        let at = |r: usize| if inst.od > 1 { sorted[r] } else { inst.key(r) };
        let max_part = max_part_bound(inst.n, at, cfg.k, lo, terms);
        let bound = match cfg.objective {
            Objective::MaxPart => max_part,
            // With fewer items than parts some part is empty.
            Objective::Spread if inst.n < cfg.k => max_part,
            Objective::Spread => {
                let sum = (0..inst.n).fold(T::ZERO, |acc, r| acc.add(at(r)));
                if instance::has_remainder(sum, cfg.k) {
                    instance::unit()
                } else {
                    T::ZERO
                }
            }
        };
        // The same fold as the objective's (`objective_value`): a sum of
        // bounds is at most the sum of what they bound.
        total = total.add(bound);
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_by_hand() {
        fn on<T: Total>(v: &[T], k: usize, lo: Option<usize>) -> T {
            max_part_bound(v.len(), |i| v[i], k, lo, 1)
        }
        assert_eq!(on::<u128>(&[], 3, None), 0);
        assert_eq!(on::<u128>(&[8, 7, 6, 5, 4], 2, None), 15);
        // k-th and (k+1)-th largest share a part: 5 + 5.
        assert_eq!(on::<u128>(&[5, 5, 5], 2, None), 10);
        // j = 2: three of the five largest share a part: 3 + 3 + 3.
        assert_eq!(on::<u128>(&[3, 3, 3, 3, 3], 2, None), 9);
        // Equal counts of 2: the largest item takes the smallest one along.
        assert_eq!(on::<u128>(&[10, 1, 1, 1], 2, Some(2)), 11);
        assert_eq!(on::<f64>(&[1.0, 1.0, 1.0], 4, None), 1.0);
        assert_eq!(on::<u128>(&[1, 1], 4, None), 1);
    }
}

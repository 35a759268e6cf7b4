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
/// sum over dimensions). Float bounds are `sum / k` without rounding up.
///
/// # Complexity
///
/// O(n log n) time for the sort, O(n) extra space; the `j` bounds are taken
/// for `j * (j + 1) / 2 <= n`, so they cost O(n).
///
/// # Errors
///
/// [`Error::ZeroParts`] for `k == 0`; [`Error::DimensionMismatch`],
/// [`Error::NoDimensions`] and [`Error::InvalidSize`] for invalid items.
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
    Ok(max_part_bound(inst.n, |r| inst.key(r), k, None))
}

/// The bound of [`lower_bound`] on the `n` values `at(0), at(1), ...`, in
/// decreasing order, with the equal-count bound when `lo` gives the smallest
/// part count: the part of the largest item holds at least `lo - 1` more
/// items.
fn max_part_bound<T: Total>(n: usize, at: impl Fn(usize) -> T, k: usize, lo: Option<usize>) -> T {
    if n == 0 {
        return T::ZERO;
    }
    let sum_of = |range: core::ops::Range<usize>| range.fold(T::ZERO, |acc, i| acc.add(at(i)));
    bound_from(n, k, lo, at(0), sum_of(0..n), sum_of)
}

/// The bound of [`max_part_bound`] from the largest value, the sum, and the
/// sum over a range of ranks (called for `O(sqrt(n))` ranges of `O(sqrt(n))`
/// ranks each, so that summing rank by rank costs O(n)).
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
    let mut bound = instance::max(largest, instance::div_ceil(sum, k));
    let mut j = 1;
    while j * k < n && j * (j + 1) / 2 <= n {
        let top = j * k;
        bound = instance::max(bound, sum_of(top - j..top + 1));
        j += 1;
    }
    if let Some(lo) = lo.filter(|&lo| lo > 1) {
        bound = instance::max(bound, largest.add(sum_of(n - (lo - 1)..n)));
    }
    bound
}

/// A lower bound on the objective of `cfg` over `inst`.
pub(crate) fn objective_bound<T: Total>(inst: &Instance<T>, cfg: &Config<T>) -> T {
    let lo = cfg.equal_count.then_some(inst.n / cfg.k);
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
        let max_part = max_part_bound(inst.n, at, cfg.k, lo);
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
            max_part_bound(v.len(), |i| v[i], k, lo)
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

//! Lower bounds on the number of bins: L1 (the volume bound) and the
//! Martello-Toth bound L2.

use alloc::vec::Vec;

use super::{validate, Input, LowerBounds};
use crate::error::Error;
use crate::num::{Item, Size, Total};

/// The lower bounds L1 and L2 on the number of bins any packing of `items`
/// into bins of `capacity` needs.
///
/// - L1 = `ceil(sum / capacity)`;
/// - L2 (Martello and Toth) adds that items above half the capacity need a bin
///   each: for every threshold `α <= capacity / 2`, the items above
///   `capacity - α` and those in `(capacity / 2, capacity - α]` each take a bin,
///   and the items in `[α, capacity / 2]` need at least as many more bins as
///   their volume exceeds the free space in the second group. L2 is the
///   largest of these counts over `α`, and is never below L1.
///
/// With several dimensions each bound is the largest of the per-dimension
/// bounds. For float sizes the bounds are computed in `f64` with a relative
/// slack of a few ulps per item, so that rounding cannot lift them above the
/// truth.
///
/// # Complexity
///
/// O(n log n) time (a sort per dimension) and O(n) extra space.
///
/// # Errors
///
/// The same validation as the packing functions: see the
/// [module docs](crate::pack#errors).
///
/// # Examples
///
/// ```
/// use microbatch::pack::lower_bounds;
///
/// // 60 + 60 + 60 cannot share bins of 100, though their volume fits in two.
/// let lb = lower_bounds(&[60u32, 60, 60, 10], 100)?;
/// assert_eq!((lb.l1, lb.l2), (2, 3));
/// # Ok::<(), microbatch::Error>(())
/// ```
///
/// # References
///
/// S. Martello and P. Toth, "Lower bounds and reduction procedures for the
/// bin packing problem", *Discrete Applied Mathematics* 28(1):59-70, 1990.
pub fn lower_bounds<I: Item>(items: &[I], capacity: I::Capacity) -> Result<LowerBounds, Error> {
    let input = validate(items, &capacity)?;
    Ok(bounds_of(&input, None))
}

/// The bounds of validated input. `descending`, when given for one
/// dimension, is the sizes sorted in decreasing order, which spares the sort.
pub(crate) fn bounds_of<T: Size>(input: &Input<T>, descending: Option<&[T]>) -> LowerBounds {
    let n = input.len();
    let mut best = LowerBounds::default();
    if let (Some(sorted), 1) = (descending, input.dims) {
        return bounds_sorted(sorted, input.capacity[0]);
    }
    let mut column: Vec<T> = Vec::with_capacity(n);
    for (dim, &c) in input.capacity.iter().enumerate() {
        column.clear();
        column.extend((0..n).map(|i| input.sizes[i * input.dims + dim]));
        column.sort_unstable_by(|a, b| b.cmp(a));
        let b = bounds_sorted(&column, c);
        best.l1 = best.l1.max(b.l1);
        best.l2 = best.l2.max(b.l2);
    }
    best
}

/// L1 and L2 of one dimension; `a` sorted in decreasing order, every size
/// `<= c`.
fn bounds_sorted<T: Size>(a: &[T], c: T) -> LowerBounds {
    let n = a.len();
    // `a[..big]` are the items above half the capacity: `x > c - x` (no
    // overflow since x <= c).
    let big = a.partition_point(|&x| x > c.saturating_sub(x));
    let mut big_free = T::Total::ZERO;
    let mut total = T::Total::ZERO;
    for &x in &a[..big] {
        total = total.add(x.widen());
        big_free = big_free.add(c.saturating_sub(x).widen());
    }
    let mut small_sum = T::Total::ZERO;
    for &x in &a[big..] {
        small_sum = small_sum.add(x.widen());
    }
    let total = total.add(small_sum);
    let l1 = T::bins_needed(total, c, n);

    // Sweep α over 0 and the distinct small sizes, ascending. J3 =
    // `a[big..hi]` holds the small items of size >= α, J2 = `a[lo..big]` the
    // big items of size <= c - α; `j3` and `j2_free` are their running sums
    // (volume, and free space left beside each).
    let (mut lo, mut hi) = (0usize, n);
    let (mut j3, mut j2_free) = (small_sum, big_free);
    let mut l2 = l1;
    let mut alpha = T::zero();
    loop {
        while hi > big && a[hi - 1] < alpha {
            hi -= 1;
            j3 = j3.saturating_sub(a[hi].widen());
        }
        let limit = c.saturating_sub(alpha);
        while lo < big && a[lo] > limit {
            j2_free = j2_free.saturating_sub(c.saturating_sub(a[lo]).widen());
            lo += 1;
        }
        let extra = T::bins_needed(j3.saturating_sub(j2_free), c, n);
        l2 = l2.max((big as u64).saturating_add(extra));
        // The next candidate: the smallest small size above α. The items
        // skipped here stay in J3 until `hi` passes them above.
        let mut k = hi;
        while k > big && a[k - 1] <= alpha {
            k -= 1;
        }
        if k <= big {
            break;
        }
        alpha = a[k - 1];
    }
    LowerBounds { l1, l2 }
}

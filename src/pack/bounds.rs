//! Lower bounds on the number of bins: L1 (the volume bound) and the
//! Martello-Toth bound L2.

use alloc::vec::Vec;

use super::order::Classes;
use super::{validate, Input, Keep, LowerBounds};
use crate::error::Error;
use crate::num::{Item, Size, TotalOps};

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
    let input = validate(items, &capacity, Keep::Sizes)?;
    Ok(bounds_of(&input, None))
}

/// The bounds of validated input. `classes`, when given for one dimension,
/// are the runs of equal size of the sorted sizes, which spares the sort.
pub(crate) fn bounds_of<T: Size>(input: &Input<T>, classes: Option<&Classes<T>>) -> LowerBounds {
    if let (Some(classes), 1) = (classes, input.dims) {
        return bounds_classes(classes, input.capacity[0]);
    }
    let n = input.len();
    let mut best = LowerBounds::default();
    let mut column: Vec<T> = Vec::with_capacity(n);
    for (dim, &c) in input.capacity.iter().enumerate() {
        column.clear();
        column.extend((0..n).map(|i| input.sizes[i * input.dims + dim]));
        column.sort_unstable_by(|a, b| b.cmp(a));
        let b = bounds_classes(&Classes::of(column.iter().copied()), c);
        best.l1 = best.l1.max(b.l1);
        best.l2 = best.l2.max(b.l2);
    }
    best
}

/// L1 and L2 of one dimension, from the runs of equal size (largest first;
/// every size `<= c`). O(runs).
fn bounds_classes<T: Size>(classes: &Classes<T>, c: T) -> LowerBounds {
    let size = &classes.size;
    let runs = size.len();
    let n = classes.start.last().copied().unwrap_or(0);
    let count = |k: usize| classes.count(k) as u64;
    let volume = |k: usize| size[k].widen().mul_count(count(k));
    let free = |k: usize| c.saturating_sub(size[k]).widen().mul_count(count(k));
    // Runs `..big_runs` are the items above half the capacity: `x > c - x`
    // (no overflow since x <= c).
    let big_runs = size.partition_point(|&x| x > c.saturating_sub(x));
    let big = classes.start[big_runs] as u64;
    let (mut total, mut big_free, mut small_sum) = (T::Total::ZERO, T::Total::ZERO, T::Total::ZERO);
    for k in 0..big_runs {
        total = total.add(volume(k));
        big_free = big_free.add(free(k));
    }
    for k in big_runs..runs {
        small_sum = small_sum.add(volume(k));
    }
    let total = total.add(small_sum);
    let l1 = T::bins_needed(total, c, n);

    // Sweep α over 0 and the distinct small sizes, ascending. J3 = runs
    // `big_runs..hi` hold the small items of size >= α, J2 = runs
    // `lo..big_runs` the big items of size <= c - α; `j3` and `j2_free` are
    // their volume and the free space left beside each.
    let (mut lo, mut hi) = (0usize, runs);
    let (mut j3, mut j2_free) = (small_sum, big_free);
    let mut l2 = l1;
    let mut alpha = T::zero();
    loop {
        while hi > big_runs && size[hi - 1] < alpha {
            hi -= 1;
            j3 = j3.saturating_sub(volume(hi));
        }
        let limit = c.saturating_sub(alpha);
        while lo < big_runs && size[lo] > limit {
            j2_free = j2_free.saturating_sub(free(lo));
            lo += 1;
        }
        let extra = T::bins_needed(j3.saturating_sub(j2_free), c, n);
        l2 = l2.max(big.saturating_add(extra));
        // The next candidate: the smallest small size above α.
        let mut k = hi;
        while k > big_runs && size[k - 1] <= alpha {
            k -= 1;
        }
        if k <= big_runs {
            break;
        }
        alpha = size[k - 1];
    }
    LowerBounds { l1, l2 }
}

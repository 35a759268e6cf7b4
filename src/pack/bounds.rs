//! Lower bounds on the number of bins: L1 (the volume bound) and the
//! Martello-Toth bound L2.

use alloc::vec::Vec;

use super::order::Classes;
use super::{validate, Input, Keep, LowerBounds};
use crate::error::Error;
use crate::num::{ceil_lowered, Item, Size, TotalOps};

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
/// bounds. For float sizes the bounds hold for packings whose loads are
/// float sums (as every packer's are): they are computed in `f64` with a
/// slack of a few ulps per item, rounding only downwards, and allow each
/// bin the rounding of its own load, so that no packing of the crate, and
/// no optimum under float loads, has fewer bins. Sizes near `f64::MAX` do not
/// overflow them.
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
    if T::Total::INTEGER {
        bounds_exact(classes, c)
    } else {
        bounds_float(classes, c)
    }
}

/// Integer sizes: exact sums.
fn bounds_exact<T: Size>(classes: &Classes<T>, c: T) -> LowerBounds {
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
        match next_alpha(size, big_runs, hi, alpha) {
            Some(next) => alpha = next,
            None => break,
        }
    }
    LowerBounds { l1, l2 }
}

/// The next α of the sweep: the smallest small size (runs `big_runs..hi`)
/// above `alpha`.
fn next_alpha<T: Size>(size: &[T], big_runs: usize, hi: usize, alpha: T) -> Option<T> {
    let mut k = hi;
    while k > big_runs && size[k - 1] <= alpha {
        k -= 1;
    }
    (k > big_runs).then(|| size[k - 1])
}

/// Float sizes: the same bounds, computed so that rounding can only lower
/// them, for packings whose loads are float sums.
///
/// A packing's load is summed in the size type, each addition rounding to
/// nearest, so a bin whose load is at most `c` may hold sizes whose exact sum
/// exceeds `c` by up to `m * ROUNDING * c` for `m` items: the bins of any
/// packing hold at most `n * ROUNDING` bins' worth more than their
/// capacities, and each count below is lowered by that much. "Big" items
/// (`x + x > c` as a float sum) pairwise share no bin, and J1 holds those
/// with `x + α > c` as a float sum, which share no bin with an item of size
/// `>= α`: both are decided by [`SizeOps::fits`](crate::num::SizeOps::fits),
/// the test the packers use, so they hold for float loads exactly.
///
/// Volumes are kept as fractions of `c` (each at most 1, so no sum
/// overflows, even of sizes near `f64::MAX`), in prefix sums that are only
/// added to (never subtracted from), so each has a relative error below `(n
/// + 3) 2^-53`; sums that are subtracted are lowered or raised by twice that.
fn bounds_float<T: Size>(classes: &Classes<T>, c: T) -> LowerBounds {
    let size = &classes.size;
    let runs = size.len();
    let n = classes.start.last().copied().unwrap_or(0);
    let nf = n as f64;
    let cf = c.to_f64();
    let count = |k: usize| classes.count(k) as f64;
    let volume = |k: usize| size[k].to_f64() / cf * count(k);
    let free = |k: usize| (cf - size[k].to_f64()) / cf * count(k);
    // Relative and absolute (underflow) error of every computed sum.
    let rel = (nf + 3.0) * f64::EPSILON;
    let abs = (nf + 1.0) * f64::MIN_POSITIVE;
    let lower = |x: f64| x - x * rel - abs;
    let upper = |x: f64| x + x * rel + abs;
    // What the bins of any packing hold beyond their capacities, in bins.
    let relax = nf * T::ROUNDING;

    let big_runs = size.partition_point(|&x| !T::fits(x, x, c));
    let big = classes.start[big_runs] as u64;
    // `j3[k - big_runs]`: the volume of runs `big_runs..k`.
    let mut j3 = Vec::with_capacity(runs - big_runs + 1);
    let mut sum = 0.0;
    j3.push(sum);
    for k in big_runs..runs {
        sum += volume(k);
        j3.push(sum);
    }
    // `j2_free[k]`: the free space beside runs `k..big_runs`.
    let mut j2_free = alloc::vec![0.0; big_runs + 1];
    let mut sum = 0.0;
    for k in (0..big_runs).rev() {
        sum += free(k);
        j2_free[k] = sum;
    }
    let mut big_volume = 0.0;
    for k in 0..big_runs {
        big_volume += volume(k);
    }
    let total = lower(big_volume) + lower(j3[runs - big_runs]);
    let l1 = ceil_lowered(total - relax);

    // The sweep of `bounds_exact`, J1 decided by `fits`.
    let (mut lo, mut hi) = (0usize, runs);
    let mut l2 = l1;
    let mut alpha = T::zero();
    loop {
        while hi > big_runs && size[hi - 1] < alpha {
            hi -= 1;
        }
        while lo < big_runs && !T::fits(size[lo], alpha, c) {
            lo += 1;
        }
        let extra = ceil_lowered(lower(j3[hi - big_runs]) - upper(j2_free[lo]) - relax);
        l2 = l2.max(big.saturating_add(extra));
        match next_alpha(size, big_runs, hi, alpha) {
            Some(next) => alpha = next,
            None => break,
        }
    }
    LowerBounds { l1, l2 }
}

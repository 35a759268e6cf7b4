//! First-fit, online and decreasing: each item goes into the lowest-numbered
//! bin it fits in, found through a [`LoadTree`](super::tree::LoadTree).

use alloc::vec::Vec;

use super::bitset::BitSet;
use super::bounds::bounds_of;
use super::order::Sorted;
use super::tree::LoadTree;
use super::{assemble, order, validate, Input, LowerBounds, Packing};
use crate::error::Error;
use crate::num::{Item, Size};

/// First-fit-decreasing (FFD): sorts the items by decreasing size, then puts
/// each into the lowest-numbered bin it fits in, opening a bin when none has
/// room.
///
/// Ties between equal sizes go to the smaller id (for `(id, item)` items),
/// then to the smaller input index, so the result is deterministic and, with
/// unique ids, the same by id for any order of the input. Vector items are
/// ordered as the [module docs](crate::pack#multi-dimensional-capacities) say.
///
/// # Complexity
///
/// O(n log n) time and O(n) extra space for one dimension: a sort (a
/// counting sort, O(n + capacity), when the capacity is an integer below
/// `max(2^16, 4n)`) and, per item, one descent of a tree over the bins' loads
/// that finds the leftmost bin with room in O(log bins). With several
/// dimensions the descent prunes by per-dimension minimums and may backtrack
/// (see the [module docs](crate::pack#multi-dimensional-capacities)).
///
/// # Guarantee
///
/// At most `11/9 OPT + 6/9` bins for one dimension (Dósa 2007), which is
/// tight. Vector bin packing has no such constant bound (up to `d + 1` times
/// OPT asymptotically for `d` dimensions, Garey et al. 1976).
///
/// # Errors
///
/// See the [module docs](crate::pack#errors): the capacity is checked, then
/// every item; every item larger than the capacity is listed.
///
/// # Examples
///
/// ```
/// use microbatch::pack::first_fit_decreasing;
///
/// let packing = first_fit_decreasing(&[2u32, 5, 4, 7, 1, 3, 8], 10)?;
/// let bins: Vec<&[usize]> = packing.bins().map(|b| b.items()).collect();
/// // 8+2, 7+3, 5+4+1
/// assert_eq!(bins, [&[6, 0][..], &[3, 5], &[1, 2, 4]]);
/// # Ok::<(), microbatch::Error>(())
/// ```
///
/// Ids make the result independent of input order:
///
/// ```
/// use microbatch::pack::first_fit_decreasing;
///
/// let a = [("a", 5u32), ("b", 5), ("c", 5), ("d", 4)];
/// let b = [("d", 4u32), ("c", 5), ("b", 5), ("a", 5)];
/// fn ids<'a>(items: &[(&'a str, u32)], p: &microbatch::pack::Packing<u32>) -> Vec<Vec<&'a str>> {
///     p.bins().map(|bin| bin.items().iter().map(|&i| items[i].0).collect()).collect()
/// }
/// let (pa, pb) = (first_fit_decreasing(&a, 10)?, first_fit_decreasing(&b, 10)?);
/// assert_eq!(ids(&a, &pa), ids(&b, &pb));
/// assert_eq!(ids(&a, &pa), [vec!["a", "b"], vec!["c", "d"]]);
/// # Ok::<(), microbatch::Error>(())
/// ```
///
/// # References
///
/// D. S. Johnson, *Near-optimal bin packing algorithms*, PhD thesis, MIT, 1973;
/// G. Dósa, "The tight bound of first fit decreasing bin-packing algorithm is
/// FFD(I) <= 11/9 OPT(I) + 6/9", ESCAPE 2007, LNCS 4614.
pub fn first_fit_decreasing<I: Item>(
    items: &[I],
    capacity: I::Capacity,
) -> Result<Packing<I::Size>, Error> {
    let input = validate(items, &capacity)?;
    Ok(ffd_validated(items, &input))
}

/// FFD over validated input.
pub(crate) fn ffd_validated<I: Item>(items: &[I], input: &Input<I::Size>) -> Packing<I::Size> {
    let sorted = order::decreasing(items, input);
    if input.dims > 1 {
        let bounds = bounds_of(input, None);
        return pack_first_fit(input, Some(&sorted.order), &sorted.sizes, bounds);
    }
    let bounds = bounds_of(input, Some(&sorted.classes));
    ffd_by_bins(input, sorted, bounds)
}

/// One-dimensional FFD, filled bin by bin.
///
/// First-fit in a fixed item order puts an item in bin `k` exactly when it
/// fits none of the bins before and fits bin `k` at its turn, and bin `k`'s
/// load at that turn depends only on the items bin `k` took before. So the
/// packing is the same when the bins are filled one after the other, each
/// taking, in item order, every remaining item that still fits. With the
/// items in decreasing order, the next item a bin takes is the largest
/// remaining one that fits (the first in order among equal sizes).
///
/// The items are grouped in classes of equal size (runs of `sorted`); a
/// [`BitSet`] over the classes, largest first, holds those with items left,
/// and each class has a cursor to its next item. Taking an item is one
/// successor query from the first class that fits, found by a table lookup
/// (integer capacities up to `max(2^16, 4n)`) or a binary search over the
/// classes. O(n log n) in all, O(n) space, and the bins come out in order
/// with their items in placement order, without a second pass.
fn ffd_by_bins<T: Size>(input: &Input<T>, sorted: Sorted<T>, bounds: LowerBounds) -> Packing<T> {
    let n = sorted.order.len();
    let order = &sorted.order;
    let c = input.capacity[0];
    // Classes of equal size, largest first: `start[k]..start[k + 1]`.
    let (size, start) = (&sorted.classes.size, &sorted.classes.start);
    let classes = size.len();
    let mut cursor = start[..classes].to_vec();
    let mut left = BitSet::new(classes);
    for k in 0..classes {
        left.insert(k);
    }
    // `too_big[r]`: the number of classes larger than a free room of `r`.
    let too_big: Option<Vec<usize>> = order::dense_limit(c, n).map(|cap| {
        let mut table = Vec::with_capacity(cap + 1);
        let mut k = classes;
        for r in 0..=cap {
            while k > 0 && size[k - 1].to_index().is_some_and(|v| v <= r) {
                k -= 1;
            }
            table.push(k);
        }
        table
    });
    let first_fitting = |load: T| -> usize {
        match &too_big {
            Some(table) => c
                .saturating_sub(load)
                .to_index()
                .map_or(classes, |r| table[r]),
            None => size.partition_point(|&s| !T::fits(load, s, c)),
        }
    };

    let mut offsets = alloc::vec![0usize];
    let mut items = Vec::with_capacity(n);
    let mut loads = Vec::new();
    while left.successor(0).is_some() {
        let mut load = T::zero();
        while let Some(k) = left.successor(first_fitting(load)) {
            // Take every copy of this size that fits at once (exact for
            // integers; one at a time for floats, whose sums round).
            let available = start[k + 1] - cursor[k];
            let copies = match (c.saturating_sub(load).to_index(), size[k].to_index()) {
                (Some(_), Some(0)) => available,
                (Some(room), Some(s)) => (room / s).clamp(1, available),
                _ => 1,
            };
            items.extend_from_slice(&order[cursor[k]..cursor[k] + copies]);
            cursor[k] += copies;
            if cursor[k] == start[k + 1] {
                left.remove(k);
            }
            for _ in 0..copies {
                load = load.add(size[k]);
            }
        }
        loads.push(load);
        offsets.push(items.len());
    }
    Packing {
        capacity: input.capacity.clone(),
        offsets,
        items,
        loads,
        bounds,
    }
}

/// Online first-fit (FF): puts each item, in input order, into the
/// lowest-numbered bin it fits in, opening a bin when none has room.
///
/// # Complexity
///
/// O(n log n) time and O(n) extra space for one dimension: one tree descent
/// per item, plus a sort for the L2 bound of the result. Several dimensions
/// as in [`first_fit_decreasing`].
///
/// # Guarantee
///
/// At most `floor(1.7 OPT)` bins for one dimension (Dósa and Sgall 2013).
///
/// # Errors
///
/// See the [module docs](crate::pack#errors).
///
/// # Examples
///
/// ```
/// use microbatch::pack::first_fit;
///
/// let packing = first_fit(&[6u32, 5, 4, 3], 10)?;
/// let bins: Vec<&[usize]> = packing.bins().map(|b| b.items()).collect();
/// assert_eq!(bins, [&[0, 2][..], &[1, 3]]);
/// # Ok::<(), microbatch::Error>(())
/// ```
///
/// # References
///
/// D. S. Johnson, A. Demers, J. D. Ullman, M. R. Garey and R. L. Graham,
/// "Worst-case performance bounds for simple one-dimensional packing
/// algorithms", *SIAM J. Computing* 3(4):299-325, 1974; G. Dósa and J. Sgall,
/// "First Fit bin packing: a tight analysis", STACS 2013.
pub fn first_fit<I: Item>(items: &[I], capacity: I::Capacity) -> Result<Packing<I::Size>, Error> {
    let input = validate(items, &capacity)?;
    let bounds = bounds_of(&input, None);
    Ok(pack_first_fit(&input, None, &input.sizes, bounds))
}

/// First-fit over `order` (arrival order when `None`), whose sizes are
/// `sorted`; the tree is sized for twice the L1 bound, which
/// one-dimensional first-fit never exceeds by more than one bin.
pub(crate) fn pack_first_fit<T: Size>(
    input: &Input<T>,
    order: Option<&[usize]>,
    sorted: &[T],
    bounds: LowerBounds,
) -> Packing<T> {
    let n = input.len();
    let hint = usize::try_from(bounds.l1.saturating_mul(2))
        .unwrap_or(usize::MAX)
        .min(n);
    let mut tree = LoadTree::new(&input.capacity, hint);
    let bin_at: Vec<usize> = sorted
        .chunks_exact(input.dims)
        .map(|size| tree.place(size))
        .collect();
    assemble(input, order, &bin_at, tree.into_loads(), bounds)
}

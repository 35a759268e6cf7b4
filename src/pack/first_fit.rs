//! First-fit, online and decreasing: each item goes into the lowest-numbered
//! bin it fits in, found through a [`LoadTree`](super::tree::LoadTree).

use alloc::vec::Vec;

use super::bounds::bounds_of;
use super::grid::{Grid, GridTree};
use super::order::{Classes, Sorted};
use super::tree::LoadTree;
use super::{assemble, order, validate, Input, Keep, LowerBounds, Packing};
use crate::bitset::BitSet;
use crate::error::Error;
use crate::grouped::Grouped;
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
/// counting sort, O(n + capacity), when the capacity is an integer of at
/// most `max(2^10, 2n)`), then the bins are filled one after the other, each
/// taking the largest remaining item that fits, found by a successor query
/// over the distinct sizes in O(log_64 n). First-fit in a fixed order gives
/// the same packing filled bin by bin as item by item, so this is FFD
/// exactly, without a search over the bins. Several dimensions:
/// O(n log n + n g log n) with at most 64 groups `g` of equal secondary
/// sizes, else a tree search over the bins that may backtrack (see the
/// [module docs](crate::pack#multi-dimensional-capacities)).
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
    let input = validate(items, &capacity, Keep::CheckOnly)?;
    Ok(ffd_validated(items, &input))
}

/// FFD over validated input.
pub(crate) fn ffd_validated<I: Item>(items: &[I], input: &Input<I::Size>) -> Packing<I::Size> {
    let sorted = order::decreasing(items, input);
    if input.dims > 1 {
        let bounds = bounds_of(input, None);
        return match ItemGroups::of(input, &sorted.sizes) {
            Some(groups) => ffd_grouped(input, &sorted, groups, bounds),
            None => pack_first_fit(input, Some(&sorted.order), &sorted.sizes, bounds),
        };
    }
    let bounds = bounds_of(input, Some(&sorted.classes));
    ffd_by_bins(input, sorted, bounds)
}

/// Most groups of items by secondary sizes for [`ffd_grouped`].
const ITEM_GROUPS_MAX: usize = 64;

/// Vector items grouped by their sizes in the secondary dimensions (say
/// their tile count), each group's members (positions in the decreasing
/// order) split into runs of equal first-dimension size.
struct ItemGroups<T> {
    /// The secondary sizes of each group, `dims - 1` values a group.
    secondary: Vec<T>,
    /// The positions of each group's members, in order.
    members: Vec<Vec<usize>>,
    /// The runs of equal first-dimension size of each group (indices into
    /// `members`).
    runs: Vec<Classes<T>>,
}

impl<T: Size> ItemGroups<T> {
    /// Groups the sorted items, or `None` when there are more than
    /// [`ITEM_GROUPS_MAX`] distinct secondary size vectors, or when a group
    /// is not in decreasing first-dimension order (possible only when
    /// rounding of the `f64` order key merges two huge sizes).
    fn of(input: &Input<T>, sorted: &[T]) -> Option<Self> {
        let d = input.dims;
        let mut secondary: Vec<T> = Vec::new();
        let mut members: Vec<Vec<usize>> = Vec::new();
        for (pos, item) in sorted.chunks_exact(d).enumerate() {
            let key = &item[1..];
            let g = match secondary.chunks_exact(d - 1).position(|s| s == key) {
                Some(g) => g,
                None if members.len() < ITEM_GROUPS_MAX => {
                    secondary.extend_from_slice(key);
                    members.push(Vec::new());
                    members.len() - 1
                }
                None => return None,
            };
            members[g].push(pos);
        }
        let mut runs = Vec::with_capacity(members.len());
        for m in &members {
            let first = m.iter().map(|&pos| sorted[pos * d]);
            if first.clone().zip(first.clone().skip(1)).any(|(a, b)| a < b) {
                return None;
            }
            runs.push(Classes::of(first));
        }
        Some(ItemGroups {
            secondary,
            members,
            runs,
        })
    }
}

/// Vector FFD, filled bin by bin (as [`ffd_by_bins`]) over groups of items
/// with equal secondary sizes.
///
/// The next item a bin takes is the first remaining one, in the decreasing
/// order, that fits it in every dimension. Within a group the order is by
/// decreasing first-dimension size (the order key grows with it when the
/// other sizes are fixed), so each group answers "its first item that fits"
/// with a successor query over its runs, as in one dimension, and the bin
/// takes the earliest of the groups' answers. O(n log n + n g log n) for
/// `g` groups (at most 64; more fall back to the tree).
fn ffd_grouped<T: Size>(
    input: &Input<T>,
    sorted: &Sorted<T>,
    groups: ItemGroups<T>,
    bounds: LowerBounds,
) -> Packing<T> {
    let (d, n) = (input.dims, sorted.order.len());
    let cap = &input.capacity;
    let count = groups.members.len();
    let mut cursor: Vec<Vec<usize>> = groups
        .runs
        .iter()
        .map(|r| r.start[..r.len()].to_vec())
        .collect();
    let mut left: Vec<BitSet> = groups
        .runs
        .iter()
        .map(|r| {
            let mut set = BitSet::new(r.len());
            for k in 0..r.len() {
                set.insert(k);
            }
            set
        })
        .collect();
    let mut offsets = alloc::vec![0usize];
    let mut items = Vec::with_capacity(n);
    let mut loads = Vec::new();
    let mut load = alloc::vec![T::zero(); d];
    while items.len() < n {
        load.iter_mut().for_each(|l| *l = T::zero());
        loop {
            // The earliest item, over the groups, that fits the bin.
            let mut best: Option<(usize, usize, usize)> = None;
            for g in 0..count {
                let secondary = &groups.secondary[g * (d - 1)..(g + 1) * (d - 1)];
                let fits = secondary
                    .iter()
                    .zip(&load[1..])
                    .zip(&cap[1..])
                    .all(|((&s, &l), &c)| T::fits(l, s, c));
                if !fits {
                    continue;
                }
                let runs = &groups.runs[g];
                let from = runs.size.partition_point(|&s| !T::fits(load[0], s, cap[0]));
                if let Some(k) = left[g].successor(from) {
                    let pos = groups.members[g][cursor[g][k]];
                    if best.map_or(true, |(p, _, _)| pos < p) {
                        best = Some((pos, g, k));
                    }
                }
            }
            let Some((pos, g, k)) = best else { break };
            items.push(sorted.order[pos]);
            cursor[g][k] += 1;
            if cursor[g][k] == groups.runs[g].start[k + 1] {
                left[g].remove(k);
            }
            for (l, &s) in load.iter_mut().zip(&sorted.sizes[pos * d..(pos + 1) * d]) {
                *l = l.add(s);
            }
        }
        loads.extend_from_slice(&load);
        offsets.push(items.len());
    }
    Packing::new(
        cap.clone(),
        Grouped::from_trusted(items, offsets),
        loads,
        bounds,
    )
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
/// (integer capacities up to `max(2^10, 2n)`) or a binary search over the
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
    Packing::new(
        input.capacity.clone(),
        Grouped::from_trusted(items, offsets),
        loads,
        bounds,
    )
}

/// Online first-fit (FF): puts each item, in input order, into the
/// lowest-numbered bin it fits in, opening a bin when none has room.
///
/// # Complexity
///
/// O(n log n) time and O(n) extra space for one dimension: one descent of a
/// 16-ary tree over the bins' loads per item, plus a sort for the L2 bound
/// of the result. Several dimensions: O(n p log n) when the secondary
/// capacities allow at most 64 remaining vectors `p` (the tree keeps the
/// least load per remaining vector); beyond, the descent prunes by
/// per-dimension minimums and may backtrack, up to O(bins) per item (see the
/// [module docs](crate::pack#multi-dimensional-capacities)).
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
    let input = validate(items, &capacity, Keep::Sizes)?;
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
    let sizes = sorted.chunks_exact(input.dims);
    let (bin_at, loads): (Vec<usize>, Vec<T>) = match Grid::of(&input.capacity) {
        Some(grid) => {
            let mut tree = GridTree::new(grid, &input.capacity, hint);
            (
                sizes.map(|size| tree.place(size)).collect(),
                tree.into_loads(),
            )
        }
        None => {
            let mut tree = LoadTree::new(&input.capacity, hint);
            (
                sizes.map(|size| tree.place(size)).collect(),
                tree.into_loads(),
            )
        }
    };
    assemble(input, order, &bin_at, loads, bounds)
}

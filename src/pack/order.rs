//! The item order of the decreasing algorithms: by size, largest first, ties
//! by id and then by input index.

use alloc::vec::Vec;

use super::Input;
use crate::num::{Item, Size, SizeOps};

/// Arrays indexed by value are used up to this many values regardless of `n`.
const DENSE_MIN: usize = 1 << 10;

/// Whether an array of `values` entries (indexed by a size or a remaining
/// capacity) is cheap next to `n` items: at most `max(2^10, 2n)` entries, so
/// that it costs O(n) time and space to set up.
pub(crate) fn dense_enough(values: usize, n: usize) -> bool {
    values <= DENSE_MIN.max(n.saturating_mul(2))
}

/// The capacity as an array bound, when values in `0..=capacity` are few
/// enough to index an array by value ([`dense_enough`]).
pub(crate) fn dense_limit<T: Size>(capacity: T, n: usize) -> Option<usize> {
    let c = capacity.to_index()?;
    dense_enough(c.saturating_add(1), n).then_some(c)
}

/// Items in decreasing order.
pub(crate) struct Sorted<T> {
    /// Item indices, in order.
    pub(crate) order: Vec<usize>,
    /// Their sizes, flattened (`dims` values an item); several dimensions
    /// only (else empty: `classes` says the same in less memory).
    pub(crate) sizes: Vec<T>,
    /// One dimension only (else empty): the runs of equal size, largest
    /// first, run `k` being positions `class_start[k]..class_start[k + 1]`.
    pub(crate) classes: Classes<T>,
}

/// Runs of equal sizes in a sorted (decreasing) list of one dimension.
pub(crate) struct Classes<T> {
    /// The size of each run, decreasing.
    pub(crate) size: Vec<T>,
    /// Where each run starts, plus the total length at the end.
    pub(crate) start: Vec<usize>,
}

impl<T> Default for Classes<T> {
    fn default() -> Self {
        Classes {
            size: Vec::new(),
            start: Vec::new(),
        }
    }
}

impl<T: Size> Classes<T> {
    /// The runs of a list sorted in decreasing order.
    pub(crate) fn of(sorted: impl ExactSizeIterator<Item = T>) -> Self {
        let mut classes = Classes::default();
        let n = sorted.len();
        for (p, s) in sorted.enumerate() {
            if classes.size.last() != Some(&s) {
                classes.size.push(s);
                classes.start.push(p);
            }
        }
        classes.start.push(n);
        classes
    }

    /// The number of runs.
    pub(crate) fn len(&self) -> usize {
        self.size.len()
    }

    /// The number of items in run `k`.
    pub(crate) fn count(&self, k: usize) -> usize {
        self.start[k + 1] - self.start[k]
    }
}

/// The indices of `items` in decreasing order (see the module docs of
/// [`crate::pack`] for the key of vector items), with their sizes and, for
/// one dimension, the runs of equal size.
///
/// One dimension: a counting sort when the capacity is a small integer
/// (O(n + capacity), stable by index), a comparison sort otherwise
/// (O(n log n)). Runs of equal size are then ordered by id.
pub(crate) fn decreasing<I: Item>(items: &[I], input: &Input<I::Size>) -> Sorted<I::Size> {
    let n = input.len();
    if input.dims > 1 {
        let order = decreasing_vectors(items, input);
        let sizes = super::gather(input, &order);
        return Sorted {
            order,
            sizes,
            classes: Classes::default(),
        };
    }
    // One dimension: the sizes are read off the items (validation did not
    // copy them).
    let size = |i: usize| items[i].size(0);
    let (mut order, classes) = match dense_limit(input.capacity[0], n) {
        Some(c) => counting_sort_desc(n, size, c),
        None => {
            let mut keyed: Vec<(I::Size, usize)> = (0..n).map(|i| (size(i), i)).collect();
            keyed.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
            let classes = Classes::of(keyed.iter().map(|&(s, _)| s));
            // Collected in place: the tail of the keys' allocation freed.
            let mut order: Vec<usize> = keyed.into_iter().map(|(_, i)| i).collect();
            order.shrink_to_fit();
            (order, classes)
        }
    };
    if core::mem::size_of::<I::Id>() != 0 {
        // Equal sizes: by id, then (stable sort) by index.
        for k in 0..classes.len() {
            if classes.count(k) > 1 {
                let run = &mut order[classes.start[k]..classes.start[k + 1]];
                run.sort_by(|&x, &y| items[x].id().cmp(items[y].id()));
            }
        }
    }
    Sorted {
        order,
        sizes: Vec::new(),
        classes,
    }
}

/// Counting sort of indices by size, largest first, stable by index, and the
/// runs of equal size, read off the counts.
/// Every size is at most `c` (validated), so `to_index` succeeds.
fn counting_sort_desc<T: Size>(
    n: usize,
    size: impl Fn(usize) -> T,
    c: usize,
) -> (Vec<usize>, Classes<T>) {
    let key = |s: T| c - s.to_index().unwrap_or(c).min(c);
    let mut start = alloc::vec![0usize; c + 2];
    for i in 0..n {
        start[key(size(i)) + 1] += 1;
    }
    for k in 0..=c {
        start[k + 1] += start[k];
    }
    let mut order = alloc::vec![0usize; n];
    for i in 0..n {
        let k = key(size(i));
        order[start[k]] = i;
        start[k] += 1;
    }
    // `start[k]` is now the end of key `k`'s run; one read per distinct size.
    let mut classes = Classes::default();
    let mut begin = 0;
    for &end in &start[..=c] {
        if end > begin {
            classes.size.push(size(order[begin]));
            classes.start.push(begin);
            begin = end;
        }
    }
    classes.start.push(begin);
    (order, classes)
}

/// Vector items: by the largest fraction of the capacity used in any
/// dimension, then the sum of fractions, then id, then index.
fn decreasing_vectors<I: Item>(items: &[I], input: &Input<I::Size>) -> Vec<usize> {
    let caps: Vec<f64> = input.capacity.iter().map(|c| c.to_f64()).collect();
    let mut keyed: Vec<(f64, f64, usize)> = (0..input.len())
        .map(|i| {
            let (mut max, mut sum) = (0.0f64, 0.0f64);
            for (s, c) in input.item(i).iter().zip(&caps) {
                let f = s.to_f64() / c;
                max = max.max(f);
                sum += f;
            }
            (max, sum, i)
        })
        .collect();
    keyed.sort_unstable_by(|a, b| {
        b.0.total_cmp(&a.0)
            .then(b.1.total_cmp(&a.1))
            .then_with(|| items[a.2].id().cmp(items[b.2].id()))
            .then(a.2.cmp(&b.2))
    });
    // Collected in place (the keys' allocation, three times the order's):
    // its tail freed.
    let mut order: Vec<usize> = keyed.into_iter().map(|(_, _, i)| i).collect();
    order.shrink_to_fit();
    order
}

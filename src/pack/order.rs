//! The item order of the decreasing algorithms: by size, largest first, ties
//! by id and then by input index.

use alloc::vec::Vec;

use super::Input;
use crate::num::{Item, Size};

/// Capacities up to this many values are counting-sorted regardless of `n`.
const DENSE_MIN: usize = 1 << 16;

/// Whether values in `0..=capacity` are few enough to index an array by
/// value: at most `max(2^16, 4 n)`, so the array costs O(n) space.
pub(crate) fn dense_limit<T: Size>(capacity: T, n: usize) -> Option<usize> {
    let c = capacity.to_index()?;
    (c <= DENSE_MIN.max(n.saturating_mul(4))).then_some(c)
}

/// The indices of `items` in decreasing order (see the module docs of
/// [`crate::pack`] for the key of vector items), and their sizes in that
/// order (flattened, `dims` values an item).
///
/// One dimension: a counting sort when the capacity is a small integer
/// (O(n + capacity), stable by index), a comparison sort otherwise
/// (O(n log n)). Runs of equal size are then ordered by id.
pub(crate) fn decreasing<I: Item>(
    items: &[I],
    input: &Input<I::Size>,
) -> (Vec<usize>, Vec<I::Size>) {
    let n = input.len();
    if input.dims > 1 {
        let order = decreasing_vectors(items, input);
        let sorted = super::gather(input, &order);
        return (order, sorted);
    }
    let sizes = &input.sizes;
    let (mut order, sorted): (Vec<usize>, Vec<I::Size>) = match dense_limit(input.capacity[0], n) {
        Some(c) => counting_sort_desc(sizes, c),
        None => {
            let mut keyed: Vec<(I::Size, usize)> = sizes.iter().copied().zip(0..n).collect();
            keyed.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
            let (sorted, order) = keyed.into_iter().unzip();
            (order, sorted)
        }
    };
    if core::mem::size_of::<I::Id>() != 0 {
        // Equal sizes: by id, then (stable sort) by index.
        let mut start = 0;
        while start < n {
            let s = sorted[start];
            let mut end = start + 1;
            while end < n && sorted[end] == s {
                end += 1;
            }
            if end - start > 1 {
                order[start..end].sort_by(|&x, &y| items[x].id().cmp(items[y].id()));
            }
            start = end;
        }
    }
    (order, sorted)
}

/// Counting sort of indices by size, largest first, stable by index, and the
/// sorted sizes, written in order from the counts rather than gathered.
/// Every size is at most `c` (validated), so `to_index` succeeds.
fn counting_sort_desc<T: Size>(sizes: &[T], c: usize) -> (Vec<usize>, Vec<T>) {
    let key = |s: T| c - s.to_index().unwrap_or(c).min(c);
    let mut start = alloc::vec![0usize; c + 2];
    for &s in sizes {
        start[key(s) + 1] += 1;
    }
    for k in 0..=c {
        start[k + 1] += start[k];
    }
    let mut order = alloc::vec![0usize; sizes.len()];
    for (i, &s) in sizes.iter().enumerate() {
        let k = key(s);
        order[start[k]] = i;
        start[k] += 1;
    }
    // `start[k]` is now the end of key `k`'s run; one read per distinct size.
    let mut sorted = Vec::with_capacity(sizes.len());
    for &end in &start[..=c] {
        if end > sorted.len() {
            let s = sizes[order[sorted.len()]];
            sorted.resize(end, s);
        }
    }
    (order, sorted)
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
    keyed.into_iter().map(|(_, _, i)| i).collect()
}

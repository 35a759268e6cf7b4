//! Best-fit, online and decreasing: each item goes into the bin it leaves
//! with the least room, found through an ordered index of the bins by
//! remaining capacity.

use alloc::collections::BTreeMap;
use alloc::vec::Vec;
use core::ops::Bound;

use super::bitset::BitSet;
use super::bounds::bounds_of;
use super::{assemble, gather, order, validate, Input, LowerBounds, Packing};
use crate::error::Error;
use crate::num::{Item, Size};

/// Best-fit-decreasing (BFD): sorts the items by decreasing size, then puts
/// each into the bin with the least remaining capacity that still holds it,
/// opening a bin when none has room.
///
/// Items are ordered exactly as by [`first_fit_decreasing`](super::first_fit_decreasing).
/// Among bins with equal remaining capacity, the item goes to the one that
/// reached that remaining capacity last. With one dimension this choice never
/// changes the number of bins or their loads, only which bin number an item
/// lands in. With several dimensions, "least remaining capacity" is measured
/// in the first dimension, and a bin qualifies only if the item fits in every
/// dimension.
///
/// # Complexity
///
/// O(n log n) time and O(n) extra space for one dimension: the sort of
/// [`first_fit_decreasing`](super::first_fit_decreasing), then per item one
/// successor query in an ordered index of remaining capacities. When the
/// capacity is an integer below `max(2^16, 4n)` the index is a 64-ary bitset
/// over the capacity values (O(log_64 capacity) per query), otherwise a
/// B-tree (O(log bins)). With several dimensions the query walks upward
/// through the candidate bins until one fits in every dimension, up to
/// O(bins) in the worst case.
///
/// # Guarantee
///
/// At most `11/9 OPT + 6/9` bins for one dimension, like FFD (Johnson 1973;
/// Dósa 2007).
///
/// # Errors
///
/// See the [module docs](crate::pack#errors).
///
/// # Examples
///
/// ```
/// use microbatch::pack::best_fit_decreasing;
///
/// let packing = best_fit_decreasing(&[5u32, 7, 3, 2, 2], 10)?;
/// let bins: Vec<&[usize]> = packing.bins().map(|b| b.items()).collect();
/// // 7 opens a bin, 5 another; 3 goes with the 7 (room 3), the 2s with the 5.
/// assert_eq!(bins, [&[1, 2][..], &[0, 3, 4]]);
/// # Ok::<(), microbatch::Error>(())
/// ```
///
/// # References
///
/// D. S. Johnson, *Near-optimal bin packing algorithms*, PhD thesis, MIT, 1973;
/// G. Dósa, "The tight bound of first fit decreasing bin-packing algorithm is
/// FFD(I) <= 11/9 OPT(I) + 6/9", ESCAPE 2007.
pub fn best_fit_decreasing<I: Item>(
    items: &[I],
    capacity: I::Capacity,
) -> Result<Packing<I::Size>, Error> {
    let input = validate(items, &capacity)?;
    Ok(bfd_validated(items, &input))
}

/// BFD over validated input.
pub(crate) fn bfd_validated<I: Item>(items: &[I], input: &Input<I::Size>) -> Packing<I::Size> {
    let order = order::decreasing(items, input);
    let sorted = gather(input, &order);
    let bounds = bounds_of(input, (input.dims == 1).then_some(&sorted[..]));
    pack_best_fit(input, &order, &sorted, bounds)
}

/// Online best-fit (BF): puts each item, in input order, into the bin with
/// the least remaining capacity that still holds it, opening a bin when none
/// has room. Ties as in [`best_fit_decreasing`].
///
/// # Complexity
///
/// As [`best_fit_decreasing`] without its sort (plus a sort for the L2 bound
/// of the result).
///
/// # Guarantee
///
/// At most `floor(1.7 OPT)` bins for one dimension (Dósa and Sgall 2014).
///
/// # Errors
///
/// See the [module docs](crate::pack#errors).
///
/// # Examples
///
/// ```
/// use microbatch::pack::best_fit;
///
/// let packing = best_fit(&[6u32, 7, 3, 4], 10)?;
/// let bins: Vec<&[usize]> = packing.bins().map(|b| b.items()).collect();
/// // 3 fits both bins; the 7's bin has less room left.
/// assert_eq!(bins, [&[0, 3][..], &[1, 2]]);
/// # Ok::<(), microbatch::Error>(())
/// ```
///
/// # References
///
/// G. Dósa and J. Sgall, "Optimal analysis of Best Fit bin packing", ICALP 2014.
pub fn best_fit<I: Item>(items: &[I], capacity: I::Capacity) -> Result<Packing<I::Size>, Error> {
    let input = validate(items, &capacity)?;
    let order: Vec<usize> = (0..input.len()).collect();
    let bounds = bounds_of(&input, None);
    Ok(pack_best_fit(&input, &order, &input.sizes, bounds))
}

/// Best-fit over `order`; `sorted` holds the sizes in that order.
pub(crate) fn pack_best_fit<T: Size>(
    input: &Input<T>,
    order: &[usize],
    sorted: &[T],
    bounds: LowerBounds,
) -> Packing<T> {
    let mut bins = Bins::new(&input.capacity, input.len());
    let placed: Vec<(usize, usize)> = order
        .iter()
        .zip(sorted.chunks_exact(input.dims))
        .map(|(&i, size)| (i, bins.place(size)))
        .collect();
    assemble(input, &placed, bins.loads, bounds)
}

const NONE: usize = usize::MAX;

/// The open bins, indexed by remaining capacity in the first dimension.
/// Bins with equal remaining capacity form a doubly linked stack.
struct Bins<T: Size> {
    dims: usize,
    capacity: Vec<T>,
    /// `loads[b * dims + d]`.
    loads: Vec<T>,
    next: Vec<usize>,
    prev: Vec<usize>,
    index: Index<T>,
}

/// Heads of the stacks by remaining capacity, and an ordered view of the
/// non-empty ones.
enum Index<T> {
    /// Small integer capacities: an array of heads by value and a bitset.
    Dense { heads: Vec<usize>, set: BitSet },
    /// Anything else: a B-tree from value to head.
    Sparse(BTreeMap<T, usize>),
}

impl<T: Size> Bins<T> {
    fn new(capacity: &[T], n: usize) -> Self {
        let index = match super::order::dense_limit(capacity[0], n) {
            Some(c) => Index::Dense {
                heads: alloc::vec![NONE; c + 1],
                set: BitSet::new(c + 1),
            },
            None => Index::Sparse(BTreeMap::new()),
        };
        Bins {
            dims: capacity.len(),
            capacity: capacity.to_vec(),
            loads: Vec::new(),
            next: Vec::new(),
            prev: Vec::new(),
            index,
        }
    }

    fn remaining(&self, bin: usize) -> T {
        self.capacity[0].saturating_sub(self.loads[bin * self.dims])
    }

    fn head(&self, rem: T) -> usize {
        match &self.index {
            Index::Dense { heads, .. } => rem.to_index().map_or(NONE, |v| heads[v]),
            Index::Sparse(map) => map.get(&rem).copied().unwrap_or(NONE),
        }
    }

    fn set_head(&mut self, rem: T, bin: usize) {
        match &mut self.index {
            Index::Dense { heads, set } => {
                if let Some(v) = rem.to_index() {
                    heads[v] = bin;
                    if bin == NONE {
                        set.remove(v);
                    } else {
                        set.insert(v);
                    }
                }
            }
            Index::Sparse(map) => {
                if bin == NONE {
                    map.remove(&rem);
                } else {
                    map.insert(rem, bin);
                }
            }
        }
    }

    /// The smallest remaining capacity `>= at` (or `> at` when `exclusive`)
    /// with a non-empty stack, and its head.
    fn successor(&self, at: T, exclusive: bool) -> Option<(T, usize)> {
        match &self.index {
            Index::Dense { heads, set } => {
                let v = at.to_index()? + usize::from(exclusive);
                let v = set.successor(v)?;
                // `v` indexes a bin's remaining capacity, itself a `T`; find
                // it back from the head bin.
                let head = heads[v];
                Some((self.remaining(head), head))
            }
            Index::Sparse(map) => {
                let lower = if exclusive {
                    Bound::Excluded(at)
                } else {
                    Bound::Included(at)
                };
                map.range((lower, Bound::Unbounded))
                    .next()
                    .map(|(&v, &h)| (v, h))
            }
        }
    }

    fn push(&mut self, bin: usize) {
        let rem = self.remaining(bin);
        let head = self.head(rem);
        self.next[bin] = head;
        self.prev[bin] = NONE;
        if head != NONE {
            self.prev[head] = bin;
        }
        self.set_head(rem, bin);
    }

    fn unlink(&mut self, bin: usize) {
        let (p, n) = (self.prev[bin], self.next[bin]);
        if n != NONE {
            self.prev[n] = p;
        }
        if p != NONE {
            self.next[p] = n;
        } else {
            let rem = self.remaining(bin);
            self.set_head(rem, n);
        }
    }

    /// Whether the item fits bin `bin` in every dimension but the first
    /// (the index guarantees the first).
    fn fits_rest(&self, bin: usize, size: &[T]) -> bool {
        let d = self.dims;
        self.loads[bin * d + 1..(bin + 1) * d]
            .iter()
            .zip(&size[1..])
            .zip(&self.capacity[1..])
            .all(|((&l, &s), &c)| T::fits(l, s, c))
    }

    /// The best bin for the item, if any has room.
    fn find(&self, size: &[T]) -> Option<usize> {
        let mut found = self.successor(size[0], false);
        while let Some((rem, head)) = found {
            let mut bin = head;
            while bin != NONE {
                if self.dims == 1 || self.fits_rest(bin, size) {
                    return Some(bin);
                }
                bin = self.next[bin];
            }
            found = self.successor(rem, true);
        }
        None
    }

    fn place(&mut self, size: &[T]) -> usize {
        let d = self.dims;
        let bin = match self.find(size) {
            Some(bin) => {
                self.unlink(bin);
                bin
            }
            None => {
                self.loads.extend(core::iter::repeat(T::zero()).take(d));
                self.next.push(NONE);
                self.prev.push(NONE);
                self.next.len() - 1
            }
        };
        for (l, &s) in self.loads[bin * d..(bin + 1) * d].iter_mut().zip(size) {
            *l = l.add(s);
        }
        self.push(bin);
        bin
    }
}

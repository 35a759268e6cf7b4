//! The search structure of first-fit: a 16-ary tournament tree over the
//! bins' loads that finds the leftmost bin an item fits in.

use alloc::vec::Vec;

use crate::num::Size;

/// Children per node: 16 loads of 4 bytes fill one cache line, and the fit
/// test of a node's children is a branch-free mask the compiler vectorizes.
const B: usize = 16;

/// One level of the tree: `len` entries per dimension, stored dimension by
/// dimension (`data[d * len + j]`).
struct Level<T> {
    len: usize,
    data: Vec<T>,
}

/// A B-ary tree over the loads of the bins. Level 0 holds one entry per bin
/// (its load; bins not yet opened have load zero); an entry of level `l + 1`
/// holds, per dimension, the smallest entry of its `B` children on level `l`.
/// The top level has exactly `B` entries. Entries of upper levels that have
/// no children are set to the capacity ("full"), so only zero-size items
/// could descend into them, and those are placed without a search.
///
/// A subtree can hold an item when its smallest loads fit, because
/// [`SizeOps::fits`](crate::num::SizeOps::fits) is monotone in the load. With one dimension this is exact
/// and the leftmost fitting bin is found in one descent of
/// `O(log_B bins)` levels, each a scan of `B` entries. With several
/// dimensions the per-dimension minimums may come from different bins, so
/// the descent may backtrack.
pub(crate) struct LoadTree<T> {
    dims: usize,
    capacity: Vec<T>,
    levels: Vec<Level<T>>,
    bins: usize,
}

impl<T: Size> LoadTree<T> {
    /// A tree for `capacity`, sized for about `hint` bins (it grows).
    pub(crate) fn new(capacity: &[T], hint: usize) -> Self {
        let mut tree = LoadTree {
            dims: capacity.len(),
            capacity: capacity.to_vec(),
            levels: Vec::new(),
            bins: 0,
        };
        tree.build(Vec::new(), hint.saturating_add(1));
        tree
    }

    /// (Re)builds the levels over the `loads` of the opened bins, with room
    /// for at least `room` bins.
    fn build(&mut self, loads: Vec<T>, room: usize) {
        let d = self.dims;
        let bins = loads.len() / d;
        let len = room.max(bins + 1).div_ceil(B).max(1) * B;
        let mut data = alloc::vec![T::zero(); len * d];
        for dim in 0..d {
            for b in 0..bins {
                data[dim * len + b] = loads[b * d + dim];
            }
        }
        self.levels.clear();
        self.levels.push(Level { len, data });
        while self.levels.last().map_or(0, |l| l.len) > B {
            let below = self.levels.last().map_or(B, |l| l.len);
            let real = below / B;
            let len = real.div_ceil(B) * B;
            let mut data = Vec::with_capacity(len * d);
            for dim in 0..d {
                let child =
                    &self.levels[self.levels.len() - 1].data[dim * below..(dim + 1) * below];
                data.extend(child.chunks_exact(B).map(min_of));
                data.extend(core::iter::repeat(self.capacity[dim]).take(len - real));
            }
            self.levels.push(Level { len, data });
        }
    }

    /// The bit mask of the `B` entries of `level` from `start` that have room
    /// for the item in every dimension.
    #[inline]
    fn mask(&self, level: usize, start: usize, size: &[T]) -> u32 {
        let lv = &self.levels[level];
        let mut mask = u32::MAX;
        for (dim, (&s, &c)) in size.iter().zip(&self.capacity).enumerate() {
            let base = dim * lv.len + start;
            mask &= fit_mask(&lv.data[base..base + B], s, c);
        }
        mask
    }

    /// The leftmost bin the item fits in, searching below entry `j` of
    /// `level` (the root is entry 0 of the virtual level above the top).
    fn search(&self, level: usize, j: usize, size: &[T]) -> Option<usize> {
        if level == 0 {
            return Some(j);
        }
        let start = j * B;
        let mut mask = self.mask(level - 1, start, size);
        while mask != 0 {
            let k = mask.trailing_zeros() as usize;
            if let Some(bin) = self.search(level - 1, start + k, size) {
                return Some(bin);
            }
            mask &= mask - 1;
        }
        None
    }

    fn find(&self, size: &[T]) -> usize {
        if size.iter().all(|&s| s == T::zero()) {
            // Fits the first bin (or opens it); upper padding is not searched.
            return 0;
        }
        let top = self.levels.len();
        if self.dims == 1 {
            // Exact pruning: a fitting entry always has a fitting child.
            let (s, c) = (size[0], self.capacity[0]);
            let mut j = 0;
            for level in (0..top).rev() {
                let start = j * B;
                let chunk = &self.levels[level].data[start..start + B];
                j = start + fit_mask(chunk, s, c).trailing_zeros() as usize;
            }
            return j;
        }
        // An unopened bin (load zero) always fits, so this finds one.
        self.search(top, 0, size).unwrap_or(self.bins)
    }

    /// Places an item in the leftmost bin it fits, opening a bin when none
    /// does, and returns the bin.
    pub(crate) fn place(&mut self, size: &[T]) -> usize {
        let bin = self.find(size);
        let d = self.dims;
        let len0 = self.levels[0].len;
        for (dim, &s) in size.iter().enumerate() {
            let load = &mut self.levels[0].data[dim * len0 + bin];
            *load = load.add(s);
        }
        // Loads only grow: stop as soon as a parent's minimums are unchanged.
        let mut j = bin;
        for level in 1..self.levels.len() {
            let p = j / B;
            let (lower, upper) = self.levels.split_at_mut(level);
            let (child, parent) = (&lower[level - 1], &mut upper[0]);
            let mut changed = false;
            for dim in 0..d {
                let base = dim * child.len + p * B;
                let m = min_of(&child.data[base..base + B]);
                let slot = &mut parent.data[dim * parent.len + p];
                if *slot != m {
                    *slot = m;
                    changed = true;
                }
            }
            if !changed {
                break;
            }
            j = p;
        }
        if bin == self.bins {
            self.bins += 1;
            if self.bins == len0 {
                let loads = self.loads();
                self.build(loads, 2 * len0);
            }
        }
        bin
    }

    /// The loads of the opened bins, `bins * dims` values, bin by bin.
    fn loads(&self) -> Vec<T> {
        let d = self.dims;
        let l0 = &self.levels[0];
        let mut loads = Vec::with_capacity(self.bins * d);
        for b in 0..self.bins {
            loads.extend((0..d).map(|dim| l0.data[dim * l0.len + b]));
        }
        loads
    }

    /// The loads of the opened bins, consuming the tree.
    pub(crate) fn into_loads(self) -> Vec<T> {
        self.loads()
    }
}

/// The smallest of `B` values.
#[inline]
fn min_of<T: Size>(chunk: &[T]) -> T {
    chunk.iter().copied().fold(chunk[0], T::min)
}

/// Bit `k` set when entry `k` of the chunk has room for `s`.
#[inline]
fn fit_mask<T: Size>(chunk: &[T], s: T, c: T) -> u32 {
    let mut mask = 0u32;
    for (k, &load) in chunk[..B].iter().enumerate() {
        mask |= u32::from(T::fits(load, s, c)) << k;
    }
    mask
}

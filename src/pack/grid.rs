//! Multi-dimensional first-fit with small secondary capacities: a 16-ary
//! tree over the bins whose nodes keep, for every possible remaining
//! secondary capacity, the least first-dimension load among the bins with at
//! least that much room, so that the leftmost bin with room is found in one
//! exact descent.

use alloc::vec::Vec;

use crate::num::Size;

/// Children per node, as in [`LoadTree`](super::tree::LoadTree).
const B: usize = 16;

/// Most points of the secondary grid (one bit each in a `u64`).
pub(crate) const GRID_MAX: usize = 64;

/// The grid of remaining secondary capacities: every vector `r` with
/// `0 <= r[d] <= capacity[d]` for the dimensions after the first, numbered
/// row-major. Exists when the capacities are integers with at most
/// [`GRID_MAX`] such vectors (say up to 63 tiles).
pub(crate) struct Grid {
    caps: Vec<usize>,
    points: usize,
    /// `covers[p]`: the points `q <= p` componentwise, as a bit mask: a bin
    /// with room `p` has room for an item of secondary size `q`.
    covers: Vec<u64>,
}

impl Grid {
    pub(crate) fn of<T: Size>(capacity: &[T]) -> Option<Self> {
        if capacity.len() < 2 {
            return None;
        }
        let mut caps = Vec::with_capacity(capacity.len() - 1);
        let mut points = 1usize;
        for c in &capacity[1..] {
            let c = c.to_index()?;
            points = points.checked_mul(c.checked_add(1)?)?;
            if points > GRID_MAX {
                return None;
            }
            caps.push(c);
        }
        let mut grid = Grid {
            caps,
            points,
            covers: Vec::new(),
        };
        grid.covers = (0..points)
            .map(|p| {
                let room = grid.decode(p);
                (0..points)
                    .filter(|&q| grid.decode(q).iter().zip(&room).all(|(a, b)| a <= b))
                    .fold(0u64, |m, q| m | (1 << q))
            })
            .collect();
        Some(grid)
    }

    fn decode(&self, mut p: usize) -> Vec<usize> {
        let mut v = alloc::vec![0; self.caps.len()];
        for (x, &c) in v.iter_mut().zip(&self.caps).rev() {
            *x = p % (c + 1);
            p /= c + 1;
        }
        v
    }

    /// The point of a vector of values, each at most its capacity.
    pub(crate) fn point<T: Size>(&self, values: impl Iterator<Item = T>) -> usize {
        let mut p = 0;
        for (v, &c) in values.zip(&self.caps) {
            p = p * (c + 1) + v.to_index().unwrap_or(c).min(c);
        }
        p
    }
}

/// One upper level: per entry `j` and grid point `q`, the least
/// first-dimension load among the bins below with room for secondary size
/// `q` (`min[j * points + q]`), and whether there is such a bin at all (bit
/// `q` of `mask[j]`).
struct Level<T> {
    mask: Vec<u64>,
    min: Vec<T>,
}

/// First-fit over vector bins with a [`Grid`]: exact and O(log_16 bins)
/// levels a query; an update recomputes at most one entry a level (16
/// children times the grid's points), stopping when an entry is unchanged.
pub(crate) struct GridTree<T> {
    grid: Grid,
    dims: usize,
    capacity: Vec<T>,
    /// `loads[b * dims + d]` for the bins of level 0 (opened or not).
    loads: Vec<T>,
    /// The grid point of each bin's remaining secondary capacity.
    room: Vec<usize>,
    /// Upper levels, the last one with exactly `B` entries.
    levels: Vec<Level<T>>,
    /// Scratch for one entry being recomputed.
    mask: u64,
    min: Vec<T>,
    bins: usize,
}

impl<T: Size> GridTree<T> {
    pub(crate) fn new(grid: Grid, capacity: &[T], hint: usize) -> Self {
        let points = grid.points;
        let mut tree = GridTree {
            grid,
            dims: capacity.len(),
            capacity: capacity.to_vec(),
            loads: Vec::new(),
            room: Vec::new(),
            levels: Vec::new(),
            mask: 0,
            min: alloc::vec![T::zero(); points],
            bins: 0,
        };
        tree.build(hint.saturating_add(1));
        tree
    }

    /// (Re)builds for at least `room` bins, keeping the opened ones.
    fn build(&mut self, room: usize) {
        let points = self.grid.points;
        let len = room.max(self.bins + 1).div_ceil(B) * B;
        let full = self.grid.point(self.capacity[1..].iter().copied());
        self.loads.resize(len * self.dims, T::zero());
        self.room.resize(len, full);
        self.levels.clear();
        let mut below = len;
        loop {
            let real = below / B;
            let entries = real.div_ceil(B).max(1) * B;
            let depth = self.levels.len();
            let mut level = Level {
                mask: alloc::vec![0; entries],
                min: alloc::vec![T::zero(); entries * points],
            };
            for j in 0..real {
                self.combine(depth, j);
                level.mask[j] = self.mask;
                level.min[j * points..(j + 1) * points].copy_from_slice(&self.min);
            }
            self.levels.push(level);
            below = entries;
            if entries <= B {
                break;
            }
        }
    }

    /// Recomputes entry `j` of upper level `depth` from its `B` children
    /// (bins when `depth == 0`, entries of level `depth - 1` otherwise) into
    /// the scratch `mask` and `min`.
    fn combine(&mut self, depth: usize, j: usize) {
        let points = self.grid.points;
        self.mask = 0;
        for child in j * B..(j + 1) * B {
            let (mut bits, loads): (u64, &[T]) = if depth == 0 {
                let load = &self.loads[child * self.dims..child * self.dims + 1];
                (self.grid.covers[self.room[child]], load)
            } else {
                let level = &self.levels[depth - 1];
                (
                    level.mask[child],
                    &level.min[child * points..(child + 1) * points],
                )
            };
            while bits != 0 {
                let q = bits.trailing_zeros() as usize;
                let load = if depth == 0 { loads[0] } else { loads[q] };
                if self.mask >> q & 1 == 0 || load < self.min[q] {
                    self.min[q] = load;
                }
                self.mask |= 1 << q;
                bits &= bits - 1;
            }
        }
    }

    /// The leftmost bin with room for the item: one exact descent.
    fn find(&self, size: &[T]) -> usize {
        let points = self.grid.points;
        let q = self.grid.point(size[1..].iter().copied());
        let (s0, c0) = (size[0], self.capacity[0]);
        let mut j = 0;
        for level in self.levels.iter().rev() {
            let start = j * B;
            j = (start..start + B)
                .find(|&k| {
                    level.mask[k] >> q & 1 == 1 && T::fits(level.min[k * points + q], s0, c0)
                })
                .unwrap_or(start);
        }
        let start = j * B;
        (start..start + B)
            .find(|&b| {
                self.grid.covers[self.room[b]] >> q & 1 == 1
                    && T::fits(self.loads[b * self.dims], s0, c0)
            })
            .unwrap_or(self.bins)
    }

    /// Places the item in the leftmost bin with room, opening one when none
    /// has, and returns the bin.
    pub(crate) fn place(&mut self, size: &[T]) -> usize {
        let bin = self.find(size);
        let (d, points) = (self.dims, self.grid.points);
        for (l, &s) in self.loads[bin * d..(bin + 1) * d].iter_mut().zip(size) {
            *l = l.add(s);
        }
        let room = self.loads[bin * d + 1..(bin + 1) * d]
            .iter()
            .zip(&self.capacity[1..])
            .map(|(&l, &c)| c.saturating_sub(l));
        self.room[bin] = self.grid.point(room);
        let mut j = bin / B;
        for depth in 0..self.levels.len() {
            self.combine(depth, j);
            let level = &mut self.levels[depth];
            let slot = &mut level.min[j * points..(j + 1) * points];
            if level.mask[j] == self.mask && slot == &self.min[..] {
                break;
            }
            level.mask[j] = self.mask;
            slot.copy_from_slice(&self.min);
            j /= B;
        }
        if bin == self.bins {
            self.bins += 1;
            if self.bins == self.room.len() {
                self.build(2 * self.room.len());
            }
        }
        bin
    }

    /// The loads of the opened bins, bin by bin.
    pub(crate) fn into_loads(mut self) -> Vec<T> {
        self.loads.truncate(self.bins * self.dims);
        self.loads
    }
}

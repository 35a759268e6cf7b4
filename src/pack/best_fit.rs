//! Best-fit, online and decreasing: each item goes into the bin it leaves
//! with the least room, found through an ordered index of the bins by
//! remaining capacity.

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use super::bounds::bounds_of;
use super::order::Classes;
use super::{assemble_runs, check_capacity, order, validate, Input, Keep, LowerBounds, Packing};
use crate::bitset::BitSet;
use crate::error::Error;
use crate::grouped::Grouped;
use crate::num::{Item, Size, SizeOps};

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
/// capacity is an integer below `max(2^10, 2n)` the index is a 64-ary bitset
/// over the capacity values (O(log_64 capacity) per query), otherwise a
/// B-tree (O(log bins)). Plain integer sizes (items without ids) under such
/// a capacity take O(n + capacity) time and O(capacity) extra space: a
/// histogram of the sizes replaces the sort, and the packing is built in the
/// result's own buffers. With several dimensions whose secondary capacities
/// allow at most 256 combinations of remaining capacity `p`, one index per
/// combination: O(n p log n). Otherwise the bins are kept in a search tree
/// (a treap) ordered by (load in the first dimension, last change), each
/// subtree knowing the least load of its bins in every other dimension: a
/// query skips every subtree without room and, with two dimensions, finds
/// the best bin in O(log n) expected time (O(n log n) in all, O(n) extra
/// space). The tree's
/// priorities are a fixed hash of the bin number, so the expectation holds
/// for any input not built against that hash; its operations are iterative,
/// so no input can overflow the stack. With three or more dimensions the
/// least loads prune the search but do not bound it: up to O(bins) per item
/// (see the [module docs](crate::pack#multi-dimensional-capacities)).
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
    let cap = check_capacity(&capacity)?;
    if let Some(packing) = bfd_dense(items, &cap) {
        return Ok(packing);
    }
    let input = validate(items, &capacity, Keep::CheckOnly)?;
    Ok(bfd_validated(items, &input))
}

/// BFD over validated input.
pub(crate) fn bfd_validated<I: Item>(items: &[I], input: &Input<I::Size>) -> Packing<I::Size> {
    if let Some(packing) = bfd_dense(items, &input.capacity) {
        return packing;
    }
    let sorted = order::decreasing(items, input);
    let bounds = bounds_of(input, Some(&sorted.classes));
    let sizes = if input.dims == 1 {
        Sizes::Runs(&sorted.classes)
    } else {
        Sizes::Flat(&sorted.sizes)
    };
    pack_best_fit(input, Some(&sorted.order), sizes, bounds)
}

/// The capacity as an index when [`bfd_dense`] applies: one dimension, an
/// integer capacity small enough to index arrays by value, fewer than 2^32
/// items (bins, positions and counts then fit in 32 bits) and a 64-bit
/// `usize` (which holds two of them).
fn dense_plain<T: Size>(capacity: &[T], n: usize) -> Option<usize> {
    if capacity.len() != 1 || u32::try_from(n).is_err() || usize::BITS < 64 {
        return None;
    }
    order::dense_limit(capacity[0], n).filter(|&c| c < u32::MAX as usize)
}

/// Marks the end of a stack of bins.
const END: usize = u32::MAX as usize;
/// An empty stack: no top, nothing below.
const EMPTY: usize = END << HALF | END;

/// Half a `usize`: 32 bits where [`bfd_dense`] runs.
const HALF: u32 = usize::BITS / 2;
/// The lower half of a `usize`.
const LOW: usize = (1 << HALF) - 1;

/// One-dimensional BFD over integer sizes of at most `c` (small, see
/// [`dense_plain`]) of items without ids: the same packing as [`run`] with the
/// dense index, computed from the histogram of the sizes and written in the
/// buffers of the result, without a sorted copy of the items or any other
/// buffer of `n` entries. `None` when an item is not one-dimensional or
/// larger than the capacity: [`validate`] then says which.
///
/// - One pass over the items counts each size (and keeps an item of it).
/// - The sizes are placed largest first, all copies of a size in runs (see
///   [`Bins::place`]): the bins with room `r` form a stack (`heads[r]`, then
///   the bins' links); the best bin for size `s` is the head of the first
///   non-empty stack from `s`, a successor query in a bitset of the rooms;
///   only heads are ever taken, so one link per bin suffices. While placing,
///   `offsets[b]` holds bin `b`'s link and item count, `loads[b]` its load
///   and `items[k]` the bin and the rank in it of the `k`-th item placed.
/// - The counts become the offsets; one pass turns each `items[k]` into the
///   item's position in the result, kept in the upper half.
/// - One pass over the items, in input order, puts each at the next
///   position of its size, in the lower half: within a size the items go in
///   index order, as the stable counting sort of [`order::decreasing`]
///   orders them. A last pass clears the upper halves.
///
/// O(n + c) time and O(c) extra space.
fn bfd_dense<I: Item>(items: &[I], capacity: &[I::Size]) -> Option<Packing<I::Size>> {
    let n = items.len();
    let c = dense_plain(capacity, n)?;
    if core::mem::size_of::<I::Id>() != 0 {
        return None;
    }
    // Per size value: the count (upper half) and an item of that size
    // (lower half), to turn a value back into a size. The pass validates.
    let mut by_value = alloc::vec![0usize; c + 1];
    for (i, item) in items.iter().enumerate() {
        if item.dims() != 1 {
            return None;
        }
        let s = item.size(0);
        let (Ok(()), Some(v)) = (s.check(), s.to_index().filter(|&v| v <= c)) else {
            return None;
        };
        let e = &mut by_value[v];
        *e = ((*e >> HALF) + 1) << HALF | i;
    }
    let mut classes = Classes::default();
    let mut placed = 0;
    for v in (0..=c).rev() {
        let e = by_value[v];
        if e >> HALF != 0 {
            classes.size.push(items[e & LOW].size(0));
            classes.start.push(placed);
            // From now on: where the items of size `v` start in the
            // placement order.
            by_value[v] = placed;
            placed += e >> HALF;
        }
    }
    classes.start.push(placed);
    let input = Input {
        dims: 1,
        capacity: capacity.to_vec(),
        n,
        sizes: Vec::new(),
    };
    let bounds = bounds_of(&input, Some(&classes));

    // Placement. `offsets[b]`: bin `b`'s item count (upper half) and the
    // next bin of its stack (lower half). `heads[r]`: the top bin of the
    // stack of room `r` (lower half) and the one below it (upper half), so
    // that taking the top needs no read of the taken bin: the new top is
    // known, and only the one below it is read, off the path to the next
    // query.
    let mut heads = alloc::vec![EMPTY; c + 1];
    let mut rooms = BitSet::new(c + 1);
    // Best-fit-decreasing rarely opens many more bins than the L2 bound: a
    // little more than that is reserved (with the last offset), and the
    // vectors grow beyond it.
    let hint = usize::try_from(bounds.l2)
        .map_or(n, |l2| l2.saturating_add(l2 / 8).saturating_add(16))
        .min(n)
        + 1;
    let mut offsets: Vec<usize> = Vec::with_capacity(hint);
    let mut loads: Vec<I::Size> = Vec::with_capacity(hint);
    let mut out: Vec<usize> = Vec::with_capacity(n);
    for k in 0..classes.len() {
        let size = classes.size[k];
        let s = size.to_index().map_or(0, |v| v.min(c));
        let mut left = classes.count(k);
        if s > c - s {
            // Items above half the capacity fit no open bin (each holds an
            // item at least as large): each opens its own, and the new bins
            // go on the stack of room `c - s` in turn, as one by one.
            let room = c - s;
            let (top, first) = (heads[room] & LOW, offsets.len());
            for (j, b) in (first..first + left).enumerate() {
                offsets.push(1 << HALF | if j == 0 { top } else { b - 1 });
                loads.push(size);
                out.push(b << HALF);
            }
            let last = first + left - 1;
            let below = if left > 1 { last - 1 } else { top };
            heads[room] = below << HALF | last;
            if top == END {
                rooms.insert(room);
            }
            continue;
        }
        while left > 0 {
            // A bin with room exactly `s` is the best; else the search.
            let best = if heads[s] & LOW != END {
                Some(s)
            } else {
                rooms.successor(s)
            };
            let (b, room) = match best {
                Some(room) => {
                    let (b, below) = (heads[room] & LOW, heads[room] >> HALF);
                    heads[room] = if below == END {
                        rooms.remove(room);
                        EMPTY
                    } else {
                        (offsets[below] & LOW) << HALF | below
                    };
                    (b, room)
                }
                None => {
                    offsets.push(0);
                    loads.push(<I::Size as SizeOps>::zero());
                    (offsets.len() - 1, c)
                }
            };
            // As in `Bins::place`: every copy that fits the best bin.
            let copies = match (left, s) {
                (1, _) => 1,
                (_, 0) => left,
                _ if room < 2 * s => 1,
                _ => (room / s).min(left),
            };
            let room = room - copies * s;
            let top = heads[room] & LOW;
            if top == END {
                rooms.insert(room);
            }
            heads[room] = top << HALF | b;
            let rank = offsets[b] >> HALF;
            offsets[b] = (rank + copies) << HALF | top;
            let load = &mut loads[b];
            *load = load.add(size);
            out.push(b << HALF | rank);
            for r in rank + 1..rank + copies {
                *load = load.add(size);
                out.push(b << HALF | r);
            }
            left -= copies;
        }
    }

    // The counts become the offsets, and each `out[k]` the position of the
    // `k`-th item placed (upper half).
    let mut start = 0;
    for e in &mut offsets {
        let count = *e >> HALF;
        *e = start;
        start += count;
    }
    offsets.push(start);
    for e in &mut out {
        *e = (offsets[*e >> HALF] + (*e & LOW)) << HALF;
    }
    // Each item to the next position of its size, a block of positions
    // read before any is written: the reads of `out` then never wait on
    // its writes.
    const BLOCK: usize = 256;
    let mut at = [0usize; BLOCK];
    for from in (0..n).step_by(BLOCK) {
        let block = &items[from..n.min(from + BLOCK)];
        for (item, p) in block.iter().zip(&mut at) {
            let v = item.size(0).to_index().map_or(0, |v| v.min(c));
            let k = by_value[v];
            by_value[v] = k + 1;
            *p = out[k] >> HALF;
        }
        for (i, &p) in (from..).zip(&at[..block.len()]) {
            out[p] |= i;
        }
    }
    for e in &mut out {
        *e &= LOW;
    }
    Some(Packing::new(
        input.capacity,
        Grouped::from_trusted(out, offsets),
        loads,
        bounds,
    ))
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
    let input = validate(items, &capacity, Keep::Sizes)?;
    let bounds = bounds_of(&input, None);
    Ok(pack_best_fit(
        &input,
        None,
        Sizes::Flat(&input.sizes),
        bounds,
    ))
}

/// The sizes of the items in placement order.
pub(crate) enum Sizes<'a, T> {
    /// Flattened, `dims` values an item.
    Flat(&'a [T]),
    /// One dimension, as runs of equal size.
    Runs(&'a Classes<T>),
}

/// Best-fit over `order` (arrival order when `None`), with the sizes in that
/// order.
pub(crate) fn pack_best_fit<T: Size>(
    input: &Input<T>,
    order: Option<&[usize]>,
    sorted: Sizes<'_, T>,
    bounds: LowerBounds,
) -> Packing<T> {
    let groups = Groups::of(&input.capacity);
    let values = usize::try_from(groups.count).unwrap_or(usize::MAX);
    let dense = input.capacity[0].to_index().filter(|&c| {
        super::order::dense_enough(c.saturating_add(1).saturating_mul(values), input.len())
    });
    // Several dimensions without groups: the tree of `Bins::tree`, no
    // index by load (an empty B-tree stands in).
    let tree = input.dims > 1 && !groups.grouped();
    match dense {
        Some(c) if !tree => run(input, order, sorted, bounds, groups, false, || {
            Dense::new(c)
        }),
        _ => run(input, order, sorted, bounds, groups, tree, BTreeMap::new),
    }
}

/// Most groups of bins by remaining secondary capacity (see [`Groups`]).
const GROUPS_MAX: u64 = 256;

/// With several dimensions whose secondary capacities are small integers
/// (say at most 48 tiles), bins are grouped by their remaining capacity in
/// the secondary dimensions, one index of the first dimension per group. A
/// query then asks each group that has room for the item for its best bin,
/// O(groups * log) instead of walking every bin with room in the first
/// dimension. `count` is 1 (no grouping) otherwise.
struct Groups {
    count: u64,
    /// The capacity of each secondary dimension, as an index.
    caps: Vec<usize>,
}

impl Groups {
    fn of<T: Size>(capacity: &[T]) -> Self {
        let none = Groups {
            count: 1,
            caps: Vec::new(),
        };
        if capacity.len() < 2 {
            return none;
        }
        let mut caps = Vec::with_capacity(capacity.len() - 1);
        let mut count = 1u64;
        for c in &capacity[1..] {
            let Some(c) = c.to_index() else { return none };
            count = count.saturating_mul((c as u64).saturating_add(1));
            if count > GROUPS_MAX {
                return none;
            }
            caps.push(c);
        }
        Groups { count, caps }
    }

    fn grouped(&self) -> bool {
        !self.caps.is_empty()
    }

    /// The group of a remaining secondary capacity (every value `<= cap`).
    fn group<T: Size>(&self, room: impl Iterator<Item = T>) -> usize {
        let mut g = 0;
        for (r, &c) in room.zip(&self.caps) {
            g = g * (c + 1) + r.to_index().unwrap_or(0).min(c);
        }
        g
    }

    /// Whether group `g` has room `size` in every secondary dimension.
    fn has_room<T: Size>(&self, mut g: usize, size: &[T]) -> bool {
        for (s, &c) in size.iter().zip(&self.caps).rev() {
            let room = g % (c + 1);
            g /= c + 1;
            if s.to_index().map_or(true, |s| s > room) {
                return false;
            }
        }
        true
    }
}

fn run<T: Size, X: Index<T>>(
    input: &Input<T>,
    order: Option<&[usize]>,
    sorted: Sizes<'_, T>,
    bounds: LowerBounds,
    groups: Groups,
    tree: bool,
    index: impl Fn() -> X,
) -> Packing<T> {
    let d = input.dims;
    // One-dimensional best-fit never leaves two bins at most half full, so it
    // opens at most 2 L1 + 1 bins; reserve that much (it grows beyond).
    let hint = usize::try_from(bounds.l1.saturating_mul(2).saturating_add(1))
        .unwrap_or(usize::MAX)
        .min(input.len());
    let mut bins = Bins {
        dims: d,
        capacity: input.capacity.clone(),
        loads: Vec::with_capacity(hint * d),
        next: Vec::with_capacity(hint),
        prev: Vec::with_capacity(hint),
        stamp: Vec::with_capacity(hint),
        clock: 0,
        index: (0..groups.count).map(|_| index()).collect(),
        tree: tree.then(|| Tree::new(d, hint)),
        groups,
    };
    let mut runs = Runs::new(input.len());
    match sorted {
        // A run of equal sizes: the best bin for one copy stays the best for
        // the next while the copies fit, since no other bin had room between
        // (see `Bins::place`), so copies are placed together.
        Sizes::Runs(classes) => {
            for k in 0..classes.len() {
                let size = [classes.size[k]];
                let mut left = classes.count(k);
                while left > 0 {
                    let (bin, copies) = bins.place(&size, left);
                    runs.push(bin, copies);
                    left -= copies;
                }
            }
        }
        Sizes::Flat(sizes) => {
            for size in sizes.chunks_exact(d) {
                let (bin, copies) = bins.place(size, 1);
                runs.push(bin, copies);
            }
        }
    }
    match runs {
        Runs::Packed(runs) => {
            let unpack = |&r: &u64| ((r >> 32) as usize, (r & u64::from(u32::MAX)) as usize);
            assemble_runs(input, order, runs.iter().map(unpack), bins.loads, bounds)
        }
        Runs::Wide(runs) => assemble_runs(input, order, runs.iter().copied(), bins.loads, bounds),
    }
}

/// `(bin, copies)` in placement order: packed in one `u64` when both fit in
/// 32 bits (any input of fewer than 2^32 items), which halves the memory of
/// the largest buffer of the packing.
enum Runs {
    Packed(Vec<u64>),
    Wide(Vec<(usize, usize)>),
}

impl Runs {
    fn new(n: usize) -> Self {
        if u32::try_from(n).is_ok() {
            Runs::Packed(Vec::with_capacity(n))
        } else {
            Runs::Wide(Vec::with_capacity(n))
        }
    }

    #[inline]
    fn push(&mut self, bin: usize, copies: usize) {
        match self {
            // Both are at most the number of items, below 2^32 here.
            Runs::Packed(runs) => runs.push((bin as u64) << 32 | copies as u64),
            Runs::Wide(runs) => runs.push((bin, copies)),
        }
    }
}

const NONE: usize = usize::MAX;

/// An ordered index of the non-empty stacks of bins by load (in the first
/// dimension), holding the head bin of each. Bins of equal load share a
/// stack; the fullest bins have the least room.
trait Index<T> {
    /// The head of the stack at `load`, or [`NONE`].
    fn head(&self, load: T) -> usize;
    /// Sets the head of the stack at `load` ([`NONE`] empties it).
    fn set_head(&mut self, load: T, bin: usize);
    /// The head of the non-empty stack with the largest load `<= limit`.
    fn fullest_up_to(&self, limit: T) -> Option<usize>;
    /// The head of the non-empty stack with the largest load `< load`.
    fn fullest_below(&self, load: T) -> Option<usize>;
}

/// Integer capacities `c` up to `max(2^10, 2n)`: heads by remaining room
/// `c - load` (exact for integers) and a bitset, O(log_64 capacity) per
/// query.
struct Dense {
    c: usize,
    heads: Vec<usize>,
    set: BitSet,
}

impl Dense {
    fn new(c: usize) -> Self {
        Dense {
            c,
            heads: alloc::vec![NONE; c + 1],
            set: BitSet::new(c + 1),
        }
    }

    /// The room beside a load (every load is at most `c`).
    #[inline]
    fn room<T: Size>(&self, load: T) -> Option<usize> {
        load.to_index().and_then(|l| self.c.checked_sub(l))
    }
}

impl<T: Size> Index<T> for Dense {
    #[inline]
    fn head(&self, load: T) -> usize {
        self.room(load).map_or(NONE, |v| self.heads[v])
    }

    #[inline]
    fn set_head(&mut self, load: T, bin: usize) {
        if let Some(v) = self.room(load) {
            self.heads[v] = bin;
            if bin == NONE {
                self.set.remove(v);
            } else {
                self.set.insert(v);
            }
        }
    }

    #[inline]
    fn fullest_up_to(&self, limit: T) -> Option<usize> {
        let v = self.room(limit)?;
        Some(self.heads[self.set.successor(v)?])
    }

    #[inline]
    fn fullest_below(&self, load: T) -> Option<usize> {
        let v = self.room(load)? + 1;
        Some(self.heads[self.set.successor(v)?])
    }
}

/// Anything else (floats, large integers): a B-tree from load to head,
/// O(log bins) per operation. Keyed by the load itself, not by the room
/// `c - load`, which a float subtraction rounds: a search up to
/// [`SizeOps::max_load`] then finds exactly the bins that
/// [`SizeOps::fits`] accepts.
impl<T: Size> Index<T> for BTreeMap<T, usize> {
    fn head(&self, load: T) -> usize {
        self.get(&load).copied().unwrap_or(NONE)
    }

    fn set_head(&mut self, load: T, bin: usize) {
        if bin == NONE {
            self.remove(&load);
        } else {
            self.insert(load, bin);
        }
    }

    fn fullest_up_to(&self, limit: T) -> Option<usize> {
        self.range(..=limit).next_back().map(|(_, &h)| h)
    }

    fn fullest_below(&self, load: T) -> Option<usize> {
        self.range(..load).next_back().map(|(_, &h)| h)
    }
}

/// The bins: loads and the stacks of bins with equal load in the first
/// dimension (doubly linked), indexed by that load, per group.
struct Bins<T: Size, X> {
    dims: usize,
    capacity: Vec<T>,
    /// `loads[b * dims + d]`.
    loads: Vec<T>,
    next: Vec<usize>,
    prev: Vec<usize>,
    /// When each bin last changed, to break ties between groups as the
    /// stacks do within one: the most recent first.
    stamp: Vec<u64>,
    clock: u64,
    /// One index per group (unused with `tree`).
    index: Vec<X>,
    /// Several dimensions without groups: every bin in one tree by
    /// (load in the first dimension, stamp) instead of the index.
    tree: Option<Tree<T>>,
    groups: Groups,
}

impl<T: Size, X: Index<T>> Bins<T, X> {
    /// The group of bin `bin`, from its current loads.
    fn group_of(&self, bin: usize) -> usize {
        if !self.groups.grouped() {
            return 0;
        }
        let d = self.dims;
        let loads = &self.loads[bin * d + 1..(bin + 1) * d];
        let room = loads
            .iter()
            .zip(&self.capacity[1..])
            .map(|(&l, &c)| c.saturating_sub(l));
        self.groups.group(room)
    }

    /// The load of bin `bin` in the first dimension, its key in the index.
    #[inline]
    fn key(&self, bin: usize) -> T {
        self.loads[bin * self.dims]
    }

    fn push(&mut self, bin: usize) {
        if let Some(tree) = &mut self.tree {
            self.stamp[bin] = self.clock;
            self.clock += 1;
            tree.insert(bin, &self.loads, &self.stamp);
            return;
        }
        let (key, g) = (self.key(bin), self.group_of(bin));
        let head = self.index[g].head(key);
        self.next[bin] = head;
        self.prev[bin] = NONE;
        if head != NONE {
            self.prev[head] = bin;
        }
        self.index[g].set_head(key, bin);
        self.stamp[bin] = self.clock;
        self.clock += 1;
    }

    fn unlink(&mut self, bin: usize) {
        if let Some(tree) = &mut self.tree {
            tree.remove(bin, &self.loads, &self.stamp);
            return;
        }
        let (p, n) = (self.prev[bin], self.next[bin]);
        if n != NONE {
            self.prev[n] = p;
        }
        if p != NONE {
            self.next[p] = n;
        } else {
            let g = self.group_of(bin);
            let key = self.key(bin);
            self.index[g].set_head(key, n);
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

    /// The best bin for the item, if any has room: the least room that
    /// holds it, top of that stack first.
    fn find(&mut self, size: &[T]) -> Option<usize> {
        // The fullest load that still fits, exactly as `T::fits` decides.
        let limit = T::max_load(size[0], self.capacity[0])?;
        if let Some(tree) = &mut self.tree {
            return tree.find(limit, size, &self.capacity, &self.loads);
        }
        self.find_in_stacks(limit, size)
    }

    /// [`Bins::find`] through the index (by the stacks of bins of equal
    /// load), for one dimension or with groups; with several dimensions
    /// without groups, the walk that [`Tree::find`] replaces (O(bins) per
    /// item), kept as the tests' oracle.
    fn find_in_stacks(&self, limit: T, size: &[T]) -> Option<usize> {
        if self.groups.grouped() {
            // Every bin of a group with room has room in the secondary
            // dimensions: each group's best is the head of its least room.
            let mut best: Option<usize> = None;
            for (g, index) in self.index.iter().enumerate() {
                if !self.groups.has_room(g, &size[1..]) {
                    continue;
                }
                if let Some(bin) = index.fullest_up_to(limit) {
                    // The fullest, then the most recently changed.
                    let better = best.map_or(true, |b| {
                        (self.key(bin), self.stamp[bin]) > (self.key(b), self.stamp[b])
                    });
                    if better {
                        best = Some(bin);
                    }
                }
            }
            return best;
        }
        let index = &self.index[0];
        let mut found = index.fullest_up_to(limit);
        while let Some(head) = found {
            let mut bin = head;
            while bin != NONE {
                if self.dims == 1 || self.fits_rest(bin, size) {
                    return Some(bin);
                }
                bin = self.next[bin];
            }
            found = index.fullest_below(self.key(head));
        }
        None
    }

    /// Places up to `copies` copies of the item (one unless the item is
    /// one-dimensional) in its best bin, opening a bin when none has room,
    /// and returns the bin and the number of copies placed.
    ///
    /// After one copy goes into the best bin `b` of room `r`, no bin had room
    /// in `[size, r)`, so `b` (room `r - size`) stays the best bin while the
    /// next copy fits it; placing them together gives the same result as
    /// one at a time.
    fn place(&mut self, size: &[T], copies: usize) -> (usize, usize) {
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
                self.stamp.push(0);
                if let Some(tree) = &mut self.tree {
                    tree.open();
                }
                self.next.len() - 1
            }
        };
        let placed = if copies > 1 {
            // Integers only (`to_index` is `None` for floats): the room is exact.
            let room = self.capacity[0].saturating_sub(self.key(bin));
            match (room.to_index(), size[0].to_index()) {
                (Some(_), Some(0)) => copies,
                (Some(room), Some(s)) => (room / s).clamp(1, copies),
                _ => 1,
            }
        } else {
            1
        };
        for _ in 0..placed {
            for (l, &s) in self.loads[bin * d..(bin + 1) * d].iter_mut().zip(size) {
                *l = l.add(s);
            }
        }
        self.push(bin);
        (bin, placed)
    }
}

/// The bins of several dimensions (without [`Groups`]) in a treap ordered
/// by key `(load in the first dimension, stamp)`: in-order, the emptiest
/// bin first and, among equal loads, the least recently changed first, so
/// that the best bin for an item is the last in order whose load is at
/// most the item's limit and that fits in the other dimensions. Every node
/// keeps the least load of its subtree in each other dimension, so that a
/// search skips a subtree where no bin has room.
///
/// Nodes are the bins' numbers. A node's priority is a fixed hash of its
/// number ([`priority`]): the tree's shape depends only on the keys and
/// those numbers, never on the order of operations, and its depth is
/// O(log bins) expected. Insertion, removal and search are iterative, with
/// reused buffers: no recursion, no allocation after the bins are opened.
struct Tree<T> {
    dims: usize,
    root: usize,
    left: Vec<usize>,
    right: Vec<usize>,
    /// `least[b * (dims - 1) + j]`: the least load in dimension `j + 1`
    /// over the subtree of `b`.
    least: Vec<T>,
    /// Scratch: the nodes above the change, then the spines of a split or
    /// merge, bottom-up refreshed.
    path: Vec<usize>,
    spine: Vec<usize>,
    /// Scratch of [`Tree::find`]: `(node, whether only the node itself is
    /// left to check)`, and the limits of the other dimensions.
    stack: Vec<(usize, bool)>,
    limits: Vec<T>,
}

/// The priority of node `b`: splitmix64 of its number (a bijection, so no
/// two nodes tie).
#[inline]
fn priority(b: usize) -> u64 {
    crate::num::splitmix64(b as u64)
}

impl<T: Size> Tree<T> {
    fn new(dims: usize, hint: usize) -> Self {
        Tree {
            dims,
            root: NONE,
            left: Vec::with_capacity(hint),
            right: Vec::with_capacity(hint),
            least: Vec::with_capacity(hint.saturating_mul(dims - 1)),
            path: Vec::new(),
            spine: Vec::new(),
            stack: Vec::new(),
            limits: Vec::with_capacity(dims - 1),
        }
    }

    /// Room for a new bin (not yet in the tree).
    fn open(&mut self) {
        self.left.push(NONE);
        self.right.push(NONE);
        self.least
            .extend(core::iter::repeat(T::zero()).take(self.dims - 1));
    }

    /// The key of bin `b`.
    #[inline]
    fn key(&self, b: usize, loads: &[T], stamp: &[u64]) -> (T, u64) {
        (loads[b * self.dims], stamp[b])
    }

    /// Recomputes the least loads of `b` from its own and its children's.
    fn refresh(&mut self, b: usize, loads: &[T]) {
        let (d, r) = (self.dims, self.dims - 1);
        for j in 0..r {
            let mut m = loads[b * d + 1 + j];
            for c in [self.left[b], self.right[b]] {
                if c != NONE {
                    m = m.min(self.least[c * r + j]);
                }
            }
            self.least[b * r + j] = m;
        }
    }

    /// Sets the link to a subtree: the root, or the left or right child of
    /// `parent`.
    #[inline]
    fn attach(&mut self, parent: usize, to_left: bool, node: usize) {
        if parent == NONE {
            self.root = node;
        } else if to_left {
            self.left[parent] = node;
        } else {
            self.right[parent] = node;
        }
    }

    /// Refreshes the nodes of `self.path`, deepest first.
    fn refresh_path(&mut self, loads: &[T]) {
        let path = core::mem::take(&mut self.path);
        for &b in path.iter().rev() {
            self.refresh(b, loads);
        }
        self.path = path;
    }

    /// Inserts bin `b` (not in the tree). O(depth).
    fn insert(&mut self, b: usize, loads: &[T], stamp: &[u64]) {
        let key = self.key(b, loads, stamp);
        let p = priority(b);
        self.path.clear();
        let (mut parent, mut to_left, mut t) = (NONE, false, self.root);
        while t != NONE && priority(t) > p {
            self.path.push(t);
            parent = t;
            to_left = key < self.key(t, loads, stamp);
            t = if to_left { self.left[t] } else { self.right[t] };
        }
        // Split the subtree at `t` into the keys below and above `key`: the
        // two become the children of `b`, which takes its place.
        let (mut lo, mut hi) = (NONE, NONE);
        self.spine.clear();
        while t != NONE {
            self.spine.push(t);
            if self.key(t, loads, stamp) < key {
                self.attach_split(&mut lo, b, true, t);
                t = self.right[t];
            } else {
                self.attach_split(&mut hi, b, false, t);
                t = self.left[t];
            }
        }
        // Cut the last links of each side.
        if lo != NONE {
            self.right[lo] = NONE;
        } else {
            self.left[b] = NONE;
        }
        if hi != NONE {
            self.left[hi] = NONE;
        } else {
            self.right[b] = NONE;
        }
        let spine = core::mem::take(&mut self.spine);
        for &n in spine.iter().rev() {
            self.refresh(n, loads);
        }
        self.spine = spine;
        self.refresh(b, loads);
        self.attach(parent, to_left, b);
        self.refresh_path(loads);
    }

    /// One step of the split in [`Tree::insert`]: `t` goes on the side
    /// whose last node is `*last` (the left side hangs right children under
    /// `b.left`, the right side left children under `b.right`).
    #[inline]
    fn attach_split(&mut self, last: &mut usize, b: usize, low: bool, t: usize) {
        match (*last, low) {
            (NONE, true) => self.left[b] = t,
            (NONE, false) => self.right[b] = t,
            (l, true) => self.right[l] = t,
            (l, false) => self.left[l] = t,
        }
        *last = t;
    }

    /// Removes bin `b` (in the tree, with the key it was inserted with).
    /// O(depth).
    fn remove(&mut self, b: usize, loads: &[T], stamp: &[u64]) {
        let key = self.key(b, loads, stamp);
        self.path.clear();
        let (mut parent, mut to_left, mut t) = (NONE, false, self.root);
        while t != b {
            if t == NONE {
                debug_assert!(false, "bin {b} is not in the tree");
                return;
            }
            self.path.push(t);
            parent = t;
            to_left = key < self.key(t, loads, stamp);
            t = if to_left { self.left[t] } else { self.right[t] };
        }
        // Merge the children (every key of the left below every key of the
        // right) in place of `b`.
        let (mut a, mut c) = (self.left[b], self.right[b]);
        let (mut last, mut last_left) = (parent, to_left);
        self.spine.clear();
        loop {
            if a == NONE || c == NONE {
                self.attach(last, last_left, if a == NONE { c } else { a });
                break;
            }
            if priority(a) > priority(c) {
                self.attach(last, last_left, a);
                self.spine.push(a);
                (last, last_left) = (a, false);
                a = self.right[a];
            } else {
                self.attach(last, last_left, c);
                self.spine.push(c);
                (last, last_left) = (c, true);
                c = self.left[c];
            }
        }
        let spine = core::mem::take(&mut self.spine);
        for &n in spine.iter().rev() {
            self.refresh(n, loads);
        }
        self.spine = spine;
        self.left[b] = NONE;
        self.right[b] = NONE;
        self.refresh_path(loads);
    }

    /// The last bin in key order whose first load is at most `limit` and
    /// that holds `size` in every other dimension (as [`SizeOps::fits`]
    /// decides), if any.
    ///
    /// A reverse in-order walk that skips every subtree whose least load
    /// in some dimension is above the limit there. With two dimensions,
    /// each subtree it enters with keys at most `limit` holds an answer, so
    /// it stops after O(depth) nodes.
    fn find(&mut self, limit: T, size: &[T], capacity: &[T], loads: &[T]) -> Option<usize> {
        let (d, r) = (self.dims, self.dims - 1);
        self.limits.clear();
        for j in 1..d {
            // An item that fits no bin in some dimension fits none.
            self.limits.push(T::max_load(size[j], capacity[j])?);
        }
        self.stack.clear();
        self.stack.push((self.root, false));
        while let Some((t, only)) = self.stack.pop() {
            if only {
                let fits = (1..d).all(|j| T::fits(loads[t * d + j], size[j], capacity[j]));
                if fits {
                    return Some(t);
                }
                continue;
            }
            if t == NONE || (0..r).any(|j| self.least[t * r + j] > self.limits[j]) {
                continue;
            }
            // Pushed in reverse: the right subtree is searched first, then
            // the node, then the left subtree.
            self.stack.push((self.left[t], false));
            if loads[t * d] <= limit {
                self.stack.push((t, true));
                self.stack.push((self.right[t], false));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use alloc::vec;

    use ordered_float::NotNan;
    use proptest::prelude::*;

    use super::*;

    /// Best fit over the validated items, by the tree (where it applies)
    /// and by the walk over the stacks it replaces (the oracle), decreasing
    /// or online.
    fn both<I: Item>(
        items: &[I],
        capacity: I::Capacity,
        decreasing: bool,
    ) -> (Packing<I::Size>, Packing<I::Size>) {
        let input = validate(items, &capacity, Keep::Sizes).expect("valid items");
        let (order, sizes, bounds) = if decreasing {
            let sorted = order::decreasing(items, &input);
            let bounds = bounds_of(&input, Some(&sorted.classes));
            (Some(sorted.order), sorted.sizes, bounds)
        } else {
            (None, input.sizes.clone(), bounds_of(&input, None))
        };
        let fast = pack_best_fit(&input, order.as_deref(), Sizes::Flat(&sizes), bounds);
        let groups = Groups::of(&input.capacity);
        let naive = run(
            &input,
            order.as_deref(),
            Sizes::Flat(&sizes),
            bounds,
            groups,
            false,
            BTreeMap::new,
        );
        (fast, naive)
    }

    fn bins<T: Size>(p: &Packing<T>) -> Vec<Vec<usize>> {
        p.bins().map(|b| b.items().to_vec()).collect()
    }

    /// Equal packings, bin for bin (items and loads).
    fn same<T: Size>(fast: &Packing<T>, naive: &Packing<T>) {
        assert_eq!(bins(fast), bins(naive));
        let loads =
            |p: &Packing<T>| -> Vec<Vec<T>> { p.bins().map(|b| b.load().to_vec()).collect() };
        assert_eq!(loads(fast), loads(naive));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]

        /// Two dimensions, the second capacity too large for groups: the
        /// tree packs exactly as the walk, with many ties of load.
        #[test]
        fn tree_packs_as_the_walk_in_two_dimensions(
            items in prop::collection::vec((0u32..40, 0u32..400), 0..300),
            c0 in 40u32..120,
            c1 in 400u32..1200,
            decreasing in any::<bool>(),
        ) {
            let items: Vec<[u32; 2]> = items.into_iter().map(|(a, b)| [a, b]).collect();
            let (fast, naive) = both(&items, [c0, c1], decreasing);
            same(&fast, &naive);
        }

        /// Three and four dimensions (the least loads only prune).
        #[test]
        fn tree_packs_as_the_walk_in_more_dimensions(
            items in prop::collection::vec(prop::collection::vec(0u64..50, 4), 0..200),
            caps in prop::collection::vec(300u64..600, 4),
            three in any::<bool>(),
            decreasing in any::<bool>(),
        ) {
            let d = if three { 3 } else { 4 };
            let items: Vec<Vec<u64>> = items.into_iter().map(|mut v| { v.truncate(d); v }).collect();
            let caps = caps[..d].to_vec();
            let (fast, naive) = both(&items, caps, decreasing);
            same(&fast, &naive);
        }

        /// Float sizes (the limits by binary search, rounding at the edge).
        #[test]
        fn tree_packs_as_the_walk_for_floats(
            items in prop::collection::vec((0u32..64, 0u32..64), 0..200),
            decreasing in any::<bool>(),
        ) {
            let f = |x: u32| NotNan::new(f64::from(x) / 8.0 + 0.1).expect("finite");
            let items: Vec<[NotNan<f64>; 2]> = items.into_iter().map(|(a, b)| [f(a), f(b)]).collect();
            let cap = [NotNan::new(10.3).expect("finite"), NotNan::new(9.7).expect("finite")];
            let (fast, naive) = both(&items, cap, decreasing);
            same(&fast, &naive);
        }
    }

    /// The quadratic case of the walk: every bin has room in the first
    /// dimension and none in the second, so the walk visited every bin for
    /// every item. Same packing, one bin each.
    #[test]
    fn bins_full_in_the_second_dimension() {
        let items = vec![[1u32, 1000]; 2000];
        let (fast, naive) = both(&items, [100_000, 1000], true);
        same(&fast, &naive);
        assert_eq!(fast.len(), 2000);
    }

    #[test]
    fn priorities_differ() {
        let mut p: Vec<u64> = (0..10_000).map(priority).collect();
        p.sort_unstable();
        p.dedup();
        assert_eq!(p.len(), 10_000);
    }
}

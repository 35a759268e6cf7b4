//! Bin packing: every item goes into exactly one bin and no bin exceeds its
//! capacity in any dimension.
//!
//! | function | order | complexity (1 dimension) | bins used (worst case) |
//! |---|---|---|---|
//! | [`first_fit_decreasing`] | sizes decreasing | O(n log n) | 11/9 OPT + 6/9 |
//! | [`best_fit_decreasing`] | sizes decreasing | O(n log n) | 11/9 OPT + 6/9 |
//! | [`first_fit`] | arrival | O(n log n) | 1.7 OPT |
//! | [`best_fit`] | arrival | O(n log n) | 1.7 OPT |
//! | [`next_fit`] | arrival | O(n) | 2 OPT |
//! | [`StreamingPacker`] | decreasing within a bounded look-ahead buffer | O(n log B) | as FFD/BFD when the buffer holds everything |
//!
//! All of them take a slice of [`Item`]s and a capacity of the same
//! dimension, and return a [`Packing`]: the bins as lists of item indices, each
//! bin's load, the Martello-Toth lower bounds and the packing efficiency.
//!
//! # Multi-dimensional capacities
//!
//! An item may have several sizes (total tokens, image tokens, ViT tiles) and
//! the capacity one limit for each, e.g. "16384 tokens and at most 48 tiles".
//! An item fits a bin when it fits in *every* dimension. The decreasing
//! variants order vector items by the largest fraction of the capacity they
//! use in any dimension, `max_d size[d] / capacity[d]` (computed in `f64`),
//! then by the sum of those fractions, then by id, then by input index.
//! One-dimensional items are ordered by their exact size.
//!
//! With one dimension every algorithm meets its stated complexity in the
//! worst case. With several, finding a bin with room in every dimension is a
//! dominance query, for which no structure gives O(log n) in general; the
//! crate exploits what training data looks like, secondary dimensions with
//! few values (tiles, images):
//!
//! - [`first_fit_decreasing`] groups the items by their secondary sizes; with
//!   at most 64 groups `g` it runs in O(n log n + n g log n);
//! - [`best_fit_decreasing`] and [`best_fit`] group the bins by their
//!   remaining secondary capacity; when the secondary capacities allow at most
//!   256 such groups `p` (say 48 tiles: 49) they run in O(n p log n);
//! - [`first_fit`] keeps, in each node of its tree over the bins, the least
//!   load for every possible remaining secondary capacity; when there are at
//!   most 64 of those `p`, a search is one exact descent and an update costs
//!   O(16 p) a level: O(n p log n) in all;
//! - beyond 256 groups, [`best_fit_decreasing`] and [`best_fit`] keep the
//!   bins in a treap by (first load, last change) whose subtrees know their
//!   least load in every other dimension: with two dimensions that is exact,
//!   O(log n) expected a query, O(n log n) in all;
//! - beyond those limits the search prunes by each dimension's best value in
//!   a subtree, which is exact for the first dimension and only a necessary
//!   condition for the others: a search may visit many paths, up to O(bins)
//!   per item in the worst case (first-fit beyond its groups, best fit with
//!   three or more dimensions).
//!
//! The benchmarks (`benches/pack.rs`, figures in the repository's
//! `BENCHMARKS.md`) measure both cases on (tokens, tiles) samples.
//!
//! # Errors
//!
//! Every function validates the whole input before packing and returns an
//! [`Error`] naming what is wrong: a capacity with no dimension
//! ([`Error::NoDimensions`]) or more than 65536
//! ([`Error::InvalidSetting`] for `capacity dimensions`), a zero dimension
//! ([`Error::ZeroCapacity`]), a negative or infinite float capacity
//! ([`Error::InvalidCapacity`]), an item with a different number of
//! dimensions ([`Error::DimensionMismatch`]), a float size that is negative
//! or infinite ([`Error::InvalidSize`]), and every item larger than the
//! capacity ([`Error::Oversize`]). Zero-size items are legal. No input makes
//! these functions panic.
//!
//! # Resources
//!
//! Memory and time grow with the input (the items and their dimensions),
//! never with a parameter alone: arrays indexed by an integer capacity's
//! values are used only up to `max(2^10, 2n)` entries (else an ordered
//! tree), bins are allocated as they are opened, and the dimension count is
//! at most 65536.
//!
//! # Floats
//!
//! Float loads are sums in the size type, each bin's summed in the order
//! its items are listed, and an item goes into a bin only when that sum
//! stays at most the capacity, tested exactly as the load is then computed:
//! a reported load is at most the capacity, and summing a bin's sizes
//! afresh in its listed order gives the reported load bit for bit. The
//! lower bounds are valid for such loads (see [`lower_bounds`]).
//!
//! # Examples
//!
//! Pack samples with (tokens, tiles) into sequences of 16384 tokens and at
//! most 48 tiles:
//!
//! ```
//! use microbatch::pack::best_fit_decreasing;
//!
//! let samples = [[9000u32, 30], [8000, 30], [7000, 10], [1000, 20], [500, 0]];
//! let packing = best_fit_decreasing(&samples, [16384, 48])?;
//! for bin in packing.bins() {
//!     assert!(bin.load()[0] <= 16384 && bin.load()[1] <= 48);
//! }
//! assert_eq!(packing.len(), 3);
//! # Ok::<(), microbatch::Error>(())
//! ```

mod best_fit;
mod bounds;
mod first_fit;
mod grid;
mod next_fit;
mod order;
mod streaming;
mod tree;

use alloc::vec::Vec;
use core::fmt;

pub use self::best_fit::{best_fit, best_fit_decreasing};
pub use self::bounds::lower_bounds;
pub use self::first_fit::{first_fit, first_fit_decreasing};
pub use self::next_fit::next_fit;
pub use self::streaming::{Heuristic, Rejected, StreamedBin, StreamingPacker};

use crate::error::{Error, Oversize};
use crate::grouped::Grouped;
use crate::num::{Item, Size, SizeOps};

/// Lower bounds on the number of bins any packing needs.
///
/// For several dimensions each bound is the largest of the one-dimensional
/// bounds.
///
/// # Examples
///
/// ```
/// use microbatch::pack::first_fit_decreasing;
///
/// // Three items above half the capacity need three bins, which L1 does not see.
/// let packing = first_fit_decreasing(&[6u32, 6, 6, 1], 10)?;
/// let lb = packing.lower_bounds();
/// assert_eq!((lb.l1, lb.l2), (2, 3));
/// # Ok::<(), microbatch::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct LowerBounds {
    /// `ceil(sum of sizes / capacity)`.
    pub l1: u64,
    /// The Martello-Toth bound L2, at least `l1`.
    pub l2: u64,
}

/// The result of a packing: bins as lists of item indices, with their loads.
///
/// Bins are numbered in the order they were opened; items within a bin are
/// listed in the order they were placed.
///
/// # Examples
///
/// ```
/// use microbatch::pack::next_fit;
///
/// let packing = next_fit(&[4u32, 4, 4, 4], 10)?;
/// assert_eq!(packing.len(), 2);
/// assert_eq!(packing.bin(1).items(), &[2, 3]);
/// assert_eq!(packing.bin(1).load(), &[8]);
/// assert_eq!(packing.assignment(), vec![0, 0, 1, 1]);
/// assert_eq!(packing.efficiency(0), 0.8);
/// # Ok::<(), microbatch::Error>(())
/// ```
#[derive(Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(try_from = "PackingParts<T>"))]
#[cfg_attr(feature = "serde", serde(bound = "T: Size + serde::Deserialize<'de>"))]
pub struct Packing<T> {
    capacity: Vec<T>,
    /// The items (input indices) of each bin.
    bins: Grouped<usize>,
    /// `loads[b * dims + d]`.
    loads: Vec<T>,
    bounds: LowerBounds,
}

impl<T> Packing<T> {
    /// A packing from its parts, built by an algorithm (not checked).
    ///
    /// The bounds are clamped to the bins used: a packing is itself a
    /// witness that its bin count suffices, so the clamped values are still
    /// lower bounds, and a reader never sees a bound above the result.
    pub(crate) fn new(
        capacity: Vec<T>,
        bins: Grouped<usize>,
        loads: Vec<T>,
        bounds: LowerBounds,
    ) -> Self {
        debug_assert_eq!(loads.len(), bins.len() * capacity.len());
        let used = bins.len() as u64;
        let l2 = bounds.l2.min(used);
        let bounds = LowerBounds {
            l1: bounds.l1.min(l2),
            l2,
        };
        Packing {
            capacity,
            bins,
            loads,
            bounds,
        }
    }
}

impl<T: Size> Packing<T> {
    /// The number of bins.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::pack::first_fit;
    ///
    /// let packing = first_fit(&[6u32, 6, 3], 10)?;
    /// assert_eq!(packing.len(), 2);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn len(&self) -> usize {
        self.bins.len()
    }

    /// Whether there are no bins (there were no items).
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::pack::first_fit;
    ///
    /// assert!(first_fit::<u32>(&[], 10)?.is_empty());
    /// assert!(!first_fit(&[1u32], 10)?.is_empty());
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The number of dimensions.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::pack::first_fit;
    ///
    /// assert_eq!(first_fit(&[5u32], 10)?.dims(), 1);
    /// assert_eq!(first_fit(&[[5u32, 1]], [10, 4])?.dims(), 2);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn dims(&self) -> usize {
        self.capacity.len()
    }

    /// The capacity, one value per dimension.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::pack::first_fit;
    ///
    /// let packing = first_fit(&[[5u32, 1]], [16384, 48])?;
    /// assert_eq!(packing.capacity(), &[16384, 48]);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn capacity(&self) -> &[T] {
        &self.capacity
    }

    /// The number of items packed.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::pack::first_fit;
    ///
    /// let packing = first_fit(&[6u32, 6, 3, 0], 10)?;
    /// assert_eq!((packing.item_count(), packing.len()), (4, 2));
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn item_count(&self) -> usize {
        self.bins.item_count()
    }

    /// Bin `index`.
    ///
    /// # Panics
    ///
    /// When `index >= self.len()`; use [`Packing::get`] for a checked access.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::pack::first_fit;
    ///
    /// let packing = first_fit(&[6u32, 6, 3], 10)?;
    /// assert_eq!(packing.bin(0).items(), &[0, 2]);
    /// assert_eq!(packing.bin(1).load(), &[6]);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn bin(&self, index: usize) -> Bin<'_, T> {
        match self.get(index) {
            Some(bin) => bin,
            None => panic!("bin {index} out of range: there are {} bins", self.len()),
        }
    }

    /// Bin `index`, or `None` when out of range.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::pack::first_fit;
    ///
    /// let packing = first_fit(&[6u32, 6], 10)?;
    /// assert_eq!(packing.get(1).map(|bin| bin.items()), Some(&[1][..]));
    /// assert!(packing.get(2).is_none());
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn get(&self, index: usize) -> Option<Bin<'_, T>> {
        let d = self.dims();
        Some(Bin {
            items: self.bins.get(index)?,
            load: self.loads.get(index * d..(index + 1) * d)?,
        })
    }

    /// The bins in order.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::pack::first_fit;
    ///
    /// let packing = first_fit(&[6u32, 6, 3], 10)?;
    /// let loads: Vec<u32> = packing.bins().map(|bin| bin.load()[0]).collect();
    /// assert_eq!(loads, [9, 6]);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    pub fn bins(&self) -> impl ExactSizeIterator<Item = Bin<'_, T>> + '_ {
        let d = self.dims();
        self.bins
            .iter()
            .zip(self.loads.chunks_exact(d))
            .map(|(items, load)| Bin { items, load })
    }

    /// The bin of every item: `assignment()[i]` is the bin holding item `i`.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::pack::first_fit;
    ///
    /// let packing = first_fit(&[6u32, 6, 3], 10)?;
    /// assert_eq!(packing.assignment(), vec![0, 1, 0]);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn assignment(&self) -> Vec<usize> {
        self.bins.group_of()
    }

    /// The lower bounds L1 and L2 of the instance.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::pack::{first_fit, lower_bounds};
    ///
    /// let items = [6u32, 6, 3];
    /// let packing = first_fit(&items, 10)?;
    /// assert_eq!(packing.lower_bounds(), lower_bounds(&items, 10)?);
    /// assert_eq!(packing.lower_bounds().l1, 2);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn lower_bounds(&self) -> LowerBounds {
        self.bounds
    }

    /// Packing efficiency in dimension `dim`: the sum of sizes over the
    /// total capacity of the bins used, in `[0, 1]`; `1.0` when there are no
    /// bins, and `0.0` for a dimension out of range.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::pack::first_fit;
    ///
    /// let packing = first_fit(&[[6u32, 1], [6, 3], [3, 0]], [10, 4])?;
    /// assert_eq!(packing.efficiency(0), 0.75); // 15 of 2 * 10 tokens
    /// assert_eq!(packing.efficiency(1), 0.5); // 4 of 2 * 4 tiles
    /// assert_eq!(packing.efficiency(2), 0.0); // no such dimension
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn efficiency(&self, dim: usize) -> f64 {
        let Some(cap) = self.capacity.get(dim) else {
            return 0.0;
        };
        if self.is_empty() {
            return 1.0;
        }
        let d = self.dims();
        let used: f64 = self
            .loads
            .iter()
            .skip(dim)
            .step_by(d)
            .map(|l| l.to_f64())
            .sum();
        used / (cap.to_f64() * self.len() as f64)
    }
}

/// The fields of a [`Packing`] as serialized, in this order.
#[cfg(feature = "serde")]
impl<T: Size + serde::Serialize> serde::Serialize for Packing<T> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut s = serializer.serialize_struct("Packing", 5)?;
        s.serialize_field("capacity", &self.capacity)?;
        s.serialize_field("offsets", self.bins.offsets())?;
        s.serialize_field("items", self.bins.items())?;
        s.serialize_field("loads", &self.loads)?;
        s.serialize_field("bounds", &self.bounds)?;
        s.end()
    }
}

/// The fields of a [`Packing`] as deserialized, checked before they become
/// one, so that a malformed document is an error rather than a later panic.
#[cfg(feature = "serde")]
#[derive(serde::Deserialize)]
struct PackingParts<T> {
    capacity: Vec<T>,
    offsets: Vec<usize>,
    items: Vec<usize>,
    loads: Vec<T>,
    bounds: LowerBounds,
}

#[cfg(feature = "serde")]
impl<T: Size> TryFrom<PackingParts<T>> for Packing<T> {
    type Error = crate::grouped::Invalid;

    fn try_from(p: PackingParts<T>) -> Result<Self, Self::Error> {
        use crate::grouped::{check_per_group, invalid, Raw};
        use crate::num::TotalOps;
        let bins = Grouped::try_from(Raw::flat(p.items, p.offsets, "bin"))?;
        let d = p.capacity.len();
        check_per_group(&bins, &p.loads, d, T::zero(), "bin", "load")?;
        for (dim, &c) in p.capacity.iter().enumerate() {
            if c <= T::zero() || c.check().is_err() {
                return Err(invalid!(
                    "the capacity must be finite and positive in every dimension, not {} in \
                     dimension {dim}",
                    c.to_scalar()
                ));
            }
        }
        for (b, (items, load)) in bins.iter().zip(p.loads.chunks_exact(d)).enumerate() {
            if items.is_empty() {
                return Err(invalid!(
                    "bin {b} is empty: a packing opens a bin only for an item"
                ));
            }
            for (dim, (&l, &c)) in load.iter().zip(&p.capacity).enumerate() {
                if l.check().is_err() {
                    return Err(invalid!(
                        "bin {b} has a load of {} in dimension {dim}: loads must be finite \
                         and non-negative",
                        l.to_scalar()
                    ));
                }
                if l > c {
                    return Err(invalid!(
                        "bin {b} has a load of {} in dimension {dim}, above the capacity {}",
                        l.to_scalar(),
                        c.to_scalar()
                    ));
                }
            }
        }
        let LowerBounds { l1, l2 } = p.bounds;
        let used = bins.len() as u64;
        if !(l1 <= l2 && l2 <= used) {
            return Err(invalid!(
                "the lower bounds must satisfy l1 <= l2 <= bins, not l1 = {l1}, l2 = {l2} \
                 with {used} bins"
            ));
        }
        // Integer loads sum exactly to the sizes: L1 is then known.
        if T::Total::INTEGER {
            let volume = (0..d)
                .map(|dim| {
                    let total = p
                        .loads
                        .iter()
                        .skip(dim)
                        .step_by(d)
                        .fold(T::Total::ZERO, |t, l| t.add(l.widen()));
                    T::bins_needed(total, p.capacity[dim], bins.item_count())
                })
                .max()
                .unwrap_or(0);
            if l1 > volume {
                return Err(invalid!(
                    "the lower bound l1 = {l1} is above the volume of the loads, which fills \
                     {volume} bin(s)"
                ));
            }
        }
        Ok(Packing {
            capacity: p.capacity,
            bins,
            loads: p.loads,
            bounds: p.bounds,
        })
    }
}

impl<T: Size> fmt::Debug for Packing<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Packing")
            .field("capacity", &self.capacity)
            .field("bins", &DebugBins(self))
            .field("lower_bounds", &self.bounds)
            .finish()
    }
}

struct DebugBins<'a, T>(&'a Packing<T>);

impl<T: Size> fmt::Debug for DebugBins<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.0.bins()).finish()
    }
}

/// One bin of a [`Packing`]: its items (input indices) and its load.
///
/// # Examples
///
/// ```
/// use microbatch::pack::first_fit;
///
/// let packing = first_fit(&[[3u32, 1], [4, 1]], [10, 1])?;
/// let bin = packing.bin(0);
/// assert_eq!((bin.items(), bin.load()), (&[0][..], &[3, 1][..]));
/// # Ok::<(), microbatch::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bin<'a, T> {
    items: &'a [usize],
    load: &'a [T],
}

impl<'a, T> Bin<'a, T> {
    /// The indices (in the input slice) of the items in this bin.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::pack::first_fit;
    ///
    /// let packing = first_fit(&[6u32, 6, 3], 10)?;
    /// assert_eq!(packing.bin(0).items(), &[0, 2]);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn items(&self) -> &'a [usize] {
        self.items
    }

    /// The bin's load, one value per dimension.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::pack::first_fit;
    ///
    /// let packing = first_fit(&[[6u32, 1], [3, 2]], [10, 4])?;
    /// assert_eq!(packing.bin(0).load(), &[9, 3]);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn load(&self) -> &'a [T] {
        self.load
    }
}

/// Validated input: sizes flattened row-major (`sizes[i * dims + d]`).
pub(crate) struct Input<T> {
    pub(crate) dims: usize,
    pub(crate) capacity: Vec<T>,
    /// The number of items.
    pub(crate) n: usize,
    /// The sizes, flattened; empty when validation did not keep them (one
    /// dimension, decreasing algorithms, which read the items instead).
    pub(crate) sizes: Vec<T>,
}

impl<T: Size> Input<T> {
    pub(crate) fn len(&self) -> usize {
        self.n
    }

    #[inline]
    pub(crate) fn item(&self, i: usize) -> &[T] {
        &self.sizes[i * self.dims..(i + 1) * self.dims]
    }
}

use crate::num::MAX_DIMS;

/// Validates a capacity: at least one and at most [`MAX_DIMS`] dimensions,
/// every value valid and non-zero.
pub(crate) fn check_capacity<C: Item>(capacity: &C) -> Result<Vec<C::Size>, Error> {
    let dims = capacity.dims();
    if dims == 0 {
        return Err(Error::NoDimensions);
    }
    if dims > MAX_DIMS {
        return Err(Error::InvalidSetting {
            name: "capacity dimensions",
            value: dims as u64,
            requirement: "at most 65536",
        });
    }
    let mut cap = Vec::with_capacity(dims);
    for dim in 0..dims {
        let c = capacity.size(dim);
        if let Err(reason) = c.check() {
            return Err(Error::InvalidCapacity {
                dim,
                value: c.to_scalar(),
                reason,
            });
        }
        if c == C::Size::zero() {
            return Err(Error::ZeroCapacity { dim });
        }
        cap.push(c);
    }
    Ok(cap)
}

/// Validates one item against a validated capacity, appending its sizes to
/// `sizes` and any dimension where it is too large to `oversize`.
pub(crate) fn check_item<I: Item>(
    index: usize,
    item: &I,
    capacity: &[I::Size],
    sizes: &mut Vec<I::Size>,
    oversize: &mut Vec<Oversize>,
) -> Result<(), Error> {
    let dims = capacity.len();
    if item.dims() != dims {
        return Err(Error::DimensionMismatch {
            index,
            expected: dims,
            found: item.dims(),
        });
    }
    for (dim, &cap) in capacity.iter().enumerate() {
        let s = item.size(dim);
        if let Err(reason) = s.check() {
            return Err(Error::InvalidSize {
                index,
                dim,
                value: s.to_scalar(),
                reason,
            });
        }
        if s > cap {
            oversize.push(Oversize {
                index,
                id: None,
                dim,
                name: None,
                size: s.to_scalar(),
                capacity: cap.to_scalar(),
            });
        }
        sizes.push(s);
    }
    Ok(())
}

/// Validates every item and the capacity; see the module docs for the
/// errors. Malformed items (wrong dimension, invalid float) are reported
/// first, by the lowest index; oversize items are all collected.
pub(crate) fn validate<I: Item, C: Item<Size = I::Size>>(
    items: &[I],
    capacity: &C,
    keep: Keep,
) -> Result<Input<I::Size>, Error> {
    let capacity = check_capacity(capacity)?;
    let dims = capacity.len();
    let keep = matches!(keep, Keep::Sizes) || dims > 1;
    let mut sizes = Vec::with_capacity(if keep {
        items.len().saturating_mul(dims)
    } else {
        0
    });
    let mut scratch = Vec::with_capacity(dims);
    let mut oversize = Vec::new();
    for (index, item) in items.iter().enumerate() {
        if keep {
            check_item(index, item, &capacity, &mut sizes, &mut oversize)?;
        } else {
            scratch.clear();
            check_item(index, item, &capacity, &mut scratch, &mut oversize)?;
        }
    }
    if !oversize.is_empty() {
        return Err(Error::Oversize { items: oversize });
    }
    Ok(Input {
        dims,
        capacity,
        n: items.len(),
        sizes,
    })
}

/// Whether [`validate`] keeps a copy of the sizes.
#[derive(Clone, Copy)]
pub(crate) enum Keep {
    /// Keep them (every algorithm that reads sizes by index).
    Sizes,
    /// Only check them when there is one dimension: the decreasing
    /// algorithms read the items themselves once, to sort them.
    CheckOnly,
}

/// The sizes of the items in `order`, flattened. Gathering them before
/// placing lets the independent loads overlap, where a gather inside the
/// placement loop would stall it on every cache miss.
pub(crate) fn gather<T: Size>(input: &Input<T>, order: &[usize]) -> Vec<T> {
    if input.dims == 1 {
        return order.iter().map(|&i| input.sizes[i]).collect();
    }
    let mut sorted = Vec::with_capacity(order.len() * input.dims);
    for &i in order {
        sorted.extend_from_slice(input.item(i));
    }
    sorted
}

/// Builds a [`Packing`] from the placement of each item: the `k`-th item
/// placed is `order[k]` (or `k` when `order` is `None`, arrival order) and
/// went into bin `bin_at[k]`; `loads` has `bins * dims` entries.
pub(crate) fn assemble<T: Size>(
    input: &Input<T>,
    order: Option<&[usize]>,
    bin_at: &[usize],
    loads: Vec<T>,
    bounds: LowerBounds,
) -> Packing<T> {
    assemble_runs(input, order, bin_at.iter().map(|&b| (b, 1)), loads, bounds)
}

/// [`assemble`] from runs `(bin, count)`: the next `count` items placed all
/// went into `bin`.
pub(crate) fn assemble_runs<T: Size>(
    input: &Input<T>,
    order: Option<&[usize]>,
    runs: impl Iterator<Item = (usize, usize)> + Clone,
    loads: Vec<T>,
    bounds: LowerBounds,
) -> Packing<T> {
    let bins = loads.len() / input.dims;
    let mut counts = alloc::vec![0usize; bins];
    for (b, count) in runs.clone() {
        counts[b] += count;
    }
    Packing::new(
        input.capacity.clone(),
        Grouped::scatter_runs(counts, runs, |k| order.map_or(k, |o| o[k])),
        loads,
        bounds,
    )
}

//! A [`Packing`] (bins as lists of item indices, their loads and lower
//! bounds on the bin count), a [`Bin`] view of one bin, [`LowerBounds`],
//! and the packing's serde form.

use alloc::vec::Vec;
use core::fmt;

use crate::grouped::Grouped;
use crate::num::Size;

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

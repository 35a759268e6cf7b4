//! A streaming packer for data loaders: items arrive one at a time, closed
//! bins come out, and a bounded look-ahead buffer holds what is undecided.

use alloc::collections::VecDeque;
use alloc::vec::Vec;
use core::fmt;

use super::best_fit::bfd_validated;
use super::first_fit::ffd_validated;
use super::{check_capacity, check_item, Input, Packing};
use crate::error::Error;
#[cfg(feature = "serde")]
use crate::num::Size;
use crate::num::{Item, SizeOps};

/// The batch heuristic a [`StreamingPacker`] runs over its buffer.
///
/// # Examples
///
/// ```
/// use microbatch::pack::{Heuristic, StreamingPacker};
///
/// let packer = StreamingPacker::<u32>::new(4096, 1024)?.heuristic(Heuristic::BestFitDecreasing);
/// assert_eq!(packer.buffer_limit(), 1024);
/// # Ok::<(), microbatch::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Heuristic {
    /// [`first_fit_decreasing`](super::first_fit_decreasing) (the default).
    #[default]
    FirstFitDecreasing,
    /// [`best_fit_decreasing`](super::best_fit_decreasing).
    BestFitDecreasing,
}

/// An item the [`StreamingPacker`] did not take, handed back with the reason.
///
/// # Examples
///
/// ```
/// use microbatch::pack::StreamingPacker;
///
/// let mut packer = StreamingPacker::<u32>::new(100, 8)?;
/// let rejected = packer.push(150).unwrap_err();
/// assert_eq!(rejected.item, 150);
/// assert_eq!(rejected.error.to_string(), "1 item(s) larger than the capacity: item 0 has size 150 > 100 in dimension 0;");
/// # Ok::<(), microbatch::Error>(())
/// ```
#[derive(Clone, PartialEq)]
pub struct Rejected<I> {
    /// Why the item was refused; its index is the arrival number the item
    /// would have had.
    pub error: Error,
    /// The item, untouched.
    pub item: I,
}

impl<I> fmt::Debug for Rejected<I> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rejected")
            .field("error", &self.error)
            .finish_non_exhaustive()
    }
}

impl<I> fmt::Display for Rejected<I> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.error, f)
    }
}

impl<I> core::error::Error for Rejected<I> {}

/// A closed bin emitted by a [`StreamingPacker`]: its items, each with its
/// arrival number (0 for the first item pushed), and its load.
///
/// # Examples
///
/// ```
/// use microbatch::pack::StreamingPacker;
///
/// let mut packer = StreamingPacker::<u32>::new(10, 8)?;
/// for size in [6, 3, 4] {
///     packer.push(size).unwrap();
/// }
/// let bins = packer.finish();
/// assert_eq!(bins[0].arrivals(), &[0, 2]); // 6 + 4
/// assert_eq!(bins[0].items(), &[6, 4]);
/// assert_eq!(bins[0].load(), &[10]);
/// # Ok::<(), microbatch::Error>(())
/// ```
///
/// Read back with serde, a bin is checked: one arrival number per item, no
/// arrival twice, every item valid with one size per dimension of the load,
/// and the load equal to the sum of the sizes in the listed order.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(try_from = "StreamedBinParts<I, T>"))]
#[cfg_attr(
    feature = "serde",
    serde(bound(
        serialize = "I: serde::Serialize, T: serde::Serialize",
        deserialize = "I: Item<Size = T> + serde::Deserialize<'de>, T: Size + serde::Deserialize<'de>"
    ))
)]
pub struct StreamedBin<I, T> {
    arrivals: Vec<u64>,
    items: Vec<I>,
    load: Vec<T>,
}

/// The fields of a [`StreamedBin`] as deserialized, checked before they
/// become one.
#[cfg(feature = "serde")]
#[derive(serde::Deserialize)]
struct StreamedBinParts<I, T> {
    arrivals: Vec<u64>,
    items: Vec<I>,
    load: Vec<T>,
}

#[cfg(feature = "serde")]
impl<I: Item<Size = T>, T: Size> TryFrom<StreamedBinParts<I, T>> for StreamedBin<I, T> {
    type Error = crate::grouped::Invalid;

    fn try_from(p: StreamedBinParts<I, T>) -> Result<Self, Self::Error> {
        use crate::grouped::invalid;
        let (n, d) = (p.items.len(), p.load.len());
        if n == 0 || p.arrivals.len() != n {
            return Err(invalid!(
                "a streamed bin needs at least one item and one arrival number per item, \
                 not {n} item(s) and {} arrival number(s)",
                p.arrivals.len()
            ));
        }
        let mut sorted = p.arrivals.clone();
        sorted.sort_unstable();
        if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
            return Err(invalid!("arrival number {} is listed twice", w[0]));
        }
        if d == 0 {
            return Err(invalid!("the load must have at least one dimension, not 0"));
        }
        let mut sum = alloc::vec![T::zero(); d];
        for (k, item) in p.items.iter().enumerate() {
            if item.dims() != d {
                return Err(invalid!(
                    "item {k} has {} dimension(s) but the load has {d}",
                    item.dims()
                ));
            }
            for (dim, l) in sum.iter_mut().enumerate() {
                let s = item.size(dim);
                if s.check().is_err() {
                    return Err(invalid!(
                        "item {k} has size {} in dimension {dim}: sizes must be finite and \
                         non-negative",
                        s.to_scalar()
                    ));
                }
                *l = l.add(s);
            }
        }
        if let Some(dim) = (0..d).find(|&dim| sum[dim] != p.load[dim]) {
            return Err(invalid!(
                "the load {} in dimension {dim} is not the sum of the items' sizes, {}",
                p.load[dim].to_scalar(),
                sum[dim].to_scalar()
            ));
        }
        Ok(StreamedBin {
            arrivals: p.arrivals,
            items: p.items,
            load: p.load,
        })
    }
}

impl<I, T> StreamedBin<I, T> {
    /// The arrival number of each item, in placement order.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::pack::StreamingPacker;
    ///
    /// let mut packer = StreamingPacker::<u32>::new(10, 8)?;
    /// for size in [6, 3, 4] {
    ///     packer.push(size).unwrap();
    /// }
    /// assert_eq!(packer.finish()[1].arrivals(), &[1]); // the 3 alone
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn arrivals(&self) -> &[u64] {
        &self.arrivals
    }

    /// The items, in placement order.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::pack::StreamingPacker;
    ///
    /// let mut packer = StreamingPacker::<u32>::new(10, 8)?;
    /// for size in [3, 7] {
    ///     packer.push(size).unwrap();
    /// }
    /// assert_eq!(packer.finish()[0].items(), &[7, 3]); // largest first
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn items(&self) -> &[I] {
        &self.items
    }

    /// The load, one value per dimension.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::pack::StreamingPacker;
    ///
    /// let mut packer = StreamingPacker::<[u32; 2]>::new([10, 4], 8)?;
    /// for item in [[6, 1], [3, 2]] {
    ///     packer.push(item).unwrap();
    /// }
    /// assert_eq!(packer.finish()[0].load(), &[9, 3]);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn load(&self) -> &[T] {
        &self.load
    }

    /// The items, by value.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::pack::StreamingPacker;
    ///
    /// let mut packer = StreamingPacker::<u32>::new(10, 8)?;
    /// for size in [3, 7] {
    ///     packer.push(size).unwrap();
    /// }
    /// let bin = packer.finish().remove(0);
    /// assert_eq!(bin.into_items(), vec![7, 3]);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn into_items(self) -> Vec<I> {
        self.items
    }
}

/// Packs a stream of items with a bounded look-ahead buffer.
///
/// Items are buffered as they are [pushed](StreamingPacker::push). When a
/// push would take the buffer beyond its limit `B`, the buffer is packed with
/// the chosen decreasing [`Heuristic`], and the fullest bins (by the largest
/// fraction of the capacity they use in any dimension; ties to the lower bin
/// number) are closed and queued for [`pop`](StreamingPacker::pop) until at
/// most `B / 2` items stay buffered; the items of the other bins wait for more
/// arrivals to pair with. [`finish`](StreamingPacker::finish) packs what is
/// left.
///
/// When the buffer holds every item (`B >= n`), the bins are exactly those of
/// the batch heuristic over the items in arrival order, with arrival numbers
/// for indices. Ties between equal items follow the batch rules (id, then
/// arrival).
///
/// # Complexity
///
/// O(n log B) time amortized for one dimension: each flush packs at most
/// `B + 1` items in O(B log B) and closes at least `B / 2` of them. O(B) space
/// besides the closed bins not yet popped.
///
/// # Examples
///
/// ```
/// use microbatch::pack::StreamingPacker;
///
/// let mut packer = StreamingPacker::<u32>::new(4096, 4)?;
/// let mut sequences = Vec::new();
/// for len in [3000, 1000, 2000, 2000, 96, 4000, 500] {
///     packer.push(len).unwrap();
///     while let Some(bin) = packer.pop() {
///         sequences.push(bin);
///     }
/// }
/// sequences.extend(packer.finish());
/// let packed: u64 = sequences.iter().map(|b| b.arrivals().len() as u64).sum();
/// assert_eq!(packed, 7);
/// assert!(sequences.iter().all(|b| b.load()[0] <= 4096));
/// # Ok::<(), microbatch::Error>(())
/// ```
pub struct StreamingPacker<I: Item> {
    capacity: Vec<I::Size>,
    limit: usize,
    heuristic: Heuristic,
    /// Buffered items in arrival order.
    buffer: Vec<(u64, I)>,
    ready: VecDeque<StreamedBin<I, I::Size>>,
    arrived: u64,
}

impl<I: Item> StreamingPacker<I> {
    /// A packer for bins of `capacity` with a look-ahead buffer of `buffer`
    /// items (a buffer of 0 acts as 1).
    ///
    /// # Errors
    ///
    /// An invalid capacity: no dimension, a zero, a negative or infinite
    /// float.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::pack::StreamingPacker;
    ///
    /// let packer = StreamingPacker::<[u32; 2]>::new([16384, 48], 512)?;
    /// assert_eq!(packer.buffered(), 0);
    /// assert!(StreamingPacker::<u32>::new(0, 512).is_err());
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    pub fn new(capacity: I::Capacity, buffer: usize) -> Result<Self, Error> {
        Ok(StreamingPacker {
            capacity: check_capacity(&capacity)?,
            limit: buffer.max(1),
            heuristic: Heuristic::default(),
            buffer: Vec::new(),
            ready: VecDeque::new(),
            arrived: 0,
        })
    }

    /// Chooses the batch heuristic run over the buffer.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::pack::{Heuristic, StreamingPacker};
    ///
    /// // Best fit puts the 2 in the fullest bin (9 + 9); first fit would add it to the 12.
    /// let mut packer = StreamingPacker::<u32>::new(20, 8)?.heuristic(Heuristic::BestFitDecreasing);
    /// for size in [12, 9, 9, 2] {
    ///     packer.push(size).unwrap();
    /// }
    /// assert_eq!(packer.finish()[1].items(), &[9, 9, 2]);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn heuristic(mut self, heuristic: Heuristic) -> Self {
        self.heuristic = heuristic;
        self
    }

    /// The buffer limit `B`.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::pack::StreamingPacker;
    ///
    /// assert_eq!(StreamingPacker::<u32>::new(10, 64)?.buffer_limit(), 64);
    /// assert_eq!(StreamingPacker::<u32>::new(10, 0)?.buffer_limit(), 1);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn buffer_limit(&self) -> usize {
        self.limit
    }

    /// The number of items buffered, not yet in a closed bin.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::pack::StreamingPacker;
    ///
    /// let mut packer = StreamingPacker::<u32>::new(10, 8)?;
    /// packer.push(6).unwrap();
    /// packer.push(4).unwrap();
    /// assert_eq!(packer.buffered(), 2);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn buffered(&self) -> usize {
        self.buffer.len()
    }

    /// The number of closed bins waiting to be popped.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::pack::StreamingPacker;
    ///
    /// let mut packer = StreamingPacker::<u32>::new(10, 2)?;
    /// for size in [6, 4, 5] {
    ///     packer.push(size).unwrap();
    /// }
    /// // The third push overflowed the buffer: the full bin 6 + 4 was closed.
    /// assert_eq!((packer.ready(), packer.buffered()), (1, 1));
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn ready(&self) -> usize {
        self.ready.len()
    }

    /// Adds an item. When the buffer would exceed its limit, the buffer is
    /// packed and its fullest bins are closed (see the type docs).
    ///
    /// # Errors
    ///
    /// An item with the wrong number of dimensions, an invalid float size or
    /// a size above the capacity is refused and handed back in [`Rejected`];
    /// its error names the arrival number it would have had. Nothing is
    /// buffered then.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::pack::StreamingPacker;
    ///
    /// let mut packer = StreamingPacker::<u32>::new(10, 8)?;
    /// packer.push(6).unwrap();
    /// assert!(packer.push(11).is_err()); // above the capacity: not buffered
    /// assert_eq!(packer.buffered(), 1);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    pub fn push(&mut self, item: I) -> Result<(), Rejected<I>> {
        let mut sizes = Vec::new();
        let mut oversize = Vec::new();
        let index = usize::try_from(self.arrived).unwrap_or(usize::MAX);
        let checked = check_item(index, &item, &self.capacity, &mut sizes, &mut oversize);
        let error = match checked {
            Err(error) => Some(error),
            Ok(()) if !oversize.is_empty() => Some(Error::Oversize { items: oversize }),
            Ok(()) => None,
        };
        if let Some(error) = error {
            return Err(Rejected { error, item });
        }
        if self.buffer.len() == self.limit {
            self.flush(false);
        }
        self.buffer.push((self.arrived, item));
        self.arrived += 1;
        Ok(())
    }

    /// The oldest closed bin, if any.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::pack::StreamingPacker;
    ///
    /// let mut packer = StreamingPacker::<u32>::new(10, 2)?;
    /// for size in [6, 4, 5] {
    ///     packer.push(size).unwrap();
    /// }
    /// assert_eq!(packer.pop().unwrap().items(), &[6, 4]);
    /// assert!(packer.pop().is_none());
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    pub fn pop(&mut self) -> Option<StreamedBin<I, I::Size>> {
        self.ready.pop_front()
    }

    /// Packs every buffered item and returns all bins not yet popped: the
    /// closed ones first, then the bins of the final buffer in the batch
    /// algorithm's order.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::pack::StreamingPacker;
    ///
    /// let mut packer = StreamingPacker::<u32>::new(10, 8)?;
    /// for size in [6, 3, 4] {
    ///     packer.push(size).unwrap();
    /// }
    /// let loads: Vec<u32> = packer.finish().iter().map(|bin| bin.load()[0]).collect();
    /// assert_eq!(loads, [10, 3]);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn finish(mut self) -> Vec<StreamedBin<I, I::Size>> {
        self.flush(true);
        self.ready.into_iter().collect()
    }

    /// Packs the buffer; closes every bin (`all`) or the fullest until at
    /// most half the limit stays buffered.
    fn flush(&mut self, all: bool) {
        if self.buffer.is_empty() {
            return;
        }
        let packing = self.pack_buffer();
        let mut close: Vec<bool> = alloc::vec![all; packing.len()];
        if !all {
            let caps: Vec<f64> = self.capacity.iter().map(|c| c.to_f64()).collect();
            let fill = |b: usize| -> f64 {
                packing
                    .bin(b)
                    .load()
                    .iter()
                    .zip(&caps)
                    .map(|(l, c)| l.to_f64() / c)
                    .fold(0.0, f64::max)
            };
            let mut by_fill: Vec<(f64, usize)> = (0..packing.len()).map(|b| (fill(b), b)).collect();
            by_fill.sort_unstable_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            let mut left = self.buffer.len();
            for (_, b) in by_fill {
                close[b] = true;
                left -= packing.bin(b).items().len();
                if left <= self.limit / 2 {
                    break;
                }
            }
        }
        let mut slots: Vec<Option<(u64, I)>> = self.buffer.drain(..).map(Some).collect();
        for (b, bin) in packing.bins().enumerate() {
            if !close[b] {
                continue;
            }
            let (mut arrivals, mut items) = (Vec::new(), Vec::new());
            for &i in bin.items() {
                if let Some((arrival, item)) = slots[i].take() {
                    arrivals.push(arrival);
                    items.push(item);
                }
            }
            self.ready.push_back(StreamedBin {
                arrivals,
                items,
                load: bin.load().to_vec(),
            });
        }
        // The items of open bins go back, still in arrival order.
        self.buffer.extend(slots.into_iter().flatten());
    }

    fn pack_buffer(&self) -> Packing<I::Size> {
        let dims = self.capacity.len();
        // As validation with `Keep::CheckOnly`: one-dimensional decreasing
        // orders read the sizes off the items, so only vectors are copied.
        let mut sizes = Vec::new();
        if dims > 1 {
            sizes.reserve(self.buffer.len() * dims);
            for (_, item) in &self.buffer {
                sizes.extend((0..dims).map(|d| item.size(d)));
            }
        }
        let input = Input {
            dims,
            capacity: self.capacity.clone(),
            n: self.buffer.len(),
            sizes,
        };
        let items: Vec<&I> = self.buffer.iter().map(|(_, item)| item).collect();
        match self.heuristic {
            Heuristic::FirstFitDecreasing => ffd_validated(&items, &input),
            Heuristic::BestFitDecreasing => bfd_validated(&items, &input),
        }
    }
}

impl<I: Item> fmt::Debug for StreamingPacker<I> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamingPacker")
            .field("capacity", &self.capacity)
            .field("buffer_limit", &self.limit)
            .field("heuristic", &self.heuristic)
            .field("buffered", &self.buffer.len())
            .field("ready", &self.ready.len())
            .finish()
    }
}

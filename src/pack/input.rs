//! What every packing algorithm shares: the validated [`Input`], the checks
//! of a capacity and of items, and the assembly of a [`Packing`] from where
//! each item went.

use alloc::vec::Vec;

use crate::error::{Error, Locator, Oversize};
use crate::grouped::Grouped;
use crate::num::{Item, Size, SizeOps};

use super::{LowerBounds, Packing};

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
        return Err(Error::setting(
            "capacity dimensions",
            dims as u64,
            "at most 65536",
        ));
    }
    let mut cap = Vec::with_capacity(dims);
    for dim in 0..dims {
        let c = capacity.size(dim);
        if let Err(reason) = c.check() {
            return Err(Error::Invalid {
                at: Locator::Capacity { dim },
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
            return Err(Error::Invalid {
                at: Locator::Size { index, dim },
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

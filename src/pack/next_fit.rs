//! Next-fit: one open bin at a time, closed as soon as an item does not fit.

use alloc::vec::Vec;

use super::bounds::bounds_of;
use super::{assemble, validate, Keep, Packing};
use crate::error::Error;
use crate::num::{Item, SizeOps};

/// Next-fit (NF): keeps one bin open and puts each item, in input order, into
/// it when it fits, otherwise closes it and opens a new one.
///
/// Bins hold consecutive runs of the input, which keeps the data loader's
/// order within and across bins.
///
/// # Complexity
///
/// O(n) time for the packing (O(n log n) with the L2 bound of the result),
/// O(n) extra space.
///
/// # Guarantee
///
/// At most `2 OPT - 1` bins for one dimension (Johnson 1973); in several
/// dimensions the volume argument no longer holds and next-fit can use up to
/// `d` times as many bins as a fractional packing.
///
/// # Errors
///
/// See the [module docs](crate::pack#errors).
///
/// # Examples
///
/// ```
/// use microbatch::pack::next_fit;
///
/// let packing = next_fit(&[6u32, 5, 4, 3], 10)?;
/// let bins: Vec<&[usize]> = packing.bins().map(|b| b.items()).collect();
/// assert_eq!(bins, [&[0][..], &[1, 2], &[3]]);
/// # Ok::<(), microbatch::Error>(())
/// ```
///
/// # References
///
/// D. S. Johnson, *Near-optimal bin packing algorithms*, PhD thesis, MIT, 1973.
pub fn next_fit<I: Item>(items: &[I], capacity: I::Capacity) -> Result<Packing<I::Size>, Error> {
    let input = validate(items, &capacity, Keep::Sizes)?;
    let d = input.dims;
    let cap = &input.capacity;
    let mut loads: Vec<I::Size> = Vec::new();
    let mut bin_at = Vec::with_capacity(input.len());
    for i in 0..input.len() {
        let size = input.item(i);
        let bins = loads.len() / d;
        let fits_open = bins > 0
            && loads[(bins - 1) * d..]
                .iter()
                .zip(size)
                .zip(cap)
                .all(|((&l, &s), &c)| I::Size::fits(l, s, c));
        if !fits_open {
            loads.extend(core::iter::repeat(I::Size::zero()).take(d));
        }
        let bin = loads.len() / d - 1;
        for (l, &s) in loads[bin * d..].iter_mut().zip(size) {
            *l = l.add(s);
        }
        bin_at.push(bin);
    }
    let bounds = bounds_of(&input, None);
    Ok(assemble(&input, None, &bin_at, loads, bounds))
}

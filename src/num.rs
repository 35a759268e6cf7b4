//! The numeric traits behind every size and weight in the crate.
//!
//! [`Size`] is implemented for the unsigned integers and for
//! [`NotNan<f32>`](ordered_float::NotNan) / [`NotNan<f64>`](ordered_float::NotNan);
//! [`Total`] is the wide accumulator its sums are kept in, so that no sum of
//! sizes can overflow: `u128` for integers (a sum of up to 2^64 values of
//! 64 bits fits), `f64` for floats.
//!
//! [`Item`] describes one item to pack or partition: a scalar [`Size`] is a
//! one-dimensional item, `[T; N]` and `Vec<T>` are vectors of sizes (tokens,
//! image tiles, ...), and a pair `(id, item)` carries an id that breaks ties
//! between equal items, so that results do not depend on input order.

// `!(x > 0.0)` is deliberate: unlike `x <= 0.0` it is also true for NaN.
#![allow(clippy::neg_cmp_op_on_partial_ord)]

use alloc::vec::Vec;
use core::cmp::Ordering;
use core::fmt::Debug;

use ordered_float::NotNan;

use crate::error::{InvalidReason, Scalar};

/// The most dimensions a capacity or an item may have: packers and
/// partitioners keep per-dimension state, so a count claimed by an [`Item`]
/// implementation (say `usize::MAX`) must not drive their memory or time.
pub(crate) const MAX_DIMS: usize = 1 << 16;

/// `x` as a `u64` in [`f64::total_cmp`]'s order (negative values below
/// positive ones, each in order): the sign bit set for a positive value,
/// every bit flipped for a negative one. [`from_order_bits`] reads it back,
/// bit for bit.
#[inline]
pub(crate) fn order_bits(x: f64) -> u64 {
    let bits = x.to_bits();
    if bits >> 63 == 1 {
        !bits
    } else {
        bits | 1 << 63
    }
}

/// The `f64` of an [`order_bits`] key, bit for bit.
#[inline]
pub(crate) fn from_order_bits(key: u64) -> f64 {
    f64::from_bits(if key >> 63 == 1 {
        key & !(1 << 63)
    } else {
        !key
    })
}

/// splitmix64 of `x`: a bijection of `u64` whose outputs look random, for
/// priorities that must not tie and for the planner's seeded choices
/// (never a global generator: the same input, the same output).
#[inline]
pub(crate) fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// `|x|` without `f64::abs`, which is not in `core` on the crate's MSRV
/// (1.81).
#[inline]
pub(crate) fn abs(x: f64) -> f64 {
    if x < 0.0 {
        -x
    } else {
        x
    }
}

/// The helpers behind [`Size`] and [`Total`], crate-internal.
///
/// The traits are nominally `pub` so that the public [`Size`] and [`Total`]
/// can name them as supertraits (a `pub(crate)` supertrait trips the
/// `private_bounds` lint), but they live in this private module: no user
/// can name, import or implement them, which also seals [`Size`] and
/// [`Total`]. The crate's algorithms import them with
/// `use crate::num::{SizeOps, TotalOps};`.
pub(crate) mod ops {
    use core::cmp::Ordering;

    use crate::error::{InvalidReason, Scalar};

    /// The arithmetic every algorithm needs on a [`Size`](super::Size).
    pub trait SizeOps: Copy + Ord + 'static {
        /// The additive identity.
        fn zero() -> Self;

        /// Whether an item of size `size` fits in a bin of capacity
        /// `capacity` already holding `load`, that is `load + size <=
        /// capacity`.
        ///
        /// Requires `load <= capacity`. Integers evaluate `size <= capacity -
        /// load` (no overflow); floats evaluate `load + size <= capacity`
        /// exactly as [`SizeOps::add`] will compute the new load, so a bin
        /// never ends above its capacity by rounding.
        fn fits(load: Self, size: Self, capacity: Self) -> bool;

        /// `self + rhs`. Only called where [`SizeOps::fits`] guarantees the
        /// result is at most a capacity, so it cannot overflow.
        fn add(self, rhs: Self) -> Self;

        /// `self - rhs`, saturating at zero.
        fn saturating_sub(self, rhs: Self) -> Self;

        /// Widens to the accumulator type.
        fn widen(self) -> <Self as super::Size>::Total
        where
            Self: super::Size;

        /// Converts to `f64` (rounding large integers), for ratios and reports.
        fn to_f64(self) -> f64;

        /// The value as an error payload.
        fn to_scalar(self) -> Scalar;

        /// Checks a user-supplied value: floats must be finite and
        /// non-negative. Integers are always valid.
        fn check(self) -> Result<(), InvalidReason>;

        /// The value as a small array index, for algorithms that bucket by
        /// value (counting sort, value-indexed best fit). `None` for floats
        /// and for integers that do not fit in `usize`.
        fn to_index(self) -> Option<usize>;

        /// The smallest number of bins of capacity `capacity` whose total
        /// capacity is at least `total`: `ceil(total / capacity)`, or `0` for
        /// a zero capacity.
        ///
        /// For floats the quotient is shrunk by a relative `4 * n *
        /// f64::EPSILON` before rounding up, where `n` is `terms`, the number
        /// of sizes summed into `total`, so that rounding in the sum cannot
        /// push a lower bound one bin above the truth.
        fn bins_needed(total: <Self as super::Size>::Total, capacity: Self, terms: usize) -> u64
        where
            Self: super::Size;

        /// The relative rounding error of one [`SizeOps::add`]: `0` for
        /// integers, the unit roundoff of the type for floats (`2^-53` for
        /// `f64`, `2^-24` for `f32`, whose loads are summed in `f32`).
        ///
        /// A load summed from `m` sizes, each addition rounding to nearest,
        /// is at most `m * ROUNDING * load` below the exact sum of its
        /// sizes; lower bounds use it to stay valid for float loads.
        const ROUNDING: f64;

        /// The largest load `l` with [`SizeOps::fits`]`(l, size, capacity)`,
        /// or `None` when `size` fits no bin (`size > capacity`).
        ///
        /// Integers: `capacity - size`. Floats: `capacity - size` when the
        /// rounded sum agrees, else found by a binary search over the float
        /// values in `[0, capacity]` (at most 64 steps), so that a search by
        /// load finds exactly the bins `fits` accepts.
        fn max_load(size: Self, capacity: Self) -> Option<Self>;
    }

    /// The arithmetic every algorithm needs on a [`Total`](super::Total).
    pub trait TotalOps: Copy + PartialOrd + 'static {
        /// The additive identity.
        const ZERO: Self;
        /// The smallest positive difference between two totals: one for
        /// integers, zero for floats (which have no such step).
        const UNIT: Self;
        /// `self + rhs`. For `u128` this saturates, which no sum of fewer
        /// than 2^64 sizes of at most 64 bits can reach.
        fn add(self, rhs: Self) -> Self;
        /// `self - rhs`, saturating at zero.
        fn saturating_sub(self, rhs: Self) -> Self;
        /// `self * count`, the total of `count` copies (saturating for
        /// `u128`).
        fn mul_count(self, count: u64) -> Self;
        /// `ceil(self / parts)` for integers, `self / parts` for floats;
        /// `self` for zero parts.
        fn div_ceil_parts(self, parts: usize) -> Self;
        /// A total order (IEEE-754 `totalOrder` for `f64`).
        fn total_cmp(&self, other: &Self) -> Ordering;
        /// Converts to `f64`.
        fn to_f64(self) -> f64;
        /// The value as an error payload (integers saturate at `u64::MAX`).
        fn to_scalar(self) -> Scalar;
        /// Whether the totals are integers (`u128`), whose arithmetic is
        /// exact.
        const INTEGER: bool;
        /// The value of an integer total; `None` for floats.
        fn as_u128(self) -> Option<u128>;
        /// An integer as an integer total; `None` for floats.
        fn from_u128(value: u128) -> Option<Self>;
    }
}

pub(crate) use self::ops::{SizeOps, TotalOps};

/// A non-negative size or weight: an unsigned integer or a `NotNan` float.
///
/// The trait is sealed: it is implemented for `u8`, `u16`, `u32`, `u64`,
/// `usize`, [`NotNan<f32>`] and [`NotNan<f64>`], and its arithmetic is
/// internal to the crate. Integer arithmetic is exact; no operation of the
/// crate can overflow, because loads are compared by subtracting instead of
/// adding for integers and sums are kept in [`Size::Total`].
///
/// Float sizes must be finite and non-negative; the algorithms check this and
/// return [`Error::Invalid`](crate::Error::Invalid) at a
/// [size](crate::Locator::Size) naming the item otherwise. `NotNan` keeps NaN
/// out by construction; [`not_nan`] converts a slice of raw `f64` with an error
/// that names the first NaN.
///
/// # Examples
///
/// ```
/// use microbatch::pack::first_fit_decreasing;
/// use microbatch::{NotNan, Size};
///
/// // Generic over the size type: (tokens, tiles) items of any `Size`.
/// fn bins<S: Size>(items: &[[S; 2]], capacity: [S; 2]) -> usize {
///     first_fit_decreasing(items, capacity).map_or(0, |p| p.len())
/// }
/// assert_eq!(bins(&[[6u32, 1], [6, 1], [4, 1]], [10, 4]), 2);
/// // No overflow even at the edge of the type.
/// assert_eq!(bins(&[[u64::MAX - 1, 0], [1, 0]], [u64::MAX, 1]), 1);
/// let half = NotNan::new(0.5).unwrap();
/// let one = NotNan::new(1.0).unwrap();
/// assert_eq!(bins(&[[half, one], [half, one], [half, one]], [one, one]), 3);
/// ```
pub trait Size: SizeOps + Debug {
    /// The accumulator for sums of many sizes: `u128` for integers, `f64`
    /// for floats.
    type Total: Total;
}

/// The accumulator of a [`Size`]: `u128` for integers, `f64` for floats.
///
/// Sealed like [`Size`]: loads and lower bounds of the results are totals,
/// so that no sum of sizes can overflow.
///
/// # Examples
///
/// ```
/// use microbatch::partition::lpt;
/// use microbatch::Total;
///
/// fn largest<T: Total>(totals: impl Iterator<Item = T>) -> Option<T> {
///     totals.reduce(|a, b| if b > a { b } else { a })
/// }
/// // Parts of u64::MAX and more: their sums are u128, so nothing overflows.
/// let partition = lpt(&[u64::MAX, u64::MAX, 1], 2)?;
/// let sums = (0..partition.len()).map(|i| partition.sum(i)[0]);
/// assert_eq!(largest(sums), Some(u128::from(u64::MAX) + 1));
/// # Ok::<(), microbatch::Error>(())
/// ```
pub trait Total: TotalOps + Debug {}

impl Total for u128 {}
impl TotalOps for u128 {
    const ZERO: Self = 0;
    const UNIT: Self = 1;
    const INTEGER: bool = true;
    #[inline]
    fn add(self, rhs: Self) -> Self {
        self.saturating_add(rhs)
    }
    #[inline]
    fn saturating_sub(self, rhs: Self) -> Self {
        u128::saturating_sub(self, rhs)
    }
    #[inline]
    fn mul_count(self, count: u64) -> Self {
        self.saturating_mul(u128::from(count))
    }
    #[inline]
    fn total_cmp(&self, other: &Self) -> Ordering {
        self.cmp(other)
    }
    #[inline]
    fn to_f64(self) -> f64 {
        self as f64
    }
    #[inline]
    fn div_ceil_parts(self, parts: usize) -> Self {
        if parts == 0 {
            self
        } else {
            self.div_ceil(parts as u128)
        }
    }
    #[inline]
    fn to_scalar(self) -> Scalar {
        Scalar::Int(u64::try_from(self).unwrap_or(u64::MAX))
    }
    #[inline]
    fn as_u128(self) -> Option<u128> {
        Some(self)
    }
    #[inline]
    fn from_u128(value: u128) -> Option<Self> {
        Some(value)
    }
}

impl Total for f64 {}
impl TotalOps for f64 {
    const ZERO: Self = 0.0;
    const UNIT: Self = 0.0;
    const INTEGER: bool = false;
    #[inline]
    fn add(self, rhs: Self) -> Self {
        self + rhs
    }
    #[inline]
    fn saturating_sub(self, rhs: Self) -> Self {
        let d = self - rhs;
        // NaN-safe: `!(d > 0.0)` also maps a NaN difference (inf - inf) to 0.
        if !(d > 0.0) {
            0.0
        } else {
            d
        }
    }
    #[inline]
    fn mul_count(self, count: u64) -> Self {
        self * count as f64
    }
    #[inline]
    fn total_cmp(&self, other: &Self) -> Ordering {
        f64::total_cmp(self, other)
    }
    #[inline]
    fn to_f64(self) -> f64 {
        self
    }
    #[inline]
    fn div_ceil_parts(self, parts: usize) -> Self {
        if parts == 0 {
            self
        } else {
            self / parts as f64
        }
    }
    #[inline]
    fn to_scalar(self) -> Scalar {
        Scalar::Float(self)
    }
    #[inline]
    fn as_u128(self) -> Option<u128> {
        None
    }
    #[inline]
    fn from_u128(_value: u128) -> Option<Self> {
        None
    }
}

macro_rules! impl_size_uint {
    ($($t:ty),*) => {$(
        impl Size for $t {
            type Total = u128;
        }
        impl SizeOps for $t {
            #[inline]
            fn zero() -> Self {
                0
            }
            #[inline]
            fn fits(load: Self, size: Self, capacity: Self) -> bool {
                // `load <= capacity` is a precondition, so this cannot wrap.
                size <= capacity - load
            }
            #[inline]
            fn add(self, rhs: Self) -> Self {
                self.saturating_add(rhs)
            }
            #[inline]
            fn saturating_sub(self, rhs: Self) -> Self {
                <$t>::saturating_sub(self, rhs)
            }
            #[inline]
            fn widen(self) -> u128 {
                self as u128
            }
            #[inline]
            fn to_f64(self) -> f64 {
                self as f64
            }
            #[inline]
            fn to_scalar(self) -> Scalar {
                Scalar::Int(self as u64)
            }
            #[inline]
            fn check(self) -> Result<(), InvalidReason> {
                Ok(())
            }
            #[inline]
            fn to_index(self) -> Option<usize> {
                usize::try_from(self).ok()
            }
            const ROUNDING: f64 = 0.0;
            #[inline]
            fn max_load(size: Self, capacity: Self) -> Option<Self> {
                capacity.checked_sub(size)
            }
            #[inline]
            fn bins_needed(total: u128, capacity: Self, _terms: usize) -> u64 {
                if capacity == 0 {
                    return 0;
                }
                let bins = total.div_ceil(capacity as u128);
                u64::try_from(bins).unwrap_or(u64::MAX)
            }
        }
    )*};
}
impl_size_uint!(u8, u16, u32, u64, usize);

macro_rules! impl_size_float {
    ($($t:ty),*) => {$(
        impl Size for NotNan<$t> {
            type Total = f64;
        }
        impl SizeOps for NotNan<$t> {
            #[inline]
            fn zero() -> Self {
                NotNan::default()
            }
            #[inline]
            fn fits(load: Self, size: Self, capacity: Self) -> bool {
                load.into_inner() + size.into_inner() <= capacity.into_inner()
            }
            #[inline]
            fn add(self, rhs: Self) -> Self {
                let sum = self.into_inner() + rhs.into_inner();
                // A sum of two non-NaN values is NaN only for inf + -inf, which
                // validated (finite, non-negative) sizes never produce.
                NotNan::new(sum).unwrap_or(self)
            }
            #[inline]
            fn saturating_sub(self, rhs: Self) -> Self {
                let d = self.into_inner() - rhs.into_inner();
                // NaN-safe: `!(d > 0.0)` also catches a NaN from inf - inf.
                if !(d > 0.0) { Self::zero() } else { NotNan::new(d).unwrap_or(Self::zero()) }
            }
            #[inline]
            fn widen(self) -> f64 {
                // `+ 0.0` turns -0.0 into 0.0, so that sums and caps
                // compare by value under `total_cmp`.
                f64::from(self.into_inner()) + 0.0
            }
            #[inline]
            fn to_f64(self) -> f64 {
                f64::from(self.into_inner())
            }
            #[inline]
            fn to_scalar(self) -> Scalar {
                Scalar::Float(f64::from(self.into_inner()))
            }
            #[inline]
            fn check(self) -> Result<(), InvalidReason> {
                let x = self.into_inner();
                if !x.is_finite() {
                    Err(InvalidReason::Infinite)
                } else if x < 0.0 {
                    Err(InvalidReason::Negative)
                } else {
                    Ok(())
                }
            }
            #[inline]
            fn to_index(self) -> Option<usize> {
                None
            }
            fn bins_needed(total: f64, capacity: Self, terms: usize) -> u64 {
                let c = f64::from(capacity.into_inner());
                if !(c > 0.0) {
                    return 0;
                }
                // `total` is a sum of `terms` sizes, each at most `c` (else
                // no bin holds it): `terms` bins always suffice, which also
                // caps an infinite sum (sizes near `f64::MAX`).
                let q = (total / c).min(terms as f64);
                // The sum may have rounded up by `terms` ulps, and the loads
                // of a packing may each hold up to `terms * ROUNDING` of a
                // bin more than their capacity (see `ROUNDING`).
                let n = terms as f64 + 2.0;
                let q = q - q * (4.0 * n * f64::EPSILON) - n * <Self as SizeOps>::ROUNDING;
                ceil_lowered(q)
            }
            const ROUNDING: f64 = <$t>::EPSILON as f64 / 2.0;
            fn max_load(size: Self, capacity: Self) -> Option<Self> {
                let (s, c) = (size.into_inner(), capacity.into_inner());
                let fits = |l: $t| l + s <= c;
                if !fits(0.0) {
                    return None;
                }
                if fits(c) {
                    return Some(capacity);
                }
                // Non-negative floats are ordered as their bits.
                let up = |l: $t| <$t>::from_bits(l.to_bits() + 1);
                let t = c - s;
                let (mut lo, mut hi) = if t >= 0.0 && t < c && fits(t) {
                    if !fits(up(t)) {
                        return NotNan::new(t).ok();
                    }
                    (t.to_bits(), c.to_bits())
                } else {
                    (0, c.to_bits())
                };
                // `fits(lo)` and not `fits(hi)`.
                while hi - lo > 1 {
                    let mid = lo + (hi - lo) / 2;
                    if fits(<$t>::from_bits(mid)) {
                        lo = mid;
                    } else {
                        hi = mid;
                    }
                }
                NotNan::new(<$t>::from_bits(lo)).ok()
            }
        }
    )*};
}

impl_size_float!(f32, f64);

/// `ceil(q)` for a `q` already lowered to be safe, lowered once more by a
/// relative `2^-50` for the rounding of its own computation: `0` for a
/// non-positive or NaN `q`, saturating at `u64::MAX`.
pub(crate) fn ceil_lowered(q: f64) -> u64 {
    let q = q - abs(q) * (4.0 * f64::EPSILON);
    if !(q > 0.0) {
        return 0;
    }
    let whole = q as u64; // saturating float-to-int cast
    if (whole as f64) < q {
        whole.saturating_add(1)
    } else {
        whole
    }
}

/// One item to pack or partition: a vector of [`Size`]s and an optional id.
///
/// - a scalar [`Size`] (`u32`, `NotNan<f64>`, ...) is a one-dimensional item
///   without id;
/// - `[T; N]`, `Vec<T>` and `[T]` are items with one size per dimension
///   (say total tokens, image tiles and images);
/// - `(id, item)` adds an id to any item. The decreasing algorithms break
///   ties between equal sizes by id before input index, so permuting the
///   input gives the same bins *by id*. Ids should be unique; equal ids fall
///   back to input order.
///
/// Implement it for your own sample type to pack samples directly.
///
/// # Examples
///
/// ```
/// use microbatch::Item;
///
/// struct Sample { id: u64, tokens: u32, tiles: u32 }
///
/// impl Item for Sample {
///     type Size = u32;
///     type Id = u64;
///     type Capacity = [u32; 2];
///     fn dims(&self) -> usize { 2 }
///     fn size(&self, dim: usize) -> u32 { if dim == 0 { self.tokens } else { self.tiles } }
///     fn id(&self) -> &u64 { &self.id }
/// }
///
/// let s = Sample { id: 7, tokens: 812, tiles: 3 };
/// assert_eq!((s.dims(), s.size(0), s.size(1), *s.id()), (2, 812, 3, 7));
/// assert_eq!([812u32, 3].size(1), 3);
/// assert_eq!((7u64, 812u32).id(), &7);
/// ```
pub trait Item {
    /// The numeric type of each size.
    type Size: Size;
    /// The id type; `()` for items without id.
    type Id: Ord;
    /// The type of a capacity for such items: the item type itself for
    /// scalars, arrays and vectors; the inner item's capacity for `(id, item)`
    /// and references. Tying it to the item lets a literal capacity infer its
    /// type (`first_fit_decreasing(&lengths, 4096)`).
    type Capacity: Item<Size = Self::Size>;
    /// The number of dimensions (at least one for a valid item).
    fn dims(&self) -> usize;
    /// The size in dimension `dim`, for `dim < self.dims()`. Implementations
    /// may panic for `dim >= self.dims()`; the crate never asks for one.
    fn size(&self, dim: usize) -> Self::Size;
    /// The id that breaks ties between equal items.
    fn id(&self) -> &Self::Id;
}

macro_rules! impl_item_scalar {
    ($($t:ty),*) => {$(
        impl Item for $t {
            type Size = $t;
            type Id = ();
            type Capacity = $t;
            #[inline]
            fn dims(&self) -> usize {
                1
            }
            #[inline]
            fn size(&self, _dim: usize) -> $t {
                *self
            }
            #[inline]
            fn id(&self) -> &() {
                &()
            }
        }
    )*};
}
impl_item_scalar!(u8, u16, u32, u64, usize, NotNan<f32>, NotNan<f64>);

impl<T: Size, const N: usize> Item for [T; N] {
    type Size = T;
    type Id = ();
    type Capacity = [T; N];
    #[inline]
    fn dims(&self) -> usize {
        N
    }
    #[inline]
    fn size(&self, dim: usize) -> T {
        self[dim]
    }
    #[inline]
    fn id(&self) -> &() {
        &()
    }
}

impl<T: Size> Item for [T] {
    type Size = T;
    type Id = ();
    type Capacity = Vec<T>;
    #[inline]
    fn dims(&self) -> usize {
        self.len()
    }
    #[inline]
    fn size(&self, dim: usize) -> T {
        self[dim]
    }
    #[inline]
    fn id(&self) -> &() {
        &()
    }
}

impl<T: Size> Item for Vec<T> {
    type Size = T;
    type Id = ();
    type Capacity = Vec<T>;
    #[inline]
    fn dims(&self) -> usize {
        self.len()
    }
    #[inline]
    fn size(&self, dim: usize) -> T {
        self[dim]
    }
    #[inline]
    fn id(&self) -> &() {
        &()
    }
}

impl<I: Item + ?Sized> Item for &I {
    type Size = I::Size;
    type Id = I::Id;
    type Capacity = I::Capacity;
    #[inline]
    fn dims(&self) -> usize {
        (**self).dims()
    }
    #[inline]
    fn size(&self, dim: usize) -> I::Size {
        (**self).size(dim)
    }
    #[inline]
    fn id(&self) -> &I::Id {
        (**self).id()
    }
}

impl<K: Ord, I: Item> Item for (K, I) {
    type Size = I::Size;
    type Id = K;
    type Capacity = I::Capacity;
    #[inline]
    fn dims(&self) -> usize {
        self.1.dims()
    }
    #[inline]
    fn size(&self, dim: usize) -> I::Size {
        self.1.size(dim)
    }
    #[inline]
    fn id(&self) -> &K {
        &self.0
    }
}

/// Converts raw `f64` values to [`NotNan`], naming the first NaN.
///
/// Negative and infinite values pass this conversion; the algorithms reject
/// them with an error that names the item.
///
/// # Errors
///
/// [`Error::Invalid`](crate::Error::Invalid) at a [size](crate::Locator::Size)
/// with the index of the first NaN.
///
/// # Examples
///
/// ```
/// let sizes = microbatch::not_nan(&[0.5, 0.25]).unwrap();
/// assert_eq!(sizes[1].into_inner(), 0.25);
///
/// let err = microbatch::not_nan(&[0.5, f64::NAN]).unwrap_err();
/// assert_eq!(
///     err.to_string(),
///     "item 1 has size NaN in dimension 0: NaN is not a size; sizes must be finite and non-negative"
/// );
/// ```
pub fn not_nan(values: &[f64]) -> Result<Vec<NotNan<f64>>, crate::Error> {
    values
        .iter()
        .enumerate()
        .map(|(index, &v)| {
            NotNan::new(v).map_err(|_| crate::Error::Invalid {
                at: crate::error::Locator::Size { index, dim: 0 },
                value: Scalar::Float(v),
                reason: InvalidReason::NaN,
            })
        })
        .collect()
}

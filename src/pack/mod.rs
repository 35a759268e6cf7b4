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
//! The repository's `BENCHMARKS.md` times the grouped paths on (tokens,
//! tiles) samples against sorting the same keys.
//!
//! # Errors
//!
//! Every function validates the whole input before packing and returns an
//! [`Error`] naming what is wrong: a capacity with no dimension
//! ([`Error::NoDimensions`]) or more than 65536 ([`Error::Invalid`] at a
//! [setting](crate::Locator::Setting) for `capacity dimensions`), a zero
//! dimension ([`Error::ZeroCapacity`]), a negative or infinite float capacity
//! ([`Error::Invalid`] at a [capacity](crate::Locator::Capacity)), an item with
//! a different number of dimensions ([`Error::DimensionMismatch`]), a float
//! size that is negative or infinite ([`Error::Invalid`] at a
//! [size](crate::Locator::Size)), and every item larger than the capacity
//! ([`Error::Oversize`]). Zero-size items are legal. No input makes these
//! functions panic.
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
mod input;
mod next_fit;
mod order;
mod packing;
mod streaming;
mod tree;

pub use self::best_fit::{best_fit, best_fit_decreasing};
pub use self::bounds::lower_bounds;
pub use self::first_fit::{first_fit, first_fit_decreasing};
pub(crate) use self::input::{
    assemble, assemble_runs, check_capacity, check_item, gather, validate, Input, Keep,
};
pub use self::next_fit::next_fit;
pub use self::packing::{Bin, LowerBounds, Packing};
pub use self::streaming::{Heuristic, Rejected, StreamedBin, StreamingPacker};

#[cfg(doc)]
use crate::error::Error;
#[cfg(doc)]
use crate::num::Item;

//! Multiway number partitioning: split weighted items into `k` parts so that
//! the heaviest part is as light as possible.
//!
//! Spreading the samples of one optimizer step over `k` data-parallel ranks
//! is this problem: the step waits for the slowest rank, so the largest part
//! sets the step time. The module offers
//!
//! - [`lpt`]: longest processing time first (Graham 1969), greedy to the
//!   least-loaded part, O(n log n + n log k) (O(n + largest) for integer
//!   sizes below `max(2^16, n)`), within `4/3 - 1/(3k)` of the optimum;
//! - [`karmarkar_karp`]: the largest differencing method for `k` parts
//!   (Karmarkar & Karp 1982; Michiels et al. 2007), O(n log n + n k log k),
//!   usually much closer to the optimum than LPT when there are many items
//!   per part;
//! - [`refine`]: moves and swaps out of the heaviest part, never worse than
//!   its input;
//! - [`exact`]: branch and bound with a node budget, returning the best
//!   partition found and whether it is proven optimal;
//! - [`lower_bound`]: `max(ceil(sum / k), largest item)` and better where
//!   cheap;
//! - [`Partitioner`]: all of them with options and hard constraints: equal
//!   item counts per part, a per-part cap, empty parts allowed or not, the
//!   objective (largest part or spread) and the objective over several
//!   dimensions ([`Dims`]).
//!
//! Every routine takes a slice of [`Item`]s (integers, `NotNan` floats,
//! arrays or vectors of them for several dimensions, and `(id, item)` pairs)
//! and returns a [`Partition`]: the parts as lists of input indices, the part
//! sums per dimension as [`Total`]s (`u128` for integers, so they never
//! overflow), the objective value and a lower bound on it.
//!
//! # Which algorithm supports what
//!
//! | | equal count | cap | [`Objective::Spread`] | [`Dims::PerDim`] |
//! |---|---|---|---|---|
//! | [`Algorithm::Lpt`] | yes (count-limited greedy) | checked, then repaired | via refinement | yes (greedy on the objective, O(n k d)) |
//! | [`Algorithm::KarmarkarKarp`] | yes (differencing of `k`-item groups) | checked, then repaired | via refinement | on the combined weight, then refinement |
//! | refinement | yes (swaps, count-neutral moves) | yes (never breaks it) | yes | yes |
//! | [`Algorithm::Exact`] | yes | yes | yes | yes |
//!
//! "Checked, then repaired": the heuristics do not look at the cap; when
//! their result (after refinement) exceeds it, the [`Partitioner`] searches
//! for a partition within the cap with the exact solver under the node
//! budget and fails with [`Error::CapExceeded`] (saying whether the cap is
//! proven infeasible, the best part found and a part count that works) when
//! none is found. A cap is never silently exceeded.
//!
//! # KK against LPT
//!
//! On random instances with at least 8 items per part, the Karmarkar-Karp
//! largest part was at most LPT's in 99.7% of 2000 instances (integer
//! weights uniform in 1..=1000, k in 2..=16, n = k * (8..=32); the test
//! `kk_vs_lpt_majority` in `tests/partition_props.rs` measures it) and
//! strictly smaller in 98.7%.
//!
//! # Examples
//!
//! ```
//! use microbatch::partition::{karmarkar_karp, lpt};
//!
//! let tokens = [8u32, 7, 6, 5, 4];
//! let greedy = lpt(&tokens, 2)?;
//! assert_eq!(greedy.max_sum(0), 17); // {8, 5, 4} and {7, 6}
//! let kk = karmarkar_karp(&tokens, 2)?;
//! assert_eq!(kk.max_sum(0), 16); // {8, 6} and {7, 5, 4}
//! assert_eq!(kk.lower_bound(), 15);
//! # Ok::<(), microbatch::Error>(())
//! ```
//!
//! With constraints: four ranks, each the same number of samples, no rank
//! above 5000 tokens:
//!
//! ```
//! use microbatch::partition::Partitioner;
//!
//! let tokens = [1800u32, 1700, 1500, 1400, 1200, 1100, 900, 800, 700, 600, 500, 400];
//! let plan = Partitioner::new(4).equal_count(true).cap(5000).partition(&tokens)?;
//! assert!(plan.parts().all(|p| p.len() == 3));
//! assert!(plan.max_sum(0) <= 5000);
//! # Ok::<(), microbatch::Error>(())
//! ```

use alloc::vec;
use alloc::vec::Vec;
use core::cmp::Ordering;
use core::fmt;

use crate::error::Error;
use crate::grouped::Grouped;
use crate::num::{Item, Size, Total, TotalOps};

mod bounds;
mod bucket_queue;
mod exact;
mod instance;
mod karmarkar_karp;
mod load_heap;
mod load_queue;
mod lpt;
mod refine;
mod vector_lpt;

pub use self::bounds::lower_bound;
pub use self::exact::exact;
pub use self::karmarkar_karp::karmarkar_karp;
pub use self::lpt::lpt;
pub(crate) use self::refine::balancing_window;
pub use self::refine::refine;
pub(crate) use self::vector_lpt::{vector_lpt, VectorItem};

use self::instance::{Config, Instance, Load};

/// The sum type of an item's sizes: `u128` for integers, `f64` for floats.
///
/// # Examples
///
/// ```
/// use microbatch::partition::{lower_bound, TotalOf};
///
/// // Sums of `u32` sizes are `u128`: they never overflow.
/// let total: TotalOf<u32> = lower_bound(&[u32::MAX, u32::MAX], 1)?;
/// assert_eq!(total, 2 * u128::from(u32::MAX));
/// # Ok::<(), microbatch::Error>(())
/// ```
pub type TotalOf<I> = <<I as Item>::Size as Size>::Total;

/// What a partition minimizes.
///
/// # Examples
///
/// ```
/// use microbatch::partition::{Objective, Partitioner};
///
/// let p = Partitioner::new(2).objective(Objective::Spread).partition(&[5u32, 4, 3, 3, 1])?;
/// assert_eq!(p.objective(), 0); // {5, 3} and {4, 3, 1}
/// # Ok::<(), microbatch::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub enum Objective {
    /// The largest part sum (the makespan): what a barrier waits for.
    #[default]
    MaxPart,
    /// The spread, largest part sum minus smallest.
    Spread,
}

/// How the objective treats items with several dimensions.
///
/// # Examples
///
/// ```
/// use microbatch::partition::{Dims, Partitioner};
///
/// // (ViT cost, LLM cost) per sample.
/// let items = [[6u32, 0], [5, 0], [0, 6], [0, 5]];
/// // Balanced totals, but one rank has all the ViT work: 11 + 11 per phase.
/// let combined = Partitioner::new(2).partition(&items)?;
/// assert_eq!(combined.objective(), 11);
/// assert_eq!((combined.max_sum(0), combined.max_sum(1)), (11, 11));
/// // Each phase balanced: 6 + 6.
/// let per_dim = Partitioner::new(2).dims(Dims::PerDim).partition(&items)?;
/// assert_eq!(per_dim.objective(), 12);
/// assert_eq!((per_dim.max_sum(0), per_dim.max_sum(1)), (6, 6));
/// # Ok::<(), microbatch::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub enum Dims {
    /// The objective of the combined weight, the sum of an item's sizes over
    /// its dimensions: the largest part of `sum_d size_d` (one barrier for
    /// the whole work, as DDP with one all-reduce per step).
    #[default]
    Combined,
    /// The sum over dimensions of each dimension's objective: for
    /// [`Objective::MaxPart`], the sum of each dimension's largest part
    /// (phases that each wait at their own barrier, as a ViT and an LLM under
    /// FSDP).
    PerDim,
}

/// The construction algorithm of a [`Partitioner`].
///
/// # Examples
///
/// ```
/// use microbatch::partition::{Algorithm, Partitioner};
///
/// let p = Partitioner::new(2).algorithm(Algorithm::Exact).partition(&[8u32, 7, 6, 5, 4])?;
/// assert_eq!(p.objective(), 15);
/// assert!(p.proven_optimal());
/// # Ok::<(), microbatch::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub enum Algorithm {
    /// Longest processing time first: see [`lpt`].
    #[default]
    Lpt,
    /// The largest differencing method: see [`karmarkar_karp`].
    KarmarkarKarp,
    /// Branch and bound from the refined LPT result, within the node
    /// budget: see [`exact`].
    Exact,
}

/// A partition of items into parts, with its part sums, objective value and
/// a lower bound on the optimum.
///
/// Created by [`lpt`], [`karmarkar_karp`], [`refine`], [`exact`] and
/// [`Partitioner`]. Each part lists input indices, heaviest item first
/// (ties by id, then index).
///
/// # Examples
///
/// ```
/// use microbatch::partition::lpt;
///
/// let p = lpt(&[5u32, 1, 4, 2, 3], 2)?;
/// assert_eq!(p.len(), 2);
/// assert_eq!(p.part(0), &[0, 3]); // 5 + 2
/// assert_eq!(p.part(1), &[2, 4, 1]); // 4 + 3 + 1
/// assert_eq!(p.sum(0), &[7]);
/// assert_eq!(p.assignment(), vec![0, 1, 1, 0, 1]);
/// assert_eq!(p.objective(), 8);
/// assert_eq!(p.lower_bound(), 8);
/// assert!(p.proven_optimal()); // it meets the lower bound
/// # Ok::<(), microbatch::Error>(())
/// ```
#[derive(Clone, PartialEq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize),
    serde(
        try_from = "wire::Partition<T>",
        bound = "T: Total + serde::Deserialize<'de>"
    )
)]
pub struct Partition<T> {
    /// The input indices of each part.
    parts: Grouped<usize>,
    dims: usize,
    sums: Vec<T>,
    objective: T,
    lower_bound: T,
    proven_optimal: bool,
}

impl<T: Total> Partition<T> {
    /// The number of parts.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::partition::lpt;
    ///
    /// assert_eq!(lpt(&[5u32, 1, 4, 2, 3], 3)?.len(), 3);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn len(&self) -> usize {
        self.parts.len()
    }

    /// Whether there is no part (never the case for a result of this crate).
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::partition::Partitioner;
    ///
    /// // Even without items, a result has its parts.
    /// let p = Partitioner::new(2).allow_empty(true).partition(&[] as &[u32])?;
    /// assert!(!p.is_empty());
    /// assert_eq!(p.len(), 2);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The input indices of part `i`, heaviest item first.
    ///
    /// # Panics
    ///
    /// If `i >= self.len()`.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::partition::lpt;
    ///
    /// let p = lpt(&[5u32, 1, 4, 2, 3], 2)?;
    /// assert_eq!(p.part(1), &[2, 4, 1]); // 4 + 3 + 1, heaviest first
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn part(&self, i: usize) -> &[usize] {
        match self.parts.get(i) {
            Some(part) => part,
            None => panic!("part {i} out of range: there are {} parts", self.len()),
        }
    }

    /// The parts in order.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::partition::lpt;
    ///
    /// let p = lpt(&[5u32, 1, 4, 2, 3], 2)?;
    /// let counts: Vec<usize> = p.parts().map(|part| part.len()).collect();
    /// assert_eq!(counts, [2, 3]);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    pub fn parts(&self) -> impl ExactSizeIterator<Item = &[usize]> + '_ {
        self.parts.iter()
    }

    /// The number of dimensions of the items.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::partition::lpt;
    ///
    /// assert_eq!(lpt(&[5u32, 4], 2)?.dims(), 1);
    /// assert_eq!(lpt(&[[5u32, 1], [4, 0]], 2)?.dims(), 2);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn dims(&self) -> usize {
        self.dims
    }

    /// The sums of part `i`, one per dimension.
    ///
    /// # Panics
    ///
    /// If `i >= self.len()`.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::partition::lpt;
    ///
    /// // Combined weights 6, 4, 5: the 4 joins the 5.
    /// let p = lpt(&[[5u32, 1], [4, 0], [3, 2]], 2)?;
    /// assert_eq!((p.sum(0), p.sum(1)), (&[5, 1][..], &[7, 2][..]));
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn sum(&self, i: usize) -> &[T] {
        &self.sums[i * self.dims..(i + 1) * self.dims]
    }

    /// The largest part sum in dimension `dim` (zero for no parts).
    ///
    /// # Panics
    ///
    /// If `dim >= self.dims()`.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::partition::lpt;
    ///
    /// let p = lpt(&[[5u32, 1], [4, 0], [3, 2]], 2)?; // sums (5, 1) and (7, 2)
    /// assert_eq!((p.max_sum(0), p.max_sum(1)), (7, 2));
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn max_sum(&self, dim: usize) -> T {
        assert!(dim < self.dims, "dimension {dim} out of range");
        (0..self.len()).fold(T::ZERO, |acc, p| {
            instance::max(acc, self.sums[p * self.dims + dim])
        })
    }

    /// The smallest part sum in dimension `dim` (zero for no parts).
    ///
    /// # Panics
    ///
    /// If `dim >= self.dims()`.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::partition::lpt;
    ///
    /// let p = lpt(&[[5u32, 1], [4, 0], [3, 2]], 2)?; // sums (5, 1) and (7, 2)
    /// assert_eq!((p.min_sum(0), p.min_sum(1)), (5, 1));
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn min_sum(&self, dim: usize) -> T {
        assert!(dim < self.dims, "dimension {dim} out of range");
        (0..self.len())
            .map(|p| self.sums[p * self.dims + dim])
            .reduce(instance::min)
            .unwrap_or(T::ZERO)
    }

    /// The objective value the partition was built for (by default the
    /// largest part sum; see [`Objective`] and [`Dims`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::partition::{lpt, Objective, Partitioner};
    ///
    /// let items = [5u32, 1, 4, 2, 3];
    /// let p = lpt(&items, 2)?;
    /// assert_eq!(p.objective(), p.max_sum(0)); // the makespan by default
    /// let spread = Partitioner::new(2).objective(Objective::Spread).partition(&items)?;
    /// assert_eq!(spread.objective(), spread.max_sum(0) - spread.min_sum(0));
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn objective(&self) -> T {
        self.objective
    }

    /// A lower bound on the objective of every partition of the same items
    /// under the same constraints (see [`lower_bound`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::partition::{lower_bound, lpt};
    ///
    /// // No partition beats the largest item.
    /// let items = [9u32, 1, 1, 1];
    /// let p = lpt(&items, 2)?;
    /// assert_eq!(p.lower_bound(), 9);
    /// assert_eq!(p.lower_bound(), lower_bound(&items, 2)?);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn lower_bound(&self) -> T {
        self.lower_bound
    }

    /// The objective over its lower bound (1.0 is perfect; the makespan
    /// ratio for [`Objective::MaxPart`]). `1.0` when both are zero.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::partition::lpt;
    ///
    /// // LPT: {3, 2, 2} and {3, 2}; the optimum is 6.
    /// let p = lpt(&[3u32, 3, 2, 2, 2], 2)?;
    /// assert_eq!((p.objective(), p.lower_bound()), (7, 6));
    /// assert_eq!(p.ratio(), 7.0 / 6.0);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn ratio(&self) -> f64 {
        let lb = self.lower_bound.to_f64();
        if lb > 0.0 {
            self.objective.to_f64() / lb
        } else if self.objective.to_f64() > 0.0 {
            f64::INFINITY
        } else {
            1.0
        }
    }

    /// Whether the partition is proven optimal: it meets the lower bound, or
    /// an exact search finished.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::partition::{lpt, Algorithm, Partitioner};
    ///
    /// let items = [3u32, 3, 2, 2, 2];
    /// assert!(!lpt(&items, 2)?.proven_optimal()); // 7 above the bound 6
    /// let p = Partitioner::new(2).algorithm(Algorithm::Exact).partition(&items)?;
    /// assert!(p.proven_optimal() && p.objective() == 6);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn proven_optimal(&self) -> bool {
        self.proven_optimal
    }

    /// The part of each item, by input index.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::partition::lpt;
    ///
    /// let p = lpt(&[5u32, 1, 4, 2, 3], 2)?;
    /// assert_eq!(p.assignment(), vec![0, 1, 1, 0, 1]);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn assignment(&self) -> Vec<usize> {
        self.parts.group_of()
    }

    /// The parts as lists of input indices.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::partition::lpt;
    ///
    /// let p = lpt(&[5u32, 1, 4, 2, 3], 2)?;
    /// assert_eq!(p.into_parts(), vec![vec![0, 3], vec![2, 4, 1]]);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn into_parts(self) -> Vec<Vec<usize>> {
        self.parts().map(<[usize]>::to_vec).collect()
    }

    /// A partition from its parts (flat, as in the fields), sums and
    /// bounds.
    pub(crate) fn from_flat(
        items: Vec<usize>,
        offsets: Vec<usize>,
        dims: usize,
        sums: Vec<T>,
        objective: T,
        lower_bound: T,
        proven_optimal: bool,
    ) -> Self {
        let parts = Grouped::from_trusted(items, offsets);
        debug_assert_eq!(sums.len(), parts.len() * dims);
        Partition {
            parts,
            dims,
            sums,
            objective,
            lower_bound,
            proven_optimal,
        }
    }
}

impl<T: Total> fmt::Debug for Partition<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        struct Parts<'a, T>(&'a Partition<T>);
        impl<T: Total> fmt::Debug for Parts<'_, T> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_list().entries(self.0.parts()).finish()
            }
        }
        f.debug_struct("Partition")
            .field("parts", &Parts(self))
            .field("dims", &self.dims)
            .field("sums", &self.sums)
            .field("objective", &self.objective)
            .field("lower_bound", &self.lower_bound)
            .field("proven_optimal", &self.proven_optimal)
            .finish()
    }
}

/// Multiway partitioning with options and hard constraints.
///
/// The builder holds the number of parts, the [`Algorithm`], whether to
/// [refine](Partitioner::refinement) its result (on by default), the
/// [`Objective`], the objective over several [`Dims`], and the constraints:
///
/// - [`equal_count`](Partitioner::equal_count): part item counts differ by
///   at most one (every rank runs the same number of micro-steps);
/// - [`cap`](Partitioner::cap): no part sum exceeds the cap in any dimension;
/// - [`allow_empty`](Partitioner::allow_empty): empty parts are allowed
///   (off by default: more parts than items is an error).
///
/// Every constraint is a hard guarantee: a result that breaks one is never
/// returned. The type parameter is the item [`Size`], fixed by the cap or by
/// the items.
///
/// # Complexity
///
/// The algorithm's, plus refinement (see [`refine`]: at most
/// `max(2^18, 2 (n + k)) d` candidate evaluations). With a cap: first a
/// bound check, O(n) (O(n log n) a dimension for several), that proves an
/// infeasible cap before any search (the sum over `k` parts, the largest
/// item, items that must share a part, equal counts); then, when the
/// heuristic misses the cap, a search within the node budget and within
/// `max(2^24, 16 (n + k) d) / (k d)` nodes of O(k d) each, so at most about
/// `max(2^24, 16 (n + k) d)` operations; on failure `O(log n)` heuristic
/// runs to find a part count that works. O(n d + k d) extra space, `k` being
/// at most `max(n, 65536)`. [`Algorithm::Exact`] takes up to the node
/// budget, O(k d) a node.
///
/// # Examples
///
/// ```
/// use microbatch::partition::{Algorithm, Partitioner};
///
/// let sizes = [10u64, 9, 8, 7, 6, 5, 4];
/// let p = Partitioner::new(3).algorithm(Algorithm::KarmarkarKarp).partition(&sizes)?;
/// assert_eq!(p.objective(), 17);
/// assert!(p.proven_optimal());
///
/// // A cap that cannot be met names a part count that works.
/// let err = Partitioner::new(2).cap(20).partition(&sizes).unwrap_err();
/// assert_eq!(
///     err.to_string(),
///     "no partition into 2 parts keeps every part within the cap 20 in dimension 0 \
///      (the best found has a part of 25); 3 parts would work"
/// );
/// # Ok::<(), microbatch::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Partitioner<S> {
    parts: usize,
    algorithm: Algorithm,
    refinement: bool,
    objective: Objective,
    dims: Dims,
    equal_count: bool,
    allow_empty: bool,
    cap: Option<Vec<S>>,
    node_budget: u64,
    max_rounds: Option<usize>,
}

/// The default node budget of exact search.
///
/// # Examples
///
/// ```
/// use microbatch::partition::{exact, DEFAULT_NODE_BUDGET};
///
/// let p = exact(&[8u32, 7, 6, 5, 4], 2, DEFAULT_NODE_BUDGET)?;
/// assert_eq!(p.objective(), 15);
/// assert!(p.proven_optimal());
/// # Ok::<(), microbatch::Error>(())
/// ```
pub const DEFAULT_NODE_BUDGET: u64 = 1_000_000;

impl<S: Size> Partitioner<S> {
    /// A partitioner into `parts` parts with the defaults: LPT, refined,
    /// [`Objective::MaxPart`], [`Dims::Combined`], no constraint, a node
    /// budget of [`DEFAULT_NODE_BUDGET`].
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::partition::Partitioner;
    ///
    /// let p = Partitioner::new(3).partition(&[5u32, 4, 3, 2, 1])?;
    /// assert_eq!((p.len(), p.objective()), (3, 5));
    /// assert!(Partitioner::new(0).partition(&[1u32]).is_err());
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn new(parts: usize) -> Self {
        Partitioner {
            parts,
            algorithm: Algorithm::default(),
            refinement: true,
            objective: Objective::default(),
            dims: Dims::default(),
            equal_count: false,
            allow_empty: false,
            cap: None,
            node_budget: DEFAULT_NODE_BUDGET,
            max_rounds: None,
        }
    }

    /// The construction algorithm.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::partition::{Algorithm, Partitioner};
    ///
    /// let items = [8u32, 7, 6, 5, 4];
    /// let lpt = Partitioner::new(2).refinement(false).partition(&items)?;
    /// let kk = Partitioner::new(2).refinement(false).algorithm(Algorithm::KarmarkarKarp).partition(&items)?;
    /// assert_eq!((lpt.objective(), kk.objective()), (17, 16));
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn algorithm(mut self, algorithm: Algorithm) -> Self {
        self.algorithm = algorithm;
        self
    }

    /// Whether to refine the constructed partition with moves and swaps
    /// (default `true`).
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::partition::Partitioner;
    ///
    /// let items = [8u32, 7, 6, 5, 4];
    /// let raw = Partitioner::new(2).refinement(false).partition(&items)?;
    /// let refined = Partitioner::new(2).partition(&items)?;
    /// assert_eq!((raw.objective(), refined.objective()), (17, 15));
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn refinement(mut self, on: bool) -> Self {
        self.refinement = on;
        self
    }

    /// The objective to minimize.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::partition::{Objective, Partitioner};
    ///
    /// let p = Partitioner::new(2).objective(Objective::Spread).partition(&[5u32, 4, 3, 3, 1])?;
    /// assert_eq!(p.max_sum(0) - p.min_sum(0), 0); // {5, 3} and {4, 3, 1}
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn objective(mut self, objective: Objective) -> Self {
        self.objective = objective;
        self
    }

    /// The objective over several dimensions.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::partition::{Dims, Partitioner};
    ///
    /// let items = [[6u32, 0], [5, 0], [0, 6], [0, 5]];
    /// let p = Partitioner::new(2).dims(Dims::PerDim).partition(&items)?;
    /// assert_eq!(p.objective(), p.max_sum(0) + p.max_sum(1)); // 6 + 6
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn dims(mut self, dims: Dims) -> Self {
        self.dims = dims;
        self
    }

    /// Whether every part must get the same number of items, up to one.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::partition::Partitioner;
    ///
    /// let items = [10u32, 1, 1, 1];
    /// assert_eq!(Partitioner::new(2).partition(&items)?.objective(), 10); // {10} and {1, 1, 1}
    /// let p = Partitioner::new(2).equal_count(true).partition(&items)?;
    /// assert!(p.parts().all(|part| part.len() == 2));
    /// assert_eq!(p.objective(), 11);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn equal_count(mut self, on: bool) -> Self {
        self.equal_count = on;
        self
    }

    /// Whether parts may be empty (default `false`).
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::partition::Partitioner;
    ///
    /// assert!(Partitioner::new(3).partition(&[1u32, 2]).is_err());
    /// let p = Partitioner::new(3).allow_empty(true).partition(&[1u32, 2])?;
    /// assert_eq!(p.min_sum(0), 0);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn allow_empty(mut self, on: bool) -> Self {
        self.allow_empty = on;
        self
    }

    /// A cap on every part sum, for one-dimensional items.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::partition::Partitioner;
    ///
    /// let items = [8u32, 7, 6, 5, 4];
    /// assert!(Partitioner::new(2).cap(15).partition(&items)?.max_sum(0) <= 15);
    /// assert!(Partitioner::new(2).cap(14).partition(&items).is_err()); // 30 > 2 * 14
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn cap(mut self, cap: S) -> Self {
        self.cap = Some(vec![cap]);
        self
    }

    /// A cap on every part sum per dimension, for items with
    /// `caps.len()` dimensions.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::partition::Partitioner;
    ///
    /// // (tokens, images) per sample; at most 9000 tokens and 4 images a rank.
    /// let samples = [[4000u32, 2], [3500, 1], [3000, 3], [2500, 0], [2000, 2], [1000, 0]];
    /// let p = Partitioner::new(2).cap_per_dim(&[9000, 4]).partition(&samples)?;
    /// assert!(p.max_sum(0) <= 9000 && p.max_sum(1) <= 4);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn cap_per_dim(mut self, caps: &[S]) -> Self {
        self.cap = Some(caps.to_vec());
        self
    }

    /// The most branch-and-bound nodes for [`Algorithm::Exact`] and for the
    /// search for a partition within the cap.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::partition::{Algorithm, Partitioner};
    ///
    /// let items = [46u32, 39, 27, 26, 16, 13, 10];
    /// let search = Partitioner::new(3).algorithm(Algorithm::Exact);
    /// assert!(!search.clone().node_budget(2).partition(&items)?.proven_optimal());
    /// let p = search.node_budget(1_000_000).partition(&items)?;
    /// assert!(p.proven_optimal() && p.objective() == 62);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn node_budget(mut self, nodes: u64) -> Self {
        self.node_budget = nodes;
        self
    }

    /// The most improving steps of refinement (default `16 (n + k)`; with
    /// one objective dimension it usually stops far earlier, when no move or
    /// swap improves).
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::partition::Partitioner;
    ///
    /// let items = [8u32, 7, 6, 5, 4];
    /// let unrefined = Partitioner::new(2).refinement(false).partition(&items)?;
    /// assert_eq!(Partitioner::new(2).max_rounds(0).partition(&items)?.objective(), unrefined.objective());
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn max_rounds(mut self, rounds: usize) -> Self {
        self.max_rounds = Some(rounds);
        self
    }

    fn rounds(&self, n: usize, k: usize) -> usize {
        self.max_rounds
            .unwrap_or_else(|| n.saturating_add(k).saturating_mul(16))
    }

    fn config(&self, k: usize) -> Config<S::Total> {
        Config {
            k,
            objective: self.objective,
            equal_count: self.equal_count,
            allow_empty: self.allow_empty,
            cap: self
                .cap
                .as_ref()
                .map(|c| c.iter().map(|&x| x.widen()).collect()),
        }
    }

    fn check_parts(&self, n: usize, k: usize) -> Result<(), Error> {
        if k == 0 {
            return Err(Error::ZeroParts);
        }
        if k > n && !self.allow_empty {
            return Err(Error::TooManyParts { parts: k, items: n });
        }
        if k > n.max(MAX_EMPTY_PARTS) {
            return Err(Error::InvalidSetting {
                name: "parts",
                value: u64::try_from(k).unwrap_or(u64::MAX),
                requirement: "at most the number of items, or at most 65536 when there are \
                              fewer items (with empty parts allowed)",
            });
        }
        Ok(())
    }

    /// Partitions `items` into the configured number of parts.
    ///
    /// # Errors
    ///
    /// - [`Error::ZeroParts`] for zero parts;
    /// - [`Error::TooManyParts`] for more parts than items unless empty
    ///   parts are allowed;
    /// - [`Error::InvalidSetting`] (`parts`) with empty parts allowed, for
    ///   more than `max(n, 65536)` parts (a result holds every part: at the
    ///   limit, 65536 parts of 3 items take about 6 MB and a few
    ///   milliseconds);
    /// - [`Error::DimensionMismatch`] when an item has another number of
    ///   dimensions than the first item (or the cap), [`Error::NoDimensions`]
    ///   for items (or a cap) without dimensions, [`Error::InvalidSetting`]
    ///   for more than 65536 dimensions;
    /// - [`Error::InvalidSize`] / [`Error::InvalidCapacity`] for a negative
    ///   or infinite float; [`Error::SizeOverflow`] for float sizes whose
    ///   sum is beyond `f64::MAX`;
    /// - [`Error::Oversize`] listing every item larger than the cap;
    /// - [`Error::CapExceeded`] when no partition within the cap is found.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::partition::Partitioner;
    ///
    /// let p = Partitioner::new(2).partition(&[(7u32, 3u32), (2, 3), (9, 2), (4, 2)])?;
    /// assert_eq!(p.objective(), 5);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    pub fn partition<I: Item<Size = S>>(&self, items: &[I]) -> Result<Partition<S::Total>, Error> {
        if self.algorithm == Algorithm::Lpt
            && !self.refinement
            && !self.equal_count
            && self.cap.is_none()
            && self.objective == Objective::MaxPart
        {
            if let Some(p) = lpt::counting(items, self.parts) {
                return Ok(p);
            }
        }
        let inst = instance::instance(items, self.dims, self.cap.as_deref())?;
        self.check_parts(inst.n, self.parts)?;
        let cfg = self.config(self.parts);
        // A cap below a lower bound on the largest part is infeasible: no
        // search, only the heuristic for the best part to report.
        if let Some(dim) = infeasible_dim(&inst, &cfg) {
            let heuristic = match self.algorithm {
                Algorithm::Exact => Algorithm::Lpt,
                other => other,
            };
            let (part_of, _) = self.construct(&inst, &cfg, heuristic);
            let sums = inst.sums(cfg.k, &part_of);
            let best = column_max(&sums, inst.d, dim);
            return Err(self.cap_error(&inst, &cfg, dim, best, true));
        }
        let (part_of, proven) = self.construct(&inst, &cfg, self.algorithm);
        match finish(&inst, &cfg, part_of, proven) {
            Ok(p) => Ok(p),
            Err((dim, best)) => self.repair(
                &inst,
                &cfg,
                dim,
                best,
                self.algorithm == Algorithm::Exact && proven,
            ),
        }
    }

    /// Builds and refines a partition by rank, without the cap repair;
    /// with whether exact search finished.
    fn construct(
        &self,
        inst: &Instance<S::Total>,
        cfg: &Config<S::Total>,
        algorithm: Algorithm,
    ) -> (Vec<usize>, bool) {
        let mut part_of = match algorithm {
            Algorithm::KarmarkarKarp => karmarkar_karp::run(inst, cfg),
            Algorithm::Lpt | Algorithm::Exact => lpt::run(inst, cfg),
        };
        if self.refinement || algorithm == Algorithm::Exact {
            refine::run(inst, cfg, &mut part_of, self.rounds(inst.n, cfg.k));
        }
        if algorithm != Algorithm::Exact {
            return (part_of, false);
        }
        // The incumbent: the better of refined LPT and refined KK (KK only
        // where it sees the objective, one objective dimension).
        if inst.od == 1 {
            let mut kk = karmarkar_karp::run(inst, cfg);
            refine::run(inst, cfg, &mut kk, self.rounds(inst.n, cfg.k));
            if self.rank(inst, cfg, &kk) < self.rank(inst, cfg, &part_of) {
                part_of = kk;
            }
        }
        let within_cap = cfg.cap.as_ref().map_or(true, |cap| {
            instance::cap_violation(cap, inst.d, &inst.sums(cfg.k, &part_of)).is_none()
        });
        let incumbent = within_cap.then(|| part_of.clone());
        let (found, proven) = exact::run(inst, cfg, incumbent, self.node_budget);
        (found.unwrap_or(part_of), proven)
    }

    /// Orders candidate assignments: within the cap first, then by
    /// objective.
    fn rank(
        &self,
        inst: &Instance<S::Total>,
        cfg: &Config<S::Total>,
        part_of: &[usize],
    ) -> (bool, Load<S::Total>) {
        let sums = inst.sums(cfg.k, part_of);
        let over = cfg
            .cap
            .as_ref()
            .is_some_and(|cap| instance::cap_violation(cap, inst.d, &sums).is_some());
        let osums = inst.objective_sums(cfg.k, &sums);
        (
            over,
            Load(instance::objective_value(
                cfg.objective,
                cfg.k,
                inst.od,
                &osums,
            )),
        )
    }

    /// The heuristic missed the cap: search within the node budget (unless a
    /// bound or a finished search already proves the cap infeasible), or
    /// fail with the best part found and a part count that works.
    fn repair(
        &self,
        inst: &Instance<S::Total>,
        cfg: &Config<S::Total>,
        dim: usize,
        best: S::Total,
        searched: bool,
    ) -> Result<Partition<S::Total>, Error> {
        let (found, proven) = if searched {
            (None, true)
        } else if self.algorithm == Algorithm::Exact {
            (None, false)
        } else {
            let nodes = self.node_budget.min(repair_nodes(inst.n, cfg.k, inst.d));
            exact::run(inst, cfg, None, nodes)
        };
        match found.map(|part_of| finish(inst, cfg, part_of, proven)) {
            Some(Ok(p)) => Ok(p),
            // The search's sums are the fresh sums: this cannot happen, but
            // a result above the cap is never returned.
            Some(Err((dim, best))) => Err(self.cap_error(inst, cfg, dim, best, false)),
            None => Err(self.cap_error(inst, cfg, dim, best, proven)),
        }
    }

    /// [`Error::CapExceeded`] for the best part `best` in dimension `dim`.
    fn cap_error(
        &self,
        inst: &Instance<S::Total>,
        cfg: &Config<S::Total>,
        dim: usize,
        best: S::Total,
        proven: bool,
    ) -> Error {
        let cap = cfg.cap.as_deref().map_or(S::Total::ZERO, |c| c[dim]);
        Error::CapExceeded {
            parts: cfg.k,
            dim,
            cap: instance::scalar(cap),
            best: instance::scalar(best),
            proven,
            parts_needed: self.parts_needed(inst, cfg),
        }
    }

    /// The smallest part count above `cfg.k` for which the heuristic (LPT
    /// for [`Algorithm::Exact`]) meets the cap, by binary search; at `n`
    /// parts every item is alone, which fits as no item is above the cap.
    fn parts_needed(&self, inst: &Instance<S::Total>, cfg: &Config<S::Total>) -> Option<usize> {
        let cap = cfg.cap.as_ref()?;
        let algorithm = match self.algorithm {
            Algorithm::Exact => Algorithm::Lpt,
            other => other,
        };
        let fits = |k: usize| {
            let c = Config { k, ..cfg.clone() };
            if infeasible_dim(inst, &c).is_some() {
                return false;
            }
            let (part_of, _) = self.construct(inst, &c, algorithm);
            instance::cap_violation(cap, inst.d, &inst.sums(k, &part_of)).is_none()
        };
        let (mut lo, mut hi) = (cfg.k, inst.n.max(cfg.k + 1));
        if !fits(hi) {
            return None;
        }
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if fits(mid) {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        Some(hi)
    }

    /// Refines `partition` of `items` under the configured objective and
    /// constraints (the number of parts is the partition's).
    ///
    /// # Errors
    ///
    /// As [`Partitioner::partition`], [`Error::NotAPartition`] when
    /// `partition` does not hold every item exactly once, and
    /// [`Error::UnequalCounts`] under [`equal_count`](Partitioner::equal_count)
    /// when its parts' counts differ by more than one (refinement keeps
    /// every part's count).
    ///
    /// "Never worse than its input" compares the objective of the input's
    /// parts and of the result computed the same way (sums afresh, items in
    /// decreasing order of size); with floats, the objective the input
    /// reports may differ from that by rounding when it was summed in
    /// another order.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::partition::{lpt, Partitioner};
    ///
    /// let items = [8u32, 7, 6, 5, 4];
    /// let greedy = lpt(&items, 2)?;
    /// let better = Partitioner::new(2).refine(&items, &greedy)?;
    /// assert_eq!((greedy.objective(), better.objective()), (17, 15));
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    pub fn refine<I: Item<Size = S>>(
        &self,
        items: &[I],
        partition: &Partition<S::Total>,
    ) -> Result<Partition<S::Total>, Error> {
        let inst = instance::instance(items, self.dims, self.cap.as_deref())?;
        let k = partition.len();
        self.check_parts(inst.n, k)?;
        let mut rank_of = vec![0; inst.n];
        for (r, &i) in inst.index.iter().enumerate() {
            rank_of[i] = r;
        }
        let mut part_of = vec![usize::MAX; inst.n];
        for (p, items_of) in partition.parts().enumerate() {
            for &i in items_of {
                match part_of.get_mut(i) {
                    Some(slot) if *slot == usize::MAX => *slot = p,
                    _ => {
                        let times = partition
                            .parts()
                            .map(|q| q.iter().filter(|&&j| j == i).count())
                            .sum();
                        return Err(Error::NotAPartition {
                            items: inst.n,
                            index: i,
                            times,
                        });
                    }
                }
            }
        }
        if let Some(index) = part_of.iter().position(|&p| p == usize::MAX) {
            return Err(Error::NotAPartition {
                items: inst.n,
                index,
                times: 0,
            });
        }
        if self.equal_count {
            let fewest = inst.n / k;
            let most = fewest + usize::from(inst.n % k != 0);
            if let Some((part, p)) = partition
                .parts()
                .enumerate()
                .find(|(_, p)| !(fewest..=most).contains(&p.len()))
            {
                return Err(Error::UnequalCounts {
                    part,
                    items: p.len(),
                    fewest,
                });
            }
        }
        let mut by_rank: Vec<usize> = inst.index.iter().map(|&i| part_of[i]).collect();
        let cfg = self.config(k);
        // Floats only: steps are taken on running sums, so a float result
        // could be an ulp above the input evaluated the same way (integer
        // sums are exact and steps only improve them).
        let start = (!<S::Total as TotalOps>::INTEGER).then(|| by_rank.clone());
        refine::run(&inst, &cfg, &mut by_rank, self.rounds(inst.n, k));
        let refined = match (finish(&inst, &cfg, by_rank, false), start) {
            (Ok(r), Some(start)) => match finish(&inst, &cfg, start, false) {
                Ok(s) if instance::cmp(r.objective, s.objective) == Ordering::Greater => Ok(s),
                _ => Ok(r),
            },
            (refined, _) => refined,
        };
        refined.map_err(|(dim, best)| self.cap_error(&inst, &cfg, dim, best, false))
    }
}

/// The most parts accepted with empty parts allowed, when there are fewer
/// items: a result holds every part, so `k` is bounded by the input (or by
/// this constant, a few megabytes of parts).
const MAX_EMPTY_PARTS: usize = 1 << 16;

/// The least work of the search for a partition within the cap, in node
/// operations (a node costs O(k d)): at most `max(REPAIR_WORK,
/// 16 (n + k) d) / (k d)` nodes, and at most the node budget.
const REPAIR_WORK: u64 = 1 << 24;

/// The node budget of the search for a partition within the cap (see
/// [`REPAIR_WORK`]).
fn repair_nodes(n: usize, k: usize, d: usize) -> u64 {
    let per_node = (k as u64).saturating_mul(d as u64).max(1);
    let work = (n as u64)
        .saturating_add(k as u64)
        .saturating_mul(16)
        .saturating_mul(d as u64)
        .max(REPAIR_WORK);
    (work / per_node).max(1)
}

/// The first dimension whose cap is below a lower bound on the largest
/// part of every partition under `cfg` (the sum over `k`, the largest item,
/// the items that must share a part, the equal counts): a proof that the
/// cap is infeasible.
fn infeasible_dim<T: Total>(inst: &Instance<T>, cfg: &Config<T>) -> Option<usize> {
    let cap = cfg.cap.as_ref()?;
    (0..inst.d)
        .find(|&j| instance::cmp(bounds::dim_bound(inst, cfg, j), cap[j]) == Ordering::Greater)
}

/// The largest of the sums of dimension `j` (`sums` is `k * d`).
fn column_max<T: Total>(sums: &[T], d: usize, j: usize) -> T {
    sums.iter()
        .skip(j)
        .step_by(d)
        .fold(T::ZERO, |acc, &x| instance::max(acc, x))
}

/// Turns an assignment by rank into a [`Partition`], with its sums computed
/// afresh in rank order (the sums it reports); the first (dimension, part
/// sum) above the cap instead, if any, so that a result above the cap is
/// never returned.
fn finish<T: Total>(
    inst: &Instance<T>,
    cfg: &Config<T>,
    part_of: Vec<usize>,
    proven: bool,
) -> Result<Partition<T>, (usize, T)> {
    let k = cfg.k;
    let sums = inst.sums(k, &part_of);
    if let Some(over) = cfg
        .cap
        .as_ref()
        .and_then(|cap| instance::cap_violation(cap, inst.d, &sums))
    {
        return Err(over);
    }
    let mut counts = vec![0usize; k];
    for &p in &part_of {
        counts[p] += 1;
    }
    let ranked = part_of.iter().zip(&inst.index).map(|(&p, &i)| (p, i));
    let (items, offsets) = Grouped::scatter(counts, ranked).into_flat();
    let objective =
        instance::objective_value(cfg.objective, k, inst.od, &inst.objective_sums(k, &sums));
    let lower_bound = bounds::objective_bound(inst, cfg);
    let proven = proven || instance::cmp(objective, lower_bound) != Ordering::Greater;
    Ok(Partition::from_flat(
        items,
        offsets,
        inst.d,
        sums,
        objective,
        lower_bound,
        proven,
    ))
}

/// The fields of a [`Partition`] as serialized: the parts as lists of
/// input indices.
#[cfg(feature = "serde")]
mod wire {
    use alloc::vec::Vec;

    use core::cmp::Ordering;

    use serde::ser::{SerializeStruct, Serializer};
    use serde::Serialize;

    use crate::grouped::{check_per_group, invalid, Grouped, Invalid, Raw};
    use crate::num::Total;

    /// A partition as read, checked before it becomes one, so that a
    /// malformed document is an error rather than a later panic.
    #[derive(serde::Deserialize)]
    pub(super) struct Partition<T> {
        parts: Vec<Vec<usize>>,
        dims: usize,
        sums: Vec<T>,
        objective: T,
        lower_bound: T,
        proven_optimal: bool,
    }

    impl<T: Total> TryFrom<Partition<T>> for super::Partition<T> {
        type Error = Invalid;

        fn try_from(p: Partition<T>) -> Result<Self, Self::Error> {
            let parts = Grouped::try_from(Raw::nested(p.parts, "part"))?;
            check_per_group(&parts, &p.sums, p.dims, T::ZERO, "part", "sum")?;
            let below_zero = |x: &T| x.total_cmp(&T::ZERO) == Ordering::Less;
            if let Some(i) = p.sums.iter().position(below_zero) {
                return Err(invalid!(
                    "part {} has a negative sum {:?} in dimension {}: sums of sizes are not \
                     negative",
                    i / p.dims,
                    p.sums[i],
                    i % p.dims
                ));
            }
            if below_zero(&p.objective) || below_zero(&p.lower_bound) {
                return Err(invalid!(
                    "the objective {:?} and the lower bound {:?} must not be negative",
                    p.objective,
                    p.lower_bound
                ));
            }
            // Every objective (the largest part, per dimension or combined,
            // or the spread) is at most the sum over dimensions of the
            // largest part, folded as the objective is. Without parts that
            // sum is zero: the declared dimension count alone must drive no
            // loop (a document of 100 bytes declaring 2^64 - 1 dimensions),
            // so the dimensions are walked only when there are sums, and
            // then `dims <= sums.len()` (one sum per part and dimension).
            let walked = if p.sums.is_empty() { 0 } else { p.dims };
            let most = (0..walked).fold(T::ZERO, |acc, j| {
                let hi = p
                    .sums
                    .iter()
                    .skip(j)
                    .step_by(p.dims)
                    .fold(T::ZERO, |m, &x| {
                        if x.total_cmp(&m) == Ordering::Greater {
                            x
                        } else {
                            m
                        }
                    });
                acc.add(hi)
            });
            if p.objective.total_cmp(&most) == Ordering::Greater {
                return Err(invalid!(
                    "the objective {:?} is above what the part sums allow ({:?}, the sum over \
                     dimensions of the largest part)",
                    p.objective,
                    most
                ));
            }
            if p.lower_bound.total_cmp(&p.objective) == Ordering::Greater {
                return Err(invalid!(
                    "the lower bound {:?} is above the objective {:?}: it bounds the optimum, \
                     which is at most the objective",
                    p.lower_bound,
                    p.objective
                ));
            }
            Ok(super::Partition {
                parts,
                dims: p.dims,
                sums: p.sums,
                objective: p.objective,
                lower_bound: p.lower_bound,
                proven_optimal: p.proven_optimal,
            })
        }
    }

    /// The parts as a list of lists.
    struct Parts<'a, T>(&'a super::Partition<T>);

    impl<T: super::Total> Serialize for Parts<'_, T> {
        fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            serializer.collect_seq(self.0.parts())
        }
    }

    impl<T: super::Total + Serialize> Serialize for super::Partition<T> {
        fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            let mut s = serializer.serialize_struct("Partition", 6)?;
            s.serialize_field("parts", &Parts(self))?;
            s.serialize_field("dims", &self.dims)?;
            s.serialize_field("sums", &self.sums)?;
            s.serialize_field("objective", &self.objective)?;
            s.serialize_field("lower_bound", &self.lower_bound)?;
            s.serialize_field("proven_optimal", &self.proven_optimal)?;
            s.end()
        }
    }
}

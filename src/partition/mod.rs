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
//!   (Karmarkar & Karp 1982; Michiels et al. 2007), O(n log n + n k log k)
//!   at worst (a merge of two partial partitions costs O(k + c log c) for
//!   `c` parts that combine one of each), usually much closer to the optimum
//!   than LPT when there are many items per part;
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
//! largest part is almost always at most LPT's, and usually strictly
//! smaller, but not always: the test `kk_vs_lpt_majority`
//! (`tests/it/partition_props.rs`; 2000 seeded instances, integer weights
//! uniform in 1..=1000, k in 2..=16, n = k * (8..=32)) fails when it is at
//! most LPT's on fewer than 99.5% of them or smaller on fewer than 98.5%.
//! `BENCHMARKS.md` compares both with the bound on larger inputs.
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

mod bounds;
mod bucket_queue;
mod exact;
mod instance;
mod karmarkar_karp;
mod load_heap;
mod load_queue;
mod lpt;
mod options;
mod partitioner;
mod refine;
mod result;
mod steps;
mod vector_lpt;

pub use self::bounds::lower_bound;
pub use self::exact::exact;
pub use self::karmarkar_karp::karmarkar_karp;
pub use self::lpt::lpt;
pub use self::options::{Algorithm, Dims, Objective};
pub use self::partitioner::{Partitioner, DEFAULT_NODE_BUDGET};
pub use self::refine::refine;
pub use self::result::{Partition, TotalOf};

// Crate-internal, for the planner: LPT over vector items (its phase
// vectors) and the swap partners around a sorted list's balancing point.
pub(crate) use self::refine::balancing_window;
pub(crate) use self::vector_lpt::{vector_lpt, vector_lpt_by, vector_lpt_onto, VectorItem};

#[cfg(doc)]
use crate::error::Error;
#[cfg(doc)]
use crate::num::{Item, Total};

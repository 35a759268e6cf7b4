//! The [`Partitioner`] builder: options and hard constraints over every
//! algorithm, and the dispatch into them.

use alloc::vec;
use alloc::vec::Vec;

use crate::error::Error;
use crate::num::{Item, Size};

use super::instance::{self, Config, Instance};
use super::options::{Algorithm, Dims, Objective};
use super::result::Partition;
use super::{exact, karmarkar_karp, lpt, refine, steps};

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
            .unwrap_or_else(|| steps::default_rounds(n, k))
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

    /// Partitions `items` into the configured number of parts.
    ///
    /// # Errors
    ///
    /// - [`Error::ZeroParts`] for zero parts;
    /// - [`Error::TooManyParts`] for more parts than items unless empty
    ///   parts are allowed;
    /// - [`Error::Invalid`] at a [setting](crate::Locator::Setting) (`parts`)
    ///   with empty parts allowed, for more than `max(n, 65536)` parts (a
    ///   result holds every part: at the limit, 65536 parts of 3 items take
    ///   about 6 MB and a few milliseconds);
    /// - [`Error::DimensionMismatch`] when an item has another number of
    ///   dimensions than the first item (or the cap), [`Error::NoDimensions`]
    ///   for items (or a cap) without dimensions, [`Error::Invalid`] at a
    ///   [setting](crate::Locator::Setting) for more than 65536 dimensions;
    /// - [`Error::Invalid`] at a [size](crate::Locator::Size) /
    ///   [`Error::Invalid`] at a [capacity](crate::Locator::Capacity) for a
    ///   negative or infinite float; [`Error::SizeOverflow`] for float sizes
    ///   whose sum is beyond `f64::MAX`;
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
        steps::check_parts(inst.n, self.parts, self.allow_empty)?;
        let cfg = self.config(self.parts);
        // A cap below a lower bound on the largest part is infeasible: no
        // search, only the heuristic for the best part to report.
        if let Some(dim) = steps::infeasible_dim(&inst, &cfg) {
            let heuristic = match self.algorithm {
                Algorithm::Exact => Algorithm::Lpt,
                other => other,
            };
            let (part_of, _) = self.construct(&inst, &cfg, heuristic);
            let sums = inst.sums(cfg.k, &part_of);
            let best = steps::column_max(&sums, inst.d, dim);
            return Err(self.cap_error(&inst, &cfg, dim, best, true));
        }
        let (part_of, proven) = self.construct(&inst, &cfg, self.algorithm);
        match steps::finish(&inst, &cfg, part_of, proven) {
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
        if algorithm == Algorithm::Exact {
            return exact::solve(inst, cfg, self.rounds(inst.n, cfg.k), self.node_budget);
        }
        let mut part_of = match algorithm {
            Algorithm::KarmarkarKarp => karmarkar_karp::run(inst, cfg),
            Algorithm::Lpt | Algorithm::Exact => lpt::run(inst, cfg),
        };
        if self.refinement {
            refine::run(inst, cfg, &mut part_of, self.rounds(inst.n, cfg.k));
        }
        (part_of, false)
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
        match found.map(|part_of| steps::finish(inst, cfg, part_of, proven)) {
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
        steps::cap_exceeded(cfg, dim, best, proven, self.parts_needed(inst, cfg))
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
            if steps::infeasible_dim(inst, &c).is_some() {
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
        steps::check_parts(inst.n, k, self.allow_empty)?;
        let by_rank = refine::by_rank(&inst, partition, self.equal_count)?;
        let cfg = self.config(k);
        refine::refined(&inst, &cfg, by_rank, self.rounds(inst.n, k))
            .map_err(|(dim, best)| self.cap_error(&inst, &cfg, dim, best, false))
    }
}

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

#[cfg(test)]
mod tests {
    use alloc::vec::Vec;

    use ordered_float::NotNan;

    use super::*;
    use crate::partition::{exact, karmarkar_karp, lpt, refine};

    /// The free functions are the [`Partitioner`] with their settings: the
    /// same results and the same errors, item for item (they share its
    /// steps instead of calling it).
    fn same_as_the_partitioner<I: Item + core::fmt::Debug>(items: &[I], k: usize) {
        let with = |algorithm| Partitioner::new(k).algorithm(algorithm);
        assert_eq!(
            lpt(items, k),
            with(Algorithm::Lpt).refinement(false).partition(items),
            "lpt, k = {k}, {items:?}"
        );
        assert_eq!(
            karmarkar_karp(items, k),
            with(Algorithm::KarmarkarKarp)
                .refinement(false)
                .partition(items),
            "karmarkar_karp, k = {k}, {items:?}"
        );
        for budget in [0, 50, 5_000] {
            assert_eq!(
                exact(items, k, budget),
                with(Algorithm::Exact).node_budget(budget).partition(items),
                "exact, budget {budget}, k = {k}, {items:?}"
            );
        }
        if let Ok(start) = lpt(items, k) {
            assert_eq!(
                refine(items, &start),
                Partitioner::new(k).refine(items, &start),
                "refine, k = {k}, {items:?}"
            );
        }
    }

    #[test]
    fn free_functions_equal_the_partitioner_with_their_settings() {
        let mut next = crate::test_rng::uniform(0x5DEE_CE66_D1CE_4E5Bu64);
        for round in 0..200u64 {
            let n = next(18) as usize;
            let k = next(n as u64 + 3) as usize; // 0 and k > n included
            let largest = [3, 100, 1 << 20][round as usize % 3];
            let ints: Vec<u32> = (0..n).map(|_| next(largest) as u32).collect();
            same_as_the_partitioner(&ints, k);
            let ids: Vec<(u8, u32)> = ints.iter().map(|&x| (next(4) as u8, x)).collect();
            same_as_the_partitioner(&ids, k);
            let vectors: Vec<[u32; 2]> = ints.iter().map(|&x| [x, next(5) as u32]).collect();
            same_as_the_partitioner(&vectors, k);
            let floats: Vec<NotNan<f64>> = ints
                .iter()
                .map(|&x| NotNan::new(f64::from(x) / 7.0).unwrap())
                .collect();
            same_as_the_partitioner(&floats, k);
        }
        // Invalid items: the same error from both.
        let bad = [[1u32, 2].as_slice(), &[3]];
        same_as_the_partitioner(&bad, 2);
    }
}

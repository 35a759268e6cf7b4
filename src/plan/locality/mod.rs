//! Locality: keep samples on the rank that already holds them, within a tolerance of the locality-free step time.
//!
//! [`localize`] takes the plan without locality, `P0`, and returns the
//! layout of fewest weighted bytes moved it finds whose exact step time is
//! at most `(1 + tol)` times `P0`'s. The steps, one a file:
//!
//! | file | step | time |
//! |---|---|---|
//! | `homes.rs` | every sample's origin and bytes; what a sample weighs on a rank | O(1) a lookup |
//! | `budget.rs` | the groups whose loads bound the step time, and their budgets | O(n + K) |
//! | `relabel.rs` | 1. whole micro-batches (or ranks) given to the ranks that hold most of their bytes: the same step time | O(n log n + K) |
//! | `fill.rs` | 2. under [`SyncModel::Step`]: the layout filled anew, each rank's own samples first | O(n log n + K + R log R) |
//! | `exchange.rs`, `split.rs`, `swap.rs` | 3. samples brought home by re-splitting their sequence with one of their home rank, and by one-for-one swaps, under the budgets of `P0` | O(n) re-splits of O(1) each, see `exchange.rs` |
//! | this file | 4. the exact check within the tolerance, and the keep-the-best | five exact evaluations at most |
//!
//! Every step keeps a plan only if it moves, lexicographically, fewer
//! (weighted bytes, samples) than the best so far, and no plan above the
//! tolerance is returned: at any tolerance, 0 included, the plan never
//! moves more than `P0`.

use alloc::vec::Vec;

use super::finish::{Context, Costed};
use super::prepare::Prepared;
use super::shape::Shape;
use super::sync::SyncModel;
use super::tuning::{LOCALITY_FILL_SEQUENCES, LOCALITY_PASSES};
use crate::cost::Incremental;
use crate::error::Error;

mod budget;
mod exchange;
mod fill;
mod homes;
mod relabel;
mod split;
mod state;
mod swap;

use self::budget::Budget;
use self::fill::{Fill, WAYS};
pub(crate) use self::homes::{check_origins, Homes};
use self::relabel::{relabel, relabel_floor};
use self::state::Search;

/// Locality settings for [`Planner::locality`](crate::plan::Planner::locality):
/// move as few bytes between ranks as possible while the predicted step
/// time stays within `tolerance` of the plan without locality.
///
/// Samples have an origin ([`StepSample::with_origin`](crate::plan::StepSample::with_origin)),
/// the rank whose data loader holds them, and a size in bytes
/// ([`StepSample::bytes`](crate::plan::StepSample::bytes)). With
/// [`ranks_per_node`](Locality::ranks_per_node) `n`, ranks `k * n` to
/// `(k + 1) * n - 1` form node `k` and a move inside a node weighs 1/8 of a
/// move between nodes.
///
/// # Algorithm
///
/// `P0`, the plan without locality, and its predicted step time `T0`
/// (every sequence evaluated as a group with the model) come first; the
/// budget is `T* = (1 + tolerance) * T0`. Every group (rank under
/// [`SyncModel::Step`], micro-batch otherwise) is held within `(1 +
/// tolerance)` times `P0`'s largest group of its kind: its largest rank
/// total, micro-step `j`'s largest micro-batch, per phase under
/// [`SyncModel::Phase`]. Then:
///
/// 1. *Relabel*: the micro-batches of each micro-step (whole ranks for
///    [`SyncModel::Step`]) are matched to ranks, greedily on the bytes that
///    stay home: the same micro-batches on other ranks, so exactly `T0`;
///    `P0` itself is kept where it moves fewer bytes.
/// 2. *Home first* (for [`SyncModel::Step`], with at most 64 sequences a
///    rank): each rank keeps, of the samples it holds, the densest in bytes
///    per cost while it stays within the mean rank total and its caps; the
///    others go to the ranks of most slack; each rank is packed by best fit
///    decreasing, and what does not fit goes to the rank of most slack that
///    takes it, evicting a smaller sample if need be. When this moves
///    fewer bytes than any relabelling of whole ranks can, step 1 is
///    skipped.
/// 3. *Exchange*: every sample away from home, in decreasing bytes,
///    re-splits its sequence with one of its home rank (or, with nodes, of
///    a rank of its node) so that the samples of both land where they
///    weigh less, while both keep the caps and their budgets; several
///    samples may trade at once (1-for-2, 2-for-1, ...). Under the
///    per-micro-step models a swap pass also trades samples away from home
///    one for one between their ranks.
/// 4. The result is evaluated exactly; if it is above `T*` (the budgets
///    use the samples' own costs, the evaluation the sequences' group
///    costs), step 3 is run again with the tolerance divided by 4, then 0,
///    and if all fail the best plan of steps 1 and 2 is kept.
///
/// Every step keeps the plan only if it moves, lexicographically, fewer
/// (weighted bytes, samples) than the best so far: at any tolerance, 0
/// included, the plan never moves more than `P0` (without nodes: bytes,
/// then samples), and a plan above `T*` is never returned. When the
/// origins already form `P0` up to a relabelling of ranks (per micro-step
/// for the per-micro-step models), step 1 moves nothing.
///
/// With groups ([`StepSample::with_group`](crate::plan::StepSample::with_group)),
/// only step 1 runs, on whole micro-batches (a group lies in one sequence
/// under [`GroupScope::MicroBatch`](crate::plan::GroupScope::MicroBatch)) or
/// whole ranks (under [`GroupScope::Rank`](crate::plan::GroupScope::Rank)),
/// so that no group is split: the step time is exactly `T0`, and fewer
/// bytes stay home than without groups.
///
/// # Complexity
///
/// O(n log n + K + P) time and O(n + K) extra space for n samples in K
/// sequences, where P is step 3's work: at most
/// `2 * 16` re-splits a sample over two passes, each O(m^2) for the m <=
/// 48 samples of the two sequences plus a search of at most 512 choices
/// (with [`effort`](Locality::effort) `e`, at most `e * n / 8` re-splits a
/// run). Nothing is O(R^2). Step 3 dominates under the per-micro-step
/// models, where it starts with most samples away from home;
/// [`effort`](Locality::effort) bounds it there. The measured times and
/// bytes moved: `BENCHMARKS.md`, "Locality".
///
/// # Examples
///
/// ```
/// use microbatch::cost::{Sample, Tokens};
/// use microbatch::plan::{Locality, Planner, StepSample};
///
/// // Round robin over 4 ranks: the balanced plan is already local.
/// let samples: Vec<_> = (0..32u64)
///     .map(|i| StepSample::new(i, Sample::text_only(100 + (i as u32 % 4) * 10)).with_origin(i as usize % 4).with_bytes(1000))
///     .collect();
/// let planner = Planner::new(Tokens::new(1.0)?).ranks(4).seq_len(2048);
/// let free = planner.plan(&samples)?;
/// let local = planner.locality(Locality::new(0.005)?).plan(&samples)?;
/// let (t_free, t_local) = (free.report().traffic.unwrap(), local.report().traffic.unwrap());
/// assert!(t_local.bytes_moved <= t_free.bytes_moved);
/// assert!(local.report().predicted <= 1.005 * free.report().predicted);
/// assert_eq!(local.report().locality_free, Some(free.report().predicted));
/// # Ok::<(), microbatch::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Locality {
    tolerance: f64,
    ranks_per_node: Option<usize>,
    effort: Option<u32>,
}

impl Locality {
    /// Locality within `tolerance` of the locality-free step time, a
    /// fraction (`0.005` is 0.5%).
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] at a [coefficient](crate::Locator::Coefficient) named
    /// `tolerance` for a NaN, negative or infinite tolerance.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::plan::Locality;
    ///
    /// assert_eq!(Locality::new(0.01)?.tolerance(), 0.01);
    /// assert!(Locality::new(-0.1).is_err());
    /// assert!(Locality::new(f64::NAN).is_err());
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    pub fn new(tolerance: f64) -> Result<Self, Error> {
        Ok(Locality {
            tolerance: crate::cost::coefficient("tolerance", tolerance)?,
            ranks_per_node: None,
            effort: None,
        })
    }

    /// `n` ranks a node (builder style): ranks `k * n` to `(k + 1) * n - 1`
    /// form node `k`, moves inside a node weigh 1/8 of moves between nodes, and
    /// the report counts the bytes between nodes. `0` is refused by
    /// [`Planner::plan`](crate::plan::Planner::plan) with
    /// [`Error::Invalid`] at a [setting](crate::Locator::Setting).
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::plan::Locality;
    ///
    /// let loc = Locality::new(0.005)?.ranks_per_node(8);
    /// assert_eq!(loc.node_size(), Some(8));
    /// assert_eq!(Locality::new(0.005)?.node_size(), None);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn ranks_per_node(mut self, n: usize) -> Self {
        self.ranks_per_node = Some(n);
        self
    }

    /// Bounds the work of step 3, the exchange, under the per-micro-step
    /// models (builder style): each run of it weighs at most `effort * n /
    /// 8` re-splits for `n` samples (`8`: one re-split a sample on average;
    /// `0`: none, the relabelling and the swap pass only), the samples of
    /// most bytes first. Without a bound (the default) it weighs what it
    /// finds worth weighing.
    ///
    /// A bound trades bytes moved for planning time (`BENCHMARKS.md`,
    /// "Locality"). Under the per-micro-step models only: under
    /// [`SyncModel::Step`] the fill of step 2 brings most samples home and
    /// step 3 has little left to do, but where the fill fails step 3 starts
    /// with nearly every sample away and a bound would leave most of the
    /// bytes away, so the bound is not applied there.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::plan::Locality;
    ///
    /// let loc = Locality::new(0.005)?.effort(4);
    /// assert_eq!(loc.resplits(1000), Some(500));
    /// assert_eq!(Locality::new(0.005)?.resplits(1000), None);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn effort(mut self, effort: u32) -> Self {
        self.effort = Some(effort);
        self
    }

    /// The most re-splits a run of step 3 weighs for a batch of `samples`
    /// samples under the per-micro-step models, `effort * samples / 8`, if
    /// [`effort`](Locality::effort) bounds it (step barriers are not
    /// bounded).
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::plan::Locality;
    ///
    /// assert_eq!(Locality::new(0.0)?.effort(1).resplits(20), Some(2));
    /// assert_eq!(Locality::new(0.0)?.effort(0).resplits(20), Some(0));
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn resplits(&self, samples: usize) -> Option<u64> {
        self.effort
            .map(|e| u64::from(e).saturating_mul(samples as u64) / 8)
    }

    /// The tolerance, a fraction of the locality-free step time.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::plan::Locality;
    ///
    /// assert_eq!(Locality::new(0.02)?.tolerance(), 0.02);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn tolerance(&self) -> f64 {
        self.tolerance
    }

    /// The ranks a node, if set with [`ranks_per_node`](Locality::ranks_per_node).
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::plan::Locality;
    ///
    /// assert_eq!(Locality::new(0.0)?.ranks_per_node(4).node_size(), Some(4));
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn node_size(&self) -> Option<usize> {
        self.ranks_per_node
    }
}

/// What locality may move: single samples (no groups), or only whole
/// micro-batches (groups kept in one sequence) or whole ranks (groups kept
/// on one rank), so that no group is split.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Movable {
    Samples,
    WholeMicroBatches,
    WholeRanks,
}

/// What locality is asked for: the user's [`Locality`] (tolerance, nodes)
/// and what the plan lets move.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Asked {
    pub(crate) locality: Locality,
    pub(crate) movable: Movable,
}

/// A layout evaluated exactly, and the weighted bytes and samples it moves.
type Scored = (Costed, (u128, usize));

/// The plan `slots` (each slot ascending) made local: the layout of least
/// weighted bytes moved whose exact step time is at most `(1 + tol)` times
/// that of `slots`, and that time of `slots` (`T0`). See [`Locality`].
///
/// # Errors
///
/// [`Error::CostOverflow`] as the finishing stage.
pub(crate) fn localize<M: Incremental>(
    prep: &Prepared,
    cx: &Context<'_, M>,
    shape: Shape,
    slots: Vec<Vec<u32>>,
    homes: &Homes,
    asked: Asked,
) -> Result<(Costed, f64), Error> {
    let Asked {
        locality: loc,
        movable,
    } = asked;
    // Every layout below is evaluated exactly, each from one already
    // evaluated, so that only the sequences it changed are evaluated anew.
    let p0 = Costed::new(prep, cx, shape, slots)?;
    let t0 = p0.time;
    let run = Local {
        prep,
        cx,
        homes,
        loc,
        // The relabelling permutes the blocks of each column, which keeps
        // their largest.
        free: Budget::largest(prep, cx.sync, shape, &p0.slots),
        limit: (1.0 + loc.tolerance) * t0,
    };
    let plan = match run.start(p0, movable)? {
        Start::Done(plan) => plan,
        Start::Exchange(best, passes) => run.exchange(best, passes)?,
    };
    Ok((plan, t0))
}

/// What every step reads: the batch, the homes, the settings, the budgets
/// of `P0` and the exact step time a plan may reach.
struct Local<'a, 'c, M> {
    prep: &'a Prepared,
    cx: &'a Context<'c, M>,
    homes: &'a Homes,
    loc: Locality,
    /// `P0`'s largest group of every column.
    free: Budget,
    /// `(1 + tol) * T0`.
    limit: f64,
}

/// Where steps 1 and 2 leave the search.
enum Start {
    /// Nothing more to do: nothing moves, or only whole blocks may.
    Done(Costed),
    /// Step 3 from this plan, with this many passes.
    Exchange(Scored, usize),
}

impl<M: Incremental> Local<'_, '_, M> {
    /// `slots` evaluated from `from` and scored, if within the limit.
    fn checked(&self, from: &Costed, slots: Vec<Vec<u32>>) -> Result<Option<Costed>, Error> {
        let plan = from.next(self.prep, self.cx, self.free.shape, slots)?;
        Ok((plan.time <= self.limit).then_some(plan))
    }

    /// Steps 1 and 2 from `p0`: the fill (step barriers, samples movable,
    /// not when `P0` moves nothing), kept without step 1 when it moves
    /// fewer bytes than any relabelling can (without nodes) and passes the
    /// exact check; else the relabelling, then the fill if it moves fewer
    /// bytes and passes. One pass of step 3 after a fill, two otherwise.
    fn start(&self, p0: Costed, movable: Movable) -> Result<Start, Error> {
        let (homes, shape) = (self.homes, self.free.shape);
        let before = homes.cost(shape, &p0.slots);
        let mut filled = if movable == Movable::Samples
            && before != (0, 0)
            && self.cx.sync == SyncModel::Step
            && shape.per_rank() <= LOCALITY_FILL_SEQUENCES
        {
            let fill = Fill {
                prep: self.prep,
                homes,
                shape,
                budget: self.free.scaled(self.loc.tolerance).columns[0].total(),
                tol: self.loc.tolerance,
            };
            WAYS.into_iter()
                .find_map(|(share, direct)| fill.run(share, direct))
                .map(|f| {
                    let cost = homes.cost(shape, &f);
                    (f, cost)
                })
        } else {
            None
        };
        if let Some((fill, cost)) = filled.take_if(|(_, cost)| {
            homes.node.is_none() && cost.0 < relabel_floor(homes, shape, &p0.slots)
        }) {
            if let Some(fill) = self.checked(&p0, fill)? {
                return Ok(Start::Exchange((fill, cost), 1));
            }
        }
        // Step 1: the relabelled plan, unless the greedy matching keeps
        // less home than `P0` as it is.
        let whole_ranks = movable == Movable::WholeRanks;
        let relabeled = relabel(homes, self.cx.sync, whole_ranks, shape, p0.slots.clone());
        let base = homes.cost(shape, &relabeled);
        let best = if base <= before {
            (p0.next(self.prep, self.cx, shape, relabeled)?, base)
        } else {
            (p0, before)
        };
        if best.1 == (0, 0) || movable != Movable::Samples {
            return Ok(Start::Done(best.0));
        }
        if let Some((fill, cost)) = filled.filter(|f| f.1 < best.1) {
            if let Some(fill) = self.checked(&best.0, fill)? {
                return Ok(Start::Exchange((fill, cost), 1));
            }
        }
        Ok(Start::Exchange(best, LOCALITY_PASSES))
    }

    /// Steps 3 and 4 from `best`: the exchange under `P0`'s budgets scaled
    /// by the tolerance, then a quarter of it, then 0, until its plan moves
    /// less than `best` within the limit; else `best`.
    fn exchange(&self, best: Scored, passes: usize) -> Result<Costed, Error> {
        let shape = self.free.shape;
        let tol = self.loc.tolerance;
        for tol in [tol, tol / 4.0, 0.0] {
            let slots = best.0.slots.clone();
            let mut search = Search::new(self.prep, self.homes, slots, self.free.scaled(tol));
            // (Not under step barriers: see `Locality::effort`.)
            if let Some(most) = self
                .loc
                .resplits(self.prep.len())
                .filter(|_| self.cx.sync != SyncModel::Step)
            {
                search.resplits = most;
            }
            search.run(passes);
            let candidate = search.finish();
            if self.homes.cost(shape, &candidate) >= best.1 {
                break;
            }
            if let Some(plan) = self.checked(&best.0, candidate)? {
                return Ok(plan);
            }
            if tol == 0.0 {
                break;
            }
        }
        Ok(best.0)
    }
}

/// `(tokens, vision, language, origin, bytes)` samples (origin
/// `usize::MAX` for none) prepared with sequences of `seq_len` tokens, and
/// their homes.
#[cfg(test)]
fn batch(
    samples: &[(u32, f64, f64, usize, u64)],
    seq_len: u64,
    shape: Shape,
    sync: SyncModel,
) -> (Prepared, Homes) {
    use crate::cost::{Given, Phases, Sample};
    use crate::plan::prepare::prepare;
    use crate::plan::StepSample;

    let batch: Vec<StepSample> = samples
        .iter()
        .enumerate()
        .map(|(i, &(t, v, l, _, b))| {
            let s = Sample::text_only(t).with_cost(Phases::new(v, l)).unwrap();
            StepSample::new(i as u64, s).with_bytes(b)
        })
        .collect();
    let caps = [seq_len, u64::MAX, u64::MAX];
    let prep = prepare(&batch, &Given, caps, shape.ranks, shape.per_step, sync).unwrap();
    let homes = Homes {
        home: samples
            .iter()
            .map(|s| Homes::record(u32::try_from(s.3).unwrap_or(homes::NONE), s.4))
            .collect(),
        node: None,
    };
    (prep, homes)
}

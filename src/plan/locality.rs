//! Locality: keep samples on the rank that already holds them, within a tolerance of the locality-free step time.

use alloc::vec;
use alloc::vec::Vec;

use super::finish::{exact_time, Context};
use super::prepare::Prepared;
use super::shape::Shape;
use super::sync::SyncModel;
use crate::cost::{Incremental, Phases};
use crate::error::{Error, InvalidReason, Locator, Scalar};

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
/// budget is `T* = (1 + tolerance) * T0`. Then:
///
/// 1. *Relabel*: the micro-batches of each micro-step (whole ranks for
///    [`SyncModel::Step`]) are matched to ranks, greedily on the bytes that
///    stay home (edges by decreasing bytes, then samples, then index): the
///    same micro-batches on other ranks, so exactly `T0`; `P0` itself is
///    kept where it moves fewer bytes than the greedy matching.
/// 2. *Home first* (for [`SyncModel::Step`] only, where a rank's total is
///    all that matters): the ranks filled anew, every sample in decreasing
///    cost to its origin rank while that rank stays within the mean rank
///    total (and half the tolerance), the others to the least-loaded rank
///    (of their node first) within `(1 + tol)` times `P0`'s largest rank
///    total, each rank then packed by first-fit-decreasing into its `A * S`
///    sequences; kept, if it packs and moves fewer bytes, as the start of
///    step 3.
/// 3. *Bring home*: from the better plan so far, every sample away from home,
///    in decreasing bytes, is moved to its origin rank (or, with nodes, to
///    a rank of its node) or swapped with a sample there, the change that
///    saves the most (weighted) bytes and leaves the most room, while every
///    sequence keeps `L` and the caps and every group of slots stays within
///    its budget: for [`SyncModel::Step`] a rank total at most `(1 + tol)`
///    times the largest rank total of `P0`; for [`SyncModel::MicroStep`]
///    micro-step `j`'s micro-batches at most `(1 + tol)` times `P0`'s largest
///    of micro-step `j`; for [`SyncModel::Phase`] the same per phase. At most
///    128 candidate changes are weighed a sample, in two passes.
/// 4. The result is evaluated exactly; if it is above `T*` (the budgets
///    use the samples' own costs, the evaluation the sequences' group
///    costs), step 3 is run again with the tolerance divided by 4, then 0,
///    and if all fail the best plan of steps 1 and 2 is kept. A plan above
///    `T*` is never returned.
///
/// When the origins already form `P0` up to a relabelling of ranks (per
/// micro-step for the per-micro-step models), step 1 moves nothing.
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
/// O(n log n + K) time and O(n + K) extra space for n samples in K
/// sequences, besides at most four exact evaluations of the plan (O(n)
/// model insertions each); nothing is O(R^2).
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

/// No origin.
const NONE: u32 = u32::MAX;

/// The weight of a move inside a node against one between nodes.
const INSIDE_NODE: u128 = 1;
/// The weight of a move between nodes (with nodes; without, a move weighs
/// its bytes).
const BETWEEN_NODES: u128 = 8;

/// Candidate changes weighed a sample in one pass of step 3.
const CANDIDATES: usize = 64;
/// Plain moves weighed a sample and candidate rank.
const MOVES: usize = 4;
/// Swaps weighed a sample and candidate rank: the samples of nearest cost.
const WINDOW: usize = 12;

/// Every sample's origin (`NONE` for none) and bytes, by position, and the
/// node size: what a placement costs.
pub(crate) struct Homes {
    origin: Vec<u32>,
    bytes: Vec<u64>,
    node: Option<usize>,
}

impl Homes {
    /// The homes of `prep`'s samples, or `None` when no sample has an
    /// origin. Origins are checked below `ranks` before (see
    /// `check_origins`).
    pub(crate) fn new<M>(
        prep: &Prepared,
        cx: &Context<'_, M>,
        node: Option<usize>,
    ) -> Option<Self> {
        let mut any = false;
        let origin = prep
            .items
            .iter()
            .map(|e| {
                let o = cx.samples[e.input as usize].origin();
                any |= o.is_some();
                o.map_or(NONE, |o| u32::try_from(o).unwrap_or(NONE))
            })
            .collect();
        if !any {
            return None;
        }
        let bytes = prep
            .items
            .iter()
            .map(|e| cx.samples[e.input as usize].bytes())
            .collect();
        Some(Homes {
            origin,
            bytes,
            node: node.map(|n| n.max(1)),
        })
    }

    /// The weighted bytes of sample `p` on rank `rank`: 0 at home or
    /// without an origin.
    ///
    /// Weights are `u128`, so that they and the sums of a few of them
    /// (a swap weighs two) are exact for any `u64` bytes: `u64::MAX` bytes
    /// between nodes weigh `8 * u64::MAX`, above `u64::MAX`.
    #[inline]
    fn weight(&self, p: usize, rank: usize) -> u128 {
        weighted(self.node, self.origin[p], self.bytes[p], rank)
    }

    /// [`Homes::weight`] of a sample's record.
    #[inline]
    fn weight_of(&self, i: &Info, rank: usize) -> u128 {
        weighted(self.node, i.origin, i.bytes, rank)
    }

    /// The weighted bytes and the samples moved of a layout (exact: at
    /// most `n * 8 * u64::MAX < 2^128` for `n < 2^61` samples).
    fn cost(&self, shape: Shape, slots: &[Vec<u32>]) -> (u128, usize) {
        let mut total = (0u128, 0usize);
        for (k, members) in slots.iter().enumerate() {
            let rank = k / shape.per_rank();
            for &p in members {
                let w = self.weight(p as usize, rank);
                let o = self.origin[p as usize];
                total.0 += w;
                total.1 += usize::from(o != NONE && o as usize != rank);
            }
        }
        total
    }
}

/// The weight of a sample with origin `origin` (`NONE` for none) and
/// `bytes` bytes on rank `rank`: 0 at home or without an origin, its bytes
/// without nodes, its bytes times [`INSIDE_NODE`] or [`BETWEEN_NODES`] with
/// nodes of `node` ranks. Exact (`u128`).
#[inline]
fn weighted(node: Option<usize>, origin: u32, bytes: u64, rank: usize) -> u128 {
    if origin == NONE || origin as usize == rank {
        return 0;
    }
    let bytes = u128::from(bytes);
    match node {
        None => bytes,
        Some(n) if origin as usize / n == rank / n => bytes * INSIDE_NODE,
        Some(_) => bytes * BETWEEN_NODES,
    }
}

/// The plan `slots` (each slot ascending) made local: the layout of least
/// weighted bytes moved whose exact step time is at most `(1 + tol)` times
/// that of `slots`, and that time of `slots` (`T0`).
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
    loc: Locality,
    movable: Movable,
) -> Result<(Vec<Vec<u32>>, f64), Error> {
    let t0 = exact_time(prep, cx, shape, &slots)?;
    let limit = (1.0 + loc.tolerance) * t0;
    // The relabelled plan, unless the greedy matching keeps less home
    // than `P0` as it is.
    let before = homes.cost(shape, &slots);
    let whole_ranks = movable == Movable::WholeRanks;
    let relabeled = relabel(homes, cx.sync, whole_ranks, shape, slots.clone());
    let mut base = homes.cost(shape, &relabeled);
    let relabeled = if base <= before {
        relabeled
    } else {
        base = before;
        slots
    };
    if (base.0 == 0 && base.1 == 0) || movable != Movable::Samples {
        return Ok((relabeled, t0));
    }
    // One barrier per step: each rank's samples filled from home first,
    // the rest dealt by LPT (step 2); kept when it moves fewer bytes.
    let mut best = (relabeled, base);
    if cx.sync == SyncModel::Step {
        let h = [1.0, 0.95]
            .into_iter()
            .find_map(|fill| home_first(prep, homes, shape, &best.0, loc.tolerance, fill));
        if let Some(filled) = h {
            let cost = homes.cost(shape, &filled);
            if cost < best.1 && exact_time(prep, cx, shape, &filled)? <= limit {
                best = (filled, cost);
            }
        }
    }
    for tol in [loc.tolerance, loc.tolerance / 4.0, 0.0] {
        let mut search = Search::new(prep, homes, cx.sync, shape, best.0.clone(), tol);
        search.run();
        let candidate = search.finish();
        let cost = homes.cost(shape, &candidate);
        if cost >= best.1 {
            break;
        }
        if exact_time(prep, cx, shape, &candidate)? <= limit {
            return Ok((candidate, t0));
        }
        if tol == 0.0 {
            break;
        }
    }
    Ok((best.0, t0))
}

/// Step 2 for [`SyncModel::Step`]: the ranks filled anew, home first.
/// Samples in decreasing cost go to their origin rank while its total stays
/// within `(1 + tol)` times the largest rank total of `slots` and its
/// tokens, units and images within the largest of `slots`; the others, in
/// the same order, to the least-loaded rank of their node (with nodes),
/// else of all ranks (a heap; at most 32 tried a sample), under the same
/// limits. Each rank's samples are then packed by
/// [`first_fit_decreasing`](crate::pack::first_fit_decreasing) into its
/// `A * S` sequences, in the data loader's order. `None` when a sample
/// finds no rank, a rank gets no sample or needs more sequences.
///
/// O(n log n) time, O(n + R) extra space.
fn home_first(
    prep: &Prepared,
    homes: &Homes,
    shape: Shape,
    slots: &[Vec<u32>],
    tol: f64,
    fill: f64,
) -> Option<Vec<Vec<u32>>> {
    use alloc::collections::BinaryHeap;
    use core::cmp::Reverse;

    let (ranks, per_rank, n) = (shape.ranks, shape.per_rank(), prep.len());
    let mut cost_max = 0.0f64;
    let mut size_max = [0u64; 3];
    for rank in slots.chunks(per_rank) {
        let mut c = 0.0;
        let mut size = [0u64; 3];
        for &p in rank.iter().flatten() {
            c += prep.cost(p as usize).total();
            size = add(size, prep.size(p as usize));
        }
        cost_max = cost_max.max(c);
        size_max = core::array::from_fn(|d| size_max[d].max(size[d]));
    }
    // A rank may hold up to what its sequences can (packing decides), not
    // only what the fullest rank of `slots` holds.
    let room = |d: usize| {
        let cap = prep.caps[d].saturating_mul(per_rank as u64);
        // `fill` of it, so that first-fit-decreasing has slack to pack.
        if cap == u64::MAX {
            cap
        } else {
            (cap as f64 * fill) as u64
        }
    };
    size_max = core::array::from_fn(|d| size_max[d].max(room(d)));
    let budget = cost_max * (1.0 + tol);
    let total = |p: u32| prep.cost(p as usize).total();
    // Home samples fill a rank up to the mean rank total (and half the
    // tolerance), so that the samples dealt after find room under the
    // budget.
    let mean = (0..n as u32).map(total).sum::<f64>() / ranks as f64;
    let home_limit = (mean * (1.0 + tol / 2.0)).min(budget);
    let mut order: Vec<u32> = (0..n as u32).collect();
    order.sort_unstable_by(|&a, &b| total(b).total_cmp(&total(a)).then(a.cmp(&b)));
    let mut load = vec![0.0f64; ranks];
    let mut size = vec![[0u64; 3]; ranks];
    let mut rank_of = vec![u32::MAX; n];
    let fits_under = |limit: f64, load: f64, size: [u64; 3], p: u32| {
        let s = add(size, prep.size(p as usize));
        load + total(p) <= limit && (0..3).all(|d| s[d] <= size_max[d])
    };
    let fits = |load: f64, size: [u64; 3], p: u32| fits_under(budget, load, size, p);
    let mut rest = Vec::new();
    for &p in &order {
        let o = homes.origin[p as usize];
        if o != NONE && fits_under(home_limit, load[o as usize], size[o as usize], p) {
            let o = o as usize;
            load[o] += total(p);
            size[o] = add(size[o], prep.size(p as usize));
            rank_of[p as usize] = o as u32;
        } else {
            rest.push(p);
        }
    }
    // Least-loaded first: (load bits, rank); loads are non-negative, so
    // their bits order as the values.
    let mut heap: BinaryHeap<Reverse<(u64, usize)>> = (0..ranks)
        .map(|r| Reverse((load[r].to_bits(), r)))
        .collect();
    let mut tried = Vec::with_capacity(8);
    for &p in &rest {
        let mut to = None;
        let mut from_heap = false;
        // With nodes, the least-loaded rank of the home node first.
        if let (Some(node), o) = (homes.node, homes.origin[p as usize]) {
            if o != NONE {
                let first = o as usize / node * node;
                to = (first..(first + node).min(ranks))
                    .filter(|&q| fits(load[q], size[q], p))
                    .min_by(|&a, &b| load[a].total_cmp(&load[b]).then(a.cmp(&b)));
            }
        }
        if to.is_none() {
            while tried.len() < 32 {
                let Some(Reverse((bits, q))) = heap.pop() else {
                    break;
                };
                if bits != load[q].to_bits() {
                    continue; // stale: the rank's load changed since
                }
                tried.push(q);
                if fits(load[q], size[q], p) {
                    to = Some(q);
                    from_heap = true;
                    break;
                }
            }
        }
        let q = to?;
        load[q] += total(p);
        size[q] = add(size[q], prep.size(p as usize));
        rank_of[p as usize] = q as u32;
        // Fresh entries for the ranks popped and for `q`; a stale entry
        // left in the heap is skipped when popped.
        for r in tried.drain(..) {
            heap.push(Reverse((load[r].to_bits(), r)));
        }
        if !from_heap {
            heap.push(Reverse((load[q].to_bits(), q)));
        }
    }
    // Each rank's samples in ascending position (id order), packed.
    let mut members: Vec<Vec<u32>> = vec![Vec::new(); ranks];
    for (p, &r) in rank_of.iter().enumerate() {
        members[r as usize].push(p as u32);
    }
    let mut out = vec![Vec::new(); slots.len()];
    let mut items: Vec<[u64; 3]> = Vec::new();
    for (r, list) in members.iter().enumerate() {
        if list.is_empty() {
            return None;
        }
        items.clear();
        items.extend(list.iter().map(|&p| prep.size(p as usize)));
        let packing = crate::pack::first_fit_decreasing(&items, prep.caps).ok()?;
        if packing.len() > per_rank {
            return None;
        }
        let mut seqs: Vec<Vec<u32>> = packing
            .bins()
            .map(|b| {
                let mut s: Vec<u32> = b.items().iter().map(|&i| list[i]).collect();
                s.sort_unstable();
                s
            })
            .collect();
        seqs.sort_unstable_by_key(|s| s.first().copied().unwrap_or(u32::MAX));
        for (k, s) in seqs.into_iter().enumerate() {
            out[r * per_rank + k] = s;
        }
    }
    Some(out)
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

/// Step 1: the blocks (micro-batches of one micro-step; whole ranks for
/// [`SyncModel::Step`] or with `whole_ranks`) of each column matched to
/// ranks, greedily on the bytes (then samples) that stay home. Both keep
/// the step time: a micro-step's micro-batches may run on any ranks, and
/// whole ranks may swap under every sync model. Falls back to `slots` when
/// the matching would leave a rank without samples.
///
/// O(n log n + K) time, O(n + K) extra space.
fn relabel(
    homes: &Homes,
    sync: SyncModel,
    whole_ranks: bool,
    shape: Shape,
    slots: Vec<Vec<u32>>,
) -> Vec<Vec<u32>> {
    let (ranks, steps, per_step) = (shape.ranks, shape.steps, shape.per_step);
    let whole_ranks = whole_ranks || sync == SyncModel::Step;
    // A block: `cols` columns of `ranks` blocks; block (c, r) is the
    // slots of rank r in column c, `width` consecutive slots.
    let (cols, width) = if whole_ranks {
        (1, shape.per_rank())
    } else {
        (steps, per_step)
    };
    let first_slot = |c: usize, r: usize| -> usize {
        if whole_ranks {
            r * shape.per_rank()
        } else {
            shape.micro_batch(r, c)
        }
    };
    // Edges (column, weight, block rank, origin rank), weights summed per
    // (block, origin).
    // The weights are exact `u128` sums (a run of `u64` bytes may sum
    // above `u64::MAX`, which a saturating sum would tie).
    let mut edges: Vec<(usize, u128, usize, usize, usize)> = Vec::new();
    let mut buf: Vec<(u32, u64)> = Vec::new();
    for c in 0..cols {
        for r in 0..ranks {
            let k = first_slot(c, r);
            buf.clear();
            for members in &slots[k..k + width] {
                for &p in members {
                    let o = homes.origin[p as usize];
                    if o != NONE {
                        buf.push((o, homes.bytes[p as usize]));
                    }
                }
            }
            buf.sort_unstable_by_key(|&(o, _)| o);
            for run in buf.chunk_by(|a, b| a.0 == b.0) {
                let bytes = run.iter().map(|x| u128::from(x.1)).sum();
                edges.push((c, bytes, run.len(), r, run[0].0 as usize));
            }
        }
    }
    edges.sort_unstable_by(|a, b| (a.0, b.1, b.2, a.3, a.4).cmp(&(b.0, a.1, a.2, b.3, b.4)));
    let mut to = vec![usize::MAX; cols * ranks];
    let mut taken = vec![false; ranks];
    let mut start = 0;
    for c in 0..cols {
        let end = start + edges[start..].partition_point(|e| e.0 == c);
        for &(_, _, _, r, o) in &edges[start..end] {
            if to[c * ranks + r] == usize::MAX && !taken[o] {
                to[c * ranks + r] = o;
                taken[o] = true;
            }
        }
        // The rest in ascending order.
        let mut free = (0..ranks).filter(|&q| !taken[q]);
        for r in 0..ranks {
            if to[c * ranks + r] == usize::MAX {
                to[c * ranks + r] = free.next().unwrap_or(r);
            }
        }
        taken.iter_mut().for_each(|t| *t = false);
        start = end;
    }
    let mut out: Vec<Vec<u32>> = vec![Vec::new(); slots.len()];
    let mut slots = slots;
    for c in 0..cols {
        for r in 0..ranks {
            let (from, dest) = (first_slot(c, r), first_slot(c, to[c * ranks + r]));
            for i in 0..width {
                out[dest + i] = core::mem::take(&mut slots[from + i]);
            }
        }
    }
    let empty_rank = out
        .chunks(shape.per_rank())
        .any(|rank| rank.iter().all(Vec::is_empty));
    if empty_rank {
        // Put everything back.
        for c in 0..cols {
            for r in 0..ranks {
                let (from, dest) = (first_slot(c, r), first_slot(c, to[c * ranks + r]));
                for i in 0..width {
                    slots[from + i] = core::mem::take(&mut out[dest + i]);
                }
            }
        }
        return slots;
    }
    out
}

/// What the search reads of a sample, in one place (one cache line).
#[derive(Clone, Copy)]
struct Info {
    cost: Phases,
    size: [u32; 3],
    origin: u32,
    bytes: u64,
}

/// Step 3: moves and swaps that bring samples home under per-group budgets.
struct Search<'a> {
    /// Every sample's cost, size, origin and bytes, by position.
    info: Vec<Info>,
    prep: &'a Prepared,
    homes: &'a Homes,
    sync: SyncModel,
    shape: Shape,
    slots: Vec<Vec<u32>>,
    slot_of: Vec<u32>,
    /// Tokens, units, images of every slot.
    size: Vec<[u64; 3]>,
    /// Samples of every rank (a rank is never emptied).
    count: Vec<usize>,
    /// Every rank's samples by (total cost, position).
    by_cost: Vec<Vec<(f64, u32)>>,
    /// The cost of every group (rank for Step, micro-batch otherwise).
    load: Vec<Phases>,
    /// The budget of every column (one for Step, one a micro-step
    /// otherwise); for Step and MicroStep only the total counts.
    budget: Vec<Phases>,
}

impl<'a> Search<'a> {
    fn new(
        prep: &'a Prepared,
        homes: &'a Homes,
        sync: SyncModel,
        shape: Shape,
        slots: Vec<Vec<u32>>,
        tol: f64,
    ) -> Self {
        let mut slot_of = vec![0u32; prep.len()];
        let mut size = vec![[0u64; 3]; slots.len()];
        let mut count = vec![0usize; shape.ranks];
        let groups = match sync {
            SyncModel::Step => shape.ranks,
            _ => shape.ranks * shape.steps,
        };
        let mut load = vec![Phases::ZERO; groups];
        let info = prep
            .items
            .iter()
            .enumerate()
            .map(|(p, e)| Info {
                cost: e.cost,
                size: e.sizes,
                origin: homes.origin[p],
                bytes: homes.bytes[p],
            })
            .collect();
        let mut search = Search {
            info,
            prep,
            homes,
            sync,
            shape,
            slots: Vec::new(),
            slot_of: Vec::new(),
            size: Vec::new(),
            count: Vec::new(),
            by_cost: Vec::new(),
            load: Vec::new(),
            budget: Vec::new(),
        };
        for (k, members) in slots.iter().enumerate() {
            let g = search.group(k);
            for &p in members {
                slot_of[p as usize] = k as u32;
                let s = prep.size(p as usize);
                for d in 0..3 {
                    size[k][d] += s[d];
                }
                load[g] += prep.cost(p as usize);
                count[k / shape.per_rank()] += 1;
            }
        }
        let cols = match sync {
            SyncModel::Step => 1,
            _ => shape.steps,
        };
        let mut budget = vec![Phases::ZERO; cols];
        for (g, &l) in load.iter().enumerate() {
            let b = &mut budget[search.column(g)];
            *b = match sync {
                SyncModel::Phase => b.max(l),
                _ => Phases::new(0.0, b.total().max(l.total())),
            };
        }
        for b in &mut budget {
            *b = Phases::new(b.vision * (1.0 + tol), b.language * (1.0 + tol));
        }
        let mut by_cost = vec![Vec::new(); shape.ranks];
        for (rank, list) in by_cost.iter_mut().enumerate() {
            for members in &slots[rank * shape.per_rank()..(rank + 1) * shape.per_rank()] {
                list.extend(members.iter().map(|&p| (prep.cost(p as usize).total(), p)));
            }
            list.sort_unstable_by(|x, y| x.0.total_cmp(&y.0).then(x.1.cmp(&y.1)));
        }
        search.by_cost = by_cost;
        search.slots = slots;
        search.slot_of = slot_of;
        search.size = size;
        search.count = count;
        search.load = load;
        search.budget = budget;
        search
    }

    /// The group of slot `k`.
    #[inline]
    fn group(&self, k: usize) -> usize {
        match self.sync {
            SyncModel::Step => k / self.shape.per_rank(),
            _ => k / self.shape.per_step,
        }
    }

    /// The budget column of group `g`.
    #[inline]
    fn column(&self, g: usize) -> usize {
        match self.sync {
            SyncModel::Step => 0,
            _ => g % self.shape.steps,
        }
    }

    /// The room group `g` would have left with load `l` (negative: over
    /// budget).
    #[inline]
    fn room(&self, g: usize, l: Phases) -> f64 {
        let b = self.budget[self.column(g)];
        match self.sync {
            SyncModel::Phase => f64::min(b.vision - l.vision, b.language - l.language),
            _ => b.total() - l.total(),
        }
    }

    /// Whether slot `k` holding `size` fits the caps.
    #[inline]
    fn fits(&self, size: [u64; 3]) -> bool {
        (0..3).all(|d| size[d] <= self.prep.caps[d])
    }

    /// Two passes over the samples away from home, by decreasing bytes.
    fn run(&mut self) {
        let mut order: Vec<u32> = (0..self.prep.len() as u32)
            .filter(|&p| self.homes.origin[p as usize] != NONE)
            .collect();
        order.sort_unstable_by_key(|&p| (core::cmp::Reverse(self.homes.bytes[p as usize]), p));
        for _ in 0..2 {
            let before = order.len();
            // Those that did not move are tried once more.
            order.retain(|&p| !self.bring_home(p as usize));
            if order.len() == before {
                break;
            }
        }
    }

    /// The best change bringing `p` home (or nearer), applied; whether
    /// there was one. Weighs plain moves into the first `MOVES` slots of
    /// each candidate rank and swaps with the `WINDOW` samples there of
    /// nearest cost.
    fn bring_home(&mut self, p: usize) -> bool {
        let a = self.slot_of[p] as usize;
        let per_rank = self.shape.per_rank();
        let r = a / per_rank;
        let here = self.homes.weight(p, r);
        if here == 0 {
            return false;
        }
        let o = self.homes.origin[p] as usize;
        let ga = self.group(a);
        let (cp, sp) = (self.prep.cost(p), self.prep.size(p));
        let node = self.homes.node.unwrap_or(1);
        let first = o / node * node;
        let mates =
            (first..first.saturating_add(node).min(self.shape.ranks)).filter(move |&q| q != o);
        // (gain, room, slot, partner or NONE)
        let mut best: Option<(u128, f64, usize, u32)> = None;
        let mut better = |gain: u128, room: f64, b: usize, t: u32| {
            if best.map_or(true, |x| (gain, room) > (x.0, x.1)) {
                best = Some((gain, room, b, t));
            }
        };
        let mut budget = CANDIDATES;
        for q in core::iter::once(o).chain(mates) {
            if q == r || budget == 0 {
                continue;
            }
            let there = self.homes.weight(p, q);
            if there >= here {
                continue;
            }
            // Plain moves, unless they empty rank r.
            if self.count[r] > 1 {
                for b in (q * per_rank..(q + 1) * per_rank).take(MOVES.min(budget)) {
                    budget -= 1;
                    let gb = self.group(b);
                    if self.fits(add(self.size[b], sp)) {
                        let rb = self.room(gb, self.load[gb] + cp);
                        if rb >= 0.0 {
                            let ra = self.room(ga, sub(self.load[ga], cp));
                            better(here - there, rb.min(ra), b, NONE);
                        }
                    }
                }
            }
            // Swaps with the samples of nearest cost.
            let list = &self.by_cost[q];
            let key = cp.total();
            let mid = list.partition_point(|e| e.0 < key);
            let (mut lo, mut hi) = (mid, mid);
            let mut window = WINDOW.min(budget);
            while window > 0 && (lo > 0 || hi < list.len()) {
                window -= 1;
                budget -= 1;
                let below = lo.checked_sub(1).map(|i| key - list[i].0);
                let above = list.get(hi).map(|e| e.0 - key);
                let i = match (below, above) {
                    (Some(x), Some(y)) if x <= y => {
                        lo -= 1;
                        lo
                    }
                    (Some(_), None) => {
                        lo -= 1;
                        lo
                    }
                    _ => {
                        hi += 1;
                        hi - 1
                    }
                };
                let t = list[i].1 as usize;
                let it = self.info[t];
                let before = here + self.homes.weight_of(&it, q);
                let after = there + self.homes.weight_of(&it, r);
                if after >= before {
                    continue;
                }
                let b = self.slot_of[t] as usize;
                let gb = self.group(b);
                let (ct, st) = (it.cost, it.size.map(u64::from));
                if after >= before {
                    continue;
                }
                if !(self.fits(sub3(add(self.size[b], sp), st))
                    && self.fits(sub3(add(self.size[a], st), sp)))
                {
                    continue;
                }
                let rb = self.room(gb, sub(self.load[gb] + cp, ct));
                let ra = self.room(ga, sub(self.load[ga] + ct, cp));
                if rb >= 0.0 && ra >= 0.0 {
                    better(before - after, rb.min(ra), b, t as u32);
                    if before - after >= here - there {
                        // The nearest feasible cost: the most room of
                        // the swaps that save as much.
                        break;
                    }
                }
            }
        }
        let Some((_, _, b, t)) = best else {
            return false;
        };
        self.shift(p, a, b);
        if t != NONE {
            self.shift(t as usize, b, a);
        }
        true
    }

    /// Moves sample `p` from slot `a` to slot `b`.
    fn shift(&mut self, p: usize, a: usize, b: usize) {
        if let Some(i) = self.slots[a].iter().position(|&x| x as usize == p) {
            self.slots[a].swap_remove(i);
        }
        self.slots[b].push(p as u32);
        self.slot_of[p] = b as u32;
        let (c, s) = (self.prep.cost(p), self.prep.size(p));
        self.size[a] = sub3(self.size[a], s);
        self.size[b] = add(self.size[b], s);
        let (ga, gb) = (self.group(a), self.group(b));
        self.load[ga] = sub(self.load[ga], c);
        self.load[gb] += c;
        let per_rank = self.shape.per_rank();
        let (ra, rb) = (a / per_rank, b / per_rank);
        self.count[ra] -= 1;
        self.count[rb] += 1;
        let key = (c.total(), p as u32);
        let order = |x: &(f64, u32)| x.0.total_cmp(&key.0).then(x.1.cmp(&key.1));
        if let Ok(i) = self.by_cost[ra].binary_search_by(order) {
            self.by_cost[ra].remove(i);
        }
        let i = self.by_cost[rb]
            .binary_search_by(order)
            .unwrap_or_else(|i| i);
        self.by_cost[rb].insert(i, key);
    }

    /// The layout: every slot ascending; for [`SyncModel::Step`] each
    /// rank's sequences in the data loader's order again.
    fn finish(self) -> Vec<Vec<u32>> {
        let mut slots = self.slots;
        for s in &mut slots {
            s.sort_unstable();
        }
        if self.sync == SyncModel::Step {
            for rank in slots.chunks_mut(self.shape.per_rank()) {
                rank.sort_by_key(|s| s.first().copied().unwrap_or(u32::MAX));
            }
        }
        slots
    }
}

#[inline]
fn add(a: [u64; 3], b: [u64; 3]) -> [u64; 3] {
    [
        a[0].saturating_add(b[0]),
        a[1].saturating_add(b[1]),
        a[2].saturating_add(b[2]),
    ]
}

#[inline]
fn sub3(a: [u64; 3], b: [u64; 3]) -> [u64; 3] {
    [
        a[0].saturating_sub(b[0]),
        a[1].saturating_sub(b[1]),
        a[2].saturating_sub(b[2]),
    ]
}

#[inline]
fn sub(a: Phases, b: Phases) -> Phases {
    Phases::new(a.vision - b.vision, a.language - b.language)
}

/// [`Error::Invalid`] at an [origin](crate::Locator::Origin) for the sample of
/// smallest id whose origin is not below `ranks`; else [`Error::BytesOverflow`]
/// for the sample (in id order) at which the bytes of the samples with an
/// origin sum beyond `u64::MAX`. Past this check every sum of those bytes (the
/// exchange's traffic, per rank, between nodes, in all) is exact in `u64`.
/// O(n).
pub(crate) fn check_origins<M>(
    prep: &Prepared,
    cx: &Context<'_, M>,
    ranks: usize,
) -> Result<(), Error> {
    for e in &prep.items {
        if let Some(o) = cx.samples[e.input as usize].origin() {
            if o >= ranks {
                return Err(Error::Invalid {
                    at: Locator::Origin { id: e.id, ranks },
                    value: Scalar::Int(o as u64),
                    reason: InvalidReason::NotARank,
                });
            }
        }
    }
    let mut total = 0u64;
    for e in &prep.items {
        let s = &cx.samples[e.input as usize];
        if s.origin().is_some() {
            total = total
                .checked_add(s.bytes())
                .ok_or(Error::BytesOverflow { id: e.id })?;
        }
    }
    Ok(())
}

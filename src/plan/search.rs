//! Search stage: the binding micro-batch of the worst barrier trades places with another micro-batch of its rank, then one sample (a move or a swap) with a partner found in a global cost index or among samples of its size, in any micro-step, while the exact predicted step time drops.
//!
//! The refinement (`refine`) balances each micro-step on its own. Under
//! per-micro-step barriers the step time is `sum_j sum_p max_r p(r, j)`
//! (phases `p` for [`SyncModel::Phase`], the total for
//! [`SyncModel::MicroStep`]), and its excess over `sum_p P / R` is exactly
//! `sum_j sum_p (max_r p(r, j) - mean_r p(r, j))`: every micro-step must
//! be balanced across ranks in every barrier at once, while micro-steps may
//! differ freely. This stage drives the barriers' maxima toward their means
//! with partners from *any* micro-step.
//!
//! The barriers `(j, p)` wait in a max-heap keyed by their excess `max -
//! mean` (ties to the lower micro-step, then barrier). The worst one's
//! binding micro-batch `x` (its largest in `p`, with excess `e` and gap `g`
//! to the second largest) weighs, for each of its samples `a` and each
//! transfer `t` in `{e, e / 2, g}`:
//!
//! - the [`SEARCH_WINDOW`] samples `b` on each side of `p_a - t` in the samples
//!   sorted once by their cost in `p`: the swap of `a` and `b`, and the move
//!   of `a` alone into `b`'s sequence;
//! - the [`SEARCH_BUCKET_WINDOW`] samples `b` on each side of `p_a - t` in `a`'s
//!   size bucket and the two next to it (the samples cut by token count
//!   into buckets of [`SEARCH_BUCKET`], each sorted by cost in `p`): the swap of `a`
//!   and `b`. Sequences are nearly full, so a swap fits only where `b` is
//!   about `a`'s size, which a window of the global index rarely holds
//!   (most of its candidates fail a cap): the buckets find the swaps that
//!   fit (their effect is in `BENCHMARKS.md`);
//! - the moves of `a` into the two least loaded micro-batches, in each
//!   barrier, of `x`'s micro-step and of the [`SEARCH_SINKS`] other micro-steps
//!   whose barriers exceed their means most (room under a maximum that a
//!   single large sample sets costs nothing to fill; O(A) to find them).
//!
//! Before those, a round of *trades*: the binding micro-batch trades places
//! with each other micro-batch of its rank, the `A - 1` of them weighed
//! (whole micro-batches change micro-steps, so no cap is at stake; none
//! that holds a pinned position). A micro-batch that sets its micro-step's
//! maximum, often around a sample much longer than most, goes where a
//! still longer sample sets the maximum. The trades run in a round of
//! their own, not weighed with the samples' changes, which fill the room
//! more finely.
//!
//! (The costs never change; sample -> sequence -> micro-batch maps are kept
//! up to date.) Every sequence keeps its length and caps; pinned positions
//! never move. A change's effect on the step time is exact in O(1): per
//! micro-step and barrier the largest micro-batches are kept (rescanned in
//! O(R) when changes have taken most of them out), so the new maxima are
//! known whichever two micro-batches change.
//!
//! A change is taken if it lowers the step time (by more than a relative
//! `1e-9`), or if it raises no barrier's maximum, takes `x` strictly below
//! its barrier's maximum, and lifts no other micro-batch to within that
//! tolerance of its barrier's maximum (so the number of micro-batches at a
//! maximum drops: no cycle); of those, the one that lowers the step time
//! most, then the sum of squares of the two micro-batches' values most
//! (the first good enough one ends the scan: the step time down by the gap
//! and `x` at most `mean + 3 e / 4`). A barrier
//! with no such change waits until a change touches its micro-step again.
//! Every taken change pushes the barriers of the one or two micro-steps it
//! touched again; the round of samples starts with every barrier pushed
//! again.
//!
//! Deterministic: fixed orders, ties to the first found; the budget is
//! counted work, not time: at most `effort * max(n + K, 65536)` units (a
//! candidate weighed, a binary search, `R` for each rescan) for n samples
//! in K sequences ([`Planner::search_effort`](crate::plan::Planner::search_effort),
//! default [`EFFORT`](super::tuning::EFFORT)).
//!
//! O(n log n + min(changes * (s * (log n + SEARCH_WINDOW + SEARCH_BUCKET_WINDOW) + R +
//! A), effort * max(n + K, 65536))) time for n samples, at most `s` a
//! micro-batch, R ranks, A micro-steps (a trade weighs `A - 1` candidates
//! and moves the members of two micro-batches); O(n + K + R * A) extra
//! space (the two indexes: four arrays of n).

use alloc::collections::BinaryHeap;
use alloc::vec;
use alloc::vec::Vec;
use core::cell::Cell;
use core::cmp::Reverse;
use core::ops::ControlFlow;

use super::deal::Sequences;
use super::shape::Shape;
use super::sync::SyncModel;
use super::tuning::{
    SEARCH_BLOCK, SEARCH_BUCKET, SEARCH_BUCKET_WINDOW, SEARCH_KEPT, SEARCH_MIN_SIZE, SEARCH_RUN,
    SEARCH_SINKS, SEARCH_WINDOW,
};
use super::work::{self, barrier, swap_fits, Stage, Trade};
use crate::cost::Phases;
use crate::num::{from_order_bits, order_bits};

/// The first index of `index`, sorted by `key`, whose key is not below
/// `target`, `coarse` holding every [`SEARCH_BLOCK`]-th key: a binary search in
/// `coarse`, then one in a block that reads `key` of log2 [`SEARCH_BLOCK`]
/// entries: no array of every entry's key is kept, only the positions.
fn lower(index: &[u32], coarse: &[f64], target: f64, key: impl Fn(u32) -> f64) -> usize {
    let c = coarse.partition_point(|&v| v < target);
    if c == 0 {
        return 0;
    }
    let lo = (c - 1) * SEARCH_BLOCK;
    let hi = (c * SEARCH_BLOCK).min(index.len());
    lo + index[lo..hi].partition_point(|&p| key(p) < target)
}

/// The first index of `list` whose entry is not `below`, for `below` true
/// on a prefix of `list` only (as [`slice::partition_point`]): `below` is
/// asked of the last entry of every run of [`SEARCH_RUN`], then of every entry of
/// the one run that holds the answer, so that each round's reads are
/// independent (each a cache miss through a position on large batches)
/// and overlap, where a binary search waits for each read before the next.
/// O(len / SEARCH_RUN + SEARCH_RUN) evaluations, in two rounds.
fn lower_in(list: &[u32], below: impl Fn(u32) -> bool) -> usize {
    debug_assert!(list.len() <= SEARCH_BUCKET);
    let runs = list.len().div_ceil(SEARCH_RUN);
    let mut last = [false; SEARCH_BUCKET / SEARCH_RUN];
    for (r, flag) in last.iter_mut().enumerate().take(runs) {
        *flag = below(list[((r + 1) * SEARCH_RUN).min(list.len()) - 1]);
    }
    let Some(r) = last.iter().take(runs).position(|&f| !f) else {
        return list.len();
    };
    let run = &list[r * SEARCH_RUN..((r + 1) * SEARCH_RUN).min(list.len())];
    let mut each = [false; SEARCH_RUN];
    for (flag, &p) in each.iter_mut().zip(run) {
        *flag = below(p);
    }
    r * SEARCH_RUN
        + each
            .iter()
            .take(run.len())
            .position(|&f| !f)
            .unwrap_or(run.len())
}

/// A change smaller than this fraction of the step time is no change.
const TOLERANCE: f64 = 1e-9;

/// No micro-batch's position.
const NONE: u32 = u32::MAX;

/// The changes a round of the search weighs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Moves {
    /// The binding micro-batch trades places with another of its rank.
    Trades,
    /// One sample of the binding micro-batch moves, or two samples swap.
    Samples,
}

/// A change: sample `a` (index in sequence `bx` of micro-batch `x`) to
/// sequence `by` of micro-batch `y`, and sample `b` (a position, found in
/// `by` only when the change is applied) back if a swap; with `bx` and
/// `by` [`NONE`], micro-batches `x` and `y` (of one rank) trade places
/// whole.
#[derive(Clone, Copy)]
struct Cand {
    x: usize,
    bx: u32,
    a: usize,
    y: usize,
    by: u32,
    b: Option<u32>,
}

/// A change weighed: what it does to the step time (`delta`), the cost
/// `dc` that `x` gives `y`, and the change of the sum of squares of the
/// two micro-batches' values (`spread`).
#[derive(Clone, Copy)]
struct Change {
    c: Cand,
    delta: f64,
    dc: Phases,
    spread: f64,
}

/// The barrier a hunt improves: its binding micro-batch `x`, its index
/// `i`, the value `limit` of `x` in it, and the tolerance of the step time.
#[derive(Clone, Copy)]
struct Aim {
    x: usize,
    i: usize,
    limit: f64,
    tol: f64,
}

/// Micro-step `rows[0]` and its sinks, `rows[..len]`.
struct Sinks {
    rows: [usize; 1 + SEARCH_SINKS],
    len: usize,
}

/// What the hunt for one barrier's change weighs: the aim, the transfers
/// sought, the micro-steps whose least loaded micro-batches take moves,
/// and the change that ends it (the step time down by `enough.0`, `x` at
/// most `enough.1`).
struct Hunt {
    aim: Aim,
    transfers: [f64; 3],
    rows: Sinks,
    enough: (f64, f64),
}

impl Hunt {
    /// The transfers above the tolerance, each once in a row.
    fn distinct_transfers(&self) -> impl Iterator<Item = f64> + '_ {
        let t = &self.transfers;
        (0..t.len())
            .filter(move |&k| !(t[k] <= self.aim.tol || (k > 0 && t[k] == t[k - 1])))
            .map(move |k| t[k])
    }
}

/// A sample of the binding micro-batch `x` weighed out: its sequence `bx`,
/// its index `ia` there, its position, cost and sizes, and the sequence's
/// load.
struct Out {
    x: usize,
    bx: u32,
    ia: usize,
    pa: u32,
    ca: Phases,
    sa: [u64; 3],
    lx: [u64; 3],
}

impl Out {
    /// This sample to sequence `by` of micro-batch `y`, `b` back if a swap.
    #[inline]
    fn to(&self, y: usize, by: u32, b: Option<u32>) -> Cand {
        Cand {
            x: self.x,
            bx: self.bx,
            a: self.ia,
            y,
            by,
            b,
        }
    }
}

/// A candidate partner as [`Search::locate`] reads it: its sequence, the
/// sequence's micro-batch and load, its cost and sizes.
#[derive(Clone, Copy)]
struct Near {
    by: u32,
    y: usize,
    ly: [u64; 3],
    cb: Phases,
    sb: [u64; 3],
}

/// An entry of a micro-step's ranking: (value, micro-batch).
type Ranked = (f64, u32);

/// The largest values of a micro-step in a barrier, descending (ties by
/// micro-batch), and `floor`: no micro-batch left out is above it.
#[derive(Clone, Default)]
struct Extremes {
    list: Vec<Ranked>,
    floor: f64,
}

impl Extremes {
    /// Micro-batch `m` now has value `v`; `false` when fewer than `need`
    /// are left known (a rescan is due).
    fn set(&mut self, m: u32, v: f64, need: usize) -> bool {
        if let Some(at) = self.list.iter().position(|e| e.1 == m) {
            self.list.remove(at);
        }
        if v > self.floor {
            let at = self
                .list
                .partition_point(|e| e.0 > v || (e.0 == v && e.1 < m));
            self.list.insert(at, (v, m));
            if self.list.len() > SEARCH_KEPT {
                if let Some(out) = self.list.pop() {
                    self.floor = self.floor.max(out.0);
                }
            }
        }
        self.list.len() >= need
    }

    /// The `N` largest, padded with `(pad, NONE)`, each `sign`ed.
    fn first<const N: usize>(&self, sign: f64) -> [Ranked; N] {
        let mut out = [(sign * f64::NEG_INFINITY, NONE); N];
        for (o, e) in out.iter_mut().zip(&self.list) {
            *o = (sign * e.0, e.1);
        }
        out
    }
}

/// Where micro-batch `m` (`rank * A + micro-step`) lies in the search's
/// costs: micro-step major (`micro-step * R + rank`), so that a rescan of
/// one micro-step reads one run.
#[inline]
fn step_major(shape: Shape, m: usize) -> usize {
    m % shape.steps * shape.ranks + m / shape.steps
}

/// Puts `e` in `list`, the [`SEARCH_KEPT`] + 1 first entries seen of a ranking
/// (descending value, ties by micro-batch), kept in that order.
#[inline]
fn keep(list: &mut Vec<Ranked>, e: Ranked) {
    // (`f64::total_cmp`, as every ranking of the search.)
    let before = |a: &Ranked, b: &Ranked| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)).is_lt();
    if list.len() > SEARCH_KEPT {
        match list.last() {
            // Most values of a rescan: below the last kept, told by one
            // comparison (`<` implies `total_cmp`'s order for numbers;
            // equal values and NaN go on to the full comparison).
            Some(last) if e.0 < last.0 => return,
            Some(last) if before(&e, last) => {
                list.pop();
            }
            _ => return,
        }
    }
    let at = list.partition_point(|x| before(x, &e));
    list.insert(at, e);
}

/// A heap entry: (excess bits, micro-step, barrier index, version).
type Entry = (u64, Reverse<u32>, Reverse<u8>, u32);

/// The search's state, `B` the barriers of its sync model ([`barrier`]).
struct Search<'a, const B: usize> {
    stage: Stage<'a>,
    /// The cost of every micro-batch `r * A + j`, at `j * R + r` (see
    /// [`Search::at`]).
    cost: Vec<Phases>,
    /// Per micro-step and barrier index, the three largest micro-batches
    /// (descending), the two smallest (ascending), and the sum.
    top: Vec<[[Ranked; 3]; 2]>,
    low: Vec<[[Ranked; 2]; 2]>,
    sum: Vec<[f64; 2]>,
    /// Per micro-step and barrier index, the [`SEARCH_KEPT`] largest values and
    /// the [`SEARCH_KEPT`] smallest (negated), which the rankings are read from.
    high: Vec<[Extremes; 2]>,
    least: Vec<[Extremes; 2]>,
    /// Scratch for rescans: the largest and the smallest (negated), and
    /// the values.
    scratch: [Vec<Ranked>; 2],
    values: Vec<f64>,
    /// Per micro-step, bumped on every change that touches it.
    version: Vec<u32>,
    /// Per micro-step and barrier index, the binding micro-batch and its
    /// value when no change was found for it (pushed again only once
    /// either changes).
    stuck: Vec<[Ranked; 2]>,
    /// The sequence of every position, the micro-batch of every sequence.
    seq_of: Vec<u32>,
    batch_of: Vec<u32>,
    /// Per barrier index, the unpinned positions by cost in that barrier
    /// (ties by position).
    index: [Vec<u32>; 2],
    /// The cost of every [`SEARCH_BLOCK`]-th of them: the binary searches start in
    /// this small array, which stays in cache, and end in one block of
    /// `index`, reading its samples' costs ([`lower`]).
    coarse: [Vec<f64>; 2],
    /// Per barrier index, the same positions cut by token count into
    /// buckets of [`SEARCH_BUCKET`] (ties by position), each bucket by cost in
    /// that barrier (ties by position): the swap partners of about a
    /// sample's size, which fit sequences that are full.
    bucketed: [Vec<u32>; 2],
    /// The token count of each bucket's first position.
    bounds: Vec<u64>,
    /// Work left.
    left: Cell<u64>,
}

/// The sequences `seqs` after the search in the stage's deal (see the
/// module docs; unchanged for [`SyncModel::Step`]), within a budget of
/// `effort * max(n + K, 65536)` units (`0`: nothing is done): members and
/// loads are kept up to date, the costs are not read; pinned positions
/// never move.
pub(crate) fn search(stage: &Stage<'_>, seqs: Sequences, effort: u32) -> Sequences {
    let Stage {
        prep, sync, shape, ..
    } = *stage;
    let size = (prep.len() as u64 + seqs.members.len() as u64).max(SEARCH_MIN_SIZE);
    let left = size.saturating_mul(u64::from(effort));
    if sync == SyncModel::Step || left == 0 || shape.ranks < 2 || shape.steps == 0 {
        return seqs;
    }
    match sync {
        SyncModel::Phase => searched::<2>(stage, seqs, left),
        _ => searched::<1>(stage, seqs, left),
    }
}

/// [`search`] with the `B` barriers of the stage's sync model known and a
/// budget of `left` units.
fn searched<const B: usize>(stage: &Stage<'_>, mut seqs: Sequences, left: u64) -> Sequences {
    let Stage {
        prep, shape, slots, ..
    } = *stage;
    let n = prep.len();
    let nm = shape.ranks * shape.steps;
    let mut cost = vec![Phases::ZERO; nm];
    let mut seq_of = vec![NONE; n];
    let mut batch_of = vec![NONE; seqs.members.len()];
    for m in 0..nm {
        let c = &mut cost[step_major(shape, m)];
        let first = m * shape.per_step;
        for &b in &slots[first..first + shape.per_step] {
            batch_of[b as usize] = m as u32;
            for &p in &seqs.members[b as usize] {
                *c += prep.cost(p as usize);
                seq_of[p as usize] = b;
            }
        }
    }
    let mut index: [Vec<u32>; 2] = [Vec::new(), Vec::new()];
    let mut coarse: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for i in 0..B {
        // The movable samples by cost in barrier `i` (`f64::total_cmp`), then
        // position: each key sorted beside its position, so that the sort
        // reads no sample (read through the positions, each comparison
        // was two cache misses on large batches).
        let list = sort_keyed(
            (0..n as u32)
                .filter(|&p| !stage.pinned(p) && seq_of[p as usize] != NONE)
                .map(|p| (order_bits(barrier::<B>(i, prep.cost(p as usize))), p)),
        );
        coarse[i] = list
            .iter()
            .step_by(SEARCH_BLOCK)
            .map(|e| from_order_bits(key_of(e)))
            .collect();
        index[i] = positions_of(list);
    }
    let tokens = |p: u32| prep.size(p as usize)[0];
    let (by_size, bounds) = by_size(&index[0], tokens);
    let mut bucketed: [Vec<u32>; 2] = [Vec::new(), Vec::new()];
    for (i, list) in bucketed.iter_mut().enumerate().take(B) {
        *list = by_cost_in_buckets(by_size.clone(), |p| barrier::<B>(i, prep.cost(p as usize)));
    }
    drop(by_size);
    let mut s = Search::<B> {
        stage: *stage,
        cost,
        top: vec![[[(0.0, NONE); 3]; 2]; shape.steps],
        low: vec![[[(0.0, NONE); 2]; 2]; shape.steps],
        sum: vec![[0.0; 2]; shape.steps],
        high: vec![[Extremes::default(), Extremes::default()]; shape.steps],
        least: vec![[Extremes::default(), Extremes::default()]; shape.steps],
        scratch: [
            Vec::with_capacity(SEARCH_KEPT + 1),
            Vec::with_capacity(SEARCH_KEPT + 1),
        ],
        values: Vec::with_capacity(shape.ranks),
        version: vec![0; shape.steps],
        stuck: vec![[(f64::NAN, NONE); 2]; shape.steps],
        seq_of,
        batch_of,
        index,
        coarse,
        bucketed,
        bounds,
        left: Cell::new(left),
    };
    for j in 0..shape.steps {
        for i in 0..B {
            s.rescan(j, i);
        }
    }
    s.run(&mut seqs);
    seqs
}

/// `positions` by `size` (ties by position), and the size of every
/// [`SEARCH_BUCKET`]-th: the buckets' first sizes. Each size is read once and
/// sorted beside its position. O(n log n) time.
fn by_size(positions: &[u32], size: impl Fn(u32) -> u64) -> (Vec<u32>, Vec<u64>) {
    let list = sort_keyed(positions.iter().map(|&p| (size(p), p)));
    let bounds = list.iter().step_by(SEARCH_BUCKET).map(key_of).collect();
    (positions_of(list), bounds)
}

/// The `(key, position)` pairs sorted by key, then position, each held in
/// three `u32`s: 12 bytes, where a `(u64, u32)` takes 16 with its padding
/// (these lists are at the search's peak of memory). O(n log n) time.
fn sort_keyed(pairs: impl Iterator<Item = (u64, u32)>) -> Vec<[u32; 3]> {
    let mut list: Vec<[u32; 3]> = pairs
        .map(|(k, p)| [(k >> 32) as u32, k as u32, p])
        .collect();
    // Arrays order element by element: (high half, low half, position).
    list.sort_unstable();
    list
}

/// The key of an entry of [`sort_keyed`].
#[inline]
fn key_of(e: &[u32; 3]) -> u64 {
    u64::from(e[0]) << 32 | u64::from(e[1])
}

/// The positions of a list of [`sort_keyed`], in order, written over its
/// own allocation (no second list of n). O(n) time.
fn positions_of(list: Vec<[u32; 3]>) -> Vec<u32> {
    let n = list.len();
    let mut flat = list.into_flattened();
    for i in 0..n {
        flat[i] = flat[3 * i + 2];
    }
    flat.truncate(n);
    flat.shrink_to_fit();
    flat
}

/// `list` with each bucket of [`SEARCH_BUCKET`] sorted by `cost`
/// (`f64::total_cmp`, ties by position); each cost read once and sorted
/// beside its position. O(n log SEARCH_BUCKET) time.
fn by_cost_in_buckets(mut list: Vec<u32>, cost: impl Fn(u32) -> f64) -> Vec<u32> {
    let mut keyed: Vec<(u64, u32)> = Vec::with_capacity(SEARCH_BUCKET.min(list.len()));
    for bucket in list.chunks_mut(SEARCH_BUCKET) {
        keyed.clear();
        keyed.extend(bucket.iter().map(|&p| (order_bits(cost(p)), p)));
        keyed.sort_unstable();
        for (slot, &(_, p)) in bucket.iter_mut().zip(&keyed) {
            *slot = p;
        }
    }
    list
}

impl<const B: usize> Search<'_, B> {
    /// The micro-step of micro-batch `m`.
    #[inline]
    fn step(&self, m: usize) -> usize {
        m % self.stage.shape.steps
    }

    /// Where micro-batch `m` lies in `cost` ([`step_major`]).
    #[inline]
    fn at(&self, m: usize) -> usize {
        step_major(self.stage.shape, m)
    }

    /// Spends `units` of work; `false` when the budget does not hold them.
    #[inline]
    fn spend(&self, units: u64) -> bool {
        work::spend(&self.left, units)
    }

    /// The step time: the sum over micro-steps and barriers of the maxima.
    fn objective(&self) -> f64 {
        (0..self.stage.shape.steps)
            .map(|j| (0..B).map(|i| self.top[j][i][0].0).sum::<f64>())
            .sum()
    }

    /// Barrier `i` of micro-step `j`'s excess of its maximum over its mean.
    #[inline]
    fn excess(&self, j: usize, i: usize) -> f64 {
        let e = self.top[j][i][0].0 - self.sum[j][i] / self.stage.shape.ranks as f64;
        if e > 0.0 {
            e
        } else {
            0.0
        }
    }

    /// Recomputes barrier `i` of micro-step `j`: its extremes and sum, in
    /// O(R * SEARCH_KEPT) time at worst, O(R + SEARCH_KEPT^2 log R) for values in no
    /// particular order: one pass, which keeps the [`SEARCH_KEPT`] + 1 first of
    /// each ranking seen so far, so that after the first few hundred ranks
    /// a value is one comparison with the last of them: the values are
    /// read once.
    fn rescan(&mut self, j: usize, i: usize) {
        let (steps, ranks) = (self.stage.shape.steps, self.stage.shape.ranks);
        self.spend(ranks as u64);
        let ([high, least], values) = (&mut self.scratch, &mut self.values);
        high.clear();
        least.clear();
        values.clear();
        for r in 0..ranks {
            let m = r * steps + j;
            let v = barrier::<B>(i, self.cost[step_major(self.stage.shape, m)]);
            values.push(v);
            keep(high, (v, m as u32));
            keep(least, (-v, m as u32));
        }
        // (Summed as before, in rank order, from the values read once.)
        let sum: f64 = values.iter().sum();
        for (k, list) in [&*high, &*least].into_iter().enumerate() {
            let e = Extremes {
                list: list[..list.len().min(SEARCH_KEPT)].to_vec(),
                floor: list.get(SEARCH_KEPT).map_or(f64::NEG_INFINITY, |e| e.0),
            };
            if k == 0 {
                self.high[j][i] = e;
            } else {
                self.least[j][i] = e;
            }
        }
        self.sum[j][i] = sum;
        self.top[j][i] = self.high[j][i].first(1.0);
        self.low[j][i] = self.least[j][i].first(-1.0);
    }

    /// Micro-batch `m` changes from cost `old` to its cost now.
    fn update(&mut self, m: usize, old: Phases) {
        let j = self.step(m);
        let new = self.cost[self.at(m)];
        let ranks = self.stage.shape.ranks;
        for i in 0..B {
            let v = barrier::<B>(i, new);
            self.sum[j][i] += v - barrier::<B>(i, old);
            self.spend(2 * SEARCH_KEPT as u64);
            let high = self.high[j][i].set(m as u32, v, ranks.min(3));
            let least = self.least[j][i].set(m as u32, -v, ranks.min(2));
            if high && least {
                self.top[j][i] = self.high[j][i].first(1.0);
                self.low[j][i] = self.least[j][i].first(-1.0);
            } else {
                self.rescan(j, i);
            }
        }
    }

    /// The maximum of barrier `i` in micro-step `j` once micro-batches
    /// `changed` (in any micro-step) take the given costs.
    #[inline]
    fn new_max(&self, j: usize, i: usize, changed: [(usize, Phases); 2]) -> f64 {
        let mut best = self.top[j][i]
            .iter()
            .find(|e| e.1 != NONE && changed.iter().all(|c| c.0 as u32 != e.1))
            .map_or(0.0, |e| e.0);
        for &(m, c) in &changed {
            if self.step(m) == j {
                best = best.max(barrier::<B>(i, c));
            }
        }
        best
    }

    /// The change of the step time when `x` gives `dc` to `y`.
    fn delta(&self, x: usize, y: usize, dc: Phases) -> f64 {
        let changed = [
            (x, self.cost[self.at(x)] - dc),
            (y, self.cost[self.at(y)] + dc),
        ];
        let (jx, jy) = (self.step(x), self.step(y));
        let mut delta = 0.0;
        for i in 0..B {
            delta += self.new_max(jx, i, changed) - self.top[jx][i][0].0;
            if jy != jx {
                delta += self.new_max(jy, i, changed) - self.top[jy][i][0].0;
            }
        }
        delta
    }

    /// Whether `x` giving `dc` to `y` takes `x` strictly below the aim's
    /// limit in its barrier while every value it raises stays strictly
    /// below its barrier's maximum.
    fn level(&self, x: usize, y: usize, dc: Phases, aim: Aim) -> bool {
        let tol = aim.tol;
        let nx = self.cost[self.at(x)] - dc;
        if barrier::<B>(aim.i, nx) >= aim.limit - tol {
            return false;
        }
        let ny = self.cost[self.at(y)] + dc;
        [(x, nx), (y, ny)].iter().all(|&(m, new)| {
            let j = self.step(m);
            (0..B).all(|k| {
                let v = barrier::<B>(k, new);
                v <= barrier::<B>(k, self.cost[self.at(m)]) || v < self.top[j][k][0].0 - tol
            })
        })
    }

    /// Pushes micro-step `j`'s barriers that exceed their means.
    fn push(&self, heap: &mut BinaryHeap<Entry>, j: usize, tol: f64) {
        for i in 0..B {
            let e = self.excess(j, i);
            let (top, stuck) = (self.top[j][i][0], self.stuck[j][i]);
            if e > tol && (top.1 != stuck.1 || top.0.to_bits() != stuck.0.to_bits()) {
                heap.push((
                    e.to_bits(),
                    Reverse(j as u32),
                    Reverse(i as u8),
                    self.version[j],
                ));
            }
        }
    }

    /// A round of trades, then one of samples (see the module docs).
    fn run(&mut self, seqs: &mut Sequences) {
        let tol = TOLERANCE * self.objective();
        self.rounds(seqs, tol, Moves::Trades);
        self.stuck.fill([(f64::NAN, NONE); 2]);
        self.rounds(seqs, tol, Moves::Samples);
    }

    /// Improves the worst barrier with `moves` until no barrier improves
    /// or the budget ends.
    fn rounds(&mut self, seqs: &mut Sequences, tol: f64, moves: Moves) {
        let mut heap: BinaryHeap<Entry> = BinaryHeap::with_capacity(2 * self.stage.shape.steps);
        for j in 0..self.stage.shape.steps {
            self.push(&mut heap, j, tol);
        }
        while let Some((_, Reverse(j), Reverse(i), version)) = heap.pop() {
            let (j, i) = (j as usize, i as usize);
            if version != self.version[j] {
                continue;
            }
            if self.left.get() == 0 {
                return;
            }
            let Some(c) = self.improve(j, i, seqs, tol, moves) else {
                self.stuck[j][i] = self.top[j][i][0];
                continue;
            };
            if !self.apply(c, seqs) {
                self.stuck[j][i] = self.top[j][i][0];
                continue;
            }
            let (jx, jy) = (self.step(c.c.x), self.step(c.c.y));
            self.push(&mut heap, jx, tol);
            if jy != jx {
                self.push(&mut heap, jy, tol);
            }
        }
    }

    /// The best change of `moves` that improves barrier `i` of micro-step
    /// `j` (none when there is none or the budget ends first).
    fn improve(
        &self,
        j: usize,
        i: usize,
        seqs: &Sequences,
        tol: f64,
        moves: Moves,
    ) -> Option<Change> {
        let (xm, second) = (self.top[j][i][0], self.top[j][i][1]);
        let x = xm.1 as usize;
        if x >= self.cost.len() {
            return None;
        }
        let aim = Aim {
            x,
            i,
            limit: xm.0,
            tol,
        };
        if moves == Moves::Trades {
            return self.trade_for(aim, seqs);
        }
        let mean = self.sum[j][i] / self.stage.shape.ranks as f64;
        let excess = xm.0 - mean;
        let gap = if second.1 == NONE {
            excess
        } else {
            xm.0 - second.0
        };
        let hunt = Hunt {
            aim,
            transfers: [excess, 0.5 * excess, gap],
            rows: self.sinks(j),
            // Good enough: `x` at most halfway to the mean and the step
            // time down by the gap at least.
            enough: (gap, mean + 0.75 * excess),
        };
        let prep = self.stage.prep;
        let mut best: Option<Change> = None;
        for &bx in self.stage.micro_batch(x) {
            let lx = seqs.loads[bx as usize];
            for (ia, &pa) in seqs.members[bx as usize].iter().enumerate() {
                if self.stage.pinned(pa) {
                    continue;
                }
                let (ca, sa) = (prep.cost(pa as usize), prep.size(pa as usize));
                let a = Out {
                    x,
                    bx,
                    ia,
                    pa,
                    ca,
                    sa,
                    lx,
                };
                if self.sink_moves(&hunt, &a, seqs, &mut best).is_break()
                    || self.by_cost(&hunt, &a, seqs, &mut best).is_break()
                    || self.by_size(&hunt, &a, seqs, &mut best).is_break()
                {
                    return best;
                }
            }
        }
        best
    }

    /// Micro-step `j` and the [`SEARCH_SINKS`] others whose barriers
    /// exceed their means most (room under their maxima that costs
    /// nothing to fill), in that order. O(A).
    fn sinks(&self, j: usize) -> Sinks {
        let mut rows = [j; 1 + SEARCH_SINKS];
        let mut room = [f64::NEG_INFINITY; SEARCH_SINKS];
        for r in (0..self.stage.shape.steps).filter(|&r| r != j) {
            let e: f64 = (0..B).map(|k| self.excess(r, k)).sum();
            if let Some(at) = room.iter().position(|&x| e > x) {
                room.copy_within(at..SEARCH_SINKS - 1, at + 1);
                rows.copy_within(1 + at..SEARCH_SINKS, 2 + at);
                room[at] = e;
                rows[1 + at] = r;
            }
        }
        Sinks {
            rows,
            len: 1 + room.iter().filter(|x| x.is_finite()).count(),
        }
    }

    /// Whether `best` is good enough to end the hunt.
    #[inline]
    fn enough(&self, hunt: &Hunt, best: &Option<Change>) -> bool {
        let (gap, most) = hunt.enough;
        let (x, i, tol) = (hunt.aim.x, hunt.aim.i, hunt.aim.tol);
        best.is_some_and(|c| {
            c.delta <= -gap + tol && barrier::<B>(i, self.cost[self.at(x)] - c.dc) <= most
        })
    }

    /// The moves of `a` into the least loaded micro-batches, in each
    /// barrier, of the hunt's micro-step and its sinks. Breaks when the
    /// budget ends.
    fn sink_moves(
        &self,
        hunt: &Hunt,
        a: &Out,
        seqs: &Sequences,
        best: &mut Option<Change>,
    ) -> ControlFlow<()> {
        let (prep, loads) = (self.stage.prep, &seqs.loads);
        let x = hunt.aim.x;
        let rows = &hunt.rows.rows[..hunt.rows.len];
        for (k, row) in (0..B).flat_map(|k| rows.iter().map(move |&r| (k, r))) {
            for e in self.low[row][k] {
                let y = e.1 as usize;
                if y >= self.cost.len() || y == x {
                    continue;
                }
                if !self.spend(self.stage.shape.per_step as u64) {
                    return ControlFlow::Break(());
                }
                if let Some(&by) = self
                    .stage
                    .micro_batch(y)
                    .iter()
                    .find(|&&by| prep.fits(loads[by as usize], a.pa as usize))
                {
                    self.consider(a.to(y, by, None), a.ca, hunt.aim, best);
                }
            }
        }
        ControlFlow::Continue(())
    }

    /// For each transfer, the [`SEARCH_WINDOW`] samples on each side of
    /// `a`'s value minus the transfer in the cost index: the move of `a`
    /// into their sequences, the swap with each below `a`. Breaks when the
    /// budget ends or a change is good enough.
    fn by_cost(
        &self,
        hunt: &Hunt,
        a: &Out,
        seqs: &Sequences,
        best: &mut Option<Change>,
    ) -> ControlFlow<()> {
        let (prep, loads) = (self.stage.prep, &seqs.loads);
        let (x, i) = (hunt.aim.x, hunt.aim.i);
        let d = |c: Phases| barrier::<B>(i, c);
        let (index, coarse) = (&self.index[i], &self.coarse[i]);
        let log = u64::from(usize::BITS - index.len().leading_zeros());
        let va = d(a.ca);
        for transfer in hunt.distinct_transfers() {
            if !self.spend(log) {
                return ControlFlow::Break(());
            }
            let at = lower(index, coarse, va - transfer, |p| d(prep.cost(p as usize)));
            let (lo, hi) = (
                at.saturating_sub(SEARCH_WINDOW),
                (at + SEARCH_WINDOW).min(index.len()),
            );
            let near = self.locate(&index[lo..hi], x, loads);
            for (&pb, n) in index[lo..hi].iter().zip(&near) {
                let Near { by, y, ly, cb, sb } = *n;
                if !self.spend(1) {
                    return ControlFlow::Break(());
                }
                if y == x || y >= self.cost.len() {
                    continue;
                }
                if prep.fits(ly, a.pa as usize) {
                    self.consider(a.to(y, by, None), a.ca, hunt.aim, best);
                }
                if d(cb) >= va || !swap_fits(prep, a.lx, ly, a.sa, sb) {
                    continue;
                }
                self.consider(a.to(y, by, Some(pb)), a.ca - cb, hunt.aim, best);
                if self.enough(hunt, best) {
                    return ControlFlow::Break(());
                }
            }
        }
        ControlFlow::Continue(())
    }

    /// For each transfer, the swaps of `a` with the
    /// [`SEARCH_BUCKET_WINDOW`] samples on each side of its value minus
    /// the transfer in `a`'s size bucket and the two next to it. Breaks
    /// when the budget ends or a change is good enough.
    fn by_size(
        &self,
        hunt: &Hunt,
        a: &Out,
        seqs: &Sequences,
        best: &mut Option<Change>,
    ) -> ControlFlow<()> {
        let prep = self.stage.prep;
        let (x, i) = (hunt.aim.x, hunt.aim.i);
        let d = |c: Phases| barrier::<B>(i, c);
        let va = d(a.ca);
        let buckets = self.bounds.len();
        let home = self
            .bounds
            .partition_point(|&t| t <= a.sa[0])
            .saturating_sub(1);
        let bucketed = &self.bucketed[i];
        for transfer in hunt.distinct_transfers() {
            for k in home.saturating_sub(1)..(home + 2).min(buckets) {
                if !self.spend(SEARCH_BUCKET.ilog2().into()) {
                    return ControlFlow::Break(());
                }
                let bucket =
                    &bucketed[k * SEARCH_BUCKET..((k + 1) * SEARCH_BUCKET).min(bucketed.len())];
                let at = lower_in(bucket, |p| d(prep.cost(p as usize)) < va - transfer);
                let (lo, hi) = (
                    at.saturating_sub(SEARCH_BUCKET_WINDOW),
                    (at + SEARCH_BUCKET_WINDOW).min(bucket.len()),
                );
                let near = self.locate(&bucket[lo..hi], x, &seqs.loads);
                for (&pb, n) in bucket[lo..hi].iter().zip(&near) {
                    let Near { by, y, ly, cb, sb } = *n;
                    if !self.spend(1) {
                        return ControlFlow::Break(());
                    }
                    if d(cb) >= va || y == x || y >= self.cost.len() {
                        continue;
                    }
                    if !swap_fits(prep, a.lx, ly, a.sa, sb) {
                        continue;
                    }
                    self.consider(a.to(y, by, Some(pb)), a.ca - cb, hunt.aim, best);
                    if self.enough(hunt, best) {
                        return ControlFlow::Break(());
                    }
                }
            }
        }
        ControlFlow::Continue(())
    }

    /// The best trade of the aim's binding micro-batch with another
    /// micro-batch of its rank: whole micro-batches change micro-steps, so
    /// no cap is at stake; none where either holds a pinned position.
    fn trade_for(&self, aim: Aim, seqs: &Sequences) -> Option<Change> {
        let x = aim.x;
        let mut best = None;
        if self.holds_pinned(x, seqs) {
            return best;
        }
        let steps = self.stage.shape.steps;
        let first = x / steps * steps;
        for y in (first..first + steps).filter(|&y| y != x) {
            if !self.spend(1) {
                break;
            }
            if self.holds_pinned(y, seqs) {
                continue;
            }
            let dc = self.cost[self.at(x)] - self.cost[self.at(y)];
            let whole = Cand {
                x,
                bx: NONE,
                a: 0,
                y,
                by: NONE,
                b: None,
            };
            self.consider(whole, dc, aim, &mut best);
        }
        best
    }

    /// Each of the positions `window` (at most `2 * SEARCH_WINDOW`) as a
    /// candidate partner: its cost and sizes, its sequence, micro-batch
    /// (`x` for none) and the sequence's load, read level by level: the
    /// reads of one level are independent, so their cache misses (the
    /// positions lie anywhere in the batch) overlap instead of waiting one
    /// after another as the candidates are weighed.
    #[inline]
    fn locate(&self, window: &[u32], x: usize, loads: &[[u64; 3]]) -> [Near; 2 * SEARCH_WINDOW] {
        let prep = self.stage.prep;
        let mut near = [Near {
            by: NONE,
            y: x,
            ly: [0; 3],
            cb: Phases::ZERO,
            sb: [0; 3],
        }; 2 * SEARCH_WINDOW];
        for (slot, &pb) in near.iter_mut().zip(window) {
            slot.by = self.seq_of[pb as usize];
            slot.cb = prep.cost(pb as usize);
            slot.sb = prep.size(pb as usize);
        }
        for slot in near.iter_mut().take(window.len()) {
            let by = slot.by as usize;
            if let Some(&y) = self.batch_of.get(by) {
                slot.y = y as usize;
                slot.ly = loads[by];
            }
        }
        near
    }

    /// Keeps the change `c` moving `dc` from `c.x` to `c.y` in `best` if
    /// it is taken (see the module docs) and better.
    #[inline]
    fn consider(&self, c: Cand, dc: Phases, aim: Aim, best: &mut Option<Change>) {
        let Cand { x, y, .. } = c;
        let tol = aim.tol;
        let delta = self.delta(x, y, dc);
        if !(delta < -tol || (delta <= 0.0 && self.level(x, y, dc, aim))) {
            return;
        }
        let spread: f64 = (0..B)
            .map(|k| {
                let (vx, vy, v) = (
                    barrier::<B>(k, self.cost[self.at(x)]),
                    barrier::<B>(k, self.cost[self.at(y)]),
                    barrier::<B>(k, dc),
                );
                2.0 * v * (vy - vx + v)
            })
            .sum();
        let better = best.map_or(true, |c| {
            delta < c.delta - tol || (delta <= c.delta + tol && spread < c.spread)
        });
        if better {
            *best = Some(Change {
                c,
                delta,
                dc,
                spread,
            });
        }
    }

    /// Whether micro-batch `m` holds a pinned position (O(1) when none is
    /// pinned, else O(its samples)).
    fn holds_pinned(&self, m: usize, seqs: &Sequences) -> bool {
        !self.stage.pinned.is_empty()
            && self.stage.micro_batch(m).iter().any(|&b| {
                seqs.members[b as usize]
                    .iter()
                    .any(|&p| self.stage.pinned(p))
            })
    }

    /// Applies `change`; `false` (nothing changed) if its swap partner is not
    /// in its sequence, which the index rules out.
    fn apply(&mut self, change: Change, seqs: &mut Sequences) -> bool {
        let c = change.c;
        if c.bx == NONE {
            self.trade(c.x, c.y, seqs);
            return true;
        }
        let pa = seqs.members[c.bx as usize][c.a];
        let back = match c.b {
            None => None,
            Some(pb) => {
                let Some(ib) = seqs.members[c.by as usize].iter().position(|&p| p == pb) else {
                    return false;
                };
                self.seq_of[pb as usize] = c.bx;
                Some(ib)
            }
        };
        let trade = Trade {
            from: c.bx,
            a: c.a,
            to: c.by,
            back,
        };
        let [ca, cb] = trade.apply(self.stage.prep, seqs);
        let dc = ca - cb;
        self.seq_of[pa as usize] = c.by;
        let (ax, ay) = (self.at(c.x), self.at(c.y));
        let (old_x, old_y) = (self.cost[ax], self.cost[ay]);
        self.cost[ax] = old_x - dc;
        self.cost[ay] = old_y + dc;
        self.update(c.x, old_x);
        self.update(c.y, old_y);
        let (jx, jy) = (self.step(c.x), self.step(c.y));
        self.version[jx] = self.version[jx].wrapping_add(1);
        if jy != jx {
            self.version[jy] = self.version[jy].wrapping_add(1);
        }
        true
    }

    /// Micro-batches `x` and `y` (of one rank) trade places: the members,
    /// loads and costs of their sequences, index by index (every sequence
    /// has the same caps).
    fn trade(&mut self, x: usize, y: usize, seqs: &mut Sequences) {
        let (xs, ys) = (self.stage.micro_batch(x), self.stage.micro_batch(y));
        for (&bx, &by) in xs.iter().zip(ys) {
            let (bx, by) = (bx as usize, by as usize);
            seqs.members.swap(bx, by);
            seqs.loads.swap(bx, by);
            seqs.costs.swap(bx, by);
            for &p in &seqs.members[bx] {
                self.seq_of[p as usize] = bx as u32;
            }
            for &p in &seqs.members[by] {
                self.seq_of[p as usize] = by as u32;
            }
        }
        let (ax, ay) = (self.at(x), self.at(y));
        let (old_x, old_y) = (self.cost[ax], self.cost[ay]);
        self.cost[ax] = old_y;
        self.cost[ay] = old_x;
        self.update(x, old_x);
        self.update(y, old_y);
        let (jx, jy) = (self.step(x), self.step(y));
        self.version[jx] = self.version[jx].wrapping_add(1);
        self.version[jy] = self.version[jy].wrapping_add(1);
    }
}

#[cfg(test)]
mod tests {
    use super::{
        by_cost_in_buckets, by_size, keep, key_of, lower, lower_in, positions_of, sort_keyed,
        Ranked, SEARCH_BLOCK, SEARCH_BUCKET, SEARCH_KEPT,
    };
    use crate::cost::{Given, Phases, Sample};
    use crate::num::order_bits;
    use crate::plan::deal::Sequences;
    use crate::plan::prepare::prepare;
    use crate::plan::shape::Shape;
    use crate::plan::work::Stage;
    use crate::plan::{StepSample, SyncModel};
    use alloc::vec;
    use alloc::vec::Vec;
    use proptest::prelude::*;

    /// Two ranks of two micro-steps, one full sequence of 100 tokens a
    /// micro-batch: rank 0 holds a sample of 100 tokens (cost 10) then
    /// two of 50 (0.4, 0.3), rank 1 two of 50 (0.5, 0.6) then one of 100
    /// (10.5). No sample can move (every sequence is full) and no swap
    /// lowers a maximum (those that fit trade equal sizes: the two long
    /// samples, or short ones under a long one), so the step time 10 +
    /// 10.5 falls only once the micro-batches of a rank trade places and
    /// the long samples share a micro-step; then a swap of short samples
    /// balances the other: 10.5 + 0.9, under both per-micro-step models.
    #[test]
    fn whole_micro_batches_trade_where_no_sample_can() {
        let spec = [
            (100, 10.0),
            (50, 0.4),
            (50, 0.3),
            (50, 0.5),
            (50, 0.6),
            (100, 10.5),
        ];
        let samples: Vec<StepSample> = spec
            .iter()
            .enumerate()
            .map(|(i, &(t, c))| {
                let sample = Sample::new(t, []).with_cost(Phases::new(c / 4.0, c * 0.75));
                StepSample::new(i as u64, sample.unwrap())
            })
            .collect();
        for sync in [SyncModel::MicroStep, SyncModel::Phase] {
            let caps = [100, u64::MAX, u64::MAX];
            let prep = prepare(&samples, &Given, caps, 2, 1, sync).unwrap();
            // The position of the sample of total cost `c`.
            let at = |c: f64| {
                (0..prep.len() as u32)
                    .find(|&p| (prep.cost(p as usize).total() - c).abs() < 1e-12)
                    .unwrap()
            };
            let members = vec![
                vec![at(10.0)],
                vec![at(0.4), at(0.3)],
                vec![at(0.5), at(0.6)],
                vec![at(10.5)],
            ];
            let shape = Shape {
                ranks: 2,
                steps: 2,
                per_step: 1,
            };
            let slots = [0, 1, 2, 3];
            let stage = Stage {
                prep: &prep,
                pinned: &[],
                sync,
                shape,
                slots: &slots,
            };
            // The step time: per micro-step, the largest micro-batch (per
            // phase under per-phase barriers).
            let time = |seqs: &Sequences| -> f64 {
                (0..2)
                    .map(|j| {
                        let c = |r: usize| -> Phases {
                            seqs.members[slots[r * 2 + j] as usize]
                                .iter()
                                .map(|&p| prep.cost(p as usize))
                                .sum()
                        };
                        let (a, b) = (c(0), c(1));
                        match sync {
                            SyncModel::Phase => a.max(b).total(),
                            _ => a.total().max(b.total()),
                        }
                    })
                    .sum()
            };
            let before = Sequences::new(&prep, members);
            assert!((time(&before) - 20.5).abs() < 1e-9);
            // With the long samples pinned, nothing trades.
            let mut pins = vec![false; 6];
            pins[at(10.0) as usize] = true;
            pins[at(10.5) as usize] = true;
            let pinned = Stage {
                pinned: &pins,
                ..stage
            };
            let kept = super::search(&pinned, before.clone(), crate::plan::tuning::EFFORT);
            assert!((time(&kept) - 20.5).abs() < 1e-9, "{sync}: {}", time(&kept));
            assert_eq!(
                (&kept.members[0][..], &kept.members[3][..]),
                (&[at(10.0)][..], &[at(10.5)][..])
            );
            let after = super::search(&stage, before, crate::plan::tuning::EFFORT);
            assert!(
                (time(&after) - 11.4).abs() < 1e-9,
                "{sync}: {}",
                time(&after)
            );
            // Every sample once, and the loads those of the members.
            let mut all: Vec<u32> = after.members.concat();
            all.sort_unstable();
            assert_eq!(all, (0..6).collect::<Vec<u32>>());
            assert_eq!(
                after.loads,
                Sequences::new(&prep, after.members.iter().map(|m| m.to_vec()).collect()).loads
            );
        }
    }

    proptest! {
        /// `keep` fed a ranking's values in any order holds its first
        /// `SEARCH_KEPT + 1` in the search's order (descending by
        /// `f64::total_cmp`, ties by micro-batch), as a full sort does:
        /// values drawn from a few, zeros and NaNs of both signs among them,
        /// so that ties abound (and the one-comparison skip of `keep` meets
        /// every case where `<` and `total_cmp` differ).
        #[test]
        fn keep_holds_the_first_of_a_full_sort(
            picks in prop::collection::vec(0usize..9, 0..80),
            order in any::<u64>(),
        ) {
            let values = [3.5, -1.0, 0.0, -0.0, 3.5, 1e-300, 2.0, f64::NAN, -f64::NAN];
            let mut all: Vec<Ranked> = picks
                .iter()
                .enumerate()
                .map(|(m, &k)| (values[k], m as u32))
                .collect();
            // Fed in a scrambled order of micro-batches.
            let mut fed = all.clone();
            fed.sort_by_key(|e| crate::num::splitmix64(order ^ u64::from(e.1)));
            let mut list = Vec::new();
            for &e in &fed {
                keep(&mut list, e);
            }
            all.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            all.truncate(SEARCH_KEPT + 1);
            let bits = |l: &[Ranked]| l.iter().map(|e| (e.0.to_bits(), e.1)).collect::<Vec<_>>();
            prop_assert_eq!(bits(&list), bits(&all));
        }

        /// `lower_in` answers as `partition_point` does on a bucket of any
        /// length up to `SEARCH_BUCKET` (runs cut short at its end), sorted values
        /// with runs of ties, and thresholds below, among and above them.
        #[test]
        fn lower_in_is_the_partition_point(
            mut values in prop::collection::vec(0u32..40, 0..=SEARCH_BUCKET),
            target in 0u32..42,
        ) {
            values.sort_unstable();
            let list: Vec<u32> = (0..values.len() as u32).collect();
            let below = |p: u32| values[p as usize] < target;
            prop_assert_eq!(lower_in(&list, below), list.partition_point(|&p| below(p)));
        }

        /// `sort_keyed` then `positions_of` order positions as a sort by
        /// (key, position) does, keys of any 64 bits (both halves).
        #[test]
        fn keyed_sort_is_by_key_then_position(
            keys in prop::collection::vec(prop_oneof![any::<u64>(), 0u64..3, Just(1u64 << 32)], 0..200),
        ) {
            let list = sort_keyed(keys.iter().enumerate().map(|(p, &k)| (k, p as u32)));
            let got_keys: Vec<u64> = list.iter().map(key_of).collect();
            let got = positions_of(list);
            let mut want: Vec<(u64, u32)> = keys.iter().enumerate().map(|(p, &k)| (k, p as u32)).collect();
            want.sort_unstable();
            prop_assert_eq!(got, want.iter().map(|e| e.1).collect::<Vec<_>>());
            prop_assert_eq!(got_keys, want.iter().map(|e| e.0).collect::<Vec<_>>());
        }
    }

    /// The cost keys order as `f64::total_cmp` does.
    #[test]
    fn order_bits_sort_as_total_cmp() {
        let mut v = [2.0, -0.0, 0.0, -3.0, 1e-310, f64::INFINITY, -1e-310, 1.5];
        let mut by_bits = v;
        by_bits.sort_by_key(|&x| order_bits(x));
        v.sort_by(f64::total_cmp);
        assert_eq!(v.map(f64::to_bits), by_bits.map(f64::to_bits));
    }

    /// The size buckets hold every position once, each bucket's sizes at
    /// least the previous bucket's (its first size in `bounds`), each
    /// bucket by cost, ties by position.
    #[test]
    fn buckets_are_by_size_then_cost() {
        for n in [
            0usize,
            1,
            SEARCH_BUCKET - 1,
            SEARCH_BUCKET,
            SEARCH_BUCKET + 1,
            3 * SEARCH_BUCKET + 17,
        ] {
            let positions: Vec<u32> = (0..n as u32).rev().collect();
            let size = |p: u32| u64::from((p * 7919) % 97);
            let cost = |p: u32| f64::from((p * 104_729) % 31);
            let (list, bounds) = by_size(&positions, size);
            assert_eq!(bounds.len(), n.div_ceil(SEARCH_BUCKET));
            let list = by_cost_in_buckets(list, cost);
            let mut sorted = list.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, (0..n as u32).collect::<Vec<_>>());
            for (k, bucket) in list.chunks(SEARCH_BUCKET).enumerate() {
                let least = bucket.iter().map(|&p| size(p)).min();
                assert_eq!(least, Some(bounds[k]), "{n} {k}");
                if k > 0 {
                    let before = list[(k - 1) * SEARCH_BUCKET..k * SEARCH_BUCKET]
                        .iter()
                        .map(|&p| size(p))
                        .max();
                    assert!(before <= least, "{n} {k}");
                }
                for w in bucket.windows(2) {
                    let (a, b) = (w[0], w[1]);
                    assert!(
                        cost(a) < cost(b) || (cost(a) == cost(b) && a < b),
                        "{n} {k}"
                    );
                }
            }
        }
    }

    /// The two-level search finds what one binary search finds, with ties,
    /// at block edges and beyond both ends.
    #[test]
    fn lower_is_the_partition_point() {
        for n in [0usize, 1, 63, 64, 65, 128, 200] {
            // Entries `n - 1 - k` keyed `k / 3`: the index is not the
            // identity, so a key read by position instead of entry fails.
            let keys: Vec<f64> = (0..n).map(|k| (k / 3) as f64).collect();
            let index: Vec<u32> = (0..n as u32).rev().collect();
            let key = |p: u32| keys[n - 1 - p as usize];
            let coarse: Vec<f64> = keys.iter().step_by(SEARCH_BLOCK).copied().collect();
            for t in -2..(n as i32 / 3 + 3) {
                for half in [0.0, 0.5] {
                    let target = f64::from(t) + half;
                    let want = keys.partition_point(|&v| v < target);
                    assert_eq!(lower(&index, &coarse, target, key), want, "{n} {target}");
                }
            }
        }
    }
}

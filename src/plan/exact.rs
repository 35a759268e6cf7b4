//! Exact stage (small batches): a branch and bound over every layout, on a counted budget, that replaces the plan so far only by a strictly better one.
//!
//! For at most [`MAX_SAMPLES`] positions (samples, or units with groups)
//! and no pinned position, positions in decreasing order of total cost,
//! depth first, the children in increasing order of their bound; a node
//! is cut when its bound reaches the best time so far (the plan's own,
//! less a relative `1e-9`, at first). Two searches, by what the step time
//! reads:
//!
//! - **Barriers every micro-step** (per micro-step, per phase: only each
//!   micro-step's maxima count): every position to one of the `R * A * S`
//!   sequences, within its length and caps. The micro-steps are
//!   interchangeable, and so are the micro-batches *of one micro-step* on
//!   their own, and the sequences of a micro-batch: a position enters an
//!   empty one only if it is the first empty one (micro-steps entered in
//!   order, a micro-step's micro-batches in order of rank). A layout needs
//!   `R` non-empty micro-batches; at the end each micro-step's are rotated
//!   by those of the micro-steps before it, so that they cover every rank
//!   at the same step time. The bound: the step time of the micro-batches
//!   so far, raised by the work left beyond the room under the current
//!   maxima (each unit of it above the room lifts some maximum by at least
//!   `1 / R`) or by the next position, which lifts the micro-batch it
//!   joins; per phase the larger of that bound per phase (summed) and of
//!   the totals (a micro-step waits at least for its largest total).
//! - **One barrier a step** (only the rank totals count): every position
//!   to a *rank* (an empty one only if it is the first empty one), the
//!   rank's positions checked to pack into its `A * S` sequences: first fit
//!   into its packing so far, else an exhaustive packing of them all (of
//!   sequences of equal sizes the first only). The sequence is never
//!   branched on: it does not change the step time. The bound: the largest
//!   rank total raised as above.
//!
//! Both cut a node also **by capacity**: with the maxima raised (in each
//! family of barriers: the totals; per phase, vision and language) by
//! raises summing to less than `D`, the best time less the maxima so far,
//! a micro-batch (rank) of room `rho` under its maximum takes at most
//! `rho` plus its micro-step's raise and at most the positions left of
//! value up to `rho + D`; a micro-step's capacity is then concave in its
//! raise, and the least raises that let the micro-batches take all the
//! work left (bought in decreasing order of slope) must stay below `D`.
//! This sees what the room alone does not: rooms too small for what is
//! left, which only a raise of a maximum can use.
//!
//! The stage searches below bars from low to the plan's own time (1/32 of
//! it below, then 1/64, ... then the plan's time), each on half of the
//! budget left (the last on all of it): a low bar prunes most nodes at
//! once, so a layout well below the plan's is found, and the best one
//! below the bar when that search completes; a search cut short passes to
//! the next bar.
//!
//! Every layout has a relabelling the search visits, at the same step
//! time, so within the budget the result is exact. The step time is the
//! planner's (each sequence the sum of its samples' costs,
//! `evaluate::step_time`). A search cut short by the budget returns the
//! best layout it found, never a worse one than it was given.
//! Deterministic: fixed orders, ties to the lower slot (rank); the budget
//! counts work, not time.
//!
//! # Complexity
//!
//! O(budget * log n) time: each child weighed costs `R * A + 1` units
//! (`R + 1` a rank under one barrier a step), its bound and capacity O(log n)
//! a micro-batch (a binary search in the sorted values left), each node of
//! a packing one unit per sequence tried; O(n^2 log n) once, to sort the
//! values left at every depth. O(n^2 + K) extra space, and O(n + K) a level
//! of the recursion (depth n; the children, a packing's undo), for
//! `K = R * A * S` sequences.

use alloc::vec;
use alloc::vec::Vec;

use super::deal::Sequences;
use super::evaluate::{lower_bound, step_time};
use super::prepare::Prepared;
use super::shape::Shape;
use super::sync::SyncModel;
use super::work::Stage;
use crate::cost::Phases;

/// The most positions the stage searches (beyond it the plan is returned
/// as given).
pub(crate) const MAX_SAMPLES: usize = 24;

/// The most sequences (`R * A * S`) the stage searches (its memory).
const MAX_SLOTS: usize = 4096;

/// A relative improvement smaller than this is no improvement.
const TOLERANCE: f64 = 1e-9;

/// The layout of `seqs` (dealt as `stage.slots`) replaced by the best one
/// the branch and bound finds within `budget` work units, if strictly
/// better; `seqs` unchanged otherwise.
pub(crate) fn exact(stage: &Stage<'_>, seqs: Sequences, budget: u64) -> Sequences {
    let prep = stage.prep;
    let shape = stage.shape;
    let n = prep.len();
    if n > MAX_SAMPLES
        || n < shape.ranks
        || shape.slots() == 0
        || shape.slots() > MAX_SLOTS
        || budget == 0
        || stage.pinned.iter().any(|&p| p)
        || stage.slots.len() != shape.slots()
    {
        return seqs;
    }
    let slot_costs: Vec<Phases> = stage
        .slots
        .iter()
        .map(|&b| {
            seqs.members[b as usize]
                .iter()
                .map(|&p| prep.cost(p as usize))
                .sum()
        })
        .collect();
    let now = step_time(stage.sync, shape, &slot_costs);
    // Bars from low to the plan's own time, each search on half of what
    // the ones before left of the budget (the last on all of it): a low
    // bar prunes most nodes at once, so a layout well below the plan's
    // time is found (and, the search complete, the best one below the
    // bar) before the budget is spent near the plan's time; a bar whose
    // search is cut short passes to the next, higher one.
    let mut left = budget;
    let mut found = None;
    for (i, below) in BARS.iter().enumerate() {
        let bar = now * (1.0 - below.max(TOLERANCE));
        let share = if i + 1 == BARS.len() { left } else { left / 2 };
        let out = run(prep, stage.sync, shape, bar, share);
        left -= share - out.left;
        if out.found.is_some() {
            found = out.found;
            break;
        }
    }
    let Some(found) = found else {
        return seqs;
    };
    let mut members = vec![Vec::new(); shape.slots()];
    for (p, k) in found {
        members[stage.slots[k] as usize].push(p);
    }
    Sequences::new(prep, members)
}

/// A lower bound of the step time under `sync` of *every* plan of `prep`
/// over `ranks` ranks with `per_step` sequences a micro-step and any
/// number of micro-steps, proven by the branch and bound within `budget`
/// work units, given a plan of step time `time`: the optimum when the
/// search completes with `time` as its bar, else the highest of the bars
/// [`BARS`] below `time` (and above the analytic bound) that a complete
/// search proves no plan beats; `None` when the costs are not additive (a
/// sample's floor below its cost: the plans' costs then are not the sums
/// the search adds), the batch is too large, or no search completes.
/// Every plan has at most `n` non-empty micro-steps, so the
/// search over `max(n, 1)` micro-steps (empty ones cost nothing, and are
/// entered in order) covers every plan.
pub(crate) fn proven_bound(
    prep: &Prepared,
    sync: SyncModel,
    ranks: usize,
    per_step: usize,
    time: f64,
    budget: u64,
) -> Option<f64> {
    let n = prep.len();
    let sum = prep.items.iter().fold(Phases::ZERO, |acc, e| acc + e.cost);
    let additive = sum.vision == prep.floors.vision && sum.language == prep.floors.language;
    let shape = Shape {
        ranks,
        steps: n.max(1),
        per_step,
    };
    if !additive
        || n > MAX_SAMPLES
        || n < ranks
        || shape.slots() == 0
        || shape.slots() > MAX_SLOTS
        || budget == 0
        || !time.is_finite()
    {
        return None;
    }
    // Bars from low (cheap to prove: most nodes are cut at once) to the
    // plan's own time (the optimum, when the plan is optimal), each search
    // on what the ones before left of the budget; the highest completed
    // bar is the bound. Bars the analytic bound already reaches are skipped.
    let analytic = lower_bound(sync, ranks, &prep.bound_parts(n));
    let mut left = budget;
    let mut proven = None;
    for below in BARS {
        let bar = time * (1.0 - below);
        if bar <= analytic || left == 0 {
            continue;
        }
        let out = run(prep, sync, shape, bar, left);
        left = out.left;
        if out.short {
            break;
        }
        // Every plan not found is at least the best time found so far
        // (the cuts), up to the rounding of the sums in another order.
        proven = Some(out.best * (1.0 - TOLERANCE));
        if out.found.is_some() {
            // A plan below the bar: the search found the optimum.
            break;
        }
    }
    proven
}

/// The bars of [`proven_bound`], as fractions below the plan's time: a
/// proof of a bar `1 / 32` below costs a small share of the budget that
/// proving the plan optimal does.
const BARS: [f64; 6] = [
    1.0 / 32.0,
    1.0 / 64.0,
    1.0 / 128.0,
    1.0 / 256.0,
    1.0 / 1024.0,
    0.0,
];

/// The outcome of a search: the best time (the bar it started from if
/// nothing beat it), the layout that reached it as (position, slot) pairs,
/// whether the budget cut the search short, and the budget left.
struct Outcome {
    best: f64,
    found: Option<Vec<(u32, usize)>>,
    short: bool,
    left: u64,
}

/// The branch and bound over `shape` for layouts of step time below `bar`.
fn run(prep: &Prepared, sync: SyncModel, shape: Shape, bar: f64, budget: u64) -> Outcome {
    let n = prep.len();
    let mut order: Vec<u32> = (0..n as u32).collect();
    order.sort_by(|&a, &b| {
        let (x, y) = (prep.cost(a as usize), prep.cost(b as usize));
        y.total().total_cmp(&x.total()).then(a.cmp(&b))
    });
    let mut rest = vec![Phases::ZERO; n + 1];
    for d in (0..n).rev() {
        rest[d] = rest[d + 1] + prep.cost(order[d] as usize);
    }
    if sync == SyncModel::Step {
        return Ranks::run(prep, shape, order, rest, bar, budget);
    }
    let k = shape.slots();
    let micro_batches = shape.ranks * shape.steps;
    let values = [
        Suffixes::new(prep, &order, Phases::total),
        Suffixes::new(prep, &order, |c| c.vision),
        Suffixes::new(prep, &order, |c| c.language),
    ];
    let mut s = Search {
        prep,
        sync,
        shape,
        order,
        rest,
        values,
        loads: vec![[0; 3]; k],
        count: vec![0; k],
        mb: vec![Phases::ZERO; micro_batches],
        mb_count: vec![0; micro_batches],
        per_step: vec![0; shape.steps],
        filled: vec![0; shape.steps],
        used: 0,
        assign: vec![0; n],
        best: bar,
        found: None,
        left: budget,
        short: false,
    };
    s.dive(0);
    let found = s
        .found
        .map(|f| s.order.iter().copied().zip(rotated(shape, f)).collect());
    Outcome {
        best: s.best,
        found,
        short: s.short,
        left: s.left,
    }
}

/// The value of a cost in one family of barriers.
type Value = fn(&Phases) -> f64;

/// The values of one family (a cost's total, vision or language) of the
/// positions from each depth on, sorted, with their prefix sums: the sum
/// of those up to a value in O(log n).
struct Suffixes {
    /// Per depth: the values from it on, ascending, and their prefix sums
    /// (one more, from 0).
    sorted: Vec<(Vec<f64>, Vec<f64>)>,
}

impl Suffixes {
    fn new(prep: &Prepared, order: &[u32], f: fn(&Phases) -> f64) -> Self {
        let sorted = (0..=order.len())
            .map(|d| {
                let mut v: Vec<f64> = order[d..]
                    .iter()
                    .map(|&p| f(&prep.cost(p as usize)))
                    .collect();
                v.sort_by(f64::total_cmp);
                let mut prefix = vec![0.0; v.len() + 1];
                for (i, x) in v.iter().enumerate() {
                    prefix[i + 1] = prefix[i] + x;
                }
                (v, prefix)
            })
            .collect();
        Suffixes { sorted }
    }

    /// The sum of the values from depth `d` on.
    fn left(&self, d: usize) -> f64 {
        self.sorted[d].1.last().copied().unwrap_or(0.0)
    }

    /// The sum of the values from depth `d` on that are at most `t`.
    fn up_to(&self, d: usize, t: f64) -> f64 {
        let (v, prefix) = &self.sorted[d];
        prefix[v.partition_point(|&x| x <= t)]
    }
}

/// The least sum of raises of the micro-steps' maxima (each below
/// `limit`) under which micro-batches of the given rooms under their
/// micro-step's maximum (`rooms`, one iterator a micro-step in use; then
/// `empty` micro-steps of `ranks` empty micro-batches) can take the values
/// from depth `d` on, or infinity: a micro-batch of room `rho` takes at
/// most `rho + delta` and at most the values up to `rho + limit` (`cap`),
/// so a micro-step's capacity is concave in its raise `delta`, of slope
/// the number of its micro-batches below their `cap`; raises bought in
/// decreasing order of slope (water-filling) are the least.
fn least_raise<I, J>(
    rooms: I,
    empty: usize,
    ranks: usize,
    values: &Suffixes,
    d: usize,
    limit: f64,
) -> f64
where
    I: Iterator<Item = J>,
    J: Iterator<Item = f64>,
{
    let left = values.left(d);
    let mut have = 0.0;
    // Every micro-step's capacity beyond `have`: (slope, length) pieces.
    let mut pieces: Vec<(usize, f64)> = Vec::new();
    let mut spans: Vec<f64> = Vec::new();
    for column in rooms {
        spans.clear();
        for rho in column {
            let cap = values.up_to(d, rho + limit);
            have += rho.min(cap);
            if cap > rho {
                spans.push(cap - rho);
            }
        }
        spans.sort_by(f64::total_cmp);
        let mut at = 0.0;
        for (k, &t) in spans.iter().enumerate() {
            pieces.push((spans.len() - k, t - at));
            at = t;
        }
    }
    let cap = values.up_to(d, limit);
    if cap > 0.0 {
        pieces.extend(core::iter::repeat((ranks, cap)).take(empty));
    }
    if have >= left {
        return 0.0;
    }
    pieces.sort_by_key(|&(slope, _)| core::cmp::Reverse(slope));
    let mut raise = 0.0;
    for (slope, len) in pieces {
        let gain = slope as f64 * len;
        if have + gain >= left {
            return raise + (left - have) / slope as f64;
        }
        have += gain;
        raise += len;
    }
    f64::INFINITY
}

/// `slots` (the slot of each position, micro-batches of a micro-step
/// filled from the first rank on) with each micro-step's micro-batches
/// rotated by the number of non-empty ones in the micro-steps before it:
/// with `R` non-empty micro-batches at least, every rank then holds some,
/// at the same step time under barriers every micro-step.
fn rotated(shape: Shape, slots: Vec<usize>) -> Vec<usize> {
    let (ranks, steps, per) = (shape.ranks, shape.steps, shape.per_step);
    let mut filled = vec![0; steps];
    for &k in &slots {
        let m = k / per;
        filled[m % steps] = filled[m % steps].max(m / steps + 1);
    }
    let mut offset = vec![0; steps];
    for j in 1..steps {
        offset[j] = (offset[j - 1] + filled[j - 1]) % ranks;
    }
    slots
        .into_iter()
        .map(|k| {
            let (m, i) = (k / per, k % per);
            let (r, j) = (m / steps, m % steps);
            shape.micro_batch((r + offset[j]) % ranks, j) + i
        })
        .collect()
}

struct Search<'a> {
    prep: &'a Prepared,
    sync: SyncModel,
    /// The shape searched (its micro-steps may exceed the plan's).
    shape: Shape,
    /// The positions in the order they are placed.
    order: Vec<u32>,
    /// The cost of the positions from each depth on.
    rest: Vec<Phases>,
    /// The positions' totals, vision and language costs from each depth
    /// on ([`hopeless`](Search::hopeless)).
    values: [Suffixes; 3],
    /// Per slot: its sizes and its number of positions.
    loads: Vec<[u64; 3]>,
    count: Vec<usize>,
    /// Per micro-batch: its cost and number of positions.
    mb: Vec<Phases>,
    mb_count: Vec<usize>,
    per_step: Vec<usize>,
    /// Per micro-step: its non-empty micro-batches (under barriers every
    /// micro-step, always those of its first ranks).
    filled: Vec<usize>,
    /// The micro-steps in use: always the first ones (an empty micro-step
    /// is entered only if it is the first empty one, of the step or, under
    /// one barrier a step, of the rank), so the later ones, empty, are
    /// never scanned.
    used: usize,
    /// The slot of the position at each depth.
    assign: Vec<usize>,
    best: f64,
    found: Option<Vec<usize>>,
    left: u64,
    /// Whether the budget ran out (the search was cut short).
    short: bool,
}

/// `max(maxima + (left - room) / R, maxima + lift)`: the bound of one
/// family of barriers.
fn raised(maxima: f64, room: f64, left: f64, ranks: f64, lift: f64) -> f64 {
    (maxima + (left - room).max(0.0) / ranks).max(maxima + lift)
}

impl Search<'_> {
    /// A lower bound of every completion, the positions from depth `d` on
    /// left to place.
    fn bound(&self, d: usize) -> f64 {
        let left = self.rest[d];
        let next = self.order.get(d).map(|&p| self.prep.cost(p as usize));
        match self.sync {
            // Per phase, or the bound of the totals: each micro-step waits
            // for its largest vision cost plus its largest language cost,
            // at least its largest total.
            SyncModel::Phase => f64::max(
                self.columns(|c: &Phases| c.vision, left.vision, next)
                    + self.columns(|c: &Phases| c.language, left.language, next),
                self.columns(Phases::total, left.total(), next),
            ),
            _ => self.columns(Phases::total, left.total(), next),
        }
    }

    /// The bound of the micro-step barriers in the value `f` of a
    /// micro-batch's cost.
    fn columns(&self, f: impl Fn(&Phases) -> f64, left: f64, next: Option<Phases>) -> f64 {
        let shape = self.shape;
        let (ranks, steps) = (shape.ranks, shape.steps);
        let (mut maxima, mut room, mut lift) = (0.0, 0.0, f64::INFINITY);
        // An empty micro-step adds nothing but the lift of the next
        // position alone (`0 + f(c) - 0`).
        if let (Some(c), true) = (&next, self.used < steps) {
            lift = f(c).max(0.0);
        }
        for j in 0..self.used {
            let (mut max, mut min, mut sum) = (0.0f64, f64::INFINITY, 0.0);
            for r in 0..ranks {
                let x = f(&self.mb[r * steps + j]);
                max = max.max(x);
                min = min.min(x);
                sum += x;
            }
            maxima += max;
            room += ranks as f64 * max - sum;
            if let Some(c) = &next {
                lift = f64::min(lift, (min + f(c) - max).max(0.0));
            }
        }
        if next.is_none() {
            lift = 0.0;
        }
        raised(maxima, room, left, ranks as f64, lift)
    }

    /// Whether no completion of the micro-batches so far (the positions
    /// from depth `d` on left) beats the best time, by capacity: each
    /// micro-step's maximum raised by `delta_j` in each family of barriers
    /// (the totals; per phase, vision and language), the raises summing to
    /// less than `D`, the best time less the maxima so far, a micro-batch
    /// of room `rho` under its micro-step's maximum takes at most `rho +
    /// delta_j` and at most the positions left of value up to `rho + D`.
    /// The least sum of raises that lets the micro-batches take all the
    /// work left ([`least_raise`]) must stay below `D`.
    fn hopeless(&self, d: usize) -> bool {
        let families: &[(Value, &Suffixes)] = match self.sync {
            SyncModel::Phase => &[
                (|c| c.vision, &self.values[1]),
                (|c| c.language, &self.values[2]),
            ],
            _ => &[(Phases::total, &self.values[0])],
        };
        let (ranks, steps) = (self.shape.ranks, self.shape.steps);
        let maxima: f64 = families
            .iter()
            .map(|(f, _)| {
                (0..self.used)
                    .map(|j| {
                        (0..ranks)
                            .map(|r| f(&self.mb[r * steps + j]))
                            .fold(0.0, f64::max)
                    })
                    .sum::<f64>()
            })
            .sum();
        let room = self.best - maxima;
        // (NaN-safe: a NaN room is no room.)
        if room.is_nan() || room <= 0.0 {
            return true;
        }
        let mut need = 0.0;
        for &(f, values) in families {
            let rooms = (0..self.used).map(|j| {
                let col = (0..ranks).map(move |r| f(&self.mb[r * steps + j]));
                let max = col.clone().fold(0.0, f64::max);
                col.map(move |x| max - x)
            });
            need += least_raise(rooms, steps - self.used, ranks, values, d, room);
            if need >= room {
                return true;
            }
        }
        false
    }

    fn dive(&mut self, d: usize) {
        let n = self.order.len();
        if d == n {
            let t = self.bound(d);
            if t < self.best {
                self.best = t;
                self.found = Some(self.assign.clone());
            }
            return;
        }
        let shape = self.shape;
        let (ranks, steps, per) = (shape.ranks, shape.steps, shape.per_step);
        let p = self.order[d] as usize;
        let first_empty_step = self.per_step.iter().position(|&c| c == 0);
        let filled: usize = self.filled.iter().sum();
        // A child's bound scans the micro-steps in use, one more at most,
        // and its capacity every micro-step against the positions left.
        let unit = (ranks * steps) as u64 + 1;
        let mut children: Vec<(f64, usize)> = Vec::new();
        // Micro-steps are entered in order (the first empty one only), the
        // micro-batches of one in order of rank (the first empty one only:
        // they are interchangeable on their own), and R non-empty ones at
        // the end cover every rank (`rotated`).
        for j in 0..(self.used + 1).min(steps) {
            if self.per_step[j] == 0 && Some(j) != first_empty_step {
                continue;
            }
            for r in 0..(self.filled[j] + 1).min(ranks) {
                let m = r * steps + j;
                let new = self.mb_count[m] == 0;
                if filled + usize::from(new) + (n - d - 1) < ranks {
                    continue;
                }
                let first_empty_seq = (m * per..(m + 1) * per).find(|&k| self.count[k] == 0);
                for k in m * per..(m + 1) * per {
                    if (self.count[k] == 0 && Some(k) != first_empty_seq)
                        || !self.prep.fits(self.loads[k], p)
                    {
                        continue;
                    }
                    if self.left < unit {
                        self.left = 0;
                        self.short = true;
                        return;
                    }
                    self.left -= unit;
                    let old = self.place(k, p, d);
                    let b = self.bound(d + 1);
                    let cut = b >= self.best || self.hopeless(d + 1);
                    self.unplace(k, p, old);
                    if !cut {
                        children.push((b, k));
                    }
                }
            }
        }
        children.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        for (b, k) in children {
            if self.left == 0 {
                self.short = true;
                return;
            }
            if b >= self.best {
                continue;
            }
            let old = self.place(k, p, d);
            self.dive(d + 1);
            self.unplace(k, p, old);
        }
    }

    /// Places position `p` (depth `d`) in slot `k`; returns its
    /// micro-batch's cost before, for [`Search::unplace`] (restored, not
    /// subtracted: no rounding drifts).
    fn place(&mut self, k: usize, p: usize, d: usize) -> Phases {
        let shape = self.shape;
        let m = k / shape.per_step;
        let old = self.mb[m];
        let s = self.prep.size(p);
        for (l, x) in self.loads[k].iter_mut().zip(s) {
            *l += x;
        }
        self.count[k] += 1;
        self.mb[m] += self.prep.cost(p);
        if self.mb_count[m] == 0 {
            self.filled[m % shape.steps] += 1;
        }
        self.mb_count[m] += 1;
        self.per_step[m % shape.steps] += 1;
        if self.per_step[m % shape.steps] == 1 {
            self.used += 1;
        }
        self.assign[d] = k;
        old
    }

    fn unplace(&mut self, k: usize, p: usize, old: Phases) {
        let shape = self.shape;
        let m = k / shape.per_step;
        let s = self.prep.size(p);
        for (l, x) in self.loads[k].iter_mut().zip(s) {
            *l -= x;
        }
        self.count[k] -= 1;
        self.mb[m] = old;
        self.mb_count[m] -= 1;
        if self.mb_count[m] == 0 {
            self.filled[m % shape.steps] -= 1;
        }
        self.per_step[m % shape.steps] -= 1;
        if self.per_step[m % shape.steps] == 0 {
            self.used -= 1;
        }
    }
}

/// One barrier a step (only the rank totals count): positions to *ranks*,
/// depth first, the children in increasing order of their bound (an empty
/// rank only if it is the first empty one; every rank left empty needs one
/// of the positions after), a rank's positions checked to pack into its
/// `A * S` sequences: first fit into the rank's packing so far, else an
/// exhaustive packing of them all ([`repack`]). The sequence a position
/// takes is never branched on: it does not change the step time.
struct Ranks<'a> {
    prep: &'a Prepared,
    shape: Shape,
    order: Vec<u32>,
    rest: Vec<Phases>,
    /// The positions' totals from each depth on ([`hopeless`](Ranks::hopeless)).
    values: Suffixes,
    /// Per rank: its total cost.
    load: Vec<f64>,
    /// Per rank: the depths of its positions.
    members: Vec<Vec<usize>>,
    /// Per sequence (rank `r`'s are `r * A * S..`): its sizes.
    seqs: Vec<[u64; 3]>,
    /// The sequence of its rank (`0..A * S`) of the position at each depth.
    at: Vec<usize>,
    /// The rank of the position at each depth.
    rank: Vec<usize>,
    best: f64,
    found: Option<Vec<usize>>,
    left: u64,
    short: bool,
}

/// What [`Ranks::place`] changed: one sequence, or the rank's whole
/// packing (its sequences' sizes and its positions' sequences before).
enum Undo {
    One(usize),
    Repacked(Vec<[u64; 3]>, Vec<usize>),
}

impl Ranks<'_> {
    fn run(
        prep: &Prepared,
        shape: Shape,
        order: Vec<u32>,
        rest: Vec<Phases>,
        bar: f64,
        budget: u64,
    ) -> Outcome {
        let n = order.len();
        let values = Suffixes::new(prep, &order, Phases::total);
        let mut s = Ranks {
            prep,
            shape,
            order,
            rest,
            values,
            load: vec![0.0; shape.ranks],
            members: vec![Vec::new(); shape.ranks],
            seqs: vec![[0; 3]; shape.slots()],
            at: vec![0; n],
            rank: vec![0; n],
            best: bar,
            found: None,
            left: budget,
            short: false,
        };
        s.dive(0);
        let found = s
            .found
            .take()
            .map(|slots| s.order.iter().copied().zip(slots).collect());
        Outcome {
            best: s.best,
            found,
            short: s.short,
            left: s.left,
        }
    }

    /// The largest rank total raised by the work left beyond the room
    /// under it (over `R`), or by the next position on the least loaded
    /// rank.
    fn bound(&self, d: usize) -> f64 {
        let max = self.load.iter().copied().fold(0.0, f64::max);
        let least = self.load.iter().copied().fold(f64::INFINITY, f64::min);
        let sum: f64 = self.load.iter().sum();
        let room = self.shape.ranks as f64 * max - sum;
        let lift = self.order.get(d).map_or(0.0, |&p| {
            (least + self.prep.cost(p as usize).total() - max).max(0.0)
        });
        raised(
            max,
            room,
            self.rest[d].total(),
            self.shape.ranks as f64,
            lift,
        )
    }

    /// Whether no completion beats the best time, by capacity (as
    /// [`Search::hopeless`], the ranks one micro-step): the largest total
    /// raised by less than `D`, the best time less it, a rank of room
    /// `rho` under it takes at most `rho` plus the raise and at most the
    /// positions left of cost up to `rho + D`.
    fn hopeless(&self, d: usize) -> bool {
        let max = self.load.iter().copied().fold(0.0, f64::max);
        let room = self.best - max;
        // (NaN-safe: a NaN room is no room.)
        if room.is_nan() || room <= 0.0 {
            return true;
        }
        let rooms = core::iter::once(self.load.iter().map(|&l| max - l));
        least_raise(rooms, 0, self.shape.ranks, &self.values, d, room) >= room
    }

    fn dive(&mut self, d: usize) {
        let n = self.order.len();
        if d == n {
            let t = self.load.iter().copied().fold(0.0, f64::max);
            if t < self.best {
                self.best = t;
                let per_rank = self.shape.per_rank();
                self.found = Some(
                    (0..n)
                        .map(|e| self.rank[e] * per_rank + self.at[e])
                        .collect(),
                );
            }
            return;
        }
        let ranks = self.shape.ranks;
        let cost = self.prep.cost(self.order[d] as usize).total();
        let empty = self.members.iter().filter(|m| m.is_empty()).count();
        let first_empty = self.members.iter().position(Vec::is_empty);
        // A child's bound and capacity: every rank against the positions
        // left.
        let unit = ranks as u64 + 1;
        let mut children: Vec<(f64, usize)> = Vec::new();
        for r in 0..ranks {
            let was_empty = self.members[r].is_empty();
            if (was_empty && Some(r) != first_empty) || empty - usize::from(was_empty) > n - d - 1 {
                continue;
            }
            if self.left < unit {
                self.left = 0;
                self.short = true;
                return;
            }
            self.left -= unit;
            let old = self.load[r];
            self.load[r] += cost;
            let b = self.bound(d + 1);
            let cut = b >= self.best || self.hopeless(d + 1);
            self.load[r] = old;
            if !cut {
                children.push((b, r));
            }
        }
        children.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        for (b, r) in children {
            if self.left == 0 {
                self.short = true;
                return;
            }
            if b >= self.best {
                continue;
            }
            let Some(undo) = self.place(r, d) else {
                continue;
            };
            let old = self.load[r];
            self.load[r] += cost;
            self.dive(d + 1);
            self.load[r] = old;
            self.unplace(r, d, undo);
        }
    }

    /// Places the position at depth `d` on rank `r`, if the rank's
    /// positions with it pack into its sequences.
    fn place(&mut self, r: usize, d: usize) -> Option<Undo> {
        let p = self.order[d] as usize;
        let per_rank = self.shape.per_rank();
        let base = r * per_rank;
        self.rank[d] = r;
        if let Some(k) = (0..per_rank).find(|&k| self.prep.fits(self.seqs[base + k], p)) {
            for (l, x) in self.seqs[base + k].iter_mut().zip(self.prep.size(p)) {
                *l += x;
            }
            self.at[d] = k;
            self.members[r].push(d);
            return Some(Undo::One(k));
        }
        self.members[r].push(d);
        let positions: Vec<usize> = self.members[r]
            .iter()
            .map(|&e| self.order[e] as usize)
            .collect();
        match repack(self.prep, &positions, per_rank, &mut self.left) {
            Some(bins) => {
                let old_seqs = self.seqs[base..base + per_rank].to_vec();
                let old_at: Vec<usize> = self.members[r].iter().map(|&e| self.at[e]).collect();
                self.seqs[base..base + per_rank].fill([0; 3]);
                for (&e, k) in self.members[r].iter().zip(bins) {
                    self.at[e] = k;
                    for (l, x) in self.seqs[base + k]
                        .iter_mut()
                        .zip(self.prep.size(self.order[e] as usize))
                    {
                        *l += x;
                    }
                }
                Some(Undo::Repacked(old_seqs, old_at))
            }
            None => {
                self.members[r].pop();
                if self.left == 0 {
                    self.short = true;
                }
                None
            }
        }
    }

    fn unplace(&mut self, r: usize, d: usize, undo: Undo) {
        let per_rank = self.shape.per_rank();
        let base = r * per_rank;
        match undo {
            Undo::One(k) => {
                let p = self.order[d] as usize;
                for (l, x) in self.seqs[base + k].iter_mut().zip(self.prep.size(p)) {
                    *l -= x;
                }
                self.members[r].pop();
            }
            Undo::Repacked(seqs, at) => {
                self.members[r].pop();
                self.seqs[base..base + per_rank].copy_from_slice(&seqs);
                for (&e, k) in self.members[r].iter().zip(at) {
                    self.at[e] = k;
                }
            }
        }
    }
}

/// A packing of `positions` into `bins` sequences within the caps (the
/// bin of each), if one exists and `left` work units suffice to find it
/// (one a node; `left` is then 0): the positions by decreasing size, each
/// into every bin it fits (of bins of equal sizes the first only), depth
/// first.
fn repack(prep: &Prepared, positions: &[usize], bins: usize, left: &mut u64) -> Option<Vec<usize>> {
    let mut idx: Vec<usize> = (0..positions.len()).collect();
    idx.sort_by(|&a, &b| {
        prep.size(positions[b])
            .cmp(&prep.size(positions[a]))
            .then(a.cmp(&b))
    });
    let sizes: Vec<[u64; 3]> = idx.iter().map(|&i| prep.size(positions[i])).collect();
    let mut load = vec![[0u64; 3]; bins];
    let mut bin = vec![0; sizes.len()];
    if !fill(prep, &sizes, 0, &mut load, &mut bin, left) {
        return None;
    }
    let mut out = vec![0; positions.len()];
    for (e, &i) in idx.iter().enumerate() {
        out[i] = bin[e];
    }
    Some(out)
}

/// The depth-first step of [`repack`] at depth `e`.
fn fill(
    prep: &Prepared,
    sizes: &[[u64; 3]],
    e: usize,
    load: &mut [[u64; 3]],
    bin: &mut [usize],
    left: &mut u64,
) -> bool {
    let Some(&size) = sizes.get(e) else {
        return true;
    };
    for b in 0..load.len() {
        if *left == 0 {
            return false;
        }
        *left -= 1;
        if load[..b].contains(&load[b]) || !prep.fits_size(load[b], size) {
            continue;
        }
        for (l, x) in load[b].iter_mut().zip(size) {
            *l += x;
        }
        bin[e] = b;
        let ok = fill(prep, sizes, e + 1, load, bin, left);
        for (l, x) in load[b].iter_mut().zip(size) {
            *l -= x;
        }
        if ok {
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The micro-batches of each micro-step, filled from rank 0 on, are
    /// rotated so that R non-empty ones cover every rank, each micro-step
    /// keeping its own.
    #[test]
    fn rotation_covers_every_rank() {
        let shape = Shape {
            ranks: 3,
            steps: 2,
            per_step: 2,
        };
        // Micro-step 0: ranks 0 and 1 (sequences 0 and 1 of rank 0);
        // micro-step 1: rank 0 only.
        let slots = vec![
            shape.micro_batch(0, 0),
            shape.micro_batch(0, 0) + 1,
            shape.micro_batch(1, 0),
            shape.micro_batch(0, 1) + 1,
        ];
        let out = rotated(shape, slots);
        assert_eq!(
            out,
            vec![
                shape.micro_batch(0, 0),
                shape.micro_batch(0, 0) + 1,
                shape.micro_batch(1, 0),
                shape.micro_batch(2, 1) + 1,
            ]
        );
    }
}

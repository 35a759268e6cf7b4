//! Exact stage (small batches): a branch and bound over every layout, on a counted budget, that replaces the plan so far only by a strictly better one.
//!
//! For at most [`MAX_SAMPLES`] positions (samples, or units with groups)
//! and no pinned position, every position goes to one of the `K = R * A *
//! S` sequences in turn (positions in decreasing order of total cost), each
//! sequence within its length and caps, every rank at least one position
//! (as stage 9 would make it), depth first, the children in increasing
//! order of their bound. Ranks, micro-steps (under per-micro-step
//! barriers; under one barrier a step, each rank's micro-steps on their
//! own) and the sequences of a micro-batch are interchangeable, so a
//! position enters an empty one only if it is the first empty one: every
//! layout has a relabelling the search visits, at the same step time. A
//! node is cut when its bound reaches the best time so far (the plan's
//! own, less a relative `1e-9`, at first): the step time of the slots so
//! far under the sync model, raised by the work left beyond the room under
//! the current maxima (each unit of it above the room lifts some maximum by
//! at least `1 / R`) or by the next position, which lifts the micro-batch
//! (rank) it joins; under per-phase barriers the larger of that bound per
//! phase (summed) and of the totals (a micro-step waits at least for its
//! largest total). Micro-steps are entered in order, so only those in use
//! and one empty one are scanned.
//!
//! The step time is the planner's (each sequence the sum of its samples'
//! costs, `evaluate::step_time`). Within the budget the result is exact; a
//! search cut short by the budget returns the best layout it found, never
//! a worse one than it was given. Deterministic: fixed orders, ties to the
//! lower sequence slot; the budget counts work, not time.
//!
//! O(budget) time (each child weighed costs `R` units per micro-step in
//! use, plus one), O(n + K)
//! extra space besides the recursion (depth n).

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
pub(crate) const MAX_SAMPLES: usize = 16;

/// The most micro-batches (`R * A`) the stage searches.
const MAX_MICRO_BATCHES: usize = 64;

/// A relative improvement smaller than this is no improvement.
const TOLERANCE: f64 = 1e-9;

/// The layout of `seqs` (dealt as `stage.slots`) replaced by the best one
/// the branch and bound finds within `budget` work units, if strictly
/// better; `seqs` unchanged otherwise.
pub(crate) fn exact(stage: &Stage<'_>, seqs: Sequences, budget: u64) -> Sequences {
    let prep = stage.prep;
    let shape = stage.shape;
    let n = prep.len();
    let micro_batches = shape.ranks * shape.steps;
    if n > MAX_SAMPLES
        || n < shape.ranks
        || micro_batches > MAX_MICRO_BATCHES
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
    let Some(found) = run(prep, stage.sync, shape, now * (1.0 - TOLERANCE), budget).found else {
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
        || ranks * shape.steps > MAX_MICRO_BATCHES
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
    let k = shape.slots();
    let micro_batches = shape.ranks * shape.steps;
    let mut s = Search {
        prep,
        sync,
        shape,
        order,
        rest,
        loads: vec![[0; 3]; k],
        count: vec![0; k],
        mb: vec![Phases::ZERO; micro_batches],
        mb_count: vec![0; micro_batches],
        per_rank: vec![0; shape.ranks],
        per_step: vec![0; shape.steps],
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
        .map(|f| s.order.iter().copied().zip(f).collect::<Vec<_>>());
    Outcome {
        best: s.best,
        found,
        short: s.short,
        left: s.left,
    }
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
    /// Per slot: its sizes and its number of positions.
    loads: Vec<[u64; 3]>,
    count: Vec<usize>,
    /// Per micro-batch: its cost and number of positions.
    mb: Vec<Phases>,
    mb_count: Vec<usize>,
    per_rank: Vec<usize>,
    per_step: Vec<usize>,
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
        let shape = self.shape;
        let (ranks, steps) = (shape.ranks, shape.steps);
        let left = self.rest[d];
        let next = self.order.get(d).map(|&p| self.prep.cost(p as usize));
        match self.sync {
            SyncModel::Step => {
                let (mut max, mut sum, mut least) = (0.0f64, 0.0, f64::INFINITY);
                for r in 0..ranks {
                    let load: f64 = self.mb[r * steps..r * steps + self.used]
                        .iter()
                        .map(Phases::total)
                        .sum();
                    max = max.max(load);
                    sum += load;
                    least = least.min(load);
                }
                let room = ranks as f64 * max - sum;
                let lift = next.map_or(0.0, |c| (least + c.total() - max).max(0.0));
                raised(max, room, left.total(), ranks as f64, lift)
            }
            SyncModel::MicroStep => self.columns(Phases::total, left.total(), next),
            // Per phase, or the bound of the totals: each micro-step waits
            // for its largest vision cost plus its largest language cost,
            // at least its largest total.
            SyncModel::Phase => f64::max(
                self.columns(|c: &Phases| c.vision, left.vision, next)
                    + self.columns(|c: &Phases| c.language, left.language, next),
                self.columns(Phases::total, left.total(), next),
            ),
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
        let first_empty_rank = self.per_rank.iter().position(|&c| c == 0);
        let first_empty_step = self.per_step.iter().position(|&c| c == 0);
        let empty_ranks = self.per_rank.iter().filter(|&&c| c == 0).count();
        // A child's bound scans the micro-steps in use, one more at most.
        let unit = (ranks * (self.used + 1).min(steps)) as u64;
        let mut children: Vec<(f64, usize)> = Vec::new();
        for r in 0..ranks {
            if self.per_rank[r] == 0 && Some(r) != first_empty_rank {
                continue;
            }
            // Every rank left empty needs one of the positions after this.
            if empty_ranks - usize::from(self.per_rank[r] == 0) > n - d - 1 {
                continue;
            }
            let first_empty_mb = (0..steps).find(|&j| self.mb_count[r * steps + j] == 0);
            // Beyond the first empty micro-step every one is symmetric.
            for j in 0..(self.used + 1).min(steps) {
                let m = r * steps + j;
                let symmetric = match self.sync {
                    SyncModel::Step => self.mb_count[m] == 0 && Some(j) != first_empty_mb,
                    _ => self.per_step[j] == 0 && Some(j) != first_empty_step,
                };
                if symmetric {
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
                    self.unplace(k, p, old);
                    if b < self.best {
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
        self.mb_count[m] += 1;
        self.per_rank[m / shape.steps] += 1;
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
        self.per_rank[m / shape.steps] -= 1;
        self.per_step[m % shape.steps] -= 1;
        if self.per_step[m % shape.steps] == 0 {
            self.used -= 1;
        }
    }
}

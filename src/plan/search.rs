//! Search stage: moves and swaps of single samples between any two micro-batches, of one micro-step or of two, guided by the binding barriers, while the exact predicted step time drops.
//!
//! The refinement (`refine`) balances each micro-step on its own; under
//! per-micro-step barriers the step time is the sum over micro-steps of
//! each barrier's maximum, and a micro-batch that is the slowest of its
//! micro-step in one phase can often hand a sample to a micro-batch of
//! *another* micro-step whose phases both have slack. This stage
//! minimizes the predicted step time exactly (for additive costs):
//! `sum_j (max_r V(r, j) + max_r L(r, j))` for [`SyncModel::Phase`], `sum_j
//! max_r T(r, j)` for [`SyncModel::MicroStep`].
//!
//! For every micro-step `j` and every barrier (phase) `p`, the binding
//! micro-batch `x` (the largest in `p` of `j`) tries every move of one of
//! its samples into, and every swap with a sample of, the *targets*: in
//! every micro-step, the two micro-batches of least cost in each phase (the
//! ones with the most slack under their micro-step's maxima). Every
//! sequence keeps its length and caps (a move goes into the first sequence
//! of the target it fits), pinned positions never move. The change that
//! lowers the step time most is applied if it lowers it at all (by more
//! than a relative `1e-9`, so rounding cannot cycle), then `x`'s micro-step
//! is tried again, at most `R` times a barrier and pass, for at most
//! [`PASSES`] passes or until a pass changes nothing. A change's effect is
//! exact in O(1): per micro-step and phase the three largest micro-batches
//! are kept (rescanned in O(R) after a change), so that the new maximum is
//! known whichever two micro-batches change.
//!
//! Deterministic: fixed orders, ties to the first found; the budget is
//! counted work, not time: at most `effort * max(n + K, 32768)` candidate
//! changes weighed (and `R` for each rescan) for n samples in K sequences
//! ([`Planner::search_effort`](crate::plan::Planner::search_effort),
//! default [`EFFORT`]).
//!
//! O(min(passes * A * R * |x| * A * |y|, effort * max(n + K, 32768))) time for A
//! micro-steps, O(n + K) extra space.

use alloc::vec;
use alloc::vec::Vec;
use core::cell::Cell;

use super::deal::Sequences;
use super::prepare::Prepared;
use super::shape::Shape;
use super::sync::SyncModel;
use crate::cost::Phases;

/// The default work budget, in candidate changes weighed per sample and
/// sequence.
pub(crate) const EFFORT: u32 = 64;

/// The size the budget counts at least: small batches search as long as a
/// batch of this many samples and sequences would (a constant, so no
/// setting alone makes planning slower).
const MIN_SIZE: u64 = 1 << 15;

/// The most passes over the micro-steps and barriers.
const PASSES: usize = 6;

/// A change smaller than this fraction of the step time is no change.
const TOLERANCE: f64 = 1e-9;

/// The value of a micro-batch in barrier `d`: vision (0), language (1) or
/// the total (2).
#[inline]
fn key(c: Phases, d: usize) -> f64 {
    match d {
        0 => c.vision,
        1 => c.language,
        _ => c.total(),
    }
}

/// A change: sample `a` (index in sequence `bx` of micro-batch `x`) to
/// sequence `by` of micro-batch `y`, and sample `b` of `by` back if a swap.
#[derive(Clone, Copy)]
struct Change {
    x: usize,
    bx: u32,
    a: usize,
    y: usize,
    by: u32,
    b: Option<usize>,
    delta: f64,
    /// The change of the sum of squares of the micro-batches' values.
    spread: f64,
}

/// An entry of a micro-step's ranking: (value, micro-batch).
type Ranked = (f64, u32);

struct Search<'a> {
    prep: &'a Prepared,
    pinned: &'a [bool],
    shape: Shape,
    slots: &'a [u32],
    dims: &'static [usize],
    /// The cost of every micro-batch `r * A + j`.
    cost: Vec<Phases>,
    /// Per micro-step and barrier index, the three largest micro-batches
    /// (descending) and the two smallest (ascending).
    top: Vec<[[Ranked; 3]; 2]>,
    low: Vec<[[Ranked; 2]; 2]>,
    /// Work left.
    left: Cell<u64>,
    /// Marks of the targets already listed (`stamp` when listed).
    mark: Vec<u32>,
    stamp: u32,
}

/// Searches the sequences `seqs` laid out by `slots` (`slot -> sequence`)
/// for `sync` with a budget of `effort * max(n + K, 32768)` (`0`: nothing
/// is done).
/// Positions marked in `pinned` (empty: none) never move. Members and loads
/// of the sequences are kept up to date; their costs are not read.
pub(crate) fn search(
    prep: &Prepared,
    pinned: &[bool],
    sync: SyncModel,
    shape: Shape,
    slots: &[u32],
    seqs: &mut Sequences,
    effort: u32,
) {
    let dims: &'static [usize] = match sync {
        SyncModel::Phase => &[0, 1],
        SyncModel::MicroStep => &[2],
        _ => return,
    };
    let size = (prep.len() as u64 + seqs.members.len() as u64).max(MIN_SIZE);
    let left = size.saturating_mul(u64::from(effort));
    if left == 0 || shape.ranks * shape.steps < 2 {
        return;
    }
    let nm = shape.ranks * shape.steps;
    let mut cost = vec![Phases::ZERO; nm];
    for (m, c) in cost.iter_mut().enumerate() {
        let first = m * shape.per_step;
        for &b in &slots[first..first + shape.per_step] {
            for &p in &seqs.members[b as usize] {
                *c += prep.cost(p as usize);
            }
        }
    }
    let mut s = Search {
        prep,
        pinned,
        shape,
        slots,
        dims,
        cost,
        top: vec![[[(0.0, 0); 3]; 2]; shape.steps],
        low: vec![[[(0.0, 0); 2]; 2]; shape.steps],
        left: Cell::new(left),
        mark: vec![0; nm],
        stamp: 0,
    };
    for j in 0..shape.steps {
        s.rescan(j);
    }
    s.run(seqs);
}

impl Search<'_> {
    /// The micro-step of micro-batch `m`.
    #[inline]
    fn step(&self, m: usize) -> usize {
        m % self.shape.steps
    }

    #[inline]
    fn pinned(&self, p: u32) -> bool {
        self.pinned.get(p as usize).copied().unwrap_or(false)
    }

    /// Spends `units` of work; `false` when the budget does not hold them.
    #[inline]
    fn spend(&self, units: u64) -> bool {
        let left = self.left.get();
        self.left.set(left.saturating_sub(units));
        left >= units
    }

    /// The step time: the sum over micro-steps and barriers of the maxima.
    fn objective(&self) -> f64 {
        (0..self.shape.steps)
            .map(|j| {
                (0..self.dims.len())
                    .map(|i| self.top[j][i][0].0)
                    .sum::<f64>()
            })
            .sum()
    }

    /// Recomputes micro-step `j`'s rankings in O(R).
    fn rescan(&mut self, j: usize) {
        let steps = self.shape.steps;
        for (i, &d) in self.dims.iter().enumerate() {
            let mut top = [(f64::NEG_INFINITY, u32::MAX); 3];
            let mut low = [(f64::INFINITY, u32::MAX); 2];
            for r in 0..self.shape.ranks {
                let m = r * steps + j;
                let v = key(self.cost[m], d);
                let e = (v, m as u32);
                // Strictly larger (smaller) first: ties to the lower index.
                if v > top[2].0 {
                    top[2] = e;
                    if top[2].0 > top[1].0 {
                        top.swap(1, 2);
                        if top[1].0 > top[0].0 {
                            top.swap(0, 1);
                        }
                    }
                }
                if v < low[1].0 {
                    low[1] = e;
                    if low[1].0 < low[0].0 {
                        low.swap(0, 1);
                    }
                }
            }
            self.top[j][i] = top;
            self.low[j][i] = low;
        }
    }

    /// The maximum of barrier `i` in micro-step `j` once micro-batches
    /// `changed` (in any micro-step) take the given costs.
    #[inline]
    fn new_max(&self, j: usize, i: usize, changed: [(usize, Phases); 2]) -> f64 {
        let d = self.dims[i];
        let mut best = self.top[j][i]
            .iter()
            .find(|e| e.1 != u32::MAX && changed.iter().all(|c| c.0 as u32 != e.1))
            .map_or(0.0, |e| e.0);
        for &(m, c) in &changed {
            if self.step(m) == j {
                best = best.max(key(c, d));
            }
        }
        best
    }

    /// The change of the step time when `x` gives `dc` to `y`.
    fn delta(&self, x: usize, y: usize, dc: Phases) -> f64 {
        let changed = [(x, self.cost[x] - dc), (y, self.cost[y] + dc)];
        let (jx, jy) = (self.step(x), self.step(y));
        let mut delta = 0.0;
        for i in 0..self.dims.len() {
            delta += self.new_max(jx, i, changed) - self.top[jx][i][0].0;
            if jy != jx {
                delta += self.new_max(jy, i, changed) - self.top[jy][i][0].0;
            }
        }
        delta
    }

    fn run(&mut self, seqs: &mut Sequences) {
        let (steps, ranks) = (self.shape.steps, self.shape.ranks);
        let mut targets: Vec<usize> = Vec::with_capacity(4 * steps);
        for _ in 0..PASSES {
            let mut changed = false;
            for j in 0..steps {
                for i in 0..self.dims.len() {
                    for _ in 0..ranks {
                        if self.left.get() == 0 {
                            return;
                        }
                        let x = self.top[j][i][0].1 as usize;
                        if x >= self.cost.len() {
                            break;
                        }
                        let objective = self.objective();
                        let tol = TOLERANCE * objective;
                        let per_step = objective / steps as f64;
                        let tol_spread = TOLERANCE * per_step * per_step;
                        self.targets(x, &mut targets);
                        let Some(c) = self.best(x, &targets, seqs, tol) else {
                            break;
                        };
                        if !(c.delta < -tol || (c.delta <= 0.0 && c.spread < -tol_spread)) {
                            break;
                        }
                        self.apply(c, seqs);
                        changed = true;
                    }
                }
            }
            if !changed {
                return;
            }
        }
    }

    /// The targets of `x`: in every micro-step, the two smallest
    /// micro-batches in each barrier, `x` excluded, each once.
    fn targets(&mut self, x: usize, out: &mut Vec<usize>) {
        out.clear();
        self.stamp = self.stamp.wrapping_add(1);
        if self.stamp == 0 {
            self.mark.iter_mut().for_each(|s| *s = 0);
            self.stamp = 1;
        }
        for j in 0..self.shape.steps {
            for i in 0..self.dims.len() {
                for e in self.low[j][i] {
                    let m = e.1 as usize;
                    if m < self.mark.len() && m != x && self.mark[m] != self.stamp {
                        self.mark[m] = self.stamp;
                        out.push(m);
                    }
                }
            }
        }
    }

    /// The sequences of micro-batch `m`.
    #[inline]
    fn sequences(&self, m: usize) -> &[u32] {
        let first = m * self.shape.per_step;
        &self.slots[first..first + self.shape.per_step]
    }

    /// The change of `x`'s samples with `targets` that lowers the step time
    /// most (none when the budget ends first).
    fn best(&self, x: usize, targets: &[usize], seqs: &Sequences, tol: f64) -> Option<Change> {
        let prep = self.prep;
        let (bins, loads) = (&seqs.members, &seqs.loads);
        let mut best: Option<Change> = None;
        for &bx in self.sequences(x) {
            let lx = loads[bx as usize];
            for (ia, &pa) in bins[bx as usize].iter().enumerate() {
                if self.pinned(pa) {
                    continue;
                }
                let (ca, sa) = (prep.cost(pa as usize), prep.size(pa as usize));
                for &y in targets {
                    let size: usize = self
                        .sequences(y)
                        .iter()
                        .map(|&b| bins[b as usize].len())
                        .sum();
                    if !self.spend(1 + size as u64) {
                        return best;
                    }
                    let mut moved = false;
                    for &by in self.sequences(y) {
                        let ly = loads[by as usize];
                        // A move, into the first sequence it fits.
                        if !moved && prep.fits(ly, pa as usize) {
                            moved = true;
                            self.consider(x, y, bx, ia, by, None, ca, tol, &mut best);
                        }
                        for (ib, &pb) in bins[by as usize].iter().enumerate() {
                            if self.pinned(pb) {
                                continue;
                            }
                            let sb = prep.size(pb as usize);
                            let fits = (0..3).all(|k| {
                                lx[k] - sa[k] + sb[k] <= prep.caps[k]
                                    && ly[k] - sb[k] + sa[k] <= prep.caps[k]
                            });
                            if fits {
                                let dc = ca - prep.cost(pb as usize);
                                self.consider(x, y, bx, ia, by, Some(ib), dc, tol, &mut best);
                            }
                        }
                    }
                }
            }
        }
        best
    }

    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn consider(
        &self,
        x: usize,
        y: usize,
        bx: u32,
        a: usize,
        by: u32,
        b: Option<usize>,
        dc: Phases,
        tol: f64,
        best: &mut Option<Change>,
    ) {
        let delta = self.delta(x, y, dc);
        if delta > 0.0 {
            return;
        }
        let spread: f64 = self
            .dims
            .iter()
            .map(|&d| {
                let (vx, vy, v) = (key(self.cost[x], d), key(self.cost[y], d), key(dc, d));
                2.0 * v * (vy - vx + v)
            })
            .sum();
        let better = best.map_or(true, |c| {
            delta < c.delta - tol || (delta <= c.delta + tol && spread < c.spread)
        });
        if better {
            *best = Some(Change {
                x,
                bx,
                a,
                y,
                by,
                b,
                delta,
                spread,
            });
        }
    }

    fn apply(&mut self, c: Change, seqs: &mut Sequences) {
        let prep = self.prep;
        let (bins, loads) = (&mut seqs.members, &mut seqs.loads);
        let (bx, by) = (c.bx as usize, c.by as usize);
        let pa = bins[bx][c.a];
        let (sa, ca) = (prep.size(pa as usize), prep.cost(pa as usize));
        let dc = match c.b {
            None => {
                bins[bx].swap_remove(c.a);
                bins[by].push(pa);
                for k in 0..3 {
                    loads[bx][k] -= sa[k];
                    loads[by][k] += sa[k];
                }
                ca
            }
            Some(ib) => {
                let pb = bins[by][ib];
                let (sb, cb) = (prep.size(pb as usize), prep.cost(pb as usize));
                bins[bx][c.a] = pb;
                bins[by][ib] = pa;
                for k in 0..3 {
                    loads[bx][k] = loads[bx][k] - sa[k] + sb[k];
                    loads[by][k] = loads[by][k] - sb[k] + sa[k];
                }
                ca - cb
            }
        };
        self.cost[c.x] = self.cost[c.x] - dc;
        self.cost[c.y] += dc;
        let (jx, jy) = (self.step(c.x), self.step(c.y));
        let ranks = self.shape.ranks as u64;
        self.spend(ranks * if jx == jy { 1 } else { 2 });
        self.rescan(jx);
        if jy != jx {
            self.rescan(jy);
        }
    }
}

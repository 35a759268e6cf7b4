//! The exact oracle of the planner: the optimal plan of a small instance
//! under every sync model, by branch and bound, with no solver.
//!
//! **A plan**, for the oracle as for [`Planner`] with
//! [`micro_steps(A)`](Planner::micro_steps) and one sequence a micro-step:
//! every sample to one slot `(rank, micro-step)` of `R x A`, such that every
//! slot holds at most `L` tokens (and at most the units cap, if any), and
//! every rank holds at least one sample. A slot's cost is the sum of its
//! samples' costs (the costs are given per sample, [`Given`]: additive). The
//! step time is the planner's ([`SyncModel`]):
//!
//! - `step`: the largest rank total;
//! - `micro-step`: the sum over micro-steps of the largest slot total;
//! - `phase`: the sum over micro-steps and phases of the largest slot cost
//!   in that phase.
//!
//! [`step_time`] is that definition, checked against the planner's own
//! evaluation ([`Report::predicted`](microbatch::plan::Report::predicted))
//! on its plans by the tests.
//!
//! **The search**: samples in decreasing order of total cost, each to every
//! slot it fits, depth first, the children in increasing order of the
//! bound they leave. Symmetries are broken: ranks, and micro-steps (the same
//! permutation on every rank), are interchangeable, so a sample enters an
//! empty rank only if it is the first empty one, and an empty micro-step
//! only if it is the first empty one (under `step`, where each rank may
//! order its micro-steps on its own, the first empty slot of its rank);
//! relabelling ranks and micro-steps by the order in which they first
//! receive a sample maps every plan to one the search visits, at the same
//! step time. A node is cut when its bound reaches the best plan found:
//! the time of the slots so far (costs are non-negative: it only grows),
//! raised by the work left beyond the room under the current maxima
//! (every unit of it above the room lifts some maximum by at least `1 /
//! R`), and by the next sample, which lifts the slot it joins. Exact: no
//! plan better than the returned one by more than a relative `1e-12`
//! exists.
//!
//! Exponential in the worst case: for the tests' 8 to 12 samples on 2 or 3
//! ranks and 1 to 4 micro-steps, at most a few million nodes
//! ([`Optimum::nodes`]); a node budget makes the search give up rather than
//! hang.
#![allow(dead_code)]

use microbatch::cost::{Given, Phases};
use microbatch::plan::{Plan, Planner, StepSample, SyncModel};

/// One sample: its sizes and its cost.
#[derive(Clone, Copy, Debug)]
pub struct Item {
    pub tokens: u64,
    pub units: u64,
    pub cost: Phases,
}

/// A small instance: the samples, `R` ranks, `A` micro-steps, the sequence
/// length `L` and an optional cap on units a sequence.
#[derive(Clone, Debug)]
pub struct Instance {
    pub items: Vec<Item>,
    pub ranks: usize,
    pub micro_steps: usize,
    pub seq_len: u32,
    pub max_units: Option<u32>,
}

impl Instance {
    /// The samples as the planner takes them: ids `0..n`, text only of the
    /// item's tokens, or with one image of the item's units when it has
    /// some (`images` gives them: id -> sample), the cost attached.
    pub fn samples(&self) -> Vec<StepSample> {
        self.items
            .iter()
            .enumerate()
            .map(|(i, it)| {
                let sample = if it.units == 0 {
                    microbatch::cost::Sample::text_only(it.tokens as u32)
                } else {
                    // One image of `units` units holding all tokens but one
                    // of text.
                    let units = core::num::NonZeroU32::new(it.units as u32).expect("units");
                    let img = microbatch::cost::Image::with_units(it.tokens as u32 - 1, units);
                    microbatch::cost::Sample::new(1, [img])
                };
                StepSample::new(i as u64, sample.with_cost(it.cost).expect("valid costs"))
            })
            .collect()
    }

    /// The planner of this instance under `sync`: [`Given`] costs, `R`,
    /// `L`, the cap and `A` micro-steps.
    pub fn planner(&self, sync: SyncModel) -> Planner<Given> {
        let p = Planner::new(Given)
            .ranks(self.ranks)
            .seq_len(self.seq_len)
            .micro_steps(self.micro_steps)
            .sync(sync);
        match self.max_units {
            Some(u) => p.max_units(u),
            None => p,
        }
    }

    fn caps(&self) -> (u64, u64) {
        (
            u64::from(self.seq_len),
            self.max_units.map_or(u64::MAX, u64::from),
        )
    }

    /// The slot of every item (`rank * A + micro-step`) in `plan`, if the
    /// plan has this instance's shape and samples (ids `0..n`).
    pub fn layout_of(&self, plan: &Plan) -> Option<Vec<usize>> {
        if plan.ranks() != self.ranks
            || plan.micro_steps() != self.micro_steps
            || plan.len() != self.items.len()
        {
            return None;
        }
        let mut slot = vec![usize::MAX; self.items.len()];
        for r in 0..self.ranks {
            for j in 0..self.micro_steps {
                for &id in plan.micro_batch(r, j) {
                    let s = slot.get_mut(usize::try_from(id).ok()?)?;
                    if *s != usize::MAX {
                        return None;
                    }
                    *s = r * self.micro_steps + j;
                }
            }
        }
        slot.iter().all(|&s| s != usize::MAX).then_some(slot)
    }

    /// Whether `slots` (one a sample) is a plan: every slot within `L` and
    /// the cap, every rank some sample.
    pub fn is_plan(&self, slots: &[usize]) -> bool {
        let k = self.ranks * self.micro_steps;
        let (cap_t, cap_u) = self.caps();
        let mut tokens = vec![0u64; k];
        let mut units = vec![0u64; k];
        let mut used = vec![false; self.ranks];
        for (it, &s) in self.items.iter().zip(slots) {
            if s >= k {
                return false;
            }
            tokens[s] += it.tokens;
            units[s] += it.units;
            used[s / self.micro_steps] = true;
        }
        slots.len() == self.items.len()
            && tokens.iter().all(|&t| t <= cap_t)
            && units.iter().all(|&u| u <= cap_u)
            && used.iter().all(|&u| u)
    }

    /// The step time of `slots` (one a sample) under `sync`.
    pub fn time(&self, sync: SyncModel, slots: &[usize]) -> f64 {
        let mut cost = vec![Phases::ZERO; self.ranks * self.micro_steps];
        for (it, &s) in self.items.iter().zip(slots) {
            cost[s] += it.cost;
        }
        step_time(sync, self.ranks, self.micro_steps, &cost)
    }
}

/// The step time of slot costs (`rank * steps + micro-step`) under `sync`,
/// by the definition of [`SyncModel`].
pub fn step_time(sync: SyncModel, ranks: usize, steps: usize, cost: &[Phases]) -> f64 {
    match sync {
        SyncModel::Step => (0..ranks)
            .map(|r| (0..steps).map(|j| cost[r * steps + j].total()).sum::<f64>())
            .fold(0.0, f64::max),
        SyncModel::MicroStep => (0..steps)
            .map(|j| {
                (0..ranks)
                    .map(|r| cost[r * steps + j].total())
                    .fold(0.0, f64::max)
            })
            .sum(),
        _ => (0..steps)
            .map(|j| {
                (0..ranks)
                    .map(|r| cost[r * steps + j])
                    .fold(Phases::ZERO, Phases::max)
                    .total()
            })
            .sum(),
    }
}

/// The next assignment of items to `slots` slots in an exhaustive
/// enumeration (`assign` read as a base-`slots` counter, its first digit
/// lowest); false once every assignment was visited (`assign` back to all
/// zeros).
pub fn next_assignment(assign: &mut [usize], slots: usize) -> bool {
    for digit in assign.iter_mut() {
        *digit += 1;
        if *digit < slots {
            return true;
        }
        *digit = 0;
    }
    false
}

/// An optimal plan: its step time, the slot of every sample, and the nodes
/// the search visited.
#[derive(Clone, Debug)]
pub struct Optimum {
    pub time: f64,
    pub slots: Vec<usize>,
    pub nodes: u64,
}

/// The optimal plan of `inst` under `sync`, or `None` when no plan exists
/// or the search needs more than `budget` nodes.
pub fn optimum(inst: &Instance, sync: SyncModel, budget: u64) -> Option<Optimum> {
    let n = inst.items.len();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| {
        let (x, y) = (&inst.items[a], &inst.items[b]);
        y.cost
            .total()
            .total_cmp(&x.cost.total())
            .then(y.tokens.cmp(&x.tokens))
            .then(a.cmp(&b))
    });
    // rest[d]: the cost of the samples from depth d on.
    let mut rest = vec![Phases::ZERO; n + 1];
    for d in (0..n).rev() {
        rest[d] = rest[d + 1] + inst.items[order[d]].cost;
    }
    let k = inst.ranks * inst.micro_steps;
    let (cap_t, cap_u) = inst.caps();
    let mut s = Search {
        inst,
        sync,
        order,
        rest,
        cap_t,
        cap_u,
        tokens: vec![0; k],
        units: vec![0; k],
        cost: vec![Phases::ZERO; k],
        count: vec![0; k],
        per_rank: vec![0; inst.ranks],
        per_step: vec![0; inst.micro_steps],
        assign: vec![0; n],
        best: f64::INFINITY,
        best_assign: None,
        nodes: 0,
        budget,
    };
    s.dive(0);
    if s.nodes > budget {
        return None;
    }
    let order = s.order;
    let best = s.best_assign?;
    let mut slots = vec![0; n];
    for (d, &i) in order.iter().enumerate() {
        slots[i] = best[d];
    }
    Some(Optimum {
        time: inst.time(sync, &slots),
        slots,
        nodes: s.nodes,
    })
}

struct Search<'a> {
    inst: &'a Instance,
    sync: SyncModel,
    order: Vec<usize>,
    rest: Vec<Phases>,
    cap_t: u64,
    cap_u: u64,
    tokens: Vec<u64>,
    units: Vec<u64>,
    cost: Vec<Phases>,
    count: Vec<usize>,
    per_rank: Vec<usize>,
    per_step: Vec<usize>,
    /// The slot of the sample at each depth.
    assign: Vec<usize>,
    best: f64,
    best_assign: Option<Vec<usize>>,
    nodes: u64,
    budget: u64,
}

/// Room-raised bound of one barrier family: the sum of the maxima plus
/// the work left beyond the room under them over `R`, and at least the sum
/// of the maxima plus `lift`, the least that the next sample lifts the
/// maximum of the micro-step (or rank) it joins.
fn raised(maxima: f64, room: f64, left: f64, ranks: f64, lift: f64) -> f64 {
    (maxima + (left - room).max(0.0) / ranks).max(maxima + lift)
}

impl Search<'_> {
    /// The lower bound of any completion of the current slots, with the
    /// samples from depth `d` on left.
    fn bound(&self, d: usize) -> f64 {
        let (ranks, steps) = (self.inst.ranks, self.inst.micro_steps);
        let rf = ranks as f64;
        let left = self.rest[d];
        let next = self.order.get(d).map(|&i| self.inst.items[i].cost);
        match self.sync {
            SyncModel::Step => {
                let loads: Vec<f64> = (0..ranks)
                    .map(|r| (0..steps).map(|j| self.cost[r * steps + j].total()).sum())
                    .collect();
                let max = loads.iter().copied().fold(0.0, f64::max);
                let room: f64 = loads.iter().map(|l| max - l).sum();
                let least = loads.iter().copied().fold(f64::INFINITY, f64::min);
                let lift = next.map_or(0.0, |c| (least + c.total() - max).max(0.0));
                raised(max, room, left.total(), rf, lift)
            }
            SyncModel::MicroStep => {
                let f = |c: &Phases| c.total();
                self.columns(f, left.total(), next.as_ref().map(f))
            }
            _ => {
                let v = |c: &Phases| c.vision;
                let l = |c: &Phases| c.language;
                self.columns(v, left.vision, next.as_ref().map(v))
                    + self.columns(l, left.language, next.as_ref().map(l))
            }
        }
    }

    /// The bound of the micro-step barriers in the value `f` of a slot's
    /// cost: the sum of the maxima, raised by the work `left` beyond the
    /// room under them, or by the next sample of value `next`, which joins
    /// some micro-step's slot.
    fn columns(&self, f: impl Fn(&Phases) -> f64, left: f64, next: Option<f64>) -> f64 {
        let (ranks, steps) = (self.inst.ranks, self.inst.micro_steps);
        let (mut maxima, mut room) = (0.0, 0.0);
        let mut lift = f64::INFINITY;
        for j in 0..steps {
            let col = (0..ranks).map(|r| f(&self.cost[r * steps + j]));
            let (max, min, sum) = col.fold((0.0f64, f64::INFINITY, 0.0), |(a, b, s), x| {
                (a.max(x), b.min(x), s + x)
            });
            maxima += max;
            room += ranks as f64 * max - sum;
            if let Some(c) = next {
                lift = lift.min((min + c - max).max(0.0));
            }
        }
        if next.is_none() {
            lift = 0.0;
        }
        raised(maxima, room, left, ranks as f64, lift)
    }

    fn dive(&mut self, d: usize) {
        self.nodes += 1;
        if self.nodes > self.budget {
            return;
        }
        let n = self.order.len();
        if d == n {
            let t = self.bound(d);
            if t < self.best {
                self.best = t;
                self.best_assign = Some(self.assign.clone());
            }
            return;
        }
        let (ranks, steps) = (self.inst.ranks, self.inst.micro_steps);
        let it = self.inst.items[self.order[d]];
        let first_empty_rank = (0..ranks).find(|&r| self.per_rank[r] == 0);
        let first_empty_step = (0..steps).find(|&j| self.per_step[j] == 0);
        let empty_ranks = self.per_rank.iter().filter(|&&c| c == 0).count();
        let mut children: Vec<(f64, usize)> = Vec::with_capacity(ranks * steps);
        for r in 0..ranks {
            if self.per_rank[r] == 0 && Some(r) != first_empty_rank {
                continue;
            }
            // After this sample, every empty rank needs one of the rest.
            let empty_after = empty_ranks - usize::from(self.per_rank[r] == 0);
            if empty_after > n - d - 1 {
                continue;
            }
            let first_empty_here = (0..steps).find(|&j| self.count[r * steps + j] == 0);
            for j in 0..steps {
                let s = r * steps + j;
                let symmetric = match self.sync {
                    SyncModel::Step => self.count[s] == 0 && Some(j) != first_empty_here,
                    _ => self.per_step[j] == 0 && Some(j) != first_empty_step,
                };
                if symmetric
                    || self.tokens[s] + it.tokens > self.cap_t
                    || self.units[s] + it.units > self.cap_u
                {
                    continue;
                }
                let old = self.place(s, &it, d);
                let b = self.bound(d + 1);
                self.unplace(s, &it, old);
                if b < self.best * (1.0 - 1e-12) {
                    children.push((b, s));
                }
            }
        }
        children.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        for (b, s) in children {
            if b >= self.best * (1.0 - 1e-12) || self.nodes > self.budget {
                continue;
            }
            let old = self.place(s, &it, d);
            self.dive(d + 1);
            self.unplace(s, &it, old);
        }
    }

    /// Places the sample at depth `d` in slot `s` and returns what the
    /// slot held, for [`Search::unplace`] (exactly: no float subtraction).
    fn place(&mut self, s: usize, it: &Item, d: usize) -> Phases {
        let steps = self.inst.micro_steps;
        let old = self.cost[s];
        self.tokens[s] += it.tokens;
        self.units[s] += it.units;
        self.cost[s] += it.cost;
        self.count[s] += 1;
        self.per_rank[s / steps] += 1;
        self.per_step[s % steps] += 1;
        self.assign[d] = s;
        old
    }

    fn unplace(&mut self, s: usize, it: &Item, old: Phases) {
        let steps = self.inst.micro_steps;
        self.tokens[s] -= it.tokens;
        self.units[s] -= it.units;
        self.cost[s] = old;
        self.count[s] -= 1;
        self.per_rank[s / steps] -= 1;
        self.per_step[s % steps] -= 1;
    }
}

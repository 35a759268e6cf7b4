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
//! **The search**: samples in decreasing order of total cost, depth first,
//! the children in increasing order of the bound they leave; a node is cut
//! when its bound reaches the best plan found. Costs are non-negative, so
//! the time of what is placed only grows; the bounds add the work left
//! beyond the room under the current maxima (every unit of it above the
//! room lifts some maximum by at least `1 / R`), or the lift of the next
//! sample on the slot (rank) it joins. Two searches, by the shape of the
//! step time:
//!
//! - `step` (only rank totals count): samples to *ranks* (a sample enters
//!   an empty rank only if it is the first empty one), a rank's samples
//!   checked to pack into its `A` micro-steps within `L` and the cap (a
//!   small exhaustive packing, cached per set of samples; a subset of a set
//!   that packs packs), so the micro-step a sample takes is never branched
//!   on;
//! - `micro-step`, `phase` (only each micro-step's maxima count): samples
//!   to slots, where the slots of one micro-step are interchangeable on
//!   their own (a sample enters an empty slot only if it is the first empty
//!   one of its micro-step, an empty micro-step only if it is the first
//!   empty one); a plan needs `R` non-empty slots, which a rotation of each
//!   micro-step's slots spreads over every rank at the same step time.
//!
//! Every plan has a relabelling the search visits at the same step time,
//! so the search is exact: no plan better than the returned one by more
//! than a relative `1e-12` exists. Exponential in the worst case; a node
//! budget (search and packing nodes, [`Optimum::nodes`]) makes it give up
//! rather than hang.
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
    optimum_below(inst, sync, budget, f64::INFINITY)
        .ok()
        .flatten()
}

/// The optimal plan of `inst` under `sync` if its step time is below `bar`
/// (by more than a relative `1e-12`), searched only below `bar`:
/// `Ok(None)` when no plan is (a proof that every plan takes at least
/// about `bar`), `Err(nodes)` when the search needs more than `budget`
/// nodes. A bar just above a known plan's time (the planner's, say) makes
/// the search explore only what can beat it; the answer does not trust
/// the bar.
pub fn optimum_below(
    inst: &Instance,
    sync: SyncModel,
    budget: u64,
    bar: f64,
) -> Result<Option<Optimum>, u64> {
    let n = inst.items.len();
    if n > 64 {
        return Err(0);
    }
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
    let found = match sync {
        SyncModel::Step => rank_search(inst, order, rest, budget, bar)?,
        _ => column_search(inst, sync, order, rest, budget, bar)?,
    };
    Ok(found.map(|(slots, nodes)| Optimum {
        time: inst.time(sync, &slots),
        slots,
        nodes,
    }))
}

/// Room-raised bound of one barrier family: the sum of the maxima plus
/// the work left beyond the room under them over `R`, and at least the sum
/// of the maxima plus `lift`, the least that the next sample lifts the
/// maximum of the micro-step (or rank) it joins.
fn raised(maxima: f64, room: f64, left: f64, ranks: f64, lift: f64) -> f64 {
    (maxima + (left - room).max(0.0) / ranks).max(maxima + lift)
}

/// Whether a node of bound `b` can still beat `best` (by more than a
/// relative `1e-12`).
fn promising(b: f64, best: f64) -> bool {
    b < best * (1.0 - 1e-12)
}

/// One barrier a step: samples to ranks, depth first (a sample enters an
/// empty rank only if it is the first empty one); a rank's samples must
/// pack into its `A` micro-steps ([`pack`], cached per set). The bound: the
/// largest rank total raised by the work left beyond the room under it,
/// or by the next sample on the least loaded rank. Returns the slots of
/// the best plan and the nodes (search and packing).
fn rank_search(
    inst: &Instance,
    order: Vec<usize>,
    rest: Vec<Phases>,
    budget: u64,
    bar: f64,
) -> Result<Option<(Vec<usize>, u64)>, u64> {
    let mut s = Ranks {
        inst,
        order,
        rest,
        load: vec![0.0; inst.ranks],
        members: vec![0; inst.ranks],
        assign: vec![0; inst.items.len()],
        best: bar,
        best_assign: None,
        nodes: 0,
        budget,
        packs: std::collections::HashMap::new(),
    };
    s.dive(0);
    if s.nodes > budget {
        return Err(s.nodes);
    }
    let Some(best) = s.best_assign.take() else {
        return Ok(None);
    };
    let mut slots = vec![0; inst.items.len()];
    for r in 0..inst.ranks {
        let mine: Vec<usize> = (0..s.order.len())
            .filter(|&d| best[d] == r)
            .map(|d| s.order[d])
            .collect();
        let mut nodes = 0;
        let bins = pack(inst, &mine, &mut nodes).expect("a rank's samples packed in the search");
        for (&i, b) in mine.iter().zip(bins) {
            slots[i] = r * inst.micro_steps + b;
        }
    }
    Ok(Some((slots, s.nodes)))
}

struct Ranks<'a> {
    inst: &'a Instance,
    order: Vec<usize>,
    rest: Vec<Phases>,
    load: Vec<f64>,
    /// Per rank: its samples (bit `i` for sample `i`).
    members: Vec<u64>,
    /// The rank of the sample at each depth.
    assign: Vec<usize>,
    best: f64,
    best_assign: Option<Vec<usize>>,
    nodes: u64,
    budget: u64,
    /// Whether a set of samples packs into `A` micro-steps.
    packs: std::collections::HashMap<u64, bool>,
}

impl Ranks<'_> {
    fn bound(&self, d: usize) -> f64 {
        let max = self.load.iter().copied().fold(0.0, f64::max);
        let least = self.load.iter().copied().fold(f64::INFINITY, f64::min);
        let room: f64 = self.load.iter().map(|l| max - l).sum();
        let lift = self.order.get(d).map_or(0.0, |&i| {
            (least + self.inst.items[i].cost.total() - max).max(0.0)
        });
        raised(
            max,
            room,
            self.rest[d].total(),
            self.inst.ranks as f64,
            lift,
        )
    }

    /// Whether no completion beats `self.best`, by capacity (as
    /// [`Columns::hopeless`], the ranks one micro-step): the largest
    /// total raised by less than `D = best - max`, a rank of room `rho`
    /// takes at most `rho` plus the raise and at most the samples left of
    /// cost up to `rho + D`.
    fn hopeless(&self, d: usize) -> bool {
        let max = self.load.iter().copied().fold(0.0, f64::max);
        let room = self.best * (1.0 - 1e-12) - max;
        if room <= 0.0 {
            return true;
        }
        let values: Vec<f64> = self.order[d..]
            .iter()
            .map(|&i| self.inst.items[i].cost.total())
            .collect();
        let rooms: Vec<f64> = self.load.iter().map(|&l| max - l).collect();
        least_raise_of(&[rooms], &values, room) >= room
    }

    fn fits(&mut self, set: u64) -> bool {
        if let Some(&ok) = self.packs.get(&set) {
            return ok;
        }
        let items: Vec<usize> = (0..self.inst.items.len())
            .filter(|&i| set >> i & 1 == 1)
            .collect();
        let ok = pack(self.inst, &items, &mut self.nodes).is_some();
        self.packs.insert(set, ok);
        ok
    }

    fn dive(&mut self, d: usize) {
        self.nodes += 1;
        if self.nodes > self.budget {
            return;
        }
        let n = self.order.len();
        if d == n {
            let t = self.load.iter().copied().fold(0.0, f64::max);
            if t < self.best {
                self.best = t;
                self.best_assign = Some(self.assign.clone());
            }
            return;
        }
        let ranks = self.inst.ranks;
        let i = self.order[d];
        let x = self.inst.items[i].cost.total();
        let empty = self.members.iter().filter(|&&m| m == 0).count();
        let first_empty = self.members.iter().position(|&m| m == 0);
        let mut children: Vec<(f64, usize)> = Vec::with_capacity(ranks);
        for r in 0..ranks {
            let was_empty = self.members[r] == 0;
            if (was_empty && Some(r) != first_empty) || empty - usize::from(was_empty) > n - d - 1 {
                continue;
            }
            if !self.fits(self.members[r] | 1 << i) {
                continue;
            }
            let old = self.load[r];
            self.load[r] += x;
            let b = self.bound(d + 1);
            let cut = !promising(b, self.best) || self.hopeless(d + 1);
            self.load[r] = old;
            if !cut {
                children.push((b, r));
            }
        }
        children.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        for (b, r) in children {
            if !promising(b, self.best) || self.nodes > self.budget {
                continue;
            }
            let old = self.load[r];
            self.load[r] += x;
            self.members[r] |= 1 << i;
            self.assign[d] = r;
            self.dive(d + 1);
            self.members[r] &= !(1 << i);
            self.load[r] = old;
        }
    }
}

/// The micro-step of each of `items` (indices into `inst.items`) in a
/// packing into `A` micro-steps within `L` and the cap, if one exists: the
/// items by decreasing tokens, each into every micro-step it fits (an
/// empty one only if it is the first), depth first. Counts its nodes.
fn pack(inst: &Instance, items: &[usize], nodes: &mut u64) -> Option<Vec<usize>> {
    let (cap_t, cap_u) = inst.caps();
    let mut idx: Vec<usize> = (0..items.len()).collect();
    idx.sort_by_key(|&k| {
        core::cmp::Reverse((inst.items[items[k]].tokens, inst.items[items[k]].units))
    });
    let sizes: Vec<(u64, u64)> = idx
        .iter()
        .map(|&k| (inst.items[items[k]].tokens, inst.items[items[k]].units))
        .collect();
    let mut load = vec![(0u64, 0u64); inst.micro_steps];
    let mut bin = vec![0; items.len()];
    fn go(
        d: usize,
        sizes: &[(u64, u64)],
        load: &mut [(u64, u64)],
        bin: &mut [usize],
        caps: (u64, u64),
        nodes: &mut u64,
    ) -> bool {
        *nodes += 1;
        let Some(&(t, u)) = sizes.get(d) else {
            return true;
        };
        for b in 0..load.len() {
            // Bins of equal load are interchangeable: the first of them.
            if load[..b].contains(&load[b]) {
                continue;
            }
            if load[b].0 + t > caps.0 || load[b].1 + u > caps.1 {
                continue;
            }
            load[b].0 += t;
            load[b].1 += u;
            bin[d] = b;
            let ok = go(d + 1, sizes, load, bin, caps, nodes);
            load[b].0 -= t;
            load[b].1 -= u;
            if ok {
                return true;
            }
        }
        false
    }
    if !go(0, &sizes, &mut load, &mut bin, (cap_t, cap_u), nodes) {
        return None;
    }
    let mut out = vec![0; items.len()];
    for (d, &k) in idx.iter().enumerate() {
        out[k] = bin[d];
    }
    Some(out)
}

/// Barriers every micro-step (`micro-step`, `phase`): samples to slots,
/// depth first. Only the micro-step's maxima count, so the slots of one
/// micro-step are interchangeable on their own (and the micro-steps with
/// each other): a sample enters an empty slot only if it is the first empty
/// slot of its micro-step, and an empty micro-step only if it is the first
/// empty one. Every rank holds a sample once at least `R` slots do: each
/// micro-step's slots are rotated at the end so that the non-empty ones
/// cover every rank, at the same step time. The bound: per micro-step
/// family (the totals; per phase, the vision and the language sums, and
/// at least the totals' bound) the sum of the maxima, raised by the work
/// left beyond the room under them, or by the next sample, which lifts the
/// slot it joins. Returns the slots of the best plan and the nodes.
fn column_search(
    inst: &Instance,
    sync: SyncModel,
    order: Vec<usize>,
    rest: Vec<Phases>,
    budget: u64,
    bar: f64,
) -> Result<Option<(Vec<usize>, u64)>, u64> {
    let k = inst.ranks * inst.micro_steps;
    let (cap_t, cap_u) = inst.caps();
    let mut s = Columns {
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
        filled: vec![0; inst.micro_steps],
        assign: vec![(0, 0); inst.items.len()],
        best: bar,
        best_assign: None,
        nodes: 0,
        budget,
    };
    s.dive(0);
    if s.nodes > budget {
        return Err(s.nodes);
    }
    let Some(best) = s.best_assign.take() else {
        return Ok(None);
    };
    let (ranks, steps) = (inst.ranks, inst.micro_steps);
    // Rotate micro-step j by the slots filled before it: the non-empty
    // slots, R at least, then cover every rank.
    let mut filled = vec![0; steps];
    for &(r, j) in &best {
        filled[j] = filled[j].max(r + 1);
    }
    let mut offset = vec![0; steps];
    for j in 1..steps {
        offset[j] = offset[j - 1] + filled[j - 1];
    }
    let mut slots = vec![0; inst.items.len()];
    for (d, &(r, j)) in best.iter().enumerate() {
        slots[s.order[d]] = ((r + offset[j]) % ranks) * steps + j;
    }
    Ok(Some((slots, s.nodes)))
}

struct Columns<'a> {
    inst: &'a Instance,
    sync: SyncModel,
    order: Vec<usize>,
    rest: Vec<Phases>,
    cap_t: u64,
    cap_u: u64,
    /// Per slot `r * A + j` (rank `r` in the search's own labels).
    tokens: Vec<u64>,
    units: Vec<u64>,
    cost: Vec<Phases>,
    count: Vec<usize>,
    /// Per micro-step: its non-empty slots (always its first ones).
    filled: Vec<usize>,
    /// The (slot, micro-step) of the sample at each depth.
    assign: Vec<(usize, usize)>,
    best: f64,
    best_assign: Option<Vec<(usize, usize)>>,
    nodes: u64,
    budget: u64,
}

impl Columns<'_> {
    fn bound(&self, d: usize) -> f64 {
        let left = self.rest[d];
        let next = self.order.get(d).map(|&i| self.inst.items[i].cost);
        let total = |c: &Phases| c.total();
        let all = self.family(total, left.total(), next.as_ref().map(total));
        if self.sync == SyncModel::MicroStep {
            return all;
        }
        let v = |c: &Phases| c.vision;
        let l = |c: &Phases| c.language;
        let phases = self.family(v, left.vision, next.as_ref().map(v))
            + self.family(l, left.language, next.as_ref().map(l));
        phases.max(all)
    }

    /// The bound of the micro-step barriers in the value `f` of a slot's
    /// cost: the sum of the maxima, raised by the work `left` beyond the
    /// room under them, or by the next sample of value `next`.
    fn family(&self, f: impl Fn(&Phases) -> f64, left: f64, next: Option<f64>) -> f64 {
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

    /// Whether no completion of the slots so far (the samples from depth
    /// `d` on left) beats `self.best`, by capacity: with every micro-step's
    /// maximum raised by `delta_j` (in each family of barriers), the raises
    /// summing to less than `D = best - time so far`, a slot of room `rho`
    /// under its micro-step's maximum takes at most `rho + delta_j` and at
    /// most the samples left of value up to `rho + D`; the least sum of
    /// raises that lets the slots take all the work left (a water-filling
    /// over each micro-step's slots, whose capacity is concave in its
    /// raise) must stay below `D`.
    fn hopeless(&self, d: usize) -> bool {
        let rest = &self.order[d..];
        let items = self.inst.items.as_slice();
        let total = |c: &Phases| c.total();
        let v = |c: &Phases| c.vision;
        let l = |c: &Phases| c.language;
        let families: Vec<&dyn Fn(&Phases) -> f64> = if self.sync == SyncModel::MicroStep {
            vec![&total]
        } else {
            vec![&v, &l]
        };
        let maxima: f64 = families.iter().map(|f| self.maxima(f)).sum();
        let room = self.best * (1.0 - 1e-12) - maxima;
        if room <= 0.0 {
            return true;
        }
        let mut need = 0.0;
        for f in families {
            let values: Vec<f64> = rest.iter().map(|&i| f(&items[i].cost)).collect();
            need += self.least_raise(f, &values, room);
            if need >= room {
                return true;
            }
        }
        false
    }

    /// The sum of the micro-steps' maxima in the value `f` of a slot.
    fn maxima(&self, f: &dyn Fn(&Phases) -> f64) -> f64 {
        let (ranks, steps) = (self.inst.ranks, self.inst.micro_steps);
        (0..steps)
            .map(|j| {
                (0..ranks)
                    .map(|r| f(&self.cost[r * steps + j]))
                    .fold(0.0, f64::max)
            })
            .sum()
    }

    /// The least sum of raises of the micro-steps' maxima in the value `f`
    /// (each raise below `limit`) under which the slots can take `values`
    /// (the samples left), or infinity.
    fn least_raise(&self, f: &dyn Fn(&Phases) -> f64, values: &[f64], limit: f64) -> f64 {
        let (ranks, steps) = (self.inst.ranks, self.inst.micro_steps);
        let rooms: Vec<Vec<f64>> = (0..steps)
            .map(|j| {
                let col: Vec<f64> = (0..ranks).map(|r| f(&self.cost[r * steps + j])).collect();
                let max = col.iter().copied().fold(0.0, f64::max);
                col.iter().map(|x| max - x).collect()
            })
            .collect();
        least_raise_of(&rooms, values, limit)
    }

    fn dive(&mut self, d: usize) {
        self.nodes += 1;
        if self.nodes > self.budget {
            return;
        }
        let n = self.order.len();
        let (ranks, steps) = (self.inst.ranks, self.inst.micro_steps);
        if d == n {
            let t = step_time(self.sync, ranks, steps, &self.cost);
            if t < self.best {
                self.best = t;
                self.best_assign = Some(self.assign.clone());
            }
            return;
        }
        let it = self.inst.items[self.order[d]];
        let nonempty: usize = self.filled.iter().sum();
        let first_empty_step = self.filled.iter().position(|&f| f == 0);
        let mut children: Vec<(f64, usize, usize)> = Vec::with_capacity(ranks * steps);
        for j in 0..steps {
            if self.filled[j] == 0 && Some(j) != first_empty_step {
                continue;
            }
            for r in 0..(self.filled[j] + 1).min(ranks) {
                let new = r == self.filled[j];
                // Every rank needs a slot: R non-empty ones at the end.
                if nonempty + usize::from(new) + (n - d - 1) < ranks {
                    continue;
                }
                let s = r * steps + j;
                if self.tokens[s] + it.tokens > self.cap_t || self.units[s] + it.units > self.cap_u
                {
                    continue;
                }
                let old = self.place(r, j, &it, d);
                let b = self.bound(d + 1);
                let cut = !promising(b, self.best) || self.hopeless(d + 1);
                self.unplace(r, j, &it, old);
                if !cut {
                    children.push((b, r, j));
                }
            }
        }
        children.sort_by(|a, b| a.0.total_cmp(&b.0).then((a.2, a.1).cmp(&(b.2, b.1))));
        for (b, r, j) in children {
            if !promising(b, self.best) || self.nodes > self.budget {
                continue;
            }
            let old = self.place(r, j, &it, d);
            self.dive(d + 1);
            self.unplace(r, j, &it, old);
        }
    }

    /// Places the sample at depth `d` in slot `r` of micro-step `j` and
    /// returns what the slot held, for [`Columns::unplace`] (exactly: no
    /// float subtraction).
    fn place(&mut self, r: usize, j: usize, it: &Item, d: usize) -> Phases {
        let s = r * self.inst.micro_steps + j;
        let old = self.cost[s];
        self.tokens[s] += it.tokens;
        self.units[s] += it.units;
        self.cost[s] += it.cost;
        if self.count[s] == 0 {
            self.filled[j] += 1;
        }
        self.count[s] += 1;
        self.assign[d] = (r, j);
        old
    }

    fn unplace(&mut self, r: usize, j: usize, it: &Item, old: Phases) {
        let s = r * self.inst.micro_steps + j;
        self.tokens[s] -= it.tokens;
        self.units[s] -= it.units;
        self.cost[s] = old;
        self.count[s] -= 1;
        // The slot left empty is the last non-empty one of its micro-step
        // (it entered as the first empty one).
        if self.count[s] == 0 {
            self.filled[j] -= 1;
        }
    }
}

/// The least sum of raises of the maxima of groups of slots (`rooms`: per
/// group, each slot's room under its group's maximum; each raise below
/// `limit`) under which the slots can take `values`, or infinity: a slot of
/// room `rho` in a group raised by `delta` takes at most `rho + delta` and
/// at most the values up to `rho + limit`, so a group's capacity is
/// concave in its raise (of slope the number of its slots below that
/// cap), and raises bought in decreasing order of slope are the least.
fn least_raise_of(rooms: &[Vec<f64>], values: &[f64], limit: f64) -> f64 {
    let left: f64 = values.iter().sum();
    let mut have = 0.0;
    let mut segments: Vec<(usize, f64)> = Vec::new();
    for group in rooms {
        let mut spans: Vec<f64> = Vec::new();
        for &rho in group {
            let cap: f64 = values.iter().filter(|&&y| y <= rho + limit).sum();
            have += rho.min(cap);
            if cap > rho {
                spans.push(cap - rho);
            }
        }
        spans.sort_by(f64::total_cmp);
        let mut at = 0.0;
        for (k, &t) in spans.iter().enumerate() {
            segments.push((spans.len() - k, t - at));
            at = t;
        }
    }
    if have >= left {
        return 0.0;
    }
    segments.sort_by_key(|&(slope, _)| std::cmp::Reverse(slope));
    let mut raise = 0.0;
    for (slope, len) in segments {
        let gain = slope as f64 * len;
        if have + gain >= left {
            return raise + (left - have) / slope as f64;
        }
        have += gain;
        raise += len;
    }
    f64::INFINITY
}

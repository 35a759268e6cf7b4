//! Step 3, the exchange: samples brought home by re-splitting their sequence with one of their home rank, under the budgets of the locality-free plan.
//!
//! [`Search`] holds a layout with every slot's sizes and every group's
//! load against a [`Budget`]. [`Search::run`] makes up to `passes` passes
//! over the samples away from home, the most bytes first; for each it
//! weighs re-splits of its sequence `a` with a sequence `b` of its origin
//! rank (or, with nodes, of a rank of its node): up to
//! [`LOCALITY_PAIRS`] such sequences, those of `a`'s micro-step first
//! (under the per-micro-step models), then by decreasing room; under
//! [`SyncModel::Step`] not those of a rank that holds only its own
//! samples and has no room for the sample (the fill kept those as denser
//! in bytes per cost). A re-split ([`Search::split`], `split.rs`) is
//! kept if both sides keep the caps and their budgets and it saves weight;
//! the first that brings the sample home at no other loss is taken, else
//! the one that saves the most (then leaves the most room). A sample is
//! weighed again in a later pass only when its rank or its home (node)
//! changed since, and then, when its last weighing found nothing and its
//! own group is unchanged, only against the sequences whose group changed
//! since. Under the per-micro-step models the swap pass (`swap.rs`) runs
//! once the first [`LOCALITY_BEFORE_SWAP`] of the first pass's samples
//! are weighed. With [`Locality::effort`](super::Locality::effort) a run
//! weighs at most that many re-splits in all.
//!
//! Every change saves weight, so a run never moves more than its start.
//! O(passes * n * LOCALITY_PAIRS * (m * (1 + pushes) + LOCALITY_NODES) +
//! passes * n * A * S * log(A * S)) time for m <= [`LOCALITY_PAIR`] the
//! samples of a pair (the `A * S` sequences of the home rank sorted by
//! room once a sample), O(n + K) extra space.

use alloc::vec;
use alloc::vec::Vec;
use core::cmp::Reverse;

use super::super::prepare::Prepared;
use super::super::sync::SyncModel;
use super::super::tuning::{LOCALITY_BEFORE_SWAP, LOCALITY_PAIRS, LOCALITY_SWAP_ROUNDS};
#[cfg(doc)]
use super::super::tuning::{LOCALITY_NODES, LOCALITY_PAIR};
use super::budget::Budget;
use super::homes::Homes;
use super::split::Pair;
use super::state::{add, normalize, sub3, Info, Search};
use crate::cost::Phases;

impl<'a> Search<'a> {
    /// The search on `slots` under `budget`. O(n + K).
    pub(super) fn new(
        prep: &'a Prepared,
        homes: &'a Homes,
        slots: Vec<Vec<u32>>,
        budget: Budget,
    ) -> Self {
        let shape = budget.shape;
        let info = prep
            .items
            .iter()
            .enumerate()
            .map(|(p, e)| Info {
                cost: e.cost,
                size: e.sizes,
                origin: homes.origin(p),
                bytes: homes.bytes(p),
            })
            .collect();
        let groups = budget.groups();
        let mut search = Search {
            info,
            prep,
            homes,
            slots: Vec::new(),
            slot_of: vec![0; prep.len()],
            size: vec![[0; 3]; slots.len()],
            count: vec![0; shape.ranks],
            foreign: vec![0; shape.ranks],
            tick: 0,
            changed: vec![0; shape.ranks],
            node_changed: vec![0; shape.ranks.div_ceil(homes.node.unwrap_or(1))],
            group_changed: vec![0; groups],
            seen: vec![0; prep.len()],
            load: vec![Phases::ZERO; groups],
            budget,
            resplits: u64::MAX,
        };
        for (k, members) in slots.iter().enumerate() {
            let (g, r) = (search.budget.group(k), k / shape.per_rank());
            for &p in members {
                search.slot_of[p as usize] = k as u32;
                search.size[k] = add(search.size[k], prep.size(p as usize));
                search.load[g] += prep.cost(p as usize);
                search.count[r] += 1;
                search.foreign[r] += usize::from(homes.origin(p as usize) as usize != r);
            }
        }
        search.slots = slots;
        search
    }

    /// The rank of slot `k`.
    #[inline]
    pub(super) fn rank(&self, k: usize) -> usize {
        k / self.budget.shape.per_rank()
    }

    /// The room group `g` would have left with load `l` (negative: over
    /// budget).
    #[inline]
    pub(super) fn room(&self, g: usize, l: Phases) -> f64 {
        self.budget.room(g, l)
    }

    /// Whether a slot holding `size` fits the caps.
    #[inline]
    pub(super) fn fits(&self, size: [u64; 3]) -> bool {
        (0..3).all(|d| size[d] <= self.prep.caps[d])
    }

    /// Whether sample `p` is away from home.
    #[inline]
    pub(super) fn away(&self, p: usize) -> bool {
        self.homes.weight(p, self.rank(self.slot_of[p] as usize)) > 0
    }

    /// Up to `passes` passes over the samples away from home, by
    /// decreasing bytes (see the module docs).
    pub(super) fn run(&mut self, passes: usize) {
        let mut order: Vec<u32> = (0..self.prep.len() as u32)
            .filter(|&p| self.away(p as usize))
            .collect();
        order.sort_unstable_by_key(|&p| (Reverse(self.homes.bytes(p as usize)), p));
        let swap_at = (self.budget.sync != SyncModel::Step)
            .then(|| order.len() * LOCALITY_BEFORE_SWAP.0 / LOCALITY_BEFORE_SWAP.1);
        let mut pair = Pair::default();
        let mut i = 0;
        for pass in 0..passes {
            let before = self.tick;
            order.retain(|&p| {
                if pass == 0 && Some(i) == swap_at {
                    self.swap(LOCALITY_SWAP_ROUNDS);
                }
                i += 1;
                let p = p as usize;
                if pass > 0 && !self.stale(p) {
                    return true;
                }
                // After the first pass, a sample whose last weighing found
                // nothing weighs again only the pairs whose groups changed
                // since.
                let since = (pass > 0).then_some(self.seen[p]);
                self.seen[p] = self.tick;
                self.exchange(p, since, &mut pair);
                self.away(p)
            });
            if self.tick == before {
                break;
            }
        }
    }

    /// Whether sample `p`'s rank or home node changed since it was last
    /// weighed.
    #[inline]
    fn stale(&self, p: usize) -> bool {
        let r = self.rank(self.slot_of[p] as usize);
        let o = self.homes.node_of(self.homes.origin(p) as usize);
        self.changed[r].max(self.node_changed[o]) > self.seen[p]
    }

    /// The `take` sequences of rank `q` a re-split with `a` weighs first,
    /// in order, at the front of `cands`: by decreasing room (in the
    /// budget's and the tokens' shares), those of `a`'s micro-step first
    /// under the per-micro-step models, then by index. O(A * S) for the
    /// keys and the selection, O(take log take) for the order.
    fn candidates(&self, a: usize, q: usize, take: usize, cands: &mut Vec<(f64, usize)>) {
        let per_rank = self.budget.shape.per_rank();
        let column = self.budget.column(self.budget.group(a));
        cands.clear();
        for b in q * per_rank..(q + 1) * per_rank {
            let g = self.budget.group(b);
            let room = self.room(g, self.load[g]);
            let tok = self.prep.caps[0].saturating_sub(self.size[b][0]) as f64
                / self.prep.caps[0].max(1) as f64;
            let same = self.budget.sync != SyncModel::Step && self.budget.column(g) == column;
            let scale = self.budget.of(g).total().max(1e-300);
            let key = room / scale + tok + if same { 4.0 } else { 0.0 };
            cands.push((key, b));
        }
        let order = |x: &(f64, usize), y: &(f64, usize)| y.0.total_cmp(&x.0).then(x.1.cmp(&y.1));
        if take == 0 {
            return;
        }
        if take < cands.len() {
            cands.select_nth_unstable_by(take - 1, order);
        }
        cands[..take].sort_unstable_by(order);
    }

    /// The best re-split of `p`'s sequence and one sequence of its home
    /// rank (or of a rank of its node), applied; whether there was one.
    /// With `since` (the tick of `p`'s last weighing, which found
    /// nothing), unless `p`'s group changed after it, only the sequences
    /// whose group changed after it are weighed. Nothing once the work
    /// bound is spent.
    fn exchange(&mut self, p: usize, since: Option<u64>, pair: &mut Pair) -> bool {
        if self.resplits == 0 {
            return false;
        }
        let a = self.slot_of[p] as usize;
        let since = since.filter(|&t| self.group_changed[self.budget.group(a)] <= t);
        let r = self.rank(a);
        let here = self.homes.weight(p, r);
        if here == 0 {
            return false;
        }
        let o = self.homes.origin(p) as usize;
        let node = self.homes.node.unwrap_or(1);
        let first = o / node * node;
        let mates = (first..first.saturating_add(node).min(self.budget.shape.ranks))
            .filter(move |&q| q != o);
        let mut best: Option<(u128, f64, usize)> = None;
        let mut left = LOCALITY_PAIRS;
        for q in core::iter::once(o).chain(mates) {
            if q == r || left == 0 || self.homes.weight(p, q) >= here {
                continue;
            }
            // Under step barriers, a rank that holds only its own samples
            // and has no room for `p` takes `p` only by sending away one
            // the fill kept as denser in bytes per cost: not weighed.
            if self.budget.sync == SyncModel::Step
                && self.foreign[q] == 0
                && self.room(q, self.load[q] + self.info[p].cost) < 0.0
            {
                continue;
            }
            let mut cands = core::mem::take(&mut pair.cands);
            let take = left.min(self.budget.shape.per_rank());
            self.candidates(a, q, take, &mut cands);
            left -= take;
            // `a`'s samples against rank `q`, read at the first re-split.
            let mut primed = false;
            for &(_, b) in &cands[..take] {
                if since.is_some_and(|t| self.group_changed[self.budget.group(b)] <= t) {
                    continue; // weighed before, unchanged since
                }
                if self.resplits == 0 {
                    left = 0;
                    break;
                }
                self.resplits -= 1;
                if !primed {
                    self.half(a, q, &mut pair.half);
                    primed = true;
                }
                if let Some((gain, room)) = self.split(a, b, pair) {
                    if best.map_or(true, |x| (gain, room) > (x.0, x.1)) {
                        best = Some((gain, room, b));
                        core::mem::swap(&mut pair.now.side, &mut pair.best);
                    }
                    if gain >= here {
                        // `p` saved whole at no other loss: taken.
                        left = 0;
                        break;
                    }
                }
            }
            pair.cands = cands;
        }
        let Some((_, _, b)) = best else {
            return false;
        };
        // The samples as `split` listed them: `a`'s, then `b`'s.
        pair.items.clear();
        pair.items.extend(self.slots[a].iter().map(|&x| (x, true)));
        pair.items.extend(self.slots[b].iter().map(|&x| (x, false)));
        for (i, &(x, in_a)) in pair.items.iter().enumerate() {
            if pair.best[i] != in_a {
                let (from, to) = if in_a { (a, b) } else { (b, a) };
                self.shift(x as usize, from, to);
            }
        }
        true
    }

    /// Moves sample `p` from slot `a` to slot `b`. O(m) for the m samples
    /// of `a`.
    pub(super) fn shift(&mut self, p: usize, a: usize, b: usize) {
        if let Some(i) = self.slots[a].iter().position(|&x| x as usize == p) {
            self.slots[a].swap_remove(i);
        }
        self.slots[b].push(p as u32);
        self.slot_of[p] = b as u32;
        let (c, s) = (self.prep.cost(p), self.prep.size(p));
        self.size[a] = sub3(self.size[a], s);
        self.size[b] = add(self.size[b], s);
        let (ga, gb) = (self.budget.group(a), self.budget.group(b));
        self.load[ga] = self.load[ga] - c;
        self.load[gb] += c;
        let (ra, rb) = (self.rank(a), self.rank(b));
        let o = self.homes.origin(p) as usize;
        self.count[ra] -= 1;
        self.count[rb] += 1;
        self.foreign[ra] -= usize::from(o != ra);
        self.foreign[rb] += usize::from(o != rb);
        self.tick += 1;
        for (r, g) in [(ra, ga), (rb, gb)] {
            self.changed[r] = self.tick;
            self.group_changed[g] = self.tick;
            self.node_changed[self.homes.node_of(r)] = self.tick;
        }
    }

    /// The layout: every slot ascending; for [`SyncModel::Step`] each
    /// rank's sequences in the data loader's order again.
    pub(super) fn finish(self) -> Vec<Vec<u32>> {
        let mut slots = self.slots;
        normalize(self.budget.sync, self.budget.shape, &mut slots);
        slots
    }
}

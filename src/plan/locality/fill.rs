//! Step 2, the fill: under [`SyncModel::Step`], the layout made anew with every rank's own samples first.
//!
//! Under one barrier a step only a rank's total counts, so a rank may
//! keep most of what its data loader holds. [`Fill::run`]:
//!
//! 1. *Keep*: each rank keeps, of the samples it holds, the densest in
//!    bytes per cost (ties: the costlier, then the lower position) while
//!    its total stays within the mean rank total times `1 + tol / 2` and
//!    its tokens, units and images within a share of its
//!    sequences' caps: a rank that holds more than its share gives away
//!    what is cheapest to move (a fractional knapsack's greedy).
//! 2. *Spread* (unless `direct`): every other sample (no origin,
//!    or given away), in decreasing cost, goes to the rank of most slack
//!    (the smaller of its cost room and its token room, each a share; a
//!    heap, at most 32 ranks weighed a sample; with nodes the least-loaded
//!    rank of its home node first) that takes it within the budget and
//!    the share of the caps.
//! 3. *Pack*: each rank's samples, in decreasing cost, into the fullest of
//!    its sequences that takes them within the caps (best fit decreasing),
//!    while the rank keeps within the budget.
//! 4. *Rest*: what found no place, in decreasing cost, into the fullest
//!    sequence that takes it of the rank of most slack (a heap; with nodes
//!    the ranks of its home node first, at most 64). If none of the first
//!    [`LOCALITY_EVICT_AFTER`] ranks weighed takes it, it takes the place
//!    of the sample of fewest tokens, fewer than its own, in one of them
//!    whose sequence then takes it within the budget (then the lowest
//!    position; the evicted sample queues again; at most `n + 64`
//!    evictions); failing that, up to [`LOCALITY_WIDER`] ranks are
//!    weighed, then the same eviction among all of them. Ranks past the
//!    first [`LOCALITY_TRIED`] are weighed only while the work allows:
//!    the ranks weighed and the evictions read at most `64 * (n + K)`
//!    sequences and samples in all, else the fill gives up.
//!
//! [`Fill::run`] returns `None` when a sample finds no place or a rank
//! gets no sample. Run only
//! with at most [`LOCALITY_FILL_SEQUENCES`] sequences a rank, so that a
//! rank's packing is O(64) a sample at worst.
//!
//! O(n log n + K + R log R) time, O(n + K) extra space.

use alloc::collections::{BinaryHeap, VecDeque};
use alloc::vec;
use alloc::vec::Vec;
use core::cmp::Reverse;

use super::super::prepare::Prepared;
use super::super::shape::Shape;
use super::super::sync::SyncModel;
#[cfg(doc)]
use super::super::tuning::LOCALITY_FILL_SEQUENCES;
use super::super::tuning::{LOCALITY_EVICT_AFTER, LOCALITY_TRIED, LOCALITY_WIDER};
use super::homes::{Homes, NONE};
use super::state::{add, normalize, sub3};
use crate::cost::Phases;
use crate::num::order_bits;

/// The ways the fill is tried, in order, until one places every sample:
/// the share of a rank's caps that steps 1 and 2 fill, and whether step 2
/// is skipped (what a rank gives away goes to step 4).
pub(super) const WAYS: [(f64, bool); 4] = [(1.0, false), (0.99, false), (1.0, true), (0.95, true)];

/// What the fill reads: the batch, its homes and shape, the most a rank's
/// total may be (the locality-free plan's largest rank total times `1 +
/// tol`), and the tolerance.
pub(super) struct Fill<'a> {
    pub(super) prep: &'a Prepared,
    pub(super) homes: &'a Homes,
    pub(super) shape: Shape,
    pub(super) budget: f64,
    pub(super) tol: f64,
}

/// Every rank's samples so far (steps 1 and 2): the rank of every sample
/// (`u32::MAX` for none), each rank's total and sizes, and the caps of a
/// rank's sequences together, times the way's share.
struct Ranks {
    of: Vec<u32>,
    load: Vec<f64>,
    size: Vec<[u64; 3]>,
    cap: [u64; 3],
}

impl Ranks {
    /// Whether rank `q` takes sample `p` of cost `c` within `limit` and
    /// the caps.
    fn takes(&self, q: usize, c: f64, z: [u64; 3], limit: f64) -> bool {
        let s = add(self.size[q], z);
        self.load[q] + c <= limit && (0..3).all(|d| s[d] <= self.cap[d])
    }

    /// Rank `q` takes sample `p` of cost `c`.
    fn put(&mut self, q: usize, p: u32, c: f64, z: [u64; 3]) {
        self.load[q] += c;
        self.size[q] = add(self.size[q], z);
        self.of[p as usize] = q as u32;
    }
}

/// The layout being filled (steps 3 and 4): every sequence's samples and
/// sizes, and every rank's load.
struct Packed {
    slots: Vec<Vec<u32>>,
    size: Vec<[u64; 3]>,
    load: Vec<Phases>,
}

impl Fill<'_> {
    /// The layout filled home first, filling `share` of a rank's caps in
    /// steps 1 and 2, without step 2 if `direct`; see the module docs.
    pub(super) fn run(&self, share: f64, direct: bool) -> Option<Vec<Vec<u32>>> {
        let (mut ranks, pool) = self.keep(share);
        let leftover = if direct {
            pool
        } else {
            self.spread(&mut ranks, pool)
        };
        let (mut packed, leftover) = self.pack(&ranks.of, leftover);
        drop(ranks);
        self.rest(&mut packed, leftover)?;
        let mut slots = packed.slots;
        if slots
            .chunks(self.shape.per_rank())
            .any(|rank| rank.iter().all(Vec::is_empty))
        {
            return None;
        }
        normalize(SyncModel::Step, self.shape, &mut slots);
        Some(slots)
    }

    fn total(&self, p: u32) -> f64 {
        self.prep.cost(p as usize).total()
    }

    /// The room rank `r` would have left with load `l`.
    fn room(&self, l: Phases) -> f64 {
        self.budget - l.total()
    }

    fn fits(&self, s: [u64; 3]) -> bool {
        (0..3).all(|d| s[d] <= self.prep.caps[d])
    }

    /// Step 1: what each rank keeps, and the rest (those of no origin
    /// first, in position order, then those given away).
    fn keep(&self, share: f64) -> (Ranks, Vec<u32>) {
        let (ranks, n) = (self.shape.ranks, self.prep.len());
        let per_rank = self.shape.per_rank() as u64;
        let origins = self.homes.origins().zip(0..n as u32);
        let mut pool: Vec<u32> = origins
            .clone()
            .filter(|x| x.0 == NONE)
            .map(|x| x.1)
            .collect();
        let (start, mut held) = by_key(ranks, origins.filter(|x| x.0 != NONE));
        let sum: f64 = (0..n as u32).map(|p| self.total(p)).sum();
        let home_limit = sum / ranks as f64 * (1.0 + self.tol / 2.0);
        let cap = self.prep.caps.map(|c| {
            let c = c.saturating_mul(per_rank);
            if c == u64::MAX {
                c
            } else {
                (c as f64 * share) as u64
            }
        });
        let mut kept = Ranks {
            of: vec![u32::MAX; n],
            load: vec![0.0; ranks],
            size: vec![[0; 3]; ranks],
            cap,
        };
        // Bytes per cost; free samples (cost 0) are the densest.
        let density = |p: u32| {
            let c = self.total(p);
            if c > 0.0 {
                self.homes.bytes(p as usize) as f64 / c
            } else {
                f64::INFINITY
            }
        };
        let mut keyed = Vec::new();
        for r in 0..ranks {
            let mine = &mut held[start[r]..start[r + 1]];
            // By density, then cost (both descending, in `total_cmp`'s
            // order), then position.
            sort_by_keys(mine, &mut keyed, |p| {
                (
                    Reverse(order_bits(density(p))),
                    Reverse(order_bits(self.total(p))),
                )
            });
            for &p in mine.iter() {
                let (c, z) = (self.total(p), self.prep.size(p as usize));
                if kept.takes(r, c, z, home_limit) {
                    kept.put(r, p, c, z);
                } else {
                    pool.push(p);
                }
            }
        }
        (kept, pool)
    }

    /// Step 2: `pool`, in decreasing cost, to the rank of most slack (of
    /// its node first) that takes it; what none takes.
    fn spread(&self, ranks: &mut Ranks, mut pool: Vec<u32>) -> Vec<u32> {
        pool.sort_unstable_by(|&a, &b| self.total(b).total_cmp(&self.total(a)).then(a.cmp(&b)));
        let budget = self.budget;
        // The rank of most slack first: the smaller of its room in cost and
        // in tokens, each a share of the rank's limit (clamped at zero, so
        // that the bits order as the values).
        let slack = |ranks: &Ranks, q: usize| {
            let c = if budget > 0.0 {
                (budget - ranks.load[q]) / budget
            } else {
                0.0
            };
            let t = if ranks.cap[0] > 0 {
                ranks.cap[0].saturating_sub(ranks.size[q][0]) as f64 / ranks.cap[0] as f64
            } else {
                0.0
            };
            c.min(t).max(0.0).to_bits()
        };
        let mut heap: BinaryHeap<(u64, Reverse<usize>)> = (0..self.shape.ranks)
            .map(|r| (slack(ranks, r), Reverse(r)))
            .collect();
        let mut tried: Vec<usize> = Vec::with_capacity(32);
        let mut leftover = Vec::new();
        for &p in &pool {
            let (c, z) = (self.total(p), self.prep.size(p as usize));
            let mut to = self.home_node(p).and_then(|mates| {
                mates
                    .take(64)
                    .filter(|&q| ranks.takes(q, c, z, budget))
                    .min_by(|&a, &b| ranks.load[a].total_cmp(&ranks.load[b]).then(a.cmp(&b)))
            });
            while to.is_none() && tried.len() < 32 {
                let Some((bits, Reverse(q))) = heap.pop() else {
                    break;
                };
                if bits != slack(ranks, q) || tried.contains(&q) {
                    continue; // stale: the rank's load changed since
                }
                tried.push(q);
                if ranks.takes(q, c, z, budget) {
                    to = Some(q);
                }
            }
            match to {
                Some(q) => {
                    ranks.put(q, p, c, z);
                    heap.push((slack(ranks, q), Reverse(q)));
                }
                None => leftover.push(p),
            }
            // Fresh entries for the ranks popped; a stale entry left in the
            // heap is skipped when popped.
            for r in tried.drain(..) {
                heap.push((slack(ranks, r), Reverse(r)));
            }
        }
        leftover
    }

    /// The ranks of sample `p`'s home node, with nodes and an origin.
    fn home_node(&self, p: u32) -> Option<core::ops::Range<usize>> {
        let (node, o) = (self.homes.node?, self.homes.origin(p as usize));
        (o != NONE).then(|| {
            let first = o as usize / node * node;
            first..(first + node).min(self.shape.ranks)
        })
    }

    /// Step 3: each rank's samples (`rank_of`), in decreasing cost, into
    /// the fullest of its sequences that takes them (best fit decreasing:
    /// a rank is one group, so every sequence of it keeps the same room),
    /// while the rank keeps within the budget; `leftover` and what found
    /// no place.
    fn pack(&self, rank_of: &[u32], mut leftover: Vec<u32>) -> (Packed, Vec<u32>) {
        let (ranks, slots) = (self.shape.ranks, self.shape.slots());
        let (first, mut members) = by_key(
            ranks,
            (0..rank_of.len() as u32).filter_map(|p| {
                let r = rank_of[p as usize];
                (r != u32::MAX).then_some((r, p))
            }),
        );
        let mut packed = Packed {
            slots: vec![Vec::new(); slots],
            size: vec![[0; 3]; slots],
            load: vec![Phases::ZERO; ranks],
        };
        let mut keyed = Vec::new();
        for r in 0..ranks {
            let list = &mut members[first[r]..first[r + 1]];
            // By cost (descending, in `total_cmp`'s order), then position.
            sort_by_keys(list, &mut keyed, |p| Reverse(order_bits(self.total(p))));
            for &p in list.iter() {
                let (c, z) = (self.prep.cost(p as usize), self.prep.size(p as usize));
                let to = (self.room(packed.load[r] + c) >= 0.0)
                    .then(|| self.best_slot(&packed, r, z))
                    .flatten();
                let Some(k) = to else {
                    leftover.push(p);
                    continue;
                };
                packed.slots[k].push(p);
                packed.size[k] = add(packed.size[k], z);
                packed.load[r] += c;
            }
        }
        (packed, leftover)
    }

    /// The fullest sequence of rank `g` that takes `z`, then the lowest.
    fn best_slot(&self, packed: &Packed, g: usize, z: [u64; 3]) -> Option<usize> {
        let width = self.shape.per_rank();
        (g * width..(g + 1) * width)
            .filter(|&k| self.fits(add(packed.size[k], z)))
            .max_by(|&a, &b| packed.size[a][0].cmp(&packed.size[b][0]).then(b.cmp(&a)))
    }

    /// The slack of rank `g`: the smaller of its room within the budget
    /// and the most tokens free in one of its sequences, each a share of
    /// its limit (clamped at zero, so that the bits order as the values).
    fn key(&self, packed: &Packed, g: usize) -> u64 {
        let width = self.shape.per_rank();
        let b = self.budget;
        let c = if b > 0.0 {
            (b - packed.load[g].total()) / b
        } else {
            0.0
        };
        let free = packed.size[g * width..(g + 1) * width]
            .iter()
            .map(|s| self.prep.caps[0].saturating_sub(s[0]))
            .max()
            .unwrap_or(0);
        let t = free as f64 / self.prep.caps[0].max(1) as f64;
        c.min(t).max(0.0).to_bits()
    }

    /// Step 4: `pool`, in decreasing cost, into the rank of most slack,
    /// with evictions (see the module docs); `None` when a sample finds no
    /// place or the work runs out.
    fn rest(&self, packed: &mut Packed, mut pool: Vec<u32>) -> Option<()> {
        let width = self.shape.per_rank();
        pool.sort_unstable_by(|&a, &b| self.total(b).total_cmp(&self.total(a)).then(a.cmp(&b)));
        let mut by_room: BinaryHeap<(u64, Reverse<usize>)> = (0..self.shape.ranks)
            .map(|g| (self.key(packed, g), Reverse(g)))
            .collect();
        let mut work = Work {
            evictions: pool.len() + 64,
            weighed: 64usize.saturating_mul(self.prep.len() + self.shape.slots()),
        };
        let mut queue: VecDeque<u32> = pool.into();
        // The ranks popped for the sample being placed: those marked
        // `stamp`.
        let mut popped = vec![0usize; self.shape.ranks];
        let mut tried: Vec<usize> = Vec::new();
        let mut stamp = 0usize;
        while let Some(p) = queue.pop_front() {
            if work.weighed == 0 {
                return None;
            }
            let (c, z) = (self.prep.cost(p as usize), self.prep.size(p as usize));
            let mut to = self.near_home(packed, p, c, z);
            stamp += 1;
            // The ranks of most slack: the first `LOCALITY_EVICT_AFTER`,
            // then an eviction among them; then, bounded by the work past
            // the first `LOCALITY_TRIED`, up to `LOCALITY_WIDER` of them,
            // then an eviction among all those. `scanned`: the ranks of
            // `tried` already weighed for an eviction.
            let mut scanned = 0;
            for limit in [LOCALITY_EVICT_AFTER, LOCALITY_WIDER] {
                while to.is_none()
                    && tried.len() < limit
                    && (tried.len() < LOCALITY_TRIED || work.weighed > 0)
                {
                    let Some((bits, Reverse(g))) = by_room.pop() else {
                        break;
                    };
                    work.weighed = work.weighed.saturating_sub(width);
                    if bits != self.key(packed, g) || popped[g] == stamp {
                        continue;
                    }
                    popped[g] = stamp;
                    tried.push(g);
                    if self.room(packed.load[g] + c) >= 0.0 {
                        to = self.best_slot(packed, g, z);
                    }
                }
                if to.is_some() || work.evictions == 0 || work.weighed == 0 {
                    break;
                }
                to = self.evict(packed, &tried[scanned..], p, &mut work, &mut queue);
                scanned = tried.len();
                if to.is_some() {
                    break;
                }
            }
            let k = to?;
            packed.slots[k].push(p);
            packed.size[k] = add(packed.size[k], z);
            let g = k / width;
            packed.load[g] += c;
            for t in tried.drain(..) {
                by_room.push((self.key(packed, t), Reverse(t)));
            }
            by_room.push((self.key(packed, g), Reverse(g)));
        }
        Some(())
    }

    /// The sequence of most room of a rank of `p`'s home node (at most
    /// 64 weighed) that takes `p` of cost `c` and sizes `z`.
    fn near_home(&self, packed: &Packed, p: u32, c: Phases, z: [u64; 3]) -> Option<usize> {
        let mut to = None;
        let mut most = f64::NEG_INFINITY;
        for g in self.home_node(p)?.take(64) {
            let left = self.room(packed.load[g] + c);
            if left >= 0.0 && left > most {
                if let Some(k) = self.best_slot(packed, g, z) {
                    (most, to) = (left, Some(k));
                }
            }
        }
        to
    }

    /// The eviction for sample `p` among the ranks `tried`: the sample of
    /// fewer tokens whose place takes `p` within the caps and the budget,
    /// the smallest such (then the lowest position), taken out and queued;
    /// the sequence that then takes `p`.
    fn evict(
        &self,
        packed: &mut Packed,
        tried: &[usize],
        p: u32,
        work: &mut Work,
        queue: &mut VecDeque<u32>,
    ) -> Option<usize> {
        let width = self.shape.per_rank();
        let (c, z) = (self.prep.cost(p as usize), self.prep.size(p as usize));
        let mut out: Option<(u64, u32, usize, usize)> = None;
        for &g in tried {
            for k in g * width..(g + 1) * width {
                work.weighed = work.weighed.saturating_sub(packed.slots[k].len());
                for (i, &t) in packed.slots[k].iter().enumerate() {
                    let zt = self.prep.size(t as usize);
                    if zt[0] >= z[0] || !self.fits(add(sub3(packed.size[k], zt), z)) {
                        continue;
                    }
                    let l = packed.load[g] + c - self.prep.cost(t as usize);
                    if self.room(l) >= 0.0 && out.map_or(true, |o| (zt[0], t) < (o.0, o.1)) {
                        out = Some((zt[0], t, k, i));
                    }
                }
            }
        }
        let (_, t, k, i) = out?;
        work.evictions -= 1;
        packed.slots[k].swap_remove(i);
        packed.size[k] = sub3(packed.size[k], self.prep.size(t as usize));
        let g = k / width;
        packed.load[g] = packed.load[g] - self.prep.cost(t as usize);
        queue.push_back(t);
        Some(k)
    }
}

/// What step 4 may still do: evictions, and sequences and samples read.
struct Work {
    evictions: usize,
    weighed: usize,
}

/// `(start, list)`: the items of `pairs` (key, position) grouped by key
/// below `keys` (a counting sort, stable): key `r`'s positions are
/// `list[start[r]..start[r + 1]]`. O(items + keys).
fn by_key(keys: usize, pairs: impl Iterator<Item = (u32, u32)> + Clone) -> (Vec<usize>, Vec<u32>) {
    let mut start = vec![0usize; keys + 1];
    for (r, _) in pairs.clone() {
        start[r as usize + 1] += 1;
    }
    for r in 0..keys {
        start[r + 1] += start[r];
    }
    let mut next = start.clone();
    let mut list = vec![0u32; start[keys]];
    for (r, p) in pairs {
        list[next[r as usize]] = p;
        next[r as usize] += 1;
    }
    (start, list)
}

/// Sorts the positions `list` by `key`, then by position, each key
/// computed once into `scratch` beside its position (reused from call to
/// call, so that no sort allocates). O(m log m) for m positions.
fn sort_by_keys<K: Ord>(list: &mut [u32], scratch: &mut Vec<(K, u32)>, key: impl Fn(u32) -> K) {
    scratch.clear();
    scratch.extend(list.iter().map(|&p| (key(p), p)));
    scratch.sort_unstable();
    for (slot, &(_, p)) in list.iter_mut().zip(scratch.iter()) {
        *slot = p;
    }
}

#[cfg(test)]
mod tests {
    use super::super::batch;
    use super::Fill;
    use crate::plan::shape::Shape;
    use crate::plan::tuning::{LOCALITY_EVICT_AFTER, LOCALITY_TRIED, LOCALITY_WIDER};
    use crate::plan::SyncModel;
    use alloc::vec;
    use alloc::vec::Vec;

    #[test]
    fn the_fill_evicts_among_the_first_groups_before_weighing_a_thousand() {
        // Ranks of one sequence of 12 tokens, a budget of 2.0 a rank. 40
        // ranks hold one sample of 8 tokens (cost 0.5; the most slack: 4
        // tokens and 1.5 of cost free), 1,100 ranks one of 7 tokens (1.0)
        // and one of 3 (0.5; 2 tokens free), 10 ranks one of 7 (1.9; 5
        // tokens free, 0.1 of cost). 20 samples of 5 tokens (0.05) have no
        // origin: no rank's packing takes them. Each fits only the 10
        // ranks of least slack, past the first 1,024 weighed; or in place
        // of a 3-token sample, which then fits one of the 40. (Checked to
        // fail with the eviction only after 1,024 ranks without a place.)
        let (wide, full, tight, extra) = (40, 1100, 10, 20);
        assert!(
            (LOCALITY_TRIED..LOCALITY_EVICT_AFTER).contains(&wide) && wide + full >= LOCALITY_WIDER
        );
        let mut samples = Vec::new();
        for r in 0..wide {
            samples.push((8, 0.5, 0.0, r, 10));
        }
        for r in wide..wide + full {
            samples.push((7, 1.0, 0.0, r, 10));
            samples.push((3, 0.5, 0.0, r, 10));
        }
        for r in wide + full..wide + full + tight {
            samples.push((7, 1.9, 0.0, r, 10));
        }
        for _ in 0..extra {
            samples.push((5, 0.05, 0.0, usize::MAX, 10));
        }
        let shape = Shape {
            ranks: wide + full + tight,
            steps: 1,
            per_step: 1,
        };
        let (prep, homes) = batch(&samples, 12, shape, SyncModel::Step);
        // (A tolerance of 1: every rank keeps what it holds.)
        let fill = Fill {
            prep: &prep,
            homes: &homes,
            shape,
            budget: 2.0,
            tol: 1.0,
        };
        let slots = fill.run(1.0, false).expect("every sample placed");
        let mut seen = vec![0; samples.len()];
        for (k, members) in slots.iter().enumerate() {
            let tokens: u32 = members.iter().map(|&p| samples[p as usize].0).sum();
            let cost: f64 = members.iter().map(|&p| samples[p as usize].1).sum();
            assert!(
                tokens <= 12 && cost <= 2.0 + 1e-12,
                "rank {k}: {tokens} tokens, {cost}"
            );
            for &p in members {
                seen[p as usize] += 1;
            }
        }
        assert!(seen.iter().all(|&c| c == 1));
        // Each extra sample took a 3-token sample's place, which went to
        // one of the 40: 20 samples away from home, no more.
        let away = (0..samples.len())
            .filter(|&p| {
                let r = slots.iter().position(|m| m.contains(&(p as u32))).unwrap();
                samples[p].3 != usize::MAX && samples[p].3 != r
            })
            .count();
        assert_eq!(away, extra);
    }
}

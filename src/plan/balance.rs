//! Balanced packing: LPT with a capacity, samples into a fixed number of sequences of even cost.
//!
//! The samples are taken in decreasing order of cost; each goes to the
//! least-loaded sequence that it fits in, where a sequence's load is the
//! larger of its cost and its tokens, each over its mean per sequence (the
//! max-norm greedy of vector scheduling): sequences fill with tokens at the
//! pace they fill with cost, so a tight capacity rarely turns a sample away
//! from the sequence that needs it. The least-loaded sequences come from a
//! binary heap; up to [`STASH`] of them that are too full are set aside
//! before a second heap, by the room left, finds any sequence with room. If
//! none has room the packing fails and the caller falls back to
//! first-fit-decreasing. Sequences too full for any sample still to come
//! leave the heaps.
//!
//! O(n log n) time, O(n) extra space (heaps are compacted when stale
//! entries pile up).

use alloc::collections::BinaryHeap;
use alloc::vec;
use alloc::vec::Vec;
use core::cmp::Reverse;

use super::planner::Prepared;
use crate::cost::Phases;

/// How many too-full sequences the least-loaded search sets aside before it
/// looks for any sequence with room.
const STASH: usize = 8;

/// A heap entry: the key (an `f64`'s bits, non-negative so ordered like the
/// value, or a room), the sequence, and the sequence's version when pushed.
type Entry = (Reverse<u64>, Reverse<u32>, u32);
type RoomEntry = (u64, Reverse<u32>, u32);

struct Bins<'a> {
    prep: &'a Prepared,
    load: Vec<[u64; 3]>,
    cost: Vec<f64>,
    version: Vec<u32>,
    members: Vec<Vec<u32>>,
    heap: BinaryHeap<Entry>,
    room: BinaryHeap<RoomEntry>,
    /// 1 / mean cost and 1 / mean tokens per sequence.
    per_cost: f64,
    per_token: f64,
    /// The fewest tokens of any sample still to place: a sequence with less
    /// room is full for good and leaves the heaps.
    min_rest: u64,
}

impl Bins<'_> {
    fn key(&self, b: usize) -> u64 {
        let c = self.cost[b] * self.per_cost;
        let t = self.load[b][0] as f64 * self.per_token;
        c.max(t).to_bits()
    }

    /// The room key: the smallest fraction of room left over the
    /// dimensions (in 2^-32 units), so the sequence most likely to take any
    /// sample comes first.
    fn room_key(&self, b: usize) -> u64 {
        (0..3)
            .map(|d| {
                let cap = self.prep.caps[d];
                let room = cap - self.load[b][d];
                if cap == u64::MAX {
                    u64::MAX
                } else {
                    ((u128::from(room) << 32) / u128::from(cap)) as u64
                }
            })
            .min()
            .unwrap_or(0)
    }

    fn push(&mut self, b: usize) {
        if self.prep.caps[0] - self.load[b][0] < self.min_rest {
            return; // full for good
        }
        let v = self.version[b];
        self.heap.push((Reverse(self.key(b)), Reverse(b as u32), v));
        self.room.push((self.room_key(b), Reverse(b as u32), v));
    }

    fn place(&mut self, b: usize, p: usize) {
        let s = self.prep.size(p);
        for (l, x) in self.load[b].iter_mut().zip(s) {
            *l += x;
        }
        self.cost[b] += self.prep.cost[p].total();
        self.version[b] = self.version[b].wrapping_add(1);
        self.members[b].push(p as u32);
        self.push(b);
        self.compact();
    }

    /// Rebuilds the heaps from the live entries when stale ones dominate.
    fn compact(&mut self) {
        let k = self.load.len();
        let limit = 4 * k + 1024;
        if self.heap.len() > limit || self.room.len() > limit {
            self.heap.clear();
            self.room.clear();
            for b in 0..k {
                self.push(b);
            }
        }
    }

    /// Places sample `p`; `false` when no sequence has room.
    fn insert(&mut self, p: usize) -> bool {
        let mut stash: Vec<Entry> = Vec::new();
        while stash.len() < STASH {
            let Some(e) = self.heap.pop() else { break };
            let b = e.1 .0 as usize;
            if e.2 != self.version[b] {
                continue; // stale
            }
            if self.prep.fits(self.load[b], p) {
                self.heap.extend(stash);
                self.place(b, p);
                return true;
            }
            stash.push(e);
        }
        self.heap.extend(stash);
        // Any sequence with room, most room first; a bounded search.
        let mut set_aside: Vec<RoomEntry> = Vec::new();
        let mut found = None;
        while let Some(e) = self.room.pop() {
            let b = e.1 .0 as usize;
            if e.2 != self.version[b] {
                continue;
            }
            set_aside.push(e);
            if self.prep.fits(self.load[b], p) {
                found = Some(b);
                break;
            }
            if set_aside.len() >= 4 * STASH {
                break;
            }
        }
        self.room.extend(set_aside);
        match found {
            Some(b) => {
                self.place(b, p);
                true
            }
            None => false,
        }
    }
}

/// Packs every sample into `bins` sequences of even cost; `None` when the
/// greedy order leaves a sample without room. Each sequence lists sorted
/// positions (in placement order).
pub(crate) fn greedy(prep: &Prepared, bins: usize) -> Option<Vec<Vec<u32>>> {
    let n = prep.len();
    if bins == 0 {
        return if n == 0 { Some(Vec::new()) } else { None };
    }
    let cost: f64 = prep.cost.iter().map(Phases::total).sum();
    let tokens: u64 = prep.sizes.iter().map(|s| u64::from(s[0])).sum();
    let inverse = |x: f64| if x > 0.0 { bins as f64 / x } else { 0.0 };
    let mut order: Vec<(u64, u32)> = (0..n)
        .map(|p| (prep.cost[p].total().to_bits(), p as u32))
        .collect();
    // Decreasing cost, ties by id (position).
    order.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));

    let mut state = Bins {
        prep,
        load: vec![[0; 3]; bins],
        cost: vec![0.0; bins],
        version: vec![0; bins],
        members: vec![Vec::new(); bins],
        heap: BinaryHeap::new(),
        room: BinaryHeap::new(),
        per_cost: inverse(cost),
        per_token: inverse(tokens as f64),
        min_rest: 0,
    };
    for b in 0..bins {
        state.push(b);
    }
    // The fewest tokens among the samples from each point of the order on.
    let mut rest: Vec<u32> = order.iter().map(|&(_, p)| prep.sizes[p as usize][0]).collect();
    for i in (0..rest.len().saturating_sub(1)).rev() {
        rest[i] = rest[i].min(rest[i + 1]);
    }
    for (i, &(_, p)) in order.iter().enumerate() {
        state.min_rest = u64::from(rest[i]);
        if !state.insert(p as usize) {
            return None;
        }
    }
    Some(state.members)
}

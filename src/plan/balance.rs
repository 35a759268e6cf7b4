//! Balanced packing: LPT with a capacity, samples into a fixed number of sequences of even cost.
//!
//! The samples are taken in decreasing order of cost; each goes to the
//! least-loaded sequence that it fits in, where a sequence's load is the
//! larger of its cost and its tokens, each over its mean per sequence (the
//! max-norm greedy of vector scheduling): sequences fill with tokens at the
//! pace they fill with cost, so a tight capacity rarely turns a sample away
//! from the sequence that needs it. The least-loaded sequences come from a
//! monotone bucket queue over the load (loads only grow, so the smallest
//! bucket in use only moves up; [`BUCKETS`] buckets over twice the mean
//! load, a resolution of 2.4e-4 of the mean, ties last-in first-out); up to
//! [`STASH`] of them that are too full are set aside before a binary heap by
//! the room left finds any sequence with room. If
//! none has room the packing fails and the caller falls back to
//! first-fit-decreasing. Sequences too full for any sample still to come
//! leave the queue.
//!
//! O(n log n) time (the sort; placements are O(1) amortized, the room
//! heap O(log K) once it is needed), O(n) extra space.

use alloc::collections::BinaryHeap;
use alloc::vec;
use alloc::vec::Vec;
use core::cmp::Reverse;

use super::planner::Prepared;

/// How many too-full sequences the least-loaded search sets aside before it
/// looks for any sequence with room.
const STASH: usize = 8;

/// Buckets of the load queue, over loads `[0, 2)` times the mean.
const BUCKETS: usize = 1 << 13;

/// A room heap entry: the room key, the sequence, and the sequence's
/// version when pushed.
type RoomEntry = (u64, Reverse<u32>, u32);

/// A queue of sequences by load: loads only grow, so the first non-empty
/// bucket only moves up.
struct Buckets {
    buckets: Vec<Vec<u32>>,
    first: usize,
}

impl Buckets {
    fn push(&mut self, bucket: usize, b: u32) {
        self.buckets[bucket].push(b);
        // A stashed sequence goes back where it was, never below `first`.
        self.first = self.first.min(bucket);
    }

    fn pop(&mut self) -> Option<(usize, u32)> {
        while self.first < self.buckets.len() {
            if let Some(b) = self.buckets[self.first].pop() {
                return Some((self.first, b));
            }
            self.first += 1;
        }
        None
    }
}

struct Bins<'a> {
    prep: &'a Prepared,
    load: Vec<[u64; 3]>,
    cost: Vec<f64>,
    version: Vec<u32>,
    bin_of: Vec<u32>,
    queue: Buckets,
    room: BinaryHeap<RoomEntry>,
    /// Whether the room heap is kept (from the first sample that needs it).
    room_kept: bool,
    /// 1 / mean cost and 1 / mean tokens per sequence.
    per_cost: f64,
    per_token: f64,
    /// The fewest tokens of any sample still to place: a sequence with less
    /// room is full for good and leaves the heaps.
    min_rest: u64,
}

impl Bins<'_> {
    /// The bucket of a sequence's load: the larger of its cost and its
    /// tokens over their means per sequence.
    fn bucket(&self, b: usize) -> usize {
        let c = self.cost[b] * self.per_cost;
        let t = self.load[b][0] as f64 * self.per_token;
        let x = c.max(t) * (BUCKETS as f64 / 2.0);
        // Saturating float-to-int cast; the last bucket takes the rest.
        (x as usize).min(BUCKETS - 1)
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
        let bucket = self.bucket(b);
        self.queue.push(bucket, b as u32);
        if self.room_kept {
            let v = self.version[b];
            self.room.push((self.room_key(b), Reverse(b as u32), v));
        }
    }

    fn place(&mut self, b: usize, p: usize) {
        let s = self.prep.size(p);
        for (l, x) in self.load[b].iter_mut().zip(s) {
            *l += x;
        }
        self.cost[b] += self.prep.cost(p).total();
        self.version[b] = self.version[b].wrapping_add(1);
        self.bin_of[p] = b as u32;
        self.push(b);
        self.compact();
    }

    /// Rebuilds the room heap from the live entries when stale ones
    /// dominate.
    fn compact(&mut self) {
        let k = self.load.len();
        if self.room.len() > 4 * k + 1024 {
            self.room = (0..k)
                .filter(|&b| self.prep.caps[0] - self.load[b][0] >= self.min_rest)
                .map(|b| (self.room_key(b), Reverse(b as u32), self.version[b]))
                .collect();
        }
    }

    /// Places sample `p`; `false` when no sequence has room.
    fn insert(&mut self, p: usize) -> bool {
        let mut stash: [(usize, u32); STASH] = [(0, 0); STASH];
        let mut stashed = 0;
        let mut chosen = None;
        while stashed < STASH {
            let Some((bucket, b)) = self.queue.pop() else {
                break;
            };
            if self.prep.fits(self.load[b as usize], p) {
                chosen = Some(b as usize);
                break;
            }
            stash[stashed] = (bucket, b);
            stashed += 1;
        }
        // Back in reverse, so that the queue's order is as before.
        for &(bucket, b) in stash[..stashed].iter().rev() {
            self.queue.push(bucket, b);
        }
        if let Some(b) = chosen {
            self.place(b, p);
            return true;
        }
        if !self.room_kept {
            self.room_kept = true;
            self.room = (0..self.load.len())
                .filter(|&b| self.prep.caps[0] - self.load[b][0] >= self.min_rest)
                .map(|b| (self.room_key(b), Reverse(b as u32), self.version[b]))
                .collect();
        }
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
    let cost: f64 = prep.items.iter().map(|e| e.cost.total()).sum();
    let tokens: u64 = prep.items.iter().map(|e| u64::from(e.sizes[0])).sum();
    let inverse = |x: f64| if x > 0.0 { bins as f64 / x } else { 0.0 };
    let mut order: Vec<(u64, u32)> = (0..n)
        .map(|p| (prep.cost(p).total().to_bits(), p as u32))
        .collect();
    // Decreasing cost, ties by id (position).
    order.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));

    let mut state = Bins {
        prep,
        load: vec![[0; 3]; bins],
        cost: vec![0.0; bins],
        version: vec![0; bins],
        bin_of: vec![0; n],
        queue: Buckets {
            buckets: vec![Vec::new(); BUCKETS],
            first: 0,
        },
        room: BinaryHeap::new(),
        room_kept: false,
        per_cost: inverse(cost),
        per_token: inverse(tokens as f64),
        min_rest: 0,
    };
    for b in 0..bins {
        state.push(b);
    }
    // The fewest tokens among the samples from each point of the order on.
    let mut rest: Vec<u32> = order
        .iter()
        .map(|&(_, p)| prep.sizes(p as usize)[0])
        .collect();
    for i in (0..rest.len().saturating_sub(1)).rev() {
        rest[i] = rest[i].min(rest[i + 1]);
    }
    for (i, &(_, p)) in order.iter().enumerate() {
        state.min_rest = u64::from(rest[i]);
        if !state.insert(p as usize) {
            return None;
        }
    }
    // The members of each sequence, in ascending position.
    let mut counts = vec![0usize; bins];
    for &b in &state.bin_of {
        counts[b as usize] += 1;
    }
    let mut members: Vec<Vec<u32>> = counts.into_iter().map(Vec::with_capacity).collect();
    for (p, &b) in state.bin_of.iter().enumerate() {
        members[b as usize].push(p as u32);
    }
    Some(members)
}

//! Balanced packing: LPT with a capacity, samples into a fixed number of sequences of even cost.
//!
//! The samples are taken in decreasing order of cost; each goes to the
//! least-loaded sequence (by the key of the mode) that it fits in. The
//! least-loaded sequences come from a binary heap; up to [`STASH`] of them
//! that are too full are set aside before a second heap, by room left in
//! tokens, finds any sequence with room. If no sequence has room the packing
//! fails and the caller falls back to first-fit-decreasing.
//!
//! In [`Mode::Phase`] there are two heaps, one by vision cost and one by
//! language cost: a sample whose share of the total vision cost exceeds its
//! share of the total language cost goes to the sequence with the least
//! vision cost, any other to the one with the least language cost, so that
//! both phases even out (a greedy for two-dimensional vector scheduling).
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
const STASH: usize = 32;

/// What "least loaded" means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// The total cost over phases.
    Total,
    /// Vision and language cost separately.
    Phase,
}

/// A heap entry: the key (an `f64`'s bits, non-negative so ordered like the
/// value, or a room), the sequence, and the sequence's version when pushed.
type Entry = (Reverse<u64>, Reverse<u32>, u32);
type RoomEntry = (u64, Reverse<u32>, u32);

struct Bins<'a> {
    prep: &'a Prepared,
    load: Vec<[u64; 3]>,
    cost: Vec<Phases>,
    version: Vec<u32>,
    members: Vec<Vec<u32>>,
    heaps: [BinaryHeap<Entry>; 2],
    room: BinaryHeap<RoomEntry>,
    mode: Mode,
}

impl Bins<'_> {
    fn key(&self, heap: usize, b: usize) -> u64 {
        let c = self.cost[b];
        let v = match (self.mode, heap) {
            (Mode::Total, _) => c.total(),
            (Mode::Phase, 0) => c.vision,
            (Mode::Phase, _) => c.language,
        };
        v.to_bits()
    }

    fn heaps_used(&self) -> usize {
        match self.mode {
            Mode::Total => 1,
            Mode::Phase => 2,
        }
    }

    fn push(&mut self, b: usize) {
        let v = self.version[b];
        for h in 0..self.heaps_used() {
            let k = self.key(h, b);
            self.heaps[h].push((Reverse(k), Reverse(b as u32), v));
        }
        self.room
            .push((self.prep.caps[0] - self.load[b][0], Reverse(b as u32), v));
    }

    fn place(&mut self, b: usize, p: usize) {
        let s = self.prep.size(p);
        for (l, x) in self.load[b].iter_mut().zip(s) {
            *l += x;
        }
        self.cost[b] += self.prep.cost[p];
        self.version[b] = self.version[b].wrapping_add(1);
        self.members[b].push(p as u32);
        self.push(b);
        self.compact();
    }

    /// Rebuilds the heaps from the live entries when stale ones dominate.
    fn compact(&mut self) {
        let k = self.load.len();
        let limit = 4 * k + 1024;
        let stale = self.heaps.iter().any(|h| h.len() > limit) || self.room.len() > limit;
        if stale {
            for h in &mut self.heaps {
                h.clear();
            }
            self.room.clear();
            for b in 0..k {
                self.push(b);
            }
        }
    }

    /// Places sample `p` via heap `h`; `false` when no sequence has room.
    fn insert(&mut self, p: usize, h: usize) -> bool {
        let mut stash: Vec<Entry> = Vec::new();
        while stash.len() < STASH {
            let Some(e) = self.heaps[h].pop() else { break };
            let b = e.1 .0 as usize;
            if e.2 != self.version[b] {
                continue; // stale
            }
            if self.prep.fits(self.load[b], p) {
                self.heaps[h].extend(stash);
                self.place(b, p);
                return true;
            }
            stash.push(e);
        }
        self.heaps[h].extend(stash);
        // Any sequence with room, most room first.
        let need = self.prep.size(p)[0];
        let mut set_aside: Vec<RoomEntry> = Vec::new();
        let mut found = None;
        while let Some(e) = self.room.pop() {
            let b = e.1 .0 as usize;
            if e.2 != self.version[b] {
                continue;
            }
            if e.0 < need {
                set_aside.push(e);
                break; // no sequence has room in tokens
            }
            if self.prep.fits(self.load[b], p) {
                found = Some(b);
                set_aside.push(e);
                break;
            }
            set_aside.push(e);
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

/// Packs every sample into `bins` sequences, balanced by `mode`; `None`
/// when the greedy order leaves a sample without room. Each sequence lists
/// sorted positions (in placement order).
pub(crate) fn greedy(prep: &Prepared, bins: usize, mode: Mode) -> Option<Vec<Vec<u32>>> {
    let n = prep.len();
    if bins == 0 {
        return if n == 0 { Some(Vec::new()) } else { None };
    }
    let total: Phases = prep.cost.iter().sum();
    // Normalized so that both phases weigh the same in Phase mode.
    let (wv, wl) = match mode {
        Mode::Total => (1.0, 1.0),
        Mode::Phase => (
            if total.vision > 0.0 { 1.0 / total.vision } else { 0.0 },
            if total.language > 0.0 { 1.0 / total.language } else { 0.0 },
        ),
    };
    let mut order: Vec<(u64, u32)> = (0..n)
        .map(|p| {
            let c = prep.cost[p];
            ((c.vision * wv + c.language * wl).to_bits(), p as u32)
        })
        .collect();
    // Decreasing cost, ties by id (position).
    order.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));

    let mut state = Bins {
        prep,
        load: vec![[0; 3]; bins],
        cost: vec![Phases::ZERO; bins],
        version: vec![0; bins],
        members: vec![Vec::new(); bins],
        heaps: [BinaryHeap::new(), BinaryHeap::new()],
        room: BinaryHeap::new(),
        mode,
    };
    for b in 0..bins {
        state.push(b);
    }
    for &(_, p) in &order {
        let p = p as usize;
        let c = prep.cost[p];
        let h = match mode {
            Mode::Total => 0,
            Mode::Phase => usize::from(c.vision * wv <= c.language * wl),
        };
        if !state.insert(p, h) {
            return None;
        }
    }
    Some(state.members)
}

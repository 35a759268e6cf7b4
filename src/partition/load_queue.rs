//! LPT's bucket queue: the parts by integer load, first come first served
//! among equal loads, in a circular window of loads, O(1) a placement.

use alloc::vec;
use alloc::vec::Vec;

use crate::bitset::BitSet;

/// No part: the end of a bucket's list.
const NONE: u32 = u32::MAX;

/// The parts of a partition by integer load, for a greedy that repeatedly
/// raises the least load by at most `largest`: LPT.
///
/// All loads then lie within `largest` of the least one, and the least load
/// never decreases, so that the parts fit in `m = largest + 1` buckets, one
/// per load residue modulo `m`: from the bucket of the least load onwards,
/// bucket order is load order. A bitset of the non-empty buckets finds the
/// next one. Each bucket is a first-in first-out list: among parts of equal
/// load the one that reached it first comes first (the parts given to
/// [`LoadQueue::new`] enter in index order).
///
/// Every operation takes O(1) time but the search for the next bucket,
/// O(log_64 m); O(m + k) space.
pub(crate) struct LoadQueue {
    /// The non-empty buckets.
    set: BitSet,
    /// `m`: the number of buckets.
    span: u64,
    /// The first and the last part of each bucket, [`NONE`] when empty
    /// (together: one cache line for both).
    ends: Vec<[u32; 2]>,
    /// The part after each part in its bucket.
    next: Vec<u32>,
    /// The load of each part.
    loads: Vec<u64>,
    /// The bucket of the least load (no part lies before it in window
    /// order).
    at: usize,
}

impl LoadQueue {
    /// A queue of the parts with `loads`, all within `largest` of the least
    /// (checked by the caller), entered in index order. Fewer than `2^32 - 1`
    /// parts, and `largest` small enough for an array of `largest + 1`
    /// entries (also the caller's).
    pub(crate) fn new(loads: Vec<u64>, largest: u64) -> Self {
        let span = largest + 1;
        let m = span as usize;
        let least = loads.iter().copied().min().unwrap_or(0);
        debug_assert!(loads.iter().all(|&l| l - least <= largest));
        debug_assert!(u32::try_from(loads.len()).is_ok_and(|k| k < NONE));
        let mut queue = LoadQueue {
            set: BitSet::new(m),
            span,
            ends: vec![[NONE; 2]; m],
            next: vec![NONE; loads.len()],
            at: (least % span) as usize,
            loads,
        };
        for p in 0..queue.loads.len() {
            let bucket = (queue.loads[p] % span) as usize;
            queue.push(bucket, p);
        }
        queue
    }

    /// Appends part `p` to bucket `b`.
    #[inline]
    fn push(&mut self, b: usize, p: usize) {
        let [first, last] = &mut self.ends[b];
        if *last == NONE {
            *first = p as u32;
            self.set.insert(b);
        } else {
            self.next[*last as usize] = p as u32;
        }
        *last = p as u32;
        self.next[p] = NONE;
    }

    /// The part of least load that reached it first, `None` when no part is
    /// left.
    #[inline]
    pub(crate) fn least(&mut self) -> Option<usize> {
        let first = self.ends[self.at][0];
        if first != NONE {
            return Some(first as usize);
        }
        let b = self
            .set
            .successor(self.at)
            .or_else(|| self.set.successor(0))?;
        self.at = b;
        Some(self.ends[b][0] as usize)
    }

    /// Takes the part that [`LoadQueue::least`] just returned out of its
    /// bucket.
    #[inline]
    fn pop(&mut self) -> usize {
        let b = self.at;
        let p = self.ends[b][0] as usize;
        let after = self.next[p];
        self.ends[b][0] = after;
        if after == NONE {
            self.ends[b][1] = NONE;
            self.set.remove(b);
        }
        p
    }

    /// Adds `w <= largest` to the load of the part that
    /// [`LoadQueue::least`] just returned, which goes to the back of the
    /// parts of its new load.
    #[inline]
    pub(crate) fn raise_least(&mut self, w: u64) {
        debug_assert!(w < self.span);
        let p = self.pop();
        let mut b = self.at as u64 + w;
        if b >= self.span {
            b -= self.span;
        }
        self.loads[p] += w;
        self.push(b as usize, p);
    }

    /// Removes the part that [`LoadQueue::least`] just returned.
    #[inline]
    pub(crate) fn remove_least(&mut self) {
        self.pop();
    }

    /// The load of each part.
    pub(crate) fn into_loads(self) -> Vec<u64> {
        self.loads
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::collections::BinaryHeap;
    use core::cmp::Reverse;

    /// Random greedy runs (raise the least by a weight up to `largest`,
    /// sometimes remove it) agree with a heap over (load, arrival, part).
    #[test]
    fn matches_a_heap_over_load_then_arrival() {
        let mut next = crate::test_rng::uniform(0x9E37_79B9_7F4A_7C15u64);
        for (k, largest) in [(1usize, 5u64), (2, 1), (3, 0), (7, 9), (64, 3), (100, 1000)] {
            let loads: Vec<u64> = (0..k).map(|_| next(largest + 1)).collect();
            let mut heap: BinaryHeap<Reverse<(u64, usize, usize)>> = loads
                .iter()
                .enumerate()
                .map(|(p, &l)| Reverse((l, p, p)))
                .collect();
            let mut arrival = k;
            let mut queue = LoadQueue::new(loads, largest);
            for step in 0..5000 {
                let got = queue.least();
                let want = heap.peek().map(|r| r.0 .2);
                assert_eq!(got, want, "k = {k}, largest = {largest}, step {step}");
                let Some(Reverse((l, _, p))) = heap.pop() else {
                    break;
                };
                if next(50) == 0 {
                    queue.remove_least();
                } else {
                    let w = next(largest + 1);
                    queue.raise_least(w);
                    heap.push(Reverse((l + w, arrival, p)));
                    arrival += 1;
                }
            }
            let mut loads = queue.into_loads();
            let mut want: Vec<u64> = heap.into_iter().map(|r| r.0 .0).collect();
            loads.sort_unstable();
            want.sort_unstable();
            if want.len() == k {
                assert_eq!(loads, want);
            }
        }
    }
}

//! LPT's load queue: the parts by integer load in a circular window of
//! loads, first come first served among equal loads, O(1) a placement.

use alloc::vec::Vec;

use super::bucket_queue::BucketQueue;

/// The parts of a partition by integer load, for a greedy that repeatedly
/// raises the least load by at most `largest`: LPT.
///
/// All loads then lie within `largest` of the least one, and the least load
/// never decreases, so that the parts fit in `m = largest + 1` buckets of a
/// [`BucketQueue`], one per load residue modulo `m`: from the bucket of the
/// least load onwards (circularly), bucket order is load order. Parts enter
/// at the back of their bucket: among parts of equal load the one that
/// reached it first comes first (the parts given to [`LoadQueue::new`]
/// enter in index order).
///
/// Every operation takes O(1) time but the search for the next bucket,
/// O(log_64 m); O(m + k) space.
pub(crate) struct LoadQueue {
    queue: BucketQueue,
    /// `m`: the number of buckets.
    span: u64,
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
        let least = loads.iter().copied().min().unwrap_or(0);
        debug_assert!(loads.iter().all(|&l| l - least <= largest));
        // Entry `p` is part `p`: the queue's entry ids are the parts.
        let queue =
            BucketQueue::with_elements(span as usize, loads.iter().map(|&l| (l % span) as usize));
        LoadQueue {
            queue,
            span,
            at: (least % span) as usize,
            loads,
        }
    }

    /// The part of least load that reached it first, `None` when no part is
    /// left.
    #[inline(always)]
    pub(crate) fn least(&mut self) -> Option<usize> {
        if let Some(p) = self.queue.front_entry(self.at) {
            return Some(p);
        }
        let b = self
            .queue
            .next_bucket(self.at)
            .or_else(|| self.queue.next_bucket(0))?;
        self.at = b;
        self.queue.front_entry(b)
    }

    /// Adds `w <= largest` to the load of the part that
    /// [`LoadQueue::least`] just returned, which goes to the back of the
    /// parts of its new load.
    #[inline(always)]
    pub(crate) fn raise_least(&mut self, w: u64) {
        debug_assert!(w < self.span);
        let mut b = self.at as u64 + w;
        if b >= self.span {
            b -= self.span;
        }
        if let Some(p) = self.queue.move_front_to_back(self.at, b as usize) {
            if let Some(load) = self.loads.get_mut(p) {
                *load += w;
            }
        }
    }

    /// Removes the part that [`LoadQueue::least`] just returned.
    #[inline]
    pub(crate) fn remove_least(&mut self) {
        self.queue.pop_front(self.at);
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

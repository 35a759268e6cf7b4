//! A bucket queue: elements in integer buckets, the next non-empty bucket
//! found by a bitset, each bucket a list with pushes at either end.

use alloc::vec;
use alloc::vec::Vec;

use crate::bitset::BitSet;

/// No element: the end of a bucket's list.
const NONE: u32 = u32::MAX;

/// Entries (element, bucket) in buckets `0..buckets`: a monotone priority
/// queue for greedy algorithms whose keys map to small integers (Dial
/// 1969). An element may have several entries (a caller that does not
/// remove outdated ones sees them come out by their old key).
///
/// Each bucket is a singly linked list of entries; entries leave a bucket
/// only at its front, and enter at its back (first in first out among
/// equal keys) or at its front (last in first out): the caller picks the
/// tie rule by the end it pushes to. A 64-ary bitset of the non-empty
/// buckets finds the next one at or after a given bucket, so the caller
/// keeps a cursor that only moves forward (or around a circular window)
/// while the least key only grows. Entries live in a pool whose freed
/// slots are reused first, so a pop followed by a push touches the same
/// slot.
///
/// Entries have ids: [`BucketQueue::with_elements`] makes entry `x` for
/// element `x`, so that a caller with one entry an element can work on
/// entry ids alone ([`BucketQueue::front_entry`],
/// [`BucketQueue::move_front_to_back`]) and never read an entry's element;
/// pushes after that take ids from the pool beyond them.
///
/// # Complexity
///
/// Push and pop take O(1) time (amortized, for the pool), the search for
/// the next non-empty bucket O(log_64 buckets); O(buckets + live entries)
/// space.
///
/// # References
///
/// R. B. Dial, "Algorithm 360: shortest-path forest with topological
/// ordering", Communications of the ACM 12(11), 1969.
pub(crate) struct BucketQueue {
    /// The non-empty buckets.
    set: BitSet,
    /// The first and the last entry of each bucket, [`NONE`] when empty
    /// (together: one cache line for both).
    ends: Vec<[u32; 2]>,
    /// The entry after each entry in its bucket (or, for a free entry, the
    /// next free one): apart from the elements, which moving an entry
    /// never reads.
    next: Vec<u32>,
    /// The element of each entry.
    element: Vec<u32>,
    /// The first free entry.
    free: u32,
}

impl BucketQueue {
    /// An empty queue of `buckets` buckets, with room for `entries` entries
    /// before it grows; fewer than `2^32 - 1` entries at any time (the
    /// caller's to check).
    pub(crate) fn new(buckets: usize, entries: usize) -> Self {
        BucketQueue {
            set: BitSet::new(buckets),
            ends: vec![[NONE; 2]; buckets],
            next: Vec::with_capacity(entries),
            element: Vec::with_capacity(entries),
            free: NONE,
        }
    }

    /// A queue of `buckets` buckets holding, for each element `x` in
    /// index order, entry `x` at the back of bucket `bucket_of[x]` (each
    /// below `buckets`); fewer than `2^32 - 1` entries at any time (the
    /// caller's to check).
    pub(crate) fn with_elements(
        buckets: usize,
        bucket_of: impl ExactSizeIterator<Item = usize>,
    ) -> Self {
        let mut queue = BucketQueue::new(buckets, bucket_of.len());
        for (x, b) in bucket_of.enumerate() {
            queue.push_back(b, x);
        }
        queue
    }

    /// A new entry for element `x`, with no successor.
    #[inline]
    fn entry(&mut self, x: usize) -> u32 {
        if self.free == NONE {
            self.next.push(NONE);
            self.element.push(x as u32);
            return (self.next.len() - 1) as u32;
        }
        let e = self.free;
        self.free = self.next[e as usize];
        self.next[e as usize] = NONE;
        self.element[e as usize] = x as u32;
        e
    }

    /// Appends an entry of element `x` to bucket `b`: it comes out after
    /// the entries already there.
    #[inline]
    pub(crate) fn push_back(&mut self, b: usize, x: usize) {
        let e = self.entry(x);
        self.link_back(b, e);
    }

    /// Prepends an entry of element `x` to bucket `b`: it comes out before
    /// the entries already there.
    #[inline]
    pub(crate) fn push_front(&mut self, b: usize, x: usize) {
        let e = self.entry(x);
        match self.ends[b][0] {
            NONE => self.open(b, e),
            first => {
                self.next[e as usize] = first;
                self.ends[b][0] = e;
            }
        }
    }

    /// Links the unlinked entry `e` (without successor) at the back of
    /// bucket `b`.
    #[inline(always)]
    fn link_back(&mut self, b: usize, e: u32) {
        let [first, last] = &mut self.ends[b];
        if *last == NONE {
            *first = e;
            self.set.insert(b);
        } else if let Some(n) = self.next.get_mut(*last as usize) {
            *n = e;
        }
        *last = e;
    }

    /// Makes entry `e` the only one of the empty bucket `b`.
    #[inline]
    fn open(&mut self, b: usize, e: u32) {
        self.ends[b] = [e, e];
        self.set.insert(b);
    }

    /// The element at the front of bucket `b`, if any.
    #[cfg(test)]
    pub(crate) fn front(&self, b: usize) -> Option<usize> {
        self.front_entry(b).map(|e| self.element[e] as usize)
    }

    /// The entry at the front of bucket `b`, if any (without reading it).
    #[inline(always)]
    pub(crate) fn front_entry(&self, b: usize) -> Option<usize> {
        let first = self.ends[b][0];
        (first != NONE).then_some(first as usize)
    }

    /// The first non-empty bucket at or after `b`.
    #[inline]
    pub(crate) fn next_bucket(&self, b: usize) -> Option<usize> {
        self.set.successor(b)
    }

    /// Moves the front entry of bucket `from` to the back of bucket `to`
    /// (a pop and a push that keep the entry, without reading its
    /// element): the entry, if any.
    #[inline(always)]
    pub(crate) fn move_front_to_back(&mut self, from: usize, to: usize) -> Option<usize> {
        let e = self.unlink_front(from)?;
        self.link_back(to, e);
        Some(e as usize)
    }

    /// Unlinks the front entry of bucket `b`, if any, and leaves it
    /// without successor.
    #[inline(always)]
    fn unlink_front(&mut self, b: usize) -> Option<u32> {
        let e = self.ends[b][0];
        let next = self.next.get_mut(e as usize)?;
        let after = core::mem::replace(next, NONE);
        self.ends[b][0] = after;
        if after == NONE {
            self.ends[b][1] = NONE;
            self.set.remove(b);
        }
        Some(e)
    }

    /// Takes the front entry out of bucket `b`: its element, if any.
    #[inline]
    pub(crate) fn pop_front(&mut self, b: usize) -> Option<usize> {
        let e = self.unlink_front(b)?;
        self.next[e as usize] = self.free;
        self.free = e;
        Some(self.element[e as usize] as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::collections::VecDeque;

    /// Random pushes at either end (some elements in two entries) and pops
    /// from the least non-empty bucket agree with one double-ended queue a
    /// bucket.
    #[test]
    fn matches_a_deque_per_bucket() {
        let mut next = crate::test_rng::uniform(0x2545_F491_4F6C_DD1D);
        for (buckets, len) in [(1usize, 3usize), (5, 8), (64, 40), (130, 500), (5000, 64)] {
            let mut queue = BucketQueue::new(buckets, len);
            let mut oracle: Vec<VecDeque<usize>> = vec![VecDeque::new(); buckets];
            // Elements pushed and not popped; some pushed twice.
            let mut free: Vec<usize> = (0..len).chain(0..len / 4).collect();
            for step in 0..4000 {
                let at = alloc::format!("buckets = {buckets}, len = {len}, step {step}");
                if !free.is_empty() && next(3) != 0 {
                    let x = free.swap_remove(next(free.len() as u64) as usize);
                    let b = next(buckets as u64) as usize;
                    if next(2) == 0 {
                        queue.push_back(b, x);
                        oracle[b].push_back(x);
                    } else {
                        queue.push_front(b, x);
                        oracle[b].push_front(x);
                    }
                    continue;
                }
                let from = next(buckets as u64) as usize;
                let want = (from..buckets).find(|&b| !oracle[b].is_empty());
                assert_eq!(queue.next_bucket(from), want, "{at}");
                let Some(b) = want else { continue };
                assert_eq!(queue.front(b), oracle[b].front().copied(), "{at}");
                if next(4) == 0 {
                    let to = next(buckets as u64) as usize;
                    let e = queue.front_entry(b);
                    assert_eq!(queue.move_front_to_back(b, to), e, "{at}");
                    let x = e.map(|e| queue.element[e] as usize);
                    assert_eq!(x, oracle[b].pop_front(), "{at}");
                    oracle[to].extend(x);
                    continue;
                }
                let x = queue.pop_front(b);
                assert_eq!(x, oracle[b].pop_front(), "{at}");
                free.extend(x);
            }
        }
    }

    /// A queue made by `with_elements` holds entry `x` for element `x`, in
    /// index order in each bucket; moves keep the entry ids, and pushes
    /// after them take new ids.
    #[test]
    fn with_elements_numbers_entries_by_element() {
        let bucket_of = [2usize, 0, 2, 1, 0];
        let mut queue = BucketQueue::with_elements(3, bucket_of.iter().copied());
        assert_eq!(queue.front_entry(0), Some(1));
        assert_eq!(queue.front(0), Some(1));
        assert_eq!(queue.move_front_to_back(0, 2), Some(1));
        assert_eq!(queue.move_front_to_back(0, 1), Some(4));
        assert_eq!(queue.move_front_to_back(0, 1), None);
        assert_eq!(queue.next_bucket(0), Some(1));
        queue.push_front(1, 7);
        assert_eq!(queue.front_entry(1), Some(5));
        let order: Vec<_> = core::iter::from_fn(|| queue.pop_front(1)).collect();
        assert_eq!(order, [7, 3, 4]);
        let order: Vec<_> = core::iter::from_fn(|| queue.pop_front(2)).collect();
        assert_eq!(order, [0, 2, 1]);
        assert_eq!(queue.next_bucket(0), None);
    }
}

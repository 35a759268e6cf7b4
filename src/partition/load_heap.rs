//! LPT's heap for any loads: a 4-ary min-heap of packed `u128` keys (load,
//! arrival, part), first come first served among equal loads.

use alloc::vec::Vec;

use crate::num::Total;

use super::instance;

/// The parts of a partition by load, then arrival (the order in which they
/// reached their load), for a greedy that repeatedly raises the least:
/// LPT for loads the [`LoadQueue`](super::load_queue::LoadQueue) cannot
/// take (large integers, floats).
///
/// A part is one `u128` key, `bits(load) << 64 | arrival << 32 | part`, where
/// `bits` maps the load to `u64` in order (integers as they are, floats by
/// their total order), so that a comparison is one integer comparison; the
/// keys sit in a 4-ary heap (half the depth of a binary one, the children of
/// a node in one or two cache lines). Raising the least key sifts the hole at
/// the top down to the bottom along the least children, then the new key up
/// (it usually belongs near the bottom). O(log k) an operation.
pub(crate) struct LoadHeap<T> {
    /// The heap; slots from `len` on are `u128::MAX`, so that missing
    /// children never win.
    keys: Vec<u128>,
    len: usize,
    loads: Vec<T>,
    /// The next arrival.
    arrival: u64,
}

impl<T: Total> LoadHeap<T> {
    /// A heap of the parts with `loads`, arrived in index order, for at most
    /// `raises` raises; `None` when part indices or arrivals need more than
    /// 32 bits, or integer loads could exceed `u64` (`total` bounds every
    /// load).
    pub(crate) fn new(loads: Vec<T>, raises: usize, total: T) -> Option<Self> {
        let k = loads.len();
        let arrivals = u64::try_from(k.checked_add(raises)?).ok()?;
        if arrivals > 1 << 32 {
            return None;
        }
        if let Some(t) = instance::as_u128(total) {
            u64::try_from(t).ok()?;
        }
        let mut keys: Vec<u128> = loads
            .iter()
            .enumerate()
            .map(|(p, &l)| key(l, p as u64, p))
            .collect();
        // Sorted keys are a valid heap.
        keys.sort_unstable();
        keys.resize(4 * k + 4, u128::MAX);
        Some(LoadHeap {
            keys,
            len: k,
            loads,
            arrival: k as u64,
        })
    }

    /// The part of least (load, arrival), `None` when no part is left.
    #[inline]
    pub(crate) fn least(&self) -> Option<usize> {
        (self.len > 0).then(|| (self.keys[0] & u128::from(u32::MAX)) as usize)
    }

    /// Adds `w` to the load of the part [`LoadHeap::least`] just returned,
    /// which arrives last among the parts of its new load.
    #[inline]
    pub(crate) fn raise_least(&mut self, w: T) {
        let p = (self.keys[0] & u128::from(u32::MAX)) as usize;
        self.loads[p] = self.loads[p].add(w);
        let new = key(self.loads[p], self.arrival, p);
        self.arrival += 1;
        self.replace_top(new);
    }

    /// Removes the part [`LoadHeap::least`] just returned.
    #[inline]
    pub(crate) fn remove_least(&mut self) {
        self.len -= 1;
        let last = core::mem::replace(&mut self.keys[self.len], u128::MAX);
        if self.len > 0 {
            self.replace_top(last);
        }
    }

    /// Puts `new` in place of the top: the hole goes down along the least
    /// children to the bottom, then `new` goes up.
    fn replace_top(&mut self, new: u128) {
        let keys = &mut self.keys;
        let mut i = 0;
        loop {
            let c = 4 * i + 1;
            if c >= self.len {
                break;
            }
            let x = c + usize::from(keys[c + 1] < keys[c]);
            let y = c + 2 + usize::from(keys[c + 3] < keys[c + 2]);
            let m = if keys[y] < keys[x] { y } else { x };
            keys[i] = keys[m];
            i = m;
        }
        while i > 0 {
            let parent = (i - 1) / 4;
            if keys[parent] <= new {
                break;
            }
            keys[i] = keys[parent];
            i = parent;
        }
        keys[i] = new;
    }
}

/// The key of part `p` with `load` that arrived `arrival`-th.
#[inline]
fn key<T: Total>(load: T, arrival: u64, p: usize) -> u128 {
    u128::from(order_bits(load)) << 64 | u128::from(arrival) << 32 | p as u128
}

/// A load as `u64` in the same order: integers (below 2^64) as they are,
/// floats by their total order (`f64::total_cmp`).
#[inline]
fn order_bits<T: Total>(x: T) -> u64 {
    match instance::as_u128(x) {
        Some(v) => v as u64,
        None => crate::num::order_bits(x.to_f64()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::collections::BinaryHeap;
    use core::cmp::Reverse;

    #[test]
    fn order_bits_keep_the_total_order() {
        let floats = [-0.0f64, 0.0, 1e-300, 0.5, 1.0, 3.5, 1e300, f64::INFINITY];
        for w in floats.windows(2) {
            assert!(order_bits(w[0]) < order_bits(w[1]), "{w:?}");
        }
        assert!(order_bits(7u128) < order_bits(8u128));
        assert_eq!(order_bits(u128::from(u64::MAX)), u64::MAX);
    }

    /// Random greedy runs (raise the least, sometimes remove it) agree with
    /// a binary heap over (load, arrival, part).
    #[test]
    fn matches_a_binary_heap_over_load_then_arrival() {
        let mut next = crate::test_rng::uniform(0x9E37_79B9_7F4A_7C15u64);
        for (k, largest) in [
            (1usize, 5u64),
            (2, 1),
            (3, 0),
            (5, 9),
            (64, 3),
            (100, 1 << 40),
        ] {
            let loads: Vec<u128> = (0..k).map(|_| u128::from(next(largest + 1))).collect();
            let mut oracle: BinaryHeap<Reverse<(u128, usize, usize)>> = loads
                .iter()
                .enumerate()
                .map(|(p, &l)| Reverse((l, p, p)))
                .collect();
            let mut arrival = k;
            let mut heap = LoadHeap::new(loads, 5000, u128::from(u64::MAX)).unwrap();
            for step in 0..5000 {
                assert_eq!(
                    heap.least(),
                    oracle.peek().map(|r| r.0 .2),
                    "k = {k}, largest = {largest}, step {step}"
                );
                let Some(Reverse((l, _, p))) = oracle.pop() else {
                    break;
                };
                if next(50) == 0 {
                    heap.remove_least();
                } else {
                    let w = u128::from(next(largest + 1));
                    heap.raise_least(w);
                    oracle.push(Reverse((l + w, arrival, p)));
                    arrival += 1;
                }
            }
        }
    }

    #[test]
    fn refuses_what_does_not_fit() {
        assert!(LoadHeap::new(alloc::vec![0u128; 3], 10, 1u128 << 64).is_none());
        assert!(LoadHeap::new(alloc::vec![0u128; 3], usize::MAX, 1).is_none());
        assert!(LoadHeap::new(alloc::vec![0.0f64; 3], 10, f64::MAX).is_some());
    }
}

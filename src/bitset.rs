//! A set of small integers with successor queries in O(log_64 n): the
//! ordered index behind best-fit, first-fit-decreasing and LPT's bucket
//! queue.

use alloc::vec::Vec;

/// The most levels: 64^11 exceeds every `usize`.
const MAX_LEVELS: usize = 11;

/// A set of integers in `0..len`: a 64-ary tree of bit words, finest level
/// first, each bit of a level saying whether the matching word below is
/// non-zero. Insert, remove and successor take O(log_64 len).
pub(crate) struct BitSet {
    /// The words of every level, finest level first.
    words: Vec<u64>,
    /// Where each level starts in `words`; `starts[levels]` is the end.
    starts: [usize; MAX_LEVELS + 1],
    levels: usize,
}

impl BitSet {
    pub(crate) fn new(len: usize) -> Self {
        let mut starts = [0; MAX_LEVELS + 1];
        let mut levels = 0;
        let mut words = len.div_ceil(64).max(1);
        loop {
            starts[levels + 1] = starts[levels] + words;
            levels += 1;
            if words == 1 {
                break;
            }
            words = words.div_ceil(64);
        }
        BitSet {
            words: alloc::vec![0u64; starts[levels]],
            starts,
            levels,
        }
    }

    pub(crate) fn insert(&mut self, mut x: usize) {
        for &start in &self.starts[..self.levels] {
            let i = start + x / 64;
            let was = self.words[i];
            self.words[i] = was | (1 << (x % 64));
            if was != 0 {
                break;
            }
            x /= 64;
        }
    }

    pub(crate) fn remove(&mut self, mut x: usize) {
        for &start in &self.starts[..self.levels] {
            let i = start + x / 64;
            self.words[i] &= !(1u64 << (x % 64));
            if self.words[i] != 0 {
                break;
            }
            x /= 64;
        }
    }

    /// The smallest element `>= x`.
    pub(crate) fn successor(&self, mut x: usize) -> Option<usize> {
        let mut l = 0;
        while l < self.levels {
            let i = self.starts[l] + x / 64;
            if i >= self.starts[l + 1] {
                return None;
            }
            let masked = self.words[i] & (!0u64 << (x % 64));
            if masked != 0 {
                let mut y = x / 64 * 64 + masked.trailing_zeros() as usize;
                while l > 0 {
                    l -= 1;
                    y = y * 64 + self.words[self.starts[l] + y].trailing_zeros() as usize;
                }
                return Some(y);
            }
            x = x / 64 + 1;
            l += 1;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::BitSet;
    use alloc::collections::BTreeSet;

    #[test]
    fn bitset_matches_btreeset() {
        let len = 5000;
        let mut set = BitSet::new(len);
        let mut oracle = BTreeSet::new();
        let mut next = crate::test_rng::uniform(0x2545_f491_4f6c_dd1d);
        for step in 0..20_000 {
            let v = next(len as u64) as usize;
            if step % 3 == 0 {
                set.remove(v);
                oracle.remove(&v);
            } else {
                set.insert(v);
                oracle.insert(v);
            }
            let q = next(len as u64 + 10) as usize;
            assert_eq!(
                set.successor(q),
                oracle.range(q..).next().copied(),
                "query {q}"
            );
        }
    }
}

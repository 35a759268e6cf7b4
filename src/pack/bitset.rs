//! A set of small integers with successor queries in O(log_64 n): the
//! ordered index behind best-fit and first-fit-decreasing.

use alloc::vec::Vec;

/// A set of integers in `0..len`: a 64-ary tree of bit words, finest level
/// first, each bit of a level saying whether the matching word below is
/// non-zero. Insert, remove and successor take O(log_64 len).
pub(crate) struct BitSet {
    levels: Vec<Vec<u64>>,
}

impl BitSet {
    pub(crate) fn new(len: usize) -> Self {
        let mut levels = Vec::new();
        let mut words = len.div_ceil(64).max(1);
        loop {
            levels.push(alloc::vec![0u64; words]);
            if words == 1 {
                break;
            }
            words = words.div_ceil(64);
        }
        BitSet { levels }
    }

    pub(crate) fn insert(&mut self, mut x: usize) {
        for level in &mut self.levels {
            let (w, b) = (x / 64, x % 64);
            let was = level[w];
            level[w] = was | (1 << b);
            if was != 0 {
                break;
            }
            x = w;
        }
    }

    pub(crate) fn remove(&mut self, mut x: usize) {
        for level in &mut self.levels {
            let (w, b) = (x / 64, x % 64);
            level[w] &= !(1u64 << b);
            if level[w] != 0 {
                break;
            }
            x = w;
        }
    }

    /// The smallest element `>= x`.
    pub(crate) fn successor(&self, mut x: usize) -> Option<usize> {
        let mut l = 0;
        while l < self.levels.len() {
            let (w, b) = (x / 64, x % 64);
            let word = *self.levels[l].get(w)?;
            let masked = word & (!0u64 << b);
            if masked != 0 {
                let mut y = w * 64 + masked.trailing_zeros() as usize;
                while l > 0 {
                    l -= 1;
                    y = y * 64 + self.levels[l][y].trailing_zeros() as usize;
                }
                return Some(y);
            }
            x = w + 1;
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
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for step in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let v = (x % len as u64) as usize;
            if step % 3 == 0 {
                set.remove(v);
                oracle.remove(&v);
            } else {
                set.insert(v);
                oracle.insert(v);
            }
            let q = ((x >> 20) % (len as u64 + 10)) as usize;
            assert_eq!(
                set.successor(q),
                oracle.range(q..).next().copied(),
                "query {q}"
            );
        }
    }
}

//! A stable 64-bit fingerprint of a plan: FNV-1a over its shape and sample ids.

use super::shape::Shape;
use crate::grouped::Grouped;

const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a (64 bit) of `bytes`, continuing from `state` (the offset basis
/// for `None`). O(bytes).
fn fnv1a(bytes: &[u8], state: Option<u64>) -> u64 {
    let mut h = state.unwrap_or(OFFSET);
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(PRIME);
    }
    h
}

/// The fingerprint of a plan's layout: FNV-1a over the little-endian bytes
/// of a version tag, `R`, `A` and `S`, then for every sequence (rank by
/// rank, micro-step by micro-step) its sample count and its ids; it depends
/// on nothing else, so equal plans hash equally on every platform.
///
/// `sequences` holds the ids slot by slot. O(slots + ids) time, no extra
/// space.
pub(crate) fn of_plan(shape: Shape, sequences: &Grouped<u64>) -> u64 {
    let mut h = fnv1a(b"microbatch-plan-v1", None);
    for v in [shape.ranks, shape.steps, shape.per_step] {
        h = fnv1a(&(v as u64).to_le_bytes(), Some(h));
    }
    for ids in sequences.iter() {
        h = fnv1a(&(ids.len() as u64).to_le_bytes(), Some(h));
        for id in ids {
            h = fnv1a(&id.to_le_bytes(), Some(h));
        }
    }
    h
}

#[cfg(test)]
mod tests {
    use super::fnv1a;

    /// The published FNV-1a 64 test vectors, and continuing a hash.
    #[test]
    fn known_values() {
        assert_eq!(fnv1a(b"", None), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a", None), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar", None), 0x8594_4171_f739_67e8);
        assert_eq!(fnv1a(b"b", Some(fnv1a(b"a", None))), fnv1a(b"ab", None));
    }
}

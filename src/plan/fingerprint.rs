//! A stable 64-bit fingerprint of a plan: FNV-1a over its shape and sample ids.

const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a (64 bit) of `bytes`, continuing from `state` (start from
/// [`fnv1a`]`(&[], None)`, the offset basis).
///
/// The hash of a [`Plan`](crate::plan::Plan) feeds it the little-endian
/// bytes of a version tag, `R`, `A` and `S`, then for every sequence (rank by
/// rank, micro-step by micro-step) its sample count and its ids; it depends
/// on nothing else, so equal plans hash equally on every platform.
///
/// # Complexity
///
/// O(bytes).
///
/// # Examples
///
/// ```
/// use microbatch::plan::fnv1a;
///
/// assert_eq!(fnv1a(b"", None), 0xcbf2_9ce4_8422_2325);
/// assert_eq!(fnv1a(b"a", None), 0xaf63_dc4c_8601_ec8c);
/// assert_eq!(fnv1a(b"b", Some(fnv1a(b"a", None))), fnv1a(b"ab", None));
/// ```
#[must_use]
pub fn fnv1a(bytes: &[u8], state: Option<u64>) -> u64 {
    let mut h = state.unwrap_or(OFFSET);
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(PRIME);
    }
    h
}

/// The fingerprint of a plan's layout.
pub(crate) fn of_plan(
    ranks: usize,
    steps: usize,
    per_step: usize,
    offsets: &[usize],
    ids: &[u64],
) -> u64 {
    let mut h = fnv1a(b"microbatch-plan-v1", None);
    for v in [ranks as u64, steps as u64, per_step as u64] {
        h = fnv1a(&v.to_le_bytes(), Some(h));
    }
    for w in offsets.windows(2) {
        h = fnv1a(&((w[1] - w[0]) as u64).to_le_bytes(), Some(h));
        for id in &ids[w[0]..w[1]] {
            h = fnv1a(&id.to_le_bytes(), Some(h));
        }
    }
    h
}

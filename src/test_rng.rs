//! A seeded xorshift64 generator for the unit tests: deterministic random
//! inputs without a dependency.

/// `next(bound)` draws the next value below `bound` (`bound > 0`) from the
/// xorshift64 sequence seeded with `seed` (non-zero).
pub(crate) fn xorshift(mut seed: u64) -> impl FnMut(u64) -> u64 {
    move |bound| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % bound
    }
}

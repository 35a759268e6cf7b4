//! The seeded generator of the unit tests: `rand_pcg::Pcg64` seeded with
//! `seed_from_u64` (a dev-dependency, so it works under
//! `--no-default-features`), as `tests/common/rng.rs` for the integration
//! tests and benches.

use rand::{Rng as _, SeedableRng as _};

/// `next(bound)` draws the next value uniformly below `bound` (`bound > 0`)
/// from the generator seeded with `seed`.
pub(crate) fn uniform(seed: u64) -> impl FnMut(u64) -> u64 {
    let mut rng = rand_pcg::Pcg64::seed_from_u64(seed);
    move |bound| rng.random_range(0..bound)
}

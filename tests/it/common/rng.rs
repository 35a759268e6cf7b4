//! The one seeded generator of the integration tests and the benches:
//! `rand_pcg::Pcg64` seeded with `SeedableRng::seed_from_u64`, so that every
//! input is reproducible, on every platform, from a `u64`. The unit tests
//! inside the crate use `src/test_rng.rs`, built the same way.
//!
//! Tests reach it as `crate::common::rng` (`TestRng` also as
//! `crate::common::TestRng`), benches as
//! `#[path = "../tests/it/common/rng.rs"] mod rng;`.
#![allow(dead_code)]

use rand::distr::Open01;
use rand::seq::SliceRandom;
use rand::{Rng as _, RngCore as _, SeedableRng as _};
use rand_pcg::Pcg64;

/// A seeded generator of test inputs.
pub struct TestRng(Pcg64);

impl TestRng {
    /// The generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Self(Pcg64::seed_from_u64(seed))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// Uniform in `0..n`; `n` must be positive.
    pub fn below(&mut self, n: u64) -> u64 {
        self.0.random_range(0..n)
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        self.0.random::<f64>()
    }

    /// A standard normal (Box-Muller over the open interval `(0, 1)`, so
    /// that the logarithm is finite).
    pub fn normal(&mut self) -> f64 {
        let u: f64 = self.0.sample(Open01);
        let v: f64 = self.0.sample(Open01);
        (-2.0 * u.ln()).sqrt() * (2.0 * core::f64::consts::PI * v).cos()
    }

    /// Shuffles `items` uniformly (Fisher-Yates).
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        items.shuffle(&mut self.0);
    }
}

/// A value drawn from `key` alone (the first output of the generator seeded
/// with `key`): for inputs that are a function of a key, such as a token's
/// gradient from `(id, t)`.
pub fn hash(key: u64) -> u64 {
    TestRng::new(key).next_u64()
}

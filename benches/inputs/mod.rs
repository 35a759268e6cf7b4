//! The seeded inputs of the packing and partitioning benches, in one place so
//! that the quality tables (`examples/quality_table.rs`) measure the same
//! instances the benches time. Benches reach it as `mod inputs;`, examples as
//! `#[path = "../benches/inputs/mod.rs"] mod inputs;`.
#![allow(dead_code)]

#[path = "../../tests/it/common/rng.rs"]
mod rng;
pub use rng::TestRng;

/// The sequence length of the packing benches.
pub const CAPACITY: u32 = 16384;

/// The tile cap of the two-dimensional packing benches.
pub const TILES: u32 = 48;

/// Sample lengths of a VLM batch (`benches/pack.rs`): log-normal tokens
/// (median 1500, sigma 1), clipped to `1..=CAPACITY`.
pub fn pack_lengths(n: usize, seed: u64) -> Vec<u32> {
    let mut rng = TestRng::new(seed);
    (0..n)
        .map(|_| {
            let x = (1500f64.ln() + rng.normal()).exp();
            x.clamp(1.0, f64::from(CAPACITY)) as u32
        })
        .collect()
}

/// InternVL-like (tokens, tiles) samples (`benches/pack.rs`): 0 to 12 tiles
/// of 256 tokens plus log-normal text (median 300).
pub fn pack_samples(n: usize, seed: u64) -> Vec<[u32; 2]> {
    let mut rng = TestRng::new(seed ^ 0xA5A5);
    (0..n)
        .map(|_| {
            let tiles = rng.below(13) as u32;
            let text = (300f64.ln() + rng.normal()).exp().clamp(1.0, 4096.0) as u32;
            [text + 256 * tiles, tiles]
        })
        .collect()
}

/// Sample lengths uniform in `1..=16384` (`benches/partition.rs`).
pub fn uniform_lengths(n: usize, seed: u64) -> Vec<u32> {
    let mut rng = TestRng::new(seed);
    (0..n).map(|_| 1 + rng.below(16384) as u32).collect()
}

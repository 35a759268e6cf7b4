//! Value stability: exact outputs pinned for fixed seeds, so that a change in
//! ordering or tie-breaking shows up as a failing test (and a CHANGELOG entry).

use crate::common::TestRng;
use microbatch::pack::{
    best_fit, best_fit_decreasing, first_fit, first_fit_decreasing, next_fit, Packing,
};

/// FNV-1a over the bins (item indices, with a separator per bin).
fn fingerprint(p: &Packing<u32>) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    let mut eat = |x: u64| {
        for b in x.to_le_bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x100_0000_01b3);
        }
    };
    for bin in p.bins() {
        for &i in bin.items() {
            eat(i as u64);
        }
        eat(u64::MAX);
    }
    h
}

fn sizes(seed: u64) -> Vec<u32> {
    let mut rng = TestRng::new(seed);
    // Many ties: 200 sizes from 40 values.
    (0..200).map(|_| 25 * (1 + rng.below(40) as u32)).collect()
}

fn pairs(seed: u64) -> Vec<[u32; 2]> {
    let mut rng = TestRng::new(seed);
    (0..200)
        .map(|_| [1 + rng.below(600) as u32, rng.below(7) as u32])
        .collect()
}

/// (bins, items of the first bin, fingerprint of all bins).
type Pin = (usize, &'static [usize], u64);

fn check(cases: Vec<(&str, Packing<u32>)>, pins: &[Pin]) {
    assert_eq!(cases.len(), pins.len());
    for ((name, p), &(bins, first, hash)) in cases.into_iter().zip(pins) {
        assert_eq!(p.len(), bins, "{name}");
        assert_eq!(p.bin(0).items(), first, "{name}");
        assert_eq!(fingerprint(&p), hash, "{name}");
    }
}

#[test]
fn one_dimensional_outputs_are_pinned() {
    let s = sizes(2026);
    let cases = vec![
        ("ffd", first_fit_decreasing(&s, 1000).unwrap()),
        ("bfd", best_fit_decreasing(&s, 1000).unwrap()),
        ("ff", first_fit(&s, 1000).unwrap()),
        ("bf", best_fit(&s, 1000).unwrap()),
        ("nf", next_fit(&s, 1000).unwrap()),
    ];
    check(cases, &PIN);
}

#[test]
fn two_dimensional_outputs_are_pinned() {
    let s = pairs(7);
    let cap = [1000, 12];
    let cases = vec![
        ("ffd", first_fit_decreasing(&s, cap).unwrap()),
        ("bfd", best_fit_decreasing(&s, cap).unwrap()),
        ("ff", first_fit(&s, cap).unwrap()),
        ("bf", best_fit(&s, cap).unwrap()),
    ];
    check(cases, &PIN2);
}

const PIN: [Pin; 5] = [
    (92, &[38], 0xd0e9_6467_1fc6_1a95),
    (92, &[38], 0x08b0_8d44_f210_f8f5),
    (96, &[0, 2, 8], 0xfabc_42ef_0545_6675),
    (95, &[0, 7, 10, 20], 0x9c88_8843_4cb5_e29d),
    (119, &[0], 0x3513_a8b2_99ee_9cbd),
];

const PIN2: [Pin; 4] = [
    (62, &[41, 132, 60], 0x30ac_5eb3_6e1d_32b5),
    (62, &[41, 132, 60], 0x4e00_b7b0_93af_7f05),
    (65, &[0, 1, 2, 3, 7, 49], 0x8f52_a55c_96fb_3d8d),
    (65, &[0, 1, 2, 3, 7, 49], 0x5750_f288_9e76_cdcd),
];

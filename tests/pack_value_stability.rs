//! Value stability: exact outputs pinned for fixed seeds, so that a change in
//! ordering or tie-breaking shows up as a failing test (and a CHANGELOG entry).

mod common;

use common::SplitMix;
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
    let mut rng = SplitMix(seed);
    // Many ties: 200 sizes from 40 values.
    (0..200).map(|_| 25 * (1 + rng.below(40) as u32)).collect()
}

fn pairs(seed: u64) -> Vec<[u32; 2]> {
    let mut rng = SplitMix(seed);
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
    (110, &[60], 0xbf85_3f3a_5e73_b8c5),
    (110, &[60], 0x8bb8_a00e_befe_51d5),
    (116, &[0, 1, 4, 11, 14, 37], 0xcc4e_94e5_35b6_ca25),
    (114, &[0, 1, 4, 16, 24], 0x8935_47c0_60d4_7a35),
    (139, &[0, 1], 0x9dd2_e8eb_e3b7_c1dd),
];

const PIN2: [Pin; 4] = [
    (63, &[3, 187], 0x9738_bc1f_493f_68ed),
    (64, &[3, 187], 0x68ed_880a_edea_4785),
    (66, &[0, 1, 2, 37, 73], 0x40a8_2dc8_0fe7_9295),
    (66, &[0, 1, 2, 110], 0xf254_eed7_ef7f_ad85),
];

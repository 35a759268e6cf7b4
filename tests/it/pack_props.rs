//! Property tests of the bin-packing family against naive oracles and a
//! brute-force optimum.

use crate::common::oracle::*;
use crate::common::TestRng;
use microbatch::pack::{
    best_fit, best_fit_decreasing, first_fit, first_fit_decreasing, lower_bounds, next_fit,
    Heuristic, StreamingPacker,
};
use ordered_float::NotNan;
use proptest::prelude::*;

/// A capacity and sizes that fit it (zero sizes included).
fn instance(max_cap: u32, max_len: usize) -> impl Strategy<Value = (u32, Vec<u32>)> {
    (1..=max_cap).prop_flat_map(move |cap| (Just(cap), prop::collection::vec(0..=cap, 0..max_len)))
}

/// Two-dimensional items (tokens, tiles) under a capacity.
fn instance_2d(max_len: usize) -> impl Strategy<Value = ([u32; 2], Vec<[u32; 2]>)> {
    (1..=60u32, 1..=8u32).prop_flat_map(move |(c0, c1)| {
        (
            Just([c0, c1]),
            prop::collection::vec((0..=c0, 0..=c1).prop_map(|(a, b)| [a, b]), 0..max_len),
        )
    })
}

fn vecs(sizes: &[u32]) -> Vec<Vec<u32>> {
    sizes.iter().map(|&s| vec![s]).collect()
}

/// The same instance scaled into `u64` values far above the counting-sort
/// limit, so the comparison-sort and B-tree paths run.
const SCALE: u64 = 1 << 33;

fn scaled(sizes: &[u32]) -> Vec<u64> {
    sizes.iter().map(|&s| u64::from(s) * SCALE).collect()
}

fn floats(sizes: &[u32]) -> Vec<NotNan<f64>> {
    sizes
        .iter()
        .map(|&s| NotNan::new(f64::from(s)).unwrap())
        .collect()
}

fn fl(x: u32) -> NotNan<f64> {
    NotNan::new(f64::from(x)).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn ffd_equals_naive_ffd((cap, sizes) in instance(100, 60)) {
        let items = vecs(&sizes);
        let expected = naive_first_fit(&items, &[cap], &decreasing_order(&sizes, None));
        let p = first_fit_decreasing(&sizes, cap).unwrap();
        check_packing(&items, &[cap], &p);
        prop_assert_eq!(bins_of(&p), expected.clone());
        prop_assert_eq!(bins_of(&first_fit_decreasing(&scaled(&sizes), u64::from(cap) * SCALE).unwrap()), expected.clone());
        prop_assert_eq!(bins_of(&first_fit_decreasing(&floats(&sizes), fl(cap)).unwrap()), expected);
    }

    #[test]
    fn bfd_equals_naive_bfd((cap, sizes) in instance(100, 60)) {
        let items = vecs(&sizes);
        let expected = naive_best_fit(&items, &[cap], &decreasing_order(&sizes, None));
        let p = best_fit_decreasing(&sizes, cap).unwrap();
        check_packing(&items, &[cap], &p);
        prop_assert_eq!(bins_of(&p), expected.clone());
        prop_assert_eq!(bins_of(&best_fit_decreasing(&scaled(&sizes), u64::from(cap) * SCALE).unwrap()), expected.clone());
        prop_assert_eq!(bins_of(&best_fit_decreasing(&floats(&sizes), fl(cap)).unwrap()), expected);
    }

    #[test]
    fn online_algorithms_equal_naive((cap, sizes) in instance(100, 60)) {
        let items = vecs(&sizes);
        let arrival: Vec<usize> = (0..sizes.len()).collect();
        let ff = first_fit(&sizes, cap).unwrap();
        let bf = best_fit(&sizes, cap).unwrap();
        let nf = next_fit(&sizes, cap).unwrap();
        for p in [&ff, &bf, &nf] {
            check_packing(&items, &[cap], p);
        }
        prop_assert_eq!(bins_of(&ff), naive_first_fit(&items, &[cap], &arrival));
        prop_assert_eq!(bins_of(&bf), naive_best_fit(&items, &[cap], &arrival));
        prop_assert_eq!(bins_of(&nf), naive_next_fit(&items, &[cap]));
        prop_assert_eq!(bins_of(&best_fit(&scaled(&sizes), u64::from(cap) * SCALE).unwrap()), bins_of(&bf));
        prop_assert_eq!(bins_of(&first_fit(&floats(&sizes), fl(cap)).unwrap()), bins_of(&ff));
    }

    #[test]
    fn vector_algorithms_equal_naive((cap, items) in instance_2d(60)) {
        let rows: Vec<Vec<u32>> = items.iter().map(|i| i.to_vec()).collect();
        let dec = decreasing_order_vec(&rows, &cap);
        let arrival: Vec<usize> = (0..items.len()).collect();
        let ffd = first_fit_decreasing(&items, cap).unwrap();
        let bfd = best_fit_decreasing(&items, cap).unwrap();
        let ff = first_fit(&items, cap).unwrap();
        let bf = best_fit(&items, cap).unwrap();
        let nf = next_fit(&items, cap).unwrap();
        for p in [&ffd, &bfd, &ff, &bf, &nf] {
            check_packing(&rows, &cap, p);
        }
        prop_assert_eq!(bins_of(&ffd), naive_first_fit(&rows, &cap, &dec));
        prop_assert_eq!(bins_of(&bfd), naive_best_fit(&rows, &cap, &dec));
        prop_assert_eq!(bins_of(&ff), naive_first_fit(&rows, &cap, &arrival));
        prop_assert_eq!(bins_of(&bf), naive_best_fit(&rows, &cap, &arrival));
        prop_assert_eq!(bins_of(&nf), naive_next_fit(&rows, &cap));
        // Runtime-sized vectors give the same result as arrays.
        prop_assert_eq!(bins_of(&first_fit_decreasing(&rows, cap.to_vec()).unwrap()), bins_of(&ffd));
    }

    /// Wide secondary dimensions: more than 64 distinct secondary sizes and
    /// more than 256 secondary capacities, so FFD, BFD, FF and BF leave their
    /// grouped paths for the trees and the scan.
    #[test]
    fn vector_fallback_paths_equal_naive(
        cap in (20..=200u32, 500..=1000u32),
        seed in any::<u64>(),
        n in 65usize..130,
    ) {
        let mut rng = TestRng::new(seed);
        let items: Vec<[u32; 2]> = (0..n)
            .map(|_| [rng.below(u64::from(cap.0) + 1) as u32, rng.below(u64::from(cap.1) + 1) as u32])
            .collect();
        let cap = [cap.0, cap.1];
        let rows: Vec<Vec<u32>> = items.iter().map(|i| i.to_vec()).collect();
        let dec = decreasing_order_vec(&rows, &cap);
        let arrival: Vec<usize> = (0..n).collect();
        let ffd = first_fit_decreasing(&items, cap).unwrap();
        let bfd = best_fit_decreasing(&items, cap).unwrap();
        let ff = first_fit(&items, cap).unwrap();
        let bf = best_fit(&items, cap).unwrap();
        for p in [&ffd, &bfd, &ff, &bf] {
            check_packing(&rows, &cap, p);
        }
        prop_assert_eq!(bins_of(&ffd), naive_first_fit(&rows, &cap, &dec));
        prop_assert_eq!(bins_of(&bfd), naive_best_fit(&rows, &cap, &dec));
        prop_assert_eq!(bins_of(&ff), naive_first_fit(&rows, &cap, &arrival));
        prop_assert_eq!(bins_of(&bf), naive_best_fit(&rows, &cap, &arrival));
    }

    #[test]
    fn decreasing_within_11_9_opt_and_bounds_below_opt((cap, sizes) in instance(40, 10)) {
        let items = vecs(&sizes);
        let opt = brute_force_opt(&items, &[cap]);
        let lb = lower_bounds(&sizes, cap).unwrap();
        prop_assert!(lb.l1 <= lb.l2, "L1 {} > L2 {}", lb.l1, lb.l2);
        prop_assert!(lb.l2 as usize <= opt, "L2 {} > OPT {}", lb.l2, opt);
        for p in [first_fit_decreasing(&sizes, cap).unwrap(), best_fit_decreasing(&sizes, cap).unwrap()] {
            prop_assert!(p.len() >= opt);
            prop_assert!(9 * p.len() <= 11 * opt + 6, "{} bins, OPT {}", p.len(), opt);
            prop_assert_eq!(p.lower_bounds(), lb);
        }
    }

    #[test]
    fn l2_equals_its_definition((cap, sizes) in instance(200, 40)) {
        let lb = lower_bounds(&sizes, cap).unwrap();
        prop_assert_eq!(lb.l2, naive_l2(&sizes, cap));
        let total: u64 = sizes.iter().map(|&s| u64::from(s)).sum();
        prop_assert_eq!(lb.l1, total.div_ceil(u64::from(cap)));
        prop_assert_eq!(lower_bounds(&scaled(&sizes), u64::from(cap) * SCALE).unwrap(), lb);
    }

    #[test]
    fn vector_bounds_below_opt((cap, items) in instance_2d(8)) {
        let rows: Vec<Vec<u32>> = items.iter().map(|i| i.to_vec()).collect();
        let opt = brute_force_opt(&rows, &cap);
        let lb = lower_bounds(&items, cap).unwrap();
        prop_assert!(lb.l1 <= lb.l2 && lb.l2 as usize <= opt, "{lb:?} vs OPT {opt}");
    }

    #[test]
    fn results_by_id_do_not_depend_on_input_order(
        (cap, sizes) in instance(50, 40),
        seed in any::<u64>(),
    ) {
        let items: Vec<(u32, u32)> = sizes.iter().enumerate().map(|(i, &s)| (i as u32, s)).collect();
        let mut shuffled = items.clone();
        let mut rng = TestRng::new(seed);
        for i in (1..shuffled.len()).rev() {
            shuffled.swap(i, rng.below(i as u64 + 1) as usize);
        }
        let by_id = |items: &[(u32, u32)], bins: Vec<Vec<usize>>| -> Vec<Vec<u32>> {
            bins.into_iter().map(|b| b.into_iter().map(|i| items[i].0).collect()).collect()
        };
        prop_assert_eq!(
            by_id(&items, bins_of(&first_fit_decreasing(&items, cap).unwrap())),
            by_id(&shuffled, bins_of(&first_fit_decreasing(&shuffled, cap).unwrap()))
        );
        prop_assert_eq!(
            by_id(&items, bins_of(&best_fit_decreasing(&items, cap).unwrap())),
            by_id(&shuffled, bins_of(&best_fit_decreasing(&shuffled, cap).unwrap()))
        );
        // And the id-ordered FFD equals the naive one with ids.
        let ids: Vec<u32> = shuffled.iter().map(|x| x.0).collect();
        let sz: Vec<u32> = shuffled.iter().map(|x| x.1).collect();
        prop_assert_eq!(
            bins_of(&first_fit_decreasing(&shuffled, cap).unwrap()),
            naive_first_fit(&vecs(&sz), &[cap], &decreasing_order(&sz, Some(&ids)))
        );
    }

    #[test]
    fn streaming_equals_batch_when_the_buffer_holds_everything((cap, sizes) in instance(100, 60), extra in 0usize..5) {
        for (heuristic, batch) in [
            (Heuristic::FirstFitDecreasing, first_fit_decreasing(&sizes, cap).unwrap()),
            (Heuristic::BestFitDecreasing, best_fit_decreasing(&sizes, cap).unwrap()),
        ] {
            let mut packer = StreamingPacker::new(cap, sizes.len() + extra).unwrap().heuristic(heuristic);
            for &s in &sizes {
                packer.push(s).unwrap();
                prop_assert!(packer.pop().is_none());
            }
            let streamed: Vec<Vec<usize>> = packer
                .finish()
                .iter()
                .map(|b| b.arrivals().iter().map(|&a| a as usize).collect())
                .collect();
            prop_assert_eq!(streamed, bins_of(&batch));
        }
    }

    #[test]
    fn streaming_with_a_small_buffer_places_every_item_once((cap, sizes) in instance(100, 80), limit in 1usize..12) {
        let mut packer = StreamingPacker::new(cap, limit).unwrap();
        let mut bins = Vec::new();
        for &s in &sizes {
            packer.push(s).unwrap();
            prop_assert!(packer.buffered() <= limit);
            while let Some(bin) = packer.pop() {
                bins.push(bin);
            }
        }
        bins.extend(packer.finish());
        let mut seen = vec![0; sizes.len()];
        for bin in &bins {
            let load: u64 = bin.arrivals().iter().map(|&a| u64::from(sizes[a as usize])).sum();
            prop_assert!(load <= u64::from(cap));
            prop_assert_eq!(load, u64::from(bin.load()[0]));
            for (&a, &item) in bin.arrivals().iter().zip(bin.items()) {
                prop_assert_eq!(item, sizes[a as usize]);
                seen[a as usize] += 1;
            }
        }
        prop_assert!(seen.iter().all(|&c| c == 1));
    }
}

/// Large random instances: the invariants, and the tree growing past its
/// first size (vector items defeat the initial estimate).
#[test]
fn large_random_instances_hold_the_invariants() {
    let mut rng = TestRng::new(7);
    for &(n, cap) in &[(20_000usize, 16_384u32), (50_000, 1_000), (5_000, 3)] {
        let sizes: Vec<u32> = (0..n)
            .map(|_| 1 + rng.below(u64::from(cap)) as u32 / 2)
            .collect();
        let items = vecs(&sizes);
        let ffd = first_fit_decreasing(&sizes, cap).unwrap();
        let bfd = best_fit_decreasing(&sizes, cap).unwrap();
        for p in [
            &ffd,
            &bfd,
            &first_fit(&sizes, cap).unwrap(),
            &best_fit(&sizes, cap).unwrap(),
            &next_fit(&sizes, cap).unwrap(),
        ] {
            check_packing(&items, &[cap], p);
            assert!(p.len() as u64 >= p.lower_bounds().l2);
        }
        // One-dimensional first-fit never leaves two bins half empty.
        assert!(ffd.len() as u64 <= 2 * ffd.lower_bounds().l1 + 1);
    }
    let items: Vec<[u32; 2]> = (0..30_000)
        .map(|_| [1 + rng.below(9000) as u32, rng.below(13) as u32])
        .collect();
    let rows: Vec<Vec<u32>> = items.iter().map(|i| i.to_vec()).collect();
    for p in [
        first_fit_decreasing(&items, [16384, 48]).unwrap(),
        best_fit_decreasing(&items, [16384, 48]).unwrap(),
        first_fit(&items, [16384, 48]).unwrap(),
        best_fit(&items, [16384, 48]).unwrap(),
    ] {
        check_packing(&rows, &[16384, 48], &p);
    }
}

/// Best-fit-decreasing has a path of its own for plain integer sizes under a
/// small capacity (a histogram of the sizes, the result written in place);
/// items with ids take the general path (a sorted copy, then the bins).
/// With ids equal to the indices both orders are the same, so the packings
/// must be identical, bin for bin and item for item, at sizes that exercise
/// runs of equal sizes, zero sizes and many bins.
#[test]
fn bfd_histogram_path_equals_the_general_path() {
    let mut rng = TestRng::new(11);
    let cases: &[(usize, u32, u64)] = &[
        (100_000, 16_384, 16_384),
        (30_000, 4_096, 4_097),
        (20_000, 1_000, 60),
        (5_000, 7, 8),
        (3_001, 1, 2),
    ];
    for &(n, cap, spread) in cases {
        let sizes: Vec<u32> = (0..n)
            .map(|_| (rng.below(spread) as u32).min(cap))
            .collect();
        let with_ids: Vec<(u64, u32)> = sizes
            .iter()
            .enumerate()
            .map(|(i, &s)| (i as u64, s))
            .collect();
        let fast = best_fit_decreasing(&sizes, cap).unwrap();
        let general = best_fit_decreasing(&with_ids, cap).unwrap();
        assert_eq!(fast, general, "n = {n}, capacity {cap}");
        // Scaled far above the histogram's limit: the general index.
        let wide: Vec<u64> = sizes.iter().map(|&s| u64::from(s) << 20).collect();
        assert_eq!(
            bins_of(&best_fit_decreasing(&wide, u64::from(cap) << 20).unwrap()),
            bins_of(&fast),
            "n = {n}, capacity {cap} scaled"
        );
    }
}

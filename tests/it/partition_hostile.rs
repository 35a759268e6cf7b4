//! Regression cases of issue 10 for `microbatch::partition`: hostile
//! parameters return quickly with the right error, float caps hold on the
//! reported sums, bounds stay below results, messages say what to fix.

use microbatch::partition::{
    exact, karmarkar_karp, lower_bound, lpt, refine, Algorithm, Dims, Objective, Partition,
    Partitioner,
};
use microbatch::{not_nan, Error, Locator, Scalar};
use ordered_float::NotNan;
use proptest::prelude::*;

use crate::common::rng;

/// Every combination of options, for `k` parts.
fn every_option<S: microbatch::Size>(k: usize, cap: Option<S>) -> Vec<Partitioner<S>> {
    let mut all = Vec::new();
    for algorithm in [Algorithm::Lpt, Algorithm::KarmarkarKarp, Algorithm::Exact] {
        for objective in [Objective::MaxPart, Objective::Spread] {
            for dims in [Dims::Combined, Dims::PerDim] {
                for equal_count in [false, true] {
                    for refinement in [false, true] {
                        let mut p = Partitioner::new(k)
                            .algorithm(algorithm)
                            .objective(objective)
                            .dims(dims)
                            .equal_count(equal_count)
                            .refinement(refinement)
                            .allow_empty(true);
                        if let Some(c) = cap {
                            p = p.cap(c);
                        }
                        all.push(p);
                    }
                }
            }
        }
    }
    all
}

#[test]
fn parts_beyond_the_limit_are_refused_before_any_allocation() {
    let items = [5u32, 4, 3];
    for k in [usize::MAX, 1 << 40, (1 << 16) + 1] {
        for p in every_option(k, None)
            .into_iter()
            .chain(every_option(k, Some(10u32)))
        {
            let err = p.partition(&items).unwrap_err();
            assert!(
                matches!(err, Error::Invalid { at: Locator::Setting { name: "parts", .. }, value: Scalar::Int(value), .. } if value == k as u64),
                "{k}: {err:?}"
            );
        }
    }
    let err = Partitioner::new(usize::MAX)
        .allow_empty(true)
        .partition(&items)
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "the setting `parts` is 18446744073709551615; it must be at most the number of items, \
         or at most 65536 when there are fewer items (with empty parts allowed)"
    );
    // Without empty parts, more parts than items is the error it was.
    for k in [usize::MAX, 1 << 40] {
        let too_many = Error::TooManyParts { parts: k, items: 3 };
        assert_eq!(lpt(&items, k).unwrap_err(), too_many);
        assert_eq!(karmarkar_karp(&items, k).unwrap_err(), too_many);
        assert_eq!(exact(&items, k, 1000).unwrap_err(), too_many);
        // The bound allocates nothing by `k`: the largest item.
        assert_eq!(lower_bound(&items, k).unwrap(), 5);
    }
    // Refining a partition into more parts than allowed.
    let p = Partitioner::new(3).partition(&items).unwrap();
    assert_eq!(refine(&items, &p).unwrap().len(), 3);
}

#[test]
fn parts_at_the_limit_are_served_with_every_option() {
    let items = [5u32, 4, 3];
    let k = 1 << 16;
    for p in every_option(k, Some(5u32)) {
        let r = p.partition(&items).unwrap();
        assert_eq!(r.len(), k);
        assert_eq!(r.parts().map(<[usize]>::len).sum::<usize>(), 3);
        assert!(r.lower_bound() <= r.objective());
    }
}

/// Seeded lengths uniform in `1..=16384`.
fn lengths(n: usize, seed: u64) -> Vec<u32> {
    let mut rng = rng::TestRng::new(seed);
    (0..n).map(|_| 1 + rng.below(16384) as u32).collect()
}

#[test]
fn default_partitioner_at_1e5_items_and_1000_parts_returns() {
    let items = lengths(100_000, 1);
    let greedy = lpt(&items, 1000).unwrap();
    let p = Partitioner::new(1000).partition(&items).unwrap();
    assert!(p.objective() <= greedy.objective());
    assert!(p.lower_bound() <= p.objective());
    // Spread and equal counts, the costlier objectives, at the same size.
    let p = Partitioner::new(1000)
        .objective(Objective::Spread)
        .equal_count(true)
        .partition(&items)
        .unwrap();
    assert!(p.parts().all(|part| part.len() == 100));
}

#[test]
fn per_dimension_objective_with_equal_counts_returns() {
    let (a, b) = (lengths(5000, 2), lengths(5000, 3));
    let items: Vec<[u32; 2]> = a.iter().zip(&b).map(|(&x, &y)| [x, y]).collect();
    let p = Partitioner::new(250)
        .dims(Dims::PerDim)
        .equal_count(true)
        .partition(&items)
        .unwrap();
    assert!(p.parts().all(|part| part.len() == 20));
    assert!(p.lower_bound() <= p.objective());
}

#[test]
fn infeasible_caps_are_proven_by_a_bound_before_any_search() {
    let items = lengths(20_000, 4);
    let sum: u64 = items.iter().map(|&x| u64::from(x)).sum();
    // The sum over 100 parts exceeds the cap.
    let cap = (sum / 100) as u32 - 100;
    for algorithm in [Algorithm::Lpt, Algorithm::KarmarkarKarp, Algorithm::Exact] {
        let err = Partitioner::new(100)
            .algorithm(algorithm)
            .cap(cap)
            .partition(&items)
            .unwrap_err();
        assert!(
            matches!(
                err,
                Error::CapExceeded {
                    proven: true,
                    parts: 100,
                    parts_needed: Some(101),
                    ..
                }
            ),
            "{err:?}"
        );
    }
    // Equal counts: 200 items a part, so the largest item takes 199 more
    // along (the cap is above the sum over the parts and the largest item).
    let mut items = vec![1_000_000u32];
    items.extend(vec![1u32; 19_999]);
    for algorithm in [Algorithm::Lpt, Algorithm::KarmarkarKarp, Algorithm::Exact] {
        let err = Partitioner::new(100)
            .algorithm(algorithm)
            .equal_count(true)
            .cap(1_000_100)
            .partition(&items)
            .unwrap_err();
        assert!(
            matches!(err, Error::CapExceeded { proven: true, .. }),
            "{err:?}"
        );
    }
    assert!(Partitioner::new(100)
        .equal_count(true)
        .cap(1_000_199)
        .partition(&items)
        .is_ok());
    // Floats: a bound rounded down proves it too.
    let lengths = lengths(20_000, 4);
    let floats = not_nan(
        &lengths
            .iter()
            .map(|&x| f64::from(x) / 10.0)
            .collect::<Vec<_>>(),
    )
    .unwrap();
    let err = Partitioner::new(100)
        .cap(NotNan::new(f64::from(cap) / 10.0).unwrap())
        .partition(&floats)
        .unwrap_err();
    assert!(
        matches!(err, Error::CapExceeded { proven: true, .. }),
        "{err:?}"
    );
}

/// The fresh sum of a part in its listed order (heaviest first, as the
/// partition computes its sums).
fn fresh(sizes: &[NotNan<f64>], part: &[usize]) -> f64 {
    part.iter().fold(0.0, |acc, &i| acc + sizes[i].into_inner())
}

fn check_float_cap(sizes: &[NotNan<f64>], cap: f64, p: &Partition<f64>) {
    for (i, part) in p.parts().enumerate() {
        let s = fresh(sizes, part);
        assert_eq!(
            p.sum(i)[0].to_bits(),
            s.to_bits(),
            "reported sum of part {i}"
        );
        assert!(s <= cap, "part {i} sums to {s} above the cap {cap}");
    }
}

#[test]
fn float_caps_hold_on_the_reported_sums() {
    let mut rng = rng::TestRng::new(10);
    let mut served = 0;
    for _ in 0..3000 {
        let n = 3 + rng.below(8) as usize;
        let sizes: Vec<f64> = (0..n).map(|_| (1 + rng.below(12)) as f64 / 10.0).collect();
        let sizes = not_nan(&sizes).unwrap();
        let cap = (6 + rng.below(30)) as f64 / 10.0;
        let k = 1 + rng.below(4) as usize;
        for algorithm in [Algorithm::Lpt, Algorithm::KarmarkarKarp, Algorithm::Exact] {
            let p = Partitioner::new(k)
                .algorithm(algorithm)
                .cap(NotNan::new(cap).unwrap())
                .partition(&sizes);
            match p {
                Ok(p) => {
                    check_float_cap(&sizes, cap, &p);
                    served += 1;
                }
                Err(
                    Error::CapExceeded { .. } | Error::Oversize { .. } | Error::TooManyParts { .. },
                ) => {}
                Err(e) => panic!("{e}"),
            }
        }
    }
    assert!(served > 1000, "{served}");
    // The example of the issue: tenths into 3 parts within 2.4.
    let sizes = not_nan(&[0.7, 0.7, 0.7, 0.6, 0.6, 0.5, 0.5, 0.4, 0.4, 0.3, 0.3, 0.2]).unwrap();
    let cap = 2.4;
    if let Ok(p) = Partitioner::new(3)
        .cap(NotNan::new(cap).unwrap())
        .partition(&sizes)
    {
        check_float_cap(&sizes, cap, &p);
    }
}

#[test]
fn bounds_of_huge_and_tiny_floats_are_bounds() {
    let max = f64::MAX;
    // A total beyond f64::MAX: no part sum could be told apart, refused.
    let sizes = not_nan(&[max, max, max / 2.0]).unwrap();
    assert!(matches!(
        lower_bound(&sizes, 2),
        Err(Error::SizeOverflow { dim: Some(0) })
    ));
    assert!(matches!(
        lpt(&sizes, 2),
        Err(Error::SizeOverflow { dim: Some(0) })
    ));
    // Just within: the bound is the largest item, below the objective.
    let sizes = not_nan(&[max / 2.0, max / 4.0, max / 4.0]).unwrap();
    let b = lower_bound(&sizes, 2).unwrap();
    assert_eq!(b, max / 2.0);
    let p = lpt(&sizes, 2).unwrap();
    assert!(p.lower_bound() <= p.objective() && p.objective().is_finite());
    // A sum that rounds up: the bound stays below every part.
    let sizes = not_nan(&[1.0, 1e-17, 1e-17, 1e-17]).unwrap();
    let p = Partitioner::new(1).partition(&sizes).unwrap();
    assert!(p.lower_bound() <= p.objective());
    let sizes = not_nan(&[0.1, 0.2, 0.3]).unwrap();
    for k in 1..=3 {
        let p = lpt(&sizes, k).unwrap();
        assert!(p.lower_bound() <= p.objective(), "{k}: {p:?}");
        assert!(p.lower_bound() > 0.0);
    }
}

/// Adversarial float sizes: tiny, huge and mixed magnitudes.
fn adversarial() -> impl Strategy<Value = Vec<f64>> {
    let value = prop_oneof![
        Just(0.0),
        Just(5e-324),
        Just(1e-300),
        Just(1e-17),
        (1u32..100).prop_map(|x| f64::from(x) / 10.0),
        (1u32..1000).prop_map(|x| f64::from(x) / 100.0),
        Just(1.0),
        Just(1e15 + 1.0),
        Just(1e300),
        Just(f64::MAX / 3.0),
        Just(f64::MAX),
    ];
    // Many equal tenths: their float sum rounds up (30 x 0.1 is
    // 3.0000000000000013) while each part's rounds down.
    let repeated = ((1u32..10), 1usize..40, 0usize..3).prop_map(|(x, n, tiny)| {
        let mut v = vec![f64::from(x) / 10.0; n];
        v.extend(vec![1e-17; tiny]);
        v
    });
    prop_oneof![prop::collection::vec(value, 1..12), repeated]
}

fn partitioners(k: usize) -> Vec<Partitioner<NotNan<f64>>> {
    let mut all = Vec::new();
    for algorithm in [Algorithm::Lpt, Algorithm::KarmarkarKarp, Algorithm::Exact] {
        for objective in [Objective::MaxPart, Objective::Spread] {
            for equal_count in [false, true] {
                all.push(
                    Partitioner::new(k)
                        .algorithm(algorithm)
                        .objective(objective)
                        .equal_count(equal_count)
                        .node_budget(2000),
                );
            }
        }
    }
    all
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Every reported bound is at most the objective of the result, finite,
    /// and not below the largest item.
    #[test]
    fn bounds_never_exceed_results(sizes in adversarial(), k in 1usize..5) {
        let sizes = not_nan(&sizes).unwrap();
        let largest = sizes.iter().map(|x| x.into_inner()).fold(0.0, f64::max);
        let total: f64 = sizes.iter().map(|x| x.into_inner()).sum();
        if k <= sizes.len() && !total.is_finite() {
            // Sums beyond f64::MAX are refused everywhere.
            prop_assert_eq!(lower_bound(&sizes, k), Err(Error::SizeOverflow { dim: Some(0) }));
            let refused = matches!(lpt(&sizes, k), Err(Error::SizeOverflow { .. }));
            prop_assert!(refused);
        } else if k <= sizes.len() {
            let b = lower_bound(&sizes, k).unwrap();
            prop_assert!(b.is_finite() && b >= largest, "{b}");
            for p in partitioners(k) {
                let r = p.partition(&sizes).unwrap();
                prop_assert!(r.lower_bound() <= r.objective(), "{:?}", r);
                prop_assert!(r.lower_bound().is_finite());
            }
            let r = lpt(&sizes, k).unwrap();
            prop_assert!(b <= r.objective(), "{b} above {:?}", r);
        }
    }

    /// Float caps in tenths and hundredths: every returned part's fresh sum
    /// is within the cap and is the reported sum.
    #[test]
    fn float_caps_hold(
        sizes in prop::collection::vec(1u32..30, 3..12),
        hundredths in any::<bool>(),
        cap in 6u32..60,
        k in 1usize..5,
        equal_count in any::<bool>(),
    ) {
        // Hundredths: ten times the values, in hundredths.
        let (mul, scale) = if hundredths { (10.0, 100.0) } else { (1.0, 10.0) };
        let sizes: Vec<f64> = sizes.iter().map(|&x| f64::from(x) * mul / scale).collect();
        let sizes = not_nan(&sizes).unwrap();
        let cap = f64::from(cap) * mul / scale;
        for algorithm in [Algorithm::Lpt, Algorithm::KarmarkarKarp, Algorithm::Exact] {
            let r = Partitioner::new(k)
                .algorithm(algorithm)
                .equal_count(equal_count)
                .node_budget(20_000)
                .cap(NotNan::new(cap).unwrap())
                .partition(&sizes);
            if let Ok(p) = r {
                for (i, part) in p.parts().enumerate() {
                    let s = fresh(&sizes, part);
                    prop_assert_eq!(p.sum(i)[0].to_bits(), s.to_bits());
                    prop_assert!(s <= cap, "part {} sums to {} above {}", i, s, cap);
                }
            }
        }
    }
}

#[test]
fn messages_say_what_to_fix() {
    // No dimension, with a cap or without one.
    let empty: Vec<Vec<u32>> = vec![vec![]];
    let err = Partitioner::new(1).partition(&empty).unwrap_err();
    assert_eq!(err, Error::NoDimensions);
    assert_eq!(
        err.to_string(),
        "an item or the capacity (or cap) has no dimension; every item and capacity needs at \
         least one size"
    );
    assert_eq!(
        Partitioner::<u32>::new(1)
            .cap_per_dim(&[])
            .partition(&[[1u32]])
            .unwrap_err(),
        Error::NoDimensions
    );
    assert_eq!(
        lpt(&[1u32], 0).unwrap_err().to_string(),
        "a partition into 0 parts was asked for; ask for at least 1 part"
    );
    // A best part above u64::MAX prints in full.
    let err = Partitioner::new(1)
        .cap(u64::MAX)
        .partition(&[u64::MAX; 3])
        .unwrap_err();
    let wide = 3 * u128::from(u64::MAX);
    assert!(
        matches!(err, Error::CapExceeded { best: Scalar::Wide(b), proven: true, .. } if b == wide)
    );
    assert_eq!(
        err.to_string(),
        "no partition into 1 parts keeps every part within the cap 18446744073709551615 in \
         dimension 0 (the best found has a part of 55340232221128654845); 3 parts would work"
    );
    // Not a partition: out of range, missing, repeated.
    let items = [3u32, 2, 1];
    let two = lpt(&[3u32, 2], 2).unwrap();
    let out_of_range = refine(&items[..1], &lpt(&[3u32, 2], 1).unwrap()).unwrap_err();
    assert_eq!(
        out_of_range.to_string(),
        "not a partition of 1 item(s): it lists index 1, out of range (the items are numbered \
         0 to 0); refine a partition of these items"
    );
    let missing = refine(&items, &two).unwrap_err();
    assert_eq!(
        missing,
        Error::NotAPartition {
            items: 3,
            index: 2,
            times: 0
        }
    );
    assert_eq!(
        missing.to_string(),
        "not a partition of 3 item(s): item 2 is in no part; every item must be in exactly one part"
    );
    let repeated = Error::NotAPartition {
        items: 3,
        index: 1,
        times: 2,
    };
    assert_eq!(
        repeated.to_string(),
        "not a partition of 3 item(s): item 1 is listed 2 times; every item must be in exactly \
         one part"
    );
    assert_eq!(
        Error::NotAPartition {
            items: 0,
            index: 4,
            times: 1
        }
        .to_string(),
        "not a partition of 0 item(s): it lists index 4, but there are no items"
    );
}

#[cfg(feature = "serde")]
#[test]
fn serde_refuses_sums_that_contradict_the_parts() {
    let sizes = not_nan(&[0.5, 0.25, 0.75, 1.5, 1.0]).unwrap();
    let p = lpt(&sizes, 2).unwrap();
    let json = serde_json::to_string(&p).unwrap();
    let back: Partition<f64> = serde_json::from_str(&json).unwrap();
    assert_eq!(back, p);
    let read = |doc: &str| serde_json::from_str::<Partition<f64>>(doc);
    // One sum too few.
    let sums = "\"sums\":[2.0,2.0]";
    assert!(json.contains(sums), "{json}");
    assert!(read(&json.replace(sums, "\"sums\":[2.0]")).is_err());
    // A negative sum.
    let err = read(&json.replace(sums, "\"sums\":[-1.0,2.0]")).unwrap_err();
    assert!(err.to_string().contains("negative"), "{err}");
    // An objective above every part.
    let objective = "\"objective\":2.0";
    assert!(json.contains(objective), "{json}");
    let err = read(&json.replace(objective, "\"objective\":100.0")).unwrap_err();
    assert!(err.to_string().contains("objective"), "{err}");
    // A lower bound above the objective.
    let bound = format!(
        "\"lower_bound\":{}",
        serde_json::to_string(&p.lower_bound()).unwrap()
    );
    assert!(json.contains(&bound), "{json}");
    let err = read(&json.replace(&bound, "\"lower_bound\":2.5")).unwrap_err();
    assert!(err.to_string().contains("lower bound"), "{err}");
    // An empty part with a sum.
    let q = Partitioner::new(3)
        .allow_empty(true)
        .partition(&[2u32, 1][..1])
        .unwrap();
    let json = serde_json::to_string(&q).unwrap();
    assert!(json.contains("\"sums\":[2,0,0]"), "{json}");
    let bad = json.replace("\"sums\":[2,0,0]", "\"sums\":[2,0,1]");
    assert!(serde_json::from_str::<Partition<u128>>(&bad).is_err());
}

/// Fuzz finding: a cap of -0.0 on zero-size float items was refused as
/// exceeded by a part of 0.0 (sums compared under `total_cmp`, where
/// -0.0 < 0.0). Zero is zero, whatever its sign.
#[test]
fn a_negative_zero_cap_holds_zero_parts() {
    let items = not_nan(&[0.0, -0.0, 0.0]).unwrap();
    let p = Partitioner::new(1)
        .cap(NotNan::new(-0.0).unwrap())
        .partition(&items)
        .unwrap();
    assert_eq!(p.part(0).len(), 3);
    assert_eq!(p.objective(), 0.0);
}

/// Fuzz finding: float sizes whose sum overflows gave infinite sums and a
/// NaN `ratio()`; they are refused by dimension.
#[test]
fn float_sums_beyond_f64_max_are_refused() {
    let items = not_nan(&[f64::MAX, f64::MAX]).unwrap();
    let err = lpt(&items, 1).unwrap_err();
    assert_eq!(err, Error::SizeOverflow { dim: Some(0) });
    assert!(err.to_string().contains("beyond f64::MAX"), "{err}");
    // Over two parts each sum is finite, but the total is not: still
    // refused, since bounds and the spread need the total.
    assert!(matches!(lpt(&items, 2), Err(Error::SizeOverflow { .. })));
    // Each dimension finite, their sum (the combined weight) not.
    let wide = [[
        NotNan::new(f64::MAX).unwrap(),
        NotNan::new(f64::MAX).unwrap(),
    ]];
    assert_eq!(
        lpt(&wide, 1).unwrap_err(),
        Error::SizeOverflow { dim: None }
    );
    // Large but finite sums plan, with a finite ratio.
    let big = not_nan(&[f64::MAX / 4.0, f64::MAX / 4.0, f64::MAX / 4.0]).unwrap();
    let p = lpt(&big, 2).unwrap();
    assert!(p.ratio().is_finite() && p.ratio() >= 1.0, "{}", p.ratio());
}

/// Items claiming more than 65536 dimensions are refused before any
/// allocation by that count.
#[test]
fn too_many_item_dimensions_are_refused() {
    let items = vec![vec![1u32; 65_537]];
    let err = lpt(&items, 1).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Invalid {
                at: Locator::Setting {
                    name: "item dimensions",
                    ..
                },
                value: Scalar::Int(65_537),
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(lpt(&[vec![1u32; 65_536]], 1).unwrap().len(), 1);
}

/// Fuzz finding: refining, under equal counts, a start whose counts are not
/// equal returned a partition that broke the constraint (with a bound above
/// its objective). Refinement keeps counts, so such a start is an error.
#[test]
fn refining_unequal_counts_under_equal_counts_is_refused() {
    let items = [[0.0, 0.0], [5.3, 0.5], [5.3, 0.5], [5.3, 95.0]]
        .map(|r| r.map(|x| NotNan::new(x).unwrap()));
    let start = lpt(&items, 2).unwrap();
    let counts: Vec<usize> = start.parts().map(<[usize]>::len).collect();
    assert!(counts.contains(&1) && counts.contains(&3), "{counts:?}");
    let err = Partitioner::new(2)
        .equal_count(true)
        .dims(Dims::PerDim)
        .refine(&items, &start)
        .unwrap_err();
    assert!(
        matches!(err, Error::UnequalCounts { fewest: 2, .. }),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .contains("equal counts allow 2 or 3 per part"),
        "{err}"
    );
    // An equal-count start refines, and keeps equal counts.
    let equal = Partitioner::new(2)
        .equal_count(true)
        .partition(&items)
        .unwrap();
    let r = Partitioner::new(2)
        .equal_count(true)
        .dims(Dims::PerDim)
        .refine(&items, &equal)
        .unwrap();
    assert!(r.parts().all(|p| p.len() == 2));
    assert!(r.lower_bound() <= r.objective());
}

/// Fuzz finding: refining an LPT result on 2-D floats raised the objective
/// by an ulp (15.6 to 15.600000000000001). Now the result is never worse
/// than the input evaluated the same way (`max_rounds(0)`: no step).
#[test]
fn refinement_is_never_worse_by_rounding() {
    let items = [[0.0, 5.3], [0.0, 3.6], [0.5, 0.5], [50.0, 0.0]]
        .map(|r| r.map(|x| NotNan::new(x).unwrap()));
    let mut rng = rng::TestRng::new(10);
    for case in 0..2000 {
        let n = 2 + rng.below(10) as usize;
        let k = 2 + rng.below(3) as usize;
        let items: Vec<[NotNan<f64>; 2]> = if case == 0 {
            items.to_vec()
        } else {
            (0..n)
                .map(|_| [0, 1].map(|_| NotNan::new(rng.below(1000) as f64 / 10.0).unwrap()))
                .collect()
        };
        if k > items.len() {
            continue;
        }
        let start = lpt(&items, k).unwrap();
        let same_way = Partitioner::new(k)
            .max_rounds(0)
            .refine(&items, &start)
            .unwrap();
        let refined = refine(&items, &start).unwrap();
        assert!(
            refined.objective() <= same_way.objective(),
            "case {case}: {} > {}",
            refined.objective(),
            same_way.objective()
        );
    }
}

/// Issue 20: a partition document's declared dimension count drove a loop
/// even without parts (this 100-byte document never returned). Now nothing
/// is walked but the sums given: it reads at once, as a partition of no
/// parts.
#[cfg(feature = "serde")]
#[test]
fn a_declared_dimension_count_alone_drives_nothing() {
    let doc = r#"{"parts":[],"dims":18446744073709551615,"sums":[],"objective":0,"lower_bound":0,"proven_optimal":false}"#;
    let p: Partition<u128> = serde_json::from_str(doc).unwrap();
    assert_eq!((p.len(), p.dims(), p.objective()), (0, usize::MAX, 0));
    // With parts, the sums must match the count (one per part and
    // dimension), which bounds the walk by the document's length.
    let doc = r#"{"parts":[[0]],"dims":18446744073709551615,"sums":[1],"objective":1,"lower_bound":0,"proven_optimal":false}"#;
    let err = serde_json::from_str::<Partition<u128>>(doc)
        .unwrap_err()
        .to_string();
    assert!(err.contains("one sum per part and dimension"), "{err}");
    // A positive objective above the (empty) sums is still refused.
    let doc = r#"{"parts":[],"dims":18446744073709551615,"sums":[],"objective":3,"lower_bound":0,"proven_optimal":false}"#;
    let err = serde_json::from_str::<Partition<u128>>(doc)
        .unwrap_err()
        .to_string();
    assert!(err.contains("above what the part sums allow"), "{err}");
}

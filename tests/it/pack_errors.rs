//! Bad input gets a typed error that names the offending item; nothing
//! panics, nothing is dropped; zero-size items and empty input are legal.

use microbatch::pack::{
    best_fit, best_fit_decreasing, first_fit, first_fit_decreasing, lower_bounds, next_fit,
    Packing, StreamingPacker,
};
use microbatch::{not_nan, Error, InvalidReason, Locator, NotNan, Oversize, Scalar};

type Algo<I, C> = fn(&[I], C) -> Result<Packing<u32>, Error>;

/// `(index, dim, size, capacity)` of every listed item, which must have no
/// id nor dimension name (the packers name items by index).
fn listed(err: &Error) -> Vec<(usize, usize, Scalar, Scalar)> {
    let Error::Oversize { items } = err else {
        panic!("{err:?}")
    };
    items
        .iter()
        .map(|o: &Oversize| {
            assert_eq!((o.id, o.name), (None, None), "{o:?}");
            (o.index, o.dim, o.size, o.capacity)
        })
        .collect()
}

fn all_u32() -> [(&'static str, Algo<u32, u32>); 5] {
    [
        ("ffd", first_fit_decreasing),
        ("bfd", best_fit_decreasing),
        ("ff", first_fit),
        ("bf", best_fit),
        ("nf", next_fit),
    ]
}

#[test]
fn every_oversize_item_is_named_with_its_size() {
    for (name, f) in all_u32() {
        let err = f(&[5, 11, 3, 12, 10], 10).unwrap_err();
        let expected = [
            (1, 0, Scalar::Int(11), Scalar::Int(10)),
            (3, 0, Scalar::Int(12), Scalar::Int(10)),
        ];
        assert_eq!(listed(&err), expected, "{name}");
        assert_eq!(
            err.to_string(),
            "2 item(s) larger than the capacity: item 1 has size 11 > 10 in dimension 0; \
             item 3 has size 12 > 10 in dimension 0;"
        );
    }
}

#[test]
fn long_oversize_lists_are_shortened_in_the_message_but_complete_in_the_error() {
    let sizes = vec![100u32; 20];
    let err = first_fit_decreasing(&sizes, 10).unwrap_err();
    let Error::Oversize { items } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(items.len(), 20);
    assert!(err.to_string().ends_with("and 12 more"), "{err}");
}

#[test]
fn vector_items_name_the_dimension() {
    let items = [[100u32, 5], [100, 60], [20_000, 60]];
    let err = best_fit_decreasing(&items, [16384, 48]).unwrap_err();
    assert_eq!(
        listed(&err),
        [
            (1, 1, Scalar::Int(60), Scalar::Int(48)),
            (2, 0, Scalar::Int(20_000), Scalar::Int(16384)),
            (2, 1, Scalar::Int(60), Scalar::Int(48)),
        ]
    );
}

#[test]
fn bad_capacities_are_refused() {
    for (name, f) in all_u32() {
        assert_eq!(
            f(&[1, 2], 0).unwrap_err(),
            Error::ZeroCapacity { dim: 0 },
            "{name}"
        );
        assert_eq!(
            f(&[], 0).unwrap_err(),
            Error::ZeroCapacity { dim: 0 },
            "{name}"
        );
    }
    assert_eq!(
        first_fit_decreasing(&[[1u32, 1]], [5, 0]).unwrap_err(),
        Error::ZeroCapacity { dim: 1 }
    );
    let none: Vec<u32> = Vec::new();
    assert_eq!(
        first_fit(std::slice::from_ref(&none), none.clone()).unwrap_err(),
        Error::NoDimensions
    );
    let neg = NotNan::new(-1.0).unwrap();
    assert_eq!(
        next_fit(&[NotNan::new(0.5).unwrap()], neg).unwrap_err(),
        Error::Invalid {
            at: Locator::Capacity { dim: 0 },
            value: Scalar::Float(-1.0),
            reason: InvalidReason::Negative
        }
    );
    let inf = NotNan::new(f64::INFINITY).unwrap();
    assert!(matches!(
        best_fit(&[NotNan::new(0.5).unwrap()], inf).unwrap_err(),
        Error::Invalid {
            at: Locator::Capacity { .. },
            reason: InvalidReason::Infinite,
            ..
        }
    ));
}

#[test]
fn items_of_the_wrong_dimension_are_named() {
    let items = vec![vec![1u32, 2], vec![1, 2, 3], vec![1]];
    let err = first_fit_decreasing(&items, vec![10, 10]).unwrap_err();
    assert_eq!(
        err,
        Error::DimensionMismatch {
            index: 1,
            expected: 2,
            found: 3
        }
    );
    assert_eq!(
        err.to_string(),
        "item 1 has 3 dimension(s) but the capacity has 2; \
         give every item one size per dimension of the capacity"
    );
}

#[test]
fn nan_negative_and_infinite_float_sizes_are_named() {
    // A NaN payload never compares equal, so match the other fields.
    let err = not_nan(&[0.5, 0.25, f64::NAN]).unwrap_err();
    assert!(
        matches!(err, Error::Invalid { at: Locator::Size { index: 2, dim: 0 }, value: Scalar::Float(v), reason: InvalidReason::NaN } if v.is_nan()),
        "{err:?}"
    );
    let sizes = not_nan(&[0.5, -0.25, 0.1]).unwrap();
    assert_eq!(
        first_fit_decreasing(&sizes, NotNan::new(1.0).unwrap()).unwrap_err(),
        Error::Invalid {
            at: Locator::Size { index: 1, dim: 0 },
            value: Scalar::Float(-0.25),
            reason: InvalidReason::Negative
        }
    );
    let sizes = not_nan(&[0.5, 0.25, f64::INFINITY]).unwrap();
    let err = best_fit_decreasing(&sizes, NotNan::new(1.0).unwrap()).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Invalid {
                at: Locator::Size { index: 2, .. },
                reason: InvalidReason::Infinite,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "item 2 has size inf in dimension 0: infinite values are not sizes; \
         sizes must be finite and non-negative"
    );
}

#[test]
fn zero_size_items_and_empty_input_are_legal() {
    for (name, f) in all_u32() {
        let p = f(&[], 10).unwrap();
        assert!(p.is_empty(), "{name}");
        assert_eq!(p.lower_bounds().l2, 0);
        assert_eq!(p.efficiency(0), 1.0);
        let p = f(&[0, 0, 0], 10).unwrap();
        assert_eq!(p.len(), 1, "{name}: zero-size items share one bin");
        assert_eq!(p.bin(0).items().len(), 3);
        let p = f(&[0, 10, 0, 10], 10).unwrap();
        assert_eq!(p.len(), 2, "{name}");
        assert_eq!(p.item_count(), 4, "{name}");
    }
}

#[test]
fn sums_do_not_overflow_at_the_edge_of_the_type() {
    let sizes = [u64::MAX / 2, u64::MAX / 2, 1, u64::MAX];
    let p = first_fit_decreasing(&sizes, u64::MAX).unwrap();
    assert_eq!(p.len(), 2);
    let p = best_fit_decreasing(&sizes, u64::MAX).unwrap();
    assert_eq!(p.len(), 2);
    let lb = lower_bounds(&sizes, u64::MAX).unwrap();
    assert_eq!(lb.l1, 2);
    let bytes = [255u8; 1000];
    assert_eq!(first_fit(&bytes, 255u8).unwrap().len(), 1000);
    assert_eq!(lower_bounds(&bytes, 255u8).unwrap().l1, 1000);
}

#[test]
fn the_streaming_packer_hands_refused_items_back() {
    let mut packer = StreamingPacker::new([100u32, 4], 8).unwrap();
    packer.push([50, 1]).unwrap();
    let rejected = packer.push([50, 5]).unwrap_err();
    assert_eq!(rejected.item, [50, 5]);
    assert_eq!(
        listed(&rejected.error),
        [(1, 1, Scalar::Int(5), Scalar::Int(4))]
    );
    assert_eq!(packer.buffered(), 1);
    packer.push([10, 1]).unwrap();
    let bins = packer.finish();
    assert_eq!(bins.len(), 1);
    assert_eq!(bins[0].arrivals(), &[0, 1]);
    assert!(StreamingPacker::<u32>::new(0u32, 4).is_err());
    let bad = StreamingPacker::<Vec<u32>>::new(vec![10u32, 10], 4)
        .unwrap()
        .push(vec![1])
        .unwrap_err();
    assert_eq!(
        bad.error,
        Error::DimensionMismatch {
            index: 0,
            expected: 2,
            found: 1
        }
    );
}

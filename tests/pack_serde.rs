//! With the `serde` feature, packing results round-trip through JSON.
#![cfg(feature = "serde")]

use microbatch::pack::{first_fit_decreasing, LowerBounds, Packing};
use ordered_float::NotNan;

#[test]
fn packings_round_trip_through_json() {
    let p = first_fit_decreasing(&[[7u32, 1], [5, 2], [4, 0], [3, 3]], [10, 4]).unwrap();
    let json = serde_json::to_string(&p).unwrap();
    let back: Packing<u32> = serde_json::from_str(&json).unwrap();
    assert_eq!(back, p);
    assert_eq!(back.bin(1).items(), p.bin(1).items());

    let sizes = microbatch::not_nan(&[0.5, 0.25, 0.75]).unwrap();
    let p = first_fit_decreasing(&sizes, NotNan::new(1.0).unwrap()).unwrap();
    let back: Packing<NotNan<f64>> =
        serde_json::from_str(&serde_json::to_string(&p).unwrap()).unwrap();
    assert_eq!(back, p);

    let lb: LowerBounds = serde_json::from_str(r#"{"l1": 2, "l2": 3}"#).unwrap();
    assert_eq!((lb.l1, lb.l2), (2, 3));
}

#[test]
fn malformed_packings_are_refused_not_trusted() {
    let bad = [
        r#"{"capacity":[],"offsets":[0],"items":[],"loads":[],"bounds":{"l1":0,"l2":0}}"#,
        r#"{"capacity":[10],"offsets":[0,3],"items":[0],"loads":[5],"bounds":{"l1":1,"l2":1}}"#,
        r#"{"capacity":[10],"offsets":[0,1],"items":[0],"loads":[],"bounds":{"l1":1,"l2":1}}"#,
        r#"{"capacity":[10],"offsets":[1,0,1],"items":[0],"loads":[5,5],"bounds":{"l1":1,"l2":1}}"#,
    ];
    for json in bad {
        assert!(
            serde_json::from_str::<Packing<u32>>(json).is_err(),
            "{json}"
        );
    }
    let good =
        r#"{"capacity":[10],"offsets":[0,1],"items":[0],"loads":[5],"bounds":{"l1":1,"l2":1}}"#;
    let p: Packing<u32> = serde_json::from_str(good).unwrap();
    assert_eq!(p.bin(0).load(), &[5]);
}

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

/// The error when a document is read as a `Packing<u32>`.
fn refusal(json: &str) -> String {
    match serde_json::from_str::<Packing<u32>>(json) {
        Ok(p) => panic!("accepted {json}: {p:?}"),
        Err(e) => e.to_string(),
    }
}

/// Each tampering of a valid document is refused, with an error that says
/// what is wrong (which bin, which item).
#[test]
fn tampered_packings_are_refused_with_the_reason() {
    let p = first_fit_decreasing(&[6u32, 5, 4, 3], 10).unwrap();
    let json = serde_json::to_string(&p).unwrap();
    // The format is pinned: flat offsets and items, loads bin by bin.
    assert_eq!(
        json,
        r#"{"capacity":[10],"offsets":[0,2,4],"items":[0,2,1,3],"loads":[10,8],"bounds":{"l1":2,"l2":2}}"#
    );
    let cases = [
        // An item twice (and so another in no bin).
        (
            json.replace(r#""items":[0,2,1,3]"#, r#""items":[0,2,1,2]"#),
            "item 2 is listed in bin 0 and again in bin 1",
        ),
        (
            json.replace(r#""items":[0,2,1,3]"#, r#""items":[0,0,1,3]"#),
            "bin 0 lists item 0 twice",
        ),
        // An item missing: the indices then run past the number of items.
        (
            json.replace(r#""offsets":[0,2,4],"items":[0,2,1,3]"#, r#""offsets":[0,2,3],"items":[0,2,3]"#),
            "bin 1 lists item 3 (at position 0), but there are only 3 items, and item 1 is in no bin",
        ),
        // Offsets out of order, not from 0, not to the end.
        (
            json.replace(r#""offsets":[0,2,4]"#, r#""offsets":[0,3,2,4]"#),
            "the offsets of bin 1 decrease: it would start at 3 and end at 2",
        ),
        (
            json.replace(r#""offsets":[0,2,4]"#, r#""offsets":[1,2,4]"#),
            "the offsets must start at 0, not 1",
        ),
        (
            json.replace(r#""offsets":[0,2,4]"#, r#""offsets":[]"#),
            "the offsets are empty: they must start at 0",
        ),
        (
            json.replace(r#""offsets":[0,2,4]"#, r#""offsets":[0,2,5]"#),
            "the last offset is 5 but there are 4 items: they must agree",
        ),
        // Loads that contradict the bins.
        (
            json.replace(r#""loads":[10,8]"#, r#""loads":[10]"#),
            "there must be one load per bin and dimension, 2 x 1 = 2, not 1",
        ),
        (
            json.replace(r#""loads":[10,8]"#, r#""loads":[11,8]"#),
            "bin 0 has a load of 11 in dimension 0, above the capacity 10",
        ),
        (
            json.replace(r#""offsets":[0,2,4]"#, r#""offsets":[0,4,4]"#),
            "bin 1 has no items but a load of 8 in dimension 0",
        ),
        (
            json.replace(r#""offsets":[0,2,4]"#, r#""offsets":[0,4,4]"#)
                .replace(r#""loads":[10,8]"#, r#""loads":[10,0]"#),
            "bin 1 is empty: a packing opens a bin only for an item",
        ),
        // Bounds above the bins used, or L1 above L2.
        (
            json.replace(r#""bounds":{"l1":2,"l2":2}"#, r#""bounds":{"l1":2,"l2":3}"#),
            "the lower bounds must satisfy l1 <= l2 <= bins, not l1 = 2, l2 = 3 with 2 bins",
        ),
        (
            json.replace(r#""bounds":{"l1":2,"l2":2}"#, r#""bounds":{"l1":2,"l2":1}"#),
            "the lower bounds must satisfy l1 <= l2 <= bins, not l1 = 2, l2 = 1 with 2 bins",
        ),
        // No dimension, or a zero capacity.
        (
            json.replace(r#""capacity":[10]"#, r#""capacity":[]"#),
            "there must be at least one dimension, not 0",
        ),
        (
            json.replace(r#""capacity":[10]"#, r#""capacity":[0]"#),
            "the capacity must be finite and positive in every dimension, not 0 in dimension 0",
        ),
    ];
    for (bad, reason) in cases {
        assert_ne!(bad, json, "the tampering did not apply: {reason}");
        let err = refusal(&bad);
        assert!(
            err.contains(reason),
            "{bad}\n  said: {err}\n  want: {reason}"
        );
    }
}

/// Issue 10: float documents get the same checks, and the checks the
/// integer loads allow (the volume behind L1).
#[test]
fn tampered_float_packings_and_bounds_above_the_loads_are_refused() {
    fn refusal_f(json: &str) -> String {
        match serde_json::from_str::<Packing<NotNan<f64>>>(json) {
            Ok(p) => panic!("accepted {json}: {p:?}"),
            Err(e) => e.to_string(),
        }
    }
    let sizes = microbatch::not_nan(&[0.5, 0.25, 0.25]).unwrap();
    let p = first_fit_decreasing(&sizes, NotNan::new(1.0).unwrap()).unwrap();
    let json = serde_json::to_string(&p).unwrap();
    assert_eq!(
        json,
        r#"{"capacity":[1.0],"offsets":[0,3],"items":[0,1,2],"loads":[1.0],"bounds":{"l1":1,"l2":1}}"#
    );
    let cases = [
        (
            json.replace(r#""loads":[1.0]"#, r#""loads":[1.0000000000000002]"#),
            "bin 0 has a load of 1.0000000000000002 in dimension 0, above the capacity 1",
        ),
        (
            json.replace(r#""loads":[1.0]"#, r#""loads":[-0.5]"#),
            "bin 0 has a load of -0.5 in dimension 0: loads must be finite and non-negative",
        ),
        (
            json.replace(r#""capacity":[1.0]"#, r#""capacity":[-1.0]"#),
            "the capacity must be finite and positive in every dimension, not -1 in dimension 0",
        ),
        (
            json.replace(r#""items":[0,1,2]"#, r#""items":[0,1,1]"#),
            "bin 0 lists item 1 twice",
        ),
        (
            json.replace(r#""bounds":{"l1":1,"l2":1}"#, r#""bounds":{"l1":1,"l2":2}"#),
            "the lower bounds must satisfy l1 <= l2 <= bins, not l1 = 1, l2 = 2 with 1 bins",
        ),
    ];
    for (bad, reason) in cases {
        assert_ne!(bad, json, "the tampering did not apply: {reason}");
        let err = refusal_f(&bad);
        assert!(
            err.contains(reason),
            "{bad}\n  said: {err}\n  want: {reason}"
        );
    }
    // Integer loads fix the volume: an L1 above it is refused.
    let ints = first_fit_decreasing(&[6u32, 5, 4, 3], 10).unwrap();
    let json = serde_json::to_string(&ints).unwrap();
    let bad = json
        .replace(
            r#""offsets":[0,2,4],"items":[0,2,1,3]"#,
            r#""offsets":[0,1,2,3,4],"items":[0,2,1,3]"#,
        )
        .replace(r#""loads":[10,8]"#, r#""loads":[6,4,5,3]"#)
        .replace(r#""bounds":{"l1":2,"l2":2}"#, r#""bounds":{"l1":3,"l2":3}"#);
    assert!(
        refusal(&bad).contains(
            "the lower bound l1 = 3 is above the volume of the loads, which fills 2 bin(s)"
        ),
        "{}",
        refusal(&bad)
    );
}

/// A streamed bin carries its items: its load must be their sum, in the
/// listed order, with one arrival number each.
#[test]
fn tampered_streamed_bins_are_refused() {
    use microbatch::pack::{StreamedBin, StreamingPacker};
    let mut packer = StreamingPacker::<NotNan<f64>>::new(NotNan::new(2.4).unwrap(), 8).unwrap();
    for x in microbatch::not_nan(&[0.7, 0.2, 0.1, 1.4]).unwrap() {
        packer.push(x).unwrap();
    }
    let bins = packer.finish();
    let json = serde_json::to_string(&bins[0]).unwrap();
    let back: StreamedBin<NotNan<f64>, NotNan<f64>> = serde_json::from_str(&json).unwrap();
    assert_eq!(back, bins[0]);
    assert_eq!(
        json,
        r#"{"arrivals":[3,0,1,2],"items":[1.4,0.7,0.2,0.1],"load":[2.4000000000000004]}"#
            .replace("2.4000000000000004", &bins[0].load()[0].to_string())
    );
    let load = format!(r#""load":[{}]"#, bins[0].load()[0]);
    let cases = [
        (
            json.replace(&load, r#""load":[2.4000000000000004]"#),
            "is not the sum of the items' sizes",
        ),
        (
            json.replace(r#""arrivals":[3,0,1,2]"#, r#""arrivals":[3,0,1,1]"#),
            "arrival number 1 is listed twice",
        ),
        (
            json.replace(r#""arrivals":[3,0,1,2]"#, r#""arrivals":[3,0,1]"#),
            "one arrival number per item, not 4 item(s) and 3",
        ),
        (
            json.replace(&load, r#""load":[]"#),
            "at least one dimension",
        ),
        (
            json.replace(
                r#""items":[1.4,0.7,0.2,0.1]"#,
                r#""items":[1.4,0.7,0.2,-0.1]"#,
            ),
            "item 3 has size -0.1",
        ),
    ];
    for (bad, reason) in cases {
        assert_ne!(bad, json, "the tampering did not apply: {reason}");
        match serde_json::from_str::<StreamedBin<NotNan<f64>, NotNan<f64>>>(&bad) {
            Ok(b) => panic!("accepted {bad}: {b:?}"),
            Err(e) => assert!(
                e.to_string().contains(reason),
                "{bad}\n  said: {e}\n  want: {reason}"
            ),
        }
    }
}

//! With the `serde` feature, plans round-trip through JSON, and reading one
//! is checked: a tampered document is refused with the reason, and any
//! document that is read gives a plan whose every accessor works and whose
//! fingerprint is that of its ids.
#![cfg(feature = "serde")]

use microbatch::cost::{Image, Preset, PresetModel, Sample, Tokens};
use microbatch::plan::{Normalization, Plan, Planner, Reduction, StepSample, SyncModel};
use proptest::prelude::*;
use serde_json::Value;
use std::num::NonZeroU32;

/// Four text samples of 10, 20, 30 and 40 tokens.
fn four() -> Vec<StepSample> {
    (0..4)
        .map(|i| StepSample::new(i, Sample::text_only(10 + 10 * i as u32)))
        .collect()
}

fn tokens() -> Tokens {
    Tokens::new(1.0).unwrap()
}

/// The fingerprint as documented on `Plan::fingerprint`, written out again:
/// FNV-1a (64 bit) over a version tag, `R`, `A` and `S`, then every
/// sequence's count and ids, all little-endian. `None` where the offsets do
/// not describe a layout of the ids.
fn oracle(ranks: u64, steps: u64, per_step: u64, offsets: &[u64], ids: &[u64]) -> Option<u64> {
    fn fnv(h: u64, bytes: &[u8]) -> u64 {
        bytes.iter().fold(h, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        })
    }
    let mut h = fnv(0xcbf2_9ce4_8422_2325, b"microbatch-plan-v1");
    for v in [ranks, steps, per_step] {
        h = fnv(h, &v.to_le_bytes());
    }
    for w in offsets.windows(2) {
        let seq = ids.get(usize::try_from(w[0]).ok()?..usize::try_from(w[1]).ok()?)?;
        h = fnv(h, &(seq.len() as u64).to_le_bytes());
        for id in seq {
            h = fnv(h, &id.to_le_bytes());
        }
    }
    Some(h)
}

/// The oracle's fingerprint of a document, if its fields are there.
fn oracle_of(v: &Value) -> Option<u64> {
    let list =
        |k: &str| -> Option<Vec<u64>> { v[k].as_array()?.iter().map(Value::as_u64).collect() };
    oracle(
        v["ranks"].as_u64()?,
        v["micro_steps"].as_u64()?,
        v["per_step"].as_u64()?,
        &list("offsets")?,
        &list("ids")?,
    )
}

#[test]
fn plans_round_trip_through_json() {
    let samples: Vec<StepSample> = (0..40u32)
        .map(|i| {
            let s = Sample::text_only(50 + 37 * i % 400);
            let s = if i % 3 == 0 {
                s.with_image(Image::with_units(256, NonZeroU32::new(4).unwrap()))
            } else {
                s
            };
            StepSample::new(u64::from(i) * 7 + 3, s)
        })
        .collect();
    for sync in SyncModel::ALL {
        let planner = Planner::new(Preset::Qwen25Vl7b.cost_model())
            .ranks(3)
            .seq_len(2048)
            .sync(sync)
            .sequences_per_micro_step(2);
        for plan in [
            planner.plan(&samples).unwrap(),
            planner.baseline(&samples).unwrap(),
        ] {
            let json = serde_json::to_string(&plan).unwrap();
            let back: Plan = serde_json::from_str(&json).unwrap();
            assert_eq!(back, plan);
            assert_eq!(back.planning_time(), plan.planning_time());
            assert_eq!(back.fingerprint(), plan.fingerprint());
            assert_eq!(back.to_sequences(), plan.to_sequences());
            assert_eq!(serde_json::to_string(&back).unwrap(), json);
        }
    }
}

/// The format is pinned: the shape, the ids slot by slot with their
/// offsets, the costs by slot, the loss, the report and the fingerprint.
const PINNED: &str = concat!(
    r#"{"ranks":2,"micro_steps":2,"per_step":1,"offsets":[0,2,3,4,4],"ids":[0,1,3,2],"#,
    r#""costs":[{"vision":0.0,"language":30.0},{"vision":0.0,"language":40.0},"#,
    r#"{"vision":0.0,"language":30.0},{"vision":0.0,"language":0.0}],"#,
    r#""loss":{"loss_tokens":100,"samples":4,"ranks":2},"#,
    r#""report":{"sync":"Step","predicted":70.0,"lower_bound":50.0,"baseline":70.0,"#,
    r#""baseline_micro_steps":2,"users_baseline":60.0,"#,
    r#""imbalance":{"vision":1.0,"language":1.4},"#,
    r#""efficiency":0.6666666666666666,"sequences":3,"balanced_packing":false,"#,
    r#""planning_time":null},"fingerprint":7631264390693396972}"#
);

#[test]
fn the_format_is_pinned() {
    let plan = Planner::new(tokens())
        .ranks(2)
        .seq_len(50)
        .baseline(&four())
        .unwrap();
    assert_eq!(serde_json::to_string(&plan).unwrap(), PINNED);
    let v: Value = serde_json::from_str(PINNED).unwrap();
    assert_eq!(oracle_of(&v), Some(plan.fingerprint()));
}

#[test]
fn serde_refuses_tampered_plans_with_the_reason() {
    // Each tampering, applied to the pinned document, with what the error
    // must say. Where the fingerprint covers the change, the case with
    // `refit` sets the fingerprint the tampered ids and shape give, so the
    // check after it is the one that answers.
    let fp = "\"fingerprint\":7631264390693396972";
    #[rustfmt::skip]
    let cases: &[(&str, &str, bool, &str)] = &[
        ("\"offsets\":[0,2,3,4,4]", "\"offsets\":[1,2,3,4,4]", false, "the offsets must start at 0, not 1"),
        ("\"users_baseline\":60.0", "\"users_baseline\":-1.0", false, "the report's users_baseline is -1.0: a step time is finite and non-negative"),
        ("\"users_baseline\":60.0,", "", false, "missing field `users_baseline`"),
        ("\"offsets\":[0,2,3,4,4]", "\"offsets\":[]", false, "the offsets are empty"),
        ("\"offsets\":[0,2,3,4,4]", "\"offsets\":[0,3,2,4,4]", false, "the offsets of slot 1 decrease: it would start at 3 and end at 2"),
        ("\"offsets\":[0,2,3,4,4]", "\"offsets\":[0,2,3,4,3]", false, "the offsets of slot 3 decrease"),
        ("\"offsets\":[0,2,3,4,4]", "\"offsets\":[0,2,3,4,5]", false, "the last offset is 5 but there are 4 items"),
        ("\"offsets\":[0,2,3,4,4]", "\"offsets\":[0,2,3,4]", false, "there must be 2 x 2 x 1 = 4 sequences (ranks x micro-steps x sequences per micro-step), so 5 offsets, not 4"),
        ("\"offsets\":[0,2,3,4,4]", "\"offsets\":[0,2,3,4,4,4]", false, "so 5 offsets, not 6"),
        ("\"ranks\":2", "\"ranks\":3", false, "there must be 3 x 2 x 1 = 6 sequences"),
        ("\"ranks\":2", "\"ranks\":0", false, "a plan has at least one rank, not 0"),
        ("\"micro_steps\":2", "\"micro_steps\":0", false, "a plan has at least one micro-step, not 0"),
        ("\"per_step\":1", "\"per_step\":0", false, "a plan has at least one sequence per micro-step, not 0"),
        ("\"per_step\":1", "\"per_step\":9223372036854775807", false, "2 ranks x 2 micro-steps x 9223372036854775807 sequences per micro-step overflows"),
        ("\"ids\":[0,1,3,2]", "\"ids\":[0,1,3,1]", false, "item 1 is listed in slot 0 and again in slot 2"),
        ("\"ids\":[0,1,3,2]", "\"ids\":[0,0,3,2]", false, "slot 0 lists item 0 twice"),
        ("\"offsets\":[0,2,3,4,4],\"ids\":[0,1,3,2]", "\"offsets\":[0,0,0,0,0],\"ids\":[]", false, "the plan has no sample"),
        ("\"ids\":[0,1,3,2]", "\"ids\":[1,0,3,2]", true, "sequence (0, 0, 0) (slot 0) lists id 0 after id 1: the ids of a sequence ascend"),
        (",{\"vision\":0.0,\"language\":0.0}]", "]", false, "there must be one cost per sequence, 4, not 3"),
        ("{\"vision\":0.0,\"language\":0.0}]", "{\"vision\":0.0,\"language\":0.0},{\"vision\":0.0,\"language\":0.0}]", false, "one cost per sequence, 4, not 5"),
        ("{\"vision\":0.0,\"language\":40.0}", "{\"vision\":-1.0,\"language\":40.0}", false, "the cost of sequence (0, 1, 0) (slot 1) is -1.0 (vision) and 40.0 (language): costs are finite and non-negative"),
        ("\"samples\":4", "\"samples\":5", false, "the loss counts 5 samples but the plan has 4"),
        ("\"ranks\":2}", "\"ranks\":1}", false, "the loss counts 1 ranks but the plan has 2"),
        ("\"sequences\":3", "\"sequences\":4", false, "the report counts 4 non-empty sequences but the plan has 3"),
        (fp, "\"fingerprint\":7631264390693396973", false, "the fingerprint is 7631264390693396973 but the plan's shape and ids give 7631264390693396972"),
        ("\"ids\":[0,1,3,2]", "\"ids\":[0,1,3,9]", false, "the fingerprint is 7631264390693396972 but the plan's shape and ids give"),
        ("\"offsets\":[0,2,3,4,4]", "\"offsets\":[0,1,2,3,4]", false, "the report counts 3 non-empty sequences but the plan has 4"),
        ("\"ranks\":2,\"micro_steps\":2", "\"ranks\":4,\"micro_steps\":1", true, "the loss counts 2 ranks but the plan has 4"),
    ];
    for &(from, to, refit, reason) in cases {
        let bad = PINNED.replacen(from, to, 1);
        assert_ne!(bad, PINNED, "the tampering did not apply: {reason}");
        let bad = if refit {
            let v: Value = serde_json::from_str(&bad).unwrap();
            let f = oracle_of(&v).unwrap();
            bad.replace(fp, &format!("\"fingerprint\":{f}"))
        } else {
            bad
        };
        let err = serde_json::from_str::<Plan>(&bad).unwrap_err();
        assert!(
            err.to_string().contains(reason),
            "{bad}\n  said: {err}\n  want: {reason}"
        );
    }
    // A consistent change is read: the last id raised, the fingerprint refit.
    let v: Value = serde_json::from_str(&PINNED.replace("[0,1,3,2]", "[0,1,3,7]")).unwrap();
    let f = oracle_of(&v).unwrap();
    let ok = PINNED
        .replace("[0,1,3,2]", "[0,1,3,7]")
        .replace(fp, &format!("\"fingerprint\":{f}"));
    let plan: Plan = serde_json::from_str(&ok).unwrap();
    assert_eq!(plan.sequence(1, 0, 0), [7]);
    assert_eq!(plan.fingerprint(), f);
}

/// One generated plan: samples, the planner's settings, and which plan.
#[derive(Clone, Debug)]
struct Case {
    samples: Vec<StepSample>,
    ranks: usize,
    per_step: usize,
    micro_steps: Option<usize>,
    sync: SyncModel,
    baseline: bool,
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop::collection::vec((1u32..900, prop::option::of(1u32..600)), 1..40),
        1usize..5,
        1usize..4,
        prop::option::of(1usize..6),
        prop::sample::select(SyncModel::ALL.to_vec()),
        any::<bool>(),
    )
        .prop_map(|(raw, ranks, per_step, micro_steps, sync, baseline)| {
            let samples = raw
                .into_iter()
                .zip(0u64..)
                .map(|((text, image), i)| {
                    let s = Sample::text_only(text);
                    let s = match image {
                        Some(t) => s.with_image(Image::with_units(t, NonZeroU32::new(1).unwrap())),
                        None => s,
                    };
                    StepSample::new(i * 3 + 5, s)
                })
                .collect::<Vec<_>>();
            Case {
                ranks: ranks.min(samples.len()),
                samples,
                per_step,
                micro_steps,
                sync,
                baseline,
            }
        })
}

fn plan_of(c: &Case) -> Plan {
    let planner = Planner::new(Preset::Qwen25Vl7b.cost_model())
        .ranks(c.ranks)
        .seq_len(2048)
        .sync(c.sync)
        .sequences_per_micro_step(c.per_step);
    let with_a = match c.micro_steps {
        Some(a) => planner.clone().micro_steps(a),
        None => planner.clone(),
    };
    let run = |p: &Planner<PresetModel>| {
        if c.baseline {
            p.baseline(&c.samples)
        } else {
            p.plan(&c.samples)
        }
    };
    // A given A may be too small for the batch: then without it.
    run(&with_a).or_else(|_| run(&planner)).unwrap()
}

/// One change to a plan's document.
#[derive(Clone, Debug)]
enum Mutation {
    /// Id `at` set to another id of the plan (`other`) or moved by `delta`.
    Id { at: usize, other: usize, delta: i64 },
    /// Offset `at` moved by `delta`.
    Offset { at: usize, delta: i64 },
    /// Cost `at` dropped.
    DropCost { at: usize },
    /// Cost `at`'s language cost set to `to`.
    Cost { at: usize, to: f64 },
    /// A shape field moved by `delta`.
    Shape { field: usize, delta: i64 },
    /// `R` and `A` swapped.
    SwapShape,
    /// `loss.samples` or `report.sequences` moved by `delta`.
    Count { field: usize, delta: i64 },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let delta = -2i64..=2;
    prop_oneof![
        (any::<usize>(), any::<usize>(), delta.clone())
            .prop_map(|(at, other, delta)| Mutation::Id { at, other, delta }),
        (any::<usize>(), delta.clone()).prop_map(|(at, delta)| Mutation::Offset { at, delta }),
        any::<usize>().prop_map(|at| Mutation::DropCost { at }),
        (
            any::<usize>(),
            prop::sample::select(vec![-1.0, -0.0, 0.0, 1e300, 3.5])
        )
            .prop_map(|(at, to)| Mutation::Cost { at, to }),
        (0usize..3, delta.clone()).prop_map(|(field, delta)| Mutation::Shape { field, delta }),
        Just(Mutation::SwapShape),
        (0usize..2, delta).prop_map(|(field, delta)| Mutation::Count { field, delta }),
    ]
}

/// `x` moved by `delta`, as a JSON number (negative ones stay negative: a
/// count read from them is refused by the format).
fn moved(x: &Value, delta: i64) -> Value {
    let x = x.as_u64().unwrap() as i128 + i128::from(delta);
    match u64::try_from(x) {
        Ok(x) => x.into(),
        Err(_) => (x as i64).into(),
    }
}

fn mutate(v: &mut Value, m: &Mutation) {
    match *m {
        Mutation::Id { at, other, delta } => {
            let ids = v["ids"].as_array_mut().unwrap();
            let n = ids.len();
            ids[at % n] = if delta == 0 {
                ids[other % n].clone()
            } else {
                moved(&ids[at % n], delta)
            };
        }
        Mutation::Offset { at, delta } => {
            let offsets = v["offsets"].as_array_mut().unwrap();
            let n = offsets.len();
            offsets[at % n] = moved(&offsets[at % n], delta);
        }
        Mutation::DropCost { at } => {
            let costs = v["costs"].as_array_mut().unwrap();
            let n = costs.len();
            costs.remove(at % n);
        }
        Mutation::Cost { at, to } => {
            let costs = v["costs"].as_array_mut().unwrap();
            let n = costs.len();
            costs[at % n]["language"] = to.into();
        }
        Mutation::Shape { field, delta } => {
            let k = ["ranks", "micro_steps", "per_step"][field];
            v[k] = moved(&v[k], delta);
        }
        Mutation::SwapShape => {
            let r = v["ranks"].clone();
            v["ranks"] = v["micro_steps"].clone();
            v["micro_steps"] = r;
        }
        Mutation::Count { field, delta } => {
            let (a, b) = [("loss", "samples"), ("report", "sequences")][field];
            v[a][b] = moved(&v[a][b], delta);
        }
    }
}

/// Every accessor of a plan read from `doc`, over every in-range argument:
/// none panics, the plan is what the document says, and the documented
/// invariants hold.
fn check_sound(p: &Plan, doc: &Value, samples: &[StepSample]) {
    let (r, a, s) = (p.ranks(), p.micro_steps(), p.sequences_per_micro_step());
    assert_eq!(doc["ranks"].as_u64(), Some(r as u64));
    assert_eq!(doc["micro_steps"].as_u64(), Some(a as u64));
    assert_eq!(doc["per_step"].as_u64(), Some(s as u64));
    let seqs = p.to_sequences();
    let nested = p.to_nested();
    assert_eq!(seqs.len(), r);
    let mut flat = vec![];
    let mut offsets = vec![0u64];
    let mut used = 0;
    for rank in 0..r {
        let mut whole_rank = vec![];
        for step in 0..a {
            let mut mb = vec![];
            assert_eq!(seqs[rank][step].len(), s);
            for (index, listed) in seqs[rank][step].iter().enumerate() {
                let seq = p.sequence(rank, step, index);
                assert_eq!(seq, &listed[..]);
                assert!(seq.windows(2).all(|w| w[0] < w[1]), "{seq:?} not ascending");
                let c = p.sequence_cost(rank, step, index);
                assert!(c.vision >= 0.0 && c.vision.is_finite());
                assert!(c.language >= 0.0 && c.language.is_finite());
                used += usize::from(!seq.is_empty());
                mb.extend_from_slice(seq);
                flat.extend_from_slice(seq);
                offsets.push(flat.len() as u64);
            }
            assert_eq!(p.micro_batch(rank, step), &mb[..]);
            assert_eq!(nested[rank][step], mb);
            whole_rank.extend(mb);
        }
        assert_eq!(p.rank(rank), &whole_rank[..]);
    }
    // The plan is the document's.
    let list = |k: &str| -> Vec<u64> {
        doc[k]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap())
            .collect()
    };
    assert_eq!(flat, list("ids"));
    assert_eq!(offsets, list("offsets"));
    assert_eq!(serde_json::to_value(p).unwrap(), *doc);
    // Ids unique, counts consistent, the fingerprint that of the ids.
    let mut sorted = flat.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), flat.len(), "an id repeated");
    assert_eq!((p.len(), p.is_empty()), (flat.len(), false));
    assert_eq!(p.loss().samples, flat.len() as u64);
    assert_eq!(p.loss().ranks, r as u64);
    assert_eq!(p.report().sequences, used);
    assert_eq!(
        Some(p.fingerprint()),
        oracle(r as u64, a as u64, s as u64, &offsets, &flat)
    );
    for n in [Normalization::Token, Normalization::Sample] {
        for red in [Reduction::Sum, Reduction::Mean] {
            let _ = p.loss().scale(n, red);
        }
    }
    let _ = (
        p.report().ratio(),
        p.report().gain(),
        p.report().straggler(),
    );
    let model = Preset::Qwen25Vl7b.cost_model();
    let same_ids = {
        let mut given: Vec<u64> = samples.iter().map(StepSample::id).collect();
        given.sort_unstable();
        given == sorted
    };
    for sync in SyncModel::ALL {
        let t = p.predict(samples, &model, sync);
        assert_eq!(t.is_ok(), same_ids, "{t:?}");
        let _ = p.predict(&samples[1..], &tokens(), sync);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// A plan reads back equal; a tampered one is refused or is a sound plan
    /// (with the fingerprint set as the tampered ids give it, or not).
    #[test]
    fn tampered_plans_are_refused_or_sound(c in case(), m in mutation(), refit in any::<bool>()) {
        let plan = plan_of(&c);
        let mut doc = serde_json::to_value(&plan).unwrap();
        let back: Plan = serde_json::from_value(doc.clone()).unwrap();
        prop_assert_eq!(&back, &plan);
        check_sound(&back, &doc, &c.samples);
        mutate(&mut doc, &m);
        if refit {
            if let Some(f) = oracle_of(&doc) {
                doc["fingerprint"] = f.into();
            }
        }
        if let Ok(p) = serde_json::from_value::<Plan>(doc.clone()) {
            check_sound(&p, &doc, &c.samples);
        }
    }
}

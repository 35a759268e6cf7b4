//! The planner under hostile settings and documents (issue 10): every
//! setting that would make memory or time grow with the setting alone is
//! refused with the limit in the message, before any allocation; shapes that
//! used to make the refinement quadratic plan quickly; plan documents that
//! claim a huge shape are refused without allocating it.

use microbatch::cost::{Image, Preset, Sample, Tokens};
use microbatch::plan::{Plan, Planner, StepSample, SyncModel};
use microbatch::{Error, Locator, Scalar};
use proptest::prelude::*;

use crate::common::plan::{text, tokens_planner};

fn batch(n: u64) -> Vec<StepSample> {
    (0..n).map(|i| text(i, 1 + (i * 37 % 50) as u32)).collect()
}

fn planner(ranks: usize) -> Planner<Tokens> {
    tokens_planner(ranks, 1 << 20)
}

/// The setting an error names, or a panic.
fn setting(r: Result<Plan, Error>) -> (&'static str, u64) {
    match r {
        Err(Error::Invalid {
            at: Locator::Setting { name, .. },
            value: Scalar::Int(value),
            ..
        }) => (name, value),
        other => panic!("expected InvalidSetting, got {other:?}"),
    }
}

/// `Planner::micro_steps(u32::MAX as usize)` used to pass the checks and
/// then allocate about 103 GB; `usize::MAX` and `1 << 40` alike.
#[test]
fn huge_micro_steps_are_refused_with_the_limit() {
    let samples = batch(10);
    for a in [u32::MAX as usize, usize::MAX, 1 << 40, 65_537] {
        let err = planner(1).micro_steps(a).plan(&samples).unwrap_err();
        assert!(err.to_string().contains("at most 65536"), "{err}");
        assert_eq!(setting(Err(err)), ("micro_steps", a as u64));
        // The baseline checks the same settings.
        assert_eq!(
            setting(planner(1).micro_steps(a).baseline(&samples)),
            ("micro_steps", a as u64)
        );
    }
    assert_eq!(
        planner(1)
            .micro_steps(u32::MAX as usize)
            .plan(&samples)
            .unwrap_err()
            .to_string(),
        "the setting `micro_steps` is 4294967295; it must be small enough that ranks x \
         micro_steps x sequences_per_micro_step is at most 65536 or the number of samples, \
         whichever is larger (every micro-step of the plan is stored, empty ones too)"
    );
    // At the limit, planned: 65,536 micro-steps of which 10 hold a sample.
    let plan = planner(1).micro_steps(65_536).plan(&samples).unwrap();
    assert_eq!(plan.micro_steps(), 65_536);
    assert_eq!(plan.report().sequences, 10);
    // With R = 2 and S = 2 the limit on A is 16,384.
    let p = planner(2).sequences_per_micro_step(2);
    assert!(p.clone().micro_steps(16_384).plan(&samples).is_ok());
    assert_eq!(
        setting(p.micro_steps(16_385).plan(&samples)),
        ("micro_steps", 16_385)
    );
}

/// Beyond 65,536 the limit is the number of samples.
#[test]
fn the_limit_grows_with_the_batch() {
    let samples = batch(70_000);
    let p = planner(1).refinement(false);
    assert_eq!(
        p.clone()
            .micro_steps(70_000)
            .plan(&samples)
            .unwrap()
            .micro_steps(),
        70_000
    );
    assert_eq!(
        setting(p.micro_steps(70_001).plan(&samples)),
        ("micro_steps", 70_001)
    );
}

#[test]
fn huge_sequences_per_micro_step_are_refused() {
    let samples = batch(10);
    for s in [usize::MAX, 1 << 40, u32::MAX as usize, 65_537] {
        let err = planner(1)
            .sequences_per_micro_step(s)
            .plan(&samples)
            .unwrap_err();
        assert!(err.to_string().contains("at most 65536"), "{err}");
        assert_eq!(setting(Err(err)), ("sequences_per_micro_step", s as u64));
        // Also with micro-steps given: the sequences are named first.
        assert_eq!(
            setting(
                planner(2)
                    .sequences_per_micro_step(s)
                    .micro_steps(usize::MAX)
                    .plan(&samples)
            ),
            ("sequences_per_micro_step", s as u64)
        );
    }
    let plan = planner(2)
        .sequences_per_micro_step(32_768)
        .plan(&samples)
        .unwrap();
    assert_eq!(
        (plan.micro_steps(), plan.sequences_per_micro_step()),
        (1, 32_768)
    );
}

/// Ranks are bounded by the samples (every rank needs one).
#[test]
fn huge_ranks_are_too_few_samples() {
    let samples = batch(10);
    for r in [usize::MAX, 1 << 40, u32::MAX as usize] {
        assert_eq!(
            planner(r).plan(&samples).unwrap_err(),
            Error::TooFewSamples {
                samples: 10,
                ranks: r
            }
        );
    }
}

/// Huge lengths and caps allocate nothing: they only loosen the packing.
#[test]
fn huge_lengths_and_caps_plan_as_usual() {
    let samples: Vec<StepSample> = (0..64)
        .map(|i| StepSample::new(i, Sample::new(1 + i as u32 % 7, [Image::new(3)])))
        .collect();
    for sync in SyncModel::ALL {
        let plan = Planner::new(Tokens::new(1.0).unwrap())
            .ranks(4)
            .seq_len(u32::MAX)
            .max_units(u32::MAX)
            .max_images(u32::MAX)
            .sync(sync)
            .plan(&samples)
            .unwrap();
        assert_eq!(plan.micro_steps(), 1);
        assert_eq!(plan.len(), 64);
        assert!(plan.report().predicted >= plan.report().lower_bound);
    }
}

/// Samples that split into vision-heavy and language-heavy halves, tiny
/// against the sequence length.
fn two_kinds(n: u64) -> Vec<StepSample> {
    (0..n)
        .map(|i| {
            let h = (i as u32).wrapping_mul(2_654_435_761) >> 8;
            if i % 2 == 0 {
                StepSample::new(i, Sample::new(1 + h % 97, [Image::new(1 + h % 89)]))
            } else {
                StepSample::new(i, Sample::text_only(1 + h % 150))
            }
        })
        .collect()
}

/// A huge sequence length with tiny samples puts the batch in two
/// micro-batches of thousands of samples (or in thousands of one-sample
/// sequences a micro-step): the stages that trade samples between two
/// micro-batches weigh a window of partners, not every pair, so a plan
/// returns at once, sound and balanced.
#[test]
fn large_micro_batches_refine_within_the_budget() {
    let samples = two_kinds(6_000);
    let model = Preset::Qwen25Vl7b.cost_model();
    for planner in [
        Planner::new(&model).ranks(2).seq_len(u32::MAX),
        Planner::new(&model)
            .ranks(2)
            .seq_len(400)
            .sequences_per_micro_step(3_000),
    ] {
        let plan = planner
            .clone()
            .sync(SyncModel::Phase)
            .plan(&samples)
            .unwrap();
        let r = plan.report();
        assert_eq!(plan.len(), 6_000);
        assert!(r.predicted >= r.lower_bound && r.predicted <= r.baseline);
        assert!(r.ratio() < 1.01, "{}", r.ratio());
        // Deterministic: the budget is counted, not timed.
        let mut reversed = samples.clone();
        reversed.reverse();
        assert_eq!(
            planner.sync(SyncModel::Phase).plan(&reversed).unwrap(),
            plan
        );
    }
}

/// Every planner variant's message says what to fix.
#[test]
fn planner_messages_say_what_to_fix() {
    let m = |e: Error| e.to_string();
    assert_eq!(
        m(Error::TooFewSamples {
            samples: 3,
            ranks: 8
        }),
        "3 sample(s) for 8 ranks: every rank needs at least one sample (plan a larger step or \
         fewer ranks)"
    );
    assert_eq!(
        m(Error::DuplicateId { id: 7 }),
        "sample id 7 appears more than once; the ids of a step must be unique"
    );
    assert_eq!(
        m(Error::MicroStepsInfeasible {
            given: 2,
            smallest: 5
        }),
        "2 micro-step(s) cannot hold the batch under the sequence length and caps; the \
         smallest feasible number is 5"
    );
    assert_eq!(
        m(Error::PlanMismatch {
            id: Some(4),
            planned: 8,
            given: 8
        }),
        "the plan's sample 4 is not among the 8 sample(s) given (the plan has 8); pass the \
         samples the plan was made from"
    );
    assert_eq!(
        m(Error::PlanMismatch {
            id: None,
            planned: 8,
            given: 7
        }),
        "the plan has 8 sample(s) but 7 were given; pass the samples the plan was made from"
    );
    let err = "fast".parse::<SyncModel>().unwrap_err();
    assert_eq!(
        m(err),
        "unknown sync model \"fast\"; known: step, micro-step, phase"
    );
    let err = planner(1).seq_len(0).plan(&batch(2)).unwrap_err();
    assert_eq!(
        m(err),
        "the setting `seq_len` is 0; it must be at least 1 (set it with `Planner::seq_len`)"
    );
}

/// A plan document that claims a huge shape over few slots is refused
/// (before anything of the shape's size is allocated), with the reason; the
/// message itself cannot overflow (it once computed `slots + 1`).
#[cfg(feature = "serde")]
#[test]
fn documents_claiming_huge_shapes_are_refused() {
    let plan = planner(2).plan(&batch(4)).unwrap();
    let doc = serde_json::to_value(&plan).unwrap();
    let max = usize::MAX as u64;
    for (r, a, s, reason) in [
        (
            1,
            1,
            max,
            "there must be 1 x 1 x 18446744073709551615 = 18446744073709551615 sequences",
        ),
        (max, 1, 1, "so 18446744073709551616 offsets, not 3"),
        (
            1 << 40,
            1,
            1,
            "there must be 1099511627776 x 1 x 1 = 1099511627776 sequences",
        ),
        (1 << 32, 1 << 32, 1, "overflows"),
        (
            2,
            u32::MAX as u64,
            1,
            "there must be 2 x 4294967295 x 1 = 8589934590 sequences",
        ),
    ] {
        let mut d = doc.clone();
        d["ranks"] = r.into();
        d["micro_steps"] = a.into();
        d["per_step"] = s.into();
        let err = serde_json::from_value::<Plan>(d).unwrap_err().to_string();
        assert!(err.contains(reason), "{err}\n  want: {reason}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// A plan is refused for its settings exactly when the sequences it
    /// would store exceed max(n, 65536), and an accepted plan stores at most
    /// that many (given A) or fewer than n + R * S (the smallest A).
    #[test]
    fn stored_sequences_follow_the_batch(
        n in 1u64..40,
        ranks in 1usize..6,
        per_step in prop_oneof![1usize..4, 16_000usize..40_000],
        micro_steps in prop::option::of(prop_oneof![1usize..8, 1_000usize..70_000]),
    ) {
        let samples = batch(n);
        let mut p = planner(ranks).sequences_per_micro_step(per_step).refinement(false);
        if let Some(a) = micro_steps {
            p = p.micro_steps(a);
        }
        let limit = (n as u128).max(65_536);
        let per_row = (ranks * per_step) as u128;
        let over = per_row > limit || micro_steps.is_some_and(|a| per_row * a as u128 > limit);
        match p.plan(&samples) {
            Ok(plan) => {
                prop_assert!(!over);
                let stored = (plan.ranks() * plan.micro_steps() * plan.sequences_per_micro_step()) as u128;
                match micro_steps {
                    Some(_) => prop_assert!(stored <= limit),
                    None => prop_assert!(stored < n as u128 + per_row),
                }
            }
            Err(Error::Invalid { at: Locator::Setting { name, .. }, .. }) => {
                prop_assert!(over, "refused {name} within the limit");
            }
            Err(Error::TooFewSamples { .. }) => prop_assert!((n as usize) < ranks),
            Err(e) => prop_assert!(false, "{e}"),
        }
    }
}

/// 1e200 for one sample, 1e200 times as much for each more sample of a
/// group: every sample alone and any sum of them is finite, two together
/// are beyond `f64::MAX`.
#[derive(Clone, Copy, Debug)]
struct Explosive;

impl microbatch::cost::CostModel for Explosive {
    fn cost(&self, group: &[&Sample]) -> microbatch::cost::Phases {
        explode(group.len() as u32)
    }
}

fn explode(n: u32) -> microbatch::cost::Phases {
    let language = if n == 0 {
        0.0
    } else {
        1e200 * 1e200f64.powi(n as i32 - 1)
    };
    microbatch::cost::Phases::new(0.0, language)
}

impl microbatch::cost::Incremental for Explosive {
    type State = u32;
    fn empty(&self) -> u32 {
        0
    }
    fn insert(&self, n: &mut u32, _: &Sample) {
        *n += 1;
    }
    fn evaluate(&self, n: &u32) -> microbatch::cost::Phases {
        explode(*n)
    }
}

/// A sequence's cost beyond `f64::MAX` (every sample alone and their sum
/// finite: the model grows faster than the sum) is `CostOverflow`, never a
/// report with infinite times.
#[test]
fn sequence_costs_beyond_f64_max_are_refused() {
    let samples: Vec<StepSample> = (0..4).map(|i| text(i, 10)).collect();
    let err = Planner::new(Explosive)
        .ranks(1)
        .seq_len(100)
        .plan(&samples)
        .unwrap_err();
    assert!(
        matches!(err, Error::CostOverflow { phase: Some(_), samples } if samples > 1),
        "{err:?}"
    );
    assert!(err.to_string().contains("beyond f64::MAX"), "{err}");
    // One sample a sequence plans, with finite times.
    let plan = Planner::new(Explosive)
        .ranks(2)
        .seq_len(10)
        .plan(&samples[..2])
        .unwrap();
    assert!(plan.report().predicted.is_finite());
    assert!(plan.report().predicted >= plan.report().lower_bound);
}

/// Loss tokens are positions that carry loss: more than the sample's tokens
/// is refused by id (it used to saturate the step's count at `u64::MAX` and
/// silently break the gradient invariance).
#[test]
fn loss_tokens_above_the_tokens_are_refused() {
    let samples = vec![
        text(0, 10),
        StepSample::new(7, Sample::new(10, [Image::new(5)])).with_loss_tokens(16),
        text(9, 10).with_loss_tokens(u64::MAX),
    ];
    let err = planner(1).plan(&samples).unwrap_err();
    assert_eq!(
        err,
        Error::LossTokens {
            id: 7,
            loss_tokens: 16,
            tokens: 15
        }
    );
    assert!(
        err.to_string()
            .contains("sample 7 has 16 loss tokens but only 15 tokens"),
        "{err}"
    );
    // At most the tokens, image tokens included, is fine.
    let ok = vec![
        text(0, 10),
        StepSample::new(7, Sample::new(10, [Image::new(5)])).with_loss_tokens(15),
    ];
    assert_eq!(planner(1).plan(&ok).unwrap().loss().loss_tokens, 25);
}

/// Issue 20: huge byte counts. `with_bytes(u64::MAX)` overflowed the
/// locality search's sums (a panic in a debug build, wrapped weights in
/// release), and the traffic saturated silently. Now the weights are exact
/// (`u128`) and a step whose bytes with an origin pass `u64::MAX` is
/// refused, naming the sample where the sum passes it (in id order).
#[test]
fn huge_byte_counts_are_exact_or_refused() {
    use microbatch::plan::Locality;
    let big =
        |id: u64, origin: usize, bytes: u64| text(id, 10).with_origin(origin).with_bytes(bytes);
    // One sample of u64::MAX bytes, away from home between nodes (weight
    // 8 * u64::MAX): plans, and the traffic is exact.
    let mut samples: Vec<StepSample> = (0..8).map(|i| big(i, 0, 1)).collect();
    samples[3] = big(3, 0, u64::MAX - 7);
    for node in [None, Some(1), Some(2)] {
        let loc = Locality::new(0.0).unwrap();
        let loc = node.map_or(loc, |n| loc.ranks_per_node(n));
        let plan = planner(4).locality(loc).plan(&samples).unwrap();
        let t = plan.report().traffic.unwrap();
        assert_eq!(t.bytes_total, u64::MAX);
        let moved: u64 = plan.exchange().unwrap().moves().map(|m| m.bytes).sum();
        assert_eq!(t.bytes_moved, moved);
    }
    // Two samples whose bytes pass u64::MAX together: refused, the second
    // (by id) named; samples without an origin do not count.
    let mut samples: Vec<StepSample> = (0..8).map(|i| text(i, 10).with_bytes(u64::MAX)).collect();
    samples[5] = big(5, 1, u64::MAX);
    samples[2] = big(2, 0, 1);
    let err = planner(4).plan(&samples).unwrap_err();
    assert_eq!(err, Error::BytesOverflow { id: 5 });
    assert_eq!(
        err.to_string(),
        "the bytes of the samples with an origin sum beyond u64::MAX (18446744073709551615) at \
         sample 5; give the bytes in a larger unit (KiB, MiB) so that the traffic can be counted \
         exactly"
    );
    assert_eq!(planner(4).baseline(&samples).unwrap_err(), err);
    // An invalid origin is named before any overflow.
    samples[7] = big(7, 9, 0);
    assert!(matches!(
        planner(4).plan(&samples),
        Err(Error::Invalid {
            at: Locator::Origin { id: 7, .. },
            ..
        })
    ));
}

/// An exchange document whose moves' bytes pass `u64::MAX` is refused (its
/// traffic could not be exact).
#[cfg(feature = "serde")]
#[test]
fn exchange_documents_with_overflowing_bytes_are_refused() {
    use microbatch::plan::Exchange;
    let doc = r#"{"moves":[{"id":1,"from":0,"to":1,"bytes":18446744073709551615},{"id":2,"from":0,"to":1,"bytes":1}]}"#;
    let err = serde_json::from_str::<Exchange>(doc)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("the bytes of moves 0 to 1 sum beyond u64::MAX (move 1, id 2"),
        "{err}"
    );
    let doc = r#"{"moves":[{"id":1,"from":0,"to":1,"bytes":18446744073709551614},{"id":2,"from":0,"to":1,"bytes":1}]}"#;
    let x: Exchange = serde_json::from_str(doc).unwrap();
    assert_eq!(x.bytes_out(0), u64::MAX);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Bytes anywhere in `u64`, with locality on (with and without nodes):
    /// the plan is refused exactly when the bytes with an origin pass
    /// `u64::MAX`, and otherwise every byte count of the traffic is the
    /// exact sum of the moves'.
    #[test]
    fn traffic_is_exact_for_huge_byte_counts(
        samples in prop::collection::vec((1u32..200, 0usize..4, prop::option::of(0u32..3), 0u64..u64::MAX, any::<bool>()), 4..40),
        node in prop::option::of(1usize..3),
    ) {
        use microbatch::plan::Locality;
        let samples: Vec<StepSample> = samples
            .iter()
            .enumerate()
            .map(|(i, &(t, origin, shift, bytes, with_origin))| {
                // Mostly huge, sometimes small.
                let bytes = shift.map_or(bytes, |s| bytes >> (20 * (s + 1)));
                let s = text(i as u64, t).with_bytes(bytes);
                if with_origin { s.with_origin(origin) } else { s }
            })
            .collect();
        let loc = Locality::new(0.01).unwrap();
        let loc = node.map_or(loc, |n| loc.ranks_per_node(n));
        let total: u128 = samples
            .iter()
            .filter(|s| s.origin().is_some())
            .map(|s| u128::from(s.bytes()))
            .sum();
        match planner(4).locality(loc).plan(&samples) {
            Err(Error::BytesOverflow { id }) => {
                prop_assert!(total > u128::from(u64::MAX));
                // The sum passes u64::MAX at `id`, not before.
                let upto = |last: u64| -> u128 {
                    samples
                        .iter()
                        .filter(|s| s.origin().is_some() && s.id() <= last)
                        .map(|s| u128::from(s.bytes()))
                        .sum()
                };
                prop_assert!(upto(id) > u128::from(u64::MAX));
                prop_assert!(id == 0 || upto(id - 1) <= u128::from(u64::MAX));
            }
            Err(other) => prop_assert!(false, "unexpected error {other}"),
            Ok(plan) => {
                prop_assert!(total <= u128::from(u64::MAX));
                let Some(t) = plan.report().traffic else {
                    prop_assert!(samples.iter().all(|s| s.origin().is_none()));
                    return Ok(());
                };
                let x = plan.exchange().unwrap();
                prop_assert_eq!(u128::from(t.bytes_total), total);
                let moved: u128 = x.moves().map(|m| u128::from(m.bytes)).sum();
                prop_assert_eq!(u128::from(t.bytes_moved), moved);
                let out = (0..4).map(|r| u128::from(x.bytes_out(r))).max().unwrap();
                let inn = (0..4).map(|r| u128::from(x.bytes_in(r))).max().unwrap();
                prop_assert_eq!((u128::from(t.max_bytes_out), u128::from(t.max_bytes_in)), (out, inn));
                for r in 0..4 {
                    let exact: u128 = x.moves().filter(|m| m.from == r).map(|m| u128::from(m.bytes)).sum();
                    prop_assert_eq!(u128::from(x.bytes_out(r)), exact);
                }
            }
        }
    }
}

//! Cost models under hostile input (issue 10): FLOPs from extreme shapes
//! without overflow, calibration at extreme magnitudes, `InvalidCost` naming
//! the phase, and the planner's lower bound valid for every cost model (the
//! floor law of `CostModel::floor`, for every model and combinator).

use core::num::NonZeroU32;

use microbatch::cost::{
    cost_fn, fit, fit_terms, sample_fn, AttentionCount, CostModel, DocumentAttention,
    FullAttention, Image, Incremental, Linear, LlmShape, PerGroup, PerImage, PerSample, PerTile,
    Phase, Phases, Preset, Sample, Term, Tokens, Training, VitScope, VitShape, Windowed, Zero,
};
use microbatch::plan::{Planner, StepSample, SyncModel};
use microbatch::{Error, InvalidReason, Locator, Scalar};
use proptest::prelude::*;

use crate::common::cost::coef;
use crate::common::float::rel;

// ------------------------------------------------------------ FLOPs overflow

fn field() -> impl Strategy<Value = u32> {
    prop_oneof![
        Just(0u32),
        Just(1),
        Just(u32::MAX),
        Just(u32::MAX - 1),
        1u32..100_000,
        any::<u32>()
    ]
}

fn tokens() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        Just(u64::MAX),
        Just(u64::MAX - 1),
        0u64..1_000_000,
        any::<u64>()
    ]
}

fn llm() -> impl Strategy<Value = LlmShape> {
    (
        (field(), field(), field(), any::<bool>()),
        (field(), field(), field(), any::<bool>()),
    )
        .prop_map(
            |((layers, hidden, ffn, swiglu), (heads, kv_heads, vocab, full))| LlmShape {
                layers,
                hidden,
                ffn,
                swiglu,
                heads,
                kv_heads,
                vocab,
                attention: if full {
                    AttentionCount::Full
                } else {
                    AttentionCount::Causal
                },
            },
        )
}

fn vit() -> impl Strategy<Value = VitShape> {
    let scope = prop_oneof![
        (field(), field()).prop_map(|(tokens_per_tile, llm_tokens_per_tile)| VitScope::Tile {
            tokens_per_tile,
            llm_tokens_per_tile
        }),
        field().prop_map(|patches_per_token| VitScope::Image { patches_per_token }),
        (field(), field(), field()).prop_map(|(window, full_layers, patches_per_token)| {
            VitScope::Windowed {
                window,
                full_layers,
                patches_per_token,
            }
        }),
    ];
    (field(), field(), field(), any::<bool>(), scope).prop_map(
        |(layers, hidden, mlp, swiglu, scope)| VitShape {
            layers,
            hidden,
            mlp,
            swiglu,
            scope,
        },
    )
}

/// Samples at the extremes of what a `Sample` holds.
fn extreme_samples() -> Vec<Sample> {
    let units = NonZeroU32::new(u32::MAX).unwrap();
    vec![
        Sample::text_only(u32::MAX),
        Sample::new(u32::MAX, [Image::new(u32::MAX); 4]),
        Sample::new(0, [Image::with_units(u32::MAX, units)]),
        Sample::new(7, [Image::with_units(3, units), Image::new(1)]),
    ]
}

fn finite_non_negative(x: f64) -> bool {
    x.is_finite() && x >= 0.0
}

/// The examples: `LlmShape::weights` and `VitShape::forward_flops`
/// panicked in debug builds (a wrong number in release) on large shapes.
#[test]
fn flops_of_extreme_shapes_do_not_overflow() {
    let huge = LlmShape {
        layers: u32::MAX,
        hidden: u32::MAX,
        ffn: u32::MAX,
        swiglu: true,
        heads: u32::MAX,
        kv_heads: u32::MAX,
        vocab: u32::MAX,
        attention: AttentionCount::Full,
    };
    // Exact: L (2h^2 + 2h kv + 3hf) + hV with every field 2^32 - 1.
    let x = u128::from(u32::MAX);
    assert_eq!(huge.weights(), x * (7 * x * x) + x * x);
    assert!(finite_non_negative(huge.training_flops(u64::MAX)));
    let model = huge.cost_model().unwrap();
    for s in extreme_samples() {
        let c = model.cost(&[&s, &s]);
        assert!(finite_non_negative(c.language) && c.vision == 0.0, "{c:?}");
    }

    // The windowed count `full * w * w` overflowed u64 from 2^32-token units on.
    let windowed = VitShape {
        scope: VitScope::Windowed {
            window: u32::MAX,
            full_layers: 4,
            patches_per_token: u32::MAX,
        },
        ..VitShape::QWEN2_5_VL
    };
    let f = windowed.forward_flops(u64::MAX);
    assert!(finite_non_negative(f) && f >= windowed.forward_flops(u64::MAX - 1));
    let full = windowed.forward_flops(1 << 40);
    assert!(finite_non_negative(full) && f > full);
    let model = windowed.cost_model(Training::Trained).unwrap();
    for s in extreme_samples() {
        assert!(finite_non_negative(model.cost(&[&s]).vision));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Random LLM shapes up to the `u32` extremes: no panic (debug build),
    /// finite and non-negative FLOPs, monotone in the tokens and in every
    /// size field; `cost_model` errs only on the heads.
    #[test]
    fn llm_flops_are_finite_and_monotone(shape in llm(), t in tokens(), dt in tokens()) {
        let w = shape.weights();
        for bigger in [
            LlmShape { layers: shape.layers.saturating_add(1), ..shape },
            LlmShape { hidden: shape.hidden.saturating_add(1), ..shape },
            LlmShape { ffn: shape.ffn.saturating_add(1), ..shape },
            LlmShape { vocab: shape.vocab.saturating_add(1), ..shape },
        ] {
            prop_assert!(bigger.weights() >= w);
            prop_assert!(bigger.linear_flops_per_token() >= shape.linear_flops_per_token());
        }
        let (a, b) = (shape.training_flops(t), shape.training_flops(t.saturating_add(dt)));
        prop_assert!(finite_non_negative(a) && finite_non_negative(b) && b >= a, "{a} {b}");
        prop_assert!(finite_non_negative(shape.attention_flops_per_token_pair()));
        match shape.cost_model() {
            Ok(model) => {
                for s in extreme_samples() {
                    let c = model.cost(&[&s, &s, &s]);
                    prop_assert!(finite_non_negative(c.language) && c.vision == 0.0);
                    prop_assert!(c.language >= model.cost(&[&s]).language);
                }
            }
            Err(e) => {
                let bad_heads = shape.heads == 0 || shape.kv_heads == 0 || shape.kv_heads > shape.heads;
                prop_assert!(bad_heads, "{e}");
                let named = matches!(e, Error::Invalid { at: Locator::Setting { name: "heads" | "kv_heads", .. }, .. });
                prop_assert!(named, "{}", e);
            }
        }
    }

    /// Random ViT shapes up to the extremes: the same.
    #[test]
    fn vit_flops_are_finite_and_monotone(shape in vit(), t in tokens(), dt in tokens(), trained in any::<bool>()) {
        let (a, b) = (shape.forward_flops(t), shape.forward_flops(t.saturating_add(dt)));
        prop_assert!(finite_non_negative(a) && finite_non_negative(b) && b >= a, "{a} {b}");
        prop_assert!(finite_non_negative(shape.linear_flops_per_token()));
        let training = if trained { Training::Trained } else { Training::Frozen };
        match shape.cost_model(training) {
            Ok(model) => {
                for s in extreme_samples() {
                    let one = model.cost(&[&s]);
                    let two = model.cost(&[&s, &s]);
                    prop_assert!(finite_non_negative(one.vision) && one.language == 0.0);
                    prop_assert!(finite_non_negative(two.vision) && two.vision >= one.vision);
                }
            }
            Err(e) => prop_assert!(matches!(e, Error::Invalid { at: Locator::Setting { .. }, .. }), "{e}"),
        }
    }
}

// ---------------------------------------------------------------- calibration

/// Rows `(x, sum(c * x))` of exact linear data.
fn exact_rows(c: &[f64], xs: &[Vec<f64>]) -> Vec<(Vec<f64>, f64)> {
    xs.iter()
        .map(|x| (x.clone(), x.iter().zip(c).map(|(a, b)| a * b).sum()))
        .collect()
}

#[test]
fn calibration_fits_extreme_but_representable_magnitudes() {
    // Features of 1e300 for times of about 1: x / t was fine, but the
    // coefficient 1e-300 must come out exactly.
    let xs: Vec<Vec<f64>> = (1..=5).map(|i| vec![f64::from(i) * 1e300]).collect();
    let f = fit(&exact_rows(&[2e-300], &xs)).unwrap();
    assert!(rel(f.coefficients()[0], 2e-300) < 1e-12, "{f:?}");
    assert!(f.r_squared() > 1.0 - 1e-12 && f.max_relative_error() < 1e-12);

    // Features of 1e-300 for times of about 1: a coefficient of 1e300.
    let xs: Vec<Vec<f64>> = (1..=5).map(|i| vec![f64::from(i) * 1e-300]).collect();
    let f = fit(&exact_rows(&[3e300], &xs)).unwrap();
    assert!(rel(f.coefficients()[0], 3e300) < 1e-12, "{f:?}");

    // Mixed: one feature of 1e-300 next to one of 1e300 (before: the ratio
    // x / t of a row with a time of 1e-10 overflowed, "rank deficient").
    let xs: Vec<Vec<f64>> = (1..=6)
        .map(|i| vec![f64::from(i) * 1e-300, f64::from(i * i) * 1e300])
        .collect();
    let f = fit(&exact_rows(&[1e300, 1e-300], &xs)).unwrap();
    assert!(rel(f.coefficients()[0], 1e300) < 1e-9, "{f:?}");
    assert!(rel(f.coefficients()[1], 1e-300) < 1e-9, "{f:?}");
    assert!(f.r_squared().is_finite() && f.max_relative_error() < 1e-9);

    // Times from 1e-300 to 1e300 (the sums of squares of R^2 overflowed to
    // inf / inf = NaN before).
    let rows: Vec<([f64; 1], f64)> = [1e-300, 1e-100, 1.0, 1e100, 1e300]
        .iter()
        .map(|&t| ([2.0 * t], t))
        .collect();
    let f = fit(&rows).unwrap();
    assert!(rel(f.coefficients()[0], 0.5) < 1e-12, "{f:?}");
    assert!(f.r_squared() > 1.0 - 1e-12, "{}", f.r_squared());
    assert!(f.max_relative_error() < 1e-12);

    // Noisy times at 1e300: R^2 finite and below 1.
    let rows = [([1e300], 1e300), ([2e300], 1.9e300), ([3e300], 3.2e300)];
    let f = fit(&rows).unwrap();
    assert!(f.r_squared().is_finite() && f.r_squared() < 1.0 && f.r_squared() > 0.9);
    assert!(f.coefficients()[0].is_finite());
}

#[test]
fn calibration_refuses_coefficients_beyond_f64() {
    // Features of 1e-300, times of 1e300: a coefficient of 1e600 (before:
    // reported as rank deficiency, as x / t underflowed to zero).
    let rows = [([1e-300], 1e300), ([2e-300], 2e300), ([3e-300], 3e300)];
    let err = fit(&rows).unwrap_err();
    let Error::CoefficientRange {
        feature,
        row,
        exponent,
        ..
    } = err
    else {
        panic!("{err:?}")
    };
    assert_eq!(feature, 0);
    assert!((599..=601).contains(&exponent), "{exponent}");
    assert!(row < 3);
    let msg = err.to_string();
    assert!(
        msg.contains("calibration feature 0 needs a coefficient of about 1e600"),
        "{msg}"
    );
    assert!(msg.contains("too small for the times"), "{msg}");
    assert!(msg.contains("measure the feature in larger units"), "{msg}");

    // Features of 1e300, times of 1e-300: a coefficient of 1e-600 (before:
    // x / t overflowed to infinity, reported as rank deficiency).
    let rows = [
        ([1e300, 1.0], 1e-300),
        ([2e300, 1.0], 2e-300),
        ([3e300, 2.0], 3e-300),
    ];
    let err = fit(&rows).unwrap_err();
    assert!(
        matches!(
            err,
            Error::CoefficientRange {
                feature: 0,
                exponent: -601..=-599,
                ..
            }
        ),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains("too large for the times") && msg.contains("smaller units"),
        "{msg}"
    );
    assert!(msg.contains("feature 1e300, time"), "{msg}");
}

#[test]
fn calibration_tells_rank_deficiency_from_magnitudes() {
    // Genuinely dependent columns at extreme magnitudes: rank deficiency.
    let rows: Vec<([f64; 2], f64)> = (1..=4)
        .map(|i| {
            let x = f64::from(i) * 1e300;
            ([x, x * 1e-600], f64::from(i))
        })
        .collect();
    assert_eq!(fit(&rows).unwrap_err(), Error::RankDeficient { feature: 1 });
    // A feature zero in every row, next to a huge one.
    let rows = [
        ([1e308, 0.0], 1e-308),
        ([5e307, 0.0], 2e-308),
        ([1e307, 0.0], 1e-308),
    ];
    assert_eq!(fit(&rows).unwrap_err(), Error::RankDeficient { feature: 1 });
    // Independent columns of wildly different magnitudes are not deficient.
    let rows = [
        ([1e-300, 1e300], 1.0),
        ([2e-300, 1e300], 1.5),
        ([1e-300, 3e300], 2.0),
    ];
    let f = fit(&rows).unwrap();
    assert!(f.coefficients().iter().all(|c| c.is_finite() && *c >= 0.0));
}

#[test]
fn calibration_of_overflowing_terms_names_the_measurement() {
    // A term whose cost overflows to infinity is an invalid feature.
    let huge = Tokens::new(f64::MAX).unwrap();
    let one = Tokens::new(1.0).unwrap();
    let terms: [&dyn CostModel; 2] = [&one, &huge];
    let groups: Vec<Vec<Sample>> = (1..=4).map(|i| vec![Sample::text_only(i)]).collect();
    let err = fit_terms(&terms, groups.iter().map(|g| (g, 1.0))).unwrap_err();
    assert!(
        matches!(err, Error::Invalid { at: Locator::Measurement { row: 1, feature: Some(1) }, value: Scalar::Float(value), .. } if value.is_infinite()),
        "{err:?}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Any finite magnitudes: a finite fit (every coefficient, R^2 and
    /// error finite) or an error that names the cause, never a panic.
    #[test]
    fn calibration_results_are_finite_or_refused(
        rows in prop::collection::vec(
            (prop::collection::vec(prop_oneof![Just(0.0), 1e-300f64..1e-290, 0.5f64..2.0, 1e290f64..1e300], 2),
             prop_oneof![1e-300f64..1e-290, 0.5f64..2.0, 1e290f64..1e300]),
            3..8),
    ) {
        match fit(&rows) {
            Ok(f) => {
                prop_assert!(f.coefficients().iter().all(|c| c.is_finite() && *c >= 0.0), "{f:?}");
                prop_assert!(f.r_squared().is_finite() && f.r_squared() <= 1.0, "{f:?}");
                prop_assert!(f.max_relative_error().is_finite(), "{f:?}");
            }
            Err(e) => prop_assert!(
                matches!(e, Error::RankDeficient { .. } | Error::CoefficientRange { .. }),
                "{e}"
            ),
        }
    }

    /// Exact data scaled by any power of ten (features by `10^a`, times by
    /// `10^b`) fits the same coefficients scaled by `10^(b - a)`, or is
    /// refused exactly when that is beyond f64.
    #[test]
    fn calibration_is_scale_invariant(a in -300i32..300, b in -300i32..300) {
        let (sa, sb) = (10f64.powi(a), 10f64.powi(b));
        let truth = [2.0, 0.5];
        let rows: Vec<([f64; 2], f64)> = [(1.0, 1.0), (2.0, 1.0), (1.0, 3.0), (4.0, 2.0)]
            .iter()
            .map(|&(x, y)| ([x * sa, y * sa], (truth[0] * x + truth[1] * y) * sb))
            .collect();
        let want = 10f64.powi(b - a);
        match fit(&rows) {
            Ok(f) => {
                for (c, t) in f.coefficients().iter().zip(truth) {
                    prop_assert!(rel(*c, t * want) < 1e-9, "{f:?}");
                }
            }
            Err(e) => {
                prop_assert!(!(want * 2.0).is_normal() || !(want * 0.5).is_normal(), "{e}");
                let is_range = matches!(e, Error::CoefficientRange { .. });
                prop_assert!(is_range, "{e}");
            }
        }
    }
}

// ------------------------------------------------------------ InvalidCost

/// The planner's error for `samples` on one rank, sequences of 100 tokens.
fn refusal<M: Incremental>(model: M, samples: &[StepSample]) -> Error {
    Planner::new(model)
        .ranks(1)
        .seq_len(100)
        .plan(samples)
        .unwrap_err()
}

fn step(samples: &[Sample]) -> Vec<StepSample> {
    samples
        .iter()
        .enumerate()
        .map(|(i, s)| StepSample::new(i as u64, s.clone()))
        .collect()
}

/// The issue's example: vision -1 plus language 2 read "returned 1 ...
/// must be non-negative".
#[test]
fn invalid_cost_names_the_phase_and_its_value() {
    let model = sample_fn(|s: &Sample| {
        if s.text() == 3 {
            Phases::new(-1.0, 2.0)
        } else {
            Phases::new(0.0, 1.0)
        }
    });
    let samples = step(&[Sample::text_only(5), Sample::text_only(3)]);
    let err = refusal(model, &samples);
    assert_eq!(
        err,
        Error::Invalid {
            at: Locator::Cost {
                id: 1,
                phase: Phase::Vision
            },
            value: Scalar::Float(-1.0),
            reason: InvalidReason::Negative
        }
    );
    let msg = err.to_string();
    assert!(
        msg.starts_with("the cost model returned -1 in the vision phase for sample 1 alone"),
        "{msg}"
    );
    assert!(!msg.contains("returned 1 "), "{msg}");

    // NaN in the language phase, infinity from an overflowing coefficient.
    let nan = sample_fn(|_: &Sample| Phases::new(0.5, f64::NAN));
    let err = refusal(nan, &samples);
    assert!(
        matches!(err, Error::Invalid { at: Locator::Cost { id: 0, phase: Phase::Language }, value: Scalar::Float(value), .. } if value.is_nan())
    );
    let big = Tokens::new(f64::MAX).unwrap();
    let err = refusal(big, &samples);
    assert!(
        matches!(err, Error::Invalid { at: Locator::Cost { id: 0, phase: Phase::Language }, value: Scalar::Float(value), .. } if value.is_infinite())
    );
    assert!(
        err.to_string()
            .contains("returned inf in the language phase for sample 0"),
        "{err}"
    );
}

#[test]
fn costs_that_sum_beyond_f64_are_an_error() {
    // Each sample's cost is finite (0.9 * f64::MAX); two sum to infinity.
    let per_token = 0.9 * f64::MAX / 10.0;
    let samples = step(&[Sample::text_only(10), Sample::text_only(10)]);
    let err = refusal(Tokens::new(per_token).unwrap(), &samples);
    assert_eq!(
        err,
        Error::CostOverflow {
            phase: Some(Phase::Language),
            samples: 2
        }
    );
    let msg = err.to_string();
    assert!(
        msg.contains("the cost of 2 sample(s) together is beyond f64::MAX"),
        "{msg}"
    );
    assert!(
        msg.contains("in the language phase") && msg.contains("scale"),
        "{msg}"
    );

    // One sample, each phase finite, the sum over phases not.
    let both = sample_fn(|_: &Sample| Phases::new(0.9 * f64::MAX, 0.9 * f64::MAX));
    let err = refusal(both, &samples[..1]);
    assert_eq!(
        err,
        Error::CostOverflow {
            phase: None,
            samples: 1
        }
    );
    assert!(err.to_string().contains("over both phases"), "{err}");
}

/// A model of one's own whose floor breaks the law for the group of one.
#[derive(Debug)]
struct BadFloor;

impl CostModel for BadFloor {
    fn cost(&self, group: &[&Sample]) -> Phases {
        Phases::new(0.0, group.len() as f64)
    }
    fn floor(&self, _: &Sample) -> Phases {
        Phases::new(0.0, 2.0)
    }
}

impl Incremental for BadFloor {
    type State = usize;
    fn empty(&self) -> usize {
        0
    }
    fn insert(&self, state: &mut usize, _: &Sample) {
        *state += 1;
    }
    fn evaluate(&self, state: &usize) -> Phases {
        Phases::new(0.0, *state as f64)
    }
}

#[test]
fn a_floor_above_the_cost_alone_is_an_error() {
    let samples = step(&[Sample::text_only(5), Sample::text_only(3)]);
    let err = refusal(BadFloor, &samples);
    assert_eq!(
        err,
        Error::Invalid {
            at: Locator::Floor {
                id: 0,
                phase: Phase::Language,
                cost: 1.0
            },
            value: Scalar::Float(2.0),
            reason: InvalidReason::AboveCost
        }
    );
    let msg = err.to_string();
    assert!(
        msg.starts_with("the cost model's floor for sample 0 is 2 in the language phase, but its cost alone is 1"),
        "{msg}"
    );
    assert!(msg.contains("CostModel::floor"), "{msg}");
}

// ------------------------------------------------------------ floors and bounds

/// The example: with `PerGroup` the report's predicted time was
/// below its "lower bound", which summed each sample's cost alone (the
/// per-group cost once per sample).
#[test]
fn per_group_bound_is_a_bound() {
    let model = Tokens::new(1.0).unwrap() + PerGroup::new(50.0).unwrap();
    let samples = step(&vec![Sample::text_only(100); 8]);
    for sync in SyncModel::ALL {
        let plan = Planner::new(model)
            .ranks(2)
            .seq_len(1024)
            .sync(sync)
            .plan(&samples)
            .unwrap();
        let r = plan.report();
        // One sequence of 4 samples per rank: 400 + 50. The old bound was
        // (8 * 150) / 2 = 600 > 450. The floors, 800, and the one row (at
        // least) of the group floor: (800 + 50) / 2.
        assert_eq!(r.predicted, 450.0, "{sync}");
        assert_eq!(r.lower_bound, 425.0, "{sync}");
        assert!(r.baseline >= r.lower_bound);
    }
}

fn image() -> impl Strategy<Value = Image> {
    (0u32..3000, 1u32..5)
        .prop_map(|(tokens, units)| Image::with_units(tokens, NonZeroU32::new(units).unwrap()))
}

fn sample() -> impl Strategy<Value = Sample> {
    (0u32..4000, prop::collection::vec(image(), 0..3))
        .prop_map(|(text, images)| Sample::new(text, images))
}

/// Every built-in model and combinator, as trait objects, with coefficients
/// from `c`.
fn zoo(c: [f64; 4]) -> Vec<(&'static str, Box<dyn CostModel>)> {
    let tokens = Tokens::new(c[0]).unwrap();
    let group = PerGroup::new(c[1]).unwrap();
    let full = FullAttention::new(c[2]).unwrap();
    let doc = DocumentAttention::new(c[3]).unwrap();
    let tile = PerTile::new(c[1], 256, Training::Trained).unwrap();
    let image = PerImage::new(c[2], c[3], 4, Training::Frozen).unwrap();
    let windowed = Windowed::new(c[0], c[1], 64, c[2], 4, Training::Trained).unwrap();
    let per_sample = PerSample::new(c[3]).unwrap();
    let longest = cost_fn(|g: &[&Sample]| {
        Phases::new(0.0, g.iter().map(|s| s.tokens()).max().unwrap_or(0) as f64)
    });
    let per_image = sample_fn(|s: &Sample| Phases::new(s.images().len() as f64, 0.5));
    vec![
        ("tokens", Box::new(tokens)),
        ("per sample", Box::new(per_sample)),
        ("per group", Box::new(group)),
        ("document attention", Box::new(doc)),
        ("full attention", Box::new(full)),
        ("per tile", Box::new(tile)),
        ("per image", Box::new(image)),
        ("windowed", Box::new(windowed)),
        ("zero", Box::new(Zero)),
        ("cost_fn", Box::new(longest)),
        ("sample_fn", Box::new(per_image)),
        ("sum", Box::new(tokens + group + full)),
        ("scale", Box::new((full + group).scale(c[0]).unwrap())),
        (
            "in phase",
            Box::new((tokens + group + windowed).in_phase(Phase::Vision)),
        ),
        ("max", Box::new(full.max(group))),
        ("max of group first", Box::new(group.max(tokens + doc))),
        (
            "max of sums",
            Box::new((tokens + group).max(per_sample + tile)),
        ),
        // The per-sample larger floor would break here: a long and a short
        // sample each take the larger side, the group only one.
        (
            "max of a fixed cost",
            Box::new(tokens.max(PerSample::new(c[0] * 2000.0).unwrap())),
        ),
        ("tuple", Box::new((tokens, group, image, per_sample))),
        ("reference", Box::new(&*Box::leak(Box::new(full)))),
        (
            "boxed",
            Box::new(Box::new(tokens + group) as Box<dyn CostModel>),
        ),
        ("preset", Box::new(Preset::Qwen25Vl7b.cost_model())),
        (
            "linear rows",
            Box::new(
                Linear::new([
                    (Term::VisionGroups, c[0]),
                    (Term::Groups, c[1]),
                    (Term::RowAttention, c[2]),
                    (Term::ImageTokens, c[3]),
                    (Term::Samples, c[0]),
                ])
                .unwrap(),
            ),
        ),
        (
            "dense preset",
            Box::new(Linear::preset_with(
                Preset::Qwen25Vl7b,
                microbatch::cost::AttentionKernel::Dense,
            )),
        ),
        (
            "preset + group",
            Box::new(Preset::InternVl25_8b.cost_model() + PerGroup::new(1e9).unwrap()),
        ),
        (
            "nested",
            Box::new(
                ((tokens + group).in_phase(Phase::Vision) + full.max(per_sample))
                    .scale(2.0)
                    .unwrap(),
            ),
        ),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// The floor law of `CostModel::floor` for every model and combinator:
    /// `cost(g) >= sum of floors over g`, phase by phase (up to rounding);
    /// and the law for the group of one, `floor(s) <= cost(&[s])`, exactly,
    /// as the planner checks it. With the group floor
    /// (`CostModel::group_floor`) added for a non-empty group: `cost(g) >=
    /// sum of floors + per_group + per_token_pair * (T^2 - sum of t^2)`.
    #[test]
    fn floors_are_floors(c in [coef(), coef(), coef(), coef()], g in prop::collection::vec(sample(), 0..10)) {
        let group: Vec<&Sample> = g.iter().collect();
        let tokens: u64 = g.iter().map(Sample::tokens).sum();
        let squares: u128 = g.iter().map(|s| u128::from(s.tokens()).pow(2)).sum();
        for (name, m) in zoo(c) {
            let cost = m.cost(&group);
            let mut floors: Phases = g.iter().map(|s| m.floor(s)).sum();
            let gf = m.group_floor();
            prop_assert!(Phase::ALL.into_iter().all(|p| {
                let (a, b) = (gf.per_group.get(p), gf.per_token_pair.get(p));
                a.is_finite() && a >= 0.0 && b.is_finite() && b >= 0.0
            }), "{name}: {gf:?}");
            if !g.is_empty() {
                floors += gf.beyond(tokens, squares);
            }
            for phase in Phase::ALL {
                let (a, b) = (cost.get(phase), floors.get(phase));
                prop_assert!(a >= b * (1.0 - 1e-12), "{name}: {phase} cost {a} < floors {b}");
            }
            for s in &g {
                let (alone, floor) = (m.cost(&[s]), m.floor(s));
                for phase in Phase::ALL {
                    prop_assert!(floor.get(phase) >= 0.0 && floor.get(phase) <= alone.get(phase), "{name}");
                }
            }
        }
    }
}

#[test]
fn additive_floors_are_the_costs_alone() {
    let s = Sample::new(
        300,
        [
            Image::new(700),
            Image::with_units(900, NonZeroU32::new(3).unwrap()),
        ],
    );
    for preset in Preset::ALL {
        let m = preset.cost_model();
        assert_eq!(m.floor(&s), m.cost(&[&s]), "{preset}");
    }
    let m =
        Tokens::new(2.0).unwrap() + FullAttention::new(1.0).unwrap() + PerGroup::new(7.0).unwrap();
    assert_eq!(m.floor(&s).language, 2.0 * 1900.0 + 1900.0 * 1900.0);
    assert_eq!(
        cost_fn(|_: &[&Sample]| Phases::new(1.0, 1.0)).floor(&s),
        Phases::ZERO
    );
    // A model of one's own gets the safe default.
    #[derive(Debug)]
    struct Mine;
    impl CostModel for Mine {
        fn cost(&self, g: &[&Sample]) -> Phases {
            Phases::new(0.0, g.len() as f64)
        }
    }
    assert_eq!(Mine.floor(&s), Phases::ZERO);
}

/// The group floor of every built-in model and combinator, by hand: the
/// cost per group and the row attention's coefficient where the model has
/// them, summed by sums and tuples, scaled, moved to a phase, the first
/// operand's of a maximum, nothing for the rest.
#[test]
fn group_floors_by_hand() {
    use microbatch::cost::{AttentionKernel, GroupFloor};
    let g =
        |v: f64, l: f64, pv: f64, pl: f64| GroupFloor::new(Phases::new(v, l), Phases::new(pv, pl));
    let (tokens, group, full) = (
        Tokens::new(2.0).unwrap(),
        PerGroup::new(3.0).unwrap(),
        FullAttention::new(0.5).unwrap(),
    );
    assert_eq!(tokens.group_floor(), GroupFloor::ZERO);
    assert_eq!(group.group_floor(), g(0.0, 3.0, 0.0, 0.0));
    assert_eq!(full.group_floor(), g(0.0, 0.0, 0.0, 0.5));
    assert_eq!((tokens + group + full).group_floor(), g(0.0, 3.0, 0.0, 0.5));
    assert_eq!((group, full, group).group_floor(), g(0.0, 6.0, 0.0, 0.5));
    assert_eq!(
        (group + full).scale(4.0).unwrap().group_floor(),
        g(0.0, 12.0, 0.0, 2.0)
    );
    assert_eq!(
        (group + full).scale(0.0).unwrap().group_floor(),
        GroupFloor::ZERO
    );
    assert_eq!(
        (group + full).in_phase(Phase::Vision).group_floor(),
        g(3.0, 0.0, 0.5, 0.0)
    );
    assert_eq!(group.max(full).group_floor(), g(0.0, 3.0, 0.0, 0.0));
    assert_eq!(tokens.max(group).group_floor(), GroupFloor::ZERO);
    assert_eq!(CostModel::group_floor(&&group), group.group_floor());
    let boxed: Box<dyn CostModel> = Box::new(group + full);
    assert_eq!(boxed.group_floor(), g(0.0, 3.0, 0.0, 0.5));
    assert_eq!((group + full).boxed().group_floor(), g(0.0, 3.0, 0.0, 0.5));
    for m in [&Zero as &dyn CostModel, &microbatch::cost::Given] {
        assert_eq!(m.group_floor(), GroupFloor::ZERO);
    }
    assert_eq!(
        cost_fn(|_: &[&Sample]| Phases::ZERO).group_floor(),
        GroupFloor::ZERO
    );
    assert_eq!(
        sample_fn(|_: &Sample| Phases::ZERO).group_floor(),
        GroupFloor::ZERO
    );
    let linear = Linear::new([
        (Term::VisionGroups, 0.25),
        (Term::Groups, 1.0),
        (Term::RowAttention, 1e-3),
        (Term::Tokens, 7.0),
    ])
    .unwrap();
    assert_eq!(linear.group_floor(), g(0.25, 1.0, 0.0, 1e-3));
    // The presets: varlen has no row term; dense has row attention.
    for preset in Preset::ALL {
        assert_eq!(preset.cost_model().group_floor(), GroupFloor::ZERO);
        assert_eq!(
            Linear::preset(preset).group_floor().per_token_pair,
            Phases::ZERO
        );
        let dense = Linear::preset_with(preset, AttentionKernel::Dense);
        let c = dense.coefficient(Term::RowAttention).unwrap();
        assert!(c > 0.0);
        assert_eq!(dense.group_floor().per_token_pair, Phases::new(0.0, c));
    }
}

fn check_bound<M: Incremental>(
    model: M,
    samples: &[StepSample],
    ranks: usize,
    per_step: usize,
) -> Result<(), TestCaseError> {
    for sync in SyncModel::ALL {
        let planner = Planner::new(&model)
            .ranks(ranks)
            .seq_len(16_384)
            .sequences_per_micro_step(per_step)
            .sync(sync);
        for plan in [planner.plan(samples), planner.baseline(samples)] {
            let plan = plan.map_err(|e| TestCaseError::fail(e.to_string()))?;
            let r = plan.report();
            prop_assert!(
                r.predicted >= r.lower_bound,
                "{sync}: {} < {}",
                r.predicted,
                r.lower_bound
            );
            prop_assert!(
                r.baseline >= r.lower_bound,
                "{sync}: {} < {}",
                r.baseline,
                r.lower_bound
            );
            prop_assert!(r.lower_bound >= 0.0 && r.lower_bound.is_finite());
        }
    }
    Ok(())
}

/// The classic bound, as the planner computed it before floors: from the
/// samples' costs alone.
fn classic_bound<M: Incremental>(
    model: &M,
    samples: &[StepSample],
    ranks: usize,
    sync: SyncModel,
) -> f64 {
    let costs: Vec<Phases> = samples
        .iter()
        .map(|s| model.evaluate_with(&model.empty(), s.sample()))
        .collect();
    let total: Phases = costs.iter().sum();
    let largest = costs.iter().map(Phases::total).fold(0.0, f64::max);
    let r = ranks as f64;
    match sync {
        SyncModel::Phase => total.vision / r + total.language / r,
        _ => f64::max(total.total() / r, largest),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// The report's predicted time (and the baseline's) is never below its
    /// lower bound, for every sync model, every preset, and models with
    /// costs per group and per packed sequence in the mix.
    #[test]
    fn predicted_is_never_below_the_bound(
        g in prop::collection::vec(sample(), 4..40),
        ranks in 1usize..4,
        per_step in 1usize..3,
        overhead in 0.0f64..1e12,
    ) {
        prop_assume!(g.len() >= ranks);
        let samples = step(&g);
        let per_group = PerGroup::new(overhead).unwrap();
        for preset in Preset::ALL {
            let m = preset.cost_model();
            check_bound(m, &samples, ranks, per_step)?;
            check_bound(m + per_group, &samples, ranks, per_step)?;
            check_bound(m.max(per_group.in_phase(Phase::Vision)), &samples, ranks, per_step)?;
            // The bound of the presets is at least the classic one (the
            // staircase of per-micro-step barriers can only raise it), or
            // the step time it exceeded by rounding only.
            for sync in SyncModel::ALL {
                let plan = Planner::new(m).ranks(ranks).seq_len(16_384).sync(sync).plan(&samples).unwrap();
                let r = plan.report();
                let classic = classic_bound(&m, &samples, ranks, sync);
                prop_assert!(r.lower_bound >= classic || r.lower_bound == r.predicted.min(r.baseline),
                    "{preset} {sync}: {} vs {classic}", r.lower_bound);
            }
        }
        let t = Tokens::new(1e-3).unwrap();
        let full = FullAttention::new(1e-9).unwrap();
        check_bound(t + per_group, &samples, ranks, per_step)?;
        check_bound(per_group, &samples, ranks, per_step)?;
        check_bound((t + full + per_group).in_phase(Phase::Vision) + t, &samples, ranks, per_step)?;
        check_bound(per_group.max(t + full), &samples, ranks, per_step)?;
        check_bound((full, per_group, PerSample::new(0.1).unwrap()), &samples, ranks, per_step)?;
        check_bound(sample_fn(|s: &Sample| Phases::new(s.images().len() as f64, 1.0)) + per_group, &samples, ranks, per_step)?;
    }
}

/// Fuzz findings: a model whose cost overflows to +inf, scaled by zero, or
/// a tile coefficient that overflows with the training factor, gave NaN
/// costs (inf * 0). Zero tiles or a zero factor cost zero.
#[test]
fn zero_times_an_overflowing_cost_is_zero() {
    let one = Sample::text_only(7);
    let scaled = Tokens::new(1e300).unwrap().scale(0.0).unwrap();
    assert_eq!(scaled.cost(&[&one]), Phases::ZERO);
    assert_eq!(scaled.floor(&one), Phases::ZERO);
    let tile = PerTile::new(8.99e307, 2216, Training::Trained).unwrap();
    assert_eq!(tile.cost(&[]), Phases::ZERO);
    assert_eq!(tile.cost(&[&one]), Phases::ZERO);
    let with_image = Sample::new(5, [Image::new(100)]);
    let c = tile.cost(&[&with_image]).vision;
    assert!(!c.is_nan() && c > 0.0, "{c}");
}

/// Fuzz finding: times at `f64::MAX` gave finite coefficients whose
/// prediction of their own row overflowed; such a fit is refused.
#[test]
fn fits_that_predict_beyond_f64_max_are_refused() {
    let rows = [([9.5], f64::MAX), ([7.136598626711964e-308], 1e15)];
    let err = fit(&rows).unwrap_err();
    assert!(
        matches!(err, Error::PredictionOverflow { row: 0, time } if time == f64::MAX),
        "{err:?}"
    );
    assert!(err.to_string().contains("larger units"), "{err}");
    // Large times within range fit.
    let rows = [([9.5], 1e300), ([7.136598626711964e-308], 1e15)];
    let f = fit(&rows).unwrap();
    assert!(rows.iter().all(|(x, _)| f.predict(x).is_finite()));
}

//! Composition laws of the cost models, as properties over bounded random
//! groups: a sum costs the sum of its terms, scaling scales, `Zero` is the
//! identity, a per-sample model's group cost is the sum of its samples' own
//! costs, incremental states agree with the group cost, and costs grow with
//! tokens.

use core::num::NonZeroU32;

use microbatch::cost::{
    cost_fn, sample_fn, CostModel, DocumentAttention, FullAttention, Image, Incremental, PerGroup,
    PerImage, PerSample, PerTile, Phase, Phases, Sample, Tokens, Training, Windowed, Zero,
};
use microbatch::{Error, Locator};
use proptest::prelude::*;

use crate::common::cost::{coef, refs};
use crate::common::float::close;

// ---------------------------------------------------------------- strategies

fn image() -> impl Strategy<Value = Image> {
    (0u32..6000, 1u32..9)
        .prop_map(|(tokens, units)| Image::with_units(tokens, NonZeroU32::new(units).unwrap()))
}

fn sample() -> impl Strategy<Value = Sample> {
    (0u32..20_000, prop::collection::vec(image(), 0..4))
        .prop_map(|(text, images)| Sample::new(text, images))
}

fn group() -> impl Strategy<Value = Vec<Sample>> {
    prop::collection::vec(sample(), 0..12)
}

/// Every built-in model with coefficients from `c`, as trait objects.
fn zoo(c: [f64; 4]) -> Vec<Box<dyn CostModel>> {
    vec![
        Box::new(Tokens::new(c[0]).unwrap()),
        Box::new(PerSample::new(c[1]).unwrap()),
        Box::new(PerGroup::new(c[2]).unwrap()),
        Box::new(DocumentAttention::new(c[3]).unwrap()),
        Box::new(FullAttention::new(c[0]).unwrap()),
        Box::new(PerTile::new(c[1], 256, Training::Trained).unwrap()),
        Box::new(PerImage::new(c[2], c[3], 4, Training::Frozen).unwrap()),
        Box::new(Windowed::new(c[0], c[1], 64, c[2], 4, Training::Trained).unwrap()),
    ]
}

fn close_phases(a: Phases, b: Phases) -> bool {
    close(a.vision, b.vision) && close(a.language, b.language)
}

/// The group as the borrowed slice that `CostModel::cost` takes.
/// The state of a group, sample by sample.
fn state_of<'a, C: Incremental>(
    model: &C,
    group: impl IntoIterator<Item = &'a Sample>,
) -> C::State {
    let mut state = model.empty();
    for s in group {
        model.insert(&mut state, s);
    }
    state
}

fn finite_non_negative(p: Phases) -> bool {
    p.vision.is_finite() && p.language.is_finite() && p.vision >= 0.0 && p.language >= 0.0
}

/// The law of a model whose group cost is a sum over its samples: the
/// group's cost is the sum of every sample's own cost, as the planner
/// evaluates it (`evaluate_with` on the empty state).
fn per_sample_law<C: Incremental + core::fmt::Debug>(
    model: &C,
    group: &[&Sample],
) -> Result<(), TestCaseError> {
    let own = |s: &Sample| model.evaluate_with(&model.empty(), s);
    let sum: Phases = group.iter().map(|s| own(s)).sum();
    let cost = model.cost(group);
    prop_assert!(
        close_phases(sum, cost),
        "{:?}: {:?} != {:?}",
        model,
        sum,
        cost
    );
    for &s in group {
        prop_assert_eq!(own(s), model.cost(&[s]));
    }
    Ok(())
}

/// The `Incremental` laws on one model: the state of a group evaluates to its
/// cost, in any insertion order, and `evaluate_with` is insert-then-evaluate
/// without touching the state.
fn incremental_laws<C: Incremental>(model: &C, group: &[&Sample]) -> Result<(), TestCaseError> {
    let cost = model.cost(group);
    let state = state_of(model, group.iter().copied());
    prop_assert!(finite_non_negative(cost));
    prop_assert_eq!(model.evaluate(&state), cost);
    prop_assert_eq!(
        model.evaluate(&state_of(model, group.iter().rev().copied())),
        cost
    );
    if let Some((last, head)) = group.split_last() {
        let s = state_of(model, head.iter().copied());
        prop_assert_eq!(model.evaluate_with(&s, last), cost);
        prop_assert_eq!(model.evaluate(&s), model.cost(head));
    }
    Ok(())
}

// ---------------------------------------------------------------- properties

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn built_in_costs_are_finite_and_non_negative(c in [coef(), coef(), coef(), coef()], g in group()) {
        let g = refs(&g);
        for (i, m) in zoo(c).iter().enumerate() {
            prop_assert!(finite_non_negative(m.cost(&g)), "model {}", i);
        }
        prop_assert_eq!(Tokens::new(c[0]).unwrap().cost(&[]), Phases::ZERO);
    }

    #[test]
    fn cost_of_a_sum_is_the_sum_of_costs(c in [coef(), coef(), coef(), coef()], g in group()) {
        let g = refs(&g);
        let models = zoo(c);
        for a in &models {
            for b in &models {
                let sum = a.plus(b).cost(&g);
                prop_assert_eq!(sum, a.cost(&g) + b.cost(&g));
                prop_assert_eq!((a, b).cost(&g), sum);
            }
        }
        let (t, d) = (Tokens::new(c[0]).unwrap(), DocumentAttention::new(c[1]).unwrap());
        prop_assert_eq!((t + d).cost(&g), t.cost(&g) + d.cost(&g));
        let all: Phases = models.iter().map(|m| m.cost(&g)).sum();
        let tuple = (&models[0], &models[1], &models[2], &models[3], &models[4], &models[5], &models[6], &models[7]);
        prop_assert!(close_phases(tuple.cost(&g), all));
    }

    #[test]
    fn scaling_scales(c in [coef(), coef(), coef(), coef()], k in 0.0f64..100.0, g in group()) {
        let g = refs(&g);
        for m in zoo(c) {
            let scaled = (&m).scale(k).unwrap();
            prop_assert_eq!(scaled.cost(&g), m.cost(&g) * k);
            prop_assert_eq!((&m).scale(1.0).unwrap().cost(&g), m.cost(&g));
        }
    }

    #[test]
    fn zero_is_the_identity(c in [coef(), coef(), coef(), coef()], g in group()) {
        let g = refs(&g);
        for m in zoo(c) {
            prop_assert_eq!((&m).plus(Zero).cost(&g), m.cost(&g));
            prop_assert_eq!(Zero.plus(&m).cost(&g), m.cost(&g));
        }
        prop_assert_eq!(Zero.cost(&g), Phases::ZERO);
    }

    #[test]
    fn in_phase_moves_the_total(c in [coef(), coef(), coef(), coef()], g in group()) {
        let g = refs(&g);
        for m in zoo(c) {
            for phase in Phase::ALL {
                let placed = (&m).in_phase(phase).cost(&g);
                prop_assert_eq!(placed.get(phase), m.cost(&g).total());
                prop_assert_eq!(placed.total(), m.cost(&g).total());
            }
        }
    }

    #[test]
    fn max_is_the_larger_side(c in [coef(), coef(), coef(), coef()], g in group()) {
        let g = refs(&g);
        let models = zoo(c);
        for a in &models {
            for b in &models {
                let (x, y, m) = (a.cost(&g), b.cost(&g), a.max(b).cost(&g));
                for p in Phase::ALL {
                    prop_assert!(m.get(p) >= x.get(p) && m.get(p) >= y.get(p));
                    prop_assert!(m.get(p) == x.get(p) || m.get(p) == y.get(p));
                }
            }
        }
    }

    #[test]
    fn per_sample_group_cost_is_the_sum_of_sample_costs(c in [coef(), coef(), coef(), coef()], g in group()) {
        let g = refs(&g);
        per_sample_law(&Tokens::new(c[0]).unwrap(), &g)?;
        per_sample_law(&PerSample::new(c[1]).unwrap(), &g)?;
        per_sample_law(&DocumentAttention::new(c[2]).unwrap(), &g)?;
        per_sample_law(&PerTile::new(c[3], 256, Training::Trained).unwrap(), &g)?;
        per_sample_law(&PerImage::new(c[0], c[1], 4, Training::Frozen).unwrap(), &g)?;
        per_sample_law(&Windowed::new(c[1], c[2], 64, c[3], 4, Training::Trained).unwrap(), &g)?;
        let composed = (Tokens::new(c[0]).unwrap() + DocumentAttention::new(c[1]).unwrap())
            .scale(c[2]).unwrap()
            .plus(PerTile::new(c[3], 576, Training::Frozen).unwrap().in_phase(Phase::Language))
            .plus(Zero);
        per_sample_law(&composed, &g)?;
        per_sample_law(&(Tokens::new(c[0]).unwrap(), PerSample::new(c[1]).unwrap()), &g)?;
        let f = sample_fn(|s: &Sample| Phases::new(s.images().len() as f64, 0.5));
        let sum: Phases = g.iter().map(|s| f.evaluate_with(&f.empty(), s)).sum();
        prop_assert_eq!(f.cost(&g), sum);
    }

    #[test]
    fn incremental_states_agree_with_group_costs(c in [coef(), coef(), coef(), coef()], g in group()) {
        let g = refs(&g);
        incremental_laws(&Tokens::new(c[0]).unwrap(), &g)?;
        incremental_laws(&PerSample::new(c[1]).unwrap(), &g)?;
        incremental_laws(&PerGroup::new(c[2]).unwrap(), &g)?;
        incremental_laws(&DocumentAttention::new(c[3]).unwrap(), &g)?;
        incremental_laws(&FullAttention::new(c[0]).unwrap(), &g)?;
        incremental_laws(&PerTile::new(c[1], 256, Training::Trained).unwrap(), &g)?;
        incremental_laws(&PerImage::new(c[2], c[3], 4, Training::Frozen).unwrap(), &g)?;
        incremental_laws(&Windowed::new(c[0], c[1], 64, c[2], 4, Training::Trained).unwrap(), &g)?;
        let composed = (Tokens::new(c[0]).unwrap() + FullAttention::new(c[1]).unwrap())
            .max(PerGroup::new(c[2]).unwrap().in_phase(Phase::Vision))
            .scale(c[3]).unwrap()
            .plus((Zero, PerSample::new(c[0]).unwrap()));
        incremental_laws(&composed, &g)?;
        incremental_laws(&&composed, &g)?;
    }

    #[test]
    fn costs_grow_with_tokens(
        c in [coef(), coef(), coef(), coef()],
        g in prop::collection::vec(sample(), 1..12),
        which in any::<prop::sample::Index>(),
        extra_text in 0u32..5000,
        extra_image in 0u32..5000,
    ) {
        let i = which.index(g.len());
        let mut bigger = g.clone();
        let g_refs = refs(&g);
        let s = &g[i];
        let mut images: Vec<Image> = s.images().to_vec();
        if let Some(first) = images.first_mut() {
            *first = Image::with_units(first.tokens() + extra_image, NonZeroU32::new(first.units()).unwrap());
        }
        bigger[i] = Sample::new(s.text() + extra_text, images);
        for (k, m) in zoo(c).iter().enumerate() {
            let (before, after) = (m.cost(&g_refs), m.cost(&refs(&bigger)));
            prop_assert!(after.vision >= before.vision && after.language >= before.language,
                "model {}: {:?} -> {:?}", k, before, after);
        }
    }
}

// ---------------------------------------------------------------- examples

#[test]
fn constructors_reject_nan_infinite_and_negative_coefficients() {
    for bad in [
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        -1.0,
        -f64::MIN_POSITIVE,
    ] {
        let errors = [
            Tokens::new(bad).map(|_| ()),
            PerSample::new(bad).map(|_| ()),
            PerGroup::new(bad).map(|_| ()),
            DocumentAttention::new(bad).map(|_| ()),
            FullAttention::new(bad).map(|_| ()),
            PerTile::new(bad, 256, Training::Frozen).map(|_| ()),
            PerImage::new(1.0, bad, 4, Training::Frozen).map(|_| ()),
            Windowed::new(1.0, 1.0, 64, bad, 4, Training::Frozen).map(|_| ()),
            Tokens::new(1.0).unwrap().scale(bad).map(|_| ()),
        ];
        for e in errors {
            assert!(
                matches!(
                    e,
                    Err(Error::Invalid {
                        at: Locator::Coefficient { .. },
                        ..
                    })
                ),
                "{bad}: {e:?}"
            );
        }
    }
    let err = PerImage::new(1.0, -2.0, 4, Training::Frozen).unwrap_err();
    assert_eq!(
        err.to_string(),
        "the coefficient `per_patch_pair` is negative (-2); coefficients must be finite and non-negative"
    );
    let err = Tokens::new(f64::NAN).unwrap_err();
    assert_eq!(
        err.to_string(),
        "the coefficient `per_token` is NaN (NaN); coefficients must be finite and non-negative"
    );
    let err = Tokens::new(1.0).unwrap().scale(f64::INFINITY).unwrap_err();
    assert!(err
        .to_string()
        .starts_with("the coefficient `factor` is infinite"));
    // Zero and the largest finite value are fine.
    assert!(Tokens::new(0.0).is_ok() && Tokens::new(f64::MAX).is_ok() && Tokens::new(-0.0).is_ok());
}

#[test]
fn shape_counts_must_be_positive() {
    let err = PerTile::new(1.0, 0, Training::Frozen).unwrap_err();
    assert_eq!(
        err.to_string(),
        "the setting `tokens_per_tile` is 0; it must be at least 1"
    );
    assert!(matches!(
        Windowed::new(1.0, 1.0, 0, 1.0, 4, Training::Frozen),
        Err(Error::Invalid {
            at: Locator::Setting { name: "window", .. },
            ..
        })
    ));
    assert!(matches!(
        PerImage::new(1.0, 1.0, 0, Training::Frozen),
        Err(Error::Invalid {
            at: Locator::Setting {
                name: "patches_per_token",
                ..
            },
            ..
        })
    ));
}

#[test]
fn debug_prints_the_composition_flat() {
    let model = Tokens::new(2e-5).unwrap()
        + DocumentAttention::new(3e-10).unwrap()
        + PerTile::new(0.004, 256, Training::Trained)
            .unwrap()
            .in_phase(Phase::Vision);
    assert_eq!(
        format!("{model:?}"),
        "Tokens { per_token: 2e-5 } + DocumentAttention { per_token_pair: 3e-10 } + \
         vision(PerTile { per_tile: 0.004, tokens_per_tile: 256, training: Trained })"
    );
    let nested = (Tokens::new(1.0).unwrap() + Zero)
        .scale(2.0)
        .unwrap()
        .max(cost_fn(|_: &[&Sample]| Phases::ZERO));
    assert_eq!(
        format!("{nested:?}"),
        "max(2.0 * (Tokens { per_token: 1.0 } + Zero), cost_fn)"
    );
}

#[test]
fn hand_computed_costs() {
    let s = Sample::new(
        100,
        [
            Image::new(300),
            Image::with_units(1000, NonZeroU32::new(3).unwrap()),
        ],
    );
    assert_eq!(s.tokens(), 1400);
    // PerTile: ceil(300/256) = 2 tiles, max(3, ceil(1000/256) = 4) = 4 tiles.
    let tiles = PerTile::new(1.0, 256, Training::Frozen).unwrap();
    assert_eq!(tiles.cost(&[&s]).vision, 6.0);
    // PerImage, 4 patches per token: 1200 patches; 4000 patches in units of
    // 1336, 1332, 1332 (1000 tokens = 334 + 333 + 333).
    let image = PerImage::new(0.0, 1.0, 4, Training::Trained).unwrap();
    let squares = 1200.0f64 * 1200.0 + 1336.0 * 1336.0 + 2.0 * 1332.0 * 1332.0;
    assert_eq!(image.cost(&[&s]).vision, 3.0 * squares);
    // Windowed, windows of 64: 1200 = 18 * 64 + 48; 1336 = 20 * 64 + 56; 1332 = 20 * 64 + 52.
    let windows = Windowed::new(0.0, 1.0, 64, 0.0, 4, Training::Frozen).unwrap();
    let w = 18.0 * 4096.0
        + 48.0 * 48.0
        + 20.0 * 4096.0
        + 56.0 * 56.0
        + 2.0 * (20.0 * 4096.0 + 52.0 * 52.0);
    assert_eq!(windows.cost(&[&s]).vision, w);
    // Full attention over a pack vs document mask.
    let pack = [&s, &Sample::text_only(600)];
    assert_eq!(
        FullAttention::new(1.0).unwrap().cost(&pack).language,
        2000.0 * 2000.0
    );
    assert_eq!(
        DocumentAttention::new(1.0).unwrap().cost(&pack).language,
        1400.0 * 1400.0 + 600.0 * 600.0
    );
    assert_eq!(PerGroup::new(7.0).unwrap().cost(&pack).language, 7.0);
    assert_eq!(PerSample::new(7.0).unwrap().cost(&pack).language, 14.0);
}

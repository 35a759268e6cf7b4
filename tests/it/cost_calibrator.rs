//! Online calibration (`Term`, `Linear`, `Calibrator`): every preset is a
//! `Linear` of the same costs; the calibrator recovers known coefficients
//! from noisy timings with outliers (per phase and in total), flags the
//! outliers, forgets rows beyond its window, falls back until the terms are
//! identified, measures drift, is deterministic; and the closed loop (plan
//! with the calibrator's model, measure under a hidden truth, refit) plans
//! within 1% of planning with the truth from the third step on.

use std::num::NonZeroU32;

use crate::common::cost::refs;
use crate::common::TestRng;
use microbatch::cost::{
    Calibrator, CostModel, Fallback, Image, Incremental, Linear, Phases, Preset, Sample, Term,
    Timing,
};
use microbatch::{Error, Locator};
use proptest::prelude::*;

fn nz(x: u32) -> NonZeroU32 {
    NonZeroU32::new(x).unwrap()
}

/// A random sample: text, 0 to 3 images of 16 to 2000 tokens in 1 to 4 units.
fn sample(rng: &mut TestRng) -> Sample {
    let text = 20 + rng.below(3000) as u32;
    let images = rng.below(4);
    Sample::new(
        text,
        (0..images).map(|_| {
            let tokens = 16 + rng.below(2000) as u32;
            Image::with_units(tokens, nz(1 + rng.below(4) as u32))
        }),
    )
}

/// A random group of 1 to 12 samples.
fn group(rng: &mut TestRng) -> Vec<Sample> {
    let n = 1 + rng.below(12) as usize;
    (0..n).map(|_| sample(rng)).collect()
}

/// The truth of the recovery tests: InternVL's terms in seconds (vision at
/// 30% of 989 TFLOP/s, the LLM at 50%), with overheads.
fn truth_internvl(scale: f64) -> Linear {
    let preset = Linear::preset(Preset::InternVl25_8b);
    let c: Vec<f64> = preset
        .terms()
        .iter()
        .zip(preset.coefficients())
        .map(|(&t, &c)| {
            scale
                * match t {
                    Term::Images => 2e-3,
                    Term::Units => 1e-3,
                    Term::Samples => 1e-3,
                    Term::Groups => 20e-3,
                    Term::Tiles { .. } => c / (0.30 * 989e12),
                    _ => c / (0.50 * 989e12),
                }
        })
        .collect();
    preset.with_coefficients(&c).unwrap()
}

#[test]
fn presets_are_linear_models_of_the_same_costs() {
    let mut rng = TestRng::new(7);
    for preset in Preset::ALL {
        let (linear, flops) = (Linear::preset(preset), preset.cost_model());
        for _ in 0..300 {
            let g = group(&mut rng);
            let r = refs(&g);
            let (a, b) = (linear.cost(&r), flops.cost(&r));
            for (x, y) in [(a.vision, b.vision), (a.language, b.language)] {
                assert!(
                    (x - y).abs() <= 1e-12 * y.abs(),
                    "{preset}: {x} vs {y} for {g:?}"
                );
            }
            let f = linear.floor(&g[0]);
            let alone = linear.cost(&[&g[0]]);
            assert!(f.vision <= alone.vision && f.language <= alone.language);
        }
    }
}

#[test]
fn linear_state_is_the_group_cost_in_any_order() {
    let mut rng = TestRng::new(3);
    let model = truth_internvl(1.0);
    for _ in 0..100 {
        let mut g = group(&mut rng);
        let whole = model.cost(&refs(&g));
        rng.shuffle(&mut g);
        let mut state = model.empty();
        for s in &g {
            model.insert(&mut state, s);
        }
        assert_eq!(model.evaluate(&state), model.cost(&refs(&g)));
        assert!((model.evaluate(&state).total() - whole.total()).abs() <= 1e-12 * whole.total());
    }
}

#[test]
fn bad_coefficients_and_too_many_terms_are_refused() {
    assert!(matches!(
        Linear::new([(Term::Tokens, f64::NAN)]),
        Err(Error::Invalid {
            at: Locator::Coefficient {
                name: "language.tokens"
            },
            ..
        })
    ));
    let many = (1..=13).map(|t| {
        (
            Term::Tiles {
                tokens_per_tile: nz(t),
            },
            1.0,
        )
    });
    assert!(matches!(
        Linear::new(many),
        Err(Error::Invalid {
            at: Locator::Setting { name: "terms", .. },
            ..
        })
    ));
}

/// Rows of `truth` with multiplicative noise and 2% of rows slowed 2x:
/// (group, timing, slowed).
fn rows(truth: &Linear, n: usize, seed: u64, per_phase: bool) -> Vec<(Vec<Sample>, Timing, bool)> {
    let mut rng = TestRng::new(seed);
    (0..n)
        .map(|_| {
            let g = group(&mut rng);
            let exact = truth.cost(&refs(&g));
            let mut noisy = |x: f64| x * (1.0 + 0.03 * rng.normal()).max(0.5);
            let mut t = Phases::new(noisy(exact.vision), noisy(exact.language));
            let slow = rng.unit() < 0.02;
            if slow {
                t = t * 2.0;
            }
            let timing = if per_phase {
                Timing::Phases(t)
            } else {
                Timing::Total(t.total())
            };
            (g, timing, slow)
        })
        .collect()
}

/// Checks recovery (2,000 rows timed per phase, or 4,000 timed in total:
/// the total alone tells the phases' terms apart less well): every term's
/// effect on the mean time, `|c_hat - c| x mean(x_k)`, within 3% of the mean
/// time; every slowed row flagged, at most 2% of the clean ones.
///
/// The error is the estimator's, not the fit's (plain least squares on the
/// clean rows gives the same coefficients): `language.tokens`,
/// `language.document_attention` and `language.samples` are nearly
/// collinear, so one noisy window can trade one for another. Over 5,000
/// seeds the worst effect is 1.9% (per phase, 2,000 rows) and 1.6% (total,
/// 4,000 rows); at 600 rows per phase 5 seeds in 5,000 exceeded 3% (3.8% at
/// worst), one of them in CI: kept as `per_phase_recovery_of_a_seed_that_failed_at_600_rows`.
fn check_recovery(seed: u64, per_phase: bool) -> Result<(), TestCaseError> {
    let truth = truth_internvl(1.0);
    let n = if per_phase { 2000 } else { 4000 };
    let data = rows(&truth, n, seed, per_phase);
    let mut c = Calibrator::new(Linear::preset(Preset::InternVl25_8b));
    for (g, t, _) in &data {
        c.observe(g, *t).unwrap();
    }
    let status = c.refit().clone();
    prop_assert!(status.fitted(), "{:?}", status.fallback());
    let fitted = status.model();
    let mean_time = data.iter().map(|(_, t, _)| t.total()).sum::<f64>() / data.len() as f64;
    for (k, &term) in truth.terms().iter().enumerate() {
        let one = Linear::new([(term, 1.0)]).unwrap();
        let mean_x = data
            .iter()
            .map(|(g, _, _)| one.cost(&refs(g)).total())
            .sum::<f64>()
            / data.len() as f64;
        let effect = (fitted.coefficients()[k] - truth.coefficients()[k]).abs() * mean_x;
        prop_assert!(
            effect <= 0.03 * mean_time,
            "{term}: effect error {:.4} of the mean time ({} vs {})",
            effect / mean_time,
            fitted.coefficients()[k],
            truth.coefficients()[k]
        );
    }
    let slowed: Vec<usize> = (0..data.len()).filter(|&i| data[i].2).collect();
    let rejected = status.rejected();
    for i in &slowed {
        prop_assert!(rejected.contains(i), "slowed row {i} not flagged");
    }
    let clean_flagged = rejected.len() - slowed.len();
    // 3.5 robust standard deviations of Gaussian noise flag about 2 clean
    // rows in 2,000 (two equations a row): 2% is far in the tail, and a rejection rule that flags
    // the noise fails.
    prop_assert!(
        clean_flagged * 50 <= data.len(),
        "{clean_flagged} clean rows flagged"
    );
    Ok(())
}

/// The seed of the property test below that failed in CI when it ran 600
/// rows per phase (`language.tokens` off by 3.25% of the mean time).
#[test]
fn per_phase_recovery_of_a_seed_that_failed_at_600_rows() {
    check_recovery(416_548_230_817, true).unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    #[test]
    fn recovers_per_phase_coefficients(seed in 0u64..1 << 40) {
        check_recovery(seed, true)?;
    }

    #[test]
    fn recovers_total_coefficients(seed in 0u64..1 << 40) {
        check_recovery(seed, false)?;
    }
}

#[test]
fn the_window_forgets_old_rows_and_tracks_a_change() {
    let (old, new) = (truth_internvl(1.0), truth_internvl(1.5));
    let mut c = Calibrator::new(Linear::preset(Preset::InternVl25_8b)).window(300);
    for (g, t, _) in rows(&old, 600, 1, true) {
        c.observe(&g, t).unwrap();
    }
    assert_eq!(c.rows(), 300);
    c.refit();
    for (g, t, _) in rows(&new, 300, 2, true) {
        c.observe(&g, t).unwrap();
    }
    // The old model predicts 1/1.5 of the new times.
    assert!((c.drift().bias + 1.0 / 3.0).abs() < 0.02, "{:?}", c.drift());
    let status = c.refit().clone();
    assert!((status.drift().bias + 1.0 / 3.0).abs() < 0.02);
    // Only new rows remain: the fit predicts the new truth.
    let mut rng = TestRng::new(9);
    for _ in 0..50 {
        let g = group(&mut rng);
        let (a, b) = (
            status.model().cost(&refs(&g)).total(),
            new.cost(&refs(&g)).total(),
        );
        assert!((a / b - 1.0).abs() < 0.05, "{a} vs {b}");
    }
}

#[test]
fn falls_back_until_the_terms_are_identified() {
    let truth = truth_internvl(1.0);
    let preset = Linear::preset(Preset::InternVl25_8b);
    let mut c = Calibrator::new(preset);
    assert_eq!(c.calibration().fallback(), Some(&Fallback::NotRefitted));
    let data = rows(&truth, 5, 4, true);
    for (g, t, _) in &data {
        c.observe(g, *t).unwrap();
    }
    let status = c.refit();
    assert!(matches!(
        status.fallback(),
        Some(Fallback::TooFewRows { .. })
    ));
    assert_eq!(*status.model(), preset);
    assert_eq!(c.model(), preset);
    // A term never seen is not identified, and gets zero.
    let mut c = Calibrator::new(preset);
    let text_only: Vec<Vec<Sample>> = (1..60u32)
        .map(|i| vec![Sample::text_only(100 * i), Sample::text_only(7 * i * i)])
        .collect();
    for g in &text_only {
        let t = truth.cost(&refs(g));
        c.observe(g, Timing::Phases(t)).unwrap();
    }
    let status = c.refit();
    assert!(status.fitted());
    let tiles = Term::Tiles {
        tokens_per_tile: nz(256),
    };
    assert!(!status.identified(tiles));
    assert_eq!(status.model().coefficient(tiles), Some(0.0));
    assert!(status.identified(Term::Tokens));
}

#[test]
fn bad_times_name_the_phase_and_store_nothing() {
    let mut c = Calibrator::new(Linear::preset(Preset::Llava15_7b));
    let g = [Sample::text_only(10)];
    for (t, phase) in [
        (
            Timing::Phases(Phases::new(-1.0, 1.0)),
            Some(microbatch::cost::Phase::Vision),
        ),
        (
            Timing::Phases(Phases::new(1.0, f64::INFINITY)),
            Some(microbatch::cost::Phase::Language),
        ),
        (Timing::Total(f64::NAN), None),
    ] {
        match c.observe(&g, t) {
            Err(Error::Invalid {
                at: Locator::Timing { phase: p },
                ..
            }) => assert_eq!(p, phase),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(c.rows(), 0);
    let msg = c.observe(&g, Timing::Total(-2.0)).unwrap_err().to_string();
    assert_eq!(
        msg,
        "the measured time is negative (-2); times must be finite and non-negative"
    );
}

#[test]
fn refits_are_deterministic() {
    let truth = truth_internvl(1.0);
    let data = rows(&truth, 400, 11, true);
    let run = || {
        let mut c = Calibrator::new(Linear::preset(Preset::InternVl25_8b)).window(350);
        for (g, t, _) in &data {
            c.observe(g, *t).unwrap();
        }
        c.refit().clone()
    };
    assert_eq!(run(), run());
}

#[cfg(feature = "scenarios")]
use crate::examples::sim;

/// The loop closes: from the third step on, planning with the calibrator's
/// model is within 1% of planning with the hidden truth (truth step time
/// over the truth's lower bound), every scenario, 8 ranks.
#[cfg(feature = "scenarios")]
#[test]
fn the_closed_loop_plans_within_one_percent_of_the_truth() {
    use microbatch::scenario::Scenario;
    for scenario in Scenario::ALL {
        let steps = sim::run(scenario, 8, 20, 1, 0.03, 0.02).unwrap();
        for (i, s) in steps.iter().enumerate().skip(2) {
            assert!(
                s.calibrated <= 1.01 * s.truth,
                "{scenario} step {}: calibrated {} vs truth {}",
                i + 1,
                s.calibrated,
                s.truth
            );
        }
        // The uncalibrated preset is worse on average (the test would not
        // show anything otherwise).
        let mean = |f: fn(&sim::Step) -> f64| steps.iter().map(f).sum::<f64>() / steps.len() as f64;
        assert!(mean(|s| s.preset) >= mean(|s| s.calibrated), "{scenario}");
    }
}

/// The truth of the bench-shaped tests: the per-phase coefficients a fit
/// of `python/benches/bench_hf_vlm.py`'s rows gave (a 2-layer Qwen2-VL of
/// width 64 on one CPU thread, sdpa attention, seconds): fixed costs per
/// row of 4.8 ms (vision) and 9 ms (language) next to rows of 10 to 80 ms.
fn truth_bench() -> Linear {
    Linear::new([
        (Term::ImageTokens, 5e-6),
        (Term::UnitAttention, 1e-6),
        (Term::Images, 6e-4),
        (Term::VisionGroups, 4.8e-3),
        (Term::Tokens, 5e-6),
        (Term::RowAttention, 5e-8),
        (Term::Samples, 8e-4),
        (Term::Groups, 9e-3),
    ])
    .unwrap()
}

/// A sample of the bench: 32 to 480 text tokens; 15% with 8 to 16 images,
/// 15% with one, each of `(2a x 2b) / 4` tokens for `a, b` in 2..=6.
fn bench_sample(rng: &mut TestRng) -> Sample {
    let u = rng.unit();
    let count = if u < 0.15 {
        8 + rng.below(9)
    } else if u < 0.3 {
        1
    } else {
        0
    };
    let images: Vec<Image> = (0..count)
        .map(|_| {
            let (a, b) = (2 * (2 + rng.below(5)), 2 * (2 + rng.below(5)));
            Image::new((a * b / 4) as u32)
        })
        .collect();
    Sample::new(32 + rng.below(449) as u32, images)
}

/// `n` rows shaped as the bench's: each one packed sequence of up to 1024
/// tokens holding 1 to 12 samples (the plans' rows are full, the users'
/// baseline's and the varied ones hold a few), timed per phase under
/// `truth` with `noise` relative Gaussian noise (the bench's rows repeat
/// within 0.2% to 9%), 2% of rows slowed 1.5x.
fn bench_rows(truth: &Linear, n: usize, seed: u64, noise: f64) -> Vec<(Vec<Sample>, Timing)> {
    let mut rng = TestRng::new(seed);
    (0..n)
        .map(|_| {
            let k = 1 + rng.below(12) as usize;
            let mut row: Vec<Sample> = Vec::new();
            let mut tokens = 0;
            for _ in 0..k {
                let s = bench_sample(&mut rng);
                if tokens + s.tokens() > 1024 {
                    break;
                }
                tokens += s.tokens();
                row.push(s);
            }
            if row.is_empty() {
                row.push(Sample::text_only(300));
            }
            let exact = truth.cost(&refs(&row));
            let mut noisy = |x: f64| x * (1.0 + noise * rng.normal()).max(0.5);
            let mut t = Phases::new(noisy(exact.vision), noisy(exact.language));
            if rng.unit() < 0.02 {
                t = t * 1.5;
            }
            (row, Timing::Phases(t))
        })
        .collect()
}

/// The worst relative error of `model`'s per-phase prediction against
/// `truth` on 200 fresh bench rows (noise-free).
fn worst_prediction(model: &Linear, truth: &Linear, seed: u64) -> Phases {
    let mut worst = Phases::ZERO;
    for (g, _) in bench_rows(truth, 200, seed, 0.0) {
        let (a, b) = (model.cost(&refs(&g)), truth.cost(&refs(&g)));
        worst.vision = worst.vision.max((a.vision / b.vision - 1.0).abs());
        worst.language = worst.language.max((a.language / b.language - 1.0).abs());
    }
    worst
}

/// The calibrator of `truth`'s terms (less `VisionGroups` unless
/// `vision_groups`) fitted to 400 bench rows of `seed` with 5% noise.
fn fit_bench(truth: &Linear, seed: u64, vision_groups: bool) -> microbatch::cost::Calibration {
    let terms = truth
        .terms()
        .iter()
        .filter(|&&t| vision_groups || t != Term::VisionGroups)
        .map(|&t| (t, 1e-6));
    let mut c = Calibrator::new(Linear::new(terms).unwrap());
    for (g, t) in bench_rows(truth, 400, seed, 0.05) {
        c.observe(&g, t).unwrap();
    }
    c.refit().clone()
}

/// Rows shaped like the bench's (the same samples, packed rows of 1 to 12
/// samples, fixed costs per row, 5% noise, 2% of rows slowed): over 8
/// seeds the fit predicts fresh rows within 7% (vision) and 12% (language)
/// and finds the vision tower's fixed cost per row within 5%. Over 40
/// seeds the worst were 4.5%, 8.2% and 1.4%: the noise's share of 400
/// rows of nearly collinear terms (plain NNLS on the same rows, without
/// pruning or rejection, does no better).
#[test]
fn recovers_bench_shaped_rows() {
    let truth = truth_bench();
    for seed in 0..8 {
        let status = fit_bench(&truth, seed, true);
        assert!(status.fitted(), "{:?}", status.fallback());
        let worst = worst_prediction(status.model(), &truth, 1000 + seed);
        assert!(
            worst.vision <= 0.07 && worst.language <= 0.12,
            "seed {seed}: worst prediction {worst:?} of {:?}",
            status.model()
        );
        let fixed = status.model().coefficient(Term::VisionGroups).unwrap();
        assert!(
            (fixed / 4.8e-3 - 1.0).abs() <= 0.05,
            "seed {seed}: vision.groups {fixed}"
        );
    }
}

/// Without `vision.groups` the vision terms cannot explain the bench's
/// rows (an image-less row's tower still takes 4.8 ms): the vision fit is
/// poor, but the language fit is as good as with it, since each phase is
/// fitted, judged and cleaned of outliers on its own rows. Fitted jointly
/// (one noise level, one outlier scale, for both phases), the language
/// prediction was off by up to 86% and `language.groups` was dropped.
#[test]
fn a_phase_its_terms_cannot_explain_does_not_spoil_the_other() {
    let truth = truth_bench();
    for seed in 0..4 {
        let status = fit_bench(&truth, seed, false);
        assert!(status.fitted(), "{:?}", status.fallback());
        let worst = worst_prediction(status.model(), &truth, 1000 + seed);
        assert!(
            worst.language <= 0.12,
            "seed {seed}: worst language prediction {} of {:?}",
            worst.language,
            status.model()
        );
        assert!(status.identified(Term::Groups), "seed {seed}");
        let with = fit_bench(&truth, seed, true);
        for term in [
            Term::Tokens,
            Term::RowAttention,
            Term::Samples,
            Term::Groups,
        ] {
            assert_eq!(
                status.model().coefficient(term),
                with.model().coefficient(term),
                "seed {seed}: {term}"
            );
        }
    }
}

//! Fuzz target `calibrator`: `cost::Linear` models over arbitrary terms and
//! a `cost::Calibrator` driven by an arbitrary sequence of observed rows
//! (hostile timings included) and refits, checking every promise of both
//! (see fuzz/README.md).
#![no_main]

use std::num::NonZeroU32;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use microbatch::cost::{
    Calibrator, CostModel, Fallback, Image, Incremental, Linear, Phases, Preset, Sample, Term,
    Timing,
};
use microbatch::{Error, Locator};
use microbatch_fuzz::{check, Count, F};

#[derive(Arbitrary, Debug)]
enum Op {
    /// Observe the group of these samples (indices into the pool) with a
    /// per-phase or a total time.
    Observe {
        members: Vec<u8>,
        phases: bool,
        a: F,
        b: F,
    },
    /// Observe a row whose time is the current model's prediction times a
    /// factor (timings that fit well, so that fits happen).
    Consistent {
        members: Vec<u8>,
        factor: u8,
    },
    Refit,
}

#[derive(Arbitrary, Debug)]
struct Input {
    /// A preset's terms, or terms of our own.
    preset: Option<u8>,
    terms: Vec<(u8, u16, F)>,
    window: Count,
    min_rows: Count,
    samples: Vec<(u16, Vec<(u16, u8)>)>,
    ops: Vec<Op>,
}

/// A term from a tag and a parameter.
fn term(tag: u8, p: u16) -> Term {
    let nz = |x: u16| NonZeroU32::new(u32::from(x)).unwrap_or(NonZeroU32::MIN);
    match tag % 10 {
        0 => Term::ImageTokens,
        1 => Term::UnitAttention,
        2 => Term::WindowAttention {
            window: nz(p & 0xff),
            patches_per_token: nz(p >> 8),
        },
        3 => Term::Tiles {
            tokens_per_tile: nz(p),
        },
        4 => Term::Images,
        5 => Term::Units,
        6 => Term::Tokens,
        7 => Term::DocumentAttention,
        8 => Term::Samples,
        _ => Term::Groups,
    }
}

fn valid(t: Timing) -> bool {
    let ok = |x: f64| x.is_finite() && x >= 0.0;
    match t {
        Timing::Phases(p) => ok(p.vision) && ok(p.language),
        Timing::Total(x) => ok(x),
    }
}

/// Runs the operations on a fresh calibrator and returns it, checking
/// every promise on the way.
fn run(fallback: Linear, input: &Input, pool: &[Sample]) -> Calibrator {
    let mut c = Calibrator::new(fallback);
    let window = match input.window {
        Count::Small(w) => usize::from(w),
        Count::Huge(w) => w,
    };
    let min_rows = match input.min_rows {
        Count::Small(m) => usize::from(m),
        Count::Huge(m) => m,
    };
    c = c.window(window).min_rows(min_rows);
    let cap = c.window_rows();
    check!(
        "calibrator_window_setting",
        cap >= 1 && (window == 0 || cap == window),
        "window({window}) gave {cap}"
    );
    let group_of = |members: &[u8]| -> Vec<&Sample> {
        if pool.is_empty() {
            return Vec::new();
        }
        members
            .iter()
            .take(16)
            .map(|&m| &pool[usize::from(m) % pool.len()])
            .collect()
    };
    let mut since_refit = 0usize;
    for op in input.ops.iter().take(96) {
        match op {
            Op::Observe {
                members,
                phases,
                a,
                b,
            } => {
                let group = group_of(members);
                let time = if *phases {
                    Timing::Phases(Phases::new(a.0, b.0))
                } else {
                    Timing::Total(a.0)
                };
                let before = c.rows();
                let result = c.observe(group.iter().copied(), time);
                match result {
                    Ok(()) => {
                        check!(
                            "calibrator_timing_accepted",
                            valid(time),
                            "accepted {time:?}"
                        );
                        since_refit += 1;
                    }
                    Err(Error::Invalid {
                        at: Locator::Timing { .. },
                        ..
                    }) => {
                        check!(
                            "calibrator_timing_refused",
                            !valid(time),
                            "refused {time:?}"
                        );
                        check!(
                            "calibrator_nothing_stored",
                            c.rows() == before,
                            "a refused row changed the window from {before} to {}",
                            c.rows()
                        );
                    }
                    Err(e) => check!("calibrator_observe_error", false, "observe: {e}"),
                }
            }
            Op::Consistent { members, factor } => {
                let group = group_of(members);
                let f = 0.5 + f64::from(*factor) / 128.0;
                let time = c.model().cost(&group) * f;
                if valid(Timing::Phases(time)) {
                    let ok = c.observe(group.iter().copied(), Timing::Phases(time));
                    check!("calibrator_consistent", ok.is_ok(), "{ok:?} for {time:?}");
                    since_refit += 1;
                }
            }
            Op::Refit => {
                let cal = c.refit().clone();
                since_refit = 0;
                let model = cal.model();
                check!(
                    "calibrator_terms",
                    model.terms() == fallback.terms(),
                    "fitted terms {:?} differ from {:?}",
                    model.terms(),
                    fallback.terms()
                );
                check!(
                    "calibrator_coefficients",
                    model
                        .coefficients()
                        .iter()
                        .all(|x| x.is_finite() && *x >= 0.0),
                    "coefficients {:?}",
                    model.coefficients()
                );
                match cal.fallback() {
                    Some(reason) => {
                        check!(
                            "calibrator_fallback_model",
                            *model == fallback
                                && cal.r_squared().is_none()
                                && cal.max_relative_error().is_none(),
                            "fallback ({reason}) with model {model:?}"
                        );
                        if let Fallback::Failed(e) = reason {
                            let _ = e.to_string();
                        }
                    }
                    None => {
                        let r2 = cal.r_squared();
                        let worst = cal.max_relative_error();
                        check!(
                            "calibrator_fit_figures",
                            matches!(r2, Some(r) if r.is_finite() && r <= 1.0 + 1e-9)
                                // +inf when a time is so far below its
                                // prediction that the ratio overflows.
                                && matches!(worst, Some(w) if w >= 0.0),
                            "R^2 {r2:?}, worst {worst:?}"
                        );
                        for (&t, &x) in model.terms().iter().zip(model.coefficients()) {
                            check!(
                                "calibrator_unidentified_zero",
                                cal.identified(t) || x == 0.0,
                                "{t} not identified but {x}"
                            );
                        }
                    }
                }
                let rejected = cal.rejected();
                check!(
                    "calibrator_rejected",
                    rejected.windows(2).all(|w| w[0] < w[1])
                        && rejected.iter().all(|&i| i < c.rows())
                        && cal.rows() + rejected.len() <= c.rows(),
                    "rejected {rejected:?}, rows {} of {}",
                    cal.rows(),
                    c.rows()
                );
                for g in pool.chunks(3) {
                    let group: Vec<&Sample> = g.iter().collect();
                    let cost = model.cost(&group);
                    check!(
                        "calibrator_cost",
                        cost.vision >= 0.0 && cost.language >= 0.0,
                        "cost {cost:?} of {group:?}"
                    );
                    let mut state = model.empty();
                    for s in &group {
                        model.insert(&mut state, s);
                    }
                    check!(
                        "calibrator_incremental",
                        model.evaluate(&state) == cost,
                        "incremental {:?} != {cost:?}",
                        model.evaluate(&state)
                    );
                }
            }
        }
        check!(
            "calibrator_window",
            c.rows() <= cap,
            "{} rows in a window of {cap}",
            c.rows()
        );
        check!(
            "calibrator_drift_rows",
            c.drift().rows <= since_refit,
            "drift over {} rows, {since_refit} observed since the refit",
            c.drift().rows
        );
    }
    c
}

fuzz_target!(|input: Input| {
    if input.samples.len() > 24 {
        return;
    }
    let fallback = match input.preset {
        Some(p) => Linear::preset(Preset::ALL[usize::from(p) % Preset::ALL.len()]),
        None => {
            let pairs: Vec<(Term, f64)> = input
                .terms
                .iter()
                .take(16)
                .map(|&(tag, p, c)| (term(tag, p), c.0))
                .collect();
            let distinct = {
                let mut t: Vec<Term> = pairs.iter().map(|p| p.0).collect();
                t.sort();
                t.dedup();
                t.len()
            };
            match Linear::new(pairs.iter().copied()) {
                Ok(m) => {
                    check!(
                        "linear_accepted",
                        distinct <= Linear::MAX_TERMS
                            && pairs.iter().all(|p| p.1.is_finite() && p.1 >= 0.0),
                        "accepted {pairs:?}"
                    );
                    m
                }
                Err(
                    Error::Invalid {
                        at: Locator::Coefficient { .. },
                        ..
                    }
                    | Error::Invalid {
                        at: Locator::Setting { name: "terms", .. },
                        ..
                    },
                ) => {
                    // Justified: a bad coefficient (or a sum that overflows),
                    // or too many distinct terms.
                    check!(
                        "linear_refused",
                        distinct > Linear::MAX_TERMS
                            || pairs.iter().any(|p| !(p.1.is_finite() && p.1 >= 0.0))
                            || pairs.iter().map(|p| p.1).sum::<f64>().is_infinite(),
                        "refused {pairs:?}"
                    );
                    return;
                }
                Err(e) => {
                    check!("linear_error", false, "Linear::new: {e}");
                    return;
                }
            }
        }
    };
    let pool: Vec<Sample> = input
        .samples
        .iter()
        .map(|(t, imgs)| {
            Sample::new(
                u32::from(*t),
                imgs.iter()
                    .take(3)
                    .map(|&(tok, u)| match NonZeroU32::new(u32::from(u)) {
                        Some(units) => Image::with_units(u32::from(tok), units),
                        None => Image::new(u32::from(tok)),
                    }),
            )
        })
        .collect();
    let first = run(fallback, &input, &pool);
    let again = run(fallback, &input, &pool);
    check!(
        "calibrator_determinism",
        first.calibration() == again.calibration() && first.rows() == again.rows(),
        "two runs differ: {:?} vs {:?}",
        first.calibration(),
        again.calibration()
    );
});

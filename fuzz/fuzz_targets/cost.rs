//! Fuzz target `cost`: cost model constructors, combinators, the FLOPs of
//! model shapes and calibration, checking every promise of
//! `microbatch::cost` (see fuzz/README.md).
#![no_main]

use std::num::NonZeroU32;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use microbatch::cost::{
    fit, fit_terms, AttentionCount, CostModel, DocumentAttention, FullAttention, Given, Image,
    Incremental, LlmShape, PerGroup, PerImage, PerSample, PerTile, Phase, Phases, Sample, Tokens,
    Training, VitScope, VitShape, Windowed,
};
use microbatch::{Error, Locator, Scalar};
use microbatch_fuzz::{check, F};

#[derive(Arbitrary, Debug)]
struct Input {
    coef: [F; 6],
    ints: [u32; 4],
    samples: Vec<(u32, Vec<(u32, u8)>)>,
    llm: [u32; 6],
    vit: [u32; 6],
    flags: u8,
    rows: Vec<(Vec<F>, F)>,
    tokens: u64,
}

fn good(x: f64) -> bool {
    x.is_finite() && x >= 0.0
}

/// Non-negative, +inf allowed, NaN not.
fn nonneg(x: f64) -> bool {
    x >= 0.0
}

fuzz_target!(|input: Input| {
    if input.samples.len() > 32 || input.rows.len() > 64 {
        return;
    }
    let samples: Vec<Sample> = input
        .samples
        .iter()
        .map(|(t, imgs)| {
            Sample::new(
                *t,
                imgs.iter()
                    .take(4)
                    .map(|&(tok, u)| match NonZeroU32::new(u32::from(u)) {
                        Some(units) => Image::with_units(tok, units),
                        None => Image::new(tok),
                    }),
            )
        })
        .collect();
    let group: Vec<&Sample> = samples.iter().collect();
    let c = |i: usize| input.coef[i].0;
    let training = if input.flags & 1 == 0 {
        Training::Frozen
    } else {
        Training::Trained
    };

    // Constructors: Ok exactly for finite, non-negative coefficients.
    let ctor = |name: &str, r: Result<(), Error>, coefs: &[f64]| {
        let ok = coefs.iter().all(|&x| good(x));
        match r {
            Ok(()) => check!("cost_ctor", ok, "{name} accepted {coefs:?}"),
            Err(Error::Invalid {
                at: Locator::Coefficient { .. },
                value: Scalar::Float(value),
                ..
            }) => check!(
                "cost_ctor",
                !ok && (!good(value) || value.is_nan()),
                "{name} refused {coefs:?} naming {value}"
            ),
            Err(Error::Invalid {
                at: Locator::Setting { .. },
                ..
            }) => {}
            Err(e) => check!("cost_ctor", false, "{name}: unexpected {e:?}"),
        }
    };
    ctor("Tokens", Tokens::new(c(0)).map(drop), &[c(0)]);
    ctor("PerSample", PerSample::new(c(1)).map(drop), &[c(1)]);
    ctor("PerGroup", PerGroup::new(c(2)).map(drop), &[c(2)]);
    ctor(
        "DocumentAttention",
        DocumentAttention::new(c(3)).map(drop),
        &[c(3)],
    );
    ctor("FullAttention", FullAttention::new(c(4)).map(drop), &[c(4)]);

    // Given costs: accepted exactly when both phases are finite and
    // non-negative; `Given` sums them under every law of `model`.
    let cost = Phases::new(c(1), c(2));
    ctor(
        "with_cost",
        Sample::text_only(1).with_cost(cost).map(drop),
        &[c(1), c(2)],
    );
    let costly: Vec<Sample> = samples
        .iter()
        .enumerate()
        .filter_map(|(i, s)| s.clone().with_cost(cost * (i as f64)).ok())
        .collect();
    let costly_group: Vec<&Sample> = costly.iter().collect();
    model("Given", &Given, &costly_group);

    if let Ok(m) = Tokens::new(c(0)) {
        model("Tokens", &m, &group);
        if let Ok(s) = m.clone().scale(c(5)) {
            model("Scale", &s, &group);
            let (a, b) = (m.cost(&group), s.cost(&group));
            // A zero factor costs zero, even on an inner cost that overflowed.
            let want = if c(5) == 0.0 { 0.0 } else { c(5) * a.total() };
            check!(
                "cost_combinator",
                close(b.total(), want),
                "scale {}: {a:?} -> {b:?}",
                c(5)
            );
        }
        if let Ok(d) = DocumentAttention::new(c(3)) {
            let sum = m.clone() + d.clone();
            model("Sum", &sum, &group);
            let want = m.cost(&group) + d.cost(&group);
            check!(
                "cost_combinator",
                close(sum.cost(&group).total(), want.total()),
                "sum {:?} != {want:?}",
                sum.cost(&group)
            );
            let max = m.clone().max(d.clone().in_phase(Phase::Language));
            model("Max", &max, &group);
        }
    }
    if let Ok(m) = PerGroup::new(c(2)) {
        model("PerGroup", &m.in_phase(Phase::Vision), &group);
    }
    if let Ok(m) = FullAttention::new(c(4)) {
        model("FullAttention", &m, &group);
    }
    if let Ok(m) = PerSample::new(c(1)) {
        model("PerSample", &m, &group);
    }
    if let Ok(m) = PerTile::new(c(0), input.ints[0] % 4096, training) {
        model("PerTile", &m, &group);
    }
    if let Ok(m) = PerImage::new(c(0), c(1), input.ints[1] % 16, training) {
        model("PerImage", &m, &group);
    }
    if let Ok(m) = Windowed::new(
        c(0),
        c(1),
        input.ints[1] % 16,
        c(2),
        input.ints[2] % 128,
        training,
    ) {
        model("Windowed", &m, &group);
    }

    // Shapes: any shape answers without panicking; a checked one gives
    // finite FLOPs and a model.
    if microbatch_fuzz::on("cost_shapes") {
        shapes(&input, &group, training);
    }

    // Calibration.
    let rows: Vec<(Vec<f64>, f64)> = input
        .rows
        .iter()
        .map(|(x, t)| (x.iter().take(6).map(|f| f.0).collect(), t.0))
        .collect();
    calibrate(&rows);
    if let (Ok(a), Ok(b)) = (Tokens::new(1.0), DocumentAttention::new(1.0)) {
        let groups: Vec<(Vec<&Sample>, f64)> = group
            .chunks(2)
            .zip(&input.rows)
            .map(|(g, r)| (g.to_vec(), r.1 .0))
            .collect();
        let terms: [&dyn CostModel; 2] = [&a, &b];
        if let Ok(f) = fit_terms(&terms, groups.iter().map(|(g, t)| (g.iter().copied(), *t))) {
            check_fit(&f, groups.len());
        }
    }
});

fn shapes(input: &Input, group: &[&Sample], training: Training) {
    let l = &input.llm;
    let llm = LlmShape {
        layers: l[0] % 256,
        hidden: l[1],
        heads: l[2] % 1024,
        kv_heads: l[3] % 1024,
        ffn: l[4],
        vocab: l[5],
        swiglu: input.flags & 2 != 0,
        attention: if input.flags & 4 == 0 {
            AttentionCount::Causal
        } else {
            AttentionCount::Full
        },
    };
    let _ = (
        llm.weights(),
        llm.linear_flops_per_token(),
        llm.attention_flops_per_token_pair(),
        llm.training_flops(input.tokens),
    );
    if llm.check().is_ok() {
        let f = llm.training_flops(input.tokens);
        check!(
            "cost_flops",
            good(f),
            "LlmShape {llm:?}: training_flops({}) = {f}",
            input.tokens
        );
        if let Ok(m) = llm.cost_model() {
            model("LlmShape", &m, group);
        }
    }
    let v = &input.vit;
    let scope = match input.flags >> 4 & 3 {
        0 => VitScope::Image {
            patches_per_token: v[3] % 16,
        },
        1 => VitScope::Tile {
            tokens_per_tile: v[3],
            llm_tokens_per_tile: v[4],
        },
        _ => VitScope::Windowed {
            patches_per_token: v[3] % 16,
            window: v[4],
            full_layers: v[5] % 64,
        },
    };
    let vit = VitShape {
        layers: v[0] % 128,
        hidden: v[1],
        mlp: v[2],
        swiglu: input.flags & 8 != 0,
        scope,
    };
    let _ = (
        vit.forward_flops(input.tokens),
        vit.linear_flops_per_token(),
        vit.attention_flops_per_token_pair(),
    );
    if let Ok(m) = vit.cost_model(training) {
        model("VitShape", &m, group);
        let f = vit.forward_flops(input.tokens);
        check!(
            "cost_flops",
            good(f),
            "VitShape {vit:?}: forward_flops({}) = {f}",
            input.tokens
        );
    }
}

fn close(a: f64, b: f64) -> bool {
    a == b || (a - b).abs() <= 1e-9 * a.abs().max(b.abs()) || (!a.is_finite() && !b.is_finite())
}

/// A built model: finite, non-negative costs; the incremental evaluation in
/// any order equals the whole-group cost; adding a sample never lowers a
/// phase (every built-in term is monotone).
fn model<M: Incremental + std::fmt::Debug>(name: &str, m: &M, group: &[&Sample]) {
    let whole = m.cost(group);
    // src/cost/mod.rs (module docs): a built model's costs are non-negative,
    // finite unless a coefficient times a size exceeds f64::MAX: +inf is
    // allowed (the planner refuses it), NaN and negatives never.
    check!(
        "cost_finite",
        nonneg(whole.vision) && nonneg(whole.language),
        "{name}: cost {whole:?} on {} samples ({m:?})",
        group.len()
    );
    check!(
        "cost_finite",
        group.len() > 0
            || (whole.vision == 0.0 && whole.language == 0.0)
            || !microbatch_fuzz::on("cost_empty"),
        "{name}: the empty group costs {whole:?} ({m:?})"
    );
    // Past a known NaN (MICROBATCH_FUZZ_SKIP=cost_finite), its knock-ons on the
    // checks below are the same finding.
    let nan = |p: Phases| p.vision.is_nan() || p.language.is_nan();
    if !microbatch_fuzz::on("cost_finite")
        && (nan(whole)
            || nan(m.evaluate(&m.empty()))
            || nan(m.cost(&[]))
            || group.iter().any(|s| nan(m.cost(&[*s])) || nan(m.floor(s))))
    {
        return;
    }
    // CostModel::floor: finite (where the cost alone is), non-negative, at
    // most the cost alone, and the floors of a group sum to at most its cost
    // (up to rounding).
    let mut floors = Phases::ZERO;
    for s in group {
        let (f, alone) = (m.floor(s), m.cost(&[*s]));
        for p in [Phase::Vision, Phase::Language] {
            let (f, a) = (f.get(p), alone.get(p));
            check!(
                "cost_floor",
                f >= 0.0 && (f.is_finite() || !a.is_finite()) && f <= a * (1.0 + 1e-12),
                "{name}: floor {f} in {p:?} for a cost alone of {a} ({m:?})"
            );
        }
        floors += f;
    }
    for p in [Phase::Vision, Phase::Language] {
        let (f, c) = (floors.get(p), whole.get(p));
        check!(
            "cost_floor",
            !(f > c * (1.0 + 1e-9) + 1e-300),
            "{name}: floors sum to {f} in {p:?} above the group's cost {c} ({m:?})"
        );
    }
    let mut st = m.empty();
    for s in group {
        let before = m.evaluate(&st);
        let with = m.evaluate_with(&st, s);
        m.insert(&mut st, s);
        let after = m.evaluate(&st);
        check!(
            "cost_incremental",
            after == with,
            "{name}: evaluate_with {with:?} != evaluate after insert {after:?}"
        );
        check!(
            "cost_monotone",
            after.vision >= before.vision && after.language >= before.language,
            "{name}: adding a sample lowered {before:?} to {after:?}"
        );
    }
    let inc = m.evaluate(&st);
    check!(
        "cost_incremental",
        close(inc.vision, whole.vision) && close(inc.language, whole.language),
        "{name}: incremental {inc:?} != cost {whole:?}"
    );
    let mut rev = m.empty();
    for s in group.iter().rev() {
        m.insert(&mut rev, s);
    }
    // Integer states (every built-in term) are exactly order-free; `Given`
    // sums floats, whose last bits follow the order of insertion (its docs;
    // the planner fixes the order, by id), so it is held to rounding.
    let rev = m.evaluate(&rev);
    let order_free = if name == "Given" {
        close(rev.vision, inc.vision) && close(rev.language, inc.language)
    } else {
        rev == inc
    };
    check!(
        "cost_order",
        order_free,
        "{name}: insertion order changes the cost: {rev:?} vs {inc:?}"
    );
    let _ = format!("{m:?}");
}

fn calibrate(rows: &[(Vec<f64>, f64)]) {
    let r = fit(rows);
    let features = rows.first().map_or(0, |r| r.0.len());
    match r {
        Ok(f) => {
            check!(
                "fit_error",
                rows.iter().all(|r| r.0.len() == features
                    && r.0.iter().all(|&x| good(x))
                    && r.1.is_finite()
                    && r.1 > 0.0)
                    && rows.len() > features
                    && features > 0,
                "fit accepted invalid rows"
            );
            check_fit(&f, rows.len());
            check!(
                "fit_coefficients",
                f.coefficients().len() == features,
                "{} coefficients for {features} features",
                f.coefficients().len()
            );
            for (x, _) in rows {
                let p = f.predict(x);
                check!(
                    "fit_finite",
                    p.is_finite() && p >= 0.0,
                    "predict({x:?}) = {p}"
                );
            }
        }
        Err(Error::RowLength {
            row,
            expected,
            found,
        }) => {
            check!(
                "fit_error",
                rows.get(row).is_some_and(|r| r.0.len() == found)
                    && expected == features
                    && found != expected,
                "RowLength {row} unjustified"
            );
        }
        Err(Error::Invalid {
            at: Locator::Measurement { row, feature },
            value: Scalar::Float(value),
            ..
        }) => {
            let ok = rows.get(row).is_some_and(|r| match feature {
                Some(j) => {
                    r.0.get(j)
                        .is_some_and(|&x| !good(x) && (x == value || x.is_nan()))
                }
                None => !(r.1.is_finite() && r.1 > 0.0),
            });
            check!(
                "fit_error",
                ok,
                "InvalidMeasurement row {row} feature {feature:?} value {value} unjustified"
            );
        }
        Err(Error::TooFewRows {
            rows: m,
            features: k,
        }) => check!("fit_error", m == rows.len() && m <= k, "TooFewRows {m} {k}"),
        Err(Error::Invalid {
            at: Locator::Setting { .. },
            ..
        }) => check!(
            "fit_error",
            features == 0,
            "InvalidSetting with {features} features"
        ),
        Err(Error::RankDeficient { feature }) => check!(
            "fit_error",
            feature < features,
            "RankDeficient feature {feature} of {features}"
        ),
        Err(Error::CoefficientRange {
            feature,
            row,
            value,
            time,
            ..
        }) => {
            // A coefficient beyond f64: the named row holds the named feature and time.
            let ok = feature < features
                && rows
                    .get(row)
                    .is_some_and(|r| r.0.get(feature) == Some(&value) && r.1 == time);
            check!("fit_error", ok, "CoefficientRange feature {feature} row {row} value {value} time {time} unjustified");
        }
        Err(Error::PredictionOverflow { row, time }) => {
            // Only times within a small factor of f64::MAX can overflow a
            // prediction of a fit that is otherwise in range.
            let ok = rows
                .get(row)
                .is_some_and(|r| r.1 == time && time > f64::MAX / 1e6);
            check!(
                "fit_error",
                ok,
                "PredictionOverflow row {row} time {time} unjustified"
            );
        }
        Err(e) => check!("fit_error", false, "fit: unexpected {e:?}"),
    }
}

fn check_fit(f: &microbatch::cost::Fit, rows: usize) {
    check!(
        "fit_finite",
        f.coefficients().iter().all(|&c| good(c)),
        "coefficients {:?}",
        f.coefficients()
    );
    check!(
        "fit_finite",
        f.r_squared().is_finite(),
        "R^2 {}",
        f.r_squared()
    );
    check!(
        "fit_finite",
        good(f.max_relative_error()),
        "max_relative_error {}",
        f.max_relative_error()
    );
    check!(
        "fit_rows",
        f.rows() == rows && f.worst_row() < rows.max(1),
        "rows {} worst {} of {rows}",
        f.rows(),
        f.worst_row()
    );
}

#[allow(dead_code)]
fn phases(p: Phases) -> f64 {
    p.total()
}

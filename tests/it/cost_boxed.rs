//! The type-erased model (`Incremental::boxed`, `BoxCostModel`) against the
//! models it boxes: for every built-in term and every combinator, on random
//! groups, the boxed model gives the same costs, floors, group floors,
//! incremental values
//! and states, bit for bit, and the same formula; boxed members compose with
//! the crate's combinators (a model built at run time from boxes equals the
//! static composition); a planner over a boxed model makes the same plan.

use core::fmt::Debug;
use core::num::NonZeroU32;

use microbatch::cost::{
    sample_fn, BoxCostModel, CostModel, DocumentAttention, FullAttention, Given, Image,
    Incremental, Linear, PerGroup, PerImage, PerSample, PerTile, Phase, Phases, Preset, Sample,
    Term, Tokens, Training, Vision, Windowed, Zero,
};
use microbatch::plan::{Planner, StepSample, SyncModel};
use proptest::prelude::*;

// ---------------------------------------------------------------- strategies

fn image() -> impl Strategy<Value = Image> {
    (0u32..6000, 1u32..9)
        .prop_map(|(tokens, units)| Image::with_units(tokens, NonZeroU32::new(units).unwrap()))
}

/// A sample with a given cost (read by `Given`, ignored by the others); a
/// few samples are long enough that a huge coefficient overflows to
/// infinity, where a zero scale must still give zero.
fn sample() -> impl Strategy<Value = Sample> {
    (
        prop_oneof![9 => 0u32..20_000, 1 => Just(u32::MAX)],
        prop::collection::vec(image(), 0..4),
        (0.0f64..3.0, 0.0f64..3.0),
    )
        .prop_map(|(text, images, (v, l))| {
            Sample::new(text, images)
                .with_cost(Phases::new(v, l))
                .unwrap()
        })
}

fn group() -> impl Strategy<Value = Vec<Sample>> {
    prop::collection::vec(sample(), 0..10)
}

/// Coefficients: zero, ordinary, and one so large that costs overflow.
fn coef() -> impl Strategy<Value = f64> {
    prop_oneof![1 => Just(0.0), 8 => 1e-6f64..10.0, 1 => Just(1e300)]
}

fn coefs() -> impl Strategy<Value = [f64; 4]> {
    [coef(), coef(), coef(), coef()]
}

// ------------------------------------------------------------------ oracle

/// The bits of a cost, so that `-0.0`, `0.0` and NaN compare exactly.
fn bits(p: Phases) -> (u64, u64) {
    (p.vision.to_bits(), p.language.to_bits())
}

/// Checks that `boxed` gives what `model` gives on `group`, bit for bit:
/// the group's cost, every floor, and, sample by sample, the state (by its
/// `Debug`, which a `BoxState` prints as the state it holds), `evaluate`
/// and `evaluate_with`; and the same formula. Also the law of
/// `evaluate_with` on the unboxed model.
fn same<M>(model: &M, boxed: &BoxCostModel, group: &[Sample]) -> Result<(), TestCaseError>
where
    M: Incremental + Debug,
{
    let refs: Vec<&Sample> = group.iter().collect();
    prop_assert_eq!(format!("{boxed:?}"), format!("{model:?}"));
    prop_assert_eq!(bits(boxed.cost(&refs)), bits(model.cost(&refs)));
    prop_assert_eq!(boxed.group_floor(), model.group_floor());
    let (mut s, mut b) = (model.empty(), boxed.empty());
    prop_assert_eq!(format!("{b:?}"), format!("{s:?}"));
    prop_assert_eq!(bits(boxed.evaluate(&b)), bits(model.evaluate(&s)));
    for x in group {
        prop_assert_eq!(bits(boxed.floor(x)), bits(model.floor(x)));
        prop_assert_eq!(
            bits(boxed.evaluate_with(&boxed.empty(), x)),
            bits(model.evaluate_with(&model.empty(), x))
        );
        prop_assert_eq!(
            bits(boxed.evaluate_with(&b, x)),
            bits(model.evaluate_with(&s, x))
        );
        // The law of `evaluate_with` (which the combinators compute without
        // a clone): inserting into a copy and evaluating.
        let mut copy = s.clone();
        model.insert(&mut copy, x);
        prop_assert_eq!(
            bits(model.evaluate_with(&s, x)),
            bits(model.evaluate(&copy))
        );
        model.insert(&mut s, x);
        boxed.insert(&mut b, x);
        prop_assert_eq!(format!("{b:?}"), format!("{s:?}"));
        prop_assert_eq!(bits(boxed.evaluate(&b)), bits(model.evaluate(&s)));
        // A clone of the state is the same state.
        prop_assert_eq!(bits(boxed.evaluate(&b.clone())), bits(model.evaluate(&s)));
    }
    Ok(())
}

/// [`same`] for the model boxed whole.
fn same_boxed<M>(model: M, group: &[Sample]) -> Result<(), TestCaseError>
where
    M: Incremental + Debug + Clone + Send + Sync + 'static,
    M::State: Send + Sync + 'static,
{
    let boxed = model.clone().boxed();
    same(&model, &boxed, group)
}

/// Every built-in term with coefficients from `c`, boxed, with a function
/// that checks it against its unboxed self.
type Check = fn([f64; 4], &[Sample]) -> Result<(), TestCaseError>;

fn linear(c: [f64; 4]) -> Linear {
    let t = NonZeroU32::new(256).unwrap();
    let (w, p) = (NonZeroU32::new(64).unwrap(), NonZeroU32::new(4).unwrap());
    Linear::new([
        (Term::ImageTokens, c[0]),
        (Term::UnitAttention, c[1]),
        (
            Term::WindowAttention {
                window: w,
                patches_per_token: p,
            },
            c[2],
        ),
        (Term::Tiles { tokens_per_tile: t }, c[3]),
        (Term::Images, c[0]),
        (Term::Units, c[1]),
        (Term::Tokens, c[2]),
        (Term::DocumentAttention, c[3]),
        (Term::Samples, c[0]),
        (Term::Groups, c[1]),
    ])
    .unwrap()
}

const TERMS: [(&str, Check); 15] = [
    ("Tokens", |c, g| same_boxed(Tokens::new(c[0]).unwrap(), g)),
    ("PerSample", |c, g| {
        same_boxed(PerSample::new(c[1]).unwrap(), g)
    }),
    ("PerGroup", |c, g| {
        same_boxed(PerGroup::new(c[2]).unwrap(), g)
    }),
    ("DocumentAttention", |c, g| {
        same_boxed(DocumentAttention::new(c[3]).unwrap(), g)
    }),
    ("FullAttention", |c, g| {
        same_boxed(FullAttention::new(c[0]).unwrap(), g)
    }),
    ("PerTile", |c, g| {
        same_boxed(PerTile::new(c[1], 256, Training::Trained).unwrap(), g)
    }),
    ("PerImage", |c, g| {
        same_boxed(PerImage::new(c[2], c[3], 4, Training::Frozen).unwrap(), g)
    }),
    ("Windowed", |c, g| {
        same_boxed(
            Windowed::new(c[0], c[1], 64, c[2], 4, Training::Trained).unwrap(),
            g,
        )
    }),
    ("Vision", |c, g| {
        let v: Vision = PerTile::new(c[0], 448, Training::Frozen).unwrap().into();
        same_boxed(v, g)
    }),
    ("Given", |_, g| same_boxed(Given, g)),
    ("Linear", |c, g| same_boxed(linear(c), g)),
    ("Linear::preset", |_, g| {
        same_boxed(Linear::preset(Preset::Qwen25Vl7b), g)
    }),
    ("Preset", |_, g| {
        for p in Preset::ALL {
            same_boxed(p.cost_model(), g)?;
        }
        Ok(())
    }),
    ("sample_fn", |c, g| {
        let k = c[0];
        same_boxed(
            sample_fn(move |s: &Sample| Phases::new(k * s.images().len() as f64, k)),
            g,
        )
    }),
    ("Zero", |_, g| same_boxed(Zero, g)),
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Every built-in term, boxed, is its unboxed self.
    #[test]
    fn every_term_boxed_is_itself(c in coefs(), g in group()) {
        for (name, check) in TERMS {
            check(c, &g).map_err(|e| TestCaseError::fail(format!("{name}: {e}")))?;
        }
    }

    /// Every combinator over boxed members, and boxed itself, is the static
    /// combinator over the unboxed members: `plus` (and `+`), `scale`
    /// (zero included, on overflowed costs), `in_phase`, `max`, tuples.
    #[test]
    fn every_combinator_over_boxes_is_the_static_one(
        c in coefs(),
        factor in prop_oneof![Just(0.0), 0.0f64..4.0],
        g in group(),
    ) {
        let t = Tokens::new(c[0]).unwrap();
        let a = DocumentAttention::new(c[1]).unwrap();
        let pg = PerGroup::new(c[2]).unwrap();
        let v: Vision = PerTile::new(c[3], 256, Training::Trained).unwrap().into();
        let (bt, ba, bg, bv) = (t.boxed(), a.boxed(), pg.boxed(), v.boxed());

        same(&t.plus(a), &bt.clone().plus(ba.clone()).boxed(), &g)?;
        same(&(t + a), &(bt.clone() + ba.clone()).boxed(), &g)?;
        same(&t.plus(a), &t.plus(a).boxed(), &g)?;
        same(&t.scale(factor).unwrap(), &bt.clone().scale(factor).unwrap().boxed(), &g)?;
        same(&t.in_phase(Phase::Vision), &bt.clone().in_phase(Phase::Vision).boxed(), &g)?;
        same(&v.in_phase(Phase::Language), &bv.clone().in_phase(Phase::Language).boxed(), &g)?;
        same(&t.max(pg), &bt.clone().max(bg.clone()).boxed(), &g)?;
        same(&pg.max(t), &bg.clone().max(bt.clone()).boxed(), &g)?;
        same(&(t, a, pg), &(bt.clone(), ba.clone(), bg.clone()).boxed(), &g)?;
        same(&t.plus(Zero), &bt.clone().plus(BoxCostModel::default()).boxed(), &g)?;

        // A deep composition, boxed at every node (as the Python binding
        // builds it) and at the top only.
        let stat = (t + a)
            .scale(factor)
            .unwrap()
            .max(pg.in_phase(Phase::Vision))
            .plus(v)
            .plus(Given)
            .plus(Preset::Qwen25Vl7b.cost_model().scale(1e-12).unwrap());
        let every = bt
            .plus(ba)
            .boxed()
            .scale(factor)
            .unwrap()
            .boxed()
            .max(bg.in_phase(Phase::Vision).boxed())
            .boxed()
            .plus(bv)
            .boxed()
            .plus(Given.boxed())
            .boxed()
            .plus(Preset::Qwen25Vl7b.cost_model().boxed().scale(1e-12).unwrap().boxed())
            .boxed();
        same(&stat, &every, &g)?;
        same(&stat, &stat.boxed(), &g)?;
    }

    /// A planner over the boxed model makes the plan of the static model,
    /// bit for bit.
    #[test]
    fn a_boxed_planner_plans_the_same(c in coefs(), n in 1usize..60, seed in 0u64..1000) {
        let model = (Tokens::new(1e-3 + c[0]).unwrap() + DocumentAttention::new(c[1].min(1.0)).unwrap())
            .plus(PerTile::new(c[2].min(1.0), 256, Training::Trained).unwrap());
        let boxed = Tokens::new(1e-3 + c[0]).unwrap().boxed()
            .plus(DocumentAttention::new(c[1].min(1.0)).unwrap().boxed()).boxed()
            .plus(PerTile::new(c[2].min(1.0), 256, Training::Trained).unwrap().boxed()).boxed();
        let samples: Vec<StepSample> = (0..n as u64)
            .map(|i| {
                let k = (i * 2_654_435_761 + seed) % 997;
                let images = (0..k % 3).map(|j| Image::new(64 * (1 + ((k + j) % 5) as u32)));
                StepSample::new(i, Sample::new(50 + 3 * k as u32, images))
            })
            .collect();
        for sync in [SyncModel::Step, SyncModel::Phase, SyncModel::MicroStep] {
            let a = Planner::new(model).ranks(3).seq_len(8192).sync(sync).plan(&samples);
            let b = Planner::new(boxed.clone()).ranks(3).seq_len(8192).sync(sync).plan(&samples);
            match (a, b) {
                (Ok(a), Ok(b)) => {
                    prop_assert_eq!(a.fingerprint(), b.fingerprint());
                    prop_assert_eq!(
                        a.report().predicted.to_bits(),
                        b.report().predicted.to_bits()
                    );
                    prop_assert_eq!(
                        a.report().lower_bound.to_bits(),
                        b.report().lower_bound.to_bits()
                    );
                }
                (Err(a), Err(b)) => prop_assert_eq!(a.to_string(), b.to_string()),
                (a, b) => prop_assert!(false, "{:?} against {:?}", a.map(|p| p.len()), b.map(|p| p.len())),
            }
        }
    }
}

#[test]
fn boxing_keeps_the_formula_flat() {
    let model = Tokens::new(1.0)
        .unwrap()
        .boxed()
        .plus(PerSample::new(2.0).unwrap().boxed())
        .boxed()
        .plus(PerGroup::new(3.0).unwrap())
        .boxed();
    assert_eq!(
        format!("{model:?}"),
        "Tokens { per_token: 1.0 } + PerSample { cost: 2.0 } + PerGroup { cost: 3.0 }"
    );
    assert_eq!(format!("{:?}", BoxCostModel::default()), "Zero");
}

#[test]
fn a_boxed_model_is_send_sync_and_downcasts() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<BoxCostModel>();
    send_sync::<microbatch::cost::BoxState>();
    let m = Given.boxed();
    assert!(m.downcast_ref::<Given>().is_some());
    assert!(m
        .clone()
        .plus(Zero)
        .boxed()
        .downcast_ref::<Given>()
        .is_none());
}

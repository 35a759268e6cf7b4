//! Bring your own costs: `Sample::with_cost` and the `Given` model. The
//! planner on `Given` plans on exactly the given costs (its predicted step
//! time is the one recomputed from the plan and the costs), the incremental
//! state agrees with the group cost, floors are the given costs, bad costs
//! are refused naming the phase, and serialized samples keep their cost.

use std::collections::HashMap;

use microbatch::cost::{sample_fn, CostModel, Given, Image, Incremental, Phases, Sample, Tokens};
use microbatch::plan::{Planner, StepSample, SyncModel};
use microbatch::{Error, Locator};
use proptest::prelude::*;

use crate::common::float::close;

// ---------------------------------------------------------------- strategies

fn cost() -> impl Strategy<Value = Phases> {
    (
        prop_oneof![Just(0.0), 1e-3f64..10.0],
        prop_oneof![Just(0.0), 1e-3f64..100.0],
    )
        .prop_map(|(v, l)| Phases::new(v, l))
}

fn sample() -> impl Strategy<Value = Sample> {
    (1u32..3000, prop::collection::vec(0u32..1000, 0..3), cost()).prop_map(|(text, images, c)| {
        Sample::new(text, images.into_iter().map(Image::new))
            .with_cost(c)
            .unwrap()
    })
}

fn batch() -> impl Strategy<Value = Vec<StepSample>> {
    prop::collection::vec(sample(), 1..80).prop_map(|samples| {
        samples
            .into_iter()
            .enumerate()
            .map(|(i, s)| StepSample::new(1000 + 7 * i as u64, s))
            .collect()
    })
}

fn sync() -> impl Strategy<Value = SyncModel> {
    prop_oneof![
        Just(SyncModel::Step),
        Just(SyncModel::MicroStep),
        Just(SyncModel::Phase)
    ]
}

/// The step time of `plan` recomputed from the given costs alone, by the
/// definitions of the sync models (not through the crate's evaluation).
fn recomputed(plan: &microbatch::plan::Plan, samples: &[StepSample], sync: SyncModel) -> f64 {
    let by_id: HashMap<u64, Phases> = samples
        .iter()
        .map(|s| (s.id(), s.sample().given_cost()))
        .collect();
    let mb = |r: usize, j: usize| -> Phases {
        let mut c = Phases::ZERO;
        for s in 0..plan.sequences_per_micro_step() {
            let mut seq = Phases::ZERO;
            for id in plan.sequence(r, j, s) {
                seq += by_id[id];
            }
            c += seq;
        }
        c
    };
    let (ranks, steps) = (plan.ranks(), plan.micro_steps());
    match sync {
        SyncModel::Step => (0..ranks)
            .map(|r| (0..steps).map(|j| mb(r, j).total()).sum::<f64>())
            .fold(0.0, f64::max),
        SyncModel::MicroStep => (0..steps)
            .map(|j| (0..ranks).map(|r| mb(r, j).total()).fold(0.0, f64::max))
            .sum(),
        SyncModel::Phase => (0..steps)
            .map(|j| {
                let v = (0..ranks).map(|r| mb(r, j).vision).fold(0.0, f64::max);
                let l = (0..ranks).map(|r| mb(r, j).language).fold(0.0, f64::max);
                v + l
            })
            .sum(),
        _ => unreachable!("the three sync models"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn the_planner_plans_on_exactly_the_given_costs(
        samples in batch(),
        ranks in 1usize..5,
        sync in sync(),
    ) {
        prop_assume!(samples.len() >= ranks);
        let planner = Planner::new(Given).ranks(ranks).seq_len(8192).sync(sync);
        let plan = planner.plan(&samples).unwrap();
        let want = recomputed(&plan, &samples, sync);
        prop_assert!(close(plan.report().predicted, want), "{} vs {}", plan.report().predicted, want);
        // Every sample exactly once.
        let mut ids: Vec<u64> = (0..plan.ranks()).flat_map(|r| plan.rank(r).to_vec()).collect();
        ids.sort_unstable();
        let mut want_ids: Vec<u64> = samples.iter().map(StepSample::id).collect();
        want_ids.sort_unstable();
        prop_assert_eq!(ids, want_ids);
        // The lower bound is a bound for the given costs too.
        prop_assert!(plan.report().lower_bound <= plan.report().predicted * (1.0 + 1e-12));
        // The same plan as a per-sample closure over the same costs: `Given`
        // is that model, without the closure.
        let oracle = Planner::new(sample_fn(|s: &Sample| s.given_cost()))
            .ranks(ranks)
            .seq_len(8192)
            .sync(sync)
            .plan(&samples)
            .unwrap();
        prop_assert_eq!(plan.fingerprint(), oracle.fingerprint());
    }

    #[test]
    fn incremental_equals_whole_and_floors_are_the_given_costs(
        group in prop::collection::vec(sample(), 0..20),
    ) {
        let refs: Vec<&Sample> = group.iter().collect();
        let whole = Given.cost(&refs);
        let mut state = Given.empty();
        for s in &refs {
            let with = Given.evaluate_with(&state, s);
            Given.insert(&mut state, s);
            prop_assert_eq!(with, Given.evaluate(&state));
        }
        prop_assert_eq!(Given.evaluate(&state), whole);
        // Floors: each sample's given cost, equal to its cost alone, and
        // summing to the group's cost (additive).
        let mut floors = Phases::ZERO;
        for s in &refs {
            prop_assert_eq!(Given.floor(s), s.given_cost());
            prop_assert_eq!(Given.floor(s), Given.cost(&[s]));
            floors += Given.floor(s);
        }
        prop_assert!(close(floors.vision, whole.vision) && close(floors.language, whole.language));
    }

    #[test]
    fn other_models_ignore_the_given_cost(s in sample()) {
        let bare = Sample::new(s.text(), s.images().iter().copied());
        let t = Tokens::new(1.5).unwrap();
        prop_assert_eq!(t.cost(&[&s]), t.cost(&[&bare]));
    }
}

#[test]
fn bad_costs_are_refused_naming_the_phase() {
    let base = Sample::text_only(10);
    for (cost, name) in [
        (Phases::new(f64::NAN, 1.0), "vision cost"),
        (Phases::new(f64::INFINITY, 1.0), "vision cost"),
        (Phases::new(-1.0, 1.0), "vision cost"),
        (Phases::new(1.0, f64::NAN), "language cost"),
        (Phases::new(1.0, f64::NEG_INFINITY), "language cost"),
        (Phases::new(0.0, -1e-300), "language cost"),
    ] {
        match base.clone().with_cost(cost) {
            Err(Error::Invalid {
                at: Locator::Coefficient { name: n },
                ..
            }) => assert_eq!(n, name, "{cost:?}"),
            other => panic!("{cost:?}: {other:?}"),
        }
    }
}

#[test]
fn negative_zero_is_zero_and_equality_is_exact() {
    use std::hash::{BuildHasher, RandomState};
    let a = Sample::text_only(5)
        .with_cost(Phases::new(-0.0, -0.0))
        .unwrap();
    let b = Sample::text_only(5);
    assert_eq!(a, b);
    assert_eq!(a.given_cost().vision.to_bits(), 0);
    let h = RandomState::new();
    assert_eq!(h.hash_one(&a), h.hash_one(&b));
    let c = Sample::text_only(5)
        .with_cost(Phases::new(0.0, 1e-300))
        .unwrap();
    assert_ne!(b, c);
    assert_eq!(c.given_cost(), Phases::new(0.0, 1e-300));
}

#[test]
fn sums_beyond_f64_are_refused_by_the_planner() {
    let samples: Vec<StepSample> = (0..4)
        .map(|i| {
            let s = Sample::text_only(10)
                .with_cost(Phases::new(0.0, f64::MAX))
                .unwrap();
            StepSample::new(i, s)
        })
        .collect();
    let err = Planner::new(Given)
        .ranks(1)
        .seq_len(1024)
        .plan(&samples)
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Invalid {
                at: Locator::Cost { .. },
                ..
            } | Error::CostOverflow { .. }
        ),
        "{err:?}"
    );
}

#[cfg(feature = "serde")]
#[test]
fn serialized_samples_keep_their_cost_and_old_documents_read_the_same() {
    let plain = Sample::new(7, [Image::new(3)]);
    let text = serde_json::to_string(&plain).unwrap();
    assert!(!text.contains("cost"), "{text}");
    assert_eq!(serde_json::from_str::<Sample>(&text).unwrap(), plain);

    let costly = plain.clone().with_cost(Phases::new(0.25, 3.5)).unwrap();
    let text = serde_json::to_string(&costly).unwrap();
    assert!(text.contains("\"cost\""), "{text}");
    assert_eq!(serde_json::from_str::<Sample>(&text).unwrap(), costly);

    let bad = text.replace("3.5", "-3.5");
    let err = serde_json::from_str::<Sample>(&bad).unwrap_err();
    assert!(err.to_string().contains("language cost"), "{err}");
}

//! The planner's errors: each names what to fix, and nothing is planned.

use microbatch::cost::{sample_fn, Image, Phases, Sample, Tokens};
use microbatch::plan::{Planner, StepSample, SyncModel};
use microbatch::{Error, Locator, Scalar};

use crate::common::plan::{text, tokens_planner as planner};

#[test]
fn fewer_samples_than_ranks() {
    let err = planner(4, 100).plan(&[text(1, 5), text(2, 5)]).unwrap_err();
    assert_eq!(
        err,
        Error::TooFewSamples {
            samples: 2,
            ranks: 4
        }
    );
    let err = planner(1, 100).plan(&[]).unwrap_err();
    assert_eq!(
        err,
        Error::TooFewSamples {
            samples: 0,
            ranks: 1
        }
    );
}

#[test]
fn duplicate_ids() {
    let err = planner(1, 100)
        .plan(&[text(3, 5), text(1, 5), text(3, 7)])
        .unwrap_err();
    assert_eq!(err, Error::DuplicateId { id: 3 });
    assert_eq!(
        err.to_string(),
        "sample id 3 appears more than once; the ids of a step must be unique"
    );
}

#[test]
fn oversize_samples_are_named_by_id() {
    let samples = [
        text(10, 50),
        StepSample::new(11, Sample::new(10, [Image::new(200)])),
        text(12, 300),
    ];
    let err = planner(1, 100).max_images(1).plan(&samples).unwrap_err();
    let Error::Oversize { items } = &err else {
        panic!("{err:?}")
    };
    let named: Vec<_> = items
        .iter()
        .map(|o| (o.index, o.id, o.dim, o.name, o.size, o.capacity))
        .collect();
    assert_eq!(
        named,
        [
            (
                1,
                Some(11),
                0,
                Some("tokens"),
                Scalar::Int(210),
                Scalar::Int(100)
            ),
            (
                2,
                Some(12),
                0,
                Some("tokens"),
                Scalar::Int(300),
                Scalar::Int(100)
            ),
        ]
    );
    assert_eq!(
        err.to_string(),
        "2 sample(s) fit no packed sequence: sample 11 has 210 tokens > 100; sample 12 has 300 tokens > 100;"
    );
    let two_images = StepSample::new(5, Sample::new(1, [Image::new(1), Image::new(1)]));
    let err = planner(1, 100)
        .max_images(1)
        .plan(&[two_images])
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "1 sample(s) fit no packed sequence: sample 5 has 2 images > 1;"
    );
}

#[test]
fn infeasible_micro_steps_name_the_smallest() {
    let samples: Vec<_> = (0..10).map(|i| text(i, 60)).collect();
    // Two samples of 60 never share a sequence of 100: ten sequences, five
    // per rank (the token bound alone would say three).
    let err = planner(2, 100).micro_steps(2).plan(&samples).unwrap_err();
    assert_eq!(
        err,
        Error::MicroStepsInfeasible {
            given: 2,
            smallest: 5
        }
    );
    assert_eq!(
        err.to_string(),
        "2 micro-step(s) cannot hold the batch under the sequence length and caps; the \
         smallest feasible number is 5"
    );
    assert_eq!(
        planner(2, 100)
            .micro_steps(5)
            .plan(&samples)
            .unwrap()
            .micro_steps(),
        5
    );
    assert_eq!(planner(2, 100).plan(&samples).unwrap().micro_steps(), 5);
    // More micro-steps than needed are fine: some sequences stay empty.
    let p = planner(2, 100).micro_steps(7).plan(&samples).unwrap();
    assert_eq!(p.micro_steps(), 7);
    assert_eq!(p.report().sequences, 10);
}

#[test]
fn invalid_settings() {
    let s = [text(1, 5)];
    let check = |r: Result<_, Error>, name: &str| match r {
        Err(Error::Invalid {
            at: Locator::Setting { name: n, .. },
            ..
        }) => assert_eq!(n, name),
        other => panic!("{other:?}"),
    };
    check(planner(0, 100).plan(&s), "ranks");
    check(planner(1, 0).plan(&s), "seq_len");
    check(planner(1, 100).max_units(0).plan(&s), "max_units");
    check(planner(1, 100).max_images(0).plan(&s), "max_images");
    check(planner(1, 100).micro_steps(0).plan(&s), "micro_steps");
    check(
        planner(1, 100).sequences_per_micro_step(0).plan(&s),
        "sequences_per_micro_step",
    );
    assert_eq!(
        planner(0, 100).plan(&s).unwrap_err().to_string(),
        "the setting `ranks` is 0; it must be at least 1 (set it with `Planner::ranks`)"
    );
}

/// `ranks` and `seq_len` have no default: a planner without them names the
/// missing setting and the method that sets it.
#[test]
fn unset_settings_are_named() {
    let s = [text(1, 5)];
    let model = || Tokens::new(1.0).unwrap();
    let err = Planner::new(model()).seq_len(100).plan(&s).unwrap_err();
    assert_eq!(
        err.to_string(),
        "the setting `ranks` is 0; it must be at least 1 (set it with `Planner::ranks`)"
    );
    let err = Planner::new(model()).ranks(1).plan(&s).unwrap_err();
    assert_eq!(
        err.to_string(),
        "the setting `seq_len` is 0; it must be at least 1 (set it with `Planner::seq_len`)"
    );
    assert!(Planner::new(model()).ranks(1).seq_len(100).plan(&s).is_ok());
}

#[test]
fn invalid_costs_are_refused() {
    let model =
        sample_fn(|s: &Sample| Phases::new(0.0, if s.text() == 7 { f64::NAN } else { 1.0 }));
    let err = Planner::new(model)
        .ranks(1)
        .seq_len(100)
        .plan(&[text(1, 5), text(2, 7)])
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Invalid {
                at: Locator::Cost { id: 2, .. },
                ..
            }
        ),
        "{err:?}"
    );
    let negative = sample_fn(|_: &Sample| Phases::new(-1.0, 0.0));
    let err = Planner::new(negative)
        .ranks(1)
        .seq_len(100)
        .plan(&[text(1, 5)])
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "the cost model returned -1 in the vision phase for sample 1 alone; costs must be \
         finite and non-negative in every phase (fix the closure or the model, or scale its \
         coefficients down if they overflow)"
    );
}

#[test]
fn predict_checks_the_samples() {
    let samples: Vec<_> = (0..4).map(|i| text(i, 10)).collect();
    let plan = planner(2, 100).plan(&samples).unwrap();
    let model = Tokens::new(1.0).unwrap();
    let err = plan
        .predict(&samples[..3], &model, SyncModel::Step)
        .unwrap_err();
    assert_eq!(
        err,
        Error::PlanMismatch {
            id: None,
            planned: 4,
            given: 3
        }
    );
    let mut other = samples.clone();
    other[2] = StepSample::new(99, other[2].sample().clone());
    let err = plan.predict(&other, &model, SyncModel::Step).unwrap_err();
    assert_eq!(
        err,
        Error::PlanMismatch {
            id: Some(2),
            planned: 4,
            given: 4
        }
    );
    assert_eq!(
        err.to_string(),
        "the plan's sample 2 is not among the 4 sample(s) given (the plan has 4); pass the \
         samples the plan was made from"
    );
}

#[test]
fn unknown_names() {
    let err = "fsdp".parse::<SyncModel>().unwrap_err();
    assert_eq!(
        err.to_string(),
        "unknown sync model \"fsdp\"; known: step, micro-step, phase"
    );
}

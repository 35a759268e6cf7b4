//! Property tests of the planner's guarantees: every sample exactly once,
//! every cap kept, the same number of micro-steps on every rank, work on
//! every rank, independence of the input order, and a report consistent
//! with the plan.

use crate::common::rng;

use microbatch::cost::{Image, Preset, PresetModel, Sample};
use microbatch::plan::{Plan, Planner, StepSample, SyncModel};
use microbatch::Error;
use proptest::prelude::*;
use std::num::NonZeroU32;

/// One generated case: samples, ranks, sequence length, caps, settings.
#[derive(Clone, Debug)]
struct Case {
    samples: Vec<StepSample>,
    ranks: usize,
    seq_len: u32,
    max_units: Option<u32>,
    max_images: Option<u32>,
    per_step: usize,
    micro_steps: Option<usize>,
    sync: SyncModel,
}

fn sample() -> impl Strategy<Value = (u32, Vec<(u32, u32)>, Option<u64>)> {
    (
        0u32..900,
        prop::collection::vec((1u32..700, 1u32..5), 0..4),
        prop::option::of(0u64..400),
    )
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop::collection::vec(sample(), 1..70),
        1usize..7,
        prop::option::of(4u32..16),
        prop::option::of(2u32..6),
        1usize..3,
        prop::option::of(1usize..8),
        prop::sample::select(SyncModel::ALL.to_vec()),
        any::<u64>(),
    )
        .prop_map(
            |(raw, ranks, max_units, max_images, per_step, micro_steps, sync, id_seed)| {
                // Distinct, scattered ids.
                let mut ids: Vec<u64> = (0..raw.len() as u64)
                    .map(|i| i.wrapping_mul(0x9E37_79B9).wrapping_add(id_seed % 1000))
                    .collect();
                ids.dedup();
                let samples: Vec<StepSample> = raw
                    .into_iter()
                    .zip(ids)
                    .map(|((text, images, loss), id)| {
                        // Keep every sample within the caps.
                        let images: Vec<Image> = images
                            .into_iter()
                            .take(max_images.unwrap_or(u32::MAX) as usize)
                            .map(|(t, u)| {
                                let u = u.min(max_units.unwrap_or(u32::MAX) / 3).max(1);
                                Image::with_units(t, NonZeroU32::new(u).unwrap())
                            })
                            .collect();
                        let s = StepSample::new(id, Sample::new(text, images));
                        // Loss tokens are positions: at most the tokens.
                        match loss {
                            Some(l) => {
                                let tokens = s.sample().tokens();
                                s.with_loss_tokens(l % (tokens + 1))
                            }
                            None => s,
                        }
                    })
                    .collect();
                let longest = samples
                    .iter()
                    .map(|s| s.sample().tokens())
                    .max()
                    .unwrap_or(1);
                Case {
                    ranks: ranks.min(samples.len()),
                    seq_len: (longest as u32).max(1) + 600,
                    max_units,
                    max_images,
                    per_step,
                    micro_steps,
                    sync,
                    samples,
                }
            },
        )
}

fn model() -> PresetModel {
    Preset::Qwen25Vl7b.cost_model()
}

fn planner(c: &Case) -> Planner<PresetModel> {
    let mut p = Planner::new(model())
        .ranks(c.ranks)
        .seq_len(c.seq_len)
        .sync(c.sync)
        .sequences_per_micro_step(c.per_step);
    if let Some(u) = c.max_units {
        p = p.max_units(u);
    }
    if let Some(i) = c.max_images {
        p = p.max_images(i);
    }
    if let Some(a) = c.micro_steps {
        p = p.micro_steps(a);
    }
    p
}

/// Plans a case; a given A that is too small must say the smallest, and
/// that one must work.
fn plan(c: &Case) -> Plan {
    match planner(c).plan(&c.samples) {
        Ok(p) => p,
        Err(Error::MicroStepsInfeasible { given, smallest }) => {
            assert_eq!(Some(given), c.micro_steps);
            assert!(smallest > given);
            let p = planner(c).micro_steps(smallest).plan(&c.samples).unwrap();
            assert_eq!(p.micro_steps(), smallest);
            p
        }
        Err(e) => panic!("{e}"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn every_sample_exactly_once(c in case()) {
        let p = plan(&c);
        let mut planned: Vec<u64> = (0..p.ranks()).flat_map(|r| p.rank(r).to_vec()).collect();
        planned.sort_unstable();
        let mut given: Vec<u64> = c.samples.iter().map(|s| s.id()).collect();
        given.sort_unstable();
        prop_assert_eq!(planned, given);
        prop_assert_eq!(p.len(), c.samples.len());
    }

    #[test]
    fn caps_hold_in_every_sequence(c in case()) {
        let p = plan(&c);
        let by_id = |id: u64| c.samples.iter().find(|s| s.id() == id).unwrap();
        for r in 0..p.ranks() {
            for j in 0..p.micro_steps() {
                for s in 0..p.sequences_per_micro_step() {
                    let seq = p.sequence(r, j, s);
                    let tokens: u64 = seq.iter().map(|&id| by_id(id).sample().tokens()).sum();
                    let units: u64 = seq.iter().map(|&id| by_id(id).units()).sum();
                    let images: usize = seq.iter().map(|&id| by_id(id).sample().images().len()).sum();
                    prop_assert!(tokens <= u64::from(c.seq_len), "{tokens} > {}", c.seq_len);
                    if let Some(u) = c.max_units {
                        prop_assert!(units <= u64::from(u));
                    }
                    if let Some(i) = c.max_images {
                        prop_assert!(images <= i as usize);
                    }
                    prop_assert!(seq.windows(2).all(|w| w[0] < w[1]), "ascending ids");
                }
            }
        }
    }

    #[test]
    fn same_micro_steps_and_work_on_every_rank(c in case()) {
        let p = plan(&c);
        let nested = p.to_sequences();
        prop_assert_eq!(nested.len(), c.ranks);
        for rank in &nested {
            prop_assert_eq!(rank.len(), p.micro_steps());
            for step in rank {
                prop_assert_eq!(step.len(), c.per_step);
            }
            prop_assert!(rank.iter().flatten().any(|seq| !seq.is_empty()), "a rank without work");
        }
        if let Some(a) = c.micro_steps {
            prop_assert!(p.micro_steps() >= a);
        }
    }

    #[test]
    fn input_order_does_not_matter(c in case(), seed in any::<u64>()) {
        let p = plan(&c);
        let mut shuffled = c.samples.clone();
        rng::TestRng::new(seed).shuffle(&mut shuffled);
        let q = plan(&Case { samples: shuffled, ..c.clone() });
        prop_assert_eq!(p.fingerprint(), q.fingerprint());
        prop_assert_eq!(p.to_sequences(), q.to_sequences());
        prop_assert_eq!(p.loss(), q.loss());
        // The whole plan, report included (but for the planning time).
        prop_assert_eq!(&p, &q);
    }

    #[test]
    fn report_is_consistent(c in case()) {
        let p = plan(&c);
        let r = p.report();
        let m = model();
        let again = p.predict(&c.samples, &m, c.sync).unwrap();
        prop_assert!((again - r.predicted).abs() <= 1e-9 * r.predicted.max(1.0));
        // The lower bound is a bound (up to rounding of the sums).
        prop_assert!(r.predicted >= r.lower_bound * (1.0 - 1e-9), "{} < {}", r.predicted, r.lower_bound);
        prop_assert!(r.baseline >= r.lower_bound * (1.0 - 1e-9));
        prop_assert!(r.imbalance.vision >= 1.0 - 1e-9 && r.imbalance.language >= 1.0 - 1e-9);
        let loss_tokens: u64 = c.samples.iter().map(StepSample::loss_tokens).sum();
        prop_assert_eq!(p.loss().loss_tokens, loss_tokens);
        prop_assert_eq!(p.loss().samples, c.samples.len() as u64);
        prop_assert_eq!(p.loss().ranks, c.ranks as u64);
        let nonempty = (0..c.ranks)
            .flat_map(|rk| (0..p.micro_steps()).flat_map(move |j| (0..c.per_step).map(move |s| (rk, j, s))))
            .filter(|&(rk, j, s)| !p.sequence(rk, j, s).is_empty())
            .count();
        prop_assert_eq!(r.sequences, nonempty);
        // Efficiency: the real tokens over the capacity of the non-empty
        // sequences (0 when they hold only samples without tokens).
        let tokens: u64 = c.samples.iter().map(|s| s.sample().tokens()).sum();
        let want = if nonempty == 0 { 1.0 } else { tokens as f64 / (nonempty as f64 * f64::from(c.seq_len)) };
        prop_assert_eq!(r.efficiency, want);
        prop_assert!((0.0..=1.0).contains(&r.efficiency));
    }
}

/// With one rank and one micro-step the smallest A is the bin-packing count:
/// the planner reports it for an A that is too small.
#[test]
fn too_few_micro_steps_names_the_smallest() {
    let samples: Vec<StepSample> = (0..6)
        .map(|i| StepSample::new(i, Sample::text_only(600)))
        .collect();
    let err = Planner::new(model())
        .ranks(2)
        .seq_len(1000)
        .micro_steps(1)
        .plan(&samples)
        .unwrap_err();
    // Six samples of 600 tokens need six sequences of 1000: three per rank.
    assert_eq!(
        err,
        Error::MicroStepsInfeasible {
            given: 1,
            smallest: 3
        }
    );
    let p = Planner::new(model())
        .ranks(2)
        .seq_len(1000)
        .plan(&samples)
        .unwrap();
    assert_eq!(p.micro_steps(), 3);
}

/// Samples without tokens or cost (empty documents) cost nothing anywhere,
/// so the balancing alone would stack them; every rank still gets one.
#[test]
fn zero_size_samples_reach_every_rank() {
    for sync in SyncModel::ALL {
        for (n, ranks) in [(4, 4), (9, 3), (5, 4)] {
            let samples: Vec<StepSample> = (0..n)
                .map(|i| StepSample::new(i, Sample::text_only(0)))
                .collect();
            let p = Planner::new(model())
                .ranks(ranks)
                .seq_len(64)
                .sync(sync)
                .plan(&samples)
                .unwrap();
            for r in 0..ranks {
                assert!(
                    !p.rank(r).is_empty(),
                    "{sync}: rank {r} of {ranks} has no sample"
                );
            }
            assert_eq!(p.len(), n as usize);
        }
    }
}

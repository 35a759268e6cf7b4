//! Models that are not additive (a cost per packed sequence, attention over
//! the whole packed row) are balanced on each sample's share of its
//! sequence's cost, not on its cost alone (`src/plan/share.rs`).
//!
//! The batches are those of `python/benches/bench_hf_vlm.py` (48 samples, 15%
//! with 8-16 images, 15% with one, 32-480 text tokens, rows of 1,024 tokens,
//! 4 ranks) and the model the calibrator fitted there to a small real
//! Qwen2-VL with sdpa attention: a fixed cost per row in both phases and
//! `language.row_attention`. Balanced on the samples' costs alone, the plans
//! came out up to 13% slower under per-phase barriers (up to 5% under one
//! barrier a step), by their own model, than the plans of the FLOPs preset
//! (which knows nothing of the fitted model); balanced on shares, at most
//! 1.6% slower and 0.4% on average; polished on the exact costs (`src/plan/polish.rs`), faster on
//! every batch.

use microbatch::cost::{Image, Linear, Preset, Sample, Term};
use microbatch::plan::{MicroSteps, Planner, StepSample, SyncModel};

use crate::common::exact::{next_assignment, step_time};
use crate::common::rng::TestRng;

/// The bench's fitted model (seconds).
fn fitted() -> Linear {
    Linear::new([
        (Term::ImageTokens, 3.31e-5),
        (Term::Images, 4.03e-4),
        (Term::RowAttention, 5.61e-8),
        (Term::Groups, 1.07e-2),
        (Term::VisionGroups, 5.27e-3),
    ])
    .unwrap()
}

/// A step of the bench's distribution.
fn step(rng: &mut TestRng) -> Vec<StepSample> {
    (0..48)
        .map(|id| {
            let u = rng.unit();
            let count = if u < 0.15 {
                8 + rng.below(9)
            } else if u < 0.30 {
                1
            } else {
                0
            };
            let images: Vec<u32> = (0..count)
                .map(|_| ((2 + rng.below(5)) * (2 + rng.below(5))) as u32)
                .collect();
            let image_tokens: u32 = images.iter().sum();
            let text = (32 + rng.below(449) as u32).min(1024 - image_tokens - 2 * count as u32);
            StepSample::new(id, Sample::new(text, images.into_iter().map(Image::new)))
        })
        .collect()
}

#[test]
fn plans_of_a_row_cost_model_are_not_beaten_by_a_preset_plan() -> Result<(), microbatch::Error> {
    let model = fitted();
    for sync in [SyncModel::Step, SyncModel::Phase] {
        let mut rng = TestRng::new(22);
        let mut ratios = Vec::new();
        for _ in 0..8 {
            let samples = step(&mut rng);
            let own = Planner::new(model)
                .ranks(4)
                .seq_len(1024)
                .sync(sync)
                .plan(&samples)?;
            let preset = Planner::new(Preset::Qwen25Vl7b.cost_model())
                .ranks(4)
                .seq_len(1024)
                .sync(sync)
                .plan(&samples)?;
            let t = own.report().predicted;
            assert!((own.predict(&samples, &model, sync)? / t - 1.0).abs() < 1e-9);
            ratios.push(t / preset.predict(&samples, &model, sync)?);
        }
        let mean = ratios.iter().sum::<f64>() / ratios.len() as f64;
        let worst = ratios.iter().copied().fold(0.0, f64::max);
        // On shares, polished on the exact costs with kicks: mean 0.990
        // (step) and 0.970 (phase), worst 0.992 and 0.979 (every batch
        // faster than the preset's plan; without kicks 0.991 / 0.978,
        // worst 0.993 / 0.994). On shares alone (before the `polish` stage):
        // mean 1.000 and 1.004, worst 1.012 and 1.016. Balanced on the
        // samples' costs alone (before the `share` stage): mean 1.020 and
        // 1.060, worst 1.050 and 1.127.
        // Since the search trades whole micro-batches between micro-steps
        // (issue 23), the preset's per-phase plans of five of these batches
        // are 1.4-3.6% faster by the fitted model (one 0.5% slower), the
        // fitted model's own plans about as fast as before: mean 0.986, and
        // one batch of eight 0.8% slower than the preset's plan (one at
        // 1.0001).
        let (mean_at_most, worst_at_most) = match sync {
            SyncModel::Phase => (0.99, 1.01),
            _ => (1.0, 1.0),
        };
        assert!(
            mean <= mean_at_most && worst <= worst_at_most,
            "{sync:?}: {ratios:?}"
        );
    }
    Ok(())
}

/// The exact optimum of `samples` over every layout of `ranks` x `steps`
/// micro-batches of one sequence each (every sequence within `seq_len`
/// tokens, every rank a sample), each sequence's cost `model.cost` of its
/// members, under `sync`: by enumeration (`(ranks * steps)^n` layouts).
fn optimum(
    samples: &[StepSample],
    model: &Linear,
    sync: SyncModel,
    ranks: usize,
    steps: usize,
    seq_len: u64,
) -> f64 {
    use microbatch::cost::{CostModel, Phases};
    let k = ranks * steps;
    let n = samples.len();
    let mut slot = vec![0usize; n];
    let mut best = f64::INFINITY;
    loop {
        let mut members: Vec<Vec<&Sample>> = vec![Vec::new(); k];
        for (i, &s) in slot.iter().enumerate() {
            members[s].push(samples[i].sample());
        }
        let fits = members
            .iter()
            .all(|m| m.iter().map(|s| s.tokens()).sum::<u64>() <= seq_len);
        let busy = (0..ranks).all(|r| (0..steps).any(|j| !members[r * steps + j].is_empty()));
        if fits && busy {
            let cost: Vec<Phases> = members.iter().map(|m| model.cost(m)).collect();
            best = best.min(step_time(sync, ranks, steps, &cost));
        }
        if !next_assignment(&mut slot, k) {
            return best;
        }
    }
}

/// Against the exact optimum of small batches (6 to 8 samples of the
/// bench's distribution over 2 ranks x 2 micro-steps, by enumeration):
/// the plan's predicted time over the optimum, seeded family of 24.
///
/// Now: mean 1.003 / worst 1.064 (step), the optimum on every batch under
/// the per-micro-step models (1.0000 / 1.0000). The exact stage, exact for
/// sums of per-sample costs, packed these batches into one micro-step (one
/// long row a rank, the other micro-step empty), and the polish, one move
/// at a time, cannot open a row whose fixed cost is paid before the
/// attention it saves: 1.033 / 1.175 (micro-step) and 1.044 / 1.175
/// (phase) while every plan went through the exact stage; such models now
/// also plan without it, the faster plan kept. Before the `polish` stage
/// (shares only): 1.033 / 1.342, 1.053 / 1.175, 1.086 / 1.312. What is
/// left under one barrier a step is a merge of two rows of a rank (one
/// fixed cost less) that pays only together with a second move.
#[test]
fn plans_of_a_row_cost_model_near_the_exact_optimum_of_small_batches(
) -> Result<(), microbatch::Error> {
    let model = fitted();
    for (sync, mean_at_most, worst_at_most) in [
        (SyncModel::Step, 1.01, 1.08),
        (SyncModel::MicroStep, 1.001, 1.01),
        (SyncModel::Phase, 1.001, 1.01),
    ] {
        let mut rng = TestRng::new(5);
        let mut ratios = Vec::new();
        for _ in 0..24 {
            let n = 6 + rng.below(3) as usize;
            let samples: Vec<StepSample> = step(&mut rng).into_iter().take(n).collect();
            let plan = Planner::new(model)
                .ranks(2)
                .seq_len(1024)
                .micro_steps(2)
                .sync(sync)
                .plan(&samples)?;
            let opt = optimum(&samples, &model, sync, 2, 2, 1024);
            let ratio = plan.report().predicted / opt;
            assert!(ratio >= 1.0 - 1e-9, "{sync:?}: below the optimum: {ratio}");
            ratios.push(ratio);
        }
        let mean = ratios.iter().sum::<f64>() / ratios.len() as f64;
        let worst = ratios.iter().copied().fold(0.0, f64::max);
        println!("{sync:?}: mean {mean:.4} worst {worst:.4}");
        assert!(
            mean <= mean_at_most && worst <= worst_at_most,
            "{sync:?}: {ratios:.4?}"
        );
    }
    Ok(())
}

/// `fastest_micro_steps(up_to)` keeps, of the plans with every number of
/// micro-steps from the smallest to `up_to`, the one of least predicted
/// time, ties to fewer: recomputed here from the plans of each number
/// given. With the fitted model, more micro-steps (shorter rows) are
/// predicted faster on these batches: 4 -> 5-6 micro-steps, 7-12% faster.
#[test]
fn the_fastest_micro_steps_are_the_best_of_each_number() -> Result<(), microbatch::Error> {
    let model = fitted();
    let mut rng = TestRng::new(9);
    let mut faster = 0;
    for sync in [SyncModel::Step, SyncModel::MicroStep, SyncModel::Phase] {
        for _ in 0..3 {
            let samples = step(&mut rng);
            let planner = Planner::new(model).ranks(4).seq_len(1024).sync(sync);
            let smallest = planner.plan(&samples)?;
            let a0 = smallest.micro_steps();
            let mut best = smallest.clone();
            for a in a0 + 1..=a0 + 3 {
                let next = planner.clone().micro_steps(a).plan(&samples)?;
                if next.report().predicted < best.report().predicted {
                    best = next;
                }
            }
            let fastest = planner
                .clone()
                .micro_step_count(MicroSteps::Fastest { up_to: a0 + 3 })
                .plan(&samples)?;
            assert_eq!(fastest.to_nested(), best.to_nested(), "{sync:?}");
            assert_eq!(fastest.report().predicted, best.report().predicted);
            assert!(fastest.report().predicted <= smallest.report().predicted);
            faster += usize::from(fastest.micro_steps() > a0);
            // A later setting of the micro-steps replaces it.
            let given = planner
                .micro_step_count(MicroSteps::Fastest { up_to: a0 + 3 })
                .micro_steps(a0);
            assert_eq!(given.plan(&samples)?.to_nested(), smallest.to_nested());
        }
    }
    assert!(faster >= 6, "more micro-steps won on {faster} of 9 batches");
    Ok(())
}

#[test]
fn the_fastest_micro_steps_never_make_more_sequences_than_samples() -> Result<(), microbatch::Error>
{
    use microbatch::{Error, Locator};
    // Attention over the row alone: every split is faster, so the planner
    // goes as far as it may: one sample a sequence.
    let model = Linear::new([(Term::RowAttention, 1.0)])?;
    let samples: Vec<StepSample> = (0..8)
        .map(|i| StepSample::new(i, Sample::text_only(100)))
        .collect();
    let planner = Planner::new(model).ranks(2).seq_len(800);
    let plan = planner
        .clone()
        .micro_step_count(MicroSteps::Fastest { up_to: usize::MAX })
        .plan(&samples)?;
    assert_eq!(plan.micro_steps(), 4);
    assert_eq!(plan.report().predicted, 4.0 * 100.0 * 100.0);
    let err = planner
        .micro_step_count(MicroSteps::Fastest { up_to: 0 })
        .plan(&samples)
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Invalid {
                at: Locator::Setting {
                    name: "fastest_micro_steps",
                    ..
                },
                ..
            }
        ),
        "{err:?}"
    );
    Ok(())
}

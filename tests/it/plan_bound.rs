//! The report's lower bound against exact optima: on tiny instances (at most
//! 7 samples, 2 ranks, 3 micro-steps) every assignment of samples to slots
//! that keeps the sequence length is tried, and the bound is at most the
//! best step time of any of them, for every sync model; and the staircase
//! makes it strictly tighter than the sum of the floors over the ranks
//! where a micro-step must wait for its largest samples. On random small
//! instances with vision and language costs, units and caps, the bound (the
//! analytic one alone, and raised by the planner's exact proof) is at most
//! the optimum of the exact oracle ([`crate::common::exact`]) at every
//! number of micro-steps tried.

use crate::common::exact::{optimum, Instance, Item};
use microbatch::cost::{Given, Phases};
use microbatch::plan::{Plan, Planner, StepSample, SyncModel};
use proptest::prelude::*;

/// (tokens, vision cost, language cost) of each sample.
type Spec = Vec<(u32, f64, f64)>;

fn samples(spec: &Spec) -> Vec<StepSample> {
    crate::common::plan::given(spec)
}

/// The least step time under each sync model (in the order of
/// [`SyncModel::ALL`]) of any assignment of the samples to `ranks x steps`
/// sequences of `seq_len` tokens, over 1 to `max_steps` micro-steps (empty
/// ranks allowed, which only lowers it); `None` if none fits.
fn optima(spec: &Spec, ranks: usize, max_steps: usize, seq_len: u32) -> [Option<f64>; 3] {
    let mut best: [Option<f64>; 3] = [None; 3];
    for steps in 1..=max_steps {
        let slots = ranks * steps;
        let n = spec.len();
        let mut assign = vec![0usize; n];
        loop {
            let mut tokens = vec![0u32; slots];
            let mut cost = vec![Phases::ZERO; slots];
            for (i, &s) in assign.iter().enumerate() {
                tokens[s] += spec[i].0;
                cost[s] += Phases::new(spec[i].1, spec[i].2);
            }
            if tokens.iter().all(|&t| t <= seq_len) {
                // slot = rank * steps + step
                for (b, sync) in best.iter_mut().zip(SyncModel::ALL) {
                    let time = crate::common::exact::step_time(sync, ranks, steps, &cost);
                    *b = Some(b.map_or(time, |b: f64| b.min(time)));
                }
            }
            if !crate::common::exact::next_assignment(&mut assign, slots) {
                break;
            }
        }
    }
    best
}

/// The bound before the staircase: floors over the ranks (and the largest
/// sample for one barrier a step or a micro-step).
fn old_bound(spec: &Spec, ranks: usize, sync: SyncModel) -> f64 {
    let r = ranks as f64;
    let v: f64 = spec.iter().map(|s| s.1).sum();
    let l: f64 = spec.iter().map(|s| s.2).sum();
    let largest = spec.iter().map(|s| s.1 + s.2).fold(0.0, f64::max);
    match sync {
        SyncModel::Phase => v / r + l / r,
        _ => ((v + l) / r).max(largest),
    }
}

/// The planner's plan of `spec` on its given costs.
fn plan(spec: &Spec, ranks: usize, seq_len: u32, sync: SyncModel) -> Plan {
    Planner::new(Given)
        .ranks(ranks)
        .seq_len(seq_len)
        .sync(sync)
        .plan(&samples(spec))
        .expect("a plan")
}

fn bound(spec: &Spec, ranks: usize, seq_len: u32, sync: SyncModel) -> f64 {
    plan(spec, ranks, seq_len, sync).report().lower_bound
}

fn spec() -> impl Strategy<Value = (Spec, usize, u32)> {
    (
        prop::collection::vec((1u32..=10, 0u32..=6, 0u32..=6), 2..=7),
        1usize..=2,
        10u32..=20,
    )
        .prop_map(|(items, ranks, seq_len)| {
            let spec = items
                .into_iter()
                .map(|(t, v, l)| (t, f64::from(v), f64::from(l)))
                .collect();
            (spec, ranks, seq_len)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// The bound is at most the exact optimum over every layout of at most
    /// 3 micro-steps, under every sync model, and at least the bound
    /// without the staircase.
    #[test]
    fn bound_is_at_most_the_optimum((spec, ranks, seq_len) in spec()) {
        prop_assume!(spec.len() >= ranks);
        let optima = optima(&spec, ranks, 3, seq_len);
        for (sync, best) in SyncModel::ALL.into_iter().zip(optima) {
            // Layouts that need more than 3 micro-steps are not tried.
            let Some(best) = best else { continue };
            let lb = bound(&spec, ranks, seq_len, sync);
            prop_assert!(lb <= best * (1.0 + 1e-12), "{sync}: bound {lb} above the optimum {best}");
            prop_assert!(lb >= old_bound(&spec, ranks, sync) * (1.0 - 1e-12));
        }
    }
}

/// Three samples that fill more than half a sequence each on two ranks: two
/// micro-steps each wait for one of them, 20, where the floors over the
/// ranks say 15; the optimum is 20.
#[test]
fn staircase_is_strictly_tighter() {
    let spec: Spec = vec![
        (60, 0.0, 10.0),
        (60, 0.0, 10.0),
        (60, 0.0, 10.0),
        (1, 0.0, 0.0),
    ];
    for sync in [SyncModel::MicroStep, SyncModel::Phase] {
        let lb = bound(&spec, 2, 100, sync);
        assert_eq!(old_bound(&spec, 2, sync), 15.0);
        assert_eq!(lb, 20.0, "{sync}");
        let i = SyncModel::ALL.iter().position(|&s| s == sync).unwrap();
        assert_eq!(optima(&spec, 2, 3, 100)[i], Some(20.0));
    }
    // Per phase: the vision of two samples in one micro-step by tokens, the
    // language of the others; each phase's staircase counts.
    let spec: Spec = vec![
        (60, 8.0, 1.0),
        (60, 8.0, 1.0),
        (60, 8.0, 1.0),
        (5, 0.0, 1.0),
    ];
    let lb = bound(&spec, 2, 100, SyncModel::Phase);
    assert!(lb > old_bound(&spec, 2, SyncModel::Phase), "{lb}");
    assert!(lb <= optima(&spec, 2, 3, 100)[2].unwrap());
}

/// The fill: one long dense sample (100 tokens, cost 10) and 30 short ones
/// (10 tokens, 0.5 each) on two ranks of 100-token sequences. The
/// micro-step holding the long one waits 10, and its other rank holds at
/// most 100 tokens of short ones (5); the remaining short ones cost 15 / 2
/// at best. So every plan takes at least 10 + (25 - 15) / 2 = 15, where the
/// floors over the ranks say 12.5 and the staircase 10.5; the planner
/// reaches 15.
#[test]
fn fill_is_strictly_tighter() {
    let mut spec: Spec = vec![(100, 0.0, 10.0)];
    spec.extend((0..30).map(|_| (10, 0.0, 0.5)));
    for sync in [SyncModel::MicroStep, SyncModel::Phase] {
        let plan = plan(&spec, 2, 100, sync);
        let lb = plan.report().lower_bound;
        assert_eq!(old_bound(&spec, 2, sync), 12.5);
        assert!((lb - 15.0).abs() < 1e-9, "{sync}: {lb}");
        assert!(plan.report().predicted >= lb);
        assert!(
            (plan.report().predicted - 15.0).abs() < 1e-9,
            "{sync}: {}",
            plan.report().predicted
        );
    }
    // With the long sample no denser than the short ones the fill is 0.
    let mut spec: Spec = vec![(100, 0.0, 10.0)];
    spec.extend((0..30).map(|_| (10, 0.0, 1.0)));
    let lb = bound(&spec, 2, 100, SyncModel::Phase);
    assert!((lb - 20.0).abs() < 1e-9, "{lb}");
}

/// A regression found by fuzzing: a floor so small that its density (floor
/// per token) underflows to 0 must still count in the fill, or the fill
/// leaves it out and the bound exceeds the plan. Two samples of vision cost
/// 3.2e-319 (subnormal), one of no tokens, one of 200,000 tokens, on two
/// ranks: the bound is one of them, as the plan.
#[test]
fn fill_counts_floors_whose_density_underflows() {
    let v = 3.23786e-319;
    let spec: Spec = vec![(0, v, 0.0), (200_000, v, 0.0)];
    for sync in [SyncModel::MicroStep, SyncModel::Phase] {
        let plan = plan(&spec, 2, 400_000, sync);
        let report = plan.report();
        assert!(report.lower_bound <= report.predicted, "{sync}: {report:?}");
        assert_eq!(report.lower_bound, v, "{sync}");
    }
}

/// The fill row reaches the fill term: on 8 ranks of 100-token sequences,
/// one long sample (100 tokens, cost 20), 14 dense ones (50 tokens, 8) and
/// 160 light ones (10 tokens, 0.5). The micro-step of the long one waits 20
/// whatever else it holds; filled with the 14 dense ones (two a sequence,
/// 16 each), it leaves 160 light ones to two micro-steps of 16 sequences
/// (5 each): 30, the bound (floors over the ranks 26.5, plus the fill 20 -
/// 132 / 8). A balanced packing spreads the dense ones (about 8.8 a
/// sequence), and no exchange of one sample for one other can then bring
/// them together, as every sequence is full in tokens: without the fill row
/// the plan takes 35.5.
#[test]
fn the_fill_row_reaches_the_fill_bound() {
    let mut spec: Spec = vec![(100, 0.0, 20.0)];
    spec.extend((0..14).map(|_| (50, 0.0, 8.0)));
    spec.extend((0..160).map(|_| (10, 0.0, 0.5)));
    let plan = plan(&spec, 8, 100, SyncModel::Phase);
    let r = plan.report();
    assert!((r.lower_bound - 30.0).abs() < 1e-9, "{}", r.lower_bound);
    assert!((r.predicted - 30.0).abs() < 1e-9, "{}", r.predicted);
}

/// A random small instance for the oracle: 3 to 9 samples (tokens, ViT
/// units, vision and language costs in small integers, so that ties and
/// equal costs are common), 1 to 3 ranks, 1 to 3 micro-steps, a sequence
/// length of 10 to 24 tokens and, half of the time, a cap of 3 units.
fn small(
    items: Vec<(u64, u64, u32, u32)>,
    ranks: usize,
    a: usize,
    seq_len: u32,
    capped: bool,
) -> Instance {
    Instance {
        items: items
            .into_iter()
            .map(|(tokens, units, v, l)| Item {
                tokens,
                units,
                cost: Phases::new(f64::from(v), f64::from(l)),
            })
            .collect(),
        ranks,
        micro_steps: a,
        seq_len,
        max_units: capped.then_some(3),
    }
}

fn instance() -> impl Strategy<Value = Instance> {
    (
        prop::collection::vec((2u64..=12, 0u64..=2, 0u32..=6, 0u32..=9), 3..=9),
        1usize..=3,
        1usize..=3,
        10u32..=24,
        proptest::bool::ANY,
    )
        .prop_map(|(items, ranks, a, seq_len, capped)| small(items, ranks, a, seq_len, capped))
}

/// The oracle's node budget (the instances above need far fewer).
const ORACLE_BUDGET: u64 = 50_000_000;

/// Per sync model with an optimum, and per effort (0: the analytic bound
/// alone, no search to raise it; `None`: the default, raised on these
/// small batches to what the exact search proves): the report's bound and
/// the least optimum of the oracle over `A` and `A + 1` micro-steps. The
/// bound of a batch does not depend on `A`, so the planner may use its own
/// where it finds no plan of `A`.
fn bounds_and_optima(inst: &Instance) -> Vec<(SyncModel, Option<u32>, f64, f64)> {
    let samples = inst.samples();
    let mut out = Vec::new();
    for sync in SyncModel::ALL {
        let mut best: Option<f64> = None;
        for extra in 0..2 {
            let mut at = inst.clone();
            at.micro_steps += extra;
            if let Some(o) = optimum(&at, sync, ORACLE_BUDGET) {
                best = Some(best.map_or(o.time, |b: f64| b.min(o.time)));
            }
        }
        let Some(best) = best else { continue };
        for effort in [Some(0), None] {
            let with = |p: Planner<Given>| match effort {
                Some(e) => p.search_effort(e),
                None => p,
            };
            let plan = with(inst.planner(sync)).plan(&samples).unwrap_or_else(|_| {
                let mut own = Planner::new(Given)
                    .ranks(inst.ranks)
                    .seq_len(inst.seq_len)
                    .sync(sync);
                if let Some(u) = inst.max_units {
                    own = own.max_units(u);
                }
                with(own).plan(&samples).expect("a plan")
            });
            out.push((sync, effort, plan.report().lower_bound, best));
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// The report's bound is at most the exact optimum of every plan of
    /// the instance's `A` micro-steps, and of `A + 1`, under every sync
    /// model, without the search and with it.
    #[test]
    fn bound_is_at_most_the_oracles_optimum(inst in instance()) {
        prop_assume!(inst.items.len() >= inst.ranks);
        for (sync, effort, lb, best) in bounds_and_optima(&inst) {
            prop_assert!(
                lb <= best * (1.0 + 1e-12),
                "{sync}, effort {effort:?}: bound {lb} above the optimum {best}"
            );
        }
    }
}

/// The property above can fail: on seeded instances of the same kind, the
/// bound raised by 2% exceeds the optimum on many of them, without the
/// search (the analytic bound) and with it (the proven one), under every
/// sync model.
#[test]
fn the_oracle_check_sees_a_bound_two_percent_high() {
    let mut caught = std::collections::BTreeMap::new();
    for seed in 0..48u64 {
        let mut rng = crate::common::TestRng::new(7000 + seed);
        let n = 3 + rng.below(7) as usize;
        let items = (0..n)
            .map(|_| {
                (
                    2 + rng.below(11),
                    rng.below(3),
                    rng.below(7) as u32,
                    rng.below(10) as u32,
                )
            })
            .collect();
        let ranks = 1 + rng.below(3) as usize;
        let a = 1 + rng.below(3) as usize;
        let inst = small(
            items,
            ranks,
            a,
            10 + rng.below(15) as u32,
            rng.below(2) == 0,
        );
        if inst.items.len() < ranks {
            continue;
        }
        for (sync, effort, lb, best) in bounds_and_optima(&inst) {
            let e = caught.entry((sync.name(), effort)).or_insert(0);
            *e += usize::from(lb * 1.02 > best * (1.0 + 1e-12));
        }
    }
    assert_eq!(caught.len(), 6, "{caught:?}");
    assert!(caught.values().all(|&c| c >= 5), "{caught:?}");
}

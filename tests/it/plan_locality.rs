//! Locality and the exchange schedule: every sample exactly once within the
//! caps, the exchange's sends are the plan's moves (recomputed from the
//! origins and the plan), the step time stays within the tolerance of the
//! locality-free plan, nothing moves when the origins already form that
//! plan up to a relabelling of ranks, determinism, plans without origins
//! unchanged, and the errors.

use std::collections::BTreeMap;

use microbatch::cost::{Image, Preset, Sample};
use microbatch::plan::{GroupScope, Locality, Plan, Planner, StepSample, SyncModel};
use microbatch::{Error, InvalidReason, Locator, Scalar};
use proptest::prelude::*;

/// A case: samples (origins set), ranks, settings.
#[derive(Clone, Debug)]
struct Case {
    samples: Vec<StepSample>,
    ranks: usize,
    per_step: usize,
    micro_steps: Option<usize>,
    sync: SyncModel,
    tolerance: f64,
    node: Option<usize>,
    /// The bound on step 3's work (`Locality::effort`), if any.
    effort: Option<u32>,
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop::collection::vec(
            (
                0u32..900,
                prop::collection::vec(1u32..700, 0..3),
                any::<u8>(),
                prop::option::of(0u64..5000),
            ),
            1..60,
        ),
        1usize..6,
        1usize..3,
        prop::option::of(1usize..5),
        prop::sample::select(SyncModel::ALL.to_vec()),
        prop::sample::select(vec![0.0, 0.005, 0.05, 0.5]),
        prop::option::of(1usize..4),
        prop::option::of(0u32..24),
    )
        .prop_map(
            |(raw, ranks, per_step, micro_steps, sync, tolerance, node, effort)| {
                let ranks = ranks.min(raw.len());
                let samples = raw
                    .into_iter()
                    .enumerate()
                    .map(|(i, (text, images, origin, bytes))| {
                        let s = StepSample::new(
                            (i as u64).wrapping_mul(7919) % 1009,
                            Sample::new(text + 1, images.into_iter().map(Image::new)),
                        );
                        // Some samples without an origin.
                        let s = if origin % 7 == 6 {
                            s
                        } else {
                            s.with_origin(origin as usize % ranks)
                        };
                        match bytes {
                            Some(b) => s.with_bytes(b),
                            None => s,
                        }
                    })
                    .collect();
                Case {
                    samples,
                    ranks,
                    per_step,
                    micro_steps,
                    sync,
                    tolerance,
                    node,
                    effort,
                }
            },
        )
}

const SEQ_LEN: u32 = 4096;

fn planner(c: &Case) -> Planner<microbatch::cost::PresetModel> {
    let p = Planner::new(Preset::Qwen25Vl7b.cost_model())
        .ranks(c.ranks)
        .seq_len(SEQ_LEN)
        .sync(c.sync)
        .sequences_per_micro_step(c.per_step);
    match c.micro_steps {
        Some(a) => p.micro_steps(a),
        None => p,
    }
}

fn locality(c: &Case) -> Locality {
    let l = Locality::new(c.tolerance).unwrap();
    let l = match c.node {
        Some(n) => l.ranks_per_node(n),
        None => l,
    };
    match c.effort {
        Some(e) => l.effort(e),
        None => l,
    }
}

/// The rank of every id in the plan.
fn ranks_of(plan: &Plan) -> BTreeMap<u64, usize> {
    let mut out = BTreeMap::new();
    for r in 0..plan.ranks() {
        for &id in plan.rank(r) {
            out.insert(id, r);
        }
    }
    out
}

/// The exchange and the traffic are the plan's moves, recomputed.
fn check_exchange(plan: &Plan, samples: &[StepSample], node: Option<usize>) {
    let at = ranks_of(plan);
    let mut expected: BTreeMap<(usize, usize), Vec<u64>> = BTreeMap::new();
    let (mut bytes, mut total, mut any) = (0u64, 0u64, false);
    for s in samples {
        if let Some(o) = s.origin() {
            any = true;
            total += s.bytes();
            let r = at[&s.id()];
            if r != o {
                expected.entry((o, r)).or_default().push(s.id());
                bytes += s.bytes();
            }
        }
    }
    let Some(x) = plan.exchange() else {
        assert!(!any, "origins but no exchange");
        assert!(plan.report().traffic.is_none());
        return;
    };
    let t = plan.report().traffic.unwrap();
    let mut moved = 0;
    for from in 0..plan.ranks() {
        for to in 0..plan.ranks() {
            let mut want = expected.get(&(from, to)).cloned().unwrap_or_default();
            want.sort_unstable();
            assert_eq!(x.sends(from, to), want.as_slice(), "sends({from}, {to})");
            moved += want.len();
        }
        let out: u64 = expected
            .iter()
            .filter(|(k, _)| k.0 == from)
            .flat_map(|(_, v)| v)
            .map(|id| samples.iter().find(|s| s.id() == *id).unwrap().bytes())
            .sum();
        assert_eq!(x.bytes_out(from), out);
        let sent: usize = expected
            .iter()
            .filter(|(k, _)| k.0 == from)
            .map(|(_, v)| v.len())
            .sum();
        let received: usize = expected
            .iter()
            .filter(|(k, _)| k.1 == from)
            .map(|(_, v)| v.len())
            .sum();
        assert_eq!((x.sent(from), x.received(from)), (sent, received));
    }
    assert_eq!((x.len(), t.samples_moved), (moved, moved));
    assert_eq!((t.bytes_moved, t.bytes_total), (bytes, total));
    let max_in = (0..plan.ranks()).map(|r| x.bytes_in(r)).max().unwrap_or(0);
    let max_out = (0..plan.ranks()).map(|r| x.bytes_out(r)).max().unwrap_or(0);
    assert_eq!((t.max_bytes_in, t.max_bytes_out), (max_in, max_out));
    let inter: Option<u64> = node.map(|n| {
        x.moves()
            .filter(|m| m.from / n != m.to / n)
            .map(|m| m.bytes)
            .sum()
    });
    assert_eq!(t.inter_node_bytes, inter);
}

/// Every sample exactly once, every sequence within `L`, work on every rank.
fn check_plan(plan: &Plan, samples: &[StepSample]) {
    check_plan_within(plan, samples, SEQ_LEN);
}

/// [`check_plan`] with sequences of `seq_len` tokens.
fn check_plan_within(plan: &Plan, samples: &[StepSample], seq_len: u32) {
    let mut ids: Vec<u64> = (0..plan.ranks())
        .flat_map(|r| plan.rank(r).to_vec())
        .collect();
    ids.sort_unstable();
    let mut want: Vec<u64> = samples.iter().map(StepSample::id).collect();
    want.sort_unstable();
    assert_eq!(ids, want);
    let tokens: BTreeMap<u64, u64> = samples
        .iter()
        .map(|s| (s.id(), s.sample().tokens()))
        .collect();
    for seqs in plan.to_sequences() {
        assert!(
            seqs.iter().flatten().any(|s| !s.is_empty()),
            "a rank without work"
        );
        for seq in seqs.iter().flatten() {
            assert!(seq.windows(2).all(|w| w[0] < w[1]));
            assert!(seq.iter().map(|id| tokens[id]).sum::<u64>() <= u64::from(seq_len));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Exactly once, caps, the exchange, the tolerance, determinism.
    #[test]
    fn locality_keeps_the_plan_sound(c in case()) {
        let free = planner(&c).plan(&c.samples);
        let Ok(free) = free else { return Ok(()) }; // infeasible micro-steps
        let local = planner(&c).locality(locality(&c)).plan(&c.samples).unwrap();
        check_plan(&local, &c.samples);
        check_exchange(&local, &c.samples, c.node);
        check_exchange(&free, &c.samples, None);
        let r = local.report();
        prop_assert_eq!(r.locality_free, Some(free.report().predicted));
        prop_assert!(r.predicted <= (1.0 + c.tolerance) * free.report().predicted,
            "{} > (1 + {}) * {}", r.predicted, c.tolerance, free.report().predicted);
        // Never more (weighted) bytes than the locality-free plan, without
        // nodes, and at equal bytes never more samples moved (a sample of
        // no bytes does not move for nothing), at every tolerance, 0 too.
        if c.node.is_none() {
            let moved = |p: &Plan| p.report().traffic.map(|t| (t.bytes_moved, t.samples_moved));
            prop_assert!(moved(&local) <= moved(&free), "{:?} > {:?}", moved(&local), moved(&free));
        }
        let mut reversed = c.samples.clone();
        reversed.reverse();
        let again = planner(&c).locality(locality(&c)).plan(&reversed).unwrap();
        prop_assert_eq!(again.fingerprint(), local.fingerprint());
        prop_assert_eq!(again.exchange(), local.exchange());
    }

    /// When the origins are the locality-free plan's own ranks, relabelled
    /// (per rank, or per micro-step for the per-micro-step models),
    /// nothing moves.
    #[test]
    fn origins_that_form_the_plan_move_nothing(c in case(), shift in 0usize..7) {
        let Ok(free) = planner(&c).plan(&c.samples) else { return Ok(()) };
        let r = c.ranks;
        let mut origin: BTreeMap<u64, usize> = BTreeMap::new();
        for rank in 0..r {
            for j in 0..free.micro_steps() {
                let q = match c.sync {
                    SyncModel::Step => (rank + shift) % r,
                    _ => (rank + shift * j) % r,
                };
                for &id in free.micro_batch(rank, j) {
                    origin.insert(id, q);
                }
            }
        }
        // Only origins that give every rank work form a plan.
        let mut has = vec![false; r];
        origin.values().for_each(|&q| has[q] = true);
        prop_assume!(has.iter().all(|&h| h));
        let samples: Vec<StepSample> = c.samples.iter().map(|s| s.clone().with_origin(origin[&s.id()])).collect();
        let local = planner(&c).locality(locality(&c)).plan(&samples).unwrap();
        prop_assert_eq!(local.exchange().map(|x| x.len()), Some(0));
        prop_assert_eq!(local.report().predicted, free.report().predicted);
    }
}

fn text(n: u64) -> Vec<StepSample> {
    (0..n)
        .map(|i| StepSample::new(i, Sample::text_only(100 + (i as u32 * 37) % 300)))
        .collect()
}

#[test]
fn without_origins_locality_changes_nothing() {
    for sync in SyncModel::ALL {
        let samples = text(40);
        let p = Planner::new(Preset::Qwen25Vl7b.cost_model())
            .ranks(3)
            .seq_len(2048)
            .sync(sync);
        let a = p.plan(&samples).unwrap();
        let b = p
            .clone()
            .locality(Locality::new(0.01).unwrap())
            .plan(&samples)
            .unwrap();
        assert_eq!(a.fingerprint(), b.fingerprint());
        assert_eq!((a.exchange(), b.exchange()), (None, None));
        assert_eq!(b.report().locality_free, Some(b.report().predicted));
        assert_eq!(a.report().locality_free, None);
    }
}

/// One barrier a step, equal costs: rank 0 holds three samples (two of
/// 1,000 bytes, one of none), rank 1 one; a balanced plan puts two on each
/// rank, and the one to move is the sample of no bytes (the densest stay
/// home), so no byte moves. Fails if the home-first fill gives away by
/// cost or position rather than by bytes per cost.
#[test]
fn a_full_rank_gives_away_what_costs_no_bytes() {
    let samples: Vec<StepSample> = [(0, 1000), (0, 0), (0, 1000), (1, 1000)]
        .into_iter()
        .enumerate()
        .map(|(i, (origin, bytes))| {
            StepSample::new(i as u64, Sample::text_only(100))
                .with_origin(origin)
                .with_bytes(bytes)
        })
        .collect();
    let p = Planner::new(Preset::Qwen25Vl7b.cost_model())
        .ranks(2)
        .seq_len(1024)
        .sync(SyncModel::Step);
    let free = p.plan(&samples).unwrap();
    let local = p
        .clone()
        .locality(Locality::new(0.005).unwrap())
        .plan(&samples)
        .unwrap();
    let t = local.report().traffic.unwrap();
    assert_eq!((t.samples_moved, t.bytes_moved), (1, 0));
    assert_eq!(local.report().predicted, free.report().predicted);
    assert_eq!(ranks_of(&local)[&1], 1);
}

/// One barrier a step, every rank already holding an equal share (the
/// same costs on every rank) but dealt round robin in id order: whatever
/// the locality-free plan does, nothing needs to move, and nothing does.
#[test]
fn balanced_holdings_stay_home() {
    let ranks = 8;
    let samples: Vec<StepSample> = (0..ranks * 12)
        .map(|i| {
            let size = 100 + 40 * (i / ranks) as u32;
            StepSample::new(i as u64, Sample::new(20, [Image::new(size)]))
                .with_origin(i % ranks)
                .with_bytes(u64::from(size) * 2352)
        })
        .collect();
    let p = Planner::new(Preset::Qwen25Vl7b.cost_model())
        .ranks(ranks)
        .seq_len(4096)
        .sync(SyncModel::Step);
    let free = p.plan(&samples).unwrap();
    let local = p
        .clone()
        .locality(Locality::new(0.005).unwrap())
        .plan(&samples)
        .unwrap();
    assert_eq!(local.exchange().map(|x| x.len()), Some(0));
    assert!(local.report().predicted <= 1.005 * free.report().predicted);
}

#[test]
fn origins_without_locality_leave_the_plan_and_give_an_exchange() {
    let samples = text(40);
    let held: Vec<_> = samples.iter().map(|s| s.clone().with_origin(0)).collect();
    let p = Planner::new(Preset::Qwen25Vl7b.cost_model())
        .ranks(4)
        .seq_len(2048);
    let (a, b) = (p.plan(&samples).unwrap(), p.plan(&held).unwrap());
    assert_eq!(a.fingerprint(), b.fingerprint());
    let x = b.exchange().unwrap();
    assert_eq!(x.len(), 40 - b.rank(0).len());
    assert_eq!(x.sent(0), x.len());
}

#[test]
fn errors_name_what_is_wrong() {
    let mut samples = text(8);
    samples[5] = samples[5].clone().with_origin(9);
    samples[2] = samples[2].clone().with_origin(4);
    let p = Planner::new(Preset::Qwen25Vl7b.cost_model())
        .ranks(4)
        .seq_len(2048);
    let err = p.plan(&samples).unwrap_err();
    assert_eq!(
        err,
        Error::Invalid {
            at: Locator::Origin { id: 2, ranks: 4 },
            value: Scalar::Int(4),
            reason: InvalidReason::NotARank
        }
    );
    assert_eq!(
        err.to_string(),
        "sample id 2 has origin rank 4 but the plan has 4 ranks (0 to 3); give each sample the \
         rank whose data loader holds it"
    );
    assert_eq!(p.baseline(&samples).unwrap_err(), err);
    let err = p
        .locality(Locality::new(0.0).unwrap().ranks_per_node(0))
        .plan(&text(8))
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Invalid {
                at: Locator::Setting {
                    name: "ranks_per_node",
                    ..
                },
                ..
            }
        ),
        "{err}"
    );
    for bad in [f64::NAN, -0.5, f64::INFINITY] {
        assert!(matches!(
            Locality::new(bad),
            Err(Error::Invalid {
                at: Locator::Coefficient { name: "tolerance" },
                ..
            })
        ));
    }
}

#[cfg(feature = "serde")]
#[test]
fn plans_with_an_exchange_round_trip_and_bad_moves_are_refused() {
    let samples: Vec<_> = text(30)
        .into_iter()
        .map(|s| s.with_origin(1).with_bytes(3))
        .collect();
    let plan = Planner::new(Preset::Qwen25Vl7b.cost_model())
        .ranks(3)
        .seq_len(2048)
        .locality(Locality::new(0.01).unwrap())
        .plan(&samples)
        .unwrap();
    let json = serde_json::to_string(&plan).unwrap();
    assert_eq!(serde_json::from_str::<Plan>(&json).unwrap(), plan);
    let doc: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert!(doc["exchange"]["moves"].as_array().unwrap().len() > 1);
    let mut bad = doc.clone();
    bad["exchange"]["moves"][0]["to"] = serde_json::json!(1);
    let err = serde_json::from_value::<Plan>(bad).unwrap_err().to_string();
    assert!(err.contains("to itself"), "{err}");
    let mut bad = doc.clone();
    bad["exchange"]["moves"][0]["bytes"] = serde_json::json!(4);
    let err = serde_json::from_value::<Plan>(bad).unwrap_err().to_string();
    assert!(err.contains("disagrees"), "{err}");
    let mut bad = doc.clone();
    let last = bad["exchange"]["moves"].as_array().unwrap().len() - 1;
    bad["exchange"]["moves"][0]["id"] = bad["exchange"]["moves"][last]["id"].clone();
    assert!(serde_json::from_value::<Plan>(bad).is_err());
    // Documents without the new fields still read.
    let samples = text(10);
    let plain = Planner::new(Preset::Qwen25Vl7b.cost_model())
        .ranks(2)
        .seq_len(2048)
        .plan(&samples)
        .unwrap();
    let json = serde_json::to_string(&plain).unwrap();
    assert!(!json.contains("exchange") && !json.contains("traffic"));
    assert_eq!(serde_json::from_str::<Plan>(&json).unwrap(), plain);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Locality with groups: it moves only whole micro-batches (groups in one
    /// sequence) or whole ranks (groups on one rank), so every group stays
    /// together, the exchange matches the moves, and the step time stays
    /// within the tolerance; never more bytes than without locality.
    #[test]
    fn locality_keeps_groups_whole(c in case(), rank_scope in any::<bool>(), size in 1u64..5) {
        let scope = if rank_scope { GroupScope::Rank } else { GroupScope::MicroBatch };
        // Groups of `size` samples in input order (ids are scattered).
        let samples: Vec<StepSample> = c
            .samples
            .iter()
            .enumerate()
            .map(|(i, s)| s.clone().with_group(i as u64 / size))
            .collect();
        let group: BTreeMap<u64, u64> = samples.iter().map(|s| (s.id(), s.group().unwrap())).collect();
        let planner = planner(&c).group_scope(scope);
        let Ok(free) = planner.plan(&samples) else { return Ok(()) }; // a group too large, or infeasible
        let local = planner.locality(locality(&c)).plan(&samples).unwrap();
        let r = local.report();
        prop_assert_eq!(r.locality_free, Some(free.report().predicted));
        prop_assert!(r.predicted <= (1.0 + c.tolerance) * free.report().predicted);
        if c.node.is_none() {
            let moved = |p: &Plan| p.report().traffic.map(|t| (t.bytes_moved, t.samples_moved));
            prop_assert!(moved(&local) <= moved(&free), "{:?} > {:?}", moved(&local), moved(&free));
        }
        check_exchange(&local, &samples, c.node);
        // Every group in one micro-batch (micro-batch scope) or on one rank.
        let mut seen: BTreeMap<u64, (usize, usize)> = BTreeMap::new();
        for rank in 0..local.ranks() {
            for step in 0..local.micro_steps() {
                for &id in local.micro_batch(rank, step) {
                    let place = if rank_scope { (rank, 0) } else { (rank, step) };
                    let first = *seen.entry(group[&id]).or_insert(place);
                    prop_assert_eq!(first, place, "group {} split", group[&id]);
                }
            }
        }
    }
}

/// `anyres-mix` over 64 ranks (64 samples a rank of `seed`, the data
/// loader's round-robin origins) planned under `sync` without locality and
/// with 0.5%: the locality plan checked (every sample once, sequences
/// within the scenario's length, the step time within 0.5% of the free
/// plan's), and the share of the image bytes it moves.
#[cfg(feature = "scenarios")]
fn anyres_mix_moved(seed: u64, sync: SyncModel) -> f64 {
    use microbatch::scenario::Scenario;
    local_plan(
        Scenario::AnyresMix,
        seed,
        sync,
        Locality::new(0.005).unwrap(),
    )
    .report()
    .traffic
    .unwrap()
    .moved_fraction()
}

/// The plan of [`anyres_mix_moved`]'s batch, of `scenario` instead of
/// `anyres-mix`, with `locality` (of 0.5% tolerance), checked the same way.
#[cfg(feature = "scenarios")]
fn local_plan(
    scenario: microbatch::scenario::Scenario,
    seed: u64,
    sync: SyncModel,
    locality: Locality,
) -> Plan {
    let r = 64;
    let batch: Vec<StepSample> = scenario
        .generate(64 * r, seed)
        .into_iter()
        .enumerate()
        .map(|(i, s)| s.with_origin(i % r))
        .collect();
    let planner = scenario.planner(r).sync(sync);
    let free = planner.plan(&batch).unwrap();
    let local = planner.locality(locality).plan(&batch).unwrap();
    check_plan_within(&local, &batch, scenario.seq_len());
    assert!(local.report().predicted <= 1.005 * free.report().predicted);
    local
}

/// `Locality::effort` bounds step 3: without a re-split (effort 0) more
/// of the bytes stay away than with one re-split a sample on average
/// (effort 8), and more with that than without a bound; a bound above
/// what step 3 weighs gives the unbounded plan, bit for bit.
#[cfg(feature = "scenarios")]
#[test]
fn the_effort_bounds_the_exchange() {
    use microbatch::scenario::Scenario;
    let l = Locality::new(0.005).unwrap();
    for sync in [SyncModel::MicroStep, SyncModel::Phase] {
        let plan = |effort: Option<u32>| {
            local_plan(
                Scenario::AnyresMix,
                2,
                sync,
                effort.map_or(l, |e| l.effort(e)),
            )
        };
        let moved = |p: &Plan| p.report().traffic.unwrap().moved_fraction();
        let (none, one, all) = (plan(Some(0)), plan(Some(8)), plan(None));
        assert!(
            moved(&none) > moved(&one),
            "{sync:?}: {} <= {}",
            moved(&none),
            moved(&one)
        );
        assert!(
            moved(&one) > moved(&all),
            "{sync:?}: {} <= {}",
            moved(&one),
            moved(&all)
        );
        assert_eq!(
            plan(Some(u32::MAX)).fingerprint(),
            all.fingerprint(),
            "{sync:?}"
        );
    }
    // Under step barriers the bound is not applied: on this batch (the
    // held-out table's `llava-sft` seed 2 at 64 ranks) the fill fails and
    // step 3, from the relabelled plan, brings most of the bytes home
    // (effort 4 applied there left 57% away instead of 5.5%).
    let step = |l: Locality| local_plan(Scenario::LlavaSft, 2, SyncModel::Step, l);
    let (bounded, free) = (step(l.effort(0)), step(l));
    assert_eq!(bounded.fingerprint(), free.fingerprint());
    assert!(free.report().traffic.unwrap().moved_fraction() < 0.1);
}

/// The hard case of the held-out table (issue 21): `anyres-mix` at 64
/// ranks under `SyncModel::Phase`, where every micro-batch is full to
/// within the tolerance in tokens, vision and language, with the data
/// loader's round-robin origins: at most 25% of the image bytes move, the
/// step time within 0.5% of the free plan's (a greedy re-split alone moved
/// 30% on seed 6).
#[cfg(feature = "scenarios")]
#[test]
fn full_micro_batches_still_trade_under_phase_sync() {
    let moved = anyres_mix_moved(6, SyncModel::Phase);
    assert!(moved <= 0.25, "{moved}");
}

/// The home-first fill of step 2 places every sample when the groups of
/// most slack are full (step barriers): a given-away sample weighs more
/// groups than the first 32 before it gives up. On this batch the fill
/// failed with 32, step 3 started from the relabelled plan and 6.7% of the
/// image bytes moved; the fill that succeeds moves 4.6% (the scenario's
/// bound on any plan within the budget is about 4.5%).
#[cfg(feature = "scenarios")]
#[test]
fn the_home_first_fill_looks_past_the_fullest_groups() {
    let moved = anyres_mix_moved(1, SyncModel::Step);
    assert!(moved <= 0.05, "{moved}");
}

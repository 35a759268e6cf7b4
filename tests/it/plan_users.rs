//! The users' baseline of the report (`Report::users_baseline`): recomputed
//! from its definition by a plain reimplementation on random batches (every
//! sync model, groups under both scopes), and known small answers.

use microbatch::cost::{CostModel, Image, Linear, Phases, Preset, Sample, Term, Tokens};
use microbatch::plan::{GroupScope, Planner, StepSample, SyncModel};
use proptest::prelude::*;
use std::num::NonZeroU32;

/// The users' baseline from its definition: samples by ascending id, a
/// group a unit at its first member, unit `k` to rank `k % R`, `ceil(U /
/// (R A))` units a micro-batch, first fit in order into sequences of the
/// caps, a micro-batch the sum of its sequences' costs.
fn users<M: CostModel>(
    model: &M,
    samples: &[StepSample],
    ranks: usize,
    steps: usize,
    caps: [u64; 3],
    sync: SyncModel,
) -> f64 {
    let mut sorted: Vec<&StepSample> = samples.iter().collect();
    sorted.sort_by_key(|s| s.id());
    // Units: (group, members in order).
    let mut units: Vec<(Option<u64>, Vec<&StepSample>)> = Vec::new();
    for s in sorted {
        match s.group() {
            Some(g) => match units.iter_mut().find(|(h, _)| *h == Some(g)) {
                Some((_, members)) => members.push(s),
                None => units.push((Some(g), vec![s])),
            },
            None => units.push((None, vec![s])),
        }
    }
    let per_batch = units.len().div_ceil(ranks * steps);
    // mb[r][j]: the samples of rank r's micro-step j.
    let mut mb: Vec<Vec<Vec<&StepSample>>> = vec![vec![Vec::new(); steps]; ranks];
    for (r, rank) in mb.iter_mut().enumerate() {
        let mine: Vec<&StepSample> = units
            .iter()
            .skip(r)
            .step_by(ranks)
            .flat_map(|(_, m)| m.iter().copied())
            .collect();
        // Cut by units, not samples: count the units again.
        let mut j = 0;
        let mut taken = 0;
        for (_, m) in units.iter().skip(r).step_by(ranks) {
            if taken == per_batch {
                j += 1;
                taken = 0;
            }
            rank[j].extend(m.iter().copied());
            taken += 1;
        }
        assert_eq!(rank.iter().map(Vec::len).sum::<usize>(), mine.len());
    }
    let size = |s: &StepSample| {
        [
            s.sample().tokens(),
            s.units(),
            s.sample().images().len() as u64,
        ]
    };
    let cost: Vec<Vec<Phases>> = mb
        .iter()
        .map(|rank| {
            rank.iter()
                .map(|batch| {
                    let mut rows: Vec<(Vec<&Sample>, [u64; 3])> = Vec::new();
                    for s in batch {
                        let x = size(s);
                        let fits = |l: &[u64; 3]| (0..3).all(|d| l[d] + x[d] <= caps[d]);
                        match rows.iter_mut().find(|(_, l)| fits(l)) {
                            Some((row, l)) => {
                                row.push(s.sample());
                                (0..3).for_each(|d| l[d] += x[d]);
                            }
                            None => rows.push((vec![s.sample()], x)),
                        }
                    }
                    rows.iter()
                        .map(|(row, _)| model.cost(row))
                        .fold(Phases::ZERO, |a, b| a + b)
                })
                .collect()
        })
        .collect();
    match sync {
        SyncModel::Step => cost
            .iter()
            .map(|rank| rank.iter().map(Phases::total).sum::<f64>())
            .fold(0.0, f64::max),
        SyncModel::MicroStep => (0..steps)
            .map(|j| cost.iter().map(|rank| rank[j].total()).fold(0.0, f64::max))
            .sum(),
        SyncModel::Phase => (0..steps)
            .map(|j| {
                let v = cost.iter().map(|rank| rank[j].vision).fold(0.0, f64::max);
                let l = cost.iter().map(|rank| rank[j].language).fold(0.0, f64::max);
                v + l
            })
            .sum(),
        _ => unreachable!("a sync model this test does not know"),
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12 * a.abs().max(b.abs())
}

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
    scope: GroupScope,
    dense: bool,
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop::collection::vec(
            (
                1u32..900,
                prop::collection::vec((1u32..300, 1u32..4), 0..3),
                prop::option::of(0u64..8),
            ),
            1..50,
        ),
        1usize..6,
        1200u32..3000,
        (prop::option::of(4u32..16), prop::option::of(2u32..5)),
        1usize..3,
        prop::option::of(1usize..5),
        prop::sample::select(SyncModel::ALL.to_vec()),
        prop::sample::select(GroupScope::ALL.to_vec()),
        any::<bool>(),
    )
        .prop_map(
            |(
                raw,
                ranks,
                seq_len,
                (max_units, max_images),
                per_step,
                micro_steps,
                sync,
                scope,
                dense,
            )| {
                let samples: Vec<StepSample> = raw
                    .into_iter()
                    .enumerate()
                    .map(|(i, (text, mut images, group))| {
                        images.truncate(max_images.unwrap_or(u32::MAX) as usize);
                        let images: Vec<Image> = images
                            .into_iter()
                            .map(|(t, u)| {
                                let u = u.min(max_units.unwrap_or(u32::MAX) / 3).max(1);
                                Image::with_units(t, NonZeroU32::new(u).unwrap())
                            })
                            .collect();
                        // Scattered ids, not in input order.
                        let id = (i as u64).wrapping_mul(0x9E37_79B9) % 100_003;
                        let s = StepSample::new(id, Sample::new(text, images));
                        match group {
                            Some(g) => s.with_group(g * 5),
                            None => s,
                        }
                    })
                    .collect();
                Case {
                    ranks: ranks.min(samples.len()),
                    samples,
                    seq_len,
                    max_units,
                    max_images,
                    per_step,
                    micro_steps,
                    sync,
                    scope,
                    dense,
                }
            },
        )
}

/// The planner of a case (its ranks, length, sync model, sequences a
/// micro-step, group scope and caps; the micro-steps left to the caller).
fn planner<M: microbatch::cost::Incremental>(c: &Case, model: M) -> Planner<M> {
    let mut p = Planner::new(model)
        .ranks(c.ranks)
        .seq_len(c.seq_len)
        .sync(c.sync)
        .sequences_per_micro_step(c.per_step)
        .group_scope(c.scope);
    if let Some(u) = c.max_units {
        p = p.max_units(u);
    }
    if let Some(i) = c.max_images {
        p = p.max_images(i);
    }
    p
}

/// A case's caps: tokens, units, images (`u64::MAX` for none).
fn caps(c: &Case) -> [u64; 3] {
    [
        u64::from(c.seq_len),
        c.max_units.map_or(u64::MAX, u64::from),
        c.max_images.map_or(u64::MAX, u64::from),
    ]
}

fn check<M: microbatch::cost::Incremental + Clone>(
    c: &Case,
    model: M,
) -> Result<(), TestCaseError> {
    let mut p = planner(c, model.clone());
    if let Some(a) = c.micro_steps {
        p = p.micro_steps(a);
    }
    // Groups too large for their scope are refused: nothing to compare.
    let Ok(plan) = p.plan(&c.samples) else {
        return Ok(());
    };
    let caps = caps(c);
    let want = users(
        &model,
        &c.samples,
        plan.ranks(),
        plan.micro_steps(),
        caps,
        c.sync,
    );
    let got = plan.report().users_baseline;
    prop_assert!(close(got, want), "report {got} != definition {want}");
    prop_assert_eq!(plan.report().gain(), got / plan.report().predicted);
    // The input order does not matter.
    let mut reversed = c.samples.clone();
    reversed.reverse();
    prop_assert_eq!(p.plan(&reversed).unwrap().report().users_baseline, got);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(160))]

    #[test]
    fn users_baseline_is_its_definition(c in case()) {
        if c.dense {
            check(&c, microbatch::cost::Linear::preset_with(Preset::Qwen25Vl7b, microbatch::cost::AttentionKernel::Dense))?;
        } else {
            check(&c, Preset::Qwen25Vl7b.cost_model())?;
        }
    }
}

fn text(id: u64, tokens: u32) -> StepSample {
    StepSample::new(id, Sample::text_only(tokens))
}

#[test]
fn known_answers() -> Result<(), microbatch::Error> {
    // Rank 0: ids 0, 2, 4 of 600 tokens each: first fit makes three rows
    // where S = 2, all three run in the micro-step; rank 1: ids 1, 3, 5 of
    // 100 tokens, one row.
    let samples: Vec<_> = (0..6)
        .map(|i| text(i, if i % 2 == 0 { 600 } else { 100 }))
        .collect();
    let row = Linear::new([(Term::RowAttention, 1.0)])?;
    let planner = Planner::new(row)
        .ranks(2)
        .seq_len(1000)
        .micro_steps(1)
        .sequences_per_micro_step(2);
    let r = *planner.plan(&samples)?.report();
    assert_eq!(r.users_baseline, 3.0 * 360_000.0); // max(3 x 600^2, 300^2)
    let r = *planner
        .clone()
        .sync(SyncModel::MicroStep)
        .plan(&samples)?
        .report();
    assert_eq!(r.users_baseline, 3.0 * 360_000.0);
    let tokens = Planner::new(Tokens::new(1.0)?)
        .ranks(2)
        .seq_len(1000)
        .micro_steps(1)
        .sequences_per_micro_step(2)
        .sync(SyncModel::Phase);
    assert_eq!(tokens.plan(&samples)?.report().users_baseline, 1800.0);

    // Two micro-steps, 7 samples: 2 a micro-batch; rank 0 runs [0, 2] then
    // [4, 6], rank 1 [1, 3] then [5].
    let samples: Vec<_> = (0..7).map(|i| text(i, 10 + i as u32)).collect();
    let tokens = Planner::new(Tokens::new(1.0)?)
        .ranks(2)
        .seq_len(1000)
        .micro_steps(2);
    let step = tokens.clone().plan(&samples)?;
    assert_eq!(step.report().users_baseline, 10.0 + 12.0 + 14.0 + 16.0);
    let micro = tokens.sync(SyncModel::MicroStep).plan(&samples)?;
    // max(22, 24) + max(30, 15)
    assert_eq!(micro.report().users_baseline, 24.0 + 30.0);

    // A group is one unit at its first id: units [0], [1, 3], [2], [4];
    // rank 0 runs ids 0 and 2, rank 1 ids 1, 3 and 4.
    let samples: Vec<_> = (0..5)
        .map(|i| {
            let s = text(i, 100);
            if i == 1 || i == 3 {
                s.with_group(7)
            } else {
                s
            }
        })
        .collect();
    let tokens = Planner::new(Tokens::new(1.0)?)
        .ranks(2)
        .seq_len(1000)
        .micro_steps(1);
    assert_eq!(tokens.plan(&samples)?.report().users_baseline, 300.0);
    Ok(())
}

#[test]
fn fewer_samples_than_ranks_is_no_panic() -> Result<(), microbatch::Error> {
    let samples = [text(3, 50), text(9, 70)];
    for sync in SyncModel::ALL {
        match Planner::new(Tokens::new(1.0)?)
            .ranks(4)
            .seq_len(100)
            .sync(sync)
            .plan(&samples)
        {
            Ok(plan) => assert_eq!(plan.report().users_baseline, 70.0),
            Err(e) => assert!(!e.to_string().is_empty()),
        }
    }
    Ok(())
}

/// The naive baseline (`Planner::baseline`, `Report::baseline`) from its
/// definition: samples by ascending id, a group a unit at its first member;
/// next fit of the units into sequences of the caps; a group larger than a
/// sequence in sequences of its own (its samples by next fit) from the
/// start of the next micro-batch, `S` a micro-step on that micro-batch's
/// rank; micro-batch `m` of `S` sequences to rank `m % R`.
/// `[rank][micro-step][sequence]` ids, as `Plan::to_sequences`.
fn naive(
    samples: &[StepSample],
    ranks: usize,
    per_step: usize,
    caps: [u64; 3],
) -> Vec<Vec<Vec<Vec<u64>>>> {
    let mut sorted: Vec<&StepSample> = samples.iter().collect();
    sorted.sort_by_key(|s| s.id());
    let mut units: Vec<(Option<u64>, Vec<&StepSample>)> = Vec::new();
    for s in sorted {
        match s
            .group()
            .and_then(|g| units.iter().position(|(h, _)| *h == Some(g)))
        {
            Some(u) => units[u].1.push(s),
            None => units.push((s.group(), vec![s])),
        }
    }
    let size = |s: &StepSample| {
        [
            s.sample().tokens(),
            s.units(),
            s.sample().images().len() as u64,
        ]
    };
    let fits = |l: [u64; 3], x: [u64; 3]| (0..3).all(|d| l[d] + x[d] <= caps[d]);
    let plus = |l: [u64; 3], x: [u64; 3]| [l[0] + x[0], l[1] + x[1], l[2] + x[2]];
    // (ids, Some(unit) for a group larger than a sequence)
    let mut seqs: Vec<(Vec<u64>, [u64; 3], Option<usize>)> = Vec::new();
    let mut open = false;
    for (u, (_, members)) in units.iter().enumerate() {
        let total = members.iter().fold([0; 3], |l, s| plus(l, size(s)));
        if fits([0; 3], total) {
            match seqs.last_mut() {
                Some((ids, load, None)) if open && fits(*load, total) => {
                    ids.extend(members.iter().map(|s| s.id()));
                    *load = plus(*load, total);
                }
                _ => seqs.push((members.iter().map(|s| s.id()).collect(), total, None)),
            }
            open = true;
        } else {
            for (i, s) in members.iter().enumerate() {
                match seqs.last_mut() {
                    Some((ids, load, Some(v))) if i > 0 && *v == u && fits(*load, size(s)) => {
                        ids.push(s.id());
                        *load = plus(*load, size(s));
                    }
                    _ => seqs.push((vec![s.id()], size(s), Some(u))),
                }
            }
            open = false;
        }
    }
    // Places (rank, micro-step, index).
    let mut places = Vec::new();
    let (mut m, mut held) = (0, 0);
    let mut k = 0;
    while k < seqs.len() {
        match seqs[k].2 {
            None => {
                if held == per_step {
                    m += 1;
                    held = 0;
                }
                places.push((m % ranks, m / ranks, held));
                held += 1;
                k += 1;
            }
            Some(u) => {
                if held > 0 {
                    m += 1;
                }
                held = 0;
                let (r, j0) = (m % ranks, m / ranks);
                let mut i = 0;
                while k < seqs.len() && seqs[k].2 == Some(u) {
                    places.push((r, j0 + i / per_step, i % per_step));
                    i += 1;
                    k += 1;
                }
                m = (j0 + (i - 1) / per_step) * ranks + r + 1;
            }
        }
    }
    let steps = places.iter().map(|p| p.1 + 1).max().unwrap_or(1);
    let mut out = vec![vec![vec![Vec::new(); per_step]; steps]; ranks];
    for ((mut ids, _, _), (r, j, i)) in seqs.into_iter().zip(places) {
        // A plan lists every sequence's ids in ascending order (a group
        // packed before a later sample with a smaller id than its last).
        ids.sort_unstable();
        out[r][j][i] = ids;
    }
    out
}

fn check_naive(c: &Case) -> Result<(), TestCaseError> {
    let p = planner(c, Tokens::new(1.0).unwrap());
    let Ok(baseline) = p.baseline(&c.samples) else {
        return Ok(());
    };
    let caps = caps(c);
    let want = naive(&c.samples, c.ranks, c.per_step, caps);
    prop_assert_eq!(baseline.to_sequences(), want.clone());
    // Every group in one sequence when it fits one, else on one rank.
    let mut where_: std::collections::BTreeMap<u64, Vec<(usize, usize)>> = Default::default();
    for (r, steps) in want.iter().enumerate() {
        for (k, ids) in steps.iter().flatten().enumerate() {
            for id in ids {
                let s = c.samples.iter().find(|s| s.id() == *id).unwrap();
                if let Some(g) = s.group() {
                    where_.entry(g).or_default().push((r, k));
                }
            }
        }
    }
    for (g, at) in where_ {
        let one_rank = at.iter().all(|&(r, _)| r == at[0].0);
        prop_assert!(one_rank, "group {} on several ranks: {:?}", g, at);
        let members = c.samples.iter().filter(|s| s.group() == Some(g));
        let total = members.fold([0u64; 3], |l, s| {
            [
                l[0] + s.sample().tokens(),
                l[1] + s.units(),
                l[2] + s.sample().images().len() as u64,
            ]
        });
        if (0..3).all(|d| total[d] <= caps[d]) {
            prop_assert!(
                at.iter().all(|&x| x == at[0]),
                "group {} split: {:?}",
                g,
                at
            );
        }
    }
    // The report of any plan has that baseline's step time.
    if let Ok(plan) = p.plan(&c.samples) {
        prop_assert!(close(plan.report().baseline, baseline.report().predicted));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(160))]

    #[test]
    fn naive_baseline_is_its_definition_and_keeps_groups(c in case()) {
        check_naive(&c)?;
    }
}

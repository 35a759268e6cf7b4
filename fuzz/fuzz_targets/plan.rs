//! Fuzz target `plan`: the `Planner` with every option (ranks, sequence
//! length, micro-steps, sequences per micro-step, caps, sync models, loss
//! tokens, origins, groups, bytes, locality, group scope) over presets and
//! composed cost models, checking every promise of `microbatch::plan` (see
//! fuzz/README.md): with origins, the exchange equals the moves recomputed
//! from the origins and the plan; with locality, the step time within the
//! tolerance of the plan without it; groups together.
#![no_main]

use std::collections::BTreeMap;
use std::num::NonZeroU32;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use microbatch::cost::{
    sample_fn, CostModel, DocumentAttention, FullAttention, Given, Image, Incremental, PerGroup,
    PerImage, PerSample, PerTile, Phase, Phases, Preset, Sample, Tokens, Training, Windowed,
};
use microbatch::plan::{
    GroupScope, Locality, Normalization, Plan, Planner, Reduction, StepSample, SyncModel,
};
use microbatch::{Error, InvalidReason, Locator, Scalar};
use microbatch_fuzz::{check, Count, F};

#[derive(Arbitrary, Debug)]
struct RawSample {
    id: u8,
    text: u16,
    big: bool,
    images: Vec<(u16, u8)>,
    loss: Option<u32>,
}

#[derive(Arbitrary, Debug)]
struct Input {
    samples: Vec<RawSample>,
    ranks: Count,
    seq_len: u32,
    micro_steps: Option<Count>,
    per_step: Option<Count>,
    max_units: Option<u8>,
    max_images: Option<u8>,
    sync: u8,
    refinement: bool,
    model: u8,
    coef: [F; 3],
    shuffle: u8,
    /// Last, so that the seeds from before it read as `None`.
    place: Option<Place>,
    /// The search's effort (`None`: the default), after `place` for the
    /// same reason.
    search_effort: Option<u8>,
}

/// Where the samples are and what they belong to, and the locality settings.
#[derive(Arbitrary, Debug)]
struct Place {
    /// 0: no origins; 1: round robin; 2: by id modulo R + 1 (some past the
    /// ranks); 3: all on rank 0; 4: every other sample round robin.
    origins: u8,
    /// Groups of `groups % 5` consecutive samples (0: none); every
    /// seventh sample left out.
    groups: u8,
    /// Bytes per sample: `b * (index + 1)`, else derived.
    bytes: Option<u16>,
    /// Tolerance in thousandths (0 to 0.255); an odd one also bounds the
    /// exchange (`Locality::effort`).
    locality: Option<u8>,
    /// Ranks per node, `n % 9` (0 refused).
    node: Option<u8>,
    rank_scope: bool,
}

/// `samples` with the origins, groups and bytes of `place`.
fn placed(samples: Vec<StepSample>, place: &Place, ranks: usize) -> Vec<StepSample> {
    let k = usize::from(place.groups % 5);
    samples
        .into_iter()
        .enumerate()
        .map(|(i, mut s)| {
            let r = ranks.max(1);
            let origin = match place.origins % 5 {
                1 => Some(i % r),
                2 => Some((s.id() % (r as u64).saturating_add(1)) as usize),
                3 => Some(0),
                4 if i % 2 == 0 => Some(i % r),
                _ => None,
            };
            if let Some(o) = origin {
                s = s.with_origin(o);
            }
            if k > 0 && i % 7 != 3 {
                s = s.with_group((i / k) as u64);
            }
            if let Some(b) = place.bytes {
                s = s.with_bytes(u64::from(b).saturating_mul(i as u64 + 1));
            }
            s
        })
        .collect()
}

fuzz_target!(|input: Input| {
    if input.samples.len() > 96 {
        return;
    }
    let huge = [Some(input.ranks), input.micro_steps, input.per_step]
        .iter()
        .flatten()
        .filter(|c| matches!(c, Count::Huge(_)))
        .count();
    if (huge >= 2 && !microbatch_fuzz::on("plan_huge2"))
        || (huge >= 1 && !microbatch_fuzz::on("plan_huge"))
    {
        return;
    }
    let samples: Vec<StepSample> =
        input
            .samples
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let images = s.images.iter().take(4).map(|&(t, u)| {
                    match NonZeroU32::new(u32::from(u % 9)) {
                        Some(units) => Image::with_units(u32::from(t), units),
                        None => Image::new(u32::from(t)),
                    }
                });
                let text = if s.big {
                    u32::from(s.text) << 16
                } else {
                    u32::from(s.text % 4096)
                };
                let id = if s.id % 16 == 0 {
                    u64::from(s.id)
                } else {
                    i as u64 * 1_000_003 + u64::from(s.id)
                };
                let mut x = StepSample::new(id, Sample::new(text, images));
                if let Some(l) = s.loss {
                    // Mostly at most the tokens (loss tokens are positions);
                    // now and then more, which must be `LossTokens`.
                    let tokens = x.sample().tokens();
                    x = x.with_loss_tokens(match l % 41 {
                        0 => u64::MAX - u64::from(l),
                        1 => tokens + 1,
                        _ => u64::from(l) % (tokens + 1),
                    });
                }
                x
            })
            .collect();
    let samples = match &input.place {
        Some(p) => placed(samples, p, input.ranks.get()),
        None => samples,
    };
    let c = |i: usize| input.coef[i].0;
    match input.model % 11 {
        0 => with(Tokens::new(1.0).unwrap(), &input, &samples),
        1 => with(Preset::Qwen25Vl7b.cost_model(), &input, &samples),
        2 => with(Preset::InternVl25_8b.cost_model(), &input, &samples),
        3 => with(Preset::Llava15_7b.cost_model(), &input, &samples),
        4 => match (Tokens::new(c(0)), PerGroup::new(c(1))) {
            (Ok(a), Ok(b)) => with(a + b, &input, &samples),
            _ => {}
        },
        5 => match (
            DocumentAttention::new(c(0)),
            FullAttention::new(c(1)),
            PerSample::new(c(2)),
        ) {
            (Ok(a), Ok(b), Ok(s)) => with((a, b.in_phase(Phase::Vision), s), &input, &samples),
            _ => {}
        },
        6 => match (
            PerTile::new(c(0), 256, Training::Trained),
            Tokens::new(c(1)),
        ) {
            (Ok(v), Ok(t)) => with(
                v.max(t.in_phase(Phase::Vision)) + PerGroup::new(1.0).unwrap(),
                &input,
                &samples,
            ),
            _ => {}
        },
        7 => match (
            PerImage::new(c(0), c(1), 4, Training::Frozen),
            Windowed::new(c(0), c(1), 64, c(2), 2, Training::Trained),
        ) {
            (Ok(a), Ok(b)) => match a.scale(c(2)) {
                Ok(a) => with(a + b, &input, &samples),
                Err(_) => {}
            },
            _ => {}
        },
        8 => {
            // A closure: its results are the caller's, invalid ones must be refused.
            let k = c(0);
            with(
                sample_fn(move |s: &Sample| Phases::new(k, s.tokens() as f64)),
                &input,
                &samples,
            )
        }
        9 => with(
            Preset::Qwen25Vl7b.cost_model().scale(1e-12).unwrap() + PerGroup::new(0.5).unwrap(),
            &input,
            &samples,
        ),
        _ => {
            // Given costs (valid ones: `with_cost` refuses the others), the
            // language cost growing with the sample's tokens.
            let given: Vec<StepSample> = samples
                .iter()
                .map(|s| {
                    let cost = Phases::new(c(0), c(1) * s.sample().tokens() as f64);
                    let sample = s.sample().clone();
                    let sample = sample.clone().with_cost(cost).unwrap_or(sample);
                    let mut x = StepSample::new(s.id(), sample).with_loss_tokens(s.loss_tokens());
                    if let Some(o) = s.origin() {
                        x = x.with_origin(o);
                    }
                    if let Some(g) = s.group() {
                        x = x.with_group(g);
                    }
                    x.with_bytes(s.bytes())
                })
                .collect();
            with(Given, &input, &given)
        }
    }
});

fn with<M: Incremental + Clone>(model: M, input: &Input, samples: &[StepSample]) {
    let sync = match input.sync % 3 {
        0 => SyncModel::Step,
        1 => SyncModel::MicroStep,
        _ => SyncModel::Phase,
    };
    let ranks = input.ranks.get();
    let seq_len = if input.seq_len % 4 == 0 {
        input.seq_len
    } else {
        input.seq_len % 20_000
    };
    let mut planner = Planner::new(model.clone())
        .ranks(ranks)
        .seq_len(seq_len)
        .sync(sync)
        .refinement(input.refinement);
    if let Some(e) = input.search_effort {
        planner = planner.search_effort(u32::from(e));
    }
    if let Some(a) = input.micro_steps {
        planner = planner.micro_steps(a.get());
    }
    if let Some(s) = input.per_step {
        planner = planner.sequences_per_micro_step(s.get());
    }
    if let Some(u) = input.max_units {
        planner = planner.max_units(u32::from(u % 64));
    }
    if let Some(i) = input.max_images {
        planner = planner.max_images(u32::from(i % 8));
    }
    let scope = match &input.place {
        Some(p) if p.rank_scope => GroupScope::Rank,
        _ => GroupScope::MicroBatch,
    };
    planner = planner.group_scope(scope);
    // The planner without locality, the reference of the tolerance.
    let free_planner = planner.clone();
    let mut locality = None;
    if let Some(l) = input.place.as_ref().and_then(|p| p.locality) {
        let tol = f64::from(l) / 1000.0;
        let mut loc = Locality::new(tol).unwrap();
        let node = input
            .place
            .as_ref()
            .and_then(|p| p.node)
            .map(|n| usize::from(n % 9));
        if let Some(n) = node {
            loc = loc.ranks_per_node(n);
        }
        // An odd tolerance (in thousandths) bounds the exchange too, by
        // `Locality::effort(l % 13)`: derived, not a field of its own, so
        // that the seed corpus keeps decoding to the inputs it was found as.
        if l % 2 == 1 {
            loc = loc.effort(u32::from(l % 13));
        }
        locality = Some((tol, node));
        planner = planner.locality(loc);
    }
    let cfg = Cfg {
        ranks,
        seq_len,
        micro_steps: input.micro_steps.map(Count::get),
        per_step: input.per_step.map_or(1, Count::get),
        max_units: input.max_units.map(|u| u32::from(u % 64)),
        max_images: input.max_images.map(|i| u32::from(i % 8)),
        scope,
        node: locality.and_then(|l| l.1),
    };
    let r = planner.plan(samples);
    match &r {
        Ok(plan) => {
            check_plan("plan", plan, samples, &cfg, true);
            check_groups(plan, samples, scope);
            if let Some((tol, _)) = locality {
                let report = plan.report();
                match (free_planner.plan(samples), report.locality_free) {
                    (Ok(free), Some(t0)) => {
                        let p0 = free.report().predicted;
                        check!(
                            "plan_locality_free",
                            t0 == p0 || (t0 - p0).abs() <= 1e-9 * p0.abs(),
                            "report.locality_free {t0} but the plan without locality predicts {p0}"
                        );
                        check!(
                            "plan_locality_tolerance",
                            report.predicted <= (1.0 + tol) * t0 * (1.0 + 1e-12),
                            "predicted {} > (1 + {tol}) x {t0}",
                            report.predicted
                        );
                    }
                    (free, t0) => check!(
                        "plan_locality_free",
                        false,
                        "with locality: locality_free {t0:?}, without: {:?}",
                        free.err()
                    ),
                }
            } else {
                check!(
                    "plan_locality_free",
                    plan.report().locality_free.is_none(),
                    "locality_free without locality"
                );
            }
            let report = plan.report();
            check!(
                "plan_sync",
                report.sync == sync,
                "report.sync {:?} != {sync:?}",
                report.sync
            );
            check!(
                "plan_bound",
                report.predicted >= report.lower_bound,
                "predicted {} < lower bound {}",
                report.predicted,
                report.lower_bound
            );
            check!(
                "plan_report_finite",
                report.predicted.is_finite()
                    && report.lower_bound.is_finite()
                    && report.lower_bound >= 0.0
                    && report.baseline.is_finite(),
                "report not finite: {report:?}"
            );
            if cfg.micro_steps.is_none() {
                // The default is the smallest feasible count: one fewer fails.
                let a = plan.micro_steps();
                if a > 1 {
                    let fewer = planner.clone().micro_steps(a - 1).plan(samples);
                    check!(
                        "plan_smallest",
                        fewer.is_err(),
                        "the default chose {a} micro-steps, but {} fit",
                        a - 1
                    );
                }
            }
            match plan.predict(samples, &model, sync) {
                Ok(t) => {
                    let tol = 1e-9 * report.predicted.abs().max(t.abs());
                    check!(
                        "plan_predict",
                        (t - report.predicted).abs() <= tol,
                        "predict() {t} != report.predicted {}",
                        report.predicted
                    );
                }
                Err(e) => check!(
                    "plan_predict",
                    false,
                    "predict() on the plan's own samples: {e}"
                ),
            }
            // Determinism: again, and in another order.
            let again = planner.plan(samples);
            check!(
                "plan_deterministic",
                again.as_ref() == Ok(plan),
                "a second run differs"
            );
            let mut shuffled: Vec<StepSample> = samples.to_vec();
            shuffled.reverse();
            let rot = input.shuffle as usize % shuffled.len().max(1);
            shuffled.rotate_left(rot);
            match planner.plan(&shuffled) {
                Ok(other) => {
                    check!(
                        "plan_order",
                        other.fingerprint() == plan.fingerprint() && other == *plan,
                        "another input order gives another plan"
                    );
                }
                Err(e) => check!("plan_order", false, "another input order fails: {e}"),
            }
            if let Ok(base) = planner.baseline(samples) {
                check_plan(
                    "baseline",
                    &base,
                    samples,
                    &Cfg {
                        micro_steps: None,
                        ..cfg
                    },
                    false,
                );
            }
        }
        Err(e) => justify(e, samples, &cfg, &planner),
    }
}

#[derive(Clone, Copy, Debug)]
struct Cfg {
    ranks: usize,
    seq_len: u32,
    micro_steps: Option<usize>,
    per_step: usize,
    max_units: Option<u32>,
    max_images: Option<u32>,
    scope: GroupScope,
    node: Option<usize>,
}

/// Every group in one micro-batch (`MicroBatch`) or on one rank (`Rank`).
fn check_groups(plan: &Plan, samples: &[StepSample], scope: GroupScope) {
    let (r, a) = (plan.ranks(), plan.micro_steps());
    if samples.iter().all(|s| s.group().is_none()) || (r as u128) * (a as u128) > 1 << 20 {
        return;
    }
    let group: BTreeMap<u64, u64> = samples
        .iter()
        .filter_map(|s| s.group().map(|g| (s.id(), g)))
        .collect();
    let mut at: BTreeMap<u64, (usize, usize)> = BTreeMap::new();
    for rank in 0..r {
        for j in 0..a {
            for id in plan.micro_batch(rank, j) {
                let Some(&g) = group.get(id) else { continue };
                let here = match scope {
                    GroupScope::Rank => (rank, 0),
                    _ => (rank, j),
                };
                let first = *at.entry(g).or_insert(here);
                check!(
                    "plan_groups_together",
                    first == here,
                    "group {g} split: sample {id} at {here:?}, another at {first:?} ({scope:?})"
                );
            }
        }
    }
}

/// The exchange of `plan` against the moves recomputed from the origins
/// and the plan, and the report's traffic against them.
fn check_exchange(name: &str, plan: &Plan, samples: &[StepSample], cfg: &Cfg) {
    let with_origin: Vec<&StepSample> = samples.iter().filter(|s| s.origin().is_some()).collect();
    let report = plan.report();
    let Some(ex) = plan.exchange() else {
        check!(
            "plan_exchange",
            with_origin.is_empty() && report.traffic.is_none(),
            "{name}: no exchange, but {} samples have an origin (traffic {:?})",
            with_origin.len(),
            report.traffic
        );
        return;
    };
    check!(
        "plan_exchange",
        !with_origin.is_empty(),
        "{name}: an exchange without origins"
    );
    let mut rank_of: BTreeMap<u64, usize> = BTreeMap::new();
    for rank in 0..plan.ranks() {
        for id in plan.rank(rank) {
            rank_of.insert(*id, rank);
        }
    }
    // (from, to, id, bytes), sorted as the exchange lists them.
    let mut want: Vec<(usize, usize, u64, u64)> = Vec::new();
    let mut total = 0u64;
    for s in &with_origin {
        let from = s.origin().unwrap_or(usize::MAX);
        total = total.saturating_add(s.bytes());
        if let Some(&to) = rank_of.get(&s.id()) {
            if to != from {
                want.push((from, to, s.id(), s.bytes()));
            }
        }
    }
    want.sort_unstable();
    let got: Vec<(usize, usize, u64, u64)> =
        ex.moves().map(|m| (m.from, m.to, m.id, m.bytes)).collect();
    check!(
        "plan_exchange_moves",
        got == want,
        "{name}: the exchange's moves {got:?} are not the plan's {want:?}"
    );
    check!(
        "plan_exchange_moves",
        ex.len() == want.len(),
        "{name}: len {}",
        ex.len()
    );
    let (mut out, mut inn) = (
        BTreeMap::<usize, (usize, u64)>::new(),
        BTreeMap::<usize, (usize, u64)>::new(),
    );
    let mut pairs: BTreeMap<(usize, usize), Vec<u64>> = BTreeMap::new();
    let (mut moved, mut inter) = (0u64, 0u64);
    for &(f, t, id, b) in &want {
        let o = out.entry(f).or_default();
        *o = (o.0 + 1, o.1.saturating_add(b));
        let i = inn.entry(t).or_default();
        *i = (i.0 + 1, i.1.saturating_add(b));
        pairs.entry((f, t)).or_default().push(id);
        moved = moved.saturating_add(b);
        if let Some(n) = cfg.node.filter(|&n| n > 0) {
            if f / n != t / n {
                inter = inter.saturating_add(b);
            }
        }
    }
    for ((f, t), ids) in &pairs {
        check!(
            "plan_exchange_sends",
            ex.sends(*f, *t) == ids.as_slice(),
            "{name}: sends({f}, {t}) = {:?}, want {ids:?}",
            ex.sends(*f, *t)
        );
    }
    let probe = [
        0,
        1,
        plan.ranks().saturating_sub(1),
        plan.ranks(),
        usize::MAX,
    ];
    for r in out.keys().chain(inn.keys()).chain(probe.iter()) {
        let (so, bo) = out.get(r).copied().unwrap_or_default();
        let (si, bi) = inn.get(r).copied().unwrap_or_default();
        check!(
            "plan_exchange_counts",
            ex.sent(*r) == so && ex.bytes_out(*r) == bo && ex.received(*r) == si && ex.bytes_in(*r) == bi,
            "{name}: rank {r}: sent {} ({} B), received {} ({} B); want {so} ({bo} B), {si} ({bi} B)",
            ex.sent(*r),
            ex.bytes_out(*r),
            ex.received(*r),
            ex.bytes_in(*r)
        );
    }
    match &report.traffic {
        Some(t) => {
            let max_out = out.values().map(|v| v.1).max().unwrap_or(0);
            let max_in = inn.values().map(|v| v.1).max().unwrap_or(0);
            check!(
                "plan_traffic",
                t.samples_moved == want.len()
                    && t.bytes_moved == moved
                    && t.bytes_total == total
                    && t.max_bytes_in == max_in
                    && t.max_bytes_out == max_out,
                "{name}: traffic {t:?}; want {} samples, {moved} of {total} B, max in {max_in}, out {max_out}",
                want.len()
            );
            if name == "plan" {
                let want_inter = cfg.node.filter(|&n| n > 0).map(|_| inter);
                check!(
                    "plan_traffic",
                    t.inter_node_bytes == want_inter,
                    "{name}: inter-node bytes {:?}, want {want_inter:?}",
                    t.inter_node_bytes
                );
            }
        }
        None => check!("plan_traffic", false, "{name}: an exchange without traffic"),
    }
}

fn check_plan(name: &str, plan: &Plan, samples: &[StepSample], cfg: &Cfg, every_rank: bool) {
    // A group stays on one rank: every rank gets work when the step has at
    // least R units (groups and samples without one).
    let groups: std::collections::BTreeSet<u64> =
        samples.iter().filter_map(StepSample::group).collect();
    let units = groups.len() + samples.iter().filter(|s| s.group().is_none()).count();
    let every_rank = every_rank && units >= cfg.ranks;
    let by_id: BTreeMap<u64, &StepSample> = samples.iter().map(|s| (s.id(), s)).collect();
    let (r, a, s) = (
        plan.ranks(),
        plan.micro_steps(),
        plan.sequences_per_micro_step(),
    );
    check!(
        "plan_shape",
        r == cfg.ranks
            && s == cfg.per_step
            && cfg.micro_steps.is_none_or(|m| m == a || name == "baseline"),
        "{name}: shape ({r}, {a}, {s}) for {cfg:?}"
    );
    // The documented limits (Planner::micro_steps, sequences_per_micro_step):
    // R x S <= max(n, 65536); R x A x S <= max(n, 65536) when A is given,
    // else below n + R x S (the smallest A; with groups on one rank, A
    // holds the largest group's sequences, at most one a sample: A <= n;
    // the naive baseline keeps such a group on one rank too, every
    // micro-step holding one of its at most n sequences: A <= n).
    let limit = samples.len().max(SLOTS) as u128;
    let (r128, a128, s128) = (r as u128, a as u128, s as u128);
    let rank_groups = cfg.scope == GroupScope::Rank && samples.iter().any(|x| x.group().is_some());
    let slots_ok = r128 * s128 <= limit
        && if cfg.micro_steps.is_some() && name != "baseline" {
            r128 * a128 * s128 <= limit
        } else if rank_groups {
            a128 <= (samples.len() as u128).max(1)
        } else {
            r128 * a128 * s128 < samples.len() as u128 + r128 * s128
        };
    check!(
        "plan_shape",
        slots_ok,
        "{name}: {r} x {a} x {s} slots for {} samples",
        samples.len()
    );
    if r128 * a128 * s128 > 2 * limit {
        return;
    }
    let mut seen: BTreeMap<u64, usize> = BTreeMap::new();
    let mut loss_sum: u128 = 0;
    let mut count_sum: u128 = 0;
    for rank in 0..r {
        let mut rank_ids = Vec::new();
        for j in 0..a {
            let mut mb = Vec::new();
            for q in 0..s {
                let seq = plan.sequence(rank, j, q);
                check!(
                    "plan_sorted",
                    seq.windows(2).all(|w| w[0] < w[1]),
                    "{name}: sequence ({rank}, {j}, {q}) not ascending: {seq:?}"
                );
                let (mut tokens, mut units, mut images) = (0u64, 0u64, 0u64);
                for id in seq {
                    *seen.entry(*id).or_default() += 1;
                    if let Some(x) = by_id.get(id) {
                        tokens += x.sample().tokens();
                        units += x.units();
                        images += x.sample().images().len() as u64;
                    }
                }
                check!(
                    "plan_seq_len",
                    tokens <= u64::from(cfg.seq_len),
                    "{name}: sequence ({rank}, {j}, {q}) has {tokens} tokens > {}",
                    cfg.seq_len
                );
                if let Some(u) = cfg.max_units {
                    check!(
                        "plan_cap",
                        units <= u64::from(u),
                        "{name}: sequence ({rank}, {j}, {q}) has {units} units > {u}"
                    );
                }
                if let Some(i) = cfg.max_images {
                    check!(
                        "plan_cap",
                        images <= u64::from(i),
                        "{name}: sequence ({rank}, {j}, {q}) has {images} images > {i}"
                    );
                }
                let c = plan.sequence_cost(rank, j, q);
                check!(
                    "plan_cost",
                    c.vision >= 0.0 && c.language >= 0.0 && c.total().is_finite(),
                    "{name}: sequence cost {c:?}"
                );
                mb.extend_from_slice(seq);
            }
            check!(
                "plan_layout",
                plan.micro_batch(rank, j) == mb.as_slice(),
                "{name}: micro_batch({rank}, {j}) is not its sequences"
            );
            loss_sum += mb
                .iter()
                .filter_map(|id| by_id.get(id))
                .map(|x| u128::from(x.loss_tokens()))
                .sum::<u128>();
            count_sum += mb.len() as u128;
            rank_ids.extend(mb);
        }
        check!(
            "plan_layout",
            plan.rank(rank) == rank_ids.as_slice(),
            "{name}: rank({rank}) is not its micro-batches"
        );
        if every_rank {
            check!(
                "plan_every_rank",
                !rank_ids.is_empty(),
                "{name}: rank {rank} gets no sample"
            );
        }
    }
    let once =
        seen.len() == by_id.len() && seen.iter().all(|(id, &t)| t == 1 && by_id.contains_key(id));
    check!(
        "plan_exactly_once",
        once,
        "{name}: the plan does not list every sample exactly once"
    );
    check!(
        "plan_len",
        plan.len() == samples.len() && !plan.is_empty(),
        "{name}: len {} for {} samples",
        plan.len(),
        samples.len()
    );
    let nested = plan.to_nested();
    let seqs = plan.to_sequences();
    check!(
        "plan_layout",
        nested.len() == r
            && (0..r).all(|i| nested[i].len() == a
                && (0..a).all(|j| nested[i][j] == plan.micro_batch(i, j)
                    && seqs[i][j].concat() == nested[i][j])),
        "{name}: to_nested/to_sequences disagree"
    );
    // Gradient invariance: the scaled sums over micro-batches give the normalization.
    let loss = plan.loss();
    let want_tokens: u128 = samples.iter().map(|x| u128::from(x.loss_tokens())).sum();
    check!(
        "plan_loss",
        u128::from(loss.loss_tokens) == want_tokens
            && loss.samples == samples.len() as u64
            && loss.ranks == r as u64,
        "{name}: loss {loss:?}, want {want_tokens} tokens"
    );
    check!(
        "plan_loss",
        loss_sum == want_tokens && count_sum == samples.len() as u128,
        "{name}: micro-batches hold {loss_sum} loss tokens of {want_tokens}"
    );
    for norm in [Normalization::Token, Normalization::Sample] {
        let total = if norm == Normalization::Token {
            want_tokens
        } else {
            count_sum
        };
        for red in [Reduction::Sum, Reduction::Mean] {
            let (num, den) = loss.scale_ratio(norm, red);
            let want = if red == Reduction::Sum { 1 } else { r as u128 };
            // sum over micro-batches of scale x summed loss = (num / den) x total.
            let ok = if total == 0 {
                num == 0
            } else {
                u128::from(num) * total == want * u128::from(den)
            };
            check!(
                "plan_gradient_invariance",
                ok,
                "{name}: {norm:?}/{red:?}: scale {num}/{den} x {total} != {want}"
            );
            let f = loss.scale(norm, red);
            check!(
                "plan_gradient_invariance",
                f.is_finite() && f >= 0.0,
                "{name}: scale {f}"
            );
        }
    }
    let rep = plan.report();
    let nonempty = (0..r * a * s)
        .filter(|&k| !plan.sequence(k / (a * s), k / s % a, k % s).is_empty())
        .count();
    check!(
        "plan_report",
        rep.sequences == nonempty,
        "{name}: report.sequences {} but {nonempty} non-empty",
        rep.sequences
    );
    check!(
        "plan_report",
        (0.0..=1.0 + 1e-12).contains(&rep.efficiency),
        "{name}: efficiency {}",
        rep.efficiency
    );
    check_exchange(name, plan, samples, cfg);
}

fn justify<M: Incremental + Clone>(
    e: &Error,
    samples: &[StepSample],
    cfg: &Cfg,
    planner: &Planner<M>,
) {
    let n = samples.len();
    match e {
        Error::Invalid {
            at: Locator::Setting { name, .. },
            value: Scalar::Int(value),
            ..
        } => {
            let v = *value as usize;
            let zero = match *name {
                "ranks" => cfg.ranks == 0,
                "seq_len" => cfg.seq_len == 0,
                "micro_steps" => cfg.micro_steps == Some(0),
                "sequences_per_micro_step" => cfg.per_step == 0,
                "max_units" => cfg.max_units == Some(0),
                "max_images" => cfg.max_images == Some(0),
                "ranks_per_node" => cfg.node == Some(0),
                _ => false,
            };
            // The documented resource limits: R x S, then R x A x S, at most max(n, 65536).
            let limit = n.max(SLOTS) as u128;
            let per_row = cfg.ranks as u128 * cfg.per_step as u128;
            let over = match *name {
                "sequences_per_micro_step" => per_row > limit && v == cfg.per_step,
                "micro_steps" => cfg
                    .micro_steps
                    .is_some_and(|a| a == v && per_row <= limit && per_row * a as u128 > limit),
                _ => false,
            };
            check!(
                "plan_error",
                zero || over,
                "InvalidSetting {name} = {value} unjustified ({cfg:?}, {n} samples): {e}"
            );
        }
        Error::TooFewSamples {
            ranks,
            samples: got,
        } => {
            check!(
                "plan_error",
                *ranks == cfg.ranks && *got == n && n < cfg.ranks,
                "{e:?} for {n} samples on {} ranks",
                cfg.ranks
            );
        }
        Error::DuplicateId { id } => {
            let times = samples.iter().filter(|s| s.id() == *id).count();
            check!(
                "plan_error",
                times > 1,
                "DuplicateId {id} appears {times} times"
            );
        }
        Error::Oversize { items } => {
            for o in items {
                let s = o.id.and_then(|id| samples.iter().find(|s| s.id() == id));
                let ok = s.is_some_and(|s| {
                    let img = s.sample().images().len() as u64;
                    s.sample().tokens() > u64::from(cfg.seq_len)
                        || cfg.max_units.is_some_and(|u| s.units() > u64::from(u))
                        || cfg.max_images.is_some_and(|i| img > u64::from(i))
                });
                check!("plan_error", ok, "Oversize names {o:?}, which fits");
            }
            check!("plan_error", !items.is_empty(), "empty Oversize");
        }
        Error::Invalid {
            at: Locator::Cost { id, phase },
            value: Scalar::Float(value),
            ..
        } => {
            // The value named is the sample's cost alone in that phase.
            let alone = samples
                .iter()
                .find(|s| s.id() == *id)
                .map(|s| planner_model_cost(planner, s.sample()).get(*phase));
            check!(
                "plan_error",
                !value.is_finite() || *value < 0.0,
                "InvalidCost {{ id: {id}, {phase:?}, value: {value} }} for a valid value"
            );
            check!("plan_error", alone.is_some_and(|c| c.to_bits() == value.to_bits() || (c.is_nan() && value.is_nan())), "InvalidCost {{ id: {id}, {phase:?}, value: {value} }} but the cost alone is {alone:?}");
        }
        Error::CostOverflow {
            phase,
            samples: got,
        } => {
            // Each cost finite, their sum (in a phase, or over phases) beyond f64::MAX.
            let mut sorted: Vec<&StepSample> = samples.iter().collect();
            sorted.sort_by_key(|s| s.id());
            let sum = sorted.iter().fold(Phases::ZERO, |acc, s| {
                acc + planner_model_cost(planner, s.sample())
            });
            let over = match phase {
                Some(p) => sum.get(*p) >= 1e307,
                None => sum.total() >= 1e307,
            };
            // Or one sequence's cost (finish.rs), or a step time: a model
            // that grows faster than the sum (at most by n^2 here) or the
            // sum over a rank, so the costs alone are within a factor
            // 1e8 of f64::MAX.
            let near = match phase {
                Some(p) => sum.get(*p) >= 1e300,
                None => sum.total() >= 1e300,
            };
            check!(
                "plan_error",
                (*got == n && over) || (*got <= n && near),
                "{e:?} but the costs alone sum to {sum:?}"
            );
        }
        Error::LossTokens {
            id,
            loss_tokens,
            tokens,
        } => {
            let s = samples.iter().find(|s| s.id() == *id);
            check!(
                "plan_error",
                s.is_some_and(|s| s.loss_tokens() == *loss_tokens
                    && s.sample().tokens() == *tokens
                    && loss_tokens > tokens),
                "{e:?} unjustified"
            );
        }
        Error::MicroStepsInfeasible { given, smallest } => {
            check!(
                "plan_error",
                cfg.micro_steps == Some(*given) && smallest > given,
                "{e:?} for {cfg:?}"
            );
            if (cfg.ranks as u128) * (*smallest as u128) * (cfg.per_step as u128)
                <= n.max(SLOTS) as u128
            {
                // `smallest` holds the batch: planning with it succeeds, or
                // fails for the costs (step times beyond f64::MAX), which
                // the micro-step count does not decide.
                let r = planner.clone().micro_steps(*smallest).plan(samples);
                check!(
                    "plan_smallest",
                    // (or for an origin, which the planner checks after packing)
                    matches!(
                        r,
                        Ok(_)
                            | Err(Error::CostOverflow { .. }
                                | Error::Invalid {
                                    at: Locator::Origin { .. },
                                    ..
                                })
                    ),
                    "{e:?}, but {smallest} micro-steps fail too: {:?}",
                    r.err()
                );
            }
        }
        Error::Invalid {
            at: Locator::Origin { id, ranks },
            value: Scalar::Int(origin),
            reason: InvalidReason::NotARank,
        } => {
            let s = samples.iter().find(|s| s.id() == *id);
            check!(
                "plan_error",
                *ranks == cfg.ranks
                    && *origin >= *ranks as u64
                    && s.is_some_and(|s| s.origin().map(|o| o as u64) == Some(*origin)),
                "{e:?} unjustified"
            );
        }
        Error::GroupTooLarge {
            group,
            samples: count,
            dim,
            size,
            cap,
        } => {
            let members: Vec<&StepSample> = samples
                .iter()
                .filter(|s| s.group() == Some(*group))
                .collect();
            let sum = |f: &dyn Fn(&StepSample) -> u64| members.iter().map(|s| f(s)).sum::<u64>();
            let ok = members.len() == *count
                && size > cap
                && match *dim {
                    "tokens" => {
                        *size == sum(&|s| s.sample().tokens()) && *cap == u64::from(cfg.seq_len)
                    }
                    "units" => {
                        *size == sum(&|s| s.units()) && Some(*cap) == cfg.max_units.map(u64::from)
                    }
                    "images" => {
                        *size == sum(&|s| s.sample().images().len() as u64)
                            && Some(*cap) == cfg.max_images.map(u64::from)
                    }
                    "sequences" => cfg.scope == GroupScope::Rank,
                    _ => false,
                };
            check!("plan_error", ok, "{e:?} unjustified ({cfg:?})");
        }
        _ => check!(
            "plan_error",
            false,
            "unexpected {e:?} ({cfg:?}, {n} samples)"
        ),
    }
}

/// The sequences a plan may store beyond one a sample (planner.rs `SLOTS`).
const SLOTS: usize = 1 << 16;

/// The planner's model's cost of one sample alone.
fn planner_model_cost<M: Incremental>(planner: &Planner<M>, s: &Sample) -> Phases {
    let m = planner.model();
    m.evaluate_with(&m.empty(), s)
}

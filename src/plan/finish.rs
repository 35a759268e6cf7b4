//! Finishing stage: the plan (ids by slot, each sequence's cost evaluated as a group) and its report.

use alloc::vec;
use alloc::vec::Vec;

use super::baseline::{users_step_time, Naive, Units, UnitsOf};
use super::evaluate::{imbalance, lower_bound, rounded_down, step_time};
use super::exchange::{Exchange, Move};
use super::fingerprint::of_plan;
use super::loss::Loss;
use super::output::{Elapsed, Plan, Report};
use super::prepare::{finite_phases, Prepared};
use super::sample::StepSample;
use super::shape::Shape;
use super::sync::SyncModel;
use crate::cost::{Incremental, Phases};
use crate::grouped::Grouped;
use crate::Error;

/// What the plan is made for: the samples as given, the model, the sync
/// model and `L`.
pub(crate) struct Context<'a, M> {
    pub(crate) samples: &'a [StepSample],
    pub(crate) model: &'a M,
    pub(crate) sync: SyncModel,
    pub(crate) seq_len: u32,
    /// The ranks a node, for the traffic between nodes.
    pub(crate) ranks_per_node: Option<usize>,
    /// Whether the micro-steps are fixed
    /// ([`Planner::micro_steps`](super::Planner::micro_steps)): then every
    /// plan has the shape's `R * A * S` sequences at most, which the bound
    /// counts on.
    pub(crate) fixed_steps: bool,
}

/// The layout to finish: the shape, each slot's positions in ascending
/// order, and whether the balanced packing made the sequences.
pub(crate) struct Layout {
    pub(crate) shape: Shape,
    pub(crate) slots: Vec<Vec<u32>>,
    pub(crate) balanced: bool,
}

/// The plan of `layout` with its report (without a planning time): the
/// ids slot by slot, every sequence evaluated as a group with the model,
/// the predicted step time against the bound, the naive baseline and the
/// users' one.
///
/// O(n + slots) time besides the model and the baseline, O(n + slots)
/// extra space.
///
/// # Errors
///
/// [`Error::CostOverflow`] when a sequence's cost, a step time or the
/// baseline's is beyond `f64::MAX` although every sample's cost alone and
/// their sum are finite (a model that grows faster than the sum).
pub(crate) fn finish<M: Incremental>(
    prep: &Prepared,
    cx: &Context<'_, M>,
    layout: Layout,
) -> Result<Plan, Error> {
    let Layout {
        shape,
        slots,
        balanced,
    } = layout;
    let mut offsets = Vec::with_capacity(slots.len() + 1);
    offsets.push(0usize);
    let mut ids = Vec::with_capacity(prep.len());
    let mut slot_of = vec![0u32; prep.len()];
    let mut used = 0usize;
    for (slot, members) in slots.iter().enumerate() {
        for &p in members {
            slot_of[p as usize] = slot as u32;
            ids.push(prep.items[p as usize].id);
        }
        used += usize::from(!members.is_empty());
        offsets.push(ids.len());
    }
    drop(slots);
    let sequences = Grouped::from_trusted(ids, offsets);
    let tokens = prep
        .items
        .iter()
        .fold(0u64, |acc, e| acc + u64::from(e.sizes[0]));
    let Pass {
        costs,
        loss_tokens,
        units,
        moves,
    } = pass(prep, cx, shape, &slot_of);
    drop(slot_of);
    let (exchange, traffic) = match moves {
        Some((moves, total)) => {
            let x = Exchange::new(moves);
            let t = x.traffic(total, cx.ranks_per_node);
            (Some(x), Some(t))
        }
        None => (None, None),
    };
    for (slot, &c) in costs.iter().enumerate() {
        finite_phases(c, sequences.get(slot).map_or(0, <[u64]>::len))?;
    }

    let naive = Naive::of_units(prep, cx.samples, &units, shape.ranks, shape.per_step);
    let predicted = step_time(cx.sync, shape, &costs);
    let baseline = naive.step_time(prep, cx.samples, cx.model, cx.sync);
    let users_baseline = users_step_time(prep, cx.samples, &units, cx.model, cx.sync, shape);
    drop(units);
    if !(predicted.is_finite() && baseline.is_finite() && users_baseline.is_finite()) {
        return Err(Error::CostOverflow {
            phase: None,
            samples: prep.len(),
        });
    }
    // Every plan of fixed micro-steps has at most the shape's sequences;
    // the naive baseline may have more (it takes the micro-steps it
    // needs), and the bound stays below it too.
    let most = if cx.fixed_steps {
        shape.slots().max(naive.shape.slots())
    } else {
        prep.len()
    };
    let bound = lower_bound(cx.sync, shape.ranks, &prep.bound_parts(most));
    let report = Report {
        sync: cx.sync,
        predicted,
        lower_bound: rounded_down(bound, &[predicted, baseline]),
        baseline,
        baseline_micro_steps: naive.shape.steps,
        users_baseline,
        imbalance: imbalance(shape, &costs),
        efficiency: if used == 0 {
            1.0
        } else {
            tokens as f64 / (used as f64 * f64::from(cx.seq_len))
        },
        sequences: used,
        balanced_packing: balanced,
        traffic,
        locality_free: None,
    };
    Ok(Plan {
        fingerprint: of_plan(shape, &sequences),
        ranks: shape.ranks,
        micro_steps: shape.steps,
        per_step: shape.per_step,
        sequences,
        costs,
        loss: Loss::new(loss_tokens, prep.len() as u64, shape.ranks as u64),
        report,
        exchange,
        planning_time: Elapsed(None),
    })
}

/// Every slot's cost, each slot evaluated as a group with the model, from
/// the slot of every position.
///
/// One pass over the samples in id order (sequential reads of `samples`
/// when they come in id order) fills every slot's cost state. O(n + slots)
/// time besides the model, O(slots) extra space.
fn slot_costs<M: Incremental>(
    prep: &Prepared,
    cx: &Context<'_, M>,
    slot_of: &[u32],
    slots: usize,
) -> Vec<Phases> {
    let mut states = vec![cx.model.empty(); slots];
    for (e, &slot) in prep.items.iter().zip(slot_of) {
        cx.model.insert(
            &mut states[slot as usize],
            cx.samples[e.input as usize].sample(),
        );
    }
    states.iter().map(|st| cx.model.evaluate(st)).collect()
}

/// The exact predicted step time of a layout (each slot's positions), as
/// the finished plan would report it.
///
/// # Errors
///
/// [`Error::CostOverflow`] when a sequence's cost or the step time is not
/// finite.
pub(crate) fn exact_time<M: Incremental>(
    prep: &Prepared,
    cx: &Context<'_, M>,
    shape: Shape,
    slots: &[Vec<u32>],
) -> Result<f64, Error> {
    let mut slot_of = vec![0u32; prep.len()];
    for (k, members) in slots.iter().enumerate() {
        for &p in members {
            slot_of[p as usize] = k as u32;
        }
    }
    let costs = slot_costs(prep, cx, &slot_of, shape.slots());
    for (slot, &c) in costs.iter().enumerate() {
        finite_phases(c, slots.get(slot).map_or(0, Vec::len))?;
    }
    let time = step_time(cx.sync, shape, &costs);
    if time.is_finite() {
        Ok(time)
    } else {
        Err(Error::CostOverflow {
            phase: None,
            samples: prep.len(),
        })
    }
}

/// What [`finish`] reads off the samples, in one pass over them in id
/// order (each sample's two cache lines read once, not once a use).
struct Pass {
    /// Every slot's cost, each slot evaluated as a group with the model.
    costs: Vec<Phases>,
    /// The loss tokens of the batch (saturating).
    loss_tokens: u64,
    /// The baselines' units ([`group_members`](super::baseline::group_members)).
    units: Units,
    /// Every sample with an origin that lands on another rank, and the
    /// bytes of every sample with an origin (saturating); `None` when no
    /// sample has an origin.
    moves: Option<(Vec<Move>, u64)>,
}

/// The slots' costs (as [`slot_costs`]), the loss tokens, the baselines'
/// units (as [`group_members`](super::baseline::group_members)) and the exchange's moves of the plan whose
/// slot of every position is `slot_of`. O(n + slots) time besides the
/// model and the map of the groups (O(n log G) for G groups), O(slots +
/// moves + groups' members) extra space.
fn pass<M: Incremental>(
    prep: &Prepared,
    cx: &Context<'_, M>,
    shape: Shape,
    slot_of: &[u32],
) -> Pass {
    let mut states = vec![cx.model.empty(); shape.slots()];
    let mut loss_tokens = 0u64;
    let mut units = UnitsOf::default();
    let (mut any, mut total, mut moves) = (false, 0u64, Vec::new());
    for (p, (e, &slot)) in prep.items.iter().zip(slot_of).enumerate() {
        let s = &cx.samples[e.input as usize];
        cx.model.insert(&mut states[slot as usize], s.sample());
        loss_tokens = loss_tokens.saturating_add(s.loss_tokens());
        units.add(p as u32, s.group());
        let Some(from) = s.origin() else {
            continue;
        };
        any = true;
        total = total.saturating_add(s.bytes());
        let to = slot as usize / shape.per_rank();
        if from != to {
            moves.push(Move {
                id: e.id,
                from,
                to,
                bytes: s.bytes(),
            });
        }
    }
    Pass {
        costs: states.iter().map(|st| cx.model.evaluate(st)).collect(),
        loss_tokens,
        units: units.finish(),
        moves: any.then_some((moves, total)),
    }
}

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
/// order, whether the balanced packing made the sequences, and the slots'
/// costs when a [`Costed`] of these very slots has them.
pub(crate) struct Placed {
    pub(crate) shape: Shape,
    pub(crate) slots: Vec<Vec<u32>>,
    pub(crate) balanced: bool,
    pub(crate) costs: Option<Vec<Phases>>,
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
    layout: Placed,
) -> Result<Plan, Error> {
    let Placed {
        shape,
        slots,
        balanced,
        costs: known,
    } = layout;
    // Known costs are the costs of these slots, bit for bit.
    debug_assert!(known.as_ref().map_or(true, |k| {
        evaluate(prep, cx, shape, &slots, None).is_ok_and(|(fresh, _, _)| fresh == *k)
    }));
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
    } = pass(prep, cx, shape, &slot_of, known);
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

/// A layout with its exact costs: every slot evaluated as a group with the
/// model, as [`finish`] evaluates it (the same values, bit for bit), the
/// predicted step time, and the slot of every position, from which a later
/// layout that keeps some of these slots whole evaluates only the others
/// ([`Costed::next`]).
pub(crate) struct Costed {
    pub(crate) slots: Vec<Vec<u32>>,
    pub(crate) costs: Vec<Phases>,
    pub(crate) time: f64,
    slot_of: Vec<u32>,
}

impl Costed {
    /// `slots` evaluated anew: one pass over the samples in id order. O(n
    /// + slots) time besides the model, O(n + slots) extra space.
    ///
    /// # Errors
    ///
    /// [`Error::CostOverflow`] when a sequence's cost or the step time is
    /// not finite.
    pub(crate) fn new<M: Incremental>(
        prep: &Prepared,
        cx: &Context<'_, M>,
        shape: Shape,
        slots: Vec<Vec<u32>>,
    ) -> Result<Self, Error> {
        Self::evaluated(prep, cx, shape, slots, None)
    }

    /// `slots` evaluated, the slots equal to one of `self`'s (the same
    /// positions in the same order, found through the slot of their first
    /// position) taking its cost, the others evaluated in one pass over
    /// the samples in id order, which inserts only theirs: the same costs
    /// as [`Costed::new`], since a slot's state takes its positions in
    /// ascending order either way. O(n + slots) time besides the model on
    /// the changed slots, O(n + slots) extra space.
    ///
    /// # Errors
    ///
    /// As [`Costed::new`].
    pub(crate) fn next<M: Incremental>(
        &self,
        prep: &Prepared,
        cx: &Context<'_, M>,
        shape: Shape,
        slots: Vec<Vec<u32>>,
    ) -> Result<Self, Error> {
        Self::evaluated(prep, cx, shape, slots, Some(self))
    }

    fn evaluated<M: Incremental>(
        prep: &Prepared,
        cx: &Context<'_, M>,
        shape: Shape,
        slots: Vec<Vec<u32>>,
        known: Option<&Costed>,
    ) -> Result<Self, Error> {
        let (costs, time, slot_of) = evaluate(prep, cx, shape, &slots, known)?;
        Ok(Costed {
            slots,
            costs,
            time,
            slot_of,
        })
    }
}

/// The costs, step time and slot of every position of `slots` (see
/// [`Costed::next`]; every slot evaluated without `known`).
fn evaluate<M: Incremental>(
    prep: &Prepared,
    cx: &Context<'_, M>,
    shape: Shape,
    slots: &[Vec<u32>],
    known: Option<&Costed>,
) -> Result<(Vec<Phases>, f64, Vec<u32>), Error> {
    debug_assert_eq!(slots.len(), shape.slots());
    let mut slot_of = vec![0u32; prep.len()];
    for (k, members) in slots.iter().enumerate() {
        for &p in members {
            slot_of[p as usize] = k as u32;
        }
    }
    // The cost of every slot a known layout holds as it is; `None` for the
    // others, which the pass evaluates.
    let reused: Vec<Option<Phases>> = slots
        .iter()
        .map(|members| {
            let old = known?;
            let &first = members.first()?;
            let j = *old.slot_of.get(first as usize)? as usize;
            (old.slots.get(j)? == members).then(|| old.costs[j])
        })
        .collect();
    let mut states = vec![cx.model.empty(); slots.len()];
    for (e, &slot) in prep.items.iter().zip(&slot_of) {
        if reused[slot as usize].is_none() {
            cx.model.insert(
                &mut states[slot as usize],
                cx.samples[e.input as usize].sample(),
            );
        }
    }
    let costs: Vec<Phases> = reused
        .iter()
        .zip(&states)
        .map(|(known, st)| known.unwrap_or_else(|| cx.model.evaluate(st)))
        .collect();
    for (slot, &c) in costs.iter().enumerate() {
        finite_phases(c, slots.get(slot).map_or(0, Vec::len))?;
    }
    let time = step_time(cx.sync, shape, &costs);
    if time.is_finite() {
        Ok((costs, time, slot_of))
    } else {
        Err(Error::CostOverflow {
            phase: None,
            samples: prep.len(),
        })
    }
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
    evaluate(prep, cx, shape, slots, None).map(|(_, time, _)| time)
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

/// The slots' costs (as [`Costed`]; `known`, when given, taken as they
/// are), the loss tokens, the baselines'
/// units (as [`group_members`](super::baseline::group_members)) and the exchange's moves of the plan whose
/// slot of every position is `slot_of`. O(n + slots) time besides the
/// model and the map of the groups (O(n log G) for G groups), O(slots +
/// moves + groups' members) extra space.
fn pass<M: Incremental>(
    prep: &Prepared,
    cx: &Context<'_, M>,
    shape: Shape,
    slot_of: &[u32],
    known: Option<Vec<Phases>>,
) -> Pass {
    // With the costs known, no state (a model's state may be large).
    let mut states = vec![cx.model.empty(); if known.is_some() { 0 } else { shape.slots() }];
    let mut loss_tokens = 0u64;
    let mut units = UnitsOf::default();
    let (mut any, mut total, mut moves) = (false, 0u64, Vec::new());
    for (p, (e, &slot)) in prep.items.iter().zip(slot_of).enumerate() {
        let s = &cx.samples[e.input as usize];
        if let Some(state) = states.get_mut(slot as usize) {
            cx.model.insert(state, s.sample());
        }
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
        costs: known.unwrap_or_else(|| states.iter().map(|st| cx.model.evaluate(st)).collect()),
        loss_tokens,
        units: units.finish(),
        moves: any.then_some((moves, total)),
    }
}

#[cfg(test)]
mod tests {
    use super::{Context, Costed};
    use crate::cost::{CostModel, FullAttention, Incremental, Phases, Sample};
    use crate::plan::prepare::prepare;
    use crate::plan::shape::Shape;
    use crate::plan::{StepSample, SyncModel};
    use alloc::vec::Vec;
    use core::cell::Cell;
    use proptest::prelude::*;

    /// Attention over the whole group (not a sum of the samples' costs,
    /// so that a slot's cost is its group's), counting the samples
    /// inserted.
    struct Counting {
        inner: FullAttention,
        inserts: Cell<usize>,
    }

    impl CostModel for Counting {
        fn cost(&self, group: &[&Sample]) -> Phases {
            self.inner.cost(group)
        }
    }

    impl Incremental for Counting {
        type State = <FullAttention as Incremental>::State;
        fn empty(&self) -> Self::State {
            self.inner.empty()
        }
        fn insert(&self, state: &mut Self::State, sample: &Sample) {
            self.inserts.set(self.inserts.get() + 1);
            self.inner.insert(state, sample);
        }
        fn evaluate(&self, state: &Self::State) -> Phases {
            self.inner.evaluate(state)
        }
    }

    proptest! {
        /// A layout evaluated from another (its slots permuted, a few
        /// samples moved) has the costs and the time of the same layout
        /// evaluated anew, bit for bit, and inserts only the samples of
        /// the slots that changed.
        #[test]
        fn a_layout_evaluated_from_another_is_evaluated_anew(
            tokens in proptest::collection::vec(1u32..500, 8..40),
            seed in any::<u64>(),
            moves in 0usize..4,
        ) {
            let n = tokens.len();
            let batch: Vec<StepSample> = tokens
                .iter()
                .enumerate()
                .map(|(i, &t)| StepSample::new(i as u64, Sample::text_only(t)))
                .collect();
            let model = Counting { inner: FullAttention::new(0.01).unwrap(), inserts: Cell::new(0) };
            let shape = Shape { ranks: 2, steps: 2, per_step: 2 };
            let caps = [u64::MAX, u64::MAX, u64::MAX];
            let prep = prepare(&batch, &model, caps, 2, 2, SyncModel::Phase).unwrap();
            let cx = Context {
                samples: &batch,
                model: &model,
                sync: SyncModel::Phase,
                seq_len: u32::MAX,
                ranks_per_node: None,
                fixed_steps: false,
            };
            // A deterministic stream from the seed.
            let mut x = seed | 1;
            let mut draw = |m: usize| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x % m as u64) as usize
            };
            let mut slots: Vec<Vec<u32>> = alloc::vec![Vec::new(); shape.slots()];
            for p in 0..n {
                slots[draw(shape.slots())].push(p as u32);
            }
            let old = Costed::new(&prep, &cx, shape, slots.clone()).unwrap();
            // The slots permuted (a rotation), then a few samples moved,
            // each slot kept ascending.
            let mut next: Vec<Vec<u32>> = (0..slots.len())
                .map(|k| slots[(k + 1) % slots.len()].clone())
                .collect();
            for _ in 0..moves {
                let (a, b) = (draw(next.len()), draw(next.len()));
                if a != b && !next[a].is_empty() {
                    let i = draw(next[a].len());
                    let p = next[a].remove(i);
                    next[b].push(p);
                    next[b].sort_unstable();
                }
            }
            let fresh = Costed::new(&prep, &cx, shape, next.clone()).unwrap();
            model.inserts.set(0);
            let reused = old.next(&prep, &cx, shape, next.clone()).unwrap();
            // A slot is new when no slot of the old layout holds the same
            // samples (a sample moved and back leaves it as it was).
            let expected: usize = next
                .iter()
                .filter(|s| !slots.contains(s))
                .map(Vec::len)
                .sum();
            prop_assert!(moves > 0 || expected == 0);
            prop_assert_eq!(model.inserts.get(), expected);
            prop_assert_eq!(&reused.costs, &fresh.costs);
            prop_assert_eq!(reused.time.to_bits(), fresh.time.to_bits());
            prop_assert_eq!(&reused.slots, &next);
        }
    }
}

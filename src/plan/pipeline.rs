//! Stages 4 to 8 composed: one [`Layout`] carried from the packing through the deal, the refinement, the pairing, the search and the exact stage, and [`best`], the planner's one "try these, keep the best".
//!
//! A [`Run`] holds what every stage of one run reads (the batch, the
//! request, the units and pins of groups, the planner's switches); each
//! stage is a method from a layout to a layout. Under each sync model:
//!
//! | sync model | stages 4 to 8 |
//! |---|---|
//! | [`SyncModel::Step`] | pack, then deal and refine |
//! | [`SyncModel::Phase`] | pack; deal and refine that packing and the per-phase packing of the same micro-steps, keep the best (the per-phase one whenever it holds the fill row); pair, search, exact |
//! | [`SyncModel::MicroStep`] | the per-phase start (the row above, before its pair) paired, searched and made exact under per-micro-step barriers; or the packing dealt and refined under them, where that is faster |
//!
//! Dealing under [`SyncModel::Phase`] tries two row keys ([`RowKey`]) and
//! keeps the best. Every "keep the best" is [`best`]: the lowest step time
//! under the run's sync model (the samples' costs summed a sequence), ties
//! to the first candidate.
//!
//! # Complexity
//!
//! Per run: at most two packings (O(n log n) each), five deals and
//! refinements, one pairing, one search and one exact stage (the last two
//! on their counted budgets); O(n + K) extra space, two layouts at a
//! time.

use alloc::vec::Vec;

use super::deal::{deal, RowKey, Sequences};
use super::evaluate::step_time;
use super::exact::exact;
use super::group::Units;
use super::pack::{balanced_at, pack, Packed, Request};
use super::pair::pair;
use super::prepare::Prepared;
use super::refine::refine;
use super::search::search;
use super::shape::Shape;
use super::sync::SyncModel;
use super::work::Stage;
use crate::cost::Phases;
use crate::error::Error;

/// The layout of stages 4 to 8: the shape, whether the balanced packing
/// made it, the deal (`order[k]` is the sequence in slot `k`), the
/// sequences, and the step time under the sync model it was last made
/// for (the samples' costs summed a sequence; 0 where no stage needed it).
pub(crate) struct Layout {
    pub(crate) time: f64,
    pub(crate) shape: Shape,
    pub(crate) balanced: bool,
    pub(crate) order: Vec<u32>,
    pub(crate) seqs: Sequences,
}

/// "Try these, keep the best": of `first` and the `rest`, the one of
/// lowest `time`, ties to the earlier. The rest are made one at a time, as
/// the iterator yields them, so at most two are held.
///
/// O(candidates) evaluations of `time`.
pub(crate) fn best<T>(first: T, rest: impl IntoIterator<Item = T>, time: impl Fn(&T) -> f64) -> T {
    let mut kept = (time(&first), first);
    for c in rest {
        let t = time(&c);
        if t < kept.0 {
            kept = (t, c);
        }
    }
    kept.1
}

/// What every stage of one run reads: the batch (samples, or with groups
/// the units), the request of the packing, the units and the positions
/// they pin, the planner's sync model and switches, and whether the exact
/// stage runs.
#[derive(Clone, Copy)]
pub(crate) struct Run<'a> {
    pub(crate) sync: SyncModel,
    pub(crate) refine: bool,
    pub(crate) effort: u32,
    pub(crate) exact: bool,
    pub(crate) batch: &'a Prepared,
    pub(crate) request: Request,
    pub(crate) units: Option<&'a Units>,
    pub(crate) pins: &'a [bool],
}

impl Run<'_> {
    /// Stages 4 to 8 under the run's sync model (the table of the module
    /// docs).
    ///
    /// # Errors
    ///
    /// As [`pack`]: [`Error::MicroStepsInfeasible`].
    pub(crate) fn layout(&self) -> Result<Layout, Error> {
        let first = pack(self.batch, self.request)?;
        let searching = self.refine && self.effort > 0;
        Ok(match self.sync {
            // The per-phase start (stages 4 to 6 under per-phase barriers:
            // its per-phase time bounds its per-micro-step time from above)
            // paired, searched and made exact under per-micro-step
            // barriers; or, where it is faster under them, the packing
            // dealt and refined under them (the plan without the search):
            // never worse than that.
            SyncModel::MicroStep if searching => {
                let micro = SyncModel::MicroStep;
                let mut own = self.dealt(micro, first.clone());
                own.time = self.time(micro, &own);
                // Held while the other is made: only its members are read
                // again (its time is known).
                own.seqs = core::mem::take(&mut own.seqs).members_only();
                best(self.searched(micro, self.started(first)), [own], |l| l.time)
            }
            SyncModel::Phase => self.searched(SyncModel::Phase, self.started(first)),
            sync => self.searched(sync, self.dealt(sync, first)),
        })
    }

    /// Stages 4 to 6 under per-phase barriers from the packing `first`:
    /// `first` dealt and refined, and the per-phase packing of its
    /// micro-steps (none where it does not fit) dealt and refined; the
    /// best kept, or the per-phase one whenever it holds the fill row (the
    /// search balances the other micro-steps around that row, but never
    /// builds one).
    fn started(&self, first: Packed) -> Layout {
        let sync = SyncModel::Phase;
        let phases = Request {
            phases: true,
            ..self.request
        };
        let steps = first.shape.steps;
        let own = self.dealt(sync, first);
        let Some(packed) = balanced_at(self.batch, phases, steps) else {
            return own;
        };
        let row = packed.fill_row;
        let other = self.dealt(sync, packed);
        if row {
            return other;
        }
        best(own, [other], |l| l.time)
    }

    /// Stages 5 and 6 (deal and refine) on one packing under `sync`, for
    /// each row key the sync model tries (two under per-phase barriers, one
    /// otherwise), the best kept. With units, chunks of groups go to their
    /// home rank after dealing and never move in the refinement. The
    /// layout's time is computed only under per-phase barriers (the only
    /// ones that compare).
    fn dealt(&self, sync: SyncModel, packed: Packed) -> Layout {
        let (shape, balanced) = (packed.shape, packed.balanced);
        let seqs = Sequences::new(self.batch, packed.sequences);
        let by = |key, seqs| self.dealt_by(sync, key, shape, seqs, balanced);
        match sync {
            SyncModel::Phase => {
                let first = by(RowKey::Excess, seqs.clone());
                best(
                    first,
                    core::iter::once_with(|| by(RowKey::Language, seqs)),
                    |l| l.time,
                )
            }
            _ => by(RowKey::Excess, seqs),
        }
    }

    /// Deal and refine with one row key.
    fn dealt_by(
        &self,
        sync: SyncModel,
        key: RowKey,
        shape: Shape,
        seqs: Sequences,
        balanced: bool,
    ) -> Layout {
        let mut seqs = seqs;
        let mut order = deal(sync, key, shape, &seqs);
        if let Some(u) = self.units {
            u.gather(sync, shape, &mut order, &seqs);
        }
        if self.refine {
            seqs = refine(&self.stage(sync, shape, &order), seqs).sorted();
            if sync == SyncModel::Step {
                // The data loader's order again within each rank.
                for rank in order.chunks_mut(shape.per_rank()) {
                    rank.sort_unstable_by_key(|&b| (seqs.first(b), b));
                }
            }
        }
        let mut layout = Layout {
            time: 0.0,
            shape,
            balanced,
            order,
            seqs,
        };
        if sync == SyncModel::Phase {
            layout.time = self.time(sync, &layout);
        }
        layout
    }

    /// Stages 7 and 8 (pair, search, exact) under `sync` on `layout`, for
    /// per-micro-step sync models with the refinement and a search effort;
    /// the layout's time under `sync` (0 for [`SyncModel::Step`]).
    fn searched(&self, sync: SyncModel, mut layout: Layout) -> Layout {
        if sync == SyncModel::Step {
            return layout;
        }
        if self.refine && self.effort > 0 {
            let stage = self.stage(sync, layout.shape, &layout.order);
            let seqs = core::mem::take(&mut layout.seqs);
            let seqs = search(&stage, pair(&stage, seqs), self.effort).sorted();
            // Small batches: the exact search, on the same budget.
            layout.seqs = if self.exact {
                exact(&stage, seqs, u64::from(self.effort) << 16)
            } else {
                seqs
            };
        }
        layout.time = self.time(sync, &layout);
        layout
    }

    /// What the stages that trade samples read for `order` of `shape`.
    fn stage<'s>(&'s self, sync: SyncModel, shape: Shape, order: &'s [u32]) -> Stage<'s> {
        Stage {
            prep: self.batch,
            pinned: self.pins,
            sync,
            shape,
            slots: order,
        }
    }

    /// The step time of `layout` under `sync`, each sequence costing the
    /// sum of its members' costs in the batch.
    fn time(&self, sync: SyncModel, layout: &Layout) -> f64 {
        additive_time(sync, self.batch, layout)
    }
}

/// The step time under `sync` of `layout`, each sequence costing the sum
/// of its members' costs in `batch`.
pub(crate) fn additive_time(sync: SyncModel, batch: &Prepared, layout: &Layout) -> f64 {
    let cost = |b: &u32| -> Phases {
        layout.seqs.members[*b as usize]
            .iter()
            .map(|&p| batch.cost(p as usize))
            .sum()
    };
    let slot_costs: Vec<Phases> = layout.order.iter().map(cost).collect();
    step_time(sync, layout.shape, &slot_costs)
}

#[cfg(test)]
mod tests {
    use super::best;

    /// The lowest time wins; ties go to the earlier candidate.
    #[test]
    fn best_keeps_the_earliest_of_the_lowest() {
        let rest = [(1, 1.0), (2, 1.0), (3, 2.0)];
        assert_eq!(best((0, 3.0), rest, |x| x.1).0, 1);
        assert_eq!(best((0, 1.0), rest, |x| x.1).0, 0);
        assert_eq!(best((0, 1.0), [], |x: &(u8, f64)| x.1).0, 0);
        assert_eq!(best((0, f64::INFINITY), [(1, 5.0)], |x| x.1).0, 1);
    }
}

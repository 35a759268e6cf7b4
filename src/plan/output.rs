//! The planner's output: the plan (ids by rank, micro-step and sequence) and its report.

use alloc::vec::Vec;
use core::time::Duration;

use super::evaluate::step_time;
use super::exchange::{Exchange, Traffic};
use super::loss::Loss;
use super::sample::StepSample;
use super::shape::Shape;
use super::sync::SyncModel;
use crate::cost::{Incremental, Phases};
use crate::error::Error;
use crate::grouped::Grouped;

/// How good a plan is: its predicted step time against its lower bound and
/// the naive baseline, and where the rest of the time goes.
///
/// Times are in the cost model's unit (seconds, FLOPs, ...).
///
/// # Examples
///
/// ```
/// use microbatch::cost::{Sample, Tokens};
/// use microbatch::plan::{Planner, StepSample};
///
/// let samples: Vec<_> = (0..8).map(|i| StepSample::new(i, Sample::text_only(100 + 10 * i as u32))).collect();
/// let plan = Planner::new(Tokens::new(1.0)?).ranks(2).seq_len(1024).plan(&samples)?;
/// let r = plan.report();
/// assert_eq!(r.lower_bound, 1080.0 / 2.0);
/// assert_eq!(r.predicted, 540.0);
/// assert_eq!(r.ratio(), 1.0);
/// assert_eq!(r.straggler(), 0.0);
/// # Ok::<(), microbatch::Error>(())
/// ```
///
/// A report is a function of the samples and the configuration alone, so
/// the same input gives equal reports; the time planning took is
/// [`Plan::planning_time`].
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct Report {
    /// The sync model the times are computed for.
    pub sync: SyncModel,
    /// The predicted step time of the plan.
    pub predicted: f64,
    /// A lower bound of any plan's step time, from the samples' floors
    /// ([`CostModel::floor`](crate::cost::CostModel::floor): a share of
    /// every group's cost that each sample is sure to bring):
    /// max((floors + rows) / R, largest floor of a sample + cost per row)
    /// for one barrier per step; max(floors / R + fill, (floors + rows) /
    /// R, the staircase of the floors) for one per micro-step; for
    /// per-phase barriers the sum over phases of max(the phase's floors /
    /// R plus its fill, (its floors + its rows) / R, its staircase), or the
    /// bound of one barrier per micro-step if larger (the rows: what the
    /// packed sequences cost beyond their samples' floors, at least, by
    /// the model's
    /// [`CostModel::group_floor`](crate::cost::CostModel::group_floor),
    /// over the fewest to the most sequences a plan can have; the
    /// staircase: a micro-step holds at most `R * S` sequences, so the
    /// samples of large floors need several micro-steps, each waiting for
    /// its largest; the fill: the micro-step of the largest floor waits
    /// for it, and its other ranks hold only what their sequences can; see
    /// the
    /// [module docs](crate::plan#sync-models)).
    ///
    /// For additive and superadditive models (tokens, attention, the vision
    /// encoders, the presets, [`sample_fn`](crate::cost::sample_fn)) the
    /// floor is the sample's cost alone, and this is the classic bound
    /// max(total / R, largest sample). Costs paid once per group
    /// ([`PerGroup`](crate::cost::PerGroup)) are left out of the floors, as
    /// no sample is sure to pay them on top of the others, and counted by
    /// the rows instead, once per sequence the plan needs at least; a model
    /// without floors nor a group floor (a model of your own that
    /// implements neither) has a bound of 0. It is a bound whatever the model: never above
    /// [`predicted`](Report::predicted) nor [`baseline`](Report::baseline)
    /// (rounded down to them where it exceeds one by floating-point
    /// rounding only). For a small batch of an additive model without groups
    /// (at most 24 samples), the planner may raise it to the optimum that an
    /// exact search proved within its budget, so that `ratio() == 1` (within
    /// `1e-9`) there means the plan is proven optimal; when that proof does not fit the budget,
    /// to the highest of a few values below the plan's time (1/32 to 1/1024
    /// of it below) that the search proved no plan beats.
    pub lower_bound: f64,
    /// The predicted step time of the naive plan: the data loader's order
    /// (ascending id), packed greedily (next fit), sequences dealt to ranks
    /// in turn.
    pub baseline: f64,
    /// The micro-steps the naive plan needs (it may need more than `A`).
    pub baseline_micro_steps: usize,
    /// The predicted step time of what users run without the planner, in
    /// the plan's `R x A` micro-batches: the samples in ascending id (a
    /// group as one unit at its smallest id) dealt as `DistributedSampler`
    /// does (unit `k` to rank `k % R`), each rank's units cut in order into
    /// micro-batches of `ceil(units / (R * A))`, each micro-batch packed by
    /// first fit in order into sequences of the caps. A micro-batch that
    /// needs more than `S` sequences runs them all in its micro-step, so
    /// this may be below [`lower_bound`](Report::lower_bound). What
    /// [`gain`](Report::gain) measures against.
    pub users_baseline: f64,
    /// Per phase, the largest rank total over the mean rank total (1.0 is
    /// perfect; 1.0 also for a phase without cost).
    pub imbalance: Phases,
    /// Real tokens over the token capacity of the non-empty sequences.
    pub efficiency: f64,
    /// The non-empty sequences.
    pub sequences: usize,
    /// Whether the balanced packing fitted (`false`: the capacity was too
    /// tight and first-fit-decreasing packed instead).
    pub balanced_packing: bool,
    /// What the plan moves between ranks, when some sample has an origin
    /// ([`StepSample::with_origin`]); the moves themselves are
    /// [`Plan::exchange`].
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub traffic: Option<Traffic>,
    /// The predicted step time of the plan without locality, when
    /// [`Planner::locality`](crate::plan::Planner::locality) was asked for:
    /// [`predicted`](Report::predicted) is at most `(1 + tolerance)` times
    /// this.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub locality_free: Option<f64>,
}

/// The time planning took, which no comparison sees: two plans of the same
/// input are equal however long each took.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Elapsed(pub(crate) Option<Duration>);

impl PartialEq for Elapsed {
    /// Always `true`: the time is not part of a plan's value.
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Report {
    /// The predicted step time over its lower bound (1.0 is perfect).
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Sample, Tokens};
    /// use microbatch::plan::{Planner, StepSample};
    ///
    /// let tokens = [300, 300, 200, 200, 200];
    /// let samples: Vec<_> = (0..5).map(|i| StepSample::new(i, Sample::text_only(tokens[i as usize]))).collect();
    /// let r = *Planner::new(Tokens::new(1.0)?).ranks(2).seq_len(4096).refinement(false).plan(&samples)?.report();
    /// assert_eq!((r.predicted, r.lower_bound), (700.0, 600.0));
    /// assert_eq!(r.ratio(), 700.0 / 600.0);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn ratio(&self) -> f64 {
        if self.lower_bound > 0.0 {
            self.predicted / self.lower_bound
        } else {
            1.0
        }
    }

    /// The straggler time: the predicted step time minus its lower bound.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Sample, Tokens};
    /// use microbatch::plan::{Planner, StepSample};
    ///
    /// let samples: Vec<_> = (0..4).map(|i| StepSample::new(i, Sample::text_only(10 + 10 * i as u32))).collect();
    /// let planner = Planner::new(Tokens::new(1.0)?).ranks(2).seq_len(50);
    /// // Naive: rank 0 runs [0, 1] and [3], 70 tokens; the bound is 100 / 2.
    /// assert_eq!(planner.baseline(&samples)?.report().straggler(), 20.0);
    /// assert_eq!(planner.plan(&samples)?.report().straggler(), 0.0);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn straggler(&self) -> f64 {
        self.predicted - self.lower_bound
    }

    /// The users' baseline's step time over the plan's
    /// ([`users_baseline`](Report::users_baseline) over
    /// [`predicted`](Report::predicted); above 1.0: the plan is faster).
    /// [`packed_gain`](Report::packed_gain) is the same against the naive
    /// [`baseline`](Report::baseline).
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Sample, Tokens};
    /// use microbatch::plan::{Planner, StepSample};
    ///
    /// // Dealt in turn (sample i to rank i % 2), both long samples land on
    /// // rank 0: 2000 tokens against 400; the plan evens them out (1200 each).
    /// let samples: Vec<_> = (0..8u32)
    ///     .map(|i| StepSample::new(i.into(), Sample::text_only(if i % 4 == 0 { 900 } else { 100 })))
    ///     .collect();
    /// let plan = Planner::new(Tokens::new(1.0)?).ranks(2).seq_len(1000).plan(&samples)?;
    /// let r = plan.report();
    /// assert_eq!((r.users_baseline, r.predicted), (2000.0, 1200.0));
    /// assert_eq!(r.gain(), r.users_baseline / r.predicted);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn gain(&self) -> f64 {
        if self.predicted > 0.0 {
            self.users_baseline / self.predicted
        } else {
            1.0
        }
    }

    /// The naive baseline's step time over the plan's
    /// ([`baseline`](Report::baseline) over [`predicted`](Report::predicted)).
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Sample, Tokens};
    /// use microbatch::plan::{Planner, StepSample};
    ///
    /// let samples: Vec<_> = (0..8u32)
    ///     .map(|i| StepSample::new(i.into(), Sample::text_only(if i < 2 { 900 } else { 100 })))
    ///     .collect();
    /// let r = *Planner::new(Tokens::new(1.0)?).ranks(2).seq_len(1000).plan(&samples)?.report();
    /// assert_eq!(r.packed_gain(), r.baseline / r.predicted);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn packed_gain(&self) -> f64 {
        if self.predicted > 0.0 {
            self.baseline / self.predicted
        } else {
            1.0
        }
    }
}

/// A plan: for every rank, for every micro-step, the packed sequences as
/// lists of sample ids, with the loss scales, a report and a fingerprint.
///
/// Sequence `(rank, micro_step, index)` is stored at slot
/// `(rank * A + micro_step) * S + index`; the samples of one micro-batch
/// (its `S` sequences) are contiguous, each sequence in ascending id.
///
/// # Examples
///
/// ```
/// use microbatch::cost::{Sample, Tokens};
/// use microbatch::plan::{Planner, StepSample};
///
/// let samples: Vec<_> = (0..6).map(|i| StepSample::new(i, Sample::text_only(300))).collect();
/// let plan = Planner::new(Tokens::new(1.0)?).ranks(2).seq_len(1000).plan(&samples)?;
/// assert_eq!((plan.ranks(), plan.micro_steps(), plan.sequences_per_micro_step()), (2, 1, 1));
/// assert_eq!(plan.sequence(0, 0, 0).len() + plan.sequence(1, 0, 0).len(), 6);
/// assert_eq!(plan.to_nested()[1][0].len(), 3);
/// # Ok::<(), microbatch::Error>(())
/// ```
///
/// Plans compare by value: the ids, shape, costs, loss, report, fingerprint
/// and exchange; the time planning took ([`Plan::planning_time`]) is not
/// compared.
///
/// # Serialization
///
/// With the `serde` feature a plan is written as its shape (`ranks`,
/// `micro_steps`, `per_step`), the ids slot by slot (`ids`) with `offsets`
/// (slot `k` is `ids[offsets[k]..offsets[k + 1]]`), the cost of every slot,
/// the loss, the report (with the planning time, as `report.planning_time`)
/// and the fingerprint. Reading one is checked, so
/// that a corrupted or hand-edited document is an error naming what is
/// wrong, never a plan that panics or lies later: the shape has no zero and
/// fits in `usize`; the offsets start at 0, never decrease and end at the
/// number of ids, one slot per sequence of the shape; there is at least one
/// id, no id twice, and every sequence ascends; there is one cost per slot,
/// each finite and non-negative; the loss counts the plan's samples and
/// ranks and the report its non-empty sequences; and the fingerprint is the
/// one the shape and the ids give (it is recomputed, and a document that
/// states another is refused). A plan that is read answers every accessor
/// for every in-range argument without panicking. The report's times and
/// ratios are taken as written.
///
/// ```
/// # #[cfg(feature = "serde")] {
/// use microbatch::cost::{Sample, Tokens};
/// use microbatch::plan::{Plan, Planner, StepSample};
///
/// let samples: Vec<_> = (0..4).map(|i| StepSample::new(i, Sample::text_only(300))).collect();
/// let plan = Planner::new(Tokens::new(1.0)?).ranks(2).seq_len(1000).plan(&samples)?;
/// let json = serde_json::to_string(&plan).unwrap();
/// assert_eq!(serde_json::from_str::<Plan>(&json).unwrap(), plan);
///
/// // The same plan with its first id listed again last is refused, with the reason.
/// let mut doc: serde_json::Value = serde_json::from_str(&json).unwrap();
/// let first = doc["ids"][0].clone();
/// doc["ids"][3] = first;
/// let err = serde_json::from_value::<Plan>(doc).unwrap_err();
/// assert!(err.to_string().contains("is listed in slot 0 and again in slot 1"), "{err}");
/// # }
/// # Ok::<(), microbatch::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize),
    serde(try_from = "wire::Plan")
)]
pub struct Plan {
    pub(crate) ranks: usize,
    pub(crate) micro_steps: usize,
    pub(crate) per_step: usize,
    /// The ids of every sequence, by slot.
    pub(crate) sequences: Grouped<u64>,
    /// The cost of every sequence, by slot.
    pub(crate) costs: Vec<Phases>,
    pub(crate) loss: Loss,
    pub(crate) report: Report,
    pub(crate) fingerprint: u64,
    /// The moves, when some sample has an origin.
    pub(crate) exchange: Option<Exchange>,
    /// The time planning took (never compared).
    pub(crate) planning_time: Elapsed,
}

impl Plan {
    /// The data-parallel ranks `R`.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Sample, Tokens};
    /// use microbatch::plan::{Planner, StepSample};
    ///
    /// let samples: Vec<_> = (0..6).map(|i| StepSample::new(i, Sample::text_only(100))).collect();
    /// let plan = Planner::new(Tokens::new(1.0)?).ranks(3).seq_len(1024).plan(&samples)?;
    /// assert_eq!(plan.ranks(), 3);
    /// assert!((0..3).all(|r| plan.rank(r).len() == 2));
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn ranks(&self) -> usize {
        self.ranks
    }

    /// The micro-steps `A` of every rank.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Sample, Tokens};
    /// use microbatch::plan::{Planner, StepSample};
    ///
    /// let samples: Vec<_> = (0..6).map(|i| StepSample::new(i, Sample::text_only(400))).collect();
    /// // Two samples a sequence: three sequences, two micro-steps on 2 ranks.
    /// let plan = Planner::new(Tokens::new(1.0)?).ranks(2).seq_len(1000).plan(&samples)?;
    /// assert_eq!(plan.micro_steps(), 2);
    /// assert!(plan.to_nested().iter().all(|rank| rank.len() == 2));
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn micro_steps(&self) -> usize {
        self.micro_steps
    }

    /// The sequences `S` of every micro-step.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Sample, Tokens};
    /// use microbatch::plan::{Planner, StepSample};
    ///
    /// let samples: Vec<_> = (0..6).map(|i| StepSample::new(i, Sample::text_only(400))).collect();
    /// let plan = Planner::new(Tokens::new(1.0)?).ranks(2).seq_len(1000).sequences_per_micro_step(3).plan(&samples)?;
    /// assert_eq!((plan.micro_steps(), plan.sequences_per_micro_step()), (1, 3));
    /// assert_eq!(plan.to_sequences()[0][0].len(), 3);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn sequences_per_micro_step(&self) -> usize {
        self.per_step
    }

    /// The number of samples planned.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Sample, Tokens};
    /// use microbatch::plan::{Planner, StepSample};
    ///
    /// let samples = [StepSample::new(4, Sample::text_only(7)), StepSample::new(9, Sample::text_only(3))];
    /// let plan = Planner::new(Tokens::new(1.0)?).ranks(1).seq_len(16).plan(&samples)?;
    /// assert_eq!((plan.len(), plan.is_empty()), (2, false));
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn len(&self) -> usize {
        self.sequences.item_count()
    }

    /// Whether the plan has no sample: never, since the planner refuses an
    /// empty batch and reading a plan without samples is refused.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Sample, Tokens};
    /// use microbatch::plan::{Planner, StepSample};
    ///
    /// let samples = [StepSample::new(0, Sample::text_only(5))];
    /// let planner = Planner::new(Tokens::new(1.0)?).ranks(1).seq_len(8);
    /// assert!(!planner.plan(&samples)?.is_empty());
    /// assert!(planner.plan(&[]).is_err()); // no plan without samples
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.sequences.item_count() == 0
    }

    fn shape(&self) -> Shape {
        Shape {
            ranks: self.ranks,
            steps: self.micro_steps,
            per_step: self.per_step,
        }
    }

    /// The slot of sequence `(rank, micro_step, index)`; panics when out of
    /// range. The product cannot overflow: it is below `R * A * S`, the
    /// number of slots.
    fn slot(&self, rank: usize, micro_step: usize, index: usize) -> usize {
        assert!(
            rank < self.ranks && micro_step < self.micro_steps && index < self.per_step,
            "sequence ({rank}, {micro_step}, {index}) out of range: the plan has {} ranks, {} micro-steps, {} sequences each",
            self.ranks,
            self.micro_steps,
            self.per_step
        );
        self.shape().micro_batch(rank, micro_step) + index
    }

    /// The ids of the `count` slots from `first` (in range: `first + count`
    /// is at most `R * A * S`, the number of groups, by construction or by
    /// the checks on read).
    fn ids(&self, first: usize, count: usize) -> &[u64] {
        self.sequences
            .span(first, first + count)
            .unwrap_or_default()
    }

    /// The sample ids of sequence `index` of `micro_step` on `rank`, in
    /// ascending id. May be empty when the batch has fewer samples than
    /// sequences.
    ///
    /// # Panics
    ///
    /// When `rank`, `micro_step` or `index` is out of range (not below
    /// [`ranks`](Plan::ranks), [`micro_steps`](Plan::micro_steps) or
    /// [`sequences_per_micro_step`](Plan::sequences_per_micro_step)); never
    /// otherwise.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Sample, Tokens};
    /// use microbatch::plan::{Planner, StepSample};
    ///
    /// let samples: Vec<_> = (0..4).map(|i| StepSample::new(i, Sample::text_only(10 + 10 * i as u32))).collect();
    /// let plan = Planner::new(Tokens::new(1.0)?).ranks(2).seq_len(50).plan(&samples)?;
    /// // 20 + 30 and 10 + 40 tokens, each sequence in ascending id.
    /// assert_eq!(plan.sequence(0, 0, 0), [1, 2]);
    /// assert_eq!(plan.sequence(1, 0, 0), [0, 3]);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn sequence(&self, rank: usize, micro_step: usize, index: usize) -> &[u64] {
        self.ids(self.slot(rank, micro_step, index), 1)
    }

    /// The predicted cost of that sequence.
    ///
    /// # Panics
    ///
    /// When `rank`, `micro_step` or `index` is out of range (not below
    /// [`ranks`](Plan::ranks), [`micro_steps`](Plan::micro_steps) or
    /// [`sequences_per_micro_step`](Plan::sequences_per_micro_step)); never
    /// otherwise.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Sample, Tokens};
    /// use microbatch::plan::{Planner, StepSample};
    ///
    /// let samples: Vec<_> = (0..4).map(|i| StepSample::new(i, Sample::text_only(10 + 10 * i as u32))).collect();
    /// let plan = Planner::new(Tokens::new(1.0)?).ranks(2).seq_len(50).plan(&samples)?;
    /// let c = plan.sequence_cost(0, 0, 0);
    /// assert_eq!((c.vision, c.language), (0.0, 50.0)); // 40 + 10 tokens
    /// assert_eq!(plan.sequence_cost(1, 0, 0).total(), 50.0);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn sequence_cost(&self, rank: usize, micro_step: usize, index: usize) -> Phases {
        self.costs[self.slot(rank, micro_step, index)]
    }

    /// The sample ids of the micro-batch `micro_step` of `rank`: its `S`
    /// sequences one after the other.
    ///
    /// # Panics
    ///
    /// When `rank` or `micro_step` is out of range (not below
    /// [`ranks`](Plan::ranks) or [`micro_steps`](Plan::micro_steps)); never
    /// otherwise.
    ///
    /// # Examples
    ///
    /// The layout, three ways:
    ///
    /// ```
    /// use microbatch::cost::{Sample, Tokens};
    /// use microbatch::plan::{Planner, StepSample};
    ///
    /// let samples: Vec<_> = (0..12).map(|i| StepSample::new(i, Sample::text_only(400))).collect();
    /// let plan = Planner::new(Tokens::new(1.0)?).ranks(2).seq_len(1000)
    ///     .sequences_per_micro_step(2)
    ///     .plan(&samples)?;
    /// // 12 samples of 400 tokens, two a sequence: 6 sequences, 2 per micro-step.
    /// assert_eq!((plan.ranks(), plan.micro_steps(), plan.len()), (2, 2, 12));
    /// let mb = plan.micro_batch(1, 0);
    /// assert_eq!(mb.len(), plan.sequence(1, 0, 0).len() + plan.sequence(1, 0, 1).len());
    /// assert_eq!(plan.rank(1).len(), 6);
    /// assert_eq!(plan.to_sequences()[1][0].concat(), mb);
    /// assert_eq!(plan.sequence_cost(1, 0, 0).language, 400.0 * plan.sequence(1, 0, 0).len() as f64);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn micro_batch(&self, rank: usize, micro_step: usize) -> &[u64] {
        self.ids(self.slot(rank, micro_step, 0), self.per_step)
    }

    /// The sample ids of every micro-batch of `rank`, in micro-step order.
    ///
    /// # Panics
    ///
    /// When `rank` is out of range (not below [`ranks`](Plan::ranks)); never
    /// otherwise.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Sample, Tokens};
    /// use microbatch::plan::{Planner, StepSample};
    ///
    /// let samples: Vec<_> = (0..8).map(|i| StepSample::new(i, Sample::text_only(100))).collect();
    /// let plan = Planner::new(Tokens::new(1.0)?).ranks(2).seq_len(1000).micro_steps(2).plan(&samples)?;
    /// assert_eq!(plan.rank(0), [plan.micro_batch(0, 0), plan.micro_batch(0, 1)].concat());
    /// assert_eq!(plan.rank(0).len() + plan.rank(1).len(), 8);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn rank(&self, rank: usize) -> &[u64] {
        self.ids(self.slot(rank, 0, 0), self.micro_steps * self.per_step)
    }

    /// The plan as nested lists: rank -> micro-step -> sample ids (the `S`
    /// sequences of a micro-step concatenated).
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Sample, Tokens};
    /// use microbatch::plan::{Planner, StepSample};
    ///
    /// let samples: Vec<_> = (0..4).map(|i| StepSample::new(i, Sample::text_only(10 + 10 * i as u32))).collect();
    /// let plan = Planner::new(Tokens::new(1.0)?).ranks(1).seq_len(50).sequences_per_micro_step(2).plan(&samples)?;
    /// // One rank, one micro-step: its two sequences, [0, 3] and [1, 2], concatenated.
    /// assert_eq!(plan.to_nested(), vec![vec![vec![0, 3, 1, 2]]]);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn to_nested(&self) -> Vec<Vec<Vec<u64>>> {
        (0..self.ranks)
            .map(|r| {
                (0..self.micro_steps)
                    .map(|j| self.micro_batch(r, j).to_vec())
                    .collect()
            })
            .collect()
    }

    /// The plan as nested lists of sequences: rank -> micro-step ->
    /// sequence -> sample ids.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Sample, Tokens};
    /// use microbatch::plan::{Planner, StepSample};
    ///
    /// let samples: Vec<_> = (0..4).map(|i| StepSample::new(i, Sample::text_only(10 + 10 * i as u32))).collect();
    /// let plan = Planner::new(Tokens::new(1.0)?).ranks(1).seq_len(50).sequences_per_micro_step(2).plan(&samples)?;
    /// assert_eq!(plan.to_sequences(), vec![vec![vec![vec![0, 3], vec![1, 2]]]]);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn to_sequences(&self) -> Vec<Vec<Vec<Vec<u64>>>> {
        (0..self.ranks)
            .map(|r| {
                (0..self.micro_steps)
                    .map(|j| {
                        (0..self.per_step)
                            .map(|s| self.sequence(r, j, s).to_vec())
                            .collect()
                    })
                    .collect()
            })
            .collect()
    }

    /// The loss denominators and scales.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Sample, Tokens};
    /// use microbatch::plan::{Loss, Normalization, Planner, Reduction, StepSample};
    ///
    /// let samples: Vec<_> = (0..4).map(|i| StepSample::new(i, Sample::text_only(250))).collect();
    /// let plan = Planner::new(Tokens::new(1.0)?).ranks(2).seq_len(1024).plan(&samples)?;
    /// assert_eq!(*plan.loss(), Loss::new(1000, 4, 2));
    /// assert_eq!(plan.loss().scale(Normalization::Sample, Reduction::Mean), 0.5); // 2 / 4
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn loss(&self) -> &Loss {
        &self.loss
    }

    /// The report: predicted step time, lower bound, baseline, imbalance.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Sample, Tokens};
    /// use microbatch::plan::{Planner, StepSample, SyncModel};
    ///
    /// let samples: Vec<_> = (0..4).map(|i| StepSample::new(i, Sample::text_only(10 + 10 * i as u32))).collect();
    /// let r = *Planner::new(Tokens::new(1.0)?).ranks(2).seq_len(50).plan(&samples)?.report();
    /// assert_eq!((r.sync, r.sequences, r.balanced_packing), (SyncModel::Step, 2, true));
    /// assert_eq!((r.predicted, r.lower_bound, r.efficiency), (50.0, 50.0, 1.0));
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn report(&self) -> &Report {
        &self.report
    }

    /// The time [`Planner::plan`](crate::plan::Planner::plan) took, with
    /// the `std` feature; `None` without it, for
    /// [`Planner::baseline`](crate::plan::Planner::baseline), and for a
    /// plan read from a document that states no time. It is not part of the
    /// plan's value: plans (and their reports) of the same input are equal
    /// however long each took.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Sample, Tokens};
    /// use microbatch::plan::{Planner, StepSample};
    ///
    /// let samples: Vec<_> = (0..8).map(|i| StepSample::new(i, Sample::text_only(100))).collect();
    /// let planner = Planner::new(Tokens::new(1.0)?).ranks(2).seq_len(1000);
    /// let (a, b) = (planner.plan(&samples)?, planner.plan(&samples)?);
    /// # #[cfg(feature = "std")]
    /// assert!(a.planning_time().is_some());
    /// assert_eq!(a, b); // whatever the times
    /// assert_eq!(planner.baseline(&samples)?.planning_time(), None);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn planning_time(&self) -> Option<Duration> {
        self.planning_time.0
    }

    /// The exchange schedule: which samples move from which rank to which
    /// (every sample with an origin that the plan puts on another rank).
    /// `None` when no sample has an origin; with origins it is there with
    /// or without [`Planner::locality`](crate::plan::Planner::locality).
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Sample, Tokens};
    /// use microbatch::plan::{Planner, StepSample};
    ///
    /// let planner = Planner::new(Tokens::new(1.0)?).ranks(2).seq_len(1000);
    /// let samples: Vec<_> = (0..4).map(|i| StepSample::new(i, Sample::text_only(100))).collect();
    /// assert!(planner.plan(&samples)?.exchange().is_none());
    /// let held: Vec<_> = samples.into_iter().map(|s| s.with_origin(0)).collect();
    /// let plan = planner.plan(&held)?;
    /// assert_eq!(plan.exchange().unwrap().sends(0, 1), plan.rank(1));
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn exchange(&self) -> Option<&Exchange> {
        self.exchange.as_ref()
    }

    /// A stable 64-bit fingerprint of the plan: FNV-1a (64 bit) over the
    /// little-endian bytes of a version tag, `R`, `A` and `S`, then for every
    /// sequence (rank by rank, micro-step by micro-step) its sample count and
    /// its ids. Equal on every rank and platform for equal plans.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Sample, Tokens};
    /// use microbatch::plan::{Planner, StepSample};
    ///
    /// let mut samples: Vec<_> = (0..8).map(|i| StepSample::new(i, Sample::text_only(100 + i as u32))).collect();
    /// let planner = Planner::new(Tokens::new(1.0)?).ranks(2).seq_len(1000);
    /// let a = planner.plan(&samples)?;
    /// samples.reverse(); // another rank read the batch in another order
    /// let b = planner.plan(&samples)?;
    /// assert_eq!(a.fingerprint(), b.fingerprint());
    /// assert_eq!(a.report().ratio(), b.report().ratio());
    /// assert_eq!(a.loss().samples, 8);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn fingerprint(&self) -> u64 {
        self.fingerprint
    }

    /// The step time of this plan predicted by another cost model or sync
    /// model, for example to compare a plan balanced by tokens with one
    /// balanced by cost on the same phase-aware model. `samples` must be the
    /// plan's samples (in any order).
    ///
    /// # Errors
    ///
    /// [`Error::PlanMismatch`] when the counts differ or a planned id is not
    /// among `samples`; [`Error::DuplicateId`] for a repeated id.
    ///
    /// # Complexity
    ///
    /// O(n log n).
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{DocumentAttention, Sample, Tokens};
    /// use microbatch::plan::{Planner, StepSample, SyncModel};
    ///
    /// let samples: Vec<_> = (0..8).map(|i| StepSample::new(i, Sample::text_only(50 * (i as u32 + 1)))).collect();
    /// let plan = Planner::new(Tokens::new(1.0)?).ranks(2).seq_len(1024).plan(&samples)?;
    /// let attention = DocumentAttention::new(1.0)?;
    /// let t = plan.predict(&samples, &attention, SyncModel::Step)?;
    /// assert!(t >= 0.5 * samples.iter().map(|s| (s.sample().tokens() as f64).powi(2)).sum::<f64>());
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    pub fn predict<M: Incremental>(
        &self,
        samples: &[StepSample],
        model: &M,
        sync: SyncModel,
    ) -> Result<f64, Error> {
        let planned = self.len();
        if samples.len() != planned {
            return Err(Error::PlanMismatch {
                id: None,
                planned,
                given: samples.len(),
            });
        }
        let mut by_id: Vec<usize> = (0..samples.len()).collect();
        by_id.sort_unstable_by_key(|&i| samples[i].id());
        if let Some(w) = by_id
            .windows(2)
            .find(|w| samples[w[0]].id() == samples[w[1]].id())
        {
            return Err(Error::DuplicateId {
                id: samples[w[0]].id(),
            });
        }
        let mut costs = Vec::with_capacity(self.costs.len());
        for ids in self.sequences.iter() {
            let mut state = model.empty();
            for &id in ids {
                let pos = by_id
                    .binary_search_by_key(&id, |&i| samples[i].id())
                    .map_err(|_| Error::PlanMismatch {
                        id: Some(id),
                        planned,
                        given: samples.len(),
                    })?;
                model.insert(&mut state, samples[by_id[pos]].sample());
            }
            costs.push(model.evaluate(&state));
        }
        Ok(step_time(sync, self.shape(), &costs))
    }
}

/// A [`Plan`] as serialized: the shape, the ids slot by slot with their
/// offsets, the costs by slot, the loss, the report and the fingerprint.
///
/// Reading goes through one checked path, so that a hand-edited or
/// corrupted document is an error naming what is wrong rather than a later
/// panic or a fingerprint that disagrees with the ids.
#[cfg(feature = "serde")]
mod wire {
    use alloc::vec::Vec;
    use core::time::Duration;

    use serde::ser::{SerializeStruct, Serializer};
    use serde::Serialize;

    use super::{Elapsed, Exchange, Loss, Phases, Report, SyncModel, Traffic};
    use crate::grouped::{invalid, Grouped, Invalid, Raw};
    use crate::plan::fingerprint::of_plan;
    use crate::plan::shape::Shape;

    /// A plan as read, checked before it becomes one.
    #[derive(serde::Deserialize)]
    pub(super) struct Plan {
        ranks: usize,
        micro_steps: usize,
        per_step: usize,
        offsets: Vec<usize>,
        ids: Vec<u64>,
        costs: Vec<Phases>,
        loss: Loss,
        report: ReportDoc,
        fingerprint: u64,
        #[serde(default)]
        exchange: Option<Exchange>,
    }

    /// A [`Report`] as written in a plan, with the plan's planning time in
    /// the place it had when it was a field of the report, so that
    /// documents read and write as before. Converted field by field (no
    /// `..`), so a new field of the report cannot be left out.
    #[derive(serde::Serialize, serde::Deserialize)]
    struct ReportDoc {
        sync: SyncModel,
        predicted: f64,
        lower_bound: f64,
        baseline: f64,
        baseline_micro_steps: usize,
        users_baseline: f64,
        imbalance: Phases,
        efficiency: f64,
        sequences: usize,
        balanced_packing: bool,
        planning_time: Option<Duration>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        traffic: Option<Traffic>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        locality_free: Option<f64>,
    }

    impl ReportDoc {
        fn new(report: &Report, planning_time: Option<Duration>) -> Self {
            let Report {
                sync,
                predicted,
                lower_bound,
                baseline,
                baseline_micro_steps,
                users_baseline,
                imbalance,
                efficiency,
                sequences,
                balanced_packing,
                traffic,
                locality_free,
            } = *report;
            ReportDoc {
                sync,
                predicted,
                lower_bound,
                baseline,
                baseline_micro_steps,
                users_baseline,
                imbalance,
                efficiency,
                sequences,
                balanced_packing,
                planning_time,
                traffic,
                locality_free,
            }
        }

        /// The report and the planning time.
        fn split(self) -> (Report, Option<Duration>) {
            let ReportDoc {
                sync,
                predicted,
                lower_bound,
                baseline,
                baseline_micro_steps,
                users_baseline,
                imbalance,
                efficiency,
                sequences,
                balanced_packing,
                planning_time,
                traffic,
                locality_free,
            } = self;
            let report = Report {
                sync,
                predicted,
                lower_bound,
                baseline,
                baseline_micro_steps,
                users_baseline,
                imbalance,
                efficiency,
                sequences,
                balanced_packing,
                traffic,
                locality_free,
            };
            (report, planning_time)
        }
    }

    impl TryFrom<Plan> for super::Plan {
        type Error = Invalid;

        /// O(n log n + slots) time (the repeated-id check sorts the ids),
        /// O(n) extra space.
        fn try_from(p: Plan) -> Result<Self, Invalid> {
            let (report, planning_time) = p.report.split();
            let shape = Shape {
                ranks: p.ranks,
                steps: p.micro_steps,
                per_step: p.per_step,
            };
            let slots = slots(shape)?;
            let sequences = Grouped::try_from(Raw::flat(p.ids, p.offsets, "slot"))?;
            if sequences.len() != slots {
                return Err(invalid!(
                    "there must be {} x {} x {} = {slots} sequences (ranks x micro-steps x \
                     sequences per micro-step), so {} offsets, not {}",
                    shape.ranks,
                    shape.steps,
                    shape.per_step,
                    // u128: `slots` may be usize::MAX.
                    slots as u128 + 1,
                    sequences.len() as u128 + 1
                ));
            }
            let n = sequences.item_count();
            if n == 0 {
                return Err(invalid!("the plan has no sample: a plan has at least one"));
            }
            let mut used = 0usize;
            for (k, ids) in sequences.iter().enumerate() {
                if let Some(w) = ids.windows(2).find(|w| w[0] >= w[1]) {
                    return Err(invalid!(
                        "{} lists id {} after id {}: the ids of a sequence ascend",
                        at(shape, k),
                        w[1],
                        w[0]
                    ));
                }
                used += usize::from(!ids.is_empty());
            }
            if p.costs.len() != slots {
                return Err(invalid!(
                    "there must be one cost per sequence, {slots}, not {}",
                    p.costs.len()
                ));
            }
            for (k, c) in p.costs.iter().enumerate() {
                // NaN-safe: NaN fails `>= 0.0`.
                let fine = |x: f64| x.is_finite() && x >= 0.0;
                if !(fine(c.vision) && fine(c.language)) {
                    return Err(invalid!(
                        "the cost of {} is {:?} (vision) and {:?} (language): costs are \
                         finite and non-negative",
                        at(shape, k),
                        c.vision,
                        c.language
                    ));
                }
            }
            if p.loss.samples != n as u64 {
                return Err(invalid!(
                    "the loss counts {} samples but the plan has {n}",
                    p.loss.samples
                ));
            }
            if p.loss.ranks != shape.ranks as u64 {
                return Err(invalid!(
                    "the loss counts {} ranks but the plan has {}",
                    p.loss.ranks,
                    shape.ranks
                ));
            }
            // The gain divides by it: finite and non-negative, like a cost.
            let u = report.users_baseline;
            if !(u.is_finite() && u >= 0.0) {
                return Err(invalid!(
                    "the report's users_baseline is {u:?}: a step time is finite and \
                     non-negative"
                ));
            }
            if report.sequences != used {
                return Err(invalid!(
                    "the report counts {} non-empty sequences but the plan has {used}",
                    report.sequences
                ));
            }
            let fingerprint = of_plan(shape, &sequences);
            if p.fingerprint != fingerprint {
                return Err(invalid!(
                    "the fingerprint is {} but the plan's shape and ids give {fingerprint}",
                    p.fingerprint
                ));
            }
            check_exchange(shape, &sequences, p.exchange.as_ref(), &report)?;
            Ok(super::Plan {
                ranks: shape.ranks,
                micro_steps: shape.steps,
                per_step: shape.per_step,
                sequences,
                costs: p.costs,
                loss: p.loss,
                report,
                fingerprint,
                exchange: p.exchange,
                planning_time: Elapsed(planning_time),
            })
        }
    }

    /// The exchange against the plan: every move's id is in the plan on
    /// rank `to`, `from` is another rank below `R` (the order and repeats
    /// are checked on reading the exchange), and the report's traffic
    /// agrees with the moves; an exchange goes with a traffic and back.
    /// O(n log n + m log m).
    fn check_exchange(
        shape: Shape,
        sequences: &Grouped<u64>,
        exchange: Option<&Exchange>,
        report: &Report,
    ) -> Result<(), Invalid> {
        let (x, t) = match (exchange, report.traffic) {
            (None, None) => return Ok(()),
            (Some(x), Some(t)) => (x, t),
            (Some(_), None) => {
                return Err(invalid!(
                    "the plan has an exchange but its report no traffic"
                ))
            }
            (None, Some(_)) => {
                return Err(invalid!(
                    "the report has a traffic but the plan no exchange"
                ))
            }
        };
        let mut rank_of: Vec<(u64, usize)> = sequences
            .iter()
            .enumerate()
            .flat_map(|(k, ids)| ids.iter().map(move |&id| (id, k / shape.per_rank())))
            .collect();
        rank_of.sort_unstable();
        for m in x.moves() {
            if m.from >= shape.ranks {
                return Err(invalid!(
                    "id {} moves from rank {} but the plan has {} ranks",
                    m.id,
                    m.from,
                    shape.ranks
                ));
            }
            let Ok(i) = rank_of.binary_search_by_key(&m.id, |e| e.0) else {
                return Err(invalid!("id {} moves but is not in the plan", m.id));
            };
            if rank_of[i].1 != m.to {
                return Err(invalid!(
                    "id {} moves to rank {} but the plan puts it on rank {}",
                    m.id,
                    m.to,
                    rank_of[i].1
                ));
            }
        }
        let again = x.traffic(t.bytes_total, None);
        let agrees = t.samples_moved == again.samples_moved
            && t.bytes_moved == again.bytes_moved
            && t.max_bytes_in == again.max_bytes_in
            && t.max_bytes_out == again.max_bytes_out
            && t.bytes_total >= t.bytes_moved
            && t.inter_node_bytes.map_or(true, |b| b <= t.bytes_moved);
        if !agrees {
            return Err(invalid!(
                "the report's traffic ({} samples, {} bytes moved, at most {} in and {} out of a \
                 rank, {} bytes in all) disagrees with the exchange's moves ({} samples, {} \
                 bytes, {} in, {} out)",
                t.samples_moved,
                t.bytes_moved,
                t.max_bytes_in,
                t.max_bytes_out,
                t.bytes_total,
                again.samples_moved,
                again.bytes_moved,
                again.max_bytes_in,
                again.max_bytes_out
            ));
        }
        Ok(())
    }

    /// `R * A * S`, each factor at least 1 and the product in range.
    fn slots(shape: Shape) -> Result<usize, Invalid> {
        for (value, what) in [
            (shape.ranks, "rank"),
            (shape.steps, "micro-step"),
            (shape.per_step, "sequence per micro-step"),
        ] {
            if value == 0 {
                return Err(invalid!("a plan has at least one {what}, not 0"));
            }
        }
        shape
            .ranks
            .checked_mul(shape.steps)
            .and_then(|x| x.checked_mul(shape.per_step))
            .ok_or_else(|| {
                invalid!(
                    "{} ranks x {} micro-steps x {} sequences per micro-step overflows",
                    shape.ranks,
                    shape.steps,
                    shape.per_step
                )
            })
    }

    /// Slot `k` named by its rank, micro-step and index.
    fn at(shape: Shape, k: usize) -> alloc::string::String {
        let index = k % shape.per_step;
        let micro_step = k / shape.per_step % shape.steps;
        let rank = k / shape.per_rank();
        alloc::format!("sequence ({rank}, {micro_step}, {index}) (slot {k})")
    }

    impl Serialize for super::Plan {
        fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            let (ids, offsets) = (self.sequences.items(), self.sequences.offsets());
            let fields = 9 + usize::from(self.exchange.is_some());
            let mut s = serializer.serialize_struct("Plan", fields)?;
            s.serialize_field("ranks", &self.ranks)?;
            s.serialize_field("micro_steps", &self.micro_steps)?;
            s.serialize_field("per_step", &self.per_step)?;
            s.serialize_field("offsets", offsets)?;
            s.serialize_field("ids", ids)?;
            s.serialize_field("costs", &self.costs)?;
            s.serialize_field("loss", &self.loss)?;
            s.serialize_field(
                "report",
                &ReportDoc::new(&self.report, self.planning_time.0),
            )?;
            s.serialize_field("fingerprint", &self.fingerprint)?;
            if let Some(x) = &self.exchange {
                s.serialize_field("exchange", x)?;
            }
            s.end()
        }
    }

    #[cfg(test)]
    mod tests {
        use alloc::string::ToString;

        use super::Plan;
        use crate::cost::{Sample, Tokens};
        use crate::plan::{Planner, StepSample};

        /// Costs that JSON cannot carry (NaN, infinities) are refused too.
        #[test]
        fn costs_that_are_not_finite_are_refused() {
            let samples: alloc::vec::Vec<_> = (0..4)
                .map(|i| StepSample::new(i, Sample::text_only(100)))
                .collect();
            let plan = Planner::new(Tokens::new(1.0).unwrap())
                .ranks(2)
                .seq_len(1000)
                .plan(&samples)
                .unwrap();
            let doc = serde_json::to_value(&plan).unwrap();
            for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -1e-300] {
                let mut wire: Plan = serde_json::from_value(doc.clone()).unwrap();
                wire.costs[1].vision = bad;
                let err = super::super::Plan::try_from(wire).unwrap_err();
                assert!(
                    err.to_string().starts_with(&alloc::format!(
                        "the cost of sequence (1, 0, 0) (slot 1) is {bad:?} (vision)"
                    )),
                    "{err}"
                );
            }
            let wire: Plan = serde_json::from_value(doc).unwrap();
            assert_eq!(super::super::Plan::try_from(wire).unwrap(), plan);
        }

        /// The planning time is written as `report.planning_time`, where
        /// it was when it was a field of the report, read back from there
        /// (`None` when absent), and never compared.
        #[test]
        fn the_planning_time_is_read_from_the_report() {
            let samples: alloc::vec::Vec<_> = (0..4)
                .map(|i| StepSample::new(i, Sample::text_only(100)))
                .collect();
            let plan = Planner::new(Tokens::new(1.0).unwrap())
                .ranks(2)
                .seq_len(1000)
                .plan(&samples)
                .unwrap();
            let read = |doc: &serde_json::Value| -> super::super::Plan {
                serde_json::from_value(doc.clone()).unwrap()
            };
            let mut doc = serde_json::to_value(&plan).unwrap();
            assert_eq!(read(&doc).planning_time(), plan.planning_time());
            doc["report"]["planning_time"] = serde_json::json!({"secs": 2, "nanos": 5});
            let timed = read(&doc);
            assert_eq!(timed.planning_time(), Some(core::time::Duration::new(2, 5)));
            assert_eq!(timed, plan);
            doc["report"]
                .as_object_mut()
                .unwrap()
                .remove("planning_time");
            assert_eq!(read(&doc).planning_time(), None);
            let json = serde_json::to_string(&timed).unwrap();
            assert!(
                json.contains(r#""balanced_packing":true,"planning_time":{"secs":2,"nanos":5}}"#),
                "{json}"
            );
        }
    }
}

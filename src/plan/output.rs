//! The planner's output: the plan (ids by rank, micro-step and sequence) and its report.

use alloc::vec::Vec;
use core::time::Duration;

use super::evaluate::step_time;
use super::loss::Loss;
use super::sample::StepSample;
use super::shape::Shape;
use super::sync::SyncModel;
use crate::cost::{Incremental, Phases};
use crate::error::Error;

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
/// Two reports are equal when everything but the planning time is: the
/// same input and configuration give equal plans, reports included.
#[derive(Clone, Copy, Debug)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct Report {
    /// The sync model the times are computed for.
    pub sync: SyncModel,
    /// The predicted step time of the plan.
    pub predicted: f64,
    /// The lower bound of any plan's step time: max(total / R, largest
    /// sample) for one barrier per step or per micro-step; the sum over
    /// phases of the phase total / R for per-phase barriers. Exact for
    /// additive cost models; for others it uses each sample's cost alone.
    pub lower_bound: f64,
    /// The predicted step time of the naive plan: the data loader's order
    /// (ascending id), packed greedily (next fit), sequences dealt to ranks
    /// in turn.
    pub baseline: f64,
    /// The micro-steps the naive plan needs (it may need more than `A`).
    pub baseline_micro_steps: usize,
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
    /// The time spent planning (with the `std` feature; `None` without).
    pub planning_time: Option<Duration>,
}

impl PartialEq for Report {
    fn eq(&self, other: &Self) -> bool {
        // Everything but `planning_time`, which differs from run to run.
        self.sync == other.sync
            && self.predicted == other.predicted
            && self.lower_bound == other.lower_bound
            && self.baseline == other.baseline
            && self.baseline_micro_steps == other.baseline_micro_steps
            && self.imbalance == other.imbalance
            && self.efficiency == other.efficiency
            && self.sequences == other.sequences
            && self.balanced_packing == other.balanced_packing
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

    /// The naive baseline's step time over the plan's (above 1.0: the plan
    /// is faster).
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Sample, Tokens};
    /// use microbatch::plan::{Planner, StepSample};
    ///
    /// // In id order the long samples land on rank 0; the plan evens them out.
    /// let samples: Vec<_> = (0..8u32)
    ///     .map(|i| StepSample::new(i.into(), Sample::text_only(if i < 2 { 900 } else { 100 })))
    ///     .collect();
    /// let plan = Planner::new(Tokens::new(1.0)?).ranks(2).seq_len(1000).plan(&samples)?;
    /// let r = plan.report();
    /// assert!(r.gain() > 1.0);
    /// assert_eq!(r.gain(), r.baseline / r.predicted);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn gain(&self) -> f64 {
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
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Plan {
    pub(crate) ranks: usize,
    pub(crate) micro_steps: usize,
    pub(crate) per_step: usize,
    /// `offsets[k]..offsets[k + 1]` indexes `ids` for slot `k`.
    pub(crate) offsets: Vec<usize>,
    pub(crate) ids: Vec<u64>,
    /// The cost of every sequence, by slot.
    pub(crate) costs: Vec<Phases>,
    pub(crate) loss: Loss,
    pub(crate) report: Report,
    pub(crate) fingerprint: u64,
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
        self.ids.len()
    }

    /// Whether the plan has no sample (never, for a plan the planner made).
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
        self.ids.is_empty()
    }

    fn shape(&self) -> Shape {
        Shape {
            ranks: self.ranks,
            steps: self.micro_steps,
            per_step: self.per_step,
        }
    }

    fn slot(&self, rank: usize, micro_step: usize, index: usize) -> usize {
        assert!(
            rank < self.ranks && micro_step < self.micro_steps && index < self.per_step,
            "sequence ({rank}, {micro_step}, {index}) out of range: the plan has {} ranks, {} micro-steps, {} sequences each",
            self.ranks,
            self.micro_steps,
            self.per_step
        );
        (rank * self.micro_steps + micro_step) * self.per_step + index
    }

    /// The sample ids of sequence `index` of `micro_step` on `rank`, in
    /// ascending id. May be empty when the batch has fewer samples than
    /// sequences.
    ///
    /// # Panics
    ///
    /// When `rank`, `micro_step` or `index` is out of range.
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
        let k = self.slot(rank, micro_step, index);
        &self.ids[self.offsets[k]..self.offsets[k + 1]]
    }

    /// The predicted cost of that sequence.
    ///
    /// # Panics
    ///
    /// When `rank`, `micro_step` or `index` is out of range.
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
    /// When `rank` or `micro_step` is out of range.
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
        let first = self.slot(rank, micro_step, 0);
        let last = first + self.per_step;
        &self.ids[self.offsets[first]..self.offsets[last]]
    }

    /// The sample ids of every micro-batch of `rank`, in micro-step order.
    ///
    /// # Panics
    ///
    /// When `rank` is out of range.
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
        let first = self.slot(rank, 0, 0);
        let last = first + self.micro_steps * self.per_step;
        &self.ids[self.offsets[first]..self.offsets[last]]
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
        if samples.len() != self.ids.len() {
            return Err(Error::PlanMismatch {
                id: None,
                planned: self.ids.len(),
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
        for w in self.offsets.windows(2) {
            let mut state = model.empty();
            for &id in &self.ids[w[0]..w[1]] {
                let pos = by_id
                    .binary_search_by_key(&id, |&i| samples[i].id())
                    .map_err(|_| Error::PlanMismatch {
                        id: Some(id),
                        planned: self.ids.len(),
                        given: samples.len(),
                    })?;
                model.insert(&mut state, samples[by_id[pos]].sample());
            }
            costs.push(model.evaluate(&state));
        }
        Ok(step_time(sync, self.shape(), &costs))
    }
}

//! The planner's configuration and its pipeline: validate, size `A`, pack balanced sequences, deal them to slots, refine, report.

use alloc::vec;
use alloc::vec::Vec;

use super::assign::{assign, RowKey};
use super::balance::greedy;
use super::baseline::{naive, naive_layout};
use super::evaluate::{imbalance, lower_bound, step_time};
use super::fingerprint::of_plan;
use super::loss::Loss;
use super::refine::refine;
use super::types::{Plan, Report, StepSample, SyncModel};
use crate::cost::{Incremental, Phases};
use crate::error::{Error, Oversize, Scalar};
use crate::pack::first_fit_decreasing;

/// A point in time where the standard library has clocks.
#[cfg(feature = "std")]
type Instant = std::time::Instant;
/// No clock without the standard library.
#[cfg(not(feature = "std"))]
type Instant = ();

/// A reusable planner configuration: the cost model, `R` ranks, the packed
/// sequence length `L`, optional caps, the sync model and the micro-steps.
///
/// Built with [`Planner::new`] and chained setters; [`Planner::plan`] plans
/// one step. The model is any [`Incremental`] cost model: every built-in
/// model, preset and combinator is one (the whole-group closure
/// [`cost_fn`](crate::cost::cost_fn) is not; [`sample_fn`](crate::cost::sample_fn) is). The defaults: [`SyncModel::Step`], the smallest feasible number
/// of micro-steps, one sequence per micro-step, no caps besides `L`.
///
/// # Examples
///
/// ```
/// use core::num::NonZeroU32;
/// use microbatch::cost::{Image, Preset, Sample};
/// use microbatch::plan::{Planner, StepSample, SyncModel};
///
/// let planner = Planner::new(Preset::InternVl25_8b.cost_model(), 2, 16384)
///     .max_units(48) // ViT tiles per packed sequence
///     .sync(SyncModel::MicroStep)
///     .micro_steps(2);
/// let samples: Vec<_> = (0..10)
///     .map(|i| {
///         let tiles = NonZeroU32::new(7).unwrap();
///         StepSample::new(i, Sample::new(800, [Image::with_units(7 * 256, tiles)]))
///     })
///     .collect();
/// let plan = planner.plan(&samples)?;
/// assert_eq!(plan.micro_steps(), 2);
///
/// // At most 8 tiles a sequence: one sample each, ten sequences, five per rank.
/// let err = planner.micro_steps(1).max_units(8).plan(&samples).unwrap_err();
/// assert_eq!(err.to_string(), "1 micro-step(s) cannot hold the batch; the smallest feasible number is 5");
/// # Ok::<(), microbatch::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Planner<M> {
    model: M,
    ranks: usize,
    seq_len: u32,
    max_units: Option<u32>,
    max_images: Option<u32>,
    sync: SyncModel,
    micro_steps: Option<usize>,
    per_step: usize,
    refine: bool,
}

impl<M: Incremental> Planner<M> {
    /// A planner for `ranks` ranks and packed sequences of `seq_len` tokens
    /// (text + image tokens), costing with `model`. Settings are checked by
    /// [`plan`](Planner::plan).
    ///
    /// # Examples
    ///
    /// Every setting:
    ///
    /// ```
    /// use microbatch::cost::{Sample, Tokens};
    /// use microbatch::plan::{Planner, StepSample, SyncModel};
    ///
    /// let planner = Planner::new(Tokens::new(1.0)?, 2, 4096)
    ///     .sync(SyncModel::MicroStep)
    ///     .max_units(48)
    ///     .max_images(16)
    ///     .micro_steps(3)
    ///     .sequences_per_micro_step(2)
    ///     .refinement(true);
    /// let samples: Vec<_> = (0..30).map(|i| StepSample::new(i, Sample::text_only(500))).collect();
    /// let plan = planner.plan(&samples)?;
    /// assert_eq!((plan.micro_steps(), plan.sequences_per_micro_step()), (3, 2));
    /// let dynamic = planner.smallest_micro_steps().plan(&samples)?;
    /// assert_eq!(dynamic.micro_steps(), 1); // 30 x 500 tokens fit 2 ranks x 2 sequences
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    pub fn new(model: M, ranks: usize, seq_len: u32) -> Self {
        Planner {
            model,
            ranks,
            seq_len,
            max_units: None,
            max_images: None,
            sync: SyncModel::Step,
            micro_steps: None,
            per_step: 1,
            refine: true,
        }
    }

    /// The sync model whose step time is minimized (default
    /// [`SyncModel::Step`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Sample, Tokens};
    /// use microbatch::plan::{Planner, StepSample, SyncModel};
    ///
    /// let samples: Vec<_> = (0..8).map(|i| StepSample::new(i, Sample::text_only(100))).collect();
    /// let plan = Planner::new(Tokens::new(1.0)?, 2, 1024).sync(SyncModel::Phase).plan(&samples)?;
    /// assert_eq!(plan.report().sync, SyncModel::Phase);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn sync(mut self, sync: SyncModel) -> Self {
        self.sync = sync;
        self
    }

    /// At most `units` ViT units (tiles, frame groups) per packed sequence,
    /// for example InternVL's 48 tiles per pack.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Image, Sample, Tokens};
    /// use microbatch::plan::{Planner, StepSample};
    ///
    /// let samples: Vec<_> = (0..4).map(|i| StepSample::new(i, Sample::new(10, [Image::new(64)]))).collect();
    /// let plan = Planner::new(Tokens::new(1.0)?, 1, 1024).max_units(2).plan(&samples)?;
    /// // The tokens would fit one sequence; two tiles each need two.
    /// assert_eq!(plan.micro_steps(), 2);
    /// assert!((0..2).all(|j| plan.sequence(0, j, 0).len() == 2));
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn max_units(mut self, units: u32) -> Self {
        self.max_units = Some(units);
        self
    }

    /// At most `images` images per packed sequence.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Image, Sample, Tokens};
    /// use microbatch::plan::{Planner, StepSample};
    ///
    /// let samples: Vec<_> = (0..6).map(|i| StepSample::new(i, Sample::new(10, [Image::new(64)]))).collect();
    /// let plan = Planner::new(Tokens::new(1.0)?, 1, 4096).max_images(3).plan(&samples)?;
    /// assert_eq!(plan.micro_steps(), 2);
    /// assert!((0..2).all(|j| plan.sequence(0, j, 0).len() == 3));
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn max_images(mut self, images: u32) -> Self {
        self.max_images = Some(images);
        self
    }

    /// Exactly `a` micro-steps on every rank; [`plan`](Planner::plan)
    /// returns [`Error::MicroStepsInfeasible`] with the smallest feasible
    /// number when the batch does not fit. With more sequences
    /// (`ranks * a * sequences_per_micro_step`) than samples some
    /// micro-batches are empty (every rank still gets work over the step);
    /// a trainer must still run those micro-steps, on no data, to keep its
    /// collectives in step. The default (the smallest feasible number) avoids
    /// that where the batch allows it.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Sample, Tokens};
    /// use microbatch::plan::{Planner, StepSample};
    /// use microbatch::Error;
    ///
    /// let samples: Vec<_> = (0..8).map(|i| StepSample::new(i, Sample::text_only(100))).collect();
    /// let planner = Planner::new(Tokens::new(1.0)?, 2, 200); // two samples a sequence
    /// assert_eq!(planner.clone().micro_steps(4).plan(&samples)?.micro_steps(), 4);
    /// let err = planner.micro_steps(1).plan(&samples).unwrap_err();
    /// assert_eq!(err, Error::MicroStepsInfeasible { given: 1, smallest: 2 });
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn micro_steps(mut self, a: usize) -> Self {
        self.micro_steps = Some(a);
        self
    }

    /// The smallest feasible number of micro-steps (the default: dynamic
    /// accumulation).
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Sample, Tokens};
    /// use microbatch::plan::{Planner, StepSample};
    ///
    /// let samples: Vec<_> = (0..8).map(|i| StepSample::new(i, Sample::text_only(100))).collect();
    /// let planner = Planner::new(Tokens::new(1.0)?, 2, 200).micro_steps(4);
    /// assert_eq!(planner.plan(&samples)?.micro_steps(), 4);
    /// // 8 x 100 tokens in sequences of 200 on 2 ranks: 2 micro-steps.
    /// assert_eq!(planner.smallest_micro_steps().plan(&samples)?.micro_steps(), 2);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn smallest_micro_steps(mut self) -> Self {
        self.micro_steps = None;
        self
    }

    /// `s` packed sequences per micro-step (default 1).
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Sample, Tokens};
    /// use microbatch::plan::{Planner, StepSample};
    ///
    /// let samples: Vec<_> = (0..8).map(|i| StepSample::new(i, Sample::text_only(100))).collect();
    /// let plan = Planner::new(Tokens::new(1.0)?, 2, 200).sequences_per_micro_step(2).plan(&samples)?;
    /// assert_eq!((plan.micro_steps(), plan.sequences_per_micro_step()), (1, 2));
    /// assert_eq!(plan.micro_batch(0, 0).len(), 4); // two sequences of two samples
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn sequences_per_micro_step(mut self, s: usize) -> Self {
        self.per_step = s;
        self
    }

    /// Whether to refine the greedy plan by swapping samples (default on).
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Sample, Tokens};
    /// use microbatch::plan::{Planner, StepSample};
    ///
    /// let tokens = [300, 300, 200, 200, 200];
    /// let samples: Vec<_> = (0..5).map(|i| StepSample::new(i, Sample::text_only(tokens[i as usize]))).collect();
    /// let planner = Planner::new(Tokens::new(1.0)?, 2, 4096);
    /// // Greedy (LPT): 300 + 200 + 200 against 300 + 200; a swap reaches 600 each.
    /// assert_eq!(planner.clone().refinement(false).plan(&samples)?.report().predicted, 700.0);
    /// assert_eq!(planner.plan(&samples)?.report().predicted, 600.0);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn refinement(mut self, on: bool) -> Self {
        self.refine = on;
        self
    }

    /// The cost model.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::Tokens;
    /// use microbatch::plan::Planner;
    ///
    /// let planner = Planner::new(Tokens::new(2.0)?, 4, 4096);
    /// assert_eq!(planner.model().per_token(), 2.0);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    pub fn model(&self) -> &M {
        &self.model
    }

    fn check(&self, n: usize) -> Result<(), Error> {
        let bad = |name, value: u64, requirement| Error::InvalidSetting {
            name,
            value,
            requirement,
        };
        if self.ranks == 0 {
            return Err(bad("ranks", 0, "at least 1"));
        }
        if self.seq_len == 0 {
            return Err(bad("seq_len", 0, "at least 1"));
        }
        if self.max_units == Some(0) {
            return Err(bad("max_units", 0, "at least 1"));
        }
        if self.max_images == Some(0) {
            return Err(bad("max_images", 0, "at least 1"));
        }
        if self.micro_steps == Some(0) {
            return Err(bad("micro_steps", 0, "at least 1"));
        }
        if self.per_step == 0 {
            return Err(bad("sequences_per_micro_step", 0, "at least 1"));
        }
        if n > u32::MAX as usize {
            return Err(bad("samples", n as u64, "at most 2^32 - 1"));
        }
        // The sequences the plan can have: R * A * S for a given A; for the
        // smallest A at most one a sample plus one micro-step's worth.
        let per_step = (self.ranks as u128) * (self.per_step as u128);
        let slots = match self.micro_steps {
            Some(a) => per_step * a as u128,
            None => per_step + n as u128,
        };
        if slots > u32::MAX as u128 {
            return Err(bad(
                "sequences",
                u64::try_from(slots).unwrap_or(u64::MAX),
                "at most 2^32 - 1 (ranks x micro-steps x sequences per micro-step)",
            ));
        }
        if n < self.ranks {
            return Err(Error::TooFewSamples {
                samples: n,
                ranks: self.ranks,
            });
        }
        Ok(())
    }

    /// Plans one step.
    ///
    /// # Errors
    ///
    /// - [`Error::InvalidSetting`] for zero ranks, length, caps, micro-steps
    ///   or sequences per micro-step;
    /// - [`Error::TooFewSamples`] when there are fewer samples than ranks;
    /// - [`Error::DuplicateId`] for a repeated id;
    /// - [`Error::Oversize`] listing every sample, by id, that exceeds
    ///   `L` or a cap;
    /// - [`Error::InvalidCost`] when the model returns a NaN, infinite or
    ///   negative cost (only closures can);
    /// - [`Error::MicroStepsInfeasible`] when the given micro-steps cannot
    ///   hold the batch, naming the smallest feasible number.
    ///
    /// # Complexity
    ///
    /// O(n log n) time and O(n) extra space for n samples.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Sample, Tokens};
    /// use microbatch::plan::{Planner, StepSample};
    ///
    /// let samples = [StepSample::new(1, Sample::text_only(10))];
    /// let err = Planner::new(Tokens::new(1.0)?, 2, 64).plan(&samples).unwrap_err();
    /// assert_eq!(err.to_string(), "1 sample(s) for 2 ranks: every rank needs at least one sample");
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    pub fn plan(&self, samples: &[StepSample]) -> Result<Plan, Error> {
        #[cfg(feature = "std")]
        let start = std::time::Instant::now();
        self.check(samples.len())?;
        let prep = self.prepare(samples)?;
        let (steps, mut bins, balanced) = self.size_and_pack(&prep)?;
        let (r, s) = (self.ranks, self.per_step);

        let mut slots = self.deal(&prep, &mut bins, steps);
        drop(bins);
        give_every_rank_work(&mut slots, r, steps * s);
        #[cfg(feature = "std")]
        let plan = self.finish(&prep, samples, slots, steps, balanced, Some(start));
        #[cfg(not(feature = "std"))]
        let plan = self.finish(&prep, samples, slots, steps, balanced, None);
        Ok(plan)
    }

    /// The naive plan the report compares with, as a plan: samples in
    /// ascending id packed by next fit, micro-batches of `S` consecutive
    /// sequences dealt to ranks in turn; its `A` is what that takes (and
    /// [`micro_steps`](Planner::micro_steps) is ignored). Useful to show
    /// the per-rank load before planning.
    ///
    /// # Errors
    ///
    /// As [`Planner::plan`], except [`Error::MicroStepsInfeasible`].
    ///
    /// # Complexity
    ///
    /// O(n log n) (the sort by id).
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Sample, Tokens};
    /// use microbatch::plan::{Planner, StepSample};
    ///
    /// let samples: Vec<_> = (0..4).map(|i| StepSample::new(i, Sample::text_only(10 + 10 * i as u32))).collect();
    /// // Next fit in id order: [0, 1], [2], [3]; dealt to ranks 0, 1, 0.
    /// let naive = Planner::new(Tokens::new(1.0)?, 2, 50).baseline(&samples)?;
    /// assert_eq!(naive.to_nested(), vec![vec![vec![0, 1], vec![3]], vec![vec![2], vec![]]]);
    /// assert_eq!(naive.report().predicted, naive.report().baseline);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    pub fn baseline(&self, samples: &[StepSample]) -> Result<Plan, Error> {
        self.check(samples.len())?;
        let prep = self.prepare(samples)?;
        let (steps, slots) = naive_layout(&prep, self.ranks, self.per_step);
        Ok(self.finish(&prep, samples, slots, steps, false, None))
    }

    /// Builds the plan and its report from the slots' sorted positions.
    #[allow(unused_variables)]
    fn finish(
        &self,
        prep: &Prepared,
        samples: &[StepSample],
        slots: Vec<Vec<u32>>,
        steps: usize,
        balanced: bool,
        start: Option<Instant>,
    ) -> Plan {
        let (r, s) = (self.ranks, self.per_step);
        // The plan, slot by slot. One pass over the samples in id order
        // (sequential reads of `samples` when they come in id order) fills
        // every slot's ids and cost state.
        let k = slots.len();
        let mut slot_of = vec![0u32; prep.len()];
        let mut offsets = Vec::with_capacity(k + 1);
        offsets.push(0usize);
        let mut used = 0usize;
        for (slot, members) in slots.iter().enumerate() {
            for &p in members {
                slot_of[p as usize] = slot as u32;
            }
            used += usize::from(!members.is_empty());
            offsets.push(offsets[slot] + members.len());
        }
        drop(slots);
        let mut next = offsets[..k].to_vec();
        let mut ids = vec![0u64; prep.len()];
        let mut states = vec![self.model.empty(); k];
        let mut tokens = 0u64;
        for (e, &slot) in prep.items.iter().zip(&slot_of) {
            let slot = slot as usize;
            ids[next[slot]] = e.id;
            next[slot] += 1;
            tokens += u64::from(e.sizes[0]);
            self.model
                .insert(&mut states[slot], &samples[e.input as usize].sample);
        }
        drop((slot_of, next));
        let costs: Vec<Phases> = states.iter().map(|st| self.model.evaluate(st)).collect();
        drop(states);

        let total: Phases = prep.items.iter().map(|e| e.cost).sum();
        let largest = prep
            .items
            .iter()
            .map(|e| e.cost.total())
            .fold(0.0, f64::max);
        let (baseline, baseline_steps) = naive(prep, samples, &self.model, self.sync, r, s);
        let loss_tokens = samples
            .iter()
            .fold(0u64, |acc, s| acc.saturating_add(s.loss_tokens()));
        let fingerprint = of_plan(r, steps, s, &offsets, &ids);
        #[allow(unused_mut)]
        let mut report = Report {
            sync: self.sync,
            predicted: step_time(self.sync, r, steps, s, &costs),
            lower_bound: lower_bound(self.sync, r, total, largest),
            baseline,
            baseline_micro_steps: baseline_steps,
            imbalance: imbalance(r, steps, s, &costs),
            efficiency: if used == 0 {
                1.0
            } else {
                tokens as f64 / (used as f64 * f64::from(self.seq_len))
            },
            sequences: used,
            balanced_packing: balanced,
            planning_time: None,
        };
        #[cfg(feature = "std")]
        {
            report.planning_time = start.map(|t| t.elapsed());
        }
        Plan {
            ranks: r,
            micro_steps: steps,
            per_step: s,
            offsets,
            ids,
            costs,
            loss: Loss::new(loss_tokens, prep.len() as u64, r as u64),
            report,
            fingerprint,
        }
    }

    /// Sorts by id, checks ids and sizes, evaluates every sample's cost.
    fn prepare(&self, samples: &[StepSample]) -> Result<Prepared, Error> {
        let n = samples.len();
        let mut keyed: Vec<(u64, u32)> = samples
            .iter()
            .enumerate()
            .map(|(i, s)| (s.id, i as u32))
            .collect();
        keyed.sort_unstable();
        let mut items: Vec<Entry> = Vec::with_capacity(n);
        let caps = [
            u64::from(self.seq_len),
            self.max_units.map_or(u64::MAX, u64::from),
            self.max_images.map_or(u64::MAX, u64::from),
        ];
        let mut oversize = Vec::new();
        let empty = self.model.empty();
        for (id, i) in keyed {
            let s = &samples[i as usize];
            if items.last().is_some_and(|e| e.id == id) {
                return Err(Error::DuplicateId { id });
            }
            let size = [s.sample.tokens(), s.units(), s.sample.images().len() as u64];
            for (d, name) in ["tokens", "units", "images"].into_iter().enumerate() {
                if size[d] > caps[d] {
                    oversize.push(Oversize {
                        index: i as usize,
                        id: Some(id),
                        dim: d,
                        name: Some(name),
                        size: Scalar::Int(size[d]),
                        capacity: Scalar::Int(caps[d]),
                    });
                }
            }
            let c = self.model.evaluate_with(&empty, &s.sample);
            let t = c.vision + c.language;
            // NaN-safe: `!(x >= 0.0)` is also true for NaN.
            if !(c.vision >= 0.0 && c.language >= 0.0 && t.is_finite()) {
                return Err(Error::InvalidCost { id, value: t });
            }
            items.push(Entry {
                id,
                input: i,
                // Within caps every size fits u32 (tokens <= L, a u32);
                // without a cap saturating is harmless.
                sizes: size.map(|x| u32::try_from(x).unwrap_or(u32::MAX)),
                cost: c,
            });
        }
        if !oversize.is_empty() {
            return Err(Error::Oversize { items: oversize });
        }
        Ok(Prepared { items, caps })
    }

    /// The micro-steps and the packed sequences (`R * A * S` of them, some
    /// possibly empty), each a list of sorted positions.
    fn size_and_pack(&self, prep: &Prepared) -> Result<(usize, Vec<Vec<u32>>, bool), Error> {
        let per_rank = self.ranks * self.per_step;
        let steps_for = |sequences: u64| (sequences.div_ceil(per_rank as u64)).max(1) as usize;
        // L1: no packing uses fewer sequences.
        let mut sums = [0u64; 3];
        for p in 0..prep.len() {
            for (d, x) in prep.size(p).into_iter().enumerate() {
                sums[d] += x;
            }
        }
        let l1 = (0..3)
            .map(|d| sums[d].div_ceil(prep.caps[d]))
            .max()
            .unwrap_or(0);
        let lb = steps_for(l1);
        let try_greedy = |steps: usize| greedy(prep, steps * per_rank);

        // The smallest A the planner fits: the bound if the balanced greedy
        // fits there, else the first-fit-decreasing count.
        let smallest = |first: Option<Vec<Vec<u32>>>| -> (usize, Vec<Vec<u32>>, bool) {
            if let Some(bins) = first {
                return (lb, bins, true);
            }
            let ffd = self.ffd(prep);
            let a = steps_for(ffd.len() as u64).max(lb);
            if a > lb {
                if let Some(bins) = try_greedy(a) {
                    return (a, bins, true);
                }
            }
            (a, pad(ffd, a * per_rank), false)
        };
        match self.micro_steps {
            None => Ok(smallest(try_greedy(lb))),
            Some(a) if a >= lb => {
                if let Some(bins) = try_greedy(a) {
                    return Ok((a, bins, true));
                }
                let ffd = self.ffd(prep);
                if ffd.len() <= a * per_rank {
                    Ok((a, pad(ffd, a * per_rank), false))
                } else {
                    let (smallest, _, _) = smallest(None);
                    Err(Error::MicroStepsInfeasible { given: a, smallest })
                }
            }
            Some(a) => {
                let (smallest, _, _) = smallest(try_greedy(lb));
                Err(Error::MicroStepsInfeasible { given: a, smallest })
            }
        }
    }

    /// First-fit-decreasing over (tokens, units, images), the fallback when
    /// the balanced greedy does not fit.
    fn ffd(&self, prep: &Prepared) -> Vec<Vec<u32>> {
        let cap = prep.caps.map(|c| u32::try_from(c).unwrap_or(u32::MAX));
        let packing = if self.max_units.is_none() && self.max_images.is_none() {
            let items: Vec<(u64, u32)> = (0..prep.len())
                .map(|p| (prep.id(p), prep.sizes(p)[0]))
                .collect();
            first_fit_decreasing(&items, cap[0])
        } else {
            let items: Vec<(u64, [u32; 3])> = (0..prep.len())
                .map(|p| (prep.id(p), prep.sizes(p)))
                .collect();
            first_fit_decreasing(&items, cap)
        };
        match packing {
            Ok(p) => p
                .bins()
                .map(|b| b.items().iter().map(|&i| i as u32).collect())
                .collect(),
            // Validated above: every sample fits, so FFD cannot fail; keep
            // one sample a sequence if it ever did.
            Err(_) => (0..prep.len() as u32).map(|p| vec![p]).collect(),
        }
    }

    /// Deals the sequences to slots and refines them: `slots[k]` lists the
    /// sorted positions of slot `k`, in ascending position.
    fn deal(&self, prep: &Prepared, bins: &mut Vec<Vec<u32>>, steps: usize) -> Vec<Vec<u32>> {
        for b in bins.iter_mut() {
            b.sort_unstable();
        }
        // The samples' own costs added up: exact for additive models, and
        // only a guide for the others (the report evaluates the groups).
        let mut costs = vec![Phases::ZERO; bins.len()];
        let mut loads = vec![[0u64; 3]; bins.len()];
        for (b, members) in bins.iter().enumerate() {
            for &p in members {
                let e = &prep.items[p as usize];
                costs[b] += e.cost;
                for (l, &x) in loads[b].iter_mut().zip(&e.sizes) {
                    *l += u64::from(x);
                }
            }
        }
        let largest = prep.items.iter().fold(Phases::ZERO, |m, e| m.max(e.cost));
        let largest_total = prep
            .items
            .iter()
            .map(|e| e.cost.total())
            .fold(0.0, f64::max);
        let sum = |b: &[u32]| b.iter().map(|&p| prep.cost(p as usize)).sum::<Phases>();
        let keys: &[RowKey] = match self.sync {
            SyncModel::Phase => &RowKey::ALL,
            _ => &RowKey::ALL[..1],
        };
        let mut best: Option<(f64, Vec<u32>, Vec<Vec<u32>>)> = None;
        for &key in keys {
            let mut trial = if keys.len() == 1 {
                core::mem::take(bins)
            } else {
                bins.to_vec()
            };
            let mut order = assign(
                self.sync,
                key,
                self.ranks,
                steps,
                self.per_step,
                &costs,
                &trial,
            );
            if self.refine {
                let mut trial_loads = if keys.len() == 1 {
                    core::mem::take(&mut loads)
                } else {
                    loads.clone()
                };
                refine(
                    prep,
                    self.sync,
                    self.ranks,
                    steps,
                    self.per_step,
                    &order,
                    &mut trial,
                    (&costs, &mut trial_loads),
                    [largest.vision, largest.language, largest_total],
                );
                for b in trial.iter_mut() {
                    b.sort_unstable();
                }
                if self.sync == SyncModel::Step {
                    // The data loader's order again within each rank.
                    let first = |b: &u32| trial[*b as usize].first().copied().unwrap_or(u32::MAX);
                    for rank in order.chunks_mut(steps * self.per_step) {
                        rank.sort_unstable_by_key(|b| (first(b), *b));
                    }
                }
            }
            let time = if keys.len() == 1 {
                0.0
            } else {
                let slot_costs: Vec<Phases> =
                    order.iter().map(|&b| sum(&trial[b as usize])).collect();
                step_time(self.sync, self.ranks, steps, self.per_step, &slot_costs)
            };
            if best.as_ref().map_or(true, |b| time < b.0) {
                best = Some((time, order, trial));
            }
        }
        let (_, order, mut chosen) = best.unwrap_or_default();
        order
            .into_iter()
            .map(|b| core::mem::take(&mut chosen[b as usize]))
            .collect()
    }
}

/// `bins` with empty sequences appended up to `k`.
fn pad(mut bins: Vec<Vec<u32>>, k: usize) -> Vec<Vec<u32>> {
    bins.resize_with(k.max(bins.len()), Vec::new);
    bins
}

/// Moves single samples from ranks with several to ranks with none, so that
/// no rank idles at the collective (a sample alone always fits a sequence).
fn give_every_rank_work(slots: &mut [Vec<u32>], ranks: usize, per_rank: usize) {
    let count = |slots: &[Vec<u32>], r: usize| -> usize {
        slots[r * per_rank..(r + 1) * per_rank]
            .iter()
            .map(Vec::len)
            .sum()
    };
    for r in 0..ranks {
        if count(slots, r) > 0 {
            continue;
        }
        // The fullest sequence of any rank with at least two samples.
        let donor = (0..slots.len())
            .filter(|&k| count(slots, k / per_rank) >= 2 && !slots[k].is_empty())
            .max_by_key(|&k| (slots[k].len(), core::cmp::Reverse(k)));
        if let Some(k) = donor {
            if let Some(p) = slots[k].pop() {
                slots[r * per_rank].push(p);
            }
        }
    }
}

/// One validated sample: its id, input index, sizes (tokens, units,
/// images) and cost when alone; kept together so that one cache line
/// serves every lookup by position.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Entry {
    pub(crate) id: u64,
    pub(crate) input: u32,
    pub(crate) sizes: [u32; 3],
    pub(crate) cost: Phases,
}

/// The validated samples in ascending id (their *positions*), and the caps.
pub(crate) struct Prepared {
    pub(crate) items: Vec<Entry>,
    pub(crate) caps: [u64; 3],
}

impl Prepared {
    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }

    #[inline]
    pub(crate) fn id(&self, p: usize) -> u64 {
        self.items[p].id
    }

    #[inline]
    pub(crate) fn input(&self, p: usize) -> u32 {
        self.items[p].input
    }

    #[inline]
    pub(crate) fn sizes(&self, p: usize) -> [u32; 3] {
        self.items[p].sizes
    }

    #[inline]
    pub(crate) fn cost(&self, p: usize) -> Phases {
        self.items[p].cost
    }

    #[inline]
    pub(crate) fn size(&self, p: usize) -> [u64; 3] {
        self.items[p].sizes.map(u64::from)
    }

    #[inline]
    pub(crate) fn fits(&self, load: [u64; 3], p: usize) -> bool {
        let s = self.size(p);
        (0..3).all(|d| load[d] + s[d] <= self.caps[d])
    }
}

/// Plans one step with the defaults of [`Planner`] (smallest feasible
/// number of micro-steps, one sequence per micro-step, no caps besides
/// `seq_len`).
///
/// # Errors
///
/// As [`Planner::plan`].
///
/// # Complexity
///
/// O(n log n).
///
/// # Examples
///
/// ```
/// use microbatch::cost::{Image, Preset, Sample};
/// use microbatch::plan::{plan, StepSample, SyncModel};
///
/// let model = Preset::Llava15_7b.cost_model();
/// let samples: Vec<_> = (0..32)
///     .map(|i| StepSample::new(i, Sample::new(100 + 30 * (i as u32 % 7), [Image::new(576)])))
///     .collect();
/// let p = plan(&samples, 4, 4096, &model, SyncModel::Step)?;
/// assert!(p.report().ratio() < 1.05);
/// # Ok::<(), microbatch::Error>(())
/// ```
pub fn plan<M: Incremental>(
    samples: &[StepSample],
    ranks: usize,
    seq_len: u32,
    model: M,
    sync: SyncModel,
) -> Result<Plan, Error> {
    Planner::new(model, ranks, seq_len).sync(sync).plan(samples)
}

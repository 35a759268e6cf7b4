//! The planner's configuration and [`Planner::plan`], which runs the stages of the [module docs](crate::plan#algorithm) in their order.

use alloc::vec::Vec;

use super::baseline::Naive;
use super::exact::{proven_bound, MAX_SAMPLES as EXACT_SAMPLES};
use super::finish::{exact_time, finish, Context, Placed};
use super::group::{ungroup, units, GroupScope, Units};
use super::locality::{check_origins, localize, Asked, Homes, Locality, Movable};
use super::output::Plan;
use super::pack::Request;
use super::pipeline::{additive_time, best, Layout, Run};
use super::polish::polish;
use super::prepare::{prepare, Caps, Prepared};
use super::sample::StepSample;
use super::shape::Shape;
use super::share::{additive, share};
use super::sync::SyncModel;
use super::tuning::{EFFORT, POLISH_BASE, SHARE_ROUNDS};
use crate::cost::Incremental;
use crate::error::Error;

/// The most samples a step may have (positions are `u32`).
const MAX_SAMPLES: usize = u32::MAX as usize;

/// The sequences (`R * A * S`) a plan may store beyond one a sample: a plan
/// of n samples has at most `max(n, SLOTS)` sequences when `A` is given, so
/// that empty micro-steps cannot make memory or time grow with a setting
/// alone. Quoted in the requirement of an [`Error::Invalid`] at a
/// [setting](crate::Locator::Setting).
const SLOTS: usize = 1 << 16;

/// How a [`Planner`] chooses the number of micro-steps `A` of a plan
/// ([`Planner::micro_step_count`], [`Planner::micro_steps`]).
///
/// # Examples
///
/// ```
/// use microbatch::cost::{Sample, Tokens};
/// use microbatch::plan::{MicroSteps, Planner, StepSample};
///
/// let samples: Vec<_> = (0..8).map(|i| StepSample::new(i, Sample::text_only(100))).collect();
/// let planner = Planner::new(Tokens::new(1.0)?).ranks(2).seq_len(200);
/// // 8 x 100 tokens in sequences of 200 on 2 ranks: 2 micro-steps at least.
/// assert_eq!(planner.clone().plan(&samples)?.micro_steps(), 2);
/// let fixed = planner.clone().micro_step_count(MicroSteps::Exactly(4));
/// assert_eq!(fixed.plan(&samples)?.micro_steps(), 4);
/// // One setting: the last call decides.
/// let back = fixed.micro_step_count(MicroSteps::Smallest);
/// assert_eq!(back.plan(&samples)?.micro_steps(), 2);
/// # Ok::<(), microbatch::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum MicroSteps {
    /// The smallest feasible number (the default: dynamic accumulation):
    /// the token (and cap) bound `ceil(total / capacity / (R * S))` if the
    /// balanced packing fits there, else the first-fit-decreasing count
    /// divided by `R * S`, rounded up.
    #[default]
    Smallest,
    /// Exactly this many (at least 1); see [`Planner::micro_steps`].
    Exactly(usize),
    /// The number of least predicted step time from the smallest feasible
    /// up to `up_to` (at least 1): the batch is planned with each (from
    /// the smallest, one more at a time, never more sequences than
    /// samples) and the plan of the lowest
    /// [`Report::predicted`](crate::plan::Report::predicted) is kept (ties
    /// to fewer micro-steps).
    ///
    /// Worth it for a model that is not additive: with attention over the
    /// packed row (`language.row_attention`, sdpa and eager attention) a
    /// row of `T` tokens costs `T^2`, and shorter rows in more micro-steps
    /// can be faster despite a cost per row. With an additive model a
    /// larger `A` only adds barriers. The model sees only what it prices: a
    /// cost per micro-step of the trainer (gathering FSDP shards, an
    /// optimizer hook) is not in it, so allow only the micro-steps you
    /// would run.
    ///
    /// Complexity: one plan for each number tried, at most `up_to -
    /// smallest + 1` times the time of one plan.
    Fastest {
        /// The most micro-steps tried.
        up_to: usize,
    },
}

impl MicroSteps {
    /// The fixed number, if one is given.
    fn exactly(self) -> Option<usize> {
        match self {
            MicroSteps::Exactly(a) => Some(a),
            _ => None,
        }
    }
}

/// A reusable planner configuration: the cost model, `R` ranks, the packed
/// sequence length `L`, optional caps, the sync model and the micro-steps.
///
/// Built with [`Planner::new`] and chained setters, each setting named
/// (`ranks` and `seq_len` are required, so that the two integers cannot be
/// swapped silently); [`Planner::plan`] plans one step. The model is any
/// [`Incremental`] cost model: every built-in model, preset and combinator
/// is one (the whole-group closure [`cost_fn`](crate::cost::cost_fn) is
/// not; [`sample_fn`](crate::cost::sample_fn) is). The defaults:
/// [`SyncModel::Step`], the smallest feasible number of micro-steps, one
/// sequence per micro-step, no caps besides `L`.
///
/// # Examples
///
/// ```
/// use core::num::NonZeroU32;
/// use microbatch::cost::{Image, Preset, Sample};
/// use microbatch::plan::{Planner, StepSample, SyncModel};
///
/// let planner = Planner::new(Preset::InternVl25_8b.cost_model())
///     .ranks(2)
///     .seq_len(16384)
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
/// assert_eq!(
///     err.to_string(),
///     "1 micro-step(s) cannot hold the batch under the sequence length and caps; \
///      the smallest feasible number is 5"
/// );
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
    micro_steps: MicroSteps,
    per_step: usize,
    refine: bool,
    search_effort: u32,
    group_scope: GroupScope,
    locality: Option<Locality>,
}

impl<M: Incremental> Planner<M> {
    /// A planner costing with `model`; set the ranks with
    /// [`ranks`](Planner::ranks) and the packed sequence length with
    /// [`seq_len`](Planner::seq_len) before planning. Settings are checked
    /// by [`plan`](Planner::plan).
    ///
    /// # Examples
    ///
    /// Every setting:
    ///
    /// ```
    /// use microbatch::cost::{Sample, Tokens};
    /// use microbatch::plan::{MicroSteps, Planner, StepSample, SyncModel};
    ///
    /// let planner = Planner::new(Tokens::new(1.0)?)
    ///     .ranks(2)
    ///     .seq_len(4096)
    ///     .sync(SyncModel::MicroStep)
    ///     .max_units(48)
    ///     .max_images(16)
    ///     .micro_steps(3)
    ///     .sequences_per_micro_step(2)
    ///     .refinement(true);
    /// let samples: Vec<_> = (0..30).map(|i| StepSample::new(i, Sample::text_only(500))).collect();
    /// let plan = planner.plan(&samples)?;
    /// assert_eq!((plan.micro_steps(), plan.sequences_per_micro_step()), (3, 2));
    /// let dynamic = planner.micro_step_count(MicroSteps::Smallest).plan(&samples)?;
    /// assert_eq!(dynamic.micro_steps(), 1); // 30 x 500 tokens fit 2 ranks x 2 sequences
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    pub fn new(model: M) -> Self {
        Planner {
            model,
            ranks: 0,
            seq_len: 0,
            max_units: None,
            max_images: None,
            sync: SyncModel::Step,
            micro_steps: MicroSteps::Smallest,
            per_step: 1,
            refine: true,
            search_effort: EFFORT,
            group_scope: GroupScope::MicroBatch,
            locality: None,
        }
    }

    /// The data-parallel ranks `R` (required).
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Sample, Tokens};
    /// use microbatch::plan::{Planner, StepSample};
    ///
    /// let samples: Vec<_> = (0..6).map(|i| StepSample::new(i, Sample::text_only(100))).collect();
    /// let planner = Planner::new(Tokens::new(1.0)?).seq_len(1024);
    /// let err = planner.clone().plan(&samples).unwrap_err();
    /// assert!(err.to_string().contains("`ranks`"));
    /// assert_eq!(planner.ranks(3).plan(&samples)?.ranks(), 3);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn ranks(mut self, ranks: usize) -> Self {
        self.ranks = ranks;
        self
    }

    /// The packed sequence length `L` in tokens, text and image tokens
    /// together (required).
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Sample, Tokens};
    /// use microbatch::plan::{Planner, StepSample};
    ///
    /// let samples: Vec<_> = (0..4).map(|i| StepSample::new(i, Sample::text_only(100))).collect();
    /// let plan = Planner::new(Tokens::new(1.0)?).ranks(1).seq_len(200).plan(&samples)?;
    /// assert_eq!(plan.micro_steps(), 2); // two samples a sequence
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn seq_len(mut self, seq_len: u32) -> Self {
        self.seq_len = seq_len;
        self
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
    /// let plan = Planner::new(Tokens::new(1.0)?).ranks(2).seq_len(1024).sync(SyncModel::Phase).plan(&samples)?;
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
    /// let plan = Planner::new(Tokens::new(1.0)?).ranks(1).seq_len(1024).max_units(2).plan(&samples)?;
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
    /// let plan = Planner::new(Tokens::new(1.0)?).ranks(1).seq_len(4096).max_images(3).plan(&samples)?;
    /// assert_eq!(plan.micro_steps(), 2);
    /// assert!((0..2).all(|j| plan.sequence(0, j, 0).len() == 3));
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn max_images(mut self, images: u32) -> Self {
        self.max_images = Some(images);
        self
    }

    /// Exactly `a` micro-steps on every rank (shorthand for
    /// [`micro_step_count`](Planner::micro_step_count) with
    /// [`MicroSteps::Exactly`]); [`plan`](Planner::plan)
    /// returns [`Error::MicroStepsInfeasible`] with the smallest feasible
    /// number when the batch does not fit. With more sequences
    /// (`ranks * a * sequences_per_micro_step`) than samples some
    /// micro-batches are empty (every rank still gets work over the step);
    /// a trainer must still run those micro-steps, on no data, to keep its
    /// collectives in step. The default (the smallest feasible number) avoids
    /// that where the batch allows it.
    ///
    /// Every sequence of the plan is stored, empty ones too, so
    /// `ranks * a * sequences_per_micro_step` may be at most 65,536 or the
    /// number of samples, whichever is larger; [`plan`](Planner::plan) returns
    /// [`Error::Invalid`] at a [setting](crate::Locator::Setting) naming
    /// `micro_steps` beyond that (memory and time then follow the batch, not
    /// the setting).
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Sample, Tokens};
    /// use microbatch::plan::{Planner, StepSample};
    /// use microbatch::Error;
    ///
    /// let samples: Vec<_> = (0..8).map(|i| StepSample::new(i, Sample::text_only(100))).collect();
    /// let planner = Planner::new(Tokens::new(1.0)?).ranks(2).seq_len(200); // two samples a sequence
    /// assert_eq!(planner.clone().micro_steps(4).plan(&samples)?.micro_steps(), 4);
    /// let err = planner.micro_steps(1).plan(&samples).unwrap_err();
    /// assert_eq!(err, Error::MicroStepsInfeasible { given: 1, smallest: 2 });
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn micro_steps(self, a: usize) -> Self {
        self.micro_step_count(MicroSteps::Exactly(a))
    }

    /// How the number of micro-steps is chosen ([`MicroSteps`]): the
    /// smallest feasible (the default), exactly `a`, or the fastest up to a
    /// limit. One setting: a later call replaces an earlier one, whichever
    /// of this and [`micro_steps`](Planner::micro_steps) made it.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Linear, Sample, Term};
    /// use microbatch::plan::{MicroSteps, Planner, StepSample};
    ///
    /// // Attention over the packed row and a cost per row: 8 x 100 tokens
    /// // on 2 ranks fit one micro-step (rows of 400 tokens: 400^2 + 1000
    /// // a rank); in 4 micro-steps each row of 100 costs 100^2 + 1000.
    /// let model = Linear::new([(Term::RowAttention, 1.0), (Term::Groups, 1000.0)])?;
    /// let samples: Vec<_> = (0..8).map(|i| StepSample::new(i, Sample::text_only(100))).collect();
    /// let planner = Planner::new(model).ranks(2).seq_len(400);
    /// let smallest = planner.clone().micro_step_count(MicroSteps::Smallest).plan(&samples)?;
    /// assert_eq!((smallest.micro_steps(), smallest.report().predicted), (1, 161_000.0));
    /// let fastest = planner.micro_step_count(MicroSteps::Fastest { up_to: 4 }).plan(&samples)?;
    /// assert_eq!((fastest.micro_steps(), fastest.report().predicted), (4, 44_000.0));
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn micro_step_count(mut self, choice: MicroSteps) -> Self {
        self.micro_steps = choice;
        self
    }

    /// `s` packed sequences per micro-step (default 1).
    ///
    /// `ranks * s` may be at most 65,536 or the number of samples, whichever
    /// is larger; [`plan`](Planner::plan) returns [`Error::Invalid`] at a
    /// [setting](crate::Locator::Setting) naming `sequences_per_micro_step`
    /// beyond that.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Sample, Tokens};
    /// use microbatch::plan::{Planner, StepSample};
    ///
    /// let samples: Vec<_> = (0..8).map(|i| StepSample::new(i, Sample::text_only(100))).collect();
    /// let plan = Planner::new(Tokens::new(1.0)?).ranks(2).seq_len(200).sequences_per_micro_step(2).plan(&samples)?;
    /// assert_eq!((plan.micro_steps(), plan.sequences_per_micro_step()), (1, 2));
    /// assert_eq!(plan.micro_batch(0, 0).len(), 4); // two sequences of two samples
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn sequences_per_micro_step(mut self, s: usize) -> Self {
        self.per_step = s;
        self
    }

    /// Whether to refine the greedy plan by swapping samples (default on);
    /// off, the search across micro-steps ([`search_effort`](Planner::search_effort))
    /// is off too.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Sample, Tokens};
    /// use microbatch::plan::{Planner, StepSample};
    ///
    /// let tokens = [300, 300, 200, 200, 200];
    /// let samples: Vec<_> = (0..5).map(|i| StepSample::new(i, Sample::text_only(tokens[i as usize]))).collect();
    /// let planner = Planner::new(Tokens::new(1.0)?).ranks(2).seq_len(4096);
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

    /// The work budget of the search across micro-steps, for the
    /// per-micro-step sync models ([`SyncModel::MicroStep`],
    /// [`SyncModel::Phase`]): after the refinement, a pairing pass in bulk
    /// (micro-batches at their micro-step's maxima trade one sample with the
    /// ones farthest below theirs, across micro-steps once, then within
    /// each micro-step six times under per-phase barriers, twice under one
    /// barrier a micro-step; never raising a maximum), then the
    /// micro-batch that binds a barrier (the slowest of its micro-step in a phase), worst
    /// excess over the mean first, trades places with another micro-batch
    /// of its rank (a first round), then moves a sample to, or swaps one with, a
    /// partner of the wanted cost in *any* micro-step, while the predicted
    /// step time drops. `effort` bounds its work (candidate changes weighed,
    /// binary searches, rescans) to `effort * max(n + K, 65536)` units for
    /// n samples in K sequences (counted, not timed: the plan stays
    /// deterministic); `0` turns the pairing and the search off. The
    /// default is 45 (its planning times: `BENCHMARKS.md`); larger values
    /// search longer on large batches. Under [`SyncModel::MicroStep`] the
    /// search starts from the per-phase start (the packings dealt and
    /// refined phase by phase).
    /// Small batches (at most 24 samples or units, none pinned) also get an
    /// exact branch and bound over every layout of the plan's shape, of
    /// `effort * 65536` units (a child weighed costs `R * A + 1` units,
    /// `R + 1` under one barrier a step), and, with additive costs and no groups, a second one
    /// over every number of micro-steps, of `effort * 262144` units, which
    /// raises
    /// [`Report::lower_bound`](crate::plan::Report::lower_bound) to the
    /// proven optimum when it completes, or else to the highest of a few
    /// bars below the plan's time that it proves no plan beats (under
    /// [`SyncModel::Step`] only this one runs). With a model that is not
    /// additive (a cost per sequence, attention over the packed row) and
    /// no groups, the `polish` stage (under every sync model) moves and
    /// swaps samples on the model's exact sequence costs, within `effort *
    /// (4096 + n / 2)` model evaluations and insertions; for such a model
    /// a small batch is planned twice, with and without the exact branch
    /// and bound (exact only for sums of per-sample costs), and the plan of
    /// lower exact step time kept.
    ///
    /// On very large batches, any positive effort also pays for the pairing
    /// stage and the search's indexes, which do not depend on it. At 10^6
    /// samples over 16,384 ranks these cost more than a small budget, so
    /// `0` and a small effort differ in time much more than a small effort
    /// and the default do. The table of time and quality by effort is in
    /// `BENCHMARKS.md` (`MICROBATCH_BENCH_EFFORT`).
    ///
    /// # Complexity
    ///
    /// O(n log n + n s + R A log(R A) + effort * max(n + K, 65536)) time at
    /// most for the pairing (at most `s` samples a micro-batch, `R A`
    /// micro-batches), the search and the exact search, and O(effort * (4096
    /// + n)) model evaluations for the polish; O(n + K) extra space.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Image, Preset, Sample};
    /// use microbatch::plan::{Planner, StepSample, SyncModel};
    ///
    /// let samples: Vec<_> = (0..256u64)
    ///     .map(|i| {
    ///         let images = (0..i % 4).map(|k| Image::new(64 + 32 * ((i * 7 + k) % 13) as u32));
    ///         StepSample::new(i, Sample::new(50 + (i as u32 * 37) % 400, images))
    ///     })
    ///     .collect();
    /// let planner = Planner::new(Preset::Qwen25Vl7b.cost_model()).ranks(8).seq_len(2048).sync(SyncModel::Phase);
    /// let without = planner.clone().search_effort(0).plan(&samples)?;
    /// let with = planner.plan(&samples)?;
    /// assert!(with.report().predicted <= without.report().predicted);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn search_effort(mut self, effort: u32) -> Self {
        self.search_effort = effort;
        self
    }

    /// Where the samples of a group
    /// ([`StepSample::with_group`]) land together: one micro-batch (the
    /// default, [`GroupScope::MicroBatch`]; the planner keeps the group in
    /// one packed sequence) or one rank ([`GroupScope::Rank`]; a group may
    /// then span sequences and micro-steps). Samples without a group are
    /// free; without groups the setting changes nothing.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Sample, Tokens};
    /// use microbatch::plan::{GroupScope, Planner, StepSample};
    /// use microbatch::Error;
    ///
    /// // Two prompts of three 400-token responses each, and two loose samples.
    /// let mut samples: Vec<_> = (0..6)
    ///     .map(|i| StepSample::new(i, Sample::text_only(400)).with_group(i / 3))
    ///     .collect();
    /// samples.extend((6..8).map(|i| StepSample::new(i, Sample::text_only(400))));
    /// let planner = Planner::new(Tokens::new(1.0)?).ranks(2).seq_len(1200);
    /// let rank_of = |plan: &microbatch::plan::Plan, id| (0..2).find(|&r| plan.rank(r).contains(&id));
    /// let plan = planner.plan(&samples)?;
    /// assert_eq!(rank_of(&plan, 0), rank_of(&plan, 2)); // group 0 together
    ///
    /// // A sequence of 800 tokens cannot hold a group of 1200.
    /// let err = planner.clone().seq_len(800).plan(&samples).unwrap_err();
    /// assert!(matches!(err, Error::GroupTooLarge { group: 0, samples: 3, size: 1200, cap: 800, .. }));
    /// // On one rank, a group may span sequences.
    /// let plan = planner.seq_len(800).group_scope(GroupScope::Rank).plan(&samples)?;
    /// assert_eq!(rank_of(&plan, 3), rank_of(&plan, 5));
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn group_scope(mut self, scope: GroupScope) -> Self {
        self.group_scope = scope;
        self
    }

    /// Keeps samples on the rank that holds them ([`StepSample::with_origin`])
    /// where the step time allows: the plan of least bytes moved
    /// ([`StepSample::bytes`]) whose predicted step time is at most `(1 +
    /// tolerance)` times the plan's without locality
    /// ([`Report::locality_free`](crate::plan::Report::locality_free)); see
    /// [`Locality`] for the algorithm. Without origins the plan is the same
    /// as without locality. Whatever the setting, a plan of samples with
    /// origins has an [`Exchange`](crate::plan::Exchange).
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Sample, Tokens};
    /// use microbatch::plan::{Locality, Planner, StepSample};
    ///
    /// let samples: Vec<_> = (0..64u64)
    ///     .map(|i| StepSample::new(i, Sample::text_only(100 + (i as u32 * 37) % 200)).with_origin(i as usize % 4).with_bytes(1 << 20))
    ///     .collect();
    /// let planner = Planner::new(Tokens::new(1.0)?).ranks(4).seq_len(8192);
    /// let free = planner.plan(&samples)?;
    /// let local = planner.locality(Locality::new(0.01)?).plan(&samples)?;
    /// let moved = |p: &microbatch::plan::Plan| p.report().traffic.unwrap().bytes_moved;
    /// assert!(moved(&local) < moved(&free));
    /// assert!(local.report().predicted <= 1.01 * free.report().predicted);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn locality(mut self, locality: Locality) -> Self {
        self.locality = Some(locality);
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
    /// let planner = Planner::new(Tokens::new(2.0)?).ranks(4).seq_len(4096);
    /// assert_eq!(planner.model().per_token(), 2.0);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    pub fn model(&self) -> &M {
        &self.model
    }

    fn check(&self, n: usize) -> Result<(), Error> {
        let bad = Error::setting;
        if self.ranks == 0 {
            return Err(bad("ranks", 0, "at least 1 (set it with `Planner::ranks`)"));
        }
        if self.seq_len == 0 {
            return Err(bad(
                "seq_len",
                0,
                "at least 1 (set it with `Planner::seq_len`)",
            ));
        }
        if self.max_units == Some(0) {
            return Err(bad("max_units", 0, "at least 1"));
        }
        if self.max_images == Some(0) {
            return Err(bad("max_images", 0, "at least 1"));
        }
        match self.micro_steps {
            MicroSteps::Exactly(0) => return Err(bad("micro_steps", 0, "at least 1")),
            MicroSteps::Fastest { up_to: 0 } => {
                return Err(bad("fastest_micro_steps", 0, "at least 1"))
            }
            _ => {}
        }
        if self.per_step == 0 {
            return Err(bad("sequences_per_micro_step", 0, "at least 1"));
        }
        if self.locality.and_then(|l| l.node_size()) == Some(0) {
            return Err(bad("ranks_per_node", 0, "at least 1"));
        }
        if n > MAX_SAMPLES {
            return Err(bad(
                "samples",
                n as u64,
                "at most 2^32 - 1 = 4294967295 samples a step (split the step)",
            ));
        }
        if n < self.ranks {
            return Err(Error::TooFewSamples {
                samples: n,
                ranks: self.ranks,
            });
        }
        // Every sequence of the plan is stored, empty or not: R * S a
        // micro-step, R * A * S in all, each at most max(n, SLOTS). For the
        // smallest A the plan has fewer than n + R * S sequences.
        let limit = n.max(SLOTS) as u128;
        let per_row = (self.ranks as u128) * (self.per_step as u128);
        if per_row > limit {
            return Err(bad(
                "sequences_per_micro_step",
                self.per_step as u64,
                "small enough that ranks x sequences_per_micro_step is at most 65536 or the \
                 number of samples, whichever is larger (every sequence of the plan is stored, \
                 empty ones too)",
            ));
        }
        if let MicroSteps::Exactly(a) = self.micro_steps {
            if per_row * a as u128 > limit {
                return Err(bad(
                    "micro_steps",
                    u64::try_from(a).unwrap_or(u64::MAX),
                    "small enough that ranks x micro_steps x sequences_per_micro_step is at \
                     most 65536 or the number of samples, whichever is larger (every \
                     micro-step of the plan is stored, empty ones too)",
                ));
            }
        }
        Ok(())
    }

    /// The `prepare` stage: the settings checked, the samples checked and
    /// costed with the bound's parts for the sync model ([`prepare`]), their
    /// origins checked; with the context the later stages read.
    fn prepare<'a>(
        &'a self,
        samples: &'a [StepSample],
    ) -> Result<(Prepared, Context<'a, M>), Error> {
        self.check(samples.len())?;
        let prep = prepare(
            samples,
            &self.model,
            self.caps(),
            self.ranks,
            self.per_step,
            self.sync,
        )?;
        let cx = self.context(samples);
        check_origins(&prep, &cx, self.ranks)?;
        Ok((prep, cx))
    }

    /// The caps of a sequence: `L`, units, images.
    fn caps(&self) -> Caps {
        [
            u64::from(self.seq_len),
            self.max_units.map_or(u64::MAX, u64::from),
            self.max_images.map_or(u64::MAX, u64::from),
        ]
    }

    /// The context the finishing stage needs.
    fn context<'a>(&'a self, samples: &'a [StepSample]) -> Context<'a, M> {
        Context {
            samples,
            model: &self.model,
            sync: self.sync,
            seq_len: self.seq_len,
            ranks_per_node: self.locality.and_then(|l| l.node_size()),
            fixed_steps: self.micro_steps.exactly().is_some(),
        }
    }

    /// Plans one step.
    ///
    /// # Errors
    ///
    /// - [`Error::Invalid`] at a [setting](crate::Locator::Setting) for zero
    ///   ranks, length, caps, micro-steps or sequences per micro-step; for more
    ///   than 2^32 - 1 samples; naming `sequences_per_micro_step` when `ranks *
    ///   sequences_per_micro_step` exceeds the limit, and `micro_steps` when
    ///   `ranks * micro_steps * sequences_per_micro_step` does, the limit being
    ///   65,536 or the number of samples n, whichever is larger (every sequence
    ///   is stored, empty ones too);
    /// - [`Error::TooFewSamples`] when there are fewer samples than ranks
    ///   (so `ranks` is at most n);
    /// - [`Error::DuplicateId`] for a repeated id;
    /// - [`Error::Oversize`] listing every sample, by id, that exceeds
    ///   `L` or a cap;
    /// - [`Error::LossTokens`] for a sample with more loss tokens than
    ///   tokens;
    /// - [`Error::Invalid`] at a [cost](crate::Locator::Cost) when the model
    ///   returns a NaN, infinite or negative cost in a phase for a sample alone
    ///   (only closures and models of your own can), [`Error::Invalid`] at a
    ///   [floor](crate::Locator::Floor) for a floor that is not between zero
    ///   and that cost;
    /// - [`Error::CostOverflow`] when costs that are finite alone are not
    ///   together: summed over the step, or as one sequence's cost;
    /// - [`Error::MicroStepsInfeasible`] when the given micro-steps cannot
    ///   hold the batch, naming the smallest feasible number.
    ///
    /// # Complexity
    ///
    /// O(n log n + K) time and O(n + K) extra space for n samples in K
    /// sequences, K below `2 * max(n, 65536)` by the limits above; the
    /// refinement weighs at most `64 * (n + K)` candidate changes (four
    /// times for [`SyncModel::Phase`] and [`SyncModel::MicroStep`]: two
    /// packings, two row keys), the search at most
    /// [`search_effort`](Planner::search_effort)` * max(n + K, 65536)`
    /// units, the exact search of small batches at most
    /// `search_effort * 65536` units and its proof of the bound at most
    /// `search_effort * 262144`, whatever the settings: no
    /// setting alone makes planning slower or larger. A model that is not
    /// additive on the batch (a cost per sequence, attention over the packed
    /// row: the `share` stage of the [module docs](super#algorithm)) costs
    /// O(n) more model evaluations a round and every stage from `group` to
    /// `search` up to five times (ten times, and the polish twice, for a
    /// batch of at most 24 samples, planned with and without the exact
    /// stage).
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Sample, Tokens};
    /// use microbatch::plan::{Planner, StepSample};
    ///
    /// let samples = [StepSample::new(1, Sample::text_only(10))];
    /// let err = Planner::new(Tokens::new(1.0)?).ranks(2).seq_len(64).plan(&samples).unwrap_err();
    /// assert_eq!(
    ///     err.to_string(),
    ///     "1 sample(s) for 2 ranks: every rank needs at least one sample (plan a larger step or fewer ranks)"
    /// );
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    pub fn plan(&self, samples: &[StepSample]) -> Result<Plan, Error> {
        #[cfg(feature = "std")]
        let start = std::time::Instant::now();
        // The stages of the module docs ("Algorithm"), in their order.
        // 1. prepare
        let (prep, cx) = self.prepare(samples)?;
        let first = self.planned(&prep, &cx, samples, self.micro_steps.exactly())?;
        // With `Fastest`, every larger number of micro-steps up to the
        // limit (never more sequences than samples); one whose plan fails
        // (a cost beyond f64) is passed over.
        let (from, most) = match self.micro_steps {
            MicroSteps::Fastest { up_to } => (
                first.micro_steps() + 1,
                up_to.min(samples.len() / self.ranks.saturating_mul(self.per_step).max(1)),
            ),
            _ => (1, 0),
        };
        let more = (from..=most).filter_map(|a| self.planned(&prep, &cx, samples, Some(a)).ok());
        let plan = best(first, more, |p| p.report.predicted);
        #[cfg(feature = "std")]
        let plan = Plan {
            planning_time: super::output::Elapsed(Some(start.elapsed())),
            ..plan
        };
        Ok(plan)
    }

    /// Stages 2 to 12 of [`plan`](Planner::plan) on the prepared batch,
    /// with `micro_steps` micro-steps (`None`: the smallest feasible).
    fn planned(
        &self,
        prep: &Prepared,
        cx: &Context<'_, M>,
        samples: &[StepSample],
        micro_steps: Option<usize>,
    ) -> Result<Plan, Error> {
        let request = Request {
            ranks: self.ranks,
            per_step: self.per_step,
            micro_steps,
            phases: false,
            min_steps: 1,
        };
        // 2. to 10.: the stages on the samples' own costs, with the share
        // rounds and the polish for a model that is not additive. The exact
        // stage (end of 8.) is exact for sums of per-sample costs, where one
        // long sequence costs what its parts cost apart, and so packs a
        // small batch into as few micro-steps as fit: under a cost per
        // sequence and attention over the packed row that can be far from
        // the best (the exhaustive optimum of 6-8 of the bench's samples
        // over 2 x 2 sequences: up to 17.5% above it). For such a model the
        // stages run also without it, and the plan of lower exact step time
        // is kept (ties to the one with it).
        let additive = additive(prep, cx);
        let with = self.balanced(prep, cx, samples, request, additive, true)?;
        // (The plan without the exact stage only ever replaces the other:
        // its failure does not fail the plan.)
        let without =
            (!additive && self.refine && self.search_effort > 0 && prep.len() <= EXACT_SAMPLES)
                .then(|| {
                    self.balanced(prep, cx, samples, request, additive, false)
                        .ok()
                })
                .flatten();
        let time = |a: &Arranged| exact_time(prep, cx, a.shape, &a.slots).unwrap_or(f64::INFINITY);
        let chosen = best(with, without, time);
        let Arranged {
            shape,
            balanced,
            mut slots,
            proven,
            grouped,
        } = chosen;
        // 11. locality: with groups, only what keeps them whole moves: whole
        // micro-batches (a group lies in one sequence) or whole ranks (a
        // group spans one rank), never single samples.
        let mut locality_free = None;
        let mut costs = None;
        if let Some(loc) = self.locality {
            if let Some(homes) = Homes::new(prep, cx, loc.node_size()) {
                let movable = match (grouped, self.group_scope) {
                    (false, _) => Movable::Samples,
                    (true, GroupScope::MicroBatch) => Movable::WholeMicroBatches,
                    (true, _) => Movable::WholeRanks,
                };
                let asked = Asked {
                    locality: loc,
                    movable,
                };
                let (local, t0) = localize(prep, cx, shape, slots, &homes, asked)?;
                slots = local.slots;
                costs = Some(local.costs);
                locality_free = Some(t0);
            }
        }
        // 12. finish
        let layout = Placed {
            shape,
            slots,
            balanced,
            costs,
        };
        let mut plan = finish(prep, cx, layout)?;
        if let Some(bound) = proven {
            let r = &mut plan.report;
            // Never above the plan nor the baseline (by rounding only).
            r.lower_bound = r.lower_bound.max(bound.min(r.predicted).min(r.baseline));
        }
        if self.locality.is_some() {
            plan.report.locality_free = Some(locality_free.unwrap_or(plan.report.predicted));
        }
        Ok(plan)
    }

    /// Stages 2 to 10 of [`plan`](Planner::plan) (`request` for stages 4
    /// to 8): the stages on the samples' own costs, then, for a model that
    /// is not `additive`, again on each sample's share of its sequence's
    /// exact cost while that lowers the exact step time, and the polish;
    /// with `exact`, the exact stage of small batches at the end of stage 8.
    fn balanced(
        &self,
        prep: &Prepared,
        cx: &Context<'_, M>,
        samples: &[StepSample],
        request: Request,
        additive: bool,
        exact: bool,
    ) -> Result<Arranged, Error> {
        // 2. to 9.: the stages on the samples' own costs; then, for a model
        // that is not additive (a cost per sequence, attention over the
        // packed row), again on each sample's share of its sequence's exact
        // cost in the plan just made (2. share), while that lowers the exact
        // step time (at most `SHARE_ROUNDS` times). The floors, the bound,
        // locality and the report keep the model's own costs.
        let mut best = self.arranged(prep, prep, samples, request, exact)?;
        if self.refine && !additive {
            // An own-cost plan whose exact time is not finite: `finish`
            // reports it. A later plan whose time is not finite is no better.
            if let Ok(mut time) = exact_time(prep, cx, best.shape, &best.slots) {
                for _ in 0..SHARE_ROUNDS {
                    let shared = share(prep, cx, &best.slots);
                    let next = self.arranged(prep, &shared, samples, request, exact)?;
                    match exact_time(prep, cx, next.shape, &next.slots) {
                        Ok(t) if t < time => time = t,
                        _ => break,
                    }
                    best = Arranged {
                        proven: best.proven,
                        ..next
                    };
                }
            }
        }
        // 10. polish: a model that is not additive, samples that move
        // alone: moves and swaps on the exact sequence costs.
        if self.refine && !additive && !best.grouped && self.search_effort > 0 {
            let n = prep.len() as u64;
            let budget = u64::from(self.search_effort).saturating_mul(POLISH_BASE + n / 2);
            polish(prep, cx, best.shape, &mut best.slots, budget);
        }
        Ok(best)
    }

    /// Stages 3 (group) to 9 (group, back) on `base` (the prepared samples
    /// `prep`, or their shares): the shape, whether the balanced packing
    /// made it, every slot's positions, and the bound the exact search
    /// proves of small batches of additive costs (from `prep`'s own costs).
    fn arranged(
        &self,
        prep: &Prepared,
        base: &Prepared,
        samples: &[StepSample],
        request: Request,
        exact: bool,
    ) -> Result<Arranged, Error> {
        // 3. group: with groups, stages 4 to 8 run on units (groups and
        // chunks as one item each).
        let units = units(base, samples, self.group_scope, self.ranks)?;
        let units = units.as_ref();
        let batch = units.map_or(base, |u| &u.prep);
        let pins = units.map_or_else(Vec::new, Units::pins);
        // 4. pack to 8. search, under the planner's sync model.
        let request = Request {
            min_steps: match units {
                Some(u) => u.min_steps(self.per_step, request.micro_steps)?,
                None => 1,
            },
            ..request
        };
        let run = Run {
            sync: self.sync,
            refine: self.refine,
            effort: self.search_effort,
            exact,
            batch,
            request,
            units,
            pins: &pins,
        };
        let layout = run.layout()?;
        // Small batches of additive costs: the bound the exact search
        // proves (every plan of any number of micro-steps), on the search's
        // budget; with the model's own costs (not the shares): the proof
        // needs a sum of floors.
        let proven = if units.is_none() && self.refine && self.search_effort > 0 {
            let time = additive_time(self.sync, prep, &layout);
            // Four times the exact stage's: it covers every number of
            // micro-steps.
            let budget = u64::from(self.search_effort) << 18;
            proven_bound(prep, self.sync, self.ranks, self.per_step, time, budget)
        } else {
            None
        };
        // 9. group, back: every rank some work, units expanded to samples.
        let Layout {
            shape,
            balanced,
            order,
            seqs,
            ..
        } = layout;
        let slots = ungroup(units, shape, seqs.into_slots(order));
        Ok(Arranged {
            shape,
            balanced,
            slots,
            proven,
            grouped: units.is_some(),
        })
    }

    /// The naive plan the report compares with, as a plan: samples in
    /// ascending id packed by next fit, micro-batches of `S` consecutive
    /// sequences dealt to ranks in turn; its `A` is what that takes (and
    /// [`micro_steps`](Planner::micro_steps) is ignored). Groups stay
    /// together, as a user's loader keeps them: a group is one unit at the
    /// place of its smallest id, in one sequence (hence one micro-batch and
    /// one rank) when it fits one, else in sequences of its own on one
    /// rank. Useful to show the per-rank load before planning.
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
    /// let naive = Planner::new(Tokens::new(1.0)?).ranks(2).seq_len(50).baseline(&samples)?;
    /// assert_eq!(naive.to_nested(), vec![vec![vec![0, 1], vec![3]], vec![vec![2], vec![]]]);
    /// assert_eq!(naive.report().predicted, naive.report().baseline);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    pub fn baseline(&self, samples: &[StepSample]) -> Result<Plan, Error> {
        let (prep, cx) = self.prepare(samples)?;
        let naive = Naive::new(&prep, cx.samples, self.ranks, self.per_step);
        let layout = Placed {
            shape: naive.shape,
            slots: naive.slots(),
            balanced: false,
            costs: None,
        };
        finish(&prep, &cx, layout)
    }
}

/// A plan's layout before locality: its shape, whether the balanced
/// packing made it, every slot's positions, the bound the exact search
/// proved (small batches of additive costs) and whether samples moved as
/// units (groups).
struct Arranged {
    shape: Shape,
    balanced: bool,
    slots: Vec<Vec<u32>>,
    proven: Option<f64>,
    grouped: bool,
}

//! The planner: one optimizer step's samples to a balanced, gradient-invariant plan over ranks and micro-steps.
//!
//! Given the samples of one step ([`StepSample`]: an id, text tokens, images
//! and optionally the tokens that carry loss), `R` data-parallel ranks, a
//! packed sequence length `L` with optional caps (ViT units such as tiles,
//! images per sequence), a [`CostModel`](crate::cost::CostModel) and a
//! [`SyncModel`], a [`Planner`] produces a [`Plan`]: for every rank, for
//! every one of `A` micro-steps, `S` packed sequences (lists of sample ids;
//! `S = 1` unless configured), such that
//!
//! - every sample appears exactly once, every sequence respects `L` and the
//!   caps, every rank runs the same `A` micro-steps and every rank gets at
//!   least one sample (unless [groups](#groups) leave fewer units than
//!   ranks);
//! - the step time predicted by the cost model under the sync model is close
//!   to its lower bound ([`Report`]);
//! - the update equals the unbalanced one when each micro-batch's *summed*
//!   loss is multiplied by the step-global scale of [`Loss`].
//!
//! # Sync models
//!
//! | [`SyncModel`] | setup | predicted step time | lower bound |
//! |---|---|---|---|
//! | [`Step`](SyncModel::Step) | DDP with `no_sync` during accumulation | max over ranks of the rank's total | max((floors + rows) / R, largest floor + cost per row) |
//! | [`MicroStep`](SyncModel::MicroStep) | FSDP / ZeRO-3, pipelines | sum over micro-steps of the max over ranks | max(floors / R + fill, (floors + rows) / R, staircase of the floors) |
//! | [`Phase`](SyncModel::Phase) | FSDP / ZeRO-3 with the ViT and the LLM gathered separately | sum over micro-steps and phases of the max over ranks | max(sum over phases of max(phase floors / R + fill of the phase, (phase floors + rows of the phase) / R, staircase of the phase), the micro-step bound) |
//!
//! The *floors* are the samples' [`CostModel::floor`](crate::cost::CostModel::floor)s,
//! their costs alone for additive models (so "floors" reads "total cost" and
//! "largest floor" "largest sample"), without the costs paid once per group
//! ([`PerGroup`](crate::cost::PerGroup)): the bound holds for every model
//! ([`Report::lower_bound`]). The *rows* term counts what the packed
//! sequences cost beyond their samples' floors, by the model's
//! [`CostModel::group_floor`](crate::cost::CostModel::group_floor): a cost
//! per non-empty sequence `c` and dense attention over the packed row `q *
//! (T^2 - sum of t^2)` make `min over k of c * k + q * max(0, N^2 / k - sum
//! of t^2)` for `N` tokens in all, `k` between the fewest sequences that
//! hold the samples (by the caps) and the most a plan can have (the
//! samples, or the `R * A * S` sequences of fixed micro-steps): zero for
//! models without such costs. The *staircase* counts that a micro-step
//! holds at most `R * S` sequences: for every level x, the samples whose
//! floor exceeds x need at least so many micro-steps (by their tokens,
//! units and images against the caps, and by those over half a cap, which
//! never share a sequence), and each of those micro-steps waits at least x;
//! integrated over x, it is at least the largest floor. The *fill* counts
//! that the micro-step holding the largest floor `m` waits for it while its
//! other ranks hold only what fits their sequences: `max(0, m - F / R)`,
//! `F` the most floor one micro-step's `R * S * L` tokens can hold (densest
//! samples first); it binds when the largest sample is denser than the
//! rest (a long document whose attention grows as `T^2`). All three are
//! checked against exact optima on small instances (`tests/plan_bound.rs`,
//! `tests/plan_bound_rows.rs`, `tests/plan_optimum.rs`). For a small batch (at most 16 samples, no
//! groups) whose costs are additive (every floor equal to the cost alone),
//! the bound is also at least what the exact search proves of every plan of
//! any number of micro-steps, within [`Planner::search_effort`]'s budget:
//! the optimum itself where the proof fits the budget ([`Report::ratio`]
//! then the plan's exact distance to it), else the highest of a few values
//! below the plan's time (1/32 to 1/1024 of it below) that no plan beats.
//!
//! # Algorithm
//!
//! One stage a file, each taking and returning plain data, run by
//! [`Planner::plan`] in this order:
//!
//! 1. `prepare`: check the settings, sort the samples by id (the plan is a
//!    function of the *set* of samples), check them (ids, sizes against
//!    the caps, loss tokens, origins), and evaluate each sample's cost
//!    vector and floor once, with the parts of the lower bound.
//! 2. `share` (a model that is not additive on the batch; the stages 3 to
//!    9 first run on the samples' own costs): each sample's cost for
//!    stages 4 to 8 becomes its share of the exact cost of the sequence the
//!    plan just made puts it in: its floor plus the sequence's cost above
//!    its samples' floors in proportion to its tokens (a cost per
//!    sequence, or attention over the packed row, is then balanced where
//!    it is paid), and stages 3 to 9 run again on the shares while that
//!    lowers the exact step time (at most four times): the plan is never
//!    worse, by the model, than the plan of the own costs. A probe of at
//!    most 64 pairs of samples tells additive models, which skip it.
//! 3. `group` (with [groups](#groups)): the groups and their chunks become
//!    units, each one item that stages 4 to 8 move whole.
//! 4. `pack`: pack the samples into `K = R * A * S` sequences that are
//!    balanced, not merely full: the vector LPT with capacities of
//!    [`partition`](crate::partition) (in decreasing order of cost, each
//!    sample to the least-loaded sequence it fits in, the load the larger of
//!    the sequence's cost and its tokens, each over its mean, so that
//!    sequences fill with tokens at the pace they fill with cost; for
//!    [`SyncModel::Phase`] also a second packing whose load is the largest
//!    of vision cost, language cost and tokens, each over its mean, so that
//!    every sequence starts near the mean in both phases: each packing is
//!    dealt and refined, and the start of lower predicted step time is
//!    kept, but for the row below). Where the bound's fill term binds, i.e. the largest sample is
//!    denser than what the rest of its micro-step can be filled with at the
//!    mean, or else where the largest sample is above a mean sequence in a
//!    phase, the second packing of [`SyncModel::Phase`] first fills one row
//!    of `R * S` sequences around the largest sample with the densest
//!    samples (cost per token, in the phases whose fill term binds, else
//!    those where it is above the mean), none above it in those phases
//!    (the `fill` stage), so that the micro-step which waits for it anyway
//!    does as much work as it can; the outliers (more than 2% above a mean
//!    sequence in a phase) that this order leaves out are placed first,
//!    longest first,
//!    and the row built again, if that leaves less of them out (one above
//!    the largest sample goes alone into a sequence of its own): outside
//!    the row each would set its micro-step's maximum. The other samples
//!    are then balanced over all the sequences, the row's holding what it
//!    holds (a row sequence takes one only where no other has room for
//!    it), and this start is kept over the other whatever their predicted
//!    times: the search after it balances the other micro-steps, but never
//!    builds such a row. The dealing gives that row, the most costly
//!    sequences, one micro-step. When the capacity is too tight for that
//!    order,
//!    [`first_fit_decreasing`](crate::pack::first_fit_decreasing) packs
//!    instead ([`Report::balanced_packing`] says which).
//! 5. `deal`: deal the sequences to the `R x A` slots: for
//!    [`SyncModel::Step`], LPT with equal counts over ranks
//!    ([`Partitioner`](crate::partition::Partitioner)); for the
//!    per-micro-step models, sequences of similar cost form one micro-step
//!    across ranks, so that no micro-step waits for one outlier. For
//!    [`SyncModel::Phase`] "similar" is tried two ways (by the larger excess
//!    over the mean in either phase, by language cost), each refined, and
//!    the plan with the lowest predicted step time is kept. With groups,
//!    the chunks of a group then go to its home rank.
//! 6. `refine`: within each set of groups that wait for each other (the
//!    ranks for [`SyncModel::Step`], one micro-step's micro-batches
//!    otherwise), move or swap single samples between the slowest group and
//!    the fastest ones, keeping every cap, while that lowers the slowest
//!    (phase by phase for [`SyncModel::Phase`], never raising the other
//!    phase's maximum).
//! 7. `pair` (per-micro-step sync models, with the search on): in bulk,
//!    micro-batches at their micro-step's maxima trade one sample with the
//!    ones farthest below theirs (one round across micro-steps, filling
//!    the room under the maxima that a single large sample sets), then the
//!    `k`-th most loaded micro-batch of each micro-step with its `k`-th
//!    least loaded (six rounds for [`SyncModel::Phase`], two for
//!    [`SyncModel::MicroStep`]), never raising a barrier's maximum.
//! 8. `search` (per-micro-step sync models): the barriers (a micro-step in
//!    a phase, or in total) are taken worst excess over their mean first;
//!    in a first round the micro-batch that binds one trades places with
//!    another micro-batch of its rank (whole micro-batches change
//!    micro-steps), then it moves a sample to, or swaps one with,
//!    a partner found near the wanted cost in the samples sorted once by
//!    cost, in *any* micro-step (or moves one into the least loaded
//!    micro-batches of its own micro-step and of the one with most room
//!    under its maxima), while the exact predicted step time drops
//!    (or stays and the binding micro-batch leaves the maximum), within a
//!    counted work budget ([`Planner::search_effort`]). Small batches (at
//!    most 16 samples or units, none pinned) then go through an exact
//!    branch and bound over every layout of the same shape (the `exact`
//!    stage), on the same budget, which replaces the layout only by a
//!    strictly better one. For [`SyncModel::MicroStep`] the stages 4 to 8
//!    also run as for [`SyncModel::Phase`], that layout is searched on
//!    under per-micro-step barriers, and the better of the two is kept
//!    (ties to the first): the plan is never worse, under per-micro-step
//!    barriers, than the per-phase plan.
//! 9. `group`, back: a unit (without groups, a sample) moved from a rank
//!    with several to every rank without one, so that no rank idles at the
//!    collective (chunks stay on their home rank), and the units expanded
//!    to their samples.
//! 10. `polish` (a model that is not additive, without groups, with the
//!     search on): the micro-batch that sets a barrier (a rank, for one
//!     barrier a step) moves one sample to, or swaps one with, another
//!     sequence, each change weighed by the model's exact cost of the two
//!     sequences it touches (the shares of stages 4 to 8 are fixed while
//!     samples move, the exact cost is not), the change of the lowest step
//!     time taken while the exact step time drops (or stays and fewer
//!     micro-batches sit at a maximum); then, while the budget lasts,
//!     kicks (two random swaps from a seeded sequence, the descent again,
//!     the faster layout kept), all within a counted budget of model
//!     evaluations ([`Planner::search_effort`] times 4,096 plus half the
//!     samples). On the batches of a small real Qwen2-VL with its
//!     calibrated model it takes 1-3% off the step time at 4 micro-steps
//!     (2-5% at 6); at 65,536 samples 0-0.5%. For such a model and a batch
//!     small enough for the `exact` stage, stages 2 to 10 run twice, with
//!     and without that stage, and the plan of lower exact step time is
//!     kept (ties to the one with it): exact for sums of per-sample costs,
//!     where one long sequence costs what its parts cost apart, the stage
//!     packs such a batch into as few micro-steps as fit, while a cost per
//!     sequence and attention over the packed row may make more, shorter
//!     sequences faster, and one move at a time cannot open a sequence
//!     whose fixed cost is paid before the attention it saves.
//! 11. `locality` (with [`Planner::locality`] and samples with an origin):
//!     the plan relabelled, filled anew from home (one barrier a step) and
//!     pairs of sequences re-split to bring samples home, so that the
//!     fewest bytes move while the predicted step time stays within the
//!     tolerance of the plan so far ([`Locality`]).
//! 12. `finish`: the plan's ids slot by slot, every sequence evaluated as
//!     a group, the [`Report`] against the bound, the naive baseline and
//!     the users' baseline ([`Report::users_baseline`]),
//!     and the [`Exchange`] (with its [`Traffic`]) when samples have
//!     origins.
//!
//! `A` is either given ([`Planner::micro_steps`]) or the smallest value the
//! planner can fit the batch into: the token (and cap) bound
//! `ceil(total / capacity / (R * S))` if the balanced packing fits there,
//! else the first-fit-decreasing count divided by `R * S`, rounded up.
//!
//! The cost of a sequence in stages 4 to 8 is the sum of its samples' costs
//! (their own for additive models, their shares for the others, stage 2);
//! the [`Report`] evaluates every sequence as a group with the model
//! ([`Incremental`](crate::cost::Incremental)), so non-additive terms (full
//! attention over the packed length, a cost per sequence) are reported
//! exactly and balanced through the shares, approximately (a share is
//! fixed while the stages move samples between sequences).
//!
//! # Groups
//!
//! Samples that must stay together ([`StepSample::with_group`]: the
//! responses of one prompt whose advantages are normalized together, the
//! pieces of one conversation, the pairs of a contrastive loss) land in
//! the same micro-batch, or with [`GroupScope::Rank`]
//! ([`Planner::group_scope`]) on the same rank. The stages above then move
//! *units*: an ungrouped sample, a whole group (kept in one packed
//! sequence, so it must fit `L` and the caps, else
//! [`Error::GroupTooLarge`](crate::Error::GroupTooLarge) names it), or
//! under [`GroupScope::Rank`] a sequence-sized chunk of a larger group,
//! pinned to the group's home rank (LPT of the groups' chunk counts over
//! the ranks). A group may hold at most the `A * S` sequences of one rank.
//! Without groups plans are bit for bit those of the planner without them.
//! Balance: on RL-like steps (prompts of 4 to 16 responses, 32 ranks) the
//! predicted time over the bound is within 5% of the same batch without
//! groups under the micro-batch scope (`tests/plan_groups.rs`); with a
//! group scope of rank and groups several sequences long, per-micro-step
//! barriers lose more (chunks never move). A group is in one micro-batch
//! or on one rank, so with fewer units than ranks some rank gets no
//! sample (the step still has at least `R` samples); that rank runs its
//! micro-steps empty, as the trainer's contract asks. Locality with groups
//! moves only whole micro-batches or whole ranks ([`Locality`]).
//!
//! # Gradient-order invariance
//!
//! Which rank or micro-step a sample lands on does not change the update,
//! because the update uses the *sum* of per-sample gradients, provided:
//!
//! 1. every sample of the step appears exactly once (the plan guarantees it);
//! 2. the loss is normalized by step-global denominators: multiply each
//!    micro-batch's *summed* loss (sum over its loss tokens, or over its
//!    samples of each sample's mean) by [`Loss::scale`], never divide by the
//!    micro-batch's own token count. A per-micro-batch mean weights samples
//!    by the size of the batch they landed in, so moving samples changes the
//!    gradient (transformers #34191, axolotl #1672);
//! 3. nothing in the model depends on the composition of a micro-batch:
//!    BatchNorm statistics, an MoE auxiliary load-balancing loss computed per
//!    micro-batch, or in-batch negatives of a contrastive loss are **not**
//!    invariant under replanning, and no loss scale fixes them.
//!
//! In exact arithmetic the planned and the unbalanced gradients are equal;
//! in floating point they differ by reordering the sum, at most
//! `n * eps * sum(|g|)`. The property tests (`tests/plan_invariance.rs`)
//! check both, and that per-micro-batch means break it.
//!
//! Planning reorders samples only *within* one step, so it adds no sampling
//! bias across steps (sorting a whole epoch by length does). Where the order
//! does not matter to the sync model, the data loader's order (ascending id)
//! is kept: samples within a sequence, and for [`SyncModel::Step`] the
//! micro-steps of a rank.
//!
//! # The trainer's contract
//!
//! What a training loop must do for the plan to leave the update unchanged
//! (the same text is in the Python package's documentation, `help(microbatch)`):
//!
//! - **Scale the summed loss.** Multiply each micro-batch's *summed* loss by
//!   [`Loss::scale`] and never divide by the micro-batch's own token count
//!   or by the number of accumulation steps. Frameworks that divide by the
//!   accumulation steps must be kept from it: DeepSpeed's `engine.backward`
//!   divides unless called with `scale_wrt_gas=False`; Hugging Face's
//!   `Trainer` divides unless it is given a `compute_loss_func` (or the
//!   model takes `num_items_in_batch`), so give it one that returns the
//!   summed loss times the scale. [`Reduction::Mean`] is for an all-reduce
//!   that averages over ranks (DDP, FSDP, DeepSpeed by default),
//!   [`Reduction::Sum`] for one that sums.
//! - **Count the loss tokens that carry loss**
//!   ([`StepSample::with_loss_tokens`]): the positions whose label is not
//!   ignored *after* the shift of causal language modelling. For a sample
//!   packed with its first label masked (the layout of Hugging Face's
//!   `DataCollatorWithFlattening`), that is the positions `t >= 1` whose
//!   label is not `-100`. By default a sample's loss tokens are its text
//!   tokens, which overcounts by one a sample and by every masked prompt
//!   token.
//! - **Samples without loss tokens** add nothing to the numerator; under
//!   [`Normalization::Token`] they add nothing to the denominator either,
//!   under [`Normalization::Sample`] they add 1 to it (their mean loss is
//!   taken as 0), exactly as in the unsplit step. A step without any loss
//!   token has scale 0.
//! - **Run every micro-step on every rank.** A micro-batch can be empty
//!   when the step has fewer samples than the `R * A * S` sequences, or when
//!   [`Planner::micro_steps`] asks for more micro-steps than the batch
//!   needs; run forward and backward on it anyway (a zero loss connected to
//!   the parameters), so that the collectives of FSDP, ZeRO or DDP stay in
//!   step on every rank.
//! - **Ids in JSON.** Ids are `u64` and a plan written with `serde` holds
//!   them exactly; a reader that parses JSON numbers as doubles
//!   (JavaScript, `jq`) rounds ids above 2^53. Keep ids below 2^53 or read
//!   plans with a reader that keeps integers (serde_json, Python's `json`).
//!
//! # Determinism
//!
//! The plan is a pure function of the samples as a set keyed by id and of
//! the configuration: any input order gives the identical plan, on every
//! rank and platform (ties are broken by id or index, never by hashing,
//! addresses or a random generator). [`Plan::fingerprint`] is a stable FNV-1a
//! hash of the plan that ranks can all-gather to check they agree.
//!
//! # Complexity
//!
//! O(n log n + K) time for n samples in K sequences (the sorts; the packing
//! is O(1) amortized a sample with a bucket queue; refinement is capped at a
//! few iterations per group, stops within 0.2% of the mean, and weighs at
//! most 64 candidate changes per sample and sequence, counted, so that no
//! shape makes it quadratic), about four times the refinement (two
//! packings, two row keys) for [`SyncModel::Phase`]; the per-micro-step
//! models add the pairing, O(n s + R A log(R A)) a round for at most `s`
//! samples a micro-batch, and the search within its counted budget
//! ([`Planner::search_effort`]). K is below `2 * max(n, 65536)`: every sequence is
//! stored, and [`Planner::plan`] refuses settings that would ask for more. O(n) extra space: under 90 bytes a
//! sample at peak for 10^6 samples, the plan included. Measured: 65,536
//! samples over 1,024 ranks in about 20 ms, 10^6 over 16,384 ranks in about
//! 0.65 s (`BENCHMARKS.md`). With `std`, [`Plan::planning_time`] states
//! the planning time; the core is `no_std`.
//!
//! # Examples
//!
//! ```
//! use microbatch::cost::{Image, Preset, Sample};
//! use microbatch::plan::{Normalization, Planner, Reduction, StepSample, SyncModel};
//!
//! let model = Preset::Qwen25Vl7b.cost_model();
//! let samples: Vec<StepSample> = (0..64u64)
//!     .map(|id| {
//!         let images = (0..id % 3).map(|k| Image::new(256 + 128 * k as u32));
//!         StepSample::new(id, Sample::new(100 + 17 * (id as u32 % 11), images))
//!     })
//!     .collect();
//!
//! let plan = Planner::new(model).ranks(4).seq_len(4096).sync(SyncModel::Phase).plan(&samples)?;
//! assert_eq!(plan.ranks(), 4);
//! let ids: usize = (0..4)
//!     .flat_map(|r| (0..plan.micro_steps()).map(move |j| (r, j)))
//!     .map(|(r, j)| plan.micro_batch(r, j).len())
//!     .sum();
//! assert_eq!(ids, 64); // every sample exactly once
//!
//! let report = plan.report();
//! assert!(report.predicted >= report.lower_bound);
//! assert!(report.predicted <= report.baseline);
//! // Multiply each micro-batch's summed token loss by this before backward.
//! let scale = plan.loss().scale(Normalization::Token, Reduction::Sum);
//! assert_eq!(scale, 1.0 / plan.loss().loss_tokens as f64);
//! println!("{:016x}", plan.fingerprint());
//! # Ok::<(), microbatch::Error>(())
//! ```
//!
//! # References
//!
//! - R. L. Graham, *Bounds on multiprocessing timing anomalies*, SIAM J.
//!   Appl. Math. 17(2), 1969 (LPT).
//! - verl `seqlen_balancing.py`, LoongForge and OmniBal: balancing by tokens,
//!   by fitted cost, and the ViT in a second pass.

mod baseline;
mod deal;
mod evaluate;
mod exact;
mod exchange;
mod fill;
mod fingerprint;
mod finish;
mod group;
mod locality;
mod loss;
mod output;
mod pack;
mod pair;
mod planner;
mod polish;
mod prepare;
mod refine;
mod sample;
mod search;
mod shape;
mod share;
mod sync;
mod work;

pub use self::exchange::{Exchange, Move, Traffic};
pub use self::group::GroupScope;
pub use self::locality::Locality;
pub use self::loss::{Loss, Normalization, Reduction};
pub use self::output::{Plan, Report};
pub use self::planner::{MicroSteps, Planner};
pub use self::sample::{StepSample, BYTES_PER_IMAGE_TOKEN};
pub use self::sync::SyncModel;

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
//! `tests/plan_bound_rows.rs`, `tests/plan_optimum.rs`). For a small batch (at most 24 samples, no
//! groups) whose costs are additive (every floor equal to the cost alone),
//! the bound is also at least what the exact search proves of every plan of
//! any number of micro-steps, within [`Planner::search_effort`]'s budget:
//! the optimum itself where the proof fits the budget ([`Report::ratio`]
//! then the plan's exact distance to it), else the highest of a few values
//! below the plan's time (1/32 to 1/1024 of it below) that no plan beats.
//!
//! # Algorithm
//!
//! [`Planner::plan`] runs these stages in order; each takes plain data and
//! returns plain data, and each file opens with its full contract. `n`
//! samples, `K = R * A * S` sequences, `s` samples a micro-batch.
//!
//! | stage | contract | time |
//! |---|---|---|
//! | 1. `prepare` | settings and samples checked (ids, sizes against the caps, loss tokens, origins), sorted by id, each sample's cost vector and floor evaluated once, with the bound's parts | O(n log n) |
//! | 2. `share` | for a model that is not additive: each sample costs its share of the exact cost of the sequence the plan so far puts it in, and stages 3-9 run again while that lowers the exact step time (at most four times) | that many plans |
//! | 3. `group` | groups and their chunks become units that the stages 4-8 move whole | O(n log n) |
//! | 4. `pack` (and `fill`) | `A` chosen ([`MicroSteps`]); the samples into `K` sequences balanced in cost and tokens by the vector LPT with capacities of [`partition`](crate::partition) (per-phase: also a packing balanced in both phases, with a row around the largest sample where it sets its micro-step); first-fit-decreasing when the capacity is too tight for that ([`Report::balanced_packing`]) | O(n log n + K) |
//! | 5. `deal` | the sequences to the `R x A` slots: LPT with equal counts over ranks under one barrier a step; sequences of similar cost in one micro-step otherwise | O(K log K) |
//! | 6. `refine` | moves and swaps of single samples from the slowest group (rank, or micro-batch of a micro-step) to the fastest, every cap kept, while the slowest drops (per phase, the best trade of two groups: `work::best_trade`) | O(n) a round, counted |
//! | 7. `pair` | per-micro-step models: micro-batches at their barrier's maximum trade one sample (`work::best_trade`: a window of partners, an exact first fit for moves) with those farthest below it, in bulk | O(n (log s + W + f) + R A log(R A)) a round, `W` the window, `f` a first-fit query |
//! | 8. `search` | per-micro-step models: the worst barrier's binding micro-batch trades places with another of its rank, or a sample with a partner near the wanted cost in any micro-step, while the exact step time drops | [`Planner::search_effort`] |
//! | 8'. `exact` | small batches (at most 24 positions, none pinned): a branch and bound over every layout of the plan's shape (the micro-batches of a micro-step interchangeable; under one barrier a step, positions to ranks with a packing check), cut by a bound and by capacity, replacing the layout only by a strictly better one; its proof raises the bound, so a small step is optimal and says so (`ratio() == 1`) | O(budget log n), [`Planner::search_effort`] |
//! | 9. `group`, back | every rank gets a unit where there are enough; units expanded to samples | O(n) |
//! | 10. `polish` | for a model that is not additive: moves and swaps weighed by the model's exact cost of the two sequences they touch | [`Planner::search_effort`] |
//! | 11. `locality` | with [`Planner::locality`]: the fewest bytes moved within the step-time tolerance ([`Locality`]) | see [`Locality`] |
//! | 12. `finish` | every sequence evaluated as a group, the [`Report`] against the bound and both baselines, the [`Exchange`] | O(n + K) |
//!
//! Stages 4 to 8 are composed in `pipeline.rs`. Where two starts compete
//! (two packings and two row keys under per-phase barriers, the plans with
//! and without the exact stage for a model that is not additive), the plan
//! of lower predicted step time is kept, ties to the first. Under
//! per-micro-step barriers the search starts from the per-phase start (the
//! packings dealt and refined phase by phase), or the plan without the
//! search is kept where it is faster: raising the search effort never
//! makes a plan slower.
//!
//! The cost of a sequence in stages 4 to 8 is the sum of its samples' costs
//! (their own for additive models, their shares for the others); the
//! [`Report`] evaluates every sequence as a group with the model
//! ([`Incremental`](crate::cost::Incremental)), so non-additive terms (full
//! attention over the packed length, a cost per sequence) are reported
//! exactly.
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
//! Groups cost balance: units are coarser than samples, and under
//! [`GroupScope::Rank`] chunks never leave their home rank
//! (`tests/plan_groups.rs` holds the balance the tests require). A group is in one micro-batch
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
//! O(n log n + K) time for the sorts, the packing (a bucket queue), the
//! dealing and the refinement (a few counted rounds, at most 64 candidate
//! changes weighed per sample and sequence, so that no shape makes it
//! quadratic); the pairing, the search, the exact stage and the polish
//! within the counted budget of [`Planner::search_effort`]; about four
//! times that for [`SyncModel::Phase`] (two packings, two row keys). `K` is
//! below `2 * max(n, 65536)`: every sequence is stored, and
//! [`Planner::plan`] refuses settings that would ask for more. O(n) extra
//! space. Measured times and bytes a sample are in `BENCHMARKS.md`, with
//! their commands. With `std`, [`Plan::planning_time`] states the planning
//! time; the core is `no_std`.
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
mod pipeline;
mod planner;
mod polish;
mod prepare;
mod refine;
mod sample;
mod search;
mod shape;
mod share;
mod sync;
mod tuning;
mod work;

pub use self::exchange::{Exchange, Move, Traffic};
pub use self::group::GroupScope;
pub use self::locality::Locality;
pub use self::loss::{Loss, Normalization, Reduction};
pub use self::output::{Plan, Report};
pub use self::planner::{MicroSteps, Planner};
pub use self::sample::{StepSample, BYTES_PER_IMAGE_TOKEN};
pub use self::sync::SyncModel;

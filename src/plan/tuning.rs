//! The planner's tuning numbers, in one place: the widths, rounds and budgets of its searches and the thresholds of its heuristics.
//!
//! Each is a choice of speed against quality, measured with the commands
//! of `BENCHMARKS.md`; none changes what a plan guarantees (every sample
//! once, every cap kept, the bound a bound, the work bounded by the batch
//! and the budget). Grouped by the stage that reads them.

// The `fill` stage.

/// A sample above this many times a mean sequence's cost in a phase is an
/// outlier of the fill row: about twice what the search leaves a
/// micro-step's maximum above its mean at a thousand ranks, so that samples about as large as a sequence's mean are left to the
/// density order.
pub(super) const FILL_OUTLIER: f64 = 1.02;

// The `locality` stage.

/// The weight of a move inside a node against one between nodes.
pub(super) const INSIDE_NODE: u128 = 1;

/// The weight of a move between nodes (with nodes; without, a move weighs
/// its bytes).
pub(super) const BETWEEN_NODES: u128 = 8;

/// The most sequences a rank may hold for step 2's fill to run (so that a
/// rank's packing weighs O(64) sequences a sample at worst).
pub(super) const LOCALITY_FILL_SEQUENCES: usize = 64;

/// Sequences of the home rank (and its node) whose split with a sample's
/// sequence is weighed, a sample and pass.
pub(super) const LOCALITY_PAIRS: usize = 16;

/// The most samples two sequences may hold to be re-split.
pub(super) const LOCALITY_PAIR: usize = 48;

/// Passes of step 3 over the samples away from home.
pub(super) const LOCALITY_PASSES: usize = 2;

/// The most samples of a pair, of equal weight on both sides, that
/// `Search::split_free` places.
pub(super) const LOCALITY_FREE: usize = 16;

/// The groups of most slack that step 2's fill weighs for a sample before
/// its work budget counts.
pub(super) const LOCALITY_TRIED: usize = 32;

/// The groups of most slack it weighs for a sample before that sample may
/// evict one of fewer tokens from among them.
pub(super) const LOCALITY_EVICT_AFTER: usize = 128;

/// The most groups of most slack it weighs for a sample.
pub(super) const LOCALITY_WIDER: usize = 1024;

/// The most choices `Search::split_free` weighs a pair.
pub(super) const LOCALITY_NODES: usize = 512;

/// Rounds of step 3's swap pass (`Search::swap`).
pub(super) const LOCALITY_SWAP_ROUNDS: usize = 2;

/// The samples away from home on a sample's home rank, nearest in tokens
/// below and above, that `Search::swap` weighs for it.
pub(super) const LOCALITY_NEAR: usize = 4;

/// The share of the samples away from home (the most bytes first) that
/// step 3 weighs before its swap pass, as a fraction: 7 / 20.
pub(super) const LOCALITY_BEFORE_SWAP: (usize, usize) = (7, 20);

// The `pair` stage.

/// The rounds across micro-steps.
pub(super) const PAIR_LEVELS: usize = 1;

/// The pairs a round reads ahead: their members listed in one run.
pub(super) const PAIR_CHUNK: usize = 256;

/// The swap partners a sample of one group is weighed with in the other
/// (`work::best_trade`: the pairing, and the refinement per phase), at
/// most: those nearest to the ideal swap.
pub(super) const PAIR_WINDOW: usize = 64;

// The `planner` stage.

/// The most times the stages run again on the shares of the plan they made
/// (a model that is not additive); the loop stops at the first round that
/// does not lower the exact step time.
pub(super) const SHARE_ROUNDS: usize = 4;

/// The polish stage's budget a unit of search effort, besides half a unit
/// a sample (model evaluations and insertions).
pub(super) const POLISH_BASE: u64 = 1 << 12;

// The `polish` stage.

/// The destination sequences weighed for a barrier's binding member, at
/// most.
pub(super) const POLISH_DESTINATIONS: usize = 64;

/// Kicks in a row that find no faster layout before the polish stops.
pub(super) const POLISH_KICKS: usize = 64;

/// Random swaps a kick makes.
pub(super) const POLISH_KICK_SWAPS: usize = 2;

// The `refine` stage.

/// How many of the fastest groups the slowest one trades with.
pub(super) const REFINE_CANDIDATES: usize = 2;

/// How many it trades with when none of the first few can.
pub(super) const REFINE_WIDE: usize = 32;

/// Iterations per group of a contest, at most.
pub(super) const REFINE_ROUNDS: usize = 4;

/// A contest is done when its slowest group is within this fraction of the
/// mean (or of the largest single sample, when that is larger).
pub(super) const REFINE_TOLERANCE: f64 = 2e-3;

/// The work budget of one refinement, per sample and per sequence: the
/// candidate changes it may weigh (a move or swap scored, a sample of a
/// candidate group sorted) are at most `WORK * (n + K)` for n samples in K
/// sequences, whatever the shape; when it is spent the refinement stops
/// where it is (deterministically: the count does not depend on the clock).
pub(super) const REFINE_WORK: u64 = 64;

/// The sorted pools a contest keeps, at most: the candidates of one
/// slowest group and then some.
pub(super) const REFINE_POOLS: usize = 2 * REFINE_WIDE;

// The `search` stage.

/// The default work budget ([`Planner::search_effort`](crate::plan::Planner::search_effort)), in
/// units per sample and sequence.
pub(super) const EFFORT: u32 = 45;

/// The size the budget counts at least: small batches search as long as a
/// batch of this many samples and sequences would (a constant, so no
/// setting alone makes planning slower).
pub(super) const SEARCH_MIN_SIZE: u64 = 1 << 16;

/// The partners weighed on each side of a transfer's target in the cost
/// index.
pub(super) const SEARCH_WINDOW: usize = 12;

/// The micro-steps besides the binding one whose least loaded
/// micro-batches each binding micro-batch tries to move into.
pub(super) const SEARCH_SINKS: usize = 1;

/// The samples a bucket of the size-matched index holds (by token count).
pub(super) const SEARCH_BUCKET: usize = 256;

/// The partners weighed on each side of a transfer's target in a bucket of
/// the size-matched index.
pub(super) const SEARCH_BUCKET_WINDOW: usize = 4;

/// The keys a block of the two-level binary search holds.
pub(super) const SEARCH_BLOCK: usize = 64;

/// The entries a run of `lower_in` holds.
pub(super) const SEARCH_RUN: usize = 16;

/// How many of the largest (and of the smallest) micro-batches of a
/// micro-step are kept per barrier, so that a rescan in O(R) is needed only
/// when changes have taken most of them out.
pub(super) const SEARCH_KEPT: usize = 16;

// The `share` stage.

/// The pairs of samples the additivity probe evaluates, at most.
pub(super) const SHARE_PROBES: usize = 64;

//! Bring your own costs: the cost model that sums the costs attached to the
//! samples themselves ([`Sample::with_cost`]).

use super::combinator::impl_add;
use super::{CostModel, Incremental, Phases, Sample};

/// The cost of a group is the sum of its samples' given costs
/// ([`Sample::with_cost`], [`Sample::given_cost`]), phase by phase: for a
/// trainer that measured or estimated each sample's time itself (a
/// profiler, a learned model) and wants the planner to balance exactly
/// those numbers.
///
/// Additive: a sample's [`floor`](CostModel::floor) is its given cost, and a
/// sample without a given cost costs nothing. [`Incremental`] with the
/// running sum as its state. Given costs are finite and non-negative by
/// construction; a sum beyond `f64::MAX` is refused by the planner.
///
/// Unlike the built-in terms, whose states are integer sums, the state is a
/// floating-point sum: its last bits follow the order of insertion, which the
/// planner fixes (samples by id), so every rank still computes the same plan.
///
/// # Complexity
///
/// O(1) time and space per sample inserted; [`CostModel::cost`] is O(n) for
/// a group of `n` samples.
///
/// # Examples
///
/// ```
/// use microbatch::cost::{CostModel, Given, Incremental, Phases, Sample};
///
/// let a = Sample::text_only(100).with_cost(Phases::new(0.5, 2.0))?;
/// let b = Sample::text_only(900).with_cost(Phases::new(0.0, 1.0))?;
/// assert_eq!(Given.cost(&[&a, &b]), Phases::new(0.5, 3.0));
/// assert_eq!(Given.floor(&a), a.given_cost());
///
/// let mut state = Given.empty();
/// Given.insert(&mut state, &a);
/// assert_eq!(Given.evaluate_with(&state, &b), Phases::new(0.5, 3.0));
/// assert_eq!(format!("{Given:?}"), "Given");
/// # Ok::<(), microbatch::Error>(())
/// ```
///
/// Planning on given costs:
///
/// ```
/// use microbatch::cost::{Given, Phases, Sample};
/// use microbatch::plan::{Planner, StepSample, SyncModel};
///
/// let samples = (0..8u64)
///     .map(|i| {
///         let s = Sample::text_only(100).with_cost(Phases::new(0.0, 1.0 + i as f64))?;
///         Ok(StepSample::new(i, s))
///     })
///     .collect::<Result<Vec<_>, microbatch::Error>>()?;
/// let plan = Planner::new(Given).ranks(2).seq_len(1024).sync(SyncModel::Step).plan(&samples)?;
/// assert_eq!(plan.report().predicted, 18.0); // 36 seconds over 2 ranks, perfectly split
/// # Ok::<(), microbatch::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[must_use = "cost models do nothing unless evaluated"]
pub struct Given;

impl CostModel for Given {
    #[inline]
    fn cost(&self, group: &[&Sample]) -> Phases {
        group.iter().map(|s| s.given_cost()).sum()
    }

    #[inline]
    fn floor(&self, sample: &Sample) -> Phases {
        sample.given_cost()
    }
}

impl Incremental for Given {
    /// The sum of the given costs so far.
    type State = Phases;

    #[inline]
    fn empty(&self) -> Phases {
        Phases::ZERO
    }

    #[inline]
    fn insert(&self, state: &mut Phases, sample: &Sample) {
        *state += sample.given_cost();
    }

    #[inline]
    fn evaluate(&self, state: &Phases) -> Phases {
        *state
    }

    #[inline]
    fn evaluate_with(&self, state: &Phases, sample: &Sample) -> Phases {
        *state + sample.given_cost()
    }
}

impl_add!(Given);

//! How a model is erased into a [`BoxCostModel`]: the object-safe
//! [`ErasedModel`] face of every [`Incremental`] model (reading its state
//! back out of a [`BoxState`]), and [`BoxCostModel`]'s own [`CostModel`] and
//! [`Incremental`] impls. The types are in `boxed.rs`.

use core::any::{self, Any};
use core::fmt;

use super::boxed::ErasedModel;
use super::{BoxCostModel, BoxState, CostModel, GroupFloor, Incremental, Phases, Sample, Zero};

/// The state of `M` inside `state`.
///
/// # Panics
///
/// If `state` holds the state of another model type: a programming error
/// (a [`BoxState`] given to a model it was not made by), never a value of
/// the input.
#[inline]
fn state_of<M: Incremental>(state: &BoxState) -> &M::State
where
    M::State: Any,
{
    match state.downcast_ref() {
        Some(s) => s,
        None => mismatch::<M>(state.type_name()),
    }
}

/// [`state_of`], mutably.
#[inline]
fn state_of_mut<M: Incremental>(state: &mut BoxState) -> &mut M::State
where
    M::State: Any,
{
    if state.downcast_mut::<M::State>().is_none() {
        mismatch::<M>(state.type_name())
    }
    match state.downcast_mut() {
        Some(s) => s,
        None => mismatch::<M>(""),
    }
}

#[cold]
#[inline(never)]
fn mismatch<M: Incremental>(found: &str) -> ! {
    panic!(
        "a BoxState of another model: {} expects a state of type {}, found {found}; \
         a state must come from `empty()` of the same boxed model",
        any::type_name::<M>(),
        any::type_name::<M::State>(),
    )
}

impl<M> ErasedModel for M
where
    M: Incremental + fmt::Debug + Send + Sync + 'static,
    M::State: Send + Sync + 'static,
{
    #[inline]
    fn erased_cost(&self, group: &[&Sample]) -> Phases {
        CostModel::cost(self, group)
    }
    #[inline]
    fn erased_floor(&self, sample: &Sample) -> Phases {
        CostModel::floor(self, sample)
    }
    #[inline]
    fn erased_group_floor(&self) -> GroupFloor {
        CostModel::group_floor(self)
    }
    #[inline]
    fn erased_empty(&self) -> BoxState {
        BoxState::new(Incremental::empty(self))
    }
    #[inline]
    fn erased_insert(&self, state: &mut BoxState, sample: &Sample) {
        Incremental::insert(self, state_of_mut::<M>(state), sample);
    }
    #[inline]
    fn erased_evaluate(&self, state: &BoxState) -> Phases {
        Incremental::evaluate(self, state_of::<M>(state))
    }
    #[inline]
    fn erased_evaluate_with(&self, state: &BoxState, sample: &Sample) -> Phases {
        // The model's own `evaluate_with`: no clone of the boxed state.
        Incremental::evaluate_with(self, state_of::<M>(state), sample)
    }
    #[inline]
    fn erased_cost_and_floor(&self, sample: &Sample) -> (Phases, Phases) {
        Incremental::cost_and_floor(self, sample)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn debug(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

impl Default for BoxCostModel {
    /// The boxed [`Zero`].
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{BoxCostModel, CostModel, Phases, Sample};
    ///
    /// let zero = BoxCostModel::default();
    /// assert_eq!(zero.cost(&[&Sample::text_only(5)]), Phases::ZERO);
    /// assert_eq!(format!("{zero:?}"), "Zero");
    /// ```
    fn default() -> Self {
        Zero.boxed()
    }
}

impl CostModel for BoxCostModel {
    #[inline]
    fn cost(&self, group: &[&Sample]) -> Phases {
        self.inner.erased_cost(group)
    }
    #[inline]
    fn floor(&self, sample: &Sample) -> Phases {
        self.inner.erased_floor(sample)
    }
    #[inline]
    fn group_floor(&self) -> GroupFloor {
        self.inner.erased_group_floor()
    }
}

impl Incremental for BoxCostModel {
    /// The boxed model's state, erased.
    type State = BoxState;
    #[inline]
    fn empty(&self) -> BoxState {
        self.inner.erased_empty()
    }
    #[inline]
    fn insert(&self, state: &mut BoxState, sample: &Sample) {
        self.inner.erased_insert(state, sample);
    }
    #[inline]
    fn evaluate(&self, state: &BoxState) -> Phases {
        self.inner.erased_evaluate(state)
    }
    #[inline]
    fn evaluate_with(&self, state: &BoxState, sample: &Sample) -> Phases {
        self.inner.erased_evaluate_with(state, sample)
    }
    /// The inner model's own: no boxed state at all.
    #[inline]
    fn cost_and_floor(&self, sample: &Sample) -> (Phases, Phases) {
        self.inner.erased_cost_and_floor(sample)
    }
    /// Already boxed: `self`, not a box of a box.
    fn boxed(self) -> BoxCostModel {
        self
    }
}

super::combinator::impl_add!(BoxCostModel);

//! A type-erased incremental cost model, for models composed at run time: a
//! [`BoxCostModel`] over an erased, cloneable state [`BoxState`], in the style
//! of tower's `BoxLayer` and rand's `Box<dyn RngCore>`.
//!
//! This file holds the types and the object-safe traits they erase to; how
//! a model is erased (the [`ErasedModel`] impl of every [`Incremental`]
//! model) and [`BoxCostModel`]'s own [`CostModel`] and [`Incremental`] impls
//! are in `erase.rs`, so that `model.rs` names [`BoxCostModel`] as the
//! return type of [`Incremental::boxed`] without an import cycle.

use alloc::boxed::Box;
use alloc::sync::Arc;
use core::any::{self, Any, TypeId};
use core::fmt;

use super::{GroupFloor, Phases, Sample};

#[cfg(doc)]
use super::{CostModel, Incremental, Zero};

/// The object-safe face of an [`Incremental`] model: its methods over erased
/// states, implemented for every model that [`Incremental::boxed`] takes.
pub(super) trait ErasedModel: Send + Sync {
    fn erased_cost(&self, group: &[&Sample]) -> Phases;
    fn erased_floor(&self, sample: &Sample) -> Phases;
    fn erased_group_floor(&self) -> GroupFloor;
    fn erased_empty(&self) -> BoxState;
    fn erased_insert(&self, state: &mut BoxState, sample: &Sample);
    fn erased_evaluate(&self, state: &BoxState) -> Phases;
    fn erased_evaluate_with(&self, state: &BoxState, sample: &Sample) -> Phases;
    fn erased_cost_and_floor(&self, sample: &Sample) -> (Phases, Phases);
    /// The model itself, for [`BoxCostModel::downcast_ref`].
    fn as_any(&self) -> &dyn Any;
    /// The model's `Debug`.
    fn debug(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result;
}

/// The object-safe face of a model's state: cloned into a new box, read
/// back by a downcast to the model's `State`.
pub(super) trait ErasedState: Send + Sync {
    fn clone_box(&self) -> Box<dyn ErasedState>;
    fn as_any(&self) -> &dyn Any;
    fn as_any_mut(&mut self) -> &mut dyn Any;
    /// The name of the state's type, for the message of a mismatch.
    fn type_name(&self) -> &'static str;
    /// The state's `Debug`.
    fn debug(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result;
}

impl<S: Clone + fmt::Debug + Send + Sync + 'static> ErasedState for S {
    fn clone_box(&self) -> Box<dyn ErasedState> {
        Box::new(self.clone())
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
    fn type_name(&self) -> &'static str {
        any::type_name::<S>()
    }
    fn debug(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// The state of a [`BoxCostModel`]: the boxed model's own
/// [`State`](Incremental::State), erased.
///
/// Made by [`Incremental::empty`] of a [`BoxCostModel`]; only that model (or
/// a clone of it, or a boxed model of the same type) can read it. The
/// states of the built-in terms (integer sums, [`Phases`]) are held inline,
/// the state of a model over one boxed model ([`CostModel::scale`],
/// [`CostModel::in_phase`]) is that model's own, and a pair of states (a
/// sum or a maximum of boxed models) is one box; any other state is a
/// `Box<dyn ...>`. `Debug` prints the inner state as it is.
///
/// # Examples
///
/// ```
/// use microbatch::cost::{Incremental, Sample, Tokens};
///
/// let model = Tokens::new(1.0)?.boxed();
/// let mut state = model.empty();
/// model.insert(&mut state, &Sample::text_only(5));
/// assert_eq!(state.downcast_ref::<u64>(), Some(&5)); // Tokens counts tokens
/// assert_eq!(format!("{state:?}"), "5");
/// # Ok::<(), microbatch::Error>(())
/// ```
#[derive(Clone)]
pub struct BoxState(Repr);

/// How a [`BoxState`] holds its state: inline for the small states of the
/// built-in terms, so that a composition of boxed terms allocates and
/// dereferences one box per pair, not one per term.
#[derive(Clone)]
enum Repr {
    U64(u64),
    U128(u128),
    U128x3([u128; 3]),
    Phases(Phases),
    Pair(Box<(BoxState, BoxState)>),
    Other(Box<dyn ErasedState>),
}

impl Clone for Box<dyn ErasedState> {
    fn clone(&self) -> Self {
        (**self).clone_box()
    }
}

/// `Some(value)` when `value` is a `T`.
#[inline]
fn take<S: Any, T: Any>(value: &mut Option<S>) -> Option<T> {
    (value as &mut dyn Any)
        .downcast_mut::<Option<T>>()
        .and_then(Option::take)
}

impl BoxState {
    /// Erases `state`, inline where its type allows.
    #[inline]
    pub(super) fn new<S: Clone + fmt::Debug + Send + Sync + 'static>(state: S) -> Self {
        let mut s = Some(state);
        // Each `take` compares two constant type ids: the right arm is
        // chosen at compile time.
        if let Some(b) = take::<S, BoxState>(&mut s) {
            return b;
        }
        let repr = if let Some(x) = take(&mut s) {
            Repr::U64(x)
        } else if let Some(x) = take(&mut s) {
            Repr::U128(x)
        } else if let Some(x) = take(&mut s) {
            Repr::U128x3(x)
        } else if let Some(x) = take(&mut s) {
            Repr::Phases(x)
        } else if let Some(x) = take::<S, (BoxState, BoxState)>(&mut s) {
            Repr::Pair(Box::new(x))
        } else {
            match s {
                Some(s) => Repr::Other(Box::new(s)),
                None => Repr::U64(0), // unreachable: no arm took it
            }
        };
        BoxState(repr)
    }

    /// The inner state, if it is a `S` (the [`State`](Incremental::State) of
    /// the boxed model).
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Incremental, PerGroup, Sample};
    ///
    /// let model = PerGroup::new(2.0)?.boxed();
    /// let mut state = model.empty();
    /// model.insert(&mut state, &Sample::text_only(9));
    /// assert_eq!(state.downcast_ref::<u64>(), Some(&1)); // one sample in the group
    /// assert_eq!(state.downcast_ref::<u128>(), None);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    #[inline]
    pub fn downcast_ref<S: Any>(&self) -> Option<&S> {
        if TypeId::of::<S>() == TypeId::of::<BoxState>() {
            return (self as &dyn Any).downcast_ref::<S>();
        }
        match &self.0 {
            Repr::U64(x) => (x as &dyn Any).downcast_ref(),
            Repr::U128(x) => (x as &dyn Any).downcast_ref(),
            Repr::U128x3(x) => (x as &dyn Any).downcast_ref(),
            Repr::Phases(x) => (x as &dyn Any).downcast_ref(),
            Repr::Pair(x) => (&**x as &dyn Any).downcast_ref(),
            Repr::Other(x) => (**x).as_any().downcast_ref(),
        }
    }

    /// [`downcast_ref`](BoxState::downcast_ref), mutably.
    #[inline]
    pub(super) fn downcast_mut<S: Any>(&mut self) -> Option<&mut S> {
        if TypeId::of::<S>() == TypeId::of::<BoxState>() {
            return (self as &mut dyn Any).downcast_mut::<S>();
        }
        match &mut self.0 {
            Repr::U64(x) => (x as &mut dyn Any).downcast_mut(),
            Repr::U128(x) => (x as &mut dyn Any).downcast_mut(),
            Repr::U128x3(x) => (x as &mut dyn Any).downcast_mut(),
            Repr::Phases(x) => (x as &mut dyn Any).downcast_mut(),
            Repr::Pair(x) => (&mut **x as &mut dyn Any).downcast_mut(),
            Repr::Other(x) => (**x).as_any_mut().downcast_mut(),
        }
    }

    /// The name of the inner state's type, for the message of a mismatch.
    pub(super) fn type_name(&self) -> &'static str {
        match &self.0 {
            Repr::U64(_) => any::type_name::<u64>(),
            Repr::U128(_) => any::type_name::<u128>(),
            Repr::U128x3(_) => any::type_name::<[u128; 3]>(),
            Repr::Phases(_) => any::type_name::<Phases>(),
            Repr::Pair(_) => any::type_name::<(BoxState, BoxState)>(),
            Repr::Other(x) => (**x).type_name(),
        }
    }
}

impl fmt::Debug for BoxState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Repr::U64(x) => fmt::Debug::fmt(x, f),
            Repr::U128(x) => fmt::Debug::fmt(x, f),
            Repr::U128x3(x) => fmt::Debug::fmt(x, f),
            Repr::Phases(x) => fmt::Debug::fmt(x, f),
            Repr::Pair(x) => fmt::Debug::fmt(&**x, f),
            Repr::Other(x) => (**x).debug(f),
        }
    }
}

/// A type-erased [`Incremental`] cost model: any model behind one type, for
/// models chosen or composed at run time (from a configuration file, from
/// Python) and for a [`Planner`](crate::plan::Planner) whose model type must
/// not depend on them.
///
/// This `struct` is created by [`Incremental::boxed`]. It is a model like any
/// other: it composes with the combinators ([`CostModel::plus`], `+`,
/// [`CostModel::scale`], [`CostModel::in_phase`], [`CostModel::max`]) and
/// gives, bit for bit, the costs, floors, group floors and states of the
/// model it boxes.
/// Its [`State`](Incremental::State) is a [`BoxState`]. Cloning shares the
/// model (an `Arc`); `Debug` prints the boxed model's formula as it is, so a
/// composition of boxed models prints flat. The default is the boxed
/// [`Zero`], the identity of [`CostModel::plus`].
///
/// # Complexity
///
/// One virtual call per method, plus one downcast of the state (a type-id
/// comparison) per [`insert`](Incremental::insert),
/// [`evaluate`](Incremental::evaluate) and
/// [`evaluate_with`](Incremental::evaluate_with), on top of the boxed
/// model's own work; [`empty`](Incremental::empty) and a clone of the state
/// allocate one box per boxed model in the composition.
/// [`evaluate_with`](Incremental::evaluate_with) does not clone the state.
///
/// # Panics
///
/// [`insert`](Incremental::insert), [`evaluate`](Incremental::evaluate) and
/// [`evaluate_with`](Incremental::evaluate_with) panic if given a
/// [`BoxState`] of a boxed model of another type: a state must come from
/// [`empty`](Incremental::empty) of the same model (or of a clone). The
/// [`Planner`](crate::plan::Planner) only ever passes a model its own
/// states.
///
/// # Examples
///
/// A model chosen at run time, then composed:
///
/// ```
/// use microbatch::cost::{
///     BoxCostModel, CostModel, DocumentAttention, Incremental, PerSample, Phase, Sample, Tokens,
/// };
/// use microbatch::plan::{Planner, StepSample};
///
/// let attention = true; // read from a configuration
/// let mut model: BoxCostModel = Tokens::new(1.0)?.boxed();
/// if attention {
///     model = model.plus(DocumentAttention::new(1e-3)?).boxed();
/// }
/// let model = model.plus(PerSample::new(2.0)?.in_phase(Phase::Vision)).boxed();
/// assert_eq!(
///     format!("{model:?}"),
///     "Tokens { per_token: 1.0 } + DocumentAttention { per_token_pair: 0.001 } \
///      + vision(PerSample { cost: 2.0 })"
/// );
///
/// let (a, b) = (Sample::text_only(10), Sample::text_only(20));
/// assert_eq!(model.cost(&[&a, &b]).language, 30.0 + 1e-3 * 500.0);
/// let mut state = model.empty();
/// model.insert(&mut state, &a);
/// assert_eq!(model.evaluate_with(&state, &b), model.cost(&[&a, &b]));
///
/// // One planner type whatever the model.
/// let planner: Planner<BoxCostModel> = Planner::new(model).ranks(2).seq_len(64);
/// let samples: Vec<_> = (0..8).map(|i| StepSample::new(i, Sample::text_only(30))).collect();
/// assert_eq!(planner.plan(&samples)?.len(), 8);
/// # Ok::<(), microbatch::Error>(())
/// ```
#[derive(Clone)]
#[must_use = "cost models do nothing unless evaluated"]
pub struct BoxCostModel {
    pub(super) inner: Arc<dyn ErasedModel>,
}

impl BoxCostModel {
    /// Boxes `model` (what [`Incremental::boxed`] does; every incremental
    /// model is an [`ErasedModel`], by the impl in `erase.rs`).
    pub(super) fn new<M: ErasedModel + 'static>(model: M) -> Self {
        BoxCostModel {
            inner: Arc::new(model),
        }
    }

    /// The boxed model, if it is an `M` (like `dyn Any`'s `downcast_ref`).
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{CostModel, Incremental, Linear, PerSample, Term, Tokens};
    ///
    /// let linear = Linear::new([(Term::Tokens, 2.0)])?;
    /// let model = linear.clone().boxed();
    /// assert_eq!(model.downcast_ref::<Linear>(), Some(&linear));
    /// assert!(model.downcast_ref::<Tokens>().is_none());
    /// // A composition is its combinator's type, not its members'.
    /// let sum = Tokens::new(1.0)?.plus(PerSample::new(1.0)?).boxed();
    /// assert!(sum.downcast_ref::<Tokens>().is_none());
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn downcast_ref<M: Any>(&self) -> Option<&M> {
        self.inner.as_any().downcast_ref()
    }
}

impl fmt::Debug for BoxCostModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Transparent, like a reference: `a.boxed() + b` prints `a + b`.
        self.inner.debug(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::{CostModel, Incremental, PerGroup, Tokens};
    use alloc::format;

    #[test]
    fn boxing_a_box_does_not_nest() {
        let model = Tokens::new(1.0).unwrap().boxed();
        let again = model.clone().boxed();
        assert!(Arc::ptr_eq(&model.inner, &again.inner));
    }

    #[test]
    #[should_panic(expected = "a BoxState of another model")]
    fn a_foreign_state_is_refused() {
        let tokens = Tokens::new(1.0).unwrap().boxed();
        let other = Tokens::new(1.0)
            .unwrap()
            .plus(PerGroup::new(1.0).unwrap())
            .boxed();
        let mut state = other.empty();
        tokens.insert(&mut state, &Sample::text_only(1));
    }

    #[test]
    fn states_of_the_same_type_are_shared() {
        // Like the unboxed models: two `Tokens` read each other's state.
        let (a, b) = (
            Tokens::new(1.0).unwrap().boxed(),
            Tokens::new(2.0).unwrap().boxed(),
        );
        let mut state = a.empty();
        a.insert(&mut state, &Sample::text_only(3));
        assert_eq!(b.evaluate(&state).language, 6.0);
        assert_eq!(format!("{:?}", state.clone()), "3");
    }
}

//! The adapters that [`CostModel`]'s provided methods build: [`Sum`]
//! ([`CostModel::plus`], `+`), [`Scale`] ([`CostModel::scale`]), [`InPhase`]
//! ([`CostModel::in_phase`]) and [`Max`] ([`CostModel::max`]), with their
//! constructors, accessors and `Debug`.
//!
//! Their [`CostModel`] and [`Incremental`] impls are in `combinator.rs`:
//! this file names no trait of the cost module, so the traits' file
//! (`model.rs`) names these types without an import cycle.

use core::fmt;

use super::{coefficient, Phase};
use crate::error::Error;

#[cfg(doc)]
use super::{CostModel, Incremental, Phases};

/// The sum of two cost models, phase by phase.
///
/// This `struct` is created by [`CostModel::plus`] and by `a + b`. `Debug`
/// prints `a + b`, flat for nested sums.
///
/// # Examples
///
/// ```
/// use microbatch::cost::{CostModel, PerSample, Sample, Tokens};
///
/// let model = Tokens::new(1.0)? + PerSample::new(2.0)? + PerSample::new(3.0)?;
/// assert_eq!(model.cost(&[&Sample::text_only(10)]).total(), 15.0);
/// assert_eq!(
///     format!("{model:?}"),
///     "Tokens { per_token: 1.0 } + PerSample { cost: 2.0 } + PerSample { cost: 3.0 }"
/// );
/// # Ok::<(), microbatch::Error>(())
/// ```
#[derive(Clone, Copy, PartialEq)]
#[must_use = "cost models do nothing unless evaluated"]
pub struct Sum<A, B> {
    pub(super) a: A,
    pub(super) b: B,
}

impl<A, B> Sum<A, B> {
    pub(crate) fn new(a: A, b: B) -> Self {
        Sum { a, b }
    }

    /// The two terms.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{PerSample, Tokens};
    ///
    /// let model = Tokens::new(1.0)? + PerSample::new(2.0)?;
    /// let (tokens, per_sample) = model.terms();
    /// assert_eq!((tokens.per_token(), per_sample.cost_per_sample()), (1.0, 2.0));
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    pub fn terms(&self) -> (&A, &B) {
        (&self.a, &self.b)
    }
}

impl<A: fmt::Debug, B: fmt::Debug> fmt::Debug for Sum<A, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Flat like tower-layer's `Stack`: a nested sum prints as one formula.
        if f.alternate() {
            write!(f, "{:#?}\n+ {:#?}", self.a, self.b)
        } else {
            write!(f, "{:?} + {:?}", self.a, self.b)
        }
    }
}

/// A cost model with every cost multiplied by a fixed, validated factor.
/// A zero factor costs zero, even where the inner cost overflowed to
/// infinity.
///
/// This `struct` is created by [`CostModel::scale`]. `Debug` prints
/// `factor * (inner)`.
///
/// # Examples
///
/// ```
/// use microbatch::cost::{CostModel, Sample, Tokens};
///
/// // A GPU twice as fast.
/// let model = Tokens::new(1e-3)?.scale(0.5)?;
/// assert_eq!(model.factor(), 0.5);
/// assert_eq!(format!("{model:?}"), "0.5 * (Tokens { per_token: 0.001 })");
/// assert_eq!(model.cost(&[&Sample::text_only(1000)]).total(), 0.5);
/// # Ok::<(), microbatch::Error>(())
/// ```
#[derive(Clone, Copy, PartialEq)]
#[must_use = "cost models do nothing unless evaluated"]
pub struct Scale<C> {
    pub(super) inner: C,
    pub(super) factor: f64,
}

impl<C> Scale<C> {
    pub(crate) fn new(inner: C, factor: f64) -> Result<Self, Error> {
        let factor = coefficient("factor", factor)?;
        Ok(Scale { inner, factor })
    }

    /// The factor.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{CostModel, Tokens};
    ///
    /// assert_eq!(Tokens::new(1.0)?.scale(0.25)?.factor(), 0.25);
    /// assert!(Tokens::new(1.0)?.scale(-1.0).is_err());
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn factor(&self) -> f64 {
        self.factor
    }

    /// The scaled model.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{CostModel, Tokens};
    ///
    /// let model = Tokens::new(1e-3)?.scale(0.5)?;
    /// assert_eq!(model.inner(), &Tokens::new(1e-3)?);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    pub fn inner(&self) -> &C {
        &self.inner
    }
}

impl<C: fmt::Debug> fmt::Debug for Scale<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if f.alternate() {
            write!(f, "{:?} * ({:#?})", self.factor, self.inner)
        } else {
            write!(f, "{:?} * ({:?})", self.factor, self.inner)
        }
    }
}

/// A cost model whose whole cost ([`Phases::total`]) is placed in one phase.
///
/// This `struct` is created by [`CostModel::in_phase`]. `Debug` prints
/// `phase(inner)`, for example `vision(Tokens { per_token: 1.0 })`.
///
/// # Examples
///
/// ```
/// use microbatch::cost::{CostModel, Phase, Phases, Sample, Tokens};
///
/// let model = Tokens::new(1.0)?.in_phase(Phase::Vision);
/// assert_eq!(model.phase(), Phase::Vision);
/// assert_eq!(format!("{model:?}"), "vision(Tokens { per_token: 1.0 })");
/// assert_eq!(model.cost(&[&Sample::text_only(4)]), Phases::new(4.0, 0.0));
/// # Ok::<(), microbatch::Error>(())
/// ```
#[derive(Clone, Copy, PartialEq)]
#[must_use = "cost models do nothing unless evaluated"]
pub struct InPhase<C> {
    pub(super) inner: C,
    pub(super) phase: Phase,
}

impl<C> InPhase<C> {
    pub(crate) fn new(inner: C, phase: Phase) -> Self {
        InPhase { inner, phase }
    }

    /// The phase that receives the cost.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{CostModel, Phase, Sample, Tokens};
    ///
    /// let model = Tokens::new(1.0)?.in_phase(Phase::Vision);
    /// assert_eq!(model.phase(), Phase::Vision);
    /// assert_eq!(model.cost(&[&Sample::text_only(4)]).get(model.phase()), 4.0);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// The placed model.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{CostModel, Phase, Tokens};
    ///
    /// let model = Tokens::new(2.0)?.in_phase(Phase::Vision);
    /// assert_eq!(model.inner().per_token(), 2.0);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    pub fn inner(&self) -> &C {
        &self.inner
    }
}

impl<C: fmt::Debug> fmt::Debug for InPhase<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if f.alternate() {
            write!(f, "{}({:#?})", self.phase, self.inner)
        } else {
            write!(f, "{}({:?})", self.phase, self.inner)
        }
    }
}

/// The phase-wise maximum of two cost models: work that overlaps in time.
///
/// This `struct` is created by [`CostModel::max`]. `Debug` prints
/// `max(a, b)`. [`Incremental`] when both sides are (its state is the pair
/// of states: a maximum of sums is not a sum of maxima).
///
/// # Examples
///
/// ```
/// use microbatch::cost::{CostModel, PerSample, Sample, Tokens};
///
/// let model = Tokens::new(1.0)?.max(PerSample::new(50.0)?);
/// assert_eq!(format!("{model:?}"), "max(Tokens { per_token: 1.0 }, PerSample { cost: 50.0 })");
/// assert_eq!(model.cost(&[&Sample::text_only(80)]).total(), 80.0);
/// assert_eq!(model.cost(&[&Sample::text_only(20)]).total(), 50.0);
/// # Ok::<(), microbatch::Error>(())
/// ```
#[derive(Clone, Copy, PartialEq)]
#[must_use = "cost models do nothing unless evaluated"]
pub struct Max<A, B> {
    pub(super) a: A,
    pub(super) b: B,
}

impl<A, B> Max<A, B> {
    pub(crate) fn new(a: A, b: B) -> Self {
        Max { a, b }
    }

    /// The two sides.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{CostModel, PerSample, Tokens};
    ///
    /// let model = Tokens::new(1.0)?.max(PerSample::new(50.0)?);
    /// let (tokens, per_sample) = model.sides();
    /// assert_eq!((tokens.per_token(), per_sample.cost_per_sample()), (1.0, 50.0));
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    pub fn sides(&self) -> (&A, &B) {
        (&self.a, &self.b)
    }
}

impl<A: fmt::Debug, B: fmt::Debug> fmt::Debug for Max<A, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if f.alternate() {
            write!(f, "max({:#?}, {:#?})", self.a, self.b)
        } else {
            write!(f, "max({:?}, {:?})", self.a, self.b)
        }
    }
}

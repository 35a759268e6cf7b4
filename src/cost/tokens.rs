//! Linear terms of the language model: cost per token, fixed cost per sample
//! and fixed cost per group (micro-step or packed sequence).

use super::combinator::impl_add;
use super::{coefficient, f, Additive, CostModel, Incremental, Phases, Sample};
use crate::error::Error;

/// `per_token * sum(T)`, in the language phase, where `T` is a sample's
/// length in the LLM (text + image tokens).
///
/// The linear part of every transformer: projections, MLP, norms and the
/// output layer, `6 * N` FLOPs per token for a model of `N` non-embedding
/// parameters trained forward and backward.
///
/// [`Additive`] and [`Incremental`] (state: the token sum, exact in `u64`).
///
/// # Examples
///
/// ```
/// use microbatch::cost::{CostModel, Image, Sample, Tokens};
///
/// let model = Tokens::new(2.0)?;
/// let group = [Sample::text_only(10), Sample::new(5, [Image::new(20)])];
/// assert_eq!(model.cost(&group).language, 70.0);
/// assert_eq!(model.per_token(), 2.0);
/// assert!(Tokens::new(f64::NAN).is_err());
/// # Ok::<(), microbatch::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
#[must_use = "cost models do nothing unless evaluated"]
pub struct Tokens {
    per_token: f64,
}

impl Tokens {
    /// A cost of `per_token` per LLM token.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidCoefficient`] naming `per_token` if it is NaN,
    /// infinite or negative.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{CostModel, Sample, Tokens};
    /// use microbatch::Error;
    ///
    /// let model = Tokens::new(0.5)?;
    /// assert_eq!(model.cost(&[Sample::text_only(100)]).language, 50.0);
    /// assert!(matches!(Tokens::new(-1.0), Err(Error::InvalidCoefficient { name: "per_token", .. })));
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    pub fn new(per_token: f64) -> Result<Self, Error> {
        Ok(Tokens {
            per_token: coefficient("per_token", per_token)?,
        })
    }

    /// The cost per token.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::Tokens;
    ///
    /// assert_eq!(Tokens::new(6.0 * 7e9)?.per_token(), 4.2e10);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn per_token(&self) -> f64 {
        self.per_token
    }
}

impl CostModel for Tokens {
    fn cost(&self, group: &[Sample]) -> Phases {
        self.evaluate(&self.state_of(group))
    }
}

impl Additive for Tokens {
    #[inline]
    fn sample_cost(&self, sample: &Sample) -> Phases {
        Phases::new(0.0, self.per_token * sample.tokens() as f64)
    }
}

impl Incremental for Tokens {
    /// The token sum.
    type State = u64;
    #[inline]
    fn empty(&self) -> u64 {
        0
    }
    #[inline]
    fn insert(&self, state: &mut u64, sample: &Sample) {
        *state = state.saturating_add(sample.tokens());
    }
    #[inline]
    fn remove(&self, state: &mut u64, sample: &Sample) {
        *state = state.saturating_sub(sample.tokens());
    }
    #[inline]
    fn evaluate(&self, state: &u64) -> Phases {
        Phases::new(0.0, self.per_token * f(u128::from(*state)))
    }
}

impl_add!(Tokens);

/// `cost * n`, in the language phase, for a group of `n` samples: a fixed
/// overhead per sample (kernel launches per document, data collation, loss
/// bookkeeping).
///
/// [`Additive`] and [`Incremental`] (state: the sample count). Place it in
/// another phase with [`CostModel::in_phase`].
///
/// # Examples
///
/// ```
/// use microbatch::cost::{CostModel, PerSample, Sample};
///
/// let model = PerSample::new(0.25)?;
/// assert_eq!(model.cost(&[Sample::text_only(1), Sample::text_only(9)]).language, 0.5);
/// assert!(PerSample::new(-1.0).is_err());
/// # Ok::<(), microbatch::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
#[must_use = "cost models do nothing unless evaluated"]
pub struct PerSample {
    cost: f64,
}

impl PerSample {
    /// A cost of `cost` per sample.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidCoefficient`] naming `cost` if it is NaN, infinite or
    /// negative.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{CostModel, PerSample, Sample};
    /// use microbatch::Error;
    ///
    /// let model = PerSample::new(0.1)?;
    /// assert_eq!(model.cost(&vec![Sample::text_only(5); 3]).language, 0.1 * 3.0);
    /// assert!(matches!(PerSample::new(f64::INFINITY), Err(Error::InvalidCoefficient { name: "cost", .. })));
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    pub fn new(cost: f64) -> Result<Self, Error> {
        Ok(PerSample {
            cost: coefficient("cost", cost)?,
        })
    }

    /// The cost per sample.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::PerSample;
    ///
    /// assert_eq!(PerSample::new(0.25)?.cost_per_sample(), 0.25);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn cost_per_sample(&self) -> f64 {
        self.cost
    }
}

impl CostModel for PerSample {
    #[inline]
    fn cost(&self, group: &[Sample]) -> Phases {
        Phases::new(0.0, self.cost * group.len() as f64)
    }
}

impl Additive for PerSample {
    #[inline]
    fn sample_cost(&self, _sample: &Sample) -> Phases {
        Phases::new(0.0, self.cost)
    }
}

impl Incremental for PerSample {
    /// The sample count.
    type State = usize;
    #[inline]
    fn empty(&self) -> usize {
        0
    }
    #[inline]
    fn insert(&self, state: &mut usize, _sample: &Sample) {
        *state = state.saturating_add(1);
    }
    #[inline]
    fn remove(&self, state: &mut usize, _sample: &Sample) {
        *state = state.saturating_sub(1);
    }
    #[inline]
    fn evaluate(&self, state: &usize) -> Phases {
        Phases::new(0.0, self.cost * *state as f64)
    }
}

impl_add!(PerSample);

/// A fixed `cost` per non-empty group, in the language phase: the overhead of
/// one micro-step (optimizer-free forward/backward launch, FSDP parameter
/// gathers) or of one packed sequence. The empty group costs nothing.
///
/// Not [`Additive`]; [`Incremental`] (state: the sample count).
///
/// # Examples
///
/// ```
/// use microbatch::cost::{CostModel, PerGroup, Sample};
///
/// let model = PerGroup::new(0.3)?;
/// assert_eq!(model.cost(&[]).language, 0.0);
/// assert_eq!(model.cost(&[Sample::text_only(1), Sample::text_only(2)]).language, 0.3);
/// # Ok::<(), microbatch::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
#[must_use = "cost models do nothing unless evaluated"]
pub struct PerGroup {
    cost: f64,
}

impl PerGroup {
    /// A cost of `cost` per non-empty group.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidCoefficient`] naming `cost` if it is NaN, infinite or
    /// negative.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{CostModel, PerGroup, Sample};
    /// use microbatch::Error;
    ///
    /// let model = PerGroup::new(0.3)?;
    /// assert_eq!(model.cost(&vec![Sample::text_only(5); 4]).language, 0.3); // once, not per sample
    /// assert!(matches!(PerGroup::new(f64::NAN), Err(Error::InvalidCoefficient { name: "cost", .. })));
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    pub fn new(cost: f64) -> Result<Self, Error> {
        Ok(PerGroup {
            cost: coefficient("cost", cost)?,
        })
    }

    /// The cost per non-empty group.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::PerGroup;
    ///
    /// assert_eq!(PerGroup::new(0.3)?.cost_per_group(), 0.3);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn cost_per_group(&self) -> f64 {
        self.cost
    }
}

impl CostModel for PerGroup {
    #[inline]
    fn cost(&self, group: &[Sample]) -> Phases {
        self.evaluate(&group.len())
    }
}

impl Incremental for PerGroup {
    /// The sample count.
    type State = usize;
    #[inline]
    fn empty(&self) -> usize {
        0
    }
    #[inline]
    fn insert(&self, state: &mut usize, _sample: &Sample) {
        *state = state.saturating_add(1);
    }
    #[inline]
    fn remove(&self, state: &mut usize, _sample: &Sample) {
        *state = state.saturating_sub(1);
    }
    #[inline]
    fn evaluate(&self, state: &usize) -> Phases {
        Phases::new(0.0, if *state > 0 { self.cost } else { 0.0 })
    }
}

impl_add!(PerGroup);

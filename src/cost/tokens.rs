//! Linear terms of the language model: cost per token, fixed cost per sample
//! and fixed cost per group (micro-step or packed sequence).

use super::{coefficient, f, impl_summed, GroupFloor, Phases};
use crate::error::Error;

/// `per_token * sum(T)`, in the language phase, where `T` is a sample's
/// length in the LLM (text + image tokens).
///
/// The linear part of every transformer: projections, MLP, norms and the
/// output layer, `6 * N` FLOPs per token for a model of `N` non-embedding
/// parameters trained forward and backward.
///
/// [`Incremental`](super::Incremental) (state: the token sum, exact in `u64`).
///
/// # Examples
///
/// ```
/// use microbatch::cost::{CostModel, Image, Sample, Tokens};
///
/// let model = Tokens::new(2.0)?;
/// let group = [&Sample::text_only(10), &Sample::new(5, [Image::new(20)])];
/// assert_eq!(model.cost(&group).language, 70.0);
/// assert_eq!(model.per_token(), 2.0);
/// assert!(Tokens::new(f64::NAN).is_err());
/// # Ok::<(), microbatch::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
#[must_use = "cost models do nothing unless evaluated"]
pub struct Tokens {
    pub(super) per_token: f64,
}

impl Tokens {
    /// A cost of `per_token` per LLM token.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] at a [coefficient](crate::Locator::Coefficient)
    /// naming `per_token` if it is NaN, infinite or negative.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{CostModel, Sample, Tokens};
    /// use microbatch::{Error, Locator};
    ///
    /// let model = Tokens::new(0.5)?;
    /// assert_eq!(model.cost(&[&Sample::text_only(100)]).language, 50.0);
    /// assert!(matches!(Tokens::new(-1.0), Err(Error::Invalid { at: Locator::Coefficient { name: "per_token" }, .. })));
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

// State: the token sum, exact in `u64`.
// Floor: additive, the cost alone.
impl_summed!(
    Tokens,
    u64,
    |_, s| s.tokens(),
    |m, &l| Phases::new(0.0, m.per_token * f(u128::from(l))),
    alone
);

/// `cost * n`, in the language phase, for a group of `n` samples: a fixed
/// overhead per sample (kernel launches per document, data collation, loss
/// bookkeeping).
///
/// [`Incremental`](super::Incremental) (state: the sample count). Place it
/// in another phase with [`CostModel::in_phase`](super::CostModel::in_phase).
///
/// # Examples
///
/// ```
/// use microbatch::cost::{CostModel, PerSample, Sample};
///
/// let model = PerSample::new(0.25)?;
/// assert_eq!(model.cost(&[&Sample::text_only(1), &Sample::text_only(9)]).language, 0.5);
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
    /// [`Error::Invalid`] at a [coefficient](crate::Locator::Coefficient)
    /// naming `cost` if it is NaN, infinite or negative.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{CostModel, PerSample, Sample};
    /// use microbatch::{Error, Locator};
    ///
    /// let model = PerSample::new(0.1)?;
    /// assert_eq!(model.cost(&[&Sample::text_only(5); 3]).language, 0.1 * 3.0);
    /// assert!(matches!(PerSample::new(f64::INFINITY), Err(Error::Invalid { at: Locator::Coefficient { name: "cost" }, .. })));
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

// State: the sample count.
// Floor: additive, the cost alone.
impl_summed!(
    PerSample,
    u64,
    |_, _| 1,
    |m, &n| Phases::new(0.0, m.cost * n as f64),
    alone
);

/// A fixed `cost` per non-empty group, in the language phase: the overhead of
/// one micro-step (optimizer-free forward/backward launch, FSDP parameter
/// gathers) or of one packed sequence. The empty group costs nothing.
///
/// [`Incremental`](super::Incremental) (state: the sample count).
///
/// # Examples
///
/// ```
/// use microbatch::cost::{CostModel, PerGroup, Sample};
///
/// let model = PerGroup::new(0.3)?;
/// assert_eq!(model.cost(&[]).language, 0.0);
/// assert_eq!(model.cost(&[&Sample::text_only(1), &Sample::text_only(2)]).language, 0.3);
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
    /// [`Error::Invalid`] at a [coefficient](crate::Locator::Coefficient)
    /// naming `cost` if it is NaN, infinite or negative.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{CostModel, PerGroup, Sample};
    /// use microbatch::{Error, Locator};
    ///
    /// let model = PerGroup::new(0.3)?;
    /// assert_eq!(model.cost(&[&Sample::text_only(5); 4]).language, 0.3); // once, not per sample
    /// assert!(matches!(PerGroup::new(f64::NAN), Err(Error::Invalid { at: Locator::Coefficient { name: "cost" }, .. })));
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

// State: the sample count.
// Floor: zero. The cost is paid once per group, so no sample has a share
// of it that every group containing the sample pays on top of the others'.
// Group floor: the cost, which every non-empty group pays.
impl_summed!(
    PerGroup,
    u64,
    |_, _| 1,
    |m, &n| Phases::new(0.0, if n > 0 { m.cost } else { 0.0 }),
    |_, _| Phases::ZERO,
    group_floor: |m| GroupFloor::new(Phases::new(0.0, m.cost), Phases::ZERO)
);

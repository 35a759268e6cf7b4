//! The parts of [`Error::Invalid`](super::Error::Invalid): where the rejected
//! value is ([`Locator`]) and what is wrong with it ([`InvalidReason`]).

use core::fmt;

use crate::phase::Phase;

/// Where the value rejected by [`Error::Invalid`](super::Error::Invalid) is:
/// which input, and the item, dimension, parameter, row, phase or sample in
/// it.
///
/// The locator also holds what the value is judged against, where a message
/// needs it: a floor's cost, an origin's ranks, a setting's requirement.
///
/// The locator also decides the error's [`kind`](super::Error::kind): a
/// [`Capacity`](Locator::Capacity) is [`ErrorKind::Capacity`](super::ErrorKind::Capacity),
/// a [`Measurement`](Locator::Measurement) [`ErrorKind::Fit`](super::ErrorKind::Fit),
/// a [`Setting`](Locator::Setting) [`ErrorKind::Setting`](super::ErrorKind::Setting),
/// every other [`ErrorKind::InvalidValue`](super::ErrorKind::InvalidValue).
///
/// The enum is `#[non_exhaustive]`: a match needs a `_` arm, which a
/// locator added in a minor release reaches.
///
/// # Examples
///
/// ```
/// use microbatch::cost::Tokens;
/// use microbatch::{Error, ErrorKind, InvalidReason, Locator};
///
/// let err = Tokens::new(f64::NAN).unwrap_err();
/// let Error::Invalid { at, reason, .. } = &err else { panic!() };
/// assert_eq!(*at, Locator::Coefficient { name: "per_token" });
/// assert_eq!(*reason, InvalidReason::NaN);
/// assert_eq!(err.kind(), ErrorKind::InvalidValue);
///
/// // Branch on where the value is, and on what is wrong with it.
/// let fix = match (at, reason) {
///     (Locator::Setting { name, requirement }, _) => format!("set `{name}` to {requirement}"),
///     (Locator::Coefficient { name }, InvalidReason::NaN) => format!("`{name}` is NaN"),
///     _ => err.to_string(),
/// };
/// assert_eq!(fix, "`per_token` is NaN");
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub enum Locator {
    /// A float capacity (or cap) of a packer or partitioner, in dimension
    /// `dim`.
    Capacity {
        /// The dimension.
        dim: usize,
    },
    /// A float size of an item of a packer or partitioner.
    Size {
        /// The item's index in the input.
        index: usize,
        /// The dimension.
        dim: usize,
    },
    /// A cost model coefficient (or a factor, a tolerance, a sample's given
    /// cost), named as in the constructor's signature.
    Coefficient {
        /// The parameter's name.
        name: &'static str,
    },
    /// A value of a calibration row: a feature, or the measured time.
    Measurement {
        /// The row's index.
        row: usize,
        /// The feature's index, or `None` for the measured time.
        feature: Option<usize>,
    },
    /// A measured time given to a [`Calibrator`](crate::cost::Calibrator).
    Timing {
        /// The phase whose time it is, or `None` for a whole
        /// ([`Timing::Total`](crate::cost::Timing::Total)) time.
        phase: Option<Phase>,
    },
    /// A setting: a planner setting (zero ranks, a zero sequence length or
    /// cap, zero micro-steps, more samples than the planner indexes), a
    /// model shape parameter (zero heads, a zero tile size), a calibration's
    /// feature count, or a packing capacity with more than 65536 dimensions
    /// (`capacity dimensions`). Its reason is
    /// [`InvalidReason::OutOfRange`].
    Setting {
        /// The setting, as named by the builder method, the shape's field
        /// or the constructor's parameter.
        name: &'static str,
        /// What the setting must be, for example "at least 1".
        requirement: &'static str,
    },
    /// The cost a cost model returned for a sample alone in a phase (a
    /// closure or a model of your own, or a built-in model whose
    /// coefficient times the sample's size exceeds `f64::MAX`).
    Cost {
        /// The sample's id.
        id: u64,
        /// The phase.
        phase: Phase,
    },
    /// A cost model's [`floor`](crate::cost::CostModel::floor) for a sample
    /// in a phase (a model of your own that implements `floor`): it must be
    /// a share of every group's cost, so at most the sample's cost alone.
    Floor {
        /// The sample's id.
        id: u64,
        /// The phase.
        phase: Phase,
        /// The sample's cost alone in `phase`: the most its floor may be.
        cost: f64,
    },
    /// A part of a cost model's
    /// [`group_floor`](crate::cost::CostModel::group_floor) in a phase (a
    /// model of your own that implements it): both parts must be finite and
    /// non-negative.
    GroupFloor {
        /// The part, named as its field of
        /// [`GroupFloor`](crate::cost::GroupFloor): `"per_group"` or
        /// `"per_token_pair"`.
        part: &'static str,
        /// The phase.
        phase: Phase,
    },
    /// A sample's origin rank
    /// ([`StepSample::with_origin`](crate::plan::StepSample::with_origin)).
    /// Its reason is [`InvalidReason::NotARank`].
    Origin {
        /// The sample's id (the smallest such id).
        id: u64,
        /// The planner's ranks `R`: origins are `0` to `R - 1`.
        ranks: usize,
    },
}

/// Why a value was rejected ([`Error::Invalid`](super::Error::Invalid)).
///
/// The enum is `#[non_exhaustive]`: a match needs a `_` arm, which a reason
/// added in a minor release reaches.
///
/// # Examples
///
/// ```
/// use microbatch::InvalidReason;
///
/// assert_eq!(InvalidReason::Negative.to_string(), "negative values are not sizes");
/// assert_eq!(InvalidReason::OutOfRange.to_string(), "out of its range");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub enum InvalidReason {
    /// The value is NaN.
    NaN,
    /// The value is below zero.
    Negative,
    /// The value is infinite.
    Infinite,
    /// The value is zero where it must be positive (a calibration row's
    /// time).
    Zero,
    /// A floor above the sample's cost alone
    /// ([`Locator::Floor`]'s `cost`).
    AboveCost,
    /// An origin rank not below the planner's ranks
    /// ([`Locator::Origin`]'s `ranks`).
    NotARank,
    /// A setting out of its range ([`Locator::Setting`]'s `requirement`
    /// says what it must be).
    OutOfRange,
}

impl InvalidReason {
    /// What makes a float `value` invalid as a size, a cost, a coefficient
    /// or a time: NaN, infinite or negative; `None` for a finite
    /// non-negative value.
    pub(crate) fn of_float(value: f64) -> Option<InvalidReason> {
        if value.is_nan() {
            Some(InvalidReason::NaN)
        } else if value.is_infinite() {
            Some(InvalidReason::Infinite)
        } else if value < 0.0 {
            Some(InvalidReason::Negative)
        } else {
            None
        }
    }

    /// The reason as an adjective of the value: "NaN", "negative",
    /// "infinite", "zero" (for the messages of coefficients and times).
    pub(super) const fn adjective(self) -> &'static str {
        match self {
            InvalidReason::NaN => "NaN",
            InvalidReason::Negative => "negative",
            InvalidReason::Infinite => "infinite",
            InvalidReason::Zero => "zero",
            InvalidReason::AboveCost => "above the cost",
            InvalidReason::NotARank => "not a rank",
            InvalidReason::OutOfRange => "out of range",
        }
    }
}

impl fmt::Display for InvalidReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            InvalidReason::NaN => "NaN is not a size",
            InvalidReason::Negative => "negative values are not sizes",
            InvalidReason::Infinite => "infinite values are not sizes",
            InvalidReason::Zero => "zero is not positive",
            InvalidReason::AboveCost => "a floor is at most the cost alone",
            InvalidReason::NotARank => "not below the ranks",
            InvalidReason::OutOfRange => "out of its range",
        })
    }
}

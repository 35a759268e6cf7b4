//! The crate's error type: [`Error`], its [`ErrorKind`] (what a caller
//! branches on), and the values it names ([`Scalar`], [`Locator`],
//! [`InvalidReason`], [`Oversize`]).
//!
//! Every fallible routine of the crate validates its whole input before it
//! does any work and returns an [`Error`] that names the offending item (its
//! index in the input, the dimension and the value), so that a caller can fix
//! the input without a debugger. Nothing is dropped silently and no input
//! makes the crate panic.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use crate::phase::Phase;

pub use self::invalid::{InvalidReason, Locator};

mod cost;
mod invalid;
mod items;
mod partition;
mod plan;
mod setting;

/// A size, weight or capacity as it appears in an error message.
///
/// # Examples
///
/// ```
/// use microbatch::Scalar;
///
/// assert_eq!(Scalar::Int(16384).to_string(), "16384");
/// assert_eq!(Scalar::Float(0.5).to_string(), "0.5");
/// assert_eq!(Scalar::Wide(1 << 64).to_string(), "18446744073709551616");
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub enum Scalar {
    /// An unsigned integer value.
    Int(u64),
    /// A floating-point value.
    Float(f64),
    /// An integer sum above `u64::MAX` (sums of `u64` sizes are `u128`).
    Wide(u128),
}

impl fmt::Display for Scalar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scalar::Int(v) => write!(f, "{v}"),
            Scalar::Float(v) => write!(f, "{}", Real(*v)),
            Scalar::Wide(v) => write!(f, "{v}"),
        }
    }
}

/// An `f64` as a message prints it: the shortest digits that read back to
/// the same value, in scientific notation outside `1e-4 <= |x| < 1e15` (where
/// `{}` alone would print up to 330 digits).
pub(crate) struct Real(pub(crate) f64);

impl fmt::Display for Real {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let x = self.0;
        let magnitude = if x < 0.0 { -x } else { x };
        if x.is_finite() && x != 0.0 && !(1e-4..1e15).contains(&magnitude) {
            write!(f, "{x:e}")
        } else {
            write!(f, "{x}")
        }
    }
}

/// One item that exceeds a capacity or cap in one dimension, as listed by
/// [`Error::Oversize`].
///
/// The packers and partitioners name the item by its index in the input and
/// the dimension by its number; the planner also gives the sample's
/// [`id`](Oversize::id) and the limit's [`name`](Oversize::name)
/// (`"tokens"`, `"units"` or `"images"`).
///
/// # Examples
///
/// ```
/// use microbatch::pack::first_fit_decreasing;
/// use microbatch::{Error, Scalar};
///
/// let err = first_fit_decreasing(&[5u32, 20, 7], 10).unwrap_err();
/// let Error::Oversize { items } = err else { panic!() };
/// assert_eq!((items[0].index, items[0].size, items[0].capacity), (1, Scalar::Int(20), Scalar::Int(10)));
/// assert_eq!((items[0].id, items[0].name), (None, None));
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct Oversize {
    /// The item's index in the input.
    pub index: usize,
    /// The item's id, for the planner's samples.
    pub id: Option<u64>,
    /// The dimension in which it does not fit.
    pub dim: usize,
    /// The dimension's name, where it has one: `"tokens"`, `"units"` or
    /// `"images"` for the planner.
    pub name: Option<&'static str>,
    /// Its size in that dimension.
    pub size: Scalar,
    /// The capacity (or cap) in that dimension.
    pub capacity: Scalar,
}

/// The error of every fallible routine in the crate.
///
/// Each variant names what is wrong with the input: the item index, the
/// dimension, the value. The enum is `#[non_exhaustive]`: new variants may be
/// added in minor releases.
///
/// # Examples
///
/// ```
/// use microbatch::pack::first_fit_decreasing;
/// use microbatch::Error;
///
/// let err = first_fit_decreasing(&[3u32, 4], 0).unwrap_err();
/// assert_eq!(err, Error::ZeroCapacity { dim: 0 });
/// assert_eq!(
///     err.to_string(),
///     "the capacity is zero in dimension 0; every dimension of a capacity must be positive"
/// );
/// ```
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Error {
    /// The capacity (or cap) or the items have no dimension at all: an item
    /// or capacity needs at least one size.
    NoDimensions,
    /// The capacity is zero in dimension `dim`. No item could ever be placed
    /// in such a bin, and a zero-size item alone does not make a bin useful.
    ZeroCapacity {
        /// The dimension.
        dim: usize,
    },
    /// An item has a different number of dimensions than the capacity.
    DimensionMismatch {
        /// The item's index in the input.
        index: usize,
        /// The capacity's number of dimensions.
        expected: usize,
        /// The item's number of dimensions.
        found: usize,
    },
    /// A value of the input is invalid: NaN, negative, infinite, zero or
    /// out of its range. [`at`](Locator) says where it is (a capacity, an
    /// item's size, a coefficient, a calibration value, a measured time, a
    /// setting, a sample's cost, floor or origin), `reason` what is wrong
    /// with it. Its [`kind`](Error::kind) follows the locator (see
    /// [`Locator`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::pack::first_fit_decreasing;
    /// use microbatch::{Error, ErrorKind, InvalidReason, Locator, NotNan, Scalar};
    ///
    /// let sizes = [NotNan::new(1.0).unwrap(), NotNan::new(-2.0).unwrap()];
    /// let err = first_fit_decreasing(&sizes, NotNan::new(4.0).unwrap()).unwrap_err();
    /// assert_eq!(
    ///     err,
    ///     Error::Invalid {
    ///         at: Locator::Size { index: 1, dim: 0 },
    ///         value: Scalar::Float(-2.0),
    ///         reason: InvalidReason::Negative,
    ///     }
    /// );
    /// assert_eq!(err.kind(), ErrorKind::InvalidValue);
    /// assert_eq!(
    ///     err.to_string(),
    ///     "item 1 has size -2 in dimension 0: negative values are not sizes; \
    ///      sizes must be finite and non-negative"
    /// );
    /// ```
    Invalid {
        /// Where the value is.
        at: Locator,
        /// The rejected value ([`Scalar::Float`] for a float,
        /// [`Scalar::Int`] for a setting or an origin rank).
        value: Scalar,
        /// Why it was rejected.
        reason: InvalidReason,
    },
    /// Items larger than the capacity: every (item, dimension) pair that does
    /// not fit, in input order (in id order for the planner's samples, which
    /// a packed sequence's length or caps cannot hold).
    Oversize {
        /// The offending items.
        items: Vec<Oversize>,
    },
    /// A calibration has too few rows to fit and judge its coefficients:
    /// it needs more rows than features.
    TooFewRows {
        /// The rows given.
        rows: usize,
        /// The features per row.
        features: usize,
    },
    /// A calibration row has a different number of features than the first.
    RowLength {
        /// The row's index.
        row: usize,
        /// The first row's number of features.
        expected: usize,
        /// This row's number of features.
        found: usize,
    },
    /// A calibration's fitted coefficient of a feature is beyond the range
    /// of `f64` (above `f64::MAX`, about 1.8e308, or below the smallest
    /// normal `f64`, about 2.2e-308): the feature's values are too small
    /// (or too large) for the times. Measuring the feature or the times in
    /// another unit fixes it.
    CoefficientRange {
        /// The feature's index.
        feature: usize,
        /// The row with the largest feature-to-time ratio of the feature.
        row: usize,
        /// The feature's value in that row.
        value: f64,
        /// The time of that row.
        time: f64,
        /// The coefficient's decimal exponent: about `10^exponent`.
        exponent: i32,
    },
    /// The fitted coefficients predict a time beyond `f64::MAX` for a
    /// calibration row: its time is so close to `f64::MAX` that the fit's
    /// rounding overflows.
    PredictionOverflow {
        /// The row's index.
        row: usize,
        /// Its measured time.
        time: f64,
    },
    /// A calibration feature is zero in every row or a linear combination
    /// of the features before it (for example, rows that all have the same
    /// features), so its coefficient cannot be told apart.
    RankDeficient {
        /// The feature's index.
        feature: usize,
    },
    /// Float sizes whose sum is beyond `f64::MAX` (about 1.8e308), in one
    /// dimension or over all of them, so that no part's sum could be told
    /// from another's.
    SizeOverflow {
        /// The dimension whose sum overflows, or `None` for the sum over
        /// dimensions.
        dim: Option<usize>,
    },
    /// A partition handed in for refinement under equal counts does not
    /// have equal counts: refinement keeps every part's count, so it cannot
    /// meet the constraint from there.
    UnequalCounts {
        /// The first part whose count is off.
        part: usize,
        /// Its number of items.
        items: usize,
        /// The fewest items a part may have (`floor(n / k)`); the most is
        /// one more, or the same when `k` divides `n`.
        fewest: usize,
    },
    /// A partition into zero parts was asked for.
    ZeroParts,
    /// More parts than items, so some part would be empty, and empty parts
    /// were not allowed (a rank with no sample hangs a collective).
    TooManyParts {
        /// The number of parts asked for.
        parts: usize,
        /// The number of items.
        items: usize,
    },
    /// No partition was found that keeps every part within the per-part cap.
    CapExceeded {
        /// The number of parts asked for.
        parts: usize,
        /// The first dimension in which the best partition found exceeds the cap.
        dim: usize,
        /// The cap in that dimension.
        cap: Scalar,
        /// The largest part in that dimension of the best partition found: a
        /// cap that would work with `parts` parts ([`Scalar::Wide`] for an
        /// integer sum above `u64::MAX`).
        best: Scalar,
        /// Whether the constraint is proven infeasible (by a bound or by an
        /// exhausted exact search), rather than only not met by the heuristics.
        proven: bool,
        /// The smallest part count, found by binary search with the same
        /// heuristics, that meets the cap; `None` when none was searched.
        parts_needed: Option<usize>,
    },
    /// A partition handed in for refinement does not cover the items: it
    /// lists an index out of range (`index >= items`), an item twice
    /// (`times > 1`) or misses one (`times == 0`).
    NotAPartition {
        /// The number of items.
        items: usize,
        /// The first offending item index.
        index: usize,
        /// How many times the index appears in the partition.
        times: usize,
    },
    /// A step has fewer samples than ranks: some rank would get no work and
    /// hang the collective.
    TooFewSamples {
        /// The samples of the step.
        samples: usize,
        /// The data-parallel ranks.
        ranks: usize,
    },
    /// A group of samples that must stay together
    /// ([`StepSample::with_group`](crate::plan::StepSample::with_group))
    /// cannot: under [`GroupScope::MicroBatch`](crate::plan::GroupScope::MicroBatch)
    /// its samples together exceed one packed sequence's length or a cap
    /// (`dim` is `tokens`, `units` or `images`); under
    /// [`GroupScope::Rank`](crate::plan::GroupScope::Rank) it needs more
    /// packed sequences than one rank holds (`dim` is `sequences`, the cap
    /// `micro_steps * sequences_per_micro_step`).
    GroupTooLarge {
        /// The group's id.
        group: u64,
        /// The samples of the group.
        samples: usize,
        /// The dimension over its cap: `tokens`, `units`, `images` or
        /// `sequences`.
        dim: &'static str,
        /// The group's size in `dim`: its samples' sum, or the sequences it
        /// needs.
        size: u64,
        /// The cap it exceeds.
        cap: u64,
    },
    /// Two samples of a step have the same id.
    DuplicateId {
        /// The repeated id.
        id: u64,
    },
    /// The given number of micro-steps cannot hold the step's samples.
    MicroStepsInfeasible {
        /// The micro-steps asked for.
        given: usize,
        /// The smallest number of micro-steps the planner can fit the
        /// batch into.
        smallest: usize,
    },
    /// The costs of a step's samples, each finite, reach beyond `f64::MAX`
    /// (about 1.8e308) together: summed over the step, over a rank, or as
    /// the cost of one packed sequence (a model that grows faster than the
    /// sum, like full attention). No step time or bound could be computed.
    CostOverflow {
        /// The phase whose cost overflows, or `None` for the sum over phases.
        phase: Option<Phase>,
        /// The samples whose cost together overflows: the step's, or one
        /// sequence's.
        samples: usize,
    },
    /// A sample counts more loss tokens than it has tokens: loss tokens are
    /// positions of the packed sequence that carry loss, so a sample has at
    /// most as many as its text and image tokens together.
    LossTokens {
        /// The sample's id.
        id: u64,
        /// The loss tokens it was given.
        loss_tokens: u64,
        /// Its tokens (text and image).
        tokens: u64,
    },
    /// A plan and a list of samples do not match: a sample id of the plan is
    /// not among the samples, or the counts differ.
    PlanMismatch {
        /// The first plan id missing from the samples, if any.
        id: Option<u64>,
        /// The samples in the plan.
        planned: usize,
        /// The samples given.
        given: usize,
    },
    /// The bytes of a step's samples with an origin
    /// ([`StepSample::with_bytes`](crate::plan::StepSample::with_bytes))
    /// sum beyond `u64::MAX`: the exchange's traffic could not be counted
    /// exactly.
    BytesOverflow {
        /// The sample (in id order) at which the sum overflows.
        id: u64,
    },
    /// A name (of a cost model preset, a scenario or a sync model) that is
    /// not known.
    UnknownName {
        /// What the name is of: `"cost model preset"`, `"scenario"`, `"sync
        /// model"`.
        kind: &'static str,
        /// The name asked for.
        name: String,
        /// The known names.
        known: &'static [&'static str],
    },
}

/// What kind of failure an [`Error`] is ([`Error::kind`]): the groups a
/// caller branches on, each a different fix. Every variant of [`Error`]
/// belongs to exactly one kind; the Python binding raises one exception
/// class a kind (`microbatch.errors.CapacityError`, ...).
///
/// The enum is `#[non_exhaustive]`: a match needs a `_` arm, which a kind
/// added in a minor release reaches.
///
/// # Examples
///
/// ```
/// use microbatch::pack::first_fit_decreasing;
/// use microbatch::ErrorKind;
///
/// let err = first_fit_decreasing(&[5u32, 20], 10).unwrap_err();
/// assert_eq!(err.kind(), ErrorKind::Oversize);
/// let fix = match err.kind() {
///     ErrorKind::Oversize | ErrorKind::Infeasible => "a larger capacity or fewer items",
///     ErrorKind::Setting | ErrorKind::Capacity => "another setting",
///     _ => "other input",
/// };
/// assert_eq!(fix, "a larger capacity or fewer items");
/// assert_eq!(ErrorKind::Oversize.to_string(), "oversize");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub enum ErrorKind {
    /// The capacity (or cap) is unusable, or an item does not match its
    /// dimensions: [`Error::NoDimensions`], [`Error::ZeroCapacity`],
    /// [`Error::DimensionMismatch`], and [`Error::Invalid`] at a
    /// [`Locator::Capacity`].
    Capacity,
    /// A value of the input is invalid (NaN, negative, infinite, out of
    /// range): [`Error::Invalid`] at a size, coefficient, measured time,
    /// cost, floor, group floor or origin ([`Locator::Size`],
    /// [`Locator::Coefficient`], [`Locator::Timing`], [`Locator::Cost`],
    /// [`Locator::Floor`], [`Locator::GroupFloor`], [`Locator::Origin`]),
    /// [`Error::LossTokens`].
    InvalidValue,
    /// Items (or a group of samples) larger than what holds them:
    /// [`Error::Oversize`], [`Error::GroupTooLarge`].
    Oversize,
    /// A calibration cannot fit its rows: [`Error::TooFewRows`],
    /// [`Error::RowLength`], [`Error::Invalid`] at a
    /// [`Locator::Measurement`], [`Error::CoefficientRange`],
    /// [`Error::PredictionOverflow`], [`Error::RankDeficient`].
    Fit,
    /// Sums beyond the range of their type (give the values in a larger
    /// unit): [`Error::SizeOverflow`], [`Error::CostOverflow`],
    /// [`Error::BytesOverflow`].
    Limit,
    /// A setting or argument out of its range, or arguments that do not
    /// go together: [`Error::Invalid`] at a [`Locator::Setting`],
    /// [`Error::ZeroParts`], [`Error::TooManyParts`],
    /// [`Error::TooFewSamples`], [`Error::UnequalCounts`],
    /// [`Error::NotAPartition`], [`Error::PlanMismatch`],
    /// [`Error::UnknownName`].
    Setting,
    /// Valid input without a solution under the constraints:
    /// [`Error::CapExceeded`], [`Error::MicroStepsInfeasible`].
    Infeasible,
    /// Two samples of a step share an id: [`Error::DuplicateId`].
    DuplicateId,
}

impl ErrorKind {
    /// Every kind, in order.
    pub const ALL: [ErrorKind; 8] = [
        ErrorKind::Capacity,
        ErrorKind::InvalidValue,
        ErrorKind::Oversize,
        ErrorKind::Fit,
        ErrorKind::Limit,
        ErrorKind::Setting,
        ErrorKind::Infeasible,
        ErrorKind::DuplicateId,
    ];

    /// The kind's name in lower case with spaces: `"capacity"`, `"invalid
    /// value"`, `"oversize"`, `"fit"`, `"limit"`, `"setting"`,
    /// `"infeasible"`, `"duplicate id"` (also its `Display`).
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::ErrorKind;
    ///
    /// assert_eq!(ErrorKind::InvalidValue.name(), "invalid value");
    /// ```
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            ErrorKind::Capacity => "capacity",
            ErrorKind::InvalidValue => "invalid value",
            ErrorKind::Oversize => "oversize",
            ErrorKind::Fit => "fit",
            ErrorKind::Limit => "limit",
            ErrorKind::Setting => "setting",
            ErrorKind::Infeasible => "infeasible",
            ErrorKind::DuplicateId => "duplicate id",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Error {
    /// What kind of failure this is (see [`ErrorKind`]): the group a
    /// caller branches on, for example to retry with another setting
    /// ([`ErrorKind::Setting`]) or to drop an oversize sample
    /// ([`ErrorKind::Oversize`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::partition::lpt;
    /// use microbatch::{Error, ErrorKind};
    ///
    /// let err = lpt(&[3u32, 4], 0).unwrap_err();
    /// assert_eq!(err, Error::ZeroParts);
    /// assert_eq!(err.kind(), ErrorKind::Setting);
    /// ```
    #[must_use]
    pub fn kind(&self) -> ErrorKind {
        use ErrorKind as K;
        match self {
            Error::Invalid { at, .. } => match at {
                Locator::Capacity { .. } => K::Capacity,
                Locator::Measurement { .. } => K::Fit,
                Locator::Setting { .. } => K::Setting,
                Locator::Size { .. }
                | Locator::Coefficient { .. }
                | Locator::Timing { .. }
                | Locator::Cost { .. }
                | Locator::Floor { .. }
                | Locator::GroupFloor { .. }
                | Locator::Origin { .. } => K::InvalidValue,
            },
            Error::NoDimensions | Error::ZeroCapacity { .. } | Error::DimensionMismatch { .. } => {
                K::Capacity
            }
            Error::LossTokens { .. } => K::InvalidValue,
            Error::Oversize { .. } | Error::GroupTooLarge { .. } => K::Oversize,
            Error::TooFewRows { .. }
            | Error::RowLength { .. }
            | Error::CoefficientRange { .. }
            | Error::PredictionOverflow { .. }
            | Error::RankDeficient { .. } => K::Fit,
            Error::SizeOverflow { .. }
            | Error::CostOverflow { .. }
            | Error::BytesOverflow { .. } => K::Limit,
            Error::ZeroParts
            | Error::TooManyParts { .. }
            | Error::TooFewSamples { .. }
            | Error::UnequalCounts { .. }
            | Error::NotAPartition { .. }
            | Error::PlanMismatch { .. }
            | Error::UnknownName { .. } => K::Setting,
            Error::CapExceeded { .. } | Error::MicroStepsInfeasible { .. } => K::Infeasible,
            Error::DuplicateId { .. } => K::DuplicateId,
        }
    }
}

impl Error {
    /// [`Error::Invalid`] at the setting `name`: its `value` is out of
    /// range, and it must be `requirement` (for example "at least 1").
    pub(crate) const fn setting(
        name: &'static str,
        value: u64,
        requirement: &'static str,
    ) -> Error {
        Error::Invalid {
            at: Locator::Setting { name, requirement },
            value: Scalar::Int(value),
            reason: InvalidReason::OutOfRange,
        }
    }

    /// [`Error::Invalid`] at `at` for the float `value`, NaN, negative or
    /// infinite as `reason` says.
    pub(crate) const fn float(at: Locator, value: f64, reason: InvalidReason) -> Error {
        Error::Invalid {
            at,
            value: Scalar::Float(value),
            reason,
        }
    }
}

/// How many offending items [`Error::Oversize`] lists in its message.
const LISTED: usize = 8;

impl fmt::Display for Error {
    /// The message, written by the module of the variant's family
    /// (`error/items.rs`, `partition.rs`, `cost.rs`, `plan.rs`,
    /// `setting.rs`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Invalid { at, value, reason } => match at {
                Locator::Capacity { .. } | Locator::Size { .. } => {
                    items::invalid(*at, *value, *reason, f)
                }
                Locator::Coefficient { .. }
                | Locator::Measurement { .. }
                | Locator::Timing { .. }
                | Locator::Cost { .. }
                | Locator::Floor { .. }
                | Locator::GroupFloor { .. } => cost::invalid(*at, *value, *reason, f),
                Locator::Origin { .. } => plan::invalid(*at, *value, *reason, f),
                Locator::Setting { .. } => setting::invalid(*at, *value, *reason, f),
            },
            Error::NoDimensions
            | Error::ZeroCapacity { .. }
            | Error::DimensionMismatch { .. }
            | Error::Oversize { .. }
            | Error::SizeOverflow { .. } => items::fmt(self, f),
            Error::UnequalCounts { .. }
            | Error::ZeroParts
            | Error::TooManyParts { .. }
            | Error::CapExceeded { .. }
            | Error::NotAPartition { .. } => partition::fmt(self, f),
            Error::TooFewRows { .. }
            | Error::RowLength { .. }
            | Error::CoefficientRange { .. }
            | Error::PredictionOverflow { .. }
            | Error::RankDeficient { .. }
            | Error::CostOverflow { .. } => cost::fmt(self, f),
            Error::TooFewSamples { .. }
            | Error::GroupTooLarge { .. }
            | Error::DuplicateId { .. }
            | Error::MicroStepsInfeasible { .. }
            | Error::LossTokens { .. }
            | Error::PlanMismatch { .. }
            | Error::BytesOverflow { .. } => plan::fmt(self, f),
            Error::UnknownName { .. } => setting::fmt(self, f),
        }
    }
}

impl core::error::Error for Error {}

/// `Display` as the value's `name()`, and `FromStr` from that name, for the
/// enums chosen by name (presets, scenarios, sync models): `$ty` has
/// `ALL` and `name()`; any other name is [`Error::UnknownName`] of `$kind`,
/// whose message lists `$known`.
macro_rules! impl_named {
    ($ty:ty, $kind:literal, $known:expr) => {
        impl core::fmt::Display for $ty {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                f.write_str(self.name())
            }
        }

        impl core::str::FromStr for $ty {
            type Err = $crate::Error;

            /// The value with this name.
            ///
            /// # Errors
            ///
            /// [`Error::UnknownName`](crate::Error::UnknownName) for any
            /// other name; its message lists the known names.
            fn from_str(name: &str) -> Result<Self, $crate::Error> {
                <$ty>::ALL
                    .into_iter()
                    .find(|x| x.name() == name)
                    .ok_or_else(|| $crate::Error::UnknownName {
                        kind: $kind,
                        name: name.into(),
                        known: $known,
                    })
            }
        }
    };
}
pub(crate) use impl_named;

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    /// Every variant's kind, as the Python binding raised them before the
    /// taxonomy moved here (one exception class a kind).
    #[test]
    fn every_variant_has_its_kind() {
        use ErrorKind as K;
        let o = Oversize {
            index: 0,
            id: None,
            dim: 0,
            name: None,
            size: Scalar::Int(2),
            capacity: Scalar::Int(1),
        };
        let r = InvalidReason::NaN;
        let cases = [
            (Error::NoDimensions, K::Capacity),
            (Error::ZeroCapacity { dim: 0 }, K::Capacity),
            (
                Error::Invalid {
                    at: Locator::Capacity { dim: 0 },
                    value: Scalar::Float(-1.0),
                    reason: r,
                },
                K::Capacity,
            ),
            (
                Error::DimensionMismatch {
                    index: 0,
                    expected: 1,
                    found: 2,
                },
                K::Capacity,
            ),
            (
                Error::Invalid {
                    at: Locator::Size { index: 0, dim: 0 },
                    value: Scalar::Float(-1.0),
                    reason: r,
                },
                K::InvalidValue,
            ),
            (
                Error::Oversize {
                    items: alloc::vec![o],
                },
                K::Oversize,
            ),
            (
                Error::Invalid {
                    at: Locator::Coefficient { name: "a" },
                    value: Scalar::Float(-1.0),
                    reason: r,
                },
                K::InvalidValue,
            ),
            (
                Error::TooFewRows {
                    rows: 1,
                    features: 2,
                },
                K::Fit,
            ),
            (
                Error::RowLength {
                    row: 1,
                    expected: 1,
                    found: 2,
                },
                K::Fit,
            ),
            (
                Error::Invalid {
                    at: Locator::Measurement {
                        row: 0,
                        feature: None,
                    },
                    value: Scalar::Float(0.0),
                    reason: InvalidReason::Zero,
                },
                K::Fit,
            ),
            (
                Error::Invalid {
                    at: Locator::Timing { phase: None },
                    value: Scalar::Float(-1.0),
                    reason: r,
                },
                K::InvalidValue,
            ),
            (
                Error::CoefficientRange {
                    feature: 0,
                    row: 0,
                    value: 1.0,
                    time: 1.0,
                    exponent: 400,
                },
                K::Fit,
            ),
            (Error::PredictionOverflow { row: 0, time: 1.0 }, K::Fit),
            (Error::RankDeficient { feature: 0 }, K::Fit),
            (Error::SizeOverflow { dim: None }, K::Limit),
            (
                Error::UnequalCounts {
                    part: 0,
                    items: 0,
                    fewest: 1,
                },
                K::Setting,
            ),
            (Error::ZeroParts, K::Setting),
            (Error::TooManyParts { parts: 2, items: 1 }, K::Setting),
            (
                Error::CapExceeded {
                    parts: 1,
                    dim: 0,
                    cap: Scalar::Int(1),
                    best: Scalar::Int(2),
                    proven: true,
                    parts_needed: None,
                },
                K::Infeasible,
            ),
            (
                Error::NotAPartition {
                    items: 1,
                    index: 0,
                    times: 0,
                },
                K::Setting,
            ),
            (
                Error::Invalid {
                    at: Locator::Setting {
                        name: "ranks",
                        requirement: "at least 1",
                    },
                    value: Scalar::Int(0),
                    reason: InvalidReason::OutOfRange,
                },
                K::Setting,
            ),
            (
                Error::TooFewSamples {
                    samples: 1,
                    ranks: 2,
                },
                K::Setting,
            ),
            (
                Error::GroupTooLarge {
                    group: 1,
                    samples: 2,
                    dim: "tokens",
                    size: 3,
                    cap: 2,
                },
                K::Oversize,
            ),
            (Error::DuplicateId { id: 1 }, K::DuplicateId),
            (
                Error::MicroStepsInfeasible {
                    given: 1,
                    smallest: 2,
                },
                K::Infeasible,
            ),
            (
                Error::Invalid {
                    at: Locator::Cost {
                        id: 1,
                        phase: Phase::Vision,
                    },
                    value: Scalar::Float(-1.0),
                    reason: InvalidReason::Negative,
                },
                K::InvalidValue,
            ),
            (
                Error::Invalid {
                    at: Locator::Floor {
                        id: 1,
                        phase: Phase::Vision,
                        cost: 1.0,
                    },
                    value: Scalar::Float(2.0),
                    reason: InvalidReason::AboveCost,
                },
                K::InvalidValue,
            ),
            (
                Error::Invalid {
                    at: Locator::GroupFloor {
                        part: "per_group",
                        phase: Phase::Language,
                    },
                    value: Scalar::Float(-1.0),
                    reason: InvalidReason::Negative,
                },
                K::InvalidValue,
            ),
            (
                Error::CostOverflow {
                    phase: None,
                    samples: 2,
                },
                K::Limit,
            ),
            (
                Error::LossTokens {
                    id: 1,
                    loss_tokens: 2,
                    tokens: 1,
                },
                K::InvalidValue,
            ),
            (
                Error::PlanMismatch {
                    id: None,
                    planned: 1,
                    given: 2,
                },
                K::Setting,
            ),
            (
                Error::Invalid {
                    at: Locator::Origin { id: 1, ranks: 2 },
                    value: Scalar::Int(5),
                    reason: InvalidReason::NotARank,
                },
                K::InvalidValue,
            ),
            (Error::BytesOverflow { id: 1 }, K::Limit),
            (
                Error::UnknownName {
                    kind: "scenario",
                    name: "x".into(),
                    known: &[],
                },
                K::Setting,
            ),
        ];
        for (err, kind) in &cases {
            assert_eq!(err.kind(), *kind, "{err:?}");
        }
        // Every kind has a variant and a distinct name.
        for k in ErrorKind::ALL {
            assert!(cases.iter().any(|(_, kind)| *kind == k), "{k}");
            assert_eq!(
                ErrorKind::ALL
                    .iter()
                    .filter(|j| j.name() == k.name())
                    .count(),
                1
            );
        }
    }

    /// One message a locator, each written by its module; the texts are
    /// those of the nine variants `Error::Invalid` replaced.
    #[test]
    fn invalid_values_keep_their_messages() {
        let float = |at, value, reason| Error::float(at, value, reason).to_string();
        assert_eq!(
            float(Locator::Capacity { dim: 1 }, -2.0, InvalidReason::Negative),
            "the capacity -2 in dimension 1 is invalid: negative values are not sizes; \
             a capacity must be finite and positive"
        );
        assert_eq!(
            float(
                Locator::Size { index: 3, dim: 0 },
                f64::NAN,
                InvalidReason::NaN
            ),
            "item 3 has size NaN in dimension 0: NaN is not a size; sizes must be finite and \
             non-negative"
        );
        assert_eq!(
            float(
                Locator::Coefficient { name: "per_token" },
                f64::INFINITY,
                InvalidReason::Infinite
            ),
            "the coefficient `per_token` is infinite (inf); coefficients must be finite and \
             non-negative"
        );
        let row = |feature| Locator::Measurement { row: 2, feature };
        assert_eq!(
            float(row(Some(1)), -1.0, InvalidReason::Negative),
            "calibration row 2 has feature 1 = -1; features must be finite and non-negative"
        );
        assert_eq!(
            float(row(None), 0.0, InvalidReason::Zero),
            "calibration row 2 has time 0; times must be finite and positive"
        );
        assert_eq!(
            float(
                Locator::Timing {
                    phase: Some(Phase::Vision)
                },
                -1.0,
                InvalidReason::Negative
            ),
            "the measured vision time is negative (-1); times must be finite and non-negative"
        );
        assert_eq!(
            float(
                Locator::Timing { phase: None },
                f64::NAN,
                InvalidReason::NaN
            ),
            "the measured time is NaN (NaN); times must be finite and non-negative"
        );
        let cost = Locator::Cost {
            id: 7,
            phase: Phase::Language,
        };
        assert!(float(cost, f64::NAN, InvalidReason::NaN)
            .starts_with("the cost model returned NaN in the language phase for sample 7 alone;"));
        let floor = Locator::Floor {
            id: 7,
            phase: Phase::Vision,
            cost: 1.5,
        };
        let group = Locator::GroupFloor {
            part: "per_token_pair",
            phase: Phase::Language,
        };
        assert!(
            float(group, f64::INFINITY, InvalidReason::Infinite).starts_with(
                "the cost model's group floor has per_token_pair = inf in the language phase;"
            )
        );
        // The cost alone is named whatever is wrong with the floor.
        for (value, reason) in [
            (2.0, InvalidReason::AboveCost),
            (f64::NAN, InvalidReason::NaN),
        ] {
            let msg = float(floor, value, reason);
            let want = alloc::format!(
                "the cost model's floor for sample 7 is {} in the vision phase, but its cost alone is 1.5;",
                Real(value)
            );
            assert!(msg.starts_with(&want), "{msg}");
        }
        assert_eq!(
            Error::setting("ranks", 0, "at least 1").to_string(),
            "the setting `ranks` is 0; it must be at least 1"
        );
        let origin = Error::Invalid {
            at: Locator::Origin { id: 4, ranks: 2 },
            value: Scalar::Int(9),
            reason: InvalidReason::NotARank,
        };
        assert_eq!(
            origin.to_string(),
            "sample id 4 has origin rank 9 but the plan has 2 ranks (0 to 1); give each sample \
             the rank whose data loader holds it"
        );
        // Every reason reads differently.
        let reasons = [
            InvalidReason::NaN,
            InvalidReason::Negative,
            InvalidReason::Infinite,
            InvalidReason::Zero,
            InvalidReason::AboveCost,
            InvalidReason::NotARank,
            InvalidReason::OutOfRange,
        ];
        for a in reasons {
            for b in reasons {
                assert_eq!(a == b, a.to_string() == b.to_string(), "{a:?} {b:?}");
                assert_eq!(a == b, a.adjective() == b.adjective(), "{a:?} {b:?}");
            }
        }
    }

    #[test]
    fn floats_print_short_in_messages() {
        assert_eq!(Real(f64::MAX).to_string(), "1.7976931348623157e308");
        assert_eq!(Real(5e-324).to_string(), "5e-324");
        assert_eq!(Real(-1e20).to_string(), "-1e20");
        assert_eq!(Real(2.4000000000000004).to_string(), "2.4000000000000004");
        assert_eq!(Real(123456.5).to_string(), "123456.5");
        assert_eq!(Real(0.0).to_string(), "0");
        assert_eq!(Real(f64::NAN).to_string(), "NaN");
        assert_eq!(Real(f64::NEG_INFINITY).to_string(), "-inf");
        assert_eq!(Scalar::Float(1e300).to_string(), "1e300");
    }
}

//! The messages of the cost model and calibration errors: coefficients,
//! calibration rows and fits, measured times, and the costs a model returns.

use core::fmt;

use super::*;

/// The message of `err`, one of this module's variants (called by
/// `Display for Error` for those only).
pub(super) fn fmt(err: &Error, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    match err {
        Error::TooFewRows { rows, features } => write!(
            f,
            "calibration needs more rows than features: {rows} row(s) for {features} feature(s)"
        ),
        Error::RowLength {
            row,
            expected,
            found,
        } => write!(
            f,
            "calibration row {row} has {found} features but row 0 has {expected}"
        ),
        Error::CostOverflow { phase, samples } => {
            write!(
                f,
                "the cost of {samples} sample(s) together is beyond f64::MAX (about 1.8e308)"
            )?;
            match phase {
                Some(phase) => write!(f, " in the {phase} phase")?,
                None => f.write_str(" over both phases")?,
            }
            f.write_str(
                "; express the cost model in a larger unit (scale it down with `CostModel::scale`)",
            )
        }
        Error::PredictionOverflow { row, time } => write!(
            f,
            "the fitted coefficients predict a time beyond f64::MAX (about 1.8e308) for \
                 calibration row {row} (time {}); measure the times in larger units",
            Real(*time)
        ),
        Error::CoefficientRange {
            feature,
            row,
            value,
            time,
            exponent,
        } => {
            let (side, fix) = if *exponent > 0 {
                ("small", "larger")
            } else {
                ("large", "smaller")
            };
            write!(
                    f,
                    "calibration feature {feature} needs a coefficient of about 1e{exponent}, beyond \
                     the range of f64 (about 2.2e-308 to 1.8e308): its values are too {side} for the \
                     times (row {row}: feature {}, time {}); measure the feature in {fix} units or \
                     the times in {} ones",
                    Real(*value),
                    Real(*time),
                    if *exponent > 0 { "smaller" } else { "larger" },
                )
        }
        Error::RankDeficient { feature } => write!(
            f,
            "calibration feature {feature} is zero in every row or a linear combination of \
                 the features before it; vary the measured groups or drop the feature"
        ),
        // Not a variant of this module: nothing (never called so).
        _ => Ok(()),
    }
}

/// The message of [`Error::Invalid`] at a coefficient, a calibration value,
/// a measured time, or a sample's cost or floor.
pub(super) fn invalid(
    at: Locator,
    value: Scalar,
    reason: InvalidReason,
    f: &mut fmt::Formatter<'_>,
) -> fmt::Result {
    match at {
        Locator::Coefficient { name } => write!(
            f,
            "the coefficient `{name}` is {} ({value}); coefficients must be finite and non-negative",
            reason.adjective()
        ),
        Locator::Measurement {
            row,
            feature: Some(feature),
        } => write!(
            f,
            "calibration row {row} has feature {feature} = {value}; features must be finite and \
             non-negative"
        ),
        Locator::Measurement { row, feature: None } => write!(
            f,
            "calibration row {row} has time {value}; times must be finite and positive"
        ),
        Locator::Timing { phase } => {
            let what = reason.adjective();
            match phase {
                Some(p) => write!(f, "the measured {p} time is {what} ({value})")?,
                None => write!(f, "the measured time is {what} ({value})")?,
            }
            f.write_str("; times must be finite and non-negative")
        }
        Locator::Cost { id, phase } => write!(
            f,
            "the cost model returned {value} in the {phase} phase for sample {id} alone; costs must be \
             finite and non-negative in every phase (fix the closure or the model, or scale \
             its coefficients down if they overflow)"
        ),
        Locator::Floor { id, phase, cost } => write!(
            f,
            "the cost model's floor for sample {id} is {value} in the {phase} phase, but its cost \
             alone is {}; a floor must be finite, non-negative and at most the cost alone \
             (fix the model's `CostModel::floor`, or leave it out: zero is always a floor)",
            Real(cost)
        ),
        Locator::GroupFloor { part, phase } => write!(
            f,
            "the cost model's group floor has {part} = {value} in the {phase} phase; both parts \
             of a group floor must be finite and non-negative (fix the model's \
             `CostModel::group_floor`, or leave it out: zero is always one)"
        ),
        // Not a locator of this module: nothing (never called so).
        _ => Ok(()),
    }
}

//! The checks and conversions of the `f64` values models take: costs,
//! coefficients and sums.

use crate::error::{Error, InvalidReason};

/// What makes `value` invalid as a cost, a coefficient or a time: NaN,
/// infinite or negative; `None` for a finite non-negative value.
pub(crate) fn invalid(value: f64) -> Option<InvalidReason> {
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

/// Checks one coefficient: finite and non-negative, naming `name` otherwise.
pub(crate) fn coefficient(name: &'static str, value: f64) -> Result<f64, Error> {
    match invalid(value) {
        None => Ok(value),
        Some(reason) => Err(Error::InvalidCoefficient {
            name,
            value,
            reason,
        }),
    }
}

/// Converts a `u128` sum to `f64` (rounding to nearest above 2^53).
#[inline]
pub(crate) fn f(x: u128) -> f64 {
    x as f64
}

//! The checks and conversions of the `f64` values models take: costs,
//! coefficients and sums.

use crate::error::{Error, InvalidReason, Locator};

/// What makes `value` invalid as a cost, a coefficient or a time: NaN,
/// infinite or negative; `None` for a finite non-negative value.
pub(crate) fn invalid(value: f64) -> Option<InvalidReason> {
    InvalidReason::of_float(value)
}

/// Checks one coefficient: finite and non-negative, naming `name` otherwise.
pub(crate) fn coefficient(name: &'static str, value: f64) -> Result<f64, Error> {
    match invalid(value) {
        None => Ok(value),
        Some(reason) => Err(Error::float(Locator::Coefficient { name }, value, reason)),
    }
}

/// Converts a `u128` sum to `f64` (rounding to nearest above 2^53).
#[inline]
pub(crate) fn f(x: u128) -> f64 {
    x as f64
}

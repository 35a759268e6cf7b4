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
///
/// Below 2^63 through `i64`: the same value rounded the same way (every
/// integer-to-float `as` rounds to nearest, ties to even), in one
/// instruction on x86-64 instead of a call of the `u128` routine, which
/// the planner made about eight times a sample.
#[inline]
pub(crate) fn f(x: u128) -> f64 {
    match i64::try_from(x) {
        Ok(small) => small as f64,
        Err(_) => f_large(x),
    }
}

/// [`f`] at and above 2^63: out of line, so that the compiler does not
/// make the `u128` call on every path and select afterwards.
#[cold]
#[inline(never)]
fn f_large(x: u128) -> f64 {
    x as f64
}

#[cfg(test)]
mod tests {
    use super::f;
    use alloc::vec;

    #[test]
    fn f_rounds_as_the_u128_conversion() {
        let mut edges = vec![
            0u128,
            1,
            (1 << 53) - 1,
            1 << 53,
            (1 << 53) + 1,
            (1 << 53) + 3,
        ];
        for k in [62u32, 63, 64, 65, 100, 127] {
            let p = 1u128 << k;
            edges.extend([p - 1, p, p + 1, p + (p >> 53), p + (p >> 53) + 1]);
        }
        edges.extend([u128::from(u64::MAX), u128::MAX, u128::MAX - 1]);
        // A deterministic spread of values of every magnitude.
        let mut x = 0x9E37_79B9_7F4A_7C15_F39C_C060_5CED_C834u128;
        for _ in 0..10_000 {
            x = x
                .wrapping_mul(0x2360_ED05_1FC6_5DA4_4385_DF64_9FCC_F645)
                .wrapping_add(1);
            edges.push(x >> (x % 128));
        }
        for x in edges {
            assert_eq!(f(x).to_bits(), (x as f64).to_bits(), "{x}");
        }
    }
}

//! Comparisons of floats.

/// `|a - b| / |b|`: the relative error of `a` against the reference `b`.
pub fn rel(a: f64, b: f64) -> f64 {
    (a - b).abs() / b.abs()
}

/// Equal up to rounding: within 1e-12 of the larger magnitude (or both
/// within 1e-300 of zero).
pub fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12 * a.abs().max(b.abs()) + 1e-300
}

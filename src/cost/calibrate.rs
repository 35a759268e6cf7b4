//! Calibration: non-negative least squares fits of cost coefficients to
//! measured times, with the fit's R^2 and worst relative error (see [`fit`]).

use alloc::vec;
use alloc::vec::Vec;

use super::{CostModel, Sample};
use crate::error::{Error, InvalidReason, Locator};
use crate::num::abs;

/// A feature is linearly dependent on the ones before it when its residual
/// after projection is below this fraction of its norm.
const RANK_TOLERANCE: f64 = 1e-9;

/// The result of a calibration: the coefficients and how well they fit.
///
/// # Examples
///
/// ```
/// let rows = [([1.0, 1.0], 3.0), ([2.0, 1.0], 5.0), ([3.0, 1.0], 7.0)];
/// let fit = microbatch::cost::fit(&rows)?;
/// assert!((fit.coefficients()[0] - 2.0).abs() < 1e-12);
/// assert!((fit.coefficients()[1] - 1.0).abs() < 1e-12);
/// assert!((fit.predict(&[4.0, 1.0]) - 9.0).abs() < 1e-12);
/// assert!(fit.r_squared() > 0.999_999);
/// # Ok::<(), microbatch::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Fit {
    coefficients: Vec<f64>,
    r_squared: f64,
    max_relative_error: f64,
    worst_row: usize,
    rows: usize,
}

impl Fit {
    /// The fitted coefficients, one per feature, each finite and
    /// non-negative. A coefficient of zero means the feature did not help
    /// (its unconstrained coefficient would have been negative).
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::fit;
    ///
    /// // time = 2 * x + 0.5 * y
    /// let rows = [([1.0, 0.0], 2.0), ([0.0, 1.0], 0.5), ([1.0, 1.0], 2.5)];
    /// let c = fit(&rows)?.coefficients().to_vec();
    /// assert!((c[0] - 2.0).abs() < 1e-12 && (c[1] - 0.5).abs() < 1e-12);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn coefficients(&self) -> &[f64] {
        &self.coefficients
    }

    /// The coefficient of determination `1 - SS_res / SS_tot` over the rows:
    /// 1 for a perfect fit, 0 for a fit no better than the mean time, and
    /// negative for a worse one (possible: the model has no free intercept
    /// unless a constant feature is given). If every row has the same time,
    /// it is 1 for an exact fit and 0 otherwise.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::fit;
    ///
    /// // Quadratic times: x alone fits worse than x and x^2.
    /// let linear = fit(&[([1.0], 1.0), ([2.0], 4.0), ([3.0], 9.0), ([4.0], 16.0)])?;
    /// let quadratic = fit(&[
    ///     ([1.0, 1.0], 1.0),
    ///     ([2.0, 4.0], 4.0),
    ///     ([3.0, 9.0], 9.0),
    ///     ([4.0, 16.0], 16.0),
    /// ])?;
    /// assert!(linear.r_squared() < 0.9);
    /// assert!(quadratic.r_squared() > 0.999_999);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn r_squared(&self) -> f64 {
        self.r_squared
    }

    /// The worst relative error `|predicted - measured| / measured` over the
    /// rows.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::fit;
    ///
    /// let rows = [([1.0], 1.0), ([2.0], 2.0), ([3.0], 3.3)];
    /// let fit = fit(&rows)?;
    /// let (x, t) = rows[2];
    /// assert!((fit.max_relative_error() - (fit.predict(&x) - t).abs() / t).abs() < 1e-12);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn max_relative_error(&self) -> f64 {
        self.max_relative_error
    }

    /// The index of the row with the worst relative error.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::fit;
    ///
    /// // The last row is 10% slower than the other two predict.
    /// let fit = fit(&[([1.0], 1.0), ([2.0], 2.0), ([3.0], 3.3)])?;
    /// assert_eq!(fit.worst_row(), 2);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn worst_row(&self) -> usize {
        self.worst_row
    }

    /// The number of rows fitted.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::fit;
    ///
    /// assert_eq!(fit(&[([1.0], 1.0), ([2.0], 2.1), ([3.0], 2.9)])?.rows(), 3);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// The predicted time of a row of features: `sum(coefficient * feature)`.
    /// Missing features count as zero, extra ones are ignored.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::fit;
    ///
    /// let fit = fit(&[([1.0, 1.0], 3.0), ([2.0, 1.0], 5.0), ([3.0, 1.0], 7.0)])?; // 2x + 1
    /// assert!((fit.predict(&[10.0, 1.0]) - 21.0).abs() < 1e-9);
    /// assert!((fit.predict(&[10.0]) - 20.0).abs() < 1e-9); // a missing feature counts as zero
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn predict(&self, features: &[f64]) -> f64 {
        self.coefficients
            .iter()
            .zip(features)
            .map(|(c, x)| c * x)
            .sum()
    }
}

/// Fits non-negative coefficients `c` so that `sum(c[j] * features[j])`
/// predicts the measured time of every row, minimizing the sum of squared
/// relative errors.
///
/// FLOPs do not predict kernel time well (memory-bound parts, launch
/// overheads, attention kernels' efficiency that grows with length), so real
/// balancers fit `time = a * sum(T) + b * sum(T^2) + c * n + ...` to the
/// timings of warm-up steps; [`fit_terms`] builds such features from cost
/// models with unit coefficients, so that the fitted coefficients plug
/// straight back into the same models.
///
/// The fit minimizes `sum(((predicted - measured) / measured)^2)`: timing
/// noise is multiplicative, and a small micro-batch's time matters to a
/// balancer as much as a large one's (an unweighted fit lets the largest
/// rows decide and can be off by tens of percent on the smallest). The
/// solver is Lawson and Hanson's active-set algorithm for non-negative least
/// squares (NNLS) on the rows divided by their times, over columns scaled to
/// a maximum of 1, with the least-squares subproblems solved by modified
/// Gram-Schmidt with reorthogonalization. Coefficients are non-negative by
/// construction, so a fitted model can never predict a negative time.
///
/// Any finite magnitudes fit: the ratios `feature / time` are formed from
/// mantissas and exponents and scaled by powers of two before the solve, so
/// that features of `1e300` over times of `1e-10`, or features of `1e-300`
/// next to features of `1e300`, neither overflow nor pass for rank
/// deficiency; R^2 and the relative errors are computed on scaled values
/// too. Every coefficient, R^2 and error of a returned [`Fit`] is finite;
/// a coefficient that would be beyond the range of `f64` is an error that
/// names its feature.
///
/// `rows` are `(features, time)` pairs, for example
/// `([sum(T), sum(T^2), n], seconds)` of one measured micro-batch. Features
/// must be finite and non-negative, times finite and positive, every row
/// must have the same number of features, and there must be more rows than
/// features so that the fit can be judged.
///
/// # Errors
///
/// - [`Error::Invalid`] at a [setting](crate::Locator::Setting) naming
///   `features` if rows have no feature;
/// - [`Error::RowLength`] if a row's length differs from the first row's;
/// - [`Error::Invalid`] at a [measurement](crate::Locator::Measurement) for a
///   NaN, infinite or negative feature or a time that is not finite and
///   positive;
/// - [`Error::TooFewRows`] if there are not more rows than features;
/// - [`Error::RankDeficient`] if a feature is zero in every row or a linear
///   combination of the features before it (for example, if all rows have
///   the same features);
/// - [`Error::CoefficientRange`] if a fitted coefficient is above
///   `f64::MAX` or, while it matters to the fit, below the smallest normal
///   `f64` (features of `1e-300` for times of `1e300`): it names the
///   feature, a row and the coefficient's order of magnitude;
/// - [`Error::PredictionOverflow`] if the fitted coefficients predict a
///   time beyond `f64::MAX` for one of the rows (times near `f64::MAX`).
///
/// # Complexity
///
/// O(m k^2) time per active-set iteration for `m` rows and `k` features,
/// at most `3k + 10` iterations; O(m k) extra space.
///
/// # Examples
///
/// Time per micro-batch from `sum(T)`, `sum(T^2)` and the sample count:
///
/// ```
/// use microbatch::cost::fit;
///
/// let (a, b, c) = (2e-5, 3e-10, 1e-3);
/// let rows: Vec<([f64; 3], f64)> = [(8.0, 1024.0), (4.0, 4096.0), (16.0, 512.0), (2.0, 8192.0)]
///     .iter()
///     .map(|&(n, t)| {
///         let x = [n * t, n * t * t, n];
///         (x, a * x[0] + b * x[1] + c * x[2])
///     })
///     .collect();
/// let fit = fit(&rows)?;
/// for (got, want) in fit.coefficients().iter().zip([a, b, c]) {
///     assert!((got - want).abs() <= 1e-9 * want);
/// }
/// assert!(fit.max_relative_error() < 1e-9);
///
/// let err = microbatch::cost::fit(&rows[..3]).unwrap_err();
/// assert_eq!(err.to_string(), "calibration needs more rows than features: 3 row(s) for 3 feature(s)");
/// # Ok::<(), microbatch::Error>(())
/// ```
///
/// # References
///
/// C. L. Lawson and R. J. Hanson, *Solving Least Squares Problems*,
/// Prentice-Hall 1974, chapter 23, algorithm NNLS.
pub fn fit<F: AsRef<[f64]>>(rows: &[(F, f64)]) -> Result<Fit, Error> {
    let k = rows.first().map_or(0, |r| r.0.as_ref().len());
    if k == 0 && !rows.is_empty() {
        return Err(Error::setting("features", 0, "at least 1 per row"));
    }
    for (i, (features, time)) in rows.iter().enumerate() {
        let features = features.as_ref();
        if features.len() != k {
            return Err(Error::RowLength {
                row: i,
                expected: k,
                found: features.len(),
            });
        }
        for (j, &x) in features.iter().enumerate() {
            if let Some(reason) = InvalidReason::of_float(x) {
                let at = Locator::Measurement {
                    row: i,
                    feature: Some(j),
                };
                return Err(Error::float(at, x, reason));
            }
        }
        let zero = (*time == 0.0).then_some(InvalidReason::Zero);
        if let Some(reason) = InvalidReason::of_float(*time).or(zero) {
            let at = Locator::Measurement {
                row: i,
                feature: None,
            };
            return Err(Error::float(at, *time, reason));
        }
    }
    let m = rows.len();
    if m <= k {
        return Err(Error::TooFewRows {
            rows: m,
            features: k,
        });
    }

    let scaled = Scaled::new(rows, k)?;
    check_rank(&scaled.columns)?;
    let mut d = nnls(&scaled.columns, &vec![1.0; m]);
    let coefficients = scaled.coefficients(rows, &mut d)?;
    let (r_squared, max_relative_error, worst_row) = judge(rows, &scaled.columns, &d);
    let fit = Fit {
        coefficients,
        r_squared,
        max_relative_error,
        worst_row,
        rows: m,
    };
    // Coefficients in range can still predict beyond f64::MAX for times
    // near it: the fit must be usable on the rows it was made from.
    if let Some(row) = rows
        .iter()
        .position(|(x, _)| !fit.predict(x.as_ref()).is_finite())
    {
        return Err(Error::PredictionOverflow {
            row,
            time: rows[row].1,
        });
    }
    Ok(fit)
}

/// The matrix of the rows divided by their times (relative least squares),
/// column-major, each column scaled by a power of two and its largest
/// entry to a maximum of exactly 1, computed without overflow or harmful
/// underflow whatever the magnitudes: `x / t` is formed from mantissas and
/// exponents, so `1e300 / 1e-300` is the column's largest entry (1) rather
/// than infinity. An entry below `2^-1074` of its column's largest
/// underflows to zero, which changes no prediction by more than that share
/// of its row's time.
struct Scaled {
    columns: Vec<Vec<f64>>,
    /// Per column: the largest `x / t` as `mantissa * 2^exponent` and its row.
    largest: Vec<(f64, i32, usize)>,
}

impl Scaled {
    fn new<F: AsRef<[f64]>>(rows: &[(F, f64)], k: usize) -> Result<Self, Error> {
        let times: Vec<(f64, i32)> = rows.iter().map(|r| split(r.1)).collect();
        let mut columns = Vec::with_capacity(k);
        let mut largest = Vec::with_capacity(k);
        let mut ratios: Vec<(f64, i32)> = Vec::with_capacity(rows.len());
        for j in 0..k {
            ratios.clear();
            let mut top: Option<(f64, i32, usize)> = None;
            for (i, (r, &(mt, et))) in rows.iter().zip(&times).enumerate() {
                let x = r.0.as_ref()[j];
                if x > 0.0 {
                    let (mx, ex) = split(x);
                    // In [1, 2) after one doubling at most.
                    let (mut q, mut e) = (mx / mt, ex - et);
                    if q < 1.0 {
                        q *= 2.0;
                        e -= 1;
                    }
                    if !top.is_some_and(|(tq, te, _)| (e, q) <= (te, tq)) {
                        top = Some((q, e, i));
                    }
                    ratios.push((q, e));
                } else {
                    ratios.push((0.0, 0));
                }
            }
            // Features are finite and non-negative here: a column without a
            // positive entry is zero in every row.
            let Some((tq, te, ti)) = top else {
                return Err(Error::RankDeficient { feature: j });
            };
            columns.push(
                ratios
                    .iter()
                    .map(|&(q, e)| if q > 0.0 { scale2(q / tq, e - te) } else { 0.0 })
                    .collect(),
            );
            largest.push((tq, te, ti));
        }
        Ok(Scaled { columns, largest })
    }

    /// The coefficients of the original rows from the solution `d` of the
    /// scaled problem: `d[j] / (largest x / t of column j)`. A coefficient
    /// too small to represent whose share of any row's prediction is below
    /// `f64::EPSILON` is zero (in `d` too); any other that is beyond the
    /// range of `f64` is an error.
    fn coefficients<F: AsRef<[f64]>>(
        &self,
        rows: &[(F, f64)],
        d: &mut [f64],
    ) -> Result<Vec<f64>, Error> {
        let mut out = Vec::with_capacity(d.len());
        for (j, (dj, &(q, e, row))) in d.iter_mut().zip(&self.largest).enumerate() {
            if *dj <= 0.0 {
                out.push(0.0);
                continue;
            }
            let c = scale2(*dj / q, -e);
            if c.is_finite() && c >= f64::MIN_POSITIVE {
                out.push(c);
            } else if c.is_finite() && *dj < f64::EPSILON {
                // Negligible: its share of every row's prediction is below
                // `f64::EPSILON` of the row's time.
                *dj = 0.0;
                out.push(0.0);
            } else {
                return Err(Error::CoefficientRange {
                    feature: j,
                    row,
                    value: rows[row].0.as_ref()[j],
                    time: rows[row].1,
                    exponent: decimal_exponent(*dj / q, -e),
                });
            }
        }
        Ok(out)
    }
}

/// R^2, the worst relative error and its row, from the scaled columns and
/// solution (no overflow for any magnitudes): the relative residual of row
/// `i` is `sum(d[j] * a[j][i]) - 1`, its absolute residual that times the
/// row's time, and both sums of squares of R^2 are taken over times and
/// residuals divided by the largest of them.
fn judge<F: AsRef<[f64]>>(rows: &[(F, f64)], columns: &[Vec<f64>], d: &[f64]) -> (f64, f64, usize) {
    let m = rows.len();
    let relative: Vec<f64> = (0..m)
        .map(|i| {
            columns
                .iter()
                .zip(d)
                .map(|(col, dj)| dj * col[i])
                .sum::<f64>()
                - 1.0
        })
        .collect();
    let (mut worst, mut worst_row) = (0.0, 0);
    for (i, &r) in relative.iter().enumerate() {
        if abs(r) > worst {
            worst = abs(r);
            worst_row = i;
        }
    }
    // Times over the largest time: in (0, 1], no overflow in the sums.
    let top = rows
        .iter()
        .fold(0.0f64, |a, r| if r.1 > a { r.1 } else { a });
    let times: Vec<f64> = rows.iter().map(|r| r.1 / top).collect();
    let mean = times.iter().sum::<f64>() / m as f64;
    let deviation: Vec<f64> = times.iter().map(|t| t - mean).collect();
    let residual: Vec<f64> = relative.iter().zip(&times).map(|(r, t)| r * t).collect();
    // Divided by the largest of all, so that neither sum underflows alone.
    let s = deviation
        .iter()
        .chain(&residual)
        .fold(0.0f64, |a, &x| if abs(x) > a { abs(x) } else { a });
    let squares = |v: &[f64]| -> f64 {
        if s > 0.0 {
            v.iter().map(|x| (x / s) * (x / s)).sum()
        } else {
            0.0
        }
    };
    let (ss_res, ss_tot) = (squares(&residual), squares(&deviation));
    let r_squared = if ss_tot > 0.0 {
        let r2 = 1.0 - ss_res / ss_tot;
        // Finite for any fit but one whose residuals exceed the times'
        // spread by over 1e150: reported as the most negative f64.
        if r2.is_finite() {
            r2
        } else {
            f64::MIN
        }
    } else if ss_res == 0.0 {
        1.0
    } else {
        0.0
    };
    (r_squared, worst, worst_row)
}

/// `(m, e)` with `x = m * 2^e` and `m` in `[1, 2)`, for a finite `x > 0`
/// (subnormals included).
fn split(x: f64) -> (f64, i32) {
    const MANTISSA: u64 = (1 << 52) - 1;
    let bits = x.to_bits();
    let biased = ((bits >> 52) & 0x7ff) as i32;
    if biased == 0 {
        // Subnormal: normalize it first (2^64 times it is normal).
        let (m, e) = split(x * pow2(64));
        return (m, e - 64);
    }
    (
        f64::from_bits((bits & MANTISSA) | (1023 << 52)),
        biased - 1023,
    )
}

/// `2^e` for `-1022 <= e <= 1023`.
fn pow2(e: i32) -> f64 {
    f64::from_bits(((e + 1023) as u64) << 52)
}

/// `x * 2^e` for any `e`, in steps that cannot overflow or underflow early:
/// infinity above `f64::MAX`, zero (or a subnormal) below the normal range.
fn scale2(mut x: f64, mut e: i32) -> f64 {
    while e > 1000 && x.is_finite() && x != 0.0 {
        x *= pow2(1000);
        e -= 1000;
    }
    while e < -1000 && x != 0.0 && x.is_finite() {
        x *= pow2(-1000);
        e += 1000;
    }
    if !(-1000..=1000).contains(&e) {
        // `x` already reached infinity or zero.
        return x;
    }
    x * pow2(e)
}

/// The decimal exponent of `x * 2^e` (`x > 0` finite), to the nearest
/// integer (within one for a message "about 1e...").
fn decimal_exponent(x: f64, e: i32) -> i32 {
    use core::f64::consts::LOG10_2;
    let (m, ex) = split(x);
    // log10(m) for m in [1, 2) by the chord: within 0.02.
    let l = f64::from(ex + e) * LOG10_2 + (m - 1.0) * LOG10_2;
    if l >= 0.0 {
        (l + 0.5) as i32
    } else {
        -((0.5 - l) as i32)
    }
}

/// Fits one non-negative coefficient per cost model `term`, so that
/// `sum(c[j] * terms[j].cost(group).total())` predicts each group's measured
/// time; the features of [`fit`] are the terms' costs.
///
/// A group is anything that iterates over borrowed samples (`&Vec<Sample>`,
/// `&[Sample]`, `slice.iter().copied()` of a `&[&Sample]`): no sample is
/// cloned.
///
/// Give the terms unit coefficients (`Tokens::new(1.0)`,
/// `DocumentAttention::new(1.0)`, ...) and the fitted coefficients are the
/// ones to build the model with. To fit one phase (say, the ViT's measured
/// time), give terms of that phase only.
///
/// # Errors
///
/// As [`fit`], with features numbered by term.
///
/// # Complexity
///
/// One evaluation of every term on every group, then as [`fit`].
///
/// # Examples
///
/// ```
/// use microbatch::cost::{
///     fit_terms, CostModel, DocumentAttention, PerSample, Sample, Tokens,
/// };
///
/// let terms: [&dyn CostModel; 3] =
///     [&Tokens::new(1.0)?, &DocumentAttention::new(1.0)?, &PerSample::new(1.0)?];
/// let truth = Tokens::new(2e-5)? + DocumentAttention::new(3e-10)? + PerSample::new(1e-3)?;
///
/// let groups: Vec<Vec<Sample>> = (1..=6u32)
///     .map(|i| (0..i).map(|j| Sample::text_only(500 * i + 300 * j)).collect())
///     .collect();
/// let refs: Vec<Vec<&Sample>> = groups.iter().map(|g| g.iter().collect()).collect();
/// let timed = groups.iter().zip(&refs).map(|(g, r)| (g, truth.cost(r).total()));
/// let fit = fit_terms(&terms, timed)?;
///
/// let [a, b, c] = [fit.coefficients()[0], fit.coefficients()[1], fit.coefficients()[2]];
/// let model = Tokens::new(a)? + DocumentAttention::new(b)? + PerSample::new(c)?;
/// assert!((a / 2e-5 - 1.0).abs() < 1e-6 && (c / 1e-3 - 1.0).abs() < 1e-6);
/// assert!((model.cost(&refs[2]).total() / truth.cost(&refs[2]).total() - 1.0).abs() < 1e-9);
/// # Ok::<(), microbatch::Error>(())
/// ```
pub fn fit_terms<'s, C, G>(
    terms: &[&C],
    groups: impl IntoIterator<Item = (G, f64)>,
) -> Result<Fit, Error>
where
    C: CostModel + ?Sized,
    G: IntoIterator<Item = &'s Sample>,
{
    let mut group: Vec<&Sample> = Vec::new();
    let rows: Vec<(Vec<f64>, f64)> = groups
        .into_iter()
        .map(|(samples, time)| {
            group.clear();
            group.extend(samples);
            let features = terms.iter().map(|t| t.cost(&group).total()).collect();
            (features, time)
        })
        .collect();
    if rows.is_empty() {
        return Err(Error::TooFewRows {
            rows: 0,
            features: terms.len(),
        });
    }
    fit(&rows)
}

#[inline]
fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// `y += alpha * x`.
#[inline]
fn axpy(alpha: f64, x: &[f64], y: &mut [f64]) {
    for (yi, xi) in y.iter_mut().zip(x) {
        *yi += alpha * xi;
    }
}

/// Errors with the first column that is (numerically) a linear combination
/// of the columns before it. Modified Gram-Schmidt, two passes, on
/// orthogonal but unnormalized vectors (no square root needed).
fn check_rank(columns: &[Vec<f64>]) -> Result<(), Error> {
    let mut basis: Vec<(Vec<f64>, f64)> = Vec::with_capacity(columns.len());
    for (j, col) in columns.iter().enumerate() {
        let norm2 = dot(col, col);
        let mut v = col.clone();
        for _ in 0..2 {
            for (q, qq) in &basis {
                let c = dot(q, &v) / qq;
                axpy(-c, q, &mut v);
            }
        }
        let res2 = dot(&v, &v);
        if res2.is_nan() || res2 <= RANK_TOLERANCE * RANK_TOLERANCE * norm2 {
            return Err(Error::RankDeficient { feature: j });
        }
        basis.push((v, res2));
    }
    Ok(())
}

/// Least squares over the columns `cols` of `a`: the `z` minimizing
/// `|sum(z[i] * a[cols[i]]) - b|`. The columns must be linearly independent.
///
/// `A = Q R` with `Q` orthogonal (unnormalized) and `R` unit upper
/// triangular, by modified Gram-Schmidt with reorthogonalization; then
/// `y = Q^+ b` and `R z = y` by back substitution.
fn least_squares(a: &[Vec<f64>], cols: &[usize], b: &[f64]) -> Vec<f64> {
    let p = cols.len();
    let mut q: Vec<Vec<f64>> = Vec::with_capacity(p);
    let mut qq: Vec<f64> = Vec::with_capacity(p);
    let mut r = vec![0.0; p * p];
    for (j, &c) in cols.iter().enumerate() {
        let mut v = a[c].clone();
        for _ in 0..2 {
            for i in 0..j {
                let coef = dot(&q[i], &v) / qq[i];
                r[i * p + j] += coef;
                axpy(-coef, &q[i], &mut v);
            }
        }
        qq.push(dot(&v, &v));
        q.push(v);
    }
    let mut rest = b.to_vec();
    let mut y = vec![0.0; p];
    for i in 0..p {
        let c = if qq[i] > 0.0 {
            dot(&q[i], &rest) / qq[i]
        } else {
            0.0
        };
        y[i] = c;
        axpy(-c, &q[i], &mut rest);
    }
    let mut z = vec![0.0; p];
    for i in (0..p).rev() {
        let mut s = y[i];
        for (j, zj) in z.iter().enumerate().skip(i + 1) {
            s -= r[i * p + j] * zj;
        }
        z[i] = s;
    }
    z
}

/// Lawson-Hanson NNLS: `x >= 0` minimizing `|A x - b|` for the column-major
/// `a` (full column rank).
///
/// The variable with the largest positive gradient enters the passive set;
/// the passive set's least-squares solution `s` is followed back from the
/// current `x` until it is feasible (the inner loop), then taken. Two
/// rounding traps of nearly collinear columns (a per-sample count next to
/// the tokens and a per-row constant, divided by the times) are handled:
/// - in the inner loop, the variable that limits the step leaves the
///   passive set at exactly zero: computed as `x + alpha (s - x)` it can
///   stay a hair above zero, and a plain implementation then takes steps of
///   `alpha ~ 1e-16` until its iteration cap and returns a point far from
///   the optimum (relative residual off by 1e-5 on bench-shaped rows);
/// - an entering variable whose own least-squares coefficient is `<= 0`
///   (its gradient was rounding) is set aside until the passive set
///   changes, and the next one is tried, rather than ending the solve.
fn nnls(a: &[Vec<f64>], b: &[f64]) -> Vec<f64> {
    let k = a.len();
    let mut x = vec![0.0; k];
    let mut passive = vec![false; k];
    // Variables whose entry failed to rounding since the last change.
    let mut set_aside = vec![false; k];
    let max_iterations = 3 * k + 10;

    // The gradient's scale at x = 0 sets the stopping tolerance.
    let w0: Vec<f64> = a.iter().map(|col| dot(col, b)).collect();
    let scale = w0
        .iter()
        .fold(0.0f64, |m, &w| if abs(w) > m { abs(w) } else { m });
    let tolerance = 1e-12 * scale;

    let gradient = |x: &[f64]| -> Vec<f64> {
        let mut residual = b.to_vec();
        for (col, &xj) in a.iter().zip(x) {
            if xj != 0.0 {
                axpy(-xj, col, &mut residual);
            }
        }
        a.iter().map(|col| dot(col, &residual)).collect()
    };

    let solve = |passive: &[bool]| -> Vec<f64> {
        let cols: Vec<usize> = (0..k).filter(|&j| passive[j]).collect();
        let z = least_squares(a, &cols, b);
        let mut s = vec![0.0; k];
        for (&j, zj) in cols.iter().zip(z) {
            s[j] = zj;
        }
        s
    };

    let mut iterations = 0;
    let mut w = w0;
    loop {
        // The variable with the largest positive gradient enters; ties by
        // index (the first).
        let entering = (0..k)
            .filter(|&j| !passive[j] && !set_aside[j] && w[j] > tolerance)
            .fold(None, |best: Option<usize>, j| match best {
                Some(i) if w[i] >= w[j] => Some(i),
                _ => Some(j),
            });
        let Some(t) = entering else { break };
        iterations += 1;
        if iterations > max_iterations {
            // Rounding made the algorithm cycle; `x` is feasible.
            break;
        }
        passive[t] = true;
        let mut s = solve(&passive);
        if s[t] <= 0.0 {
            // Its gradient was rounding: try the next variable.
            passive[t] = false;
            set_aside[t] = true;
            continue;
        }
        // Step back towards x until the passive set's solution is feasible.
        while (0..k).any(|j| passive[j] && s[j] <= 0.0) {
            iterations += 1;
            if iterations > max_iterations {
                // Rounding made the algorithm cycle; `x` is feasible.
                return x;
            }
            // The step to the first passive variable that reaches zero; it
            // leaves at exactly zero (in rounding, `x + alpha (s - x)` can
            // stay a hair above it and be stepped towards forever).
            let mut alpha = 1.0f64;
            let mut blocking = None;
            for j in 0..k {
                if passive[j] && s[j] <= 0.0 {
                    let a = x[j] / (x[j] - s[j]);
                    if blocking.is_none() || a < alpha {
                        alpha = a;
                        blocking = Some(j);
                    }
                }
            }
            for j in 0..k {
                x[j] += alpha * (s[j] - x[j]);
                if passive[j] && (x[j] <= 0.0 || blocking == Some(j)) {
                    passive[j] = false;
                    x[j] = 0.0;
                }
            }
            s = solve(&passive);
        }
        for j in 0..k {
            x[j] = if passive[j] && s[j] > 0.0 { s[j] } else { 0.0 };
            // A variable at zero is not passive (the inner loop's cap).
            passive[j] = x[j] > 0.0;
        }
        set_aside.iter_mut().for_each(|v| *v = false);
        w = gradient(&x);
    }
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn least_squares_solves_a_square_system() {
        // 2x + y = 5, x + 3y = 10  =>  x = 1, y = 3.
        let a = vec![vec![2.0, 1.0], vec![1.0, 3.0]];
        let z = least_squares(&a, &[0, 1], &[5.0, 10.0]);
        assert!(
            (z[0] - 1.0).abs() < 1e-12 && (z[1] - 3.0).abs() < 1e-12,
            "{z:?}"
        );
    }

    #[test]
    fn nnls_clamps_a_negative_coefficient() {
        // The unconstrained fit of b = 2*a0 - 1*a1 would be negative in a1.
        let a0 = [1.0, 2.0, 3.0, 4.0];
        let a1 = [1.0, 1.0, 2.0, 1.0];
        let b: Vec<f64> = a0.iter().zip(&a1).map(|(x, y)| 2.0 * x - y + 0.0).collect();
        let x = nnls(&[a0.to_vec(), a1.to_vec()], &b);
        assert!(x[0] > 0.0 && x[1] == 0.0, "{x:?}");
        // With a1 out, x0 is the one-column least squares a0.b / a0.a0.
        let want = dot(&a0, &b) / dot(&a0, &a0);
        assert!((x[0] - want).abs() < 1e-12, "{x:?} vs {want}");
    }

    #[test]
    fn rank_check_names_the_dependent_column() {
        let c0 = vec![1.0, 2.0, 3.0];
        let c1 = vec![1.0, 1.0, 1.0];
        let c2: Vec<f64> = c0.iter().zip(&c1).map(|(a, b)| 0.5 * a + b).collect();
        assert_eq!(
            check_rank(&[c0, c1, c2]),
            Err(Error::RankDeficient { feature: 2 })
        );
    }
    /// The least `|A x - b|^2` over `x >= 0` by brute force: the optimum's
    /// support `P` has the least-squares solution on `P` positive, so the
    /// best of the feasible supports is the optimum. O(2^k m k^2).
    fn brute_force(a: &[Vec<f64>], b: &[f64]) -> f64 {
        let k = a.len();
        let mut best = dot(b, b);
        for mask in 1u32..1 << k {
            let cols: Vec<usize> = (0..k).filter(|&j| mask >> j & 1 == 1).collect();
            let z = least_squares(a, &cols, b);
            if z.iter().all(|&v| v > 0.0) {
                let mut x = vec![0.0; k];
                for (&j, v) in cols.iter().zip(z) {
                    x[j] = v;
                }
                best = best.min(residual2(a, b, &x));
            }
        }
        best
    }

    fn residual2(a: &[Vec<f64>], b: &[f64], x: &[f64]) -> f64 {
        let mut r = b.to_vec();
        for (col, &xj) in a.iter().zip(x) {
            axpy(-xj, col, &mut r);
        }
        dot(&r, &r)
    }

    /// Rows shaped like a packed row's language phase (tokens, row tokens
    /// squared, samples, 1 per row) over noisy times of a truth where some
    /// terms are zero, divided by the times and scaled as `fit` does:
    /// nearly collinear columns. NNLS reaches the brute force's optimum.
    #[test]
    fn nnls_reaches_the_optimum_on_nearly_collinear_columns() {
        let mut next = crate::test_rng::uniform(22);
        for case in 0..2000 {
            let m = 8 + next(40) as usize;
            let truth = [
                next(2) as f64 * 1e-5,
                next(2) as f64 * 3e-9,
                next(2) as f64 * 3e-4,
                next(2) as f64 * 3e-3,
            ];
            let rows: Vec<([f64; 4], f64)> = (0..m)
                .map(|_| {
                    let samples = 1 + next(12);
                    let tokens = (samples * (32 + next(449))).min(1024) as f64;
                    let x = [tokens, tokens * tokens, samples as f64, 1.0];
                    let fixed = 1e-6 + 1e-4 * next(3) as f64;
                    let exact: f64 = x.iter().zip(&truth).map(|(a, b)| a * b).sum::<f64>() + fixed;
                    let noise = 1.0 + (next(2001) as f64 - 1000.0) * 3e-4;
                    (x, exact * noise)
                })
                .collect();
            let scaled = Scaled::new(&rows, 4).unwrap();
            if check_rank(&scaled.columns).is_err() {
                continue;
            }
            let b = vec![1.0; m];
            let x = nnls(&scaled.columns, &b);
            assert!(x.iter().all(|&v| v >= 0.0), "case {case}: {x:?}");
            let (got, best) = (
                residual2(&scaled.columns, &b, &x),
                brute_force(&scaled.columns, &b),
            );
            assert!(
                got <= best * (1.0 + 1e-9) + 1e-24,
                "case {case}: residual {got} vs optimum {best}, x {x:?}"
            );
        }
    }
}

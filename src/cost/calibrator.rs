//! Online calibration of a [`Linear`] model's coefficients from measured
//! micro-batch times: a bounded window of rows, a robust (outlier-rejecting)
//! non-negative least-squares refit, identification of the terms, and a
//! fallback model until the terms can be told apart ([`Calibrator`]).

// `!(x > 0.0)` is deliberate: unlike `x <= 0.0` it is also true for NaN.
#![allow(clippy::neg_cmp_op_on_partial_ord)]

use alloc::vec;
use alloc::vec::Vec;
use core::fmt;

use super::calibrate::fit;
use super::linear::{Linear, Term};
use super::{invalid, Incremental, Phase, Phases, Sample};
use crate::error::{Error, Locator};
use crate::num::abs;

/// A measured time of one micro-batch (or any group of samples), in seconds
/// or any unit, the same for every row of a [`Calibrator`].
///
/// # Examples
///
/// ```
/// use microbatch::cost::{Phases, Timing};
///
/// let per_phase = Timing::Phases(Phases::new(0.012, 0.080)); // vision, language
/// let whole = Timing::Total(0.092);
/// assert_eq!(per_phase.total(), 0.092);
/// assert_eq!(whole.total(), 0.092);
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Timing {
    /// The vision encoder's and the language model's times, measured
    /// separately (CUDA events around each phase).
    Phases(Phases),
    /// The whole micro-step's time, when the phases are not timed apart.
    Total(f64),
}

impl Timing {
    /// The whole time: the sum of the phases, or the total.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Phases, Timing};
    ///
    /// assert_eq!(Timing::Phases(Phases::new(1.0, 2.0)).total(), 3.0);
    /// ```
    #[must_use]
    pub fn total(&self) -> f64 {
        match self {
            Timing::Phases(p) => p.total(),
            Timing::Total(t) => *t,
        }
    }

    /// Checks every time: finite and non-negative, naming the phase.
    fn check(&self) -> Result<(), Error> {
        let one = |phase: Option<Phase>, value: f64| match invalid(value) {
            None => Ok(()),
            Some(reason) => Err(Error::float(Locator::Timing { phase }, value, reason)),
        };
        match self {
            Timing::Phases(p) => {
                one(Some(Phase::Vision), p.vision)?;
                one(Some(Phase::Language), p.language)
            }
            Timing::Total(t) => one(None, *t),
        }
    }
}

/// Why a [`Calibration`] holds the fallback model rather than a fit.
///
/// # Examples
///
/// ```
/// use microbatch::cost::{Calibrator, Fallback, Linear, Preset};
///
/// let mut calibrator = Calibrator::new(Linear::preset(Preset::Llava15_7b));
/// assert_eq!(calibrator.calibration().fallback(), Some(&Fallback::NotRefitted));
/// let status = calibrator.refit();
/// assert!(matches!(status.fallback(), Some(Fallback::TooFewRows { rows: 0, .. })));
/// assert_eq!(
///     status.fallback().unwrap().to_string(),
///     "too few rows: 0 equation(s) in the window, 2 needed"
/// );
/// ```
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Fallback {
    /// [`Calibrator::refit`] was not called yet.
    NotRefitted,
    /// Too few rows to identify the terms: `rows` equations with a positive
    /// time in the window (kept ones, after outliers are rejected), `needed`
    /// at least (twice the terms identified, at least 2, and at least the
    /// [`min_rows`](Calibrator::min_rows) setting).
    TooFewRows {
        /// The equations fitted (a per-phase row gives two, one per phase
        /// with a positive time; a total row one).
        rows: usize,
        /// The least number of equations for a fit.
        needed: usize,
    },
    /// No term's feature is positive in any row with a positive time.
    NothingIdentified,
    /// The fit failed (coefficients beyond the range of `f64`: the times
    /// are in a unit far from the features' scale).
    Failed(Error),
}

impl fmt::Display for Fallback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fallback::NotRefitted => f.write_str("not refitted yet"),
            Fallback::TooFewRows { rows, needed } => write!(
                f,
                "too few rows: {rows} equation(s) in the window, {needed} needed"
            ),
            Fallback::NothingIdentified => {
                f.write_str("no term's feature is positive in a timed row")
            }
            Fallback::Failed(e) => write!(f, "the fit failed: {e}"),
        }
    }
}

/// The prediction error of a fitted model on rows observed after its fit:
/// how far the costs have drifted since.
///
/// Relative errors are `predicted / measured - 1` of a row's whole time
/// ([`Timing::total`]); rows with a zero time are not counted.
///
/// # Examples
///
/// ```
/// use microbatch::cost::Drift;
///
/// let none = Drift::default();
/// assert_eq!((none.rows, none.mean_relative_error, none.max_relative_error), (0, 0.0, 0.0));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct Drift {
    /// The rows counted.
    pub rows: usize,
    /// The mean of `|predicted / measured - 1|` (0 without rows).
    pub mean_relative_error: f64,
    /// The largest `|predicted / measured - 1|` (0 without rows).
    pub max_relative_error: f64,
    /// The mean of `predicted / measured - 1`: negative when the model
    /// predicts less than the measured times (0 without rows).
    pub bias: f64,
}

impl Drift {
    fn add(&mut self, relative: f64) {
        let n = self.rows as f64;
        self.mean_relative_error = (self.mean_relative_error * n + abs(relative)) / (n + 1.0);
        self.bias = (self.bias * n + relative) / (n + 1.0);
        if abs(relative) > self.max_relative_error {
            self.max_relative_error = abs(relative);
        }
        self.rows += 1;
    }
}

/// The state of a [`Calibrator`] after a [`refit`](Calibrator::refit): the
/// model in use, fitted or the fallback (and why), and how well it fits.
///
/// # Examples
///
/// See [`Calibrator`].
#[derive(Clone, Debug, PartialEq)]
pub struct Calibration {
    model: Linear,
    fallback: Option<Fallback>,
    identified: [bool; Linear::MAX_TERMS],
    r_squared: Option<f64>,
    max_relative_error: Option<f64>,
    rows: usize,
    rejected: Vec<usize>,
    drift: Drift,
}

impl Calibration {
    fn fallback_to(model: Linear, reason: Fallback, rows: usize, drift: Drift) -> Self {
        Calibration {
            model,
            fallback: Some(reason),
            identified: [false; Linear::MAX_TERMS],
            r_squared: None,
            max_relative_error: None,
            rows,
            rejected: Vec::new(),
            drift,
        }
    }

    /// The model in use: the fitted coefficients over the calibrator's
    /// terms, or the fallback model.
    ///
    /// # Examples
    ///
    /// See [`Calibrator`].
    pub fn model(&self) -> &Linear {
        &self.model
    }

    /// Whether the model is fitted (`false`: the fallback is in use, and
    /// [`fallback`](Calibration::fallback) says why).
    ///
    /// # Examples
    ///
    /// See [`Calibrator`].
    #[must_use]
    pub fn fitted(&self) -> bool {
        self.fallback.is_none()
    }

    /// Why the fallback model is in use, or `None` for a fit.
    ///
    /// # Examples
    ///
    /// See [`Fallback`].
    #[must_use]
    pub fn fallback(&self) -> Option<&Fallback> {
        self.fallback.as_ref()
    }

    /// Whether the fit told `term`'s coefficient apart: its feature is
    /// positive in a kept row and not a linear combination of the features
    /// of the terms before it. An unidentified term has coefficient 0 in a
    /// fitted model. `false` for every term of the fallback and for terms
    /// the calibrator does not have.
    ///
    /// # Examples
    ///
    /// See [`Calibrator`].
    #[must_use]
    pub fn identified(&self, term: Term) -> bool {
        self.model
            .terms()
            .iter()
            .position(|&t| t == term)
            .is_some_and(|i| self.identified[i])
    }

    /// The coefficient of determination of the fit, `1 - SS_res / SS_tot`,
    /// over the kept rows' whole times ([`Timing::total`]); `None` for the
    /// fallback.
    ///
    /// # Examples
    ///
    /// See [`Calibrator`].
    #[must_use]
    pub fn r_squared(&self) -> Option<f64> {
        self.r_squared
    }

    /// The worst `|predicted / measured - 1|` over the kept rows' whole
    /// times (rows of time zero left out); `None` for the fallback. Never
    /// NaN; `+inf` when a measured time is so far below its prediction that
    /// the ratio overflows (a time of `1e-300` seconds).
    ///
    /// # Examples
    ///
    /// See [`Calibrator`].
    #[must_use]
    pub fn max_relative_error(&self) -> Option<f64> {
        self.max_relative_error
    }

    /// The rows used whole: the rows of the window less the rejected ones
    /// (all the window's rows for the fallback).
    ///
    /// # Examples
    ///
    /// See [`Calibrator`].
    #[must_use]
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// The rows with an equation rejected as an outlier (a phase's time or
    /// the total), by position in the window at the refit (0 the oldest
    /// row), ascending.
    ///
    /// # Examples
    ///
    /// See [`Calibrator`].
    #[must_use]
    pub fn rejected(&self) -> &[usize] {
        &self.rejected
    }

    /// The drift of the previous refit's fitted model on the rows observed
    /// between it and this refit ([`Drift::default`] if the previous refit
    /// fell back, or none came before).
    ///
    /// # Examples
    ///
    /// See [`Calibrator`].
    #[must_use]
    pub fn drift(&self) -> Drift {
        self.drift
    }
}

/// One observed row: the features of its group (one per term of the
/// calibrator's model) and its time.
#[derive(Clone, Debug, PartialEq)]
struct Row {
    features: [f64; Linear::MAX_TERMS],
    time: Timing,
}

/// Online calibration of a [`Linear`] model's coefficients from measured
/// micro-batch times.
///
/// Give it the terms to fit as a fallback model (say [`Linear::preset`],
/// whose overhead terms start at zero); [`observe`](Calibrator::observe)
/// every measured micro-batch (its samples and its [`Timing`]), call
/// [`refit`](Calibrator::refit) at a step boundary and plan the next step
/// with [`model`](Calibrator::model). Until the terms can be told apart the
/// model is the fallback, and [`calibration`](Calibrator::calibration) says
/// why.
///
/// # The fit
///
/// - **Window**: the last [`window`](Calibrator::window) rows (default
///   4096); older rows are forgotten, so the model follows a change of the
///   costs within a window, and memory is `O(window x terms)`, allocated as
///   rows arrive.
/// - **Equations**: a per-phase row gives two, its vision terms' features
///   against its vision time and its language terms' against its language
///   time; a total row gives one, all features against its time. With
///   per-phase rows only, the system is block diagonal and each phase is
///   fitted on its own: its terms' significance judged on its own
///   residuals and its outliers on its own scale, so that a phase the terms
///   explain badly (a vision tower's fixed cost per call without
///   [`VisionGroups`](Term::VisionGroups) among the terms) does not spoil
///   the other; a total row ties the phases, and all equations are then
///   fitted together. An equation of time zero carries no relative
///   information and is left out.
/// - **Relative least squares**: non-negative coefficients minimizing the
///   sum of squared relative errors (`predicted / measured - 1`), as
///   [`fit`](super::fit) (Lawson-Hanson NNLS): timing noise is
///   multiplicative.
/// - **Robust**: after each fit, every equation's relative residual `r` is
///   compared with the median `m` of those of its kind (vision, language or
///   total), on the scale `s = 1.4826 x median |r - m|` of its kind (the
///   normal-consistent median absolute deviation); an equation beyond
///   `3.5 s` (and beyond `1e-6`) from `m` is rejected and the fit is redone
///   on the other equations, from all equations again each round, at most
///   4 rounds or until the rejected set repeats. A row with an equation
///   rejected is reported as [`rejected`](Calibration::rejected); its other
///   equation still counts. A micro-batch slowed 2x by a network hiccup or
///   a preemption is 50% off, far beyond 3.5 s for timing noise of a few
///   percent: it is flagged and has no weight in the coefficients.
/// - **Identification**: a term whose feature is zero in every kept
///   equation, or (numerically) a linear combination of the features of
///   the terms before it, gets coefficient 0 and is reported as not
///   [`identified`](Calibration::identified); that is never an error. Put
///   the terms that matter first (as [`Linear::preset`] does).
/// - **Fallback**: with fewer kept equations than twice the identified terms
///   (at least 2, and at least [`min_rows`](Calibrator::min_rows)), or if the
///   fit fails, the model is the fallback and
///   [`Calibration::fallback`] says why.
/// - **Drift**: once fitted, every new row is predicted by the model in use
///   as it arrives; [`drift`](Calibrator::drift) is the error on those rows,
///   and the next refit keeps it in its [`Calibration::drift`].
///
/// Deterministic (no randomness; ties broken by position), `no_std`.
///
/// # Complexity
///
/// [`observe`](Calibrator::observe): O(terms x (samples + images)) time, O(terms) space.
/// [`refit`](Calibrator::refit): at most 4 rounds of one NNLS fit, O(W k^2)
/// per active-set iteration for `W` rows in the window and `k` terms (at
/// most `3k + 10` iterations), plus O(W) selections for the medians; O(W k)
/// extra space. Linear in the window.
///
/// # Examples
///
/// ```
/// use microbatch::cost::{
///     Calibrator, CostModel, Image, Linear, Preset, Sample, Term, Timing,
/// };
///
/// // The truth: the preset's terms in seconds, with per-image and per-sample overheads.
/// let truth = Linear::new([
///     (Term::Tiles { tokens_per_tile: 576.try_into().unwrap() }, 4e-3),
///     (Term::Tokens, 3e-5),
///     (Term::DocumentAttention, 2e-10),
///     (Term::Images, 1e-3),
///     (Term::Samples, 5e-4),
/// ])?;
/// let mut calibrator = Calibrator::new(Linear::preset(Preset::Llava15_7b));
/// for i in 0..40u32 {
///     let group: Vec<Sample> = (0..1 + i % 5)
///         .map(|j| {
///             let text = 100 + 37 * ((i * 7 + j * 13) % 50);
///             if (i + j) % 3 == 0 { Sample::text_only(text) } else { Sample::new(text, [Image::new(576)]) }
///         })
///         .collect();
///     let refs: Vec<&Sample> = group.iter().collect();
///     let mut time = truth.cost(&refs);
///     if i == 17 {
///         time = time * 2.0; // a hiccup
///     }
///     calibrator.observe(&group, Timing::Phases(time))?;
/// }
/// let status = calibrator.refit().clone();
/// assert!(status.fitted());
/// assert_eq!(status.rejected(), [17]);
/// assert!(status.max_relative_error().unwrap() < 1e-9);
/// let fitted = calibrator.model();
/// assert!((fitted.coefficient(Term::Tokens).unwrap() / 3e-5 - 1.0).abs() < 1e-6);
/// // Every image has 1 tile of 576 tokens: images and units tell nothing new.
/// assert!(!status.identified(Term::Images) && status.identified(Term::Samples));
/// # Ok::<(), microbatch::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Calibrator {
    fallback: Linear,
    window: usize,
    min_rows: usize,
    /// The window: a ring buffer once full, `head` its oldest row.
    rows: Vec<Row>,
    head: usize,
    calibration: Calibration,
    /// The error of the fitted model in use on the rows since the refit.
    drift: Drift,
}

/// The MAD multiple beyond which a row is rejected.
const THRESHOLD: f64 = 3.5;
/// The normal-consistent MAD factor: `1 / Phi^-1(3/4)`.
const MAD_TO_SIGMA: f64 = 1.4826;
/// Relative residuals below this are never rejected (exact timings).
const FLOOR: f64 = 1e-6;
/// Rounds of rejection and refit.
const ROUNDS: usize = 4;
/// The t statistic below which a term's effect is within the noise, and
/// the term is left out of the fit (not identified).
const SIGNIFICANCE: f64 = 3.0;

impl Calibrator {
    /// The default [`window`](Calibrator::window): 4096 rows.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Calibrator, Linear, Preset};
    ///
    /// let c = Calibrator::new(Linear::preset(Preset::Qwen25Vl7b));
    /// assert_eq!(c.window_rows(), Calibrator::DEFAULT_WINDOW);
    /// ```
    pub const DEFAULT_WINDOW: usize = 4096;

    /// A calibrator of `fallback`'s terms, which uses `fallback` until a fit
    /// exists.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Calibrator, Linear, Preset};
    ///
    /// let preset = Linear::preset(Preset::InternVl25_8b);
    /// let c = Calibrator::new(preset);
    /// assert_eq!(c.model(), preset);
    /// assert!(!c.calibration().fitted());
    /// ```
    pub fn new(fallback: Linear) -> Self {
        Calibrator {
            fallback,
            window: Calibrator::DEFAULT_WINDOW,
            min_rows: 0,
            rows: Vec::new(),
            head: 0,
            calibration: Calibration::fallback_to(
                fallback,
                Fallback::NotRefitted,
                0,
                Drift::default(),
            ),
            drift: Drift::default(),
        }
    }

    /// Keeps the last `rows` rows (at least 1; default
    /// [`DEFAULT_WINDOW`](Calibrator::DEFAULT_WINDOW)). Shrinking the window
    /// of a calibrator with more rows forgets its oldest rows at once.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Calibrator, Linear, Preset};
    ///
    /// let c = Calibrator::new(Linear::preset(Preset::Llava15_7b)).window(512);
    /// assert_eq!(c.window_rows(), 512);
    /// assert_eq!(Calibrator::new(Linear::preset(Preset::Llava15_7b)).window(0).window_rows(), 1);
    /// ```
    #[must_use]
    pub fn window(mut self, rows: usize) -> Self {
        let rows = rows.max(1);
        if self.rows.len() > rows {
            // Oldest first, then keep the newest `rows`.
            self.rows.rotate_left(self.head);
            let drop = self.rows.len() - rows;
            self.rows.drain(..drop);
            self.head = 0;
        }
        self.window = rows;
        self
    }

    /// Falls back while the window holds fewer than `rows` kept equations
    /// (default 0: only the rule of twice the identified terms applies).
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Calibrator, Fallback, Linear, Preset};
    ///
    /// let mut c = Calibrator::new(Linear::preset(Preset::Llava15_7b)).min_rows(100);
    /// assert!(matches!(c.refit().fallback(), Some(Fallback::TooFewRows { needed: 100, .. })));
    /// ```
    #[must_use]
    pub fn min_rows(mut self, rows: usize) -> Self {
        self.min_rows = rows;
        self
    }

    /// The window's size in rows.
    ///
    /// # Examples
    ///
    /// See [`window`](Calibrator::window).
    #[must_use]
    pub fn window_rows(&self) -> usize {
        self.window
    }

    /// The rows in the window now.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Calibrator, Linear, Preset, Sample, Timing};
    ///
    /// let mut c = Calibrator::new(Linear::preset(Preset::Llava15_7b)).window(2);
    /// for _ in 0..3 {
    ///     c.observe([&Sample::text_only(100)], Timing::Total(0.1))?;
    /// }
    /// assert_eq!(c.rows(), 2);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn rows(&self) -> usize {
        self.rows.len()
    }

    /// The model the calibrator fits and falls back to.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Calibrator, Linear, Preset};
    ///
    /// let preset = Linear::preset(Preset::Llava15_7b);
    /// assert_eq!(*Calibrator::new(preset).fallback(), preset);
    /// ```
    pub fn fallback(&self) -> &Linear {
        &self.fallback
    }

    /// Records one measured group (a micro-batch: the samples of its packed
    /// sequences) and its time. Its features are computed once and stored;
    /// the oldest row leaves a full window. If the model in use is fitted,
    /// the row's prediction error joins the [`drift`](Calibrator::drift).
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] at a [timing](crate::Locator::Timing) naming the
    /// phase (or the total) whose time is NaN, infinite or negative; nothing is
    /// stored then.
    ///
    /// # Complexity
    ///
    /// O(terms x (samples + images)) time, O(terms) space (none once the
    /// window is full).
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Calibrator, Linear, Phases, Preset, Sample, Timing};
    /// use microbatch::{Error, Locator};
    ///
    /// let mut c = Calibrator::new(Linear::preset(Preset::Llava15_7b));
    /// let group = vec![Sample::text_only(100), Sample::text_only(300)];
    /// c.observe(&group, Timing::Phases(Phases::new(0.0, 0.02)))?;
    /// let bad = c.observe(&group, Timing::Phases(Phases::new(f64::NAN, 0.02)));
    /// assert!(matches!(bad, Err(Error::Invalid { at: Locator::Timing { .. }, .. })));
    /// assert_eq!(c.rows(), 1);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    pub fn observe<'s>(
        &mut self,
        group: impl IntoIterator<Item = &'s Sample>,
        time: Timing,
    ) -> Result<(), Error> {
        self.observe_rows([group], time)
    }

    /// Records one measured micro-batch given as its packed sequences
    /// (`rows`, each the samples of one sequence) and its time: its
    /// features are the sums over the rows of each row's features, so that
    /// the terms that are not additive over samples see the rows
    /// ([`RowAttention`](super::Term::RowAttention): the sum over rows of
    /// the row's tokens squared; [`Groups`](super::Term::Groups): the
    /// number of non-empty rows), as the planner evaluates a micro-batch of
    /// `S` sequences. [`observe`](Calibrator::observe) is this with one
    /// row. Otherwise as `observe`.
    ///
    /// # Errors
    ///
    /// As [`observe`](Calibrator::observe).
    ///
    /// # Complexity
    ///
    /// O(terms x (rows + samples + images)) time, O(terms) space.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Calibrator, Linear, Sample, Term, Timing};
    ///
    /// let mut c = Calibrator::new(Linear::new([(Term::Tokens, 1.0), (Term::RowAttention, 1.0)])?);
    /// let (a, b) = (Sample::text_only(3), Sample::text_only(4));
    /// // Two rows, [a, b] and [b]: row attention (3 + 4)^2 + 4^2 = 65.
    /// c.observe_rows([vec![&a, &b], vec![&b]], Timing::Total(1.0))?;
    /// assert_eq!(c.rows(), 1);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    pub fn observe_rows<'s, G>(
        &mut self,
        rows: impl IntoIterator<Item = G>,
        time: Timing,
    ) -> Result<(), Error>
    where
        G: IntoIterator<Item = &'s Sample>,
    {
        time.check()?;
        let model = &self.fallback;
        let fitted = self.calibration.fitted();
        let mut features = [0.0; Linear::MAX_TERMS];
        let mut predicted = 0.0;
        for row in rows {
            let mut state = model.empty();
            for sample in row {
                model.insert(&mut state, sample);
            }
            for (x, y) in features.iter_mut().zip(model.features(&state)) {
                *x += y;
            }
            if fitted {
                predicted += self.calibration.model.evaluate(&state).total();
            }
        }
        let row = Row { features, time };
        if fitted {
            let measured = time.total();
            if measured > 0.0 {
                let relative = predicted / measured - 1.0;
                if relative.is_finite() {
                    self.drift.add(relative);
                }
            }
        }
        if self.rows.len() < self.window {
            self.rows.push(row);
        } else {
            self.rows[self.head] = row;
            self.head = (self.head + 1) % self.window;
        }
        Ok(())
    }

    /// Refits the coefficients on the window (see the type's docs), keeps
    /// the result as the model in use and returns the new state.
    ///
    /// # Complexity
    ///
    /// See [`Calibrator`]: linear in the window.
    ///
    /// # Examples
    ///
    /// See [`Calibrator`].
    pub fn refit(&mut self) -> &Calibration {
        let drift = core::mem::take(&mut self.drift);
        let drift = if self.calibration.fitted() {
            drift
        } else {
            Drift::default()
        };
        let rows: Vec<&Row> = (0..self.rows.len())
            .map(|i| &self.rows[(self.head + i) % self.rows.len()])
            .collect();
        self.calibration = robust_fit(&self.fallback, &rows, self.min_rows, drift);
        &self.calibration
    }

    /// The model in use: the last refit's fitted model, or the fallback.
    ///
    /// # Examples
    ///
    /// See [`Calibrator`].
    pub fn model(&self) -> Linear {
        self.calibration.model
    }

    /// The state of the last [`refit`](Calibrator::refit).
    ///
    /// # Examples
    ///
    /// See [`Fallback`].
    pub fn calibration(&self) -> &Calibration {
        &self.calibration
    }

    /// The error of the fitted model in use on the rows observed since the
    /// last refit ([`Drift::default`] while the fallback is in use).
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Calibrator, Linear, Sample, Term, Timing};
    ///
    /// let mut c = Calibrator::new(Linear::new([(Term::Tokens, 1.0), (Term::Samples, 1.0)])?);
    /// for t in 1..=10u32 {
    ///     let s = Sample::text_only(100 * t);
    ///     c.observe([&s], Timing::Total(1e-4 * f64::from(100 * t) + 1e-2))?;
    /// }
    /// assert!(c.refit().fitted());
    /// // The costs double: the fitted model predicts half the time.
    /// c.observe([&Sample::text_only(500)], Timing::Total(2.0 * (0.05 + 1e-2)))?;
    /// assert_eq!(c.drift().rows, 1);
    /// assert!((c.drift().bias + 0.5).abs() < 1e-6);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn drift(&self) -> Drift {
        self.drift
    }
}

/// One equation of the fit: the row it comes from, its phase (`None`: all
/// terms) and its time.
#[derive(Clone, Copy)]
struct Equation {
    row: usize,
    phase: Option<Phase>,
    time: f64,
}

/// The equations of the rows: per-phase rows give one per phase with a
/// positive time, total rows one if positive.
fn equations(rows: &[&Row]) -> Vec<Equation> {
    let mut out = Vec::with_capacity(rows.len() * 2);
    for (i, row) in rows.iter().enumerate() {
        match row.time {
            Timing::Phases(p) => {
                for phase in Phase::ALL {
                    let time = p.get(phase);
                    if time > 0.0 {
                        out.push(Equation {
                            row: i,
                            phase: Some(phase),
                            time,
                        });
                    }
                }
            }
            Timing::Total(time) => {
                if time > 0.0 {
                    out.push(Equation {
                        row: i,
                        phase: None,
                        time,
                    });
                }
            }
        }
    }
    out
}

/// Feature `j` (a term of `terms`) in equation `e`: zero for a term of the
/// other phase.
fn feature(terms: &[Term], rows: &[&Row], e: &Equation, j: usize) -> f64 {
    match e.phase {
        Some(p) if terms[j].phase() != p => 0.0,
        _ => rows[e.row].features[j],
    }
}

/// The blocks of one round's fit: `(terms, equations)` pairs fitted
/// independently. With per-phase equations only, the system is block
/// diagonal (a vision equation has no language feature and the other way
/// round), so each phase is a block of its own: its terms' significance is
/// judged on its own residuals (a vision time that is noisier, or that
/// the vision terms explain worse, does not hide a language term), and a
/// phase without equations leaves its terms unidentified. A total
/// equation ties the phases: one block of every term.
fn blocks<'e>(terms: &[Term], used: &[&'e Equation]) -> Vec<(Vec<usize>, Vec<&'e Equation>)> {
    let k = terms.len();
    if used.iter().any(|e| e.phase.is_none()) {
        return vec![((0..k).collect(), used.to_vec())];
    }
    Phase::ALL
        .iter()
        .map(|&phase| {
            (
                (0..k).filter(|&j| terms[j].phase() == phase).collect(),
                used.iter()
                    .copied()
                    .filter(|e| e.phase == Some(phase))
                    .collect(),
            )
        })
        .collect()
}

/// The fit of one round: coefficients by term (zero where not identified)
/// and which terms were identified, or why there is none. Each block (see
/// [`blocks`]) is fitted on its own: its terms with a positive feature in
/// one of its equations, less those dependent on the terms before them
/// and, one at a time, the least significant one while it is within the
/// noise ([`weakest`]).
fn fit_once(
    terms: &[Term],
    rows: &[&Row],
    eqs: &[Equation],
    kept: &[bool],
    min_rows: usize,
) -> Result<([f64; Linear::MAX_TERMS], [bool; Linear::MAX_TERMS]), Fallback> {
    let used: Vec<&Equation> = eqs
        .iter()
        .zip(kept)
        .filter(|(_, &k)| k)
        .map(|(e, _)| e)
        .collect();
    let mut parts: Vec<(Vec<usize>, Vec<&Equation>)> = blocks(terms, &used)
        .into_iter()
        .map(|(block, eqs)| {
            // Terms with a positive feature in one of the block's equations.
            let active = block
                .into_iter()
                .filter(|&j| eqs.iter().any(|e| feature(terms, rows, e, j) > 0.0))
                .collect();
            (active, eqs)
        })
        .collect();
    let mut c = [0.0; Linear::MAX_TERMS];
    let mut identified = [false; Linear::MAX_TERMS];
    loop {
        // Every block needs twice its terms' equations: the count needed
        // is the equations used with each short block's shortfall added.
        let shortfall: usize = parts
            .iter()
            .map(|(active, eqs)| (2 * active.len()).saturating_sub(eqs.len()))
            .sum();
        let needed = (used.len() + shortfall).max(2).max(min_rows);
        if used.len() < needed {
            return Err(Fallback::TooFewRows {
                rows: used.len(),
                needed,
            });
        }
        if parts.iter().all(|(active, _)| active.is_empty()) {
            return Err(Fallback::NothingIdentified);
        }
        let mut changed = false;
        for (active, eqs) in &mut parts {
            if active.is_empty() {
                continue;
            }
            let table: Vec<(Vec<f64>, f64)> = eqs
                .iter()
                .map(|e| {
                    let x = active.iter().map(|&j| feature(terms, rows, e, j)).collect();
                    (x, e.time)
                })
                .collect();
            match fit(&table) {
                Ok(f) => {
                    if let Some(weakest) = weakest(&table, f.coefficients()) {
                        // Its effect is within the noise: not identified.
                        active.remove(weakest);
                        changed = true;
                        break;
                    }
                    for (&j, &cj) in active.iter().zip(f.coefficients()) {
                        c[j] = cj;
                        identified[j] = true;
                    }
                }
                Err(Error::RankDeficient { feature }) if feature < active.len() => {
                    // Dependent on the terms before it: not identified.
                    active.remove(feature);
                    changed = true;
                    break;
                }
                Err(e) => return Err(Fallback::Failed(e)),
            }
        }
        if !changed {
            return Ok((c, identified));
        }
        c = [0.0; Linear::MAX_TERMS];
        identified = [false; Linear::MAX_TERMS];
    }
}

/// The least significant positive coefficient of a relative least-squares
/// fit, if its t statistic is below [`SIGNIFICANCE`]: `c_j / se_j`, with
/// `se_j` the coefficient's standard error `sigma * sqrt((A^T A)^-1_jj)` on
/// the rows divided by their times (`A`) over the positive coefficients'
/// columns, and `sigma^2` the mean squared relative residual (`m - p`
/// degrees of freedom). A column the others explain (singular `A^T A`) has
/// an infinite error. `None` when every positive coefficient is
/// significant, or when the statistics cannot be formed (too few rows, a
/// ratio beyond the range of `f64`): the fit stands.
fn weakest(table: &[(Vec<f64>, f64)], c: &[f64]) -> Option<usize> {
    let m = table.len();
    let positive: Vec<usize> = (0..c.len()).filter(|&j| c[j] > 0.0).collect();
    let p = positive.len();
    if p == 0 || m <= p {
        return None;
    }
    // Columns of `A` over the positive coefficients, scaled to unit norm:
    // `b_j = a_j / n_j`, whose coefficient is `d_j = c_j * n_j`.
    let mut columns: Vec<Vec<f64>> = Vec::with_capacity(p);
    let mut d: Vec<f64> = Vec::with_capacity(p);
    for &j in &positive {
        let col: Vec<f64> = table.iter().map(|(x, t)| x[j] / t).collect();
        let top = col.iter().fold(0.0f64, |a, &v| if v > a { v } else { a });
        if !top.is_finite() || top <= 0.0 {
            return None;
        }
        let norm2: f64 = col.iter().map(|v| (v / top) * (v / top)).sum();
        let norm = top * sqrt(norm2);
        d.push(c[j] * norm);
        columns.push(col.into_iter().map(|v| v / norm).collect());
    }
    let mut rss = 0.0;
    for (i, (x, t)) in table.iter().enumerate() {
        let predicted: f64 = positive.iter().map(|&j| c[j] * x[j]).sum();
        let _ = i;
        let r = predicted / t - 1.0;
        rss += r * r;
    }
    let sigma2 = rss / (m - p) as f64;
    if !sigma2.is_finite() {
        return None;
    }
    // Cholesky of the Gram matrix `G = B^T B` (unit diagonal).
    let mut l = vec![0.0; p * p];
    let mut singular = vec![false; p];
    for i in 0..p {
        for k in 0..=i {
            let mut s: f64 = columns[i].iter().zip(&columns[k]).map(|(a, b)| a * b).sum();
            for q in 0..k {
                s -= l[i * p + q] * l[k * p + q];
            }
            if i == k {
                if !(s > 1e-12) {
                    // Explained by the columns before it.
                    singular[i] = true;
                    l[i * p + i] = 1.0;
                } else {
                    l[i * p + i] = sqrt(s);
                }
            } else if singular[k] {
                l[i * p + k] = 0.0;
            } else {
                l[i * p + k] = s / l[k * p + k];
            }
        }
    }
    // `(G^-1)_jj = |L^-1 e_j|^2`, from the forward solve of `L y = e_j`.
    let mut worst: Option<(f64, usize)> = None;
    let mut y = vec![0.0; p];
    for j in 0..p {
        let t = if singular[j] {
            0.0
        } else {
            y.iter_mut().for_each(|v| *v = 0.0);
            for i in j..p {
                let mut s = if i == j { 1.0 } else { 0.0 };
                for q in j..i {
                    s -= l[i * p + q] * y[q];
                }
                y[i] = if singular[i] { 0.0 } else { s / l[i * p + i] };
            }
            let g: f64 = y.iter().map(|v| v * v).sum();
            let se = sqrt(sigma2 * g);
            if se > 0.0 {
                d[j] / se
            } else {
                f64::INFINITY
            }
        };
        // NaN-safe: a statistic that is not a number counts as weak.
        if !(t >= SIGNIFICANCE) && worst.map_or(true, |(w, _)| t < w || t.is_nan()) {
            worst = Some((t, j));
        }
    }
    worst.map(|(_, j)| positive[j])
}

/// `sqrt(x)` for `x >= 0` without `std` (Newton from a power-of-two start):
/// exact to within an ulp or two, enough for a t statistic.
fn sqrt(x: f64) -> f64 {
    if !(x > 0.0) || !x.is_finite() {
        return if x == f64::INFINITY { x } else { 0.0 };
    }
    // Halve the exponent for the start value.
    let bits = x.to_bits();
    let mut r = f64::from_bits((bits >> 1) + (1023u64 << 51));
    for _ in 0..6 {
        r = 0.5 * (r + x / r);
    }
    r
}

/// The median of `v` (the lower one of an even count), by selection.
fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let mid = (v.len() - 1) / 2;
    let (_, m, _) = v.select_nth_unstable_by(mid, f64::total_cmp);
    *m
}

/// The relative residual of equation `e` under coefficients `c`.
fn residual(terms: &[Term], rows: &[&Row], e: &Equation, c: &[f64]) -> f64 {
    let predicted: f64 = (0..terms.len())
        .map(|j| {
            let x = feature(terms, rows, e, j);
            if x > 0.0 {
                c[j] * x
            } else {
                0.0
            }
        })
        .sum();
    predicted / e.time - 1.0
}

/// Which equations to keep under coefficients `c`: those within the robust
/// threshold of the median residual of their kind (vision, language or
/// total: the phases' timing noise differs, and one kind's spread must not
/// hide, or flag, the other's).
fn classify(terms: &[Term], rows: &[&Row], eqs: &[Equation], c: &[f64]) -> Vec<bool> {
    let r: Vec<f64> = eqs.iter().map(|e| residual(terms, rows, e, c)).collect();
    let mut kept = vec![true; eqs.len()];
    for kind in [Some(Phase::Vision), Some(Phase::Language), None] {
        let of_kind: Vec<usize> = (0..eqs.len()).filter(|&i| eqs[i].phase == kind).collect();
        if of_kind.is_empty() {
            continue;
        }
        let mut scratch: Vec<f64> = of_kind.iter().map(|&i| r[i]).collect();
        let center = median(&mut scratch);
        for (s, &i) in scratch.iter_mut().zip(&of_kind) {
            *s = abs(r[i] - center);
        }
        let scale = MAD_TO_SIGMA * median(&mut scratch);
        let limit = {
            let t = THRESHOLD * scale;
            if t > FLOOR {
                t
            } else {
                FLOOR
            }
        };
        for &i in &of_kind {
            // NaN-safe: a residual that is not a number is not kept.
            if !(abs(r[i] - center) <= limit) {
                kept[i] = false;
            }
        }
    }
    kept
}

/// The robust fit of the window (see [`Calibrator`]).
fn robust_fit(fallback: &Linear, rows: &[&Row], min_rows: usize, drift: Drift) -> Calibration {
    let terms = fallback.terms();
    let eqs = equations(rows);
    let mut kept = vec![true; eqs.len()];
    let mut current = fit_once(terms, rows, &eqs, &kept, min_rows);
    for _ in 0..ROUNDS {
        let Ok((c, _)) = &current else { break };
        let next = classify(terms, rows, &eqs, c);
        if next == kept {
            break;
        }
        kept = next;
        current = fit_once(terms, rows, &eqs, &kept, min_rows);
    }
    // A row is whole when none of its equations is rejected.
    let mut whole = vec![true; rows.len()];
    for (e, &k) in eqs.iter().zip(&kept) {
        if !k {
            whole[e.row] = false;
        }
    }
    let kept = whole;
    let used = kept.iter().filter(|&&k| k).count();
    let (c, identified) = match current {
        Ok(x) => x,
        Err(reason) => {
            return Calibration::fallback_to(*fallback, reason, rows.len(), drift);
        }
    };
    // Coefficients from `fit` are finite and non-negative.
    let model = match fallback.with_coefficients(&c[..terms.len()]) {
        Ok(m) => m,
        Err(e) => {
            return Calibration::fallback_to(*fallback, Fallback::Failed(e), rows.len(), drift)
        }
    };
    let (r_squared, worst) = judge(&model, rows, &kept);
    Calibration {
        model,
        fallback: None,
        identified,
        r_squared: Some(r_squared),
        max_relative_error: Some(worst),
        rows: used,
        rejected: (0..rows.len()).filter(|&i| !kept[i]).collect(),
        drift,
    }
}

/// R^2 and the worst relative error over the kept rows' whole times, on
/// times divided by the largest so that no sum overflows.
fn judge(model: &Linear, rows: &[&Row], kept: &[bool]) -> (f64, f64) {
    let pairs: Vec<(f64, f64)> = rows
        .iter()
        .zip(kept)
        .filter(|(_, &k)| k)
        .map(|(row, _)| {
            let predicted: f64 = model
                .terms()
                .iter()
                .zip(model.coefficients())
                .zip(&row.features)
                .map(|((_, &c), &x)| if x > 0.0 { c * x } else { 0.0 })
                .sum();
            (predicted, row.time.total())
        })
        .collect();
    let mut worst = 0.0f64;
    for &(p, t) in &pairs {
        if t > 0.0 {
            let r = abs(p / t - 1.0);
            if r > worst {
                worst = r;
            }
        }
    }
    let top = pairs.iter().fold(0.0f64, |a, &(p, t)| {
        let m = if p > t { p } else { t };
        if m > a {
            m
        } else {
            a
        }
    });
    if top <= 0.0 || !top.is_finite() || pairs.is_empty() {
        return (1.0, worst);
    }
    let n = pairs.len() as f64;
    let mean = pairs.iter().map(|&(_, t)| t / top).sum::<f64>() / n;
    let (mut ss_res, mut ss_tot) = (0.0, 0.0);
    for &(p, t) in &pairs {
        let (p, t) = (p / top, t / top);
        ss_res += (p - t) * (p - t);
        ss_tot += (t - mean) * (t - mean);
    }
    let r2 = if ss_tot > 0.0 {
        1.0 - ss_res / ss_tot
    } else if ss_res == 0.0 {
        1.0
    } else {
        0.0
    };
    (if r2.is_finite() { r2 } else { f64::MIN }, worst)
}

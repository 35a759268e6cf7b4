//! `Calibrator` from Python: the crate's online calibration of a linear model's coefficients from measured micro-batch times.

use microbatch::cost::{Calibration, Calibrator, Phases, Sample, Timing};
use numpy::PyReadonlyArray1;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::cost::{Arrays, NativeCostModel};
use crate::error::{guard, Failure, Item};

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<NativeCalibrator>()?;
    Ok(())
}

/// The crate's `Calibrator` (see `microbatch.cost.Calibrator`).
#[pyclass(module = "microbatch._native", name = "Calibrator")]
pub(crate) struct NativeCalibrator {
    calibrator: Calibrator,
}

/// A `SettingError` about the argument `name`.
fn setting(name: &'static str, message: String) -> Failure {
    Failure::Input {
        class: "SettingError",
        kind: "Binding",
        item: Some(Item::Name(name)),
        message,
    }
}

/// The calibration as a dict of plain values (the Python side makes its
/// frozen dataclass from it).
fn status<'py>(py: Python<'py>, c: &Calibration) -> PyResult<Bound<'py, PyDict>> {
    let model = c.model();
    let terms: Vec<String> = model.terms().iter().map(|t| t.to_string()).collect();
    let identified: Vec<bool> = model.terms().iter().map(|&t| c.identified(t)).collect();
    let d = PyDict::new(py);
    d.set_item("fitted", c.fitted())?;
    d.set_item("reason", c.fallback().map(|f| f.to_string()))?;
    d.set_item("terms", terms)?;
    d.set_item("coefficients", model.coefficients().to_vec())?;
    d.set_item("identified", identified)?;
    d.set_item("r_squared", c.r_squared())?;
    d.set_item("max_relative_error", c.max_relative_error())?;
    d.set_item("rows", c.rows())?;
    d.set_item("rejected", c.rejected().to_vec())?;
    let drift = c.drift();
    d.set_item(
        "drift",
        (
            drift.rows,
            drift.mean_relative_error,
            drift.max_relative_error,
            drift.bias,
        ),
    )?;
    Ok(d)
}

#[pymethods]
impl NativeCalibrator {
    /// A calibrator of `fallback`'s terms (a model of exactly one `Linear`).
    #[new]
    #[pyo3(signature = (fallback, window, min_rows))]
    fn new(
        py: Python<'_>,
        fallback: &NativeCostModel,
        window: usize,
        min_rows: Option<usize>,
    ) -> PyResult<Self> {
        let linear = fallback.as_linear().copied();
        guard(py, || {
            let linear = linear.ok_or_else(|| {
                setting(
                    "model",
                    "a calibrator fits the coefficients of a linear model: give a preset name or \
                     a microbatch.cost.Linear"
                        .to_owned(),
                )
            })?;
            let c = Calibrator::new(linear).window(window);
            let calibrator = match min_rows {
                Some(m) => c.min_rows(m),
                None => c,
            };
            Ok::<_, Failure>(NativeCalibrator { calibrator })
        })
    }

    /// Observes one micro-batch: its samples (arrays as for a cost model)
    /// and its time, per phase (`vision` and `language`) or in total;
    /// `rows`: each sample's packed sequence (any labels; `None`: one
    /// sequence), for the terms that see rows (`Calibrator::observe_rows`).
    #[pyo3(signature = (text, image_tokens, image_units, image_offsets, vision, language, seconds, rows=None))]
    #[allow(clippy::too_many_arguments)]
    fn observe(
        &mut self,
        py: Python<'_>,
        text: PyReadonlyArray1<'_, u32>,
        image_tokens: PyReadonlyArray1<'_, u32>,
        image_units: Option<PyReadonlyArray1<'_, u32>>,
        image_offsets: PyReadonlyArray1<'_, u64>,
        vision: Option<f64>,
        language: Option<f64>,
        seconds: Option<f64>,
        rows: Option<PyReadonlyArray1<'_, u32>>,
    ) -> PyResult<()> {
        let rows: Option<Vec<u32>> = rows.map(|r| r.as_array().to_vec());
        let arrays = Arrays::borrow(
            &text,
            &image_tokens,
            image_units.as_ref(),
            &image_offsets,
            None,
        )?;
        let calibrator = &mut self.calibrator;
        guard(py, move || {
            let time = match (vision, language, seconds) {
                (Some(v), Some(l), None) => Timing::Phases(Phases::new(v, l)),
                (None, None, Some(s)) => Timing::Total(s),
                _ => {
                    return Err(setting(
                        "seconds",
                        "give vision_seconds and language_seconds (the phases timed \
                         separately), or seconds (the whole micro-batch), not both"
                            .to_owned(),
                    ))
                }
            };
            let name = |i: usize| (format!("sample {i}"), Item::Index(i));
            arrays.check(&name)?;
            let samples = (0..arrays.text.len())
                .map(|i| arrays.sample(i, &name))
                .collect::<Result<Vec<Sample>, _>>()?;
            match rows {
                None => calibrator.observe(&samples, time)?,
                Some(rows) => {
                    if rows.len() != samples.len() {
                        return Err(setting(
                            "rows",
                            format!(
                                "rows gives the sequence of {} samples but the micro-batch \
                                 has {}: give one label per sample",
                                rows.len(),
                                samples.len()
                            ),
                        ));
                    }
                    // Samples by row label, rows in ascending label.
                    let mut by_row: std::collections::BTreeMap<u32, Vec<&Sample>> =
                        std::collections::BTreeMap::new();
                    for (s, &r) in samples.iter().zip(&rows) {
                        by_row.entry(r).or_default().push(s);
                    }
                    calibrator.observe_rows(by_row.into_values(), time)?;
                }
            }
            Ok::<_, Failure>(())
        })
    }

    /// Refits on the window; returns the new state (a dict).
    fn refit<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let calibrator = &mut self.calibrator;
        let c = guard(py, move || Ok::<_, Failure>(calibrator.refit().clone()))?;
        status(py, &c)
    }

    /// The state of the last refit (a dict).
    #[getter]
    fn status<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        status(py, self.calibrator.calibration())
    }

    /// The model in use: fitted, or the fallback.
    #[getter]
    fn model(&self) -> NativeCostModel {
        NativeCostModel::of_linear(self.calibrator.model())
    }

    /// The fallback model (its terms are the terms fitted).
    #[getter]
    fn fallback(&self) -> NativeCostModel {
        NativeCostModel::of_linear(*self.calibrator.fallback())
    }

    /// `(rows, mean relative error, max relative error, bias)` of the model
    /// in use on the rows observed since the last refit.
    #[getter]
    fn drift(&self) -> (usize, f64, f64, f64) {
        let d = self.calibrator.drift();
        (d.rows, d.mean_relative_error, d.max_relative_error, d.bias)
    }

    /// The rows in the window.
    #[getter]
    fn rows(&self) -> usize {
        self.calibrator.rows()
    }

    /// The window's capacity in rows.
    #[getter]
    fn window(&self) -> usize {
        self.calibrator.window_rows()
    }
}

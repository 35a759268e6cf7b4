//! Cost models built from Python: the crate's terms composed at run time with the crate's combinators, behind its type-erased model (`BoxCostModel`); per-sample costs from arrays; and `fit`.

use core::fmt::Debug;
use core::num::NonZeroU32;
use core::str::FromStr;

use microbatch::cost::{
    fit, BoxCostModel, CostModel, DocumentAttention, FullAttention, Given, Image, Incremental,
    Linear, PerGroup, PerImage, PerSample, PerTile, Phase, Phases, Preset, Sample, Term, Tokens,
    Training, Windowed,
};
use microbatch::Error;
use numpy::ndarray::Array2;
use numpy::{
    IntoPyArray, PyArray1, PyArray2, PyReadonlyArray1, PyReadonlyArray2, PyUntypedArrayMethods,
    ToPyArray,
};
use pyo3::prelude::*;

use crate::error::{guard, named, Failure, Item};

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<NativeCostModel>()?;
    m.add_class::<NativeFit>()?;
    m.add_function(wrap_pyfunction!(fit_rows, m)?)?;
    // `microbatch.cost.TERMS`: the names of the `Linear` terms.
    m.add("TERM_NAMES", Term::NAMES.to_vec())?;
    // `PRESETS`, `PHASES` and `TRAINING`: the names the crate reads.
    m.add("PRESET_NAMES", Preset::NAMES.to_vec())?;
    m.add("PHASE_NAMES", Phase::NAMES.to_vec())?;
    m.add("TRAINING_NAMES", Training::NAMES.to_vec())?;
    Ok(())
}

// ----------------------------------------------------------- sample arrays

/// The samples' arrays as the Python side passes them: text tokens, the
/// images of all samples flattened with `n + 1` offsets (CSR), optional
/// units per image and optional given costs (`n * 2` values: vision,
/// language per sample).
pub(crate) struct Arrays<'a> {
    pub(crate) text: &'a [u32],
    pub(crate) image_tokens: &'a [u32],
    pub(crate) image_units: Option<&'a [u32]>,
    pub(crate) offsets: &'a [u64],
    pub(crate) costs: Option<&'a [f64]>,
}

impl<'a> Arrays<'a> {
    /// Borrows the arrays as the native entry points receive them (each
    /// C-contiguous, as the Python side makes them).
    pub(crate) fn borrow(
        text: &'a PyReadonlyArray1<'_, u32>,
        image_tokens: &'a PyReadonlyArray1<'_, u32>,
        image_units: Option<&'a PyReadonlyArray1<'_, u32>>,
        offsets: &'a PyReadonlyArray1<'_, u64>,
        costs: Option<&'a PyReadonlyArray2<'_, f64>>,
    ) -> PyResult<Self> {
        Ok(Arrays {
            text: text.as_slice()?,
            image_tokens: image_tokens.as_slice()?,
            image_units: image_units.map(|u| u.as_slice()).transpose()?,
            offsets: offsets.as_slice()?,
            costs: costs.map(|c| c.as_slice()).transpose()?,
        })
    }

    /// Checks the lengths, once for all samples; `name(i)` describes sample
    /// `i` in messages and is its `item`.
    pub(crate) fn check(&self, name: &impl Fn(usize) -> (String, Item)) -> Result<(), Failure> {
        let n = self.text.len();
        if self.offsets.len() != n + 1 {
            return Err(Failure::shape(format!(
                "image offsets have {} entries, expected {} (one per sample and one more)",
                self.offsets.len(),
                n + 1
            )));
        }
        if let Some(c) = self.costs {
            if c.len() != 2 * n {
                return Err(Failure::shape(format!(
                    "costs have {} values, expected {} ((n, 2): vision and language per sample)",
                    c.len(),
                    2 * n
                )));
            }
        }
        if let Some(u) = self.image_units {
            if u.len() != self.image_tokens.len() {
                return Err(Failure::shape(format!(
                    "image_units has {} entries, image_tokens {}: give one unit count per image",
                    u.len(),
                    self.image_tokens.len()
                )));
            }
            if let Some(k) = u.iter().position(|&u| u == 0) {
                let i = self
                    .offsets
                    .partition_point(|&o| o <= k as u64)
                    .saturating_sub(1);
                let (what, item) = name(i);
                let first = self.offsets.get(i).copied().unwrap_or(0) as usize;
                return Err(Failure::Input {
                    class: "InvalidValueError",
                    kind: "Binding",
                    item: Some(item),
                    message: format!(
                        "image {} of {what} has 0 units: every image has at least 1",
                        k.saturating_sub(first)
                    ),
                });
            }
        }
        Ok(())
    }

    /// Sample `i` (`i < n`, after [`check`](Arrays::check)).
    #[inline]
    pub(crate) fn sample(
        &self,
        i: usize,
        name: &impl Fn(usize) -> (String, Item),
    ) -> Result<Sample, Failure> {
        let (lo, hi) = match (self.offsets.get(i), self.offsets.get(i + 1)) {
            (Some(&lo), Some(&hi)) => (lo, hi),
            _ => return Err(Failure::shape(format!("no image offsets for sample {i}"))),
        };
        let images = match usize::try_from(lo)
            .ok()
            .zip(usize::try_from(hi).ok())
            .and_then(|(lo, hi)| self.image_tokens.get(lo..hi).map(|t| (lo, t)))
        {
            Some(x) => x,
            None => {
                let (what, item) = name(i);
                return Err(Failure::Input {
                    class: "InvalidValueError",
                    kind: "Binding",
                    item: Some(item),
                    message: format!(
                        "image offsets of {what} are [{lo}, {hi}), not an increasing range within the {} image values",
                        self.image_tokens.len()
                    ),
                });
            }
        };
        let text = self.text.get(i).copied().unwrap_or(0);
        let (lo, tokens) = images;
        let sample = match self.image_units {
            None => Sample::new(text, tokens.iter().map(|&t| Image::new(t))),
            Some(units) => Sample::new(
                text,
                tokens.iter().enumerate().map(|(k, &t)| {
                    let u = units.get(lo + k).copied().unwrap_or(1);
                    Image::with_units(t, NonZeroU32::new(u).unwrap_or(NonZeroU32::MIN))
                }),
            ),
        };
        match self.costs {
            None => Ok(sample),
            Some(c) => {
                let cost = Phases::new(
                    c.get(2 * i).copied().unwrap_or(0.0),
                    c.get(2 * i + 1).copied().unwrap_or(0.0),
                );
                sample.with_cost(cost).map_err(|e| {
                    let (what, item) = name(i);
                    Failure::Input {
                        class: "InvalidValueError",
                        kind: "InvalidCoefficient",
                        item: Some(item),
                        message: format!("the costs of {what} are refused: {e}"),
                    }
                })
            }
        }
    }
}

/// Refuses given costs a model does not read, and requires them when it does.
pub(crate) fn costs_match(needs: bool, given: bool) -> Result<(), Failure> {
    let message = match (needs, given) {
        (true, false) => "the cost model is Given (costs supplied per sample): pass costs=, an (n, 2) array of (vision, language) or a dict {\"vision\": ..., \"language\": ...}",
        (false, true) => "costs= is only read by the Given cost model (Planner(\"costs\", ...) or microbatch.cost.Given()): drop it, or plan with Given",
        _ => return Ok(()),
    };
    Err(Failure::Input {
        class: "SettingError",
        kind: "Binding",
        item: Some(Item::Name("costs")),
        message: message.to_owned(),
    })
}

// ------------------------------------------------------------- the pyclass

/// The crate's training mode named `value` (`Training::NAMES`, read by the
/// crate's `FromStr`); any other value is a `SettingError` naming
/// `training`.
fn training(py: Python<'_>, value: &Bound<'_, PyAny>) -> PyResult<Training> {
    named(py, "training", value, &Training::NAMES)
}

/// A phase read by its name: the crate's `Phase` has `ALL` and `name()` (its
/// `Display`) but no `FromStr`, which [`named`] reads with.
struct PhaseName(Phase);

impl FromStr for PhaseName {
    type Err = ();

    fn from_str(name: &str) -> Result<Self, ()> {
        Phase::ALL
            .into_iter()
            .find(|p| p.name() == name)
            .map(PhaseName)
            .ok_or(())
    }
}

/// The crate's phase named `value` (`Phase::NAMES`); any other value is a
/// `SettingError` naming `phase`.
fn phase(py: Python<'_>, value: &Bound<'_, PyAny>) -> PyResult<Phase> {
    named::<PhaseName>(py, "phase", value, &Phase::NAMES).map(|p| p.0)
}

/// A cost model (see `microbatch.cost.CostModel`): the crate's model,
/// composed with the crate's combinators and boxed (`Incremental::boxed`),
/// so that one type holds any composition and the planner plans with it.
#[pyclass(module = "microbatch._native", name = "CostModel", frozen)]
pub(crate) struct NativeCostModel {
    pub(crate) model: BoxCostModel,
    /// Whether any term reads the samples' given costs (`Given`): the
    /// binding's check that `costs=` is passed exactly when it is read.
    pub(crate) needs_costs: bool,
}

impl NativeCostModel {
    /// One of the crate's models, boxed.
    fn of<M>(model: M) -> Self
    where
        M: Incremental + Debug + Send + Sync + 'static,
        M::State: Send + Sync + 'static,
    {
        NativeCostModel {
            model: model.boxed(),
            needs_costs: false,
        }
    }

    /// A model of one `Linear`.
    pub(crate) fn of_linear(model: Linear) -> Self {
        Self::of(model)
    }

    /// The `Linear` model, when the model is exactly one.
    pub(crate) fn as_linear(&self) -> Option<&Linear> {
        self.model.downcast_ref::<Linear>()
    }

    /// A composition of `self` and `other` by one of the crate's combinators.
    fn join(&self, other: &NativeCostModel, model: BoxCostModel) -> Self {
        NativeCostModel {
            model,
            needs_costs: self.needs_costs || other.needs_costs,
        }
    }
}

/// A model from one of the crate's constructors, checked in the crate.
fn term<M>(py: Python<'_>, f: impl FnOnce() -> Result<M, Error> + Send) -> PyResult<NativeCostModel>
where
    M: Incremental + Debug + Send + Sync + 'static,
    M::State: Send + Sync + 'static,
{
    guard(py, || f().map(NativeCostModel::of))
}

#[pymethods]
impl NativeCostModel {
    #[staticmethod]
    fn tokens(py: Python<'_>, per_token: f64) -> PyResult<Self> {
        term(py, || Tokens::new(per_token))
    }

    #[staticmethod]
    fn per_sample(py: Python<'_>, cost: f64) -> PyResult<Self> {
        term(py, || PerSample::new(cost))
    }

    #[staticmethod]
    fn per_group(py: Python<'_>, cost: f64) -> PyResult<Self> {
        term(py, || PerGroup::new(cost))
    }

    #[staticmethod]
    fn document_attention(py: Python<'_>, per_token_pair: f64) -> PyResult<Self> {
        term(py, || DocumentAttention::new(per_token_pair))
    }

    #[staticmethod]
    fn full_attention(py: Python<'_>, per_token_pair: f64) -> PyResult<Self> {
        term(py, || FullAttention::new(per_token_pair))
    }

    #[staticmethod]
    fn per_tile(
        py: Python<'_>,
        per_tile: f64,
        tokens_per_tile: u32,
        training: &Bound<'_, PyAny>,
    ) -> PyResult<Self> {
        let training = self::training(py, training)?;
        term(py, || PerTile::new(per_tile, tokens_per_tile, training))
    }

    #[staticmethod]
    fn per_image(
        py: Python<'_>,
        per_patch: f64,
        per_patch_pair: f64,
        patches_per_token: u32,
        training: &Bound<'_, PyAny>,
    ) -> PyResult<Self> {
        let training = self::training(py, training)?;
        term(py, || {
            PerImage::new(per_patch, per_patch_pair, patches_per_token, training)
        })
    }

    #[staticmethod]
    #[allow(clippy::too_many_arguments)]
    fn windowed(
        py: Python<'_>,
        per_patch: f64,
        per_window_pair: f64,
        window: u32,
        per_patch_pair: f64,
        patches_per_token: u32,
        training: &Bound<'_, PyAny>,
    ) -> PyResult<Self> {
        let training = self::training(py, training)?;
        term(py, || {
            Windowed::new(
                per_patch,
                per_window_pair,
                window,
                per_patch_pair,
                patches_per_token,
                training,
            )
        })
    }

    #[staticmethod]
    fn preset(py: Python<'_>, name: &str) -> PyResult<Self> {
        let name = name.to_owned();
        term(py, move || Ok(name.parse::<Preset>()?.cost_model()))
    }

    /// `Linear` over the named terms (`Term`'s names) with these
    /// coefficients, in this order.
    #[staticmethod]
    fn linear(py: Python<'_>, terms: Vec<String>, coefficients: Vec<f64>) -> PyResult<Self> {
        guard(py, move || {
            let mut parsed = Vec::with_capacity(terms.len());
            for (k, name) in terms.iter().enumerate() {
                // The crate's message lists the known names; the item is the
                // term's position among the coefficients.
                let term = name.parse::<Term>().map_err(|e| Failure::Input {
                    class: "SettingError",
                    kind: "UnknownName",
                    item: Some(Item::Index(k)),
                    message: e.to_string(),
                })?;
                parsed.push(term);
            }
            let model = Linear::new(parsed.into_iter().zip(coefficients))?;
            Ok::<_, Failure>(NativeCostModel::of_linear(model))
        })
    }

    /// The preset's FLOPs model as a `Linear` over its terms (the overhead
    /// terms at 0) for the attention kernel `attention` (`AttentionKernel`'s
    /// names: `varlen`, `dense`): the fallback of a calibrator.
    #[staticmethod]
    #[pyo3(signature = (name, attention="varlen"))]
    fn linear_preset(py: Python<'_>, name: &str, attention: &str) -> PyResult<Self> {
        let (name, attention) = (name.to_owned(), attention.to_owned());
        term(py, move || {
            Ok(Linear::preset_with(name.parse()?, attention.parse()?))
        })
    }

    /// `(term names, coefficients)` when the model is exactly one `Linear`.
    #[getter]
    fn linear_terms(&self) -> Option<(Vec<String>, Vec<f64>)> {
        self.as_linear().map(|m| {
            (
                m.terms().iter().map(|t| t.to_string()).collect(),
                m.coefficients().to_vec(),
            )
        })
    }

    #[staticmethod]
    fn given() -> Self {
        NativeCostModel {
            model: Given.boxed(),
            needs_costs: true,
        }
    }

    fn plus(&self, other: &NativeCostModel) -> Self {
        self.join(other, self.model.clone().plus(other.model.clone()).boxed())
    }

    fn max(&self, other: &NativeCostModel) -> Self {
        self.join(other, self.model.clone().max(other.model.clone()).boxed())
    }

    fn scale(&self, py: Python<'_>, factor: f64) -> PyResult<Self> {
        guard(py, || {
            Ok::<_, Failure>(NativeCostModel {
                model: self.model.clone().scale(factor)?.boxed(),
                needs_costs: self.needs_costs,
            })
        })
    }

    fn in_phase(&self, py: Python<'_>, name: &Bound<'_, PyAny>) -> PyResult<Self> {
        let phase = phase(py, name)?;
        guard(py, || {
            Ok::<_, Failure>(NativeCostModel {
                model: self.model.clone().in_phase(phase).boxed(),
                needs_costs: self.needs_costs,
            })
        })
    }

    #[getter]
    fn needs_costs(&self) -> bool {
        self.needs_costs
    }

    /// The composition as the crate's flat formula (`Debug`).
    fn formula(&self) -> String {
        format!("{:?}", self.model)
    }

    /// Each sample's own cost: an `(n, 2)` array of (vision, language).
    #[pyo3(signature = (text, image_tokens, image_units, image_offsets, costs))]
    fn cost<'py>(
        &self,
        py: Python<'py>,
        text: PyReadonlyArray1<'_, u32>,
        image_tokens: PyReadonlyArray1<'_, u32>,
        image_units: Option<PyReadonlyArray1<'_, u32>>,
        image_offsets: PyReadonlyArray1<'_, u64>,
        costs: Option<PyReadonlyArray2<'_, f64>>,
    ) -> PyResult<Bound<'py, PyArray2<f64>>> {
        let arrays = Arrays::borrow(
            &text,
            &image_tokens,
            image_units.as_ref(),
            &image_offsets,
            costs.as_ref(),
        )?;
        let out = guard(py, || {
            costs_match(self.needs_costs, arrays.costs.is_some())?;
            let name = |i: usize| (format!("sample {i}"), Item::Index(i));
            arrays.check(&name)?;
            let n = arrays.text.len();
            let mut out = Vec::with_capacity(2 * n);
            for i in 0..n {
                let s = arrays.sample(i, &name)?;
                let c = self.model.cost(&[&s]);
                out.push(c.vision);
                out.push(c.language);
            }
            Array2::from_shape_vec((n, 2), out).map_err(|e| Failure::shape(e.to_string()))
        })?;
        Ok(out.into_pyarray(py))
    }

    /// The cost of all the samples as one group: `(vision, language)`.
    #[pyo3(signature = (text, image_tokens, image_units, image_offsets, costs))]
    fn group_cost(
        &self,
        py: Python<'_>,
        text: PyReadonlyArray1<'_, u32>,
        image_tokens: PyReadonlyArray1<'_, u32>,
        image_units: Option<PyReadonlyArray1<'_, u32>>,
        image_offsets: PyReadonlyArray1<'_, u64>,
        costs: Option<PyReadonlyArray2<'_, f64>>,
    ) -> PyResult<(f64, f64)> {
        let arrays = Arrays::borrow(
            &text,
            &image_tokens,
            image_units.as_ref(),
            &image_offsets,
            costs.as_ref(),
        )?;
        guard(py, || {
            costs_match(self.needs_costs, arrays.costs.is_some())?;
            let name = |i: usize| (format!("sample {i}"), Item::Index(i));
            arrays.check(&name)?;
            let samples = (0..arrays.text.len())
                .map(|i| arrays.sample(i, &name))
                .collect::<Result<Vec<_>, _>>()?;
            let refs: Vec<&Sample> = samples.iter().collect();
            let c = self.model.cost(&refs);
            Ok::<_, Failure>((c.vision, c.language))
        })
    }
}

// --------------------------------------------------------------------- fit

/// The crate's `Fit` (see `microbatch.cost.Fit`).
#[pyclass(module = "microbatch._native", name = "Fit", frozen)]
pub(crate) struct NativeFit {
    fit: microbatch::cost::Fit,
}

#[pymethods]
impl NativeFit {
    #[getter]
    fn coefficients<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<f64>> {
        self.fit.coefficients().to_pyarray(py)
    }

    #[getter]
    fn r_squared(&self) -> f64 {
        self.fit.r_squared()
    }

    #[getter]
    fn max_relative_error(&self) -> f64 {
        self.fit.max_relative_error()
    }

    #[getter]
    fn rows(&self) -> usize {
        self.fit.rows()
    }

    #[getter]
    fn worst_row(&self) -> usize {
        self.fit.worst_row()
    }

    /// The predicted time of each row of `features` (`(m, k)`, C-contiguous).
    fn predict<'py>(
        &self,
        py: Python<'py>,
        features: PyReadonlyArray2<'_, f64>,
    ) -> PyResult<Bound<'py, PyArray1<f64>>> {
        let k = self.fit.coefficients().len();
        let shape = features.shape().to_vec();
        let values = features.as_slice()?;
        let out = guard(py, || {
            if shape.get(1).copied() != Some(k) {
                return Err(Failure::shape(format!(
                    "features have {} columns, the fit has {k} coefficients",
                    shape.get(1).copied().unwrap_or(0)
                )));
            }
            let rows = shape.first().copied().unwrap_or(0);
            Ok((0..rows)
                .map(|r| {
                    values
                        .get(r * k..(r + 1) * k)
                        .map_or(0.0, |row| self.fit.predict(row))
                })
                .collect::<Vec<f64>>())
        })?;
        Ok(out.into_pyarray(py))
    }
}

/// `fit(features, times)`: the crate's non-negative least squares on
/// `(m, k)` features (C-contiguous) and `m` measured times.
#[pyfunction]
#[pyo3(name = "fit")]
fn fit_rows(
    py: Python<'_>,
    features: PyReadonlyArray2<'_, f64>,
    times: PyReadonlyArray1<'_, f64>,
) -> PyResult<NativeFit> {
    let shape = features.shape().to_vec();
    let values = features.as_slice()?;
    let times = times.as_slice()?;
    guard(py, || {
        let (m, k) = (
            shape.first().copied().unwrap_or(0),
            shape.get(1).copied().unwrap_or(0),
        );
        if m != times.len() {
            return Err(Failure::Input {
                class: "DtypeError",
                kind: "Binding",
                item: Some(Item::Name("times")),
                message: format!(
                    "features have {m} rows but there are {} times: one time per row",
                    times.len()
                ),
            });
        }
        let rows: Vec<(&[f64], f64)> = (0..m)
            .map(|r| (values.get(r * k..(r + 1) * k).unwrap_or(&[]), times[r]))
            .collect();
        Ok(NativeFit { fit: fit(&rows)? })
    })
}

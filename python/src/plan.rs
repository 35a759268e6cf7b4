//! `Planner` and `Plan`: the crate's planner over numpy arrays of ids, text tokens, ragged images and loss tokens.

use core::num::NonZeroU32;

use microbatch::cost::{Image, Preset, PresetModel, Sample};
use microbatch::plan::{Normalization, Plan, Planner, Reduction, StepSample, SyncModel};
use numpy::{PyArray1, PyReadonlyArray1, ToPyArray};
use pyo3::exceptions::PyIndexError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::error::{check, input_error};

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<NativePlanner>()?;
    m.add_class::<NativePlan>()?;
    Ok(())
}

/// A planner for one model; a closed set of models so that each plans with
/// its static type (no dynamic dispatch per sample).
enum AnyPlanner {
    Preset(Planner<PresetModel>),
}

/// The crate's `Planner`, configured once (see `microbatch.Planner`).
#[pyclass(module = "microbatch._native", name = "Planner", frozen)]
pub(crate) struct NativePlanner {
    inner: AnyPlanner,
}

/// Why building the samples failed (reported after the GIL is back).
enum Build {
    Input(String),
    Crate(microbatch::Error),
}

#[pymethods]
impl NativePlanner {
    #[new]
    #[pyo3(signature = (model, ranks, seq_len, sync, micro_steps, max_units, max_images, sequences_per_micro_step, refinement))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        model: &str,
        ranks: usize,
        seq_len: u32,
        sync: &str,
        micro_steps: Option<usize>,
        max_units: Option<u32>,
        max_images: Option<u32>,
        sequences_per_micro_step: usize,
        refinement: bool,
    ) -> PyResult<Self> {
        let preset: Preset = check(py, model.parse())?;
        let sync: SyncModel = check(py, sync.parse())?;
        let mut planner = Planner::new(preset.cost_model())
            .ranks(ranks)
            .seq_len(seq_len)
            .sync(sync)
            .sequences_per_micro_step(sequences_per_micro_step)
            .refinement(refinement);
        if let Some(a) = micro_steps {
            planner = planner.micro_steps(a);
        }
        if let Some(u) = max_units {
            planner = planner.max_units(u);
        }
        if let Some(i) = max_images {
            planner = planner.max_images(i);
        }
        Ok(NativePlanner {
            inner: AnyPlanner::Preset(planner),
        })
    }

    /// Plans one step. Arrays: `ids` (u64), `text` (u32), the images of all
    /// samples flattened (`image_tokens`, u32; `image_units`, u32 >= 1 or
    /// None) with `image_offsets` (u64, n + 1 entries, CSR), `loss_tokens`
    /// (u64 or None).
    #[pyo3(signature = (ids, text, image_tokens, image_units, image_offsets, loss_tokens))]
    #[allow(clippy::too_many_arguments)]
    fn plan(
        &self,
        py: Python<'_>,
        ids: PyReadonlyArray1<'_, u64>,
        text: PyReadonlyArray1<'_, u32>,
        image_tokens: PyReadonlyArray1<'_, u32>,
        image_units: Option<PyReadonlyArray1<'_, u32>>,
        image_offsets: PyReadonlyArray1<'_, u64>,
        loss_tokens: Option<PyReadonlyArray1<'_, u64>>,
    ) -> PyResult<NativePlan> {
        let ids = ids.as_slice()?;
        let text = text.as_slice()?;
        let image_tokens = image_tokens.as_slice()?;
        let image_units = match &image_units {
            Some(u) => Some(u.as_slice()?),
            None => None,
        };
        let image_offsets = image_offsets.as_slice()?;
        let loss_tokens = match &loss_tokens {
            Some(l) => Some(l.as_slice()?),
            None => None,
        };
        let result = py.detach(|| {
            let samples = samples(
                ids,
                text,
                image_tokens,
                image_units,
                image_offsets,
                loss_tokens,
            )?;
            match &self.inner {
                AnyPlanner::Preset(p) => p.plan(&samples).map_err(Build::Crate),
            }
        });
        match result {
            Ok(plan) => Ok(NativePlan { plan }),
            Err(Build::Input(message)) => Err(input_error(py, "InputError", message)),
            Err(Build::Crate(e)) => Err(crate::error::to_py(py, &e)),
        }
    }
}

/// The step's samples from the arrays, checking their lengths and offsets.
fn samples(
    ids: &[u64],
    text: &[u32],
    image_tokens: &[u32],
    image_units: Option<&[u32]>,
    image_offsets: &[u64],
    loss_tokens: Option<&[u64]>,
) -> Result<Vec<StepSample>, Build> {
    let n = ids.len();
    let length = |what: &str, len: usize, want: usize| {
        Build::Input(format!(
            "{what} has {len} entries, expected {want} (one per sample)"
        ))
    };
    if text.len() != n {
        return Err(length("text_tokens", text.len(), n));
    }
    if let Some(l) = loss_tokens {
        if l.len() != n {
            return Err(length("loss_tokens", l.len(), n));
        }
    }
    if image_offsets.len() != n + 1 {
        return Err(Build::Input(format!(
            "image offsets have {} entries, expected {} (one per sample and one more)",
            image_offsets.len(),
            n + 1
        )));
    }
    if let Some(u) = image_units {
        if u.len() != image_tokens.len() {
            return Err(Build::Input(format!(
                "image_units has {} entries, image_tokens {}: give one unit count per image",
                u.len(),
                image_tokens.len()
            )));
        }
    }
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let (lo, hi) = (image_offsets[i], image_offsets[i + 1]);
        if lo > hi || hi > image_tokens.len() as u64 {
            return Err(Build::Input(format!(
                "image offsets of sample {i} (id {}) are [{lo}, {hi}), not an increasing range within the {} image values",
                ids[i],
                image_tokens.len()
            )));
        }
        let (lo, hi) = (lo as usize, hi as usize);
        let images = (lo..hi).map(|k| match image_units.map(|u| u[k]) {
            None => Ok(Image::new(image_tokens[k])),
            Some(u) => NonZeroU32::new(u)
                .map(|u| Image::with_units(image_tokens[k], u))
                .ok_or_else(|| {
                    Build::Input(format!(
                        "image {} of sample {i} (id {}) has 0 units: every image has at least 1",
                        k - lo,
                        ids[i]
                    ))
                }),
        });
        let images: Result<Vec<Image>, Build> = images.collect();
        let mut s = StepSample::new(ids[i], Sample::new(text[i], images?));
        if let Some(l) = loss_tokens {
            s = s.with_loss_tokens(l[i]);
        }
        out.push(s);
    }
    Ok(out)
}

/// The crate's `Plan` (see `microbatch.Plan`).
#[pyclass(module = "microbatch._native", name = "Plan", frozen)]
pub(crate) struct NativePlan {
    pub(crate) plan: Plan,
}

impl NativePlan {
    fn slot(&self, rank: usize, micro_step: usize) -> PyResult<()> {
        if rank >= self.plan.ranks() || micro_step >= self.plan.micro_steps() {
            return Err(PyIndexError::new_err(format!(
                "(rank {rank}, micro-step {micro_step}) is out of range: the plan has {} ranks and {} micro-steps",
                self.plan.ranks(),
                self.plan.micro_steps()
            )));
        }
        Ok(())
    }
}

#[pymethods]
impl NativePlan {
    #[getter]
    fn ranks(&self) -> usize {
        self.plan.ranks()
    }

    #[getter]
    fn micro_steps(&self) -> usize {
        self.plan.micro_steps()
    }

    #[getter]
    fn sequences_per_micro_step(&self) -> usize {
        self.plan.sequences_per_micro_step()
    }

    fn __len__(&self) -> usize {
        self.plan.len()
    }

    fn micro_batch<'py>(
        &self,
        py: Python<'py>,
        rank: usize,
        micro_step: usize,
    ) -> PyResult<Bound<'py, PyArray1<u64>>> {
        self.slot(rank, micro_step)?;
        Ok(self.plan.micro_batch(rank, micro_step).to_pyarray(py))
    }

    fn sequences<'py>(
        &self,
        py: Python<'py>,
        rank: usize,
        micro_step: usize,
    ) -> PyResult<Bound<'py, PyList>> {
        self.slot(rank, micro_step)?;
        let seqs = (0..self.plan.sequences_per_micro_step())
            .map(|s| self.plan.sequence(rank, micro_step, s).to_pyarray(py));
        PyList::new(py, seqs)
    }

    /// `(loss_tokens, samples, ranks)` of the step.
    fn loss(&self) -> (u64, u64, u64) {
        let l = self.plan.loss();
        (l.loss_tokens, l.samples, l.ranks)
    }

    fn loss_scale(&self, py: Python<'_>, normalization: &str, reduction: &str) -> PyResult<f64> {
        let n = match normalization {
            "token" => Normalization::Token,
            "sample" => Normalization::Sample,
            other => {
                return Err(input_error(
                    py,
                    "SettingError",
                    format!("unknown normalization {other:?}: use \"token\" or \"sample\""),
                ))
            }
        };
        let r = match reduction {
            "sum" => Reduction::Sum,
            "mean" => Reduction::Mean,
            other => {
                return Err(input_error(
                    py,
                    "SettingError",
                    format!("unknown reduction {other:?}: use \"sum\" or \"mean\""),
                ))
            }
        };
        Ok(self.plan.loss().scale(n, r))
    }

    #[getter]
    fn fingerprint(&self) -> u64 {
        self.plan.fingerprint()
    }

    /// The report as a dict of plain values (wrapped in a frozen dataclass
    /// by `microbatch.Plan.report`).
    fn report<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let r = self.plan.report();
        let d = PyDict::new(py);
        d.set_item("sync", r.sync.name())?;
        d.set_item("predicted", r.predicted)?;
        d.set_item("lower_bound", r.lower_bound)?;
        d.set_item("baseline", r.baseline)?;
        d.set_item("baseline_micro_steps", r.baseline_micro_steps)?;
        d.set_item("imbalance_vision", r.imbalance.vision)?;
        d.set_item("imbalance_language", r.imbalance.language)?;
        d.set_item("efficiency", r.efficiency)?;
        d.set_item("sequences", r.sequences)?;
        d.set_item("balanced_packing", r.balanced_packing)?;
        d.set_item("planning_time", r.planning_time.map(|t| t.as_secs_f64()))?;
        d.set_item("ratio", r.ratio())?;
        d.set_item("gain", r.gain())?;
        d.set_item("straggler", r.straggler())?;
        Ok(d)
    }

    fn to_json(&self, py: Python<'_>) -> PyResult<String> {
        serde_json::to_string(&self.plan).map_err(|e| {
            input_error(
                py,
                "InputError",
                format!("the plan could not be written: {e}"),
            )
        })
    }

    #[staticmethod]
    fn from_json(py: Python<'_>, text: &str) -> PyResult<NativePlan> {
        serde_json::from_str::<Plan>(text)
            .map(|plan| NativePlan { plan })
            .map_err(|e| input_error(py, "InputError", format!("not a valid plan document: {e}")))
    }
}

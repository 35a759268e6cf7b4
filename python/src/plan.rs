//! `Planner` and `Plan`: the crate's planner over numpy arrays of ids, text tokens, ragged images and loss tokens.

use microbatch::cost::{Given, Incremental, Preset};
use microbatch::plan::{Normalization, Plan, Planner, Reduction, StepSample, SyncModel};
use numpy::{PyArray1, PyReadonlyArray1, PyReadonlyArray2, ToPyArray};
use pyo3::exceptions::PyIndexError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::cost::{costs_match, Arrays, Custom, NativeCostModel, Resolved};
use crate::error::{guard, input_error, Failure, Item};

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<NativePlanner>()?;
    m.add_class::<NativePlan>()?;
    Ok(())
}

/// A planner for one model; presets and `Given` with their static types (no
/// dynamic dispatch per sample), compositions as a [`Custom`] tree.
enum AnyPlanner {
    Preset(Planner<microbatch::cost::PresetModel>),
    Given(Planner<Given>),
    Custom(Planner<Custom>),
}

/// Runs `$body` with `$p` bound to the planner, whatever its model.
macro_rules! with_planner {
    ($any:expr, $p:ident => $body:expr) => {
        match $any {
            AnyPlanner::Preset($p) => $body,
            AnyPlanner::Given($p) => $body,
            AnyPlanner::Custom($p) => $body,
        }
    };
}

/// The planner's settings other than the model.
struct Settings {
    ranks: usize,
    seq_len: u32,
    sync: SyncModel,
    micro_steps: Option<usize>,
    max_units: Option<u32>,
    max_images: Option<u32>,
    sequences_per_micro_step: usize,
    refinement: bool,
}

fn configure<M: Incremental>(model: M, s: &Settings) -> Planner<M> {
    let mut planner = Planner::new(model)
        .ranks(s.ranks)
        .seq_len(s.seq_len)
        .sync(s.sync)
        .sequences_per_micro_step(s.sequences_per_micro_step)
        .refinement(s.refinement);
    if let Some(a) = s.micro_steps {
        planner = planner.micro_steps(a);
    }
    if let Some(u) = s.max_units {
        planner = planner.max_units(u);
    }
    if let Some(i) = s.max_images {
        planner = planner.max_images(i);
    }
    planner
}

/// The crate's `Planner`, configured once (see `microbatch.Planner`).
#[pyclass(module = "microbatch._native", name = "Planner", frozen)]
pub(crate) struct NativePlanner {
    inner: AnyPlanner,
    needs_costs: bool,
}

/// Which of `plan` and `baseline`.
#[derive(Clone, Copy)]
enum Mode {
    Plan,
    Baseline,
}

#[pymethods]
impl NativePlanner {
    /// `model`: a preset name, `"costs"` (the `Given` model), or a
    /// `_native.CostModel`.
    #[new]
    #[pyo3(signature = (model, ranks, seq_len, sync, micro_steps, max_units, max_images, sequences_per_micro_step, refinement))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        model: &Bound<'_, PyAny>,
        ranks: usize,
        seq_len: u32,
        sync: &str,
        micro_steps: Option<usize>,
        max_units: Option<u32>,
        max_images: Option<u32>,
        sequences_per_micro_step: usize,
        refinement: bool,
    ) -> PyResult<Self> {
        let resolved = if let Ok(native) = model.cast::<NativeCostModel>() {
            native.get().resolve()
        } else {
            let name: String = model.extract().map_err(|_| {
                input_error(
                    py,
                    "DtypeError",
                    "model must be a preset name, \"costs\" or a microbatch.cost model".to_owned(),
                )
            })?;
            if name == "costs" {
                Resolved::Given
            } else {
                let preset = guard(py, || name.parse::<Preset>())?;
                Resolved::Preset(preset.cost_model())
            }
        };
        let sync = sync.to_owned();
        guard(py, move || {
            let settings = Settings {
                ranks,
                seq_len,
                sync: sync.parse()?,
                micro_steps,
                max_units,
                max_images,
                sequences_per_micro_step,
                refinement,
            };
            let (inner, needs_costs) = match resolved {
                Resolved::Preset(m) => (AnyPlanner::Preset(configure(m, &settings)), false),
                Resolved::Given => (AnyPlanner::Given(configure(Given, &settings)), true),
                Resolved::Custom(m) => {
                    let needs = m.needs_costs();
                    (AnyPlanner::Custom(configure(m, &settings)), needs)
                }
            };
            Ok::<_, Failure>(NativePlanner { inner, needs_costs })
        })
    }

    /// Which static path the planner takes: `"preset"`, `"given"` or `"custom"`.
    #[getter]
    fn path(&self) -> &'static str {
        match self.inner {
            AnyPlanner::Preset(_) => "preset",
            AnyPlanner::Given(_) => "given",
            AnyPlanner::Custom(_) => "custom",
        }
    }

    #[getter]
    fn needs_costs(&self) -> bool {
        self.needs_costs
    }

    /// Plans one step, or makes its naive plan with `baseline` (the
    /// loader's order, packed greedily, dealt to ranks in turn). Arrays:
    /// `ids` (u64), `text` (u32), the images of all samples flattened
    /// (`image_tokens`, u32; `image_units`, u32 >= 1 or None) with
    /// `image_offsets` (u64, n + 1 entries, CSR), `loss_tokens` (u64 or
    /// None), `costs` ((n, 2) f64 or None).
    #[pyo3(signature = (ids, text, image_tokens, image_units, image_offsets, loss_tokens, costs, baseline))]
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
        costs: Option<PyReadonlyArray2<'_, f64>>,
        baseline: bool,
    ) -> PyResult<NativePlan> {
        let mode = if baseline { Mode::Baseline } else { Mode::Plan };
        self.run(
            py,
            mode,
            ids,
            text,
            image_tokens,
            image_units,
            image_offsets,
            loss_tokens,
            costs,
        )
    }
}

impl NativePlanner {
    #[allow(clippy::too_many_arguments)]
    fn run(
        &self,
        py: Python<'_>,
        mode: Mode,
        ids: PyReadonlyArray1<'_, u64>,
        text: PyReadonlyArray1<'_, u32>,
        image_tokens: PyReadonlyArray1<'_, u32>,
        image_units: Option<PyReadonlyArray1<'_, u32>>,
        image_offsets: PyReadonlyArray1<'_, u64>,
        loss_tokens: Option<PyReadonlyArray1<'_, u64>>,
        costs: Option<PyReadonlyArray2<'_, f64>>,
    ) -> PyResult<NativePlan> {
        let ids = ids.as_slice()?;
        let arrays = Arrays {
            text: text.as_slice()?,
            image_tokens: image_tokens.as_slice()?,
            image_units: match &image_units {
                Some(u) => Some(u.as_slice()?),
                None => None,
            },
            offsets: image_offsets.as_slice()?,
            costs: match &costs {
                Some(c) => Some(c.as_slice()?),
                None => None,
            },
        };
        let loss_tokens = match &loss_tokens {
            Some(l) => Some(l.as_slice()?),
            None => None,
        };
        let plan = guard(py, || {
            costs_match(self.needs_costs, arrays.costs.is_some())?;
            let samples = samples(ids, &arrays, loss_tokens)?;
            let plan = with_planner!(&self.inner, p => match mode {
                Mode::Plan => p.plan(&samples),
                Mode::Baseline => p.baseline(&samples),
            })?;
            Ok::<_, Failure>(plan)
        })?;
        Ok(NativePlan { plan })
    }
}

/// The step's samples from the arrays, checking their lengths and offsets.
fn samples(
    ids: &[u64],
    arrays: &Arrays<'_>,
    loss_tokens: Option<&[u64]>,
) -> Result<Vec<StepSample>, Failure> {
    let n = ids.len();
    let length = |what: &str, len: usize| {
        Failure::shape(format!(
            "{what} has {len} entries, expected {n} (one per sample)"
        ))
    };
    if arrays.text.len() != n {
        return Err(length("text_tokens", arrays.text.len()));
    }
    if let Some(l) = loss_tokens {
        if l.len() != n {
            return Err(length("loss_tokens", l.len()));
        }
    }
    let name = |i: usize| {
        let id = ids.get(i).copied().unwrap_or(0);
        (format!("sample {i} (id {id})"), Item::Id(id))
    };
    arrays.check(&name)?;
    let mut out = Vec::with_capacity(n);
    for (i, &id) in ids.iter().enumerate() {
        let s = StepSample::new(id, arrays.sample(i, &name)?);
        out.push(match loss_tokens.and_then(|l| l.get(i)) {
            Some(&l) => s.with_loss_tokens(l),
            None => s,
        });
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
        guard(py, || {
            serde_json::to_string(&self.plan).map_err(|e| Failure::Input {
                class: "InputError",
                kind: "Binding",
                item: None,
                message: format!("the plan could not be written: {e}"),
            })
        })
    }

    #[staticmethod]
    fn from_json(py: Python<'_>, text: &str) -> PyResult<NativePlan> {
        guard(py, || {
            serde_json::from_str::<Plan>(text)
                .map(|plan| NativePlan { plan })
                .map_err(|e| Failure::Input {
                    class: "InputError",
                    kind: "Binding",
                    item: None,
                    message: format!("not a valid plan document: {e}"),
                })
        })
    }
}

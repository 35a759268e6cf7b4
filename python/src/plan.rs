//! `Planner`, `Plan` and `Exchange`: the crate's planner over numpy arrays of ids, text tokens, ragged images, loss tokens, origins, groups and bytes.

use microbatch::cost::{BoxCostModel, Given, Incremental, Preset};
use microbatch::plan::{
    Exchange, GroupScope, Locality, MicroSteps, Normalization, Plan, Planner, Reduction,
    StepSample, SyncModel,
};
use numpy::{PyArray1, PyReadonlyArray1, PyReadonlyArray2, ToPyArray};
use pyo3::exceptions::PyIndexError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::cost::{costs_match, Arrays, NativeCostModel};
use crate::error::{guard, input_error, named, Failure, Item};

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<NativePlanner>()?;
    m.add_class::<NativePlan>()?;
    m.add_class::<NativeExchange>()?;
    m.add("SYNC_MODEL_NAMES", SyncModel::NAMES.to_vec())?;
    m.add("NORMALIZATION_NAMES", Normalization::NAMES.to_vec())?;
    m.add("REDUCTION_NAMES", Reduction::NAMES.to_vec())?;
    m.add("GROUP_SCOPE_NAMES", GroupScope::NAMES.to_vec())?;
    m.add_function(wrap_pyfunction!(normalization, m)?)?;
    Ok(())
}

/// The crate's name of the normalization `value` names, read by the crate
/// (`Normalization`'s `FromStr`): for the Python code that applies a
/// normalization itself (`microbatch.torch.summed_loss`) without a plan.
/// Any other value is the `SettingError` naming `normalization` that
/// `Plan.loss_scale` raises.
#[pyfunction]
fn normalization(py: Python<'_>, value: &Bound<'_, PyAny>) -> PyResult<&'static str> {
    let n: Normalization = named(py, "normalization", value, &Normalization::NAMES)?;
    Ok(n.name())
}

/// The crate's `Planner` over the boxed model, configured once by its own
/// builder (see `microbatch.Planner`).
#[pyclass(module = "microbatch._native", name = "Planner", frozen)]
pub(crate) struct NativePlanner {
    inner: Planner<BoxCostModel>,
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
    /// `_native.CostModel`; every model is boxed, so one planner type plans
    /// with any of them.
    #[new]
    #[pyo3(signature = (model, ranks, seq_len, sync, micro_steps, fastest_micro_steps, max_units, max_images, sequences_per_micro_step, refinement, locality, ranks_per_node, group_scope, search_effort, locality_effort))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        model: &Bound<'_, PyAny>,
        ranks: usize,
        seq_len: u32,
        sync: &Bound<'_, PyAny>,
        micro_steps: Option<usize>,
        fastest_micro_steps: Option<usize>,
        max_units: Option<u32>,
        max_images: Option<u32>,
        sequences_per_micro_step: usize,
        refinement: bool,
        locality: Option<f64>,
        ranks_per_node: Option<usize>,
        group_scope: &Bound<'_, PyAny>,
        search_effort: Option<u32>,
        locality_effort: Option<u32>,
    ) -> PyResult<Self> {
        let (model, needs_costs) = if let Ok(native) = model.cast::<NativeCostModel>() {
            let native = native.get();
            (native.model.clone(), native.needs_costs)
        } else {
            let name: String = model.extract().map_err(|_| {
                input_error(
                    py,
                    "DtypeError",
                    "model must be a preset name, \"costs\" or a microbatch.cost model".to_owned(),
                )
            })?;
            if name == "costs" {
                (Given.boxed(), true)
            } else {
                let preset = guard(py, || name.parse::<Preset>())?;
                (preset.cost_model().boxed(), false)
            }
        };
        // The crate reads the names (its `FromStr`) and its builder holds
        // the settings and checks the values.
        let sync: SyncModel = named(py, "sync model", sync, &SyncModel::NAMES)?;
        let group_scope: GroupScope = named(py, "group scope", group_scope, &GroupScope::NAMES)?;
        guard(py, move || {
            let locality = locality
                .map(|tolerance| {
                    Locality::new(tolerance).map(|l| {
                        let l = match ranks_per_node {
                            Some(n) => l.ranks_per_node(n),
                            None => l,
                        };
                        match locality_effort {
                            Some(e) => l.effort(e),
                            None => l,
                        }
                    })
                })
                .transpose()?;
            let mut planner = Planner::new(model)
                .ranks(ranks)
                .seq_len(seq_len)
                .sync(sync)
                .sequences_per_micro_step(sequences_per_micro_step)
                .refinement(refinement)
                .group_scope(group_scope);
            if let Some(l) = locality {
                planner = planner.locality(l);
            }
            if let Some(up_to) = fastest_micro_steps {
                planner = planner.micro_step_count(MicroSteps::Fastest { up_to });
            }
            if let Some(effort) = search_effort {
                planner = planner.search_effort(effort);
            }
            if let Some(a) = micro_steps {
                planner = planner.micro_steps(a);
            }
            if let Some(u) = max_units {
                planner = planner.max_units(u);
            }
            if let Some(i) = max_images {
                planner = planner.max_images(i);
            }
            Ok::<_, Failure>(NativePlanner {
                inner: planner,
                needs_costs,
            })
        })
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
    /// None), `costs` ((n, 2) f64 or None), `origins` and `groups` (u64 or
    /// None, each with a bool mask of the samples that have one, None: all)
    /// and `bytes` (u64 or None).
    #[pyo3(signature = (ids, text, image_tokens, image_units, image_offsets, loss_tokens, costs, origins, origins_present, groups, groups_present, bytes, baseline))]
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
        origins: Option<PyReadonlyArray1<'_, u64>>,
        origins_present: Option<PyReadonlyArray1<'_, bool>>,
        groups: Option<PyReadonlyArray1<'_, u64>>,
        groups_present: Option<PyReadonlyArray1<'_, bool>>,
        bytes: Option<PyReadonlyArray1<'_, u64>>,
        baseline: bool,
    ) -> PyResult<NativePlan> {
        let mode = if baseline { Mode::Baseline } else { Mode::Plan };
        let placement = Placement {
            origins: Masked::new(origins.as_ref(), origins_present.as_ref())?,
            groups: Masked::new(groups.as_ref(), groups_present.as_ref())?,
            bytes: match &bytes {
                Some(b) => Some(b.as_slice()?),
                None => None,
            },
        };
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
            &placement,
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
        placement: &Placement<'_>,
    ) -> PyResult<NativePlan> {
        let ids = ids.as_slice()?;
        let arrays = Arrays::borrow(
            &text,
            &image_tokens,
            image_units.as_ref(),
            &image_offsets,
            costs.as_ref(),
        )?;
        let loss_tokens = match &loss_tokens {
            Some(l) => Some(l.as_slice()?),
            None => None,
        };
        let plan = guard(py, || {
            costs_match(self.needs_costs, arrays.costs.is_some())?;
            let samples = samples(ids, &arrays, loss_tokens, placement)?;
            let plan = match mode {
                Mode::Plan => self.inner.plan(&samples),
                Mode::Baseline => self.inner.baseline(&samples),
            }?;
            Ok::<_, Failure>(plan)
        })?;
        Ok(NativePlan { plan })
    }
}

/// Per-sample values of which some may be absent: the values and, if not
/// every sample has one, the mask of those that do.
#[derive(Clone, Copy, Default)]
struct Masked<'a> {
    values: Option<&'a [u64]>,
    present: Option<&'a [bool]>,
}

impl<'a> Masked<'a> {
    fn new(
        values: Option<&'a PyReadonlyArray1<'_, u64>>,
        present: Option<&'a PyReadonlyArray1<'_, bool>>,
    ) -> PyResult<Self> {
        Ok(Masked {
            values: match values {
                Some(v) => Some(v.as_slice()?),
                None => None,
            },
            present: match present {
                Some(p) => Some(p.as_slice()?),
                None => None,
            },
        })
    }

    /// Sample `i`'s value, if it has one.
    fn get(&self, i: usize) -> Option<u64> {
        let v = self.values?.get(i).copied()?;
        match self.present {
            Some(p) if !p.get(i).copied().unwrap_or(false) => None,
            _ => Some(v),
        }
    }

    /// Checks both lengths against `n`.
    fn check(&self, what: &str, n: usize) -> Result<(), Failure> {
        for (name, len) in [
            (what.to_owned(), self.values.map(<[u64]>::len)),
            (format!("{what} mask"), self.present.map(<[bool]>::len)),
        ] {
            if let Some(len) = len.filter(|&l| l != n) {
                return Err(Failure::shape(format!(
                    "{name} has {len} entries, expected {n} (one per sample)"
                )));
            }
        }
        Ok(())
    }
}

/// Where the samples are and what they belong to: `origins=`, `groups=`,
/// `bytes=`.
struct Placement<'a> {
    origins: Masked<'a>,
    groups: Masked<'a>,
    bytes: Option<&'a [u64]>,
}

/// The step's samples from the arrays, checking their lengths and offsets.
fn samples(
    ids: &[u64],
    arrays: &Arrays<'_>,
    loss_tokens: Option<&[u64]>,
    placement: &Placement<'_>,
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
    if let Some(b) = placement.bytes {
        if b.len() != n {
            return Err(length("bytes", b.len()));
        }
    }
    placement.origins.check("origins", n)?;
    placement.groups.check("groups", n)?;
    let name = |i: usize| {
        let id = ids.get(i).copied().unwrap_or(0);
        (format!("sample {i} (id {id})"), Item::Id(id))
    };
    arrays.check(&name)?;
    let mut out = Vec::with_capacity(n);
    for (i, &id) in ids.iter().enumerate() {
        let mut s = StepSample::new(id, arrays.sample(i, &name)?);
        if let Some(&l) = loss_tokens.and_then(|l| l.get(i)) {
            s = s.with_loss_tokens(l);
        }
        if let Some(o) = placement.origins.get(i) {
            // An origin past usize is past every rank: the planner's
            // `InvalidOrigin` names it (usize::MAX is never below R).
            s = s.with_origin(usize::try_from(o).unwrap_or(usize::MAX));
        }
        if let Some(g) = placement.groups.get(i) {
            s = s.with_group(g);
        }
        if let Some(&b) = placement.bytes.and_then(|b| b.get(i)) {
            s = s.with_bytes(b);
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

    fn loss_scale(
        &self,
        py: Python<'_>,
        normalization: &Bound<'_, PyAny>,
        reduction: &Bound<'_, PyAny>,
    ) -> PyResult<f64> {
        let n = named(py, "normalization", normalization, &Normalization::NAMES)?;
        let r = named(py, "reduction", reduction, &Reduction::NAMES)?;
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
        d.set_item("users_baseline", r.users_baseline)?;
        d.set_item("imbalance_vision", r.imbalance.vision)?;
        d.set_item("imbalance_language", r.imbalance.language)?;
        d.set_item("efficiency", r.efficiency)?;
        d.set_item("sequences", r.sequences)?;
        d.set_item("balanced_packing", r.balanced_packing)?;
        d.set_item(
            "planning_time",
            self.plan.planning_time().map(|t| t.as_secs_f64()),
        )?;
        d.set_item("ratio", r.ratio())?;
        d.set_item("gain", r.gain())?;
        d.set_item("packed_gain", r.packed_gain())?;
        d.set_item("straggler", r.straggler())?;
        let t = r.traffic.as_ref();
        d.set_item("samples_moved", t.map(|t| t.samples_moved))?;
        d.set_item("bytes_moved", t.map(|t| t.bytes_moved))?;
        d.set_item("bytes_total", t.map(|t| t.bytes_total))?;
        d.set_item("max_bytes_in", t.map(|t| t.max_bytes_in))?;
        d.set_item("max_bytes_out", t.map(|t| t.max_bytes_out))?;
        d.set_item("inter_node_bytes", t.and_then(|t| t.inter_node_bytes))?;
        d.set_item("locality_free", r.locality_free)?;
        Ok(d)
    }

    /// The exchange schedule, or None when no sample has an origin.
    fn exchange(&self) -> Option<NativeExchange> {
        self.plan.exchange().map(|e| NativeExchange {
            exchange: e.clone(),
            ranks: self.plan.ranks(),
        })
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

/// The crate's `Exchange` of a plan (see `microbatch.plan.Exchange`).
#[pyclass(module = "microbatch._native", name = "Exchange", frozen)]
pub(crate) struct NativeExchange {
    exchange: Exchange,
    ranks: usize,
}

impl NativeExchange {
    /// `f(rank)` for every rank, as a u64 array.
    fn per_rank<'py>(
        &self,
        py: Python<'py>,
        f: impl Fn(usize) -> u64,
    ) -> Bound<'py, PyArray1<u64>> {
        let v: Vec<u64> = (0..self.ranks).map(f).collect();
        v.to_pyarray(py)
    }
}

#[pymethods]
impl NativeExchange {
    fn __len__(&self) -> usize {
        self.exchange.len()
    }

    /// The ids `src` sends to `dst` (ascending; empty when either is out of range).
    fn sends<'py>(&self, py: Python<'py>, src: usize, dst: usize) -> Bound<'py, PyArray1<u64>> {
        self.exchange.sends(src, dst).to_pyarray(py)
    }

    fn sent<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<u64>> {
        self.per_rank(py, |r| self.exchange.sent(r) as u64)
    }

    fn received<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<u64>> {
        self.per_rank(py, |r| self.exchange.received(r) as u64)
    }

    fn bytes_out<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<u64>> {
        self.per_rank(py, |r| self.exchange.bytes_out(r))
    }

    fn bytes_in<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<u64>> {
        self.per_rank(py, |r| self.exchange.bytes_in(r))
    }

    /// `(ids, src, dst, bytes)`, one entry a move, sorted by (src, dst, id).
    #[allow(clippy::type_complexity)]
    fn moves<'py>(
        &self,
        py: Python<'py>,
    ) -> (
        Bound<'py, PyArray1<u64>>,
        Bound<'py, PyArray1<u64>>,
        Bound<'py, PyArray1<u64>>,
        Bound<'py, PyArray1<u64>>,
    ) {
        let n = self.exchange.len();
        let (mut ids, mut src, mut dst, mut bytes) = (
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
        );
        for m in self.exchange.moves() {
            ids.push(m.id);
            src.push(m.from as u64);
            dst.push(m.to as u64);
            bytes.push(m.bytes);
        }
        (
            ids.to_pyarray(py),
            src.to_pyarray(py),
            dst.to_pyarray(py),
            bytes.to_pyarray(py),
        )
    }
}

//! Cost models built from Python: the crate's terms composed at run time (an enum tree with a flat per-leaf state), per-sample costs from arrays, and `fit`.

use core::fmt;
use core::num::NonZeroU32;

use microbatch::cost::{
    fit, CostModel, DocumentAttention, FullAttention, Given, Image, Incremental, Linear, PerGroup,
    PerImage, PerSample, PerTile, Phase, Phases, Preset, PresetModel, Sample, Term, Tokens,
    Training, Vision, Windowed,
};
use microbatch::Error;
use numpy::ndarray::Array2;
use numpy::{
    IntoPyArray, PyArray1, PyArray2, PyReadonlyArray1, PyReadonlyArray2, PyUntypedArrayMethods,
    ToPyArray,
};
use pyo3::prelude::*;
use smallvec::SmallVec;

use crate::error::{guard, Failure, Item};

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<NativeCostModel>()?;
    m.add_class::<NativeFit>()?;
    m.add_function(wrap_pyfunction!(fit_rows, m)?)?;
    Ok(())
}

// ------------------------------------------------------------------ leaves

/// One built-in term of a composition.
#[derive(Clone, Copy)]
pub(crate) enum Leaf {
    Tokens(Tokens),
    PerSample(PerSample),
    PerGroup(PerGroup),
    DocumentAttention(DocumentAttention),
    FullAttention(FullAttention),
    Vision(Vision),
    Preset(Preset, PresetModel),
    Given,
    Linear(Linear),
}

/// The state of one leaf: the crate's state of that term.
#[derive(Clone, Debug)]
pub(crate) enum LeafState {
    Count(u64),
    Squares(u128),
    Vision(<Vision as Incremental>::State),
    Preset(<PresetModel as Incremental>::State),
    Given(Phases),
    Linear(<Linear as Incremental>::State),
}

/// Applies `$body` to the leaf's model as `$m` (every arm the crate's own
/// implementation of that term).
macro_rules! with_leaf {
    ($leaf:expr, $m:ident => $body:expr) => {
        match $leaf {
            Leaf::Tokens($m) => $body,
            Leaf::PerSample($m) => $body,
            Leaf::PerGroup($m) => $body,
            Leaf::DocumentAttention($m) => $body,
            Leaf::FullAttention($m) => $body,
            Leaf::Vision($m) => $body,
            Leaf::Preset(_, $m) => $body,
            Leaf::Linear($m) => $body,
            Leaf::Given => {
                let $m = &Given;
                $body
            }
        }
    };
}

/// Applies `$body` to the leaf's model `$m` and its state `$s` (of the
/// crate's state type); `$else` when the state is not the leaf's, which
/// cannot happen: states are made by [`Leaf::empty`] of the same leaf.
macro_rules! with_state {
    ($leaf:expr, $state:expr, $m:ident, $s:ident => $body:expr, $else:expr) => {
        match ($leaf, $state) {
            (Leaf::Tokens($m), LeafState::Count($s)) => $body,
            (Leaf::PerSample($m), LeafState::Count($s)) => $body,
            (Leaf::PerGroup($m), LeafState::Count($s)) => $body,
            (Leaf::FullAttention($m), LeafState::Count($s)) => $body,
            (Leaf::DocumentAttention($m), LeafState::Squares($s)) => $body,
            (Leaf::Vision($m), LeafState::Vision($s)) => $body,
            (Leaf::Preset(_, $m), LeafState::Preset($s)) => $body,
            (Leaf::Linear($m), LeafState::Linear($s)) => $body,
            (Leaf::Given, LeafState::Given($s)) => {
                let $m = &Given;
                $body
            }
            _ => $else,
        }
    };
}

impl Leaf {
    fn empty(&self) -> LeafState {
        match self {
            Leaf::Tokens(m) => LeafState::Count(m.empty()),
            Leaf::PerSample(m) => LeafState::Count(m.empty()),
            Leaf::PerGroup(m) => LeafState::Count(m.empty()),
            Leaf::FullAttention(m) => LeafState::Count(m.empty()),
            Leaf::DocumentAttention(m) => LeafState::Squares(m.empty()),
            Leaf::Vision(m) => LeafState::Vision(m.empty()),
            Leaf::Preset(_, m) => LeafState::Preset(m.empty()),
            Leaf::Given => LeafState::Given(Given.empty()),
            Leaf::Linear(m) => LeafState::Linear(m.empty()),
        }
    }

    fn insert(&self, state: &mut LeafState, sample: &Sample) {
        with_state!(self, state, m, s => m.insert(s, sample), ())
    }

    fn evaluate(&self, state: &LeafState) -> Phases {
        with_state!(self, state, m, s => m.evaluate(s), Phases::ZERO)
    }

    fn evaluate_with(&self, state: &LeafState, sample: &Sample) -> Phases {
        with_state!(self, state, m, s => m.evaluate_with(s, sample), Phases::ZERO)
    }

    fn cost(&self, group: &[&Sample]) -> Phases {
        with_leaf!(self, m => m.cost(group))
    }

    fn floor(&self, sample: &Sample) -> Phases {
        with_leaf!(self, m => m.floor(sample))
    }
}

impl fmt::Debug for Leaf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        with_leaf!(self, m => fmt::Debug::fmt(m, f))
    }
}

// -------------------------------------------------------------------- tree

/// The combinators over the leaves, by leaf index.
#[derive(Clone)]
enum Tree {
    Leaf(usize),
    Sum(Box<Tree>, Box<Tree>),
    Scale(f64, Box<Tree>),
    InPhase(Phase, Box<Tree>),
    Max(Box<Tree>, Box<Tree>),
}

impl Tree {
    fn shifted(self, by: usize) -> Tree {
        match self {
            Tree::Leaf(i) => Tree::Leaf(i + by),
            Tree::Sum(a, b) => Tree::Sum(Box::new(a.shifted(by)), Box::new(b.shifted(by))),
            Tree::Scale(f, a) => Tree::Scale(f, Box::new(a.shifted(by))),
            Tree::InPhase(p, a) => Tree::InPhase(p, Box::new(a.shifted(by))),
            Tree::Max(a, b) => Tree::Max(Box::new(a.shifted(by)), Box::new(b.shifted(by))),
        }
    }

    /// The cost (or, with `floor`, the floor) from the leaves' values, by
    /// the crate's combinators' rules: `Sum` adds, `Scale` multiplies (a zero
    /// factor is zero, even on an infinite cost), `InPhase` moves the total,
    /// `Max` takes the phase-wise maximum, and its floor is its first
    /// operand's (see src/cost/combinator.rs).
    fn value(&self, leaf: &impl Fn(usize) -> Phases, floor: bool) -> Phases {
        match self {
            Tree::Leaf(i) => leaf(*i),
            Tree::Sum(a, b) => a.value(leaf, floor) + b.value(leaf, floor),
            Tree::Scale(f, a) => {
                if *f == 0.0 {
                    Phases::ZERO
                } else {
                    a.value(leaf, floor) * *f
                }
            }
            Tree::InPhase(p, a) => Phases::only(*p, a.value(leaf, floor).total()),
            Tree::Max(a, b) => {
                if floor {
                    a.value(leaf, floor)
                } else {
                    a.value(leaf, floor).max(b.value(leaf, floor))
                }
            }
        }
    }

    fn fmt(&self, leaves: &[Leaf], f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Tree::Leaf(i) => match leaves.get(*i) {
                Some(l) => fmt::Debug::fmt(l, f),
                None => f.write_str("?"),
            },
            Tree::Sum(a, b) => {
                a.fmt(leaves, f)?;
                f.write_str(" + ")?;
                b.fmt(leaves, f)
            }
            Tree::Scale(k, a) => {
                write!(f, "{k:?} * (")?;
                a.fmt(leaves, f)?;
                f.write_str(")")
            }
            Tree::InPhase(p, a) => {
                write!(f, "{p}(")?;
                a.fmt(leaves, f)?;
                f.write_str(")")
            }
            Tree::Max(a, b) => {
                f.write_str("max(")?;
                a.fmt(leaves, f)?;
                f.write_str(", ")?;
                b.fmt(leaves, f)?;
                f.write_str(")")
            }
        }
    }
}

/// A cost model composed at run time: the crate's terms as leaves, the
/// crate's combinators as a tree over them.
///
/// Its [`Incremental`] state is flat: one crate state per leaf, in a
/// `SmallVec` that holds up to 4 leaves inline (no allocation per group for
/// the usual compositions).
///
/// # Complexity
///
/// For a composition of `k` leaves and `t` tree nodes: `insert` O(k) (each
/// leaf's O(1) insertion, O(images) for vision terms); `evaluate` and
/// `evaluate_with` O(t) without cloning the state; the state O(k) space,
/// inline for k <= 4.
#[derive(Clone)]
pub(crate) struct Custom {
    leaves: Vec<Leaf>,
    tree: Tree,
}

impl Custom {
    fn leaf(leaf: Leaf) -> Self {
        Custom {
            leaves: vec![leaf],
            tree: Tree::Leaf(0),
        }
    }

    fn join(&self, other: &Custom, node: impl FnOnce(Box<Tree>, Box<Tree>) -> Tree) -> Custom {
        let by = self.leaves.len();
        let mut leaves = self.leaves.clone();
        leaves.extend_from_slice(&other.leaves);
        Custom {
            leaves,
            tree: node(
                Box::new(self.tree.clone()),
                Box::new(other.tree.clone().shifted(by)),
            ),
        }
    }

    fn wrap(&self, node: impl FnOnce(Box<Tree>) -> Tree) -> Custom {
        Custom {
            leaves: self.leaves.clone(),
            tree: node(Box::new(self.tree.clone())),
        }
    }

    /// The preset, when the model is exactly one preset.
    fn as_preset(&self) -> Option<(Preset, PresetModel)> {
        match (&self.tree, self.leaves.as_slice()) {
            (Tree::Leaf(0), [Leaf::Preset(p, m)]) => Some((*p, *m)),
            _ => None,
        }
    }

    /// The linear model, when the model is exactly one.
    pub(crate) fn as_linear(&self) -> Option<&Linear> {
        match (&self.tree, self.leaves.as_slice()) {
            (Tree::Leaf(0), [Leaf::Linear(m)]) => Some(m),
            _ => None,
        }
    }

    /// Whether the model is exactly `Given`.
    fn is_given(&self) -> bool {
        matches!(
            (&self.tree, self.leaves.as_slice()),
            (Tree::Leaf(0), [Leaf::Given])
        )
    }

    /// Whether any term reads the samples' given costs.
    pub(crate) fn needs_costs(&self) -> bool {
        self.leaves.iter().any(|l| matches!(l, Leaf::Given))
    }
}

impl fmt::Debug for Custom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.tree.fmt(&self.leaves, f)
    }
}

impl CostModel for Custom {
    fn cost(&self, group: &[&Sample]) -> Phases {
        let costs: SmallVec<[Phases; 4]> = self.leaves.iter().map(|l| l.cost(group)).collect();
        self.tree
            .value(&|i| costs.get(i).copied().unwrap_or(Phases::ZERO), false)
    }

    fn floor(&self, sample: &Sample) -> Phases {
        let floors: SmallVec<[Phases; 4]> = self.leaves.iter().map(|l| l.floor(sample)).collect();
        self.tree
            .value(&|i| floors.get(i).copied().unwrap_or(Phases::ZERO), true)
    }
}

impl Incremental for Custom {
    type State = SmallVec<[LeafState; 4]>;

    fn empty(&self) -> Self::State {
        self.leaves.iter().map(Leaf::empty).collect()
    }

    fn insert(&self, state: &mut Self::State, sample: &Sample) {
        for (leaf, s) in self.leaves.iter().zip(state.iter_mut()) {
            leaf.insert(s, sample);
        }
    }

    fn evaluate(&self, state: &Self::State) -> Phases {
        let values: SmallVec<[Phases; 4]> = self
            .leaves
            .iter()
            .zip(state.iter())
            .map(|(l, s)| l.evaluate(s))
            .collect();
        self.tree
            .value(&|i| values.get(i).copied().unwrap_or(Phases::ZERO), false)
    }

    fn evaluate_with(&self, state: &Self::State, sample: &Sample) -> Phases {
        let values: SmallVec<[Phases; 4]> = self
            .leaves
            .iter()
            .zip(state.iter())
            .map(|(l, s)| l.evaluate_with(s, sample))
            .collect();
        self.tree
            .value(&|i| values.get(i).copied().unwrap_or(Phases::ZERO), false)
    }
}

/// The model a planner plans with: a preset or `Given` with their static
/// types, anything else as a [`Custom`] tree.
pub(crate) enum Resolved {
    Preset(PresetModel),
    Given,
    Custom(Custom),
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

fn training(trained: bool) -> Training {
    if trained {
        Training::Trained
    } else {
        Training::Frozen
    }
}

fn phase(name: &str) -> Result<Phase, Failure> {
    match name {
        "vision" => Ok(Phase::Vision),
        "language" => Ok(Phase::Language),
        other => Err(Failure::Input {
            class: "SettingError",
            kind: "Binding",
            item: Some(Item::Name("phase")),
            message: format!("unknown phase {other:?}: use \"vision\" or \"language\""),
        }),
    }
}

/// A cost model (see `microbatch.cost.CostModel`).
#[pyclass(module = "microbatch._native", name = "CostModel", frozen)]
pub(crate) struct NativeCostModel {
    pub(crate) model: Custom,
}

impl NativeCostModel {
    /// A model of one `Linear` leaf.
    pub(crate) fn of_linear(model: Linear) -> Self {
        NativeCostModel {
            model: Custom::leaf(Leaf::Linear(model)),
        }
    }

    /// The model with its static type where it has one.
    pub(crate) fn resolve(&self) -> Resolved {
        if let Some((_, m)) = self.model.as_preset() {
            Resolved::Preset(m)
        } else if self.model.is_given() {
            Resolved::Given
        } else {
            Resolved::Custom(self.model.clone())
        }
    }
}

fn leaf(
    py: Python<'_>,
    f: impl FnOnce() -> Result<Leaf, Error> + Send,
) -> PyResult<NativeCostModel> {
    guard(py, || {
        f().map(|l| NativeCostModel {
            model: Custom::leaf(l),
        })
    })
}

#[pymethods]
impl NativeCostModel {
    #[staticmethod]
    fn tokens(py: Python<'_>, per_token: f64) -> PyResult<Self> {
        leaf(py, || Tokens::new(per_token).map(Leaf::Tokens))
    }

    #[staticmethod]
    fn per_sample(py: Python<'_>, cost: f64) -> PyResult<Self> {
        leaf(py, || PerSample::new(cost).map(Leaf::PerSample))
    }

    #[staticmethod]
    fn per_group(py: Python<'_>, cost: f64) -> PyResult<Self> {
        leaf(py, || PerGroup::new(cost).map(Leaf::PerGroup))
    }

    #[staticmethod]
    fn document_attention(py: Python<'_>, per_token_pair: f64) -> PyResult<Self> {
        leaf(py, || {
            DocumentAttention::new(per_token_pair).map(Leaf::DocumentAttention)
        })
    }

    #[staticmethod]
    fn full_attention(py: Python<'_>, per_token_pair: f64) -> PyResult<Self> {
        leaf(py, || {
            FullAttention::new(per_token_pair).map(Leaf::FullAttention)
        })
    }

    #[staticmethod]
    fn per_tile(
        py: Python<'_>,
        per_tile: f64,
        tokens_per_tile: u32,
        trained: bool,
    ) -> PyResult<Self> {
        leaf(py, || {
            PerTile::new(per_tile, tokens_per_tile, training(trained))
                .map(|m| Leaf::Vision(m.into()))
        })
    }

    #[staticmethod]
    fn per_image(
        py: Python<'_>,
        per_patch: f64,
        per_patch_pair: f64,
        patches_per_token: u32,
        trained: bool,
    ) -> PyResult<Self> {
        leaf(py, || {
            PerImage::new(
                per_patch,
                per_patch_pair,
                patches_per_token,
                training(trained),
            )
            .map(|m| Leaf::Vision(m.into()))
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
        trained: bool,
    ) -> PyResult<Self> {
        leaf(py, || {
            Windowed::new(
                per_patch,
                per_window_pair,
                window,
                per_patch_pair,
                patches_per_token,
                training(trained),
            )
            .map(|m| Leaf::Vision(m.into()))
        })
    }

    #[staticmethod]
    fn preset(py: Python<'_>, name: &str) -> PyResult<Self> {
        let name = name.to_owned();
        leaf(py, move || {
            let p: Preset = name.parse()?;
            Ok(Leaf::Preset(p, p.cost_model()))
        })
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
            Ok::<_, Failure>(NativeCostModel {
                model: Custom::leaf(Leaf::Linear(model)),
            })
        })
    }

    /// The preset's FLOPs model as a `Linear` over its terms (the overhead
    /// terms at 0): the fallback of a calibrator.
    #[staticmethod]
    fn linear_preset(py: Python<'_>, name: &str) -> PyResult<Self> {
        let name = name.to_owned();
        leaf(py, move || {
            let p: Preset = name.parse()?;
            Ok(Leaf::Linear(Linear::preset(p)))
        })
    }

    /// `(term names, coefficients)` when the model is exactly one `Linear`.
    #[getter]
    fn linear_terms(&self) -> Option<(Vec<String>, Vec<f64>)> {
        self.model.as_linear().map(|m| {
            (
                m.terms().iter().map(|t| t.to_string()).collect(),
                m.coefficients().to_vec(),
            )
        })
    }

    #[staticmethod]
    fn given() -> Self {
        NativeCostModel {
            model: Custom::leaf(Leaf::Given),
        }
    }

    fn plus(&self, other: &NativeCostModel) -> Self {
        NativeCostModel {
            model: self.model.join(&other.model, Tree::Sum),
        }
    }

    fn max(&self, other: &NativeCostModel) -> Self {
        NativeCostModel {
            model: self.model.join(&other.model, Tree::Max),
        }
    }

    fn scale(&self, py: Python<'_>, factor: f64) -> PyResult<Self> {
        // The crate's check of a scale factor (`Scale::new`), on a stand-in model.
        guard(py, || {
            let factor = Tokens::new(1.0)?.scale(factor)?.factor();
            Ok::<_, Failure>(NativeCostModel {
                model: self.model.wrap(|t| Tree::Scale(factor, t)),
            })
        })
    }

    fn in_phase(&self, py: Python<'_>, name: &str) -> PyResult<Self> {
        guard(py, || {
            let p = phase(name)?;
            Ok::<_, Failure>(NativeCostModel {
                model: self.model.wrap(|t| Tree::InPhase(p, t)),
            })
        })
    }

    /// The preset's name when the model is exactly one preset.
    #[getter]
    fn preset_name(&self) -> Option<&'static str> {
        self.model.as_preset().map(|(p, _)| p.name())
    }

    #[getter]
    fn needs_costs(&self) -> bool {
        self.model.needs_costs()
    }

    #[getter]
    fn leaves(&self) -> usize {
        self.model.leaves.len()
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
            costs_match(self.model.needs_costs(), arrays.costs.is_some())?;
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
            costs_match(self.model.needs_costs(), arrays.costs.is_some())?;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn samples() -> Vec<Sample> {
        (0..40u32)
            .map(|i| {
                let images = (0..i % 3).map(|k| Image::new(100 + 37 * i + k));
                Sample::new(50 + 97 * i, images)
                    .with_cost(Phases::new(f64::from(i % 5), 0.5 * f64::from(i)))
                    .unwrap()
            })
            .collect()
    }

    /// The tree agrees with the crate's static composition of the same terms.
    #[test]
    fn tree_equals_the_static_composition() {
        let t = Tokens::new(2.0).unwrap();
        let a = DocumentAttention::new(1e-3).unwrap();
        let g = PerGroup::new(5.0).unwrap();
        let v: Vision = PerTile::new(4.0, 256, Training::Trained).unwrap().into();
        let p = Preset::Qwen25Vl7b.cost_model();
        let stat = (t + a)
            .scale(0.5)
            .unwrap()
            .max(g.in_phase(Phase::Vision))
            .plus(v)
            .plus(Given)
            .plus(p.scale(1e-12).unwrap());
        let leaf = |l| Custom::leaf(l);
        let dynamic = leaf(Leaf::Tokens(t))
            .join(&leaf(Leaf::DocumentAttention(a)), Tree::Sum)
            .wrap(|x| Tree::Scale(0.5, x))
            .join(
                &leaf(Leaf::PerGroup(g)).wrap(|x| Tree::InPhase(Phase::Vision, x)),
                Tree::Max,
            )
            .join(&leaf(Leaf::Vision(v)), Tree::Sum)
            .join(&leaf(Leaf::Given), Tree::Sum)
            .join(
                &leaf(Leaf::Preset(Preset::Qwen25Vl7b, p)).wrap(|x| Tree::Scale(1e-12, x)),
                Tree::Sum,
            );
        let samples = samples();
        for w in [1usize, 3, 7] {
            for group in samples.chunks(w) {
                let refs: Vec<&Sample> = group.iter().collect();
                assert_eq!(dynamic.cost(&refs), stat.cost(&refs));
                let mut ds = dynamic.empty();
                let mut ss = stat.empty();
                for s in group {
                    assert_eq!(dynamic.evaluate_with(&ds, s), stat.evaluate_with(&ss, s));
                    dynamic.insert(&mut ds, s);
                    stat.insert(&mut ss, s);
                }
                assert_eq!(dynamic.evaluate(&ds), stat.evaluate(&ss));
                assert_eq!(dynamic.floor(&group[0]), stat.floor(&group[0]));
            }
        }
        assert_eq!(format!("{dynamic:?}"), format!("{stat:?}"));
    }
}

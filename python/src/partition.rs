//! Multiway partitioning over numpy arrays: `lpt`, `karmarkar_karp`, `lower_bound` and the `Partitioner` on 1-D or row-major 2-D weights.

use microbatch::partition::{
    self, Algorithm, Dims, Objective, Partition, Partitioner, DEFAULT_NODE_BUDGET,
};
use microbatch::{Error, Item, NotNan, Size, Total};
use numpy::{IntoPyArray, PyArray1, PyReadonlyArray1, PyReadonlyArray2, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::IntoPyObjectExt;

use crate::error::{guard, input_error, named};
use crate::pack::{not_nan, rows};

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(partition_u64, m)?)?;
    m.add_function(wrap_pyfunction!(partition_f64, m)?)?;
    m.add_function(wrap_pyfunction!(partition_lower_bound_u64, m)?)?;
    m.add_function(wrap_pyfunction!(partition_lower_bound_f64, m)?)?;
    m.add("DEFAULT_NODE_BUDGET", DEFAULT_NODE_BUDGET)?;
    m.add("ALGORITHM_NAMES", Algorithm::NAMES.to_vec())?;
    m.add("OBJECTIVE_NAMES", Objective::NAMES.to_vec())?;
    m.add("DIMS_NAMES", Dims::NAMES.to_vec())?;
    // The defaults of the settings chosen by name: the crate's `Default` of
    // each type (`Partitioner::new` starts from them), so that Python's
    // `partition()` defaults to what the crate does.
    m.add("DEFAULT_ALGORITHM", Algorithm::default().name())?;
    m.add("DEFAULT_OBJECTIVE", Objective::default().name())?;
    m.add("DEFAULT_DIMS", Dims::default().name())?;
    Ok(())
}

/// What to run: a free function of the crate, or the crate's `Partitioner`
/// built from the keyword arguments by its own builder (the names read by
/// the crate's `FromStr`; the cap is set once it is converted).
enum Method<S> {
    Lpt,
    KarmarkarKarp,
    Partitioner(Partitioner<S>),
}

impl<S: Size> Method<S> {
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        method: &str,
        k: usize,
        algorithm: &Bound<'_, PyAny>,
        refinement: bool,
        objective: &Bound<'_, PyAny>,
        dims: &Bound<'_, PyAny>,
        equal_count: bool,
        allow_empty: bool,
        node_budget: u64,
        max_rounds: Option<usize>,
    ) -> PyResult<Self> {
        Ok(match method {
            "lpt" => Method::Lpt,
            "karmarkar_karp" => Method::KarmarkarKarp,
            "partition" => {
                let mut p = Partitioner::new(k)
                    .algorithm(named(py, "algorithm", algorithm, &Algorithm::NAMES)?)
                    .refinement(refinement)
                    .objective(named(py, "objective", objective, &Objective::NAMES)?)
                    .dims(named(py, "dims", dims, &Dims::NAMES)?)
                    .equal_count(equal_count)
                    .allow_empty(allow_empty)
                    .node_budget(node_budget);
                if let Some(rounds) = max_rounds {
                    p = p.max_rounds(rounds);
                }
                Method::Partitioner(p)
            }
            other => {
                return Err(input_error(
                    py,
                    "SettingError",
                    format!(
                    "unknown method {other:?}: use \"lpt\", \"karmarkar_karp\" or \"partition\""
                ),
                ))
            }
        })
    }

    /// The same method with every part sum capped at `cap` (the
    /// `Partitioner`'s only: the free functions take no cap).
    fn cap(self, cap: Option<&[S]>) -> Self {
        match (self, cap) {
            (Method::Partitioner(p), Some(cap)) => Method::Partitioner(p.cap_per_dim(cap)),
            (method, _) => method,
        }
    }

    fn run<I: Item<Size = S>>(
        &self,
        items: &[I],
        k: usize,
    ) -> Result<Partition<<S as Size>::Total>, Error> {
        match self {
            Method::Lpt => partition::lpt(items, k),
            Method::KarmarkarKarp => partition::karmarkar_karp(items, k),
            Method::Partitioner(p) => p.partition(items),
        }
    }
}

/// A partition, flattened for Python: the items of every part (input
/// indices) with the offsets of the parts (`k + 1` entries), the sums
/// row-major (`k x dims`), the objective, the lower bound, whether proven
/// optimal, and the crate's `Partition::ratio`.
type Flat<T> = (Vec<i64>, Vec<i64>, Vec<T>, T, T, bool, f64);

fn flatten<T: Total>(p: &Partition<T>) -> Flat<T> {
    let n: usize = p.parts().map(<[usize]>::len).sum();
    let mut items = Vec::with_capacity(n);
    let mut offsets = Vec::with_capacity(p.len() + 1);
    let mut sums = Vec::with_capacity(p.len() * p.dims());
    offsets.push(0);
    for (i, part) in p.parts().enumerate() {
        items.extend(part.iter().map(|&j| j as i64));
        offsets.push(items.len() as i64);
        sums.extend_from_slice(p.sum(i));
    }
    (
        items,
        offsets,
        sums,
        p.objective(),
        p.lower_bound(),
        p.proven_optimal(),
        p.ratio(),
    )
}

/// Runs `method` on the 1-D path (plain values) when the array has one
/// column, else on rows as items.
fn run<S>(
    py: Python<'_>,
    method: Method<S>,
    flat: &[S],
    n: usize,
    dims: usize,
    k: usize,
    cap: Option<Vec<S>>,
) -> PyResult<Flat<S::Total>>
where
    S: Size + Item<Size = S> + Send + Sync,
    S::Total: Send,
{
    let p = guard(py, move || {
        let method = method.cap(cap.as_deref());
        let p = if dims == 1 {
            method.run(flat, k)?
        } else {
            method.run(&rows(flat, n, dims), k)?
        };
        Ok::<_, microbatch::Error>(flatten(&p))
    })?;
    Ok(p)
}

type Out<'py> = (
    Bound<'py, PyArray1<i64>>,
    Bound<'py, PyArray1<i64>>,
    Bound<'py, PyAny>,
    Bound<'py, PyAny>,
    Bound<'py, PyAny>,
    bool,
    f64,
);

/// Integer sums as a `uint64` array when they fit (always for sums below
/// 2^64), else as a list of Python ints (exact).
fn wide<'py>(py: Python<'py>, sums: Vec<u128>) -> PyResult<Bound<'py, PyAny>> {
    let narrow: Option<Vec<u64>> = sums.iter().map(|&s| u64::try_from(s).ok()).collect();
    match narrow {
        Some(v) => Ok(v.into_pyarray(py).into_any()),
        None => sums.into_bound_py_any(py),
    }
}

/// Partitions unsigned integer weights (`n x dims`, C-contiguous) into `k`
/// parts with `method` (`"lpt"`, `"karmarkar_karp"` or `"partition"`, the
/// `Partitioner` with the settings that follow): returns (items, offsets,
/// sums, objective, lower bound, proven optimal, ratio).
#[pyfunction]
#[pyo3(signature = (method, weights, k, cap, algorithm, refinement, objective, dims, equal_count, allow_empty, node_budget, max_rounds))]
#[allow(clippy::too_many_arguments)]
fn partition_u64<'py>(
    py: Python<'py>,
    method: &str,
    weights: PyReadonlyArray2<'py, u64>,
    k: usize,
    cap: Option<PyReadonlyArray1<'py, u64>>,
    algorithm: &Bound<'py, PyAny>,
    refinement: bool,
    objective: &Bound<'py, PyAny>,
    dims: &Bound<'py, PyAny>,
    equal_count: bool,
    allow_empty: bool,
    node_budget: u64,
    max_rounds: Option<usize>,
) -> PyResult<Out<'py>> {
    let method = Method::new(
        py,
        method,
        k,
        algorithm,
        refinement,
        objective,
        dims,
        equal_count,
        allow_empty,
        node_budget,
        max_rounds,
    )?;
    let (n, d) = (weights.shape()[0], weights.shape()[1]);
    let cap = match &cap {
        Some(c) => Some(c.as_slice()?.to_vec()),
        None => None,
    };
    let (items, offsets, sums, objective, bound, proven, ratio) =
        run(py, method, weights.as_slice()?, n, d, k, cap)?;
    Ok((
        items.into_pyarray(py),
        offsets.into_pyarray(py),
        wide(py, sums)?,
        objective.into_bound_py_any(py)?,
        bound.into_bound_py_any(py)?,
        proven,
        ratio,
    ))
}

/// [`partition_u64`] for float weights and cap (NaN refused, naming the
/// item).
#[pyfunction]
#[pyo3(signature = (method, weights, k, cap, algorithm, refinement, objective, dims, equal_count, allow_empty, node_budget, max_rounds))]
#[allow(clippy::too_many_arguments)]
fn partition_f64<'py>(
    py: Python<'py>,
    method: &str,
    weights: PyReadonlyArray2<'py, f64>,
    k: usize,
    cap: Option<PyReadonlyArray1<'py, f64>>,
    algorithm: &Bound<'py, PyAny>,
    refinement: bool,
    objective: &Bound<'py, PyAny>,
    dims: &Bound<'py, PyAny>,
    equal_count: bool,
    allow_empty: bool,
    node_budget: u64,
    max_rounds: Option<usize>,
) -> PyResult<Out<'py>> {
    let method = Method::new(
        py,
        method,
        k,
        algorithm,
        refinement,
        objective,
        dims,
        equal_count,
        allow_empty,
        node_budget,
        max_rounds,
    )?;
    let (n, d) = (weights.shape()[0], weights.shape()[1]);
    let flat = weights.as_slice()?;
    let cap = match &cap {
        Some(c) => Some(c.as_slice()?),
        None => None,
    };
    let (flat, cap) = guard(py, || {
        let cap = match cap {
            Some(c) => Some(not_nan(c, 1, true)?),
            None => None,
        };
        Ok::<_, microbatch::Error>((not_nan(flat, d, false)?, cap))
    })?;
    let (items, offsets, sums, objective, bound, proven, ratio) =
        run(py, method, &flat, n, d, k, cap)?;
    Ok((
        items.into_pyarray(py),
        offsets.into_pyarray(py),
        sums.into_pyarray(py).into_any(),
        objective.into_bound_py_any(py)?,
        bound.into_bound_py_any(py)?,
        proven,
        ratio,
    ))
}

fn bound<S>(py: Python<'_>, flat: &[S], n: usize, dims: usize, k: usize) -> PyResult<S::Total>
where
    S: Size + Item<Size = S> + Send + Sync,
    S::Total: Send,
{
    guard(py, || {
        if dims == 1 {
            partition::lower_bound(flat, k)
        } else {
            partition::lower_bound(&rows(flat, n, dims), k)
        }
    })
}

/// The lower bound on the largest part of any partition of integer weights
/// into `k` parts (a Python int).
#[pyfunction]
fn partition_lower_bound_u64<'py>(
    py: Python<'py>,
    weights: PyReadonlyArray2<'py, u64>,
    k: usize,
) -> PyResult<Bound<'py, PyAny>> {
    let (n, d) = (weights.shape()[0], weights.shape()[1]);
    bound(py, weights.as_slice()?, n, d, k)?.into_bound_py_any(py)
}

/// The lower bound on the largest part of any partition of float weights
/// into `k` parts.
#[pyfunction]
fn partition_lower_bound_f64<'py>(
    py: Python<'py>,
    weights: PyReadonlyArray2<'py, f64>,
    k: usize,
) -> PyResult<Bound<'py, PyAny>> {
    let (n, d) = (weights.shape()[0], weights.shape()[1]);
    let flat = weights.as_slice()?;
    let flat: Vec<NotNan<f64>> = guard(py, || not_nan(flat, d, false))?;
    bound(py, &flat, n, d, k)?.into_bound_py_any(py)
}

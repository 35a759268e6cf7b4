//! Bin packing over numpy arrays: the crate's `pack` functions on 1-D or row-major 2-D sizes, integer or float.

use microbatch::pack::{self, LowerBounds, Packing};
use microbatch::{Error, InvalidReason, Item, Locator, NotNan, Scalar, Size};
use numpy::{IntoPyArray, PyArray1, PyReadonlyArray1, PyReadonlyArray2, PyUntypedArrayMethods};
use pyo3::prelude::*;

use crate::error::{guard, input_error};

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(pack_u64, m)?)?;
    m.add_function(wrap_pyfunction!(pack_f64, m)?)?;
    m.add_function(wrap_pyfunction!(pack_lower_bounds_u64, m)?)?;
    m.add_function(wrap_pyfunction!(pack_lower_bounds_f64, m)?)?;
    m.add_function(wrap_pyfunction!(unsigned, m)?)?;
    Ok(())
}

/// The packing algorithms, by their Python (and crate) names.
#[derive(Clone, Copy)]
enum Algorithm {
    FirstFitDecreasing,
    BestFitDecreasing,
    FirstFit,
    BestFit,
    NextFit,
}

impl Algorithm {
    fn parse(py: Python<'_>, name: &str) -> PyResult<Self> {
        Ok(match name {
            "first_fit_decreasing" => Algorithm::FirstFitDecreasing,
            "best_fit_decreasing" => Algorithm::BestFitDecreasing,
            "first_fit" => Algorithm::FirstFit,
            "best_fit" => Algorithm::BestFit,
            "next_fit" => Algorithm::NextFit,
            other => {
                return Err(input_error(
                    py,
                    "SettingError",
                    format!(
                        "unknown packing algorithm {other:?}: use first_fit_decreasing, \
                         best_fit_decreasing, first_fit, best_fit or next_fit"
                    ),
                ))
            }
        })
    }

    fn run<I: Item>(self, items: &[I], capacity: I::Capacity) -> Result<Packing<I::Size>, Error> {
        match self {
            Algorithm::FirstFitDecreasing => pack::first_fit_decreasing(items, capacity),
            Algorithm::BestFitDecreasing => pack::best_fit_decreasing(items, capacity),
            Algorithm::FirstFit => pack::first_fit(items, capacity),
            Algorithm::BestFit => pack::best_fit(items, capacity),
            Algorithm::NextFit => pack::next_fit(items, capacity),
        }
    }
}

/// Where value `i` of a row-major array with `dims` columns is, as the
/// crate's errors name it: dimension `i` of a capacity, or item `i / dims` in
/// dimension `i % dims` of the sizes.
fn locate(i: usize, dims: usize, capacity: bool) -> Locator {
    if capacity {
        Locator::Capacity { dim: i }
    } else {
        let dims = dims.max(1);
        Locator::Size {
            index: i / dims,
            dim: i % dims,
        }
    }
}

/// Float values as `NotNan`, naming the first NaN as the crate would:
/// `Error::Invalid` at a size (item `i / dims`, dimension `i % dims`) for
/// sizes, at a capacity for a capacity. The crate itself refuses negative and
/// infinite values.
pub(crate) fn not_nan(
    values: &[f64],
    dims: usize,
    capacity: bool,
) -> Result<Vec<NotNan<f64>>, Error> {
    values
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            NotNan::new(v).map_err(|_| Error::Invalid {
                at: locate(i, dims, capacity),
                value: Scalar::Float(v),
                reason: InvalidReason::NaN,
            })
        })
        .collect()
}

/// Signed integer sizes (or a capacity) as the crate's unsigned sizes: the
/// crate takes only unsigned integers, so it never sees a negative one; the
/// conversion refuses the first with the error the crate gives a negative
/// float there (`Error::Invalid` at a size or capacity, reason `Negative`),
/// so that the message and the exception are the crate's. The value is
/// printed as the crate prints a float (exact up to 2^53 in magnitude).
fn to_unsigned(values: &[i64], dims: usize, capacity: bool) -> Result<Vec<u64>, Error> {
    values
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            u64::try_from(v).map_err(|_| Error::Invalid {
                at: locate(i, dims, capacity),
                // A negative i64 has no `Scalar::Int`: the float nearest it.
                value: Scalar::Float(v as f64),
                reason: InvalidReason::Negative,
            })
        })
        .collect()
}

/// Signed integer sizes (`dims` columns, row-major, flattened) or a capacity
/// (`capacity=True`) as `uint64`, refusing the first negative value with the
/// crate's error (`InvalidValueError` / `CapacityError`, naming the item or
/// dimension).
#[pyfunction]
fn unsigned<'py>(
    py: Python<'py>,
    values: PyReadonlyArray1<'py, i64>,
    dims: usize,
    capacity: bool,
) -> PyResult<Bound<'py, PyArray1<u64>>> {
    let values = values.as_slice()?;
    let out = guard(py, || to_unsigned(values, dims, capacity))?;
    Ok(out.into_pyarray(py))
}

/// The rows of a row-major `n x dims` array as slices (`dims` may be 0).
pub(crate) fn rows<T>(flat: &[T], n: usize, dims: usize) -> Vec<&[T]> {
    if dims == 0 {
        return vec![&flat[..0]; n];
    }
    flat.chunks_exact(dims).collect()
}

/// A packing, flattened for Python: the items of every bin (input indices)
/// with the offsets of the bins (`bins + 1` entries), the loads row-major
/// (`bins x dims`), the lower bounds L1 and L2, and the crate's
/// `Packing::efficiency` of every dimension.
type Flat<T> = (Vec<i64>, Vec<i64>, Vec<T>, u64, u64, Vec<f64>);

fn flatten<S: Size, T>(packing: &Packing<S>, value: impl Fn(S) -> T) -> Flat<T> {
    let mut items = Vec::with_capacity(packing.item_count());
    let mut offsets = Vec::with_capacity(packing.len() + 1);
    let mut loads = Vec::with_capacity(packing.len() * packing.dims());
    offsets.push(0);
    for bin in packing.bins() {
        items.extend(bin.items().iter().map(|&i| i as i64));
        offsets.push(items.len() as i64);
        loads.extend(bin.load().iter().map(|&l| value(l)));
    }
    let LowerBounds { l1, l2 } = packing.lower_bounds();
    let efficiency = (0..packing.dims()).map(|d| packing.efficiency(d)).collect();
    (items, offsets, loads, l1, l2, efficiency)
}

/// Packs `sizes` with one algorithm: the 1-D path (plain values) when the
/// array has one column and the capacity one value, else rows as items.
fn run<S, T: Send>(
    py: Python<'_>,
    algorithm: Algorithm,
    flat: &[S],
    n: usize,
    dims: usize,
    capacity: Vec<S>,
    value: impl Fn(S) -> T + Send,
) -> PyResult<Flat<T>>
where
    S: Size + Item<Size = S, Capacity = S> + Send + Sync,
{
    guard(py, || {
        let packing = if dims == 1 && capacity.len() == 1 {
            algorithm.run(flat, capacity[0])?
        } else {
            algorithm.run(&rows(flat, n, dims), capacity)?
        };
        Ok::<_, microbatch::Error>(flatten(&packing, value))
    })
}

type Out<'py, T> = (
    Bound<'py, PyArray1<i64>>,
    Bound<'py, PyArray1<i64>>,
    Bound<'py, PyArray1<T>>,
    u64,
    u64,
    Vec<f64>,
);

fn out<T: numpy::Element>(py: Python<'_>, flat: Flat<T>) -> Out<'_, T> {
    let (items, offsets, loads, l1, l2, efficiency) = flat;
    (
        items.into_pyarray(py),
        offsets.into_pyarray(py),
        loads.into_pyarray(py),
        l1,
        l2,
        efficiency,
    )
}

/// Packs unsigned integer sizes (`n x dims`, C-contiguous) into bins of
/// `capacity` (`dims` values, or one for 1-D sizes): returns (items,
/// offsets, loads, l1, l2, the efficiency of every dimension).
#[pyfunction]
fn pack_u64<'py>(
    py: Python<'py>,
    algorithm: &str,
    sizes: PyReadonlyArray2<'py, u64>,
    capacity: PyReadonlyArray1<'py, u64>,
) -> PyResult<Out<'py, u64>> {
    let algorithm = Algorithm::parse(py, algorithm)?;
    let (n, dims) = (sizes.shape()[0], sizes.shape()[1]);
    let flat = sizes.as_slice()?;
    let capacity = capacity.as_slice()?.to_vec();
    let result = run(py, algorithm, flat, n, dims, capacity, |l| l)?;
    Ok(out(py, result))
}

/// [`pack_u64`] for float sizes and capacity (NaN refused, naming the item).
#[pyfunction]
fn pack_f64<'py>(
    py: Python<'py>,
    algorithm: &str,
    sizes: PyReadonlyArray2<'py, f64>,
    capacity: PyReadonlyArray1<'py, f64>,
) -> PyResult<Out<'py, f64>> {
    let algorithm = Algorithm::parse(py, algorithm)?;
    let (n, dims) = (sizes.shape()[0], sizes.shape()[1]);
    let flat = sizes.as_slice()?;
    let capacity = capacity.as_slice()?;
    let (flat, capacity) = floats(py, flat, dims, capacity)?;
    let result = run(py, algorithm, &flat, n, dims, capacity, |l| l.into_inner())?;
    Ok(out(py, result))
}

/// Float values checked not NaN.
type Floats = Vec<NotNan<f64>>;

/// Float sizes and capacity as `NotNan` (a NaN refused, naming the item or
/// the dimension; the capacity first, as the crate checks it first).
fn floats(
    py: Python<'_>,
    flat: &[f64],
    dims: usize,
    capacity: &[f64],
) -> PyResult<(Floats, Floats)> {
    guard(py, || {
        let capacity = not_nan(capacity, 1, true)?;
        Ok::<_, microbatch::Error>((not_nan(flat, dims, false)?, capacity))
    })
}

fn bounds<S>(
    py: Python<'_>,
    flat: &[S],
    n: usize,
    dims: usize,
    capacity: Vec<S>,
) -> PyResult<(u64, u64)>
where
    S: Size + Item<Size = S, Capacity = S> + Send + Sync,
{
    guard(py, || {
        let lb = if dims == 1 && capacity.len() == 1 {
            pack::lower_bounds(flat, capacity[0])?
        } else {
            pack::lower_bounds(&rows(flat, n, dims), capacity)?
        };
        Ok::<_, microbatch::Error>((lb.l1, lb.l2))
    })
}

/// The lower bounds (L1, L2) of unsigned integer sizes.
#[pyfunction]
fn pack_lower_bounds_u64(
    py: Python<'_>,
    sizes: PyReadonlyArray2<'_, u64>,
    capacity: PyReadonlyArray1<'_, u64>,
) -> PyResult<(u64, u64)> {
    let (n, dims) = (sizes.shape()[0], sizes.shape()[1]);
    bounds(
        py,
        sizes.as_slice()?,
        n,
        dims,
        capacity.as_slice()?.to_vec(),
    )
}

/// The lower bounds (L1, L2) of float sizes.
#[pyfunction]
fn pack_lower_bounds_f64(
    py: Python<'_>,
    sizes: PyReadonlyArray2<'_, f64>,
    capacity: PyReadonlyArray1<'_, f64>,
) -> PyResult<(u64, u64)> {
    let (n, dims) = (sizes.shape()[0], sizes.shape()[1]);
    let flat = sizes.as_slice()?;
    let capacity = capacity.as_slice()?;
    let (flat, capacity) = floats(py, flat, dims, capacity)?;
    bounds(py, &flat, n, dims, capacity)
}

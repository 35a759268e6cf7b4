//! Crate errors to Python exceptions: each variant to its class of `microbatch.errors`, with the offending item; `guard` keeps panics from crossing.

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::str::FromStr;

use microbatch::cost::Phase;
use microbatch::{Error, ErrorKind, Locator};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};

/// The class of `microbatch.errors` an error maps to, its variant name and
/// the offending item (an index, an id, a dimension or a name), if any.
///
/// The class is the crate's [`Error::kind`], one class a kind; the variant
/// name is the `Debug` form's leading identifier (`"Oversize"` for
/// `Oversize { .. }`), so that a variant added later reaches Python with
/// its own name, except for [`Error::Invalid`], named by its locator (see
/// [`invalid_name`]).
fn classify(err: &Error) -> (&'static str, String, Option<Item>) {
    (class_of(err.kind()), variant(err), item(err))
}

/// The `microbatch.errors` class of a kind. `ErrorKind` is non-exhaustive: a
/// kind added later still reaches Python as an input error with its message.
fn class_of(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::Capacity => "CapacityError",
        ErrorKind::InvalidValue => "InvalidValueError",
        ErrorKind::Oversize => "OversizeError",
        ErrorKind::Fit => "FitError",
        ErrorKind::Limit => "LimitError",
        ErrorKind::Setting => "SettingError",
        ErrorKind::Infeasible => "InfeasibleError",
        ErrorKind::DuplicateId => "DuplicateIdError",
        _ => "InputError",
    }
}

/// The variant's name: the leading identifier of its derived `Debug` form,
/// or for [`Error::Invalid`] the name [`invalid_name`] gives its locator.
fn variant(err: &Error) -> String {
    if let Error::Invalid { at, .. } = err {
        return invalid_name(at).to_owned();
    }
    let debug = format!("{err:?}");
    let end = debug
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(debug.len());
    debug[..end].to_owned()
}

/// The `kind` Python sees for [`Error::Invalid`]: the name of the variant
/// the crate had for its locator before the nine became one
/// (`"InvalidSize"` at a size, `"InvalidSetting"` at a setting, ...), which
/// Python code matches on; `"Invalid"` for a locator added later.
fn invalid_name(at: &Locator) -> &'static str {
    match at {
        Locator::Capacity { .. } => "InvalidCapacity",
        Locator::Size { .. } => "InvalidSize",
        Locator::Coefficient { .. } => "InvalidCoefficient",
        Locator::Measurement { .. } => "InvalidMeasurement",
        Locator::Timing { .. } => "InvalidTiming",
        Locator::Setting { .. } => "InvalidSetting",
        Locator::Cost { .. } => "InvalidCost",
        Locator::Floor { .. } => "InvalidFloor",
        Locator::Origin { .. } => "InvalidOrigin",
        _ => "Invalid",
    }
}

/// The offending item an error names, for the exception's `item`: the
/// first oversize item (by id for samples), the index, dimension, row or
/// feature, the sample or group id, or the parameter's name.
fn item(err: &Error) -> Option<Item> {
    use Item::{Id, Index, Name};
    match err {
        Error::ZeroCapacity { dim } | Error::Invalid { at: Locator::Capacity { dim }, .. } => Some(Index(*dim)),
        Error::DimensionMismatch { index, .. } | Error::Invalid { at: Locator::Size { index, .. }, .. } => {
            Some(Index(*index))
        }
        Error::Oversize { items } => items.first().map(|o| match o.id {
            Some(id) => Id(id),
            None => Index(o.index),
        }),
        Error::Invalid { at: Locator::Coefficient { name }, .. } | Error::Invalid { at: Locator::Setting { name, .. }, .. } => {
            Some(Name(name))
        }
        Error::RowLength { row, .. }
        | Error::Invalid { at: Locator::Measurement { row, .. }, .. }
        | Error::PredictionOverflow { row, .. } => Some(Index(*row)),
        Error::CoefficientRange { feature, .. } | Error::RankDeficient { feature } => {
            Some(Index(*feature))
        }
        Error::SizeOverflow { dim } => dim.map(Index),
        Error::UnequalCounts { part, .. } => Some(Index(*part)),
        Error::CapExceeded { dim, .. } => Some(Index(*dim)),
        Error::NotAPartition { index, .. } => Some(Index(*index)),
        Error::DuplicateId { id }
        | Error::Invalid { at: Locator::Cost { id, .. }, .. }
        | Error::Invalid { at: Locator::Floor { id, .. }, .. }
        | Error::LossTokens { id, .. }
        // A sample's value (its origin), like a bad cost: named by id.
        | Error::Invalid { at: Locator::Origin { id, .. }, .. }
        | Error::BytesOverflow { id } => Some(Id(*id)),
        Error::PlanMismatch { id, .. } => id.map(Id),
        // A group too large for one sequence or micro-batch: like an
        // oversize sample, named by its group id.
        Error::GroupTooLarge { group, .. } => Some(Id(*group)),
        // A measured time given to a calibrator, named by the keyword
        // argument of `Calibrator.observe` that carried it.
        Error::Invalid { at: Locator::Timing { phase }, .. } => Some(Name(match phase {
            Some(Phase::Vision) => "vision_seconds",
            Some(Phase::Language) => "language_seconds",
            None => "seconds",
        })),
        _ => None,
    }
}

/// The offending item of an error.
pub(crate) enum Item {
    /// An index into the input (item, dimension, row, part).
    Index(usize),
    /// A sample id.
    Id(u64),
    /// A parameter or setting name.
    Name(&'static str),
}

/// Raises `err` as its `microbatch.errors` class, with `kind` (the crate's
/// variant name) and `item` attributes and the crate's message.
pub(crate) fn to_py(py: Python<'_>, err: &Error) -> PyErr {
    let (class, kind, item) = classify(err);
    raise(py, class, &kind, item, err.to_string())
}

/// The exception `microbatch.errors.<class>(message, kind=kind, item=item)`.
fn raise(py: Python<'_>, class: &str, kind: &str, item: Option<Item>, message: String) -> PyErr {
    let build = || -> PyResult<PyErr> {
        let module = py.import("microbatch.errors")?;
        let kwargs = PyDict::new(py);
        kwargs.set_item("kind", kind)?;
        match item {
            Some(Item::Index(i)) => kwargs.set_item("item", i)?,
            Some(Item::Id(id)) => kwargs.set_item("item", id)?,
            Some(Item::Name(name)) => kwargs.set_item("item", name)?,
            None => kwargs.set_item("item", py.None())?,
        }
        let exc = module.getattr(class)?.call((message,), Some(&kwargs))?;
        Ok(PyErr::from_value(exc))
    };
    build().unwrap_or_else(|e| e)
}

/// Why a native call failed, built without the GIL and raised with it.
pub(crate) enum Failure {
    /// A crate error, raised as its class by [`to_py`].
    Crate(Error),
    /// A check of the binding's own (an array's length, a sample's cost):
    /// the class of `microbatch.errors`, the `kind` and `item` to set, and
    /// the message.
    Input {
        class: &'static str,
        kind: &'static str,
        item: Option<Item>,
        message: String,
    },
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        Failure::Crate(e)
    }
}

impl Failure {
    /// A `DtypeError` of kind `"Binding"`: an array of the wrong length or shape.
    pub(crate) fn shape(message: String) -> Self {
        Failure::Input {
            class: "DtypeError",
            kind: "Binding",
            item: None,
            message,
        }
    }

    /// The exception to raise.
    pub(crate) fn into_py(self, py: Python<'_>) -> PyErr {
        match self {
            Failure::Crate(e) => to_py(py, &e),
            Failure::Input {
                class,
                kind,
                item,
                message,
            } => raise(py, class, kind, item, message),
        }
    }
}

/// Runs `f` with the GIL released, catching a panic: a crate error or a
/// [`Failure`] becomes its `microbatch.errors` class, a panic (a bug)
/// `microbatch.errors.InternalError` with the panic's message, never PyO3's
/// `PanicException`. Every native entry point that does work on its input
/// runs that work through here.
pub(crate) fn guard<T, E, F>(py: Python<'_>, f: F) -> PyResult<T>
where
    F: FnOnce() -> Result<T, E> + Send,
    T: Send,
    E: Into<Failure> + Send,
{
    match py.detach(|| catch_unwind(AssertUnwindSafe(f))) {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(e.into().into_py(py)),
        Err(panic) => Err(internal(py, panic.as_ref())),
    }
}

/// `microbatch.errors.InternalError` for a caught panic.
fn internal(py: Python<'_>, panic: &(dyn Any + Send)) -> PyErr {
    let what = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned());
    raise(
        py,
        "InternalError",
        "Panic",
        None,
        format!("internal error in microbatch (please report it): {what}"),
    )
}

/// Converts a crate result, mapping its error with [`to_py`] (for calls
/// that hold the GIL; [`guard`] for work on input).
pub(crate) fn check<T>(py: Python<'_>, result: Result<T, Error>) -> PyResult<T> {
    result.map_err(|e| to_py(py, &e))
}

/// An input error raised from the binding itself (a shape or length the
/// crate never sees), as `microbatch.errors.<class>`.
pub(crate) fn input_error(py: Python<'_>, class: &str, message: String) -> PyErr {
    raise(py, class, "Binding", None, message)
}

/// The crate's value named `value`, read by the crate's own `FromStr` (the
/// one list of names: `names` is the type's `NAMES`). Any other value, a
/// non-string included, is a `SettingError` of kind `"Binding"` naming the
/// setting: `unknown algorithm 'greedy': use one of 'lpt', 'karmarkar_karp',
/// 'exact'` (Python's `repr` of the value and of each name).
pub(crate) fn named<T: FromStr>(
    py: Python<'_>,
    setting: &'static str,
    value: &Bound<'_, PyAny>,
    names: &[&str],
) -> PyResult<T> {
    if let Ok(s) = value.cast::<PyString>() {
        if let Ok(parsed) = s.to_cow()?.parse::<T>() {
            return Ok(parsed);
        }
    }
    let repr = |v: &Bound<'_, PyAny>| -> PyResult<String> { Ok(v.repr()?.to_cow()?.into_owned()) };
    let known = names
        .iter()
        .map(|n| repr(PyString::new(py, n).as_any()))
        .collect::<PyResult<Vec<_>>>()?;
    Err(raise(
        py,
        "SettingError",
        "Binding",
        Some(Item::Name(setting)),
        format!(
            "unknown {setting} {}: use one of {}",
            repr(value)?,
            known.join(", ")
        ),
    ))
}

//! Crate errors to Python exceptions: each variant to its class of `microbatch.errors`, with the offending item.

use microbatch::Error;
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// The class of `microbatch.errors` an error maps to, its variant name and
/// the offending item (an index, an id, a dimension or a name), if any.
fn classify(err: &Error) -> (&'static str, &'static str, Option<Item>) {
    use Item::{Id, Index, Name};
    match err {
        Error::NoDimensions => ("CapacityError", "NoDimensions", None),
        Error::ZeroCapacity { dim } => ("CapacityError", "ZeroCapacity", Some(Index(*dim))),
        Error::InvalidCapacity { dim, .. } => {
            ("CapacityError", "InvalidCapacity", Some(Index(*dim)))
        }
        Error::DimensionMismatch { index, .. } => {
            ("CapacityError", "DimensionMismatch", Some(Index(*index)))
        }
        Error::InvalidSize { index, .. } => {
            ("InvalidValueError", "InvalidSize", Some(Index(*index)))
        }
        Error::Oversize { items } => {
            let item = items.first().map(|o| match o.id {
                Some(id) => Id(id),
                None => Index(o.index),
            });
            ("OversizeError", "Oversize", item)
        }
        Error::InvalidCoefficient { name, .. } => {
            ("InvalidValueError", "InvalidCoefficient", Some(Name(name)))
        }
        Error::TooFewRows { .. } => ("FitError", "TooFewRows", None),
        Error::RowLength { row, .. } => ("FitError", "RowLength", Some(Index(*row))),
        Error::InvalidMeasurement { row, .. } => {
            ("FitError", "InvalidMeasurement", Some(Index(*row)))
        }
        Error::CoefficientRange { feature, .. } => {
            ("FitError", "CoefficientRange", Some(Index(*feature)))
        }
        Error::PredictionOverflow { row, .. } => {
            ("FitError", "PredictionOverflow", Some(Index(*row)))
        }
        Error::RankDeficient { feature } => ("FitError", "RankDeficient", Some(Index(*feature))),
        Error::SizeOverflow { dim } => ("LimitError", "SizeOverflow", dim.map(Index)),
        Error::UnequalCounts { part, .. } => ("SettingError", "UnequalCounts", Some(Index(*part))),
        Error::ZeroParts => ("SettingError", "ZeroParts", None),
        Error::TooManyParts { .. } => ("SettingError", "TooManyParts", None),
        Error::CapExceeded { dim, .. } => ("InfeasibleError", "CapExceeded", Some(Index(*dim))),
        Error::NotAPartition { index, .. } => {
            ("SettingError", "NotAPartition", Some(Index(*index)))
        }
        Error::InvalidSetting { name, .. } => ("SettingError", "InvalidSetting", Some(Name(name))),
        Error::TooFewSamples { .. } => ("SettingError", "TooFewSamples", None),
        Error::DuplicateId { id } => ("DuplicateIdError", "DuplicateId", Some(Id(*id))),
        Error::MicroStepsInfeasible { .. } => ("InfeasibleError", "MicroStepsInfeasible", None),
        Error::InvalidCost { id, .. } => ("InvalidValueError", "InvalidCost", Some(Id(*id))),
        Error::InvalidFloor { id, .. } => ("InvalidValueError", "InvalidFloor", Some(Id(*id))),
        Error::CostOverflow { .. } => ("LimitError", "CostOverflow", None),
        Error::LossTokens { id, .. } => ("InvalidValueError", "LossTokens", Some(Id(*id))),
        Error::PlanMismatch { id, .. } => ("SettingError", "PlanMismatch", id.map(Id)),
        Error::UnknownName { .. } => ("SettingError", "UnknownName", None),
        // `Error` is non-exhaustive: a variant added later still reaches
        // Python as an input error with its message.
        _ => ("InputError", "Other", None),
    }
}

/// The offending item of an error.
enum Item {
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
    let raise = || -> PyResult<PyErr> {
        let module = py.import("microbatch.errors")?;
        let kwargs = PyDict::new(py);
        kwargs.set_item("kind", kind)?;
        match item {
            Some(Item::Index(i)) => kwargs.set_item("item", i)?,
            Some(Item::Id(id)) => kwargs.set_item("item", id)?,
            Some(Item::Name(name)) => kwargs.set_item("item", name)?,
            None => kwargs.set_item("item", py.None())?,
        }
        let exc = module
            .getattr(class)?
            .call((err.to_string(),), Some(&kwargs))?;
        Ok(PyErr::from_value(exc))
    };
    raise().unwrap_or_else(|e| e)
}

/// Converts a crate result, mapping its error with [`to_py`].
pub(crate) fn check<T>(py: Python<'_>, result: Result<T, Error>) -> PyResult<T> {
    result.map_err(|e| to_py(py, &e))
}

/// An input error raised from the binding itself (a shape or length the
/// crate never sees), as `microbatch.errors.<class>`.
pub(crate) fn input_error(py: Python<'_>, class: &str, message: String) -> PyErr {
    let raise = || -> PyResult<PyErr> {
        let module = py.import("microbatch.errors")?;
        let kwargs = PyDict::new(py);
        kwargs.set_item("kind", "Binding")?;
        kwargs.set_item("item", py.None())?;
        Ok(PyErr::from_value(
            module.getattr(class)?.call((message,), Some(&kwargs))?,
        ))
    };
    raise().unwrap_or_else(|e| e)
}

//! The native half of the `microbatch` Python package: thin PyO3 wrappers over the crate.
//!
//! The Python modules of `python/microbatch/` check what the crate never
//! sees (Python types, dtypes and shapes) and convert their arguments (numpy
//! arrays of the documented dtypes, C-contiguous); the values, the names of
//! settings and the results' derived figures (ratios, efficiencies) are the
//! crate's, read here. The functions here borrow the arrays, release the GIL
//! for the work, and return numpy arrays. Every crate error becomes the
//! exception of `microbatch.errors` that its variant maps to (`error.rs`);
//! nothing here panics on any input, and a panic that escaped anyway would
//! surface as `microbatch.InternalError`, never as PyO3's `PanicException`.

use pyo3::prelude::*;

mod calibrator;
mod cost;
mod error;
mod pack;
mod partition;
mod plan;
mod scenario;

/// The module `microbatch._native`.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    calibrator::register(m)?;
    cost::register(m)?;
    pack::register(m)?;
    partition::register(m)?;
    plan::register(m)?;
    scenario::register(m)?;
    Ok(())
}

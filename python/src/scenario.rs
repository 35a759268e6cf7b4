//! `microbatch.scenario`: the crate's seeded batch generators, as numpy arrays.

use microbatch::scenario::Scenario;
use numpy::IntoPyArray;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::error::{check, input_error};

/// The most samples one call generates: 2^24 (about 1.7 GB of arrays); a
/// larger request is almost surely a typo, and memory follows it.
const MAX_SAMPLES: usize = 1 << 24;

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(scenario, m)?)?;
    m.add(
        "SCENARIO_NAMES",
        microbatch::scenario::SCENARIO_NAMES.to_vec(),
    )?;
    Ok(())
}

/// One step's samples drawn from a scenario, as a dict of arrays and the
/// scenario's planner settings (see `microbatch.scenario.generate`).
#[pyfunction]
fn scenario<'py>(
    py: Python<'py>,
    name: &str,
    samples: usize,
    seed: u64,
) -> PyResult<Bound<'py, PyDict>> {
    let s: Scenario = check(py, name.parse())?;
    if samples > MAX_SAMPLES {
        return Err(input_error(
            py,
            "LimitError",
            format!("{samples} samples asked for; one call generates at most {MAX_SAMPLES} (2^24)"),
        ));
    }
    let batch = py.detach(|| s.generate(samples, seed));
    let n = batch.len();
    let images: usize = batch.iter().map(|b| b.sample().images().len()).sum();
    let (mut ids, mut text, mut loss) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    let (mut tokens, mut units) = (Vec::with_capacity(images), Vec::with_capacity(images));
    let mut offsets = Vec::with_capacity(n + 1);
    offsets.push(0u64);
    for b in &batch {
        ids.push(b.id());
        text.push(b.sample().text());
        loss.push(b.loss_tokens());
        for image in b.sample().images() {
            tokens.push(image.tokens());
            units.push(image.units());
        }
        offsets.push(tokens.len() as u64);
    }
    let d = PyDict::new(py);
    d.set_item("ids", ids.into_pyarray(py))?;
    d.set_item("text_tokens", text.into_pyarray(py))?;
    d.set_item("image_tokens", tokens.into_pyarray(py))?;
    d.set_item("image_units", units.into_pyarray(py))?;
    d.set_item("image_offsets", offsets.into_pyarray(py))?;
    d.set_item("loss_tokens", loss.into_pyarray(py))?;
    d.set_item("model", s.preset().name())?;
    d.set_item("seq_len", s.seq_len())?;
    d.set_item("max_units", s.max_units())?;
    Ok(d)
}

//! The `balance` example's `--timings` reader: JSON Lines, one measured micro-batch a line, every error naming its line.
//!
//! Kept free of the example's globals like `input.rs` (whose error type and
//! JSON message helper it shares), so that tests and a fuzz target can
//! include both with `#[path = "../examples/balance/…"] mod …;`.
//!
//! A line is one JSON object: the micro-batch's samples and its measured
//! time, per phase or in total,
//!
//! ```text
//! {"samples": [{"text_tokens": 312, "image_tokens": [576, 576]}, {"text_tokens": 90}], "vision_seconds": 0.021, "language_seconds": 0.064}
//! {"samples": [{"text_tokens": 4000}], "seconds": 0.071}
//! ```
//!
//! `samples` is required (a list, possibly empty; each sample `text_tokens`
//! and optionally `image_tokens`, one entry a single-unit image, `null` the
//! same as absent); the time is either both `vision_seconds` and
//! `language_seconds` or `seconds` alone, each a finite number of at least
//! 0. Blank lines are skipped. An unknown or repeated field, a value of the
//! wrong type or range, both forms of the time on one line or neither, and
//! one phase without the other are errors naming the line (1-based, as an
//! editor counts them). Memory and time are proportional to the text.
//!
//! [`calibrate`] fits a preset's terms to the rows ([`Calibrator`]), and
//! [`fit_json`] and [`fit_summary`] show the result, the rejected rows by
//! their lines.

use microbatch::cost::{Calibration, Calibrator, Image, Linear, Phases, Preset, Sample, Timing};
use serde_json::{json, Value};

use super::input::{at, objects, InputError};

/// One line as read (`deny_unknown_fields`; a repeated key is refused by
/// the derived visitor).
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    samples: Vec<SampleLine>,
    #[serde(default)]
    vision_seconds: Option<f64>,
    #[serde(default)]
    language_seconds: Option<f64>,
    #[serde(default)]
    seconds: Option<f64>,
}

/// One sample of a line's micro-batch.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct SampleLine {
    text_tokens: u32,
    #[serde(default, deserialize_with = "super::input::image_tokens")]
    image_tokens: Option<Vec<u32>>,
}

/// What a line holds, for the messages.
const FIELDS: &str = "`samples` and either `vision_seconds` and `language_seconds`, or `seconds`";

/// A micro-batch's measured time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Measured {
    /// The vision and language phases timed separately, in seconds.
    Phases(Phases),
    /// The whole micro-batch, in seconds.
    Total(f64),
}

/// One measured micro-batch.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// Its line, counted from 1 as an editor does (blank lines included).
    pub line: usize,
    /// The micro-batch's samples, in the order of the line.
    pub samples: Vec<Sample>,
    /// Its measured time.
    pub time: Measured,
}

/// A time field's value, checked: finite and at least 0 (`-0.0` read as
/// `0.0`). NaN and infinity cannot come from JSON (serde_json refuses
/// numbers out of `f64`'s range); `!(x >= 0)` refuses NaN all the same.
fn seconds(name: &str, x: f64) -> Result<f64, String> {
    if !(x >= 0.0 && x.is_finite()) {
        return Err(format!(
            "`{name}` is {x}: a measured time is a finite number of seconds, at least 0"
        ));
    }
    Ok(x + 0.0)
}

/// Reads the JSON Lines `text`: one measured micro-batch a non-blank line.
///
/// # Errors
///
/// The first bad line, by its 1-based number: not JSON, not an object, an
/// unknown or repeated field (of the line or of a sample), a missing
/// `samples` or `text_tokens`, a value of the wrong type or out of range
/// (tokens at most 2^32 - 1, times finite and at least 0), both
/// `seconds` and a phase's seconds, one phase's seconds without the other's,
/// or no time at all.
///
/// # Complexity
///
/// O(b) time and extra space for b bytes of text.
pub fn read(text: &str) -> Result<Vec<Row>, InputError> {
    let mut rows = Vec::new();
    let more = "; a sample, `text_tokens` and `image_tokens`";
    for object in objects::<Line>(text, FIELDS, more, "an object") {
        let (line, parsed) = object?;
        let bad = |message: String| at(line, message);
        let time = match (
            parsed.vision_seconds,
            parsed.language_seconds,
            parsed.seconds,
        ) {
            (Some(v), Some(l), None) => Measured::Phases(Phases::new(
                seconds("vision_seconds", v).map_err(bad)?,
                seconds("language_seconds", l).map_err(bad)?,
            )),
            (None, None, Some(s)) => Measured::Total(seconds("seconds", s).map_err(bad)?),
            (None, None, None) => {
                return Err(bad(
                    "no measured time: give `vision_seconds` and `language_seconds` (the \
                     phases timed separately), or `seconds` (the whole micro-batch)"
                        .to_string(),
                ))
            }
            (v, _, None) => {
                let (has, lacks) = if v.is_some() {
                    ("vision_seconds", "language_seconds")
                } else {
                    ("language_seconds", "vision_seconds")
                };
                return Err(bad(format!(
                    "`{has}` without `{lacks}`: give both phases, or `seconds` alone for the \
                     whole micro-batch"
                )));
            }
            (_, _, Some(_)) => {
                return Err(bad(
                    "both `seconds` and a phase's seconds: give either `vision_seconds` and \
                     `language_seconds`, or `seconds`, not both"
                        .to_string(),
                ))
            }
        };
        let samples = parsed
            .samples
            .into_iter()
            .map(|s| {
                let images = s
                    .image_tokens
                    .unwrap_or_default()
                    .into_iter()
                    .map(Image::new);
                Sample::new(s.text_tokens, images)
            })
            .collect();
        rows.push(Row {
            line,
            samples,
            time,
        });
    }
    Ok(rows)
}

/// The preset's terms ([`Linear::preset`]) calibrated on `rows`, all of
/// them (the window holds the file), and refitted once.
///
/// # Errors
///
/// The calibrator's refusal of a row (a time it does not accept), naming
/// the row's line; the reader's checks make it unreachable today.
///
/// # Complexity
///
/// One [`Calibrator::observe`] per row and one [`Calibrator::refit`]: linear
/// in the rows and their samples.
pub fn calibrate(preset: Preset, rows: &[Row]) -> Result<Calibration, InputError> {
    let mut calibrator = Calibrator::new(Linear::preset(preset)).window(rows.len().max(1));
    for row in rows {
        let time = match row.time {
            Measured::Phases(p) => Timing::Phases(p),
            Measured::Total(t) => Timing::Total(t),
        };
        calibrator
            .observe(&row.samples, time)
            .map_err(|e| at(row.line, e.to_string()))?;
    }
    Ok(calibrator.refit().clone())
}

/// The lines of the rows the calibration rejected as outliers (`rows` the
/// window it was fitted on, oldest first), ascending.
fn rejected_lines(c: &Calibration, rows: &[Row]) -> Vec<usize> {
    c.rejected()
        .iter()
        .filter_map(|&i| rows.get(i).map(|r| r.line))
        .collect()
}

/// The terms of a fitted model that the fit did not identify (coefficient
/// 0); none for the fallback.
fn not_identified(c: &Calibration) -> Vec<String> {
    if !c.fitted() {
        return Vec::new();
    }
    c.model()
        .terms()
        .iter()
        .filter(|&&t| !c.identified(t))
        .map(|t| t.to_string())
        .collect()
}

/// The `"fit"` object of `--json`: `fitted`, `reason` (why the preset is
/// used, `null` when fitted), `coefficients` (term name -> coefficient),
/// `not_identified` (term names), `r_squared` and `max_relative_error`
/// (`null` unfitted), `rows` (kept), `rejected` and `rejected_lines` (the
/// outliers, by line).
pub fn fit_json(c: &Calibration, rows: &[Row]) -> Value {
    let model = c.model();
    let mut coefficients = serde_json::Map::new();
    for (term, value) in model.terms().iter().zip(model.coefficients()) {
        coefficients.insert(term.to_string(), json!(value));
    }
    let lines = rejected_lines(c, rows);
    json!({
        "fitted": c.fitted(),
        "reason": c.fallback().map(|f| f.to_string()),
        "coefficients": coefficients,
        "not_identified": not_identified(c),
        "r_squared": c.r_squared(),
        "max_relative_error": c.max_relative_error(),
        "rows": c.rows(),
        "rejected": lines.len(),
        "rejected_lines": lines,
    })
}

/// The fit for the chart: a few lines.
pub fn fit_summary(c: &Calibration, rows: &[Row]) -> Vec<String> {
    let (Some(r2), Some(worst), true) = (c.r_squared(), c.max_relative_error(), c.fitted()) else {
        let why = c.fallback().map_or("no fit".to_string(), |f| f.to_string());
        return vec![format!(
            "not calibrated, planned on the preset's FLOPs: {why}"
        )];
    };
    let lines = rejected_lines(c, rows);
    let which = if lines.is_empty() {
        String::new()
    } else {
        let shown: Vec<String> = lines.iter().take(8).map(|l| l.to_string()).collect();
        let more = if lines.len() > 8 { ", ..." } else { "" };
        format!(" (lines {}{more})", shown.join(", "))
    };
    let model = c.model();
    let terms: Vec<String> = model
        .terms()
        .iter()
        .zip(model.coefficients())
        .filter(|(&t, _)| c.identified(t))
        .map(|(t, v)| format!("{t} {v:.4e}"))
        .collect();
    let mut out = vec![
        format!(
            "fit on {} timed rows: R^2 {r2:.4}, worst relative error {:.1}%, {} rejected as \
             outliers{which}",
            c.rows(),
            100.0 * worst,
            lines.len()
        ),
        format!("  coefficients (s per unit): {}", terms.join(", ")),
    ];
    let missing = not_identified(c);
    if !missing.is_empty() {
        out.push(format!(
            "  not identified (coefficient 0): {}",
            missing.join(", ")
        ));
    }
    out
}

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

use microbatch::cost::{Image, Phases, Sample};

use super::input::{without_position, InputError};

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
    #[serde(default)]
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
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        if raw.trim().is_empty() {
            continue;
        }
        let bad = |message: String| InputError {
            line,
            column: None,
            message,
        };
        // A derived struct would also read a list by position.
        let start = raw.len() - raw.trim_start().len();
        if !raw[start..].starts_with('{') {
            return Err(InputError {
                line,
                column: Some(start + 1),
                message: format!("expected a JSON object with {FIELDS}"),
            });
        }
        let parsed: Line = serde_json::from_str(raw).map_err(|e| {
            let what = without_position(&e);
            let hint = if what.starts_with("unknown field") {
                String::new()
            } else if what.starts_with("duplicate field") {
                " (each field at most once an object)".to_string()
            } else if e.is_data() {
                format!(
                    " (a line is an object with {FIELDS}; a sample, `text_tokens` and \
                     `image_tokens`)"
                )
            } else {
                String::new()
            };
            InputError {
                line,
                column: Some(e.column()),
                message: format!("{what}{hint}"),
            }
        })?;
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

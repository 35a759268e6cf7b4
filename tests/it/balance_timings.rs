//! The `balance` example's `--timings` reader (examples/balance/timings.rs):
//! one measured micro-batch a line, the time per phase or in total (exactly
//! one form), every error naming its real line; and the calibration of a
//! preset's terms on the rows, with its `"fit"` object and summary.
#![cfg(feature = "scenarios")]

use crate::examples::input::InputError;
use crate::examples::timings::{calibrate, fit_json, fit_summary, read, Measured, Row};
use microbatch::cost::{CostModel, Image, Linear, Phases, Preset, Sample, Term};
use proptest::prelude::*;

fn err(text: &str) -> InputError {
    read(text).unwrap_err()
}

#[test]
fn both_forms_read() {
    let rows = read(
        "{\"samples\": [{\"text_tokens\": 312, \"image_tokens\": [576, 4]}, {\"text_tokens\": 90}], \
         \"vision_seconds\": 0.021, \"language_seconds\": 0.064}\n\
         \r\n\
         {\"seconds\": 1, \"samples\": [{\"text_tokens\": 4000, \"image_tokens\": null}]}\r\n\
         {\"samples\": [], \"seconds\": -0.0}\n",
    )
    .unwrap();
    assert_eq!(
        rows,
        vec![
            Row {
                line: 1,
                samples: vec![
                    Sample::new(312, [Image::new(576), Image::new(4)]),
                    Sample::text_only(90)
                ],
                time: Measured::Phases(Phases::new(0.021, 0.064)),
            },
            Row {
                line: 3,
                samples: vec![Sample::text_only(4000)],
                time: Measured::Total(1.0),
            },
            Row {
                line: 4,
                samples: vec![],
                time: Measured::Total(0.0),
            },
        ]
    );
    assert!(matches!(rows[2].time, Measured::Total(t) if t.is_sign_positive()));
    assert!(read("").unwrap().is_empty());
}

#[test]
fn the_time_is_one_form_exactly() {
    let s = "\"samples\": [{\"text_tokens\": 1}]";
    for (time, message) in [
        (
            "",
            "no measured time: give `vision_seconds` and `language_seconds` (the phases timed \
             separately), or `seconds` (the whole micro-batch)",
        ),
        (
            ", \"vision_seconds\": 1",
            "`vision_seconds` without `language_seconds`: give both phases, or `seconds` alone \
             for the whole micro-batch",
        ),
        (
            ", \"language_seconds\": 1",
            "`language_seconds` without `vision_seconds`: give both phases, or `seconds` alone \
             for the whole micro-batch",
        ),
        (
            ", \"vision_seconds\": 1, \"language_seconds\": 1, \"seconds\": 2",
            "both `seconds` and a phase's seconds: give either `vision_seconds` and \
             `language_seconds`, or `seconds`, not both",
        ),
        (
            ", \"language_seconds\": 1, \"seconds\": 2",
            "both `seconds` and a phase's seconds: give either `vision_seconds` and \
             `language_seconds`, or `seconds`, not both",
        ),
        (
            ", \"seconds\": -1",
            "`seconds` is -1: a measured time is a finite number of seconds, at least 0",
        ),
        (
            ", \"vision_seconds\": 0, \"language_seconds\": -2.5",
            "`language_seconds` is -2.5: a measured time is a finite number of seconds, at least 0",
        ),
    ] {
        let good = format!("{{{s}, \"seconds\": 1}}");
        let e = err(&format!("{good}\n\n{{{s}{time}}}\n"));
        assert_eq!((e.line, e.column, e.message.as_str()), (3, None, message));
    }
}

#[test]
fn wrong_fields_types_and_ranges_are_refused() {
    for (line, starts) in [
        ("{\"seconds\": 1}", "missing field `samples`"),
        (
            "{\"samples\": [{}], \"seconds\": 1}",
            "missing field `text_tokens`",
        ),
        (
            "{\"samples\": [{\"text_tokens\": 1, \"id\": 3}], \"seconds\": 1}",
            "unknown field `id`, expected `text_tokens` or `image_tokens`",
        ),
        (
            "{\"samples\": [], \"seconds\": 1, \"rank\": 0}",
            "unknown field `rank`, expected one of `samples`, `vision_seconds`, \
             `language_seconds`, `seconds`",
        ),
        (
            "{\"samples\": [], \"seconds\": 1, \"seconds\": 1}",
            "duplicate field `seconds` (each field at most once an object)",
        ),
        (
            "{\"samples\": [{\"text_tokens\": 4294967296}], \"seconds\": 1}",
            "invalid value: integer `4294967296`, expected u32",
        ),
        (
            "{\"samples\": [{\"text_tokens\": 1, \"image_tokens\": [-1]}], \"seconds\": 1}",
            "invalid value: integer `-1`, expected u32",
        ),
        (
            "{\"samples\": {\"text_tokens\": 1}, \"seconds\": 1}",
            "invalid type: map, expected a sequence",
        ),
        (
            "{\"samples\": [], \"seconds\": \"1\"}",
            "invalid type: string \"1\", expected f64",
        ),
        (
            "{\"samples\": [], \"seconds\": 1e400}",
            "number out of range",
        ),
        ("{\"samples\": [], \"seconds\": NaN}", "expected value"),
        ("[[], 1]", "expected a JSON object with `samples`"),
        (
            "{\"samples\": [], \"seconds\": 1} {}",
            "trailing characters",
        ),
    ] {
        let e = err(line);
        assert_eq!(e.line, 1);
        assert!(e.message.starts_with(starts), "{line}: {e}");
    }
    let e = err(
        "{\"samples\": [], \"seconds\": 1}\n{\"samples\": [{\"text_tokens\": }], \"seconds\": 1}",
    );
    assert_eq!(e.to_string(), "line 2, column 30: expected value");
}

/// Rows timed from a known truth over the llava preset's terms (per phase
/// on odd rows, in total on even ones), with a blank line between rows and
/// row `slow` (if any) slowed 2x.
fn timed_rows(n: usize, slow: Option<usize>) -> Vec<Row> {
    let truth = Linear::new([
        (
            Term::Tiles {
                tokens_per_tile: 576.try_into().unwrap(),
            },
            4e-3,
        ),
        (Term::Tokens, 3e-5),
        (Term::DocumentAttention, 2e-10),
        (Term::Images, 1e-3),
        (Term::Samples, 5e-4),
    ])
    .unwrap();
    let mut text = String::new();
    for i in 0..n {
        let samples: Vec<Sample> = (0..1 + i % 5)
            .map(|j| {
                let t = 100 + 37 * ((i * 7 + j * 13) % 50) as u32;
                if (i + j) % 3 == 0 {
                    Sample::text_only(t)
                } else {
                    Sample::new(t, [Image::new(576)])
                }
            })
            .collect();
        let refs: Vec<&Sample> = samples.iter().collect();
        let mut cost = truth.cost(&refs);
        if Some(i) == slow {
            cost = cost * 2.0;
        }
        let json: Vec<String> = samples
            .iter()
            .map(|s| {
                let images: Vec<u32> = s.images().iter().map(|im| im.tokens()).collect();
                format!(
                    "{{\"text_tokens\": {}, \"image_tokens\": {images:?}}}",
                    s.text()
                )
            })
            .collect();
        let time = if i % 2 == 1 {
            format!(
                "\"vision_seconds\": {:?}, \"language_seconds\": {:?}",
                cost.vision, cost.language
            )
        } else {
            format!("\"seconds\": {:?}", cost.total())
        };
        text.push_str(&format!(
            "{{\"samples\": [{}], {time}}}\n\n",
            json.join(", ")
        ));
    }
    read(&text).unwrap()
}

/// The rows of a known truth calibrate the preset's terms: fitted, the
/// slowed row rejected by its line, every term in the `"fit"` object.
#[test]
fn calibration_fits_and_names_the_outlier_by_line() {
    let rows = timed_rows(60, Some(17));
    assert_eq!(rows[17].line, 35); // a blank line after each row
    let c = calibrate(Preset::Llava15_7b, &rows).unwrap();
    assert!(c.fitted());
    let fit = fit_json(&c, &rows);
    assert_eq!(fit["fitted"], true);
    assert_eq!(fit["reason"], serde_json::Value::Null);
    assert_eq!(fit["rejected_lines"], serde_json::json!([35]));
    assert_eq!(
        (fit["rejected"].as_u64(), fit["rows"].as_u64()),
        (Some(1), Some(59))
    );
    assert!(fit["max_relative_error"].as_f64().unwrap() < 1e-6, "{fit}");
    assert!(fit["r_squared"].as_f64().unwrap() > 1.0 - 1e-9, "{fit}");
    let coefficients = fit["coefficients"].as_object().unwrap();
    let names: Vec<String> = Linear::preset(Preset::Llava15_7b)
        .terms()
        .iter()
        .map(|t| t.to_string())
        .collect();
    assert_eq!(coefficients.len(), names.len());
    assert!(names.iter().all(|n| coefficients.contains_key(n)), "{fit}");
    let tokens = coefficients["language.tokens"].as_f64().unwrap();
    assert!((tokens / 3e-5 - 1.0).abs() < 1e-6, "{fit}");
    // Every image is one tile: images and units tell nothing new.
    assert!(fit["not_identified"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t == "vision.images"));
    let summary = fit_summary(&c, &rows).join("\n");
    assert!(
        summary.starts_with("fit on 59 timed rows: R^2 1.0000, worst relative error 0.0%, 1 rejected as outliers (lines 35)"),
        "{summary}"
    );
    assert!(summary.contains("language.tokens 3.0000e-5"), "{summary}");
}

/// Too few rows: the preset is used, and the `"fit"` object says why.
#[test]
fn too_few_rows_fall_back_and_say_why() {
    let rows = timed_rows(3, None);
    let c = calibrate(Preset::Llava15_7b, &rows).unwrap();
    assert!(!c.fitted());
    let fit = fit_json(&c, &rows);
    assert_eq!(fit["fitted"], false);
    let reason = fit["reason"].as_str().unwrap();
    assert!(reason.starts_with("too few rows"), "{reason}");
    assert_eq!(fit["r_squared"], serde_json::Value::Null);
    assert_eq!(fit["rejected_lines"], serde_json::json!([]));
    assert_eq!(
        fit_summary(&c, &rows),
        vec![format!(
            "not calibrated, planned on the preset's FLOPs: {reason}"
        )]
    );
    // No rows at all.
    let c = calibrate(Preset::Qwen25Vl7b, &[]).unwrap();
    assert!(!c.fitted() && fit_json(&c, &[])["rows"] == 0);
}

/// A text of good rows, blank lines and at most one bad row.
#[derive(Clone, Debug)]
struct Doc {
    lines: Vec<String>,
    rows: usize,
    bad: Option<usize>,
}

fn doc() -> impl Strategy<Value = Doc> {
    (
        prop::collection::vec(
            (0u32..5000, prop::collection::vec(0u32..2000, 0..3), any::<bool>(), 0usize..3),
            1..25,
        ),
        prop::option::of(any::<prop::sample::Index>()),
        0usize..6,
    )
        .prop_map(|(rows, bad, kind)| {
            let mut lines = Vec::new();
            let mut at = Vec::new();
            for (text, images, phases, blanks) in &rows {
                for _ in 0..*blanks {
                    lines.push(String::new());
                }
                let time = if *phases {
                    "\"vision_seconds\": 0.5, \"language_seconds\": 1.25"
                } else {
                    "\"seconds\": 2"
                };
                at.push(lines.len());
                lines.push(format!(
                    "{{\"samples\": [{{\"text_tokens\": {text}, \"image_tokens\": {images:?}}}], {time}}}"
                ));
            }
            let bad = bad.and_then(|i| {
                let k = at[i.index(at.len())];
                let before = lines[k].clone();
                lines[k] = match kind {
                    0 => lines[k].replace("\"seconds\": 2", "\"seconds\": -2"),
                    1 => lines[k].replace(", \"language_seconds\": 1.25", ""),
                    2 => format!("{}, \"seconds\": 1}}", &lines[k][..lines[k].len() - 1]),
                    3 => lines[k].replace("text_tokens", "tokens"),
                    4 => lines[k].replace("]}]", "]}"),
                    _ => lines[k].replace("\"samples\"", "\"sample\""),
                };
                // `-2` breaks only a total, the missing phase only a per-phase row.
                (lines[k] != before).then_some(k)
            });
            Doc {
                lines,
                rows: rows.len(),
                bad,
            }
        })
}

proptest! {
    /// A text without a bad line reads every row at its line; with one, the
    /// error names that line.
    #[test]
    fn errors_name_the_line_an_editor_shows(d in doc()) {
        let text = d.lines.join("\n");
        match (read(&text), d.bad) {
            (Ok(rows), None) => {
                prop_assert_eq!(rows.len(), d.rows);
                let filled: Vec<usize> = d.lines.iter().enumerate()
                    .filter(|(_, l)| !l.is_empty()).map(|(k, _)| k + 1).collect();
                let got: Vec<usize> = rows.iter().map(|r| r.line).collect();
                prop_assert_eq!(got, filled);
            }
            (Ok(_), Some(k)) => prop_assert!(false, "line {} should be refused", k + 1),
            (Err(e), Some(k)) => prop_assert_eq!(e.line, k + 1, "{}", e),
            (Err(e), None) => prop_assert!(false, "{}", e),
        }
    }
}

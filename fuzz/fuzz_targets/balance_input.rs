//! Fuzz target `balance_input`: the `balance` example's JSON Lines readers
//! (examples/balance/input.rs and timings.rs) on arbitrary text. Either every
//! non-blank line becomes exactly one sample, equal to what the line says,
//! with unique ids mapped back to their lines, or the error names a line of
//! the text (the first bad one); never a panic (see fuzz/README.md). The
//! optional `origin`, `group`, `bytes` and `cost` are read exactly (`bytes`
//! absent: derived from the image tokens), and `cost` is on every line or
//! on none. The `--timings` reader, on the same text: one row a non-blank
//! line, at its line, with a finite non-negative time, or an error naming
//! the first bad line.
#![no_main]

#[allow(dead_code)]
#[path = "../../examples/balance/input.rs"]
mod input;
#[allow(dead_code)]
#[path = "../../examples/balance/timings.rs"]
mod timings;

use libfuzzer_sys::fuzz_target;
use microbatch::plan::BYTES_PER_IMAGE_TOKEN;
use microbatch::Error;
use microbatch_fuzz::check;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    if data.len() > 1 << 16 {
        return;
    }
    let text = String::from_utf8_lossy(data);
    let lines: Vec<&str> = text.lines().collect();
    check_timings(&text, &lines);
    match input::read(&text) {
        Ok(parsed) => {
            let filled: Vec<(usize, &str)> = lines
                .iter()
                .enumerate()
                .filter(|(_, l)| !l.trim().is_empty())
                .map(|(i, l)| (i + 1, *l))
                .collect();
            check!(
                "input_count",
                parsed.samples.len() == filled.len(),
                "{} samples for {} non-blank lines",
                parsed.samples.len(),
                filled.len()
            );
            let mut ids = std::collections::BTreeSet::new();
            for (s, (line, raw)) in parsed.samples.iter().zip(&filled) {
                check!(
                    "input_unique",
                    ids.insert(s.id()),
                    "id {} read twice",
                    s.id()
                );
                check!(
                    "input_line_of",
                    parsed.line_of(s.id()) == Some(*line),
                    "line_of({}) = {:?}, read on line {line}",
                    s.id(),
                    parsed.line_of(s.id())
                );
                // The sample is what its line says, read independently.
                let v: Result<Value, _> = serde_json::from_str(raw);
                let ok = v.as_ref().is_ok_and(|v| same(v, s));
                check!("input_exact", ok, "line {line} {raw:?} read as {s:?}");
            }
            let with_cost = parsed
                .samples
                .iter()
                .filter(|s| s.sample().given_cost() != microbatch::cost::Phases::ZERO)
                .count();
            check!(
                "input_cost_all_or_none",
                parsed.costs || with_cost == 0,
                "{with_cost} samples with a cost, and the input says it has none"
            );
            if let Some(first) = parsed.samples.first() {
                // Messages about these samples answer without panicking.
                let _ = parsed.explain(&Error::DuplicateId { id: first.id() });
                let _ = parsed.explain(&Error::DuplicateId { id: u64::MAX });
            }
        }
        Err(e) => {
            check!(
                "input_error_line",
                (1..=lines.len()).contains(&e.line),
                "error on line {} of {} lines: {e}",
                e.line,
                lines.len()
            );
            if let Some(raw) = lines.get(e.line.wrapping_sub(1)) {
                check!(
                    "input_error_line",
                    !raw.trim().is_empty(),
                    "error on blank line {}: {e}",
                    e.line
                );
                if let Some(c) = e.column {
                    check!(
                        "input_error_column",
                        c >= 1 && c <= raw.len() + 1,
                        "column {c} on a line of {} bytes: {e}",
                        raw.len()
                    );
                }
                // The first bad line: everything before it reads.
                let before = lines[..e.line - 1].join("\n");
                let r = input::read(&before);
                check!(
                    "input_first_bad",
                    r.is_ok(),
                    "line {} is named, but an earlier one fails: {:?}",
                    e.line,
                    r.err()
                );
                // A bad line alone is bad too, unless its fault is an id
                // used before or a `cost` where the first line had none (or
                // none where it had one).
                if !e.message.contains("already used") && !e.message.contains("or on none") {
                    check!(
                        "input_error_line",
                        input::read(raw).is_err(),
                        "line {} named ({e}) reads alone",
                        e.line
                    );
                }
            }
            check!(
                "input_message",
                !e.message.is_empty(),
                "an empty message on line {}",
                e.line
            );
        }
    }
});

/// Whether `s` is what the JSON object `v` says.
fn same(v: &Value, s: &microbatch::plan::StepSample) -> bool {
    let Some(o) = v.as_object() else { return false };
    let id = o.get("id").and_then(Value::as_u64);
    let text = o.get("text_tokens").and_then(Value::as_u64);
    let images: Option<Vec<u64>> = match o.get("image_tokens") {
        None | Some(Value::Null) => Some(Vec::new()),
        Some(Value::Array(a)) => a.iter().map(Value::as_u64).collect(),
        Some(_) => None,
    };
    let loss = match o.get("loss_tokens") {
        None | Some(Value::Null) => text,
        Some(l) => l.as_u64(),
    };
    // `origin`, `group` and `bytes`: absent or null is None (bytes then
    // derived from the image tokens), else the number itself.
    let opt = |k: &str| match o.get(k) {
        None | Some(Value::Null) => Some(None),
        Some(x) => x.as_u64().map(Some),
    };
    let (Some(origin), Some(group), Some(bytes)) = (opt("origin"), opt("group"), opt("bytes"))
    else {
        return false;
    };
    // `cost`: absent or null is zero, else both phases exactly.
    let cost = match o.get("cost") {
        None | Some(Value::Null) => Some((0.0, 0.0)),
        Some(c) => c
            .get("vision")
            .and_then(Value::as_f64)
            .zip(c.get("language").and_then(Value::as_f64)),
    };
    let given = s.sample().given_cost();
    let derived = images
        .as_ref()
        .map(|i| i.iter().sum::<u64>().saturating_mul(BYTES_PER_IMAGE_TOKEN));
    let got_images: Vec<u64> = s
        .sample()
        .images()
        .iter()
        .map(|i| u64::from(i.tokens()))
        .collect();
    id == Some(s.id())
        && text == Some(u64::from(s.sample().text()))
        && images.as_ref() == Some(&got_images)
        && s.sample().images().iter().all(|i| i.units() == 1)
        && loss == Some(s.loss_tokens())
        && origin == s.origin().map(|r| r as u64)
        && group == s.group()
        && bytes.or(derived) == Some(s.bytes())
        && cost == Some((given.vision, given.language))
}

/// The `--timings` reader on `text` (split into `lines`): a row for every
/// non-blank line, at that line, with a finite time of at least 0; or an
/// error naming the first bad, non-blank line.
fn check_timings(text: &str, lines: &[&str]) {
    match timings::read(text) {
        Ok(rows) => {
            let filled: Vec<usize> = lines
                .iter()
                .enumerate()
                .filter(|(_, l)| !l.trim().is_empty())
                .map(|(i, _)| i + 1)
                .collect();
            let got: Vec<usize> = rows.iter().map(|r| r.line).collect();
            check!(
                "timings_rows",
                got == filled,
                "rows at lines {got:?}, non-blank lines {filled:?}"
            );
            for r in &rows {
                let ok = match r.time {
                    timings::Measured::Phases(p) => {
                        p.vision >= 0.0
                            && p.vision.is_finite()
                            && p.language >= 0.0
                            && p.language.is_finite()
                    }
                    timings::Measured::Total(t) => t >= 0.0 && t.is_finite(),
                };
                check!("timings_time", ok, "line {}: time {:?}", r.line, r.time);
            }
        }
        Err(e) => {
            let named = lines.get(e.line.wrapping_sub(1));
            check!(
                "timings_error_line",
                named.is_some_and(|l| !l.trim().is_empty()),
                "error on line {} of {} lines (blank or absent): {e}",
                e.line,
                lines.len()
            );
            if let Some(raw) = named {
                let before = lines[..e.line - 1].join("\n");
                check!(
                    "timings_first_bad",
                    timings::read(&before).is_ok() && timings::read(raw).is_err(),
                    "line {} is named ({e}), but an earlier one fails or it reads alone",
                    e.line
                );
            }
            check!("timings_message", !e.message.is_empty(), "an empty message");
        }
    }
}

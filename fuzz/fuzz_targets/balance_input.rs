//! Fuzz target `balance_input`: the `balance` example's JSON Lines reader
//! (examples/balance/input.rs) on arbitrary text. Either every non-blank
//! line becomes exactly one sample, equal to what the line says, with
//! unique ids mapped back to their lines, or the error names a line of the
//! text (the first bad one); never a panic (see fuzz/README.md). The
//! optional `origin`, `group` and `bytes` are read exactly (`bytes` absent:
//! derived from the image tokens).
#![no_main]

#[allow(dead_code)]
#[path = "../../examples/balance/input.rs"]
mod input;

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
                // A bad line alone is bad too, unless its fault is an id used before.
                if !e.message.contains("already used") {
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
}

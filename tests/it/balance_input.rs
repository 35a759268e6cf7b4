//! The `balance` example's JSON Lines reader (examples/balance/input.rs):
//! every error names its real line, repeated and unknown fields are refused,
//! a repeated id names both lines, a sample the planner refuses is mapped
//! back to its line, and the optional `cost` is on every line or on none.
#![cfg(feature = "scenarios")]

use crate::examples::input::{read, InputError};
use microbatch::cost::{Given, Phases, Tokens};
use microbatch::plan::Planner;
use microbatch::Locator;
use proptest::prelude::*;

fn err(text: &str) -> InputError {
    read(text).unwrap_err()
}

/// A JSON error on line 2 used to be reported as "line 1".
#[test]
fn a_json_error_names_its_real_line() {
    let e = err("{\"id\": 1, \"text_tokens\": 5}\n{\"id\": 2, \"text_tokens\": }\n");
    assert_eq!((e.line, e.column), (2, Some(26)));
    assert_eq!(e.to_string(), "line 2, column 26: expected value");
    // Blank lines count, and Windows line ends read alike.
    let e = err("\r\n{\"id\": 1, \"text_tokens\": 5}\r\n\r\n{\"id\": 2}\r\n");
    assert_eq!(e.line, 4);
    assert!(e.message.starts_with("missing field `text_tokens`"), "{e}");
}

/// Duplicate JSON keys used to be accepted (the last one won).
#[test]
fn a_repeated_field_is_refused() {
    let e = err("{\"id\": 1, \"text_tokens\": 5, \"id\": 3}");
    assert_eq!(e.line, 1);
    assert_eq!(
        e.message,
        "duplicate field `id` (each field at most once a line)"
    );
    let e = err("\n{\"id\": 1, \"text_tokens\": 5, \"text_tokens\": 5}");
    assert_eq!(e.line, 2);
    assert!(
        e.message.starts_with("duplicate field `text_tokens`"),
        "{e}"
    );
}

#[test]
fn an_unknown_field_is_refused() {
    let e = err("{\"id\": 1, \"text_tokens\": 5, \"colour\": 1}");
    assert_eq!(
        e.message,
        "unknown field `colour`, expected one of `id`, `text_tokens`, `image_tokens`, \
         `loss_tokens`, `origin`, `group`, `bytes`, `cost`"
    );
}

#[test]
fn wrong_types_and_ranges_are_refused() {
    for (line, starts) in [
        (
            "{\"id\": -1, \"text_tokens\": 5}",
            "invalid value: integer `-1`, expected u64",
        ),
        (
            "{\"id\": 1, \"text_tokens\": 4294967296}",
            "invalid value: integer `4294967296`, expected u32",
        ),
        (
            "{\"id\": 1, \"text_tokens\": 5, \"image_tokens\": 576}",
            "invalid type: integer `576`, expected a sequence",
        ),
        (
            "{\"id\": 1.5, \"text_tokens\": 5}",
            "invalid type: floating point `1.5`, expected u64",
        ),
        (
            "{\"id\": 1, \"text_tokens\": 5, \"origin\": -2}",
            "invalid value: integer `-2`, expected u64",
        ),
        (
            "{\"id\": 1, \"text_tokens\": 5, \"origin\": \"3\"}",
            "invalid type: string \"3\", expected u64",
        ),
        (
            "{\"id\": 1, \"text_tokens\": 5, \"group\": 1.5}",
            "invalid type: floating point `1.5`, expected u64",
        ),
        (
            "{\"id\": 1, \"text_tokens\": 5, \"group\": [1]}",
            "invalid type: sequence, expected u64",
        ),
        (
            "{\"id\": 1, \"text_tokens\": 5, \"bytes\": true}",
            "invalid type: boolean `true`, expected u64",
        ),
        (
            "{\"id\": 1, \"text_tokens\": 5, \"bytes\": 18446744073709551616}",
            "invalid type: floating point `1.8446744073709552e+19`, expected u64",
        ),
        ("[1, 2]", "expected a JSON object with `id`, `text_tokens`"),
        ("  7", "expected a JSON object"),
        ("{\"id\": 1, \"text_tokens\": 5} {}", "trailing characters"),
    ] {
        let e = err(line);
        assert!(e.message.starts_with(starts), "{line}: {e}");
    }
}

/// A repeated id used to be reported by id only; it names both lines now.
#[test]
fn a_repeated_id_names_both_lines() {
    let e = err("{\"id\": 1, \"text_tokens\": 5}\n\n{\"id\": 1, \"text_tokens\": 6}\n");
    assert_eq!(
        e.to_string(),
        "line 3: id 1 is already used on line 1; ids must be unique"
    );
}

/// An oversize sample is reported by the planner by id; `explain` names its
/// line.
#[test]
fn an_oversize_sample_is_named_by_line() {
    let text = "{\"id\": 1, \"text_tokens\": 5}\n{\"id\": 9, \"text_tokens\": 60000}\n";
    let input = read(text).unwrap();
    assert_eq!(
        (input.line_of(9), input.line_of(1), input.line_of(2)),
        (Some(2), Some(1), None)
    );
    let e = Planner::new(Tokens::new(1.0).unwrap())
        .ranks(1)
        .seq_len(16384)
        .plan(&input.samples)
        .unwrap_err();
    assert_eq!(
        input.explain(&e),
        "1 sample(s) fit no packed sequence: line 2 (id 9): 60000 tokens > 16384; raise the \
         limit or drop the sample(s)"
    );
    let dup = microbatch::Error::DuplicateId { id: 1 };
    assert_eq!(
        input.explain(&dup),
        "line 1 (id 1): the id is used twice; ids must be unique"
    );
}

/// Loss tokens above a sample's tokens are refused by the planner by id;
/// `explain` names the line.
#[test]
fn too_many_loss_tokens_are_named_by_line() {
    let text =
        "{\"id\": 1, \"text_tokens\": 5}\n\n{\"id\": 4, \"text_tokens\": 6, \"loss_tokens\": 7}\n";
    let input = read(text).unwrap();
    let e = Planner::new(Tokens::new(1.0).unwrap())
        .ranks(1)
        .seq_len(16384)
        .plan(&input.samples)
        .unwrap_err();
    assert_eq!(
        input.explain(&e),
        "line 3 (id 4): sample 4 has 7 loss tokens but only 6 tokens; count as loss tokens \
         exactly the positions that carry loss (at most the sample's tokens)"
    );
}

/// Zero-token samples and `null` optional fields read fine.
#[test]
fn optional_fields_and_empty_samples() {
    let input = read(
        "{\"id\": 3, \"text_tokens\": 0, \"image_tokens\": null, \"loss_tokens\": null}\n\
         {\"id\": 4, \"text_tokens\": 7, \"image_tokens\": [576, 0], \"loss_tokens\": 2}\n",
    )
    .unwrap();
    assert_eq!(input.samples.len(), 2);
    assert_eq!(input.samples[0].sample().tokens(), 0);
    assert_eq!(input.samples[0].loss_tokens(), 0);
    assert_eq!(input.samples[1].sample().tokens(), 583);
    assert_eq!(input.samples[1].loss_tokens(), 2);
    assert!(read("").unwrap().samples.is_empty());
}

/// `origin`, `group` and `bytes` read into the sample; absent or `null`,
/// they are absent (bytes then derived from the image tokens).
#[test]
fn origin_group_and_bytes_are_read() {
    let input = read(
        "{\"id\": 1, \"text_tokens\": 5, \"image_tokens\": [576], \"origin\": 3, \"group\": 12, \"bytes\": 999}\n\
         {\"id\": 2, \"text_tokens\": 5, \"image_tokens\": [576], \"origin\": null, \"group\": null, \"bytes\": null}\n\
         {\"id\": 3, \"text_tokens\": 5, \"bytes\": 0, \"group\": 18446744073709551615}\n",
    )
    .unwrap();
    let s = &input.samples;
    assert_eq!(
        (s[0].origin(), s[0].group(), s[0].bytes()),
        (Some(3), Some(12), 999)
    );
    assert_eq!(
        (s[1].origin(), s[1].group(), s[1].bytes()),
        (None, None, 576 * microbatch::plan::BYTES_PER_IMAGE_TOKEN)
    );
    assert_eq!(
        (s[2].origin(), s[2].group(), s[2].bytes()),
        (None, Some(u64::MAX), 0)
    );
    // Each at most once a line.
    let e = err("{\"id\": 1, \"text_tokens\": 5, \"origin\": 1, \"origin\": 1}");
    assert!(e.message.starts_with("duplicate field `origin`"), "{e}");
}

/// An origin past the ranks is the planner's to refuse, by id; `explain`
/// names the line. A group too large for one sequence names its lines.
#[test]
fn origins_and_groups_the_planner_refuses_are_named_by_line() {
    let text = "{\"id\": 1, \"text_tokens\": 5, \"origin\": 0}\n\n\
                {\"id\": 4, \"text_tokens\": 6, \"origin\": 2}\n";
    let input = read(text).unwrap();
    let e = Planner::new(Tokens::new(1.0).unwrap())
        .ranks(2)
        .seq_len(64)
        .plan(&input.samples)
        .unwrap_err();
    assert!(
        matches!(
            e,
            microbatch::Error::Invalid {
                at: Locator::Origin { id: 4, .. },
                ..
            }
        ),
        "{e:?}"
    );
    assert!(
        input
            .explain(&e)
            .starts_with("line 3 (id 4): sample id 4 has origin rank 2"),
        "{}",
        input.explain(&e)
    );
    let text = "{\"id\": 1, \"text_tokens\": 40, \"group\": 9}\n\
                {\"id\": 2, \"text_tokens\": 5}\n\
                {\"id\": 3, \"text_tokens\": 40, \"group\": 9}\n";
    let input = read(text).unwrap();
    let e = Planner::new(Tokens::new(1.0).unwrap())
        .ranks(1)
        .seq_len(64)
        .plan(&input.samples)
        .unwrap_err();
    assert!(
        matches!(e, microbatch::Error::GroupTooLarge { group: 9, .. }),
        "{e:?}"
    );
    assert!(
        input
            .explain(&e)
            .starts_with("lines 1, 3: group 9 (2 samples) has 80 tokens"),
        "{}",
        input.explain(&e)
    );
}

/// `cost` reads into the sample's given cost; the input says it has costs.
#[test]
fn costs_are_read() {
    let input = read(
        "{\"id\": 1, \"text_tokens\": 5, \"cost\": {\"vision\": 0.5, \"language\": 2}}\n\n\
         {\"id\": 2, \"text_tokens\": 7, \"cost\": {\"language\": 0, \"vision\": -0.0}}\n",
    )
    .unwrap();
    assert!(input.costs);
    let s = &input.samples;
    assert_eq!(s[0].sample().given_cost(), Phases::new(0.5, 2.0));
    assert_eq!(s[1].sample().given_cost(), Phases::ZERO);
    assert!(s[1].sample().given_cost().vision.is_sign_positive());
    // Without `cost` (or with `null`), no costs.
    let input = read("{\"id\": 1, \"text_tokens\": 5, \"cost\": null}").unwrap();
    assert!(!input.costs);
    assert!(!read("").unwrap().costs);
    // Planned on exactly these numbers.
    let input = read(
        "{\"id\": 1, \"text_tokens\": 5, \"cost\": {\"vision\": 1, \"language\": 3}}\n\
         {\"id\": 2, \"text_tokens\": 5, \"cost\": {\"vision\": 0, \"language\": 4}}\n\
         {\"id\": 3, \"text_tokens\": 5, \"cost\": {\"vision\": 2, \"language\": 2}}\n",
    )
    .unwrap();
    let plan = Planner::new(Given)
        .ranks(2)
        .seq_len(64)
        .sync(microbatch::plan::SyncModel::Step)
        .plan(&input.samples)
        .unwrap();
    assert_eq!(plan.report().predicted, 8.0); // two samples of 4 on one rank
}

/// A bad `cost`, and a `cost` on some lines only, name the line.
#[test]
fn bad_costs_are_named_by_line() {
    let ok = "{\"id\": 1, \"text_tokens\": 5, \"cost\": {\"vision\": 1, \"language\": 1}}";
    for (line, message) in [
        (
            "{\"id\": 2, \"text_tokens\": 5, \"cost\": {\"vision\": -1, \"language\": 1}}",
            "`cost.vision` is -1: a cost is a finite number of at least 0",
        ),
        (
            "{\"id\": 2, \"text_tokens\": 5, \"cost\": {\"vision\": 1, \"language\": -0.5}}",
            "`cost.language` is -0.5: a cost is a finite number of at least 0",
        ),
        (
            "{\"id\": 2, \"text_tokens\": 5}",
            "a `cost` is on every line or on none: line 1 has a `cost`, this line has none",
        ),
    ] {
        let e = err(&format!("{ok}\n{line}\n"));
        assert_eq!((e.line, e.message.as_str()), (2, message));
    }
    let e = err(&format!("{{\"id\": 0, \"text_tokens\": 1}}\n\n{ok}"));
    assert_eq!(
        (e.line, e.message.as_str()),
        (
            3,
            "a `cost` is on every line or on none: line 1 has no `cost`, this line has one"
        )
    );
    for (line, starts) in [
        (
            "{\"id\": 2, \"text_tokens\": 5, \"cost\": {\"vision\": 1}}",
            "missing field `language`",
        ),
        (
            "{\"id\": 2, \"text_tokens\": 5, \"cost\": {\"vision\": 1, \"language\": 1, \"x\": 1}}",
            "unknown field `x`, expected `vision` or `language`",
        ),
        (
            "{\"id\": 2, \"text_tokens\": 5, \"cost\": {\"vision\": 1e999, \"language\": 1}}",
            "number out of range",
        ),
        (
            "{\"id\": 2, \"text_tokens\": 5, \"cost\": 3}",
            "invalid type: integer `3`, expected struct Cost",
        ),
        (
            "{\"id\": 2, \"text_tokens\": 5, \"cost\": {\"vision\": \"1\", \"language\": 1}}",
            "invalid type: string \"1\", expected f64",
        ),
    ] {
        let e = err(line);
        assert_eq!(e.line, 1);
        assert!(e.message.starts_with(starts), "{line}: {e}");
    }
}

/// A bad line among good ones, and the blank lines around them.
#[derive(Clone, Debug)]
struct Doc {
    lines: Vec<String>,
    bad: Option<usize>,
}

fn doc() -> impl Strategy<Value = Doc> {
    (
        prop::collection::vec((0u32..1000, 0usize..3, any::<bool>()), 1..30),
        prop::option::of(any::<prop::sample::Index>()),
        0usize..5,
    )
        .prop_map(|(samples, bad, kind)| {
            let mut lines = Vec::new();
            for (i, &(tokens, blanks, crlf)) in samples.iter().enumerate() {
                for _ in 0..blanks {
                    lines.push(if crlf { "  \r" } else { "" }.to_string());
                }
                lines.push(format!("{{\"id\": {i}, \"text_tokens\": {tokens}}}"));
            }
            let bad = bad.map(|at| {
                // A sample line, made bad one of several ways.
                let k = lines
                    .iter()
                    .enumerate()
                    .filter(|(_, l)| l.starts_with('{'))
                    .map(|(k, _)| k)
                    .nth(at.index(samples.len()))
                    .unwrap();
                lines[k] = match kind {
                    0 => lines[k].replace('}', ""),
                    1 => lines[k].replace("}", ", \"id\": 0}"),
                    2 => lines[k].replace("}", ", \"x\": 0}"),
                    3 => lines[k].replace("\"text_tokens\"", "\"text\""),
                    _ => "{\"id\": 0, \"text_tokens\": 1}".to_string(),
                };
                k
            });
            Doc { lines, bad }
        })
}

proptest! {
    /// The error names the bad line as an editor counts it (the repeated id
    /// 0 of the last kind is bad only after line 0's id 0); a document
    /// without one reads every sample, each id at its line.
    #[test]
    fn errors_name_the_line_an_editor_shows(d in doc()) {
        let text = d.lines.join("\n");
        match (read(&text), d.bad) {
            (Ok(input), None) => {
                let mut id = 0u64;
                for (k, l) in d.lines.iter().enumerate() {
                    if l.starts_with('{') {
                        prop_assert_eq!(input.line_of(id), Some(k + 1));
                        id += 1;
                    }
                }
                prop_assert_eq!(input.samples.len() as u64, id);
            }
            (Err(e), Some(k)) => prop_assert_eq!(e.line, k + 1, "{}", e),
            // Id 0 again on the first sample line is no repetition.
            (Ok(_), Some(k)) => {
                let first = d.lines[..k].iter().all(|l| !l.starts_with('{'));
                prop_assert!(first, "line {} should be refused", k + 1);
            }
            (Err(e), None) => prop_assert!(false, "{}", e),
        }
    }
}

/// Issue 20: a line of 50 million image entries took 14 s and 785 MB. A
/// line is now at most 4 MiB, refused before it is parsed, and a sample at
/// most 65,536 images, refused as they are read; both errors name the line.
#[test]
fn huge_lines_and_image_lists_are_refused() {
    use crate::examples::input::{MAX_IMAGES, MAX_LINE_BYTES};
    let images = |n: usize| {
        format!(
            "{{\"id\": 2, \"text_tokens\": 5, \"image_tokens\": [{}]}}",
            vec!["1"; n].join(",")
        )
    };
    let ok = format!(
        "{{\"id\": 1, \"text_tokens\": 5}}\n{}\n",
        images(MAX_IMAGES)
    );
    assert_eq!(
        read(&ok).unwrap().samples[1].sample().images().len(),
        MAX_IMAGES
    );
    let e = err(&format!(
        "{{\"id\": 1, \"text_tokens\": 5}}\n{}\n",
        images(MAX_IMAGES + 1)
    ));
    assert_eq!(e.line, 2);
    assert!(
        e.message
            .starts_with("`image_tokens` has more than 65536 images; a sample has at most 65536"),
        "{e}"
    );
    // A line past the limit, whatever it holds, is refused by its length.
    let line = images(MAX_LINE_BYTES / 2 + 1);
    let e = err(&format!("\n\n{line}\n"));
    assert_eq!((e.line, e.column), (3, None));
    let want = format!(
        "the line is {} bytes long, above the limit of 4194304 bytes a line",
        line.len()
    );
    assert!(e.message.starts_with(&want), "{e}");
    // The timing reader shares both limits.
    let timing = format!(
        "{{\"seconds\": 1, \"samples\": [{{\"text_tokens\": 5, \"image_tokens\": [{}]}}]}}",
        vec!["1"; MAX_IMAGES + 1].join(",")
    );
    let e = crate::examples::timings::read(&timing).unwrap_err();
    assert!(
        e.message
            .starts_with("`image_tokens` has more than 65536 images"),
        "{e}"
    );
}

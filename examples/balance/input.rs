//! The `balance` example's JSON Lines reader: one sample a line, every error naming its line.
//!
//! Kept free of the example's globals (no file system, no command line) so
//! that `tests/balance_input.rs` and a fuzz target can include it with
//! `#[path = "../examples/balance/input.rs"] mod input;`.
//!
//! A line is one JSON object, `{"id": 7, "text_tokens": 312,
//! "image_tokens": [576, 576], "loss_tokens": 40, "origin": 3, "group": 12,
//! "bytes": 2709504, "cost": {"vision": 0.012, "language": 0.034}}`: `id`
//! (unique) and `text_tokens` required,
//! `image_tokens` (one entry a single-unit image), `loss_tokens` (default:
//! the text tokens), `origin` (the rank whose data loader holds the sample),
//! `group` (the samples that must stay together) and `bytes` (to move it;
//! default: derived from its image tokens) optional, `null` the same as
//! absent. `cost` is the sample's own cost per phase (both phases, finite
//! and non-negative numbers, for `--model costs`), on every line or on none.
//! Blank lines are skipped. An unknown field, a field given twice, a
//! value of the wrong type or range, and an id already used are errors
//! naming the line (1-based, as an editor counts them). A line is at most
//! [`MAX_LINE_BYTES`] (4 MiB) long and a sample has at most [`MAX_IMAGES`]
//! (65,536) images: a longer line is refused before it is parsed, more
//! images as they are read, so no line drives more time or memory than
//! those limits allow. Memory and time are proportional to the text.

use std::collections::btree_map::{BTreeMap, Entry};
use std::fmt;

use microbatch::cost::{Image, Phases, Sample};
use microbatch::plan::StepSample;
use microbatch::{Error, Locator};

/// One line as read: `deny_unknown_fields` refuses other keys, and the
/// derived visitor refuses a key given twice ("duplicate field").
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    id: u64,
    text_tokens: u32,
    #[serde(default, deserialize_with = "image_tokens")]
    image_tokens: Option<Vec<u32>>,
    #[serde(default)]
    loss_tokens: Option<u64>,
    #[serde(default)]
    origin: Option<u64>,
    #[serde(default)]
    group: Option<u64>,
    #[serde(default)]
    bytes: Option<u64>,
    #[serde(default)]
    cost: Option<Cost>,
}

/// A line's `cost`: both phases, no other key.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Cost {
    vision: f64,
    language: f64,
}

/// The longest line read, in bytes (4 MiB): a sample's line with
/// [`MAX_IMAGES`] images of 10 digits each takes 0.7 MiB, a timing line
/// thousands of samples. A longer line is refused before it is parsed.
pub const MAX_LINE_BYTES: usize = 4 << 20;

/// The most images of one sample (`image_tokens` entries): 65,536, far
/// above any sample a sequence holds (a packed sequence of 2^20 tokens
/// holds 65,536 images of 16 tokens). More are refused as they are read,
/// before they are kept.
pub const MAX_IMAGES: usize = 1 << 16;

/// Reads an optional `image_tokens` list of at most [`MAX_IMAGES`] entries
/// (for `#[serde(deserialize_with)]`): `null` or absent is `None`; the
/// entry past the limit is an error, so a hostile line holds at most that
/// many in memory. O(entries) time.
pub fn image_tokens<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Vec<u32>>, D::Error> {
    struct Bounded(Vec<u32>);

    impl<'de> serde::Deserialize<'de> for Bounded {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct Visit;
            impl<'de> serde::de::Visitor<'de> for Visit {
                type Value = Bounded;

                fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    write!(f, "a sequence (of at most {MAX_IMAGES} image token counts)")
                }

                fn visit_seq<A: serde::de::SeqAccess<'de>>(
                    self,
                    mut seq: A,
                ) -> Result<Bounded, A::Error> {
                    // The size hint is the input's claim: never more than the limit.
                    let mut images = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1024));
                    while let Some(tokens) = seq.next_element::<u32>()? {
                        if images.len() == MAX_IMAGES {
                            return Err(serde::de::Error::custom(format!(
                                "`image_tokens` has more than {MAX_IMAGES} images; a sample has \
                                 at most {MAX_IMAGES} (split it into several samples)"
                            )));
                        }
                        images.push(tokens);
                    }
                    Ok(Bounded(images))
                }
            }
            d.deserialize_seq(Visit)
        }
    }

    Ok(<Option<Bounded> as serde::Deserialize>::deserialize(d)?.map(|b| b.0))
}

/// What a line holds, for the messages of unknown fields.
const FIELDS: &str =
    "`id`, `text_tokens`, `image_tokens`, `loss_tokens`, `origin`, `group`, `bytes`, `cost`";

/// An error of the input: its 1-based line and what is wrong there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InputError {
    /// The line, counted from 1 as an editor does (blank lines included).
    pub line: usize,
    /// The column (1-based, in bytes) where JSON parsing stopped, when it did.
    pub column: Option<usize>,
    /// What is wrong, for a user who reads only this.
    pub message: String,
}

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}", self.line)?;
        if let Some(c) = self.column {
            write!(f, ", column {c}")?;
        }
        write!(f, ": {}", self.message)
    }
}

/// The objects of a JSON Lines text: `(line, T)` for every non-blank line
/// (counted from 1, blank lines included), parsed by [`parse_line`] with
/// `fields`, `more` and `what`; an error names its line. A line longer than
/// [`MAX_LINE_BYTES`] is an error, before it is parsed.
pub fn objects<'t, T: serde::de::DeserializeOwned + 't>(
    text: &'t str,
    fields: &'t str,
    more: &'t str,
    what: &'t str,
) -> impl Iterator<Item = Result<(usize, T), InputError>> + 't {
    text.lines()
        .enumerate()
        .filter(|(_, raw)| !raw.trim().is_empty())
        .map(move |(i, raw)| {
            if raw.len() > MAX_LINE_BYTES {
                return Err(at(
                    i + 1,
                    format!(
                        "the line is {} bytes long, above the limit of {MAX_LINE_BYTES} bytes a \
                         line (4 MiB; a sample has at most {MAX_IMAGES} images); split it",
                        raw.len()
                    ),
                ));
            }
            parse_line(raw, i + 1, fields, more, what).map(|t| (i + 1, t))
        })
}

/// An error of the input at `line` (no column).
pub fn at(line: usize, message: String) -> InputError {
    InputError {
        line,
        column: None,
        message,
    }
}

/// Parses the non-blank line `raw` (number `line`) as a `T`: a JSON object
/// (a derived struct would also read a list by position), serde's message
/// without its position (the column is given apart) and a hint of what
/// `fields` an object holds (and `more`, said after them for a value of the
/// wrong type); `what` names the object in the hint for a field given twice
/// ("a line", "an object").
pub fn parse_line<T: serde::de::DeserializeOwned>(
    raw: &str,
    line: usize,
    fields: &str,
    more: &str,
    what: &str,
) -> Result<T, InputError> {
    let start = raw.len() - raw.trim_start().len();
    if !raw[start..].starts_with('{') {
        return Err(InputError {
            line,
            column: Some(start + 1),
            message: format!("expected a JSON object with {fields}"),
        });
    }
    serde_json::from_str(raw).map_err(|e| {
        let message = without_position(&e);
        let hint = if message.starts_with("unknown field") {
            String::new()
        } else if message.starts_with("duplicate field") {
            format!(" (each field at most once {what})")
        } else if e.is_data() {
            format!(" (a line is an object with {fields}{more})")
        } else {
            String::new()
        };
        InputError {
            line,
            column: Some(e.column()),
            message: format!("{message}{hint}"),
        }
    })
}

/// The samples of a JSON Lines text, in the order of their lines, with the
/// line of every id (to name the line of a sample the planner refuses).
#[derive(Clone, Debug)]
pub struct Input {
    /// The samples, one a non-blank line.
    pub samples: Vec<StepSample>,
    /// Whether the samples carry their own costs (`cost` on every line,
    /// [`Sample::given_cost`]); `false` for an empty text.
    pub costs: bool,
    /// id -> line.
    lines: BTreeMap<u64, usize>,
}

impl Input {
    /// The line of sample `id`, if it was read.
    pub fn line_of(&self, id: u64) -> Option<usize> {
        self.lines.get(&id).copied()
    }

    /// The planner's error `err` about these samples, with the line of
    /// every sample it names by id (an oversize sample, a repeated id).
    pub fn explain(&self, err: &Error) -> String {
        let at = |id: Option<u64>| match id.and_then(|id| self.line_of(id).map(|l| (id, l))) {
            Some((id, line)) => format!("line {line} (id {id})"),
            None => match id {
                Some(id) => format!("id {id}"),
                None => "a sample".to_string(),
            },
        };
        match err {
            Error::DuplicateId { id } => {
                format!(
                    "{}: the id is used twice; ids must be unique",
                    at(Some(*id))
                )
            }
            Error::Oversize { items } => {
                let mut out = format!("{} sample(s) fit no packed sequence:", items.len());
                for o in items {
                    let what = o.name.unwrap_or("size");
                    out.push_str(&format!(
                        " {}: {} {what} > {};",
                        at(o.id),
                        o.size,
                        o.capacity
                    ));
                }
                out.push_str(" raise the limit or drop the sample(s)");
                out
            }
            Error::LossTokens { id, .. }
            | Error::Invalid {
                at: Locator::Origin { id, .. },
                ..
            }
            | Error::Invalid {
                at: Locator::Cost { id, .. },
                ..
            }
            | Error::Invalid {
                at: Locator::Floor { id, .. },
                ..
            } => format!("{}: {err}", at(Some(*id))),
            Error::GroupTooLarge { group, .. } => {
                let lines: Vec<String> = self
                    .samples
                    .iter()
                    .filter(|s| s.group() == Some(*group))
                    .filter_map(|s| self.line_of(s.id()))
                    .map(|l| l.to_string())
                    .collect();
                match lines.len() {
                    0 => err.to_string(),
                    n if n <= 8 => format!("lines {}: {err}", lines.join(", ")),
                    n => format!("lines {}, ... ({n} lines): {err}", lines[..8].join(", ")),
                }
            }
            other => other.to_string(),
        }
    }
}

/// serde_json's message without its " at line L column C" (the line is
/// ours, counted in the whole text).
pub fn without_position(e: &serde_json::Error) -> String {
    let text = e.to_string();
    let suffix = format!(" at line {} column {}", e.line(), e.column());
    match text.strip_suffix(&suffix) {
        Some(s) => s.to_string(),
        None => text,
    }
}

/// Reads the JSON Lines `text`: one sample a non-blank line.
///
/// # Errors
///
/// The first bad line, by its 1-based number: not JSON, not an object, an
/// unknown or repeated field, a missing `id` or `text_tokens`, a value of
/// the wrong type or out of range (`text_tokens` and each image's tokens at
/// most 2^32 - 1, at most [`MAX_IMAGES`] images and [`MAX_LINE_BYTES`] a
/// line; `origin`, `group`, `bytes` and `loss_tokens` at most
/// 2^64 - 1, and an origin at most the platform's largest index), or an id
/// already used on an earlier line (both lines named). An origin not below
/// the ranks is the planner's to refuse (`Error::Invalid` at an origin, mapped to
/// its line by [`Input::explain`]). A `cost` that is not an object with
/// exactly `vision` and `language`, a phase's cost negative (or out of
/// `f64`'s range), and a line with a `cost` when the first sample line had
/// none (or without one when it had one) are errors naming the line.
///
/// # Complexity
///
/// O(b + n log n) time and O(b) extra space for b bytes and n lines.
pub fn read(text: &str) -> Result<Input, InputError> {
    let mut samples = Vec::new();
    let mut lines = BTreeMap::new();
    // Whether the first sample line had a `cost`, and its line: all or none.
    let mut costs: Option<(bool, usize)> = None;
    for object in objects::<Line>(text, FIELDS, "", "a line") {
        let (line, parsed) = object?;
        let bad = |message: String| at(line, message);
        match lines.entry(parsed.id) {
            Entry::Occupied(first) => {
                return Err(bad(format!(
                    "id {} is already used on line {}; ids must be unique",
                    parsed.id,
                    first.get()
                )))
            }
            Entry::Vacant(slot) => {
                slot.insert(line);
            }
        }
        let images = parsed
            .image_tokens
            .unwrap_or_default()
            .into_iter()
            .map(Image::new);
        let mut sample = Sample::new(parsed.text_tokens, images);
        match (costs, &parsed.cost) {
            (None, c) => costs = Some((c.is_some(), line)),
            (Some((true, _)), Some(_)) | (Some((false, _)), None) => {}
            (Some((had, first)), _) => {
                let (there, here) = if had {
                    ("has a `cost`", "has none")
                } else {
                    ("has no `cost`", "has one")
                };
                return Err(bad(format!(
                    "a `cost` is on every line or on none: line {first} {there}, this line {here}"
                )));
            }
        }
        if let Some(c) = parsed.cost {
            // NaN cannot come from JSON, nor infinity (serde_json refuses
            // numbers out of range); `!(x >= 0)` refuses NaN all the same.
            for (phase, x) in [("vision", c.vision), ("language", c.language)] {
                if !(x >= 0.0 && x.is_finite()) {
                    return Err(bad(format!(
                        "`cost.{phase}` is {x}: a cost is a finite number of at least 0"
                    )));
                }
            }
            sample = sample
                .with_cost(Phases::new(c.vision, c.language))
                .map_err(|e| bad(format!("`cost`: {e}")))?;
        }
        let mut sample = StepSample::new(parsed.id, sample);
        if let Some(l) = parsed.loss_tokens {
            sample = sample.with_loss_tokens(l);
        }
        if let Some(o) = parsed.origin {
            let rank = usize::try_from(o).map_err(|_| {
                bad(format!(
                    "origin {o} is past this platform's largest rank ({}); an origin is a rank \
                     below --ranks",
                    usize::MAX
                ))
            })?;
            sample = sample.with_origin(rank);
        }
        if let Some(g) = parsed.group {
            sample = sample.with_group(g);
        }
        if let Some(b) = parsed.bytes {
            sample = sample.with_bytes(b);
        }
        samples.push(sample);
    }
    Ok(Input {
        samples,
        costs: costs.is_some_and(|(c, _)| c),
        lines,
    })
}

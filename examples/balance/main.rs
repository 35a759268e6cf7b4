//! Plans one optimizer step of a vision-language batch over data-parallel
//! ranks and micro-steps, and shows what it gains: the per-rank load before
//! (the data loader's order, packed greedily, dealt to ranks in turn) and
//! after, the report, and the step time against token-count balancing.
//!
//! Run with no arguments for the embedded default (a seeded `anyres-mix`
//! batch of 64 samples for each of 16 ranks, per-phase barriers):
//!
//! ```text
//! cargo run --release --example balance
//! cargo run --release --example balance -- --scenario interleaved --ranks 64 --sync step
//! cargo run --release --example balance -- --input batch.jsonl --ranks 8 --seq-len 8192 --json
//! cargo run --release --example balance -- --ranks 64 --locality 0.005 --ranks-per-node 8
//! ```
//!
//! `--input FILE` reads JSON Lines, one sample a line:
//! `{"id": 7, "text_tokens": 312, "image_tokens": [576, 576], "loss_tokens": 40,
//! "origin": 3, "group": 12, "bytes": 2709504, "cost": {"vision": 0.012,
//! "language": 0.034}}` (all but `id` and `text_tokens` optional; the reader
//! is `input.rs`). A `cost` (seconds, or any unit, per phase; on every line or
//! on none) is the sample's own cost: `--model costs` plans on exactly those
//! numbers ([`microbatch::cost::Given`]), and is the default when the lines
//! carry costs; under a preset named by `--model`, the costs are ignored
//! with a note on stderr. A bad line is an error
//! that names the line, and nothing is planned; so is a sample the planner
//! refuses (a repeated id, a sample over the sequence length or a cap, an
//! origin not below `--ranks`, a group that fits no sequence). `--json`
//! prints one JSON object (documented in the README) instead of the chart.
//!
//! `--locality TOL` keeps samples on the rank that holds them (their
//! `origin`) where the step time stays within `TOL` (a fraction: 0.005 is
//! 0.5%) of the plan without locality; `--ranks-per-node N` counts moves
//! inside a node as cheap; `--locality-effort E` bounds the work of its
//! exchange under the per-micro-step models (`Locality::effort`: less
//! planning time, more bytes moved). A generated batch then gets the data loader's
//! round-robin origins (sample i on rank i mod R). With origins, the chart
//! shows each rank's bytes in and out next to its load, and `--json` the
//! exchange schedule. `--group-scope micro-batch|rank` says where the
//! samples of one `group` stay together.
//!
//! `--timings FILE` reads measured micro-batches (JSON Lines, one a line:
//! `{"samples": [{"text_tokens": 312, "image_tokens": [576]}, ...],
//! "vision_seconds": 0.021, "language_seconds": 0.064}`, or `"seconds": S`
//! for the whole micro-batch; the reader is `timings.rs`), calibrates the
//! preset's terms on them, and plans on the fitted model (in seconds); the
//! chart and `--json` (`"fit"`) say how well the terms fit.
//!
//! Every number on the command line is checked, and an error names its
//! flag: `--ranks`, `--samples-per-rank`, `--seq-len`, `--max-units`,
//! `--micro-steps` and `--ranks-per-node` are at least 1, `--locality-effort`
//! is from 0 to 2^32 - 1, `--locality` is a
//! finite fraction from 0 to 1, and a generated batch (`--ranks` x
//! `--samples-per-rank`) has at most 2^20 = 1,048,576 samples.

mod input;
mod timings;

use std::process::ExitCode;

use microbatch::cost::{Given, Incremental, Preset, Tokens};
use microbatch::plan::{
    GroupScope, Locality, Normalization, Plan, Planner, Reduction, StepSample, SyncModel,
};
use microbatch::scenario::{Scenario, SCENARIO_NAMES};
use serde_json::{json, Value};

/// The most samples a generated batch may have (`--ranks` x
/// `--samples-per-rank`): memory and time follow the batch, so the command
/// line cannot ask for more than a few seconds of work.
const MAX_GENERATED: u64 = 1 << 20;

const USAGE: &str = "usage: balance [--scenario NAME] [--ranks R] [--samples-per-rank N] \
[--seq-len L] [--max-units U] [--micro-steps A] [--sync step|micro-step|phase] \
[--model PRESET|costs] [--seed S] [--input FILE.jsonl] [--timings FILE.jsonl] [--locality TOL] \
[--ranks-per-node N] [--locality-effort E] [--group-scope micro-batch|rank] [--json]";

/// What `--model` names: a preset's FLOPs, or the costs the input carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ModelArg {
    Preset(Preset),
    /// The `cost` of every `--input` line ([`Given`]).
    Costs,
}

/// The unit of a cost model's numbers, for the chart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Unit {
    /// A preset's FLOPs.
    Flop,
    /// Seconds: given costs, or a model fitted to measured times.
    Seconds,
}

impl Unit {
    fn name(self) -> &'static str {
        match self {
            Unit::Flop => "flop",
            Unit::Seconds => "seconds",
        }
    }

    /// `x` for a reader.
    fn show(self, x: f64) -> String {
        match self {
            Unit::Flop => format!("{:.3} TFLOP", x / 1e12),
            Unit::Seconds => format!("{:.4} s", x),
        }
    }
}

struct Args {
    scenario: Scenario,
    ranks: usize,
    per_rank: usize,
    seq_len: Option<u32>,
    max_units: Option<u32>,
    micro_steps: Option<usize>,
    sync: SyncModel,
    model: Option<ModelArg>,
    seed: u64,
    input: Option<String>,
    timings: Option<String>,
    /// The tolerance of `--locality`, a fraction of the locality-free step time.
    locality: Option<f64>,
    ranks_per_node: Option<usize>,
    /// `--locality-effort`: the bound on locality's exchange.
    locality_effort: Option<u32>,
    group_scope: GroupScope,
    json: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        scenario: Scenario::AnyresMix,
        ranks: 16,
        per_rank: 64,
        seq_len: None,
        max_units: None,
        micro_steps: None,
        sync: SyncModel::Phase,
        model: None,
        seed: 42,
        input: None,
        timings: None,
        locality: None,
        ranks_per_node: None,
        locality_effort: None,
        group_scope: GroupScope::default(),
        json: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--help" | "-h" => return Err(String::new()),
            "--json" => {
                args.json = true;
                continue;
            }
            _ => {}
        }
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        // A number from `min` to `max`, the flag named in every error.
        let int = |min: u64, max: u64| -> Result<u64, String> {
            let x = value.trim().parse::<u64>().map_err(|e| {
                format!("{flag} {value:?}: not a whole number from {min} to {max} ({e})")
            })?;
            if x < min || x > max {
                return Err(format!("{flag} {x}: must be from {min} to {max}"));
            }
            Ok(x)
        };
        let usize_max = usize::MAX as u64;
        let u32_max = u64::from(u32::MAX);
        match flag.as_str() {
            "--scenario" => {
                args.scenario = value.parse().map_err(|e| format!("--scenario: {e}"))?
            }
            "--ranks" => args.ranks = int(1, usize_max)? as usize,
            "--samples-per-rank" => args.per_rank = int(1, usize_max)? as usize,
            "--seq-len" => args.seq_len = Some(int(1, u32_max)? as u32),
            "--max-units" => args.max_units = Some(int(1, u32_max)? as u32),
            "--micro-steps" => args.micro_steps = Some(int(1, usize_max)? as usize),
            "--sync" => args.sync = value.parse().map_err(|e| format!("--sync: {e}"))?,
            "--model" if value == "costs" => args.model = Some(ModelArg::Costs),
            "--model" => {
                let preset = value.parse::<Preset>().map_err(|e| {
                    format!("--model: {e}; or `costs` for the costs of the --input lines")
                })?;
                args.model = Some(ModelArg::Preset(preset))
            }
            "--seed" => args.seed = int(0, u64::MAX)?,
            "--input" => args.input = Some(value),
            "--timings" => args.timings = Some(value),
            "--locality" => args.locality = Some(fraction(&flag, &value)?),
            "--ranks-per-node" => args.ranks_per_node = Some(int(1, usize_max)? as usize),
            "--locality-effort" => args.locality_effort = Some(int(0, u32_max)? as u32),
            "--group-scope" => {
                args.group_scope = value.parse().map_err(|e| format!("--group-scope: {e}"))?
            }
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    for (set, flag, what) in [
        (
            args.ranks_per_node.is_some(),
            "--ranks-per-node",
            "weighs the moves",
        ),
        (
            args.locality_effort.is_some(),
            "--locality-effort",
            "bounds the work",
        ),
    ] {
        if set && args.locality.is_none() {
            return Err(format!(
                "{flag} {what} of --locality: give --locality TOL too \
                 (--locality 0 keeps the step time of the plan without locality)"
            ));
        }
    }
    if args.model == Some(ModelArg::Costs) && args.timings.is_some() {
        return Err(
            "--timings calibrates a preset's terms, --model costs plans on the costs of the \
             input: give one of them (--model PRESET with --timings)"
                .to_string(),
        );
    }
    if args.model == Some(ModelArg::Costs) && args.input.is_none() {
        return Err(
            "--model costs plans on the `cost` of every --input line: give --input FILE \
             (a generated batch has no costs of its own)"
                .to_string(),
        );
    }
    Ok(args)
}

/// A tolerance: a finite fraction from 0 to 1 (0.005 is 0.5%).
fn fraction(flag: &str, value: &str) -> Result<f64, String> {
    let x = value
        .trim()
        .parse::<f64>()
        .map_err(|e| format!("{flag} {value:?}: not a number ({e}); a fraction, 0.005 for 0.5%"))?;
    // NaN fails the range test too.
    if !(0.0..=1.0).contains(&x) {
        return Err(format!(
            "{flag} {value}: must be a fraction from 0 to 1 (0.005 for 0.5%)"
        ));
    }
    Ok(x)
}

/// The size of the generated batch, `--ranks` x `--samples-per-rank`,
/// checked (no wrapping) and at most [`MAX_GENERATED`].
fn generated(args: &Args) -> Result<usize, String> {
    let n = (args.ranks as u64)
        .checked_mul(args.per_rank as u64)
        .filter(|&n| n <= MAX_GENERATED)
        .ok_or_else(|| {
            format!(
                "--ranks {} x --samples-per-rank {}: a generated batch has at most {MAX_GENERATED} \
                 samples (use fewer ranks or samples per rank, or --input)",
                args.ranks, args.per_rank
            )
        })?;
    Ok(n as usize)
}

/// The text of the JSON Lines file `path`, read line by line so that a line
/// longer than [`input::MAX_LINE_BYTES`] is refused (naming it) after at
/// most that many bytes of it are held: a hostile line costs no more memory
/// than the limit, whatever its length. O(bytes) time.
fn read_lines(path: &str) -> Result<String, String> {
    use std::io::{BufRead, BufReader, Read};
    let file = std::fs::File::open(path).map_err(|e| format!("{path}: {e}"))?;
    let mut reader = BufReader::new(file);
    let mut text = Vec::new();
    for line in 1.. {
        let start = text.len();
        // One byte past the limit (plus the newline) tells a long line.
        let limit = input::MAX_LINE_BYTES as u64 + 2;
        let n = (&mut reader)
            .take(limit)
            .read_until(b'\n', &mut text)
            .map_err(|e| format!("{path}: {e}"))?;
        if n == 0 {
            break;
        }
        let raw = &text[start..];
        let body = raw.strip_suffix(b"\n").unwrap_or(raw);
        let body = body.strip_suffix(b"\r").unwrap_or(body);
        if body.len() > input::MAX_LINE_BYTES {
            return Err(format!(
                "{path}, {}",
                input::at(
                    line,
                    format!(
                        "the line is more than {} bytes long, above the limit of {} bytes a \
                         line (4 MiB; a sample has at most {} images); split it",
                        input::MAX_LINE_BYTES,
                        input::MAX_LINE_BYTES,
                        input::MAX_IMAGES
                    )
                )
            ));
        }
    }
    String::from_utf8(text).map_err(|e| format!("{path}: not UTF-8 text ({e})"))
}

/// Reads the JSON Lines file `path`; every error names the file and line.
fn read_input(path: &str) -> Result<input::Input, String> {
    let text = read_lines(path)?;
    input::read(&text).map_err(|e| format!("{path}, {e}"))
}

/// Reads the `--timings` file `path`; every error names the file and line.
fn read_timings(path: &str) -> Result<Vec<timings::Row>, String> {
    let text = read_lines(path)?;
    timings::read(&text).map_err(|e| format!("{path}, {e}"))
}

/// Per-rank totals (vision, language) of a plan.
fn rank_loads(plan: &Plan) -> Vec<(f64, f64)> {
    (0..plan.ranks())
        .map(|r| {
            let mut v = (0.0, 0.0);
            for j in 0..plan.micro_steps() {
                for s in 0..plan.sequences_per_micro_step() {
                    let c = plan.sequence_cost(r, j, s);
                    v.0 += c.vision;
                    v.1 += c.language;
                }
            }
            v
        })
        .collect()
}

/// Each rank's bytes (in, out) under the plan's exchange, if its samples
/// have origins.
fn rank_traffic(plan: &Plan) -> Option<Vec<(u64, u64)>> {
    let ex = plan.exchange()?;
    Some(
        (0..plan.ranks())
            .map(|r| (ex.bytes_in(r), ex.bytes_out(r)))
            .collect(),
    )
}

/// `bytes` for a reader: B, kB, MB, GB, TB (powers of 1000).
fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "kB", "MB", "GB", "TB"];
    let mut x = bytes as f64;
    let mut u = 0;
    while x >= 1000.0 && u + 1 < UNITS.len() {
        x /= 1000.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{x:.1} {}", UNITS[u])
    }
}

/// A bar chart of per-rank loads: `▒` vision, `█` language, scaled to `max`
/// (positive: the caller says instead when the batch has no cost), with
/// each rank's bytes in and out when `traffic` is given.
fn chart(title: &str, loads: &[(f64, f64)], max: f64, traffic: Option<&[(u64, u64)]>) {
    const WIDTH: f64 = 56.0;
    println!("{title}");
    let mean = loads.iter().map(|l| l.0 + l.1).sum::<f64>() / loads.len() as f64;
    let shown: Vec<usize> = if loads.len() <= 32 {
        (0..loads.len()).collect()
    } else {
        // The slowest 16 ranks, in rank order.
        let mut by_load: Vec<usize> = (0..loads.len()).collect();
        by_load.sort_by(|&a, &b| (loads[b].0 + loads[b].1).total_cmp(&(loads[a].0 + loads[a].1)));
        let mut top: Vec<usize> = by_load.into_iter().take(16).collect();
        top.sort_unstable();
        println!("  (the 16 slowest of {} ranks)", loads.len());
        top
    };
    for r in shown {
        let (v, l) = loads[r];
        let cv = (v / max * WIDTH).round() as usize;
        let cl = ((v + l) / max * WIDTH).round() as usize
            - cv.min(((v + l) / max * WIDTH).round() as usize);
        let moved = match traffic.and_then(|t| t.get(r)) {
            Some(&(i, o)) => format!("  in {:>9} out {:>9}", human(i), human(o)),
            None => String::new(),
        };
        println!(
            "  rank {r:>4} {}{}{} {:>6.3}{moved}",
            "▒".repeat(cv),
            "█".repeat(cl),
            " ".repeat((WIDTH as usize + 1).saturating_sub(cv + cl)),
            (v + l) / mean
        );
    }
}

/// The exchange schedule: per ordered pair of ranks that trade samples,
/// the ids sent (ascending), and per rank the counts and bytes; `null`
/// without origins. Memory follows the moves, never R^2.
fn exchange_json(plan: &Plan) -> Value {
    let Some(ex) = plan.exchange() else {
        return Value::Null;
    };
    let mut pairs: Vec<Value> = Vec::new();
    let mut current: Option<(usize, usize, Vec<u64>, u64)> = None;
    for m in ex.moves() {
        match &mut current {
            Some((f, t, ids, bytes)) if *f == m.from && *t == m.to => {
                ids.push(m.id);
                *bytes = bytes.saturating_add(m.bytes);
            }
            _ => {
                if let Some((f, t, ids, bytes)) = current.take() {
                    pairs.push(json!({ "from": f, "to": t, "ids": ids, "bytes": bytes }));
                }
                current = Some((m.from, m.to, vec![m.id], m.bytes));
            }
        }
    }
    if let Some((f, t, ids, bytes)) = current {
        pairs.push(json!({ "from": f, "to": t, "ids": ids, "bytes": bytes }));
    }
    let per_rank = |f: &dyn Fn(usize) -> u64| -> Vec<u64> { (0..plan.ranks()).map(f).collect() };
    json!({
        "pairs": pairs,
        "sent": per_rank(&|r| ex.sent(r) as u64),
        "received": per_rank(&|r| ex.received(r) as u64),
        "bytes_out": per_rank(&|r| ex.bytes_out(r)),
        "bytes_in": per_rank(&|r| ex.bytes_in(r)),
    })
}

fn report_json(plan: &Plan, described: &Described) -> Value {
    let r = plan.report();
    let traffic = match &r.traffic {
        Some(t) => json!({
            "samples_moved": t.samples_moved,
            "bytes_moved": t.bytes_moved,
            "bytes_total": t.bytes_total,
            "max_bytes_in": t.max_bytes_in,
            "max_bytes_out": t.max_bytes_out,
            "inter_node_bytes": t.inter_node_bytes,
        }),
        None => Value::Null,
    };
    let loss = plan.loss();
    let scale = |n, red| loss.scale(n, red);
    json!({
        "model": described.name,
        "unit": described.unit.name(),
        "fit": described.fit.as_ref().map_or(Value::Null, |f| f.json.clone()),
        "plan": plan.to_nested(),
        "sequences": plan.to_sequences(),
        "ranks": plan.ranks(),
        "micro_steps": plan.micro_steps(),
        "sequences_per_micro_step": plan.sequences_per_micro_step(),
        "loss": {
            "loss_tokens": loss.loss_tokens,
            "samples": loss.samples,
            "ranks": loss.ranks,
            "scale": {
                "token_sum": scale(Normalization::Token, Reduction::Sum),
                "token_mean": scale(Normalization::Token, Reduction::Mean),
                "sample_sum": scale(Normalization::Sample, Reduction::Sum),
                "sample_mean": scale(Normalization::Sample, Reduction::Mean),
            },
        },
        "report": {
            "sync": r.sync.name(),
            "predicted": r.predicted,
            "lower_bound": r.lower_bound,
            "ratio": r.ratio(),
            "baseline": r.baseline,
            "baseline_micro_steps": r.baseline_micro_steps,
            "users_baseline": r.users_baseline,
            "gain": r.gain(),
            "packed_gain": r.packed_gain(),
            "imbalance": { "vision": r.imbalance.vision, "language": r.imbalance.language },
            "efficiency": r.efficiency,
            "sequences": r.sequences,
            "balanced_packing": r.balanced_packing,
            "planning_ms": plan.planning_time().map(|t| t.as_secs_f64() * 1e3),
            "traffic": traffic,
            "locality_free": r.locality_free,
        },
        "exchange": exchange_json(plan),
        "fingerprint": format!("{:016x}", plan.fingerprint()),
    })
}

/// The command line's planner settings, locality aside.
fn configure<M: Incremental>(p: Planner<M>, args: &Args, max_units: Option<u32>) -> Planner<M> {
    let p = p.sync(args.sync).group_scope(args.group_scope);
    let p = match max_units {
        Some(u) => p.max_units(u),
        None => p,
    };
    match args.micro_steps {
        Some(a) => p.micro_steps(a),
        None => p,
    }
}

/// The cost model the batch is planned on, as the output names it.
struct Described {
    /// A preset's name, or `costs`.
    name: String,
    unit: Unit,
    /// With `--timings`: the calibration, for `--json` and the chart.
    fit: Option<Fit>,
}

/// A calibration's state, as `--json` and the chart show it.
struct Fit {
    json: Value,
    summary: Vec<String>,
}

/// The batch to plan and what planning it needs, the model aside.
struct Batch {
    samples: Vec<StepSample>,
    input: Option<input::Input>,
    /// The file, or the scenario and seed.
    source: String,
    seq_len: u32,
    max_units: Option<u32>,
    locality: Option<Locality>,
}

fn run(args: &Args) -> Result<(), String> {
    let (input, source) = match &args.input {
        Some(path) => (Some(read_input(path)?), path.clone()),
        None => (None, format!("{} (seed {})", args.scenario, args.seed)),
    };
    let costs = input.as_ref().is_some_and(|i| i.costs);
    let model = match args.model {
        Some(m) => m,
        // The input's own costs, unless the run calibrates a preset.
        None if costs && args.timings.is_none() => ModelArg::Costs,
        None if args.input.is_some() => ModelArg::Preset(Preset::Qwen25Vl7b),
        None => ModelArg::Preset(args.scenario.preset()),
    };
    if model == ModelArg::Costs && !costs {
        return Err(format!(
            "{source}: --model costs plans on the `cost` of every line, and the lines have \
             none: add `\"cost\": {{\"vision\": V, \"language\": L}}` to every line, or \
             name a preset"
        ));
    }
    if costs && model != ModelArg::Costs {
        eprintln!(
            "note: {source}: the lines' `cost` is ignored under a preset's FLOPs{}; \
             --model costs plans on it",
            if args.timings.is_some() {
                " calibrated by --timings"
            } else {
                ""
            }
        );
    }
    let samples: Vec<StepSample> = match &input {
        Some(input) => input.samples.clone(),
        None => {
            let generated = args.scenario.generate(generated(args)?, args.seed);
            if args.locality.is_some() {
                // The data loader's round-robin placement: sample i on rank i mod R.
                let ranks = args.ranks;
                generated
                    .into_iter()
                    .enumerate()
                    .map(|(i, s)| s.with_origin(i % ranks))
                    .collect()
            } else {
                generated
            }
        }
    };
    let locality = match args.locality {
        Some(tol) => {
            let l = Locality::new(tol).map_err(|e| format!("--locality: {e}"))?;
            let l = match args.ranks_per_node {
                Some(n) => l.ranks_per_node(n),
                None => l,
            };
            Some(match args.locality_effort {
                Some(e) => l.effort(e),
                None => l,
            })
        }
        None => None,
    };
    let seq_len = args.seq_len.unwrap_or(if args.input.is_some() {
        16384
    } else {
        args.scenario.seq_len()
    });
    let max_units = args.max_units.or(if args.input.is_some() {
        None
    } else {
        args.scenario.max_units()
    });
    let batch = Batch {
        samples,
        input,
        source,
        seq_len,
        max_units,
        locality,
    };
    match model {
        ModelArg::Costs => {
            let described = Described {
                name: "costs".to_string(),
                unit: Unit::Seconds,
                fit: None,
            };
            show(args, &batch, &Given, &described)
        }
        ModelArg::Preset(preset) => match &args.timings {
            None => {
                let described = Described {
                    name: preset.to_string(),
                    unit: Unit::Flop,
                    fit: None,
                };
                show(args, &batch, &preset.cost_model(), &described)
            }
            Some(path) => {
                let rows = read_timings(path)?;
                let calibration =
                    timings::calibrate(preset, &rows).map_err(|e| format!("{path}, {e}"))?;
                let described = Described {
                    name: preset.to_string(),
                    // The fallback is the preset's FLOPs.
                    unit: if calibration.fitted() {
                        Unit::Seconds
                    } else {
                        Unit::Flop
                    },
                    fit: Some(Fit {
                        json: timings::fit_json(&calibration, &rows),
                        summary: timings::fit_summary(&calibration, &rows),
                    }),
                };
                show(args, &batch, calibration.model(), &described)
            }
        },
    }
}

/// Plans `batch` on `model` and prints the chart or, with `--json`, the
/// JSON object.
fn show<M: Incremental>(
    args: &Args,
    batch: &Batch,
    model: &M,
    described: &Described,
) -> Result<(), String> {
    let Batch {
        samples,
        input,
        source,
        seq_len,
        max_units,
        locality,
    } = batch;
    let (samples, seq_len, max_units) = (samples.as_slice(), *seq_len, *max_units);
    let model_name = &described.name;
    // The planner's errors, with the line of every sample named by id.
    let explain = |e: microbatch::Error| match input {
        Some(input) => format!("{source}, {}", input.explain(&e)),
        None => e.to_string(),
    };
    let planner = configure(
        Planner::new(model).ranks(args.ranks).seq_len(seq_len),
        args,
        max_units,
    );
    let plan = match locality {
        Some(l) => planner.clone().locality(*l).plan(samples),
        None => planner.plan(samples),
    }
    .map_err(explain)?;
    if args.json {
        println!("{}", report_json(&plan, described));
        return Ok(());
    }
    let before = planner.baseline(samples).map_err(explain)?;
    let tokens = Tokens::new(1.0).map_err(|e| e.to_string())?;
    let by_tokens = configure(
        Planner::new(&tokens).ranks(args.ranks).seq_len(seq_len),
        args,
        max_units,
    )
    .plan(samples)
    .map_err(explain)?;
    let token_time = by_tokens
        .predict(samples, model, args.sync)
        .map_err(explain)?;

    let r = plan.report();
    println!(
        "{} samples from {source}, {} ranks, sequences of {seq_len} tokens{}, cost model {model_name}, sync `{}`",
        samples.len(),
        args.ranks,
        max_units.map_or(String::new(), |u| format!(" and {u} ViT units")),
        args.sync
    );
    if let Some(fit) = &described.fit {
        for line in &fit.summary {
            println!("{line}");
        }
    }
    println!();
    let (lb, la) = (rank_loads(&before), rank_loads(&plan));
    let (tb, ta) = (rank_traffic(&before), rank_traffic(&plan));
    let max = lb.iter().chain(&la).map(|l| l.0 + l.1).fold(0.0, f64::max);
    if max <= 0.0 {
        // Zero-token samples cost nothing: no bars, no ratios (`max` is a
        // fold with `f64::max` from 0, never NaN).
        println!(
            "The batch has no cost under {model_name} (every sample is empty): nothing to balance."
        );
        println!("fingerprint           {:016x}", plan.fingerprint());
        return Ok(());
    }
    chart(
        &format!(
            "Before: data loader order, packed greedily, dealt in turn ({} micro-steps); ▒ vision █ language, load / mean",
            before.micro_steps()
        ),
        &lb,
        max,
        tb.as_deref(),
    );
    println!();
    chart(
        &format!("After: microbatch ({} micro-steps)", plan.micro_steps()),
        &la,
        max,
        ta.as_deref(),
    );
    println!();
    let unit = |x: f64| described.unit.show(x);
    // x over the lower bound, or nothing where the bound is zero.
    let over = |x: f64| {
        if r.lower_bound > 0.0 {
            format!("  ({:.4} x)", x / r.lower_bound)
        } else {
            String::new()
        }
    };
    println!(
        "predicted step time   {}  ({:.4} x its lower bound)",
        unit(r.predicted),
        r.ratio()
    );
    println!("lower bound           {}", unit(r.lower_bound));
    println!(
        "naive baseline        {}{}",
        unit(r.baseline),
        over(r.baseline)
    );
    println!(
        "users' baseline       {}{}",
        unit(r.users_baseline),
        over(r.users_baseline)
    );
    println!(
        "token-balanced        {}{}",
        unit(token_time),
        over(token_time)
    );
    println!(
        "imbalance (max/mean)  vision {:.4}, language {:.4}",
        r.imbalance.vision, r.imbalance.language
    );
    println!(
        "packing efficiency    {:.1}% of {} sequences",
        100.0 * r.efficiency,
        r.sequences
    );
    if let Some(t) = &r.traffic {
        let share = |x: u64| {
            if t.bytes_total > 0 {
                format!(" ({:.1}%)", 100.0 * x as f64 / t.bytes_total as f64)
            } else {
                String::new()
            }
        };
        println!(
            "bytes moved           {} of {}{}, {} of {} samples; all-to-all critical path: max in {}, max out {}",
            human(t.bytes_moved),
            human(t.bytes_total),
            share(t.bytes_moved),
            t.samples_moved,
            samples.len(),
            human(t.max_bytes_in),
            human(t.max_bytes_out)
        );
        if let Some(b) = t.inter_node_bytes {
            println!("  across nodes        {}{}", human(b), share(b));
        }
    }
    if let Some(free) = r.locality_free {
        // What locality costs and saves: the same planner without it.
        let moved = planner
            .plan(samples)
            .ok()
            .and_then(|p| p.report().traffic.as_ref().map(|t| t.bytes_moved));
        let cost = if free > 0.0 {
            format!(
                " (locality: {:+.3}% step time)",
                100.0 * (r.predicted / free - 1.0)
            )
        } else {
            String::new()
        };
        println!(
            "without locality      {}{}{}",
            unit(free),
            cost,
            moved.map_or(String::new(), |b| format!(", {} moved", human(b)))
        );
    }
    if let Some(t) = plan.planning_time() {
        println!("planning time         {:.2} ms", t.as_secs_f64() * 1e3);
    }
    println!(
        "loss scale            {:.6e} per summed loss token ({} loss tokens; x{} under DDP's averaging all-reduce)",
        plan.loss().scale(Normalization::Token, Reduction::Sum),
        plan.loss().loss_tokens,
        plan.ranks()
    );
    println!("fingerprint           {:016x}", plan.fingerprint());
    println!();
    if r.predicted > 0.0 {
        println!(
            "gain: {:.1}% faster than the users' baseline, {:.1}% faster than the naive \
             baseline, {:.1}% faster than balancing tokens",
            100.0 * (r.gain() - 1.0),
            100.0 * (r.packed_gain() - 1.0),
            100.0 * (token_time / r.predicted - 1.0)
        );
    } else {
        println!("gain: none to measure (the planned step has no cost)");
    }
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("error: {e}");
            }
            eprintln!("{USAGE}");
            eprintln!(
                "scenarios: {}; models: {}, costs",
                SCENARIO_NAMES.join(", "),
                Preset::ALL.map(|p| p.name()).join(", ")
            );
            return if e.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(2)
            };
        }
    };
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

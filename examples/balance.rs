//! Packs one step's batch of vision-language samples into fixed-length
//! sequences with every bin-packing algorithm of `microbatch`, and prints how
//! close each gets to the lower bound.
//!
//! Run with no arguments for the embedded default (a seeded batch of 4096
//! samples, sequences of 16384 tokens and at most 48 ViT tiles):
//!
//! ```text
//! cargo run --release --example balance
//! cargo run --release --example balance -- --samples 100000 --seq-len 8192 --max-tiles 32 --seed 7
//! ```
//!
//! The planner over ranks and micro-steps will replace this demo.

use std::process::ExitCode;
use std::time::Instant;

use microbatch::pack::{self, Packing};

/// One sample: total tokens (text + image) and ViT tiles.
type Sample = [u32; 2];

struct Args {
    samples: usize,
    seq_len: u32,
    max_tiles: u32,
    seed: u64,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        samples: 4096,
        seq_len: 16384,
        max_tiles: 48,
        seed: 42,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--help" || flag == "-h" {
            return Err(String::new());
        }
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let bad = |e: std::num::ParseIntError| format!("{flag} {value}: {e}");
        match flag.as_str() {
            "--samples" => args.samples = value.parse().map_err(bad)?,
            "--seq-len" => args.seq_len = value.parse().map_err(bad)?,
            "--max-tiles" => args.max_tiles = value.parse().map_err(bad)?,
            "--seed" => args.seed = value.parse().map_err(bad)?,
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    Ok(args)
}

/// SplitMix64, seeded: the same batch on every machine.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn unit(&mut self) -> f64 {
        ((self.next() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    fn normal(&mut self) -> f64 {
        let (u, v) = (self.unit(), self.unit());
        (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
    }
}

/// An InternVL-style batch: text lengths log-normal (median 180), 0 to 12
/// images of 256 tokens per 448px tile, 6% text-only.
fn batch(args: &Args) -> Vec<Sample> {
    let mut rng = Rng(args.seed);
    (0..args.samples)
        .map(|_| {
            let text = (180f64.ln() + rng.normal()).exp().clamp(1.0, 2048.0) as u32;
            let images = if rng.unit() < 0.06 {
                0
            } else {
                1 + (rng.next() % 4) as u32
            };
            let tiles = if images == 0 {
                0
            } else {
                images * (12 / images).min(1 + (rng.next() % 6) as u32)
            };
            let tokens = (text + 256 * tiles).min(args.seq_len);
            [tokens, tiles.min(args.max_tiles)]
        })
        .collect()
}

fn report(
    name: &str,
    result: Result<Packing<u32>, microbatch::Error>,
    secs: f64,
) -> Result<(), microbatch::Error> {
    let p = result?;
    let lb = p.lower_bounds();
    println!(
        "{name:<22} {:>7} {:>7} {:>9.4} {:>10.1}% {:>9.1}% {:>10.3}",
        p.len(),
        lb.l2,
        p.len() as f64 / lb.l2.max(1) as f64,
        100.0 * p.efficiency(0),
        100.0 * p.efficiency(1),
        secs * 1e3
    );
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(msg) => {
            if !msg.is_empty() {
                eprintln!("error: {msg}");
            }
            eprintln!(
                "usage: balance [--samples N] [--seq-len TOKENS] [--max-tiles TILES] [--seed S]"
            );
            return ExitCode::from(2);
        }
    };
    let samples = batch(&args);
    let tokens: u64 = samples.iter().map(|s| u64::from(s[0])).sum();
    println!(
        "{} samples, {} tokens, {} tiles; sequences of {} tokens and at most {} tiles (seed {})\n",
        samples.len(),
        tokens,
        samples.iter().map(|s| u64::from(s[1])).sum::<u64>(),
        args.seq_len,
        args.max_tiles,
        args.seed
    );
    println!(
        "{:<22} {:>7} {:>7} {:>9} {:>11} {:>10} {:>10}",
        "algorithm", "seqs", "L2", "seqs/L2", "token eff", "tile eff", "ms"
    );
    type Algo = fn(&[Sample], [u32; 2]) -> Result<Packing<u32>, microbatch::Error>;
    let algorithms: [(&str, Algo); 5] = [
        ("first-fit-decreasing", pack::first_fit_decreasing),
        ("best-fit-decreasing", pack::best_fit_decreasing),
        ("first-fit (online)", pack::first_fit),
        ("best-fit (online)", pack::best_fit),
        ("next-fit (online)", pack::next_fit),
    ];
    let cap = [args.seq_len, args.max_tiles];
    for (name, f) in algorithms {
        let start = Instant::now();
        let result = f(&samples, cap);
        if let Err(e) = report(name, result, start.elapsed().as_secs_f64()) {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}

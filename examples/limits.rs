//! The resource limits (each function's `# Errors`; a table of their cost is in the history of
//! BENCHMARKS.md: `git show 99d715a:BENCHMARKS.md`, "Resource limits"), one case a
//! process: each case runs one call at (or past) a documented limit and
//! prints what it returned and how long it took. Peak memory comes from the
//! process, so run each case on its own under `/usr/bin/time`:
//!
//! ```sh
//! cargo build --release --example limits
//! for c in $(target/release/examples/limits list); do
//!     /usr/bin/time -f "$c: %e s, %M KB peak" target/release/examples/limits "$c"
//! done
//! ```

use std::time::Instant;

use microbatch::cost::{Image, Preset, Sample, Tokens};
use microbatch::pack::first_fit_decreasing;
use microbatch::partition::{lpt, Dims, Partitioner};
use microbatch::plan::{Planner, StepSample, SyncModel};
use microbatch::Error;

/// A deterministic stream of pseudo-random numbers (SplitMix64).
struct Mix(u64);

impl Mix {
    fn below(&mut self, bound: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) % bound
    }
}

fn lengths(n: usize, max: u64, seed: u64) -> Vec<u32> {
    let mut rng = Mix(seed);
    (0..n).map(|_| 1 + rng.below(max) as u32).collect()
}

/// `n` text samples of 1..=`max` tokens, ids `0..n`.
fn texts(n: usize, max: u64) -> Vec<StepSample> {
    lengths(n, max, 7)
        .into_iter()
        .enumerate()
        .map(|(i, t)| StepSample::new(i as u64, Sample::text_only(t)))
        .collect()
}

/// `n` samples with 0 to 3 images, as a VLM batch.
fn vlm(n: usize) -> Vec<StepSample> {
    let mut rng = Mix(11);
    (0..n as u64)
        .map(|id| {
            let text = 20 + rng.below(1500) as u32;
            let images: Vec<Image> = (0..rng.below(4))
                .map(|_| Image::new(64 + rng.below(2000) as u32))
                .collect();
            StepSample::new(id, Sample::new(text, images))
        })
        .collect()
}

fn outcome<T>(r: &Result<T, Error>, ok: impl Fn(&T) -> String) -> String {
    match r {
        Ok(x) => ok(x),
        Err(e) => format!("error: {e}"),
    }
}

fn run(case: &str) -> Option<String> {
    let text = |n| texts(n, 500);
    Some(match case {
        "pack-dims-65536" => {
            // One item of 65,536 dimensions, the most a capacity may have.
            let item = vec![1u32; 65_536];
            let cap = vec![2u32; 65_536];
            let r = first_fit_decreasing(&[item], cap);
            outcome(&r, |p| format!("{} bin(s)", p.len()))
        }
        "pack-dims-65537" => {
            let r = first_fit_decreasing(&[vec![1u32; 65_537]], vec![2u32; 65_537]);
            outcome(&r, |p| format!("{} bin(s)", p.len()))
        }
        "pack-ffd-1e6" => {
            let r = first_fit_decreasing(&lengths(1_000_000, 4096, 3), 4096);
            outcome(&r, |p| format!("{} bins", p.len()))
        }
        "partition-parts-65536" => {
            let r = Partitioner::new(65_536)
                .allow_empty(true)
                .partition(&[5u32, 3, 2]);
            outcome(&r, |p| format!("{} parts", p.len()))
        }
        "partition-parts-2^40" => {
            let r = Partitioner::new(1 << 40)
                .allow_empty(true)
                .partition(&[5u32, 3, 2]);
            outcome(&r, |p| format!("{} parts", p.len()))
        }
        "partition-lpt-1e5-k1000" => {
            let r = lpt(&lengths(100_000, 16_384, 5), 1000);
            outcome(&r, |p| format!("largest part {}", p.objective()))
        }
        "partition-default-1e5-k1000" => {
            let r = Partitioner::new(1000).partition(&lengths(100_000, 16_384, 5));
            outcome(&r, |p| format!("largest part {}", p.objective()))
        }
        "partition-perdim-equal-5000-k250" => {
            let a = lengths(5000, 16_384, 5);
            let b = lengths(5000, 4096, 6);
            let items: Vec<[u32; 2]> = a.into_iter().zip(b).map(|(x, y)| [x, y]).collect();
            let r = Partitioner::new(250)
                .dims(Dims::PerDim)
                .equal_count(true)
                .partition(&items);
            outcome(&r, |p| format!("objective {}", p.objective()))
        }
        "partition-infeasible-cap-20000-k100" => {
            let items = lengths(20_000, 16_384, 5);
            let sum: u64 = items.iter().map(|&x| u64::from(x)).sum();
            let cap = u32::try_from(sum / 100 - 1).unwrap_or(u32::MAX);
            let r = Partitioner::new(100).cap(cap).partition(&items);
            outcome(&r, |p| format!("largest part {}", p.objective()))
        }
        "plan-micro-steps-65536" | "plan-micro-steps-65536-phase" => {
            let sync = if case.ends_with("phase") {
                SyncModel::Phase
            } else {
                SyncModel::Step
            };
            let r = Planner::new(Tokens::new(1.0).ok()?)
                .ranks(1)
                .seq_len(1024)
                .sync(sync)
                .micro_steps(65_536)
                .plan(&text(10));
            outcome(&r, |p| {
                format!(
                    "{} sequences",
                    p.ranks() * p.micro_steps() * p.sequences_per_micro_step()
                )
            })
        }
        "plan-micro-steps-u32max" => {
            let r = Planner::new(Tokens::new(1.0).ok()?)
                .ranks(1)
                .seq_len(1024)
                .micro_steps(u32::MAX as usize)
                .plan(&text(10));
            outcome(&r, |p| {
                format!(
                    "{} sequences",
                    p.ranks() * p.micro_steps() * p.sequences_per_micro_step()
                )
            })
        }
        "plan-sequences-65536" => {
            let r = Planner::new(Tokens::new(1.0).ok()?)
                .ranks(1)
                .seq_len(1024)
                .sync(SyncModel::Phase)
                .sequences_per_micro_step(65_536)
                .plan(&text(10));
            outcome(&r, |p| {
                format!(
                    "{} sequences",
                    p.ranks() * p.micro_steps() * p.sequences_per_micro_step()
                )
            })
        }
        "plan-ranks-n-1e5" => {
            // As many ranks as samples, the most `ranks` may be.
            let r = Planner::new(Preset::Qwen25Vl7b.cost_model())
                .ranks(100_000)
                .seq_len(8192)
                .sync(SyncModel::Phase)
                .plan(&vlm(100_000));
            outcome(&r, |p| {
                format!(
                    "{} sequences",
                    p.ranks() * p.micro_steps() * p.sequences_per_micro_step()
                )
            })
        }
        "plan-refine-worst-1e5" => {
            // Two ranks, one micro-step of n / 2 one-sample sequences each:
            // the largest micro-batches the refinement weighs.
            let n = 100_000;
            let r = Planner::new(Preset::Qwen25Vl7b.cost_model())
                .ranks(2)
                .seq_len(8192)
                .sync(SyncModel::Phase)
                .micro_steps(1)
                .sequences_per_micro_step(n / 2)
                .plan(&vlm(n));
            outcome(&r, |p| format!("ratio {:.4}", p.report().ratio()))
        }
        "plan-65536-over-1024" => {
            let r = Planner::new(Preset::Qwen25Vl7b.cost_model())
                .ranks(1024)
                .seq_len(8192)
                .sync(SyncModel::Phase)
                .plan(&vlm(65_536));
            outcome(&r, |p| format!("ratio {:.4}", p.report().ratio()))
        }
        _ => return None,
    })
}

const CASES: [&str; 16] = [
    "pack-dims-65536",
    "pack-dims-65537",
    "pack-ffd-1e6",
    "partition-parts-65536",
    "partition-parts-2^40",
    "partition-lpt-1e5-k1000",
    "partition-default-1e5-k1000",
    "partition-perdim-equal-5000-k250",
    "partition-infeasible-cap-20000-k100",
    "plan-micro-steps-65536",
    "plan-micro-steps-65536-phase",
    "plan-micro-steps-u32max",
    "plan-sequences-65536",
    "plan-ranks-n-1e5",
    "plan-refine-worst-1e5",
    "plan-65536-over-1024",
];

fn main() {
    let case = std::env::args().nth(1).unwrap_or_default();
    if case == "list" || case.is_empty() {
        println!("{}", CASES.join(" "));
        return;
    }
    let start = Instant::now();
    match run(&case) {
        Some(out) => println!("{case}: {out} ({:.3} s)", start.elapsed().as_secs_f64()),
        None => {
            eprintln!("unknown case {case:?}; known: {}", CASES.join(" "));
            std::process::exit(2);
        }
    }
}

//! Plans of a model that is not additive (a cost per packed row, attention over the whole row) on
//! the scenarios' batches: the predicted step time, its ratio to the lower bound and the planning
//! time (the thread's CPU time on Linux, else wall time), every sync model (its tables are in the
//! history of BENCHMARKS.md: `git show 99d715a:BENCHMARKS.md`, "Polish on the exact costs ... (issue 22, fourth pass)").
//!
//! The model, per scenario of sequence length `L`: 1 a token, 2 an image token, `0.3 / L` times
//! the row's tokens squared (a full row's attention is 30% of its tokens' cost), 1,000 a row in
//! the language phase and 500 in the vision phase, 20 a sample.
//!
//! ```sh
//! cargo run --release --example row_costs_table -- [N=4096] [RANKS=64] [SEED=42]
//! ```

use std::time::{Duration, Instant};

use microbatch::cost::{Linear, Term};
use microbatch::plan::{Planner, SyncModel};
use microbatch::scenario::Scenario;

/// The CPU time of this thread so far (`/proc/thread-self/schedstat`), `None` off Linux.
fn thread_cpu() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns: u64 = stat.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(ns))
}

fn main() -> Result<(), microbatch::Error> {
    let arg = |i: usize, default: u64| {
        std::env::args()
            .nth(i)
            .map_or(default, |a| a.parse().expect("an integer argument"))
    };
    let (n, ranks, seed) = (arg(1, 4096) as usize, arg(2, 64) as usize, arg(3, 42));
    println!("| scenario | sync | A | predicted | predicted / bound | planning (ms) |");
    println!("|---|---|---|---|---|---|");
    for scenario in Scenario::ALL {
        let l = f64::from(scenario.seq_len());
        let model = Linear::new([
            (Term::Tokens, 1.0),
            (Term::ImageTokens, 2.0),
            (Term::RowAttention, 0.3 / l),
            (Term::Groups, 1000.0),
            (Term::VisionGroups, 500.0),
            (Term::Samples, 20.0),
        ])?;
        let samples = scenario.generate(n, seed);
        for sync in [SyncModel::Step, SyncModel::MicroStep, SyncModel::Phase] {
            let mut planner = Planner::new(model)
                .ranks(ranks)
                .seq_len(scenario.seq_len())
                .sync(sync);
            if let Some(units) = scenario.max_units() {
                planner = planner.max_units(units);
            }
            let (cpu, wall) = (thread_cpu(), Instant::now());
            let plan = planner.plan(&samples)?;
            let took = match (cpu, thread_cpu()) {
                (Some(a), Some(b)) => b - a,
                _ => wall.elapsed(),
            };
            let r = plan.report();
            println!(
                "| {} | {sync:?} | {} | {:.6e} | {:.4} | {:.1} |",
                scenario.name(),
                plan.micro_steps(),
                r.predicted,
                r.ratio(),
                took.as_secs_f64() * 1e3
            );
        }
    }
    Ok(())
}

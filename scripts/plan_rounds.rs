//! Rounds of planning one `anyres-mix` batch with every sync model, for
//! `scripts/benchmarks.py --against-old`: the script compiles this one file,
//! unchanged, against today's crate and against the crate at an older
//! commit (each in a throwaway package under `target/benchmarks/`), and runs
//! the two programs in turn, so that both versions are timed by the same
//! code on the same batch. It uses only the API that both versions have.
//!
//! Usage: `plan-rounds <samples> <ranks> <rounds>`. Prints the batch's
//! digest (`batch <samples> <tokens> <hash>`: both programs must plan the
//! same batch), then per sync model one `warm-up` line (a plan not timed, with its ratio over the lower bound
//! and its fingerprint), then per round and sync model one line
//! `round <i> <sync> <seconds> <ratio> <fingerprint>`.

use microbatch::plan::SyncModel;
use microbatch::scenario::Scenario;
use std::hint::black_box;
use std::time::Instant;

fn arg(args: &[String], i: usize, what: &str) -> usize {
    match args.get(i).map(|a| a.parse()) {
        Some(Ok(v)) => v,
        _ => {
            eprintln!("usage: plan-rounds <samples> <ranks> <rounds>: argument {i} ({what}) missing or not a count");
            std::process::exit(2);
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n = arg(&args, 1, "samples");
    let ranks = arg(&args, 2, "ranks");
    let rounds = arg(&args, 3, "rounds");
    let batch = Scenario::AnyresMix.generate(n, 42);
    let tokens: u64 = batch.iter().map(|s| s.sample().tokens()).sum();
    let hash = batch.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, s| {
        (h ^ s.id() ^ s.sample().tokens().rotate_left(32)).wrapping_mul(0x100_0000_01b3)
    });
    println!("batch {} {tokens} {hash:016x}", batch.len());
    let planners: Vec<_> = SyncModel::ALL
        .iter()
        .map(|&sync| (sync, Scenario::AnyresMix.planner(ranks).sync(sync)))
        .collect();
    for (sync, planner) in &planners {
        let plan = planner.plan(&batch).expect("the scenario's batch plans");
        println!(
            "warm-up {sync} {:.6} {:016x}",
            plan.report().ratio(),
            plan.fingerprint()
        );
    }
    for round in 0..rounds {
        for (sync, planner) in &planners {
            let started = Instant::now();
            let plan = planner
                .plan(black_box(&batch))
                .expect("the scenario's batch plans");
            let seconds = started.elapsed().as_secs_f64();
            println!(
                "round {round} {sync} {seconds:.6} {:.6} {:016x}",
                plan.report().ratio(),
                plan.fingerprint()
            );
        }
    }
}

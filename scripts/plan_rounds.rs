//! Today's planner against the crate at an older commit, in one process, for
//! `scripts/benchmarks.py --against-old`: the script builds this file as the
//! one program of a throwaway package under `target/benchmarks/against-old/`
//! whose dependencies are this repository's crate (`microbatch`) and the
//! crate at the older commit, extracted and renamed `microbatch_old` (`old`
//! here). Each version generates the same `anyres-mix` batch (the program
//! checks it) and plans it with every sync model, through the API that both
//! versions have; the rounds alternate the two versions plan by plan, so that
//! a load on the machine hits both alike.
//!
//! Usage: `plan-rounds <samples> <ranks> <rounds>`. Prints the batch
//! (`batch <samples> <tokens> <hash>`), one `warm-up <version> <sync>
//! <ratio> <fingerprint>` line per version and sync model (a plan not
//! timed), then per round, sync model and version (`old` and `today`, which
//! goes first alternating from round to round) `round <i> <version> <sync>
//! <seconds> <ratio> <fingerprint>`; `<ratio>` is the plan's predicted step
//! time over its lower bound.

use std::hint::black_box;
use std::time::Instant;

/// What one plan gives: seconds to plan, predicted time over the bound, fingerprint.
type Outcome = (f64, f64, u64);

/// A version's batch digest and, per sync model (by name), a closure that plans the batch once.
type Side = ((usize, u64, u64), Vec<(String, Box<dyn Fn() -> Outcome>)>);

/// The batch and planners of one version of the crate (`$krate`: `microbatch` or `old`).
macro_rules! side {
    ($krate:ident, $n:expr, $ranks:expr) => {{
        use $krate::plan::SyncModel;
        use $krate::scenario::Scenario;
        let batch = std::rc::Rc::new(Scenario::AnyresMix.generate($n, 42));
        let tokens: u64 = batch.iter().map(|s| s.sample().tokens()).sum();
        let hash = batch.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, s| {
            (h ^ s.id() ^ s.sample().tokens().rotate_left(32)).wrapping_mul(0x100_0000_01b3)
        });
        let plans: Vec<(String, Box<dyn Fn() -> Outcome>)> = SyncModel::ALL
            .iter()
            .map(|&sync| {
                let planner = Scenario::AnyresMix.planner($ranks).sync(sync);
                let batch = std::rc::Rc::clone(&batch);
                let plan = move || {
                    let started = Instant::now();
                    let plan = planner
                        .plan(black_box(&batch[..]))
                        .expect("the scenario's batch plans");
                    let seconds = started.elapsed().as_secs_f64();
                    (seconds, plan.report().ratio(), plan.fingerprint())
                };
                (sync.to_string(), Box::new(plan) as Box<dyn Fn() -> Outcome>)
            })
            .collect();
        let side: Side = ((batch.len(), tokens, hash), plans);
        side
    }};
}

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
    let sides = [("old", side!(old, n, ranks)), ("today", side!(microbatch, n, ranks))];
    let ((count, tokens, hash), _) = &sides[0].1;
    if sides[1].1 .0 != sides[0].1 .0 {
        eprintln!(
            "the two versions generated different batches: {:?} against {:?}",
            sides[0].1 .0,
            sides[1].1 .0
        );
        std::process::exit(1);
    }
    println!("batch {count} {tokens} {hash:016x}");
    let syncs: Vec<&String> = sides[1].1 .1.iter().map(|(s, _)| s).collect();
    let old_syncs: Vec<&String> = sides[0].1 .1.iter().map(|(s, _)| s).collect();
    if syncs != old_syncs {
        eprintln!("the two versions have different sync models: {old_syncs:?} against {syncs:?}");
        std::process::exit(1);
    }
    for (version, (_, plans)) in &sides {
        for (sync, plan) in plans {
            let (_, ratio, print) = plan();
            println!("warm-up {version} {sync} {ratio:.6} {print:016x}");
        }
    }
    for round in 0..rounds {
        for i in 0..syncs.len() {
            let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
            for k in order {
                let (version, (_, plans)) = &sides[k];
                let (sync, plan) = &plans[i];
                let (seconds, ratio, print) = plan();
                println!("round {round} {version} {sync} {seconds:.6} {ratio:.6} {print:016x}");
            }
        }
    }
}

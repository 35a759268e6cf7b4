//! The quality tables of `BENCHMARKS.md` (written by `scripts/benchmarks.py`): what the
//! algorithms produce on the instances the benches time, against the lower bounds.
//!
//! - `pack`: bins over the Martello-Toth L2 lower bound and packing efficiency (sizes over the
//!   bins' capacity) of every packing algorithm on the inputs of `benches/pack.rs`;
//! - `partition`: the largest part over the lower bound (`max(ceil(sum / k), largest item)`) of
//!   LPT, Karmarkar-Karp, refinement of LPT and the default `Partitioner`, on the inputs of
//!   `benches/partition.rs` and on verl's workload `24576 T + T^2` of each scenario;
//! - `gain`: for each scenario at 64 and 1,024 ranks (64 samples a rank, seed 42, the
//!   scenario's planner), the predicted step time of what users run without the planner
//!   (`Report::users_baseline`: `DistributedSampler`'s deal, fixed micro-batches of equal
//!   count, first fit) and of the naive packed plan (`Report::baseline`) over the plan's.
//!
//! ```sh
//! cargo run --release --features scenarios --example quality_table -- pack [N,...]
//! cargo run --release --features scenarios --example quality_table -- partition
//! cargo run --release --features scenarios --example quality_table -- gain [RANKS,...]
//! ```

use microbatch::pack::{self, Packing, StreamingPacker};
use microbatch::partition::{karmarkar_karp, lpt, refine, Partitioner};
use microbatch::plan::SyncModel;
use microbatch::scenario::Scenario;
use microbatch::{Error, Item};

#[path = "../benches/inputs/mod.rs"]
mod inputs;
use inputs::{pack_lengths, pack_samples, uniform_lengths, CAPACITY, TILES};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_default();
    let list = |arg: Option<String>, default: &[usize]| -> Result<Vec<usize>, String> {
        match arg {
            None => Ok(default.to_vec()),
            Some(a) => a
                .split(',')
                .map(|x| x.trim().parse().map_err(|e| format!("{x:?}: {e}")))
                .collect(),
        }
    };
    match mode.as_str() {
        "pack" => pack_table(&list(args.next(), &[10_000, 1_000_000])?)?,
        "partition" => partition_table()?,
        "gain" => gain_table(&list(args.next(), &[64, 1024])?)?,
        _ => {
            return Err(format!(
                "usage: quality_table pack [N,...] | partition | gain [RANKS,...] (got {mode:?})"
            )
            .into())
        }
    }
    Ok(())
}

/// One row of the packing table: `bins` against the L2 bound of `bound`
/// (a packing of the same items), the efficiency on the first dimension.
fn pack_row(input: &str, n: usize, name: &str, bins: usize, l2: u64, first_dim_sum: u64) {
    let efficiency = first_dim_sum as f64 / (bins as f64 * f64::from(CAPACITY));
    println!(
        "| {input} | {n} | {name} | {bins} | {l2} | {:.4} | {:.2}% |",
        bins as f64 / l2 as f64,
        100.0 * efficiency
    );
}

fn pack_table(sizes: &[usize]) -> Result<(), Error> {
    println!("| input | n | algorithm | bins | L2 bound | bins / bound | efficiency |");
    println!("|---|---:|---|---:|---:|---:|---:|");
    type Pack1 = fn(&[u32], u32) -> Result<Packing<u32>, Error>;
    type Pack2 = fn(&[[u32; 2]], [u32; 2]) -> Result<Packing<u32>, Error>;
    let one: [(&str, Pack1); 5] = [
        ("first_fit_decreasing", pack::first_fit_decreasing),
        ("best_fit_decreasing", pack::best_fit_decreasing),
        ("first_fit", pack::first_fit),
        ("best_fit", pack::best_fit),
        ("next_fit", pack::next_fit),
    ];
    let two: [(&str, Pack2); 4] = [
        ("first_fit_decreasing", pack::first_fit_decreasing),
        ("best_fit_decreasing", pack::best_fit_decreasing),
        ("first_fit", pack::first_fit),
        ("best_fit", pack::best_fit),
    ];
    for &n in sizes {
        // The seeds of `benches/pack.rs`: the size itself.
        let lengths = pack_lengths(n, n as u64);
        let sum: u64 = lengths.iter().map(|&x| u64::from(x)).sum();
        let l2 = pack::lower_bounds(&lengths, CAPACITY)?.l2;
        for (name, f) in one {
            pack_row("tokens", n, name, f(&lengths, CAPACITY)?.len(), l2, sum);
        }
        let mut packer = StreamingPacker::new(CAPACITY, 4096)?;
        let mut bins = 0;
        for &x in &lengths {
            packer
                .push(x)
                .expect("every bench length fits the capacity");
            while packer.pop().is_some() {
                bins += 1;
            }
        }
        bins += packer.finish().len();
        pack_row("tokens", n, "streaming FFD, buffer 4096", bins, l2, sum);
    }
    for &n in sizes {
        let samples = pack_samples(n, n as u64);
        let sum: u64 = samples.iter().map(|s| u64::from(s[0])).sum();
        let l2 = pack::lower_bounds(&samples, [CAPACITY, TILES])?.l2;
        for (name, f) in two {
            let bins = f(&samples, [CAPACITY, TILES])?.len();
            pack_row("(tokens, tiles)", n, name, bins, l2, sum);
        }
    }
    Ok(())
}

/// Largest part over the lower bound of every partitioner on `items`.
fn partition_row<I: Item + Copy>(input: &str, items: &[I], k: usize) -> Result<(), Error> {
    let start = lpt(items, k)?;
    let cells = [
        start.ratio(),
        karmarkar_karp(items, k)?.ratio(),
        refine(items, &start)?.ratio(),
        Partitioner::new(k).partition(items)?.ratio(),
    ];
    print!("| {input} | {} | {k} |", items.len());
    for r in cells {
        print!(" {r:.6} |");
    }
    println!();
    Ok(())
}

fn partition_table() -> Result<(), Error> {
    println!("| input | n | k | lpt | karmarkar_karp | refine (of LPT) | Partitioner (default) |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    // The seeds of `benches/partition.rs`'s groups.
    for (n, k, seed) in [
        (10_000, 64, 2),
        (100_000, 64, 2),
        (100_000, 1024, 1),
        (1_000_000, 1024, 1),
    ] {
        partition_row("uniform 1..=16384", &uniform_lengths(n, seed), k)?;
    }
    for s in Scenario::ALL {
        let workload: Vec<u64> = s
            .generate(65_536, 42)
            .iter()
            .map(|x| {
                let t = x.sample().tokens();
                24576 * t + t * t
            })
            .collect();
        partition_row(
            &format!("verl `24576 T + T^2`, {}", s.name()),
            &workload,
            1024,
        )?;
    }
    Ok(())
}

fn gain_table(ranks: &[usize]) -> Result<(), Error> {
    println!("| scenario | R | sync model | A | users' baseline / plan | naive packed / plan | plan / lower bound |");
    println!("|---|---:|---|---:|---:|---:|---:|");
    for s in Scenario::ALL {
        for &r in ranks {
            let batch = s.generate(64 * r, 42);
            for sync in SyncModel::ALL {
                let plan = s.planner(r).sync(sync).plan(&batch)?;
                let rep = plan.report();
                println!(
                    "| {} | {r} | {sync} | {} | {:.4} | {:.4} | {:.4} |",
                    s.name(),
                    plan.micro_steps(),
                    rep.users_baseline / rep.predicted,
                    rep.baseline / rep.predicted,
                    rep.ratio()
                );
            }
        }
    }
    Ok(())
}

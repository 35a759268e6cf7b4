//! Karmarkar-Karp over k = 1,024 parts: uniform weights against verl's workload
//! `24576 T + T^2` on each scenario's token counts, the inputs alternated in one
//! process, medians over rounds, each as a ratio to the uniform input (the history of
//! BENCHMARKS.md: `git show 99d715a:BENCHMARKS.md`, "Karmarkar-Karp on heavy-tailed weights"; BENCHMARKS.md times the same
//! inputs with `benches/partition.rs`).
//!
//! ```sh
//! cargo run --release --example kk_table -- [N=65536] [ROUNDS=9] [SCENARIO]
//! ```

use microbatch::partition::karmarkar_karp;
use microbatch::scenario::Scenario;
use std::time::Instant;

fn main() {
    let k = 1024;
    let n: usize = std::env::args()
        .nth(1)
        .map_or(65536, |a| a.parse().unwrap());
    let reps: usize = std::env::args().nth(2).map_or(9, |r| r.parse().unwrap());
    let filter = std::env::args().nth(3);
    let mut rng = 12345u64;
    let uniform: Vec<u64> = (0..n)
        .map(|_| {
            rng = rng
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            1 + (rng >> 33) % 1_000_000
        })
        .collect();
    let mut sets = vec![("uniform".to_string(), uniform)];
    for s in [
        Scenario::LlavaSft,
        Scenario::AnyresMix,
        Scenario::Interleaved,
    ] {
        let w: Vec<u64> = s
            .generate(n, 42)
            .iter()
            .map(|x| {
                let t = x.sample().tokens();
                24576 * t + t * t
            })
            .collect();
        sets.push((s.name().to_string(), w));
    }
    sets.retain(|(name, _)| filter.as_ref().map_or(true, |f| f == name));
    let hash = |p: &microbatch::partition::Partition<u128>| {
        let mut h = 0u64;
        for (i, part) in p.parts().enumerate() {
            for &x in part {
                h = h.wrapping_mul(1_000_003).wrapping_add((x * 31 + i) as u64);
            }
        }
        h
    };
    let mut times = vec![vec![]; sets.len()];
    let mut hashes = vec![0; sets.len()];
    for _ in 0..reps {
        for (i, (_, w)) in sets.iter().enumerate() {
            let t = Instant::now();
            let p = karmarkar_karp(w, k).unwrap();
            times[i].push(t.elapsed().as_secs_f64() * 1e3);
            hashes[i] = hash(&p);
        }
    }
    let med = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let base = med(&mut times[0].clone());
    for (i, (name, _)) in sets.iter().enumerate() {
        let m = med(&mut times[i]);
        println!(
            "{name:12} n={n} k={k} kk {m:8.2} ms ({:.2}x the first) {:016x}",
            m / base,
            hashes[i]
        );
    }
}

//! Online calibration closes the loop: 20 steps of a scenario, each planned
//! with the calibrator's current model (step 1: the uncalibrated preset),
//! every micro-batch "measured" per phase under a hidden truth (the preset's
//! terms at other efficiencies, plus per-image, per-unit, per-sample and
//! per-micro-batch overheads the preset does not know; 3% noise per phase;
//! 2% of micro-batches slowed 2x), observed and refitted at the step
//! boundary.
//!
//! Prints, per step, the truth's step time over its lower bound (phase
//! sync) for the plans of the calibrated model, the uncalibrated preset and
//! the truth itself, and the fit after the step.
//!
//! Run with `cargo run --release --example closed_loop [ranks] [scenario]`
//! (default 64 ranks, every scenario).

#[path = "sim.rs"]
mod sim;

use microbatch::scenario::Scenario;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let ranks: usize = match args.next() {
        Some(r) => r.parse()?,
        None => 64,
    };
    let scenarios: Vec<Scenario> = match args.next() {
        Some(s) => vec![s.parse()?],
        None => Scenario::ALL.to_vec(),
    };
    for scenario in scenarios {
        println!("\n{scenario}, {ranks} ranks, 64 samples a rank, phase sync");
        println!(
            "step | calibrated | preset | truth  | calibrated/truth | rows (slowed) | fit R^2 | rejected | drift"
        );
        let steps = sim::run(scenario, ranks, 20, 1, 0.03, 0.02)?;
        for (i, s) in steps.iter().enumerate() {
            println!(
                "{:>4} | {:>10.4} | {:>6.4} | {:.4} | {:>16.4} | {:>6} ({:>3}) | {:>7.4} | {:>8} | {:.4}",
                i + 1,
                s.calibrated,
                s.preset,
                s.truth,
                s.calibrated / s.truth,
                s.rows,
                s.slowed,
                s.r_squared,
                s.rejected,
                s.drift,
            );
        }
    }
    Ok(())
}

//! Fits a cost model to measured micro-batch times and prints the fit.
//!
//! The table below stands for the warm-up steps of a real run: each row is
//! one micro-batch (its documents, as `(count, tokens)` runs) and the
//! measured forward + backward time of the language model in milliseconds.
//! The times are synthetic: generated from `a = 2.1e-5`, `b = 2.8e-10`,
//! `c = 1.2e-3` with uniform noise of +-2%, so the fit can be compared with
//! the truth.
//! The fit finds non-negative `a`, `b`, `c` in
//! `time = a * sum(T) + b * sum(T^2) + c * n`, and the fitted model is then
//! an ordinary `CostModel` for the planner.
//!
//! Run with `cargo run --example calibrate`.

use microbatch::cost::{
    fit_terms, CostModel, DocumentAttention, Incremental, PerSample, Sample, Tokens,
};

/// `(documents as (count, tokens) runs, measured milliseconds)`.
const TIMINGS: [(&[(usize, u32)], f64); 14] = [
    (&[(4, 4096)], 363.8),
    (&[(1, 16384)], 421.2),
    (&[(24, 512)], 287.1),
    (&[(2, 8192)], 385.6),
    (
        &[(1, 2000), (1, 3000), (1, 1500), (1, 700), (1, 9000)],
        375.2,
    ),
    (&[(1, 32768)], 972.8),
    (&[(48, 256)], 310.4),
    (&[(12, 1024)], 279.7),
    (&[(1, 12000), (3, 200), (1, 300)], 314.2),
    (&[(2, 6000), (1, 4000)], 360.4),
    (&[(1, 24000), (1, 2000)], 724.9),
    (&[(64, 128)], 248.8),
    (&[(5, 3000)], 338.1),
    (&[(1, 20000), (2, 500)], 556.2),
];

fn main() -> Result<(), microbatch::Error> {
    let batches: Vec<Vec<Sample>> = TIMINGS
        .iter()
        .map(|(runs, _)| {
            runs.iter()
                .flat_map(|&(count, tokens)| (0..count).map(move |_| Sample::text_only(tokens)))
                .collect()
        })
        .collect();
    let seconds = TIMINGS.iter().map(|&(_, ms)| ms / 1000.0);

    // One feature per term, each with a unit coefficient.
    let names = ["a (s per token)", "b (s per token^2)", "c (s per sample)"];
    let terms: [&dyn CostModel; 3] = [
        &Tokens::new(1.0)?,
        &DocumentAttention::new(1.0)?,
        &PerSample::new(1.0)?,
    ];
    let fit = fit_terms(&terms, batches.iter().zip(seconds))?;

    println!("fitted {} micro-batches:", fit.rows());
    for (name, c) in names.iter().zip(fit.coefficients()) {
        println!("  {name:<18} = {c:.4e}");
    }
    println!("  R^2                = {:.5}", fit.r_squared());
    println!(
        "  worst relative err = {:.2}% (micro-batch {})",
        100.0 * fit.max_relative_error(),
        fit.worst_row()
    );

    // The fitted coefficients build the model the planner balances by.
    let [a, b, c] = [0, 1, 2].map(|k| fit.coefficients()[k]);
    let model = Tokens::new(a)? + DocumentAttention::new(b)? + PerSample::new(c)?;
    println!("model: {model:?}");
    println!(
        "attention equals the linear term at T = {:.0} tokens",
        if b > 0.0 { a / b } else { f64::INFINITY }
    );

    println!("\n  micro-batch   measured   predicted");
    for (i, (batch, (_, ms))) in batches.iter().zip(TIMINGS).enumerate() {
        let group: Vec<&Sample> = batch.iter().collect(); // borrowed, not cloned
        let predicted = 1000.0 * model.cost(&group).total();
        println!("  {i:>11}   {ms:>6.1} ms   {predicted:>6.1} ms");
    }

    // Incrementally, as the planner evaluates its packed sequences: a state
    // of sums, and "this pack + one more document" in O(1).
    let mut pack = model.empty();
    for s in &batches[4] {
        model.insert(&mut pack, s);
    }
    let next = Sample::text_only(4096);
    println!(
        "\nmicro-batch 4 + one 4096-token document: {:.1} ms",
        1000.0 * model.evaluate_with(&pack, &next).total()
    );
    Ok(())
}

//! Row attention (`language.row_attention`, a dense mask over the packed
//! row): the square of the row's tokens, exact in the incremental state,
//! and recovered by the calibrator from synthetic rows.

use microbatch::cost::{
    AttentionKernel, Calibrator, CostModel, Incremental, Linear, Phases, Preset, Sample, Term,
    Timing,
};

use crate::common::rng::TestRng;

#[test]
fn a_row_costs_the_square_of_its_tokens() -> Result<(), microbatch::Error> {
    let model = Linear::new([(Term::RowAttention, 1.0), (Term::DocumentAttention, 10.0)])?;
    let row = [
        Sample::text_only(3),
        Sample::text_only(4),
        Sample::new(5, [microbatch::cost::Image::new(6)]),
    ];
    let refs: Vec<&Sample> = row.iter().collect();
    // (3 + 4 + 11)^2 + 10 (9 + 16 + 121)
    assert_eq!(model.cost(&refs).language, 324.0 + 1460.0);
    // Incremental insertion in any order gives the same.
    let mut state = model.empty();
    for s in refs.iter().rev() {
        model.insert(&mut state, s);
    }
    assert_eq!(model.evaluate(&state), model.cost(&refs));
    // The floor is the sample alone: every row holding it pays at least that.
    assert_eq!(model.floor(&row[1]), Phases::new(0.0, 16.0 + 160.0));
    Ok(())
}

/// Micro-batches of 1 to 3 rows, each of 1 to 4 text samples.
fn batches(rng: &mut TestRng, n: usize) -> Vec<Vec<Vec<Sample>>> {
    (0..n)
        .map(|_| {
            (0..1 + rng.below(3))
                .map(|_| {
                    (0..1 + rng.below(4))
                        .map(|_| Sample::text_only(50 + rng.below(1500) as u32))
                        .collect()
                })
                .collect()
        })
        .collect()
}

/// The micro-batch's time under `truth`: the sum of its rows' costs, with
/// 0.5% multiplicative noise.
fn time(truth: &Linear, batch: &[Vec<Sample>], rng: &mut TestRng) -> Phases {
    let t: Phases = batch
        .iter()
        .map(|row| truth.cost(&row.iter().collect::<Vec<_>>()))
        .sum();
    t * (1.0 + 0.005 * (2.0 * rng.unit() - 1.0))
}

#[test]
fn the_calibrator_recovers_row_attention() -> Result<(), microbatch::Error> {
    let truth = Linear::new([
        (Term::Tokens, 3e-5),
        (Term::RowAttention, 2e-8),
        (Term::Samples, 4e-4),
        (Term::Groups, 1e-3),
    ])?;
    let mut rng = TestRng::new(22);
    let fallback = Linear::preset_with(Preset::Llava15_7b, AttentionKernel::Dense);
    let mut c = Calibrator::new(fallback);
    let mut varlen = Calibrator::new(Linear::preset(Preset::Llava15_7b));
    for batch in batches(&mut rng, 300) {
        let t = Timing::Phases(time(&truth, &batch, &mut rng));
        c.observe_rows(batch.iter().map(|row| row.iter()), t)?;
        varlen.observe_rows(batch.iter().map(|row| row.iter()), t)?;
    }
    let status = c.refit().clone();
    assert!(status.fitted(), "{:?}", status.fallback());
    let got = c.model().coefficient(Term::RowAttention).unwrap();
    assert!(
        (got / 2e-8 - 1.0).abs() < 0.05,
        "row attention {got}, want 2e-8"
    );
    let tokens = c.model().coefficient(Term::Tokens).unwrap();
    assert!((tokens / 3e-5 - 1.0).abs() < 0.05, "tokens {tokens}");
    assert!(status.max_relative_error().unwrap() < 0.02);
    // Per document (varlen), the same timings fit badly: rows of several
    // samples cost more than their documents' squares tell.
    let per_document = varlen.refit().clone();
    assert!(
        !per_document.fitted() || per_document.max_relative_error().unwrap() > 0.05,
        "{per_document:?}"
    );
    Ok(())
}

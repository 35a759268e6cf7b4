//! Samples and planners the planning tests build alike.

use microbatch::cost::{Phases, Sample, Tokens};
use microbatch::plan::{Planner, StepSample};

/// A text-only sample of `tokens` tokens with id `id`.
pub fn text(id: u64, tokens: u32) -> StepSample {
    StepSample::new(id, Sample::text_only(tokens))
}

/// A planner on one unit of cost a token (`Tokens::new(1.0)`): the cost of a
/// micro-batch is its token count, so expected loads are plain sums.
pub fn tokens_planner(ranks: usize, seq_len: u32) -> Planner<Tokens> {
    Planner::new(Tokens::new(1.0).unwrap())
        .ranks(ranks)
        .seq_len(seq_len)
}

/// Text-only samples of given costs, one a `(tokens, vision cost, language
/// cost)`, with ids `0..`.
pub fn given(items: &[(u32, f64, f64)]) -> Vec<StepSample> {
    items
        .iter()
        .enumerate()
        .map(|(i, &(t, v, l))| {
            let s = Sample::text_only(t)
                .with_cost(Phases::new(v, l))
                .expect("valid costs");
            StepSample::new(i as u64, s)
        })
        .collect()
}

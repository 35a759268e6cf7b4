//! Strategies and helpers of the cost-model tests.

use microbatch::cost::Sample;
use proptest::prelude::*;

/// A cost coefficient: zero (a term switched off) or in `[1e-6, 10)`.
pub fn coef() -> impl Strategy<Value = f64> {
    prop_oneof![Just(0.0), 1e-6f64..10.0]
}

/// A group of samples as the references `CostModel::cost` takes.
pub fn refs(group: &[Sample]) -> Vec<&Sample> {
    group.iter().collect()
}

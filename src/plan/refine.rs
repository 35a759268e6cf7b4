//! Refinement: swaps of samples between sequences that lower the predicted step time.

use alloc::vec::Vec;

use super::planner::{Planner, Prepared};
use super::types::StepSample;
use crate::cost::{Incremental, Phases};

/// Improves the sequences in place (keeping every cap); `order` is the
/// current `slot -> sequence` layout.
pub(crate) fn refine<M: Incremental>(
    _planner: &Planner<M>,
    _prep: &Prepared,
    _samples: &[StepSample],
    _bins: &mut [Vec<u32>],
    _costs: &mut [Phases],
    _order: &mut [u32],
    _steps: usize,
) {
}

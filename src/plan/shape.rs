//! The shape of a plan: `R` ranks, `A` micro-steps, `S` sequences a micro-step, and where each slot lies.

/// `R` ranks times `A` micro-steps times `S` sequences a micro-step: `R * A *
/// S` slots, slot `(rank * A + micro_step) * S + index` holding sequence
/// `index` of `micro_step` on `rank`. A rank's slots are contiguous, and so
/// are the `S` slots of one micro-batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Shape {
    /// `R`.
    pub(crate) ranks: usize,
    /// `A`.
    pub(crate) steps: usize,
    /// `S`.
    pub(crate) per_step: usize,
}

impl Shape {
    /// Every slot: `R * A * S`.
    pub(crate) fn slots(self) -> usize {
        self.ranks * self.steps * self.per_step
    }

    /// The slots of one rank: `A * S`.
    pub(crate) fn per_rank(self) -> usize {
        self.steps * self.per_step
    }

    /// The slots of one micro-step over all ranks: `R * S`.
    pub(crate) fn per_row(self) -> usize {
        self.ranks * self.per_step
    }

    /// The first slot of the micro-batch `micro_step` of `rank`.
    pub(crate) fn micro_batch(self, rank: usize, micro_step: usize) -> usize {
        (rank * self.steps + micro_step) * self.per_step
    }
}

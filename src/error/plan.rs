//! The messages of the planner's errors about a step's samples: too few,
//! groups too large, repeated ids, micro-steps, loss tokens, origins, bytes
//! and plans that do not match their samples.

use core::fmt;

use super::*;

/// The message of `err`, one of this module's variants (called by
/// `Display for Error` for those only).
pub(super) fn fmt(err: &Error, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    match err {
        Error::TooFewSamples { samples, ranks } => write!(
            f,
            "{samples} sample(s) for {ranks} ranks: every rank needs at least one sample \
                 (plan a larger step or fewer ranks)"
        ),
        Error::GroupTooLarge {
            group,
            samples,
            dim: "sequences",
            size,
            cap,
        } => write!(
            f,
            "group {group} ({samples} samples) needs {size} packed sequences, more than the \
                 {cap} one rank holds; every sample of a group lands on one rank: give more \
                 micro-steps (`Planner::micro_steps`), a longer `seq_len` or larger caps, or \
                 split the group"
        ),
        Error::GroupTooLarge {
            group,
            samples,
            dim,
            size,
            cap,
        } => write!(
            f,
            "group {group} ({samples} samples) has {size} {dim} together, more than the {cap} \
                 one packed sequence holds; every sample of a group lands in one sequence: raise \
                 {}, or plan with `GroupScope::Rank` to spread the group over the sequences of \
                 one rank",
            match *dim {
                "units" => "`max_units`",
                "images" => "`max_images`",
                _ => "`seq_len`",
            }
        ),
        Error::DuplicateId { id } => write!(
            f,
            "sample id {id} appears more than once; the ids of a step must be unique"
        ),
        Error::MicroStepsInfeasible { given, smallest } => write!(
            f,
            "{given} micro-step(s) cannot hold the batch under the sequence length and caps; \
                 the smallest feasible number is {smallest}"
        ),
        Error::LossTokens {
            id,
            loss_tokens,
            tokens,
        } => write!(
            f,
            "sample {id} has {loss_tokens} loss tokens but only {tokens} tokens; count as loss \
                 tokens exactly the positions that carry loss (at most the sample's tokens)"
        ),
        Error::PlanMismatch {
            id: Some(id),
            planned,
            given,
        } => write!(
            f,
            "the plan's sample {id} is not among the {given} sample(s) given (the plan has \
                 {planned}); pass the samples the plan was made from"
        ),
        Error::PlanMismatch {
            id: None,
            planned,
            given,
        } => write!(
            f,
            "the plan has {planned} sample(s) but {given} were given; pass the samples the \
                 plan was made from"
        ),
        Error::BytesOverflow { id } => write!(
            f,
            "the bytes of the samples with an origin sum beyond u64::MAX \
                 (18446744073709551615) at sample {id}; give the bytes in a larger unit \
                 (KiB, MiB) so that the traffic can be counted exactly"
        ),
        // Not a variant of this module: nothing (never called so).
        _ => Ok(()),
    }
}

/// The message of [`Error::Invalid`] at a sample's origin.
pub(super) fn invalid(
    at: Locator,
    value: Scalar,
    _reason: InvalidReason,
    f: &mut fmt::Formatter<'_>,
) -> fmt::Result {
    match at {
        Locator::Origin { id, ranks } => write!(
            f,
            "sample id {id} has origin rank {value} but the plan has {ranks} ranks \
             (0 to {}); give each sample the rank whose data loader holds it",
            ranks.saturating_sub(1)
        ),
        // Not a locator of this module: nothing (never called so).
        _ => Ok(()),
    }
}

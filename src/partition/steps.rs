//! The steps every entry point shares, the free functions ([`lpt`],
//! [`karmarkar_karp`], [`exact`], [`refine`]) and the [`Partitioner`]
//! alike: checking the part count, the default refinement rounds, the proof
//! that a cap is infeasible, and turning an assignment by rank into a
//! [`Partition`]. Below every algorithm, so that none calls back into the
//! builder that dispatches to it.
//!
//! [`lpt`]: super::lpt
//! [`karmarkar_karp`]: super::karmarkar_karp
//! [`exact`]: super::exact
//! [`refine`]: super::refine
//! [`Partitioner`]: super::Partitioner

use alloc::vec;
use alloc::vec::Vec;
use core::cmp::Ordering;

use crate::error::Error;
use crate::grouped::Grouped;
use crate::num::Total;

use super::bounds;
use super::instance::{self, Config, Instance};
use super::options::Objective;
use super::result::Partition;

/// The most parts accepted with empty parts allowed, when there are fewer
/// items: a result holds every part, so `k` is bounded by the input (or by
/// this constant, a few megabytes of parts).
const MAX_EMPTY_PARTS: usize = 1 << 16;

/// Checks the part count `k` for `n` items: [`Error::ZeroParts`] for
/// none, [`Error::TooManyParts`] for more parts than items unless empty parts
/// are allowed, [`Error::Invalid`] at a [setting](crate::Locator::Setting)
/// (`parts`) above `max(n, 65536)`.
pub(super) fn check_parts(n: usize, k: usize, allow_empty: bool) -> Result<(), Error> {
    if k == 0 {
        return Err(Error::ZeroParts);
    }
    if k > n && !allow_empty {
        return Err(Error::TooManyParts { parts: k, items: n });
    }
    if k > n.max(MAX_EMPTY_PARTS) {
        return Err(Error::setting(
            "parts",
            u64::try_from(k).unwrap_or(u64::MAX),
            "at most the number of items, or at most 65536 when there are \
                          fewer items (with empty parts allowed)",
        ));
    }
    Ok(())
}

/// The options of the free functions: `k` parts, [`Objective::MaxPart`],
/// no constraint.
pub(super) fn unconstrained<T>(k: usize) -> Config<T> {
    Config {
        k,
        objective: Objective::MaxPart,
        equal_count: false,
        allow_empty: false,
        cap: None,
    }
}

/// The default most improving steps of refinement: `16 (n + k)`.
pub(super) fn default_rounds(n: usize, k: usize) -> usize {
    n.saturating_add(k).saturating_mul(16)
}

/// [`Error::CapExceeded`] for the best part `best` in dimension `dim` under
/// `cfg`, with the part count that works (if one was found).
pub(super) fn cap_exceeded<T: Total>(
    cfg: &Config<T>,
    dim: usize,
    best: T,
    proven: bool,
    parts_needed: Option<usize>,
) -> Error {
    let cap = cfg.cap.as_deref().map_or(T::ZERO, |c| c[dim]);
    Error::CapExceeded {
        parts: cfg.k,
        dim,
        cap: instance::scalar(cap),
        best: instance::scalar(best),
        proven,
        parts_needed,
    }
}

/// The first dimension whose cap is below a lower bound on the largest
/// part of every partition under `cfg` (the sum over `k`, the largest item,
/// the items that must share a part, the equal counts): a proof that the
/// cap is infeasible.
pub(super) fn infeasible_dim<T: Total>(inst: &Instance<T>, cfg: &Config<T>) -> Option<usize> {
    let cap = cfg.cap.as_ref()?;
    (0..inst.d)
        .find(|&j| instance::cmp(bounds::dim_bound(inst, cfg, j), cap[j]) == Ordering::Greater)
}

/// The largest of the sums of dimension `j` (`sums` is `k * d`).
pub(super) fn column_max<T: Total>(sums: &[T], d: usize, j: usize) -> T {
    sums.iter()
        .skip(j)
        .step_by(d)
        .fold(T::ZERO, |acc, &x| instance::max(acc, x))
}

/// Turns an assignment by rank into a [`Partition`], with its sums computed
/// afresh in rank order (the sums it reports); the first (dimension, part
/// sum) above the cap instead, if any, so that a result above the cap is
/// never returned.
pub(super) fn finish<T: Total>(
    inst: &Instance<T>,
    cfg: &Config<T>,
    part_of: Vec<usize>,
    proven: bool,
) -> Result<Partition<T>, (usize, T)> {
    let sums = inst.sums(cfg.k, &part_of);
    if let Some(over) = cfg
        .cap
        .as_ref()
        .and_then(|cap| instance::cap_violation(cap, inst.d, &sums))
    {
        return Err(over);
    }
    Ok(assemble(inst, cfg, part_of, sums, proven))
}

/// [`finish`] without a cap (`cfg.cap` is `None`: nothing to check).
pub(super) fn uncapped<T: Total>(
    inst: &Instance<T>,
    cfg: &Config<T>,
    part_of: Vec<usize>,
    proven: bool,
) -> Partition<T> {
    let sums = inst.sums(cfg.k, &part_of);
    assemble(inst, cfg, part_of, sums, proven)
}

/// The [`Partition`] of an assignment by rank whose part sums are `sums`.
fn assemble<T: Total>(
    inst: &Instance<T>,
    cfg: &Config<T>,
    part_of: Vec<usize>,
    sums: Vec<T>,
    proven: bool,
) -> Partition<T> {
    let k = cfg.k;
    let mut counts = vec![0usize; k];
    for &p in &part_of {
        counts[p] += 1;
    }
    let ranked = part_of.iter().zip(&inst.index).map(|(&p, &i)| (p, i));
    let (items, offsets) = Grouped::scatter(counts, ranked).into_flat();
    let objective =
        instance::objective_value(cfg.objective, k, inst.od, &inst.objective_sums(k, &sums));
    let lower_bound = bounds::objective_bound(inst, cfg);
    let proven = proven || instance::cmp(objective, lower_bound) != Ordering::Greater;
    Partition::from_flat(items, offsets, inst.d, sums, objective, lower_bound, proven)
}

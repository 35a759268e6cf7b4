//! Shared pieces of the stages that trade samples between groups (refine, pair, search): a group's value in a barrier, the counted work budget and the pinned positions.

use core::cell::Cell;

use crate::cost::Phases;

/// The value of a group in barrier `d`: vision (0), language (1) or the
/// total (2).
#[inline]
pub(crate) fn key(c: Phases, d: usize) -> f64 {
    match d {
        0 => c.vision,
        1 => c.language,
        _ => c.total(),
    }
}

/// Spends `units` of the work left in `left`; `false` (and nothing left)
/// when it does not hold them. Work is counted, not timed, so that a stage
/// stops at the same place on every rank.
#[inline]
pub(crate) fn spend(left: &Cell<u64>, units: u64) -> bool {
    let have = left.get();
    left.set(have.saturating_sub(units));
    have >= units
}

/// Whether position `p` is pinned (a chunk of a group on its home rank)
/// in `pinned` (empty: none is).
#[inline]
pub(crate) fn pinned(pinned: &[bool], p: u32) -> bool {
    pinned.get(p as usize).copied().unwrap_or(false)
}

//! The state step 3 (the exchange, its splits and swaps) shares: what it reads of a sample ([`Info`]), the layout it changes with its sizes, loads and change counters ([`Search`], whose steps are implemented in `exchange.rs`, `split.rs` and `swap.rs`), and the arithmetic of sizes.

use alloc::vec::Vec;

use super::super::prepare::Prepared;
use super::super::shape::Shape;
use super::super::sync::SyncModel;
use super::budget::Budget;
use super::homes::Homes;
use crate::cost::Phases;

/// What the search reads of a sample, in one place (one cache line).
#[derive(Clone, Copy)]
pub(super) struct Info {
    pub(super) cost: Phases,
    pub(super) size: [u32; 3],
    pub(super) origin: u32,
    pub(super) bytes: u64,
}

/// Step 3's state: a layout, its sizes and loads, and when each rank,
/// node and group last changed.
pub(super) struct Search<'a> {
    /// Every sample's cost, size, origin and bytes, by position.
    pub(super) info: Vec<Info>,
    pub(super) prep: &'a Prepared,
    pub(super) homes: &'a Homes,
    pub(super) budget: Budget,
    pub(super) slots: Vec<Vec<u32>>,
    pub(super) slot_of: Vec<u32>,
    /// Tokens, units, images of every slot.
    pub(super) size: Vec<[u64; 3]>,
    /// Samples of every rank (a rank is never emptied).
    pub(super) count: Vec<usize>,
    /// Samples of every rank held by another rank or by none.
    pub(super) foreign: Vec<usize>,
    /// Changes applied so far; the last change to every rank, every node
    /// (rank without nodes) and every group; the changes counted when
    /// every sample was last weighed.
    pub(super) tick: u64,
    pub(super) changed: Vec<u64>,
    pub(super) node_changed: Vec<u64>,
    pub(super) group_changed: Vec<u64>,
    pub(super) seen: Vec<u64>,
    /// The cost of every group.
    pub(super) load: Vec<Phases>,
    /// The re-splits this run may still weigh ([`Locality::effort`](super::Locality::effort)).
    pub(super) resplits: u64,
}

/// Every slot ascending and, for [`SyncModel::Step`], each rank's
/// sequences in the data loader's order (by first position).
pub(super) fn normalize(sync: SyncModel, shape: Shape, slots: &mut [Vec<u32>]) {
    for s in slots.iter_mut() {
        s.sort_unstable();
    }
    if sync == SyncModel::Step {
        for rank in slots.chunks_mut(shape.per_rank()) {
            rank.sort_by_key(|s| s.first().copied().unwrap_or(u32::MAX));
        }
    }
}

/// The sum of two sizes (tokens, units, images), saturating.
#[inline]
pub(super) fn add(a: [u64; 3], b: [u64; 3]) -> [u64; 3] {
    core::array::from_fn(|d| a[d].saturating_add(b[d]))
}

/// The difference of two sizes, saturating at zero.
#[inline]
pub(super) fn sub3(a: [u64; 3], b: [u64; 3]) -> [u64; 3] {
    core::array::from_fn(|d| a[d].saturating_sub(b[d]))
}

//! Where every sample lives and what moving it costs.
//!
//! [`Homes`] holds every sample's origin (the rank whose data loader holds
//! it) and bytes, by position, and the node size; [`weighted`] is what a
//! sample weighs on a rank (0 at home, its bytes away, times
//! [`BETWEEN_NODES`] or [`INSIDE_NODE`] with nodes) and [`Homes::weight`]
//! the same with the count of samples moved as a tie-break, exact in
//! `u128`. [`check_origins`] refuses origins that are not ranks and bytes
//! whose sum overflows. Every lookup is O(1); building is O(n).

use alloc::vec::Vec;

use super::super::finish::Context;
use super::super::prepare::Prepared;
use super::super::shape::Shape;
use super::super::tuning::{BETWEEN_NODES, INSIDE_NODE};
use crate::error::{Error, InvalidReason, Locator, Scalar};

/// No origin.
pub(super) const NONE: u32 = u32::MAX;

/// Every sample's origin (`NONE` for none) and bytes, by position, and the
/// node size: what a placement costs.
pub(crate) struct Homes {
    /// Per position: the origin (`NONE` for none) and the bytes' low and
    /// high halves, side by side, so that a lookup at a position in no
    /// order reads one cache line.
    pub(super) home: Vec<[u32; 3]>,
    /// Ranks a node, at least 1, if nodes are set.
    pub(super) node: Option<usize>,
}

impl Homes {
    /// The homes of `prep`'s samples, or `None` when no sample has an
    /// origin. Origins are checked below `ranks` before (see
    /// [`check_origins`]). O(n).
    pub(crate) fn new<M>(
        prep: &Prepared,
        cx: &Context<'_, M>,
        node: Option<usize>,
    ) -> Option<Self> {
        let home = prep
            .items
            .iter()
            .map(|e| {
                let s = &cx.samples[e.input as usize];
                let origin = s
                    .origin()
                    .map_or(NONE, |o| u32::try_from(o).unwrap_or(NONE));
                Homes::record(origin, s.bytes())
            })
            .collect();
        let homes = Homes {
            home,
            node: node.map(|n| n.max(1)),
        };
        let any = homes.origins().any(|o| o != NONE);
        any.then_some(homes)
    }

    /// A sample's record: its origin (`NONE` for none), then its bytes'
    /// low and high halves.
    #[inline]
    pub(super) fn record(origin: u32, bytes: u64) -> [u32; 3] {
        [origin, bytes as u32, (bytes >> 32) as u32]
    }

    /// The origin of sample `p` (`NONE` for none).
    #[inline]
    pub(super) fn origin(&self, p: usize) -> u32 {
        self.home[p][0]
    }

    /// The bytes of sample `p`.
    #[inline]
    pub(super) fn bytes(&self, p: usize) -> u64 {
        self.of(p).1
    }

    /// Every sample's origin (`NONE` for none), by position.
    pub(super) fn origins(&self) -> impl Iterator<Item = u32> + Clone + '_ {
        self.home.iter().map(|h| h[0])
    }

    /// The origin and bytes of sample `p`, from one read.
    #[inline]
    pub(super) fn of(&self, p: usize) -> (u32, u64) {
        let h = self.home[p];
        (h[0], u64::from(h[1]) | u64::from(h[2]) << 32)
    }

    /// The node of rank `r` (the rank itself without nodes).
    #[inline]
    pub(super) fn node_of(&self, r: usize) -> usize {
        r / self.node.unwrap_or(1)
    }

    /// The weight of sample `p` on rank `rank` in the exchange: its
    /// weighted bytes ([`weighted`]) times 64, plus 1 when it is away from
    /// home; 0 at home or without an origin. A sum of fewer than 64
    /// weights (a pair of sequences holds at most
    /// [`LOCALITY_PAIR`](super::super::tuning::LOCALITY_PAIR) samples)
    /// orders as (weighted bytes, samples moved), so that moving a sample
    /// of no bytes is never free.
    ///
    /// Weights are `u128`, so that they and the sums of a few of them are
    /// exact for any `u64` bytes: `u64::MAX` bytes between nodes weigh
    /// `64 * 8 * u64::MAX + 1 < 2^74`.
    #[inline]
    pub(super) fn weight(&self, p: usize, rank: usize) -> u128 {
        let (o, b) = self.of(p);
        self.tied(o, b, rank)
    }

    /// [`Homes::weight`] of a sample of origin `origin` and `bytes` bytes.
    #[inline]
    pub(super) fn tied(&self, origin: u32, bytes: u64, rank: usize) -> u128 {
        let away = origin != NONE && origin as usize != rank;
        (weighted(self.node, origin, bytes, rank) << 6) + u128::from(away)
    }

    /// The weighted bytes and the samples moved of a layout (exact: at
    /// most `n * 8 * u64::MAX < 2^128` for `n < 2^61` samples). O(n + K).
    pub(super) fn cost(&self, shape: Shape, slots: &[Vec<u32>]) -> (u128, usize) {
        let mut total = (0u128, 0usize);
        for (k, members) in slots.iter().enumerate() {
            let rank = k / shape.per_rank();
            for &p in members {
                let (o, b) = self.of(p as usize);
                total.0 += weighted(self.node, o, b, rank);
                total.1 += usize::from(o != NONE && o as usize != rank);
            }
        }
        total
    }
}

/// The weight of a sample with origin `origin` (`NONE` for none) and
/// `bytes` bytes on rank `rank`: 0 at home or without an origin, its bytes
/// without nodes, its bytes times [`INSIDE_NODE`] or [`BETWEEN_NODES`] with
/// nodes of `node` ranks. Exact (`u128`).
#[inline]
fn weighted(node: Option<usize>, origin: u32, bytes: u64, rank: usize) -> u128 {
    if origin == NONE || origin as usize == rank {
        return 0;
    }
    let bytes = u128::from(bytes);
    match node {
        None => bytes,
        Some(n) if origin as usize / n == rank / n => bytes * INSIDE_NODE,
        Some(_) => bytes * BETWEEN_NODES,
    }
}

/// [`Error::Invalid`] at an [origin](crate::Locator::Origin) for the sample of
/// smallest id whose origin is not below `ranks`; else [`Error::BytesOverflow`]
/// for the sample (in id order) at which the bytes of the samples with an
/// origin sum beyond `u64::MAX`. Past this check every sum of those bytes (the
/// exchange's traffic, per rank, between nodes, in all) is exact in `u64`.
/// O(n).
pub(crate) fn check_origins<M>(
    prep: &Prepared,
    cx: &Context<'_, M>,
    ranks: usize,
) -> Result<(), Error> {
    // One pass (each sample read once): an origin that is not a rank is
    // reported before an overflow of the bytes, wherever it lies.
    let mut total = Some(0u64);
    let mut overflow = None;
    for e in &prep.items {
        let s = &cx.samples[e.input as usize];
        let Some(o) = s.origin() else {
            continue;
        };
        if o >= ranks {
            return Err(Error::Invalid {
                at: Locator::Origin { id: e.id, ranks },
                value: Scalar::Int(o as u64),
                reason: InvalidReason::NotARank,
            });
        }
        if let Some(t) = total {
            total = t.checked_add(s.bytes());
            if total.is_none() {
                overflow = Some(e.id);
            }
        }
    }
    match overflow {
        Some(id) => Err(Error::BytesOverflow { id }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::{Homes, NONE};

    /// A sample's origin and bytes come back from its record as they went
    /// in, every bit of the bytes (both halves) included.
    #[test]
    fn a_record_keeps_the_origin_and_every_bit_of_the_bytes() {
        let cases = [
            (NONE, 0u64),
            (0, 1),
            (7, u64::from(u32::MAX)),
            (1, 1 << 32),
            (u32::MAX - 1, u64::MAX),
            (3, 0x8000_0001_0000_0002),
        ];
        let homes = Homes {
            home: cases.iter().map(|&(o, b)| Homes::record(o, b)).collect(),
            node: None,
        };
        for (p, &(o, b)) in cases.iter().enumerate() {
            assert_eq!(
                (homes.origin(p), homes.bytes(p), homes.of(p)),
                (o, b, (o, b))
            );
        }
    }
}

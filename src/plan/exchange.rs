//! The exchange schedule: which samples move from which rank to which, for one all-to-all per step, and its traffic.

use alloc::vec::Vec;

/// One sample that moves: from the rank that holds it (its origin) to the
/// rank the plan puts it on.
///
/// # Examples
///
/// ```
/// use microbatch::cost::{Sample, Tokens};
/// use microbatch::plan::{Planner, StepSample};
///
/// // Both samples are held by rank 0; one of them must run on rank 1.
/// let samples: Vec<_> = (0..2).map(|i| StepSample::new(i, Sample::text_only(100)).with_origin(0).with_bytes(10)).collect();
/// let plan = Planner::new(Tokens::new(1.0)?).ranks(2).seq_len(1000).plan(&samples)?;
/// let m = plan.exchange().unwrap().moves().next().unwrap();
/// assert_eq!((m.from, m.to, m.bytes), (0, 1, 10));
/// # Ok::<(), microbatch::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct Move {
    /// The sample's id.
    pub id: u64,
    /// Its origin rank, which sends it.
    pub from: usize,
    /// The rank the plan puts it on, which receives it.
    pub to: usize,
    /// The bytes it takes to move ([`StepSample::bytes`](crate::plan::StepSample::bytes)).
    pub bytes: u64,
}

/// The moves of a plan: for every ordered pair of ranks the ids sent, so
/// that a trainer can run one `all_to_all` per step (or a two-level,
/// node-wise one), with the counts and bytes each rank sends and receives.
///
/// Only samples with an origin ([`StepSample::with_origin`](crate::plan::StepSample::with_origin))
/// placed on another rank are in it; samples without an origin move
/// nothing. The moves are sorted by (from, to, id), so the ids of one pair
/// ascend, and every rank computes the same schedule from the same plan.
/// Memory is O(m) for m moves (never O(R^2)).
///
/// The bytes of all moves sum to at most `u64::MAX`, so that every byte
/// count below (per rank, between nodes, in all) is exact: the planner
/// refuses a step whose bytes with an origin sum beyond it
/// ([`Error::BytesOverflow`](crate::Error::BytesOverflow)), and so does the
/// reader of a document.
///
/// # Examples
///
/// ```
/// use microbatch::cost::{Sample, Tokens};
/// use microbatch::plan::{Planner, StepSample};
///
/// // Round robin on 2 ranks, every sample 100 tokens: the plan keeps them home.
/// let samples: Vec<_> = (0..8)
///     .map(|i| StepSample::new(i, Sample::text_only(100)).with_origin(i as usize % 2).with_bytes(1))
///     .collect();
/// let plan = Planner::new(Tokens::new(1.0)?).ranks(2).seq_len(1000).plan(&samples)?;
/// let ex = plan.exchange().unwrap(); // with origins, the exchange is always there
/// let sent: usize = (0..2).map(|r| ex.sent(r)).sum();
/// assert_eq!(sent, ex.len());
/// assert_eq!(ex.sends(0, 1).len() + ex.sends(1, 0).len(), ex.len());
/// # Ok::<(), microbatch::Error>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Exchange {
    /// The moves' ids, sorted by (from, to, id).
    ids: Vec<u64>,
    from: Vec<usize>,
    to: Vec<usize>,
    bytes: Vec<u64>,
    /// The moves' indices sorted by (to, from, id).
    by_to: Vec<u32>,
}

impl Exchange {
    /// The exchange of `moves` in any order (sorted here).
    ///
    /// O(m log m) time, O(m) extra space.
    pub(crate) fn new(mut moves: Vec<Move>) -> Self {
        debug_assert!(
            total_bytes(&moves).is_ok(),
            "the moves' bytes sum beyond u64::MAX"
        );
        moves.sort_unstable_by_key(|m| (m.from, m.to, m.id));
        let mut by_to: Vec<u32> = (0..moves.len() as u32).collect();
        by_to.sort_unstable_by_key(|&i| {
            let m = &moves[i as usize];
            (m.to, m.from, m.id)
        });
        Exchange {
            ids: moves.iter().map(|m| m.id).collect(),
            from: moves.iter().map(|m| m.from).collect(),
            to: moves.iter().map(|m| m.to).collect(),
            bytes: moves.iter().map(|m| m.bytes).collect(),
            by_to,
        }
    }

    /// The number of moves (samples that change rank).
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::plan::Exchange;
    ///
    /// assert_eq!((Exchange::default().len(), Exchange::default().is_empty()), (0, true));
    /// ```
    #[must_use]
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Whether nothing moves.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::plan::Exchange;
    ///
    /// assert!(Exchange::default().is_empty());
    /// ```
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// The move at index `i` of the order (from, to, id).
    fn at(&self, i: usize) -> Move {
        Move {
            id: self.ids[i],
            from: self.from[i],
            to: self.to[i],
            bytes: self.bytes[i],
        }
    }

    /// Every move, sorted by (from, to, id).
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Sample, Tokens};
    /// use microbatch::plan::{Planner, StepSample};
    ///
    /// let samples: Vec<_> = (0..4).map(|i| StepSample::new(i, Sample::text_only(100)).with_origin(0)).collect();
    /// let plan = Planner::new(Tokens::new(1.0)?).ranks(2).seq_len(1000).plan(&samples)?;
    /// let ex = plan.exchange().unwrap();
    /// assert_eq!(ex.moves().count(), 2); // two of the four run on rank 1
    /// assert!(ex.moves().all(|m| m.from == 0 && m.to == 1 && m.bytes == 0)); // text only: 0 bytes
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    pub fn moves(&self) -> impl ExactSizeIterator<Item = Move> + '_ {
        (0..self.len()).map(|i| self.at(i))
    }

    /// The moves rank `from` sends, an index range of the order.
    fn out_range(&self, from: usize) -> core::ops::Range<usize> {
        let lo = self.from.partition_point(|&f| f < from);
        let hi = self.from.partition_point(|&f| f <= from);
        lo..hi
    }

    /// The moves rank `to` receives, a range of `by_to`.
    fn in_range(&self, to: usize) -> core::ops::Range<usize> {
        let lo = self.by_to.partition_point(|&i| self.to[i as usize] < to);
        let hi = self.by_to.partition_point(|&i| self.to[i as usize] <= to);
        lo..hi
    }

    /// The ids rank `from` sends to rank `to`, ascending (empty for a pair
    /// out of range or without moves).
    ///
    /// # Complexity
    ///
    /// O(log m) (binary searches).
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Sample, Tokens};
    /// use microbatch::plan::{Planner, StepSample};
    ///
    /// let samples: Vec<_> = (0..4).map(|i| StepSample::new(i, Sample::text_only(100)).with_origin(1)).collect();
    /// let plan = Planner::new(Tokens::new(1.0)?).ranks(2).seq_len(1000).plan(&samples)?;
    /// let ex = plan.exchange().unwrap();
    /// assert_eq!(ex.sends(1, 0), plan.rank(0)); // rank 0's samples all come from rank 1
    /// assert!(ex.sends(0, 1).is_empty());
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn sends(&self, from: usize, to: usize) -> &[u64] {
        let range = self.out_range(from);
        let to_s = &self.to[range.clone()];
        let lo = range.start + to_s.partition_point(|&t| t < to);
        let hi = range.start + to_s.partition_point(|&t| t <= to);
        &self.ids[lo..hi]
    }

    /// The samples rank `rank` sends. O(log m).
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Sample, Tokens};
    /// use microbatch::plan::{Planner, StepSample};
    ///
    /// let samples: Vec<_> = (0..4).map(|i| StepSample::new(i, Sample::text_only(100)).with_origin(1)).collect();
    /// let plan = Planner::new(Tokens::new(1.0)?).ranks(2).seq_len(1000).plan(&samples)?;
    /// let ex = plan.exchange().unwrap();
    /// assert_eq!((ex.sent(0), ex.sent(1), ex.received(0), ex.received(1)), (0, 2, 2, 0));
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn sent(&self, rank: usize) -> usize {
        self.out_range(rank).len()
    }

    /// The samples rank `rank` receives. O(log m).
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Sample, Tokens};
    /// use microbatch::plan::{Planner, StepSample};
    ///
    /// let samples: Vec<_> = (0..4).map(|i| StepSample::new(i, Sample::text_only(100)).with_origin(0)).collect();
    /// let plan = Planner::new(Tokens::new(1.0)?).ranks(2).seq_len(1000).plan(&samples)?;
    /// assert_eq!(plan.exchange().unwrap().received(1), 2);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn received(&self, rank: usize) -> usize {
        self.in_range(rank).len()
    }

    /// The bytes rank `rank` sends (exact: see [`Exchange`]). O(log m + its
    /// moves).
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Sample, Tokens};
    /// use microbatch::plan::{Planner, StepSample};
    ///
    /// let samples: Vec<_> = (0..4).map(|i| StepSample::new(i, Sample::text_only(100)).with_origin(0).with_bytes(5)).collect();
    /// let plan = Planner::new(Tokens::new(1.0)?).ranks(2).seq_len(1000).plan(&samples)?;
    /// let ex = plan.exchange().unwrap();
    /// assert_eq!((ex.bytes_out(0), ex.bytes_in(1)), (10, 10));
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn bytes_out(&self, rank: usize) -> u64 {
        self.bytes[self.out_range(rank)]
            .iter()
            .fold(0u64, |a, &b| a.saturating_add(b))
    }

    /// The bytes rank `rank` receives (exact: see [`Exchange`]). O(log m +
    /// its moves).
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Sample, Tokens};
    /// use microbatch::plan::{Planner, StepSample};
    ///
    /// let samples: Vec<_> = (0..4).map(|i| StepSample::new(i, Sample::text_only(100)).with_origin(0).with_bytes(5)).collect();
    /// let plan = Planner::new(Tokens::new(1.0)?).ranks(2).seq_len(1000).plan(&samples)?;
    /// assert_eq!(plan.exchange().unwrap().bytes_in(0), 0);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn bytes_in(&self, rank: usize) -> u64 {
        self.by_to[self.in_range(rank)]
            .iter()
            .fold(0u64, |a, &i| a.saturating_add(self.bytes[i as usize]))
    }

    /// The traffic of these moves; `bytes_total` is the bytes of every
    /// sample with an origin. O(m).
    pub(crate) fn traffic(&self, bytes_total: u64, ranks_per_node: Option<usize>) -> Traffic {
        // Never saturates: every sum is a part of the moves' bytes, which
        // fit `u64` (see `Exchange`); saturating only keeps a broken
        // invariant from wrapping.
        let sum = |it: &mut dyn Iterator<Item = u64>| it.fold(0u64, u64::saturating_add);
        let mut max_out = 0u64;
        let mut i = 0;
        while i < self.len() {
            let r = self.out_range(self.from[i]);
            max_out = max_out.max(sum(&mut self.bytes[r.clone()].iter().copied()));
            i = r.end;
        }
        let mut max_in = 0u64;
        let mut i = 0;
        while i < self.len() {
            let r = self.in_range(self.to[self.by_to[i] as usize]);
            max_in = max_in.max(sum(&mut self.by_to[r.clone()]
                .iter()
                .map(|&k| self.bytes[k as usize])));
            i = r.end;
        }
        Traffic {
            samples_moved: self.len(),
            bytes_moved: sum(&mut self.bytes.iter().copied()),
            bytes_total,
            max_bytes_in: max_in,
            max_bytes_out: max_out,
            inter_node_bytes: ranks_per_node.map(|n| {
                let n = n.max(1);
                sum(&mut self
                    .moves()
                    .filter(|m| m.from / n != m.to / n)
                    .map(|m| m.bytes))
            }),
        }
    }
}

/// What a plan moves between ranks: part of the [`Report`](crate::plan::Report)
/// when some sample has an origin.
///
/// Bytes are exact sums of [`StepSample::bytes`](crate::plan::StepSample::bytes):
/// the planner refuses a step whose bytes with an origin sum beyond
/// `u64::MAX` ([`Error::BytesOverflow`](crate::Error::BytesOverflow)).
///
/// # Examples
///
/// ```
/// use microbatch::cost::{Sample, Tokens};
/// use microbatch::plan::{Planner, StepSample};
///
/// let samples: Vec<_> = (0..4).map(|i| StepSample::new(i, Sample::text_only(100)).with_origin(0).with_bytes(5)).collect();
/// let plan = Planner::new(Tokens::new(1.0)?).ranks(2).seq_len(1000).plan(&samples)?;
/// let t = plan.report().traffic.unwrap();
/// assert_eq!((t.samples_moved, t.bytes_moved, t.bytes_total), (2, 10, 20));
/// assert_eq!((t.max_bytes_in, t.max_bytes_out, t.inter_node_bytes), (10, 10, None));
/// # Ok::<(), microbatch::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct Traffic {
    /// The samples that change rank.
    pub samples_moved: usize,
    /// Their bytes.
    pub bytes_moved: u64,
    /// The bytes of every sample with an origin, moved or not.
    pub bytes_total: u64,
    /// The most bytes any rank receives.
    pub max_bytes_in: u64,
    /// The most bytes any rank sends (with `max_bytes_in`, the all-to-all's
    /// critical path).
    pub max_bytes_out: u64,
    /// The bytes moved between nodes, given
    /// [`Locality::ranks_per_node`](crate::plan::Locality::ranks_per_node)
    /// (ranks `k * n` to `(k + 1) * n - 1` form node `k`).
    pub inter_node_bytes: Option<u64>,
}

impl Traffic {
    /// The share of the bytes with an origin that move (0.0 when there
    /// are none).
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::cost::{Sample, Tokens};
    /// use microbatch::plan::{Planner, StepSample};
    ///
    /// let samples: Vec<_> = (0..4).map(|i| StepSample::new(i, Sample::text_only(100)).with_origin(0).with_bytes(5)).collect();
    /// let plan = Planner::new(Tokens::new(1.0)?).ranks(2).seq_len(1000).plan(&samples)?;
    /// assert_eq!(plan.report().traffic.unwrap().moved_fraction(), 0.5);
    /// # Ok::<(), microbatch::Error>(())
    /// ```
    #[must_use]
    pub fn moved_fraction(&self) -> f64 {
        if self.bytes_total == 0 {
            0.0
        } else {
            self.bytes_moved as f64 / self.bytes_total as f64
        }
    }
}

/// The sum of the moves' bytes, or the index of the move at which it
/// passes `u64::MAX`. O(m).
fn total_bytes(moves: &[Move]) -> Result<u64, usize> {
    moves
        .iter()
        .enumerate()
        .try_fold(0u64, |total, (k, m)| total.checked_add(m.bytes).ok_or(k))
}

#[cfg(feature = "serde")]
mod wire {
    use alloc::vec::Vec;

    use serde::ser::{SerializeStruct, Serializer};

    use super::{total_bytes, Exchange, Move};
    use crate::grouped::{invalid, Invalid};

    /// An exchange as written: its moves in order.
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    pub(super) struct Wire {
        moves: Vec<Move>,
    }

    impl TryFrom<Wire> for Exchange {
        type Error = Invalid;

        /// Checks the order (from, to, id), that no id repeats, that
        /// nothing moves to its own rank and that the bytes sum within
        /// `u64`. O(m log m).
        fn try_from(w: Wire) -> Result<Self, Invalid> {
            for (k, m) in w.moves.iter().enumerate() {
                if m.from == m.to {
                    return Err(invalid!(
                        "move {k} sends id {} from rank {} to itself",
                        m.id,
                        m.from
                    ));
                }
            }
            if let Some(k) = w
                .moves
                .windows(2)
                .position(|p| (p[0].from, p[0].to, p[0].id) >= (p[1].from, p[1].to, p[1].id))
            {
                return Err(invalid!(
                    "move {} (id {}) comes after move {k} (id {}): the moves are sorted by \
                     (from, to, id) without repeats",
                    k + 1,
                    w.moves[k + 1].id,
                    w.moves[k].id
                ));
            }
            if let Err(k) = total_bytes(&w.moves) {
                return Err(invalid!(
                    "the bytes of moves 0 to {k} sum beyond u64::MAX (move {k}, id {}, has {} \
                     bytes): byte counts are exact, so a step moves at most u64::MAX bytes",
                    w.moves[k].id,
                    w.moves[k].bytes
                ));
            }
            let mut ids: Vec<u64> = w.moves.iter().map(|m| m.id).collect();
            ids.sort_unstable();
            if let Some(p) = ids.windows(2).find(|p| p[0] == p[1]) {
                return Err(invalid!("id {} moves twice", p[0]));
            }
            Ok(Exchange::new(w.moves))
        }
    }

    impl<'de> serde::Deserialize<'de> for Exchange {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            let w = Wire::deserialize(d)?;
            Exchange::try_from(w).map_err(serde::de::Error::custom)
        }
    }

    impl serde::Serialize for Exchange {
        fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            let moves: Vec<Move> = self.moves().collect();
            let mut s = serializer.serialize_struct("Exchange", 1)?;
            s.serialize_field("moves", &moves)?;
            s.end()
        }
    }
}

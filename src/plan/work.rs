//! What the stages that trade samples between groups (refine, pair, search) share: what they read ([`Stage`]), the dimensions they balance ([`Dim`], [`barrier`]), one change and its apply ([`Trade`]), the search of the best change between two groups ([`best_trade`]) and the counted work budget ([`spend`]).
//!
//! A *group* is a set of sequences that waits as one at a barrier: a
//! rank's micro-batch of one micro-step, or a whole rank under one barrier
//! a step. A change moves one sample of a group into a sequence of
//! another, or swaps two samples; every cap of both sequences is kept and
//! pinned positions never move. [`best_trade`] weighs the changes between
//! two groups under an objective the stage gives ([`Goal`]), in
//! `O(|y| log |y| + |x| (log |y| + window + f))` time for groups of `|x|`
//! and `|y|` movable samples (`f` a first-fit query, `O(log S)` for `S`
//! sequences when one cap binds); [`Trade::apply`] makes the change in
//! O(1).

use alloc::vec;
use alloc::vec::Vec;
use core::cell::Cell;

use super::deal::Sequences;
use super::prepare::Prepared;
use super::shape::Shape;
use super::sync::SyncModel;
use crate::cost::Phases;
use crate::partition::balancing_window;

/// What the stages after dealing (`refine`, `pair`, `search`) read besides
/// the sequences they change: the batch, the positions that never move,
/// the sync model, the shape and the deal. Each of those stages takes the
/// sequences and returns them changed: a layout in, a layout out.
#[derive(Clone, Copy)]
pub(crate) struct Stage<'a> {
    /// The batch: the samples, or with groups the units.
    pub(crate) prep: &'a Prepared,
    /// Positions that never move (chunks of groups on their home rank);
    /// empty when none is pinned.
    pub(crate) pinned: &'a [bool],
    pub(crate) sync: SyncModel,
    pub(crate) shape: Shape,
    /// The deal: `slots[k]` is the sequence in slot `k`.
    pub(crate) slots: &'a [u32],
}

impl Stage<'_> {
    /// Whether position `p` is pinned.
    #[inline]
    pub(crate) fn pinned(&self, p: u32) -> bool {
        self.pinned.get(p as usize).copied().unwrap_or(false)
    }

    /// The sequences of micro-batch `m` (`rank * A + micro-step`).
    #[inline]
    pub(crate) fn micro_batch(&self, m: usize) -> &[u32] {
        &self.slots[m * self.shape.per_step..][..self.shape.per_step]
    }
}

/// A dimension a group's cost is balanced in: one phase, or the total.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Dim {
    /// The vision phase ([`Phases::vision`]).
    Vision,
    /// The language phase ([`Phases::language`]).
    Language,
    /// Both phases summed ([`Phases::total`]).
    Total,
}

impl Dim {
    /// Every dimension.
    #[cfg(test)]
    pub(crate) const ALL: [Dim; 3] = [Dim::Vision, Dim::Language, Dim::Total];

    /// The dimensions whose barriers `sync` waits at within a contest: both
    /// phases for [`SyncModel::Phase`], the total for the others.
    pub(crate) fn barriers(sync: SyncModel) -> &'static [Dim] {
        match sync {
            SyncModel::Phase => &[Dim::Vision, Dim::Language],
            SyncModel::Step | SyncModel::MicroStep => &[Dim::Total],
        }
    }

    /// The value of `c` in this dimension.
    #[inline]
    pub(crate) fn of(self, c: Phases) -> f64 {
        match self {
            Dim::Vision => c.vision,
            Dim::Language => c.language,
            Dim::Total => c.total(),
        }
    }

    /// The other phase of a phase; none for the total.
    #[inline]
    pub(crate) fn other(self) -> Option<Dim> {
        match self {
            Dim::Vision => Some(Dim::Language),
            Dim::Language => Some(Dim::Vision),
            Dim::Total => None,
        }
    }

    /// The largest cost of a single sample of `prep` in this dimension.
    pub(crate) fn largest(self, prep: &Prepared) -> f64 {
        match self {
            Dim::Vision => prep.largest.vision,
            Dim::Language => prep.largest.language,
            Dim::Total => prep.largest_total,
        }
    }
}

/// The value of `c` in barrier `i` of a sync model of `B` barriers, as
/// [`Dim::barriers`] lists them: vision and language for `B = 2`
/// ([`SyncModel::Phase`]), the total for `B = 1` (the others). The stages'
/// inner loops are generic over `B`, so that the compiler knows the
/// barriers: no loop over a slice of [`Dim`] and no branch on each.
#[inline(always)]
pub(crate) fn barrier<const B: usize>(i: usize, c: Phases) -> f64 {
    if B == 2 {
        if i == 0 {
            c.vision
        } else {
            c.language
        }
    } else {
        c.total()
    }
}

/// One change of sequences: the sample at index `a` of sequence `from`
/// moves to sequence `to` and, for a swap, the sample at index `back` of
/// `to` moves to `a`'s place. The stages weigh their candidates in their
/// own way and apply the one they pick with [`Trade::apply`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Trade {
    pub(crate) from: u32,
    pub(crate) a: usize,
    pub(crate) to: u32,
    pub(crate) back: Option<usize>,
}

impl Trade {
    /// Makes the change in `seqs` (members and loads; a move takes the
    /// sample out by `swap_remove` and appends it to `to`), and returns the
    /// costs of the sample that went to `to` and of the one that came back
    /// (zero for a move). O(1).
    pub(crate) fn apply(self, prep: &Prepared, seqs: &mut Sequences) -> [Phases; 2] {
        let (sx, sy) = (self.from as usize, self.to as usize);
        let (bins, loads) = (&mut seqs.members, &mut seqs.loads);
        let pa = bins[sx][self.a];
        let (ca, sa) = (prep.cost(pa as usize), prep.size(pa as usize));
        let (cb, sb) = match self.back {
            None => {
                bins[sx].swap_remove(self.a);
                bins[sy].push(pa);
                (Phases::ZERO, [0; 3])
            }
            Some(ib) => {
                let pb = bins[sy][ib];
                bins[sx][self.a] = pb;
                bins[sy][ib] = pa;
                (prep.cost(pb as usize), prep.size(pb as usize))
            }
        };
        for k in 0..3 {
            loads[sx][k] = loads[sx][k] - sa[k] + sb[k];
            loads[sy][k] = loads[sy][k] - sb[k] + sa[k];
        }
        [ca, cb]
    }
}

/// Whether swapping a sample of sizes `sa` in a sequence of loads `lx` for
/// one of sizes `sb` in a sequence of loads `ly` keeps both within `prep`'s
/// caps (`sb` zero: a move of the first into the second).
#[inline]
pub(crate) fn swap_fits(
    prep: &Prepared,
    lx: [u64; 3],
    ly: [u64; 3],
    sa: [u64; 3],
    sb: [u64; 3],
) -> bool {
    (0..3).all(|k| lx[k] - sa[k] + sb[k] <= prep.caps[k] && ly[k] - sb[k] + sa[k] <= prep.caps[k])
}

/// A movable member of a group as [`best_trade`] weighs it: its
/// sequence, its index there, its cost and sizes.
#[derive(Clone, Copy)]
pub(crate) struct Member {
    pub(crate) seq: u32,
    pub(crate) index: u32,
    pub(crate) cost: Phases,
    pub(crate) size: [u64; 3],
}

/// Appends the unpinned members of the sequences `bs`, in order, to `out`;
/// returns the cost of all of them, pinned ones included, summed in order
/// (each sample read once).
pub(crate) fn gather(
    stage: &Stage<'_>,
    seqs: &Sequences,
    bs: &[u32],
    out: &mut Vec<Member>,
) -> Phases {
    let mut total = Phases::ZERO;
    for &b in bs {
        for (i, &p) in seqs.members[b as usize].iter().enumerate() {
            let cost = stage.prep.cost(p as usize);
            total += cost;
            if stage.pinned(p) {
                continue;
            }
            out.push(Member {
                seq: b,
                index: i as u32,
                cost,
                size: stage.prep.size(p as usize),
            });
        }
    }
    total
}

/// One side of a trade as [`best_trade`] weighs it: the group's cost, its
/// sequences and its unpinned members ([`gather`]).
#[derive(Clone, Copy)]
pub(crate) struct Side<'m> {
    pub(crate) cost: Phases,
    pub(crate) seqs: &'m [u32],
    pub(crate) members: &'m [Member],
}

/// What [`best_trade`] minimizes for two groups: `score(x', y')` over the changes
/// with `ok(x', y')`, and where to look for swap partners: the change that
/// moves `want` in `dim` from `x` to `y` is the ideal one, and `window`
/// partners nearest to it are weighed.
pub(crate) struct Goal<S, O> {
    pub(crate) score: S,
    pub(crate) ok: O,
    pub(crate) dim: Dim,
    pub(crate) want: f64,
    pub(crate) window: usize,
}

/// The change from group `x` to group `y` of least `score(x', y')` if it is
/// below `score(x, y)` and `ok(x', y')`, and its score: the search that the
/// stages trading samples between two groups share (`pair`, and `refine`
/// per phase).
///
/// Each unpinned member `a` of `x` is weighed as a move (into the first
/// sequence of `y` with room for it) and as a swap with the members of
/// `y`: all of them, in their order, when `y` has at most `goal.window`
/// unpinned members; else the `goal.window` whose value in `goal.dim` is
/// nearest to `a`'s minus `goal.want` (the swaps nearest to the ideal
/// change), found in `y`'s members sorted once. Ties go to the first
/// found. O(|y| log |y| + |x| (log |y| + window + f)) time, `f` the work
/// of a first-fit query ([`Rooms`]).
pub(crate) fn best_trade<S, O>(
    prep: &Prepared,
    goal: &Goal<S, O>,
    x: Side<'_>,
    y: Side<'_>,
    loads: &[[u64; 3]],
) -> Option<(f64, Trade)>
where
    S: Fn(Phases, Phases) -> f64,
    O: Fn(Phases, Phases) -> bool,
{
    let (cx, cy) = (x.cost, y.cost);
    let now = (goal.score)(cx, cy);
    // y's members by value in the goal's dimension, when there are more
    // than a window of them.
    let mut sorted: Vec<(f64, u32)> = Vec::new();
    if y.members.len() > goal.window {
        sorted.extend(
            y.members
                .iter()
                .enumerate()
                .map(|(i, b)| (goal.dim.of(b.cost), i as u32)),
        );
        sorted.sort_unstable_by(|p, q| p.0.total_cmp(&q.0).then(p.1.cmp(&q.1)));
    }
    let rooms = Rooms::new(prep.caps, y.seqs, loads);
    // The best change so far and its score; ties to the first found.
    let mut found: Option<(f64, Trade)> = None;
    for a in x.members {
        let lx = loads[a.seq as usize];
        let (ca, sa) = (a.cost, a.size);
        let better = |score: f64, found: &Option<(f64, Trade)>| {
            score < now && found.map_or(true, |f| score < f.0)
        };
        let trade = |to: u32, back: Option<u32>| Trade {
            from: a.seq,
            a: a.index as usize,
            to,
            back: back.map(|b| b as usize),
        };
        let (nx, ny) = (cx - ca, cy + ca);
        if (goal.ok)(nx, ny) && better((goal.score)(nx, ny), &found) {
            if let Some(sy) = rooms.first_fit(sa) {
                found = Some(((goal.score)(nx, ny), trade(sy, None)));
            }
        }
        // Every member of y, or the window of the sorted ones.
        let (all, near) = if sorted.is_empty() {
            (y.members, &sorted[..])
        } else {
            let at = sorted.partition_point(|e| e.0 < goal.dim.of(ca) - goal.want);
            (
                &[][..],
                &sorted[balancing_window(sorted.len(), at, goal.window / 2)],
            )
        };
        for b in all
            .iter()
            .chain(near.iter().map(|&(_, i)| &y.members[i as usize]))
        {
            let (nx, ny) = (cx - ca + b.cost, cy + ca - b.cost);
            if !(goal.ok)(nx, ny) {
                continue;
            }
            let score = (goal.score)(nx, ny);
            if better(score, &found) && swap_fits(prep, lx, loads[b.seq as usize], sa, b.size) {
                found = Some((score, trade(b.seq, Some(b.index))));
            }
        }
    }
    found
}

/// The sequences of a micro-batch in their order, for the first with room
/// for a sample: a scan of at most [`ROOMS_SCAN`] of them, else a binary
/// tree whose nodes hold their leaves' least load in each dimension, so a
/// subtree none of whose sequences can hold the sample is skipped. O(k) to
/// build for k sequences; a query is O(log k) when one cap binds (several
/// may send it down subtrees whose least loads in different dimensions
/// come from different sequences).
struct Rooms<'s> {
    caps: [u64; 3],
    /// The sequences in order, and every sequence's load.
    seqs: &'s [u32],
    loads: &'s [[u64; 3]],
    /// Node `i`'s least loads; children `2i + 1` and `2i + 2`; the leaves
    /// from `width - 1` on, padded with full ones. Empty for a scan.
    least: Vec<[u64; 3]>,
    width: usize,
}

/// The most sequences [`Rooms`] scans rather than building its tree.
const ROOMS_SCAN: usize = 8;

impl<'s> Rooms<'s> {
    fn new(caps: [u64; 3], seqs: &'s [u32], loads: &'s [[u64; 3]]) -> Self {
        let mut rooms = Rooms {
            caps,
            seqs,
            loads,
            least: Vec::new(),
            width: 0,
        };
        if seqs.len() > ROOMS_SCAN {
            let width = seqs.len().next_power_of_two();
            let mut least = vec![caps; 2 * width - 1];
            for (i, &b) in seqs.iter().enumerate() {
                least[width - 1 + i] = loads[b as usize];
            }
            for i in (0..width - 1).rev() {
                let (l, r) = (least[2 * i + 1], least[2 * i + 2]);
                least[i] = core::array::from_fn(|k| l[k].min(r[k]));
            }
            (rooms.least, rooms.width) = (least, width);
        }
        rooms
    }

    /// Whether a sequence of `load` holds a sample of sizes `size`.
    #[inline]
    fn holds(&self, load: [u64; 3], size: [u64; 3]) -> bool {
        (0..3).all(|k| {
            load[k]
                .checked_add(size[k])
                .is_some_and(|t| t <= self.caps[k])
        })
    }

    /// The first sequence that holds a sample of sizes `size`.
    fn first_fit(&self, size: [u64; 3]) -> Option<u32> {
        if self.least.is_empty() {
            let fits = |b: &&u32| self.holds(self.loads[**b as usize], size);
            return self.seqs.iter().find(fits).copied();
        }
        self.below(0, size)
    }

    fn below(&self, node: usize, size: [u64; 3]) -> Option<u32> {
        if !self.holds(self.least[node], size) {
            return None;
        }
        if node >= self.width - 1 {
            return self.seqs.get(node + 1 - self.width).copied();
        }
        self.below(2 * node + 1, size)
            .or_else(|| self.below(2 * node + 2, size))
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

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;
    use proptest::prelude::*;

    proptest! {
        /// [`Rooms::first_fit`] is the first sequence, in their order,
        /// with room for the sizes in every cap.
        #[test]
        fn rooms_find_the_first_sequence_with_room(
            loads in prop::collection::vec((0u64..100, 0u64..10, 0u64..5), 1..70),
            sizes in prop::collection::vec((0u64..100, 0u64..10, 0u64..5), 1..20),
        ) {
            let caps = [100, 10, 5];
            let seqs: Vec<u32> = (0..loads.len() as u32).map(|i| 7 * i).collect();
            let mut all = vec![[0u64; 3]; 7 * loads.len()];
            for (i, &(a, b, c)) in loads.iter().enumerate() {
                all[7 * i] = [a, b, c];
            }
            let rooms = Rooms::new(caps, &seqs, &all);
            for &(a, b, c) in &sizes {
                let size = [a, b, c];
                let want = loads
                    .iter()
                    .position(|&(x, y, z)| (0..3).all(|k| [x, y, z][k] + size[k] <= caps[k]))
                    .map(|i| 7 * i as u32);
                prop_assert_eq!(rooms.first_fit(size), want);
            }
        }
    }

    /// [`barrier`] gives the values of [`Dim::barriers`], in their order.
    #[test]
    fn barrier_is_the_dims_value() {
        let c = Phases::new(3.0, 5.0);
        let dims = Dim::barriers(SyncModel::Phase);
        assert_eq!(dims.len(), 2);
        for (i, d) in dims.iter().enumerate() {
            assert_eq!(barrier::<2>(i, c), d.of(c));
        }
        for sync in [SyncModel::MicroStep, SyncModel::Step] {
            assert_eq!(Dim::barriers(sync).len(), 1);
            assert_eq!(barrier::<1>(0, c), Dim::barriers(sync)[0].of(c));
        }
    }
}

//! Shared pieces of the stages that trade samples between groups (refine, pair, search): what they read ([`Stage`]), the dimensions they balance ([`Dim`], and [`barrier`] for loops generic over a sync model's barriers) and the counted work budget.

use core::cell::Cell;

use super::deal::Sequences;
use super::prepare::Prepared;
use super::shape::Shape;
use super::sync::SyncModel;
use crate::cost::Phases;

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
/// barriers: no loop over a slice of [`Dim`] and no branch on each
/// (the pairing took a third fewer instructions so).
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
pub(crate) fn swap_fits(prep: &Prepared, lx: [u64; 3], ly: [u64; 3], sa: [u64; 3], sb: [u64; 3]) -> bool {
    (0..3).all(|k| lx[k] - sa[k] + sb[k] <= prep.caps[k] && ly[k] - sb[k] + sa[k] <= prep.caps[k])
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

//! Packing stage: the samples into `R * A * S` balanced sequences (vector LPT with capacities, around a fill row under per-phase barriers, first-fit-decreasing when too tight), choosing `A`.

use alloc::vec;
use alloc::vec::Vec;

use super::fill::fill_row;
use super::prepare::{Entry, Prepared};
use super::shape::Shape;
use crate::cost::Phases;
use crate::error::Error;
use crate::grouped::Grouped;
use crate::num::Item;
use crate::pack::first_fit_decreasing;
use crate::partition::{vector_lpt, vector_lpt_by, vector_lpt_onto, VectorItem};

/// What the packing is asked for: `R`, `S`, and `A` if given.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Request {
    pub(crate) ranks: usize,
    pub(crate) per_step: usize,
    /// `A`, or `None` for the smallest the planner fits.
    pub(crate) micro_steps: Option<usize>,
    /// Whether the phases are balanced each on its own (per-phase
    /// barriers), else their total; then, for `A > 1`, one row of `R * S`
    /// sequences is the fill row of the largest sample where it is wanted
    /// ([`fill_row`]), the others balanced around it.
    pub(crate) phases: bool,
    /// The fewest micro-steps the plan may have (1 unless groups under
    /// [`GroupScope::Rank`](super::GroupScope::Rank) need more).
    pub(crate) min_steps: usize,
}

/// The packed sequences.
#[derive(Clone, Debug)]
pub(crate) struct Packed {
    /// `R`, the chosen `A` and `S`.
    pub(crate) shape: Shape,
    /// `R * A * S` sequences (some possibly empty), each listing sorted
    /// positions in ascending order.
    pub(crate) sequences: Vec<Vec<u32>>,
    /// Whether the balanced packing fitted (else first-fit-decreasing).
    pub(crate) balanced: bool,
    /// Whether the first `R * S` sequences are the fill row of the largest
    /// sample ([`fill_row`]).
    pub(crate) fill_row: bool,
}

/// Packs the prepared samples into the sequences of `request`: for a given
/// `A`, the balanced packing ([`vector_lpt`] over the samples' costs, with
/// the tokens as the primary size; with `request.phases`, vision and
/// language each balanced on its own, and for `A > 1` around the fill row
/// of the largest sample where it is wanted, [`fill_row`]) if it fits,
/// else first-fit-decreasing if
/// that fits; without one, the smallest `A` of the two, starting from the
/// bound `ceil(max over dimensions of sum / cap / (R * S))` (at least
/// `request.min_steps`).
///
/// # Errors
///
/// [`Error::MicroStepsInfeasible`] when the given `A` holds neither
/// packing, naming the smallest feasible one.
///
/// # Complexity
///
/// O(n log n) time (the sorts of the packers and of the fill row), O(n)
/// extra space.
pub(crate) fn pack(prep: &Prepared, request: Request) -> Result<Packed, Error> {
    let per_row = request.ranks * request.per_step;
    let shape = |steps: usize| Shape {
        ranks: request.ranks,
        steps,
        per_step: request.per_step,
    };
    let steps_for = |sequences: u64| (sequences.div_ceil(per_row as u64)).max(1) as usize;
    // L1: no packing uses fewer sequences.
    let mut sums = [0u64; 3];
    for p in 0..prep.len() {
        for (d, x) in prep.size(p).into_iter().enumerate() {
            sums[d] += x;
        }
    }
    let l1 = (0..3)
        .map(|d| sums[d].div_ceil(prep.caps[d]))
        .max()
        .unwrap_or(0);
    let lb = steps_for(l1).max(request.min_steps);
    let try_balanced = |steps: usize| balanced_at(prep, request, steps);
    let fallback = |steps: usize, mut sequences: Vec<Vec<u32>>| {
        sequences.resize_with(steps * per_row, Vec::new);
        Packed {
            shape: shape(steps),
            sequences,
            balanced: false,
            fill_row: false,
        }
    };
    // The smallest A the planner fits: the bound if the balanced packing
    // fits there, else the first-fit-decreasing count.
    let smallest = |first: Option<Packed>| -> Packed {
        if let Some(packed) = first {
            return packed;
        }
        let ffd = ffd(prep);
        let a = steps_for(ffd.len() as u64).max(lb);
        if a > lb {
            if let Some(packed) = try_balanced(a) {
                return packed;
            }
        }
        fallback(a, ffd)
    };
    match request.micro_steps {
        None => Ok(smallest(try_balanced(lb))),
        Some(a) if a >= lb => {
            if let Some(packed) = try_balanced(a) {
                return Ok(packed);
            }
            let ffd = ffd(prep);
            if ffd.len() <= a * per_row {
                Ok(fallback(a, ffd))
            } else {
                let smallest = smallest(None).shape.steps;
                Err(Error::MicroStepsInfeasible { given: a, smallest })
            }
        }
        Some(a) => {
            let smallest = smallest(try_balanced(lb)).shape.steps;
            Err(Error::MicroStepsInfeasible { given: a, smallest })
        }
    }
}

/// The balanced packing of [`pack`] into exactly `steps` micro-steps of
/// `request` (its `micro_steps` and `min_steps` not read), `None` where it
/// does not fit: no first-fit-decreasing packing is made.
///
/// # Complexity
///
/// O(n log n) time, O(n) extra space.
pub(crate) fn balanced_at(prep: &Prepared, request: Request, steps: usize) -> Option<Packed> {
    let per_row = request.ranks * request.per_step;
    let row = (request.phases && steps > 1).then_some(per_row);
    let (sequences, fill_row) = balanced(prep, steps * per_row, request.phases, row)?;
    Some(Packed {
        shape: Shape {
            ranks: request.ranks,
            steps,
            per_step: request.per_step,
        },
        sequences,
        balanced: true,
        fill_row,
    })
}

/// A sample as a bin packing item of its first `D` sizes and its id: a
/// reference, so that the first-fit-decreasing count copies nothing a
/// sample.
struct Sizes<'a, const D: usize>(&'a Entry);

impl<const D: usize> Item for Sizes<'_, D> {
    type Size = u32;
    type Id = u64;
    type Capacity = [u32; D];
    #[inline]
    fn dims(&self) -> usize {
        D
    }
    #[inline]
    fn size(&self, dim: usize) -> u32 {
        self.0.sizes[dim]
    }
    #[inline]
    fn id(&self) -> &u64 {
        &self.0.id
    }
}

/// A sample whose phases are balanced each on its own (a reference, made
/// on demand by [`vector_lpt_by`], so that no array of copies of the
/// entries is held).
struct Phased<'a>(&'a Entry);

impl VectorItem<3> for Phased<'_> {
    #[inline]
    fn weight(&self) -> f64 {
        self.0.cost.total()
    }
    #[inline]
    fn parts(&self) -> [f64; 2] {
        [self.0.cost.vision, self.0.cost.language]
    }
    #[inline]
    fn sizes(&self) -> [u32; 3] {
        self.0.sizes
    }
}

/// The balanced packing into `k` sequences (each phase balanced on its own
/// with `phases`, else the total), `None` when it does not fit. With
/// `fill_row` (given with `phases` only), the first that many sequences are the fill row
/// ([`fill_row`]) and the rest is balanced around it, if it fits; the flag
/// says whether they are.
fn balanced(
    prep: &Prepared,
    k: usize,
    phases: bool,
    fill_row: Option<usize>,
) -> Option<(Vec<Vec<u32>>, bool)> {
    if let Some(row) = fill_row.filter(|&row| row < k) {
        if let Some(sequences) = around_fill_row(prep, k, row) {
            return Some((sequences, true));
        }
    }
    let seq_of = if phases {
        vector_lpt_by(prep.len(), |p| Phased(&prep.items[p]), &prep.caps, k)?
    } else {
        vector_lpt(&prep.items, &prep.caps, k)?
    };
    Some((scatter(k, &seq_of, |i| i as u32), false))
}

/// The fill row of `row` sequences, then the other samples balanced phase
/// by phase over all `k` sequences, the row's holding what it holds
/// ([`vector_lpt_onto`]: a row sequence, costlier than the mean, takes one
/// only where no other has room for it), `None` if they do not fit.
/// Balancing the others over all `k` sequences, not the `k - row` outside
/// the row, matters where units nearly fill the sequences: a row of long,
/// language-dense samples holds fewer units than its share, and the
/// others alone may not fit the rest.
fn around_fill_row(prep: &Prepared, k: usize, row: usize) -> Option<Vec<Vec<u32>>> {
    let (mut sequences, taken) = fill_row(prep, row, k)?;
    let rest: Vec<u32> = (0..prep.len() as u32)
        .filter(|&p| !taken[p as usize])
        .collect();
    let item = |i: usize| Phased(&prep.items[rest[i] as usize]);
    // Each row sequence's sizes and costs, read once as the greedy starts:
    // no array of them is made and freed (one of 16,384 entries moved
    // where glibc's allocator placed the later, larger arrays, and the
    // peak memory of 10^6 samples by 12 bytes a sample).
    let preload = |b: usize| {
        let (mut size, mut cost) = ([0u64; 3], Phases::ZERO);
        for &p in &sequences[b] {
            size = core::array::from_fn(|d| size[d] + prep.size(p as usize)[d]);
            cost += prep.cost(p as usize);
        }
        (size, [cost.vision, cost.language])
    };
    let seq_of = vector_lpt_onto(rest.len(), item, &prep.caps, k, (row, preload))?;
    sequences.reserve_exact(k - row);
    for (b, more) in scatter(k, &seq_of, |i| rest[i]).into_iter().enumerate() {
        match sequences.get_mut(b) {
            Some(members) if !more.is_empty() => {
                members.extend(more);
                members.sort_unstable();
            }
            Some(_) => {}
            None => sequences.push(more),
        }
    }
    Some(sequences)
}

/// The `k` sequences of an assignment `seq_of` (item -> sequence) of the
/// items at positions `position(item)`, ascending if those are.
fn scatter(k: usize, seq_of: &[u32], position: impl Fn(usize) -> u32) -> Vec<Vec<u32>> {
    let mut counts = vec![0usize; k];
    for &b in seq_of {
        counts[b as usize] += 1;
    }
    let ranked = seq_of
        .iter()
        .enumerate()
        .map(|(i, &b)| (b as usize, position(i)));
    Grouped::scatter(counts, ranked)
        .iter()
        .map(<[u32]>::to_vec)
        .collect()
}

/// First-fit-decreasing over (tokens, units, images), the fallback when
/// the balanced packing does not fit; over the tokens alone without other
/// caps.
fn ffd(prep: &Prepared) -> Vec<Vec<u32>> {
    let cap = prep.caps.map(|c| u32::try_from(c).unwrap_or(u32::MAX));
    let packing = if prep.caps[1..].iter().all(|&c| c == u64::MAX) {
        let items: Vec<Sizes<1>> = prep.items.iter().map(Sizes).collect();
        first_fit_decreasing(&items, [cap[0]])
    } else {
        let items: Vec<Sizes<3>> = prep.items.iter().map(Sizes).collect();
        first_fit_decreasing(&items, cap)
    };
    match packing {
        Ok(p) => p
            .bins()
            .map(|b| b.items().iter().map(|&i| i as u32).collect())
            .collect(),
        // Validated: every sample fits, so FFD cannot fail; keep one sample
        // a sequence if it ever did.
        Err(_) => (0..prep.len() as u32).map(|p| vec![p]).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::{Given, Image, Sample};
    use crate::plan::prepare::prepare;
    use crate::plan::{StepSample, SyncModel};

    /// The row holds fewer units than its share: the others alone cannot
    /// take the rest, all the sequences can. Sequences of 10 tokens and 4
    /// units, two in the row: the largest sample (6 tokens, 0 + 10) and two
    /// dense ones (3 tokens, 0 + 4); six samples of 2 tokens and 2 units
    /// (1 + 2.5, less dense in language, above the largest with the other
    /// two) are left, 12 units for the 8 of the two other sequences. The row's two
    /// sequences take the two that do not fit there, and keep their own.
    #[test]
    fn the_rest_fits_around_a_row_of_few_units() {
        let mut batch = vec![Sample::text_only(6).with_cost(Phases::new(0.0, 10.0))];
        batch.extend((0..2).map(|_| Sample::text_only(3).with_cost(Phases::new(0.0, 4.0))));
        batch.extend((0..6).map(|_| {
            Sample::new(
                0,
                [Image::with_units(
                    2,
                    core::num::NonZeroU32::MIN.saturating_add(1),
                )],
            )
            .with_cost(Phases::new(1.0, 2.5))
        }));
        let batch: Vec<StepSample> = batch
            .into_iter()
            .enumerate()
            .map(|(i, s)| StepSample::new(i as u64, s.unwrap()))
            .collect();
        let prep = prepare(&batch, &Given, [10, 4, u64::MAX], 2, 1, SyncModel::Phase).unwrap();
        let (k, row) = (4, 2);
        let (fill, taken) = fill_row(&prep, row, k).unwrap();
        assert_eq!(fill, vec![vec![0], vec![1, 2]]);
        // Over the other sequences alone, the rest does not fit.
        let rest: Vec<usize> = (0..prep.len()).filter(|&p| !taken[p]).collect();
        let item = |i: usize| Phased(&prep.items[rest[i]]);
        assert_eq!(vector_lpt_by(rest.len(), item, &prep.caps, k - row), None);
        let sequences = around_fill_row(&prep, k, row).expect("room in the row");
        assert_eq!(sequences.len(), k);
        let mut seen = vec![0; prep.len()];
        for (b, members) in sequences.iter().enumerate() {
            assert!(members.windows(2).all(|w| w[0] < w[1]), "{sequences:?}");
            let size: Vec<u64> = (0..2)
                .map(|d| members.iter().map(|&p| prep.size(p as usize)[d]).sum())
                .collect();
            assert!(size[0] <= 10 && size[1] <= 4, "sequence {b}: {size:?}");
            for &p in members {
                seen[p as usize] += 1;
            }
        }
        assert!(seen.iter().all(|&c| c == 1), "{seen:?}");
        assert!(sequences[0].contains(&0) && sequences[1].starts_with(&[1, 2]));
        assert_eq!(
            sequences[0].len() + sequences[1].len(),
            3 + 2,
            "{sequences:?}"
        );
        // And `pack` says the row is there.
        let request = Request {
            ranks: 2,
            per_step: 1,
            micro_steps: Some(2),
            phases: true,
            min_steps: 1,
        };
        let packed = pack(&prep, request).unwrap();
        assert!(packed.fill_row && packed.balanced);
        assert_eq!(packed.sequences, sequences);
    }

    /// `balanced_at` is `pack`'s balanced packing where it fits, and
    /// `None` where only first fit does: sequences of 10 tokens, two of
    /// them; the densest samples (3 and 2 tokens) go first to the two
    /// sequences, then the three of 5 tokens, the last of which fits in
    /// neither. First fit decreasing packs 5 + 5 and 5 + 3 + 2.
    #[test]
    fn balanced_at_makes_no_first_fit_packing() {
        let costed =
            |tokens: u32, cost: f64| Sample::text_only(tokens).with_cost(Phases::new(0.0, cost));
        let batch: Vec<StepSample> = [(5, 1.0), (5, 1.0), (5, 1.0), (3, 10.0), (2, 9.0)]
            .into_iter()
            .enumerate()
            .map(|(i, (t, c))| StepSample::new(i as u64, costed(t, c).unwrap()))
            .collect();
        let prep = prepare(
            &batch,
            &Given,
            [10, u64::MAX, u64::MAX],
            2,
            1,
            SyncModel::Phase,
        )
        .unwrap();
        let request = Request {
            ranks: 2,
            per_step: 1,
            micro_steps: Some(1),
            phases: true,
            min_steps: 1,
        };
        assert!(balanced_at(&prep, request, 1).is_none());
        let packed = pack(&prep, request).unwrap();
        assert!(!packed.balanced);
        assert_eq!(packed.sequences, vec![vec![0, 1], vec![2, 3, 4]]);
        // With room for it, the same packing as `pack`'s.
        let wider = prepare(
            &batch,
            &Given,
            [13, u64::MAX, u64::MAX],
            2,
            1,
            SyncModel::Phase,
        )
        .unwrap();
        let at = balanced_at(&wider, request, 1).expect("fits");
        let packed = pack(&wider, request).unwrap();
        assert!(at.balanced && packed.balanced);
        assert_eq!(at.sequences, packed.sequences);
        assert_eq!(at.shape.steps, 1);
    }

    /// The first-fit count packs the samples by reference as the library's
    /// FFD packs copies of their ids and sizes: tokens only where the units
    /// and images are not capped, all three where they are (it fails with
    /// a dimension read wrong). Sizes drawn from few values, so that ties
    /// abound; some samples with images.
    #[test]
    fn ffd_packs_the_references_as_copies() {
        let batch: Vec<StepSample> = (0..300u64)
            .map(|i| {
                let h = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40;
                let tokens = 1 + (h % 7) as u32 * 37;
                let sample = if h % 3 == 0 {
                    let units = core::num::NonZeroU32::MIN.saturating_add((h % 4) as u32);
                    Sample::new(tokens, [Image::with_units(1 + (h % 5) as u32 * 20, units)])
                } else {
                    Sample::text_only(tokens)
                };
                StepSample::new(h ^ i, sample)
            })
            .collect();
        let expected = |prep: &Prepared, dims: usize| -> Vec<Vec<u32>> {
            let cap = prep.caps.map(|c| u32::try_from(c).unwrap_or(u32::MAX));
            let packing = if dims == 1 {
                let items: Vec<(u64, u32)> =
                    prep.items.iter().map(|e| (e.id, e.sizes[0])).collect();
                first_fit_decreasing(&items, cap[0])
            } else {
                let items: Vec<(u64, [u32; 3])> =
                    prep.items.iter().map(|e| (e.id, e.sizes)).collect();
                first_fit_decreasing(&items, cap)
            };
            let packing = packing.unwrap();
            packing
                .bins()
                .map(|b| b.items().iter().map(|&i| i as u32).collect())
                .collect()
        };
        for (caps, dims) in [([400, u64::MAX, u64::MAX], 1), ([400, 5, 3], 3)] {
            let prep = prepare(&batch, &Given, caps, 2, 1, SyncModel::Step).unwrap();
            let got = ffd(&prep);
            assert!(got.len() > 1, "{caps:?}");
            assert_eq!(got, expected(&prep, dims), "{caps:?}");
        }
    }
}

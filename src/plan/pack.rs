//! Packing stage: the samples into `R * A * S` balanced sequences (vector LPT with capacities, around a fill row under per-phase barriers, first-fit-decreasing when too tight), choosing `A`.

use alloc::vec;
use alloc::vec::Vec;

use super::fill::fill_row;
use super::prepare::{Entry, Prepared};
use super::shape::Shape;
use crate::error::Error;
use crate::grouped::Grouped;
use crate::pack::first_fit_decreasing;
use crate::partition::{vector_lpt, vector_lpt_by, VectorItem};

/// What the packing is asked for: `R`, `S`, and `A` if given.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Request {
    pub(crate) ranks: usize,
    pub(crate) per_step: usize,
    /// `A`, or `None` for the smallest the planner fits.
    pub(crate) micro_steps: Option<usize>,
    /// Whether the phases are balanced each on its own (per-phase
    /// barriers), else their total.
    pub(crate) phases: bool,
    /// With `phases`, whether one row of `R * S` sequences is the fill row
    /// of the largest sample ([`fill_row`]; for `A > 1`), the others
    /// balanced around it.
    pub(crate) fill: bool,
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
}

/// Packs the prepared samples into the sequences of `request`: for a given
/// `A`, the balanced packing ([`vector_lpt`] over the samples' costs, with
/// the tokens as the primary size; with `request.phases`, vision and
/// language each balanced on its own, and with `request.fill` and `A > 1`
/// around the fill row of the largest sample, [`fill_row`]) if it fits,
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
    let try_balanced = |steps: usize| {
        let row = (request.fill && steps > 1).then_some(per_row);
        balanced(prep, steps * per_row, request.phases, row).map(|sequences| Packed {
            shape: shape(steps),
            sequences,
            balanced: true,
        })
    };
    let fallback = |steps: usize, mut sequences: Vec<Vec<u32>>| {
        sequences.resize_with(steps * per_row, Vec::new);
        Packed {
            shape: shape(steps),
            sequences,
            balanced: false,
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

/// A sample whose phases are balanced each on its own (a reference, made
/// on demand by [`vector_lpt_by`]: an array of copies of the entries would
/// be 40 bytes a sample at the peak of planning under per-phase barriers,
/// one of references 8).
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
/// `phases` and `fill_row`, the first that many sequences are the fill row
/// ([`fill_row`]) and the rest is balanced over the others, if it fits
/// them.
fn balanced(
    prep: &Prepared,
    k: usize,
    phases: bool,
    fill_row: Option<usize>,
) -> Option<Vec<Vec<u32>>> {
    if let Some(row) = fill_row.filter(|&row| phases && row < k) {
        if let Some(sequences) = around_fill_row(prep, k, row) {
            return Some(sequences);
        }
    }
    let seq_of = if phases {
        vector_lpt_by(prep.len(), |p| Phased(&prep.items[p]), &prep.caps, k)?
    } else {
        vector_lpt(&prep.items, &prep.caps, k)?
    };
    Some(scatter(k, &seq_of, |i| i as u32))
}

/// The fill row of `row` sequences, then the other samples balanced phase
/// by phase over the other `k - row` sequences (`None` if they do not fit).
fn around_fill_row(prep: &Prepared, k: usize, row: usize) -> Option<Vec<Vec<u32>>> {
    let (mut sequences, taken) = fill_row(prep, row, k)?;
    let rest: Vec<u32> = (0..prep.len() as u32)
        .filter(|&p| !taken[p as usize])
        .collect();
    let item = |i: usize| Phased(&prep.items[rest[i] as usize]);
    let seq_of = vector_lpt_by(rest.len(), item, &prep.caps, k - row)?;
    sequences.extend(scatter(k - row, &seq_of, |i| rest[i]));
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
        let items: Vec<(u64, u32)> = prep.items.iter().map(|e| (e.id, e.sizes[0])).collect();
        first_fit_decreasing(&items, cap[0])
    } else {
        let items: Vec<(u64, [u32; 3])> = prep.items.iter().map(|e| (e.id, e.sizes)).collect();
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

//! The prepared batch: the samples validated, sorted by id and costed once, the planner's stages' common input.

use alloc::vec::Vec;

use super::evaluate::{fewest_sequences, fill_excess, staircase, Beyond, BoundParts, Stair};
use super::sample::StepSample;
use super::sync::SyncModel;
use crate::cost::{GroupFloor, Incremental, Phase, Phases};
use crate::error::{Error, InvalidReason, Locator, Oversize, Scalar};
use crate::partition::VectorItem;

/// The names of the size dimensions, for errors.
const DIMENSIONS: [&str; 3] = ["tokens", "units", "images"];

/// The caps of a packed sequence: tokens (`L`), ViT units and images;
/// `u64::MAX` for none.
pub(crate) type Caps = [u64; 3];

/// One validated sample: its id, input index, sizes (tokens, units,
/// images) and cost when alone; kept together so that one cache line
/// serves every lookup by position.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Entry {
    pub(crate) id: u64,
    pub(crate) input: u32,
    pub(crate) sizes: [u32; 3],
    pub(crate) cost: Phases,
}

impl VectorItem<3> for Entry {
    #[inline]
    fn weight(&self) -> f64 {
        self.cost.total()
    }
    #[inline]
    fn sizes(&self) -> [u32; 3] {
        self.sizes
    }
}

/// The validated samples in ascending id (their *positions*), the caps, and
/// the sums the report and the refinement need.
pub(crate) struct Prepared {
    pub(crate) items: Vec<Entry>,
    pub(crate) caps: Caps,
    /// Per phase and in total, the largest cost of a single sample.
    pub(crate) largest: Phases,
    pub(crate) largest_total: f64,
    /// The sum of the samples' floors (`CostModel::floor`): at most the
    /// sum of the costs of any groups that cover the samples.
    pub(crate) floors: Phases,
    /// The largest floor of a single sample, summed over phases.
    pub(crate) largest_floor: f64,
    /// The staircases of the floors per phase and of their totals, for
    /// micro-steps of the planner's `R * S` sequences ([`staircase`]).
    pub(crate) stairs: Phases,
    pub(crate) stairs_total: f64,
    /// The fill terms per phase and of the totals ([`fill_excess`]).
    pub(crate) fill: Phases,
    pub(crate) fill_total: f64,
    /// What the sequences cost beyond their samples' floors, for the
    /// bound: the model's group floor (checked), the samples' tokens and
    /// the sum of their squares, and the fewest sequences that hold them
    /// (its `most` is the samples; [`Prepared::bound_parts`] lowers it).
    pub(crate) beyond: Beyond,
}

impl Prepared {
    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }

    /// The same batch with other items (units, or the samples with other
    /// costs): the largest costs recomputed from them, the caps, floors and
    /// the bound's parts kept. O(items).
    pub(crate) fn with_items(&self, items: Vec<Entry>) -> Prepared {
        let (mut largest, mut largest_total) = (Phases::ZERO, 0.0f64);
        for e in &items {
            largest = largest.max(e.cost);
            largest_total = largest_total.max(e.cost.total());
        }
        Prepared {
            items,
            caps: self.caps,
            largest,
            largest_total,
            floors: self.floors,
            largest_floor: self.largest_floor,
            stairs: self.stairs,
            stairs_total: self.stairs_total,
            fill: self.fill,
            fill_total: self.fill_total,
            beyond: self.beyond,
        }
    }

    /// The parts of the step's lower bound, for plans of at most
    /// `sequences` non-empty sequences (at most the samples).
    pub(crate) fn bound_parts(&self, sequences: usize) -> BoundParts {
        BoundParts {
            floors: self.floors,
            largest: self.largest_floor,
            stairs: self.stairs,
            stairs_total: self.stairs_total,
            fill: self.fill,
            fill_total: self.fill_total,
            beyond: Beyond {
                most: sequences.min(self.beyond.most),
                ..self.beyond
            },
        }
    }

    #[inline]
    pub(crate) fn cost(&self, p: usize) -> Phases {
        self.items[p].cost
    }

    #[inline]
    pub(crate) fn size(&self, p: usize) -> [u64; 3] {
        self.items[p].sizes.map(u64::from)
    }

    /// Whether sample `p` fits a sequence holding `load`.
    #[inline]
    pub(crate) fn fits(&self, load: [u64; 3], p: usize) -> bool {
        self.fits_size(load, self.size(p))
    }

    /// Whether a sample of `size` (tokens, units, images) fits a sequence
    /// holding `load`.
    #[inline]
    pub(crate) fn fits_size(&self, load: [u64; 3], size: [u64; 3]) -> bool {
        (0..3).all(|d| load[d] + size[d] <= self.caps[d])
    }
}

/// Sorts `samples` by id, checks ids and sizes against `caps`, evaluates
/// every sample's cost alone and its floor with `model`, and the
/// staircases and fill terms of the floors for micro-steps of `ranks x
/// per_step` sequences where the lower bound under `sync` uses them.
///
/// # Errors
///
/// [`Error::DuplicateId`] for a repeated id, [`Error::Invalid`] at a
/// [cost](crate::Locator::Cost) for a NaN, infinite or negative cost in a
/// phase, [`Error::Invalid`] at a [floor](crate::Locator::Floor) for a floor
/// that is not between zero and the cost alone, [`Error::Invalid`] at a
/// [group floor](crate::Locator::GroupFloor) for a part of the model's
/// group floor that is NaN, infinite or negative, [`Error::CostOverflow`] when
/// the costs sum beyond `f64::MAX`, [`Error::Oversize`] listing every sample
/// over a cap.
///
/// # Complexity
///
/// O(n log n) time (the sorts), O(n) extra space.
pub(crate) fn prepare<M: Incremental>(
    samples: &[StepSample],
    model: &M,
    caps: Caps,
    ranks: usize,
    per_step: usize,
    sync: SyncModel,
) -> Result<Prepared, Error> {
    let group = checked_group_floor(model.group_floor())?;
    let mut keyed: Vec<(u64, u32)> = samples
        .iter()
        .enumerate()
        .map(|(i, s)| (s.id(), i as u32))
        .collect();
    keyed.sort_unstable();
    let mut items: Vec<Entry> = Vec::with_capacity(samples.len());
    // Every sample's floor, for the staircases and fills of the
    // per-micro-step models' bounds (none under `Step`: 16 bytes a sample
    // not allocated).
    let mut floor_of: Vec<Phases> = Vec::with_capacity(if sync == SyncModel::Step {
        0
    } else {
        samples.len()
    });
    let mut oversize = Vec::new();
    let (mut total, mut largest, mut largest_total) = (Phases::ZERO, Phases::ZERO, 0.0f64);
    let (mut floors, mut largest_floor) = (Phases::ZERO, 0.0f64);
    // The tokens and their squares, for the group floor's part of the
    // bound: below 2^32 samples of below 2^32 tokens (within the cap, a
    // u32; an oversize sample is refused below), so below 2^64 and 2^96.
    let (mut tokens_sum, mut squares) = (0u128, 0u128);
    for (id, i) in keyed {
        if items.last().is_some_and(|e| e.id == id) {
            return Err(Error::DuplicateId { id });
        }
        let (entry, floor) = checked(&samples[i as usize], i, model, caps, &mut oversize)?;
        let c = entry.cost;
        total += c;
        floors += floor;
        let t = u128::from(entry.sizes[0]);
        tokens_sum = tokens_sum.saturating_add(t);
        squares = squares.saturating_add(t.saturating_mul(t));
        if sync != SyncModel::Step {
            floor_of.push(floor);
        }
        largest = largest.max(c);
        largest_total = largest_total.max(c.total());
        largest_floor = largest_floor.max(floor.total());
        items.push(entry);
    }
    if !oversize.is_empty() {
        return Err(Error::Oversize { items: oversize });
    }
    // Each cost is finite; their sums (which bound every floor sum) must be
    // too, or no step time could be told from another.
    finite_phases(total, items.len())?;
    if !total.total().is_finite() {
        return Err(Error::CostOverflow {
            phase: None,
            samples: items.len(),
        });
    }
    let per_row = ranks.saturating_mul(per_step);
    let terms = FloorTerms::of(&items, &floor_of, caps, ranks, per_row, sync);
    let beyond = Beyond {
        group,
        tokens: tokens_sum,
        squares,
        fewest: fewest_sequences(items.iter().map(|e| e.sizes), caps),
        most: items.len(),
    };
    Ok(Prepared {
        items,
        caps,
        largest,
        largest_total,
        floors,
        largest_floor,
        stairs: terms.stairs,
        stairs_total: terms.stairs_total,
        fill: terms.fill,
        fill_total: terms.fill_total,
        beyond,
    })
}

/// Sample `s` (input index `i`) checked: its loss tokens against its
/// tokens, its sizes against `caps` (each size over a cap pushed to
/// `oversize`, to be refused with all the others), its cost alone and its
/// floor from `model`; its entry and floor.
///
/// # Errors
///
/// [`Error::LossTokens`], and [`Error::Invalid`] at a cost or a floor, as
/// [`prepare`] lists them.
fn checked<M: Incremental>(
    s: &StepSample,
    i: u32,
    model: &M,
    caps: Caps,
    oversize: &mut Vec<Oversize>,
) -> Result<(Entry, Phases), Error> {
    let id = s.id();
    let tokens = s.sample().tokens();
    if s.loss_tokens() > tokens {
        return Err(Error::LossTokens {
            id,
            loss_tokens: s.loss_tokens(),
            tokens,
        });
    }
    let size = [tokens, s.units(), s.sample().images().len() as u64];
    for (d, limit) in DIMENSIONS.into_iter().enumerate() {
        if size[d] > caps[d] {
            oversize.push(Oversize {
                index: i as usize,
                id: Some(id),
                dim: d,
                name: Some(limit),
                size: Scalar::Int(size[d]),
                capacity: Scalar::Int(caps[d]),
            });
        }
    }
    // Both in one evaluation where the model's floor is its cost alone
    // (`Incremental::cost_and_floor`).
    let (c, floor) = model.cost_and_floor(s.sample());
    for phase in Phase::ALL {
        let (value, low) = (c.get(phase), floor.get(phase));
        // NaN-safe: `!(x >= 0.0)` is also true for NaN.
        if let Some(reason) = InvalidReason::of_float(value) {
            return Err(Error::float(Locator::Cost { id, phase }, value, reason));
        }
        if !(low >= 0.0 && low <= value) {
            let reason = InvalidReason::of_float(low).unwrap_or(InvalidReason::AboveCost);
            let at = Locator::Floor {
                id,
                phase,
                cost: value,
            };
            return Err(Error::float(at, low, reason));
        }
    }
    let entry = Entry {
        id,
        input: i,
        // Within caps every size fits u32 (tokens <= L, a u32); without a
        // cap saturating is harmless.
        sizes: size.map(|x| u32::try_from(x).unwrap_or(u32::MAX)),
        cost: c,
    };
    Ok((entry, floor))
}

/// The staircases and fill terms of the floors ([`staircase`],
/// [`fill_excess`]), per phase and of their totals, only where the sync
/// model's bound uses them (zero otherwise).
struct FloorTerms {
    stairs: Phases,
    stairs_total: f64,
    fill: Phases,
    fill_total: f64,
}

impl FloorTerms {
    /// The terms of `items` with floors `floor_of` (empty under
    /// [`SyncModel::Step`]), for micro-steps of `per_row` sequences over
    /// `ranks`. O(n log n) time (each is a sort or a selection), O(n) extra
    /// space.
    fn of(
        items: &[Entry],
        floor_of: &[Phases],
        caps: Caps,
        ranks: usize,
        per_row: usize,
        sync: SyncModel,
    ) -> Self {
        let mut terms = FloorTerms {
            stairs: Phases::ZERO,
            stairs_total: 0.0,
            fill: Phases::ZERO,
            fill_total: 0.0,
        };
        if sync == SyncModel::Step {
            return terms;
        }
        let n = items.len();
        let size = |i: usize| items[i].sizes;
        // Each is over one part of the floors: the totals, or a phase.
        let total = |p: Phases| p.total();
        let vision = |p: Phases| p.vision;
        let language = |p: Phases| p.language;
        let mut stair_keys: Vec<Stair> = Vec::new();
        let mut stair = |part: fn(Phases) -> f64| {
            staircase(
                n,
                |i| part(floor_of[i]),
                size,
                caps,
                per_row,
                &mut stair_keys,
            )
        };
        terms.stairs_total = stair(total);
        if sync == SyncModel::Phase {
            terms.stairs = Phases::new(stair(vision), stair(language));
        }
        drop(stair_keys);
        // A micro-step holds `per_row` sequences of `caps[0]` tokens.
        let capacity = per_row as f64 * caps[0] as f64;
        let tokens = |i: usize| u64::from(items[i].sizes[0]);
        let mut keys = Vec::new();
        let mut fill_of = |part: fn(Phases) -> f64| {
            fill_excess(n, |i| part(floor_of[i]), tokens, capacity, ranks, &mut keys)
        };
        terms.fill_total = fill_of(total);
        if sync == SyncModel::Phase {
            terms.fill = Phases::new(fill_of(vision), fill_of(language));
        }
        terms
    }
}

/// `group`, a model's [`GroupFloor`], if both its parts are finite and
/// non-negative in every phase; else [`Error::Invalid`] at a
/// [group floor](crate::Locator::GroupFloor) naming the first part and
/// phase that is not.
fn checked_group_floor(group: GroupFloor) -> Result<GroupFloor, Error> {
    for (part, value) in [
        ("per_group", group.per_group),
        ("per_token_pair", group.per_token_pair),
    ] {
        for phase in Phase::ALL {
            let x = value.get(phase);
            if let Some(reason) = InvalidReason::of_float(x) {
                return Err(Error::float(Locator::GroupFloor { part, phase }, x, reason));
            }
        }
    }
    Ok(group)
}

/// `cost`, the cost of `samples` samples together, is finite in every
/// phase; else [`Error::CostOverflow`] naming the first phase that is not.
pub(crate) fn finite_phases(cost: Phases, samples: usize) -> Result<(), Error> {
    match Phase::ALL.into_iter().find(|&p| !cost.get(p).is_finite()) {
        Some(phase) => Err(Error::CostOverflow {
            phase: Some(phase),
            samples,
        }),
        None => Ok(()),
    }
}

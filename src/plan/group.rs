//! Groups: samples that stay together ([`GroupScope`]), planned as units that move together through packing, dealing and refinement.
//!
//! A *unit* is a set of samples that the planner's stages move as one item:
//! an ungrouped sample alone, a group that fits one packed sequence, or
//! (under [`GroupScope::Rank`] only) one *chunk* of a group that does not.
//! The units form a [`Prepared`] batch of their own (each unit's sizes and
//! own costs summed, in ascending order of its smallest id), so packing,
//! dealing and refinement run on it unchanged, and the plan's slots are
//! expanded back to samples before the plan is finished.
//!
//! - [`GroupScope::MicroBatch`]: every group is one unit, so it lands in one
//!   packed sequence (hence one micro-batch, and one rank). A group whose
//!   samples together exceed `L` or a cap is [`Error::GroupTooLarge`].
//! - [`GroupScope::Rank`]: a group that fits one sequence is one unit as
//!   above. A larger group is cut into chunks by first-fit-decreasing over
//!   the caps (its samples in decreasing tokens, ties by id); each chunk is
//!   a unit sized as a whole sequence (its tokens counted as `L`), so no
//!   other chunk shares its sequence. Every such group gets a *home* rank
//!   before planning, by LPT of the groups' chunk counts over the ranks
//!   (most chunks first, ties by group id, to the rank with the fewest
//!   chunks so far, ties by rank), and the plan has at least
//!   `ceil(max home chunks / S)` micro-steps. After dealing, each chunk's
//!   sequence that is not on its home rank trades places with a sequence
//!   of the home rank that holds no chunk of that rank (one of the same
//!   micro-step when there is one, so that the micro-step's costs stay the
//!   same), and the refinement never moves a chunk. A home rank holds at
//!   least as many sequences as chunks, so a sequence to trade with always
//!   exists. Under per-micro-step barriers each rank's micro-batches are
//!   then put in decreasing cost, so that the costliest of every rank share
//!   a micro-step.
//!
//! Without groups none of this runs and plans are those of the planner
//! without groups, bit for bit.
//!
//! # Complexity
//!
//! Building the units: O(n log n) time (the sort by group, and the
//! first-fit-decreasing of the large groups), O(n) extra space. Homes:
//! O(G log R) for G large groups. The trades: O(C + K) for C chunks in K
//! sequences (a cursor per rank over its sequences), and O(K log K) for the
//! order of the micro-batches.

use alloc::collections::BinaryHeap;
use alloc::vec;
use alloc::vec::Vec;
use core::cmp::Reverse;

use super::deal::{give_every_rank_work, Sequences};
use super::prepare::{Entry, Prepared};
use super::sample::StepSample;
use super::shape::Shape;
use super::sync::SyncModel;
use crate::cost::Phases;
use crate::error::Error;
use crate::pack::first_fit_decreasing;

/// Where the samples of a group
/// ([`StepSample::with_group`](crate::plan::StepSample::with_group)) must
/// land together: the same micro-batch (the default) or the same rank.
///
/// # Examples
///
/// ```
/// use microbatch::plan::GroupScope;
///
/// assert_eq!(GroupScope::default(), GroupScope::MicroBatch);
/// assert_eq!("rank".parse::<GroupScope>(), Ok(GroupScope::Rank));
/// assert_eq!(GroupScope::MicroBatch.to_string(), "micro-batch");
/// assert!("node".parse::<GroupScope>().is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub enum GroupScope {
    /// Every sample of a group in the same micro-batch (the responses of
    /// one prompt whose advantages are normalized together, the pairs of a
    /// contrastive loss): the planner keeps the group in one packed
    /// sequence, so the group must fit one (`L` and the caps).
    #[default]
    MicroBatch,
    /// Every sample of a group on the same rank, possibly over several
    /// sequences and micro-steps (the pieces of a long conversation whose
    /// state stays on one rank): a group may be larger than one sequence,
    /// but at most as large as one rank's `A * S` sequences.
    Rank,
}

impl GroupScope {
    /// Every scope, in order.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::plan::GroupScope;
    ///
    /// assert_eq!(GroupScope::ALL[0], GroupScope::default());
    /// assert!(GroupScope::ALL.iter().all(|s| s.name().parse::<GroupScope>() == Ok(*s)));
    /// ```
    pub const ALL: [GroupScope; 2] = [GroupScope::MicroBatch, GroupScope::Rank];

    /// The name of every scope, in the order of [`GroupScope::ALL`]: the
    /// names [`FromStr`](core::str::FromStr) reads and an unknown name's
    /// error lists.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::plan::GroupScope;
    ///
    /// assert_eq!(GroupScope::NAMES, ["micro-batch", "rank"]);
    /// ```
    pub const NAMES: [&'static str; 2] = ["micro-batch", "rank"];

    /// The name used by [`Display`](core::fmt::Display) and
    /// [`FromStr`](core::str::FromStr): `micro-batch` or `rank`.
    ///
    /// # Examples
    ///
    /// ```
    /// use microbatch::plan::GroupScope;
    ///
    /// assert_eq!(GroupScope::Rank.name(), "rank");
    /// ```
    #[must_use]
    pub const fn name(&self) -> &'static str {
        Self::NAMES[*self as usize]
    }
}

crate::error::impl_named!(GroupScope, "group scope", &GroupScope::NAMES);

/// The names of the size dimensions, for errors.
const DIMENSIONS: [&str; 3] = ["tokens", "units", "images"];

/// The units of a batch with groups: their prepared batch, their samples,
/// and for the chunks of large groups (under [`GroupScope::Rank`]) their
/// home rank.
pub(crate) struct Units {
    /// The units as a batch: positions in ascending smallest id.
    pub(crate) prep: Prepared,
    /// The sample positions of unit `u`: `members[offsets[u]..offsets[u + 1]]`,
    /// ascending.
    members: Vec<u32>,
    offsets: Vec<usize>,
    /// The home rank of each unit that is a chunk, `u32::MAX` for the others.
    home: Vec<u32>,
    /// The most chunks any rank is home to (0 without chunks).
    most_chunks: usize,
    /// The large group with the most chunks: (chunks, group id, samples).
    largest: Option<(usize, u64, usize)>,
}

impl Units {
    /// The samples of unit `u`, ascending.
    fn members(&self, u: u32) -> &[u32] {
        let u = u as usize;
        &self.members[self.offsets[u]..self.offsets[u + 1]]
    }

    /// Whether unit `u` is a chunk pinned to its home rank.
    pub(crate) fn pinned(&self, u: u32) -> bool {
        self.home[u as usize] != u32::MAX
    }

    /// Which units are pinned, by unit position (empty when none is, so
    /// that the refinement skips the lookup).
    pub(crate) fn pins(&self) -> Vec<bool> {
        if self.most_chunks == 0 {
            return Vec::new();
        }
        self.home.iter().map(|&h| h != u32::MAX).collect()
    }

    /// The fewest micro-steps that hold every chunk on its home rank with
    /// `per_step` sequences a micro-step (1 without chunks); with `given`
    /// micro-steps, [`Error::GroupTooLarge`] for the group with the most
    /// chunks when one rank's sequences cannot hold it.
    pub(crate) fn min_steps(&self, per_step: usize, given: Option<usize>) -> Result<usize, Error> {
        if let (Some(a), Some((chunks, group, samples))) = (given, self.largest) {
            let cap = (a as u128) * (per_step as u128);
            if chunks as u128 > cap {
                return Err(Error::GroupTooLarge {
                    group,
                    samples,
                    dim: "sequences",
                    size: chunks as u64,
                    cap: u64::try_from(cap).unwrap_or(u64::MAX),
                });
            }
        }
        Ok(self.most_chunks.div_ceil(per_step).max(1))
    }

    /// Puts every chunk's sequence on its home rank: `order` maps slots to
    /// sequences of `seqs` (unit positions); a sequence holding a chunk
    /// away from home trades slots with a sequence of the home rank that
    /// holds no chunk at home there, of the same micro-step if one does.
    /// For [`SyncModel::Step`] each rank's sequences then follow the
    /// loader's order again.
    pub(crate) fn gather(
        &self,
        sync: SyncModel,
        shape: Shape,
        order: &mut [u32],
        seqs: &Sequences,
    ) {
        if self.most_chunks == 0 {
            return;
        }
        let per_rank = shape.per_rank();
        // The home of the chunk in each sequence (a sequence holds at most
        // one chunk: each counts as `L` tokens), `u32::MAX` for none.
        let home_of = |b: u32| -> u32 {
            seqs.members[b as usize]
                .iter()
                .map(|&u| self.home[u as usize])
                .find(|&h| h != u32::MAX)
                .unwrap_or(u32::MAX)
        };
        let at_home = |k: usize, b: u32| home_of(b) as usize == k / per_rank;
        let mut kept: Vec<bool> = order
            .iter()
            .enumerate()
            .map(|(k, &b)| at_home(k, b))
            .collect();
        // A cursor per rank over its slots: slots before it are kept.
        let mut cursor: Vec<usize> = (0..shape.ranks).map(|r| r * per_rank).collect();
        for k in 0..order.len() {
            // Each trade sends one chunk home for good; the sequence that
            // comes back to `k` may hold another chunk, so repeat.
            loop {
                let h = home_of(order[k]);
                if h == u32::MAX || kept[k] {
                    break;
                }
                let t = h as usize;
                let (j, i) = ((k % per_rank) / shape.per_step, k % shape.per_step);
                let first = shape.micro_batch(t, j);
                let same_step = (0..shape.per_step)
                    .map(|d| first + (i + d) % shape.per_step)
                    .find(|&s| !kept[s]);
                let target = match same_step {
                    Some(s) => Some(s),
                    None => {
                        let end = (t + 1) * per_rank;
                        let c = &mut cursor[t];
                        while *c < end && kept[*c] {
                            *c += 1;
                        }
                        (*c < end).then_some(*c)
                    }
                };
                // Always found: a home rank holds at least as many
                // sequences as chunks. Leave the chunk if not, rather than
                // loop.
                let Some(s) = target else { break };
                order.swap(k, s);
                kept[s] = true;
                kept[k] = at_home(k, order[k]);
            }
        }
        if sync == SyncModel::Step {
            for rank in order.chunks_mut(per_rank) {
                rank.sort_unstable_by_key(|&b| (seqs.first(b), b));
            }
            return;
        }
        // Per-micro-step barriers: the trades mixed the micro-steps, so each
        // rank's micro-batches go in decreasing cost (the j-th costliest of
        // every rank wait for each other, which for one sequence a
        // micro-batch minimizes the sum of the maxima), ties by position.
        let s = shape.per_step;
        let mut batches: Vec<(f64, usize)> = Vec::with_capacity(shape.steps);
        let mut copy: Vec<u32> = Vec::with_capacity(per_rank);
        for rank in order.chunks_mut(per_rank) {
            batches.clear();
            batches.extend(rank.chunks(s).enumerate().map(|(j, mb)| {
                let cost: f64 = mb.iter().map(|&b| seqs.costs[b as usize].total()).sum();
                (cost, j)
            }));
            batches.sort_unstable_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            copy.clear();
            copy.extend_from_slice(rank);
            for (to, &(_, from)) in batches.iter().enumerate() {
                rank[to * s..(to + 1) * s].copy_from_slice(&copy[from * s..(from + 1) * s]);
            }
        }
    }

    /// The slots of units expanded to the slots of samples, each ascending.
    pub(crate) fn expand(&self, slots: Vec<Vec<u32>>) -> Vec<Vec<u32>> {
        slots
            .into_iter()
            .map(|units| {
                let mut out: Vec<u32> = Vec::new();
                for u in units {
                    out.extend_from_slice(self.members(u));
                }
                out.sort_unstable();
                out
            })
            .collect()
    }
}

/// The slots of samples after the stages on units: a unit moved to every
/// rank without one, from a rank with at least two
/// ([`give_every_rank_work`]; chunks pinned to their home rank never move),
/// then with `units` every unit expanded to its samples. `slots[k]` lists
/// the positions in slot `k`.
///
/// O(n + K) time for n positions in K slots, plus O(K A S) for each rank
/// without work.
pub(crate) fn ungroup(
    units: Option<&Units>,
    shape: Shape,
    mut slots: Vec<Vec<u32>>,
) -> Vec<Vec<u32>> {
    match units {
        Some(u) => {
            give_every_rank_work(&mut slots, shape, |p| !u.pinned(p));
            u.expand(slots)
        }
        None => {
            give_every_rank_work(&mut slots, shape, |_| true);
            slots
        }
    }
}

/// The units of `prep` (the prepared `samples`) for `scope` over `ranks`
/// ranks, or `None` when no sample has a group (the planner then runs on
/// `prep` itself).
///
/// # Errors
///
/// [`Error::GroupTooLarge`] under [`GroupScope::MicroBatch`] for a group
/// whose samples together exceed `L` or a cap (the group of smallest id
/// among them, its first dimension over the cap).
///
/// # Complexity
///
/// O(n log n) time, O(n) extra space.
pub(crate) fn units(
    prep: &Prepared,
    samples: &[StepSample],
    scope: GroupScope,
    ranks: usize,
) -> Result<Option<Units>, Error> {
    // (group, position) of every grouped sample, by group then position.
    let mut grouped: Vec<(u64, u32)> = prep
        .items
        .iter()
        .enumerate()
        .filter_map(|(p, e)| Some((samples[e.input as usize].group()?, p as u32)))
        .collect();
    if grouped.is_empty() {
        return Ok(None);
    }
    grouped.sort_unstable();
    // Each unit as (its sample positions, whether a chunk of which large
    // group): ungrouped samples, whole groups, chunks.
    let mut lists: Vec<(Vec<u32>, u32)> = Vec::with_capacity(prep.len());
    let mut in_group = vec![false; prep.len()];
    // Large groups: (chunks, group id, samples) and their chunk lists' range.
    let mut large: Vec<(usize, u64, usize)> = Vec::new();
    for run in grouped.chunk_by(|a, b| a.0 == b.0) {
        let group = run[0].0;
        let members: Vec<u32> = run.iter().map(|&(_, p)| p).collect();
        for &p in &members {
            in_group[p as usize] = true;
        }
        let mut sum = [0u64; 3];
        for &p in &members {
            for (s, x) in sum.iter_mut().zip(prep.size(p as usize)) {
                *s = s.saturating_add(x);
            }
        }
        let Some(d) = (0..3).find(|&d| sum[d] > prep.caps[d]) else {
            lists.push((members, u32::MAX));
            continue;
        };
        if scope == GroupScope::MicroBatch {
            return Err(Error::GroupTooLarge {
                group,
                samples: members.len(),
                dim: DIMENSIONS[d],
                size: sum[d],
                cap: prep.caps[d],
            });
        }
        let chunks = chunks(prep, &members);
        let index = large.len() as u32;
        large.push((chunks.len(), group, members.len()));
        lists.extend(chunks.into_iter().map(|c| (c, index)));
    }
    lists.extend(
        (0..prep.len() as u32)
            .filter(|&p| !in_group[p as usize])
            .map(|p| (vec![p], u32::MAX)),
    );
    // Units in ascending smallest id (members are ascending and disjoint).
    lists.sort_unstable_by_key(|(m, _)| m.first().copied().unwrap_or(u32::MAX));

    // Homes of the large groups: LPT of their chunk counts over the ranks.
    let mut homes = vec![0u32; large.len()];
    let mut most_chunks = 0usize;
    if !large.is_empty() {
        let mut order: Vec<usize> = (0..large.len()).collect();
        order.sort_unstable_by_key(|&g| (Reverse(large[g].0), large[g].1));
        let mut load: BinaryHeap<Reverse<(usize, usize)>> =
            (0..ranks.max(1)).map(|r| Reverse((0, r))).collect();
        for g in order {
            if let Some(Reverse((chunks, r))) = load.pop() {
                homes[g] = r as u32;
                let now = chunks + large[g].0;
                most_chunks = most_chunks.max(now);
                load.push(Reverse((now, r)));
            }
        }
    }
    let largest = large
        .iter()
        .copied()
        .max_by_key(|&(c, id, _)| (c, Reverse(id)));

    let mut items: Vec<Entry> = Vec::with_capacity(lists.len());
    let mut members: Vec<u32> = Vec::with_capacity(prep.len());
    let mut offsets: Vec<usize> = Vec::with_capacity(lists.len() + 1);
    let mut home: Vec<u32> = Vec::with_capacity(lists.len());
    offsets.push(0);
    for (u, (list, large_group)) in lists.into_iter().enumerate() {
        let mut cost = Phases::ZERO;
        let mut sizes = [0u64; 3];
        for &p in &list {
            cost += prep.cost(p as usize);
            for (s, x) in sizes.iter_mut().zip(prep.size(p as usize)) {
                *s = s.saturating_add(x);
            }
        }
        if large_group != u32::MAX {
            // A chunk fills its sequence: no other chunk can join it.
            sizes[0] = prep.caps[0];
        }
        items.push(Entry {
            id: list.first().map_or(0, |&p| prep.items[p as usize].id),
            input: u as u32,
            sizes: sizes.map(|x| u32::try_from(x).unwrap_or(u32::MAX)),
            cost,
        });
        members.extend_from_slice(&list);
        offsets.push(members.len());
        home.push(match large_group {
            u32::MAX => u32::MAX,
            g => homes[g as usize],
        });
    }
    Ok(Some(Units {
        prep: prep.with_items(items),
        members,
        offsets,
        home,
        most_chunks,
        largest,
    }))
}

/// The chunks of a group larger than one sequence: first-fit-decreasing of
/// its samples `members` (ascending positions) over the caps, each chunk
/// ascending.
fn chunks(prep: &Prepared, members: &[u32]) -> Vec<Vec<u32>> {
    let cap = prep.caps.map(|c| u32::try_from(c).unwrap_or(u32::MAX));
    let items: Vec<(u64, [u32; 3])> = members
        .iter()
        .map(|&p| {
            let e = &prep.items[p as usize];
            (e.id, e.sizes)
        })
        .collect();
    match first_fit_decreasing(&items, cap) {
        Ok(packing) => packing
            .bins()
            .map(|b| {
                let mut c: Vec<u32> = b.items().iter().map(|&i| members[i]).collect();
                c.sort_unstable();
                c
            })
            .collect(),
        // Every sample fits a sequence (checked by `prepare`): one sample a
        // chunk if it ever did not.
        Err(_) => members.iter().map(|&p| vec![p]).collect(),
    }
}

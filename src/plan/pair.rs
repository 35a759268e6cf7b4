//! Pairing stage: the micro-batches closest to their micro-step's maxima trade one sample (a swap or a move) with the ones farthest below, in bulk, before the search: once across micro-steps, then within each.
//!
//! Under per-micro-step barriers each micro-step must be balanced across
//! ranks in every barrier at once (vision and language for
//! [`SyncModel::Phase`], the total for [`SyncModel::MicroStep`]). The
//! search (`search`) fixes one binding micro-batch at a time, which at a
//! thousand ranks leaves thousands of micro-batches a little above their
//! micro-step's mean, and the micro-steps whose maxima a single large
//! sample sets (room under their maxima that costs nothing to fill) mostly
//! unfilled. These rounds do the bulk of that work cheaply, each pairing
//! micro-batches and giving each pair the one change (a swap of one sample
//! of each, or a move of one sample of the first into one of the second's
//! sequences) that lowers most the larger of the pair's two scores, if it
//! lowers it:
//!
//! 1. [`PAIR_LEVELS`] rounds across micro-steps: every micro-batch's score is
//!    `h = max over barriers of (value - its micro-step's maximum) / mean
//!    value of a micro-batch`; all micro-batches are ranked by `h`
//!    (descending, ties by micro-batch) and the `k`-th is paired with the
//!    `k`-th from the end: work flows from the micro-batches at a maximum
//!    into the room of any micro-step. As `h < 0` after a change, no value
//!    rises above its micro-step's maximum.
//! 2. [`passes`] rounds within each micro-step and barrier `p`: the
//!    micro-batches ranked by `p` (descending, ties by micro-batch), the
//!    `k`-th most loaded paired with the `k`-th least loaded while it is
//!    above the mean, the score `max over barriers q of (q - mean_q) /
//!    mean_q`, and no value may rise above its micro-step's maximum in any
//!    barrier.
//!
//! So no barrier's maximum, and so not the step time, ever rises. The
//! maxima and means are those at the start of a round. A micro-step's
//! costs are summed once for all its rounds within and kept up to date by
//! every change. Every sequence keeps its length and caps; pinned
//! positions never move.
//!
//! A pair's change is sought among the moves of each sample of the first
//! micro-batch into the first sequence of the second with room for it,
//! and its swaps with the samples of the second: all of them when the
//! second holds at most [`PAIR_WINDOW`] movable samples, else the
//! [`PAIR_WINDOW`] nearest to the ideal swap (the one that moves half the
//! pair's gap in the barrier it balances), so that a pair of micro-batches
//! of thousands of samples each costs `O(s log s)`, not `O(s^2)`.
//!
//! Deterministic: fixed orders, ties to the first found. O((PAIR_LEVELS +
//! passes) * (n (log s + PAIR_WINDOW + f) + R A log(R A))) time for n
//! samples, at most `s` samples a micro-batch, R ranks and A micro-steps,
//! `f` the work of one first-fit query (`O(log S)` for `S` sequences a
//! micro-batch when one cap binds); O(R A + PAIR_CHUNK s + m) extra space,
//! `m` the samples of the largest micro-step. The rounds across
//! micro-steps list the members of [`PAIR_CHUNK`] pairs before any is
//! weighed (the pairs of a round are disjoint, so a change leaves the
//! others' members as listed, and the reads of many pairs overlap); the
//! rounds within run one micro-step at a time (its rounds touch only its
//! micro-batches) and list its members once for all of them, a pair's two
//! lists again after each change: each sample is read once for all the
//! rounds, not once a round and barrier.

use alloc::vec;
use alloc::vec::Vec;

use super::deal::Sequences;
use super::sync::SyncModel;
use super::tuning::{PAIR_CHUNK, PAIR_LEVELS, PAIR_WINDOW};
use super::work::{barrier, best_trade, gather, Dim, Goal, Member, Side, Stage};
use crate::cost::Phases;

/// The rounds within every micro-step and barrier under `sync`. Under
/// per-phase barriers a round balances the vision phase, then the
/// language phase, each pulling the other's micro-batches apart, and more
/// rounds settle them (6); under one barrier a micro-step more rounds
/// change the plans little for more planning time (2).
fn passes(sync: SyncModel) -> usize {
    match sync {
        SyncModel::Phase => 6,
        _ => 2,
    }
}

/// A micro-step's means and maxima per barrier index, of its `B`
/// barriers.
struct Row<const B: usize> {
    mean: [f64; B],
    max: [f64; B],
}

impl<const B: usize> Row<B> {
    /// The largest relative excess over the means of a cost whose values
    /// in the barriers are `v` ([`values`]).
    #[inline(always)]
    fn excess(&self, v: [f64; B]) -> f64 {
        let mut worst = f64::NEG_INFINITY;
        for (i, &v) in v.iter().enumerate() {
            let m = self.mean[i];
            let e = if m > 0.0 { (v - m) / m } else { v - m };
            worst = worst.max(e);
        }
        worst
    }

    /// Whether a cost whose values in the barriers are `v` stays at or
    /// below every maximum.
    #[inline(always)]
    fn below(&self, v: [f64; B]) -> bool {
        v.iter().zip(&self.max).all(|(&v, &m)| v <= m)
    }
}

/// The values of `c` in the `B` barriers ([`barrier`]).
#[inline(always)]
fn values<const B: usize>(c: Phases) -> [f64; B] {
    core::array::from_fn(|i| barrier::<B>(i, c))
}

/// The sequences `seqs` with the micro-batches of the stage's deal paired
/// (see the module docs; unchanged for [`SyncModel::Step`]): members and
/// loads are kept up to date, the costs are not read; pinned positions
/// never move.
pub(crate) fn pair(stage: &Stage<'_>, seqs: Sequences) -> Sequences {
    paired(stage, seqs, PAIR_CHUNK)
}

/// [`pair`], the rounds across micro-steps reading the members of `chunk`
/// pairs ahead (any `chunk >= 1` gives the same sequences: the pairs of a
/// round are disjoint).
fn paired(stage: &Stage<'_>, mut seqs: Sequences, chunk: usize) -> Sequences {
    let shape = stage.shape;
    if stage.sync == SyncModel::Step
        || shape.ranks < 2
        || shape.steps == 0
        || stage.slots.len() < shape.slots()
    {
        return seqs;
    }
    for _ in 0..PAIR_LEVELS {
        level(stage, &mut seqs, chunk);
    }
    within(stage, &mut seqs);
    seqs
}

/// The cost of micro-batch `m` (`rank * A + micro-step`).
fn batch_cost(stage: &Stage<'_>, seqs: &Sequences, m: usize) -> Phases {
    stage
        .micro_batch(m)
        .iter()
        .flat_map(|&b| &seqs.members[b as usize])
        .map(|&p| stage.prep.cost(p as usize))
        .sum()
}

/// The rounds within each micro-step (step 2 of the module docs), one
/// micro-step at a time: its rounds touch only its own micro-batches, so
/// the order of the loops changes nothing; its costs are summed and its
/// members listed once for all its rounds (in one run of independent
/// reads), each pair's two lists again after a change; and a micro-step
/// whose round changes nothing is done (the next round would weigh the
/// same pairs).
fn within(stage: &Stage<'_>, seqs: &mut Sequences) {
    match stage.sync {
        SyncModel::Phase => within_in::<2>(stage, seqs),
        _ => within_in::<1>(stage, seqs),
    }
}

/// [`within`] with the `B` barriers of the stage's sync model known.
fn within_in<const B: usize>(stage: &Stage<'_>, seqs: &mut Sequences) {
    let shape = stage.shape;
    let (ranks, steps) = (shape.ranks, shape.steps);
    let batch = |r: usize, j: usize| stage.micro_batch(r * steps + j);
    let mut cost = vec![Phases::ZERO; ranks];
    let mut order: Vec<(f64, u32)> = Vec::with_capacity(ranks);
    let mut lists: Vec<Vec<Member>> = vec![Vec::new(); ranks];
    for j in 0..steps {
        for (r, list) in lists.iter_mut().enumerate() {
            list.clear();
            cost[r] = gather(stage, seqs, batch(r, j), list);
        }
        for _ in 0..passes(stage.sync) {
            let mut changed = false;
            for i in 0..B {
                let mut row = Row {
                    mean: [0.0; B],
                    max: [0.0; B],
                };
                for k in 0..B {
                    let of = |c: &Phases| barrier::<B>(k, *c);
                    row.mean[k] = cost.iter().map(of).sum::<f64>() / ranks as f64;
                    row.max[k] = cost.iter().map(of).fold(0.0, f64::max);
                }
                order.clear();
                order.extend(
                    cost.iter()
                        .enumerate()
                        .map(|(r, &c)| (barrier::<B>(i, c), r as u32)),
                );
                order.sort_unstable_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
                // The `k`-th most loaded with the `k`-th least loaded while
                // it is above the mean: disjoint pairs, known before any
                // change.
                let pairs = order[..ranks / 2]
                    .iter()
                    .take_while(|e| e.0 > row.mean[i])
                    .count();
                for k in 0..pairs {
                    let (x, y) = (order[k].1 as usize, order[ranks - 1 - k].1 as usize);
                    let sx = Side {
                        cost: cost[x],
                        seqs: batch(x, j),
                        members: &lists[x],
                    };
                    let sy = Side {
                        cost: cost[y],
                        seqs: batch(y, j),
                        members: &lists[y],
                    };
                    if let Some(dc) = best::<B>(stage, &row, i, sx, sy, seqs) {
                        cost[x] = cost[x] - dc;
                        cost[y] += dc;
                        changed = true;
                        for r in [x, y] {
                            lists[r].clear();
                            gather(stage, seqs, batch(r, j), &mut lists[r]);
                        }
                    }
                }
            }
            if !changed {
                break;
            }
        }
    }
}

/// Applies the change from micro-batch `x` to `y` that lowers most the
/// larger relative excess of the two in the `B` barriers, if any lowers it
/// and keeps both below the maxima, its swap partners sought around half
/// the gap in barrier `i`; returns the cost moved.
fn best<const B: usize>(
    stage: &Stage<'_>,
    row: &Row<B>,
    i: usize,
    x: Side<'_>,
    y: Side<'_>,
    seqs: &mut Sequences,
) -> Option<Phases> {
    let goal = Goal {
        score: |nx, ny| row.excess(values::<B>(nx)).max(row.excess(values::<B>(ny))),
        ok: |nx, ny| row.below(values::<B>(nx)) && row.below(values::<B>(ny)),
        dim: Dim::barriers(stage.sync)[i],
        want: (barrier::<B>(i, x.cost) - barrier::<B>(i, y.cost)) / 2.0,
        window: PAIR_WINDOW,
    };
    change(stage, &goal, x, y, seqs)
}

/// The unpinned members of up to [`PAIR_CHUNK`] pairs of micro-batches, listed
/// before any of them is weighed: the pairs of a round are disjoint, so a
/// change to one leaves the others' members as listed.
#[derive(Default)]
struct Scratch {
    members: Vec<Member>,
    /// Where each pair's `x` members end and its `y` members end.
    ends: Vec<(usize, usize)>,
}

impl Scratch {
    /// Weighs the disjoint pairs `0..pairs` in order, pair `k` the
    /// micro-batches `of(k)` (`rank * A + micro-step`):
    /// `weigh(k, x's members, y's members, seqs)`. The members of `chunk`
    /// pairs are listed before any of them is weighed, in one run of
    /// independent reads (the members lie anywhere in the prepared
    /// samples, a cache miss each on large inputs, which overlap here
    /// instead of waiting, pair after pair, behind the weighing of the one
    /// before); a change to a pair leaves the others' members as listed.
    fn each_pair(
        &mut self,
        stage: &Stage<'_>,
        seqs: &mut Sequences,
        pairs: usize,
        chunk: usize,
        of: impl Fn(usize) -> (usize, usize),
        mut weigh: impl FnMut(usize, &[Member], &[Member], &mut Sequences),
    ) {
        for first in (0..pairs).step_by(chunk) {
            let run = first..(first + chunk).min(pairs);
            self.members.clear();
            self.ends.clear();
            for k in run.clone() {
                let (x, y) = of(k);
                gather(stage, seqs, stage.micro_batch(x), &mut self.members);
                let end_x = self.members.len();
                gather(stage, seqs, stage.micro_batch(y), &mut self.members);
                self.ends.push((end_x, self.members.len()));
            }
            for (c, k) in run.enumerate() {
                let start = if c == 0 { 0 } else { self.ends[c - 1].1 };
                let (end_x, end_y) = self.ends[c];
                let (x, y) = (&self.members[start..end_x], &self.members[end_x..end_y]);
                weigh(k, x, y, seqs);
            }
        }
    }
}

/// Applies the change from micro-batch `x` to `y` that [`best_trade`]
/// finds, if any; returns the cost moved.
fn change<S, O>(
    stage: &Stage<'_>,
    goal: &Goal<S, O>,
    x: Side<'_>,
    y: Side<'_>,
    seqs: &mut Sequences,
) -> Option<Phases>
where
    S: Fn(Phases, Phases) -> f64,
    O: Fn(Phases, Phases) -> bool,
{
    let (_, trade) = best_trade(stage.prep, goal, x, y, &seqs.loads)?;
    let [ca, cb] = trade.apply(stage.prep, seqs);
    Some(ca - cb)
}

/// The rounds across micro-steps (step 1 of the module docs).
fn level(stage: &Stage<'_>, seqs: &mut Sequences, chunk: usize) {
    let (shape, dims) = (stage.shape, Dim::barriers(stage.sync));
    let steps = shape.steps;
    let nm = shape.ranks * steps;
    let mut cost: Vec<Phases> = (0..nm).map(|m| batch_cost(stage, seqs, m)).collect();
    let mut norm = [1.0f64; 2];
    for (i, &d) in dims.iter().enumerate() {
        let mean = cost.iter().map(|&c| d.of(c)).sum::<f64>() / nm as f64;
        if mean > 0.0 {
            norm[i] = mean;
        }
    }
    let mut max = vec![[0.0f64; 2]; steps];
    for (m, &c) in cost.iter().enumerate() {
        for (i, &d) in dims.iter().enumerate() {
            max[m % steps][i] = max[m % steps][i].max(d.of(c));
        }
    }
    let h = |m: usize, c: Phases| -> f64 {
        let mut worst = f64::NEG_INFINITY;
        for (i, &d) in dims.iter().enumerate() {
            worst = worst.max((d.of(c) - max[m % steps][i]) / norm[i]);
        }
        worst
    };
    let mut order: Vec<(f64, u32)> = (0..nm).map(|m| (h(m, cost[m]), m as u32)).collect();
    order.sort_unstable_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    let mut scratch = Scratch::default();
    let pair_of = |k: usize| (order[k].1 as usize, order[nm - 1 - k].1 as usize);
    scratch.each_pair(stage, seqs, nm / 2, chunk, pair_of, |k, lx, ly, seqs| {
        let (x, y) = pair_of(k);
        // Swap partners around half the gap in x's barrier of most excess.
        let gap = |i: usize, d: Dim| {
            let of = |m: usize| d.of(cost[m]) - max[m % steps][i];
            (of(x) - of(y)) / 2.0
        };
        let (i, &dim) = dims
            .iter()
            .enumerate()
            .max_by(|a, b| {
                let e = |(i, d): (usize, &Dim)| (d.of(cost[x]) - max[x % steps][i]) / norm[i];
                e(*a).total_cmp(&e(*b)).then(b.0.cmp(&a.0))
            })
            .expect("a barrier");
        let goal = Goal {
            score: |nx: Phases, ny: Phases| h(x, nx).max(h(y, ny)),
            ok: |_: Phases, _: Phases| true,
            dim,
            want: gap(i, dim),
            window: PAIR_WINDOW,
        };
        let sx = Side {
            cost: cost[x],
            seqs: stage.micro_batch(x),
            members: lx,
        };
        let sy = Side {
            cost: cost[y],
            seqs: stage.micro_batch(y),
            members: ly,
        };
        if let Some(dc) = change(stage, &goal, sx, sy, seqs) {
            cost[x] = cost[x] - dc;
            cost[y] += dc;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::{Image, Preset, Sample};
    use crate::plan::deal::{deal, RowKey};
    use crate::plan::pack::{pack, Request};
    use crate::plan::prepare::{prepare, Prepared};
    use crate::plan::shape::Shape;
    use crate::plan::StepSample;
    use proptest::prelude::*;

    /// Per micro-step, the largest value in each of [`Dim::ALL`].
    fn maxima(stage: &Stage<'_>, seqs: &Sequences) -> Vec<[f64; 3]> {
        let shape = stage.shape;
        let mut out = vec![[0.0f64; 3]; shape.steps];
        for m in 0..shape.ranks * shape.steps {
            let c = batch_cost(stage, seqs, m);
            for (v, d) in out[m % shape.steps].iter_mut().zip(Dim::ALL) {
                *v = v.max(d.of(c));
            }
        }
        out
    }

    /// A batch of samples `(tokens, images, size)` prepared and packed for
    /// `ranks` ranks (per-phase barriers if `phase`, else per-micro-step),
    /// dealt, every `pin_every`-th position pinned (none for 0).
    struct Batch {
        prep: Prepared,
        pinned: Vec<bool>,
        sync: SyncModel,
        shape: Shape,
        slots: Vec<u32>,
    }

    impl Batch {
        fn new(
            items: &[(u32, u32, u32)],
            ranks: usize,
            phase: bool,
            pin_every: usize,
        ) -> (Self, Sequences) {
            let samples: Vec<StepSample> = items
                .iter()
                .enumerate()
                .map(|(i, &(t, images, size))| {
                    let imgs = (0..images).map(|k| Image::new(16 + (size + 37 * k) % 600));
                    StepSample::new(i as u64, Sample::new(t, imgs))
                })
                .collect();
            let sync = if phase {
                SyncModel::Phase
            } else {
                SyncModel::MicroStep
            };
            let caps = [4096, u64::MAX, u64::MAX];
            let prep = prepare(
                &samples,
                &Preset::Qwen25Vl7b.cost_model(),
                caps,
                ranks,
                1,
                sync,
            )
            .unwrap();
            let request = Request {
                ranks,
                per_step: 1,
                micro_steps: None,
                phases: phase,
                min_steps: 1,
            };
            let packed = pack(&prep, request).unwrap();
            let shape = packed.shape;
            let seqs = Sequences::new(&prep, packed.sequences);
            let slots = deal(sync, RowKey::Excess, shape, &seqs);
            let pinned = (0..prep.len())
                .map(|p| pin_every > 0 && p % pin_every == 0)
                .collect();
            (
                Batch {
                    prep,
                    pinned,
                    sync,
                    shape,
                    slots,
                },
                seqs,
            )
        }

        fn stage(&self) -> Stage<'_> {
            Stage {
                prep: &self.prep,
                pinned: &self.pinned,
                sync: self.sync,
                shape: self.shape,
                slots: &self.slots,
            }
        }
    }

    /// Two ranks of one micro-step of one sequence each, with room for
    /// everything: the positions of `costs` alternately on rank 0 and 1.
    fn two_ranks(costs: &[(u32, u32)]) -> (Prepared, Shape, Sequences) {
        let samples: Vec<StepSample> = costs
            .iter()
            .enumerate()
            .map(|(i, &(t, v))| {
                let imgs = (0..u32::from(v > 0)).map(|_| Image::new(16 + v));
                StepSample::new(i as u64, Sample::new(t, imgs))
            })
            .collect();
        let caps = [u64::MAX; 3];
        let model = Preset::Qwen25Vl7b.cost_model();
        let prep = prepare(&samples, &model, caps, 2, 1, SyncModel::MicroStep).unwrap();
        let members = (0..2u32)
            .map(|r| (0..prep.len() as u32).filter(|p| p % 2 == r).collect())
            .collect();
        let shape = Shape {
            ranks: 2,
            steps: 1,
            per_step: 1,
        };
        let seqs = Sequences::new(&prep, members);
        (prep, shape, seqs)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Under one barrier and no binding cap, the windowed search of a
        /// pair finds a change as good as weighing every swap: the best
        /// swap moves the cost nearest to half the gap, and the window is
        /// centred there.
        #[test]
        fn a_window_finds_the_best_change_of_one_barrier(
            costs in prop::collection::vec((1u32..3000, 0u32..2000), 40..400),
            window in 2usize..8,
        ) {
            let (prep, shape, seqs) = two_ranks(&costs);
            let slots = [0u32, 1];
            let stage = Stage { prep: &prep, pinned: &[], sync: SyncModel::MicroStep, shape, slots: &slots };
            let mut lists = [Vec::new(), Vec::new()];
            let cost: Vec<Phases> = (0..2).map(|m| gather(&stage, &seqs, &slots[m..m + 1], &mut lists[m])).collect();
            let (x, y) = if cost[0].total() >= cost[1].total() { (0, 1) } else { (1, 0) };
            let score = |nx: Phases, ny: Phases| nx.total().max(ny.total());
            let moved = |window: usize| {
                let goal = Goal {
                    score,
                    ok: |_: Phases, _: Phases| true,
                    dim: Dim::Total,
                    want: (cost[x].total() - cost[y].total()) / 2.0,
                    window,
                };
                let side = |m: usize| Side { cost: cost[m], seqs: &slots[m..m + 1], members: &lists[m] };
                change(&stage, &goal, side(x), side(y), &mut seqs.clone())
                    .map(|dc| score(cost[x] - dc, cost[y] + dc))
            };
            let (all, near) = (moved(usize::MAX), moved(2 * window));
            match (all, near) {
                (Some(a), Some(b)) => prop_assert!((a - b).abs() <= 1e-9 * a, "{a} vs {b}"),
                (a, b) => prop_assert_eq!(a, b),
            }
        }

        /// The pairs read ahead change nothing: reading 1, 3 or [`PAIR_CHUNK`]
        /// pairs ahead gives the same sequences, on batches of up to 600
        /// ranks (rounds of up to 300 pairs across micro-steps, a few
        /// hundred within), some samples pinned.
        #[test]
        fn reading_pairs_ahead_changes_nothing(
            items in prop::collection::vec((1u32..1500, 0u32..4, 0u32..1000), 40..1200),
            ranks in 2usize..600,
            phase in any::<bool>(),
            pin_every in 0usize..5,
        ) {
            prop_assume!(items.len() >= ranks);
            let (batch, seqs) = Batch::new(&items, ranks, phase, pin_every);
            let stage = batch.stage();
            let one = paired(&stage, seqs.clone(), 1).members;
            prop_assert_eq!(&paired(&stage, seqs.clone(), 3).members, &one);
            prop_assert_eq!(&paired(&stage, seqs, PAIR_CHUNK).members, &one);
        }

        /// No barrier's maximum rises, every sample stays exactly once,
        /// every sequence within its caps, pinned positions in place.
        #[test]
        fn pairing_raises_no_maximum(
            items in prop::collection::vec((1u32..1500, 0u32..4, 0u32..1000), 8..160),
            ranks in 2usize..6,
            phase in any::<bool>(),
            pin_every in 0usize..5,
        ) {
            prop_assume!(items.len() >= ranks);
            let (batch, seqs) = Batch::new(&items, ranks, phase, pin_every);
            let stage = batch.stage();
            let (prep, pinned, sync) = (&batch.prep, &batch.pinned, batch.sync);
            let before = maxima(&stage, &seqs);
            let home: Vec<Option<usize>> = (0..prep.len())
                .map(|p| seqs.members.iter().position(|b| b.contains(&(p as u32))))
                .collect();
            let seqs = pair(&stage, seqs);
            let after = maxima(&stage, &seqs);
            for (b, a) in before.iter().zip(&after) {
                for (k, d) in Dim::ALL.iter().enumerate() {
                    if Dim::barriers(sync).contains(d) {
                        prop_assert!(a[k] <= b[k] * (1.0 + 1e-12), "{:?} -> {:?}", b, a);
                    }
                }
            }
            let mut all: Vec<u32> = seqs.members.concat();
            all.sort_unstable();
            prop_assert_eq!(all, (0..prep.len() as u32).collect::<Vec<_>>());
            for (b, list) in seqs.members.iter().enumerate() {
                let tokens: u64 = list.iter().map(|&p| prep.size(p as usize)[0]).sum();
                prop_assert!(tokens <= 4096);
                prop_assert_eq!(seqs.loads[b][0], tokens);
            }
            for p in (0..prep.len()).filter(|&p| pinned[p]) {
                let now = seqs.members.iter().position(|b| b.contains(&(p as u32)));
                prop_assert_eq!(now, home[p]);
            }
        }
    }
}

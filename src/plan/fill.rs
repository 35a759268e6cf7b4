//! Fill row: the `R * S` sequences of the micro-step that holds the largest sample, packed with the samples densest (cost per token) in the phases where that micro-step waits for it, none above the largest sample in those phases.
//!
//! Under per-micro-step barriers, a sample as large as a whole sequence
//! sets the maximum of its micro-step: the step waits for it whatever else
//! the micro-step holds. If the micro-step's other sequences hold only
//! average samples, that wait is lost to them; every other micro-step then
//! carries more than its share. The bound's fill term
//! ([`fill_excess`](super::evaluate::fill_excess)) measures it: the largest
//! sample is denser than what the rest of its micro-step can be filled
//! with at the mean. The balanced packing
//! ([`vector_lpt`](crate::partition::vector_lpt)) cannot see it, as it
//! evens out every sequence's cost. Where no fill term binds but the
//! largest sample is above a mean sequence in a phase, its micro-step
//! still waits for it there, and the row still pays.
//!
//! This stage builds that micro-step's sequences on purpose: the largest
//! sample (ties to the lowest position) alone in the first sequence, then
//! every sample in decreasing density (cost per token in the phases whose
//! fill term binds, the total where only the totals' term binds, else the
//! phases where the largest sample is above a mean sequence; no row where
//! it is above the mean in none; ties by position) into the sequence of
//! the row with the most room in tokens (ties to the lowest), if it fits
//! there (every cap) and keeps that sequence at or below the largest
//! sample's cost in each phase weighed, and at or below the larger of
//! that and a mean sequence's cost in the other; skipped otherwise. So
//! the row fills with long dense samples (attention grows as `T^2`) up to
//! the largest one, and the other micro-steps share what is
//! left. A long sample comes late in that order and may find no sequence
//! with the room left; if it is an outlier (more than 2% above a mean
//! sequence's cost in a phase, [`FILL_OUTLIER`]), it would set the maximum of
//! whatever micro-step holds it. So the outliers the row left out are
//! placed first, longest first (each alone in a sequence of its own if it
//! is above the largest sample in a phase: outside, it costs its
//! micro-step more than it raises the row's maximum), and the row built
//! again around them, kept if less of the outliers' costs is left out.
//! The dealing puts the row's sequences, the most
//! costly ones, into one micro-step. The planner packs around this row in
//! the second of its two packings under per-phase barriers (the other
//! samples over all the sequences, the row's included; that start kept
//! whenever the row is built).
//!
//! O(n log n) time (the sort by density; `log(R S)` a sample for the room
//! heap, twice at most), O(n + R S) extra space.

use alloc::collections::BinaryHeap;
use alloc::vec;
use alloc::vec::Vec;
use core::cmp::Reverse;

use super::prepare::Prepared;
use super::tuning::FILL_OUTLIER;
use crate::cost::Phases;

/// The fill row of `row` sequences, in a plan of `sequences` sequences in
/// all (see the module docs; `sequences` sets the mean an outlier is
/// above): the sequences (each listing positions in ascending order) and
/// which positions they hold; `None` without samples or sequences, or
/// where the largest sample's micro-step waits for nothing it brings
/// ([`weights_and_limit`]).
pub(crate) fn fill_row(
    prep: &Prepared,
    row: usize,
    sequences: usize,
) -> Option<(Vec<Vec<u32>>, Vec<bool>)> {
    let n = prep.len();
    if n == 0 || row == 0 {
        return None;
    }
    // The largest sample by total cost, ties to the lowest position.
    let largest = (0..n).fold(0, |best, p| {
        if prep.cost(p).total() > prep.cost(best).total() {
            p
        } else {
            best
        }
    });
    let total: Phases = (0..n).map(|p| prep.cost(p)).sum();
    let k = sequences.max(row) as f64;
    let (weights, limit) = weights_and_limit(prep, prep.cost(largest), total, k)?;
    let mut order = by_density(prep, weights);
    let first = place(prep, row, largest, limit, &order, 0);
    // The outliers that the row left out: samples above [`FILL_OUTLIER`] times
    // a mean sequence in a phase. Each sets its micro-step's maximum above
    // the mean wherever it goes, except here, under the largest sample; by
    // density a long one comes late and finds no sequence with the room
    // left. So they are placed first, by decreasing tokens (then
    // position), before the others by density, if that leaves less of
    // the outliers' cost above the level out.
    let level = Phases::new(
        FILL_OUTLIER * total.vision / k,
        FILL_OUTLIER * total.language / k,
    );
    let over = |p: usize| {
        let c = prep.cost(p);
        f64::max(c.vision - level.vision, c.language - level.language)
    };
    let left_out = |taken: &[bool]| -> f64 {
        (0..n)
            .filter(|&p| !taken[p])
            .map(over)
            .filter(|&e| e > 0.0)
            .sum()
    };
    let is_missed = |p: u32| !first.1[p as usize] && over(p as usize) > 0.0;
    let mut missed: Vec<u32> = order.iter().copied().filter(|&p| is_missed(p)).collect();
    if missed.is_empty() {
        return Some(first);
    }
    // The missed outliers by decreasing tokens, then the others in density
    // order.
    missed.sort_unstable_by_key(|&p| (Reverse(prep.size(p as usize)[0]), p));
    order.retain(|&p| !is_missed(p));
    let outliers_count = missed.len();
    let mut outliers_first = missed;
    outliers_first.append(&mut order);
    let second = place(prep, row, largest, limit, &outliers_first, outliers_count);
    Some(if left_out(&second.1) < left_out(&first.1) {
        second
    } else {
        first
    })
}

/// The weights of the phases in the row's density order, and what a
/// sequence of the row may hold in each phase, for the largest sample of
/// cost `top`, the samples' `total` and `k` sequences in all; `None`
/// where no row is wanted.
///
/// The row is there to fill what the largest sample makes its micro-step
/// wait for, so it takes the samples densest in the phases where it waits:
/// those whose fill term binds ([`Prepared::fill`]; both, the total, where
/// only the totals' term binds), else those where the largest sample is
/// above a mean sequence; none if it is above the mean in no
/// phase (its micro-step waits for nothing it brings). (By the total, on
/// `interleaved` batches, where only the language term binds, the row
/// took samples dense in vision.) A sequence of the row stays at or below
/// the largest sample in the phases weighed, and below the larger of that
/// and a mean sequence in the others (held at the largest sample's vision
/// cost, the `interleaved` row filled half of its tokens).
fn weights_and_limit(
    prep: &Prepared,
    top: Phases,
    total: Phases,
    k: f64,
) -> Option<(Phases, Phases)> {
    let positive = |x: f64| f64::from(u8::from(x > 0.0));
    let mean = Phases::new(total.vision / k, total.language / k);
    let binding = Phases::new(positive(prep.fill.vision), positive(prep.fill.language));
    let above = Phases::new(
        positive(top.vision - mean.vision),
        positive(top.language - mean.language),
    );
    let weights = if binding.total() > 0.0 {
        binding
    } else if prep.fill_total > 0.0 {
        Phases::new(1.0, 1.0)
    } else if above.total() > 0.0 {
        above
    } else {
        return None;
    };
    let within = |w: f64, top: f64, mean: f64| if w > 0.0 { top } else { top.max(mean) };
    let limit = Phases::new(
        within(weights.vision, top.vision, mean.vision),
        within(weights.language, top.language, mean.language),
    );
    Some((weights, limit))
}

/// The positions by decreasing density, the cost of the phases weighed by
/// `weights` per token, then by position. O(n log n).
fn by_density(prep: &Prepared, weights: Phases) -> Vec<u32> {
    // Costs are finite and non-negative, so are densities (`+ 0.0` turns
    // -0.0 into 0.0; a sample without tokens counts one): their bits order
    // as they do.
    let mut keys: Vec<(Reverse<u64>, u32)> = (0..prep.len() as u32)
        .map(|p| {
            let e = &prep.items[p as usize];
            let c = weights.vision * e.cost.vision + weights.language * e.cost.language;
            let density = c / f64::from(e.sizes[0].max(1)) + 0.0;
            (Reverse(density.to_bits()), p)
        })
        .collect();
    keys.sort_unstable();
    keys.into_iter().map(|(_, p)| p).collect()
}

/// The row of `row` sequences: the `largest` sample alone in the first,
/// then the samples in `order`, each into the sequence of most room in
/// tokens (ties to the lowest) if it fits there and keeps that sequence
/// at or below `top` in each phase; the first `alone` of `order` (the
/// outliers) also into that sequence if it is empty, above
/// the largest sample or not (outside the row such a sample costs its
/// micro-step more than it raises the row's maximum). O(n log row).
fn place(
    prep: &Prepared,
    row: usize,
    largest: usize,
    top: Phases,
    order: &[u32],
    alone: usize,
) -> (Vec<Vec<u32>>, Vec<bool>) {
    let n = prep.len();
    let caps = prep.caps;
    let mut bins: Vec<Vec<u32>> = vec![Vec::new(); row];
    let mut loads = vec![[0u64; 3]; row];
    let mut costs = vec![Phases::ZERO; row];
    let mut taken = vec![false; n];
    taken[largest] = true;
    bins[0].push(largest as u32);
    loads[0] = prep.size(largest);
    costs[0] = prep.cost(largest);
    // The row's sequences by room in tokens (most first, ties to the
    // lowest): the room only shrinks, so the top entry is always current.
    let mut room: BinaryHeap<(u64, Reverse<usize>)> = (0..row)
        .map(|b| (caps[0].saturating_sub(loads[b][0]), Reverse(b)))
        .collect();
    for (i, &p) in order.iter().enumerate() {
        let p = p as usize;
        let Some(&(left, Reverse(b))) = room.peek() else {
            break;
        };
        if left == 0 {
            break;
        }
        // The sequence with the most room: if the sample does not fit
        // there, it fits no sequence of the row in tokens.
        if taken[p] || !prep.fits(loads[b], p) {
            continue;
        }
        let cost = costs[b] + prep.cost(p);
        let above = cost.vision > top.vision || cost.language > top.language;
        if above && !(bins[b].is_empty() && i < alone) {
            continue;
        }
        room.pop();
        taken[p] = true;
        bins[b].push(p as u32);
        for (l, s) in loads[b].iter_mut().zip(prep.size(p)) {
            *l += s;
        }
        costs[b] = cost;
        // A sequence above the largest sample (an outlier alone) takes
        // nothing more: out of the heap, so that its room does not stop
        // the others from filling (every sample would be weighed against
        // it, and skipped).
        if !above {
            room.push((caps[0].saturating_sub(loads[b][0]), Reverse(b)));
        }
    }
    for b in &mut bins {
        b.sort_unstable();
    }
    (bins, taken)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::{Given, Sample};
    use crate::plan::prepare::prepare;
    use crate::plan::{StepSample, SyncModel};
    use proptest::prelude::*;

    /// Whether a fill term of the bound binds.
    fn binds(prep: &Prepared) -> bool {
        prep.fill.vision > 0.0 || prep.fill.language > 0.0 || prep.fill_total > 0.0
    }

    fn prepared(samples: &[(u32, f64, f64)], seq_len: u32, row: usize) -> Prepared {
        let batch: Vec<StepSample> = samples
            .iter()
            .enumerate()
            .map(|(i, &(t, v, l))| {
                let s = Sample::text_only(t).with_cost(Phases::new(v, l)).unwrap();
                StepSample::new(i as u64, s)
            })
            .collect();
        let caps = [u64::from(seq_len), u64::MAX, u64::MAX];
        prepare(&batch, &Given, caps, row, 1, SyncModel::Phase).unwrap()
    }

    #[test]
    fn the_row_fills_with_the_densest_samples_up_to_the_largest() {
        // Light samples (2 tokens, cost 0.2 + 0.2) first, two dense ones (4
        // tokens, 3 + 3), the largest (10 tokens, 10 + 10) last: the second
        // sequence takes both dense samples (8 tokens, 6 + 6 <= 10 + 10) and
        // then the first light one.
        let mut samples: Vec<(u32, f64, f64)> = (0..6).map(|_| (2, 0.2, 0.2)).collect();
        samples.extend([(4, 3.0, 3.0), (4, 3.0, 3.0), (10, 10.0, 10.0)]);
        let prep = prepared(&samples, 10, 2);
        let (bins, taken) = fill_row(&prep, 2, 2).unwrap();
        assert_eq!(bins, vec![vec![8], vec![0, 6, 7]]);
        assert_eq!(taken.iter().filter(|&&t| t).count(), 4);
        // A sample that would take the sequence above what it may hold in a
        // phase is skipped. With 9 in language (4 tokens, 3 + 9) only the
        // vision term binds: the order is by vision per token (6 and 7
        // tie, 6 first); 7 would take the sequence to 12 in language,
        // above the largest (10) and a mean sequence (23.2 / 2 = 11.6).
        samples[7] = (4, 3.0, 9.0);
        let prep = prepared(&samples, 10, 2);
        assert!(prep.fill.vision > 0.0 && prep.fill.language == 0.0);
        let (bins, _) = fill_row(&prep, 2, 2).unwrap();
        assert_eq!(bins, vec![vec![8], vec![0, 1, 2, 6]]);
        // Where the language term binds too (a largest of 10 + 13), the
        // order is by the total per token (7 first, 12 / 4) and 6 then
        // takes the sequence to 6 + 12 <= 10 + 13.
        samples[8] = (10, 10.0, 13.0);
        let prep = prepared(&samples, 10, 2);
        assert!(prep.fill.vision > 0.0 && prep.fill.language > 0.0);
        let (bins, _) = fill_row(&prep, 2, 2).unwrap();
        assert_eq!(bins, vec![vec![8], vec![0, 6, 7]]);
        samples[8] = (10, 10.0, 10.0);
        // By density, not by cost: a long sample of more cost but less cost
        // per token (8 tokens, 4 + 4) comes after the dense one and no
        // longer fits.
        samples[7] = (8, 4.0, 4.0);
        let (bins, _) = fill_row(&prepared(&samples, 10, 2), 2, 2).unwrap();
        assert_eq!(bins, vec![vec![8], vec![0, 1, 2, 6]]);
    }

    #[test]
    fn an_outlier_left_out_by_density_is_placed_first() {
        // Four dense samples (2 tokens, 3 + 3), a long outlier (8 tokens,
        // 6 + 6, less dense), six light ones (2 tokens, 0.2 + 0.2), the
        // largest (10 tokens, 10 + 10) last. By density the second
        // sequence takes three dense samples and two light ones; the long
        // sample finds 4 tokens of room. In a plan of 6 sequences (a mean
        // of 29.2 / 6 = 4.87 a phase) it is an outlier: placed first, with
        // one dense sample after it. In a plan of 3 (a mean of 9.73) it is
        // not, and the row stays as density makes it. In a plan of 2 (a
        // mean of 14.6) no fill term binds and the largest sample is below
        // a mean sequence: its micro-step waits for nothing, no row.
        let mut samples: Vec<(u32, f64, f64)> = (0..4).map(|_| (2, 3.0, 3.0)).collect();
        samples.push((8, 6.0, 6.0));
        samples.extend((0..6).map(|_| (2, 0.2, 0.2)));
        samples.push((10, 10.0, 10.0));
        let prep = prepared(&samples, 10, 2);
        let (bins, taken) = fill_row(&prep, 2, 6).unwrap();
        assert_eq!(bins, vec![vec![11], vec![0, 4]]);
        assert_eq!(taken.iter().filter(|&&t| t).count(), 3);
        let (bins, _) = fill_row(&prep, 2, 3).unwrap();
        assert_eq!(bins, vec![vec![11], vec![0, 1, 2, 5, 6]]);
        assert!(!binds(&prep));
        assert_eq!(fill_row(&prep, 2, 2), None);
        // An outlier above the largest sample in a phase (language 11 >
        // 10, less in total) that density leaves out goes alone into a
        // sequence of its own; nothing joins it there.
        samples[4] = (8, 2.0, 11.0);
        let prep = prepared(&samples, 10, 2);
        let (bins, _) = fill_row(&prep, 2, 6).unwrap();
        assert_eq!(bins, vec![vec![11], vec![4]]);
    }

    #[test]
    fn only_the_first_placed_alone_may_exceed_the_largest() {
        // A sample above the largest in language (4 tokens, 1 + 12) and
        // the largest (10 tokens, 10 + 10), three sequences: by density
        // (`alone` 0) it stays out; among the first `alone` it takes an
        // empty sequence.
        let prep = prepared(&[(4, 1.0, 12.0), (10, 10.0, 10.0)], 10, 3);
        let top = prep.cost(1);
        let (bins, taken) = place(&prep, 3, 1, top, &[0], 0);
        assert_eq!(bins, vec![vec![1], vec![], vec![]]);
        assert_eq!(taken, vec![false, true]);
        let (bins, _) = place(&prep, 3, 1, top, &[0], 1);
        assert_eq!(bins, vec![vec![1], vec![0], vec![]]);
    }

    #[test]
    fn a_sequence_above_the_largest_does_not_stop_the_others() {
        // An outlier above the largest in language (2 tokens, 1 + 12)
        // goes alone into the second sequence, 8 tokens of room left;
        // three dense samples (4 tokens, 3 + 3) then fill the third, which
        // has less room after the first: the second, out of the room
        // order, does not stop the next one.
        let mut samples = vec![(2, 1.0, 12.0)];
        samples.extend([(4, 3.0, 3.0); 3]);
        samples.push((10, 10.0, 10.0));
        let prep = prepared(&samples, 10, 3);
        let (bins, _) = fill_row(&prep, 3, 10).unwrap();
        assert_eq!(bins, vec![vec![4], vec![0], vec![1, 2]]);
    }

    /// The cost above [`FILL_OUTLIER`] times a mean sequence's of the samples
    /// `taken` leaves out, in a plan of `k` sequences.
    fn left_out(prep: &Prepared, taken: &[bool], k: usize) -> f64 {
        let total: Phases = (0..prep.len()).map(|p| prep.cost(p)).sum();
        let level = |x: f64| FILL_OUTLIER * x / k as f64;
        (0..prep.len())
            .filter(|&p| !taken[p])
            .map(|p| {
                let c = prep.cost(p);
                f64::max(
                    c.vision - level(total.vision),
                    c.language - level(total.language),
                )
            })
            .filter(|&e| e > 0.0)
            .sum()
    }

    proptest! {
        #[test]
        fn the_row_keeps_caps_costs_and_every_sample_once(
            samples in prop::collection::vec((0u32..40, 0.0f64..5.0, 0.0f64..5.0), 1..60),
            row in 1usize..6,
            more in 0usize..20,
        ) {
            let prep = prepared(&samples, 40, row);
            let Some((bins, taken)) = fill_row(&prep, row, row + more) else {
                // No row only where its largest sample waits for nothing.
                let total: Phases = (0..prep.len()).map(|p| prep.cost(p)).sum();
                let k = (row + more) as f64;
                let largest = (0..prep.len()).fold(0, |b, p| {
                    if prep.cost(p).total() > prep.cost(b).total() { p } else { b }
                });
                let top = prep.cost(largest);
                prop_assert!(!binds(&prep));
                prop_assert!(top.vision <= total.vision / k && top.language <= total.language / k);
                return Ok(());
            };
            prop_assert_eq!(bins.len(), row);
            let largest = (0..prep.len()).fold(0, |b, p| {
                if prep.cost(p).total() > prep.cost(b).total() { p } else { b }
            });
            // Never more of the outliers left out than by density alone
            // (the row as `place` makes it in density order).
            let total: Phases = (0..prep.len()).map(|p| prep.cost(p)).sum();
            let (weights, top) =
                weights_and_limit(&prep, prep.cost(largest), total, (row + more) as f64).unwrap();
            let order = by_density(&prep, weights);
            let (_, by_density) = place(&prep, row, largest, top, &order, 0);
            prop_assert!(left_out(&prep, &taken, row + more) <= left_out(&prep, &by_density, row + more));
            prop_assert!(bins[0].contains(&(largest as u32)));
            let mut seen = vec![false; prep.len()];
            for b in &bins {
                prop_assert!(b.windows(2).all(|w| w[0] < w[1]));
                let tokens: u64 = b.iter().map(|&p| prep.size(p as usize)[0]).sum();
                prop_assert!(tokens <= 40);
                let cost: Phases = b.iter().map(|&p| prep.cost(p as usize)).sum();
                // Summed here in another order: within rounding.
                let within = |x: f64, cap: f64| x <= cap * (1.0 + 1e-12);
                // (An outlier placed alone may be above it; `top` is the
                // largest sample's cost in a phase whose fill term binds.)
                prop_assert!(
                    b.len() == 1 || (within(cost.vision, top.vision) && within(cost.language, top.language))
                );
                for &p in b {
                    prop_assert!(!seen[p as usize]);
                    seen[p as usize] = true;
                }
            }
            prop_assert_eq!(seen, taken);
        }
    }
}

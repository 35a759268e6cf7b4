//! Fill row: the `R * S` sequences of the micro-step that holds the largest sample, packed with the densest samples (cost per token), none above the largest sample in either phase.
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
//! evens out every sequence's cost.
//!
//! This stage builds that micro-step's sequences on purpose: the largest
//! sample (ties to the lowest position) alone in the first sequence, then
//! every sample in decreasing density (total cost per token, ties by
//! position) into the sequence of the row with the most room in tokens
//! (ties to the lowest), if it fits there (every cap) and keeps that
//! sequence at or below the largest sample's cost in each phase; skipped
//! otherwise. So the row fills with long dense samples (attention grows as
//! `T^2`) up to the largest one, and the other micro-steps share what is
//! left. The dealing puts the row's sequences, the most costly ones, into
//! one micro-step. The planner packs around this row in the second of its
//! two packings under per-phase barriers, where the bound's fill term
//! binds (the better start kept).
//!
//! O(n log n) time (the sort by density; `log(R S)` a sample for the room
//! heap), O(n + R S) extra space.

use alloc::collections::BinaryHeap;
use alloc::vec;
use alloc::vec::Vec;
use core::cmp::Reverse;

use super::prepare::Prepared;
use crate::cost::Phases;

/// The fill row of `row` sequences: the sequences (each listing positions
/// in ascending order) and which positions they hold; `None` without
/// samples or sequences.
pub(crate) fn fill_row(prep: &Prepared, row: usize) -> Option<(Vec<Vec<u32>>, Vec<bool>)> {
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
    let top = prep.cost(largest);
    // Costs are finite and non-negative, so are densities (`+ 0.0` turns
    // -0.0 into 0.0; a sample without tokens counts one): their bits order
    // as they do. Densest first, ties by position.
    let mut keys: Vec<(Reverse<u64>, u32)> = (0..n as u32)
        .map(|p| {
            let e = &prep.items[p as usize];
            let density = e.cost.total() / f64::from(e.sizes[0].max(1)) + 0.0;
            (Reverse(density.to_bits()), p)
        })
        .collect();
    keys.sort_unstable();
    let caps = prep.caps;
    let mut bins: Vec<Vec<u32>> = vec![Vec::new(); row];
    let mut loads = vec![[0u64; 3]; row];
    let mut costs = vec![Phases::ZERO; row];
    let mut taken = vec![false; n];
    taken[largest] = true;
    bins[0].push(largest as u32);
    loads[0] = prep.size(largest);
    costs[0] = top;
    // The row's sequences by room in tokens (most first, ties to the
    // lowest): the room only shrinks, so the top entry is always current.
    let mut room: BinaryHeap<(u64, Reverse<usize>)> = (0..row)
        .map(|b| (caps[0].saturating_sub(loads[b][0]), Reverse(b)))
        .collect();
    for &(_, p) in &keys {
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
        if cost.vision > top.vision || cost.language > top.language {
            continue;
        }
        room.pop();
        taken[p] = true;
        bins[b].push(p as u32);
        for (l, s) in loads[b].iter_mut().zip(prep.size(p)) {
            *l += s;
        }
        costs[b] = cost;
        room.push((caps[0].saturating_sub(loads[b][0]), Reverse(b)));
    }
    for b in &mut bins {
        b.sort_unstable();
    }
    Some((bins, taken))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::{Given, Sample};
    use crate::plan::prepare::prepare;
    use crate::plan::{StepSample, SyncModel};
    use proptest::prelude::*;

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
        let (bins, taken) = fill_row(&prep, 2).unwrap();
        assert_eq!(bins, vec![vec![8], vec![0, 6, 7]]);
        assert_eq!(taken.iter().filter(|&&t| t).count(), 4);
        // A dense sample that would take the sequence above the largest in
        // a phase is skipped.
        samples[7] = (4, 3.0, 9.0);
        let (bins, _) = fill_row(&prepared(&samples, 10, 2), 2).unwrap();
        assert_eq!(bins, vec![vec![8], vec![0, 1, 2, 7]]);
        // By density, not by cost: a long sample of more cost but less cost
        // per token (8 tokens, 4 + 4) comes after the dense one and no
        // longer fits.
        samples[7] = (8, 4.0, 4.0);
        let (bins, _) = fill_row(&prepared(&samples, 10, 2), 2).unwrap();
        assert_eq!(bins, vec![vec![8], vec![0, 1, 2, 6]]);
    }

    proptest! {
        #[test]
        fn the_row_keeps_caps_costs_and_every_sample_once(
            samples in prop::collection::vec((0u32..40, 0.0f64..5.0, 0.0f64..5.0), 1..60),
            row in 1usize..6,
        ) {
            let prep = prepared(&samples, 40, row);
            let (bins, taken) = fill_row(&prep, row).unwrap();
            prop_assert_eq!(bins.len(), row);
            let largest = (0..prep.len()).fold(0, |b, p| {
                if prep.cost(p).total() > prep.cost(b).total() { p } else { b }
            });
            prop_assert!(bins[0].contains(&(largest as u32)));
            let top = prep.cost(largest);
            let mut seen = vec![false; prep.len()];
            for b in &bins {
                prop_assert!(b.windows(2).all(|w| w[0] < w[1]));
                let tokens: u64 = b.iter().map(|&p| prep.size(p as usize)[0]).sum();
                prop_assert!(tokens <= 40);
                let cost: Phases = b.iter().map(|&p| prep.cost(p as usize)).sum();
                // Summed here in another order: within rounding.
                let within = |x: f64, cap: f64| x <= cap * (1.0 + 1e-12);
                prop_assert!(within(cost.vision, top.vision) && within(cost.language, top.language));
                for &p in b {
                    prop_assert!(!seen[p as usize]);
                    seen[p as usize] = true;
                }
            }
            prop_assert_eq!(seen, taken);
        }
    }
}

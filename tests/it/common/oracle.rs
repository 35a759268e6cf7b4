//! Oracles and checks of the packing tests: naive O(n * bins) reference
//! implementations of every algorithm, a brute-force optimum, and the
//! invariants every packing must satisfy.

use microbatch::pack::Packing;

/// Item order of the decreasing algorithms for 1-D items with optional ids:
/// size descending, then id, then index.
pub fn decreasing_order(sizes: &[u32], ids: Option<&[u32]>) -> Vec<usize> {
    let mut order: Vec<usize> = (0..sizes.len()).collect();
    order.sort_by(|&a, &b| {
        sizes[b]
            .cmp(&sizes[a])
            .then_with(|| ids.map_or(std::cmp::Ordering::Equal, |ids| ids[a].cmp(&ids[b])))
            .then(a.cmp(&b))
    });
    order
}

/// Item order of the decreasing algorithms for vector items: the largest
/// fraction of the capacity in any dimension, then the sum of fractions,
/// then the index.
pub fn decreasing_order_vec(items: &[Vec<u32>], cap: &[u32]) -> Vec<usize> {
    let key = |i: usize| {
        let fr: Vec<f64> = items[i]
            .iter()
            .zip(cap)
            .map(|(&s, &c)| f64::from(s) / f64::from(c))
            .collect();
        (
            fr.iter().copied().fold(0.0, f64::max),
            fr.iter().sum::<f64>(),
        )
    };
    let mut order: Vec<usize> = (0..items.len()).collect();
    order.sort_by(|&a, &b| {
        let (ka, kb) = (key(a), key(b));
        kb.0.total_cmp(&ka.0)
            .then(kb.1.total_cmp(&ka.1))
            .then(a.cmp(&b))
    });
    order
}

fn fits(load: &[u32], item: &[u32], cap: &[u32]) -> bool {
    load.iter()
        .zip(item)
        .zip(cap)
        .all(|((&l, &s), &c)| u64::from(l) + u64::from(s) <= u64::from(c))
}

/// Naive first-fit over `order`: scan the bins left to right.
pub fn naive_first_fit(items: &[Vec<u32>], cap: &[u32], order: &[usize]) -> Vec<Vec<usize>> {
    let mut bins: Vec<(Vec<u32>, Vec<usize>)> = Vec::new();
    for &i in order {
        let item = &items[i];
        match bins.iter_mut().find(|(load, _)| fits(load, item, cap)) {
            Some((load, members)) => {
                for (l, s) in load.iter_mut().zip(item) {
                    *l += s;
                }
                members.push(i);
            }
            None => bins.push((item.clone(), vec![i])),
        }
    }
    bins.into_iter().map(|(_, m)| m).collect()
}

/// Naive best-fit over `order`: the fitting bin with the least room left in
/// dimension 0, ties to the bin modified most recently.
pub fn naive_best_fit(items: &[Vec<u32>], cap: &[u32], order: &[usize]) -> Vec<Vec<usize>> {
    // (load, members, time of last change)
    let mut bins: Vec<(Vec<u32>, Vec<usize>, usize)> = Vec::new();
    for (t, &i) in order.iter().enumerate() {
        let item = &items[i];
        let best = bins
            .iter()
            .enumerate()
            .filter(|(_, (load, _, _))| fits(load, item, cap))
            .min_by(|(_, a), (_, b)| {
                (cap[0] - a.0[0])
                    .cmp(&(cap[0] - b.0[0]))
                    .then(b.2.cmp(&a.2))
            })
            .map(|(b, _)| b);
        match best {
            Some(b) => {
                for (l, s) in bins[b].0.iter_mut().zip(item) {
                    *l += s;
                }
                bins[b].1.push(i);
                bins[b].2 = t;
            }
            None => bins.push((item.clone(), vec![i], t)),
        }
    }
    bins.into_iter().map(|(_, m, _)| m).collect()
}

/// Naive next-fit.
pub fn naive_next_fit(items: &[Vec<u32>], cap: &[u32]) -> Vec<Vec<usize>> {
    let mut bins: Vec<(Vec<u32>, Vec<usize>)> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        match bins.last_mut() {
            Some((load, members)) if fits(load, item, cap) => {
                for (l, s) in load.iter_mut().zip(item) {
                    *l += s;
                }
                members.push(i);
            }
            _ => bins.push((item.clone(), vec![i])),
        }
    }
    bins.into_iter().map(|(_, m)| m).collect()
}

/// The bins of a packing as lists of item indices.
pub fn bins_of<T: microbatch::Size>(p: &Packing<T>) -> Vec<Vec<usize>> {
    p.bins().map(|b| b.items().to_vec()).collect()
}

/// Checks that every item is in exactly one bin, no bin exceeds the
/// capacity, loads are the sums of their items, and no bin is empty.
pub fn check_packing(items: &[Vec<u32>], cap: &[u32], p: &Packing<u32>) {
    let mut seen = vec![0usize; items.len()];
    assert_eq!(p.item_count(), items.len());
    for bin in p.bins() {
        assert!(!bin.items().is_empty(), "empty bin");
        let mut load = vec![0u64; cap.len()];
        for &i in bin.items() {
            seen[i] += 1;
            for (l, &s) in load.iter_mut().zip(&items[i]) {
                *l += u64::from(s);
            }
        }
        for d in 0..cap.len() {
            assert!(
                load[d] <= u64::from(cap[d]),
                "bin over capacity in dim {d}: {load:?} > {cap:?}"
            );
            assert_eq!(load[d], u64::from(bin.load()[d]), "load mismatch");
        }
    }
    assert!(
        seen.iter().all(|&c| c == 1),
        "item not placed exactly once: {seen:?}"
    );
}

/// The optimal number of bins, by exhaustive search (small inputs only).
pub fn brute_force_opt(items: &[Vec<u32>], cap: &[u32]) -> usize {
    let n = items.len();
    if n == 0 {
        return 0;
    }
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| items[b].cmp(&items[a]));
    for k in 1..=n {
        let mut loads = vec![vec![0u32; cap.len()]; k];
        if can_pack(items, cap, &order, 0, &mut loads) {
            return k;
        }
    }
    n
}

fn can_pack(
    items: &[Vec<u32>],
    cap: &[u32],
    order: &[usize],
    at: usize,
    loads: &mut Vec<Vec<u32>>,
) -> bool {
    if at == order.len() {
        return true;
    }
    let item = &items[order[at]];
    for b in 0..loads.len() {
        // Symmetry: never try a second empty bin.
        let empty = loads[b].iter().all(|&l| l == 0);
        if fits(&loads[b], item, cap) {
            for (l, s) in loads[b].iter_mut().zip(item) {
                *l += s;
            }
            let ok = can_pack(items, cap, order, at + 1, loads);
            for (l, s) in loads[b].iter_mut().zip(item) {
                *l -= s;
            }
            if ok {
                return true;
            }
        }
        if empty {
            break;
        }
    }
    false
}

/// Martello-Toth L2 by its definition: the largest count over every integer
/// threshold `0 <= α <= c / 2`.
pub fn naive_l2(sizes: &[u32], c: u32) -> u64 {
    let c = u64::from(c);
    let mut best = 0u64;
    for alpha in 0..=c / 2 {
        let (mut j1, mut j2, mut s2, mut s3) = (0u64, 0u64, 0u64, 0u64);
        for &s in sizes {
            let s = u64::from(s);
            if s > c - alpha {
                j1 += 1;
            } else if 2 * s > c {
                j2 += 1;
                s2 += s;
            } else if s >= alpha {
                s3 += s;
            }
        }
        let free = j2 * c - s2;
        let extra = s3.saturating_sub(free).div_ceil(c);
        best = best.max(j1 + j2 + extra);
    }
    best
}

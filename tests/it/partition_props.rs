//! Property tests of `microbatch::partition` against a brute-force oracle.

use microbatch::partition::{
    exact, karmarkar_karp, lower_bound, lpt, refine, Algorithm, Dims, Objective, Partition,
    Partitioner,
};
use microbatch::Error;
use proptest::prelude::*;

use crate::common;

/// Options of one oracle run.
#[derive(Clone, Copy, Debug)]
struct Opts {
    k: usize,
    objective: Objective,
    dims: Dims,
    equal_count: bool,
    allow_empty: bool,
    cap: Option<u32>,
}

impl Opts {
    fn plain(k: usize) -> Self {
        Opts {
            k,
            objective: Objective::MaxPart,
            dims: Dims::Combined,
            equal_count: false,
            allow_empty: false,
            cap: None,
        }
    }

    fn partitioner(&self, algorithm: Algorithm) -> Partitioner<u32> {
        let mut p = Partitioner::new(self.k)
            .algorithm(algorithm)
            .objective(self.objective)
            .dims(self.dims)
            .equal_count(self.equal_count)
            .allow_empty(self.allow_empty);
        if let Some(cap) = self.cap {
            p = p.cap_per_dim(&[cap, cap]);
        }
        p
    }
}

/// The objective of part sums `sums[p][j]` as the crate defines it.
fn objective(sums: &[Vec<u128>], o: &Opts) -> u128 {
    let d = sums[0].len();
    let per = |values: Vec<u128>| -> u128 {
        let hi = *values.iter().max().unwrap();
        let lo = *values.iter().min().unwrap();
        match o.objective {
            Objective::MaxPart => hi,
            _ => hi - lo,
        }
    };
    match o.dims {
        Dims::PerDim => (0..d)
            .map(|j| per(sums.iter().map(|s| s[j]).collect()))
            .sum(),
        _ => per(sums.iter().map(|s| s.iter().sum()).collect()),
    }
}

/// The optimum over all `k^n` assignments that meet the constraints.
fn brute_force(items: &[Vec<u32>], o: &Opts) -> Option<u128> {
    let (n, k) = (items.len(), o.k);
    let d = items.first().map_or(1, Vec::len);
    let mut assign = vec![0usize; n];
    let mut best: Option<u128> = None;
    loop {
        let mut sums = vec![vec![0u128; d]; k];
        let mut counts = vec![0usize; k];
        for (i, &p) in assign.iter().enumerate() {
            counts[p] += 1;
            for j in 0..d {
                sums[p][j] += u128::from(items[i][j]);
            }
        }
        let ok_empty = o.allow_empty || counts.iter().all(|&c| c > 0);
        let ok_count =
            !o.equal_count || counts.iter().max().unwrap() - counts.iter().min().unwrap() <= 1;
        let ok_cap = o.cap.map_or(true, |c| {
            sums.iter().all(|s| s.iter().all(|&x| x <= u128::from(c)))
        });
        if ok_empty && ok_count && ok_cap {
            let v = objective(&sums, o);
            best = Some(best.map_or(v, |b| b.min(v)));
        }
        // Next assignment in base k.
        let mut i = 0;
        loop {
            if i == n {
                return best;
            }
            assign[i] += 1;
            if assign[i] < k {
                break;
            }
            assign[i] = 0;
            i += 1;
        }
    }
}

/// Checks that `p` holds every item once, that its sums and objective are
/// right, and that it meets the constraints of `o`.
fn check_valid(items: &[Vec<u32>], p: &Partition<u128>, o: &Opts) -> Result<(), TestCaseError> {
    let n = items.len();
    prop_assert_eq!(p.len(), o.k);
    let mut seen = vec![0; n];
    let mut sums = Vec::new();
    for (q, part) in p.parts().enumerate() {
        let mut s = vec![0u128; p.dims()];
        for &i in part {
            prop_assert!(i < n);
            seen[i] += 1;
            for (j, x) in s.iter_mut().enumerate() {
                *x += u128::from(items[i][j]);
            }
        }
        prop_assert_eq!(p.sum(q), &s[..]);
        sums.push(s);
    }
    prop_assert!(
        seen.iter().all(|&c| c == 1),
        "every item exactly once: {:?}",
        seen
    );
    prop_assert_eq!(p.objective(), objective(&sums, o));
    let counts: Vec<usize> = p.parts().map(<[usize]>::len).collect();
    if !o.allow_empty {
        prop_assert!(counts.iter().all(|&c| c > 0), "empty part: {:?}", counts);
    }
    if o.equal_count {
        prop_assert!(
            counts.iter().max().unwrap() - counts.iter().min().unwrap() <= 1,
            "counts {:?}",
            counts
        );
    }
    if let Some(cap) = o.cap {
        prop_assert!(
            sums.iter().all(|s| s.iter().all(|&x| x <= u128::from(cap))),
            "cap {} broken: {:?}",
            cap,
            sums
        );
    }
    let assignment = p.assignment();
    for (q, part) in p.parts().enumerate() {
        prop_assert!(part.iter().all(|&i| assignment[i] == q));
    }
    Ok(())
}

fn scalars(items: &[Vec<u32>]) -> Vec<u32> {
    items.iter().map(|v| v[0]).collect()
}

/// One-dimensional weights: up to `max_n` items of at most `max_w`.
fn weights(min_n: usize, max_n: usize, max_w: u32) -> impl Strategy<Value = Vec<Vec<u32>>> {
    prop::collection::vec((0..=max_w).prop_map(|w| vec![w]), min_n..=max_n)
}

/// Weights with a part count `k <= min(n, max_k)`.
fn with_k(
    min_n: usize,
    max_n: usize,
    max_w: u32,
    max_k: usize,
) -> impl Strategy<Value = (Vec<Vec<u32>>, usize)> {
    weights(min_n.max(1), max_n, max_w).prop_flat_map(move |items| {
        let n = items.len();
        (Just(items), 1..=n.min(max_k))
    })
}

/// Two-dimensional weights.
fn weights2(min_n: usize, max_n: usize, max_w: u32) -> impl Strategy<Value = Vec<Vec<u32>>> {
    prop::collection::vec(prop::collection::vec(0..=max_w, 2), min_n..=max_n)
}

/// Two-dimensional weights, mostly small with a few large ones (so that a
/// part with a large item needs fewer items).
fn skewed2(min_n: usize, max_n: usize) -> impl Strategy<Value = Vec<Vec<u32>>> {
    let size = prop_oneof![8 => 0u32..=100, 1 => 1000u32..=5000];
    prop::collection::vec(prop::collection::vec(size, 2), min_n..=max_n)
}

/// Random options for `k` parts, with a cap drawn from `cap`.
fn options(k: usize) -> impl Strategy<Value = Opts> {
    (
        prop_oneof![Just(Objective::MaxPart), Just(Objective::Spread)],
        prop_oneof![Just(Dims::Combined), Just(Dims::PerDim)],
        any::<bool>(),
        any::<bool>(),
        prop::option::of(20u32..=80),
    )
        .prop_map(
            move |(objective, dims, equal_count, allow_empty, cap)| Opts {
                k,
                objective,
                dims,
                equal_count,
                allow_empty,
                cap,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn heuristics_hold_every_item_once((items, k) in with_k(1, 40, 1000, 8)) {
        let o = Opts::plain(k);
        let xs = scalars(&items);
        check_valid(&items, &lpt(&xs, k).unwrap(), &o)?;
        check_valid(&items, &karmarkar_karp(&xs, k).unwrap(), &o)?;
        check_valid(&items, &refine(&xs, &lpt(&xs, k).unwrap()).unwrap(), &o)?;
    }

    #[test]
    fn lower_bound_is_below_the_optimum((items, k) in with_k(1, 7, 50, 4)) {
        let opt = brute_force(&items, &Opts::plain(k)).unwrap();
        prop_assert!(lower_bound(&scalars(&items), k).unwrap() <= opt);
    }

    #[test]
    fn lpt_within_graham_bound((items, k) in with_k(1, 7, 100, 4)) {
        let opt = brute_force(&items, &Opts::plain(k)).unwrap();
        let got = lpt(&scalars(&items), k).unwrap().objective();
        // got <= (4/3 - 1/(3k)) opt  <=>  3k got <= (4k - 1) opt
        prop_assert!(3 * k as u128 * got <= (4 * k as u128 - 1) * opt, "lpt {} opt {}", got, opt);
    }

    #[test]
    fn kk_two_way_within_seven_sixths(items in weights(2, 12, 1000)) {
        let opt = brute_force(&items, &Opts::plain(2)).unwrap();
        let got = karmarkar_karp(&scalars(&items), 2).unwrap().objective();
        prop_assert!(6 * got <= 7 * opt, "kk {} opt {}", got, opt);
    }

    #[test]
    fn refine_never_worse((items, k) in with_k(1, 40, 1000, 8), o in options(1)) {
        let o = Opts { k, cap: None, equal_count: false, allow_empty: false, ..o };
        let xs: Vec<[u32; 2]> = items.iter().map(|v| [v[0], v[0] / 3]).collect();
        let items: Vec<Vec<u32>> = xs.iter().map(|a| a.to_vec()).collect();
        for algorithm in [Algorithm::Lpt, Algorithm::KarmarkarKarp] {
            let start = o.partitioner(algorithm).refinement(false).partition(&xs).unwrap();
            let better = o.partitioner(algorithm).refine(&xs, &start).unwrap();
            check_valid(&items, &better, &o)?;
            prop_assert!(better.objective() <= start.objective());
        }
    }

    #[test]
    fn exact_equals_brute_force((items, k) in with_k(1, 7, 40, 4)) {
        let o = Opts::plain(k);
        let p = exact(&scalars(&items), k, u64::MAX).unwrap();
        check_valid(&items, &p, &o)?;
        prop_assert!(p.proven_optimal());
        prop_assert_eq!(p.objective(), brute_force(&items, &o).unwrap());
    }

    #[test]
    fn constraints_hold_and_exact_is_optimal_under_them(items in weights2(0, 6, 30), k in 1usize..=3, o in options(1)) {
        let o = Opts { k, ..o };
        let oracle = brute_force(&items, &o);
        for algorithm in [Algorithm::Lpt, Algorithm::KarmarkarKarp, Algorithm::Exact] {
            let result = o.partitioner(algorithm).node_budget(u64::MAX).partition(&items);
            match result {
                Ok(p) => {
                    check_valid(&items, &p, &o)?;
                    prop_assert!(p.lower_bound() <= oracle.unwrap());
                    if algorithm == Algorithm::Exact {
                        prop_assert!(p.proven_optimal());
                        prop_assert_eq!(Some(p.objective()), oracle);
                    }
                }
                Err(Error::TooManyParts { .. }) => prop_assert!(!o.allow_empty && k > items.len()),
                Err(Error::Oversize { .. }) => prop_assert!(items.iter().flatten().any(|&x| Some(x) > o.cap)),
                Err(Error::CapExceeded { proven, .. }) => {
                    // With an unlimited budget the search is complete.
                    prop_assert!(proven);
                    prop_assert_eq!(oracle, None);
                }
                Err(e) => prop_assert!(false, "unexpected error {}", e),
            }
        }
    }

    #[test]
    fn constraints_hold_on_larger_instances(items in skewed2(1, 60), k in 1usize..=8, o in options(1)) {
        // Caps the heuristics can meet or miss; no oracle at this size.
        let o = Opts { k, cap: o.cap.map(|c| c * 200), ..o };
        for algorithm in [Algorithm::Lpt, Algorithm::KarmarkarKarp] {
            for refinement in [false, true] {
                match o.partitioner(algorithm).refinement(refinement).node_budget(1000).partition(&items) {
                    Ok(p) => check_valid(&items, &p, &o)?,
                    Err(Error::TooManyParts { .. }) => prop_assert!(!o.allow_empty && k > items.len()),
                    Err(Error::Oversize { .. } | Error::CapExceeded { .. }) => prop_assert!(o.cap.is_some()),
                    Err(e) => prop_assert!(false, "unexpected error {}", e),
                }
            }
        }
    }

    #[test]
    fn result_by_id_independent_of_input_order(
        (items, k) in with_k(1, 30, 20, 6),
        seed in any::<u64>(),
        o in options(1),
    ) {
        let o = Opts { k, cap: None, dims: Dims::Combined, ..o };
        let tagged: Vec<(u32, u32)> = items.iter().enumerate().map(|(i, v)| (1000 - i as u32, v[0])).collect();
        // A seeded shuffle.
        let mut shuffled = tagged.clone();
        common::TestRng::new(seed).shuffle(&mut shuffled);
        for algorithm in [Algorithm::Lpt, Algorithm::KarmarkarKarp, Algorithm::Exact] {
            let by_id = |input: &[(u32, u32)]| -> Vec<Vec<u32>> {
                let p = o.partitioner(algorithm).node_budget(20_000).partition(input).unwrap();
                p.parts().map(|part| part.iter().map(|&i| input[i].0).collect()).collect()
            };
            prop_assert_eq!(by_id(&tagged), by_id(&shuffled), "{:?}", algorithm);
        }
    }
}

/// LPT as documented, in O(n k): items by size descending, then id, then
/// index; the first `k` open the parts; each later item to the least-loaded
/// part, among equal loads the one that reached its load first.
fn naive_lpt(sizes: &[u32], ids: Option<&[u32]>, k: usize) -> Vec<Vec<usize>> {
    let mut parts = vec![Vec::new(); k];
    let mut loads = vec![0u64; k];
    let mut arrival = vec![0usize; k];
    for (r, i) in common::oracle::decreasing_order(sizes, ids)
        .into_iter()
        .enumerate()
    {
        let p = if r < k {
            r
        } else {
            (0..k).min_by_key(|&p| (loads[p], arrival[p])).unwrap()
        };
        parts[p].push(i);
        loads[p] += u64::from(sizes[i]);
        arrival[p] = r;
    }
    parts
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// `lpt` is the documented greedy, part for part, on every path: small
    /// sizes (counted), sizes too spread to count (sorted, then a heap),
    /// with and without ids.
    #[test]
    fn lpt_is_the_documented_greedy(
        sizes in prop_oneof![
            prop::collection::vec(0u32..=6, 1..120),
            // Too spread to count (up to 1.8 * 10^6), with ties.
            prop::collection::vec((0u32..=6).prop_map(|w| w * 300_000), 1..120),
            prop::collection::vec(0u32..=2_000_000, 1..120),
        ],
        ids in prop::collection::vec(0u32..4, 120),
        k in 1usize..=16,
        with_ids in any::<bool>(),
    ) {
        let k = k.min(sizes.len());
        let ids = &ids[..sizes.len()];
        let got = if with_ids {
            let items: Vec<(u32, u32)> = ids.iter().copied().zip(sizes.iter().copied()).collect();
            lpt(&items, k).unwrap()
        } else {
            lpt(&sizes, k).unwrap()
        };
        let want = naive_lpt(&sizes, with_ids.then_some(ids), k);
        let parts: Vec<Vec<usize>> = got.parts().map(<[usize]>::to_vec).collect();
        prop_assert_eq!(parts, want);
        let largest = (0..k).map(|p| got.sum(p)[0]).max().unwrap();
        prop_assert_eq!(got.objective(), largest);
    }
}

/// KK against LPT on random instances with at least 8 items per part: the
/// figures stated in the docs (99.7% at most LPT's largest part, 98.7%
/// smaller), with a margin of a few instances out of 2000.
#[test]
fn kk_vs_lpt_majority() {
    let mut rng = common::TestRng::new(0x2545_F491_4F6C_DD1D);
    let (mut at_most, mut strictly, mut total) = (0, 0, 0);
    for _ in 0..2000 {
        let k = 2 + rng.below(15) as usize;
        let n = k * (8 + rng.below(25) as usize);
        let items: Vec<u32> = (0..n).map(|_| 1 + rng.below(1000) as u32).collect();
        let kk = karmarkar_karp(&items, k).unwrap().objective();
        let greedy = lpt(&items, k).unwrap().objective();
        total += 1;
        at_most += usize::from(kk <= greedy);
        strictly += usize::from(kk < greedy);
    }
    let pct = |c: usize| 100.0 * c as f64 / total as f64;
    println!(
        "KK <= LPT in {:.1}% of {total}, KK < LPT in {:.1}%",
        pct(at_most),
        pct(strictly)
    );
    assert!(
        pct(at_most) >= 99.5,
        "KK <= LPT only in {:.1}%",
        pct(at_most)
    );
    assert!(
        pct(strictly) >= 98.5,
        "KK < LPT only in {:.1}%",
        pct(strictly)
    );
}

//! Issue 10, bin packing under hostile input: lower bounds that are bounds
//! with floats, capacities exact with floats, resources driven by the input
//! only, and messages that say what to fix. (Checked documents:
//! `pack_serde.rs`.)

use crate::common::TestRng;
use microbatch::pack::{
    best_fit, best_fit_decreasing, first_fit, first_fit_decreasing, lower_bounds, next_fit,
    Heuristic, Packing, StreamingPacker,
};
use microbatch::{Error, InvalidReason, Item, Locator, NotNan, Scalar};
use proptest::prelude::*;

type F = NotNan<f64>;

fn f(x: f64) -> F {
    NotNan::new(x).unwrap()
}

fn fs(xs: &[f64]) -> Vec<F> {
    xs.iter().map(|&x| f(x)).collect()
}

/// Every packer of the family, as one signature over items `I`.
type Pack<I> = fn(&[I], <I as Item>::Capacity) -> Result<Packing<<I as Item>::Size>, Error>;

fn packers<I: Item>() -> [(&'static str, Pack<I>); 5] {
    [
        ("first_fit_decreasing", first_fit_decreasing::<I>),
        ("best_fit_decreasing", best_fit_decreasing::<I>),
        ("first_fit", first_fit::<I>),
        ("best_fit", best_fit::<I>),
        ("next_fit", next_fit::<I>),
    ]
}

/// Zero and addition of a size, as the crate sums loads (in the size type).
trait Sum: Copy + PartialOrd + std::fmt::Debug {
    fn zero() -> Self;
    fn plus(self, x: Self) -> Self;
}
impl Sum for u32 {
    fn zero() -> Self {
        0
    }
    fn plus(self, x: Self) -> Self {
        self + x
    }
}
impl Sum for u64 {
    fn zero() -> Self {
        0
    }
    fn plus(self, x: Self) -> Self {
        self + x
    }
}
impl Sum for NotNan<f64> {
    fn zero() -> Self {
        f(0.0)
    }
    fn plus(self, x: Self) -> Self {
        f(self.into_inner() + x.into_inner())
    }
}
impl Sum for NotNan<f32> {
    fn zero() -> Self {
        NotNan::new(0.0f32).unwrap()
    }
    fn plus(self, x: Self) -> Self {
        NotNan::new(self.into_inner() + x.into_inner()).unwrap()
    }
}

/// Every item exactly once; each bin's load, summed afresh in the listed
/// order, equals the reported load and is at most the capacity in every
/// dimension; the bounds are at most the bins used.
fn check<I: Item>(name: &str, items: &[I], p: &Packing<I::Size>)
where
    I::Size: Sum,
{
    let mut seen = vec![false; items.len()];
    for (b, bin) in p.bins().enumerate() {
        assert!(!bin.items().is_empty(), "{name}: bin {b} is empty");
        for dim in 0..p.dims() {
            let mut load = <I::Size as Sum>::zero();
            for &i in bin.items() {
                load = load.plus(items[i].size(dim));
            }
            assert_eq!(load, bin.load()[dim], "{name}: bin {b} load, dim {dim}");
            assert!(
                load <= p.capacity()[dim],
                "{name}: bin {b} has {load:?} > {:?} in dim {dim}",
                p.capacity()[dim]
            );
        }
        for &i in bin.items() {
            assert!(!seen[i], "{name}: item {i} twice");
            seen[i] = true;
        }
    }
    assert!(seen.iter().all(|&s| s), "{name}: an item is missing");
    let lb = p.lower_bounds();
    assert!(
        lb.l1 <= lb.l2 && lb.l2 <= p.len() as u64,
        "{name}: {lb:?} with {} bins",
        p.len()
    );
}

/// Every packer, and the streaming packer with both heuristics and a small
/// and a large buffer: each result checked, and the bound of
/// `lower_bounds` at most each result's bins. Returns the fewest bins.
fn check_all<I: Item + Clone>(items: &[I], cap: I::Capacity) -> usize
where
    I::Size: Sum,
    I::Capacity: Clone,
{
    let lb = lower_bounds(items, cap.clone()).unwrap();
    let mut fewest = usize::MAX;
    for (name, pack) in packers::<I>() {
        let p = pack(items, cap.clone()).unwrap();
        check(name, items, &p);
        assert!(
            lb.l2 <= p.len() as u64,
            "{name}: {lb:?} above {} bins",
            p.len()
        );
        assert!(
            p.lower_bounds().l2 <= lb.l2,
            "{name}: bound above lower_bounds"
        );
        fewest = fewest.min(p.len());
    }
    for heuristic in [Heuristic::FirstFitDecreasing, Heuristic::BestFitDecreasing] {
        for buffer in [3, items.len() + 1] {
            let mut packer = StreamingPacker::<I>::new(cap.clone(), buffer)
                .unwrap()
                .heuristic(heuristic);
            let mut bins = Vec::new();
            for item in items {
                packer.push(item.clone()).unwrap();
                bins.extend(std::iter::from_fn(|| packer.pop()));
            }
            bins.extend(packer.finish());
            let mut count = 0;
            for bin in &bins {
                for dim in 0..bin.load().len() {
                    let mut load = <I::Size as Sum>::zero();
                    for item in bin.items() {
                        load = load.plus(item.size(dim));
                    }
                    assert_eq!(load, bin.load()[dim], "streaming {heuristic:?} load");
                    assert!(
                        load <= cap.size(dim),
                        "streaming {heuristic:?}: {load:?} above the capacity"
                    );
                }
                count += bin.items().len();
            }
            assert_eq!(count, items.len());
            assert!(
                lb.l2 <= bins.len() as u64,
                "streaming: {lb:?} above {} bins",
                bins.len()
            );
        }
    }
    fewest
}

// ---------------------------------------------------------------------------
// 1. Bounds that are bounds.

/// Issue 10: float FFD on `[1.0, 1e-17]` into 1.0 packs one bin (the float
/// load 1.0 + 1e-17 is 1.0) and reported L2 = 2.
#[test]
fn a_tiny_item_beside_a_full_one_does_not_lift_l2_above_the_bins() {
    let items = fs(&[1.0, 1e-17]);
    let p = first_fit_decreasing(&items, f(1.0)).unwrap();
    assert_eq!(p.len(), 1);
    assert_eq!((p.lower_bounds().l1, p.lower_bounds().l2), (1, 1));
    let lb = lower_bounds(&items, f(1.0)).unwrap();
    assert_eq!((lb.l1, lb.l2), (1, 1));
    check_all(&items, f(1.0));
}

/// Issue 10: `[MAX, MAX, MAX / 2]` gave L1 = 0 (the sum overflowed).
#[test]
fn sizes_near_f64_max_give_the_right_bounds() {
    let m = f64::MAX;
    let items = fs(&[m, m, m / 2.0]);
    let lb = lower_bounds(&items, f(m)).unwrap();
    assert_eq!((lb.l1, lb.l2), (3, 3));
    let p = first_fit_decreasing(&items, f(m)).unwrap();
    assert_eq!((p.len(), p.lower_bounds()), (3, lb));
    // Many huge items: the sum is infinite, the bound is still the count.
    let items = fs(&[m; 1000]);
    assert_eq!(lower_bounds(&items, f(m)).unwrap().l1, 1000);
    check_all(&items, f(m));
}

/// `f32` loads are summed in `f32`: 1 + 2^-25 is 1 there, one bin.
#[test]
fn f32_loads_round_in_f32_and_the_bounds_allow_it() {
    let one = NotNan::new(1.0f32).unwrap();
    let items = vec![one, NotNan::new(2f32.powi(-25)).unwrap()];
    let p = first_fit_decreasing(&items, one).unwrap();
    assert_eq!(p.len(), 1);
    assert_eq!(lower_bounds(&items, one).unwrap().l2, 1);
    check_all(&items, one);
}

/// `x` moved by `k` ulps (non-negative `x`).
fn step(x: f64, k: i64) -> f64 {
    let bits = x.to_bits() as i64 + k;
    f64::from_bits(bits.max(0) as u64)
}

/// A float size for the adversarial families, relative to the capacity
/// `c`: tiny, just above or below `c / 2`, just below `c`, in tenths or
/// hundredths, spread over every magnitude, or anywhere in `[0, c]`.
fn adversarial(rng: &mut TestRng, c: f64) -> f64 {
    let x = match rng.below(8) {
        0 => c * 1e-17 * rng.below(1000) as f64,
        1 => step(c / 2.0, rng.below(5) as i64 - 2),
        2 => step(c, -(rng.below(4) as i64)),
        3 => c * (rng.below(11) as f64 / 10.0),
        4 => step(
            c - step(c / 2.0, rng.below(3) as i64),
            rng.below(3) as i64 - 1,
        ),
        5 => c * 2f64.powi(-(rng.below(1100) as i32)),
        6 => c * rng.below(101) as f64 / 100.0,
        _ => c * (rng.below(1 << 20) as f64 / (1u64 << 20) as f64),
    };
    x.clamp(0.0, c)
}

/// A capacity of random magnitude: `f64::MAX`, 1, 2.4, subnormal-adjacent,
/// anything between.
fn capacity(rng: &mut TestRng) -> f64 {
    match rng.below(5) {
        0 => f64::MAX,
        1 => 1.0,
        2 => 2.4,
        3 => f64::MIN_POSITIVE * (1 + rng.below(1000)) as f64,
        _ => 2f64.powi(rng.below(2000) as i32 - 1000) * (1.0 + rng.below(1000) as f64 / 1000.0),
    }
}

/// The optimum under float loads, by exhaustive search: a bin is feasible
/// when its sizes, summed in increasing order, are at most `c`. (Any order
/// a packing could list gives an upper bound on the optimum under float
/// loads; the bounds must be below every one.)
/// Whether a bin of float sizes fits `c` when summed in some order a packer
/// uses: the input order (first-fit, best-fit, next-fit add items so),
/// decreasing (first- and best-fit-decreasing) or increasing. Float sums
/// depend on the order, so an oracle that summed in one order only could
/// refuse a bin a packer rightly accepts and claim an "optimum" above a
/// packer's count (seed 10659158383929747092 did).
fn fits(bin: &[f64], c: f64) -> bool {
    let mut sorted = bin.to_vec();
    sorted.sort_by(f64::total_cmp);
    let sum = |it: &mut dyn Iterator<Item = &f64>| it.fold(0.0, |l, &s| l + s);
    sum(&mut bin.iter()) <= c || sum(&mut sorted.iter()) <= c || sum(&mut sorted.iter().rev()) <= c
}

fn brute_force_float(sizes: &[f64], c: f64) -> usize {
    fn go(sizes: &[f64], c: f64, at: usize, bins: &mut Vec<Vec<f64>>, best: &mut usize) {
        if bins.len() >= *best {
            return;
        }
        if at == sizes.len() {
            *best = bins.len();
            return;
        }
        for b in 0..bins.len() {
            bins[b].push(sizes[at]);
            if fits(&bins[b], c) {
                go(sizes, c, at + 1, bins, best);
            }
            bins[b].pop();
        }
        bins.push(vec![sizes[at]]);
        go(sizes, c, at + 1, bins, best);
        bins.pop();
    }
    let mut best = sizes.len();
    go(sizes, c, 0, &mut Vec::new(), &mut best);
    best
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Adversarial floats: every packer's bins hold, and the bounds are at
    /// most every packer's bins.
    #[test]
    fn float_bounds_are_below_every_packing(seed in any::<u64>(), n in 0usize..60) {
        let mut rng = TestRng::new(seed);
        let c = capacity(&mut rng);
        let sizes: Vec<f64> = (0..n).map(|_| adversarial(&mut rng, c)).collect();
        check_all(&fs(&sizes), f(c));
    }

    /// Small adversarial instances: the bounds are at most the optimum
    /// under float loads.
    #[test]
    fn float_bounds_are_below_the_optimum(seed in any::<u64>(), n in 0usize..9) {
        let mut rng = TestRng::new(seed);
        let c = capacity(&mut rng);
        let sizes: Vec<f64> = (0..n).map(|_| adversarial(&mut rng, c)).collect();
        let opt = brute_force_float(&sizes, c);
        let lb = lower_bounds(&fs(&sizes), f(c)).unwrap();
        prop_assert!(lb.l2 as usize <= opt, "{:?} above the optimum {} for {:?} in {}", lb, opt, sizes, c);
        prop_assert!(check_all(&fs(&sizes), f(c)) >= opt);
    }

    /// Sizes in tenths, hundredths, thirds or sevenths of random magnitude,
    /// with capacities like 2.4: no bin of any packer, in one or two
    /// dimensions, in `f64` or `f32`, sums above the capacity.
    #[test]
    fn float_capacities_hold_for_decimal_sizes(seed in any::<u64>(), n in 0usize..80) {
        let mut rng = TestRng::new(seed);
        let scale = [10.0, 100.0, 3.0, 7.0][rng.below(4) as usize];
        let steps = 1 + rng.below(40);
        let magnitude = 2f64.powi(rng.below(40) as i32 - 20);
        let c0 = steps as f64 / scale * magnitude;
        let c1 = (1 + rng.below(8)) as f64 / 10.0;
        let one: Vec<F> = (0..n)
            .map(|_| f((rng.below(steps + 1) as f64 / scale * magnitude).min(c0)))
            .collect();
        check_all(&one, f(c0));
        let two: Vec<[F; 2]> = one
            .iter()
            .map(|&x| [x, f((rng.below(9) as f64 / 10.0).min(c1))])
            .collect();
        check_all(&two, [f(c0), f(c1)]);
        let c32 = NotNan::new(c0 as f32).unwrap();
        let narrow: Vec<NotNan<f32>> = one
            .iter()
            .map(|x| NotNan::new(x.into_inner() as f32).unwrap().min(c32))
            .collect();
        check_all(&narrow, c32);
    }
}

/// Best fit used to index bins by `c - load`, a float subtraction: with a
/// room that rounds up, an item went into a bin it overflows.
#[test]
fn best_fit_never_overflows_a_bin_by_rounding() {
    let mut rng = TestRng::new(10);
    for _ in 0..2000 {
        let sizes: Vec<F> = (0..30).map(|_| f(rng.below(25) as f64 / 10.0)).collect();
        for pack in [best_fit::<F>, best_fit_decreasing::<F>] {
            check("best fit", &sizes, &pack(&sizes, f(2.4)).unwrap());
        }
    }
}

// ---------------------------------------------------------------------------
// 3. Resources driven by the input, not by a parameter.

/// An item that claims any number of dimensions.
struct Claims(usize);

impl Item for Claims {
    type Size = u32;
    type Id = ();
    type Capacity = Claims;
    fn dims(&self) -> usize {
        self.0
    }
    fn size(&self, _dim: usize) -> u32 {
        1
    }
    fn id(&self) -> &() {
        &()
    }
}

#[test]
fn a_capacity_claiming_huge_dimension_counts_is_refused_at_once() {
    for dims in [usize::MAX, 1 << 40, u32::MAX as usize, (1 << 16) + 1] {
        let want = Error::Invalid {
            at: Locator::Setting {
                name: "capacity dimensions",
                requirement: "at most 65536",
            },
            value: Scalar::Int(dims as u64),
            reason: InvalidReason::OutOfRange,
        };
        let items = [Claims(dims)];
        for (name, pack) in packers::<Claims>() {
            assert_eq!(pack(&items, Claims(dims)).unwrap_err(), want, "{name}");
        }
        assert_eq!(lower_bounds(&items, Claims(dims)).unwrap_err(), want);
        assert_eq!(
            StreamingPacker::<Claims>::new(Claims(dims), 8).unwrap_err(),
            want
        );
    }
    // An item claiming more dimensions than the capacity is named at once.
    let err = first_fit_decreasing(&[Claims(2), Claims(usize::MAX)], Claims(2)).unwrap_err();
    assert_eq!(
        err,
        Error::DimensionMismatch {
            index: 1,
            expected: 2,
            found: usize::MAX
        }
    );
    // The limit itself is accepted.
    let p = first_fit(&[Claims(1 << 16)], Claims(1 << 16)).unwrap();
    assert_eq!(p.len(), 1);
}

#[test]
fn huge_capacities_and_buffers_cost_nothing() {
    let items = [3u64, 1, 2, u64::MAX - 6];
    for (name, pack) in packers::<u64>() {
        assert_eq!(pack(&items, u64::MAX).unwrap().len(), 1, "{name}");
    }
    let small = [1u32, 2, 3];
    for (name, pack) in packers::<u32>() {
        assert_eq!(pack(&small, u32::MAX).unwrap().len(), 1, "{name}");
    }
    let items = [1usize, 2, 3];
    for (name, pack) in packers::<usize>() {
        assert_eq!(pack(&items, usize::MAX).unwrap().len(), 1, "{name}");
    }
    for heuristic in [Heuristic::FirstFitDecreasing, Heuristic::BestFitDecreasing] {
        let mut packer = StreamingPacker::<u64>::new(u64::MAX, usize::MAX)
            .unwrap()
            .heuristic(heuristic);
        assert_eq!(packer.buffer_limit(), usize::MAX);
        for x in [5, 6, u64::MAX - 11] {
            packer.push(x).unwrap();
        }
        assert_eq!(packer.finish().len(), 1);
    }
    // Two-dimensional capacities at the edge of the type.
    let items = [[u32::MAX, 1], [0, u32::MAX - 1]];
    for (name, pack) in packers::<[u32; 2]>() {
        assert_eq!(
            pack(&items, [u32::MAX, u32::MAX]).unwrap().len(),
            1,
            "{name}"
        );
    }
}

// ---------------------------------------------------------------------------
// 5. Messages that say what to fix.

#[test]
fn pack_errors_say_what_to_fix() {
    let cases = [
        (
            first_fit(&[1u32], 0).unwrap_err(),
            "the capacity is zero in dimension 0; every dimension of a capacity must be positive",
        ),
        (
            first_fit(&[f(1.0)], f(-2.5)).unwrap_err(),
            "the capacity -2.5 in dimension 0 is invalid: negative values are not sizes; \
             a capacity must be finite and positive",
        ),
        (
            first_fit(&[vec![1u32]], vec![1, 2]).unwrap_err(),
            "item 0 has 1 dimension(s) but the capacity has 2; \
             give every item one size per dimension of the capacity",
        ),
        (
            first_fit(&[f(1.0), f(-1e-300)], f(2.0)).unwrap_err(),
            "item 1 has size -1e-300 in dimension 0: negative values are not sizes; \
             sizes must be finite and non-negative",
        ),
        (
            first_fit(&[f(f64::INFINITY)], f(2.0)).unwrap_err(),
            "item 0 has size inf in dimension 0: infinite values are not sizes; \
             sizes must be finite and non-negative",
        ),
        (
            first_fit(&[f(1.0), f(2.5), f(1e300)], f(2.4)).unwrap_err(),
            "2 item(s) larger than the capacity: item 1 has size 2.5 > 2.4 in dimension 0; \
             item 2 has size 1e300 > 2.4 in dimension 0;",
        ),
        (
            first_fit(&[Claims(70_000)], Claims(70_000)).unwrap_err(),
            "the setting `capacity dimensions` is 70000; it must be at most 65536",
        ),
    ];
    for (err, want) in cases {
        assert_eq!(err.to_string(), want);
    }
    let err = microbatch::not_nan(&[f64::NAN]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "item 0 has size NaN in dimension 0: NaN is not a size; sizes must be finite and non-negative"
    );
    assert!(matches!(
        first_fit(&[f(1.0)], f(f64::INFINITY)).unwrap_err(),
        Error::Invalid {
            at: Locator::Capacity { dim: 0 },
            reason: InvalidReason::Infinite,
            ..
        }
    ));
}

/// Found through the Python binding's hostile-input test: vector items under
/// a capacity of `u64::MAX` in every dimension (a secondary dimension
/// without a real limit) made best-fit-decreasing index a group past its
/// end; every packer must put them all in one bin.
#[test]
fn best_fit_decreasing_vectors_under_a_capacity_of_u64_max() {
    let items: Vec<[u64; 2]> = vec![
        [106, 3917],
        [2978, 3492],
        [4676, 1699],
        [2501, 218],
        [4431, 1766],
        [2056, 2766],
        [823, 1804],
        [3461, 2907],
        [1076, 1985],
        [3325, 3476],
        [3380, 4682],
        [3970, 75],
        [2534, 3094],
        [4691, 4053],
        [1639, 120],
        [2239, 2293],
        [1231, 4034],
        [4282, 3421],
        [1290, 1916],
        [1849, 1707],
        [4936, 162],
        [4438, 2502],
        [3554, 4103],
        [2711, 4125],
        [1795, 3568],
    ];
    let total = items.iter().fold([0, 0], |a, i| [a[0] + i[0], a[1] + i[1]]);
    for (name, f) in packers::<[u64; 2]>() {
        let packing = f(&items, [u64::MAX, u64::MAX]).unwrap();
        assert_eq!(packing.len(), 1, "{name}");
        assert_eq!(packing.bin(0).load(), total, "{name}");
    }
}

/// Issue 20: best fit over two-dimensional items walked every bin with room
/// in the first dimension until one fitted the second, quadratic time
/// (50,000 such items: 11 s in release). Here every bin has room in the
/// first dimension and none in the second, the walk's worst case: the
/// search tree answers at once (this test took minutes in a debug build).
#[test]
fn best_fit_over_two_dimensions_is_not_quadratic() {
    let items = vec![[1u32, 1000]; 20_000];
    for packing in [
        best_fit_decreasing(&items, [100_000, 1000]).unwrap(),
        best_fit(&items, [100_000, 1000]).unwrap(),
    ] {
        assert_eq!(packing.len(), 20_000);
        assert!(packing
            .bins()
            .enumerate()
            .all(|(b, bin)| bin.items() == [b]));
    }
    // Half the items fill the second dimension, half fit anywhere: the
    // small ones go to the fullest bins that hold them, the last opened
    // first.
    let mut items = vec![[1u32, 600]; 10_000];
    items.extend(vec![[2u32, 400]; 10_000]);
    let p = best_fit_decreasing(&items, [100_000, 1000]).unwrap();
    assert_eq!(p.len(), 10_000);
    assert!(p.bins().all(|bin| bin.load() == [3, 1000]));
}

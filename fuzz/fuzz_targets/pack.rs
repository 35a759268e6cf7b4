//! Fuzz target `pack`: every packing function and the streaming packer, on
//! integer, float, multi-dimensional and keyed items, checking every promise
//! of `microbatch::pack` (see fuzz/README.md).
#![no_main]

use std::fmt::Debug;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use microbatch::pack::{
    best_fit, best_fit_decreasing, first_fit, first_fit_decreasing, lower_bounds, next_fit,
    Heuristic, Packing, StreamingPacker,
};
use microbatch::{Error, Item, Locator, NotNan, Scalar};
use microbatch_fuzz::{check, exactly_once, for_each_assignment, fresh_sum, not_nan, F};

/// A size type of the crate, with what the checks need.
trait Num: Copy + PartialOrd + Debug + microbatch::Size {
    fn valid(self) -> bool;
    fn is_zero(self) -> bool;
    /// The exact value of an integer, `None` for floats.
    fn int(self) -> Option<u128>;
    fn f(self) -> f64;
    fn from_raw(raw: u64, f: f64, cap: Option<Self>) -> Self;
    fn scalar_is(self, s: &Scalar) -> bool;
}

macro_rules! int_num {
    ($t:ty) => {
        impl Num for $t {
            fn valid(self) -> bool {
                true
            }
            fn is_zero(self) -> bool {
                self == 0
            }
            fn int(self) -> Option<u128> {
                Some(self as u128)
            }
            fn f(self) -> f64 {
                self as f64
            }
            fn from_raw(raw: u64, _: f64, cap: Option<Self>) -> Self {
                match cap {
                    // Mostly within the capacity, sometimes just above it.
                    Some(c) if raw % 8 != 0 => {
                        let c = c as u64;
                        let m = c.saturating_add(c / 4).saturating_add(2);
                        (raw / 8 % m).min(<$t>::MAX as u64) as $t
                    }
                    _ => raw as $t,
                }
            }
            fn scalar_is(self, s: &Scalar) -> bool {
                matches!(s, Scalar::Int(v) if *v as u128 == self as u128)
            }
        }
    };
}
int_num!(u8);
int_num!(u32);
int_num!(u64);

impl Num for NotNan<f64> {
    fn valid(self) -> bool {
        self.is_finite() && *self >= 0.0
    }
    fn is_zero(self) -> bool {
        *self == 0.0
    }
    fn int(self) -> Option<u128> {
        None
    }
    fn f(self) -> f64 {
        *self
    }
    fn from_raw(raw: u64, f: f64, cap: Option<Self>) -> Self {
        match cap {
            Some(c) if raw % 4 == 1 && c.is_finite() => not_nan(*c * (raw % 1000) as f64 / 800.0),
            _ => not_nan(f),
        }
    }
    fn scalar_is(self, s: &Scalar) -> bool {
        matches!(s, Scalar::Float(v) if *v == *self || (v.is_nan() && self.is_nan()))
    }
}

#[derive(Arbitrary, Debug)]
enum Kind {
    U8,
    U32,
    U64,
    F64,
    Arr2U32,
    Arr3F64,
    VecU32,
    VecF64,
    KeyedU32,
}

#[derive(Arbitrary, Debug)]
struct Input {
    kind: Kind,
    cap: Vec<(u64, F)>,
    items: Vec<Vec<(u64, F)>>,
    /// Vector items: each item's dimension count (else the capacity's).
    ragged: bool,
    buffer: u16,
    bfd_stream: bool,
}

/// The model of an instance: sizes as the checks see them.
struct Model<V> {
    cap: Vec<V>,
    items: Vec<Vec<V>>,
}

fuzz_target!(|input: Input| {
    if input.items.len() > 256 {
        return;
    }
    match input.kind {
        Kind::U8 => scalar::<u8>(&input),
        Kind::U32 => scalar::<u32>(&input),
        Kind::U64 => scalar::<u64>(&input),
        Kind::F64 => scalar::<NotNan<f64>>(&input),
        Kind::KeyedU32 => {
            let m = model::<u32>(&input, 1, false);
            let items: Vec<(u64, u32)> = m
                .items
                .iter()
                .zip(&input.items)
                .map(|(s, raw)| (raw.first().map_or(0, |r| r.0 % 4), s[0]))
                .collect();
            run(&items, m.cap[0], &m, &input);
        }
        Kind::Arr2U32 => {
            let m = model::<u32>(&input, 2, false);
            let items: Vec<[u32; 2]> = m.items.iter().map(|s| [s[0], s[1]]).collect();
            run(&items, [m.cap[0], m.cap[1]], &m, &input);
        }
        Kind::Arr3F64 => {
            let m = model::<NotNan<f64>>(&input, 3, false);
            let items: Vec<[NotNan<f64>; 3]> = m.items.iter().map(|s| [s[0], s[1], s[2]]).collect();
            run(&items, [m.cap[0], m.cap[1], m.cap[2]], &m, &input);
        }
        Kind::VecU32 => vector::<u32>(&input),
        Kind::VecF64 => vector::<NotNan<f64>>(&input),
    }
});

fn scalar<V: Num + Item<Size = V, Capacity = V>>(input: &Input) {
    let m = model::<V>(input, 1, false);
    let items: Vec<V> = m.items.iter().map(|s| s[0]).collect();
    run(&items, m.cap[0], &m, input);
}

fn vector<V: Num>(input: &Input)
where
    Vec<V>: Item<Size = V, Capacity = Vec<V>>,
{
    let dims = input.cap.len().min(4);
    let m = model::<V>(input, dims, input.ragged);
    run(&m.items.clone(), m.cap.clone(), &m, input);
}

fn model<V: Num>(input: &Input, dims: usize, ragged: bool) -> Model<V> {
    let cap: Vec<V> = (0..dims)
        .map(|d| {
            let (raw, f) = input.cap.get(d).copied().unwrap_or((100, F(100.0)));
            V::from_raw(raw, f.0, None)
        })
        .collect();
    let items = input
        .items
        .iter()
        .map(|raw| {
            let n = if ragged { raw.len().min(5) } else { dims };
            (0..n)
                .map(|d| {
                    let (r, f) = raw.get(d).copied().unwrap_or((0, F(0.0)));
                    V::from_raw(r, f.0, cap.get(d).copied())
                })
                .collect()
        })
        .collect();
    Model { cap, items }
}

type PackFn<I> = fn(&[I], <I as Item>::Capacity) -> Result<Packing<<I as Item>::Size>, Error>;

fn run<I, V>(items: &[I], cap: I::Capacity, m: &Model<V>, input: &Input)
where
    I: Item<Size = V> + Clone + Debug + PartialEq,
    I::Capacity: Clone,
    V: Num,
{
    let expected = expected_error(m);
    let algos: [(&str, PackFn<I>); 5] = [
        ("first_fit", first_fit::<I>),
        ("first_fit_decreasing", first_fit_decreasing::<I>),
        ("best_fit", best_fit::<I>),
        ("best_fit_decreasing", best_fit_decreasing::<I>),
        ("next_fit", next_fit::<I>),
    ];
    let bounds = lower_bounds(items, cap.clone());
    check_result("lower_bounds", bounds.as_ref().err(), &expected, m);
    let opt = brute_force_bins(m);
    if let (Ok(b), Some(opt)) = (&bounds, opt) {
        check!(
            "pack_bound_opt",
            b.l2 as usize <= opt,
            "L2 {} > optimum {opt} ({m:?})",
            b.l2,
            m = m.items
        );
        check!(
            "pack_bound_order",
            b.l1 <= b.l2,
            "L1 {} > L2 {}",
            b.l1,
            b.l2
        );
    }
    if let (Ok(b), Some(total)) = (&bounds, int_l1(m)) {
        check!(
            "pack_l1_exact",
            b.l1 as u128 == total,
            "L1 {} != ceil(sum / cap) = {total}",
            b.l1
        );
    }
    for (name, f) in algos {
        let r = f(items, cap.clone());
        check_result(name, r.as_ref().err(), &expected, m);
        let Ok(p) = r else { continue };
        check_packing(name, &p, m);
        check!(
            "pack_deterministic",
            f(items, cap.clone()).as_ref() == Ok(&p),
            "{name} differs on a second run"
        );
        if let Ok(b) = &bounds {
            check!(
                "pack_bounds_same",
                p.lower_bounds() == *b,
                "{name}: {:?} != lower_bounds() {:?}",
                p.lower_bounds(),
                b
            );
        }
        if let (Some(opt), true) = (opt, m.cap.len() == 1 && m.cap[0].int().is_some()) {
            let (used, best) = (p.len(), opt);
            let ok = match name {
                "first_fit_decreasing" | "best_fit_decreasing" => 9 * used <= 11 * best + 6,
                "first_fit" | "best_fit" => 10 * used <= 17 * best,
                _ => used <= 2 * best,
            };
            check!(
                "pack_ratio",
                ok,
                "{name}: {used} bins, optimum {best} ({:?})",
                m.items
            );
        }
        // Decreasing orders sort by exact size: with one dimension the input
        // order does not matter.
        if name.ends_with("decreasing") && m.cap.len() == 1 {
            let rev: Vec<I> = items.iter().rev().cloned().collect();
            if let Ok(q) = f(&rev, cap.clone()) {
                check!(
                    "pack_order",
                    sorted_loads(&p) == sorted_loads(&q),
                    "{name}: bin loads differ for the reversed input"
                );
            } else {
                check!("pack_order", false, "{name}: the reversed input fails");
            }
        }
    }
    streaming(items, cap, m, input);
}

fn sorted_loads<T: Num>(p: &Packing<T>) -> Vec<Vec<u128>> {
    let mut v: Vec<Vec<u128>> = p
        .bins()
        .map(|b| b.load().iter().map(|x| x.f().to_bits() as u128).collect())
        .collect();
    v.sort();
    v
}

/// What validation must say about the instance: `None` when it is valid
/// (every item fits), else a description of the acceptable errors.
#[derive(Debug)]
enum Expected {
    Ok,
    NoDimensions,
    /// The first bad capacity dimension.
    BadCapacity(usize),
    /// Some malformed item (wrong dimension count or invalid size).
    Malformed,
    /// These (item, dimension) pairs are above the capacity.
    Oversize(Vec<(usize, usize)>),
}

fn expected_error<V: Num>(m: &Model<V>) -> Expected {
    if m.cap.is_empty() {
        return Expected::NoDimensions;
    }
    if let Some(d) = m.cap.iter().position(|c| !c.valid() || c.is_zero()) {
        return Expected::BadCapacity(d);
    }
    let dims = m.cap.len();
    if m.items
        .iter()
        .any(|s| s.len() != dims || s.iter().any(|x| !x.valid()))
    {
        return Expected::Malformed;
    }
    let over: Vec<(usize, usize)> = m
        .items
        .iter()
        .enumerate()
        .flat_map(|(i, s)| {
            s.iter()
                .zip(&m.cap)
                .enumerate()
                .filter(|(_, (x, c))| x > c)
                .map(move |(d, _)| (i, d))
        })
        .collect();
    if over.is_empty() {
        Expected::Ok
    } else {
        Expected::Oversize(over)
    }
}

fn check_result<V: Num>(name: &str, r: Option<&Error>, expected: &Expected, m: &Model<V>) {
    match (r.ok_or(()), expected) {
        (Err(()), Expected::Ok) => {}
        (Ok(Error::NoDimensions), Expected::NoDimensions) => {}
        (Ok(Error::ZeroCapacity { dim }), Expected::BadCapacity(d)) => {
            check!(
                "pack_error",
                dim == d && m.cap[*d].is_zero(),
                "{name}: ZeroCapacity {{ dim: {dim} }} for {:?}",
                m.cap
            );
        }
        (
            Ok(Error::Invalid {
                at: Locator::Capacity { dim },
                value,
                ..
            }),
            Expected::BadCapacity(d),
        ) => {
            check!(
                "pack_error",
                dim == d && !m.cap[*d].valid() && m.cap[*d].scalar_is(value),
                "{name}: InvalidCapacity {{ dim: {dim} }} for {:?}",
                m.cap
            );
        }
        (
            Ok(Error::DimensionMismatch {
                index,
                expected,
                found,
            }),
            Expected::Malformed,
        ) => {
            let ok = m.items.get(*index).is_some_and(|s| s.len() == *found)
                && *expected == m.cap.len()
                && found != expected
                && m.items[..*index]
                    .iter()
                    .all(|s| s.len() == m.cap.len() && s.iter().all(|x| x.valid()));
            check!("pack_error", ok, "{name}: DimensionMismatch {{ index: {index}, expected: {expected}, found: {found} }} unjustified");
        }
        (
            Ok(Error::Invalid {
                at: Locator::Size { index, dim },
                value,
                ..
            }),
            Expected::Malformed,
        ) => {
            let x = m.items.get(*index).and_then(|s| s.get(*dim));
            let ok = x.is_some_and(|x| !x.valid() && x.scalar_is(value));
            check!(
                "pack_error",
                ok,
                "{name}: InvalidSize {{ index: {index}, dim: {dim} }} unjustified"
            );
        }
        (Ok(Error::Oversize { items }), Expected::Oversize(over)) => {
            let mut named: Vec<(usize, usize)> = items.iter().map(|o| (o.index, o.dim)).collect();
            named.sort();
            for o in items {
                let ok = m.items[o.index][o.dim].scalar_is(&o.size)
                    && m.cap[o.dim].scalar_is(&o.capacity);
                check!(
                    "pack_error",
                    ok,
                    "{name}: Oversize names item {} dim {} with wrong values {:?}",
                    o.index,
                    o.dim,
                    o
                );
            }
            check!(
                "pack_error",
                &named == over,
                "{name}: Oversize names {named:?}, the items above the capacity are {over:?}"
            );
        }
        (r, e) => {
            check!(
                "pack_error",
                false,
                "{name}: got {r:?}, expected {e:?} (capacity {:?}, items {:?})",
                m.cap,
                m.items
            );
        }
    }
}

fn check_packing<V: Num>(name: &str, p: &Packing<V>, m: &Model<V>) {
    let n = m.items.len();
    let dims = m.cap.len();
    check!(
        "pack_shape",
        p.item_count() == n && p.dims() == dims && p.capacity() == m.cap.as_slice(),
        "{name}: item_count {} dims {} capacity {:?}",
        p.item_count(),
        p.dims(),
        p.capacity()
    );
    check!(
        "pack_shape",
        p.bins().len() == p.len() && p.is_empty() == (p.len() == 0),
        "{name}: len {} vs bins()",
        p.len()
    );
    let of = exactly_once("pack_exactly_once", n, p.bins().map(|b| b.items()));
    if microbatch_fuzz::on("pack_exactly_once") {
        check!(
            "pack_assignment",
            p.assignment() == of,
            "{name}: assignment() disagrees with bins()"
        );
    }
    for (b, bin) in p.bins().enumerate() {
        check!(
            "pack_no_empty_bin",
            !bin.items().is_empty(),
            "{name}: bin {b} is empty"
        );
        check!(
            "pack_shape",
            bin.load().len() == dims && p.get(b) == Some(bin),
            "{name}: bin {b} load has {} dims",
            bin.load().len()
        );
        for d in 0..dims {
            let load = bin.load()[d];
            if let Some(c) = m.cap[d].int() {
                let sum: u128 = bin
                    .items()
                    .iter()
                    .map(|&i| m.items[i][d].int().unwrap())
                    .sum();
                check!(
                    "pack_capacity",
                    sum <= c,
                    "{name}: bin {b} holds {sum} > capacity {c} in dimension {d}"
                );
                check!(
                    "pack_load",
                    load.int() == Some(sum),
                    "{name}: bin {b} reports load {load:?}, its items sum to {sum}"
                );
            } else {
                let sum = fresh_sum(bin.items().iter().map(|&i| m.items[i][d].f()));
                let c = m.cap[d].f();
                check!("pack_capacity", sum <= c, "{name}: bin {b} holds {sum:?} (summed afresh in listed order) > capacity {c:?} in dimension {d}: items {:?}", bin.items().iter().map(|&i| m.items[i][d]).collect::<Vec<_>>());
                check!(
                    "pack_capacity",
                    load.f() <= c,
                    "{name}: bin {b} reports load {load:?} > capacity {c:?}"
                );
            }
        }
    }
    check!(
        "pack_no_extra_bin",
        p.get(p.len()).is_none(),
        "{name}: get(len) is Some"
    );
    let lb = p.lower_bounds();
    check!(
        "pack_bound_le_bins",
        lb.l1 <= lb.l2 && lb.l2 as usize <= p.len(),
        "{name}: bounds {lb:?} with {} bins ({:?} into {:?})",
        p.len(),
        m.items,
        m.cap
    );
    for d in 0..dims + 1 {
        let e = p.efficiency(d);
        let ok = if d == dims {
            e == 0.0
        } else {
            (0.0..=1.0 + 1e-12).contains(&e)
        };
        check!("pack_efficiency", ok, "{name}: efficiency({d}) = {e}");
    }
}

/// ceil(sum / cap) for one integer dimension.
fn int_l1<V: Num>(m: &Model<V>) -> Option<u128> {
    if m.cap.len() != 1 || !matches!(expected_error(m), Expected::Ok) {
        return None;
    }
    let c = m.cap[0].int().filter(|&c| c > 0)?;
    let sum: u128 = m.items.iter().map(|s| s[0].int()).sum::<Option<u128>>()?;
    Some(sum.div_ceil(c))
}

/// The fewest bins of a tiny valid integer instance.
fn brute_force_bins<V: Num>(m: &Model<V>) -> Option<usize> {
    let n = m.items.len();
    if n == 0 || n > 7 || !matches!(expected_error(m), Expected::Ok) {
        return None;
    }
    let caps: Vec<u128> = m.cap.iter().map(|c| c.int()).collect::<Option<_>>()?;
    let mut best = n;
    for_each_assignment(n, n, |a| {
        let used = a.iter().max().unwrap() + 1;
        if used >= best {
            return;
        }
        let mut loads = vec![0u128; used * caps.len()];
        for (i, &b) in a.iter().enumerate() {
            for (d, c) in caps.iter().enumerate() {
                loads[b * caps.len() + d] += m.items[i][d].int().unwrap();
                if loads[b * caps.len() + d] > *c {
                    return;
                }
            }
        }
        best = used;
    });
    Some(best)
}

fn streaming<I, V>(items: &[I], cap: I::Capacity, m: &Model<V>, input: &Input)
where
    I: Item<Size = V> + Clone + Debug + PartialEq,
    I::Capacity: Clone,
    V: Num,
{
    let heuristic = if input.bfd_stream {
        Heuristic::BestFitDecreasing
    } else {
        Heuristic::FirstFitDecreasing
    };
    let buffer = input.buffer as usize % 300;
    let packer = StreamingPacker::<I>::new(cap.clone(), buffer);
    let cap_ok = !m.cap.is_empty() && m.cap.iter().all(|c| c.valid() && !c.is_zero());
    let mut packer = match packer {
        Ok(p) => {
            check!(
                "stream_error",
                cap_ok,
                "new() accepted capacity {:?}",
                m.cap
            );
            p.heuristic(heuristic)
        }
        Err(e) => {
            check!(
                "stream_error",
                !cap_ok,
                "new() refused valid capacity {:?}: {e}",
                m.cap
            );
            return;
        }
    };
    let limit = packer.buffer_limit();
    check!(
        "stream_limit",
        limit == buffer.max(1),
        "buffer_limit {limit} for {buffer}"
    );
    let mut accepted: Vec<(usize, &I)> = Vec::new();
    let mut bins = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let s = &m.items[i];
        let fits = s.len() == m.cap.len()
            && s.iter().all(|x| x.valid())
            && s.iter().zip(&m.cap).all(|(x, c)| x <= c);
        match packer.push(item.clone()) {
            Ok(()) => {
                check!(
                    "stream_error",
                    fits,
                    "push accepted item {i} {s:?} (capacity {:?})",
                    m.cap
                );
                accepted.push((i, item));
            }
            Err(rej) => {
                check!(
                    "stream_error",
                    !fits,
                    "push refused item {i} {s:?}: {}",
                    rej.error
                );
                check!(
                    "stream_error",
                    rej.item == *item,
                    "push handed back another item"
                );
            }
        }
        check!(
            "stream_limit",
            packer.buffered() <= limit,
            "{} buffered over the limit {limit}",
            packer.buffered()
        );
        let ready = packer.ready();
        let mut popped = 0;
        while let Some(b) = packer.pop() {
            bins.push(b);
            popped += 1;
        }
        check!(
            "stream_ready",
            popped == ready,
            "ready() said {ready}, popped {popped}"
        );
    }
    bins.extend(packer.finish());
    let groups: Vec<Vec<usize>> = bins
        .iter()
        .map(|b| b.arrivals().iter().map(|&a| a as usize).collect())
        .collect();
    exactly_once(
        "stream_exactly_once",
        accepted.len(),
        groups.iter().map(|g| g.as_slice()),
    );
    for (b, bin) in bins.iter().enumerate() {
        check!(
            "stream_no_empty_bin",
            !bin.items().is_empty(),
            "streamed bin {b} is empty"
        );
        check!(
            "stream_items",
            bin.items().len() == bin.arrivals().len(),
            "bin {b}: items and arrivals differ in length"
        );
        for (item, &a) in bin.items().iter().zip(bin.arrivals()) {
            let ok = accepted.get(a as usize).is_some_and(|(_, x)| *x == item);
            check!(
                "stream_items",
                ok,
                "bin {b}: arrival {a} is not the item pushed then"
            );
        }
        for d in 0..m.cap.len() {
            let idx = bin
                .arrivals()
                .iter()
                .filter_map(|&a| accepted.get(a as usize))
                .map(|(i, _)| *i);
            if let Some(c) = m.cap[d].int() {
                let sum: u128 = idx.map(|i| m.items[i][d].int().unwrap()).sum();
                check!(
                    "stream_capacity",
                    sum <= c && bin.load()[d].int() == Some(sum),
                    "streamed bin {b}: sum {sum}, load {:?}, capacity {c}",
                    bin.load()[d]
                );
            } else {
                let sum = fresh_sum(idx.map(|i| m.items[i][d].f()));
                check!(
                    "stream_capacity",
                    sum <= m.cap[d].f(),
                    "streamed bin {b}: sum {sum} > capacity {:?}",
                    m.cap[d]
                );
            }
        }
    }
    // A buffer holding everything gives exactly the batch heuristic's bins.
    if accepted.len() <= limit {
        let batch: Vec<I> = accepted.iter().map(|(_, x)| (*x).clone()).collect();
        let r = match heuristic {
            Heuristic::FirstFitDecreasing => first_fit_decreasing(&batch, cap),
            _ => best_fit_decreasing(&batch, cap),
        };
        if let Ok(p) = r {
            let same = p.len() == groups.len()
                && p.bins()
                    .zip(&groups)
                    .all(|(b, g)| b.items() == g.as_slice());
            check!(
                "stream_batch_equal",
                same,
                "buffer {limit} >= {} items, but the bins differ from {heuristic:?}",
                batch.len()
            );
        }
    }
}

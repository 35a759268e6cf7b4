//! Fuzz target `partition`: `lpt`, `karmarkar_karp`, `exact`, `refine`,
//! `lower_bound` and the `Partitioner` with every option, on integer, float
//! and two-dimensional items, checking every promise of
//! `microbatch::partition` (see fuzz/README.md).
#![no_main]

use std::fmt::Debug;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use microbatch::partition::{
    exact, karmarkar_karp, lower_bound, lpt, refine, Algorithm, Dims, Objective, Partition,
    Partitioner,
};
use microbatch::{Error, Item, Locator, NotNan, Scalar};
use microbatch_fuzz::{check, exactly_once, for_each_assignment, fresh_sum, not_nan, Count, F};

#[derive(Arbitrary, Debug)]
enum Kind {
    U32,
    U64,
    F64,
    Arr2U32,
    Arr2F64,
}

#[derive(Arbitrary, Debug)]
struct Options {
    algorithm: u8,
    refinement: bool,
    objective: bool,
    per_dim: bool,
    equal_count: bool,
    allow_empty: bool,
    cap: Option<(u64, F)>,
    /// Cap per dimension for two-dimensional items, else the cap on dimension 0.
    cap2: Option<(u64, F)>,
    node_budget: u16,
    max_rounds: Option<u8>,
}

#[derive(Arbitrary, Debug)]
struct Input {
    kind: Kind,
    k: Count,
    items: Vec<[(u64, F); 2]>,
    opts: Options,
    free: u8,
}

/// Sizes as the checks see them: exact integers or floats.
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd)]
enum V {
    I(u128),
    F(f64),
}

impl V {
    fn f(self) -> f64 {
        match self {
            V::I(x) => x as f64,
            V::F(x) => x,
        }
    }
    fn valid(self) -> bool {
        match self {
            V::I(_) => true,
            V::F(x) => x.is_finite() && x >= 0.0,
        }
    }
    fn is(self, s: &Scalar) -> bool {
        match (self, s) {
            (V::I(a), Scalar::Int(b)) => a == *b as u128,
            (V::I(a), Scalar::Wide(b)) => a == *b,
            (V::F(a), Scalar::Float(b)) => a == *b,
            _ => false,
        }
    }
}

/// A part sum, exact for integers.
fn add(a: V, b: V) -> V {
    match (a, b) {
        (V::I(a), V::I(b)) => V::I(a + b),
        _ => V::F(a.f() + b.f()),
    }
}

fn zero(float: bool) -> V {
    if float {
        V::F(0.0)
    } else {
        V::I(0)
    }
}

/// A total of the crate (`u128` or `f64`) as a `V`.
trait AsV: Copy + Debug + PartialOrd + microbatch::Total {
    fn v(self) -> V;
}
impl AsV for u128 {
    fn v(self) -> V {
        V::I(self)
    }
}
impl AsV for f64 {
    fn v(self) -> V {
        V::F(self)
    }
}

struct Model {
    float: bool,
    dims: usize,
    items: Vec<Vec<V>>,
    cap: Option<Vec<V>>,
}

fuzz_target!(|input: Input| {
    if input.items.len() > 48 {
        return;
    }
    let int = |(r, _): (u64, F), m: u64| (r % m.max(1)) as u32;
    let flt = |(r, f): (u64, F)| {
        if r % 3 == 0 {
            f.0
        } else {
            (r % 100) as f64 / 10.0
        }
    };
    let bound = input.opts.cap.map_or(1000, |c| c.0 % 5000 + 1);
    match input.kind {
        Kind::U32 => {
            let items: Vec<u32> = input.items.iter().map(|s| int(s[0], bound)).collect();
            let cap = input.opts.cap.map(|c| (c.0 % 6000) as u32);
            let m = Model {
                float: false,
                dims: 1,
                items: items.iter().map(|&x| vec![V::I(x.into())]).collect(),
                cap: cap.map(|c| vec![V::I(c.into())]),
            };
            run(&items, cap.map(|c| vec![c]), &m, &input);
        }
        Kind::U64 => {
            let items: Vec<u64> = input
                .items
                .iter()
                .map(|s| {
                    if s[0].0 % 5 == 0 {
                        u64::MAX - s[0].0 % 7
                    } else {
                        u64::from(int(s[0], bound))
                    }
                })
                .collect();
            let cap = input
                .opts
                .cap
                .map(|c| if c.0 % 2 == 0 { u64::MAX } else { c.0 % 6000 });
            let m = Model {
                float: false,
                dims: 1,
                items: items.iter().map(|&x| vec![V::I(x.into())]).collect(),
                cap: cap.map(|c| vec![V::I(c.into())]),
            };
            run(&items, cap.map(|c| vec![c]), &m, &input);
        }
        Kind::F64 => {
            let items: Vec<NotNan<f64>> = input.items.iter().map(|s| not_nan(flt(s[0]))).collect();
            let cap = input.opts.cap.map(|c| not_nan(flt(c)));
            let m = Model {
                float: true,
                dims: 1,
                items: items.iter().map(|&x| vec![V::F(*x)]).collect(),
                cap: cap.map(|c| vec![V::F(*c)]),
            };
            run(&items, cap.map(|c| vec![c]), &m, &input);
        }
        Kind::Arr2U32 => {
            let items: Vec<[u32; 2]> = input
                .items
                .iter()
                .map(|s| [int(s[0], bound), int(s[1], bound)])
                .collect();
            let cap = input
                .opts
                .cap
                .zip(input.opts.cap2)
                .map(|(a, b)| vec![(a.0 % 6000) as u32, (b.0 % 6000) as u32]);
            let m = Model {
                float: false,
                dims: 2,
                items: items
                    .iter()
                    .map(|x| x.iter().map(|&v| V::I(v.into())).collect())
                    .collect(),
                cap: cap
                    .as_ref()
                    .map(|c| c.iter().map(|&v| V::I(v.into())).collect()),
            };
            run(&items, cap, &m, &input);
        }
        Kind::Arr2F64 => {
            let items: Vec<[NotNan<f64>; 2]> = input
                .items
                .iter()
                .map(|s| [not_nan(flt(s[0])), not_nan(flt(s[1]))])
                .collect();
            let cap = input
                .opts
                .cap
                .zip(input.opts.cap2)
                .map(|(a, b)| vec![not_nan(flt(a)), not_nan(flt(b))]);
            let m = Model {
                float: true,
                dims: 2,
                items: items
                    .iter()
                    .map(|x| x.iter().map(|&v| V::F(*v)).collect())
                    .collect(),
                cap: cap.as_ref().map(|c| c.iter().map(|&v| V::F(*v)).collect()),
            };
            run(&items, cap, &m, &input);
        }
    }
});

fn run<I, S>(items: &[I], cap: Option<Vec<S>>, m: &Model, input: &Input)
where
    I: Item<Size = S> + Clone + Debug,
    S: microbatch::Size + Copy,
    S::Total: AsV,
{
    let k = input.k.get();
    let n = items.len();
    let valid = m.items.iter().all(|s| s.iter().all(|x| x.valid()));
    let huge = k > (1 << 16);
    // The free functions: no empty parts, no cap.
    let free: [(&str, Result<Partition<S::Total>, Error>); 3] = [
        ("lpt", lpt(items, k)),
        ("karmarkar_karp", karmarkar_karp(items, k)),
        (
            "exact",
            exact(items, k, u64::from(input.opts.node_budget % 2048)),
        ),
    ];
    let lb = lower_bound(items, k);
    for (name, r) in free {
        match &r {
            Ok(p) => {
                check!(
                    "part_error",
                    valid && k >= 1 && k <= n,
                    "{name}: Ok for k = {k}, n = {n}, valid = {valid}"
                );
                check_partition(
                    name,
                    p,
                    m,
                    k,
                    false,
                    None,
                    Objective::MaxPart,
                    Dims::Combined,
                );
                if let Ok(lb) = &lb {
                    check!(
                        "part_lower_bound_fn",
                        lb.v() <= p.objective().v(),
                        "{name}: lower_bound() {lb:?} > objective {:?}",
                        p.objective()
                    );
                }
                if name == "lpt" && m.dims == 1 && !m.float && n <= 8 && k <= 3 {
                    if let Some(opt) = brute(m, k, false, None, Objective::MaxPart, Dims::Combined)
                    {
                        let (o, kk) = (p.objective().v().f(), k as f64);
                        check!(
                            "part_lpt_ratio",
                            3.0 * kk * o <= (4.0 * kk - 1.0) * opt.f(),
                            "lpt {o} above 4/3 - 1/3k of the optimum {opt:?}"
                        );
                    }
                }
                let refined = refine(items, p);
                // "Never worse than its input" compares with the input
                // evaluated the same way (no step: `max_rounds(0)`).
                let same_way = Partitioner::<S>::new(k).max_rounds(0).refine(items, p);
                match refined {
                    Ok(q) => {
                        check_partition(
                            "refine",
                            &q,
                            m,
                            k,
                            false,
                            None,
                            Objective::MaxPart,
                            Dims::Combined,
                        );
                        let before = same_way.as_ref().map(|s| s.objective().v());
                        check!("part_refine_not_worse", before.as_ref().is_ok_and(|b| q.objective().v() <= *b), "refine raised the objective of {name} from {before:?} (reported {:?}) to {:?}", p.objective(), q.objective());
                        if !m.float {
                            check!(
                                "part_refine_not_worse",
                                q.objective().v() <= p.objective().v(),
                                "refine raised the integer objective of {name} from {:?} to {:?}",
                                p.objective(),
                                q.objective()
                            );
                        }
                    }
                    Err(e) => check!(
                        "part_error",
                        false,
                        "refine of a valid {name} result failed: {e}"
                    ),
                }
            }
            Err(e) => justify::<I, S>(name, e, m, k, false, None),
        }
    }
    if huge {
        // Keep the checks below proportional to the input.
        if !microbatch_fuzz::on("part_huge_k") {
            return;
        }
        let _ = Partitioner::<S>::new(k)
            .allow_empty(true)
            .partition(items)
            .map(|p| {
                check!(
                    "part_count",
                    p.len() == k,
                    "allow_empty with k = {k}: {} parts",
                    p.len()
                );
            });
        return;
    }
    // The partitioner with options.
    let o = &input.opts;
    let algorithm = match o.algorithm % 3 {
        0 => Algorithm::Lpt,
        1 => Algorithm::KarmarkarKarp,
        _ => Algorithm::Exact,
    };
    let objective = if o.objective {
        Objective::Spread
    } else {
        Objective::MaxPart
    };
    let dims = if o.per_dim {
        Dims::PerDim
    } else {
        Dims::Combined
    };
    let mut pt = Partitioner::<S>::new(k)
        .algorithm(algorithm)
        .refinement(o.refinement)
        .objective(objective)
        .dims(dims)
        .equal_count(o.equal_count)
        .allow_empty(o.allow_empty)
        .node_budget(u64::from(o.node_budget % 4096));
    if let Some(r) = o.max_rounds {
        pt = pt.max_rounds(r.into());
    }
    if let Some(c) = &cap {
        pt = if c.len() == 1 && input.free % 2 == 0 {
            pt.cap(c[0])
        } else {
            pt.cap_per_dim(c)
        };
    }
    let r = pt.partition(items);
    let capv = m.cap.as_deref();
    match &r {
        Ok(p) => {
            check!(
                "part_error",
                valid && k >= 1 && (k <= n || o.allow_empty),
                "partitioner: Ok for k = {k}, n = {n}"
            );
            check_partition("partitioner", p, m, k, o.equal_count, capv, objective, dims);
            check!(
                "part_allow_empty",
                o.allow_empty || p.parts().all(|q| !q.is_empty()),
                "empty part without allow_empty"
            );
            check!(
                "part_deterministic",
                pt.partition(items).as_ref() == Ok(p),
                "a second run differs"
            );
            if n <= 7 && k <= 3 {
                if let Some(opt) = brute(m, k, o.equal_count, capv, objective, dims) {
                    check!(
                        "part_bound_opt",
                        p.lower_bound().v().f() <= opt.f(),
                        "lower bound {:?} above the optimum {opt:?} (constrained)",
                        p.lower_bound()
                    );
                    if p.proven_optimal() && !m.float {
                        check!(
                            "part_proven",
                            p.objective().v() == opt,
                            "proven optimal {:?} but the optimum is {opt:?}",
                            p.objective()
                        );
                    }
                }
            }
            // Refinement from the unrefined LPT result is never worse and keeps the cap.
            if let Ok(start) = lpt(items, k) {
                let before = objective_of(&start, m, objective, dims);
                match pt.refine(items, &start) {
                    Ok(q) => {
                        let within = capv.is_none_or(|c| fits_cap(&start, m, c));
                        check!("part_error", !o.equal_count || counts_equal(&start), "Partitioner::refine accepted a start with unequal counts under equal_count");
                        check_partition(
                            "partitioner.refine",
                            &q,
                            m,
                            k,
                            o.equal_count,
                            if within { capv } else { None },
                            objective,
                            dims,
                        );
                        let after = objective_of(&q, m, objective, dims);
                        let tol = if m.float {
                            1e-9 * before.f().abs()
                        } else {
                            0.0
                        };
                        check!("part_refine_not_worse", after.f() <= before.f() + tol, "Partitioner::refine raised {objective:?}/{dims:?} from {before:?} to {after:?}");
                    }
                    // Errors as Partitioner::partition: a cap that the start breaks may stay
                    // broken (CapExceeded); one it meets is kept.
                    Err(e) => {
                        let within = capv.is_none_or(|c| fits_cap(&start, m, c));
                        let unequal = o.equal_count
                            && !counts_equal(&start)
                            && matches!(e, Error::UnequalCounts { .. });
                        check!(
                            "part_error",
                            unequal
                                || matches!(e, Error::Oversize { .. })
                                || (matches!(e, Error::CapExceeded { .. }) && !within)
                                || !valid,
                            "Partitioner::refine of lpt failed: {e}"
                        );
                    }
                }
            }
        }
        Err(e) => justify(
            "partitioner",
            e,
            m,
            k,
            o.allow_empty,
            capv.map(|c| (c, &pt, items, o.equal_count, objective, dims)),
        ),
    }
}

fn counts_equal<T: AsV>(p: &Partition<T>) -> bool {
    let (lo, hi) = p.parts().fold((usize::MAX, 0), |(lo, hi), q| {
        (lo.min(q.len()), hi.max(q.len()))
    });
    hi <= lo + 1
}

fn fits_cap<T: AsV>(p: &Partition<T>, m: &Model, cap: &[V]) -> bool {
    p.parts()
        .all(|q| (0..m.dims).all(|d| fresh(q, m, d) <= cap[d]))
}

fn fresh(part: &[usize], m: &Model, d: usize) -> V {
    if m.float {
        V::F(fresh_sum(part.iter().map(|&i| m.items[i][d].f())))
    } else {
        part.iter().fold(V::I(0), |a, &i| add(a, m.items[i][d]))
    }
}

/// The objective recomputed from the parts.
fn objective_of<T: AsV>(p: &Partition<T>, m: &Model, objective: Objective, dims: Dims) -> V {
    let sums: Vec<Vec<V>> = p
        .parts()
        .map(|q| (0..m.dims).map(|d| fresh(q, m, d)).collect())
        .collect();
    objective_of_sums(&sums, m, objective, dims)
}

fn objective_of_sums(sums: &[Vec<V>], m: &Model, objective: Objective, dims: Dims) -> V {
    let one = |vals: Vec<V>| -> V {
        let max = vals
            .iter()
            .copied()
            .fold(zero(m.float), |a, b| if b > a { b } else { a });
        match objective {
            Objective::Spread => {
                let min = vals
                    .iter()
                    .copied()
                    .fold(max, |a, b| if b < a { b } else { a });
                match (max, min) {
                    (V::I(a), V::I(b)) => V::I(a - b),
                    (a, b) => V::F(a.f() - b.f()),
                }
            }
            _ => max,
        }
    };
    match dims {
        Dims::PerDim => (0..m.dims)
            .map(|d| one(sums.iter().map(|s| s[d]).collect()))
            .fold(zero(m.float), add),
        _ => one(sums
            .iter()
            .map(|s| s.iter().copied().fold(zero(m.float), add))
            .collect()),
    }
}

#[allow(clippy::too_many_arguments)]
fn check_partition<T: AsV>(
    name: &str,
    p: &Partition<T>,
    m: &Model,
    k: usize,
    equal: bool,
    cap: Option<&[V]>,
    objective: Objective,
    dims: Dims,
) {
    let n = m.items.len();
    check!(
        "part_count",
        p.len() == k && p.parts().len() == k && (p.dims() == m.dims || n == 0),
        "{name}: {} parts of dims {} for k = {k}, items of {} dims",
        p.len(),
        p.dims(),
        m.dims
    );
    if p.dims() != m.dims {
        return;
    }
    let of = exactly_once("part_exactly_once", n, p.parts());
    if microbatch_fuzz::on("part_exactly_once") {
        check!(
            "part_assignment",
            p.assignment() == of,
            "{name}: assignment() disagrees with parts()"
        );
    }
    if equal {
        check!(
            "part_equal_count",
            counts_equal(p),
            "{name}: counts {:?} differ by more than one",
            p.parts().map(|q| q.len()).collect::<Vec<_>>()
        );
    }
    let mut sums = Vec::new();
    for (i, q) in p.parts().enumerate() {
        let fresh_sums: Vec<V> = (0..m.dims).map(|d| fresh(q, m, d)).collect();
        let reported: Vec<V> = p.sum(i).iter().map(|t| t.v()).collect();
        if !m.float {
            check!(
                "part_sums",
                reported == fresh_sums,
                "{name}: part {i} reports {reported:?}, its items sum to {fresh_sums:?}"
            );
        }
        if let Some(c) = cap {
            for d in 0..m.dims {
                check!("part_cap", fresh_sums[d] <= c[d] && reported[d] <= c[d], "{name}: part {i} sums to {:?} (reported {:?}) above the cap {:?} in dimension {d}", fresh_sums[d], reported[d], c[d]);
            }
        }
        sums.push(fresh_sums);
    }
    let obj = p.objective().v();
    let lb = p.lower_bound().v();
    check!(
        "part_bound_le_objective",
        lb <= obj,
        "{name}: lower bound {lb:?} > objective {obj:?}"
    );
    let want = objective_of_sums(&sums, m, objective, dims);
    let ok = if m.float {
        (obj.f() - want.f()).abs() <= 1e-9 * want.f().abs().max(1e-300) || obj == want
    } else {
        obj == want
    };
    check!(
        "part_objective",
        ok,
        "{name}: objective {obj:?}, recomputed {want:?} ({objective:?}, {dims:?})"
    );
    let r = p.ratio();
    check!(
        "part_ratio",
        !r.is_nan() && r >= 1.0 - 1e-12,
        "{name}: ratio {r}"
    );
}

/// The constrained optimum of a tiny instance (`None` when infeasible).
fn brute(
    m: &Model,
    k: usize,
    equal: bool,
    cap: Option<&[V]>,
    objective: Objective,
    dims: Dims,
) -> Option<V> {
    let n = m.items.len();
    if k == 0 || (n < k) || m.items.iter().any(|s| s.iter().any(|x| !x.valid())) {
        return None;
    }
    let mut best: Option<V> = None;
    for_each_assignment(n, k, |a| {
        let mut counts = vec![0usize; k];
        let mut sums = vec![vec![zero(m.float); m.dims]; k];
        for (i, &g) in a.iter().enumerate() {
            counts[g] += 1;
            for d in 0..m.dims {
                sums[g][d] = add(sums[g][d], m.items[i][d]);
            }
        }
        if counts.contains(&0) {
            return;
        }
        if equal && counts.iter().max().unwrap() - counts.iter().min().unwrap() > 1 {
            return;
        }
        if let Some(c) = cap {
            if sums.iter().any(|s| (0..m.dims).any(|d| s[d] > c[d])) {
                return;
            }
        }
        let v = objective_of_sums(&sums, m, objective, dims);
        if best.is_none_or(|b| v < b) {
            best = Some(v);
        }
    });
    best
}

type CapCtx<'a, I, S> = (&'a [V], &'a Partitioner<S>, &'a [I], bool, Objective, Dims);

fn justify<I, S>(
    name: &str,
    e: &Error,
    m: &Model,
    k: usize,
    allow_empty: bool,
    cap: Option<CapCtx<'_, I, S>>,
) where
    I: Item<Size = S> + Clone + Debug,
    S: microbatch::Size + Copy,
    S::Total: AsV,
{
    let n = m.items.len();
    match e {
        Error::ZeroParts => check!("part_error", k == 0, "{name}: ZeroParts for k = {k}"),
        Error::TooManyParts { parts, items } => {
            check!(
                "part_error",
                *parts == k && *items == n && k > n && !allow_empty,
                "{name}: {e:?} for k = {k}, n = {n}, allow_empty = {allow_empty}"
            );
        }
        Error::Invalid {
            at: Locator::Size { index, dim },
            value,
            ..
        } => {
            let x = m.items.get(*index).and_then(|s| s.get(*dim));
            check!(
                "part_error",
                x.is_some_and(|x| !x.valid() && x.is(value)),
                "{name}: {e:?} unjustified"
            );
        }
        Error::Invalid {
            at: Locator::Capacity { dim },
            value,
            ..
        } => {
            let c = cap.and_then(|c| c.0.get(*dim).copied());
            check!(
                "part_error",
                c.is_some_and(|c| !c.valid() && c.is(value)),
                "{name}: {e:?} unjustified"
            );
        }
        Error::SizeOverflow { dim } => {
            // Float sizes whose sum (in a dimension, in input order, or
            // over the dimensions' sums) is beyond f64::MAX.
            let total = |d: usize| m.items.iter().map(|s| s[d].f()).fold(0.0, |a, x| a + x);
            let ok = m.float
                && match dim {
                    Some(d) => *d < m.dims && !total(*d).is_finite(),
                    None => !(0..m.dims).map(total).fold(0.0, |a, x| a + x).is_finite(),
                };
            check!("part_error", ok, "{name}: {e:?} unjustified");
        }
        Error::Invalid {
            at: Locator::Setting { name: setting, .. },
            value: Scalar::Int(value),
            ..
        } => {
            // The documented parts limit: with allow_empty, k > max(n, 65536).
            check!(
                "part_error",
                *setting == "parts" && allow_empty && k > n.max(1 << 16) && *value == k as u64,
                "{name}: {e:?} for k = {k}, n = {n}, allow_empty = {allow_empty}"
            );
        }
        Error::Oversize { items } => {
            let c = cap.map(|c| c.0);
            for o in items {
                let ok = c.is_some_and(|c| {
                    m.items
                        .get(o.index)
                        .and_then(|s| s.get(o.dim))
                        .is_some_and(|x| x.is(&o.size) && *x > c[o.dim] && c[o.dim].is(&o.capacity))
                });
                check!(
                    "part_error",
                    ok,
                    "{name}: Oversize names item {} dim {} unjustly ({o:?})",
                    o.index,
                    o.dim
                );
            }
            check!("part_error", !items.is_empty(), "{name}: empty Oversize");
        }
        Error::CapExceeded {
            parts,
            dim,
            cap: c,
            best,
            proven,
            parts_needed,
        } => {
            let Some((capv, _pt, _items, equal, objective, dims)) = cap else {
                check!("part_error", false, "{name}: CapExceeded without a cap");
                return;
            };
            check!(
                "part_error",
                *parts == k && *dim < m.dims && capv[*dim].is(c),
                "{name}: {e:?} names the wrong parts, dimension or cap"
            );
            let best_above = match (capv[*dim], best) {
                (V::I(cv), Scalar::Int(b)) => u128::from(*b) > cv,
                (V::I(cv), Scalar::Wide(b)) => *b > cv,
                (V::F(cv), Scalar::Float(b)) => *b > cv,
                _ => false,
            };
            check!(
                "part_cap_best",
                best_above,
                "{name}: {e:?}: the best part found is not above the cap"
            );
            if n <= 7 && k <= 3 {
                let opt = brute(m, k, equal, Some(capv), objective, dims);
                if *proven {
                    check!("part_cap_proven", opt.is_none(), "{name}: {e:?} says proven, but a partition within the cap exists (objective {opt:?})");
                }
            }
            if let Some(need) = parts_needed {
                check!(
                    "part_cap_needed",
                    *need > k && *need <= n,
                    "{name}: {e:?}: parts_needed {need} for k = {k}, n = {n}"
                );
            }
        }
        _ => check!(
            "part_error",
            false,
            "{name}: unexpected {e:?} (k = {k}, n = {n})"
        ),
    }
}

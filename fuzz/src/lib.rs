//! Shared pieces of the fuzz targets: structured inputs, exact recomputation
//! of sums, and the switch for known findings.
//!
//! Every target asserts invariants, not just the absence of panics. A broken
//! invariant is a panic whose message starts with `invariant [key]`, where
//! `key` names the check; `fuzz/findings/README.md` lists the findings by key.
//! To keep fuzzing past a known finding, name its key in the environment
//! variable `MICROBATCH_FUZZ_SKIP` (comma separated): that check is then off.
//! CI sets nothing, so every check is on.

use std::collections::BTreeSet;
use std::sync::OnceLock;

use arbitrary::{Arbitrary, Unstructured};
use microbatch::NotNan;

/// The checks switched off by `MICROBATCH_FUZZ_SKIP`.
fn skipped() -> &'static BTreeSet<String> {
    static SKIP: OnceLock<BTreeSet<String>> = OnceLock::new();
    SKIP.get_or_init(|| {
        std::env::var("MICROBATCH_FUZZ_SKIP")
            .unwrap_or_default()
            .split(',')
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
            .collect()
    })
}

/// Whether the check `key` is on.
pub fn on(key: &str) -> bool {
    !skipped().contains(key)
}

/// Asserts an invariant named `key` (see the crate docs).
#[macro_export]
macro_rules! check {
    ($key:literal, $cond:expr, $($fmt:tt)+) => {
        if $crate::on($key) && !$cond {
            panic!("invariant [{}] broken: {}", $key, format_args!($($fmt)+));
        }
    };
}

/// A count parameter: mostly small, sometimes hostile.
#[derive(Clone, Copy, Debug)]
pub enum Count {
    /// A small value.
    Small(u8),
    /// A value near a hostile boundary.
    Huge(usize),
}

impl<'a> Arbitrary<'a> for Count {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        let tag: u8 = u.arbitrary()?;
        Ok(match tag % 16 {
            0 => Count::Huge(*u.choose(&[
                usize::MAX,
                usize::MAX / 2,
                1 << 40,
                u32::MAX as usize,
                1 << 32,
                100_000_000,
                1 << 20,
            ])?),
            _ => Count::Small(u.arbitrary()?),
        })
    }
}

impl Count {
    /// The value.
    pub fn get(self) -> usize {
        match self {
            Count::Small(v) => (v % 17) as usize,
            Count::Huge(v) => v,
        }
    }
}

/// A float with interesting values over-represented: zero, tiny, huge,
/// infinite, NaN, negative, and tenths (sums of which round).
#[derive(Clone, Copy, Debug)]
pub struct F(pub f64);

impl<'a> Arbitrary<'a> for F {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        let tag: u8 = u.arbitrary()?;
        let v = match tag % 12 {
            0 => *u.choose(&[
                0.0,
                -0.0,
                1.0,
                1e-17,
                f64::MIN_POSITIVE,
                5e-324,
                f64::MAX,
                f64::MAX / 2.0,
                1e300,
                f64::INFINITY,
                f64::NEG_INFINITY,
                f64::NAN,
                -1.0,
                0.1,
                2.4,
                1e15,
                1e-4,
            ])?,
            1 | 2 | 3 => f64::from(u.int_in_range(0u32..=100)?) / 10.0,
            4 | 5 | 6 | 7 => f64::from(u.int_in_range(0u32..=1000)?),
            8 => f64::from(u.arbitrary::<u32>()?),
            _ => u.arbitrary::<f64>()?,
        };
        Ok(F(v))
    }
}

/// A float size that passes `NotNan` (NaN becomes 0): negative and infinite
/// values stay, for the validation to refuse.
pub fn not_nan(x: f64) -> NotNan<f64> {
    NotNan::new(x).unwrap_or_else(|_| NotNan::new(0.0).unwrap())
}

/// Whether a float size is valid for the crate: finite and non-negative.
pub fn valid_float(x: f64) -> bool {
    x.is_finite() && x >= 0.0
}

/// The sum of floats in the given order, as a user recomputing a load
/// would write it.
pub fn fresh_sum(xs: impl IntoIterator<Item = f64>) -> f64 {
    xs.into_iter().fold(0.0, |a, x| a + x)
}

/// Asserts `0..n` appears exactly once across `groups`; returns the group
/// of each index.
pub fn exactly_once<'a>(
    key: &'static str,
    n: usize,
    groups: impl IntoIterator<Item = &'a [usize]>,
) -> Vec<usize> {
    let mut of = vec![usize::MAX; n];
    for (g, items) in groups.into_iter().enumerate() {
        for &i in items {
            if !on(key) {
                continue;
            }
            assert!(
                i < n,
                "invariant [{key}] broken: index {i} out of range (n = {n})"
            );
            assert!(
                of[i] == usize::MAX,
                "invariant [{key}] broken: index {i} in group {} and in group {g}",
                of[i]
            );
            of[i] = g;
        }
    }
    if on(key) {
        if let Some(i) = of.iter().position(|&g| g == usize::MAX) {
            panic!("invariant [{key}] broken: index {i} in no group");
        }
    }
    of
}

/// All assignments of `n` items to `k` groups (`k^n` of them), for brute
/// force on tiny instances.
pub fn for_each_assignment(n: usize, k: usize, mut f: impl FnMut(&[usize])) {
    let mut a = vec![0usize; n];
    loop {
        f(&a);
        let mut i = 0;
        loop {
            if i == n {
                return;
            }
            a[i] += 1;
            if a[i] < k {
                break;
            }
            a[i] = 0;
            i += 1;
        }
    }
}

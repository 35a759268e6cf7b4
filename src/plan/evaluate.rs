//! Predicted step times and lower bounds under each sync model.

use alloc::vec;
use alloc::vec::Vec;

use super::shape::Shape;
use super::sync::SyncModel;
use crate::cost::{GroupFloor, Phases};

/// The cost of every (rank, micro-step): the sum of its `S` sequences.
/// `costs` is indexed by slot; a missing tail (a baseline with fewer
/// sequences) counts as zero.
fn micro_batches(shape: Shape, costs: &[Phases]) -> Vec<Phases> {
    let mut out = vec![Phases::ZERO; shape.ranks * shape.steps];
    for (k, c) in costs.iter().enumerate() {
        if let Some(slot) = out.get_mut(k / shape.per_step) {
            *slot += *c;
        }
    }
    out
}

/// The predicted step time of the sequences' `costs` (by slot) under
/// `sync`.
pub(crate) fn step_time(sync: SyncModel, shape: Shape, costs: &[Phases]) -> f64 {
    let (ranks, steps) = (shape.ranks, shape.steps);
    let mb = micro_batches(shape, costs);
    match sync {
        SyncModel::Step => (0..ranks)
            .map(|r| {
                mb[r * steps..(r + 1) * steps]
                    .iter()
                    .map(Phases::total)
                    .sum::<f64>()
            })
            .fold(0.0, f64::max),
        SyncModel::MicroStep => (0..steps)
            .map(|j| {
                (0..ranks)
                    .map(|r| mb[r * steps + j].total())
                    .fold(0.0, f64::max)
            })
            .sum(),
        SyncModel::Phase => (0..steps)
            .map(|j| {
                (0..ranks)
                    .map(|r| mb[r * steps + j])
                    .fold(Phases::ZERO, Phases::max)
                    .total()
            })
            .sum(),
    }
}

/// Per phase, the largest rank total over the mean rank total.
pub(crate) fn imbalance(shape: Shape, costs: &[Phases]) -> Phases {
    let mut max = Phases::ZERO;
    let mut sum = Phases::ZERO;
    for rank in costs.chunks(shape.per_rank()).take(shape.ranks) {
        let t: Phases = rank.iter().sum();
        max = max.max(t);
        sum += t;
    }
    let ratio = |m: f64, s: f64| {
        if s > 0.0 {
            m / (s / shape.ranks as f64)
        } else {
            1.0
        }
    };
    Phases::new(
        ratio(max.vision, sum.vision),
        ratio(max.language, sum.language),
    )
}

/// What the lower bound of a step is made of: the sum of the samples'
/// floors, the largest floor of a single sample (summed over phases), the
/// staircases ([`staircase`]) of the floors per phase and of their totals,
/// the fill terms, and what the sequences cost beyond their samples' floors
/// ([`Beyond`]).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct BoundParts {
    pub(crate) floors: Phases,
    pub(crate) largest: f64,
    pub(crate) stairs: Phases,
    pub(crate) stairs_total: f64,
    /// The fill terms ([`fill_excess`]) per phase and of the totals.
    pub(crate) fill: Phases,
    pub(crate) fill_total: f64,
    pub(crate) beyond: Beyond,
}

/// What the non-empty sequences of any plan cost beyond their samples'
/// floors, by the law of
/// [`CostModel::group_floor`](crate::cost::CostModel::group_floor): the
/// model's [`GroupFloor`], the samples' tokens `N` ([`Sample::tokens`](
/// crate::cost::Sample::tokens), summed) and the sum of their squares, and
/// the fewest and most non-empty sequences a plan can have.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Beyond {
    pub(crate) group: GroupFloor,
    pub(crate) tokens: u128,
    pub(crate) squares: u128,
    /// The fewest sequences that can hold the samples ([`fewest_sequences`]).
    pub(crate) fewest: usize,
    /// The most non-empty sequences a plan can have: the samples, or
    /// fewer where the plan's shape has fewer sequences.
    pub(crate) most: usize,
}

impl Beyond {
    /// `min over k in [fewest, most] of per_group * k + per_token_pair *
    /// max(0, N^2 / k - sum of t^2)`, for the coefficients `part` picks out
    /// of the group floor (a phase, or the totals); zero without samples.
    ///
    /// Every plan's sequences cost at least their samples' floors plus
    /// this, phase by phase and in total: a plan of `k` non-empty
    /// sequences of `T_1, ..., T_k` tokens costs, by the law, at least the
    /// floors plus `per_group * k + per_token_pair * (sum of T_j^2 - sum of
    /// t^2)`; `sum of T_j^2 >= N^2 / k` (Cauchy-Schwarz: the even split is
    /// the least) and `>= sum of t^2` (each `T_j^2` at least its samples'
    /// squares); and `fewest <= k <= most`.
    ///
    /// The function of `k` is convex (a line plus the maximum of a
    /// constant and `N^2 / k`): its least integer value in the range lies
    /// at an end, next to the real minimum `k0 = N * sqrt(per_token_pair /
    /// per_group)` of the first branch (found by a binary search for the
    /// first `k` with `per_group * k * (k + 1) >= per_token_pair * N^2`,
    /// where its discrete slope turns non-negative), or next to the kink
    /// `N^2 / sum of t^2` where the second branch (a line) begins; those
    /// few candidates are evaluated and the least taken. (Beyond `k = n`
    /// the function only grows, as `N^2 / n <= sum of t^2`: more sequences
    /// than samples would change nothing.) `N^2 / k` is taken rounded down
    /// in integers (`N < 2^64`: exact); the rest rounds a few times in the
    /// last bits, as the sum of the floors it is added to does, which
    /// [`rounded_down`] covers. A value that is not finite is dropped (0).
    ///
    /// # Complexity
    ///
    /// O(log n) time (the binary search), O(1) space.
    pub(crate) fn least(&self, part: impl Fn(Phases) -> f64) -> f64 {
        let (c, q) = (part(self.group.per_group), part(self.group.per_token_pair));
        let (lo, hi) = (self.fewest.max(1), self.most);
        if lo > hi || !(c > 0.0 || q > 0.0) {
            return 0.0;
        }
        let n2 = self.tokens.saturating_mul(self.tokens);
        let value = |k: usize| {
            let pairs = (n2 / k as u128).saturating_sub(self.squares);
            let pairs = if pairs == 0 || q == 0.0 {
                0.0
            } else {
                q * crate::cost::f(pairs)
            };
            c * k as f64 + pairs
        };
        // The first k of the range where the first branch stops falling
        // (`hi` if none): `c * k * (k + 1) >= q * N^2`, monotone in `k`.
        let q_n2 = q * crate::cost::f(n2);
        let turns = |k: usize| c * k as f64 * (k as f64 + 1.0) >= q_n2;
        let (mut a, mut b) = (lo, hi);
        while a < b {
            let mid = a + (b - a) / 2;
            if turns(mid) {
                b = mid;
            } else {
                a = mid + 1;
            }
        }
        let kink = match n2.checked_div(self.squares) {
            Some(k) => usize::try_from(k).unwrap_or(usize::MAX),
            None => hi,
        };
        let mut least = f64::INFINITY;
        // `a` is the first branch's least in exact arithmetic (the
        // predicate is the sign of `value(k + 1) - value(k)` there); the
        // rounded predicate errs at most at one `k` (consecutive products
        // differ by a relative 2 / k, far above rounding), so one on each
        // side covers it.
        let candidates = [
            a.saturating_sub(1),
            a,
            a.saturating_add(1),
            lo,
            hi,
            kink,
            kink.saturating_add(1),
        ];
        for k in candidates {
            least = least.min(value(k.clamp(lo, hi)));
        }
        if least.is_finite() && least > 0.0 {
            least
        } else {
            0.0
        }
    }
}

/// The fewest sequences that can hold samples of `sizes` (tokens, units,
/// images) under `caps`: the largest of, per size dimension `d` with a cap,
/// `ceil(sum of the sizes / cap_d)` and the count of samples over half the
/// cap (no two of them share a sequence); 1 if any sample, 0 if none. The
/// staircase ([`staircase`]) counts micro-steps the same way.
///
/// # Complexity
///
/// O(n) time, O(1) space.
pub(crate) fn fewest_sequences(sizes: impl Iterator<Item = [u32; 3]>, caps: [u64; 3]) -> usize {
    let (mut sums, mut big, mut any) = ([0u128; 3], [0u128; 3], false);
    for s in sizes {
        any = true;
        for d in 0..3 {
            let x = u128::from(s[d]);
            sums[d] += x;
            big[d] += u128::from(2 * x > u128::from(caps[d]));
        }
    }
    let mut fewest = u128::from(any);
    for d in 0..3 {
        if caps[d] == u64::MAX {
            continue;
        }
        let c = u128::from(caps[d].max(1));
        fewest = fewest.max(sums[d].div_ceil(c)).max(big[d]);
    }
    usize::try_from(fewest).unwrap_or(usize::MAX)
}

/// The lower bound of any plan's step time under `sync` over `ranks`
/// ranks, from [`BoundParts`], with `E` the least of what the sequences
/// cost beyond their floors ([`Beyond::least`], per phase or of the
/// totals) and `c` the model's cost per sequence (of the totals):
///
/// - [`SyncModel::Step`]: `max((floors + E) / R, largest floor + c)`;
/// - [`SyncModel::MicroStep`]: `max(floors / R + fill of the totals,
///   (floors + E) / R, staircase of the totals)`;
/// - [`SyncModel::Phase`]: the sum over phases of `max(phase floors / R +
///   fill of the phase, (phase floors + E of the phase) / R, staircase of
///   the phase)`, or the bound of [`SyncModel::MicroStep`] if larger.
///
/// Valid for every model whose floors obey the law of
/// [`CostModel::floor`](crate::cost::CostModel::floor), `cost(g) >= sum
/// of the floors of g` for every group `g`, and whose group floor that of
/// [`CostModel::group_floor`](crate::cost::CostModel::group_floor): the
/// rank times sum the costs of groups that cover every sample once, so
/// their sum is at least the floors' sum plus `E` ([`Beyond::least`]; per
/// phase, each phase's sum at least its floors plus its `E`) and their
/// maximum at least a `1 / R` share of it; under per-micro-step barriers
/// the sum over micro-steps of the largest rank is at least the mean over
/// ranks of the sum, the same share. The group holding the sample of the
/// largest floor costs at least that floor plus the cost per group. Per
/// micro-step barriers wait, in every micro-step, for the largest floor in
/// it, and a micro-step holds only so many samples: the staircase
/// ([`staircase`]); the micro-step of the largest floor waits for it while
/// its other ranks may not hold as much: the fill ([`fill_excess`]). The
/// fill's proof counts the floors of one micro-step alone, which `E` does
/// not split, so the two are not added: each term is a bound, and the
/// largest is kept. For additive and superadditive models without a group
/// floor the floor is the cost alone, `E` is zero, and the bound of one
/// barrier a step is the classic `max(total / R, largest sample)`.
///
/// # Complexity
///
/// O(log n) time ([`Beyond::least`], three times), O(1) space.
pub(crate) fn lower_bound(sync: SyncModel, ranks: usize, parts: &BoundParts) -> f64 {
    let r = ranks as f64;
    let f = parts.floors;
    let b = &parts.beyond;
    // The cost per sequence, which the sample of the largest floor pays
    // with it (if there is a sample).
    let per_row = if b.fewest > 0 {
        b.group.per_group.total()
    } else {
        0.0
    };
    match sync {
        SyncModel::Step => f64::max(
            (f.total() + b.least(|p| p.total())) / r,
            parts.largest + per_row,
        ),
        SyncModel::MicroStep => (f.total() / r + parts.fill_total)
            .max((f.total() + b.least(|p| p.total())) / r)
            .max(parts.stairs_total),
        SyncModel::Phase => {
            let phase = |floors: f64, fill: f64, least: f64, stairs: f64| {
                (floors / r + fill).max((floors + least) / r).max(stairs)
            };
            let per_phase = phase(
                f.vision,
                parts.fill.vision,
                b.least(|p| p.vision),
                parts.stairs.vision,
            ) + phase(
                f.language,
                parts.fill.language,
                b.least(|p| p.language),
                parts.stairs.language,
            );
            per_phase.max(lower_bound(SyncModel::MicroStep, ranks, parts))
        }
    }
}

/// A sample as [`staircase`] sorts it: its floor's bits, its sizes and its
/// index (24 bytes).
#[derive(Clone, Copy)]
pub(crate) struct Stair {
    bits: u64,
    size: [u32; 3],
    at: u32,
}

/// The staircase bound of `sum over micro-steps of the largest floor in
/// the micro-step`, for samples with floors `floor(i)` and sizes `size(i)`
/// (tokens, units, images) in micro-steps of `per_row` sequences with caps
/// `caps`:
///
/// `integral over x >= 0 of N(x)`, where `N(x)` is the fewest micro-steps
/// that can hold the samples of floor above `x`: the largest of, per size
/// dimension `d` with a cap, `ceil(sum of their sizes / (per_row *
/// cap_d))` and `ceil(count of them over half the cap / per_row)` (two of
/// those never share a sequence), and 1 if any. Each such micro-step waits
/// at least `x` for the largest of them, so every plan's sum over
/// micro-steps of the largest floor is at least the integral. It is at
/// least the largest floor, and at most the sum of the floors.
///
/// `keys` is scratch space (cleared): each sample's floor, sizes and
/// index, read once in index order and sorted together, so that the scan
/// in floor order reads no sample.
///
/// # Complexity
///
/// O(n log n) time (a sort by floor), O(n) extra space.
pub(crate) fn staircase(
    n: usize,
    floor: impl Fn(usize) -> f64,
    size: impl Fn(usize) -> [u32; 3],
    caps: [u64; 3],
    per_row: usize,
    keys: &mut Vec<Stair>,
) -> f64 {
    keys.clear();
    // Floors are non-negative and finite: their bits order as they do
    // (`+ 0.0` turns a `-0.0`, which a closure model may return, into `0.0`).
    keys.extend((0..n).map(|i| Stair {
        bits: (floor(i) + 0.0).to_bits(),
        size: size(i),
        at: i as u32,
    }));
    // The largest floor first, ties by the larger index (as a sort of
    // `(bits, index)` descending; the sum below does not depend on it:
    // equal floors add nothing between them).
    keys.sort_unstable_by_key(|s| core::cmp::Reverse((s.bits, s.at)));
    let row = per_row.max(1) as u128;
    let mut sums = [0u128; 3];
    let mut big = [0u128; 3];
    // ceil(sums / (row * cap)) and ceil(big / row), kept up to date by
    // counting up (sums grow by at most a cap a sample): no division.
    let mut by_sum = [0u128; 3];
    let mut by_big = [0u128; 3];
    let mut steps = 1u128;
    let mut area = 0.0f64;
    for (k, &Stair { bits, size: s, .. }) in keys.iter().enumerate() {
        for d in 0..3 {
            if caps[d] == u64::MAX {
                continue;
            }
            let (c, x) = (u128::from(caps[d]), u128::from(s[d]));
            let unit = row * c.max(1);
            sums[d] += x;
            big[d] += u128::from(2 * x > c);
            while sums[d] > by_sum[d] * unit {
                by_sum[d] += 1;
            }
            while big[d] > by_big[d] * row {
                by_big[d] += 1;
            }
            steps = steps.max(by_sum[d]).max(by_big[d]);
        }
        // Between this floor and the next smaller one, N(x) = steps.
        let here = f64::from_bits(bits);
        let next = keys.get(k + 1).map_or(0.0, |e| f64::from_bits(e.bits));
        area += (here - next) * steps as f64;
    }
    area
}

/// The fill term of the bound of per-micro-step barriers: `max(0, m - F /
/// R)` for the largest floor `m` of a single sample and `F` the most floor
/// that one micro-step of `capacity` tokens can hold (the fractional
/// knapsack: samples by floor per token, densest first, the last one in
/// part).
///
/// The micro-step `j` holding the sample of floor `m` waits at least
/// `max(m, F_j / R)` for the `F_j <= F` of floor it holds, and every other
/// micro-step at least its own floors over `R`; so the sum over micro-steps
/// of the maxima is at least `floors / R + max(0, m - F_j / R) >= floors /
/// R + max(0, m - F / R)`. It binds when the largest sample is denser than
/// what the rest of its micro-step can be filled with (a long document
/// whose attention grows as `T^2`, among sequences already full of shorter
/// ones). Samples of no tokens count as infinitely dense; samples of floor
/// zero add nothing and are left out.
///
/// `keys` is scratch space (cleared).
///
/// # Complexity
///
/// O(n) expected time (selections of the densest half, each on what is
/// left: `n + n / 2 + ...`), O(n) extra space.
pub(crate) fn fill_excess(
    n: usize,
    floor: impl Fn(usize) -> f64,
    tokens: impl Fn(usize) -> u64,
    capacity: f64,
    ranks: usize,
    keys: &mut Vec<(u64, u32)>,
) -> f64 {
    let largest = (0..n).map(&floor).fold(0.0f64, f64::max);
    if largest <= 0.0 {
        return 0.0;
    }
    keys.clear();
    // Every sample of a positive floor takes part, its density (floor per
    // token) only its rank: a density that underflows to 0 still counts.
    // Densities are non-negative (`+ 0.0` turns -0.0 into 0.0; x / 0 is
    // +inf for x > 0): their bits order as they do.
    keys.extend((0..n).filter_map(|i| {
        let f = floor(i);
        (f > 0.0).then(|| ((f / tokens(i) as f64 + 0.0).to_bits(), i as u32))
    }));
    // The densest samples first, by selection: the half that is denser
    // than the pivot fits whole (taken, then the pivot) or holds the
    // breakpoint (searched next). Ties by position: deterministic.
    let (mut left, mut fill) = (capacity, 0.0f64);
    let mut rest: &mut [(u64, u32)] = keys;
    while !rest.is_empty() {
        let mid = rest.len() / 2;
        rest.select_nth_unstable_by(mid, |a, b| b.cmp(a));
        let (dense, tail) = rest.split_at_mut(mid);
        let t: u128 = dense
            .iter()
            .map(|&(_, i)| u128::from(tokens(i as usize)))
            .sum();
        if t as f64 > left {
            rest = dense;
            continue;
        }
        fill += dense.iter().map(|&(_, i)| floor(i as usize)).sum::<f64>();
        left -= t as f64;
        let Some((&mut (_, p), after)) = tail.split_first_mut() else {
            break;
        };
        let (f, t) = (floor(p as usize), tokens(p as usize) as f64);
        if t > left {
            fill += f * (left / t);
            break;
        }
        fill += f;
        left -= t;
        rest = after;
    }
    // The knapsack's sum may round below the true one: the bound stays a
    // bound by a relative 1e-12 of room.
    let excess = largest - fill * (1.0 + 1e-12) / ranks as f64;
    if excess > 0.0 {
        excess
    } else {
        0.0
    }
}

/// The bound `bound` rounded down to the smallest of the step times
/// `times` when it exceeds one by rounding only (a relative `1e-9`): the
/// bound sums the samples' floors one by one, a step time sums the groups'
/// costs, and the two roundings differ in the last bits. A larger excess is
/// kept, so that a floor that breaks its law shows.
pub(crate) fn rounded_down(bound: f64, times: &[f64]) -> f64 {
    let least = times.iter().copied().fold(bound, f64::min);
    if bound > least && bound <= least * (1.0 + ROUNDING) {
        least
    } else {
        bound
    }
}

/// The relative difference between a bound and a step time that rounding
/// alone can make.
const ROUNDING: f64 = 1e-9;

#[cfg(test)]
mod tests {
    use super::*;

    /// `Beyond::least` is the least over every `k` of the range, on random
    /// token lists and coefficients that put the minimum at an end, at the
    /// turn of the first branch or at its kink (a heavy row term over a
    /// light cost per row, with unequal samples): by brute force over the
    /// range, with the real `N^2 / k` (not rounded down), so the result is
    /// at most the brute minimum and within rounding of it.
    #[test]
    fn least_is_the_least_over_the_range() {
        let mut next = crate::test_rng::uniform(0x5eed_b0d5);
        let coefs = [0.0, 1e-6, 1e-3, 0.1, 1.0, 10.0, 1e3];
        let mut kinds = [0usize; 3];
        for _ in 0..4000 {
            let n = 1 + next(40) as usize;
            // Some long samples (a kink well below n) or none.
            let long = next(2) == 0;
            let tokens: Vec<u128> = (0..n)
                .map(|_| {
                    if long && next(4) == 0 {
                        u128::from(1 + next(5000))
                    } else {
                        u128::from(20 + next(40))
                    }
                })
                .collect();
            let big: u128 = tokens.iter().sum();
            let squares: u128 = tokens.iter().map(|t| t * t).sum();
            let c = coefs[next(7) as usize];
            // The turn of the first branch, `N * sqrt(q / c)`, near a `k`
            // of the range half of the time.
            let q = if next(2) == 0 {
                let k = (1 + next(n as u64)) as f64;
                c * k * k / (big * big) as f64
            } else {
                coefs[next(7) as usize] * 1e-4
            };
            let fewest = 1 + next(n as u64) as usize;
            let most = fewest + next((n - fewest + 1) as u64) as usize;
            let b = Beyond {
                group: GroupFloor::new(Phases::new(0.0, c), Phases::new(0.0, q)),
                tokens: big,
                squares,
                fewest,
                most,
            };
            let got = b.least(|p| p.language);
            let exact = |k: usize| {
                let nf = big as f64;
                c * k as f64 + q * f64::max(0.0, nf * nf / k as f64 - squares as f64)
            };
            let (mut best, mut at) = (f64::INFINITY, 0);
            for k in fewest..=most {
                if exact(k) < best {
                    (best, at) = (exact(k), k);
                }
            }
            let kink = (big * big / squares) as usize;
            let kind = if at == fewest || at == most {
                0
            } else if at == kink || at == kink + 1 {
                2
            } else {
                1
            };
            kinds[kind] += 1;
            assert!(got <= best * (1.0 + 1e-12), "{b:?}: {got} > {best} at {at}");
            // `N^2 / k` rounded down loses less than one pair.
            assert!(
                got >= best * (1.0 - 1e-12) - q,
                "{b:?}: {got} < {best} at {at}"
            );
        }
        // Every kind of minimum was met: at an end, inside, at the kink.
        assert!(kinds.iter().all(|&k| k > 20), "{kinds:?}");
    }

    /// `staircase` is the integral of its definition: between consecutive
    /// distinct floors `N(x)` is constant, the fewest micro-steps by the
    /// samples of floor at least the upper one (their sizes over a row's
    /// capacity, their count over half a cap over the row, 1), summed by
    /// brute force on random samples with ties, zero and `-0.0` floors and
    /// caps in every dimension or none.
    #[test]
    fn staircase_is_the_integral_of_its_definition() {
        let mut next = crate::test_rng::uniform(0x57a1_2ca5);
        let mut keys = Vec::new();
        for _ in 0..3000 {
            let n = next(30) as usize;
            let caps: [u64; 3] = core::array::from_fn(|_| {
                if next(3) == 0 {
                    u64::MAX
                } else {
                    1 + next(100)
                }
            });
            let per_row = 1 + next(4) as usize;
            let floors: Vec<f64> = (0..n)
                .map(|_| match next(8) {
                    0 => 0.0,
                    1 => -0.0,
                    // Ties: a few values only.
                    2 | 3 => (1 + next(3)) as f64 * 0.5,
                    _ => next(1000) as f64 / 7.0,
                })
                .collect();
            let sizes: Vec<[u32; 3]> = (0..n)
                .map(|_| core::array::from_fn(|d| next(caps[d].min(100) + 1) as u32))
                .collect();
            let got = staircase(n, |i| floors[i], |i| sizes[i], caps, per_row, &mut keys);
            let mut levels: Vec<f64> = floors
                .iter()
                .map(|&f| f + 0.0)
                .filter(|&f| f > 0.0)
                .collect();
            levels.sort_by(|a, b| b.total_cmp(a));
            levels.dedup();
            let row = per_row as u64;
            let mut want = 0.0;
            for (k, &level) in levels.iter().enumerate() {
                let above: Vec<usize> = (0..n).filter(|&i| floors[i] >= level).collect();
                let mut steps = 1;
                for d in (0..3).filter(|&d| caps[d] != u64::MAX) {
                    let sum: u64 = above.iter().map(|&i| u64::from(sizes[i][d])).sum();
                    let big = above
                        .iter()
                        .filter(|&&i| 2 * u64::from(sizes[i][d]) > caps[d])
                        .count() as u64;
                    steps = steps
                        .max(sum.div_ceil(row * caps[d]))
                        .max(big.div_ceil(row));
                }
                let below = levels.get(k + 1).copied().unwrap_or(0.0);
                want += (level - below) * steps as f64;
            }
            assert!(
                (got - want).abs() <= 1e-12 * want,
                "{floors:?} {sizes:?} {caps:?} {per_row}: {got} against {want}"
            );
        }
    }

    #[test]
    fn fewest_sequences_count_sums_and_halves() {
        let caps = [100, u64::MAX, 3];
        assert_eq!(fewest_sequences([].into_iter(), caps), 0);
        assert_eq!(fewest_sequences([[1, 9, 0]].into_iter(), caps), 1);
        // 250 tokens fit 3 rows, but four samples over half a row need 4.
        let s = [[60, 0, 0], [60, 0, 0], [60, 0, 0], [70, 0, 0]];
        assert_eq!(fewest_sequences(s.into_iter(), caps), 4);
        let s = [[50, 0, 0], [50, 0, 0], [50, 0, 0], [70, 0, 0], [30, 0, 0]];
        assert_eq!(fewest_sequences(s.into_iter(), caps), 3);
        let s = [[51, 0, 0], [51, 0, 0], [51, 0, 0], [51, 0, 0], [1, 0, 0]];
        assert_eq!(fewest_sequences(s.into_iter(), caps), 4);
        // Images: 7 of at most 3 a row, and three of 2 or 3 (over half).
        let s = [[1, 0, 2], [1, 0, 2], [1, 0, 3]];
        assert_eq!(fewest_sequences(s.into_iter(), caps), 3);
    }
}

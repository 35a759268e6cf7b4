"""Tests of ``microbatch.partition``: results equal the Rust crate's (the known answers of
``../shared/data/known_answers.json`` with the crate's own LPT/KK results pinned), invariants on
seeded instances, the Partitioner's constraints, and every bad input raising the documented
``microbatch.errors`` class with its ``kind`` and ``item``."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

import microbatch
from microbatch import errors, partition as P

ROOT = Path(__file__).resolve().parents[2]


def known_answers():
    """``$MICROBATCH_KNOWN_ANSWERS`` or ``../shared/data/known_answers.json`` from the repository
    root (as ``tests/partition_known.rs``); skips when absent, except under ``CI=true``."""
    path = Path(
        os.environ.get("MICROBATCH_KNOWN_ANSWERS", ROOT / ".." / "shared" / "data" / "known_answers.json")
    )
    if not path.is_file():
        if os.environ.get("CI") in ("true", "1"):
            pytest.fail(f"known answers missing at {path} and CI=true")
        pytest.skip(f"known answers absent at {path}")
    return json.loads(path.read_text())


def check_partition(p, weights, k):
    """Every item exactly once, part sums recomputed in numpy equal the reported ones, the
    objective is the largest part (combined), the bound at most the objective."""
    w = np.asarray(weights)
    w2 = w.reshape(len(w), -1)
    n = len(w2)
    assert len(p) == k and len(p.parts) == k
    assert np.array_equal(np.sort(p.items), np.arange(n)), "every item exactly once"
    for i, part in enumerate(p.parts):
        assert (p.assignment[part] == i).all()
        # Heaviest item first (combined weight).
        combined = w2[part].sum(axis=1)
        assert (np.diff(combined.astype(np.float64)) <= 0).all()
    sums = p.sums.reshape(k, -1)
    for i, part in enumerate(p.parts):
        if w.dtype.kind == "f":
            again = w2[part].astype(np.float64).sum(axis=0)
            assert np.allclose(again, sums[i], rtol=1e-12, atol=0)
        else:
            again = w2[part].astype(object).sum(axis=0) if len(part) else np.zeros(w2.shape[1], dtype=object)
            assert [int(x) for x in np.atleast_1d(again)] == [int(x) for x in sums[i]]
    assert p.lower_bound <= p.objective
    assert p.proven_optimal or p.lower_bound < p.objective
    return sums


# From the crate on the known answers, in file order (a scratch Rust test printed them):
# (karmarkar_karp objective, lpt objective, lower_bound, Partitioner KK+refinement objective,
#  karmarkar_karp assignment).
KNOWN = [
    (16, 17, 15, 15, [0, 0, 1, 0, 1]),
    (11, 11, 11, 11, [1, 0, 0, 1, 2]),
    (9, 9, 9, 9, [0, 0, 3, 2, 1]),
    (16, 16, 16, 16, [0, 1, 0, 0, 1, 1, 0]),
    (11, 11, 11, 11, [2, 1, 0, 0, 0, 2, 1]),
    (9, 9, 9, 9, [2, 3, 2, 2, 3, 0, 1]),
    (63, 63, 59, 63, [1, 2, 0, 0, 2, 1, 0]),
    (8, 8, 8, 8, [3, 1, 2, 0, 0, 3, 2, 1]),
    (36, 37, 34, 36, [1, 0, 1, 0, 0, 1]),
    (251, 251, 228, 251, [1, 0, 2, 2, 0, 1, 4, 3]),
    (18, 18, 18, 18, [1, 1, 0, 0, 1, 1, 0, 0]),
    (131, 134, 130, 130, [0, 1, 1, 0, 2, 1, 0, 2, 0, 1, 2, 0, 1, 2, 1, 0, 2, 1, 0, 2]),
    (16, 17, 15, 15, [1, 0, 1, 0, 0]),
    (2149, 2156, 2088, 2128, [1, 0, 1, 1, 0, 1, 0, 0]),
    (2226, 2227, 2215, 2226, [1, 0, 1, 1, 1, 0, 0, 0]),
    (2402, 2430, 2402, 2402, [1, 0, 1, 0, 1, 0, 0, 1]),
    (1304, 1304, 1252, 1304, [0, 1, 0, 2, 1, 1, 2, 2]),
    (1957, 2000, 1932, 1932, [2, 1, 2, 1, 0, 0, 1, 0]),
    (1674, 1714, 1668, 1674, [0, 0, 1, 2, 1, 1, 2, 2]),
    (1661, 1690, 1647, 1661, [0, 1, 1, 2, 2, 0, 1, 2, 0, 1]),
    (1496, 1511, 1490, 1496, [0, 2, 2, 1, 0, 1, 2, 1, 2, 0]),
    (1562, 1564, 1556, 1562, [0, 2, 2, 2, 2, 1, 0, 1, 0, 1]),
    (1549, 1549, 1549, 1549, [3, 0, 2, 0, 3, 2, 3, 3, 1, 1]),
    (1505, 1583, 1438, 1505, [0, 1, 2, 3, 3, 0, 2, 1, 0, 0]),
    (1250, 1250, 1161, 1245, [2, 1, 3, 0, 2, 0, 3, 1, 1, 0]),
    (1126, 1126, 1027, 1126, [2, 1, 2, 0, 3, 1, 0, 1, 4, 4, 3]),
    (1583, 1583, 1456, 1583, [4, 2, 2, 3, 3, 4, 0, 1, 1, 0, 4]),
    (1042, 1042, 996, 1042, [2, 4, 1, 2, 1, 2, 1, 3, 0, 0, 4]),
    (1604, 1617, 1577, 1591, [0, 0, 1, 2, 1, 2, 0, 1, 2, 1, 0, 2]),
    (2264, 2311, 2253, 2264, [0, 1, 1, 1, 2, 2, 1, 0, 0, 2, 0, 2]),
    (1648, 1647, 1630, 1647, [1, 0, 1, 1, 0, 1, 2, 2, 0, 2, 0, 2]),
    (1436, 1436, 1388, 1400, [3, 1, 2, 0, 1, 1, 2, 3, 0, 3, 2, 0]),
    (2201, 2247, 2085, 2166, [2, 1, 0, 3, 3, 0, 1, 2, 0, 1, 2, 3]),
    (1556, 1556, 1523, 1556, [0, 0, 1, 2, 1, 1, 1, 0, 3, 1, 3, 2]),
    (970, 970, 970, 970, [5, 2, 4, 3, 1, 4, 0, 5, 3]),
    (819, 819, 819, 819, [5, 3, 2, 0, 1, 4, 4, 4, 5]),
    (1228, 1228, 1228, 1228, [1, 5, 4, 2, 0, 1, 3, 0, 5]),
    (1777, 1799, 1777, 1777, [1, 1, 1, 1, 0, 0, 0, 1, 1, 1, 0, 0]),
    (2819, 2843, 2813, 2819, [0, 1, 1, 1, 0, 1, 0, 0, 1, 0, 1, 0]),
    (2899, 2899, 2889, 2891, [1, 1, 0, 0, 1, 1, 0, 1, 1, 0, 0, 0]),
    (2312, 2489, 2303, 2312, [1, 0, 2, 1, 2, 0, 1, 1, 0, 2, 2]),
    (1477, 1504, 1464, 1471, [0, 2, 1, 2, 0, 2, 0, 1, 2, 0, 1]),
    (1582, 1603, 1554, 1582, [0, 2, 2, 2, 0, 2, 2, 1, 1, 0, 1]),
    (1004, 1006, 1000, 1004, [1, 0, 2, 2, 2, 1, 2, 0, 1, 0, 0, 0]),
    (5043, 5047, 5000, 5015, [3, 3, 2, 1, 2, 0, 0, 2, 0, 1, 1, 1, 0, 2, 3, 0, 1, 3, 3, 0]),
    (101368, 100570, 100000, 100853, [2, 7, 6, 2, 3, 1, 6, 1, 7, 7, 0, 0, 2, 4, 2, 5, 0, 1, 3,
     1, 5, 5, 3, 1, 6, 5, 6, 4, 7, 6, 5, 7, 4, 3, 0, 5, 7, 0, 6, 3, 1, 3, 4, 2, 4, 2, 7, 7]),
    (1003201, 1005738, 1000000, 1000603, [9, 5, 6, 14, 8, 2, 9, 12, 14, 6, 6, 2, 4, 10, 9, 13,
     13, 7, 14, 5, 11, 7, 14, 8, 0, 0, 15, 11, 12, 10, 15, 9, 2, 1, 13, 5, 12, 6, 0, 2, 13, 7,
     10, 6, 8, 15, 4, 3, 1, 5, 4, 4, 1, 0, 0, 9, 2, 6, 14, 9, 10, 11, 7, 4, 13, 8, 12, 10, 3, 3,
     15, 14, 1, 9, 11, 7, 0, 8, 7, 0, 1, 15, 3, 15, 6, 10, 1, 12, 2, 12, 4, 8, 13, 10, 8, 15, 3,
     4, 0, 11, 9, 13, 12, 8, 15, 3, 3, 5, 11, 14, 7, 11, 13, 2, 7, 9, 10, 5, 4, 10, 12, 11, 14,
     11, 6, 5, 3, 6]),
]


def test_known_answers_equal_the_crate():
    cases = known_answers()
    assert len(cases) == len(KNOWN) == 47
    for i, (case, (kk_obj, lpt_obj, lb, part_obj, kk_assign)) in enumerate(zip(cases, KNOWN)):
        items, k = np.array(case["items"], dtype=np.uint64), case["k"]
        kk = P.karmarkar_karp(items, k)
        assert (kk.objective, kk.assignment.tolist()) == (kk_obj, kk_assign), i
        greedy = P.lpt(items, k)
        assert greedy.objective == lpt_obj == case["lpt_max"], i
        # LPT sums do not depend on ties: equal to the reference implementation's.
        assert sorted(greedy.sums.tolist()) == case["lpt_sums"], i
        assert P.lower_bound(items, k) == lb and case["lb"] <= lb <= case["opt_max_sum"]
        refined = P.partition(items, k, algorithm="karmarkar_karp")
        assert refined.objective == part_obj
        assert min(kk.objective, greedy.objective, refined.objective) >= case["opt_max_sum"]
        for p in (kk, greedy, refined):
            check_partition(p, items, k)
        if len(items) <= 12:
            best = P.partition(items, k, algorithm="exact")
            assert best.proven_optimal and best.objective == case["opt_max_sum"], i
            spread = P.partition(items, k, algorithm="exact", objective="spread")
            assert spread.proven_optimal and spread.objective == case["opt_diff"], i
            assert spread.objective == int(spread.sums.max()) - int(spread.sums.min())


@pytest.mark.parametrize("seed", range(8))
def test_invariants_on_seeded_instances(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 300))
    k = int(rng.integers(1, min(n, 16) + 1))
    ints = rng.integers(0, 1000, size=n)
    floats = rng.random(n) * 1e3
    pairs = np.stack([rng.integers(0, 1000, size=n), rng.integers(0, 7, size=n)], axis=1)
    for w in (ints, floats, pairs, pairs * 0.5):
        for f in (P.lpt, P.karmarkar_karp, P.partition):
            p = f(w, k)
            sums = check_partition(p, w, k)
            combined = sums.sum(axis=1)
            assert p.objective == combined.max()  # max_part over the combined weight
            assert p.lower_bound == P.lower_bound(w, k)
        # Refinement never makes the constructed partition worse.
        for algorithm, f in (("lpt", P.lpt), ("karmarkar_karp", P.karmarkar_karp)):
            assert P.partition(w, k, algorithm=algorithm).objective <= f(w, k).objective
        assert P.partition(w, k, refinement=False).objective == P.lpt(w, k).objective


def test_constraints():
    rng = np.random.default_rng(11)
    w = rng.integers(1, 1000, size=103)
    for algorithm in ("lpt", "karmarkar_karp", "exact"):
        p = P.partition(w, 8, equal_count=True, algorithm=algorithm, node_budget=10_000)
        check_partition(p, w, 8)
        assert {len(q) for q in p.parts} <= {12, 13}
    p = P.partition(w, 8, cap=int(P.lower_bound(w, 8)) + 200)
    assert int(p.sums.max()) <= P.lower_bound(w, 8) + 200
    p = P.partition([1, 2], 4, allow_empty=True)
    assert len(p) == 4 and sorted(len(q) for q in p.parts) == [0, 0, 1, 1]
    check_partition(p, [1, 2], 4)
    spread = P.partition(w, 4, objective="spread")
    assert spread.objective == int(spread.sums.max()) - int(spread.sums.min())
    items = [[6, 0], [5, 0], [0, 6], [0, 5]]
    assert P.partition(items, 2).objective == 11
    per_dim = P.partition(items, 2, dims="per_dim")
    assert per_dim.objective == 12 and per_dim.sums.max(axis=0).tolist() == [6, 6]
    samples = [[4000, 2], [3500, 1], [3000, 3], [2500, 0], [2000, 2], [1000, 0]]
    p = P.partition(samples, 2, cap=[9000, 4])
    assert (p.sums <= [9000, 4]).all()
    search = P.partition([46, 39, 27, 26, 16, 13, 10], 3, algorithm="exact", node_budget=2)
    assert not search.proven_optimal
    assert P.partition([8, 7, 6, 5, 4], 2, max_rounds=0).objective == 17


def test_result_types():
    p = P.lpt([5, 1, 4, 2, 3], 2)
    assert p.sums.dtype == np.uint64 and isinstance(p.objective, int)
    f = P.lpt([1.5, 2.5, 0.25], 2)
    assert f.sums.dtype == np.float64 and isinstance(f.objective, float)
    assert isinstance(P.lower_bound([1.5, 2.5], 2), float)
    # Sums beyond 2**64 - 1 stay exact, as Python ints.
    big = P.lpt(np.array([2**64 - 1, 2**64 - 1, 5], dtype=np.uint64), 1)
    assert big.sums.dtype == object and big.sums.tolist() == [2 * (2**64 - 1) + 5]
    assert big.objective == 2 * (2**64 - 1) + 5
    assert big.ratio == 1.0  # the crate's ratio of sums beyond u64
    # The crate's ratio: inf when only the bound is zero (a spread of 2 above a bound of 0).
    spread = P.partition([3, 1], 2, objective="spread")
    assert (spread.objective, spread.lower_bound, spread.ratio) == (2, 0, float("inf"))
    empty = P.partition(np.zeros((0, 2), dtype=np.int64), 3, allow_empty=True)
    assert empty.sums.shape == (3, 2) and empty.objective == 0 and empty.ratio == 1.0
    assert P.lpt([3, 3, 2, 2, 2], 2).ratio == 7 / 6
    assert "Partition(parts=2" in repr(p)
    assert microbatch.partition is P and "partition" in microbatch.__all__
    a = P.karmarkar_karp(np.arange(50), 4)
    b = P.karmarkar_karp(np.arange(50)[:, None], 4)
    assert np.array_equal(a.items, b.items) and b.sums.shape == (4, 1)
    assert P.DEFAULT_NODE_BUDGET > 0


def raises(cls, kind, item, f, *args, **kwargs):
    with pytest.raises(cls) as e:
        f(*args, **kwargs)
    assert type(e.value) is cls, type(e.value)
    assert (e.value.kind, e.value.item) == (kind, item), (e.value.kind, e.value.item, str(e.value))
    assert isinstance(e.value, ValueError)
    return str(e.value)


@pytest.mark.parametrize("f", [P.lpt, P.karmarkar_karp, P.partition, P.lower_bound])
def test_bad_inputs_raise_the_documented_errors(f):
    nan, inf = float("nan"), float("inf")
    m = raises(errors.SettingError, "ZeroParts", None, f, [1, 2], 0)
    assert "at least 1" in m
    m = raises(errors.InvalidValueError, "InvalidSize", 1, f, [1.5, nan], 1)
    assert "NaN" in m
    raises(errors.InvalidValueError, "InvalidSize", 2, f, [1.5, 2.0, -1.0], 1)
    raises(errors.InvalidValueError, "InvalidSize", 0, f, [inf, 2.0], 1)
    raises(errors.InvalidValueError, "InvalidSize", 1, f, [[1.0, 2.0], [0.0, nan]], 1)
    m = raises(errors.InvalidValueError, "InvalidSize", 1, f, np.array([4, -3]), 1)
    assert m == raises(errors.InvalidValueError, "InvalidSize", 1, f, [4.0, -3.0], 1)
    raises(errors.DtypeError, "Binding", "weights", f, np.zeros((2, 2, 2)), 1)
    raises(errors.DtypeError, "Binding", "weights", f, [True, False], 1)
    raises(errors.DtypeError, "Binding", "weights", f, 7, 1)
    raises(errors.DtypeError, "Binding", "k", f, [1, 2], 2.0)
    raises(errors.SettingError, "Binding", "k", f, [1, 2], -1)
    raises(errors.CapacityError, "NoDimensions", None, f, np.zeros((3, 0), dtype=np.int64), 2)
    if f is not P.lower_bound:
        m = raises(errors.SettingError, "TooManyParts", None, f, [1, 2], 3)
        assert "at most 2 parts" in m


def test_bad_settings_raise_the_documented_errors():
    w = [8, 7, 6, 5, 4, 10, 9]
    m = raises(errors.InfeasibleError, "CapExceeded", 0, P.partition, w, 2, cap=20)
    assert "3 parts would work" in m
    raises(errors.InfeasibleError, "CapExceeded", 1, P.partition, [[8, 1], [7, 1], [6, 1]], 2, cap=[20, 1])
    raises(errors.OversizeError, "Oversize", 2, P.partition, [1, 2, 30], 2, cap=20)
    raises(errors.CapacityError, "DimensionMismatch", 0, P.partition, [1, 2, 3], 2, cap=[20, 3])
    raises(errors.CapacityError, "DimensionMismatch", 0, P.partition, [[1, 2], [3, 4]], 2, cap=20)
    m = raises(errors.CapacityError, "InvalidCapacity", 0, P.partition, [1, 2], 2, cap=-5)
    assert m == raises(errors.CapacityError, "InvalidCapacity", 0, P.partition, [1.0, 2.0], 2, cap=-5.0)
    assert m == "the capacity -5 in dimension 0 is invalid: negative values are not sizes; a capacity must be finite and positive"
    raises(errors.CapacityError, "InvalidCapacity", 0, P.partition, [1.0, 2.0], 2, cap=float("nan"))
    m = raises(errors.DtypeError, "Binding", "cap", P.partition, [1, 2], 2, cap=2.5)
    assert "round" in m
    raises(errors.SettingError, "Binding", "algorithm", P.partition, w, 2, algorithm="greedy")
    raises(errors.SettingError, "Binding", "objective", P.partition, w, 2, objective="min")
    raises(errors.SettingError, "Binding", "dims", P.partition, w, 2, dims="each")
    raises(errors.SettingError, "InvalidSetting", "parts", P.partition, [1, 2], 10**6, allow_empty=True)
    raises(errors.DtypeError, "Binding", "node_budget", P.partition, w, 2, node_budget=1.5)

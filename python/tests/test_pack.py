"""Tests of ``microbatch.pack``: results equal the Rust crate's (BPPLIB bin counts and bounds,
pinned outputs of ``tests/pack_value_stability.rs``), invariants on seeded instances, and every
bad input raising the documented ``microbatch.errors`` class with its ``kind`` and ``item``."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import microbatch
from microbatch import errors, pack

ALGORITHMS = {
    "ffd": pack.first_fit_decreasing,
    "bfd": pack.best_fit_decreasing,
    "ff": pack.first_fit,
    "bf": pack.best_fit,
    "nf": pack.next_fit,
}

ROOT = Path(__file__).resolve().parents[2]


def bpplib_dir():
    """``$MICROBATCH_BPPLIB`` or ``../shared/data/bpplib`` from the repository root (as
    ``tests/pack_bpplib.rs``); skips when absent, except under ``CI=true``."""
    d = Path(os.environ.get("MICROBATCH_BPPLIB", ROOT / ".." / "shared" / "data" / "bpplib"))
    if not (d / "optima.tsv").is_file():
        if os.environ.get("CI") in ("true", "1"):
            pytest.fail(f"BPPLIB data not found at {d} (CI=true requires it)")
        pytest.skip(f"BPPLIB data not found at {d}")
    return d


def check_packing(p, sizes, capacity):
    """Every item exactly once, loads recomputed equal the reported ones and are within the
    capacity, bounds at most the bins used."""
    s = np.asarray(sizes)
    s2 = s.reshape(len(s), -1)
    n = len(s2)
    assert p.items.dtype == np.int64 and p.assignment.dtype == np.int64
    assert np.array_equal(np.sort(p.items), np.arange(n)), "every item exactly once"
    assert len(p.bins) == len(p) and sum(len(b) for b in p.bins) == n
    assert all(len(b) for b in p.bins), "no empty bin"
    for b, items in enumerate(p.bins):
        assert (p.assignment[items] == b).all()
    cap = np.broadcast_to(np.asarray(capacity), (s2.shape[1],))
    loads = p.loads.reshape(len(p), -1)
    assert (loads <= cap).all(), "a bin above the capacity"
    for b, items in enumerate(p.bins):
        if s.dtype.kind == "f":
            # Summed in the listed order, bit for bit (np.cumsum is sequential).
            again = np.cumsum(s2[items].astype(np.float64), axis=0)[-1]
        else:
            again = s2[items].astype(np.uint64).sum(axis=0)
        assert np.array_equal(again, loads[b]), f"bin {b}: load {loads[b]} != {again}"
    lb = p.lower_bounds
    assert lb.l1 <= lb.l2 <= len(p)


def fnv(p):
    """FNV-1a over the bins (item indices, a separator per bin), as the Rust pin test."""
    h = 0xCBF29CE484222325
    mask = (1 << 64) - 1
    for b in p.bins:
        for x in list(b.tolist()) + [mask]:
            for byte in int(x).to_bytes(8, "little"):
                h = ((h ^ byte) * 0x100000001B3) & mask
    return h


SIZES = [
    700, 700, 250, 400, 375, 525, 225, 125, 50, 250, 25, 800, 600, 650, 750, 300, 925, 400, 400,
    575, 150, 250, 925, 125, 525, 125, 375, 250, 925, 50, 875, 250, 725, 475, 175, 125, 825,
    575, 1000, 150, 525, 150, 50, 950, 150, 200, 850, 50, 425, 175, 125, 1000, 825, 275, 550,
    675, 575, 200, 75, 450, 900, 300, 575, 775, 475, 975, 25, 725, 100, 625, 250, 625, 350, 550,
    925, 475, 800, 375, 625, 1000, 200, 550, 600, 25, 375, 125, 925, 275, 625, 475, 275, 150,
    450, 475, 275, 675, 225, 425, 550, 325, 75, 100, 825, 100, 400, 700, 575, 125, 625, 50, 300,
    575, 150, 275, 100, 75, 850, 500, 175, 325, 400, 525, 25, 425, 600, 150, 375, 775, 250, 150,
    450, 475, 350, 475, 525, 750, 175, 550, 775, 25, 525, 775, 250, 375, 150, 375, 675, 675,
    125, 750, 50, 600, 600, 850, 600, 300, 900, 100, 200, 100, 150, 450, 650, 575, 575, 200,
    750, 150, 375, 275, 150, 100, 800, 750, 950, 800, 875, 1000, 500, 25, 875, 75, 375, 850,
    450, 975, 550, 850, 925, 75, 25, 225, 350, 975, 325, 875, 950, 325, 800, 450
]
PAIRS = [
    [1, 1], [541, 5], [296, 4], [54, 2], [370, 3], [106, 5], [309, 4], [5, 0], [194, 0], [29,
    5], [488, 4], [221, 3], [121, 2], [363, 3], [118, 5], [251, 4], [429, 2], [365, 3], [296,
    3], [175, 0], [559, 3], [595, 1], [398, 1], [446, 4], [152, 5], [573, 3], [210, 1], [10, 1],
    [208, 5], [342, 6], [242, 2], [359, 6], [176, 3], [510, 2], [277, 0], [20, 3], [234, 5],
    [353, 5], [360, 4], [94, 4], [569, 3], [596, 3], [400, 5], [429, 5], [316, 1], [308, 4],
    [382, 0], [467, 6], [223, 6], [93, 0], [299, 2], [202, 3], [518, 6], [388, 1], [222, 0],
    [585, 6], [407, 3], [572, 6], [499, 1], [146, 5], [12, 2], [200, 5], [510, 2], [218, 5],
    [478, 3], [63, 6], [538, 2], [543, 4], [170, 6], [185, 2], [441, 3], [30, 6], [19, 0], [555,
    3], [108, 3], [94, 5], [549, 2], [185, 6], [588, 5], [354, 0], [15, 0], [221, 6], [50, 3],
    [377, 5], [250, 6], [124, 6], [446, 1], [149, 5], [291, 6], [117, 2], [306, 6], [265, 0],
    [335, 6], [460, 5], [389, 1], [407, 5], [412, 2], [394, 0], [490, 3], [130, 6], [198, 4],
    [233, 1], [318, 5], [454, 0], [520, 6], [274, 2], [192, 5], [249, 3], [550, 2], [11, 1],
    [537, 4], [210, 2], [113, 2], [547, 5], [35, 1], [197, 4], [363, 2], [120, 3], [129, 6],
    [399, 1], [417, 3], [232, 1], [378, 1], [193, 5], [491, 6], [249, 5], [466, 6], [416, 0],
    [357, 3], [517, 3], [339, 2], [555, 0], [392, 6], [576, 5], [291, 0], [363, 2], [392, 2],
    [419, 6], [158, 0], [291, 5], [142, 0], [481, 2], [380, 6], [6, 6], [252, 2], [108, 6],
    [456, 1], [50, 5], [512, 5], [546, 3], [360, 0], [223, 1], [488, 0], [252, 2], [492, 0],
    [29, 0], [431, 4], [541, 0], [313, 4], [272, 1], [24, 5], [361, 3], [405, 5], [294, 5],
    [478, 3], [57, 0], [315, 1], [31, 4], [229, 5], [247, 1], [530, 1], [423, 4], [98, 1], [35,
    2], [53, 1], [559, 1], [246, 3], [270, 4], [489, 2], [429, 4], [585, 2], [406, 5], [317, 2],
    [268, 1], [265, 2], [11, 2], [68, 4], [123, 5], [73, 1], [578, 3], [475, 4], [14, 2], [424,
    6], [53, 5], [313, 0], [465, 6], [28, 4], [90, 6], [489, 2], [525, 1]
]

# (bins, items of the first bin, fingerprint), from tests/pack_value_stability.rs.
PIN = {
    "ffd": (92, [38], 0xD0E964671FC61A95),
    "bfd": (92, [38], 0x08B08D44F210F8F5),
    "ff": (96, [0, 2, 8], 0xFABC42EF05456675),
    "bf": (95, [0, 7, 10, 20], 0x9C8888434CB5E29D),
    "nf": (119, [0], 0x3513A8B299EE9CBD),
}
PIN2 = {
    "ffd": (62, [41, 132, 60], 0x30AC5EB36E1D32B5),
    "bfd": (62, [41, 132, 60], 0x4E00B7B093AF7F05),
    "ff": (65, [0, 1, 2, 3, 7, 49], 0x8F52A55C96FB3D8D),
    "bf": (65, [0, 1, 2, 3, 7, 49], 0x5750F2889E76CDCD),
}


@pytest.mark.parametrize("name", sorted(PIN))
@pytest.mark.parametrize("dtype", [np.uint32, np.int64, np.uint64])
def test_one_dimensional_outputs_equal_the_crate_pins(name, dtype):
    sizes = np.array(SIZES, dtype=dtype)
    p = ALGORITHMS[name](sizes, 1000)
    bins, first, h = PIN[name]
    assert (len(p), p.bins[0].tolist(), fnv(p)) == (bins, first, h)
    check_packing(p, sizes, 1000)


@pytest.mark.parametrize("name", sorted(PIN2))
def test_two_dimensional_outputs_equal_the_crate_pins(name):
    sizes = np.array(PAIRS, dtype=np.int64)
    p = ALGORITHMS[name](sizes, [1000, 12])
    bins, first, h = PIN2[name]
    assert (len(p), p.bins[0].tolist(), fnv(p)) == (bins, first, h)
    assert p.loads.shape == (bins, 2)
    check_packing(p, sizes, [1000, 12])


def read_optima(d):
    lines = (d / "optima.tsv").read_text().splitlines()
    header = lines[0].split("\t")
    return [dict(zip(header, line.split("\t"))) for line in lines[1:] if line.strip()]


def test_bpplib_bin_counts_and_bounds_equal_the_reference():
    """The 1,615 BPPLIB instances: FFD and BFD bin counts equal the reference counts (which do
    not depend on ties), bounds equal the tabled L1 and L2, as tests/pack_bpplib.rs checks."""
    d = bpplib_dir()
    rows = read_optima(d)
    assert len(rows) == 1615
    for row in rows:
        nums = np.array((d / row["cls"] / f"{row['name']}.txt").read_text().split(), dtype=np.int64)
        n, c, w = int(nums[0]), int(nums[1]), nums[2:]
        assert (len(w), c, int(w.sum())) == (int(row["n"]), int(row["c"]), int(row["sum"]))
        ffd = pack.first_fit_decreasing(w, c)
        bfd = pack.best_fit_decreasing(w, c)
        assert len(ffd) == int(row["FFD"]), row["name"]
        assert len(bfd) == int(row["BFD"]), row["name"]
        opt = int(row["opt"])
        assert len(pack.next_fit(w, c)) >= opt
        lb = pack.lower_bounds(w, c)
        assert (lb.l1, lb.l2) == (int(row["L1"]), int(row["L2"])), row["name"]
        assert ffd.lower_bounds == lb and lb.l2 <= opt
        # As floats: the same counts (integers are exact in float64).
        assert len(pack.first_fit_decreasing(w.astype(np.float64), float(c))) == int(row["FFD"])


def test_bpplib_invariants_on_some_instances():
    d = bpplib_dir()
    for row in read_optima(d)[::97]:
        nums = np.array((d / row["cls"] / f"{row['name']}.txt").read_text().split(), dtype=np.int64)
        c, w = int(nums[1]), nums[2:]
        for f in ALGORITHMS.values():
            check_packing(f(w, c), w, c)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_invariants_on_seeded_instances(seed, name):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 400))
    f = ALGORITHMS[name]
    ints = rng.integers(0, 1001, size=n)
    check_packing(f(ints, 1000), ints, 1000)
    floats = rng.random(n) * rng.choice([1e-3, 1.0, 1e6])
    cap = float(floats.max(initial=0.0)) * 1.5 + 1e-9
    check_packing(f(floats, cap), floats, cap)
    pairs = np.stack([rng.integers(1, 601, size=n), rng.integers(0, 7, size=n)], axis=1)
    check_packing(f(pairs, [1000, 12]), pairs, [1000, 12])
    fpairs = pairs * 0.37
    check_packing(f(fpairs, [370.0, 4.44]), fpairs, [370.0, 4.44])


def test_one_and_two_dimensional_forms_agree():
    rng = np.random.default_rng(3)
    s = rng.integers(1, 100, size=300)
    for f in ALGORITHMS.values():
        a, b, c = f(s, 100), f(s[:, None], [100]), f(s, [100])
        assert np.array_equal(a.items, b.items) and np.array_equal(a.items, c.items)
        assert a.loads.shape == (len(a),) and b.loads.shape == (len(a), 1)
        assert a.capacity == 100 and b.capacity.tolist() == [100]


def test_result_shape_and_metadata():
    p = pack.first_fit([[6, 1], [6, 3], [3, 0]], [10, 4])
    assert len(p) == 2 and p.dims == 2
    assert p.loads.dtype == np.uint64 and p.loads.tolist() == [[9, 1], [6, 3]]
    assert (p.efficiency(0), p.efficiency(1), p.efficiency(2)) == (0.75, 0.5, 0.0)
    assert pack.first_fit([0.5, 0.5], 1.0).loads.dtype == np.float64
    empty = pack.first_fit_decreasing(np.zeros(0, dtype=np.uint32), 10)
    assert len(empty) == 0 and empty.bins == [] and empty.assignment.shape == (0,)
    assert empty.efficiency() == 1.0 and empty.lower_bounds == pack.LowerBounds(0, 0)
    assert len(pack.first_fit([], 10)) == 0 and len(pack.first_fit([], 1.5)) == 0
    assert len(pack.next_fit([0, 0, 0], 1)) == 1  # zero-size items are legal
    with pytest.raises(ValueError):
        p.loads[0, 0] = 1  # read-only
    # Sizes at the edge of u64 do not overflow.
    big = np.array([2**64 - 2, 1], dtype=np.uint64)
    assert len(pack.first_fit_decreasing(big, np.uint64(2**64 - 1))) == 1
    assert "Packing(bins=2" in repr(p)


def test_exposed_on_the_package():
    assert microbatch.pack is pack and "pack" in microbatch.__all__


def raises(cls, kind, item, f, *args):
    with pytest.raises(cls) as e:
        f(*args)
    assert type(e.value) is cls, type(e.value)
    assert (e.value.kind, e.value.item) == (kind, item), (e.value.kind, e.value.item, str(e.value))
    assert isinstance(e.value, microbatch.InputError) and isinstance(e.value, ValueError)
    return str(e.value)


@pytest.mark.parametrize("f", list(ALGORITHMS.values()) + [pack.lower_bounds])
def test_bad_inputs_raise_the_documented_errors(f):
    nan = float("nan")
    inf = float("inf")
    m = raises(errors.InvalidValueError, "InvalidSize", 2, f, [1.0, 2.0, nan], 10.0)
    assert "NaN" in m and "item 2" in m
    raises(errors.InvalidValueError, "InvalidSize", 1, f, [1.0, -2.0], 10.0)
    raises(errors.InvalidValueError, "InvalidSize", 0, f, [inf], 10.0)
    raises(errors.InvalidValueError, "InvalidSize", 1, f, [[1.0, 0.0], [2.0, nan]], [10.0, 1.0])
    m = raises(errors.InvalidValueError, "InvalidSize", 1, f, np.array([3, -1, 2]), 10)
    assert "negative" in m
    raises(errors.InvalidValueError, "InvalidSize", 2, f, np.array([[3, 1], [1, 1], [0, -4]]), [10, 10])
    m = raises(errors.DtypeError, "Binding", "capacity", f, [3, 4], 10.5)
    assert "round" in m
    raises(errors.DtypeError, "Binding", "sizes", f, np.zeros((2, 2, 2)), 10)
    raises(errors.DtypeError, "Binding", "sizes", f, 5, 10)
    raises(errors.DtypeError, "Binding", "sizes", f, [True, False], 10)
    raises(errors.DtypeError, "Binding", "sizes", f, ["a"], 10)
    raises(errors.DtypeError, "Binding", "capacity", f, [1, 2], [[10]])
    raises(errors.DtypeError, "Binding", "capacity", f, [1, 2], "10")
    raises(errors.CapacityError, "ZeroCapacity", 0, f, [1, 2], 0)
    raises(errors.CapacityError, "ZeroCapacity", 1, f, [[1, 0]], [3, 0])
    raises(errors.CapacityError, "InvalidCapacity", 0, f, [1, 2], -3)
    raises(errors.CapacityError, "InvalidCapacity", 0, f, [1.0], nan)
    raises(errors.CapacityError, "InvalidCapacity", 1, f, [[1.0, 1.0]], [3.0, inf])
    raises(errors.CapacityError, "InvalidCapacity", 0, f, [1.0], -1.0)
    raises(errors.CapacityError, "NoDimensions", None, f, np.zeros((2, 0), dtype=np.int64), [])
    # Wrong capacity dimensions: the first item names the mismatch.
    m = raises(errors.CapacityError, "DimensionMismatch", 0, f, [[1, 2], [3, 4]], 10)
    raises(errors.CapacityError, "DimensionMismatch", 0, f, [[1, 2], [3, 4]], [10, 10, 10])
    raises(errors.CapacityError, "DimensionMismatch", 0, f, [1, 2], [10, 10])
    raises(errors.CapacityError, "DimensionMismatch", 0, f, np.zeros((2, 0), dtype=np.int64), [5])


@pytest.mark.parametrize("f", list(ALGORITHMS.values()) + [pack.lower_bounds])
def test_negative_integers_are_refused_in_the_crates_words(f):
    """The crate takes unsigned integers only, so a negative signed integer never reaches it: the binding refuses the
    first one while converting, with the error the crate gives the same value as a float (class, kind, item and
    message), so that the wording is the crate's alone."""
    for dtype in (np.int8, np.int32, np.int64):
        sizes = np.array([[3, 1], [-7, 1], [0, -4]], dtype=dtype)
        m = raises(errors.InvalidValueError, "InvalidSize", 1, f, sizes, [10, 10])
        assert m == "item 1 has size -7 in dimension 0: negative values are not sizes; sizes must be finite and non-negative"
        assert m == raises(errors.InvalidValueError, "InvalidSize", 1, f, sizes.astype(np.float64), [10.0, 10.0])
        ok = np.abs(sizes)
        m = raises(errors.CapacityError, "InvalidCapacity", 1, f, ok, np.array([10, -3], dtype=dtype))
        assert m == "the capacity -3 in dimension 1 is invalid: negative values are not sizes; a capacity must be finite and positive"
        assert m == raises(errors.CapacityError, "InvalidCapacity", 1, f, ok.astype(np.float64), [10.0, -3.0])
        # A scalar capacity is dimension 0; 1-D sizes are items of dimension 0.
        raises(errors.CapacityError, "InvalidCapacity", 0, f, ok[:, 0], dtype(-1))
        m = raises(errors.InvalidValueError, "InvalidSize", 2, f, np.array([1, 2, -1, -2], dtype=dtype), 10)
        assert m.startswith("item 2 has size -1 in dimension 0: ")
    # With both wrong, the capacity is named first, as the crate checks it first.
    raises(errors.CapacityError, "InvalidCapacity", 0, f, np.array([-1]), -5)
    raises(errors.CapacityError, "InvalidCapacity", 0, f, [-1.0], -5.0)
    raises(errors.CapacityError, "InvalidCapacity", 0, f, [-1.0], float("nan"))


@pytest.mark.parametrize("seed", range(3))
def test_efficiency_is_the_crates(seed):
    """``Packing.efficiency`` is the crate's ``Packing::efficiency``, computed when it packed: the sum of a dimension's
    loads over the capacity of the bins used, for every dimension; 0.0 out of range, 1.0 without bins."""
    rng = np.random.default_rng(seed)
    for _ in range(20):
        d = int(rng.integers(1, 4))
        n = int(rng.integers(0, 40))
        floats = bool(rng.integers(0, 2))
        cap = rng.integers(50, 200, d)
        sizes = rng.integers(0, 50, (n, d))
        if floats:
            cap, sizes = cap * 0.75, sizes * 0.75
        for f in ALGORITHMS.values():
            p = f(sizes, cap)
            for dim in range(d):
                expected = sizes[:, dim].sum() / (cap[dim] * len(p)) if len(p) else 1.0
                assert p.efficiency(dim) == pytest.approx(expected, rel=1e-12), (seed, f, dim)
            assert p.efficiency(d) == 0.0 and p.efficiency(-1) == 0.0


@pytest.mark.parametrize("f", list(ALGORITHMS.values()))
def test_oversize_items_are_all_named(f):
    m = raises(errors.OversizeError, "Oversize", 1, f, [5, 11, 3, 12], 10)
    assert "11" in m
    raises(errors.OversizeError, "Oversize", 2, f, [[5, 1], [3, 2], [1, 5]], [10, 4])
    raises(errors.OversizeError, "Oversize", 0, f, [10.5], 10.0)


def test_errors_pickle():
    import pickle

    with pytest.raises(errors.OversizeError) as e:
        pack.first_fit([11], 10)
    again = pickle.loads(pickle.dumps(e.value))
    assert (type(again), again.kind, again.item, str(again)) == (
        errors.OversizeError, "Oversize", 0, str(e.value))

"""Origins, groups and bytes through the binding: every sample once, the exchange equals
the moves recomputed in numpy from the origins and the plan, locality within its
tolerance of the plan without it, groups together, and the errors (class, kind, item)."""

from __future__ import annotations

import numpy as np
import pytest

import microbatch
from microbatch import errors as E
from microbatch.plan import Exchange

SYNCS = ("step", "micro-step", "phase")
BYTES_PER_IMAGE_TOKEN = 2352


def batch(n: int = 256, seed: int = 0):
    rng = np.random.default_rng(seed)
    ids = np.arange(n, dtype=np.int64) * 5 + 1
    text = rng.integers(50, 1500, n)
    images = [rng.integers(64, 1200, rng.integers(0, 3)) for _ in range(n)]
    return ids, text, images


def where(plan: microbatch.Plan) -> dict:
    """id -> (rank, micro-step, sequence) of every sample of the plan, each seen once."""
    out: dict = {}
    for r in range(plan.ranks):
        for j in range(plan.micro_steps):
            for q, seq in enumerate(plan.sequences(r, j)):
                for i in seq.tolist():
                    assert i not in out, f"id {i} twice"
                    out[i] = (r, j, q)
    return out


def expected_moves(plan, ids, origins, nbytes):
    """The moves recomputed from the origins and the plan: (src, dst, id, bytes) sorted."""
    at = where(plan)
    rows = []
    for i, o, b in zip(ids.tolist(), origins.tolist(), nbytes.tolist()):
        if o < 0:
            continue
        dst = at[i][0]
        if dst != o:
            rows.append((o, dst, i, b))
    return sorted(rows)


def check_exchange(plan, ids, origins, nbytes):
    ex = plan.exchange
    assert isinstance(ex, Exchange)
    want = expected_moves(plan, ids, origins, nbytes)
    m = ex.moves
    got = list(zip(m.src.tolist(), m.dst.tolist(), m.ids.tolist(), m.bytes.tolist()))
    assert got == want  # sorted by (src, dst, id) too
    assert len(ex) == len(m) == len(want)
    R = plan.ranks
    for name in ("sent", "received", "bytes_out", "bytes_in"):
        a = getattr(ex, name)
        assert a.shape == (R,) and a.dtype == np.uint64, name
    src = np.array([w[0] for w in want], dtype=np.int64)
    dst = np.array([w[1] for w in want], dtype=np.int64)
    b = np.array([w[3] for w in want], dtype=np.uint64)
    assert ex.sent.tolist() == np.bincount(src, minlength=R).tolist()
    assert ex.received.tolist() == np.bincount(dst, minlength=R).tolist()
    assert ex.bytes_out.tolist() == [int(b[src == r].sum()) for r in range(R)]
    assert ex.bytes_in.tolist() == [int(b[dst == r].sum()) for r in range(R)]
    # sends(src, dst): the ids of that pair, ascending; every pair, moves or not.
    for s in range(R):
        for d in range(R):
            ids_sd = [w[2] for w in want if w[0] == s and w[1] == d]
            assert ex.sends(s, d).tolist() == ids_sd
    r = plan.report
    present = origins >= 0
    assert r.samples_moved == len(want)
    assert r.bytes_moved == int(b.sum())
    assert r.bytes_total == int(nbytes[present].sum())
    assert r.max_bytes_in == int(ex.bytes_in.max())
    assert r.max_bytes_out == int(ex.bytes_out.max())
    with pytest.raises(IndexError):
        ex.sends(R, 0)


def default_bytes(images):
    return np.array([int(np.sum(x)) * BYTES_PER_IMAGE_TOKEN for x in images], dtype=np.uint64)


@pytest.mark.parametrize("sync", SYNCS)
@pytest.mark.parametrize("tol", [None, 0.0, 0.005, 0.05])
def test_exchange_equals_the_moves(sync, tol):
    ids, text, images = batch()
    R = 8
    origins = np.arange(len(ids)) % R
    planner = microbatch.Planner("qwen2.5-vl-7b", ranks=R, seq_len=8192, sync=sync, locality=tol)
    plan = planner.plan(ids, text, images, origins=origins)
    assert sorted(where(plan)) == sorted(ids.tolist())
    check_exchange(plan, ids, origins, default_bytes(images))
    r = plan.report
    if tol is None:
        assert r.locality_free is None
    else:
        free = microbatch.Planner("qwen2.5-vl-7b", ranks=R, seq_len=8192, sync=sync).plan(ids, text, images, origins=origins)
        assert r.locality_free == pytest.approx(free.report.predicted, rel=1e-12)
        assert r.predicted <= (1 + tol) * r.locality_free * (1 + 1e-12)
        # Locality moves no more bytes than the plan without it.
        assert r.bytes_moved <= free.report.bytes_moved


def test_locality_keeps_samples_home():
    ids, text, images = batch(512, seed=3)
    R = 16
    origins = np.arange(len(ids)) % R
    free = microbatch.Planner("qwen2.5-vl-7b", ranks=R, seq_len=8192).plan(ids, text, images, origins=origins)
    near = microbatch.Planner("qwen2.5-vl-7b", ranks=R, seq_len=8192, locality=0.02).plan(
        ids, text, images, origins=origins
    )
    assert near.report.bytes_moved < free.report.bytes_moved


@pytest.mark.parametrize("sync", ("micro-step", "phase"))
def test_locality_effort_bounds_the_exchange(sync):
    # No re-split (0) leaves more bytes away than no bound; a bound above what
    # the exchange weighs gives the unbounded plan; every plan keeps the tolerance.
    ids, text, images = batch(1024, seed=5)
    R = 16
    origins = np.arange(len(ids)) % R

    def plan(effort):
        planner = microbatch.Planner(
            "qwen2.5-vl-7b", ranks=R, seq_len=8192, sync=sync, locality=0.005, locality_effort=effort
        )
        p = planner.plan(ids, text, images, origins=origins)
        check_exchange(p, ids, origins, default_bytes(images))
        assert p.report.predicted <= 1.005 * p.report.locality_free * (1 + 1e-12)
        return p

    none, unbounded, above = plan(0), plan(None), plan(2**32 - 1)
    assert none.report.bytes_moved > unbounded.report.bytes_moved
    assert above.fingerprint == unbounded.fingerprint


def test_given_bytes_partial_origins_and_nodes():
    ids, text, images = batch(200, seed=1)
    R = 8
    origins = np.where(np.arange(len(ids)) % 3 == 0, -1, np.arange(len(ids)) % R)
    nbytes = (np.arange(len(ids)) * 1000 + 7).astype(np.uint64)
    planner = microbatch.Planner("qwen2.5-vl-7b", ranks=R, seq_len=8192, locality=0.01, ranks_per_node=4)
    plan = planner.plan(ids, text, images, origins=origins, bytes=nbytes)
    check_exchange(plan, ids, origins, nbytes)
    moves = plan.exchange.moves
    across = moves.src // 4 != moves.dst // 4
    assert plan.report.inter_node_bytes == int(moves.bytes[across].sum())
    assert repr(planner).endswith("locality=0.01, ranks_per_node=4)")


def test_no_origins_no_exchange():
    ids, text, images = batch(64)
    plan = microbatch.Planner("qwen2.5-vl-7b", ranks=4, seq_len=8192).plan(ids, text, images)
    assert plan.exchange is None
    r = plan.report
    assert (r.samples_moved, r.bytes_moved, r.bytes_total, r.max_bytes_in, r.max_bytes_out) == (None,) * 5
    assert r.inter_node_bytes is None and r.locality_free is None
    # Origins of -1 everywhere: held nowhere, nothing to ship.
    none = microbatch.Planner("qwen2.5-vl-7b", ranks=4, seq_len=8192).plan(
        ids, text, images, origins=np.full(len(ids), -1)
    )
    assert none.fingerprint == plan.fingerprint


def test_baseline_takes_the_same_arguments():
    ids, text, images = batch(64)
    origins = np.arange(len(ids)) % 4
    planner = microbatch.Planner("qwen2.5-vl-7b", ranks=4, seq_len=8192)
    base = planner.baseline(ids, text, images, origins=origins, groups=np.arange(len(ids)) // 2)
    assert sorted(where(base)) == sorted(ids.tolist())


@pytest.mark.parametrize("scope", ["micro-batch", "rank"])
@pytest.mark.parametrize("sync", SYNCS)
def test_groups_stay_together(scope, sync):
    ids, text, images = batch(240, seed=2)
    text, images = text // 3, [x // 4 for x in images]
    groups = np.where(np.arange(len(ids)) % 7 == 0, -1, np.arange(len(ids)) // 4)
    plan = microbatch.Planner("qwen2.5-vl-7b", ranks=6, seq_len=8192, sync=sync, group_scope=scope).plan(
        ids, text, images, groups=groups
    )
    at = where(plan)
    assert sorted(at) == sorted(ids.tolist())
    seen: dict = {}
    for i, g in zip(ids.tolist(), groups.tolist()):
        if g < 0:
            continue
        r, j, _ = at[i]
        key = (r, j) if scope == "micro-batch" else r
        assert seen.setdefault(g, key) == key, f"group {g} split"


def test_groups_and_locality_together():
    ids, text, images = batch(240, seed=4)
    text, images = text // 3, [x // 4 for x in images]
    R = 6
    origins = np.arange(len(ids)) % R
    groups = np.arange(len(ids)) // 3
    plan = microbatch.Planner("qwen2.5-vl-7b", ranks=R, seq_len=8192, locality=0.005).plan(
        ids, text, images, origins=origins, groups=groups
    )
    at = where(plan)
    for g in np.unique(groups):
        assert len({at[i][:2] for i in ids[groups == g].tolist()}) == 1
    check_exchange(plan, ids, origins, default_bytes(images))


def test_settings_are_checked():
    def planner(**kw):
        return microbatch.Planner("qwen2.5-vl-7b", ranks=4, seq_len=8192, **kw)

    for bad in (float("nan"), -0.1, float("inf")):
        with pytest.raises(E.InvalidValueError) as e:
            planner(locality=bad)
        assert e.value.item == "locality"
    for bad in ("0.5", True, None.__class__):
        with pytest.raises(E.DtypeError) as e:
            planner(locality=bad)
        assert e.value.item == "locality"
    with pytest.raises(E.SettingError) as e:
        planner(ranks_per_node=8)
    assert e.value.item == "ranks_per_node"
    with pytest.raises(E.SettingError) as e:
        planner(locality=0.01, ranks_per_node=0)
    assert e.value.item == "ranks_per_node"
    with pytest.raises(E.SettingError) as e:
        planner(locality_effort=4)
    assert e.value.item == "locality_effort"
    for bad, error in ((-1, E.SettingError), (2**32, E.SettingError), (1.5, E.DtypeError), (True, E.DtypeError)):
        with pytest.raises(error) as e:
            planner(locality=0.01, locality_effort=bad)
        assert e.value.item == "locality_effort"
    assert repr(planner(locality=0.01, locality_effort=4)).endswith("locality=0.01, locality_effort=4)")
    with pytest.raises(E.SettingError) as e:
        planner(group_scope="node")
    assert e.value.item == "group scope"
    assert planner(locality=0).locality == 0.0


def test_arrays_are_checked():
    ids, text, images = batch(16)
    p = microbatch.Planner("qwen2.5-vl-7b", ranks=4, seq_len=8192)
    with pytest.raises(E.DtypeError):
        p.plan(ids, text, images, origins=np.zeros(15, dtype=np.int64))
    with pytest.raises(E.DtypeError):
        p.plan(ids, text, images, groups=np.zeros(16) + 0.5)
    with pytest.raises(E.DtypeError):
        p.plan(ids, text, images, bytes=np.zeros((16, 1), dtype=np.int64))
    with pytest.raises(E.InvalidValueError) as e:
        p.plan(ids, text, images, origins=np.r_[np.zeros(5, dtype=np.int64), -2, np.zeros(10, dtype=np.int64)])
    assert e.value.item == 5
    with pytest.raises(E.InvalidValueError) as e:
        p.plan(ids, text, images, bytes=np.r_[np.zeros(3, dtype=np.int64), -1, np.zeros(12, dtype=np.int64)])
    assert e.value.item == 3


def test_an_origin_past_the_ranks_names_the_sample():
    ids, text, images = batch(16)
    origins = np.zeros(16, dtype=np.uint64)
    origins[9] = 4
    with pytest.raises(E.InvalidValueError) as e:
        microbatch.Planner("qwen2.5-vl-7b", ranks=4, seq_len=8192).plan(ids, text, images, origins=origins)
    assert e.value.kind == "InvalidOrigin"
    assert e.value.item == int(ids[9])
    origins[9] = 2**64 - 1
    with pytest.raises(E.InvalidValueError) as e:
        microbatch.Planner("qwen2.5-vl-7b", ranks=4, seq_len=8192, locality=0.01).plan(
            ids, text, images, origins=origins
        )
    assert e.value.kind == "InvalidOrigin" and e.value.item == int(ids[9])


def test_a_group_too_large_names_the_group():
    ids = np.arange(8)
    text = np.array([600, 600, 600, 400, 400, 600, 600, 600])
    groups = np.array([3, 3, 3, 7, 7, -1, -1, -1])
    p = microbatch.Planner("qwen2.5-vl-7b", ranks=2, seq_len=1024)
    with pytest.raises(E.OversizeError) as e:
        p.plan(ids, text, groups=groups)
    assert e.value.kind == "GroupTooLarge"
    assert e.value.item == 3
    assert "group 3" in str(e.value)

"""Hostile input through every public function: a result that keeps its promises, or a microbatch error.

A seeded generator (no global RNG) draws arrays of random dtypes, shapes and
values (negatives, NaN, infinities, zeros, values near the dtypes' limits,
duplicates, wrong lengths) and random settings for every entry point of the
package. Each call must either return a result whose invariants hold
(checked here, recomputed in numpy), or raise a subclass of
``microbatch.InputError``: never ``InternalError`` (a caught Rust panic),
never PyO3's ``PanicException``, never a bare ``ValueError``/``TypeError``/
``OverflowError`` from inside the package.
"""

import numpy as np
import pytest

import microbatch
from microbatch import cost, pack, partition

ROUNDS = 300

DTYPES = [np.uint8, np.uint32, np.int64, np.uint64, np.float64, np.float32, np.int8]


def values(rng, n, dtype):
    dtype = np.dtype(dtype)
    kind = rng.integers(0, 6)
    if dtype.kind == "f":
        a = rng.uniform(0, 1000, n).astype(dtype)
        if kind == 1 and n:
            a[rng.integers(0, n)] = np.nan
        elif kind == 2 and n:
            a[rng.integers(0, n)] = -rng.uniform(0, 5)
        elif kind == 3 and n:
            a[rng.integers(0, n)] = np.inf
        elif kind == 4:
            a = np.full(n, np.finfo(dtype).max / 4, dtype=dtype)
        return a
    info = np.iinfo(dtype)
    if kind == 0:
        return rng.integers(0, min(info.max, 5000), n, endpoint=True).astype(dtype)
    if kind == 1:
        return np.full(n, info.max, dtype=dtype)
    if kind == 2:
        return rng.integers(info.min, min(info.max, 100), n, endpoint=True).astype(dtype)
    if kind == 3:
        return np.zeros(n, dtype=dtype)
    return rng.integers(0, min(info.max, 3), n, endpoint=True).astype(dtype)


def call(f, *args, **kwargs):
    """The result, or None when the package refused the input as documented."""
    try:
        return f(*args, **kwargs)
    except microbatch.InternalError:
        raise
    except microbatch.InputError as e:
        assert str(e), "an error without a message"
        assert e.kind
        return None


def check_packing(p, sizes, capacity):
    n = sizes.shape[0]
    seen = np.concatenate(p.bins) if len(p) else np.zeros(0, dtype=np.int64)
    assert sorted(seen.tolist()) == list(range(n))
    if n == 0:
        return
    s2 = sizes.reshape(n, -1).astype(np.float64)
    cap = np.broadcast_to(np.asarray(capacity, dtype=np.float64), (s2.shape[1],))
    for b in p.bins:
        load = s2[b].sum(axis=0)
        # float sums in another order may differ by rounding; integers exactly
        assert np.all(load <= cap * (1 + 1e-12)), (load, cap)


@pytest.mark.parametrize("seed", range(4))
def test_pack_hostile(seed):
    rng = np.random.default_rng(seed)
    for _ in range(ROUNDS // 4):
        n = int(rng.integers(0, 40))
        d = int(rng.integers(1, 3))
        dtype = DTYPES[rng.integers(0, len(DTYPES))]
        sizes = values(rng, n * d, dtype).reshape((n, d) if d > 1 or rng.integers(0, 2) else (n,))
        cap_d = d if rng.integers(0, 5) else int(rng.integers(1, 4))
        capacity = values(rng, cap_d, dtype if rng.integers(0, 4) else np.float64)
        if cap_d == 1 and rng.integers(0, 2):
            capacity = capacity[0]
        for f in (pack.first_fit_decreasing, pack.best_fit_decreasing, pack.first_fit,
                  pack.best_fit, pack.next_fit):
            p = call(f, sizes, capacity)
            if p is not None:
                check_packing(p, sizes, capacity)
                lb = call(pack.lower_bounds, sizes, capacity)
                assert lb is not None and max(lb.l1, lb.l2) <= len(p)


@pytest.mark.parametrize("seed", range(4))
def test_partition_hostile(seed):
    rng = np.random.default_rng(100 + seed)
    for _ in range(ROUNDS // 4):
        n = int(rng.integers(0, 30))
        d = int(rng.integers(1, 3))
        dtype = DTYPES[rng.integers(0, len(DTYPES))]
        w = values(rng, n * d, dtype).reshape((n, d) if d > 1 else (n,))
        k = int(rng.choice([0, 1, 2, 3, 7, n + 1, 2**40]))
        results = [call(partition.lpt, w, k), call(partition.karmarkar_karp, w, k)]
        kwargs = dict(
            equal_count=bool(rng.integers(0, 2)),
            allow_empty=bool(rng.integers(0, 2)),
            objective=["max_part", "spread"][rng.integers(0, 2)],
            algorithm=["lpt", "karmarkar_karp", "exact"][rng.integers(0, 3)],
            refinement=bool(rng.integers(0, 2)),
            node_budget=int(rng.integers(0, 10_000)),
        )
        if d > 1:
            kwargs["dims"] = ["combined", "per_dim"][rng.integers(0, 2)]
        if rng.integers(0, 3) == 0:
            kwargs["cap"] = values(rng, d, dtype) if d > 1 else values(rng, 1, dtype)[0]
        results.append(call(partition.partition, w, k, **kwargs))
        for part in results:
            if part is None:
                continue
            seen = np.concatenate(part.parts) if len(part) else np.zeros(0, dtype=np.int64)
            assert sorted(seen.tolist()) == list(range(n))
            assert len(part) == k
            if part.lower_bound is not None and part.objective is not None:
                assert float(np.max(part.lower_bound)) <= float(np.max(part.objective)) * (1 + 1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_planner_hostile(seed):
    """A sane batch and settings with one part made hostile (or none): about
    half the plans succeed and are checked, the rest must be refused."""
    rng = np.random.default_rng(200 + seed)
    planned = 0
    for _ in range(ROUNDS // 4):
        n = int(rng.integers(1, 60))
        hostile = rng.integers(0, 12)  # which part is hostile; >= 8: none
        ranks = int(rng.choice([1, 2, 3, 8]))
        seq_len = int(rng.choice([2048, 4096, 16384]))
        settings = dict(sync=["step", "micro-step", "phase"][rng.integers(0, 3)])
        if hostile == 0:
            ranks = int(rng.choice([0, n + 1, 2**40]))
        elif hostile == 1:
            seq_len = int(rng.choice([0, 1, 64, 2**32 - 1]))
        elif hostile == 2:
            settings[["micro_steps", "max_images", "max_units", "sequences_per_micro_step"][
                rng.integers(0, 4)]] = int(rng.choice([0, 1, 2**31, 2**32 - 1]))
        elif rng.integers(0, 3) == 0:
            settings["micro_steps"] = int(rng.integers(1, 4))
        model = ["qwen2.5-vl-7b", "llava-1.5-7b", "costs", cost.Tokens(1.0) + cost.PerGroup(3.0)][rng.integers(0, 4)]
        planner = call(microbatch.Planner, model, ranks, seq_len, **settings)
        if planner is None:
            continue
        ids = rng.permutation(10 * n)[:n].astype(np.uint64)
        text = rng.integers(1, 1500, n)
        images = [rng.integers(1, 600, int(rng.integers(0, 3))) for _ in range(n)]
        loss = rng.integers(0, 2, n) * text
        costs = rng.uniform(0, 5, (n, 2)) if model == "costs" else None
        if hostile == 3:
            ids = values(rng, n, [np.uint64, np.int64, np.uint8][rng.integers(0, 3)])
        elif hostile == 4:
            text = values(rng, n if rng.integers(0, 4) else n + 1, [np.uint32, np.int64, np.float64][rng.integers(0, 3)])
        elif hostile == 5:
            images = [values(rng, int(rng.integers(0, 3)), np.int64) for _ in range(n - int(rng.integers(0, 2)))]
        elif hostile == 6:
            loss = values(rng, n, [np.int64, np.uint64, np.float32][rng.integers(0, 3)])
        elif hostile == 7:
            costs = values(rng, 2 * n, np.float64).reshape(n, 2) if rng.integers(0, 4) else costs
            if model != "costs" and rng.integers(0, 2):
                costs = rng.uniform(0, 5, (n, 2))
        plan = call(planner.plan, ids, text, images, loss, costs=costs)
        if plan is None:
            continue
        planned += 1
        got = sorted(int(i) for r in range(plan.ranks) for s in range(plan.micro_steps)
                     for i in plan.micro_batch(r, s))
        assert got == sorted(int(i) for i in np.asarray(ids))
        r = plan.report
        assert r.predicted >= r.lower_bound
        assert plan.loss_scale("token", "mean") >= 0.0
        assert microbatch.Plan.from_json(plan.to_json()) == plan
    assert planned >= ROUNDS // 16, f"only {planned} plans succeeded: the generator is too hostile"


@pytest.mark.parametrize("seed", range(2))
def test_cost_and_fit_hostile(seed):
    rng = np.random.default_rng(300 + seed)
    coefficients = [0.0, 1.0, -1.0, np.nan, np.inf, 1e308, 5e-324]
    for _ in range(ROUNDS // 2):
        c = float(rng.choice(coefficients))
        for make in (cost.Tokens, cost.PerSample, cost.PerGroup, cost.DocumentAttention,
                     cost.FullAttention):
            m = call(make, c)
            if m is None:
                continue
            n = int(rng.integers(0, 10))
            out = call(m.cost, values(rng, n, np.int64), [values(rng, 1, np.int64) for _ in range(n)])
            if out is not None:
                assert out.shape == (n, 2) and not np.isnan(out).any() and (out >= 0).all()
        rows = int(rng.integers(0, 6))
        feats = int(rng.integers(0, 3))
        f = call(cost.fit, values(rng, rows * feats, np.float64).reshape(rows, feats),
                 values(rng, rows, np.float64))
        if f is not None:
            assert np.isfinite(f.coefficients).all() and (f.coefficients >= 0).all()


# --- the Python layer: the sampler, the collate functions, Plan.from_json (issue 20) --------


def test_plan_from_json_of_a_non_str_is_a_dtype_error():
    for bad in (5, None, b"{}", {"ranks": 2}, ["{}"], 1.5):
        with pytest.raises(microbatch.DtypeError) as e:
            microbatch.Plan.from_json(bad)
        assert e.value.item == "text" and type(bad).__name__ in str(e.value)
    for bad in ("", "[1]", "5", "null", "{", '{"ranks": -1}'):
        assert call(microbatch.Plan.from_json, bad) is None


def test_sampler_after_a_failed_metadata_read_fails_the_same_way_or_recovers():
    pytest.importorskip("torch")
    from microbatch.torch import BalancedBatchSampler

    kw = dict(num_samples=12, global_batch_size=4, model="qwen2.5-vl-7b", seq_len=512, num_replicas=2, rank=0)
    # A metadata row the package refuses: the same clear error on every use that plans its step,
    # never an AssertionError. The callable is read per planned step (issue 21): `steps()` and
    # `batches()` read nothing until a step is planned.
    s = BalancedBatchSampler(lambda i: (-5 if i == 7 else 10 + i, []), **kw)
    for use in (lambda: list(s), lambda: len(s), lambda: list(s.steps()), lambda: s.steps()[1]):
        with pytest.raises(microbatch.InvalidValueError) as e:
            use()
        assert e.value.item == 7
    assert len(s.batches()) == 3 and s.steps()[0] is not None  # the steps before index 7's plan
    s = BalancedBatchSampler(lambda i: (10, "x") if i == 3 else (10, []), **kw)
    for _ in range(2):
        with pytest.raises(microbatch.InputError):
            list(s)
    # The user's own callable failing once (a flaky read): its error, then a normal epoch on the retry.
    calls = {"failed": False}

    def flaky(i):
        if i == 5 and not calls["failed"]:  # the first read of index 5 fails, whenever it comes
            calls["failed"] = True
            raise OSError("metadata store unavailable")
        return (10 + i, [4] if i % 2 else [])

    s = BalancedBatchSampler(flaky, **kw)
    with pytest.raises(OSError):
        list(s)
    got = sorted(i for b in s for i in b)
    other = BalancedBatchSampler(flaky, **dict(kw, rank=1))
    assert sorted(got + [i for b in other for i in b]) == list(range(12))


def test_sampler_takes_tensors_that_require_grad():
    torch = pytest.importorskip("torch")
    from microbatch.torch import BalancedBatchSampler

    kw = dict(global_batch_size=4, model="qwen2.5-vl-7b", seq_len=512, num_replicas=2, rank=0)
    ints = [10 + i for i in range(8)]
    want = list(BalancedBatchSampler(ints, [[4]] * 8, **kw))
    text = torch.tensor(ints)
    images = [torch.tensor([4]) for _ in range(8)]
    assert list(BalancedBatchSampler(text, images, **kw)) == want
    floats = torch.tensor([float(v) for v in ints], requires_grad=True)  # a float: refused as such
    with pytest.raises(microbatch.DtypeError):
        BalancedBatchSampler(floats, **kw)
    with pytest.raises(microbatch.DtypeError):
        BalancedBatchSampler(text, [torch.tensor([4.0], requires_grad=True)] * 8, **kw)
    meta = BalancedBatchSampler(lambda i: (torch.tensor(ints[i]), torch.tensor([4])), num_samples=8, **kw)
    assert list(meta) == want


def hostile_value(rng, torch):
    kind = int(rng.integers(0, 12))
    n = int(rng.integers(0, 5))
    return [
        lambda: rng.integers(-5, 50, n).tolist(),
        lambda: [[1, 2], [3]],
        lambda: "abc",
        lambda: None,
        lambda: {"a": 1},
        lambda: [2**70] * max(n, 1),
        lambda: np.array([object(), 1], dtype=object),
        lambda: torch.randn(n, requires_grad=True),
        lambda: torch.ones(n, 2),
        lambda: torch.tensor(rng.integers(0, 9, n)),
        lambda: 7,
        lambda: [1.5] * n,
    ][kind]()


@pytest.mark.parametrize("seed", range(2))
def test_collate_packed_hostile(seed):
    """Random junk in every key: a batch whose rows line up, or a microbatch error naming the sample."""
    torch = pytest.importorskip("torch")
    from microbatch.torch import collate_packed

    rng = np.random.default_rng(500 + seed)
    ok = 0
    for _ in range(ROUNDS):
        samples = []
        for _ in range(int(rng.integers(0, 4))):
            s = {"input_ids": hostile_value(rng, torch) if rng.random() < 0.5 else rng.integers(0, 9, 3).tolist()}
            for key in ("labels", "token_type_ids", "pixel_values", "meta"):
                if rng.random() < 0.4:
                    s[key] = hostile_value(rng, torch)
            samples.append(s)
        b = call(collate_packed, samples)
        if b is None:
            continue
        ok += 1
        T = b["input_ids"].shape[1]
        assert b["labels"].shape == b["position_ids"].shape == (1, T)
        assert int(b["cu_seqlens"][-1]) == T and b["cu_seqlens"].shape == (len(samples) + 1,)
        if "token_type_ids" in b:
            assert b["token_type_ids"].shape == (1, T)
        if isinstance(b.get("meta"), list):
            assert len(b["meta"]) == len(samples)
        for v in b.values():
            assert not (isinstance(v, torch.Tensor) and v.requires_grad)
    assert ok >= ROUNDS // 10, f"only {ok} batches: the generator is too hostile"


@pytest.mark.parametrize("seed", range(2))
def test_packed_collator_hostile(seed):
    """The same junk through microbatch.hf.PackedCollator (bound to a config: no model needed)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from microbatch.hf import PackedCollator

    config = transformers.LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=1)
    collator = PackedCollator(config, item_keys=("pixel_values",), drop_keys=("meta",))
    rng = np.random.default_rng(600 + seed)
    ok = 0
    for _ in range(ROUNDS // 2):
        samples = []
        for _ in range(int(rng.integers(0, 4))):
            s = {"input_ids": hostile_value(rng, torch) if rng.random() < 0.5 else rng.integers(0, 9, 3).tolist()}
            for key in ("labels", "token_type_ids", "pixel_values", "meta", "attention_mask"):
                if rng.random() < 0.3:
                    s[key] = hostile_value(rng, torch)
            samples.append(s)
        b = call(collator, samples)
        if b is None:
            continue
        ok += 1
        T = b["input_ids"].shape[1]
        assert T >= 1 and b["labels"].shape == b["position_ids"].shape == (1, T)
        assert int(b["cu_seq_lens_q"][-1]) == T and b["use_cache"] is False
        if "token_type_ids" in b:
            assert b["token_type_ids"].shape == (1, T)
    assert ok >= ROUNDS // 20, f"only {ok} batches: the generator is too hostile"

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

from typing import Any

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


# --- tensors as array arguments: read as values, or a microbatch error naming the argument (issue 43) ---

#: How a tensor argument can be hostile: ``(name, build(values, integer) -> argument, accepted)``;
#: ``accepted``: whether the package reads it (then the plan must equal the numpy one's).
def tensor_forms(torch):
    def grad_view(v, integer):  # float, requires grad, a strided view (issue 43's report)
        t = torch.tensor(np.repeat(np.asarray(v, dtype=np.float64), 2, axis=0), requires_grad=True)
        return t[::2] * 1.0

    def strided(v, integer):  # a non-contiguous view of the right values
        t = torch.tensor(np.repeat(np.asarray(v), 2, axis=0))
        return t[::2]

    def transposed(v, integer):
        a = np.asarray(v)
        return torch.tensor(np.ascontiguousarray(a.T)).T if a.ndim == 2 else torch.tensor(a).flip(0).flip(0)

    forms = [
        ("requires grad, strided", grad_view, lambda integer: not integer),
        ("strided view", strided, lambda integer: True),
        ("transposed", transposed, lambda integer: True),
        ("meta", lambda v, i: torch.tensor(np.asarray(v)).to("meta"), lambda integer: False),
        ("bfloat16", lambda v, i: torch.tensor(np.asarray(v, dtype=np.float64)).to(torch.bfloat16),
         lambda integer: not integer),
        ("0-d", lambda v, i: torch.tensor(np.asarray(v).reshape(-1)[0]), lambda integer: False),
        ("sparse", lambda v, i: torch.tensor(np.asarray(v)).to_sparse(), lambda integer: False),
        ("bool", lambda v, i: torch.tensor(np.asarray(v)) > 0, lambda integer: False),
        ("list of grad tensors", lambda v, i: [torch.tensor(float(x), requires_grad=True) for x in np.asarray(v).reshape(-1)],
         lambda integer: False),
    ]
    if torch.cuda.is_available():
        forms.append(("cuda", lambda v, i: torch.tensor(np.asarray(v)).cuda(), lambda integer: True))
    return forms


def plan_key(plan):
    """What the inputs decide: the assignment, the loss denominators, the exchange (not the timing)."""
    r = plan.report
    return plan.fingerprint, plan.loss, r.predicted, r.samples_moved, r.bytes_moved, r.bytes_total


def refused_naming(fn, name, form):
    """``fn()`` must raise a microbatch error whose message names ``name``; never torch's or numpy's."""
    try:
        fn()
    except microbatch.InputError as e:
        assert name in str(e), f"{form}: the error does not name {name!r}: {e}"
        return e
    except Exception as e:  # noqa: BLE001 - what the test is about
        raise AssertionError(f"{form} as {name}: {type(e).__module__}.{type(e).__name__}: {e}") from e
    raise AssertionError(f"{form} as {name}: accepted")


def test_planner_reads_tensors_as_values_or_names_the_argument():
    """Every array argument of Planner.plan given each hostile tensor form: the same plan as the
    numpy values (where it is sensible to read them), else a microbatch error naming the argument."""
    torch = pytest.importorskip("torch")
    n = 6
    base = dict(
        ids=np.arange(n), text_tokens=np.array([900, 100, 700, 300, 500, 50]),
        image_tokens=[[256], [], [64, 64], [], [128], []], loss_tokens=np.array([10, 0, 30, 3, 8, 1]),
        image_units=[[2], [], [1, 1], [], [1], []], origins=np.array([0, 1, -1, 0, 1, 0]),
        groups=np.array([-1, 3, 3, -1, 5, -1]), bytes=np.array([5, 6, 7, 8, 9, 10]),
    )
    planners = {
        False: microbatch.Planner("qwen2.5-vl-7b", ranks=2, seq_len=2048, locality=0.05),
        True: microbatch.Planner("costs", ranks=2, seq_len=2048, locality=0.05),
    }
    costs = np.array([[1.0, 4.0], [0.0, 1.0], [2.0, 3.0], [0.0, 2.0], [1.5, 2.5], [0.0, 0.5]])
    args = [(k, v, True) for k, v in base.items()] + [("costs", costs, False)]
    checked = refused = 0
    for name, value, integer in args:
        with_costs = name == "costs"
        kw0 = dict(base, costs=costs) if with_costs else dict(base)
        want = planners[with_costs].plan(**kw0)
        for form, build, accepted in tensor_forms(torch):
            if name in ("image_tokens", "image_units"):
                # one tensor a sample, and the (values, offsets) form
                variants = [[build(np.asarray(v, dtype=np.int64), integer) if len(v) else v for v in value]]
                values = np.concatenate([np.asarray(v, dtype=np.int64) for v in value])
                offsets = np.cumsum([0] + [len(v) for v in value])
                variants.append((build(values, integer), offsets))
            elif name in ("origins", "groups") and form in ("bool", "bfloat16", "list of grad tensors"):
                continue  # -1 entries: not the values of these forms
            else:
                variants = [build(value, integer)]
            for arg in variants:
                kw = dict(kw0, **{name: arg})
                if accepted(integer) and not (name in ("image_tokens", "image_units") and form == "0-d"):
                    got = planners[with_costs].plan(**kw)
                    if form != "bfloat16":  # bfloat16 rounds the costs: planned, not equal
                        assert plan_key(got) == plan_key(want), f"{form} as {name}: another plan than the numpy values'"
                    checked += 1
                else:
                    refused_naming(lambda: planners[with_costs].plan(**kw), name, form)
                    refused += 1
    assert checked >= 20 and refused >= 40, (checked, refused)


def test_the_issue_43_report_is_a_dtype_error_that_says_what_to_fix():
    torch = pytest.importorskip("torch")
    planner = microbatch.Planner("qwen2.5-vl-7b", ranks=2, seq_len=4096)
    text = torch.arange(20.0, requires_grad=True)[::2] * 10 + 100
    with pytest.raises(microbatch.DtypeError) as e:
        planner.plan(ids=list(range(10)), text_tokens=text)
    assert e.value.item == "text_tokens"
    assert "requires grad" in str(e.value) and "integer" in str(e.value) and ".long()" in str(e.value)
    # The same values as integers plan; a scalar, the meta device and a sparse tensor say what is wrong.
    planner.plan(ids=list(range(10)), text_tokens=text.detach().round().long())
    for bad, words in ((torch.tensor(5), "a scalar"), (torch.ones(10, dtype=torch.long, device="meta"), "meta device"),
                       (torch.ones(10, dtype=torch.long).to_sparse(), "to_dense()")):
        with pytest.raises(microbatch.DtypeError, match=words):
            planner.plan(ids=list(range(10)), text_tokens=bad)


def test_sampler_reads_tensors_as_values_or_names_the_argument():
    """BalancedBatchSampler's array arguments and its metadata callable's values, in the same forms."""
    torch = pytest.importorskip("torch")
    from microbatch.torch import BalancedBatchSampler

    n = 8
    text = np.array([10 + 7 * i for i in range(n)])
    images = [[4 * (i % 3)] if i % 2 else [] for i in range(n)]
    base = dict(text_tokens=text, image_tokens=images, loss_tokens=text // 2,
                image_units=[[1] if i % 2 else [] for i in range(n)], origins=np.arange(n) % 2,
                bytes=np.full(n, 100), costs=np.ones((n, 2)))
    kw = dict(global_batch_size=4, model="costs", seq_len=512, num_replicas=2, rank=0)

    def epoch(**args):
        args = dict(base, **args)
        return list(BalancedBatchSampler(args.pop("text_tokens"), args.pop("image_tokens"), **args, **kw))

    want = epoch()
    for name, value in base.items():
        integer = name != "costs"
        for form, build, accepted in tensor_forms(torch):
            if name in ("image_tokens", "image_units"):
                arg: Any = [build(np.asarray(v, dtype=np.int64), integer) if v else v for v in value]
            else:
                arg = build(value, integer)
            if accepted(integer) and not (name in ("image_tokens", "image_units") and form == "0-d"):
                assert epoch(**{name: arg}) == want, f"{form} as {name}"
            else:
                refused_naming(lambda: epoch(**{name: arg}), name, form)

    # A metadata callable's values: 0-d tensors read; one on the meta device names its index.
    def meta(bad):
        def read(i):
            t = torch.tensor(int(text[i]))
            return (t.to("meta") if bad and i == 5 else t, torch.tensor(images[i], dtype=torch.long))
        return read

    got = list(BalancedBatchSampler(meta(False), num_samples=n, **dict(kw, model="qwen2.5-vl-7b")))
    assert got == list(BalancedBatchSampler(text, images, **dict(kw, model="qwen2.5-vl-7b")))
    e = refused_naming(lambda: list(BalancedBatchSampler(meta(True), num_samples=n, **dict(kw, model="qwen2.5-vl-7b"))),
                       "text_tokens[5]", "meta")
    assert e.item == 5


def test_pack_partition_and_fit_read_tensors_as_values_or_name_the_argument():
    """The float array arguments of pack, partition and cost (sizes, capacity, weights, cap, costs,
    features, times) in each hostile tensor form: the numpy values' result where a float array is
    sensible (a tensor that requires grad is read as its values), else a microbatch error naming
    the argument; never torch's own error (issue 44)."""
    torch = pytest.importorskip("torch")
    from microbatch import pack

    sizes = np.array([9000.0, 8000.0, 7000.0, 1000.0, 500.0, 2500.0])
    weights = np.array([8.0, 7.0, 6.0, 5.0, 4.0])
    T = np.array([100.0, 200.0, 400.0, 800.0, 1600.0])
    features = np.stack([T, T**2], axis=1)
    times = 2e-5 * T + 3e-10 * T**2
    fitted = microbatch.cost.fit(features, times)
    n = 3
    costs = np.array([[1.0, 4.0], [0.0, 1.0], [2.0, 3.0]])
    planner = microbatch.Planner("costs", ranks=2, seq_len=2048)
    plan_args = dict(ids=np.arange(n), text_tokens=np.array([900, 100, 700]))

    def bins(p):
        return [b.tolist() for b in p.bins]

    # (argument name, its numpy value, call(value) -> a comparable result)
    calls = [
        ("sizes", sizes, lambda v: bins(pack.best_fit_decreasing(v, 10000.0))),
        ("sizes", sizes, lambda v: (pack.lower_bounds(v, 10000.0).l1, pack.lower_bounds(v, 10000.0).l2)),
        ("capacity", np.array([10000.0]), lambda v: bins(pack.first_fit_decreasing(sizes, v))),
        ("weights", weights, lambda v: [p.tolist() for p in partition.partition(v, 2).parts]),
        ("weights", weights, lambda v: [p.tolist() for p in partition.lpt(v, 2).parts]),
        ("cap", np.array([16.0]), lambda v: [p.tolist() for p in partition.partition(weights, 2, cap=v).parts]),
        ("features", features, lambda v: np.round(microbatch.cost.fit(v, times).coefficients, 12).tolist()),
        ("times", times, lambda v: np.round(microbatch.cost.fit(features, v).coefficients, 12).tolist()),
        ("features", features[0], lambda v: round(fitted.predict(v), 9)),
        ("costs", costs, lambda v: plan_key(planner.plan(**plan_args, costs=v))),
        ("costs['vision']", costs[:, 0], lambda v: plan_key(planner.plan(**plan_args, costs={"vision": v}))),
    ]
    read_as_floats = {"requires grad, strided", "strided view", "transposed", "bfloat16", "cuda"}
    checked = refused = 0
    for name, value, f in calls:
        want = f(value)
        for form, build, _ in tensor_forms(torch):
            arg = build(value, False)
            accepted = (form in read_as_floats or (form == "list of grad tensors" and value.ndim == 1)
                        or (form == "0-d" and name in ("capacity", "cap")))  # one value: a scalar capacity
            if name == "costs['vision']" and form in ("0-d", "sparse", "meta", "bool", "list of grad tensors"):
                name_in_error = "costs"  # the column's errors name the argument (costs) and the key
            else:
                name_in_error = name
            if accepted:
                got = f(arg)
                if form not in ("bfloat16", "list of grad tensors"):  # bfloat16, float32: read, rounded
                    assert got == want, f"{form} as {name}: {got} != {want}"
                checked += 1
            else:
                refused_naming(lambda: f(arg), name_in_error, form)
                refused += 1
    assert checked >= 40 and refused >= 40, (checked, refused)

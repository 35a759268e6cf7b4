"""BalancedBatchSampler under DataLoader(num_workers=2): every sample once per epoch, ranks in step, deterministic.

Ranks are simulated with explicit ``rank``/``num_replicas`` (no process group).
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader, Dataset  # noqa: E402

import microbatch  # noqa: E402
from microbatch.torch import BalancedBatchSampler, Step  # noqa: E402

MODEL, SEQ_LEN = "qwen2.5-vl-7b", 1024


def metadata(n, seed=0):
    rng = np.random.default_rng(seed)
    text = rng.integers(10, 400, n)
    images = [list(rng.choice([64, 256], int(k))) for k in rng.integers(0, 3, n)]
    loss = text // 2
    loss[::5] = 0
    return text, images, loss


class Indices(Dataset):
    """Returns the index itself, so that what the loader yields can be checked."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return i


def keep(batch):
    return list(batch)


def samplers(n, world, **kw):
    text, images, loss = metadata(n)
    kw.setdefault("global_batch_size", 24)
    return [
        BalancedBatchSampler(text, images, loss_tokens=loss, model=MODEL, seq_len=SEQ_LEN,
                             num_replicas=world, rank=r, **kw)
        for r in range(world)
    ]


def loaded(sampler, n, workers=2):
    return list(DataLoader(Indices(n), batch_sampler=sampler, collate_fn=keep, num_workers=workers))


def epoch_of(ranks, n, workers=2):
    return [loaded(s, n, workers) for s in ranks]


@pytest.mark.parametrize("world", [1, 3, 4])
@pytest.mark.parametrize("drop_last", [False, True])
def test_every_sample_once_across_ranks_through_workers(world, drop_last):
    n = 101  # 4 full batches of 24 and a remainder of 5
    ranks = samplers(n, world, drop_last=drop_last, seed=7)
    yielded = epoch_of(ranks, n)
    lengths = {len(y) for y in yielded}
    assert len(lengths) == 1, f"ranks yield different numbers of micro-batches: {lengths}"
    assert [len(s) for s in ranks] == [len(y) for y in yielded]
    seen = sorted(i for y in yielded for batch in y for i in batch)
    batches = ranks[0].batches()
    if drop_last:
        assert len(batches) == 4 and len(seen) == 96 and len(set(seen)) == 96
        assert set(seen) == set(np.concatenate(batches).tolist())
    else:
        assert seen == list(range(n))
        assert [len(b) for b in batches] == [24, 24, 24, 24, 5]  # 5 >= every world here
    # Every step's micro-batches, rank by rank, are the plan's; the step's samples are its batch.
    for r, s in enumerate(ranks):
        flat = [b for st in s.steps() for j in range(st.micro_steps) for b in [st.micro_batch(j)]]
        assert flat == yielded[r]
        for st, batch in zip(s.steps(), batches):
            assert st.rank == r and isinstance(st, Step)
            ids = sorted(int(i) for q in range(world) for j in range(st.micro_steps)
                         for i in st.plan.micro_batch(q, j))
            assert ids == sorted(batch.tolist())


def test_a_remainder_smaller_than_the_ranks_joins_the_step_before():
    n, world = 51, 4  # 2 batches of 24, a remainder of 3 < 4 ranks
    ranks = samplers(n, world)
    batches = ranks[0].batches()
    assert [len(b) for b in batches] == [24, 27]
    assert sorted(np.concatenate(batches).tolist()) == list(range(n))
    yielded = epoch_of(ranks, n, workers=0)
    assert sorted(i for y in yielded for b in y for i in b) == list(range(n))
    assert sum(st.samples for st in ranks[0].steps()) == n
    # With drop_last the remainder is dropped instead.
    dropped = samplers(n, world, drop_last=True)[0].batches()
    assert [len(b) for b in dropped] == [24, 24]


def test_a_dataset_smaller_than_a_batch():
    ranks = samplers(10, 2)  # one partial batch of 10
    assert [len(b) for b in ranks[0].batches()] == [10]
    assert sorted(i for y in epoch_of(ranks, 10, workers=0) for b in y for i in b) == list(range(10))
    dropped = samplers(10, 2, drop_last=True)
    assert len(dropped[0]) == 0 and list(dropped[0]) == [] and dropped[0].steps() == []
    with pytest.raises(microbatch.SettingError) as e:
        len(samplers(3, 4, global_batch_size=8)[0])
    assert e.value.item == "num_samples"


def test_deterministic_for_a_seed_and_different_for_another_seed_or_epoch():
    n = 60
    a = epoch_of(samplers(n, 2, seed=1), n)
    b = epoch_of(samplers(n, 2, seed=1), n)
    assert a == b
    c = epoch_of(samplers(n, 2, seed=2), n)
    assert c != a
    later = samplers(n, 2, seed=1)
    for s in later:
        s.set_epoch(1)
    d = epoch_of(later, n)
    assert d != a
    assert sorted(i for y in d for b in y for i in b) == list(range(n))
    for s in later:
        s.set_epoch(0)
    assert epoch_of(later, n) == a  # the epoch, not the history, decides
    # No shuffle: the batches follow the index order.
    plain = samplers(n, 2, shuffle=False)[0].batches()
    assert np.concatenate(plain).tolist() == list(range(n))


def test_len_equals_what_iteration_yields_and_the_steps():
    ranks = samplers(77, 3, global_batch_size=20, sync="step", micro_steps=3)
    for s in ranks:
        steps = s.steps()
        assert len(s) == len(list(s)) == sum(st.micro_steps for st in steps) == 3 * len(steps)
        assert [st.index for st in steps] == list(range(len(steps)))
        assert all(st.fingerprint == st.plan.fingerprint for st in steps)
    # The plan is the same on every rank: the same fingerprints and loss scales.
    assert len({tuple(st.fingerprint for st in s.steps()) for s in ranks}) == 1
    scales = [st.loss_scale("token", "mean") for st in ranks[0].steps()]
    assert scales == [st.plan.loss_scale("token", "mean") for st in ranks[2].steps()]
    loss = metadata(77)[2]
    for st, batch in zip(ranks[0].steps(), ranks[0].batches()):
        assert st.loss_scale("token", "sum") == pytest.approx(1 / loss[batch].sum())
        assert st.loss_scale("sample", "mean") == pytest.approx(3 / len(batch))


def test_empty_micro_batches_are_yielded_as_empty_lists():
    ranks = samplers(40, 2, global_batch_size=8, sync="step", micro_steps=6)
    yielded = epoch_of(ranks, 40, workers=0)
    assert any(b == [] for y in yielded for b in y)
    assert sorted(i for y in yielded for b in y for i in b) == list(range(40))


def test_metadata_as_a_callable_equals_the_arrays():
    n = 45
    text, images, loss = metadata(n)
    calls = []

    def meta(i):
        calls.append(i)
        return int(text[i]), images[i], int(loss[i])

    arrays = samplers(n, 2, seed=3)
    called = [BalancedBatchSampler(meta, num_samples=n, global_batch_size=24, model=MODEL,
                                   seq_len=SEQ_LEN, num_replicas=2, rank=r, seed=3) for r in range(2)]
    assert calls == []  # evaluated on first use, not at construction
    assert epoch_of(called, n) == epoch_of(arrays, n)
    assert sorted(calls) == sorted(list(range(n)) * 2)  # once per index per sampler
    assert [st.fingerprint for st in called[0].steps()] == [st.fingerprint for st in arrays[0].steps()]
    # Two-element rows: no loss tokens (all text tokens carry loss).
    two = BalancedBatchSampler(lambda i: (int(text[i]), images[i]), num_samples=n, global_batch_size=24,
                               model=MODEL, seq_len=SEQ_LEN, num_replicas=2, rank=0, seed=3)
    plain = BalancedBatchSampler(text, images, global_batch_size=24, model=MODEL, seq_len=SEQ_LEN,
                                 num_replicas=2, rank=0, seed=3)
    assert [s.fingerprint for s in two.steps()] == [s.fingerprint for s in plain.steps()]
    bad = BalancedBatchSampler(lambda i: int(text[i]), num_samples=n, global_batch_size=24, model=MODEL,
                               seq_len=SEQ_LEN, num_replicas=2, rank=0)
    with pytest.raises(microbatch.DtypeError) as e:
        len(bad)
    assert e.value.item == 0


def test_a_ready_planner_and_passed_through_settings():
    text, images, loss = metadata(50)
    planner = microbatch.Planner(MODEL, ranks=2, seq_len=SEQ_LEN, sync="micro-step", micro_steps=9)
    a = BalancedBatchSampler(text, images, loss_tokens=loss, global_batch_size=25, planner=planner,
                             num_replicas=2, rank=1, seed=5)
    b = BalancedBatchSampler(text, images, loss_tokens=loss, global_batch_size=25, model=MODEL,
                             seq_len=SEQ_LEN, sync="micro-step", micro_steps=9, num_replicas=2, rank=1, seed=5)
    assert [s.micro_steps for s in a.steps()] == [9, 9]
    assert list(a) == list(b)
    with pytest.raises(microbatch.SettingError) as e:
        BalancedBatchSampler(text, global_batch_size=25, planner=planner, num_replicas=4, rank=0)
    assert e.value.item == "planner"
    with pytest.raises(microbatch.SettingError) as e:
        BalancedBatchSampler(text, global_batch_size=25, planner=planner, sync="step", num_replicas=2, rank=0)
    assert e.value.item == "sync"


class Recording:
    """A planner that records the arguments the sampler passes per step."""

    def __init__(self, inner):
        self.inner, self.ranks, self.calls = inner, inner.ranks, []

    def plan(self, ids, text_tokens, image_tokens=None, loss_tokens=None, **kw):
        self.calls.append((ids, text_tokens, image_tokens, loss_tokens, dict(kw)))
        kw.pop("costs", None)
        return self.inner.plan(ids, text_tokens, image_tokens, loss_tokens, **kw)


def test_per_step_metadata_is_gathered_from_the_dataset_arrays():
    n = 30
    text, images, loss = metadata(n)
    units = [[1 + (t // 64) for t in im] for im in images]
    costs = np.stack([np.arange(n) * 1.0, np.arange(n) * 2.0], axis=1)
    rec = Recording(microbatch.Planner(MODEL, ranks=2, seq_len=SEQ_LEN))
    s = BalancedBatchSampler(text, images, loss_tokens=loss, image_units=units, costs=costs,
                             global_batch_size=10, planner=rec, num_replicas=2, rank=0, seed=9)
    s.steps()
    assert len(rec.calls) == 3
    for (ids, t, (iv, io), lt, kw), batch in zip(rec.calls, s.batches()):
        assert ids.tolist() == batch.tolist()
        assert t.tolist() == text[batch].tolist() and lt.tolist() == loss[batch].tolist()
        assert [iv[io[k]:io[k + 1]].tolist() for k in range(len(batch))] == [list(images[i]) for i in batch]
        uv, uo = kw["image_units"]
        assert uo.tolist() == io.tolist()
        assert [uv[uo[k]:uo[k + 1]].tolist() for k in range(len(batch))] == [units[i] for i in batch]
        assert kw["costs"].tolist() == costs[batch].tolist()


@pytest.mark.parametrize(
    "kw, cls, item",
    [
        ({"global_batch_size": 1}, microbatch.SettingError, "global_batch_size"),
        ({"rank": 2}, microbatch.SettingError, "rank"),
        ({"num_replicas": 0}, microbatch.SettingError, "num_replicas"),
        ({"model": None}, microbatch.SettingError, "model"),
        ({"global_batch_size": 2.0}, microbatch.DtypeError, "global_batch_size"),
        ({"loss_tokens": [1, 2]}, microbatch.DtypeError, "loss_tokens"),
        ({"num_samples": 3}, microbatch.DtypeError, "num_samples"),
    ],
)
def test_bad_settings_raise_the_documented_errors(kw, cls, item):
    args = dict(global_batch_size=4, model=MODEL, seq_len=SEQ_LEN, num_replicas=2, rank=0)
    args.update(kw)
    with pytest.raises(cls) as e:
        BalancedBatchSampler([10, 20, 30, 40], **args)
    assert e.value.item == item


def test_bad_metadata_values_name_the_index():
    with pytest.raises(microbatch.InvalidValueError) as e:
        BalancedBatchSampler([10, -1, 30], global_batch_size=2, model=MODEL, seq_len=SEQ_LEN,
                             num_replicas=2, rank=0)
    assert e.value.item == 1
    s = BalancedBatchSampler([10, 5000, 30, 40], global_batch_size=2, model=MODEL, seq_len=SEQ_LEN,
                             num_replicas=2, rank=0, shuffle=False)
    with pytest.raises(microbatch.OversizeError):
        len(s)


def test_import_microbatch_does_not_import_torch():
    import subprocess
    import sys

    code = "import sys, microbatch; assert 'torch' not in sys.modules, 'torch imported'"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_plan_mismatch_error_is_a_microbatch_error_and_pickles():
    import pickle

    from microbatch.torch import PlanMismatchError, verify_plans

    e = pickle.loads(pickle.dumps(PlanMismatchError("ranks 1, 3 differ", ranks=[1, 3])))
    assert isinstance(e, microbatch.Error) and e.ranks == [1, 3] and e.item == 1 and e.kind == "PlanMismatch"
    verify_plans([1, 2, 3])  # without a process group there is nothing to compare
    s = samplers(30, 2, verify=True)[0]
    assert len(s.steps()) == 2  # verify=True without a process group: no collective, no error

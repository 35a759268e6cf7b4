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


def callable_samplers(n, world, calls=None, **kw):
    """``samplers`` with the same metadata given as a callable (``calls``: a list that records each read)."""
    text, images, loss = metadata(n)

    def meta(i):
        if calls is not None:
            calls.append(i)
        return int(text[i]), images[i], int(loss[i])

    kw.setdefault("global_batch_size", 24)
    return [
        BalancedBatchSampler(meta, num_samples=n, model=MODEL, seq_len=SEQ_LEN, num_replicas=world, rank=r, **kw)
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
    # len() plans the epoch from its last step back: the first row read is the last step's first index.
    with pytest.raises(microbatch.DtypeError) as e:
        len(bad)
    assert e.value.item == int(bad.batches()[-1][0])
    with pytest.raises(microbatch.DtypeError) as e:
        next(iter(bad))
    assert e.value.item == int(bad.batches()[0][0])


def test_a_metadata_callable_is_read_a_step_at_a_time_once_per_index():
    n = 24 * 5 + 7  # 6 steps
    calls = []
    s = callable_samplers(n, 2, calls, seed=3, sync="step", micro_steps=8)[0]
    assert len(s) == 6 * 8 and calls == []  # len() with fixed micro-steps reads nothing
    batches = s.batches()
    assert calls == []  # nor do the batches
    next(iter(s))
    assert calls == batches[0].tolist()  # the first micro-batch: the first step's rows, in its order
    s.steps()[1]
    assert calls == batches[0].tolist() + batches[1].tolist()
    fingerprints = [st.fingerprint for st in s.steps()]
    s.set_epoch(1)
    later = [st.fingerprint for st in s.steps()]
    assert sorted(calls) == list(range(n))  # every index read once, over two epochs
    arrays = samplers(n, 2, seed=3, sync="step", micro_steps=8)[0]
    assert [st.fingerprint for st in arrays.steps()] == fingerprints
    arrays.set_epoch(1)
    assert [st.fingerprint for st in arrays.steps()] == later
    # Without fixed micro-steps len() plans the epoch, so it reads every row.
    calls.clear()
    free = callable_samplers(n, 2, calls, seed=3)[0]
    len(free)
    assert sorted(calls) == list(range(n))


def test_a_row_that_raises_stays_unread_and_bad_rows_name_their_index():
    n = 48
    text, images, loss = metadata(n)
    order = samplers(n, 2, seed=1)[0].batches()
    broken = {int(order[1][5])}

    def meta(i):
        if i in broken:
            raise OSError(f"record {i} unreadable")
        return int(text[i]), images[i], int(loss[i])

    s = BalancedBatchSampler(meta, num_samples=n, global_batch_size=24, model=MODEL, seq_len=SEQ_LEN,
                             num_replicas=2, rank=0, seed=1)
    steps = s.steps()
    assert steps[0].index == 0
    with pytest.raises(OSError, match=f"record {int(order[1][5])} unreadable"):
        steps[1]
    broken.clear()  # read again when the step is planned again
    assert [st.fingerprint for st in steps] == [st.fingerprint for st in samplers(n, 2, seed=1)[0].steps()]

    def sampler(rows):
        return BalancedBatchSampler(rows, num_samples=n, global_batch_size=24, model=MODEL, seq_len=SEQ_LEN,
                                    num_replicas=2, rank=0, shuffle=False)

    cases = [
        (lambda i: (10, [], 3) if i < 7 else (10, []), microbatch.DtypeError, 7, "for every index or for none"),
        (lambda i: (-1 if i == 3 else 10, []), microbatch.InvalidValueError, 3, "text_tokens[3] is -1"),
        (lambda i: (10, [], 2**64 if i == 4 else 1), microbatch.InvalidValueError, 4, "loss_tokens[4]"),
        (lambda i: (10, 64 if i == 2 else []), microbatch.DtypeError, 2, "a scalar: wrap it in a list"),
        (lambda i: (10, [64.0] if i == 5 else [64]), microbatch.DtypeError, 5, "must hold integers"),
        (lambda i: (10, [2**32] if i == 6 else [64]), microbatch.InvalidValueError, 6, "holds 4294967296"),
        (lambda i: (10.5, []), microbatch.DtypeError, 0, "non-integer token count for index 0"),
    ]
    for rows, error, item, words in cases:
        with pytest.raises(error) as e:
            next(iter(sampler(rows)))  # step 0: indices 0-23 read in order (list() would ask len() first)
        assert e.value.item == item and words in str(e.value), (item, str(e.value))


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
    list(s.steps())
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


# --- lazy planning, one step at a time ------------------------------------------

# Fingerprints of every step (rank 0), len() of rank 1 and its first micro-batches, computed with the
# sampler that planned the whole epoch up front (before lazy planning): the plans must not change. A
# change of the planner that moves them re-pins them here, with the quality tables of BENCHMARKS.md.
PINNED = [
    ({"seed": 7}, ["0xa3601e8612daf68d", "0x5f5c32a00645cc21", "0xc1ff74f5578545b4", "0xb987065a7c0adbda",
                   "0xb596236e1aef6f6e"], 16, [[7, 12, 36, 97], [73], [53, 69]]),
    ({"seed": 7, "drop_last": True}, ["0xa3601e8612daf68d", "0x5f5c32a00645cc21", "0xc1ff74f5578545b4",
                                      "0xb987065a7c0adbda"], 15, [[7, 12, 36, 97], [73], [53, 69]]),
    ({"shuffle": False, "sync": "step", "micro_steps": 5},
     ["0xff2be7a3264e1b0a", "0xa0aa147bc15b5aea", "0x627d9ac3bf6808a", "0xc2cae9c63022f22a", "0xc8e80230f4988a0d"],
     25, [[1, 6, 22], [7, 16], [14]]),
    ({"seed": 3, "global_batch_size": 40, "sync": "micro-step"},
     ["0x45b465cecf67a774", "0x891842b08dc06c95", "0x9dc6584833dabaea"], 15, [[14, 28], [49, 91, 96], [43, 62, 93]]),
]


@pytest.mark.parametrize("kw, fingerprints, length, first", PINNED)
def test_the_plans_are_those_of_the_epoch_planned_up_front(kw, fingerprints, length, first):
    ranks = samplers(101, 3, **kw)
    assert [hex(s.fingerprint) for s in ranks[0].steps()] == fingerprints
    assert len(ranks[1]) == length == len(list(ranks[1]))
    assert list(ranks[1])[:3] == first
    # locality without origins of its own: DistributedSampler's ranks; origins alone leave the plan as it was.
    same = samplers(101, 3, origins="distributed", **kw)[0]
    assert [hex(s.fingerprint) for s in same.steps()] == fingerprints
    # The metadata as a callable, read a step at a time: the same plans.
    called = callable_samplers(101, 3, **kw)
    assert [hex(s.fingerprint) for s in called[0].steps()] == fingerprints
    assert len(called[1]) == length and list(called[1])[:3] == first


def counting(sampler):
    """Wraps the sampler's planner so that every plan call is recorded (by its first id)."""
    rec = Recording(sampler.planner)
    sampler.planner = rec
    return rec


def test_the_first_batch_plans_one_step_and_the_epoch_plans_each_step_once():
    n = 24 * 6
    s = samplers(n, 2, seed=1)[0]
    rec = counting(s)
    it = iter(s)
    first = next(it)
    assert len(rec.calls) == 1 and first == s.steps()[0].micro_batch(0)
    assert len(rec.calls) == 1  # steps()[0] was kept, not planned again
    rest = list(it)
    assert len(rec.calls) == 6
    assert len(s._planned) <= microbatch.torch.KEEP_STEPS
    assert sorted(i for b in [first] + rest for i in b) == sorted(
        int(i) for st in s.steps() for j in range(st.micro_steps) for i in st.micro_batch(j))


@pytest.mark.parametrize("workers", [0, 2])
def test_the_training_loop_and_the_loader_share_each_step(workers):
    """The documented loop: steps() in the loop, the sampler in a DataLoader; each step is planned once."""
    n = 24 * 10 + 7
    s = samplers(n, 2, seed=4)[0]
    rec = counting(s)
    batches = iter(DataLoader(Indices(n), batch_sampler=s, collate_fn=keep, num_workers=workers))
    seen = []
    for step in s.steps():
        for j in range(step.micro_steps):
            b = next(batches)
            assert b == step.micro_batch(j)
            seen += b
    assert next(batches, None) is None
    assert len(rec.calls) == len(s.batches()) == 11
    assert len({int(ids[0]) for ids, *_ in rec.calls}) == 11


def test_len_with_fixed_micro_steps_plans_nothing():
    s = samplers(100, 3, sync="step", micro_steps=5)[0]
    rec = counting(s)
    assert s.micro_steps == 5 and len(s) == 5 * 5
    assert rec.calls == []
    assert len(list(s)) == 25
    # Without micro_steps=, len() plans the epoch once, from its last step back, so iteration starts kept.
    free = samplers(24 * 12, 3)[0]
    rec = counting(free)
    total = len(free)
    assert free.micro_steps is None and len(rec.calls) == 12
    assert len(free) == total and len(rec.calls) == 12  # counted once per epoch
    assert sum(len(b) > -1 for b in free) == total
    kept = microbatch.torch.KEEP_STEPS
    assert len(rec.calls) == 12 + (12 - kept)  # the first KEEP_STEPS steps were kept from the count
    free.set_epoch(1)
    len(free)
    assert len(rec.calls) == 12 + (12 - kept) + 12


def test_plan_ahead_plans_the_next_step_on_a_thread_with_the_same_plans():
    n = 24 * 5
    plain = samplers(n, 2, seed=2)
    ahead = samplers(n, 2, seed=2, plan_ahead=True)
    assert epoch_of(ahead, n) == epoch_of(plain, n)
    s = samplers(n, 2, seed=2, plan_ahead=True)[0]
    rec = counting(s)
    it = iter(s.steps())
    next(it)
    s._planned[(0, 1)].result(timeout=60)  # step 1 is being planned (or done) in the background
    assert len(rec.calls) == 2
    assert [st.index for st in it] == [1, 2, 3, 4] and len(rec.calls) == 5


def test_an_error_planning_ahead_is_raised_at_its_step():
    text = [100] * 8 + [5000] + [100] * 7  # index 8 is longer than seq_len: step 2 of 4 (4 samples each)
    s = BalancedBatchSampler(text, global_batch_size=4, model=MODEL, seq_len=SEQ_LEN, num_replicas=2,
                             rank=0, shuffle=False, plan_ahead=True)
    got = []
    with pytest.raises(microbatch.OversizeError):
        for step in s.steps():
            got.append(step.index)
    assert got == [0, 1]
    with pytest.raises(microbatch.OversizeError):  # not kept: asking again plans (and raises) again
        s.steps()[2]
    assert s.steps()[3].index == 3


def test_steps_is_a_lazy_sequence_of_the_epoch():
    s = samplers(101, 3, seed=7)[0]
    steps = s.steps()
    assert len(steps) == 5 and repr(steps) == "Steps(epoch=0, steps=5, rank=0)"
    assert steps[-1].index == 4 and [st.index for st in steps[1:4]] == [1, 2, 3]
    assert steps == list(steps) and steps == s.steps() and steps != list(steps)[:4] and steps != 3
    with pytest.raises(IndexError):
        steps[5]
    s.set_epoch(1)
    assert steps[0].epoch == 0 and s.steps()[0].epoch == 1  # a view of the epoch it was made for
    assert steps[0].fingerprint != s.steps()[0].fingerprint


@pytest.mark.parametrize(
    "kw, item, words",
    [
        ({"micro_step": 3}, "micro_step", "did you mean 'micro_steps'"),
        ({"ranks": 2}, "ranks", "num_replicas="),
        ({"origin": [0] * 4}, "origin", "did you mean 'origins'"),
        ({"prefetch": True}, "prefetch", "planner settings"),
    ],
)
def test_unknown_keywords_are_a_setting_error(kw, item, words):
    with pytest.raises(microbatch.SettingError) as e:
        BalancedBatchSampler([10, 20, 30, 40], global_batch_size=4, model=MODEL, seq_len=SEQ_LEN,
                             num_replicas=2, rank=0, **kw)
    assert e.value.item == item and words in str(e.value)


# --- origins, locality, bytes ----------------------------------------------------


def distributed_sampler_ranks(n, world, seed, epoch):
    """Each index's rank under torch's own DistributedSampler (shuffle, seed, epoch)."""
    from torch.utils.data import DistributedSampler

    owner = {}
    for r in range(world):
        ds = DistributedSampler(Indices(n), num_replicas=world, rank=r, shuffle=True, seed=seed)
        ds.set_epoch(epoch)
        for i in ds:
            owner.setdefault(i, r)
    return owner


@pytest.mark.parametrize("epoch", [0, 1])
def test_locality_keeps_samples_on_their_distributed_sampler_rank(epoch):
    n, world, batch = 480, 4, 96
    owner = distributed_sampler_ranks(n, world, 5, epoch)
    free = samplers(n, world, global_batch_size=batch, seed=5, origins="distributed")[0]
    local = samplers(n, world, global_batch_size=batch, seed=5, locality=0.01)[0]
    for s in (free, local):
        s.set_epoch(epoch)
    moved = {}
    for name, s in (("free", free), ("local", local)):
        moved[name] = 0
        for st in s.steps():
            ex, plan = st.plan.exchange, st.plan
            assert ex is not None
            moves = ex.moves
            src = dict(zip(moves.ids.tolist(), moves.src.tolist()))
            for q in range(world):
                for i in plan.rank(q).tolist():
                    if owner[i] == q:
                        assert i not in src, f"{name}: sample {i} moves but is planned on its own rank {q}"
                    else:
                        assert src[i] == owner[i] and dict(zip(moves.ids.tolist(), moves.dst.tolist()))[i] == q
            r = plan.report
            assert r.samples_moved == len(ex)
            if name == "local":
                assert r.predicted <= r.locality_free * (1 + 0.01) * (1 + 1e-12)
            moved[name] += r.samples_moved
    # Every step keeps more samples home than the locality-free plan (the plan honours the origins).
    assert moved["local"] < 0.7 * moved["free"], moved


def test_origins_as_an_array_or_a_callable():
    n, world = 120, 3
    home = (np.arange(n) * 7) % world
    home[::11] = -1
    a = samplers(n, world, origins=home, locality=0.02)[0]
    c = samplers(n, world, origins=lambda i: int(home[i]), locality=0.02)[0]
    assert [s.fingerprint for s in a.steps()] == [s.fingerprint for s in c.steps()]
    for st in a.steps():
        moves = st.plan.exchange.moves
        assert all(home[i] == s for i, s in zip(moves.ids.tolist(), moves.src.tolist()))
        assert not set(moves.ids.tolist()) & set(np.flatnonzero(home == -1).tolist())  # held nowhere: no move
    bad = home.copy()
    bad[17] = world
    with pytest.raises(microbatch.InvalidValueError) as e:
        samplers(n, world, origins=bad)
    assert e.value.item == 17
    with pytest.raises(microbatch.DtypeError) as e:
        samplers(n, world, origins=home[:-1])
    assert e.value.item == "origins"
    with pytest.raises(microbatch.SettingError) as e:
        samplers(n, world, origins="local")
    assert e.value.item == "origins"
    later = samplers(n, world, origins=lambda i: 5 if i == 33 else 0, shuffle=False)[0]
    with pytest.raises(microbatch.InvalidValueError) as e:
        list(later)
    assert e.value.item == 33


def test_bytes_default_to_the_tokens_and_can_be_given():
    n, world = 96, 2
    text, images, _ = metadata(n)
    s = samplers(n, world, origins="distributed")[0]
    for st, batch in zip(s.steps(), s.batches()):
        expected = sum(16 * int(text[i]) + 2352 * int(sum(images[i])) for i in batch)
        assert st.plan.report.bytes_total == expected > 0
        ex = st.plan.exchange
        assert st.plan.report.bytes_moved == int(ex.bytes_out.sum()) > 0
    sizes = np.arange(n) * 1000 + 1
    given = samplers(n, world, origins="distributed", bytes=sizes)[0]
    called = samplers(n, world, origins="distributed", bytes=lambda i: int(sizes[i]))[0]
    for a, b, batch in zip(given.steps(), called.steps(), given.batches()):
        assert a.plan.report.bytes_total == b.plan.report.bytes_total == int(sizes[batch].sum())
    with pytest.raises(microbatch.SettingError) as e:
        samplers(n, world, bytes=sizes)
    assert e.value.item == "bytes"
    with pytest.raises(microbatch.InvalidValueError) as e:
        list(samplers(n, world, origins="distributed", bytes=lambda i: -1)[0])
    assert isinstance(e.value.item, int)

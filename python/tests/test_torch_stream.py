"""Real gloo runs of ``microbatch.torch.BalancedStream``: per-rank streams balanced, exchanged and trained.

pytest spawns one process group of 2 and one of 4 processes (gloo over
127.0.0.1). Every rank reads its own ``IterableDataset`` (``Shard``): sample
``k`` of rank ``r`` is a pure function of ``(r, k)`` (``make_sample``), a dict
of tensors of several shapes and dtypes (int64 tokens and labels, float32
pixel rows only when the sample has images, int32 image grid, bool mask,
float64 scalar, float16 matrix), so the pytest process can rebuild every
sample. The workers, in one process group each:

- train a tiny float64 language model on the stream's micro-batches for 3
  steps, the gradients averaged over the ranks after the last micro-step (what
  DDP with ``no_sync`` does), and plain SGD written out (DDP and torch.optim
  import torch._dynamo: 10-25 s a process on a loaded 2-core machine), without locality
  (token normalization) and with ``locality=0.0`` (sample normalization);
  ``torch.distributed.all_to_all_single`` is wrapped to count the bytes the
  exchange really sends; every received sample is compared, tensor by tensor
  (dtype, shape, values), with the original;
- run the faults: a loader that raises on one rank, samples that cannot be
  iterated on one rank, a metadata callable that raises on one rank, streams
  of different lengths under ``uneven="error"``, settings that differ (seen
  in the settings round, whose size does not depend on them: planner
  settings, the metadata callable, ``uneven``, and ``samples_per_rank``,
  which sizes the header round: gloo aborted a process before that round)
  and settings that only the plan's fingerprint shows, a planner that raises
  on one rank only, a sample that holds a string, received bytes that fail
  to decode on one rank (the all-to-all's output overwritten there), an
  epoch with fewer samples than ranks; and uneven streams under
  ``uneven="drain"`` (one rank without any sample at 4 ranks; the epoch's
  tail, fewer samples than ranks, joins the step before).

The pytest process checks: every sample exactly once per step (the expected
samples, by rank and position); the bytes counted on the wire equal the plan's
``exchange.bytes_out``/``bytes_in`` and ``report.bytes_moved``, and the sizes of
the moved samples computed here; fewer bytes move with locality; parameters
after every step within 1e-10 (relative) of one process training each step's
samples unsplit, one sample at a time; every fault raised the same error, with
the same message, on every rank, naming each differing setting and every
rank's value. A run in a group of its own has rank 1 stall in its loader past
the stream's ``timeout``: every rank raises ``StreamError`` instead of
hanging, rank 0 before the stall ends, with kind ``"Timeout"`` and a message
saying it timed out after the time it waited. A last run has the last rank
killed (SIGKILL) between steps: every other rank raises, those that exchange
with it kind ``"Communication"`` at once (not after the timeout), saying a
connection closed and how long they waited; at 4 ranks one that waits on a
rank that raised times out, and says so.
"""

from __future__ import annotations

import os
import re
import signal
import time

import numpy as np
import pytest

import microbatch

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.utils.data import IterableDataset  # noqa: E402

from dist_support import VOCAB, free_port, init_group, new_model, run_workers  # noqa: E402
from microbatch.torch import (  # noqa: E402
    BalancedStream,
    PlanMismatchError,
    StreamError,
    collate_packed,
    loss_tokens,
    sample_bytes,
    summed_loss,
)

LR = 0.5
PER_RANK, STEPS, SEQ_LEN, MODEL = 6, 3, 64, "qwen2.5-vl-7b"
RUNS = (("plain", None, "token"), ("locality", 0.0, "sample"))
# Shard lengths of the drain run, by rank (rank 2 of 4 has none; not multiples of PER_RANK): the
# reads go [3, 6, 0, 6], [0, 6, 0, 5], [0, 1, 0, 0]; the last read (1 sample, fewer than the ranks,
# every stream ended) joins the step before, so there are 2 steps.
DRAIN = (3, 13, 0, 11)
STALL = 2.5  # seconds rank 1's loader stalls in the stalled run (the stream's timeout: 0.5 s)
# The stream's timeout in the run where a rank is killed: the ranks that exchange with it see its
# connection close at once; in a ring of 4, a rank that waits on a rank that raised times out.
KILL_TIMEOUT = 3.0


def make_sample(rank, k):
    """Sample ``k`` of rank ``rank``'s shard: images as placeholder tokens (0) before the words."""
    rng = np.random.default_rng([rank, k, 7])
    words = rng.integers(1, VOCAB, int(rng.integers(2, 20)))
    images = [int(rng.choice([3, 6])) for _ in range([0, 0, 1, 2][(k + rank) % 4])]
    ids = np.concatenate([np.zeros(sum(images), dtype=np.int64), words])
    labels = ids.copy()
    labels[: sum(images) + int(rng.integers(0, len(words) // 2 + 1))] = -100
    if k % 5 == 3:
        labels[:] = -100
    sample = {
        "input_ids": torch.as_tensor(ids),
        "labels": torch.as_tensor(labels),
        "image_tokens": torch.as_tensor(images, dtype=torch.int64),
        "grid": torch.as_tensor(rng.integers(0, 9, (len(images), 3)), dtype=torch.int32),
        "mask": torch.as_tensor(rng.random(len(ids)) < 0.5),
        "weight": torch.tensor(float(rng.random()), dtype=torch.float64),
        "half": torch.as_tensor(rng.random((2, 2)), dtype=torch.float16),
    }
    if images:  # a key only some samples have
        sample["pixel_values"] = torch.as_tensor(rng.random((sum(images), 3)), dtype=torch.float32)
    return sample


def metadata(sample):
    """(text tokens, image token counts, loss tokens): what the planner is told."""
    return int((sample["input_ids"] > 0).sum()), sample["image_tokens"].tolist(), loss_tokens(sample["labels"])


class Shard(IterableDataset):
    """Rank ``rank``'s stream of ``n`` samples; ``fail_at``: raise there; ``bad_at``: a sample holding a string."""

    def __init__(self, rank, n, *, fail_at=None, bad_at=None, stall=0.0):
        self.rank, self.n, self.fail_at, self.bad_at, self.stall = rank, n, fail_at, bad_at, stall

    def __iter__(self):
        time.sleep(self.stall)
        for k in range(self.n):
            if k == self.fail_at:
                raise ValueError(f"corrupt record {k} in shard {self.rank}")
            s = make_sample(self.rank, k)
            if k == self.bad_at:
                s["caption"] = "a string"
            yield s


class Unreadable:
    """Samples that cannot be iterated at all (a shard that is missing): ``iter()`` raises."""

    def __iter__(self):
        raise FileNotFoundError("shard-0003.tar")


def failing_metadata(fails):
    """``metadata`` that raises on its fifth sample when ``fails``."""
    calls = []

    def meta(sample):
        calls.append(1)
        if fails and len(calls) == 5:
            raise KeyError("image_tokens")
        return metadata(sample)

    return meta


def sgd(model):
    """One plain SGD step, gradients then cleared (torch.optim imports torch._dynamo: seconds a process)."""
    with torch.no_grad():
        for p in model.parameters():
            p.add_(p.grad, alpha=-LR)
            p.grad = None


def flat(model):
    return torch.cat([p.detach().reshape(-1).clone() for p in model.parameters()])


def same_sample(a, b):
    """The same keys, and per key the same dtype, shape and bytes."""

    def raw(t):
        t = t.resolve_conj().resolve_neg()
        return t.contiguous().reshape(-1).view(torch.uint8) if t.numel() else torch.zeros(0, dtype=torch.uint8)

    return a.keys() == b.keys() and all(
        a[k].dtype == b[k].dtype and a[k].shape == b[k].shape and torch.equal(raw(a[k]), raw(b[k])) for k in a
    )


def stream(rank, shard, **kw):
    settings = dict(samples_per_rank=PER_RANK, metadata=metadata, model=MODEL, seq_len=SEQ_LEN, sync="step")
    if "planner" in kw:
        del settings["model"], settings["seq_len"], settings["sync"]
    settings.update(kw)
    return BalancedStream(shard, **settings)


def train(rank, world, locality, norm, sent):
    """3 steps of data-parallel training on the stream; per step the ids, bytes, parameters and wrongly received samples."""
    kw = {} if locality is None else {"locality": locality}
    model = new_model()
    steps = []
    for step in stream(rank, Shard(rank, STEPS * PER_RANK), **kw):
        wire = list(sent)  # this step's all-to-all (the stream exchanged before yielding the step)
        del sent[:]
        scale = step.loss_scale(norm, "mean")
        wrong = 0
        for j, samples in enumerate(step.batches):
            for sid, s in zip(step.micro_batch(j), samples):
                wrong += not same_sample(s, make_sample(*step.origin(sid)))
            batch = collate_packed([{"input_ids": s["input_ids"], "labels": s["labels"]} for s in samples])
            logits = model(batch["input_ids"], batch["position_ids"])
            (summed_loss(logits, batch["labels"], batch["cu_seqlens"], norm) * scale).backward()
        for p in model.parameters():  # DDP's average over ranks, once per step
            dist.all_reduce(p.grad)
            p.grad /= world
        sgd(model)
        ex, report = step.plan.exchange, step.plan.report
        steps.append({
            "ids": [step.micro_batch(j) for j in range(step.micro_steps)],
            "params": flat(model),
            "wire": wire,
            "bytes_sent": step.bytes_sent,
            "bytes_received": step.bytes_received,
            "bytes_out": int(ex.bytes_out[rank]),
            "bytes_in": int(ex.bytes_in[rank]),
            "bytes_moved": int(report.bytes_moved),
            "samples_moved": int(report.samples_moved),
            "wrong": wrong,
        })
    return steps


class FlakyPlanner:
    """A planner that raises at its ``fail_at``-th plan (counting from 0) when ``fail_at`` is set: one
    rank's planner failing where the others' plan (its repr, hence the stream's settings, is the same on
    every rank: the default one holds an address, so only the type counts)."""

    def __init__(self, fail_at=None):
        self.inner = microbatch.Planner(MODEL, ranks=dist.get_world_size(), seq_len=SEQ_LEN, sync="step")
        self.ranks, self.fail_at, self.calls = self.inner.ranks, fail_at, 0

    def plan(self, *args, **kw):
        self.calls += 1
        if self.calls - 1 == self.fail_at:
            raise RuntimeError("out of memory while planning")
        return self.inner.plan(*args, **kw)


def corrupt_received(rank, target):
    """Wraps ``all_to_all_single`` so that on rank ``target`` the bytes received at the first exchange after
    the first (which received any) are overwritten after they arrive: a sample that fails to decode there.
    Returns a function that restores the real one."""
    real = dist.all_to_all_single
    calls = []

    def wrapped(output, input, output_split_sizes=None, input_split_sizes=None, group=None, async_op=False):
        work = real(output, input, output_split_sizes, input_split_sizes, group=group, async_op=async_op)
        calls.append(output.numel())
        if rank == target and len(calls) > 1 and output.numel() and calls.count(-1) == 0:
            if work is not None:
                work.wait()
            output[:8] = 255  # the first record's sample id
            calls.append(-1)
        return work

    dist.all_to_all_single = wrapped
    return lambda: setattr(dist, "all_to_all_single", real)


def fault(run):
    """Runs a stream to its end or error: (steps yielded, what was raised)."""
    done = 0
    try:
        for _ in run():
            done += 1
    except (StreamError, PlanMismatchError) as e:
        return done, {"type": type(e).__name__, "kind": e.kind, "ranks": e.ranks, "message": str(e)}
    return done, None


def worker(rank, world, port, out):
    torch.set_num_threads(1)
    init_group(rank, world, port, timeout=60)
    # No worker_group: the stalled run at the end leaves the group unusable (no barrier, no destroy).
    sent = []
    real = dist.all_to_all_single

    def counting(output, input, output_split_sizes=None, input_split_sizes=None, **kw):
        sent.append((int(input.numel()), list(input_split_sizes), int(output.numel())))
        return real(output, input, output_split_sizes, input_split_sizes, **kw)

    dist.all_to_all_single = counting
    record = {name: train(rank, world, loc, norm, sent) for name, loc, norm in RUNS}
    dist.all_to_all_single = real

    last = world - 1
    faults = {
        "loader raises": fault(lambda: stream(rank, Shard(rank, 18, fail_at=14 if rank == last else None))),
        "uneven error": fault(lambda: stream(rank, Shard(rank, 9 if rank == 0 else 18), uneven="error")),
        "settings differ": fault(lambda: stream(rank, Shard(rank, 12), seq_len=SEQ_LEN + 64 * (rank == last))),
        # The header round's size depends on samples_per_rank: without the settings round first, gloo aborts.
        "samples_per_rank differs": fault(lambda: stream(rank, Shard(rank, 12), samples_per_rank=PER_RANK - (rank == last))),
        "uneven differs": fault(lambda: stream(rank, Shard(rank, 12), uneven="error" if rank == 0 else "drain")),
        "not iterable": fault(lambda: stream(rank, Unreadable() if rank == last else Shard(rank, 12))),
        "metadata differs": fault(lambda: stream(rank, Shard(rank, 12), **({"metadata": None} if rank == last else {}))),
        "plans differ": fault(lambda: stream(rank, Shard(rank, 12), **({"micro_steps": 4} if rank == last else {}))),
        "not a tensor": fault(lambda: stream(rank, Shard(rank, 12, bad_at=2 if rank == 0 else None))),
        "too few samples": fault(lambda: stream(rank, Shard(rank, 1 if rank == 0 else 0))),
        "metadata raises": fault(lambda: stream(rank, Shard(rank, 12), metadata=failing_metadata(rank == last))),
        "planner raises": fault(lambda: stream(rank, Shard(rank, 12), planner=FlakyPlanner(1 if rank == last else None))),
    }
    restore = corrupt_received(rank, last)
    faults["decode fails"] = fault(lambda: stream(rank, Shard(rank, 18)))
    restore()
    # Uneven streams drained: every sample once, every step planned over all ranks.
    drained, wrong, sizes = [], 0, []
    for step in stream(rank, Shard(rank, DRAIN[rank])):
        drained.append([i for j in range(step.micro_steps) for i in step.micro_batch(j)])
        sizes.append(step.samples)
        wrong += sum(
            not same_sample(s, make_sample(*step.origin(i)))
            for j, b in enumerate(step.batches)
            for i, s in zip(step.micro_batch(j), b)
        )
    record["faults"] = faults
    record["drain"] = {"ids": drained, "wrong": wrong, "sizes": sizes}
    torch.save(record, out / f"rank{rank}.pt")
    # Rank 1 stalls in its loader past the timeout, in a group of its own (left unusable); the
    # default group stays sound for the last run.
    stalled = dist.new_group(list(range(world)))
    dist.barrier()
    start = time.monotonic()
    _, err = fault(lambda: stream(rank, Shard(rank, 12, stall=STALL if rank == 1 else 0.0), timeout=0.5, group=stalled))
    torch.save({"err": err, "elapsed": time.monotonic() - start}, out / f"stall{rank}.pt")
    dist.barrier()
    # Last, as it ends a process: the last rank is killed (SIGKILL) once its step 1 is yielded, between
    # steps as in a training loop; the others record what they raised and how long after their step 1.
    err, since = None, time.monotonic()
    try:
        for step in stream(rank, Shard(rank, 4 * PER_RANK), timeout=KILL_TIMEOUT):
            if step.index == 1 and rank == last:
                os.kill(os.getpid(), signal.SIGKILL)
            since = time.monotonic()
    except StreamError as e:
        err = {"kind": e.kind, "ranks": e.ranks, "message": str(e), "cause": type(e.__cause__).__name__}
    torch.save({"err": err, "elapsed": time.monotonic() - since}, out / f"killed{rank}.pt")
    # Leave when every survivor is done: one that exits closes its connections to those still waiting.
    start = time.monotonic()
    while not all((out / f"killed{r}.pt").exists() for r in range(last)) and time.monotonic() - start < 30:
        time.sleep(0.05)
    os._exit(0)


def reference(batches, norm):
    """One process, no packing: each step's samples one by one, the loss normalized over the whole step."""
    model = new_model()
    params = []
    for batch in batches:
        total, tokens = torch.zeros((), dtype=torch.float64), 0
        for r, k in batch:
            s = make_sample(r, k)
            x, y = s["input_ids"], s["labels"]
            logits = model(x[None], torch.arange(x.shape[0])[None])[0]
            carries = [t for t in range(1, x.shape[0]) if y[t] != -100]
            losses = sum((F.cross_entropy(logits[t - 1], y[t]) for t in carries), torch.zeros((), dtype=torch.float64))
            if norm == "token":
                total, tokens = total + losses, tokens + len(carries)
            elif carries:
                total = total + losses / len(carries)
        loss = total / (tokens if norm == "token" else len(batch))
        loss.backward()
        sgd(model)
        params.append(flat(model))
    return params


def rel(a, b):
    return float((a - b).norm() / b.norm())


@pytest.mark.parametrize("world", [2, 4])
def test_stream_trains_the_unsplit_step_and_every_fault_raises_everywhere(world, tmp_path):
    codes = run_workers(worker, world, tmp_path, killed=[world - 1])
    assert codes == [0] * (world - 1) + [-signal.SIGKILL], f"exit codes {codes}: the last rank is killed, no other"
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(world)]
    moved = {}
    for name, _, norm in RUNS:
        runs = [r[name] for r in ranks]
        assert all(len(run) == STEPS for run in runs), f"{name}: not {STEPS} steps"
        expected = [sorted((r, k) for r in range(world) for k in range(s * PER_RANK, (s + 1) * PER_RANK))
                    for s in range(STEPS)]
        batches = []
        for s in range(STEPS):
            got = sorted(divmod(i, world)[::-1] for run in runs for ids in run[s]["ids"] for i in ids)
            assert got == expected[s], f"{name}, step {s}: trained {got}, expected every rank's samples once"
            batches.append(got)
            assert sum(run[s]["wrong"] for run in runs) == 0, f"{name}, step {s}: a sample arrived altered"
            # Bytes: counted at the all-to-all, from the plan, and from the moved samples' tensors.
            on_wire = 0
            for r, run in enumerate(runs):
                (total, splits, received), = run[s]["wire"]
                assert splits[r] == 0 and total == sum(splits), f"{name}, step {s}, rank {r}: sent to itself"
                assert total == run[s]["bytes_sent"] == run[s]["bytes_out"], f"{name}, step {s}, rank {r}: sent"
                assert received == run[s]["bytes_received"] == run[s]["bytes_in"], f"{name}, step {s}, rank {r}"
                on_wire += total
            own = sum(
                sample_bytes(make_sample(*divmod(i, world)[::-1]))
                for r, run in enumerate(runs) for ids in run[s]["ids"] for i in ids if i % world != r
            )
            assert on_wire == own == runs[0][s]["bytes_moved"], f"{name}, step {s}: {on_wire} {own}"
        moved[name] = sum(runs[0][s]["bytes_moved"] for s in range(STEPS))
        ref = reference(batches, norm)
        for s in range(STEPS):
            for r, run in enumerate(runs):
                assert rel(run[s]["params"], ref[s]) <= 1e-10, f"{name}, step {s}, rank {r}: {rel(run[s]['params'], ref[s]):.3g}"
    assert 0 < moved["plain"] and moved["locality"] < moved["plain"], moved

    last = world - 1
    others = "rank 0" if world == 2 else "ranks " + ", ".join(map(str, range(last - 1))) + f" and {last - 1}"
    rest = f"rank {last}" if world == 2 else "ranks " + ", ".join(map(str, range(1, last))) + f" and {last}"
    planner = f"Planner('{MODEL}', ranks={world}, seq_len={{}}, sync='step')"
    want = {
        "loader raises": (1, "StreamError", "StreamFailed", [last], f"corrupt record 14 in shard {last}"),
        "uneven error": (0, "StreamError", "StreamEnded", [0], "ended early"),
        "settings differ": (0, "PlanMismatchError", "PlanMismatch", [last],
                            f"step 0: the ranks' stream settings differ (planner is {planner.format(SEQ_LEN)} on "
                            f"{others} and {planner.format(SEQ_LEN + 64)} on rank {last}), so no rank reads a sample"),
        "samples_per_rank differs": (0, "PlanMismatchError", "PlanMismatch", [last],
                                     f"(samples_per_rank is {PER_RANK} on {others} and {PER_RANK - 1} on rank {last})"),
        "uneven differs": (0, "PlanMismatchError", "PlanMismatch", list(range(1, world)),
                           f"(uneven is 'error' on rank 0 and 'drain' on {rest})"),
        "not iterable": (0, "StreamError", "StreamFailed", [last],
                         f"step 0: rank {last}'s samples cannot be iterated: FileNotFoundError: shard-0003.tar"),
        "metadata differs": (0, "PlanMismatchError", "PlanMismatch", [last],
                             f"(metadata is test_torch_stream.metadata on {others} and "
                             f"microbatch._stream._default_metadata on rank {last})"),
        "plans differ": (0, "PlanMismatchError", "PlanMismatch", [last], "fingerprint"),
        "not a tensor": (0, "StreamError", "StreamFailed", [0], "step 0: sample 2 of rank 0's stream: 'caption' is a str"),
        "too few samples": (0, "StreamError", "TooFewSamples", list(range(1, world)), "1 samples in all"),
        "metadata raises": (0, "StreamError", "StreamFailed", [last],
                            f"sample 4 of rank {last}'s stream: the metadata callable raised KeyError"),
        "planner raises": (1, "StreamError", "StreamFailed", [last],
                           "step 1: planning failed: RuntimeError: out of memory while planning (on ranks"),
        "decode fails": (None, "StreamError", "Exchange", [last],
                         f"rank {last} could not decode what it received: InternalError: rank "),
    }
    for name, (steps, kind_type, kind, bad, text) in want.items():
        seen = [r["faults"][name] for r in ranks]
        for r, (done, err) in enumerate(seen):
            assert err is not None, f"{name}: rank {r} raised nothing"
            if steps is None:  # the first exchange after the first that received bytes there: a later step
                steps = seen[0][0]
                assert steps >= 1, f"{name}: raised at step {steps}, before a step was yielded"
            assert (done, err["type"], err["kind"], err["ranks"]) == (steps, kind_type, kind, bad), f"{name}, rank {r}: {done} {err}"
            assert text in err["message"], f"{name}, rank {r}: {err['message']}"
        assert len({err["message"] for _, err in seen}) == 1, f"{name}: the ranks' messages differ: {seen}"

    drains = [r["drain"] for r in ranks]
    assert sum(d["wrong"] for d in drains) == 0
    assert len({len(d["ids"]) for d in drains}) == 1
    trained = sorted(divmod(i, world)[::-1] for d in drains for step in d["ids"] for i in step)
    assert trained == sorted((r, k) for r in range(world) for k in range(DRAIN[r])), "drain: not every sample once"
    assert len(drains[0]["sizes"]) == 2 and min(drains[0]["sizes"]) >= world, drains[0]["sizes"]

    # The stalled rank: every rank raises (the others when the timeout passes, before the stall ends).
    stalls = [torch.load(tmp_path / f"stall{r}.pt") for r in range(world)]
    for r, g in enumerate(stalls):
        assert g["err"] is not None and g["err"]["type"] == "StreamError", f"stall, rank {r}: {g}"
        assert g["err"]["kind"] in ("Timeout", "Communication"), f"stall, rank {r}: {g}"
    assert stalls[0]["err"]["kind"] == "Timeout" and stalls[0]["elapsed"] < STALL, stalls[0]
    # Rank 0 says it timed out, in which round, after how long (at least the timeout, at most its run).
    said = stalls[0]["err"]["message"]
    m = re.search(r"rank 0 timed out in the (\w+ round) after waiting ([0-9.]+) s \(its timeout is 0.5 s\)", said)
    assert m and m.group(1) == "header round" and 0.5 <= float(m.group(2)) <= stalls[0]["elapsed"] + 0.05, said

    # The killed rank: every survivor raises, saying what happened and after how long it really waited;
    # the ones that exchange with the dead rank see its connection close at once (not after the timeout).
    at_once = []
    for r in range(last):
        got = torch.load(tmp_path / f"killed{r}.pt")
        err, elapsed = got["err"], got["elapsed"]
        assert err is not None and err["ranks"] == [r] and err["cause"] == "RuntimeError", f"killed, rank {r}: {got}"
        said = err["message"]
        rounds = "(header round|metadata round|fingerprint round|exchange|confirm round)"
        if err["kind"] == "Communication":
            m = re.fullmatch(
                rf"step 2: rank {r}'s {rounds} failed after ([0-9.e-]+) s \(its timeout is {KILL_TIMEOUT:g} s\): "
                r"the connection to another rank closed \(.*\) \(RuntimeError: .+\); the process group cannot "
                r"be used any more",
                said,
            )
            assert m and "timed out" not in said, f"killed, rank {r}: {said}"
            assert float(m.group(2)) <= elapsed + 0.01 < KILL_TIMEOUT, f"killed, rank {r}: {elapsed:.3g} s: {said}"
            at_once.append(r)
        else:  # waiting on a survivor that raised: a timeout, said so
            m = re.match(rf"step 2: rank {r} timed out in the {rounds} after waiting ([0-9.]+) s ", said)
            assert err["kind"] == "Timeout" and m, f"killed, rank {r}: {err}"
            assert KILL_TIMEOUT <= float(m.group(2)) <= elapsed + 0.05, f"killed, rank {r}: {elapsed:.3g} s: {said}"
    assert at_once, "no rank saw the killed rank's connection close"
    if world == 2:
        assert at_once == [0]


def test_the_round_helpers_docstring_examples_run():
    """microbatch._step's examples: the settings round, the words of a failed collective."""
    import doctest

    import microbatch._step

    result = doctest.testmod(microbatch._step, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0, result


def test_the_stream_docstring_examples_run():
    """microbatch._stream's examples (test_doctests skips private modules; its names are microbatch.torch's)."""
    import doctest

    import microbatch._stream

    result = doctest.testmod(microbatch._stream, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0, result


# --- one process: the wire format and the settings ----------------------------------------


def test_the_wire_format_round_trips_every_dtype_and_shape_in_sample_bytes():
    from microbatch._stream import _decode, _encode

    g = torch.Generator().manual_seed(0)
    samples = [
        {"a": torch.randn(3, 5, generator=g, dtype=torch.float64).t(),  # not contiguous
         "b": torch.tensor(7, dtype=torch.int16), "c": torch.zeros(0, 4, dtype=torch.bfloat16)},
        {"a": torch.randn(2, generator=g).to(torch.complex128), "d": torch.rand(3, generator=g) < 0.5,
         "e": np.arange(5, dtype=np.uint8)},
        {},
        {"b": torch.randn(3, 1, generator=g).to(torch.bfloat16), "c": torch.arange(6).to(torch.uint32).reshape(2, 3)[:, 1:],
         "f": torch.randn(2, 2, generator=g).to(torch.float8_e4m3fn)},
        # A complex128 at an offset that is 8 but not 16 bytes aligned (copied), one with the conjugate bit.
        {"e": torch.zeros(1, dtype=torch.uint8), "a": torch.randn(3, generator=g, dtype=torch.complex128).conj()},
    ]
    keys = {"a": 0, "b": 1, "c": 2, "d": 3, "e": 4, "f": 5}
    table = list(keys)
    records = [(10 + i, {k: torch.as_tensor(v) for k, v in s.items()}) for i, s in enumerate(samples)]
    sizes = [sample_bytes(s) for s in samples]
    # Two destinations (chunks): records 0-2, then 3-4; an empty chunk between them.
    buf = _encode([records[:3], [], records[3:]], keys, sum(sizes), torch.device("cpu"))
    assert buf.numel() == sum(sizes) and sum(sizes) % 8 == 0
    first = sum(sizes[:3])
    out = _decode(buf[:first], None, [10, 11, 12], table, 1)
    out.update(_decode(buf[first:], None, [13, 14], table, 2))
    for i, (_, s) in enumerate(records):
        assert same_sample(out[10 + i], s), i
        for k, t in out[10 + i].items():  # views of the received buffer, no copy (but the misaligned one)
            if t.numel() and t.dtype != torch.complex128:
                assert t.untyped_storage().data_ptr() == buf.untyped_storage().data_ptr(), (i, k)
    assert out[14]["a"].untyped_storage().data_ptr() != buf.untyped_storage().data_ptr()
    assert torch.equal(out[14]["a"], records[4][1]["a"].resolve_conj())
    with pytest.raises(microbatch.InternalError, match="plan expects 14"):
        _decode(buf[:first], None, [14], table, 1)
    with pytest.raises(microbatch.InternalError, match="fewer than its samples' headers say"):
        _decode(buf[:96], None, [10], table, 1)
    with pytest.raises(microbatch.InternalError, match="where its samples take"):
        _decode(buf[:first], None, [10, 11], table, 1)  # a chunk longer than the samples the plan expects


def corrupted(word, value):
    """Sample 0 (one float32 tensor of shape (2, 3) under key 0) encoded, its header word ``word`` replaced."""
    from microbatch._stream import _encode

    s = {"x": torch.ones(2, 3)}
    buf = _encode([[(0, s)]], {"x": 0}, sample_bytes(s), torch.device("cpu")).clone()
    buf.numpy().view(np.int64)[word] = value
    return buf


@pytest.mark.parametrize(
    "word, value, words",
    [
        (1, 2**40, "with 1099511627776 tensors"),  # the record's tensor count
        (2, 5, "header that is not one"),  # a key outside the table
        (3, 99, "header that is not one"),  # a dtype code outside the table
        (3, 8 | 0x200, "header that is not one"),  # an unknown flag
        (4, 65, "of 65 dimensions"),
        (5, -2, "of shape [-2, 3]"),
        (5, 2**40, "fewer than its samples' headers say"),
        (6, 2, "where its samples take"),  # fewer bytes than the chunk holds
    ],
)
def test_a_corrupt_header_raises_naming_the_sending_rank(word, value, words):
    from microbatch._stream import _decode

    with pytest.raises(microbatch.InternalError, match="rank 3 sent") as e:
        _decode(corrupted(word, value), None, [0], ["x"], 3)
    assert words in str(e.value)


def test_a_dtype_this_torch_lacks_is_named(monkeypatch):
    """A rank whose torch has no uint16 (older versions) receiving one: the codes are fixed, so it knows."""
    import microbatch._stream as stream_module
    from microbatch._stream import _decode, _encode

    s = {"x": torch.arange(3).to(torch.uint16)}
    buf = _encode([[(0, s)]], {"x": 0}, sample_bytes(s), torch.device("cpu"))
    code = stream_module._DTYPE_NAMES.index("uint16")
    monkeypatch.setattr(stream_module, "_DTYPES", tuple(None if i == code else d for i, d in enumerate(stream_module._DTYPES)))
    with pytest.raises(microbatch.InternalError, match="of dtype torch.uint16, which this rank's torch"):
        _decode(buf, None, [0], ["x"], 1)


@pytest.fixture
def one_rank(monkeypatch):
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_stream_errors_pickle_with_their_ranks_and_step():
    import pickle

    e = pickle.loads(pickle.dumps(StreamError("rank 1 failed", ranks=[1, 3], step=2, kind="StreamEnded")))
    assert (str(e), e.ranks, e.step, e.kind, e.item) == ("rank 1 failed", [1, 3], 2, "StreamEnded", 1)
    assert isinstance(e, microbatch.Error) and isinstance(e, RuntimeError)


def test_settings_that_do_not_work_are_named():
    with pytest.raises(microbatch.SettingError, match="initialized torch.distributed"):
        BalancedStream([], samples_per_rank=2, model=MODEL, seq_len=SEQ_LEN)


def test_settings_errors_on_one_rank(one_rank):
    with pytest.raises(microbatch.SettingError, match="unknown planner setting 'micro_step'") as e:
        BalancedStream([], samples_per_rank=2, model=MODEL, seq_len=SEQ_LEN, micro_step=2)
    assert e.value.item == "micro_step"
    with pytest.raises(microbatch.SettingError, match="unknown uneven policy 'stop'"):
        BalancedStream([], samples_per_rank=2, model=MODEL, seq_len=SEQ_LEN, uneven="stop")
    with pytest.raises(microbatch.SettingError, match="plans for 2 ranks but the process group has 1"):
        BalancedStream([], samples_per_rank=2, planner=microbatch.Planner(MODEL, ranks=2, seq_len=SEQ_LEN))
    with pytest.raises(microbatch.SettingError, match="samples_per_rank"):
        BalancedStream([], samples_per_rank=0, model=MODEL, seq_len=SEQ_LEN)
    # One rank: every sample stays, in plan order; an empty stream yields no step.
    steps = list(stream(0, Shard(0, 8)))
    assert [s.samples for s in steps] == [6, 2] and all(s.bytes_sent == s.bytes_received == 0 for s in steps)
    assert sorted(i for s in steps for j in range(s.micro_steps) for i in s.micro_batch(j)) == list(range(8))
    assert list(stream(0, Shard(0, 0))) == []


def test_a_read_with_many_images_sends_its_metadata_in_a_second_round(one_rank):
    """The header carries 9 words a sample; a read with more images (here the first: 22 images for 4
    samples, 42 words > 36) sends its metadata in a second all-gather. The plans are those of the planner
    on the same metadata, origins and wire sizes, whichever way the metadata travelled."""
    counts = [12, 0, 9, 1, 1, 0, 2, 3]  # reads of 4: 42 words (a second round), then 26 (in the header)
    shard = [{"input_ids": torch.arange(1, 30 + k), "image_tokens": torch.full((c,), 4 + k)} for k, c in enumerate(counts)]

    def meta(s):
        return int(s["input_ids"].shape[0]), s["image_tokens"].tolist(), int(s["input_ids"].shape[0])

    steps = list(BalancedStream(shard, samples_per_rank=4, metadata=meta, model=MODEL, seq_len=512))
    planner = microbatch.Planner(MODEL, ranks=1, seq_len=512)
    assert len(steps) == 2
    for j, st in enumerate(steps):
        part = shard[4 * j : 4 * j + 4]
        want = planner.plan(list(range(4 * j, 4 * j + 4)), [meta(s)[0] for s in part], [meta(s)[1] for s in part],
                            [meta(s)[2] for s in part], origins=[0] * 4, bytes=[sample_bytes(s) for s in part])
        assert st.fingerprint == want.fingerprint, j

"""A real torch.distributed run: DDP on the sampler's micro-batches equals one process on the unsplit steps.

pytest spawns 2 and 4 processes (gloo over 127.0.0.1). Each trains a tiny
float64 language model (token + position embeddings, a linear head, per-token
cross-entropy on the loss tokens only) wrapped in DistributedDataParallel on
the micro-batches of :class:`microbatch.torch.BalancedBatchSampler`, with
``no_sync`` during accumulation and SGD, for every sync model, both
normalizations and a fixed micro-step count that leaves micro-batches empty.
The parameters after every optimizer step must equal those of a single-process
reference trained on the unsplit global batches (no packing, one sample at a
time) to 1e-10 relative; the same run with a per-micro-batch mean (what naive
trainers do) must differ by more than 1e-6, so that the test can fail.

The dataset has varied lengths, samples with images and samples without loss
tokens. An image enters the model input as placeholder tokens (token 0, one per
image token, labels -100), so the packed rows are as long as the planner
assumed; the loss counts text positions only.

Then, with ``verify=True``: ranks that plan different steps (another seed, one
sample's metadata, another epoch length) raise ``PlanMismatchError`` on every
rank at the first step that differs; a rank whose metadata callable raises at
step 2 (the others plan it) makes every rank raise ``PlanMismatchError`` of kind
``"PlanFailed"`` there, through ``steps()`` and through ``verify()``, instead of
leaving the others waiting in the collective; a step that every rank's planner
refuses alike raises the planner's own error (``OversizeError``) everywhere;
``verify()`` and ``verify_plans`` compare whole lists (another seed, another
length, and lists that agree).

The workers save what they trained (parameters and ids per step) to files in a
temporary directory; the reference and the assertions run in the pytest process.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

import microbatch  # noqa: E402
from dist_support import VOCAB, init_group, new_model, run_workers, spawn, worker_group  # noqa: E402
from microbatch.torch import (  # noqa: E402
    BalancedBatchSampler,
    PlanMismatchError,
    collate_packed,
    loss_tokens,
    summed_loss,
    verify_plans,
)

ODD = 32  # the first sample of step 2 (seed SEED): one rank's copy of it differs in the mismatch case
SAMPLES, GLOBAL_BATCH, SEQ_LEN, SEED, LR = 54, 16, 48, 3, 0.5
MODEL = "qwen2.5-vl-7b"
SYNCS = ("step", "micro-step", "phase")
NORMALIZATIONS = ("token", "sample")
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "train_ddp.py"


def configs(world):
    """(sync, normalization, micro_steps, other sampler settings): every sync x normalization with the
    fewest micro-steps, two with more micro-steps than a rank has samples (empty micro-batches), and
    two whose plans keep samples on their DistributedSampler rank (locality, planned ahead on a thread)."""
    out = [(s, n, None, {}) for s in SYNCS for n in NORMALIZATIONS]
    empty = GLOBAL_BATCH // world + 1
    out += [("step", "sample", empty, {}), ("micro-step", "token", empty, {})]
    out += [("step", "token", None, {"locality": 0.01, "plan_ahead": True}),
            ("phase", "sample", empty, {"locality": 0.0, "ranks_per_node": 2})]
    return out


def make_dataset():
    """Varied lengths, images as placeholder tokens, prompts masked, every 7th sample without loss tokens."""
    rng = np.random.default_rng(11)
    data, text, images, loss = [], [], [], []
    for i in range(SAMPLES):
        t = int(rng.integers(2, 26))
        imgs = [int(rng.choice([3, 6])) for _ in range([0, 0, 1, 2][i % 4])]
        words = rng.integers(1, VOCAB, t)
        ids = np.concatenate([np.zeros(sum(imgs), dtype=np.int64), words])
        labels = ids.copy()
        labels[: sum(imgs) + int(rng.integers(0, t // 2 + 1))] = -100  # images and the prompt
        if i % 7 == 3:
            labels[:] = -100
        data.append({"input_ids": torch.as_tensor(ids), "labels": torch.as_tensor(labels)})
        text.append(t)
        images.append(imgs)
        loss.append(loss_tokens(labels))
    assert sum(1 for v in loss if v == 0) >= 5 and sum(1 for im in images if im) >= 20
    return data, np.array(text), images, np.array(loss)


def flat(model):
    return torch.cat([p.detach().reshape(-1).clone() for p in model.parameters()])


def sampler_for(data_meta, world, rank, sync, micro_steps, *, seed=SEED, verify=False, **settings):
    _, text, images, loss = data_meta
    if micro_steps is not None:
        settings["micro_steps"] = micro_steps
    return BalancedBatchSampler(
        text, images, loss_tokens=loss, global_batch_size=GLOBAL_BATCH, model=MODEL, seq_len=SEQ_LEN,
        sync=sync, num_replicas=world, rank=rank, seed=seed, verify=verify, **settings,
    )


def naive_loss(logits, batch, normalization, accumulation):
    """What naive trainers do: the micro-batch's own mean, divided by the accumulation steps."""
    labels = batch["labels"].reshape(-1)
    summed = summed_loss(logits, batch["labels"], batch["cu_seqlens"], normalization)
    if normalization == "token":
        count = int((labels[1:] != -100).sum())
    else:
        count = batch["cu_seqlens"].shape[0] - 1
    return summed / max(count, 1) / accumulation


def train_worker(rank, world, port, out):
    torch.set_num_threads(1)
    with worker_group(rank, world, port):
        meta = make_dataset()
        for c, (sync, norm, micro_steps, extra) in enumerate(configs(world)):
            for mode in ("scaled", "naive"):
                # Rank and world size come from the process group.
                sampler = sampler_for(meta, None, None, sync, micro_steps, verify=True, **extra)
                assert (sampler.rank, sampler.num_replicas) == (rank, world)
                loader = DataLoader(meta[0], batch_sampler=sampler, collate_fn=collate_packed)
                model = DDP(new_model())
                opt = torch.optim.SGD(model.parameters(), lr=LR)
                record = {"params": [], "ids": [], "micro_steps": [], "empty": 0, "moved": 0}
                batches = iter(loader)
                for step in sampler.steps():
                    scale = step.loss_scale(norm, "mean")
                    ids = []
                    for j in range(step.micro_steps):
                        batch = next(batches)
                        ids += step.micro_batch(j)
                        record["empty"] += batch["input_ids"].shape[1] == 0
                        last = j == step.micro_steps - 1
                        with contextlib.nullcontext() if last else model.no_sync():
                            logits = model(batch["input_ids"], batch["position_ids"])
                            if mode == "scaled":
                                loss = summed_loss(logits, batch["labels"], batch["cu_seqlens"], norm) * scale
                            else:
                                loss = naive_loss(logits, batch, norm, step.micro_steps)
                            loss.backward()
                    opt.step()
                    opt.zero_grad(set_to_none=True)
                    record["params"].append(flat(model.module))
                    record["ids"].append(ids)
                    record["micro_steps"].append(step.micro_steps)
                    if step.plan.exchange is not None:
                        record["moved"] += step.plan.report.samples_moved
                assert next(batches, None) is None, "the loader yields more micro-batches than the steps own"
                torch.save(record, out / f"{c}-{mode}-{rank}.pt")
        # Ranks that plan different steps raise on every rank, at the first step that differs (verify=True
        # checks each step as steps() yields it): another seed differs at step 0; one sample's metadata
        # (index ODD, in step 2) at step 2; another epoch length (drop_last) at step 0, never a hang.
        last = world - 1
        text, images = meta[1].copy(), list(meta[2])
        if rank == last:
            text[ODD], images[ODD] = 40, []
        huge = meta[1].copy()
        huge[ODD] = 10 * SEQ_LEN  # longer than a packed sequence on every rank: the planner refuses step 2

        def rows(i):
            """The metadata as a callable; the last rank's read of index ODD fails (a corrupt record)."""
            if rank == last and i == ODD:
                raise ValueError(f"corrupt record {i}")
            return int(meta[1][i]), meta[2][i], int(meta[3][i])

        def by_callable():
            return BalancedBatchSampler(rows, num_samples=SAMPLES, global_batch_size=GLOBAL_BATCH, model=MODEL,
                                        seq_len=SEQ_LEN, seed=SEED, sync="phase", verify=True)

        cases = {
            "seed": sampler_for(meta, None, None, "phase", None, seed=SEED + (rank == last), verify=True),
            "metadata": sampler_for((meta[0], text, images, meta[3]), None, None, "phase", None, verify=True),
            "length": BalancedBatchSampler(meta[1], meta[2], global_batch_size=GLOBAL_BATCH, model=MODEL,
                                           seq_len=SEQ_LEN, seed=SEED, verify=True, drop_last=rank == 0),
            "fails on one rank": by_callable(),
            "fails everywhere": sampler_for((meta[0], huge, meta[2], meta[3]), None, None, "phase", None, verify=True),
        }
        result = {}
        for name, sampler in cases.items():
            seen = []
            try:
                for step in sampler.steps():
                    seen.append(step.index)
                result[name] = (None, None, None, seen, "")
            except microbatch.Error as e:
                result[name] = (type(e).__name__, e.kind, getattr(e, "ranks", None), seen, str(e))
        # The whole epoch at once (every rank's fingerprints in a second all-gather): a failure planning,
        # another seed, lists of other lengths, and plans that agree.
        checks = {
            "verify()": lambda: by_callable().verify(),
            "verify() seed": lambda: sampler_for(meta, None, None, "phase", None, seed=SEED + (rank == last)).verify(),
            "verify_plans lengths": lambda: verify_plans([7, 8, 9][: 2 + (rank == last)]),
            "verify() agrees": lambda: sampler_for(meta, None, None, "phase", None).verify(),
        }
        for name, check in checks.items():
            try:
                check()
                result[name] = (None, None, None, [], "")
            except microbatch.Error as e:
                result[name] = (type(e).__name__, e.kind, getattr(e, "ranks", None), [], str(e))
        torch.save(result, out / f"mismatch-{rank}.pt")


def reference(meta, batches, normalization):
    """One process, no packing: each sample alone, the step's loss the mean over its loss tokens
    (token) or over its samples of each sample's mean token loss (sample); parameters after each step."""
    data = meta[0]
    model = new_model()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    params = []
    for batch in batches:
        total, tokens = 0.0, 0
        for i in batch.tolist():
            x, y = data[i]["input_ids"], data[i]["labels"]
            logits = model(x[None], torch.arange(x.shape[0])[None])[0]
            carries = [t for t in range(1, x.shape[0]) if y[t] != -100]
            losses = [F.cross_entropy(logits[t - 1], y[t]) for t in carries]
            if normalization == "token":
                total = total + sum(losses, torch.zeros((), dtype=torch.float64))
                tokens += len(carries)
            elif carries:
                total = total + sum(losses) / len(carries)
        loss = total / (tokens if normalization == "token" else len(batch))
        opt.zero_grad()
        loss.backward()
        opt.step()
        params.append(flat(model))
    return params


def rel(a, b):
    return float((a - b).norm() / b.norm())


@pytest.mark.parametrize("world", [2, 4])
def test_ddp_on_the_plan_equals_the_unsplit_step(world, tmp_path, monkeypatch):
    spawn(train_worker, world, tmp_path)
    meta = make_dataset()
    start = flat(new_model())
    batches = sampler_for(meta, world, 0, "phase", None).batches()
    assert len(batches) >= 3 and len({len(b) for b in batches}) > 1  # a partial last step
    assert int(batches[2][0]) == ODD
    refs = {n: reference(meta, batches, n) for n in NORMALIZATIONS}
    empty = 0
    for c, (sync, norm, micro_steps, extra) in enumerate(configs(world)):
        what = f"world {world}, sync {sync!r}, normalization {norm!r}, micro_steps {micro_steps}, {extra}"
        runs = {m: [torch.load(tmp_path / f"{c}-{m}-{r}.pt") for r in range(world)] for m in ("scaled", "naive")}
        ranks = runs["scaled"]
        assert len({tuple(r["micro_steps"]) for r in ranks}) == 1, f"{what}: ranks ran different micro-steps"
        empty += sum(r["empty"] for r in ranks)
        for s, batch in enumerate(batches):
            ids = sorted(i for r in ranks for i in r["ids"][s])
            assert ids == sorted(batch.tolist()), f"{what}: step {s} trained other samples than its batch"
            ref = refs[norm][s]
            for r in ranks:
                assert rel(r["params"][s], ref) <= 1e-10, f"{what}: step {s} parameters differ: {rel(r['params'][s], ref):.3g}"
                update = rel(r["params"][s] - start, ref - start)
                assert update <= 1e-9, f"{what}: step {s} update differs by {update:.3g}"
        last = len(batches) - 1
        naive = rel(runs["naive"][0]["params"][last], refs[norm][last])
        assert naive > 1e-6, f"{what}: the naive per-micro-batch mean matches the reference ({naive:.3g}): the test cannot fail"
        if "locality" in extra:
            # The plans with locality move fewer samples than the same plans without it where the
            # tolerance leaves room (0.01); at tolerance 0 only moves that keep every phase's time
            # are allowed and a plan may have none, so there it moves, step by step, at most the
            # bytes of the plan without it (the crate's guarantee: bytes first, then samples).
            free = sampler_for(meta, world, 0, sync, micro_steps, origins="distributed")
            moved = sum(st.plan.report.samples_moved for st in free.steps())
            if extra["locality"] > 0:
                assert ranks[0]["moved"] < moved, f"{what}: locality moved {ranks[0]['moved']} samples, without it {moved}"
            else:
                near = sampler_for(meta, world, 0, sync, micro_steps, origins="distributed", **extra)
                for a, b in zip(near.steps(), free.steps()):
                    ka = (a.plan.report.bytes_moved, a.plan.report.samples_moved)
                    kb = (b.plan.report.bytes_moved, b.plan.report.samples_moved)
                    assert ka <= kb, f"{what}: locality moved (bytes, samples) {ka}, without it {kb}"
    assert empty > 0, "no configuration ran an empty micro-batch"
    last = world - 1
    # (error, kind, ranks, steps yielded before it, words of the message) on every rank.
    want = {
        "seed": ("PlanMismatchError", "PlanMismatch", [last], [], "at step 0,"),
        "metadata": ("PlanMismatchError", "PlanMismatch", [last], [0, 1], "at step 2,"),
        "length": ("PlanMismatchError", "PlanMismatch", list(range(1, world)), [], "steps in the epoch"),
        "fails on one rank": ("PlanMismatchError", "PlanFailed", [last], [0, 1],
                              f"planning step 2 failed: ValueError: corrupt record {ODD}"),
        "fails everywhere": ("OversizeError", "Oversize", None, [0, 1], ""),
        "verify()": ("PlanMismatchError", "PlanFailed", [last], [],
                     f"planning step 2 failed: ValueError: corrupt record {ODD}"),
        "verify() seed": ("PlanMismatchError", "PlanMismatch", [last], [], "at step 0,"),
        "verify_plans lengths": ("PlanMismatchError", "PlanMismatch", [last], [],
                                 f"rank {last} planned 3 steps where rank 0 planned 2"),
        "verify() agrees": (None, None, None, [], ""),
    }
    got = [torch.load(tmp_path / f"mismatch-{r}.pt") for r in range(world)]
    for name, (error, kind, ranks, seen, words) in want.items():
        for r in range(world):
            assert got[r][name][:4] == (error, kind, ranks, seen), f"rank {r}, {name}: {got[r][name]}"
            assert words in got[r][name][4], f"rank {r}, {name}: {got[r][name][4]}"
        assert len({g[name][4] for g in got}) == 1, f"{name}: the ranks' messages differ"


def test_example_train_ddp_runs():
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo")
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), "--world-size", "2", "--epochs", "1"],
        capture_output=True, text=True, timeout=240, env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "step 0" in done.stdout and "done" in done.stdout, done.stdout


def verify_worker(rank, world, port, out, how):
    """Rank 1 ends its process (``how="killed"``: SIGKILL) or never calls (``"hangs"``: sleeps past the
    group's 2 s timeout, then leaves) while rank 0 verifies its plans: rank 0 writes what it raised."""
    import signal
    import time

    import datetime

    init_group(rank, world, port)  # joining takes the default timeout (processes start slowly on a loaded machine)
    group = dist.new_group(timeout=datetime.timedelta(seconds=2.0))  # the timeout of verify_plans' wait
    dist.barrier(group)  # every connection is up: what follows is about a peer, not about joining
    if rank == 1:
        if how == "killed":
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(5.0)
        os._exit(0)
    since = time.monotonic()
    try:
        verify_plans([1, 2, 3], group=group)
        got = None
    except Exception as e:  # noqa: BLE001 - what the test is about: any class is recorded and checked
        got = {"type": type(e).__name__, "kind": getattr(e, "kind", None), "ranks": getattr(e, "ranks", None),
               "message": str(e), "cause": type(e.__cause__).__name__}
    torch.save({"err": got, "elapsed": time.monotonic() - since}, Path(out) / f"verify-{how}.pt")
    os._exit(0)  # the group cannot be destroyed cleanly after a peer is gone


@pytest.mark.parametrize("how", ["killed", "hangs"])
def test_verify_plans_with_a_rank_gone_is_a_microbatch_error_saying_what_happened(how, tmp_path):
    """verify_plans' all_gather goes through _step.wait_collective: a killed peer is kind Communication
    at once, a peer that never comes is kind Timeout after the group's timeout; never torch's raw error."""
    import re
    import signal

    codes = run_workers(verify_worker, 2, str(tmp_path), how, killed=[1] if how == "killed" else [], timeout=120)
    assert codes == [0, -signal.SIGKILL if how == "killed" else 0], codes
    got = torch.load(tmp_path / f"verify-{how}.pt")
    err, elapsed = got["err"], got["elapsed"]
    assert err is not None, f"{how}: verify_plans returned"
    assert err["type"] == "PlanMismatchError" and err["ranks"] == [0] and err["cause"] == "RuntimeError", err
    assert "the plans could not be compared" in err["message"], err
    if how == "killed":
        m = re.search(r"rank 0's plan check failed after ([0-9.]+) s .*the connection to another rank closed",
                      err["message"])
        assert err["kind"] == "Communication" and m, err
        assert float(m.group(1)) <= elapsed + 0.01 < 2.0, (elapsed, err)
    else:
        m = re.search(r"rank 0 timed out in the plan check after waiting ([0-9.]+) s", err["message"])
        assert err["kind"] == "Timeout" and m, err
        assert 1.9 <= float(m.group(1)) <= elapsed + 0.05, (elapsed, err)

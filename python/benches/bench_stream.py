"""The streaming path's cost per step against planning alone, and the bytes it moves with and without locality.

Spawns ``R`` processes (2 and 4 by default) joined by gloo over 127.0.0.1;
each reads its own stream of samples drawn from a scenario of
:mod:`microbatch.scenario` (``--scenario``, seeded by rank): ``input_ids`` and
``labels`` (int64, text and image tokens) and the images' pixels as the loader
holds them (``uint8``, ``--pixel-bytes`` per image token: 196 is about a JPEG
at quality 90; 2,352 the raw RGB of a 28 x 28 patch). Each rank runs
:class:`microbatch.torch.BalancedStream` over ``--steps`` steps of
``--per-rank`` samples, no training, and records every step's timings (the
stream's own): ``gather`` (status and metadata all-gathers), ``plan`` (the
planner on the gathered step: the plan alone), ``exchange`` (fingerprint
round, encoding, all-to-all, decoding). Per step the slowest rank counts (the
ranks wait for it); the table shows the median over the steps after the first
(warm-up), and the median ratio all / plan, all = gather + plan + exchange
(exchange: check, encode, all-to-all, decode with the micro-batches built,
and confirm, the all-gather in which every rank says it decoded everything),
and "step": the wall time from one step to the next on a rank (everything,
the loader included; the slowest rank's, median), against the plan too. Bytes: the moved
samples' serialized bytes over every step (``report.bytes_moved``, equal to
what the all-to-all sent) against all samples' bytes, without locality and
with ``--locality`` (a tolerance on the step time).

    python python/benches/bench_stream.py [--ranks 2 4] [--per-rank 32] [--steps 6]
        [--scenario anyres-mix] [--pixel-bytes 196] [--locality 0.005] [--codec]

``--codec`` times the serialization alone, in this one process (no process
group, no collective): per step every rank's samples are planned as the
stream plans them (origins, serialized sizes as bytes, no locality), then each
rank's outgoing samples are encoded and each rank's incoming bytes decoded
(views of the buffer, checked against the plan), all on this thread; the
table gives the CPU time of this thread (``time.thread_time``, so other jobs
on a loaded machine do not count) of the plan and of the slowest rank's
encode and decode, medians over the steps after the first, and their ratio
to planning alone.

Loopback on one machine: the all-to-all is a memory copy through the kernel,
not a network, and every rank plans on the same cores; read the ratios, not
the absolute times, and on a loaded machine compare only within one run.
"""

from __future__ import annotations

import argparse
import datetime
import os
import socket
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import microbatch
import microbatch.torch
from microbatch import scenario


def shard(name, rank, n, seed, pixel_bytes):
    """Rank ``rank``'s samples: a scenario draw of ``n`` samples (seeded by rank) as tensors."""
    batch = scenario.generate(name, n, seed * 1000 + rank)
    a = batch.arrays()
    values, offsets = batch.image_tokens
    off = offsets.astype(np.int64)
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    for i in range(n):
        images = values[off[i] : off[i + 1]].astype(np.int64)
        tokens = int(a["text_tokens"][i]) + int(images.sum())
        ids = torch.randint(1, 32000, (tokens,), generator=g)
        labels = ids.clone()
        labels[: tokens - int(a["loss_tokens"][i])] = -100
        yield {
            "input_ids": ids,
            "labels": labels,
            "image_tokens": torch.as_tensor(images),
            "pixels": torch.randint(0, 256, (int(images.sum()) * pixel_bytes,), dtype=torch.uint8, generator=g),
        }


def metadata(sample):
    """(text tokens, image token counts, loss tokens) from the sample's own tensors."""
    images = sample["image_tokens"].tolist()
    return sample["input_ids"].shape[0] - sum(images), images, int((sample["labels"][1:] != -100).sum())


def codec_steps(world, args, encode, decode):
    """``--codec``: per step (after the first) the thread CPU seconds of the plan and of the slowest rank's
    encode and decode, and the bytes moved. ``encode(rank, chunks) -> uint8 tensor`` (one list of
    ``(id, sample)`` per destination) and ``decode(chunk, expected ids, src) -> {id: sample}``."""

    from microbatch._stream import sample_bytes

    batch = scenario.generate(args.scenario, 1, 0)
    planner = microbatch.Planner(batch.model, world, batch.seq_len, sync="phase")
    shards = [shard(args.scenario, r, args.per_rank * args.steps, args.seed, args.pixel_bytes) for r in range(world)]
    rows = []
    for step in range(args.steps):
        samples = {}
        for r in range(world):
            for k in range(step * args.per_rank, (step + 1) * args.per_rank):
                samples[r + world * k] = next(shards[r])
        ids = np.array(sorted(samples), dtype=np.int64)
        meta = [metadata(samples[i]) for i in ids.tolist()]
        counts = np.array([len(m[1]) for m in meta], dtype=np.int64)
        offsets = np.zeros(len(meta) + 1, dtype=np.uint64)
        np.cumsum(counts, out=offsets[1:])
        values = np.array([v for m in meta for v in m[1]], dtype=np.int64)
        sizes = np.array([sample_bytes(samples[i]) for i in ids.tolist()], dtype=np.int64)
        t0 = time.thread_time()
        plan = planner.plan(ids.astype(np.uint64), np.array([m[0] for m in meta]), (values, offsets),
                            np.array([m[2] for m in meta]), origins=ids % world, bytes=sizes)
        t_plan = time.thread_time() - t0
        moves = plan.exchange.moves
        src, dst, mids = moves.src.astype(np.int64), moves.dst.astype(np.int64), moves.ids.astype(np.int64)
        nbytes = dict(zip(mids.tolist(), moves.bytes.tolist()))
        cost = [0.0] * world
        sent = {}
        for r in range(world):  # each rank's payload: its chunks by destination, in plan order
            chunks = [[(i, samples[i]) for i in mids[(src == r) & (dst == d)].tolist()] for d in range(world)]
            t0 = time.thread_time()
            payload = encode(r, chunks)
            cost[r] += time.thread_time() - t0
            at = 0
            for d in range(world):
                n = sum(nbytes[i] for i, _ in chunks[d])
                sent[r, d] = payload[at : at + n]
                at += n
        for d in range(world):
            for r in range(world):
                expected = mids[(src == r) & (dst == d)].tolist()
                if expected:
                    t0 = time.thread_time()
                    got = decode(sent[r, d], expected, r)
                    cost[d] += time.thread_time() - t0
                    assert sorted(got) == sorted(expected)
        rows.append({"plan": t_plan, "codec": max(cost), "moved": int(plan.report.bytes_moved)})
    return rows[1:] if len(rows) > 1 else rows


def codec_table(args):
    """``--codec``: the table of :func:`codec_steps` with this version's encoder and decoder."""
    from microbatch._stream import _decode, _encode

    keys = {"input_ids": 0, "labels": 1, "image_tokens": 2, "pixels": 3}
    table = list(keys)
    cpu = torch.device("cpu")

    send = {}  # every rank's send buffer, reused from step to step, as the stream does

    def encode(rank, chunks):
        size = sum(microbatch.torch.sample_bytes(s) for c in chunks for _, s in c)
        if send.get(rank, torch.empty(0)).numel() < size:
            send[rank] = torch.empty(size + size // 4, dtype=torch.uint8)
        return _encode(chunks, keys, size, cpu, out=send[rank])

    def decode(chunk, expected, src):
        return _decode(chunk, None, expected, table, src)

    print("| ranks | plan (ms CPU) | slowest rank's encode + decode (ms CPU) | encode + decode / plan | MB moved a step |")
    print("|---:|---:|---:|---:|---:|")
    for world in args.ranks:
        rows = codec_steps(world, args, encode, decode)
        plan = statistics.median(r["plan"] for r in rows)
        codec = statistics.median(r["codec"] for r in rows)
        ratio = statistics.median(r["codec"] / r["plan"] for r in rows)
        moved = statistics.median(r["moved"] for r in rows) / 1e6
        print(f"| {world} | {plan * 1e3:.2f} | {codec * 1e3:.2f} | {ratio:.2f}x | {moved:.2f} |")


def worker(rank, world, port, args, out):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=300))
    batch = scenario.generate(args.scenario, 1, 0)
    rows = {}
    for locality in (None, args.locality):
        settings = {} if locality is None else {"locality": locality}
        planner = microbatch.Planner(batch.model, world, batch.seq_len, sync="phase", **settings)
        source = shard(args.scenario, rank, args.per_rank * args.steps, args.seed, args.pixel_bytes)
        stream = microbatch.torch.BalancedStream(
            source, samples_per_rank=args.per_rank, planner=planner, metadata=metadata
        )
        steps = []
        last = time.perf_counter()
        for step in stream:
            now = time.perf_counter()
            r = step.plan.report
            steps.append({"confirm": 0.0, **step.timings, "step": now - last, "all": step.timings["gather"] + step.timings["plan"] + step.timings["exchange"], "moved": r.bytes_moved, "total": r.bytes_total, "sent": step.bytes_sent,
                          "samples": step.samples, "samples_moved": r.samples_moved})
            last = time.perf_counter()
        rows["none" if locality is None else f"{locality:g}"] = steps
    torch.save(rows, out / f"rank{rank}.pt")
    dist.barrier()
    dist.destroy_process_group()
    os._exit(0)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--per-rank", type=int, default=32)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--scenario", default="anyres-mix", choices=scenario.NAMES)
    ap.add_argument("--pixel-bytes", type=int, default=196)
    ap.add_argument("--locality", type=float, default=0.005)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--codec", action="store_true", help="time the serialization alone, in this process")
    args = ap.parse_args()
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    if args.codec:
        torch.set_num_threads(1)
        print(f"microbatch {microbatch.__version__}, torch {torch.__version__}, scenario {args.scenario}, "
              f"{args.per_rank} samples a rank a step, {args.steps} steps (median of the last {args.steps - 1}), "
              f"{args.pixel_bytes} pixel bytes an image token, the serialization alone on one thread\n")
        codec_table(args)
        return

    print(f"microbatch {microbatch.__version__}, torch {torch.__version__}, scenario {args.scenario}, "
          f"{args.per_rank} samples a rank a step, {args.steps} steps (median of the last {args.steps - 1}, "
          f"slowest rank per step), {args.pixel_bytes} pixel bytes an image token, gloo over loopback, "
          f"{os.cpu_count()} CPUs\n")
    print("| ranks | locality | gather (ms) | plan (ms) | check (ms) | encode (ms) | all-to-all (ms) | decode (ms) | "
          "confirm (ms) | all (ms) | all / plan | step (ms) | step / plan | bytes moved / all | samples moved | "
          "MB sent a step |")
    print("|---:|---|" + "---:|" * 14)
    for world in args.ranks:
        with tempfile.TemporaryDirectory() as tmp:
            mp.spawn(worker, args=(world, free_port(), args, Path(tmp)), nprocs=world, join=True)
            ranks = [torch.load(Path(tmp) / f"rank{r}.pt") for r in range(world)]
        for name in ranks[0]:
            runs = [r[name] for r in ranks]
            n = len(runs[0])

            def slowest(key, s):
                return max(run[s][key] for run in runs)

            measured = range(1, n) if n > 1 else range(n)
            med = {k: statistics.median(slowest(k, s) for s in measured)
                   for k in ("gather", "plan", "check", "encode", "transfer", "decode", "confirm", "all", "step")}
            ratio = statistics.median(slowest("all", s) / slowest("plan", s) for s in measured)
            per_step = statistics.median(slowest("step", s) / slowest("plan", s) for s in measured)
            moved = sum(runs[0][s]["moved"] for s in range(n))
            total = sum(runs[0][s]["total"] for s in range(n))
            samples_moved = sum(runs[0][s]["samples_moved"] for s in range(n))
            samples = sum(runs[0][s]["samples"] for s in range(n))
            sent = statistics.median(sum(run[s]["sent"] for run in runs) for s in range(n)) / 1e6
            assert all(sum(run[s]["sent"] for run in runs) == runs[0][s]["moved"] for s in range(n))
            times = " | ".join(f"{med[k] * 1e3:.2f}"
                               for k in ("gather", "plan", "check", "encode", "transfer", "decode", "confirm", "all"))
            print(f"| {world} | {name} | {times} | {ratio:.2f}x | {med['step'] * 1e3:.2f} | {per_step:.2f}x | "
                  f"{moved / total:.1%} | {samples_moved}/{samples} | {sent:.2f} |")


if __name__ == "__main__":
    main()

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
(exchange: check, encode, all-to-all, decode, and the micro-batches built). Bytes: the moved
samples' serialized bytes over every step (``report.bytes_moved``, equal to
what the all-to-all sent) against all samples' bytes, without locality and
with ``--locality`` (a tolerance on the step time).

    python python/benches/bench_stream.py [--ranks 2 4] [--per-rank 32] [--steps 6]
        [--scenario anyres-mix] [--pixel-bytes 196] [--locality 0.005]

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
        for step in stream:
            r = step.plan.report
            steps.append({**step.timings, "all": step.timings["gather"] + step.timings["plan"] + step.timings["exchange"], "moved": r.bytes_moved, "total": r.bytes_total, "sent": step.bytes_sent,
                          "samples": step.samples, "samples_moved": r.samples_moved})
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
    args = ap.parse_args()
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")

    print(f"microbatch {microbatch.__version__}, torch {torch.__version__}, scenario {args.scenario}, "
          f"{args.per_rank} samples a rank a step, {args.steps} steps (median of the last {args.steps - 1}, "
          f"slowest rank per step), {args.pixel_bytes} pixel bytes an image token, gloo over loopback, "
          f"{os.cpu_count()} CPUs\n")
    print("| ranks | locality | gather (ms) | plan (ms) | check (ms) | encode (ms) | all-to-all (ms) | decode (ms) | "
          "all (ms) | all / plan | bytes moved / all | samples moved | MB sent a step |")
    print("|---:|---|" + "---:|" * 11)
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
                   for k in ("gather", "plan", "check", "encode", "transfer", "decode", "all")}
            ratio = statistics.median(slowest("all", s) / slowest("plan", s) for s in measured)
            moved = sum(runs[0][s]["moved"] for s in range(n))
            total = sum(runs[0][s]["total"] for s in range(n))
            samples_moved = sum(runs[0][s]["samples_moved"] for s in range(n))
            samples = sum(runs[0][s]["samples"] for s in range(n))
            sent = statistics.median(sum(run[s]["sent"] for run in runs) for s in range(n)) / 1e6
            assert all(sum(run[s]["sent"] for run in runs) == runs[0][s]["moved"] for s in range(n))
            times = " | ".join(f"{med[k] * 1e3:.2f}" for k in ("gather", "plan", "check", "encode", "transfer", "decode", "all"))
            print(f"| {world} | {name} | {times} | {ratio:.2f}x | {moved / total:.1%} | {samples_moved}/{samples} | {sent:.2f} |")


if __name__ == "__main__":
    main()

"""BalancedBatchSampler on a large epoch: time to the first micro-batch, the whole epoch, and peak memory.

One rank's sampler (``rank=0`` of ``--ranks``, no process group) over
``--samples`` indices with seeded metadata (text tokens 64-2,047, a third of
the samples with one to four images of 64-1,280 tokens), global batches of
``--batch`` samples, planned for ``qwen2.5-vl-7b`` at ``seq_len`` 8,192.
Each measurement runs in a fresh process so that its peak resident memory is
its own: the metadata arrays are built first, then the process's peak RSS is
read (``ru_maxrss``) before and after the measured work; the figure is the
growth. Times are wall seconds (``time.perf_counter``) and the CPU seconds of
the process (``time.process_time``; on a loaded machine compare these).
``--callable`` gives the metadata as a callable ``meta(index) -> (text_tokens,
image_tokens)`` over the same arrays instead, and counts the rows it reads.

- ``first``: construction + ``next(iter(sampler))`` (what a training run waits
  for before its first forward);
- ``len``: construction + ``len(sampler)``;
- ``epoch``: construction + iterating the whole epoch;
- ``steps``: construction + iterating ``sampler.steps()`` and the sampler
  together, as the documented training loop does (a step, then its
  micro-batches), with ``--work`` seconds of sleep per step standing in for
  the training step (a GPU-bound step leaves the CPU to a planning thread).

Memory is given twice: the growth of the peak RSS (a lower bound: building
the metadata already raised the peak), and the growth of the current RSS
after the work (what the sampler still holds: kept plans, the permutation).

    python python/benches/bench_sampler.py [--samples 1000000] [--ranks 64] [--batch 4096] \
        [--what first len epoch steps] [--work 0.0] [--setting micro_steps=16] [--setting plan_ahead=True]
        [--callable]

``--setting`` passes extra keyword arguments to the sampler (a Python literal
after ``=``; a setting the installed version does not know fails). Build the
package in release mode first (``pip install ./python``).
"""

from __future__ import annotations

import argparse
import ast
import json
import resource
import subprocess
import sys
import time


def metadata(n: int, seed: int = 0):
    import numpy as np

    rng = np.random.default_rng(seed)
    text = rng.integers(64, 2048, n)
    counts = np.where(rng.random(n) < 1 / 3, rng.integers(1, 5, n), 0)
    values = rng.integers(64, 1281, int(counts.sum())).astype(np.uint32)
    offsets = np.zeros(n + 1, dtype=np.uint64)
    np.cumsum(counts, out=offsets[1:])
    return text, (values, offsets)


def peak_kib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def rss_kib() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() // 1024


def child(args: argparse.Namespace) -> None:
    from microbatch.torch import BalancedBatchSampler

    settings = dict(args.setting)
    text, images = metadata(args.samples)
    reads = []
    if args.callable:
        values, offsets = images[0], images[1].astype("int64")

        def meta(i):
            reads.append(i)
            return int(text[i]), values[offsets[i] : offsets[i + 1]]

        first, rest = meta, {"num_samples": args.samples}
    else:
        first, rest = text, {"image_tokens": images}
    before, held = peak_kib(), rss_kib()
    t0, c0 = time.perf_counter(), time.process_time()
    sampler = BalancedBatchSampler(first, global_batch_size=args.batch, model="qwen2.5-vl-7b",
                                   seq_len=8192, num_replicas=args.ranks, rank=0, seed=0, **rest, **settings)
    out = {}
    what = args.what[0]
    if what == "first":
        out["first_batch"] = len(next(iter(sampler)))
    elif what == "len":
        out["len"] = len(sampler)
    elif what == "epoch":
        out["micro_batches"] = sum(1 for _ in sampler)
    elif what == "steps":
        batches = iter(sampler)
        count = 0
        for step in sampler.steps():
            for _ in range(step.micro_steps):
                next(batches)
                count += 1
            time.sleep(args.work)
        out["micro_batches"] = count
    out["seconds"] = time.perf_counter() - t0
    out["cpu_seconds"] = time.process_time() - c0
    if args.callable:
        out["rows_read"] = len(reads)
    out["peak_growth_mib"] = (peak_kib() - before) / 1024
    out["held_mib"] = (rss_kib() - held) / 1024
    print(json.dumps(out))


def setting(text: str):
    name, _, value = text.partition("=")
    return name, ast.literal_eval(value)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--samples", type=int, default=1_000_000)
    p.add_argument("--ranks", type=int, default=64)
    p.add_argument("--batch", type=int, default=4096)
    p.add_argument("--what", nargs="+", default=["first", "len", "epoch", "steps"])
    p.add_argument("--work", type=float, default=0.0, help="seconds of sleep per step in 'steps'")
    p.add_argument("--setting", type=setting, action="append", default=[])
    p.add_argument("--callable", action="store_true", help="the metadata as a callable, read as the sampler needs")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args)
        return
    print(f"samples {args.samples}, ranks {args.ranks}, global batch {args.batch}, work {args.work} s a step, "
          f"settings {dict(args.setting)}, metadata {'a callable' if args.callable else 'arrays'}")
    for what in args.what:
        cmd = [sys.executable, __file__, "--child", "--samples", str(args.samples), "--ranks", str(args.ranks),
               "--batch", str(args.batch), "--what", what, "--work", str(args.work)] + ["--callable"] * args.callable
        for name, value in args.setting:
            cmd += ["--setting", f"{name}={value!r}"]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode:
            print(f"{what:6s} failed: {done.stderr.strip().splitlines()[-1]}")
            continue
        r = json.loads(done.stdout)
        rest = ", ".join(f"{k} {v}" for k, v in r.items()
                         if k not in ("seconds", "cpu_seconds", "peak_growth_mib", "held_mib"))
        print(f"{what:6s} {r['seconds']:8.2f} s ({r['cpu_seconds']:.2f} s CPU)   peak RSS +{r['peak_growth_mib']:6.1f} MiB   "
              f"held after +{r['held_mib']:6.1f} MiB   {rest}")


if __name__ == "__main__":
    main()

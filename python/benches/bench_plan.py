"""Planning from Python against the Rust planner's own time, on the same batch, in the same call.

For each scenario, 65,536 samples over 1,024 ranks (the crate's `plan` bench
sizes): the wall time of ``Planner.plan`` called from Python with numpy
arrays (argument checks, conversion, building the crate's samples, planning,
wrapping the result) against ``report.planning_time``, the time the Rust
planner itself measured inside that same call. The ratio is the binding's
overhead; the target is at most 1.3x. Median of ``--repeat`` calls after one
warm-up. Also the ragged list-of-arrays input form (one array per sample),
which costs a Python loop over samples in numpy's ``concatenate``.

    python python/benches/bench_plan.py [--samples 65536] [--ranks 1024] [--repeat 7]

Build the package in release mode first (``pip install ./python`` or
``maturin develop --release``).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import microbatch
from microbatch import scenario


def measure(planner, kwargs, repeat):
    planner.plan(**kwargs)  # warm-up
    walls, rust = [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        plan = planner.plan(**kwargs)
        walls.append(time.perf_counter() - t0)
        rust.append(plan.report.planning_time)
    return statistics.median(walls), statistics.median(rust), plan


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=65536)
    ap.add_argument("--ranks", type=int, default=1024)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()

    print(f"microbatch {microbatch.__version__}, {args.samples} samples over {args.ranks} ranks, "
          f"median of {args.repeat}\n")
    print("| scenario | sync | input | Python call (ms) | Rust planner (ms) | ratio |")
    print("|---|---|---|---:|---:|---:|")
    for name in scenario.NAMES:
        batch = scenario.generate(name, args.samples, args.seed)
        arrays = batch.arrays()
        values, offsets = batch.image_tokens
        units = batch.image_units[0]
        lists = dict(arrays)
        lists["image_tokens"] = np.split(values, offsets[1:-1].astype(np.int64))
        lists["image_units"] = np.split(units, offsets[1:-1].astype(np.int64))
        for sync in microbatch.plan.SYNC_MODELS:
            planner = batch.planner(args.ranks, sync=sync)
            forms = [("arrays", arrays)]
            if sync == "phase":
                forms.append(("list of arrays", lists))
            for form, kwargs in forms:
                wall, rust, _ = measure(planner, kwargs, args.repeat)
                print(f"| {name} | {sync} | {form} | {wall * 1e3:.1f} | {rust * 1e3:.1f} | "
                      f"{wall / rust:.3f}x |")


if __name__ == "__main__":
    main()

"""Planning from Python with composed cost models: the time of ``Planner.plan`` per model form.

For each scenario, ``--samples`` samples over ``--ranks`` ranks: the median
wall time and CPU time (of the process: the planner runs on the calling
thread) of ``Planner.plan`` called from Python with the scenario's preset by name, the same preset
as a ``microbatch.cost`` model, and two compositions of terms built in Python
(``+``, ``scale``, ``in_phase``, ``max``), which the binding composes with the
crate's combinators over its type-erased model. Run it on two builds of the
package to compare them; the plans' fingerprints are printed so that the two
builds can be seen to make the same plans. On a shared machine, compare the
CPU times: they move much less with the load than the wall times.

    python python/benches/bench_cost_model.py [--samples 100000] [--ranks 256] [--repeat 5]

Build the package in release mode first (``pip install ./python``).
"""

from __future__ import annotations

import argparse
import statistics
import time

import microbatch
import microbatch.cost as mc
from microbatch import scenario


def models(preset: str):
    """The model forms, by name."""
    vit = mc.PerTile(4e-3, 256, training="trained")
    llm = mc.Tokens(2e-5) + mc.DocumentAttention(3e-10) + mc.PerSample(1e-3)
    return {
        "preset (name)": preset,
        "preset (model)": mc.preset(preset),
        "4 terms": vit + llm,
        "7 terms, all combinators": (
            (vit + mc.PerGroup(5e-3).in_phase("vision")).max(mc.PerSample(1e-4).in_phase("vision"))
            + llm.scale(1.5)
            + mc.preset(preset).scale(1e-15)
        ),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=100_000)
    ap.add_argument("--ranks", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--scenario", action="append", help="a scenario (default: every one)")
    args = ap.parse_args()

    print(f"microbatch {microbatch.__version__}, {args.samples} samples over {args.ranks} ranks, "
          f"median of {args.repeat}\n")
    print("| scenario | model | wall (ms) | CPU (ms) | fingerprint |")
    print("|---|---|---:|---:|---|")
    for name in args.scenario or scenario.NAMES:
        batch = scenario.generate(name, args.samples, args.seed)
        kwargs = batch.arrays()
        for label, model in models(batch.model).items():
            planner = microbatch.Planner(model, args.ranks, batch.seq_len, max_units=batch.max_units)
            plan = planner.plan(**kwargs)  # warm-up
            walls, cpus = [], []
            for _ in range(args.repeat):
                t0, c0 = time.perf_counter(), time.process_time()
                plan = planner.plan(**kwargs)
                cpus.append(time.process_time() - c0)
                walls.append(time.perf_counter() - t0)
            print(f"| {name} | {label} | {statistics.median(walls) * 1e3:.1f} | "
                  f"{statistics.median(cpus) * 1e3:.1f} | {plan.fingerprint:016x} |")


if __name__ == "__main__":
    main()

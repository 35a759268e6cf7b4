"""FFD and Karmarkar-Karp against the Python packages a user would otherwise reach for.

Not a test: prints Markdown tables for BENCHMARKS.md. Every algorithm runs on the same seeded
instances; the table gives each one's time (the best of several runs), the ratio peer / ours, and
the result quality (bins used for FFD, the largest part for KK) so that the comparison is fair.

Peers: ``binpacking.to_constant_volume`` and ``prtpy.pack(prtpy.packing.first_fit_decreasing)``
for FFD; ``numberpartitioning.karmarkar_karp`` and
``prtpy.partition(prtpy.partitioning.karmarkar_karp)`` for KK. Ours is called on numpy arrays
(the conversion is in its time); the peers on Python lists, their native input. A peer is skipped
("-") at the sizes where its time, extrapolated from the previous size, would pass ``--budget``
seconds.

Run (release build):

    cd python && maturin develop -q --release && cd .. && python python/benches/bench_pack_partition.py
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from microbatch import pack, partition


def best_time(f, repeats: int, budget: float):
    """The smallest wall time of ``repeats`` runs (fewer when one run is slow) and the result."""
    times, result = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        result = f()
        times.append(time.perf_counter() - t)
        if sum(times) > budget / 4:
            break
    return min(times), result


def ffd_instance(n: int, seed: int):
    """Sequence lengths uniform in [1, 4096] packed into 16384 tokens (about 8 a bin)."""
    rng = np.random.default_rng(seed)
    return rng.integers(1, 4097, size=n, dtype=np.int64), 16384


def kk_instance(n: int, seed: int):
    """Weights uniform in [1, 10^6]."""
    rng = np.random.default_rng(seed)
    return rng.integers(1, 1_000_001, size=n, dtype=np.int64)


def row(n, ours, peers, quality):
    cells = [f"{n:,}", f"{ours * 1e3:.3f}"]
    for t in peers:
        if t is None:
            cells += ["-", "-"]
        else:
            cells += [f"{t * 1e3:.1f}", f"{t / ours:.0f}x"]
    cells.append(" / ".join(quality))
    return "| " + " | ".join(cells) + " |"


class Skipper:
    """Skips a peer whose extrapolated time (power ``power`` of the size) passes the budget."""

    def __init__(self, budget: float, power: float):
        self.budget, self.power, self.last = budget, power, None

    def run(self, n: int, f, repeats: int):
        if self.last is not None:
            n0, t0 = self.last
            if t0 * (n / n0) ** self.power > self.budget:
                return None, None
        t, r = best_time(f, repeats, self.budget)
        self.last = (n, t)
        return t, r


def bench_ffd(sizes_n, budget: float, repeats: int):
    import binpacking
    import prtpy

    print("### FFD: sizes uniform in [1, 4096], capacity 16384\n")
    print("| n | ours (ms) | binpacking (ms) | ratio | prtpy FFD (ms) | ratio | bins: ours / binpacking / prtpy / L2 |")
    print("|---|---|---|---|---|---|---|")
    bp, pr = Skipper(budget, 2.0), Skipper(budget, 2.0)
    for n in sizes_n:
        sizes, cap = ffd_instance(n, seed=n)
        as_list = sizes.tolist()
        t_ours, p = best_time(lambda: pack.first_fit_decreasing(sizes, cap), repeats, budget)
        t_bp, bins_bp = bp.run(n, lambda: binpacking.to_constant_volume(as_list, cap), repeats)
        t_pr, sums_pr = pr.run(
            n,
            lambda: prtpy.pack(
                algorithm=prtpy.packing.first_fit_decreasing,
                binsize=cap,
                items=as_list,
                outputtype=prtpy.out.Sums,
            ),
            repeats,
        )
        quality = [
            str(len(p)),
            "-" if bins_bp is None else str(len(bins_bp)),
            "-" if sums_pr is None else str(len(sums_pr)),
            str(p.lower_bounds.l2),
        ]
        print(row(n, t_ours, [t_bp, t_pr], quality))
        sys.stdout.flush()
    print()


def bench_kk(sizes_n, ks, budget: float, repeats: int):
    import numberpartitioning
    import prtpy

    print("### Karmarkar-Karp: weights uniform in [1, 10^6]\n")
    print(
        "| k | n | ours (ms) | numberpartitioning (ms) | ratio | prtpy KK (ms) | ratio "
        "| largest part: ours / numberpartitioning / prtpy / lower bound |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for k in ks:
        npk, pr = Skipper(budget, 1.2), Skipper(budget, 1.2)
        for n in sizes_n:
            w = kk_instance(n, seed=1000 * k + n)
            as_list = w.tolist()
            t_ours, p = best_time(lambda: partition.karmarkar_karp(w, k), repeats, budget)
            t_np, r_np = npk.run(n, lambda: numberpartitioning.karmarkar_karp(as_list, k), repeats)
            t_pr, r_pr = pr.run(
                n,
                lambda: prtpy.partition(
                    algorithm=prtpy.partitioning.karmarkar_karp,
                    numbins=k,
                    items=as_list,
                    outputtype=prtpy.out.Sums,
                ),
                repeats,
            )
            quality = [
                str(p.objective),
                "-" if r_np is None else str(max(r_np.sizes)),
                "-" if r_pr is None else str(int(max(r_pr))),
                str(p.lower_bound),
            ]
            print("| " + str(k) + " " + row(n, t_ours, [t_np, t_pr], quality))
            sys.stdout.flush()
    print()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000,100000", help="item counts, comma separated")
    ap.add_argument("--ks", default="2,8", help="part counts for KK")
    ap.add_argument("--budget", type=float, default=60.0, help="seconds a peer may take at one size")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    sizes_n = [int(x) for x in args.sizes.split(",")]
    print(f"numpy {np.__version__}, Python {sys.version.split()[0]}; best of {args.repeats} runs\n")
    bench_ffd(sizes_n, args.budget, args.repeats)
    bench_kk(sizes_n, [int(k) for k in args.ks.split(",")], args.budget, args.repeats)


if __name__ == "__main__":
    main()

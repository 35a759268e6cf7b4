"""A whole step as verl balances it against microbatch's plan of the same batch, in one process.

verl (``verl/utils/seqlen_balancing.py`` of the version in ``VERL``) balances a
step in two places:

- the driver (``RayPPOTrainer._balance_batch`` in ``verl/trainer/ppo/ray_trainer.py``):
  Karmarkar-Karp of the step's samples over the data-parallel ranks with equal
  counts, on ``calculate_workload`` (``24576 T + T^2``), then each rank's
  samples ordered by workload (the smallest at both ends);
- every rank (``rearrange_micro_batches``, called by ``prepare_micro_batches``
  in ``verl/workers/engine/utils.py``): the micro-batch count
  ``ceil(tokens / max_token_len)`` agreed over the ranks (an all-reduce of the
  largest), then Karmarkar-Karp of the rank's samples into that many
  micro-batches (more until each holds at most ``max_token_len`` tokens),
  ordered for pipelines.

The ranks run their part at the same time, so verl's step costs the driver's
time plus the slowest rank's; this program times the driver (median of the
rounds) and every rank in turn (in the first round; in the others only the
16 slowest of the first), and adds to the driver the largest over the ranks of
each rank's best round (timed one after another, a pause of the machine lands
on one rank and would become the maximum; a rank's best filters it, and the
largest is still the rank with the most work). microbatch plans
the whole step (ranks, micro-steps, sequences) in one ``Planner.plan`` call from
numpy arrays, timed from Python (conversion included), for every sync model.
Both see the same samples (``microbatch.scenario``'s batches; a sample's tokens
``T`` are its text tokens plus its images' tokens) and start from token counts:
verl's own code derives them from the batch's attention mask (the driver) or
the offsets of its unpadded ``input_ids`` (each rank), given here as a nested
tensor of the rank's samples. ``max_token_len`` is the scenario's sequence
length, the length of microbatch's packed sequences.

How verl is run: its wheel is installed without dependencies (``pip install
--no-deps --target DIR verl==VERL``; done by this program when ``DIR`` lacks
it). Importing the package needs ray and tensordict (``verl/__init__.py``
imports ``verl.protocol``), which training needs and this comparison does not,
so only ``seqlen_balancing.py`` is loaded (importlib), with stand-ins for the
three names it imports from verl: ``DataProto`` (a type annotation),
``get_device_name`` (called only under ``torch.distributed``) and
``tensordict_utils.index_select_tensor_dict`` (the copy of each micro-batch's
tensors at the end of ``rearrange_micro_batches``, which moves data and is not
timed: the stand-in returns the indices). The driver's lines are copied from
``_balance_batch`` (ray_trainer.py cannot be imported without ray) with one
change in verl's favour: the workloads are a list, while verl passes
``calculate_workload``'s tensor, whose elements Karmarkar-Karp then compares one
0-d tensor at a time; ``--tensor-size`` times that form too (driver only).

    python python/benches/bench_verl.py [--verl target/benchmarks/verl] \\
        [--sizes 65536x1024,8192x128] [--rounds 3] [--tensor-size 8192x128]

Prints one Markdown table of the step, one of the driver's two forms, and the
fingerprint of each microbatch plan of the first table.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import pathlib
import statistics
import subprocess
import sys
import time
import types
from typing import Dict, List, Tuple

import numpy as np
import torch

import microbatch
from microbatch import scenario

#: The ranks timed again after the first round: the slowest of it.
AGAIN = 16

#: The verl release compared against (its latest on the package index when this was written).
VERL = "0.9.1"

ROOT = pathlib.Path(__file__).resolve().parents[2]


def install(where: pathlib.Path) -> pathlib.Path:
    """The path of verl's seqlen_balancing.py under `where`, installing verl's wheel there first
    (without its dependencies) if it is missing."""
    path = where / "verl" / "utils" / "seqlen_balancing.py"
    if not path.exists():
        cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(where),
               f"verl=={VERL}"]
        print("$ " + " ".join(cmd), file=sys.stderr, flush=True)
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if proc.returncode != 0 or not path.exists():
            sys.exit(f"bench_verl: installing verl=={VERL} into {where} failed (exit {proc.returncode}): "
                     f"{proc.stderr.strip()[-500:]}\nInstall it there by hand with the command above, or "
                     "pass --verl DIR where DIR/verl/utils/seqlen_balancing.py exists.")
    return path


def load(path: pathlib.Path) -> types.ModuleType:
    """verl's seqlen_balancing.py as a module of its own, with stand-ins for what it imports from verl."""
    stubs = {name: types.ModuleType(name) for name in
             ("verl", "verl.protocol", "verl.utils", "verl.utils.tensordict_utils", "verl.utils.device")}
    setattr(stubs["verl.protocol"], "DataProto", type("DataProto", (), {}))  # a type annotation only
    setattr(stubs["verl.utils.device"], "get_device_name", lambda: "cpu")  # used only under torch.distributed
    # The copy of a micro-batch's tensors: data movement, not balancing; the indices stand for it.
    setattr(stubs["verl.utils.tensordict_utils"], "index_select_tensor_dict", lambda batch, indices: indices)
    setattr(stubs["verl.utils"], "tensordict_utils", stubs["verl.utils.tensordict_utils"])
    saved = {name: sys.modules.get(name) for name in stubs}
    sys.modules.update(stubs)
    try:
        spec = importlib.util.spec_from_file_location("verl_seqlen_balancing", path)
        if spec is None or spec.loader is None:
            sys.exit(f"bench_verl: cannot load {path}")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        for name, old in saved.items():
            if old is None:
                del sys.modules[name]
            else:
                sys.modules[name] = old
    return module


def tokens(batch: scenario.Batch) -> np.ndarray:
    """Each sample's tokens: text plus its images' tokens (int64)."""
    values, offsets = batch.image_tokens
    offsets = offsets.astype(np.int64)
    per_sample = np.zeros(len(batch.ids), dtype=np.int64)
    counts = np.diff(offsets)
    has = counts > 0
    per_sample[has] = np.add.reduceat(values.astype(np.int64), offsets[:-1][has])
    return batch.text_tokens.astype(np.int64) + per_sample


def driver(sb, seqlens: torch.Tensor, dp_size: int, as_tensor: bool = False) -> torch.Tensor:
    """RayPPOTrainer._balance_batch of verl 0.9.1 from the sequence lengths on (no prefix grouper,
    no mini-batches kept; metrics and the batch's reorder left out). The workloads a list unless
    `as_tensor` (verl's own form)."""
    workload_lst = sb.calculate_workload(seqlens)
    if not as_tensor:
        workload_lst = workload_lst.tolist()
    global_partition_lst = sb.get_seqlen_balanced_partitions(workload_lst, k_partitions=dp_size, equal_size=True)
    for idx, partition in enumerate(global_partition_lst):
        partition.sort(key=lambda x: (workload_lst[x], x))
        ordered_partition = partition[::2] + partition[1::2][::-1]
        global_partition_lst[idx] = ordered_partition
    return torch.tensor([j for partition in global_partition_lst for j in partition])


def rank_lengths(seqlens: torch.Tensor, order: torch.Tensor, ranks: int):
    """Each rank's sample lengths, in the driver's order (the dispatch gives rank r the r-th slice)."""
    per_rank = len(order) // ranks
    return [seqlens[order[r * per_rank:(r + 1) * per_rank]] for r in range(ranks)]


def nested_input_ids(lens: torch.Tensor) -> torch.Tensor:
    """A rank's unpadded input_ids: a jagged nested tensor of its samples (their tokens zeros)."""
    offsets = torch.zeros(len(lens) + 1, dtype=torch.long)
    offsets[1:] = torch.cumsum(lens, 0)
    return torch.nested.nested_tensor_from_jagged(torch.zeros(int(offsets[-1]), dtype=torch.long), offsets)


def agreed_count(per_rank, max_token_len: int) -> int:
    """The micro-batch count the ranks agree on: rearrange_micro_batches all-reduces the largest
    min(samples, ceil(tokens / max_token_len)); passed here as its min_num_micro_batch."""
    return max(min(len(lens), math.ceil(int(lens.sum()) / max_token_len)) for lens in per_rank)


def measure(name: str, n: int, ranks: int, rounds: int, sb):
    """One scenario's batch: verl's driver and ranks, and microbatch under every sync model,
    alternated in `rounds` rounds after one warm-up of each. Returns rows of the table and a line
    per sync model with microbatch's plan's fingerprint (to check which build of the crate planned)."""
    batch = scenario.generate(name, n, 42)
    seqlens = torch.from_numpy(tokens(batch))
    if int(seqlens.max()) > batch.seq_len:
        raise SystemExit(f"bench_verl: a {name} sample has {int(seqlens.max())} tokens, over the sequence "
                         f"length {batch.seq_len}: verl's max_token_len would refuse it")
    arrays = batch.arrays()
    planners = {sync: batch.planner(ranks, sync=sync) for sync in microbatch.plan.SYNC_MODELS}
    for planner in planners.values():
        planner.plan(**arrays)  # warm-up
    per_rank = rank_lengths(seqlens, driver(sb, seqlens, ranks), ranks)
    count = agreed_count(per_rank, batch.seq_len)
    for lens in per_rank[:4]:
        sb.rearrange_micro_batches({"input_ids": nested_input_ids(lens)}, max_token_len=batch.seq_len,
                                   min_num_micro_batch=count)

    driver_s: List[float] = []
    rank_s: List[List[float]] = [[] for _ in range(ranks)]
    ours: Dict[str, Tuple[List[float], List[float]]] = {sync: ([], []) for sync in planners}
    prints: Dict[str, int] = {}
    ratio: Dict[str, float] = {}
    for _ in range(rounds):
        t = time.perf_counter()
        order = driver(sb, seqlens, ranks)
        driver_s.append(time.perf_counter() - t)
        per_rank = rank_lengths(seqlens, order, ranks)
        count = agreed_count(per_rank, batch.seq_len)
        # Every rank in the first round; after it the slowest ones again (a rank's best round is kept).
        timed = range(ranks) if not rank_s[0] else sorted(range(ranks), key=lambda r: -min(rank_s[r]))[:AGAIN]
        for r in timed:
            lens = per_rank[r]
            x = nested_input_ids(lens)
            t = time.perf_counter()
            _, parts = sb.rearrange_micro_batches({"input_ids": x}, max_token_len=batch.seq_len,
                                                  min_num_micro_batch=count)
            rank_s[r].append(time.perf_counter() - t)
            if len(parts) < count:
                raise SystemExit(f"bench_verl: rank {r} made {len(parts)} micro-batches, fewer than {count}")
        for sync, planner in planners.items():
            t = time.perf_counter()
            plan = planner.plan(**arrays)
            ours[sync][0].append(time.perf_counter() - t)
            ours[sync][1].append(plan.report.planning_time or float("nan"))
            prints[sync], ratio[sync] = plan.fingerprint, plan.report.ratio
    slowest = max(min(r) for r in rank_s)  # each rank's best round, the slowest rank's
    verl_step = statistics.median(driver_s) + slowest
    rows = []
    for sync, (wall, rust) in ours.items():
        mine = statistics.median(wall)
        rows.append(f"| {n:,} x {ranks:,} | {name} | {sync} | {statistics.median(driver_s) * 1e3:.1f} | "
                    f"{slowest * 1e3:.2f} | {verl_step * 1e3:.1f} | {mine * 1e3:.1f} | "
                    f"{statistics.median(rust) * 1e3:.1f} | {verl_step / mine:.1f}x | {ratio[sync]:.4f} |")
    return rows, [f"fingerprint {name} {n} {ranks} {sync} {fp:016x}" for sync, fp in prints.items()]


def size(spec: str):
    n, _, r = spec.partition("x")
    if not (n.isdigit() and r.isdigit()) or int(n) % int(r):
        raise argparse.ArgumentTypeError(f"{spec!r}: want <samples>x<ranks>, samples a multiple of ranks "
                                         "(verl's driver deals equal counts)")
    return int(n), int(r)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--verl", type=pathlib.Path, default=ROOT / "target" / "benchmarks" / "verl",
                    help=f"where verl=={VERL} is (installed there without dependencies if missing)")
    ap.add_argument("--sizes", type=lambda s: [size(x) for x in s.split(",")], default=[(65536, 1024), (8192, 128)])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tensor-size", type=size, default=(8192, 128),
                    help="the batch on which the driver's two forms (a list, verl's tensor) are timed")
    ap.add_argument("--scenarios", default=",".join(scenario.NAMES))
    args = ap.parse_args()
    sb = load(install(args.verl))

    print(f"verl {VERL} (seqlen_balancing.py loaded alone), microbatch {microbatch.__version__}, "
          f"torch {torch.__version__}, median of {args.rounds} rounds\n")
    print("| batch | scenario | sync model | verl: driver (ms) | verl: slowest rank (ms) | verl: step (ms) "
          "| microbatch: `Planner.plan` (ms) | of which in Rust (ms) | verl / microbatch | microbatch: plan / lower bound |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
    prints = []
    for n, ranks in args.sizes:
        for name in args.scenarios.split(","):
            rows, lines = measure(name, n, ranks, args.rounds, sb)
            print("\n".join(rows), flush=True)
            prints += lines

    n, ranks = args.tensor_size
    print(f"\n| batch | scenario | driver, workloads a list (ms) | driver as verl calls it, a tensor (ms) | tensor / list |")
    print("|---|---|---:|---:|---:|")
    batch = scenario.generate("anyres-mix", n, 42)
    seqlens = torch.from_numpy(tokens(batch))
    times = {False: [], True: []}
    for _ in range(args.rounds):
        for as_tensor in (False, True):
            t = time.perf_counter()
            order = driver(sb, seqlens, ranks, as_tensor)
            times[as_tensor].append(time.perf_counter() - t)
    same = torch.equal(order, driver(sb, seqlens, ranks, False))
    if not same:
        raise SystemExit("bench_verl: the driver's two forms dealt the samples differently")
    a, b = statistics.median(times[False]), statistics.median(times[True])
    print(f"| {n:,} x {ranks:,} | anyres-mix | {a * 1e3:.1f} | {b * 1e3:.1f} | {b / a:.1f}x |")
    print("\n" + "\n".join(prints))


if __name__ == "__main__":
    main()

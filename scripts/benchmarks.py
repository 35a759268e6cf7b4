#!/usr/bin/env python3
"""Writes BENCHMARKS.md: runs the benches and the table examples and puts their tables in one file.

    scripts/benchmarks.py                  # every table, into BENCHMARKS.md (about 20 minutes on 2 cores)
    scripts/benchmarks.py --quick          # a smoke run of every step, into target/benchmarks/BENCHMARKS.quick.md
    scripts/benchmarks.py --no-python      # leave out the Python package's table and verl (no .venv needed)
    scripts/benchmarks.py --no-verl        # leave out the comparison with verl
    scripts/benchmarks.py --python-peers   # add FFD and Karmarkar-Karp against the Python packages
                                           # (pip install -r python/requirements-bench.txt first)
    scripts/benchmarks.py --against-old    # only today's planner against 92013e7's (scripts/plan_rounds.rs)
    scripts/benchmarks.py --against-verl   # only the whole step against verl's balancing
                                           # (python/benches/bench_verl.py; installs verl's wheel
                                           # without dependencies under target/benchmarks/verl)
    scripts/benchmarks.py --only plan-time,against-old --update   # those tables, in place in BENCHMARKS.md
    scripts/benchmarks.py --list           # the steps' names for --only

Every table says the command that made it, the commit and the machine (with its load when the
table started). Times depend on the machine; each ratio is measured in the same run (an
algorithm against sorting the same keys, a plan against its lower bound, a peer on the same
instances), which is what to compare between machines and commits. The tables' shape (sections,
columns, rows) depends only on the options and the code, never on the machine, so two versions
of the file diff row by row. Each step's full output is kept in target/benchmarks/<step>.log.

Needs: cargo, git, and for the Python table the environment of `scripts/python-tests.sh
--prepare` (.venv with the package installed; rebuild it after changing the crate). The
comparison with verl needs torch there too (the environment has it) and, the first time, the
package index (pip installs verl's wheel alone); the ones with 92013e7 and bf14e0f (the 13-seed
table) need the git history.
Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
LOGS = ROOT / "target" / "benchmarks"
FEATURES = ["--features", "scenarios"]


class Failure(Exception):
    """A step failed; the message says which and where its output is."""


# --- running things -------------------------------------------------------------------------


def shown(cmd, env=None):
    """The command as a reader would type it (with the environment variables it sets; paths in
    the repository relative to it)."""
    prefix = "".join(f"{k}={shlex.quote(v)} " for k, v in (env or {}).items() if k != "CRITERION_HOME")
    root = str(ROOT) + os.sep
    return prefix + " ".join(shlex.quote(c[len(root):] if c.startswith(root) else c) for c in cmd)


def run(step, cmd, env=None, cwd=ROOT):
    """Runs `cmd`, keeps its output in target/benchmarks/<step>.log, and returns its stdout."""
    LOGS.mkdir(parents=True, exist_ok=True)
    log = LOGS / f"{step}.log"
    full_env = dict(os.environ, CARGO_TERM_COLOR="never", **(env or {}))
    started = time.monotonic()
    print(f"  $ {shown(cmd, env)}", file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, cwd=cwd, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log.write_text(f"$ {shown(cmd, env)}\n\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}", encoding="utf-8")
    print(f"    {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
        raise Failure(f"step {step!r} failed (exit {proc.returncode}): {shown(cmd, env)}\n{tail}\n(whole output: {log})")
    return proc.stdout


BUILT = {}  # (kind, name) -> the executable built at the start of the run


def build(step, cmd, tag=""):
    """Runs a cargo build with JSON messages and records its executables, so that every table of
    the run comes from this one build even if the sources change while it runs. `tag` tells apart
    the executables of another version's build: each is recorded as (kind, name + tag)."""
    out = run(step, cmd + ["--message-format=json-render-diagnostics"])
    for line in out.splitlines():
        if not line.startswith("{"):
            continue
        msg = json.loads(line)
        if msg.get("reason") == "compiler-artifact" and msg.get("executable"):
            # A copy of its own: another build in the same target folder (of other sources)
            # would overwrite cargo's file while the run reads it.
            kind, name = msg["target"]["kind"][0], msg["target"]["name"]
            copy = LOGS / "bin" / f"{kind}-{name}{tag}"
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(msg["executable"], copy)
            BUILT[(kind, name + tag)] = str(copy)


def exe(kind, name, step):
    if (kind, name) not in BUILT:
        raise Failure(f"step {step!r}: the build made no {kind} {name!r} (built: {sorted(BUILT)})")
    return BUILT[(kind, name)]


def run_built(step, kind, name, cmd, args, env=None):
    """Runs the executable built for `cmd` (the cargo command a reader would type) with `args`."""
    out = run(step, [exe(kind, name, step), *args], env=env)
    return shown(cmd + (["--"] if args and "--" not in cmd else []) + args, env), out


def example(step, name, args):
    """Runs the example `name` built at the start with `args`: (the command, its stdout)."""
    cmd = ["cargo", "run", "--release", *FEATURES, "--example", name]
    return run_built(step, "example", name, cmd, args)


def git(*args):
    return subprocess.run(["git", *args], cwd=ROOT, stdout=subprocess.PIPE, text=True, check=True).stdout.strip()


def commit():
    """HEAD's short hash, and whether the code differs from it (then the tables are of HEAD plus those changes)."""
    head = git("rev-parse", "--short=12", "HEAD")
    paths = ["src", "benches", "examples", "tests", "python/src", "python/microbatch", "python/benches",
             "Cargo.toml", "Cargo.lock"]
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", *paths)
    return f"`{head}`" + (" with uncommitted changes" if dirty else "")


def read(path):
    try:
        return pathlib.Path(path).read_text(encoding="utf-8")
    except OSError:
        return ""


def machine():
    """One line on the machine: CPU, cores, memory, the load now, the compiler."""
    cpu = next((line.split(":", 1)[1].strip() for line in read("/proc/cpuinfo").splitlines()
                if line.startswith("model name")), None) or (os.uname().machine if hasattr(os, "uname") else "?")
    mem = re.search(r"MemTotal:\s+(\d+) kB", read("/proc/meminfo"))
    memory = f", {int(mem.group(1)) / 2**20:.0f} GiB" if mem else ""
    try:
        load = f", load {os.getloadavg()[0]:.1f}"
    except OSError:
        load = ""
    rustc = subprocess.run(["rustc", "--version"], stdout=subprocess.PIPE, text=True).stdout.split()
    return f"{cpu}, {os.cpu_count()} cores{memory}{load}, rustc {rustc[1] if len(rustc) > 1 else '?'}"


# --- reading outputs ------------------------------------------------------------------------


def tables(text):
    """The Markdown tables in `text`: lists of consecutive lines that start with '|'."""
    out, cur = [], []
    for line in text.splitlines():
        if line.startswith("|"):
            cur.append(line.rstrip())
        elif cur:
            out.append(cur)
            cur = []
    if cur:
        out.append(cur)
    return out


def expect_tables(step, text, count):
    found = tables(text)
    if len(found) != count:
        raise Failure(f"step {step!r}: expected {count} table(s) in its output, found {len(found)} "
                      f"(has the example's output changed? see {LOGS / (step + '.log')})")
    return found


def criterion(step, bench, args, quick):
    """Runs a criterion bench and returns {full id: median in ns}; `args` are criterion's (a filter)."""
    warm, measure = ("0.1", "0.3") if quick else ("0.5", "2")
    cmd = ["cargo", "bench", *FEATURES, "--bench", bench]
    crit = ["--warm-up-time", warm, "--measurement-time", measure, *args]
    with tempfile.TemporaryDirectory() as home:
        run(step, [exe("bench", bench, step), "--bench", *crit], env={"CRITERION_HOME": home})
        medians = {}
        for meta in pathlib.Path(home).rglob("new/benchmark.json"):
            estimates = json.loads((meta.parent / "estimates.json").read_text())
            medians[json.loads(meta.read_text())["full_id"]] = estimates["median"]["point_estimate"]
    if not medians:
        raise Failure(f"step {step!r}: criterion measured nothing (filter {args})")
    return shown(cmd + ["--", *crit]), medians


def need(medians, key, step):
    if key not in medians:
        raise Failure(f"step {step!r}: no measurement {key!r} (a bench renamed? found: {sorted(medians)[:8]} ...)")
    return medians[key]


def fmt_time(ns):
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.3g} {unit}" if ns / scale < 100 else f"{ns / scale:.0f} {unit}"
    return f"{ns:.0f} ns"


def fmt_n(n):
    return f"{int(n):,}"


# --- the document ---------------------------------------------------------------------------


class Doc:
    def __init__(self, quick, commit_line):
        self.quick = quick
        self.parts = []
        self.commit = commit_line

    def section(self, title, text=None):
        self.parts.append(f"## {title}\n")
        if text:
            self.parts.append(text.strip() + "\n")

    def table(self, title, about, command, rows, machine_line, after=None):
        """A table: its title, what it measures, the command, commit and machine, the rows."""
        self.parts.append(f"### {title}\n")
        self.parts.append(about.strip() + "\n")
        self.parts.append(f"`{command}` · commit {self.commit} · {machine_line}\n")
        self.parts.append("\n".join(rows) + "\n")
        if after:
            self.parts.append(after.strip() + "\n")

    def text(self):
        return "\n".join(self.parts)


def step_pack(doc, quick):
    m = machine()
    sizes = ["10000"] if quick else ["10000", "100000", "1000000"]
    cmd, med = criterion("pack", "pack", [f"^[a-z_0-9]+/[a-z_0-9]+/({'|'.join(sizes)})$"], quick)
    algorithms = [("first_fit_decreasing", "tokens"), ("best_fit_decreasing", "tokens"), ("first_fit", "tokens"),
                  ("best_fit", "tokens"), ("next_fit", "tokens"), ("streaming_ffd_4096", "tokens"),
                  ("first_fit_decreasing_2d", "(tokens, tiles)"), ("best_fit_decreasing_2d", "(tokens, tiles)"),
                  ("first_fit_2d", "(tokens, tiles)"), ("best_fit_2d", "(tokens, tiles)")]
    big = sizes[-1]
    rows = ["| algorithm | input | " + " | ".join(f"n = {fmt_n(n)}: over the sort" for n in sizes)
            + f" | time at {fmt_n(big)} | sort at {fmt_n(big)} |",
            "|---|---|" + "---:|" * (len(sizes) + 2)]
    for name, kind in algorithms:
        cells = [f"{need(med, f'{name}/{name}/{n}', 'pack') / need(med, f'{name}/sort_unstable/{n}', 'pack'):.2f}x"
                 for n in sizes]
        rows.append(f"| `{name}` | {kind} | " + " | ".join(cells)
                    + f" | {fmt_time(med[f'{name}/{name}/{big}'])} | {fmt_time(med[f'{name}/sort_unstable/{big}'])} |")
    doc.table("Speed against sorting the same keys", """
Inputs of `benches/pack.rs`: log-normal sample lengths (median 1,500 tokens, sigma 1) packed into
sequences of 16,384 tokens; `(tokens, tiles)`: InternVL-like samples (0 to 12 tiles of 256 tokens
plus log-normal text, median 300) against 16,384 tokens and 48 tiles. Each ratio is the
algorithm's median time over that of `sort_unstable` of the same keys in the same run.""",
              cmd, rows, m)


def step_pack_quality(doc, quick):
    m = machine()
    cmd, out = example("pack-quality", "quality_table", ["pack", "10000"] if quick else ["pack"])
    (rows,) = expect_tables("pack-quality", out, 1)
    doc.table("Bins against the lower bound", """
The same inputs: the bins each algorithm opens over the Martello-Toth L2 lower bound, and the
efficiency (tokens over the bins' capacity). With tiles the bound is the larger of the two
dimensions' bounds, each taken alone, so their gap is partly the bound's.""", cmd, rows, m)


def step_pack_peer(doc, quick):
    m = machine()
    sizes = ["100000"] if quick else ["100000", "1000000"]
    cmd, med = criterion("pack-peer", "pack_peer", [f"/({'|'.join(sizes)})$"], quick)
    rows = ["| n | microbatch | seqpacker `obfd_lengths` | `obfd` | `bfd` | fastest seqpacker over microbatch |",
            "|---:|---:|---:|---:|---:|---:|"]
    for n in sizes:
        t = {v: need(med, f"bfd_vs_seqpacker/{v}/{n}", "pack-peer")
             for v in ("microbatch", "seqpacker_obfd_lengths", "seqpacker_obfd", "seqpacker_bfd")}
        best = min(t["seqpacker_obfd_lengths"], t["seqpacker_obfd"], t["seqpacker_bfd"])
        rows.append(f"| {fmt_n(n)} | {fmt_time(t['microbatch'])} | {fmt_time(t['seqpacker_obfd_lengths'])} | "
                    f"{fmt_time(t['seqpacker_obfd'])} | {fmt_time(t['seqpacker_bfd'])} | {best / t['microbatch']:.2f}x |")
    doc.table("Best-fit-decreasing against seqpacker", """
`benches/pack_peer.rs`: sizes uniform in 1..=4096 packed into bins of 4096 by this crate's
`best_fit_decreasing` and by the seqpacker crate's variants, in the same process; the bench
asserts that every variant opens the same number of bins.""", cmd, rows, m)


def step_python_peers(doc, quick, python):
    m = machine()
    cmd = [python, "python/benches/bench_pack_partition.py", "--budget", "5" if quick else "30"]
    out = run("python-peers", cmd)
    found = expect_tables("python-peers", out, 2)
    doc.table("FFD and Karmarkar-Karp against the Python packages", """
`python/benches/bench_pack_partition.py` (peers from `python/requirements-bench.txt`): ours on
numpy arrays, conversion included, the peers on Python lists; same seeded instances; a peer is
left out ("-") where its time, projected from the size before, would pass the budget. FFD: sizes
uniform in [1, 4096], capacity 16,384; Karmarkar-Karp: weights uniform in [1, 10^6].""",
              shown(cmd), found[0] + [""] + found[1], m)


def step_partition(doc, quick):
    m = machine()
    args = ["^(lpt|karmarkar_karp|refine|exact)/(sort_unstable/)?(10000|12|16)$"] if quick else []
    cmd, med = criterion("partition", "partition", args, quick)
    rows = ["| algorithm | n | k | time | reference | time over the reference |", "|---|---:|---:|---:|---|---:|"]

    def add(name, n, k, key, ref_key, ref_name):
        t = need(med, key, "partition")
        ref = med.get(ref_key) if ref_key else None
        ratio = f"{t / ref:.2f}x" if ref else "-"
        rows.append(f"| {name} | {fmt_n(n)} | {k} | {fmt_time(t)} | {ref_name if ref else '-'} | {ratio} |")

    lpt_sizes = ["10000"] if quick else ["10000", "100000", "1000000"]
    for n in lpt_sizes:
        add("`lpt`", n, 1024, f"lpt/{n}", f"lpt/sort_unstable/{n}", "`sort_unstable` of the keys")
    if not quick:
        add("`lpt`, `(id, size)` items", 1_000_000, 1024, "lpt/ids/1000000", "lpt/sort_unstable/1000000",
            "`sort_unstable` of the keys")
        add("`lpt`, sizes up to 2^30", 1_000_000, 1024, "lpt/large/1000000", "lpt/sort_unstable/1000000",
            "`sort_unstable` of the keys")
    for n in (["10000"] if quick else ["10000", "100000"]):
        add("`karmarkar_karp`", n, 64, f"karmarkar_karp/{n}", f"karmarkar_karp/sort_unstable/{n}",
            "`sort_unstable` of the keys")
    if not quick:
        for w in ("verl llava-sft", "verl anyres-mix", "verl interleaved"):
            add(f"`karmarkar_karp`, {w}", 65536, 1024, f"karmarkar_karp k=1024/{w}/65536",
                "karmarkar_karp k=1024/uniform/65536", "the same on uniform weights")
    for n in (["10000"] if quick else ["10000", "100000"]):
        add("`refine` (of the LPT result)", n, 64, f"refine/{n}", f"refine/sort_unstable/{n}",
            "`sort_unstable` of the keys")
    if not quick:
        add("`Partitioner` (default)", 100000, 1000, "partitioner/default/100000", "partitioner/lpt/100000", "`lpt`")
        add("`Partitioner`, 2 dims, `PerDim`, equal counts", 5000, 250, "partitioner/per_dim_refined/5000",
            "partitioner/per_dim_lpt/5000", "the same unrefined")
    for n in (["12", "16"] if quick else ["12", "16", "20"]):
        add("`exact` (node budget 10^6)", n, 3, f"exact/{n}", None, None)
    doc.table("Speed", """
`benches/partition.rs`: sizes uniform in 1..=16,384 (`u32`), and verl's workload `24576 T + T^2`
of each scenario's 65,536 samples; each time against a reference measured in the same run.""",
              cmd, rows, m)


def step_partition_quality(doc, quick):
    m = machine()
    cmd, out = example("partition-quality", "quality_table", ["partition"])
    (rows,) = expect_tables("partition-quality", out, 1)
    doc.table("Largest part against the lower bound", """
The bench's inputs: each algorithm's largest part over the lower bound `max(ceil(sum / k),
largest item)` (1 is optimal).""", cmd, rows, m)


def step_plan_table(doc, quick):
    m = machine()
    cmd, out = example("plan-table", "plan_table", ["64", "42"] if quick else [])
    (rows,) = expect_tables("plan-table", out, 1)
    doc.table("Step time over the lower bound, against token balancing", """
`examples/plan_table.rs`: each scenario's seeded batch (seed 42, 64 samples a rank) with its
preset, sequence length and cap; `given`: per-sample costs in seconds from an independent
"measured" model that no preset knows, planned with `cost::Given`. Each cell is the predicted
step time under the row's sync model over its lower bound (1 is optimal): the naive baseline
(loader order, next fit, dealt in turn), verl-style Karmarkar-Karp on `24576 T + T^2` with
equal counts, this planner on token counts, and this planner. `planning`: the wall time of
that one plan on this machine.""", cmd, rows, m)


BEFORE = "bf14e0f"  # the planner before issue 45's rewrite (its quality target: "today's")
BEFORE_DIR = LOGS / "before-45"


def build_before(step):
    """Builds this tree's examples/plan_table.rs against the crate at BEFORE: the commit extracted
    (git archive, old_tree) under target/benchmarks/before-45/, the example copied over its
    own (it uses only the public API, which BEFORE has), built in a target folder of its own.
    Returns the executable."""
    tree = old_tree(BEFORE, BEFORE_DIR, rename=False)
    source = (ROOT / "examples" / "plan_table.rs").read_bytes()
    copy = tree / "examples" / "plan_table.rs"
    if copy.read_bytes() != source:  # written (dated now) only when it changes: cargo then rebuilds it
        copy.write_bytes(source)
    build(f"build-{step}-{BEFORE}", ["cargo", "build", "--release", *FEATURES, "--example", "plan_table",
                                      "--manifest-path", str(tree / "Cargo.toml"),
                                      "--target-dir", str(BEFORE_DIR / "target")], tag=f"-{BEFORE}")
    return exe("example", f"plan_table-{BEFORE}", step)


def seed_rows(step, out):
    """The seeds mode's rows: {(scenario, costs, sync, R): (mean, worst)} in the order printed."""
    (found,) = expect_tables(step, out, 1)
    head = [c.strip() for c in found[0].strip("|").split("|")]
    want = ["scenario", "costs", "sync model", "R", "effort", "mean", "worst"]
    if head[:len(want)] != want:
        raise Failure(f"step {step!r}: the seeds table's columns are {head}, expected {want} first "
                      f"(see {LOGS / (step + '.log')})")
    rows = {}
    for line in found[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[tuple(cells[:4])] = (float(cells[5]), float(cells[6]))
    return rows


def step_plan_seeds(doc, quick):
    """The 13-seed quality table, at BEFORE and today: the same example (today's file) built
    against both versions of the crate, every sync model, given and preset costs."""
    m = machine()
    old = build_before("plan-seeds")
    before, today = {}, {}
    for ranks in (["64"] if quick else ["64", "1024"]):
        for sync in ("step", "micro-step", "phase"):
            name, args = f"plan-seeds-{sync}-{ranks}", ["seeds", sync, ranks, "default", "both"]
            before.update(seed_rows(f"{name}-{BEFORE}", run(f"{name}-{BEFORE}", [old, *args])))
            _, out = example(name, "plan_table", args)
            today.update(seed_rows(name, out))
    if before.keys() != today.keys():
        raise Failure(f"step 'plan-seeds': {BEFORE} and today printed different rows "
                      f"({sorted(before.keys() ^ today.keys())}; see {LOGS}/plan-seeds-*.log)")
    rows = [f"| scenario | costs | sync model | R | {BEFORE} mean | {BEFORE} worst | today mean | today worst "
            f"| worst, today - {BEFORE} (points) |",
            "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    rises = []  # (points, which, row)
    for key, (mean, worst) in today.items():
        old_mean, old_worst = before[key]
        rises += [(round((mean - old_mean) * 100, 2), "mean", key),
                  (round((worst - old_worst) * 100, 2), "worst", key)]
        rows.append(f"| {' | '.join(key)} | {old_mean:.4f} | {old_worst:.4f} | {mean:.4f} | {worst:.4f} | "
                    f"{(worst - old_worst) * 100:+.2f} |")
    top = {which: max(r for r in rises if r[1] == which) for which in ("mean", "worst")}
    said = "; ".join(f"{which} {p:+.2f} points ({', '.join(key)})" if p > 0 else f"no {which} above {BEFORE}'s"
                     for which, (p, _, key) in top.items())
    within = all(p <= 0.1 for p, _, _ in rises)
    verdict = textwrap.fill(f"Largest rise over {BEFORE}: {said}. Every row's mean and worst within 0.1 point "
                            f"of {BEFORE}'s (issue 45's target): {'yes' if within else 'no'}.", 100)
    doc.table(f"Over 13 seeds, {BEFORE} and today", f"""
`examples/plan_table.rs`, seeds mode (`seeds <sync> <ranks> default both`), this tree's file run
twice: built here, and built against the crate at commit `{BEFORE}` (the planner before issue
45's rewrite; extracted by `git archive` under `target/benchmarks/before-45/`, the example copied
over its own: it uses only the public API). Each scenario's batch over the seeds 42, 7, 1, 3, 5,
2, 4, 6, 8, 9, 10, 11 and 12 (64 samples a rank), with the given costs (`cost::Given`, told
each sample's cost in seconds from the independent "measured" model) and with the scenario's
preset: the mean and the worst over the seeds of the predicted step time over the lower bound
(1 is optimal). A point is 0.01 of the ratio; differences are of the printed four-decimal
ratios. Times are in the timing tables.""", "scripts/benchmarks.py --only plan-seeds" + (" --quick" if quick else ""),
              rows, m, after=verdict)


def step_gain(doc, quick):
    m = machine()
    cmd, out = example("gain", "quality_table", ["gain"] + (["64"] if quick else []))
    (rows,) = expect_tables("gain", out, 1)
    doc.table("Gain against what users run", """
The same batches and planner (preset costs): the predicted step time of what users run without
the planner (`Report::users_baseline`: `DistributedSampler`'s deal, fixed micro-batches of equal
count, first fit) and of the naive packed plan (`Report::baseline`) over the plan's. Predicted by
the cost model, not measured.""", cmd, rows, m)


def step_plan_time(doc, quick):
    m = machine()
    sizes = [("65536,1024", "5")] if quick else [("65536,1024", "5"), ("1000000,16384", "3")]
    rows = ["| batch | sync model | plan (median) | sort of the scrambled ids (median) | plan over the sort | plan / lower bound | fingerprint |",
            "|---|---|---:|---:|---:|---:|---|"]
    commands = []
    for size, rounds in sizes:
        env = {"MICROBATCH_BENCH_ROUNDS": "1" if quick else rounds, "MICROBATCH_BENCH_SIZE": size}
        cmd, out = run_built(f"plan-rounds-{size.split(',')[0]}", "bench", "plan",
                             ["cargo", "bench", *FEATURES, "--bench", "plan"], [], env=env)
        commands.append(cmd)
        head = re.search(r"^(\d+) anyres-mix samples over (\d+) ranks, \d+ rounds: sorting \d+ scrambled ids ([\d.]+) ms", out, re.M)
        lines = re.findall(r"^([a-z-]+): (\d+) ms \(median\), ([\d.]+)x the sort .*?, ([\d.]+) over its bound, fingerprint ([0-9a-f]+)$",
                           out, re.M)
        if not head or len(lines) != 3:
            raise Failure(f"plan rounds: unexpected output (see {LOGS}/plan-rounds-*.log)")
        for sync, ms, ratio, bound, fp in lines:
            rows.append(f"| {fmt_n(head.group(1))} `anyres-mix` samples over {fmt_n(head.group(2))} ranks | {sync} | "
                        f"{ms} ms | {head.group(3)} ms | {ratio}x | {bound} | `{fp}` |")
    doc.table("Planning time over sorting the ids", """
`benches/plan.rs`, rounds mode: each round sorts the batch's scrambled ids, plans, and sorts again,
for every sync model in turn in one process; the ratio is the median over the rounds of the plan
over the mean of the two sorts around it. The fingerprint tells whether two versions make the
same plans.""", " ; ".join(commands), rows, m)


def step_plan_memory(doc, quick):
    m = machine()
    rows = ["| sync model | extra memory at peak, bytes a sample | of which the plan itself |", "|---|---:|---:|"]
    for sync in ("step", "micro-step", "phase"):
        env = {"MICROBATCH_BENCH_MEMORY": sync}
        _, out = run_built(f"plan-memory-{sync}", "bench", "plan",
                           ["cargo", "bench", *FEATURES, "--bench", "plan"], [], env=env)
        hit = re.search(r"([\d.]+) bytes a sample at peak \(of which the plan itself: ([\d.]+)\)", out)
        if not hit:
            if "not measured" in out:
                rows.append(f"| {sync} | not measured (needs Linux /proc) | |")
                continue
            raise Failure(f"plan memory: unexpected output (see {LOGS}/plan-memory-{sync}.log)")
        rows.append(f"| {sync} | {hit.group(1)} | {hit.group(2)} |")
    doc.table("Memory", """
`benches/plan.rs`, memory mode: the peak resident memory of a fresh process while it plans 10^6
`anyres-mix` samples over 16,384 ranks, over the samples (Linux).""",
              f"MICROBATCH_BENCH_MEMORY=<sync> cargo bench {' '.join(FEATURES)} --bench plan", rows, m)


def step_optimum(doc, quick):
    m = machine()
    args = ["plan_optimum::table", "--ignored", "--nocapture", "--exact"]
    _, out = run_built("optimum", "test", "it", ["cargo", "test"], args)
    cmd = shown(["cargo", "test", "--release", *FEATURES, "--test", "it", args[0], "--", *args[1:]])
    (rows,) = expect_tables("optimum", out, 1)
    doc.table("Against the exact optimum on small instances", """
`tests/it/plan_optimum.rs`: 40 random instances (8 to 12 samples, 2 or 3 ranks, 1 to 4
micro-steps) and 10 of each scenario, each under every sync model, against optimal plans found
by branch and bound (`tests/it/common/exact.rs`, checked against plain enumeration): the plan and
the lower bound over the optimum.""", cmd, rows, m)


def step_locality(doc, quick):
    m = machine()
    cmd, out = example("locality", "locality_table", ["64", "42"] if quick else [])
    found = expect_tables("locality", out, 3)
    doc.table("Samples and bytes moved", """
`examples/locality_table.rs`: origins are the data loader's round-robin placement (sample `i` on
rank `i mod R`), 64 samples a rank, seed 42; "free" is the plan without locality, "0.5%" the
plan with `Locality::new(0.005)`, which keeps the step time within 0.5% of the free plan's.
Bytes are image bytes (2,352 an image token).""", cmd, found[0], m)
    doc.table("Bytes moved against the tolerance", "The same batches: the share of image bytes moved at each tolerance.",
              cmd, found[1], m)
    doc.table("Planning time with locality", """
65,536 samples over 1,024 ranks: the planning time with a 0.5% tolerance over the time without,
both measured in the same run (best of 5).""", cmd, found[2], m)


def step_calibrate(doc, quick):
    m = machine()
    windows = ["1024"] if quick else ["1024", "4096", "16384"]
    cmd, med = criterion("calibrate", "calibrate", [f"/({'|'.join(windows)})$"], quick)
    rows = ["| window (micro-batches) | refit | sort of the window's 7 W feature values | refit over the sort |",
            "|---:|---:|---:|---:|"]
    for w in windows:
        t = need(med, f"calibrator_refit/refit/{w}", "calibrate")
        s = need(med, f"calibrator_refit/sort_unstable_features/{w}", "calibrate")
        rows.append(f"| {fmt_n(w)} | {fmt_time(t)} | {fmt_time(s)} | {t / s:.0f}x |")
    doc.table("Refit time", """
`benches/calibrate.rs`: `Calibrator::refit` on a full window of InternVL's 7 terms (micro-batches
of 1 to 12 samples timed per phase, 3% noise, 2% of rows slowed 2x), once a step.""", cmd, rows, m)


def step_closed_loop(doc, quick):
    m = machine()
    ranks = "8" if quick else "64"
    cmd, out = example("closed-loop", "closed_loop", [ranks])
    rows = ["| scenario | R | step 1 | step 2 | step 3 | steps 3-20, worst | preset's plans, steps 3-20, worst |",
            "|---|---:|---:|---:|---:|---:|---:|"]
    for block in re.split(r"\n(?=\S+, \d+ ranks)", out.strip()):
        head = re.match(r"(\S+), (\d+) ranks", block)
        # A step's row: step | calibrated | preset | truth | calibrated / truth | rows | R^2 | rejected | drift,
        # the first four plans' values each the truth's step time over its bound.
        steps = [[float(x) for x in line.split("|")[:5]]
                 for line in block.splitlines() if re.match(r"\s*\d+ \|", line)]
        if not head or len(steps) != 20:
            raise Failure(f"closed loop: unexpected output (see {LOGS}/closed-loop.log)")
        cal = [s[4] for s in steps]
        preset = [s[2] / s[3] for s in steps]
        rows.append(f"| {head.group(1)} | {head.group(2)} | {cal[0]:.4f} | {cal[1]:.4f} | {cal[2]:.4f} | "
                    f"{max(cal[2:]):.4f} | {max(preset[2:]):.4f} |")
    doc.table("Online calibration, closed loop", """
`examples/closed_loop`: 20 steps, each a fresh batch (64 samples a rank, per-phase barriers),
planned with the calibrator's model (step 1: the uncalibrated preset), every micro-batch
"measured" under a hidden truth (other efficiencies, overheads per image, tile, sample and
micro-batch that the preset does not have, 3% noise, 2% of micro-batches slowed 2x) and refitted
at the step boundary. Each cell: the truth's step time of the calibrated plan over that of the
plan made on the truth itself (1 is as good as knowing the truth); the last column the same for
the preset's plans.""", cmd, rows, m)


def step_python(doc, quick, python):
    m = machine()
    cmd = [python, "python/benches/bench_plan.py", "--repeat", "2" if quick else "5"]
    if quick:
        cmd += ["--samples", "8192", "--ranks", "128"]
    out = run("python", cmd)
    (rows,) = expect_tables("python", out, 1)
    doc.table("Planning from Python", """
`python/benches/bench_plan.py` with the package installed in `.venv` (a release build; rebuild it
after changing the crate: `scripts/python-tests.sh --prepare`): the scenarios' batches, 65,536
samples over 1,024 ranks (fewer with `--quick`). The wall time of `Planner.plan` from numpy arrays
(checks, conversion, planning, wrapping) against the Rust planner's own time inside the same call,
median of 5 after a warm-up. The ragged form passes one array of image tokens a sample.""", shown(cmd), rows, m)


# --- against an older version of the planner --------------------------------------------------

OLD = "92013e7"  # the planner before the tuning passes (issue 45's speed target)
AGAINST = LOGS / "against-old"


def old_tree(rev, under=AGAINST, rename=True):
    """The sources of commit `rev`, extracted (git archive) into `under`/src-<rev> once, the
    package renamed `microbatch_old` if `rename` (so that one program can link both versions);
    works from any clone with the history."""
    full = git("rev-parse", "--verify", f"{rev}^{{commit}}")
    tree = under / f"src-{rev}"
    stamp = tree / ".extracted"
    name = "microbatch_old" if rename else "microbatch"
    if read(stamp).strip() != f"{full} {name}":
        if tree.exists():
            shutil.rmtree(tree)
        tree.mkdir(parents=True)
        archive = subprocess.run(["git", "archive", "--format=tar", full], cwd=ROOT, stdout=subprocess.PIPE, check=True)
        # -m: files dated now, so that cargo never takes an older build for this one.
        subprocess.run(["tar", "-x", "-m", "-C", str(tree)], input=archive.stdout, check=True)
        if rename:
            manifest = tree / "Cargo.toml"
            text, renamed = re.subn(r'^name = "microbatch"$', 'name = "microbatch_old"', manifest.read_text(),
                                    count=1, flags=re.M)
            if not renamed:
                raise Failure(f"step 'against-old': no `name = \"microbatch\"` line in {rev}'s Cargo.toml to rename")
            manifest.write_text(text, encoding="utf-8")
        stamp.write_text(f"{full} {name}\n", encoding="utf-8")
    return tree


def build_against_old():
    """Builds scripts/plan_rounds.rs as the one program of a throwaway package (outside the
    workspace) that depends on today's crate and on the crate at OLD, in a target folder of its
    own (target/benchmarks/against-old/target)."""
    tree = old_tree(OLD)
    pkg = AGAINST / "plan-rounds"
    (pkg / "src").mkdir(parents=True, exist_ok=True)
    manifest = pkg / "Cargo.toml"
    manifest.write_text(f"""# Written by scripts/benchmarks.py: scripts/plan_rounds.rs, today's crate against {OLD}'s.
[package]
name = "plan-rounds"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
microbatch = {{ path = "{ROOT}", features = ["scenarios"] }}
old = {{ package = "microbatch_old", path = "{tree}", features = ["scenarios"] }}

# Not a member of the repository's workspace.
[workspace]
""", encoding="utf-8")
    shutil.copy2(ROOT / "scripts" / "plan_rounds.rs", pkg / "src" / "main.rs")
    if not (pkg / "Cargo.lock").exists():
        shutil.copy2(ROOT / "Cargo.lock", pkg / "Cargo.lock")  # today's dependency versions
    build("build-plan-rounds", ["cargo", "build", "--release", "--manifest-path", str(manifest),
                                "--target-dir", str(AGAINST / "target")])


def parse_rounds(step, out):
    """plan_rounds.rs's output: {(version, sync): [seconds]}, {(version, sync): ratio},
    {(version, sync): fingerprint}, and per (round, sync) {version: seconds}."""
    if not re.search(r"^batch \d+ \d+ [0-9a-f]+$", out, re.M):
        raise Failure(f"step {step!r}: unexpected output of plan_rounds.rs (see {LOGS / (step + '.log')})")
    times, ratio, prints, rounds = {}, {}, {}, {}
    for r, version, sync, secs, q, fp in re.findall(r"^round (\d+) (\S+) (\S+) ([\d.]+) ([\d.]+) ([0-9a-f]+)$", out, re.M):
        times.setdefault((version, sync), []).append(float(secs))
        ratio[(version, sync)], prints[(version, sync)] = float(q), fp
        rounds.setdefault((r, sync), {})[version] = float(secs)
    if not times:
        raise Failure(f"step {step!r}: plan_rounds.rs timed nothing (see {LOGS / (step + '.log')})")
    return times, ratio, prints, rounds


def median(values):
    v = sorted(values)
    return v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2


TODAY_PRINTS = {}  # (samples, ranks) -> {sync: fingerprint} of today's anyres-mix plans (seed 42), from against-old


def step_against_old(doc, quick):
    """Today's planner against the one at OLD, both linked into one program
    (scripts/plan_rounds.rs) that alternates them plan by plan on the same batch."""
    m = machine()
    n, ranks, rounds = ("8192", "128", "2") if quick else ("65536", "1024", "11")
    _, out = run_built("against-old", "bin", "plan-rounds", ["plan-rounds"], [n, ranks, rounds])
    times, ratios, prints, pairs = parse_rounds("against-old", out)
    syncs = list(dict.fromkeys(sync for _, sync in times))
    TODAY_PRINTS[(int(n), int(ranks))] = {sync: prints[("today", sync)] for sync in syncs}
    rows = [f"| sync model | {OLD} (median) | today (median) | today / {OLD} (median of the rounds) "
            f"| {OLD}: plan / lower bound | today: plan / lower bound |",
            "|---|---:|---:|---:|---:|---:|"]
    for sync in syncs:
        if ("old", sync) not in times or ("today", sync) not in times:
            raise Failure(f"step 'against-old': {sync!r} was not timed for both versions (see {LOGS}/against-old.log)")
        each = [p["today"] / p["old"] for (_, s), p in pairs.items() if s == sync]
        rows.append(f"| {sync} | {fmt_time(median(times[('old', sync)]) * 1e9)} | "
                    f"{fmt_time(median(times[('today', sync)]) * 1e9)} | "
                    f"{median(each):.2f}x ({min(each):.2f}x-{max(each):.2f}x) | "
                    f"{ratios[('old', sync)]:.4f} | {ratios[('today', sync)]:.4f} |")
    cmd = "scripts/benchmarks.py --against-old" + (" --quick" if quick else "")
    doc.table(f"Today's planner against {OLD}", f"""
`scripts/plan_rounds.rs` (`plan-rounds {n} {ranks} {rounds}`): one release program linking this
tree's crate and the crate at commit `{OLD}` (the planner before the tuning passes; extracted by
`git archive` under `target/benchmarks/against-old/` and renamed), each generating the same
{fmt_n(n)} `anyres-mix` samples (seed 42; checked) and planning them over {fmt_n(ranks)} ranks
with every sync model: one plan of each as a warm-up, then rounds (rounds: {rounds}) in which the
two versions plan in turn, plan by plan, the first alternating from round to round. Medians over
the rounds; the ratio is the median over the rounds of today's time over {OLD}'s in the same
round (below 1: today is faster), with the lowest and highest of the rounds. Plan / lower
bound: `Report::ratio` of each version's plan (each version's own bound).""", cmd, rows, m)


def step_against_verl(doc, quick, python):
    """The whole step as verl balances it against microbatch's plan (python/benches/bench_verl.py)."""
    m = machine()
    sizes, rounds = ("8192x128", "1") if quick else ("65536x1024,8192x128", "3")
    cmd = [python, "python/benches/bench_verl.py", "--verl", str(LOGS / "verl"), "--sizes", sizes,
           "--rounds", rounds, "--tensor-size", "8192x128"]
    out = run("against-verl", cmd)
    step, forms = expect_tables("against-verl", out, 2)
    version = re.search(r"^verl (\S+) ", out, re.M)
    version = version.group(1) if version else "?"
    # The Python package in .venv must be this tree's crate: where the comparison with the old
    # planner planned the same batch in this run, the fingerprints must agree.
    checked = []
    for name, n, ranks, sync, fp in re.findall(r"^fingerprint (\S+) (\d+) (\d+) (\S+) ([0-9a-f]+)$", out, re.M):
        today = TODAY_PRINTS.get((int(n), int(ranks)), {})
        if name != "anyres-mix" or sync not in today:
            continue
        if today[sync] != fp:
            raise Failure(f"step 'against-verl': the Python package in .venv plans {n} anyres-mix samples over "
                          f"{ranks} ranks ({sync}) differently from this tree's crate (fingerprint {fp}, the "
                          f"crate's {today[sync]}): it is an older build; rebuild it "
                          "(scripts/python-tests.sh --prepare) and run again")
        checked.append(f"`anyres-mix` {fmt_n(n)} x {fmt_n(ranks)}, {sync}")
    check = (f"The package's plans are this tree's: its fingerprints equal those of the comparison\n"
             f"with {OLD} above ({', '.join(checked)})." if checked else
             "Not checked in this run that the package in .venv is a build of this tree (a run with\n"
             "--against-old compares the fingerprints).")
    doc.table("The whole step against verl's balancing", f"""
`python/benches/bench_verl.py`: verl's own code (`verl/utils/seqlen_balancing.py` of verl
{version}, its wheel installed without dependencies under
`target/benchmarks/verl`, the file loaded alone because the package imports ray and tensordict)
balancing each scenario's batch (seed 42, 64 samples a rank) as a step of verl does: its driver's
Karmarkar-Karp over the ranks with equal counts on `24576 T + T^2` (`_balance_batch`'s lines,
with the workloads as a list, faster than verl's tensor: see the next table) plus the slowest
rank's `rearrange_micro_batches` (Karmarkar-Karp into the micro-batch count the ranks agree on,
`max_token_len` the scenario's sequence length), against `Planner.plan` of the Python package
(this crate, built into `.venv`) on the same samples, from numpy arrays, for every sync model,
in one process, in alternating rounds (rounds: {rounds}). The driver and ours: medians; the slowest
rank: the largest over the ranks of each rank's best round (every rank timed in the first round,
the 16 slowest of it again in the others). "verl / microbatch": verl's step time over ours
(the goal: 10x).

{check}""", shown(cmd), step, m)
    doc.table("verl's driver: workloads as a list and as verl passes them", """
The same driver on one batch: verl's `_balance_batch` passes `calculate_workload`'s tensor to
Karmarkar-Karp, which then compares 0-d tensors one at a time; the table above uses a list (the
same partition, checked).""", shown(cmd), forms, m)


# --- main -------------------------------------------------------------------------------------


def preflight(args):
    """Checks what the run needs before the long steps; returns the Python interpreter (or None)."""
    if args.no_python:
        return None
    venv = ROOT / ".venv" / "bin" / "python"
    python = str(venv) if venv.exists() else sys.executable
    modules = ("import numpy, microbatch" + (", binpacking, prtpy, numberpartitioning" if args.python_peers else "")
               + ("" if args.no_verl else ", torch"))
    probe = subprocess.run([python, "-c", modules], cwd=ROOT / "python" / "benches",
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if probe.returncode != 0:
        fix = ("pip install -r python/requirements-bench.txt" if args.python_peers
               else "scripts/python-tests.sh --prepare")
        raise Failure(f"{python} cannot `{modules}`: {probe.stderr.strip().splitlines()[-1] if probe.stderr else ''}\n"
                      f"run `{fix}` first, or pass --no-python")
    return python


def step_name(fn):
    """A step's name for --only: the function's name without `step_`, dashes for underscores."""
    return fn.__name__.removeprefix("step_").replace("_", "-")


def named(name, fn):
    """`fn` under the step name `name` (for the steps that take more than (doc, quick))."""
    fn.__name__ = f"step_{name.replace('-', '_')}"
    return fn


def blocks(text):
    """`text` cut at its '## ' and '### ' headings: [[heading line or '', [lines up to the next]]]."""
    out = [["", []]]
    for line in text.splitlines():
        if line.startswith(("## ", "### ")):
            out.append([line, []])
        else:
            out[-1][1].append(line)
    return out


def update_in_place(path, partial):
    """Replaces in the document at `path` each table ('### ' block) of the document `partial`
    (the same heading in the same '## ' section), or adds it at the end of its section, or adds
    the section at the end of the document; everything else stays as it was."""
    def spaced(lines):  # a block ends with one blank line before the next heading
        return lines if lines and lines[-1] == "" else lines + [""]

    have = blocks(read(path))
    section = None
    for head, lines in blocks(partial)[1:]:
        lines = spaced(lines)
        if head.startswith("## "):
            section = [head, lines]
            continue
        # The section's span in `have`: from its heading to the next '## ' heading.
        at = next((i for i, b in enumerate(have) if section and b[0] == section[0]), None)
        if at is None:
            have[-1][1] = spaced(have[-1][1])
            have += [list(section), [head, lines]]
            continue
        end = next((j for j in range(at + 1, len(have)) if have[j][0].startswith("## ")), len(have))
        hit = next((j for j in range(at + 1, end) if have[j][0] == head), None)
        if hit is None:
            have[end - 1][1] = spaced(have[end - 1][1])
            have.insert(end, [head, lines])
        else:
            have[hit][1] = lines
    text = "\n".join("\n".join(([h] if h else []) + ls) for h, ls in have)
    pathlib.Path(path).write_text(text.rstrip("\n") + "\n", encoding="utf-8")


def self_test():
    """Checks update_in_place on a small document (run by --self-test)."""
    doc = ("# T\n\nintro\n\n## A\n\nabout A\n\n### x\n\nold x\n\n### y\n\nold y\n\n"
           "## B\n\n### x\n\nB's x\n")
    partial = ("## A\n\nabout A\n\n### y\n\nnew y\n| 1 |\n\n### z\n\nnew z\n\n## B\n\n### x\n\nB's new x\n\n"
               "## C\n\n### w\n\nnew w\n")
    want = ("# T\n\nintro\n\n## A\n\nabout A\n\n### x\n\nold x\n\n### y\n\nnew y\n| 1 |\n\n### z\n\nnew z\n\n"
            "## B\n\n### x\n\nB's new x\n\n## C\n\n### w\n\nnew w\n")
    with tempfile.TemporaryDirectory() as d:
        path = pathlib.Path(d) / "B.md"
        path.write_text(doc, encoding="utf-8")
        update_in_place(path, partial)
        got = path.read_text(encoding="utf-8")
        if got != want:
            raise Failure(f"self-test: update_in_place wrote\n{got}\ninstead of\n{want}")
        update_in_place(path, partial)  # again: the same document
        if path.read_text(encoding="utf-8") != want:
            raise Failure("self-test: update_in_place is not idempotent")
    print("self-test: update_in_place passed", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description="Writes BENCHMARKS.md from the benches and the table examples.")
    ap.add_argument("--quick", action="store_true",
                    help="every step on less work with short measurements (a smoke test; not for committing)")
    ap.add_argument("--no-python", action="store_true",
                    help="leave out the Python package's table and the comparison with verl (no .venv needed)")
    ap.add_argument("--python-peers", action="store_true",
                    help="add FFD and Karmarkar-Karp against the Python packages of python/requirements-bench.txt")
    ap.add_argument("--no-verl", action="store_true",
                    help="leave out the comparison with verl (which installs verl's wheel, without its "
                    "dependencies, under target/benchmarks/verl the first time)")
    ap.add_argument("--only", default="",
                    help="only these steps (comma-separated names, listed by --list), into "
                    "target/benchmarks/BENCHMARKS.only.md (or --out), or into BENCHMARKS.md with --update")
    ap.add_argument("--against-old", action="store_true",
                    help=f"only the comparison with the planner at {OLD} (as --only against-old; a full run has it)")
    ap.add_argument("--against-verl", action="store_true",
                    help="only the comparison with verl's balancing (as --only against-verl; a full run has it)")
    ap.add_argument("--update", action="store_true",
                    help="with --only: replace those tables in BENCHMARKS.md (or --out) in place, leaving the others")
    ap.add_argument("--list", action="store_true", help="print the steps' names and exit")
    ap.add_argument("--self-test", action="store_true", help="check the in-place update on a small document and exit")
    ap.add_argument("--out", type=pathlib.Path, help="where to write (default: BENCHMARKS.md, "
                    "or target/benchmarks/BENCHMARKS.quick.md with --quick)")
    args = ap.parse_args()
    if args.self_test:
        try:
            self_test()
        except Failure as e:
            print(f"benchmarks: {e}", file=sys.stderr)
            return 1
        return 0
    only = {o.strip() for o in args.only.split(",") if o.strip()}
    only |= {"against-old"} if args.against_old else set()
    only |= {"against-verl"} if args.against_verl else set()
    if args.update and not only:
        ap.error("--update needs --only (or --against-old, --against-verl): a full run writes the whole file")
    if args.update and args.quick:
        ap.error("--update writes BENCHMARKS.md: not with --quick")
    default_out = (LOGS / "BENCHMARKS.quick.md" if args.quick
                   else ROOT / "BENCHMARKS.md" if not only or args.update else LOGS / "BENCHMARKS.only.md")
    out = args.out or default_out
    started = time.monotonic()
    try:
        python = (None if args.list or (only and not only & {"python", "python-peers", "against-verl"})
                  else preflight(args))
        steps = [
            ("Bin packing", None, [step_pack, step_pack_quality, step_pack_peer]
             + ([named("python-peers", lambda d, q: step_python_peers(d, q, python))] if args.python_peers else [])),
            ("Partitioning", None, [step_partition, step_partition_quality]),
            ("Planner", """
Batches from `microbatch::scenario` (feature `scenarios`): `llava-sft` (`llava-1.5-7b`, 4,096
tokens), `anyres-mix` (`qwen2.5-vl-7b`, 16,384 tokens), `interleaved` (`internvl2.5-8b`, 16,384
tokens and 48 tiles). Sync models: `step` (one barrier per step, DDP), `micro-step` (a barrier per
micro-step: FSDP, ZeRO-3, pipelines), `phase` (the vision and language phases each a barrier).
The lower bound is the one `Report::lower_bound` gives (see the `plan` module's docs).""",
             [step_plan_table, step_plan_seeds, step_gain, step_plan_time, step_plan_memory, step_optimum]),
            ("Locality", None, [step_locality]),
            ("Calibration", None, [step_calibrate, step_closed_loop]),
        ]
        if python or args.list:
            steps.append(("Python package", None, [named("python", lambda d, q: step_python(d, q, python))]))
        steps.append(("Planning speed against the planner before the tuning passes and against verl", None,
                      [step_against_old]
                      + ([named("against-verl", lambda d, q: step_against_verl(d, q, python))]
                         if (python or args.list) and not args.no_verl else [])))
        names = [step_name(fn) for _, _, fns in steps for fn in fns]
        if args.list:
            print("\n".join(names))
            return 0
        unknown = only - set(names)
        if unknown:
            raise Failure(f"--only: no step named {', '.join(sorted(unknown))} in this run "
                          f"(steps: {', '.join(names)}; against-verl needs the Python environment and no --no-verl)")
        selected = [(title, text, [fn for fn in fns if not only or step_name(fn) in only]) for title, text, fns in steps]
        selected = [(title, text, fns) for title, text, fns in selected if fns]
        chosen = {step_name(fn) for _, _, fns in selected for fn in fns}

        doc_commit = commit()  # what the builds below compile
        if chosen - {"against-old", "against-verl", "python", "python-peers"}:
            print("building (release: the examples, the benches, the integration tests)", file=sys.stderr)
            build("build-examples", ["cargo", "build", "--release", *FEATURES, "--examples"])
            build("build-benches", ["cargo", "bench", *FEATURES, "--no-run"])
            build("build-tests", ["cargo", "test", "--release", *FEATURES, "--test", "it", "--no-run"])
        if "against-old" in chosen:
            print(f"building scripts/plan_rounds.rs with today's crate and {OLD}'s", file=sys.stderr)
            build_against_old()

        doc = Doc(args.quick, doc_commit)
        for title, text, fns in selected:
            doc.section(title, text)
            for fn in fns:
                print(f"[{title}] {step_name(fn)}", file=sys.stderr, flush=True)
                fn(doc, args.quick)
    except Failure as e:
        print(f"benchmarks: {e}", file=sys.stderr)
        return 1
    minutes = (time.monotonic() - started) / 60
    options = " ".join(o for o, on in (("--quick", args.quick), ("--no-python", args.no_python),
                                       ("--python-peers", args.python_peers), ("--no-verl", args.no_verl),
                                       (f"--only {','.join(sorted(only))}", bool(only))) if on)
    out.parent.mkdir(parents=True, exist_ok=True)
    if args.update:
        update_in_place(out, doc.text())
        print(f"updated {', '.join(sorted(chosen))} in {out} in {minutes:.1f} minutes", file=sys.stderr)
        return 0
    header = f"""# Benchmarks

Written by `scripts/benchmarks.py{(' ' + options) if options else ''}` ({minutes:.0f} minutes on the machine below);
regenerate it with that command, never by hand. Each table gives the command that made it, the
commit and the machine. Times depend on the machine and its load; the ratios (against sorting the
same keys, against a lower bound, against a peer on the same instances) are measured in the same
run and are what to compare. What was tried, measured and dropped along the way is in the git
history of this file.
"""
    if args.quick:
        header += "\n**A `--quick` run: short measurements of less work, a smoke test of the command.**\n"
    if only:
        header += f"\n**Only some steps ({', '.join(sorted(chosen))}): not the whole file.**\n"
    out.write_text(header + "\n" + doc.text(), encoding="utf-8")
    print(f"wrote {out} ({len(out.read_text().splitlines())} lines) in {minutes:.1f} minutes", file=sys.stderr)
    return 0

if __name__ == "__main__":
    sys.exit(main())

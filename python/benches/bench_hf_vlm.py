"""A small real Qwen2-VL on CPU: the users' baseline, the preset plan and the calibrated plan, measured.

    python python/benches/bench_hf_vlm.py                      # small defaults: a few minutes on 2 cores
    python python/benches/bench_hf_vlm.py --ranks 4 --samples 96 --steps 4 --repeats 3 --hidden 128
    python python/benches/bench_hf_vlm.py --device cuda --steps 4 --repeats 8   # on a GPU: CUDA events

A random Qwen2-VL (transformers, float32, sdpa attention, ``--hidden`` wide,
2 layers; a vision tower of depth 2) trains on synthetic steps of
``--samples`` samples with a skewed image distribution: ``--heavy`` of the
samples carry 8 to 16 images, 15% one image, the rest none; 32 to 480 text
tokens. Every micro-batch is packed into rows of at most ``--seq-len`` tokens
by :class:`microbatch.hf.PackedCollator` (under sdpa a packed row costs its
dense block mask: O(T^2) in its T tokens), and each row's forward and
backward is timed per phase by :class:`microbatch.torch.PhaseTimer` (by
default on the CPU time of the one thread running the model, ``--clock
thread``: the wall clock of a loaded machine is mostly other processes). The
``R`` ranks run in one process, interleaved in time (micro-step by
micro-step, the k-th row of every rank in turn: the CPU time of a row still
grows with the machine's load, 1.5x-2.2x between two runs of the same rows
on a loaded 2-core machine, and ranks timed one after another would show
the load's drift as imbalance), so a step's time is computed from the rows: under ``step`` sync the slowest rank's sum; under
``phase`` sync, per micro-step, the slowest rank's vision plus the slowest
rank's language (the rest of the micro-batch).

Configurations, per sync model (``step`` and ``phase``):

- ``users``: the global batch in its given order dealt as ``DistributedSampler``
  does (sample ``i`` to rank ``i mod R``), each rank's samples cut in order
  into micro-batches of ``b = ceil(n / (R A))`` samples over the calibrated
  plan's ``A`` micro-steps (the last ones shorter), each micro-batch packed
  first-fit in order into rows: the definition of ``Report.users_baseline``;
- ``preset``: the planner on the FLOPs preset (``qwen2.5-vl-7b``);
- ``calibrated``: the planner on a :class:`microbatch.cost.Linear` fitted by a
  :class:`microbatch.cost.Calibrator` to rows timed in ``--calibration-steps``
  steps before (rows of the users' baseline, of the preset plan and, with
  ``--varied 1``, rows of 1 to 6 random samples), with
  the attention term of the kernel in use: ``language.row_attention`` (each
  packed row's tokens squared) when the crate has it, else
  ``language.document_attention`` (each document's tokens squared: the
  varlen kernel's cost; the output says which), and a fixed cost per row in
  each phase (``vision.groups``: the tower's fixed cost per call, about 4.5 ms
  at ``--hidden 64``, paid by an image-less row too since the collator gives
  it a padding image; ``language.groups``). Rows per phase (vision, the
  rest) by default; ``--rows total`` fits all terms on each row's whole time.

The calibrator also observes the measured steps' rows and is refitted after
each step (``--window`` rows), as in training: each step is planned with the
model fitted to the rows measured so far, which follows the machine's load.

Per configuration: the measured step time (seconds), the max/mean imbalance
(step time over the ranks' mean work), the predicted step time over the
measured (calibrated plan and, with the calibrated model, the users'
baseline), and the gain over the users' baseline (``users`` / plan). The
machine is shared, so every figure is a ratio within one repeat (the
configurations run back to back on the same step), and the table shows the
medians over steps and repeats. The columns "rows' least" take each
micro-batch's phase times as their least over the ``--repeats`` runs of the
same rows first, then the step's barriers, one figure a step: a barrier is a
maximum over ranks, the time of one row on a shared machine varies by about
10% between runs (sd over mean, thread CPU time, 2 busy cores), only ever
upwards of what the row needs, and the maximum of noisy rows is biased up by
that noise; the least time of each row (as ``timeit`` reports) takes most of
it out.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import statistics
import sys
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

import microbatch
import microbatch.cost as mc
from microbatch.hf import PackedCollator
from microbatch.torch import PhaseTimer, loss_tokens, summed_loss

VOCAB, TEXT_VOCAB = 160, 150
IMAGE_TOKEN, VIDEO_TOKEN, VISION_START, VISION_END = 151, 152, 153, 154
PATCH, TEMPORAL, MERGE, CHANNELS = 2, 2, 2, 3
PIXEL_DIM = CHANNELS * TEMPORAL * PATCH * PATCH
PRESET = "qwen2.5-vl-7b"
ROW_TERM, DOC_TERM = "language.row_attention", "language.document_attention"


def build_model(hidden: int, seed: int) -> torch.nn.Module:
    import transformers as tr

    heads = max(hidden // 16, 2)
    text = dict(
        vocab_size=VOCAB, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=2,
        num_attention_heads=heads, num_key_value_heads=heads, max_position_embeddings=8192,
        bos_token_id=1, eos_token_id=2,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                         "mrope_section": [hidden // heads // 4, hidden // heads // 8, hidden // heads // 8]},
    )
    vision = dict(depth=2, embed_dim=hidden // 2, hidden_size=hidden, num_heads=2, mlp_ratio=2,
                  in_channels=CHANNELS, patch_size=PATCH, spatial_merge_size=MERGE, temporal_patch_size=TEMPORAL)
    config = tr.Qwen2VLConfig(text_config=text, vision_config=vision, image_token_id=IMAGE_TOKEN,
                              video_token_id=VIDEO_TOKEN, vision_start_token_id=VISION_START,
                              vision_end_token_id=VISION_END)
    config._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    model = tr.Qwen2VLForConditionalGeneration(config)
    model.train()
    return model


@dataclasses.dataclass
class Sample:
    text: int
    images: List[int]
    loss: int
    hf: Dict[str, torch.Tensor]


def make_step(n: int, heavy: float, rng: np.random.Generator, seq_len: int) -> List[Sample]:
    out = []
    for _ in range(n):
        u = rng.random()
        count = int(rng.integers(8, 17)) if u < heavy else (1 if u < heavy + 0.15 else 0)
        grids = [(1, 2 * int(rng.integers(2, 7)), 2 * int(rng.integers(2, 7))) for _ in range(count)]
        text = int(rng.integers(32, 481))
        image_tok = [g[1] * g[2] // MERGE**2 for g in grids]
        text = min(text, seq_len - sum(image_tok) - 2 * count)
        ids: List[int] = []
        for k in image_tok:
            ids += [VISION_START] + [IMAGE_TOKEN] * k + [VISION_END]
        ids += rng.integers(1, TEXT_VOCAB, text).tolist()
        s: Dict[str, torch.Tensor] = {"input_ids": torch.tensor(ids), "labels": torch.tensor(ids)}
        if grids:
            rows = sum(a * b * c for a, b, c in grids)
            s["pixel_values"] = torch.as_tensor(rng.standard_normal((rows, PIXEL_DIM)), dtype=torch.float32)
            s["image_grid_thw"] = torch.tensor(grids)
        out.append(Sample(len(ids) - sum(image_tok), image_tok, loss_tokens(s["labels"]), s))
    return out


def first_fit(step: Sequence[Sample], ids: Sequence[int], seq_len: int) -> List[List[int]]:
    """The samples ``ids`` in order, each into the first row it fits (a new row otherwise)."""
    rows: List[List[int]] = []
    room: List[int] = []
    for i in ids:
        t = step[i].text + sum(step[i].images)
        for k, r in enumerate(room):
            if t <= r:
                rows[k].append(i)
                room[k] -= t
                break
        else:
            rows.append([i])
            room.append(seq_len - t)
    return rows


def users_baseline(step: Sequence[Sample], ranks: int, micro_steps: int, seq_len: int) -> List[List[List[List[int]]]]:
    """``[rank][micro_step][row] -> sample ids``: DistributedSampler's deal (sample ``i`` to rank
    ``i mod R``), micro-batches of ``b = ceil(n / (R A))`` samples in order, first fit."""
    per_batch = max(-(-len(step) // (ranks * micro_steps)), 1)
    out = []
    for r in range(ranks):
        mine = list(range(r, len(step), ranks))
        cuts = [mine[j * per_batch:(j + 1) * per_batch] for j in range(micro_steps)]
        out.append([first_fit(step, c, seq_len) for c in cuts])
    return out


def varied(step: Sequence[Sample], ranks: int, seq_len: int, rng: np.random.Generator) -> List[List[List[List[int]]]]:
    """Rows of 1 to 6 random samples (first fit), dealt to ranks in turn: calibration rows whose
    sample and token counts vary apart (the plans' own rows are all nearly full, so tokens,
    samples and rows would move together and the fit could not tell them apart)."""
    order = [int(i) for i in rng.permutation(len(step))]
    rows: List[List[int]] = []
    while order:
        k = int(rng.integers(1, 7))
        rows += first_fit(step, order[:k], seq_len)
        order = order[k:]
    return [[[row] for row in rows[r::ranks]] for r in range(ranks)]


def plan_layout(plan: Any) -> List[List[List[List[int]]]]:
    return [
        [[[int(i) for i in s] for s in plan.sequences(r, j)] for j in range(plan.micro_steps)]
        for r in range(plan.ranks)
    ]


class Runner:
    """Runs and times packed rows; gives the rows to a calibrator."""

    def __init__(self, model: torch.nn.Module, clock: Any, rows: str = "phase") -> None:
        self.model = model
        self.rows = rows
        self.collator = PackedCollator(model)
        self.timer = PhaseTimer(model, clock=clock)  # on CUDA (clock None): CUDA events
        self.device = next(model.parameters()).device
        # Every calibration row: (text tokens, image tokens, vision s, rest s), for --dump-rows.
        self.dumped: List[Dict[str, Any]] = []

    def run(self, step: Sequence[Sample], layout: List[List[List[List[int]]]],
            calibrator: Optional[mc.Calibrator] = None) -> np.ndarray:
        """``(ranks, micro_steps, 2)`` measured seconds (vision, rest) of every micro-batch."""
        ranks, steps = len(layout), max(len(x) for x in layout)
        out = np.zeros((ranks, steps, 2))
        # Interleaved in time: micro-step by micro-step, the k-th row of every rank in turn, so that
        # a change of the machine's load slows every rank alike (timed rank after rank, the rank
        # that ran while the load was high would look slower than it is).
        order = []
        for j in range(steps):
            rows = [(layout[r][j] or [[]]) if j < len(layout[r]) else [] for r in range(ranks)]
            for k in range(max(len(x) for x in rows)):
                order += [(r, j, rows[r][k]) for r in range(ranks) if k < len(rows[r])]
        for r, j, row in order:
            samples = [step[i] for i in row]
            batch = self.collator([s.hf for s in samples])
            if self.device.type != "cpu":
                batch = {k: v.to(self.device) if torch.is_tensor(v) else v for k, v in batch.items()}
            with self.timer.micro_batch(text_tokens=[s.text for s in samples],
                                        image_tokens=[s.images for s in samples]):
                summed_loss(self.model(**batch), batch, "token").backward()
            self.model.zero_grad(set_to_none=True)
            t = self.timer.collect()[0]
            out[r, j] += (t.vision, t.total - t.vision)
            if calibrator is not None and samples:
                self.dumped.append(dict(text=[s.text for s in samples], images=[s.images for s in samples],
                                        vision=t.vision, rest=t.total - t.vision))
                if self.rows == "total":  # all terms fitted on the whole row's time
                    calibrator.observe(**t.features, seconds=t.total)
                else:
                    t.observe(calibrator)
        return out


def step_time(times: np.ndarray, sync: str) -> Tuple[float, float]:
    """(step time, max/mean imbalance) of ``(ranks, micro_steps, 2)`` times under ``sync``."""
    ranks = times.shape[0]
    if sync == "step":
        t = float(times.sum(axis=(1, 2)).max())
    else:  # phase: per micro-step, the slowest rank's vision, then the slowest rank's language
        t = float(times.max(axis=0).sum())
    return t, t / (float(times.sum()) / ranks)


def predict(model: mc.CostModel, step: Sequence[Sample], layout: List[List[List[List[int]]]]) -> np.ndarray:
    """``(ranks, micro_steps, 2)`` predicted costs, each row a group."""
    ranks, steps = len(layout), max(len(x) for x in layout)
    out = np.zeros((ranks, steps, 2))
    for r, rank in enumerate(layout):
        for j, micro in enumerate(rank):
            for row in micro:
                if row:
                    out[r, j] += model.group_cost([step[i].text for i in row], [step[i].images for i in row])
    return out


def calibrated_terms() -> Tuple[Dict[str, float], str]:
    """The Linear terms to fit (fallback coefficients: rough seconds) and the attention term used."""
    attention = ROW_TERM if ROW_TERM in mc.TERMS else DOC_TERM
    terms = {
        "vision.image_tokens": 1e-5, "vision.unit_attention": 1e-8, "vision.images": 1e-4,
        "language.tokens": 1e-5, attention: 1e-8, "language.samples": 1e-4, "language.groups": 1e-3,
    }
    if "vision.groups" in mc.TERMS:
        terms["vision.groups"] = 1e-3
    return terms, attention


def main(argv: Optional[List[str]] = None) -> Dict[str, Any]:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--samples", type=int, default=48, help="samples per step (the global batch)")
    p.add_argument("--seq-len", type=int, default=1024)
    p.add_argument("--heavy", type=float, default=0.15, help="fraction of samples with 8-16 images")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--calibration-steps", type=int, default=2)
    p.add_argument("--steps", type=int, default=2, help="measured steps (new batches)")
    p.add_argument("--repeats", type=int, default=2, help="runs of every configuration per step")
    p.add_argument("--sync", nargs="+", default=["step", "phase"], choices=["step", "phase"])
    p.add_argument("--rows", default="phase", choices=["phase", "total"],
                   help="calibrate on per-phase rows (vision, rest) or on each row's total time")
    p.add_argument("--varied", type=int, default=1,
                   help="1: calibrate on rows of 1-6 random samples too (0: only the plans' and baseline's rows)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--clock", default=None, choices=["thread", "wall"],
                   help="thread: the CPU time of the thread running the model (steady on a shared machine; "
                   "needs --threads 1; the default on the CPU); wall: perf_counter on the CPU, CUDA events "
                   "on a GPU (the default there)")
    p.add_argument("--device", default="cpu",
                   help="where the model runs: cpu (default), or cuda / cuda:N (rows timed by CUDA events; "
                   "not run here: no GPU was lent to the sessions that wrote this bench)")
    p.add_argument("--fastest", type=int, default=3,
                   help="also run the calibrated plan with Planner(fastest_micro_steps=A + this) (0: not)")
    p.add_argument("--control", type=int, default=1,
                   help="1: also run the noise control (every rank runs the calibrated plan's rank-0 "
                   "micro-batches: true max/mean 1.000, so what is measured is the noise floor); 0: not")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--window", type=int, default=400,
                   help="the calibrator's window in rows; the calibrator observes the measured steps' rows "
                   "too and is refitted after each step (online calibration: it follows the machine's load)")
    p.add_argument("--dump-rows", default=None,
                   help="write the calibration rows (tokens, images, vision and rest seconds) to this JSON file")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(args.seed)
    device = torch.device(args.device)
    if args.clock is None:
        args.clock = "thread" if device.type == "cpu" else "wall"
    if args.clock == "thread" and device.type != "cpu":
        p.error("--clock thread counts the CPU time of one thread, not a GPU's: use --clock wall (CUDA events)")
    if args.clock == "thread" and args.threads != 1:
        p.error("--clock thread counts one thread's CPU time: use --threads 1 (or --clock wall)")
    runner = Runner(build_model(args.hidden, args.seed).to(device), time.thread_time if args.clock == "thread" else None,
                    args.rows)
    terms, attention = calibrated_terms()
    calibrator = mc.Calibrator(mc.Linear(terms), window=args.window)

    def planner(model: Any, sync: str) -> microbatch.Planner:
        return microbatch.Planner(model, ranks=args.ranks, seq_len=args.seq_len, sync=sync)

    def arguments(step: Sequence[Sample]) -> Dict[str, Any]:
        return dict(ids=range(len(step)), text_tokens=[s.text for s in step],
                    image_tokens=[s.images for s in step], loss_tokens=[s.loss for s in step])

    # Warm up, then calibrate on rows of the users' baseline and of the preset plan.
    warm = make_step(args.ranks * 2, args.heavy, rng, args.seq_len)
    runner.run(warm, users_baseline(warm, args.ranks, 1, args.seq_len))
    for _ in range(args.calibration_steps):
        step = make_step(args.samples, args.heavy, rng, args.seq_len)
        for sync in args.sync:
            plan = planner(PRESET, sync).plan(**arguments(step))
            runner.run(step, plan_layout(plan), calibrator)
            runner.run(step, users_baseline(step, args.ranks, plan.micro_steps, args.seq_len), calibrator)
        if args.varied:
            runner.run(step, varied(step, args.ranks, args.seq_len, rng), calibrator)
    status = calibrator.refit()
    if args.dump_rows:
        import json

        with open(args.dump_rows, "w") as fh:
            json.dump(runner.dumped, fh)
    fitted = calibrator.model
    print(f"attention term: {attention}" + ("" if attention == ROW_TERM else
          " (fallback: this build's crate has no language.row_attention; sdpa rows cost their dense mask)"))
    print(f"calibration: fitted={status.fitted} on {status.rows} rows ({len(status.rejected)} rejected), "
          f"R^2 {status.r_squared}, worst {status.max_relative_error}", flush=True)
    print("coefficients: " + ", ".join(f"{k} {v:.3g}" for k, v in fitted.coefficients.items()))

    keys = ("users", "preset", "calibrated") + (("fastest",) if args.fastest else ())
    timed = keys + (("control",) if args.control else ())
    stats: Dict[str, Dict[str, List[float]]] = {s: {} for s in args.sync}

    def add(sync: str, key: str, value: float) -> None:
        stats[sync].setdefault(key, []).append(value)

    for k in range(args.steps):
        step = make_step(args.samples, args.heavy, rng, args.seq_len)
        for sync in args.sync:
            cal_plan = planner(fitted, sync).plan(**arguments(step))
            layouts = {
                "users": users_baseline(step, args.ranks, cal_plan.micro_steps, args.seq_len),
                "preset": plan_layout(planner(PRESET, sync).plan(**arguments(step))),
                "calibrated": plan_layout(cal_plan),
            }
            if args.fastest:
                fast_plan = microbatch.Planner(
                    fitted, ranks=args.ranks, seq_len=args.seq_len, sync=sync,
                    fastest_micro_steps=cal_plan.micro_steps + args.fastest,
                ).plan(**arguments(step))
                layouts["fastest"] = plan_layout(fast_plan)
            if args.control:
                # The same rows on every rank: any measured imbalance is the machine's noise.
                layouts["control"] = [layouts["calibrated"][0]] * args.ranks
            predicted_users, _ = step_time(predict(fitted, step, layouts["users"]), sync)
            predicted_plan_formula, _ = step_time(predict(fitted, step, layouts["calibrated"]), sync)
            report_gain = cal_plan.report.gain  # users_baseline / predicted
            # What the calibrated model predicts of each layout's balance, and the least max/mean any
            # plan can reach by the model (the plan's lower bound over the mean of its predicted work):
            # measured imbalance above the predicted one is the model's error on single rows (or noise),
            # predicted imbalance above 1.05 is the batch itself.
            for key in keys:
                add(sync, f"{key}.predicted imbalance", step_time(predict(fitted, step, layouts[key]), sync)[1])
            cal_pred = predict(fitted, step, layouts["calibrated"])
            add(sync, "bound/mean", cal_plan.report.lower_bound / (float(cal_pred.sum()) / args.ranks))
            runs: Dict[str, List[np.ndarray]] = {key: [] for key in timed}
            for _ in range(args.repeats):
                times = {key: runner.run(step, layouts[key], None if key == "control" else calibrator)
                         for key in timed}
                for key in timed:
                    runs[key].append(times[key])
                if args.control:
                    add(sync, "control.imbalance", step_time(times["control"], sync)[1])
                measured = {key: step_time(times[key], sync) for key in keys}
                for key in keys:
                    add(sync, f"{key}.time", measured[key][0])
                    add(sync, f"{key}.imbalance", measured[key][1])
                    add(sync, f"{key}.gain", measured["users"][0] / measured[key][0])
                add(sync, "calibrated.predicted/measured", cal_plan.report.predicted / measured["calibrated"][0])
                if args.fastest:
                    add(sync, "fastest.predicted/measured", fast_plan.report.predicted / measured["fastest"][0])
                add(sync, "users.predicted/measured", predicted_users / measured["users"][0])
                add(sync, "report gain/measured gain",
                    report_gain / (measured["users"][0] / measured["calibrated"][0]))
            # Each micro-batch's phase times as their least over the repeats (the same rows run
            # `repeats` times), then the step's barriers: a shared machine only ever adds time to a row,
            # and the maxima of noisy rows are biased up by it; the least time of every row takes most of
            # that out (the minimum of repeated timings, as `timeit` reports).
            least = {key: np.stack(runs[key]).min(axis=0) for key in timed}
            if args.control:
                add(sync, "control.row-min imbalance", step_time(least["control"], sync)[1])
            users_least = step_time(least["users"], sync)[0]
            for key in keys:
                t, imbalance = step_time(least[key], sync)
                add(sync, f"{key}.row-min imbalance", imbalance)
                add(sync, f"{key}.row-min gain", users_least / t)
            add(sync, "formula/report", predicted_plan_formula / cal_plan.report.predicted)
            add(sync, "users formula/report", predicted_users / cal_plan.report.users_baseline)
            add(sync, "micro_steps", cal_plan.micro_steps)
            if args.fastest:
                add(sync, "fastest micro_steps", fast_plan.micro_steps)
            print(f"step {k} sync {sync}: done ({cal_plan.micro_steps} micro-steps)", flush=True)
        # Online calibration: the next step is planned with the rows measured so far (the window).
        status = calibrator.refit()
        fitted = calibrator.model
        print(f"refit after step {k}: R^2 {status.r_squared}, {len(status.rejected)} rejected", flush=True)

    med = {s: {k: statistics.median(v) for k, v in d.items()} for s, d in stats.items()}
    lines = [
        f"bench_hf_vlm: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, "
        f"{' '.join(sys.argv[1:]) or '(defaults)'}; torch threads {args.threads}, clock {args.clock}, device {args.device}",
        f"attention term of the calibrated model: {attention}; calibrated on {args.rows} rows",
        "| sync | config | step time (s) | max/mean | max/mean, rows' least | predicted max/mean | gain over users "
        "| gain, rows' least | predicted/measured |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for sync in args.sync:
        m = med[sync]
        for key in keys:
            pm = m.get(f"{key}.predicted/measured")
            lines.append(
                f"| {sync} | {key} | {m[f'{key}.time']:.3f} | {m[f'{key}.imbalance']:.3f} | "
                f"{m[f'{key}.row-min imbalance']:.3f} | {m[f'{key}.predicted imbalance']:.3f} | "
                f"{m[f'{key}.gain']:.3f} | {m[f'{key}.row-min gain']:.3f} | {'' if pm is None else f'{pm:.3f}'} |"
            )
    for sync in args.sync:
        m = med[sync]
        lines.append(
            f"{sync}: least max/mean by the model (lower bound / mean) {m['bound/mean']:.3f}; "
            f"report.gain / measured gain {m['report gain/measured gain']:.3f}; "
            f"bench formula / report.predicted {m['formula/report']:.3f}; "
            f"bench users' baseline / report.users_baseline {m['users formula/report']:.3f}; "
            f"micro-steps: calibrated {m['micro_steps']:g}"
            + (f", fastest {m['fastest micro_steps']:g}" if args.fastest else "")
        )
        if args.control:
            lines.append(
                f"{sync}: noise control (rank 0's micro-batches on every rank, true max/mean 1.000): "
                f"measured max/mean {m['control.imbalance']:.3f}, rows' least {m['control.row-min imbalance']:.3f}"
            )
    print("\n".join(lines))
    return {"medians": med, "attention": attention, "status": status}


if __name__ == "__main__":
    main()

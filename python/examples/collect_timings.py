"""Collect micro-batch timings in a training loop, calibrate the cost model online, and plan each step on it.

    python python/examples/collect_timings.py --steps 6 --ranks 2
    python python/examples/collect_timings.py --whole   # time only the whole micro-step

A tiny vision-language model (a vision encoder with attention within each
image, a language model with attention within each sample) trains on a
synthetic batch each step. How a trainer collects the rows a
:class:`microbatch.cost.Calibrator` needs:

1. **Time each phase of each micro-batch** where it runs. With CUDA, record
   ``torch.cuda.Event(enable_timing=True)`` around the vision encoder and the
   language model; they are asynchronous, so call ``torch.cuda.synchronize()``
   once at the step's end (not after every micro-batch: that would stall the
   GPU) before reading ``elapsed_time``. On a CPU, ``time.perf_counter``. To
   time the phases separately in the backward pass too, the vision output
   enters the language model detached (``requires_grad_``): the language
   model's backward runs first, then ``vision_out.backward(grad)`` runs the
   encoder's, each between its own events. Without that split, time the
   whole micro-step (``--whole``) and give ``seconds=``: the calibrator then
   fits all terms on the totals.
2. **Time the compute, not the waits.** Under FSDP/ZeRO-3, a rank that
   finishes early waits at the next collective; that wait is the imbalance
   the planner removes, not a cost of the rank's own micro-batch. Record the
   events around the compute of one micro-batch, and leave the step's final
   gradient reduction and the optimizer outside.
3. **Gather every rank's rows** (``torch.distributed.all_gather_object`` at
   the step boundary, here :func:`gather_rows`) and observe them in rank
   order on every rank. The calibrator is deterministic, so every rank then
   fits the same model and computes the same plan for the next step with no
   further communication; the rows of all ranks also identify the terms R
   times faster than rank 0's alone. (Observing only rank 0's rows works too,
   but then rank 0 must broadcast the model, and it learns from 1/R of the
   data.)
4. **Refit at the step boundary** (``calibrator.refit()``) and plan the next
   step with ``calibrator.model``; until the window identifies the terms, the
   model is the preset's and ``status.fitted`` is ``False`` with the reason.

Runs in one process on a CPU: the ``--ranks`` ranks' micro-batches run one
after another (a simulation of data parallelism). Under ``torchrun`` (for
example ``torchrun --standalone --nproc-per-node 2 collect_timings.py``) each
process is one rank (``--ranks`` is then the world size) on its own GPU where
there are GPUs: it runs only its own micro-batches, sums the gradients with
the other ranks, and :func:`gather_rows` all-gathers the rows; each rank
prints the model it fitted last, the same on every rank.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any, Dict, List, Optional

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

import microbatch
import microbatch.cost as mc

DIM, PATCH_DIM, VOCAB = 32, 48, 64


class VisionEncoder(nn.Module):
    """Patch embedding, attention within each image, an MLP: linear plus quadratic in an image's tokens."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(PATCH_DIM, DIM)
        self.attn = nn.MultiheadAttention(DIM, 2, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(DIM, 4 * DIM), nn.GELU(), nn.Linear(4 * DIM, DIM))

    def forward(self, images: List[torch.Tensor]) -> torch.Tensor:
        out = []
        for patches in images:  # one image at a time: attention stays within it
            x = self.embed(patches)[None]
            x = x + self.attn(x, x, x, need_weights=False)[0]
            out.append((x + self.mlp(x))[0])
        # No image: an empty output still connected to the encoder (backward runs on every rank).
        return torch.cat(out) if out else self.embed(self.embed.weight.new_zeros(0, PATCH_DIM))


class LanguageModel(nn.Module):
    """Token embedding, attention within each sample (a document mask), an MLP and the head."""

    def __init__(self) -> None:
        super().__init__()
        self.tok = nn.Embedding(VOCAB, DIM)
        self.attn = nn.MultiheadAttention(DIM, 2, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(DIM, 4 * DIM), nn.GELU(), nn.Linear(4 * DIM, DIM))
        self.head = nn.Linear(DIM, VOCAB)

    def forward(self, samples: List[Dict[str, Any]], vision: torch.Tensor) -> torch.Tensor:
        # Connected to both models even for an empty micro-batch (contract 3 of microbatch).
        loss = vision.sum() * 0.0 + self.head.weight.sum() * 0.0
        at = 0
        for s in samples:
            n_img = sum(s["image_tokens"])
            x = torch.cat([vision[at : at + n_img], self.tok(s["ids"])])[None]
            at += n_img
            x = x + self.attn(x, x, x, need_weights=False)[0]
            x = x + self.mlp(x)
            logits = self.head(x[0, n_img:-1])
            loss = loss + nn.functional.cross_entropy(logits, s["ids"][1:], reduction="sum")
        return loss


class Stopwatch:
    """Marks on the device's timeline: CUDA events with CUDA (read after one synchronize), else ``perf_counter``."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"

    def mark(self) -> Any:
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def seconds(self, start: Any, end: Any) -> float:
        """Seconds from ``start`` to ``end``; with CUDA, only after ``synchronize``."""
        if self.cuda:
            return start.elapsed_time(end) / 1e3  # milliseconds
        return end - start

    def synchronize(self) -> None:
        """Waits for the device, so that the marks can be read (once a step)."""
        if self.cuda:
            torch.cuda.synchronize()


def synthetic_batch(n: int, rng: np.random.Generator, device: torch.device) -> List[Dict[str, Any]]:
    """``n`` samples on ``device``: 16..400 text tokens, a third with one or two images of 16..144 tokens."""
    out = []
    for i in range(n):
        text = int(rng.integers(16, 400))
        images = [int(rng.integers(16, 145)) for _ in range(int(rng.integers(1, 3)))] if rng.random() < 0.35 else []
        out.append(
            {
                "id": i,
                "text_tokens": text,
                "image_tokens": images,
                "ids": torch.as_tensor(rng.integers(0, VOCAB, text), device=device),
                "pixels": [
                    torch.as_tensor(rng.standard_normal((t, PATCH_DIM)), dtype=torch.float32, device=device)
                    for t in images
                ],
            }
        )
    return out


def run_micro_batch(
    vit: VisionEncoder,
    lm: LanguageModel,
    samples: List[Dict[str, Any]],
    scale: float,
    watch: Stopwatch,
    whole: bool,
) -> Dict[str, Any]:
    """Forward and backward of one micro-batch, its summed loss times the plan's ``scale``.

    Returns the marks around each phase (read after the step's synchronize).
    """
    m0 = watch.mark()
    vision = vit([p for s in samples for p in s["pixels"]])
    m1 = watch.mark()
    if whole:
        (lm(samples, vision) * scale).backward()  # one backward through both models
        m2 = m3 = watch.mark()
    else:
        detached = vision.detach().requires_grad_()
        (lm(samples, detached) * scale).backward()
        m2 = watch.mark()
        vision.backward(detached.grad)  # the encoder's backward, in its own window
        m3 = watch.mark()
    return {"samples": samples, "marks": (m0, m1, m2, m3)}


def row(pending: Dict[str, Any], watch: Stopwatch, whole: bool) -> Dict[str, Any]:
    """One calibration row from a micro-batch's marks (after ``watch.synchronize()``)."""
    m0, m1, m2, m3 = pending["marks"]
    out: Dict[str, Any] = {
        "text_tokens": [s["text_tokens"] for s in pending["samples"]],
        "image_tokens": [s["image_tokens"] for s in pending["samples"]],
    }
    if whole:
        out["seconds"] = watch.seconds(m0, m3)
    else:
        out["vision_seconds"] = watch.seconds(m0, m1) + watch.seconds(m2, m3)
        out["language_seconds"] = watch.seconds(m1, m2)
    return out


def gather_rows(rows: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Every rank's rows in rank order (``all_gather_object``); this process's rows without a process group."""
    if not (dist.is_available() and dist.is_initialized()):
        return rows
    gathered: List[Optional[List[Dict[str, Any]]]] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, rows)
    return [r for part in gathered for r in (part or [])]


def main(argv: Optional[List[str]] = None) -> Dict[str, Any]:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--ranks", type=int, default=2, help="ranks to simulate (under torchrun: the world size)")
    p.add_argument("--samples-per-rank", type=int, default=16)
    p.add_argument("--seq-len", type=int, default=1024)
    p.add_argument("--preset", default="qwen2.5-vl-7b", choices=mc.PRESETS)
    p.add_argument("--whole", action="store_true", help="time the whole micro-step instead of each phase")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    distributed = dist.is_available() and dist.is_initialized()
    rank = dist.get_rank() if distributed else None
    ranks = dist.get_world_size() if distributed else args.ranks
    torch.manual_seed(args.seed)  # the same initial weights on every rank
    torch.set_num_threads(1)
    if torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    watch = Stopwatch(device)
    vit, lm = VisionEncoder().to(device), LanguageModel().to(device)
    params = list(vit.parameters()) + list(lm.parameters())
    optimizer = torch.optim.SGD(params, lr=1e-3)
    calibrator = mc.Calibrator(args.preset)
    rng = np.random.default_rng(args.seed)  # the same batches on every rank
    history = []
    for step in range(args.steps):
        batch = synthetic_batch(ranks * args.samples_per_rank, rng, device)
        # Every rank plans the same step on the same model: the same plan.
        planner = microbatch.Planner(calibrator.model, ranks=ranks, seq_len=args.seq_len, sync="phase")
        plan = planner.plan(
            ids=[s["id"] for s in batch],
            text_tokens=[s["text_tokens"] for s in batch],
            image_tokens=[s["image_tokens"] for s in batch],
            loss_tokens=[s["text_tokens"] - 1 for s in batch],  # each text token predicts the next
        )
        # The trainer's contract: each micro-batch's summed loss times this
        # step-global factor (the mean over the step's loss tokens; gradients summed).
        scale = plan.loss_scale("token", "sum")
        pending = []
        for r in range(plan.ranks) if rank is None else [rank]:
            for j in range(plan.micro_steps):
                samples = [batch[int(i)] for i in plan.micro_batch(r, j)]
                pending.append(run_micro_batch(vit, lm, samples, scale, watch, args.whole))
        watch.synchronize()  # once a step, before reading the marks
        if distributed:  # the step's gradient reduction, outside the timed windows
            for param in params:
                if param.grad is not None:
                    dist.all_reduce(param.grad)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        for got in gather_rows([row(m, watch, args.whole) for m in pending]):
            timing = {k: got[k] for k in ("seconds", "vision_seconds", "language_seconds") if k in got}
            calibrator.observe(got["text_tokens"], got["image_tokens"], **timing)
        status = calibrator.refit()  # the step boundary: the next plan uses this model
        history.append(status)
        if rank in (None, 0):
            # R^2 is low where the plan makes the micro-batches alike (little
            # variance to explain); the drift is the error on new rows.
            what = (
                f"fitted on {status.rows} rows ({len(status.rejected)} rejected): R^2 {status.r_squared:.3f}, "
                f"worst error {status.max_relative_error:.1%}"
                + (
                    f"; this step's rows predicted within {status.drift.mean_relative_error:.1%} on average"
                    if status.drift.rows
                    else ""
                )
                if status.fitted
                else f"the preset until fitted ({status.reason})"
            )
            print(f"step {step}: {plan.micro_steps} micro-steps, {len(pending)} micro-batches timed; {what}", flush=True)
    if rank is not None:
        # The same on every rank: all fitted on the same rows in the same order.
        print(f"rank {rank}: model {calibrator.model.coefficients}", flush=True)
    return {"history": history, "model": calibrator.model}


if __name__ == "__main__":
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:  # under torchrun: one process a rank
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
        try:
            main()
            dist.barrier()  # no rank tears the group down while another still uses it
        finally:
            dist.destroy_process_group()
        # Torch's gloo backend sometimes aborts in its C++ destructors at
        # interpreter exit ("terminate called without an active exception"),
        # after all work is done; leave without running them.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    else:
        main()

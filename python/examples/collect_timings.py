"""Collect micro-batch timings in a training loop, calibrate the cost model online, and plan each step on it.

    python python/examples/collect_timings.py --steps 6 --ranks 2
    python python/examples/collect_timings.py --whole   # time only the whole micro-step

A tiny Qwen2-VL (transformers, random weights, nothing downloaded; sdpa
attention, packed rows by :class:`microbatch.hf.PackedCollator`) trains on a
synthetic batch each step. How a trainer collects the rows a
:class:`microbatch.cost.Calibrator` needs:

1. **Time each phase of each micro-batch** where it runs, with
   :class:`microbatch.torch.PhaseTimer`: hooks on the model's vision tower
   and language model (found at ``model.model.visual`` and
   ``model.model.language_model``) time both forward and backward with no
   change to the model, CUDA events on a GPU (read after one synchronize in
   ``timer.collect()`` once a step, not after every micro-batch: that would
   stall the GPU), ``time.perf_counter`` on a CPU. Wrap each micro-batch's
   forward and backward in ``timer.micro_batch(text_tokens=..., image_tokens=...)``;
   each row gives the calibrator ``vision_seconds`` (the vision tower) and
   ``language_seconds`` (the rest of the micro-batch). Without the split,
   time the whole micro-step (``--whole``) and give ``seconds=``: the
   calibrator then fits all terms on the totals.
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
from typing import Any, Dict, List, Optional

import numpy as np
import torch
import torch.distributed as dist

import microbatch
import microbatch.cost as mc
from microbatch.torch import MicroBatchTime, PhaseTimer, loss_tokens, summed_loss

# Qwen2-VL token ids of the tiny model (inside VOCAB; text tokens are 1..TEXT_VOCAB-1).
VOCAB, TEXT_VOCAB = 160, 150
IMAGE_TOKEN, VIDEO_TOKEN, VISION_START, VISION_END = 151, 152, 153, 154
PATCH, TEMPORAL, MERGE, CHANNELS = 2, 2, 2, 3
PIXEL_DIM = CHANNELS * TEMPORAL * PATCH * PATCH


def tiny_qwen2_vl(attention: str = "sdpa") -> torch.nn.Module:
    """A random Qwen2-VL of 2 layers and hidden size 32 (a vision tower of depth 2 on 2x2-pixel patches)."""
    import transformers as tr

    text = dict(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
        bos_token_id=1, eos_token_id=2,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 1, 1]},
    )
    vision = dict(depth=2, embed_dim=16, hidden_size=32, num_heads=2, mlp_ratio=2, in_channels=CHANNELS,
                  patch_size=PATCH, spatial_merge_size=MERGE, temporal_patch_size=TEMPORAL)
    config = tr.Qwen2VLConfig(text_config=text, vision_config=vision, image_token_id=IMAGE_TOKEN,
                              video_token_id=VIDEO_TOKEN, vision_start_token_id=VISION_START,
                              vision_end_token_id=VISION_END)
    config._attn_implementation = attention
    model = tr.Qwen2VLForConditionalGeneration(config)
    model.train()
    return model


def synthetic_batch(n: int, rng: np.random.Generator) -> List[Dict[str, Any]]:
    """``n`` samples as a processor makes them: 16..400 text tokens, a third with one or two
    images of 4x4 to 16x16 patches (4 to 64 tokens after the 2x2 merge)."""
    out = []
    for i in range(n):
        text = int(rng.integers(16, 400))
        count = int(rng.integers(1, 3)) if rng.random() < 0.35 else 0
        grids = [(1, 2 * int(rng.integers(2, 9)), 2 * int(rng.integers(2, 9))) for _ in range(count)]
        ids: List[int] = []
        for g in grids:
            ids += [VISION_START] + [IMAGE_TOKEN] * (g[1] * g[2] // MERGE**2) + [VISION_END]
        ids += rng.integers(1, TEXT_VOCAB, text).tolist()
        sample: Dict[str, Any] = {"input_ids": torch.tensor(ids), "labels": torch.tensor(ids)}
        if grids:
            rows = sum(a * b * c for a, b, c in grids)
            sample["pixel_values"] = torch.as_tensor(rng.standard_normal((rows, PIXEL_DIM)), dtype=torch.float32)
            sample["image_grid_thw"] = torch.tensor(grids)
        out.append({
            "id": i,
            "image_tokens": [g[1] * g[2] // MERGE**2 for g in grids],
            "text_tokens": len(ids) - sum(g[1] * g[2] // MERGE**2 for g in grids),
            "loss_tokens": loss_tokens(sample["labels"]),
            "sample": sample,
        })
    return out


def to_device(batch: Dict[str, Any], device: torch.device) -> Dict[str, Any]:
    return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


def row(timed: MicroBatchTime, whole: bool) -> Dict[str, Any]:
    """One calibration row: the samples and the phases' times (or the whole micro-batch's)."""
    out = dict(timed.features)
    if whole:
        out["seconds"] = timed.total
    else:
        out["vision_seconds"] = timed.vision
        out["language_seconds"] = max(timed.total - timed.vision, 0.0)  # the rest of the micro-batch
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
    from microbatch.hf import PackedCollator

    model = tiny_qwen2_vl().to(device)
    collator = PackedCollator(model)  # probes once that packed documents stay apart
    timer = PhaseTimer(model)  # hooks on model.model.visual and model.model.language_model
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    calibrator = mc.Calibrator(args.preset)
    rng = np.random.default_rng(args.seed)  # the same batches on every rank
    history = []
    for step in range(args.steps):
        batch = synthetic_batch(ranks * args.samples_per_rank, rng)
        # Every rank plans the same step on the same model: the same plan.
        planner = microbatch.Planner(calibrator.model, ranks=ranks, seq_len=args.seq_len, sync="phase")
        plan = planner.plan(
            ids=[s["id"] for s in batch],
            text_tokens=[s["text_tokens"] for s in batch],
            image_tokens=[s["image_tokens"] for s in batch],
            loss_tokens=[s["loss_tokens"] for s in batch],
        )
        # The trainer's contract: each micro-batch's summed loss times this
        # step-global factor (the mean over the step's loss tokens; gradients summed).
        scale = plan.loss_scale("token", "sum")
        timed = 0
        for r in range(plan.ranks) if rank is None else [rank]:
            for j in range(plan.micro_steps):
                samples = [batch[int(i)] for i in plan.micro_batch(r, j)]
                packed = to_device(collator([s["sample"] for s in samples]), device)
                with timer.micro_batch(
                    text_tokens=[s["text_tokens"] for s in samples],
                    image_tokens=[s["image_tokens"] for s in samples],
                ):
                    (summed_loss(model(**packed), packed, "token") * scale).backward()
                timed += 1
        rows = [row(t, args.whole) for t in timer.collect()]  # synchronizes CUDA once a step
        if distributed:  # the step's gradient reduction, outside the timed windows
            for param in model.parameters():
                if param.grad is not None:
                    dist.all_reduce(param.grad)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        for got in gather_rows(rows):
            calibrator.observe(**got)
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
            print(f"step {step}: {plan.micro_steps} micro-steps, {timed} micro-batches timed; {what}", flush=True)
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
